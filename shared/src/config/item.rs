//! A configuration item as the Store keeps it: its kind, name, the
//! validated spec as JSON and its version; and the changes of an
//! all-or-nothing configuration write. [`super::document`] turns items
//! into validated objects.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Which configuration item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigKind {
    NodePool,
    NodeClass,
    Settings,
    /// A Karpenter `NodeOverlay` (price and capacity overrides).
    NodeOverlay,
    /// A `CapacityBuffer` (spare capacity kept as virtual pods).
    CapacityBuffer,
}

impl ConfigKind {
    /// `nodepool`, `nodeclass`, `settings`, `nodeoverlay`, `capacitybuffer`:
    /// the stored key's prefix and how errors name items.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::NodePool => "nodepool",
            ConfigKind::NodeClass => "nodeclass",
            ConfigKind::Settings => "settings",
            ConfigKind::NodeOverlay => "nodeoverlay",
            ConfigKind::CapacityBuffer => "capacitybuffer",
        }
    }

    /// What a user types: `nodepool`/`nodepools`/`NodePool`, `ec2nodeclass`/`nodeclass`, `settings`.
    pub fn parse(s: &str) -> Option<ConfigKind> {
        match s.to_ascii_lowercase().as_str() {
            "nodepool" | "nodepools" | "np" => Some(ConfigKind::NodePool),
            "nodeclass" | "nodeclasses" | "ec2nodeclass" | "ec2nodeclasses" | "ec2nc" => {
                Some(ConfigKind::NodeClass)
            }
            "settings" | "setting" => Some(ConfigKind::Settings),
            "nodeoverlay" | "nodeoverlays" | "overlay" | "overlays" => {
                Some(ConfigKind::NodeOverlay)
            }
            "capacitybuffer" | "capacitybuffers" | "cb" => Some(ConfigKind::CapacityBuffer),
            _ => None,
        }
    }
}

/// A configuration item as stored: the validated v1 spec as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigItem {
    pub kind: ConfigKind,
    pub name: String,
    pub spec: serde_json::Value,
    /// The object's `metadata.annotations` (NodePools: the rebalance-policy override).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Starts at 1; a write must name the version it replaces.
    pub version: u64,
    pub updated_at: Timestamp,
}

/// The key an unreadable item's reason is kept under, in place of its spec
/// (no spec field starts with `$`).
const UNREADABLE_SPEC_KEY: &str = "$unreadable";

impl ConfigItem {
    /// A stored item whose body cannot be read: kept beside the others,
    /// named by its key, so the reader reports it as invalid (with `reason`)
    /// instead of failing every item's read.
    pub fn unreadable(
        kind: ConfigKind,
        name: &str,
        version: u64,
        reason: impl Into<String>,
    ) -> ConfigItem {
        ConfigItem {
            kind,
            name: name.to_owned(),
            spec: serde_json::json!({ UNREADABLE_SPEC_KEY: reason.into() }),
            annotations: BTreeMap::new(),
            version,
            updated_at: Timestamp::UNIX_EPOCH,
        }
    }

    /// Why the stored item could not be read, for one made by [`ConfigItem::unreadable`].
    pub fn unreadable_reason(&self) -> Option<&str> {
        self.spec.get(UNREADABLE_SPEC_KEY)?.as_str()
    }
}

/// One change of an all-or-nothing configuration write.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigWrite {
    /// As `Store::put_config_item`: the stored version must be `item.version - 1` (absent for 1).
    Put(ConfigItem),
    /// Deletes the item if its stored version is still `version`.
    Delete {
        kind: ConfigKind,
        name: String,
        version: u64,
    },
}

impl ConfigWrite {
    pub fn key(&self) -> (ConfigKind, &str) {
        match self {
            ConfigWrite::Put(i) => (i.kind, &i.name),
            ConfigWrite::Delete { kind, name, .. } => (*kind, name),
        }
    }
}

/// At most this many changes go in one configuration write (DynamoDB's
/// transaction limit, less the version counter).
pub const MAX_CONFIG_WRITES: usize = 99;
