#![no_main]
//! `cargo +nightly fuzz run --fuzz-dir shared/fuzz scenario`: see `nodewright::fuzzing::scenario`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright::fuzzing::scenario(data));
