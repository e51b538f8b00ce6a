//! Synthetic workloads for benchmarks and tests.
//!
//! [`w1`] re-creates Karpenter's own scheduling benchmark (its
//! `scheduling_benchmark_test.go`): synthetic instance types whose price is
//! linear in their size, and pods drawn from a seeded RNG.

pub mod fleet_bound;
pub mod lower_bound;
pub mod w1;
pub mod w2;
