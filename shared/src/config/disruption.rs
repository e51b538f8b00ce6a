//! Disruption settings of a NodePool: the Karpenter v1 `spec.disruption`
//! block as users write it, its validated form, and the budget arithmetic
//! (how many nodes may be disrupted now).

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::cron::Schedule;
use super::schema::{Kind, opt};

/// The shape of `spec.disruption`, as Karpenter's CRD declares it.
pub(crate) const DISRUPTION: Kind = Kind::Object(&[
    opt("consolidationPolicy", Kind::Str),
    opt("consolidateAfter", Kind::Str),
    opt(
        "budgets",
        Kind::List(&Kind::Object(&[
            opt("nodes", Kind::IntOrString),
            opt("schedule", Kind::Str),
            opt("duration", Kind::Str),
            opt("reasons", Kind::List(&Kind::Str)),
        ])),
    ),
]);

/// `spec.disruption` of a Karpenter v1 NodePool, as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DisruptionSpec {
    /// `WhenEmpty` or `WhenEmptyOrUnderutilized` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    /// A duration (`30s`, `5m`, `1h30m`) or `Never`; `0s` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
    /// Absent means one budget of `nodes: 10%`; an empty list means no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<BudgetSpec>>,
}

/// One entry of `spec.disruption.budgets`, as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetSpec {
    /// `"10%"` or `"5"` (a bare integer is accepted too); `10%` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<serde_json::Value>,
    /// A cron expression evaluated in UTC; needs `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How long the budget is active after each time `schedule` fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// `Empty`, `Drifted`, `Underutilized`; absent means all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods are consolidated.
    WhenEmpty,
    /// Empty nodes and nodes whose pods fit elsewhere (or on a cheaper node).
    #[default]
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, a move taken only when its share of
    /// the pool's cost saved is worth its share of the pool's disruption
    /// (Karpenter v1.14's score, k = 2).
    Balanced,
}

impl ConsolidationPolicy {
    pub fn parse(s: &str) -> Option<ConsolidationPolicy> {
        match s {
            "WhenEmpty" => Some(ConsolidationPolicy::WhenEmpty),
            "WhenEmptyOrUnderutilized" => Some(ConsolidationPolicy::WhenEmptyOrUnderutilized),
            "Balanced" => Some(ConsolidationPolicy::Balanced),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ConsolidationPolicy::WhenEmpty => "WhenEmpty",
            ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            ConsolidationPolicy::Balanced => "Balanced",
        }
    }
}

/// Why a node is disrupted, as budgets name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DisruptionReason {
    Empty,
    Drifted,
    Underutilized,
    /// Node repair (Karpenter 1.15: a voluntary disruption within budgets).
    Unhealthy,
}

impl DisruptionReason {
    pub const ALL: [DisruptionReason; 4] = [
        DisruptionReason::Empty,
        DisruptionReason::Drifted,
        DisruptionReason::Underutilized,
        DisruptionReason::Unhealthy,
    ];

    pub fn parse(s: &str) -> Option<DisruptionReason> {
        match s {
            "Empty" => Some(DisruptionReason::Empty),
            "Drifted" => Some(DisruptionReason::Drifted),
            "Underutilized" => Some(DisruptionReason::Underutilized),
            "Unhealthy" => Some(DisruptionReason::Unhealthy),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionReason::Empty => "Empty",
            DisruptionReason::Drifted => "Drifted",
            DisruptionReason::Underutilized => "Underutilized",
            DisruptionReason::Unhealthy => "Unhealthy",
        }
    }
}

/// Validated disruption settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disruption {
    pub policy: ConsolidationPolicy,
    /// How long a node must be consolidatable before it is consolidated;
    /// `None` is `Never` (consolidation disabled).
    pub consolidate_after: Option<SignedDuration>,
    /// Every budget that is active and applies to a reason caps that reason.
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    /// Karpenter v1's defaults: WhenEmptyOrUnderutilized, after 0s, one budget of 10 %.
    fn default() -> Self {
        Disruption {
            policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            consolidate_after: Some(SignedDuration::ZERO),
            budgets: vec![Budget::default()],
        }
    }
}

/// How many nodes a budget allows to be disrupting at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNodes {
    Count(usize),
    /// 0–100; scaled by the pool's node count, rounded up.
    Percent(u8),
}

/// A validated disruption budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub nodes: BudgetNodes,
    /// With `duration`: the budget is active for `duration` after each firing.
    /// Without both, the budget is always active.
    pub schedule: Option<Schedule>,
    pub duration: Option<SignedDuration>,
    /// The reasons this budget caps; empty means every reason.
    pub reasons: Vec<DisruptionReason>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            nodes: BudgetNodes::Percent(10),
            schedule: None,
            duration: None,
            reasons: Vec::new(),
        }
    }
}

impl Budget {
    /// Whether the budget is in force at `now`.
    pub fn is_active(&self, now: Timestamp) -> bool {
        match (&self.schedule, self.duration) {
            (Some(schedule), Some(duration)) => schedule.is_active(now, duration),
            // Validation requires both or neither; alone, either is always on.
            _ => true,
        }
    }

    /// Whether the budget caps disruptions for `reason`.
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }

    /// How many of `total_nodes` may be disrupting at `now` under this budget;
    /// `None` when the budget is not active (it does not limit anything).
    /// Percentages round up, as Karpenter does (10 % of 5 nodes allows 1).
    pub fn allowed_disruptions(&self, total_nodes: usize, now: Timestamp) -> Option<usize> {
        if !self.is_active(now) {
            return None;
        }
        Some(match self.nodes {
            BudgetNodes::Count(n) => n,
            BudgetNodes::Percent(p) => (total_nodes * p as usize).div_ceil(100),
        })
    }
}

impl Disruption {
    /// How many of the pool's `total_nodes` may be disrupting for `reason` at
    /// `now`: the minimum over active budgets that apply, at most `total_nodes`.
    pub fn allowed_disruptions(
        &self,
        reason: DisruptionReason,
        total_nodes: usize,
        now: Timestamp,
    ) -> usize {
        self.budgets
            .iter()
            .filter(|b| b.applies_to(reason))
            .filter_map(|b| b.allowed_disruptions(total_nodes, now))
            .fold(total_nodes, usize::min)
    }

    /// Validates `spec.disruption`; the first error as `(field, reason)`
    /// (see [`Disruption::from_spec_all`]).
    pub fn from_spec(
        spec: Option<&DisruptionSpec>,
        prefix: &str,
    ) -> Result<Disruption, (String, String)> {
        Self::from_spec_all(spec, prefix).map_err(|mut e| e.swap_remove(0))
    }

    /// Validates `spec.disruption`; every error as `(field, reason)` with
    /// `prefix` (e.g. `spec.disruption`) leading the field path.
    pub fn from_spec_all(
        spec: Option<&DisruptionSpec>,
        prefix: &str,
    ) -> Result<Disruption, Vec<(String, String)>> {
        let Some(spec) = spec else {
            return Ok(Disruption::default());
        };
        let mut problems = Vec::new();
        let policy = match spec.consolidation_policy.as_deref() {
            None => ConsolidationPolicy::default(),
            Some(s) => ConsolidationPolicy::parse(s).unwrap_or_else(|| {
                let hint = if s == "WhenUnderutilized" {
                    " (v1 renamed WhenUnderutilized)"
                } else {
                    ""
                };
                problems.push((
                    format!("{prefix}.consolidationPolicy"),
                    format!(
                        "unknown policy {s:?}: expected WhenEmpty, WhenEmptyOrUnderutilized or Balanced{hint}"
                    ),
                ));
                ConsolidationPolicy::default()
            }),
        };
        let consolidate_after = match spec.consolidate_after.as_deref() {
            None => Some(SignedDuration::ZERO),
            Some(s) => parse_duration_or_never(s).unwrap_or_else(|r| {
                problems.push((format!("{prefix}.consolidateAfter"), r));
                None
            }),
        };
        let budgets = match &spec.budgets {
            None => vec![Budget::default()],
            Some(list) => {
                if list.len() > 50 {
                    problems.push((
                        format!("{prefix}.budgets"),
                        format!("at most 50 budgets, got {}", list.len()),
                    ));
                }
                list.iter()
                    .enumerate()
                    .filter_map(|(i, b)| {
                        Budget::from_spec_all(b, &format!("{prefix}.budgets[{i}]"))
                            .map_err(|p| problems.extend(p))
                            .ok()
                    })
                    .collect()
            }
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Disruption {
            policy,
            consolidate_after,
            budgets,
        })
    }
}

impl Budget {
    /// Validates one budget; the first error (see [`Budget::from_spec_all`]).
    pub fn from_spec(spec: &BudgetSpec, prefix: &str) -> Result<Budget, (String, String)> {
        Self::from_spec_all(spec, prefix).map_err(|mut e| e.swap_remove(0))
    }

    /// Validates one budget; `prefix` is its path (`spec.disruption.budgets[0]`).
    /// Every error, by Karpenter's CRD: `nodes` a count or a percentage up
    /// to 100 %, `schedule` a cron expression or `@daily`-style macro,
    /// `duration` whole minutes (units h and m), both or neither of them,
    /// and `reasons` a set of Empty, Drifted and Underutilized.
    pub fn from_spec_all(spec: &BudgetSpec, prefix: &str) -> Result<Budget, Vec<(String, String)>> {
        let mut problems = Vec::new();
        let nodes_field = format!("{prefix}.nodes");
        let nodes = match &spec.nodes {
            None => Some(BudgetNodes::Percent(10)),
            Some(serde_json::Value::String(s)) => parse_budget_nodes(s)
                .map_err(|r| problems.push((nodes_field.clone(), r)))
                .ok(),
            Some(serde_json::Value::Number(n)) => match n.as_u64() {
                Some(n) => Some(BudgetNodes::Count(n as usize)),
                None => {
                    problems.push((
                        nodes_field.clone(),
                        format!("expected a non-negative whole number or a percentage, got {n}"),
                    ));
                    None
                }
            },
            Some(other) => {
                problems.push((
                    nodes_field.clone(),
                    format!(
                        "expected a count like \"5\" or a percentage like \"10%\", got {other}"
                    ),
                ));
                None
            }
        };
        let schedule = match spec.schedule.as_deref() {
            None => None,
            Some(s) => Schedule::parse(s)
                .map_err(|r| problems.push((format!("{prefix}.schedule"), r.to_string())))
                .ok(),
        };
        let duration = match spec.duration.as_deref() {
            None => None,
            Some(s) => {
                let field = format!("{prefix}.duration");
                match parse_duration(s) {
                    Err(r) => {
                        problems.push((field, r));
                        None
                    }
                    Ok(_) if !budget_duration_form(s) => {
                        problems.push((
                            field,
                            format!("{s:?}: budget durations are whole minutes (units h and m)"),
                        ));
                        None
                    }
                    Ok(d) => Some(d),
                }
            }
        };
        match (&spec.schedule, &spec.duration) {
            (Some(_), None) => problems.push((
                format!("{prefix}.duration"),
                "required when schedule is set".into(),
            )),
            (None, Some(_)) => problems.push((
                format!("{prefix}.schedule"),
                "required when duration is set".into(),
            )),
            _ => {}
        }
        let mut reasons = Vec::new();
        for (i, r) in spec.reasons.iter().flatten().enumerate() {
            match DisruptionReason::parse(r) {
                None => problems.push((
                    format!("{prefix}.reasons[{i}]"),
                    format!(
                        "unknown reason {r:?}: expected Empty, Drifted, Underutilized or Unhealthy"
                    ),
                )),
                Some(reason) if reasons.contains(&reason) => problems.push((
                    format!("{prefix}.reasons[{i}]"),
                    format!("{r:?} is listed twice"),
                )),
                Some(reason) => reasons.push(reason),
            }
        }
        match nodes {
            Some(nodes) if problems.is_empty() => Ok(Budget {
                nodes,
                schedule,
                duration,
                reasons,
            }),
            _ => Err(problems),
        }
    }
}

/// Karpenter's pattern for budget durations: `<n>h`, `<n>m` or `<n>h<n>m`,
/// optionally followed by `0s` (what Go's duration formatting adds).
fn budget_duration_form(s: &str) -> bool {
    let s = s.strip_suffix("0s").unwrap_or(s);
    let digits_then = |s: &str, unit: char| -> Option<usize> {
        let n = s.find(|c: char| !c.is_ascii_digit())?;
        (n > 0 && s[n..].starts_with(unit)).then_some(n + 1)
    };
    if let Some(n) = digits_then(s, 'h') {
        let rest = &s[n..];
        rest.is_empty() || digits_then(rest, 'm') == Some(rest.len())
    } else {
        digits_then(s, 'm') == Some(s.len())
    }
}

fn parse_budget_nodes(s: &str) -> Result<BudgetNodes, String> {
    let bad = || format!("{s:?}: expected a count like \"5\" or a percentage like \"10%\"");
    if let Some(p) = s.strip_suffix('%') {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let p: u32 = p.parse().map_err(|_| bad())?;
        if p > 100 {
            return Err(format!("{s:?}: a percentage is at most 100%"));
        }
        return Ok(BudgetNodes::Percent(p as u8));
    }
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    s.parse::<usize>()
        .map(BudgetNodes::Count)
        .map_err(|_| bad())
}

/// Parses a Karpenter duration: one or more `<digits><unit>` with units
/// `h`, `m` and `s` (`30s`, `5m`, `1h30m`, `720h`), as Karpenter's CRDs accept.
pub fn parse_duration(s: &str) -> Result<SignedDuration, String> {
    let bad = |why: &str| format!("{s:?}: {why} (expected a duration like 30s, 5m or 1h30m)");
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(bad(&format!("unexpected {c:?}"))),
        };
        if digits.is_empty() {
            return Err(bad(&format!("missing number before {c:?}")));
        }
        let n: i64 = digits.parse().map_err(|_| bad("number too large"))?;
        total = n
            .checked_mul(unit)
            .and_then(|secs| total.checked_add(secs))
            .ok_or_else(|| bad("too long"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(bad("missing unit after the last number"));
    }
    Ok(SignedDuration::from_secs(total))
}

/// [`parse_duration`], or `Never` → `None`.
pub fn parse_duration_or_never(s: &str) -> Result<Option<SignedDuration>, String> {
    if s == "Never" {
        Ok(None)
    } else {
        parse_duration(s).map(Some)
    }
}

/// Formats a duration the way Karpenter users write it (`1h30m`, `45s`, `0s`).
pub fn format_duration(d: SignedDuration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h != 0 {
        out.push_str(&format!("{h}h"));
    }
    if m != 0 {
        out.push_str(&format!("{m}m"));
    }
    if s != 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn spec(json: serde_json::Value) -> DisruptionSpec {
        serde_json::from_value(json).expect("disruption spec")
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(SignedDuration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(SignedDuration::from_mins(90)));
        assert_eq!(parse_duration("720h"), Ok(SignedDuration::from_hours(720)));
        assert_eq!(parse_duration("0s"), Ok(SignedDuration::ZERO));
        assert_eq!(parse_duration_or_never("Never"), Ok(None));
        for bad in ["", "5", "1d", "-5m", "1.5h", "m", "never"] {
            assert!(parse_duration_or_never(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(SignedDuration::from_secs(5430)), "1h30m30s");
        assert_eq!(format_duration(SignedDuration::from_hours(720)), "720h");
        assert_eq!(format_duration(SignedDuration::ZERO), "0s");
    }

    #[test]
    fn defaults_follow_karpenter_v1() {
        let d = Disruption::from_spec(None, "spec.disruption").expect("valid");
        assert_eq!(d, Disruption::default());
        assert_eq!(d.policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
        assert_eq!(d.consolidate_after, Some(SignedDuration::ZERO));
        assert_eq!(
            d.budgets,
            vec![Budget {
                nodes: BudgetNodes::Percent(10),
                schedule: None,
                duration: None,
                reasons: vec![]
            }]
        );
        let d = Disruption::from_spec(
            Some(&spec(serde_json::json!({"budgets": []}))),
            "spec.disruption",
        )
        .expect("valid");
        assert!(d.budgets.is_empty());
        assert_eq!(
            d.allowed_disruptions(DisruptionReason::Drifted, 7, ts("2024-01-01T00:00:00Z")),
            7
        );
    }

    #[test]
    fn reads_every_field() {
        let d = Disruption::from_spec(
            Some(&spec(serde_json::json!({
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "Never",
                "budgets": [
                    {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
                    {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Underutilized"]},
                    {"nodes": 3}
                ]
            }))),
            "spec.disruption",
        )
        .expect("valid");
        assert_eq!(d.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(d.consolidate_after, None);
        assert_eq!(d.budgets[0].nodes, BudgetNodes::Percent(20));
        assert_eq!(
            d.budgets[0].reasons,
            vec![DisruptionReason::Empty, DisruptionReason::Drifted]
        );
        assert_eq!(d.budgets[1].duration, Some(SignedDuration::from_hours(8)));
        assert_eq!(d.budgets[2].nodes, BudgetNodes::Count(3));
        // Monday 10:00 UTC: the business-hours budget blocks Underutilized.
        let monday = ts("2024-08-05T10:00:00Z");
        assert_eq!(
            d.allowed_disruptions(DisruptionReason::Underutilized, 40, monday),
            0
        );
        assert_eq!(
            d.allowed_disruptions(DisruptionReason::Empty, 40, monday),
            3
        );
        // Monday 17:00 is outside the 8h window.
        assert_eq!(
            d.allowed_disruptions(
                DisruptionReason::Underutilized,
                40,
                ts("2024-08-05T17:00:00Z")
            ),
            3
        );
        assert_eq!(
            d.allowed_disruptions(DisruptionReason::Drifted, 2, monday),
            1
        );
    }

    #[test]
    fn percentages_round_up() {
        let b = Budget::default();
        let now = ts("2024-01-01T00:00:00Z");
        assert_eq!(b.allowed_disruptions(0, now), Some(0));
        assert_eq!(b.allowed_disruptions(1, now), Some(1));
        assert_eq!(b.allowed_disruptions(10, now), Some(1));
        assert_eq!(b.allowed_disruptions(11, now), Some(2));
        let all = Budget {
            nodes: BudgetNodes::Percent(100),
            ..Budget::default()
        };
        assert_eq!(all.allowed_disruptions(13, now), Some(13));
        let scheduled = Budget {
            nodes: BudgetNodes::Count(0),
            schedule: Some(Schedule::parse("@daily").expect("valid")),
            duration: Some(SignedDuration::from_mins(10)),
            reasons: vec![],
        };
        assert_eq!(
            scheduled.allowed_disruptions(5, ts("2024-01-01T00:09:59Z")),
            Some(0)
        );
        assert_eq!(
            scheduled.allowed_disruptions(5, ts("2024-01-01T00:10:00Z")),
            None
        );
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let cases = [
            (
                serde_json::json!({"consolidationPolicy": "WhenUnderutilized"}),
                "spec.disruption.consolidationPolicy",
                "renamed",
            ),
            (
                serde_json::json!({"consolidateAfter": "5 minutes"}),
                "spec.disruption.consolidateAfter",
                "expected a duration",
            ),
            (
                serde_json::json!({"budgets": [{"nodes": "110%"}]}),
                "spec.disruption.budgets[0].nodes",
                "at most 100%",
            ),
            (
                serde_json::json!({"budgets": [{}, {"nodes": "ten"}]}),
                "spec.disruption.budgets[1].nodes",
                "expected a count",
            ),
            (
                serde_json::json!({"budgets": [{"nodes": -1}]}),
                "spec.disruption.budgets[0].nodes",
                "non-negative",
            ),
            (
                serde_json::json!({"budgets": [{"schedule": "@daily"}]}),
                "spec.disruption.budgets[0].duration",
                "required when schedule",
            ),
            (
                serde_json::json!({"budgets": [{"duration": "1h"}]}),
                "spec.disruption.budgets[0].schedule",
                "required when duration",
            ),
            (
                serde_json::json!({"budgets": [{"schedule": "0 25 * * *", "duration": "1h"}]}),
                "spec.disruption.budgets[0].schedule",
                "hour: 25",
            ),
            (
                serde_json::json!({"budgets": [{"schedule": "@daily", "duration": "90s"}]}),
                "spec.disruption.budgets[0].duration",
                "whole minutes",
            ),
            (
                serde_json::json!({"budgets": [{"reasons": ["Empty", "Expired"]}]}),
                "spec.disruption.budgets[0].reasons[1]",
                "unknown reason",
            ),
        ];
        for (json, field, reason) in cases {
            let (f, r) = Disruption::from_spec(Some(&spec(json.clone())), "spec.disruption")
                .expect_err(&json.to_string());
            assert_eq!(f, field, "{json}");
            assert!(r.contains(reason), "{json}: {r}");
        }
        assert!(
            serde_json::from_value::<DisruptionSpec>(serde_json::json!({"expireAfter": "720h"}))
                .is_err()
        );
    }
}
