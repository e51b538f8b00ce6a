#![no_main]
//! `cargo +nightly fuzz run --fuzz-dir shared/fuzz event_message`: see `nodewright::fuzzing::event_message`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright::fuzzing::event_message(data));
