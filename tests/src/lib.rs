//! Shared helpers for the integration tests live in `tests/tests/*.rs`.
