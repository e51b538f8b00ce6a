//! What the cloud sells and what it runs for us: priced offerings, the
//! region's catalog, one launch request and its outcome, our instances and
//! launch templates, and what a NodeClass resolves to now.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{OfferingKey, Timestamp};
use crate::cloud::{InstanceTypeInfo, KubeletConfig};
use crate::config::NodeClass;
use crate::scheduling::taints::Taint;

/// An offering with its price, as the cloud reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PricedOffering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    /// For a `reserved` option whose claim requires something of the
    /// capacity-reservation labels (`karpenter.k8s.aws/capacity-reservation-id`,
    /// `-type`, `-interruptible`): the reservations of its type and zone the
    /// claim allows, the only ones a launch may target. Empty: any of the
    /// pool's (and always, for capacity bought on-demand or spot).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservation_ids: Vec<String>,
}

/// What the region sells: instance types and their priced offerings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CloudCatalog {
    pub region: String,
    pub instance_types: Vec<InstanceTypeInfo>,
    pub offerings: Vec<PricedOffering>,
    /// Zone name → zone id (`us-east-1a` → `use1-az1`), where known: what
    /// `topology.k8s.aws/zone-id` means. Empty when unknown (a pod that
    /// requires a zone id then waits, it is never placed by guess).
    #[serde(default)]
    pub zone_ids: std::collections::BTreeMap<String, String>,
    /// The active capacity reservations the NodeClasses may select, as
    /// listed this tick ([`Cloud::capacity_reservations`]); empty when no
    /// NodeClass has `capacityReservationSelectorTerms` (the cached catalog
    /// itself never carries them: their counts change with every launch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<crate::cloud::CapacityReservation>,
}

/// One launch: a claim's options, cheapest first. The cloud buys exactly one
/// instance among them (spot when any spot option is present, as Karpenter
/// does) and tags it with the claim id; `client_token` makes a retry of the
/// same claim return the same instance instead of a second one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub claim_id: String,
    pub client_token: String,
    pub pool: String,
    pub node_class: Option<String>,
    /// The validated NodeClass named by `node_class`, as the launcher read
    /// it from the configuration this tick (so a change reaches the next
    /// launch). Not serialized: the name is what a record keeps.
    #[serde(skip)]
    pub node_class_spec: Option<NodeClass>,
    pub options: Vec<PricedOffering>,
    /// Labels the node registers with (pool template labels, nodepool, capacity type …).
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with (template taints, startup taints, and ours).
    pub taints: Vec<Taint>,
    pub kubelet: KubeletConfig,
    /// The capacity reservations the NodeClass selects that have room
    /// now: where a `reserved` option is launched (targeted at one of them,
    /// the first with room in this order: `reservations::by_preference`).
    /// Not serialized, like `node_class_spec`.
    #[serde(skip)]
    pub reservations: Vec<crate::cloud::CapacityReservation>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    /// EC2's name for the state (`shutting-down`, …).
    pub fn parse(s: &str) -> Option<InstanceState> {
        Some(match s {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "stopping" => InstanceState::Stopping,
            "stopped" => InstanceState::Stopped,
            "shutting-down" => InstanceState::ShuttingDown,
            "terminated" => InstanceState::Terminated,
            _ => return None,
        })
    }

    /// Stopping, stopped, shutting down or terminated: the node is going away.
    pub fn is_gone_or_going(self) -> bool {
        !matches!(self, InstanceState::Pending | InstanceState::Running)
    }
}

/// An instance we launched (it carries our ownership tag,
/// `nodewright.io/cluster=<cluster>`: [`crate::cloud::ownership`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub state: InstanceState,
    pub launched_at: Timestamp,
    /// The `nodewright.io/nodeclaim` tag.
    pub claim_id: Option<String>,
    /// The `nodewright.io/nodepool` tag.
    pub pool: Option<String>,
    /// The `nodewright.io/nodeclass` tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class: Option<String>,
    /// What the Node's `spec.providerID` will say: `aws:///<zone>/<id>`.
    pub provider_id: String,
    pub price: f64,
    /// What the instance booted with, where the cloud says: the AMI, its
    /// subnet and security groups (drift compares them with what its
    /// NodeClass resolves to now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
    /// The capacity reservation it runs in (capacity type `reserved`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    /// That reservation's type (`default`, `capacity-block`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_type: Option<crate::cloud::ReservationType>,
    /// That reservation is interruptible (its owner may take the capacity
    /// back): `karpenter.k8s.aws/capacity-reservation-interruptible`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capacity_reservation_interruptible: bool,
}

/// A launch template of ours (ownership tag `nodewright.io/cluster=<cluster>`),
/// as the cloud lists it for clean-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchTemplate {
    pub id: String,
    pub name: String,
    pub created_at: Timestamp,
    /// The `nodewright.io/nodeclass` tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class: Option<String>,
    /// The `nodewright.io/nodepool` tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The `nodewright.io/image` tag: the AMI it boots (absent on templates
    /// made before the tag existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
}

/// A successful launch, and the options the cloud found out of capacity on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub instance: Instance,
    pub unavailable: Vec<OfferingKey>,
}

/// What the NodeClass resolves to now (AMIs, subnets, security groups), as
/// the adapters found it. An empty list means "not known": not compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedClass {
    pub image_ids: Vec<String>,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
}

/// A kind of EC2 status check (DescribeInstanceStatus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StatusCategory {
    /// The instance's own checks (its OS, its network configuration).
    InstanceStatus,
    /// The host's checks (power, network, hardware under the instance).
    SystemStatus,
    /// A scheduled event (reboot, maintenance, retirement, stop).
    EventStatus,
    /// The attached EBS volumes' checks.
    EbsStatus,
}

impl StatusCategory {
    /// The name EC2 and Karpenter's `category` label give it.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusCategory::InstanceStatus => "InstanceStatus",
            StatusCategory::SystemStatus => "SystemStatus",
            StatusCategory::EventStatus => "EventStatus",
            StatusCategory::EbsStatus => "EBSStatus",
        }
    }
}

/// One status check or scheduled event of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCheck {
    pub category: StatusCategory,
    /// EC2's name (`reachability`, or the event's code, `instance-retirement`).
    pub name: String,
    /// The check failed (a scheduled event always counts as failed).
    pub failed: bool,
    /// Since when it has failed, when EC2 says.
    pub impaired_since: Option<Timestamp>,
}

/// What EC2 reports of one instance's health: its failing checks and its
/// scheduled events (DescribeInstanceStatus).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceHealth {
    pub instance_id: String,
    pub checks: Vec<StatusCheck>,
}
