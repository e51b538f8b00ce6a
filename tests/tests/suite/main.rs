//! The integration suite, one test binary: every module below used to be its
//! own binary, and each linked the AWS SDK, kube and the whole product again
//! (a minute of linking and a large file apiece). One binary links once, and
//! its tests share one kube-apiserver and one AWS emulator (`nodewright_tests`
//! starts each at most once per process).
//!
//! The tests that take the whole API server for themselves (they empty it
//! first) are in the `whole_cluster` binary instead, so they never run at
//! the same time as these, which share it namespace by namespace.
//!
//! Run one module with its path as the filter, e.g.
//! `cargo test -p nodewright-tests --test suite store_contract::`.

mod aws_cloud;
mod aws_scenarios;
mod aws_store;
mod cloud_contract;
mod cluster_contract;
mod disruption;
mod eks_auth;
mod interruption;
mod interruption_queue;
mod kube_cluster;
mod ownership;
mod properties;
mod provisioning;
mod scheduling;
mod secrets_in_logs;
mod store_contract;
mod wake_queue;
