#![no_main]
//! `cargo +nightly fuzz run --fuzz-dir shared/fuzz cron`: see `nodewright::fuzzing::cron`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright::fuzzing::cron(data));
