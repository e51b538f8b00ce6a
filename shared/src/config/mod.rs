//! Configuration: NodePools (and, with later work, NodeClasses and settings)
//! in the schema Karpenter users already write, validated into the forms the
//! decisions use. Every rejection names the item, the field and the reason.

pub mod nodepool;

pub use nodepool::{Limits, NodePool, NodePoolSpec};

/// An invalid configuration item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{item}: {field}: {reason}")]
pub struct ConfigError {
    /// `nodepool/<name>`, `nodeclass/<name>`, `settings`.
    pub item: String,
    /// The path of the offending field, e.g. `spec.limits.cpu`.
    pub field: String,
    pub reason: String,
}
