//! The embedded simulator: in-memory `Cloud`, `Cluster` and `Store`, a
//! simulated clock, fault decorators, and the loop that drives the same
//! handler code the Lambda functions run. A product feature (the
//! `nodewright simulate` command), held to the same scenario tests as the
//! real adapters.

pub mod catalog;
pub mod clock;
pub mod cloud;
pub mod cluster;
pub mod cluster_faults;
#[cfg(test)]
mod conformance;
pub mod controllers;
pub mod driver;
pub mod faults;
pub mod interleave;
pub mod placement;
pub mod pools;
pub mod rng;
pub mod scenario;
pub mod simulation;
pub mod soak;
pub mod store;

pub use clock::SimClock;
pub use cloud::SimCloud;
pub use cluster::SimCluster;
pub use cluster_faults::{FaultyCluster, FaultyClusterPort};
pub use driver::{ClusterDriver, DriverError};
pub use faults::{FaultyCloud, FaultyStore};
pub use interleave::Interleave;
pub use simulation::{SimSettings, Simulation};
pub use store::MemStore;
