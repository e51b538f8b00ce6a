#![no_main]
//! `cargo +nightly fuzz run --fuzz-dir shared/fuzz quantity`: see `nodewright::fuzzing::quantity`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright::fuzzing::quantity(data));
