//! The scheduling core: which pods go where, and on what new instances.
//! Pure: takes snapshots, returns plans, does no I/O.

pub mod guide;
pub mod knapsack;
pub mod labels;
pub mod patterns;
pub mod pod;
pub mod requirements;
pub mod selector;
pub mod solver;
pub mod taints;
pub mod topology;
pub mod volumes;

pub use pod::{PodRef, SchedPod};
pub use requirements::{Operator, Requirement, Requirements};

pub use solver::{ExistingNode, NewClaim, Plan, PoolInput, SolveOptions, Strategy, solve};
