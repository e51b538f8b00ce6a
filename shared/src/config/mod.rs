//! Configuration: NodePools and NodeClasses in the schema Karpenter users
//! already write (v1, and the older forms converted), validated into the
//! forms the decisions use. Every rejection names the item, the field and
//! the reason.

pub mod buffer;
pub mod convert;
pub mod cron;
pub mod disruption;
pub mod document;
pub mod hash;
pub mod item;
pub mod nodeclass;
pub mod nodepool;
pub mod overlay;
pub mod schema;
pub mod settings;
pub mod syntax;

pub use buffer::{BufferSource, CapacityBuffer};
pub use disruption::{
    Budget, BudgetNodes, ConsolidationPolicy, Disruption, DisruptionReason, DisruptionSpec,
};
pub use document::{
    ConfigDocument, ConfigSet, Document, Resolved, parse_all, parse_config_all, parse_documents,
    parse_stream, resolve_items,
};
pub use item::{ConfigItem, ConfigKind, ConfigWrite, MAX_CONFIG_WRITES};
pub use nodeclass::{AmiFamily, EC2NodeClassSpec, KubeletSpec, MaxPods, NodeClass, NodeIdentity};
pub use nodepool::{Limits, NodePool, NodePoolSpec};
pub use settings::{RebalancePolicy, Settings, SettingsSpec};

/// An invalid configuration item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{item}: {field}: {reason}")]
pub struct ConfigError {
    /// `nodepool/<name>`, `nodeclass/<name>`, `provisioner/<name>`,
    /// `awsnodetemplate/<name>`, `document[<index>]`, `settings`.
    pub item: String,
    /// The path of the offending field, e.g. `spec.limits.cpu`.
    pub field: String,
    pub reason: String,
}
