//! Cron schedules for disruption budgets: the five standard fields (minute,
//! hour, day of month, month, day of week) evaluated in UTC, plus the
//! `@yearly`/`@annually`/`@monthly`/`@weekly`/`@daily`/`@midnight`/`@hourly`
//! shorthands. Each field accepts `*`, `?`, single values, ranges `a-b`,
//! steps `*/n`, `a-b/n` and `a/n` (from `a` to the field's maximum), and
//! comma-separated lists of those; months and weekdays also accept their
//! three-letter English names. Day of week is 0–6 with 0 = Sunday, as in
//! Karpenter's parser (which rejects 7).
//!
//! As in cron and Karpenter, when both day of month and day of week are
//! restricted (neither is `*`), a day matches if either matches.

use std::fmt;

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A parsed cron schedule. Each field is a bit set of the values it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    source: String,
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// The day-of-month field was `*` (or `?`).
    dom_any: bool,
    /// The day-of-week field was `*` (or `?`).
    dow_any: bool,
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The value the first name stands for.
    names_start: u32,
}

impl Field {
    /// This field refuses its text, for `reason`.
    fn refuses(&self, reason: String) -> CronError {
        CronError::Field {
            field: self.name,
            reason,
        }
    }
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    names_start: 0,
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    names_start: 0,
};
const DAY_OF_MONTH: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
    names_start: 0,
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTH_NAMES,
    names_start: 1,
};
const DAY_OF_WEEK: Field = Field {
    name: "day of week",
    min: 0,
    max: 6,
    names: &DAY_NAMES,
    names_start: 0,
};

/// Why a schedule does not read: the whole expression, or one field of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// An unknown `@` shorthand, or not five fields.
    #[error("{0}")]
    Expression(String),
    /// One field (`minute`, `day of week`, …) refused: which, and why.
    #[error("{field}: {reason}")]
    Field { field: &'static str, reason: String },
}

impl Schedule {
    /// Parses a five-field cron expression or an `@` shorthand.
    pub fn parse(text: &str) -> Result<Schedule, CronError> {
        let trimmed = text.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(CronError::Expression(format!(
                    "unknown shorthand {trimmed:?} (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"
                )));
            }
            _ => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::Expression(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), got {} in {trimmed:?}",
                fields.len()
            )));
        }
        let (minutes, _) = parse_field(fields[0], &MINUTE)?;
        let (hours, _) = parse_field(fields[1], &HOUR)?;
        let (days_of_month, dom_any) = parse_field(fields[2], &DAY_OF_MONTH)?;
        let (months, _) = parse_field(fields[3], &MONTH)?;
        let (days_of_week, dow_any) = parse_field(fields[4], &DAY_OF_WEEK)?;
        Ok(Schedule {
            source: trimmed.to_owned(),
            minutes,
            hours: hours as u32,
            days_of_month: days_of_month as u32,
            months: months as u16,
            days_of_week: days_of_week as u8,
            dom_any,
            dow_any,
        })
    }

    /// The text the schedule was parsed from.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    fn matches_day(&self, date: Date) -> bool {
        let month_ok = self.months & (1 << date.month()) != 0;
        let dom_ok = self.days_of_month & (1 << date.day()) != 0;
        let dow_ok = self.days_of_week & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        month_ok
            && if self.dom_any || self.dow_any {
                dom_ok && dow_ok
            } else {
                dom_ok || dow_ok
            }
    }

    /// Whether the schedule fires at this minute (seconds are ignored).
    pub fn matches(&self, at: Timestamp) -> bool {
        let dt = TimeZone::UTC.to_datetime(at);
        self.matches_day(dt.date())
            && self.hours & (1 << dt.hour()) != 0
            && self.minutes & (1 << dt.minute()) != 0
    }

    /// The latest minute at or before `now` at which the schedule fires,
    /// looking back no further than `lookback` (days are scanned, so the
    /// cost grows with `lookback` in days, not minutes).
    pub fn last_fire_at_or_before(
        &self,
        now: Timestamp,
        lookback: SignedDuration,
    ) -> Option<Timestamp> {
        let now_dt = TimeZone::UTC.to_datetime(now);
        let earliest = now.checked_sub(lookback.abs()).unwrap_or(Timestamp::MIN);
        let earliest_date = TimeZone::UTC.to_datetime(earliest).date();
        let mut date = now_dt.date();
        loop {
            if self.matches_day(date) {
                let today = date == now_dt.date();
                let last_hour = if today { now_dt.hour() } else { 23 };
                for hour in (0..=last_hour).rev() {
                    if self.hours & (1 << hour) == 0 {
                        continue;
                    }
                    let last_minute = if today && hour == now_dt.hour() {
                        now_dt.minute()
                    } else {
                        59
                    };
                    if let Some(minute) = (0..=last_minute)
                        .rev()
                        .find(|m| self.minutes & (1 << m) != 0)
                    {
                        let fire: DateTime = date.at(hour, minute, 0, 0);
                        let ts = TimeZone::UTC.to_timestamp(fire).ok()?;
                        return (ts >= earliest).then_some(ts);
                    }
                }
            }
            if date <= earliest_date {
                return None;
            }
            date = date.yesterday().ok()?;
        }
    }

    /// Whether a window of `duration` opened by the schedule covers `now`:
    /// the schedule fired in `(now - duration, now]` (Karpenter's rule).
    pub fn is_active(&self, now: Timestamp, duration: SignedDuration) -> bool {
        match self.last_fire_at_or_before(now, duration) {
            Some(fire) => now.checked_sub(duration).is_ok_and(|start| fire > start),
            None => false,
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// One field: a bit set of the values it matches and whether it was `*`.
fn parse_field(text: &str, field: &Field) -> Result<(u64, bool), CronError> {
    let mut bits = 0u64;
    let mut any = false;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| {
                    field.refuses(format!("step {step:?} in {item:?} is not a number"))
                })?;
                if step == 0 {
                    return Err(field.refuses(format!("step in {item:?} must be at least 1")));
                }
                (range, Some(step))
            }
            None => (item, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            if step.is_none_or(|s| s == 1) && text.split(',').count() == 1 {
                any = true;
            }
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a, field, item)?, value(b, field, item)?);
            if a > b {
                return Err(field.refuses(format!("range {item:?} runs backwards")));
            }
            (a, b)
        } else {
            let a = value(range, field, item)?;
            // `a/n` means from a to the maximum in steps of n.
            if step.is_some() {
                (a, field.max)
            } else {
                (a, a)
            }
        };
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, any))
}

fn value(text: &str, field: &Field, item: &str) -> Result<u32, CronError> {
    let lower = text.to_ascii_lowercase();
    let v = match field.names.iter().position(|n| *n == lower) {
        Some(i) => i as u32 + field.names_start,
        None => text.parse::<u32>().map_err(|_| {
            let names = if field.names.is_empty() {
                String::new()
            } else {
                format!(" or a name ({})", field.names.join(", "))
            };
            field.refuses(format!("{text:?} in {item:?} is not a number{names}"))
        })?,
    };
    if v < field.min || v > field.max {
        return Err(field.refuses(format!(
            "{v} in {item:?} is outside {}-{}",
            field.min, field.max
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn parses_fields_and_shorthands() {
        let s = Schedule::parse("*/15 9-17 * * MON-FRI").expect("valid");
        assert!(s.matches(ts("2024-08-05T09:45:30Z"))); // a Monday
        assert!(!s.matches(ts("2024-08-05T09:46:00Z")));
        assert!(!s.matches(ts("2024-08-04T09:45:00Z"))); // Sunday
        assert!(!s.matches(ts("2024-08-05T18:00:00Z")));
        let daily = Schedule::parse("@daily").expect("valid");
        assert!(daily.matches(ts("2024-02-29T00:00:59Z")));
        assert!(!daily.matches(ts("2024-02-29T00:01:00Z")));
        let list = Schedule::parse("0,30 1,13 1 jan,Jul ?").expect("valid");
        assert!(list.matches(ts("2024-07-01T13:30:00Z")));
        assert!(!list.matches(ts("2024-06-01T13:30:00Z")));
        let from = Schedule::parse("50/5 * * * *").expect("valid");
        assert!(from.matches(ts("2024-01-01T00:55:00Z")));
        assert!(!from.matches(ts("2024-01-01T00:05:00Z")));
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_restricted() {
        // The 13th, or any Friday.
        let s = Schedule::parse("0 0 13 * 5").expect("valid");
        assert!(s.matches(ts("2024-08-13T00:00:00Z"))); // Tuesday the 13th
        assert!(s.matches(ts("2024-08-02T00:00:00Z"))); // Friday the 2nd
        assert!(!s.matches(ts("2024-08-03T00:00:00Z")));
        // Only one restricted: both must hold.
        let s = Schedule::parse("0 0 */2 * *").expect("valid");
        assert!(s.matches(ts("2024-08-03T00:00:00Z")));
        assert!(!s.matches(ts("2024-08-02T00:00:00Z")));
    }

    #[test]
    fn rejects_malformed_expressions() {
        for (text, reason) in [
            ("* * * *", "expected 5 fields"),
            ("60 * * * *", "minute: 60"),
            ("* 24 * * *", "hour: 24"),
            ("* * 0 * *", "day of month: 0"),
            ("* * * 13 *", "month: 13"),
            ("* * * * 7", "day of week: 7"),
            ("*/0 * * * *", "at least 1"),
            ("5-1 * * * *", "backwards"),
            ("* * * foo *", "not a number or a name"),
            ("@every 5m", "unknown shorthand"),
        ] {
            let e = Schedule::parse(text).expect_err(text);
            assert!(e.to_string().contains(reason), "{text}: {e}");
        }
    }

    #[test]
    fn active_windows() {
        let s = Schedule::parse("0 9 * * *").expect("valid");
        let two_hours = SignedDuration::from_hours(2);
        assert!(s.is_active(ts("2024-08-05T09:00:00Z"), two_hours));
        assert!(s.is_active(ts("2024-08-05T10:59:59Z"), two_hours));
        assert!(!s.is_active(ts("2024-08-05T11:00:00Z"), two_hours));
        assert!(!s.is_active(ts("2024-08-05T08:59:59Z"), two_hours));
        // A window opened yesterday that runs past midnight.
        let late = Schedule::parse("30 22 * * *").expect("valid");
        assert!(late.is_active(ts("2024-08-06T00:10:00Z"), two_hours));
        assert_eq!(
            late.last_fire_at_or_before(ts("2024-08-06T00:10:00Z"), two_hours),
            Some(ts("2024-08-05T22:30:00Z"))
        );
        // A yearly window of 30 days.
        let yearly = Schedule::parse("@yearly").expect("valid");
        assert!(yearly.is_active(
            ts("2024-01-20T00:00:00Z"),
            SignedDuration::from_hours(24 * 30)
        ));
        assert!(!yearly.is_active(
            ts("2024-03-01T00:00:00Z"),
            SignedDuration::from_hours(24 * 30)
        ));
    }
}
