//! The scheduling vocabulary: requirements, taints, a pod's constraints,
//! topology and volumes, which the packer (`crate::packing`) builds on.
//! Pure: takes snapshots, returns answers, does no I/O.

pub mod labels;
pub mod pod;
pub mod requirements;
pub mod selector;
pub mod shared_list;
pub mod taints;
pub mod topology;
pub mod volumes;

pub use pod::{PodReader, PodRef, SchedPod};
pub use requirements::{Operator, Requirement, Requirements};
