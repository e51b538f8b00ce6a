//! The keys that name things across the crate: an offering (the unit that
//! runs out of capacity) and a pod (with its uid).

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// One purchasable (capacity type, instance type, zone): the unit that runs
/// out of capacity and is marked unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OfferingKey {
    pub capacity_type: String,
    pub instance_type: String,
    pub zone: String,
}

impl std::fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

impl OfferingKey {
    /// A field that matches any value: `{spot, *, *}` marks a whole
    /// capacity type, `{*, *, zone}` a whole zone (Karpenter's capacity-type
    /// and subnet marks of its unavailable-offerings cache).
    pub const ANY: &'static str = "*";

    /// Every offering of one capacity type.
    pub fn capacity_type(capacity_type: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: capacity_type.to_owned(),
            instance_type: Self::ANY.to_owned(),
            zone: Self::ANY.to_owned(),
        }
    }

    /// Every offering in one zone.
    pub fn zone(zone: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: Self::ANY.to_owned(),
            instance_type: Self::ANY.to_owned(),
            zone: zone.to_owned(),
        }
    }

    /// Whether any field is [`OfferingKey::ANY`].
    pub fn is_wildcard(&self) -> bool {
        [&self.capacity_type, &self.instance_type, &self.zone]
            .iter()
            .any(|f| f.as_str() == Self::ANY)
    }

    /// Whether this key names the offering (a wildcard field matches any).
    pub fn matches(&self, capacity_type: &str, instance_type: &str, zone: &str) -> bool {
        let m = |k: &str, v: &str| k == Self::ANY || k == v;
        m(&self.capacity_type, capacity_type)
            && m(&self.instance_type, instance_type)
            && m(&self.zone, zone)
    }
}

/// `namespace/name` of a pod, with its uid so a re-created pod of the same
/// name is not mistaken for the old one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub uid: String,
}

impl PodKey {
    pub fn of(pod: &Pod) -> PodKey {
        PodKey {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
