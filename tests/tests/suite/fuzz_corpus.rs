//! The fuzz targets' short run in the test command, on stable: every input
//! of `tests/fuzz/corpus/<target>/` through its body in
//! `nodewright::fuzzing`, then a fixed number of seeded mutations of them
//! (byte flips, cuts, splices, repeated runs and the tokens these formats
//! are made of). The coverage-guided run is `cargo +nightly fuzz run
//! --fuzz-dir tests/fuzz <target>`; a crash it finds is added to the corpus
//! and so replayed here for good.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use nodewright::fuzzing::{MAX_INPUT, TARGETS};
use nodewright::sim::rng::Rng;

/// Mutated inputs per target and test run.
const MUTATIONS: usize = 3_000;

/// Pieces of JSON, YAML, quantities and cron the mutator splices in.
const TOKENS: &[&[u8]] = &[
    b"{", b"}", b"[", b"]", b"\"", b":", b",", b"null", b"true", b"-1", b"1e400", b"\\u0000", b"\n- ", b"\n---\n",
    b": &a [*a, *a]", b"*a", b"!!binary", b"Gi", b"Ki", b"m", b"e9", b".", b"*/", b"-", b"@", b"9999999999999999999",
    b"instance-id", b"detail-type", b"apiVersion: karpenter.sh/v1\n", b"kind: NodePool\n", b"\t", b"\xff",
];

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            (path.file_name().expect("named").to_string_lossy().into_owned(), std::fs::read(&path).expect("readable"))
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
                let piece = other[from..].iter().take(rng.range(1, 256) as usize).copied().collect::<Vec<u8>>();
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
        panic!("fuzz target {target} panicked on {name}: {:?}", String::from_utf8_lossy(&data[..data.len().min(2_000)]));
    }
}

#[test]
fn every_fuzz_target_survives_its_corpus_and_mutations_of_it() {
    for (target, body) in TARGETS {
        let seeds = corpus(target);
        assert!(seeds.len() >= 4, "{target}: a corpus of {} input(s)", seeds.len());
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
    let event = corpus("event_message").into_iter().find(|(n, _)| n == "spot-interruption").expect("seed").1;
    let event: serde_json::Value = serde_json::from_slice(&event).expect("json");
    assert!(nodewright::interruption::parse(&event).is_ok(), "the seed parses");
    let mut emptied = event.clone();
    emptied["detail"]["instance-id"] = "".into();
    assert!(nodewright::interruption::parse(&emptied).is_err(), "an empty instance id is refused");
}
