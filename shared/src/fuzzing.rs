//! The bodies of the fuzz targets: each takes arbitrary bytes, must never
//! panic, hang or allocate without bound, and checks what it can of the
//! result. `tests/fuzz` wraps each one for `cargo +nightly fuzz run
//! <target>` (coverage-guided, libFuzzer); the test command replays the
//! checked-in corpus through the same functions on stable, plus a bounded
//! run of mutated inputs (`tests/tests/suite/fuzz_corpus.rs`).
//!
//! Inputs longer than [`MAX_INPUT`] are ignored: the real inputs are bounded
//! by their transport (an SQS message is at most 256 KiB, a DynamoDB item
//! 400 KB), and a fuzzer's time is better spent on shapes than on length.

use crate::config::ConfigSet;
use crate::resources::{format_cpu, parse_milli, parse_whole};

/// The longest input a target looks at.
pub const MAX_INPUT: usize = 64 * 1024;

/// Every target, by the name its corpus directory and `cargo fuzz` use.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("event_message", event_message),
    ("config_documents", config_documents),
    ("quantity", quantity),
    ("scenario", scenario),
    ("cron", cron),
];

fn text(data: &[u8]) -> Option<&str> {
    if data.len() > MAX_INPUT {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// An SQS message body or EventBridge event, as the interruption and
/// state-change functions read it: JSON, then the envelope and the detail of
/// its `detail-type`. A parsed message names at least one instance, none of
/// them empty.
pub fn event_message(data: &[u8]) {
    let Some(body) = text(data) else { return };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(body) else { return };
    let Ok((_, message)) = crate::interruption::parse(&json) else { return };
    use crate::interruption::Message::*;
    let ids: Vec<&String> = match &message {
        StateChange { instance_id, .. }
        | SpotInterruption { instance_id }
        | RebalanceRecommendation { instance_id }
        | CapacityReservationInterruption { instance_id } => vec![instance_id],
        ScheduledChange { instance_ids, .. } => instance_ids.iter().collect(),
    };
    assert!(!ids.is_empty() && ids.iter().all(|id| !id.is_empty()), "{message:?} names no instance");
}

/// A configuration file, as `nodewright config apply` and `validate` read
/// it: every YAML document converted (v1alpha5 and v1beta1 included) and the
/// set validated. A refusal says at least one thing, and every error has a
/// message.
pub fn config_documents(data: &[u8]) {
    let Some(yaml) = text(data) else { return };
    if let Err(errors) = ConfigSet::parse(yaml) {
        assert!(!errors.is_empty(), "a refusal without a reason");
        assert!(errors.iter().all(|e| !e.to_string().trim().is_empty()), "{errors:?}");
    }
}

/// A Kubernetes quantity, as pods' requests and NodePool limits carry it:
/// thousandths (CPU) and whole units (memory). A non-negative CPU quantity
/// prints and parses back to itself; whole units never exceed thousandths'
/// scale.
pub fn quantity(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(milli) = parse_milli(s)
        && milli >= 0
    {
        assert_eq!(parse_milli(&format_cpu(milli)), Ok(milli), "{s:?} → {milli}m → {}", format_cpu(milli));
    }
    if let (Ok(whole), Ok(milli)) = (parse_whole(s), parse_milli(s))
        && whole > 0
        && milli < i64::MAX
    {
        assert!(milli >= whole, "{s:?}: {whole} whole units but {milli} thousandths");
    }
}

/// A scenario file, as `nodewright simulate` reads it: parsed, validated,
/// and every duration in it read.
pub fn scenario(data: &[u8]) {
    let Some(yaml) = text(data) else { return };
    let Ok(s) = crate::sim::scenario::parse(yaml) else { return };
    let _ = crate::sim::scenario::validate(&s);
    let _ = crate::sim::scenario::parse_duration(&s.run);
}

/// A budget's cron `schedule`: parsed; a schedule that parses keeps its
/// text, and asking whether it is active (a day's look-back) terminates.
pub fn cron(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(schedule) = crate::config::cron::Schedule::parse(s) {
        assert_eq!(schedule.as_str(), s.trim(), "a parsed schedule keeps its text");
        let at = crate::ports::Timestamp::from_second(1_767_225_600).expect("2026-01-01");
        let _ = schedule.is_active(at, crate::ports::SignedDuration::from_hours(24));
    }
}
