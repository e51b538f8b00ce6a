//! The integration suite, one test binary: every module below used to be its
//! own binary, and each linked the AWS SDK, kube and the whole product again
//! (a minute of linking and a large file apiece). One binary links once, and
//! its tests share one kube-apiserver and one AWS emulator (`nodewright_tests`
//! starts each at most once per process).
//!
//! Run one module with its path as the filter, e.g.
//! `cargo test -p nodewright-tests --features nodewright-cli/aws --test suite interruption_real::`.

mod aws_cloud;
mod aws_scenarios;
mod aws_store;
mod cluster_contract;
mod eks_auth;
mod interruption;
mod interruption_real;
mod kube_cluster;
mod kube_scenarios;
mod properties;
mod provisioning;
mod scheduling;
mod store_contract;
