//! # nodewright
//!
//! The library behind nodewright's functions and CLI: the scheduling core
//! (requirements algebra, pod constraints, topology, the packing solver),
//! the cloud model (instance types, offerings, allocatable math) and the
//! configuration model. See `ARCHITECTURE.md` at the repository root for the
//! map and its invariants; the most important one is that everything in this
//! crate's decision modules is pure: no I/O, time taken as an argument.

#[cfg(feature = "aws")]
pub mod aws;
pub mod cloud;
pub mod config;
pub mod disruption;
pub mod fuzzing;
pub mod handlers;
pub mod interruption;
#[cfg(feature = "kube")]
pub mod kube;
#[cfg(test)]
mod layering;
#[cfg(all(feature = "aws", feature = "kube"))]
pub mod live;
pub mod model;
pub mod packing;
pub mod ports;
pub mod provisioning;
pub mod resources;
#[cfg(feature = "lambda")]
pub mod runtime;
pub mod scheduling;
pub mod sim;
pub mod termination;
pub mod workload;

/// The Kubernetes API types this crate speaks, re-exported for its users.
pub mod k8s {
    pub use k8s_openapi::api::core::v1::Pod;
}
