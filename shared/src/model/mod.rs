//! The shared model: the records and values the decisions, the ports and
//! the adapters all speak of — time, keys, offerings and instances, a launch
//! request, the `Claim`, the removal `Command` and its `Step`, the batch
//! record, a `Lease`, what a NodeClass resolves to, what a CapacityBuffer
//! reads of a workload. It holds data and the
//! pure methods on it, nothing that decides or does I/O; it imports only
//! the vocabulary below it (`resources`, `scheduling`, `cloud`, `config`),
//! so every layer above can share it without importing another.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use jiff::{SignedDuration, Timestamp};

pub mod batch;
pub mod claim;
pub mod command;
pub mod instance;
pub mod keys;

pub use batch::Batch;
pub use claim::{Claim, Phase};
pub use command::{Command, DISRUPTED_TAINT_KEY, Milestones, RemovalReason, RemovalSpec, Step};
pub use instance::{
    CloudCatalog, Instance, InstanceHealth, InstanceState, LaunchRequest, LaunchTemplate, Launched,
    PricedOffering, ResolvedClass, StatusCategory, StatusCheck,
};
pub use keys::{OfferingKey, PodKey};

/// A lease that makes one invocation of a function the active one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub expires_at: Timestamp,
}

/// Resource name (`cpu` in millicores, `memory` in bytes, `nodes`, …) → amount.
pub type Usage = BTreeMap<String, i64>;

/// What a CapacityBuffer sized from a workload reads of it: the pod
/// template and the desired replicas (`spec.replicas`, 1 when unset, as
/// the API server defaults it).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalableWorkload {
    pub template: k8s_openapi::api::core::v1::PodTemplateSpec,
    pub replicas: i32,
}
