//! The bodies of the fuzz targets: each takes arbitrary bytes, must never
//! panic, hang or allocate without bound, and checks what it can of the
//! result. `shared/fuzz` wraps each one for `cargo +nightly fuzz run
//! <target>` (coverage-guided, libFuzzer); the test command replays the
//! checked-in corpus (`shared/fuzz/corpus/<target>/`) through the same
//! functions on stable, plus a bounded run of mutated inputs (the tests
//! below).
//!
//! Inputs longer than [`MAX_INPUT`] are ignored: the real inputs are bounded
//! by their transport (an SQS message is at most 256 KiB, a DynamoDB item
//! 400 KB), and a fuzzer's time is better spent on shapes than on length.

use crate::config::ConfigSet;
use crate::resources::{format_cpu, parse_milli, parse_whole};

/// The longest input a target looks at.
pub const MAX_INPUT: usize = 64 * 1024;

/// A fuzz target: its name and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by the name its corpus directory and `cargo fuzz` use.
pub const TARGETS: &[Target] = &[
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
    let Ok(json) = serde_json::from_str::<serde_json::Value>(body) else {
        return;
    };
    let Ok((_, message)) = crate::interruption::parse(&json) else {
        return;
    };
    use crate::interruption::Message::*;
    let ids: Vec<&String> = match &message {
        StateChange { instance_id, .. }
        | SpotInterruption { instance_id, .. }
        | RebalanceRecommendation { instance_id }
        | CapacityReservationInterruption { instance_id, .. } => vec![instance_id],
        ScheduledChange { instance_ids, .. } => instance_ids.iter().collect(),
    };
    assert!(
        !ids.is_empty() && ids.iter().all(|id| !id.is_empty()),
        "{message:?} names no instance"
    );
}

/// A configuration file, as `nodewright config apply` and `validate` read
/// it: every YAML document converted (v1alpha5 and v1beta1 included) and the
/// set validated. A refusal says at least one thing, and every error has a
/// message.
pub fn config_documents(data: &[u8]) {
    let Some(yaml) = text(data) else { return };
    if let Err(errors) = ConfigSet::parse(yaml) {
        assert!(!errors.is_empty(), "a refusal without a reason");
        assert!(
            errors.iter().all(|e| !e.to_string().trim().is_empty()),
            "{errors:?}"
        );
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
        assert_eq!(
            parse_milli(&format_cpu(milli)),
            Ok(milli),
            "{s:?} → {milli}m → {}",
            format_cpu(milli)
        );
    }
    if let (Ok(whole), Ok(milli)) = (parse_whole(s), parse_milli(s))
        && whole > 0
        && milli < i64::MAX
    {
        assert!(
            milli >= whole,
            "{s:?}: {whole} whole units but {milli} thousandths"
        );
    }
}

/// A scenario file, as `nodewright simulate` reads it: parsed, validated,
/// and every duration in it read.
pub fn scenario(data: &[u8]) {
    let Some(yaml) = text(data) else { return };
    let Ok(s) = crate::sim::scenario::parse(yaml) else {
        return;
    };
    let _ = crate::sim::scenario::validate(&s);
    let _ = crate::sim::scenario::parse_duration(&s.run);
}

/// A budget's cron `schedule`: parsed; a schedule that parses keeps its
/// text, and asking whether it is active (a day's look-back) terminates.
pub fn cron(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(schedule) = crate::config::cron::Schedule::parse(s) {
        assert_eq!(
            schedule.as_str(),
            s.trim(),
            "a parsed schedule keeps its text"
        );
        #[allow(clippy::expect_used, reason = "a constant in range")]
        let at = crate::model::Timestamp::from_second(1_767_225_600).expect("2026-01-01");
        let _ = schedule.is_active(at, crate::model::SignedDuration::from_hours(24));
    }
}

/// The targets' short run in the test command, on stable: every input of
/// `fuzz/corpus/<target>/` through its body, then a fixed number of seeded
/// mutations of them (byte flips, cuts, splices, repeated runs and the
/// tokens these formats are made of). A crash the coverage-guided run finds
/// is added to the corpus and so replayed here for good.
#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use super::{MAX_INPUT, TARGETS};
    use crate::sim::rng::Rng;

    /// Mutated inputs per target and test run.
    const MUTATIONS: usize = 3_000;

    /// Pieces of JSON, YAML, quantities and cron the mutator splices in.
    const TOKENS: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b":",
        b",",
        b"null",
        b"true",
        b"-1",
        b"1e400",
        b"\\u0000",
        b"\n- ",
        b"\n---\n",
        b": &a [*a, *a]",
        b"*a",
        b"!!binary",
        b"Gi",
        b"Ki",
        b"m",
        b"e9",
        b".",
        b"*/",
        b"-",
        b"@",
        b"9999999999999999999",
        b"instance-id",
        b"detail-type",
        b"apiVersion: karpenter.sh/v1\n",
        b"kind: NodePool\n",
        b"\t",
        b"\xff",
    ];

    fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| {
                let path = entry.expect("corpus entry").path();
                (
                    path.file_name()
                        .expect("named")
                        .to_string_lossy()
                        .into_owned(),
                    std::fs::read(&path).expect("readable"),
                )
            })
            .collect();
        inputs.sort();
        inputs
    }

    fn mutate(rng: &mut Rng, seeds: &[(String, Vec<u8>)]) -> Vec<u8> {
        let mut data = rng.pick(seeds).1.clone();
        for _ in 0..rng.range(1, 8) {
            let at = rng.range(0, data.len() as u64) as usize;
            match rng.range(0, 5) {
                0 if !data.is_empty() => {
                    let i = at.min(data.len() - 1);
                    data[i] ^= 1 << rng.range(0, 7);
                }
                1 => data.truncate(at),
                2 => {
                    let end = rng.range(at as u64, data.len() as u64) as usize;
                    data.drain(at..end);
                }
                3 => {
                    let other = &rng.pick(seeds).1;
                    let from = rng.range(0, other.len() as u64) as usize;
                    let piece = other[from..]
                        .iter()
                        .take(rng.range(1, 256) as usize)
                        .copied()
                        .collect::<Vec<u8>>();
                    data.splice(at..at, piece);
                }
                4 => {
                    let end = rng.range(at as u64, (at + 64).min(data.len()) as u64) as usize;
                    let run = data[at..end].repeat(rng.range(2, 64) as usize);
                    data.splice(at..at, run);
                }
                _ => {
                    let token = *rng.pick(TOKENS);
                    data.splice(at..at, token.iter().copied());
                }
            }
            data.truncate(MAX_INPUT);
        }
        data
    }

    fn run(target: &str, body: fn(&[u8]), name: &str, data: &[u8]) {
        if catch_unwind(AssertUnwindSafe(|| body(data))).is_err() {
            panic!(
                "fuzz target {target} panicked on {name}: {:?}",
                String::from_utf8_lossy(&data[..data.len().min(2_000)])
            );
        }
    }

    #[test]
    fn every_fuzz_target_survives_its_corpus_and_mutations_of_it() {
        for (target, body) in TARGETS {
            let seeds = corpus(target);
            assert!(
                seeds.len() >= 4,
                "{target}: a corpus of {} input(s)",
                seeds.len()
            );
            for (name, data) in &seeds {
                run(target, *body, name, data);
            }
            let mut rng = Rng::new(0xf022 ^ target.len() as u64);
            for i in 0..MUTATIONS {
                let data = mutate(&mut rng, &seeds);
                run(target, *body, &format!("mutation {i}"), &data);
            }
        }
    }

    /// What `event_message` asserts of a parsed message holds because the
    /// parser refuses an empty instance id (were it accepted, the body's
    /// assertion would fail the run above).
    #[test]
    fn an_event_with_an_empty_instance_id_is_refused() {
        let event = corpus("event_message")
            .into_iter()
            .find(|(n, _)| n == "spot-interruption")
            .expect("seed")
            .1;
        let event: serde_json::Value = serde_json::from_slice(&event).expect("json");
        assert!(
            crate::interruption::parse(&event).is_ok(),
            "the seed parses"
        );
        let mut emptied = event.clone();
        emptied["detail"]["instance-id"] = "".into();
        assert!(
            crate::interruption::parse(&emptied).is_err(),
            "an empty instance id is refused"
        );
    }
}
