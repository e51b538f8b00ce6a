#![no_main]
//! `cargo +nightly fuzz run --fuzz-dir shared/fuzz config_documents`: see `nodewright::fuzzing::config_documents`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodewright::fuzzing::config_documents(data));
