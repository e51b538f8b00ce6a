//! A claim: our record of one node we decided to launch, from the decision
//! to the registered Node. It is written to the Store *before* the launch, so
//! a crash at any point leaves a record that the next invocation finishes
//! (the launch is idempotent by the claim's client token) or cleans up.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cloud::KubeletConfig;
use crate::model::{Instance, PodKey, PricedOffering, SignedDuration, Timestamp, Usage};
use crate::resources::{self, Resources};
use crate::scheduling::taints::Taint;

/// The taint a node registers with until we have bound its pods, so that
/// kube-scheduler cannot hand the room we planned to other pods first.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// The `NoSchedule` taint a registered node carries while nodewright binds
/// the pods it planned there: put on before the unregistered taint is
/// lifted and lifted after the last bind, so kube-scheduler places nothing
/// on the node meanwhile. The API server checks no capacity on a bind:
/// with the node open, kube-scheduler and nodewright would each fill the
/// same room. The kubelet admits a pod despite a `NoSchedule` taint (it
/// rejects only an untolerated `NoExecute` one).
pub const BINDING_TAINT_KEY: &str = "nodewright.io/binding";

/// Whether a taint is one nodewright puts on its own nodes until their
/// planned pods are bound (and lifts itself).
pub fn is_registration_taint(key: &str) -> bool {
    key == UNREGISTERED_TAINT_KEY || key == BINDING_TAINT_KEY
}
/// Label carrying the claim id on the Node (as Karpenter's NodeClaim name).
pub const CLAIM_LABEL: &str = "karpenter.sh/nodeclaim";
/// On a claim and its Node: `"true"` when the claim launched with a
/// `minValues` lowered (`MinValuesPolicy::BestEffort`), Karpenter's key.
pub const MIN_VALUES_RELAXED_ANNOTATION: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// Where a claim is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Written, not launched yet (or the launch's outcome was not recorded).
    Pending,
    /// An instance exists; its Node has not registered.
    Launched,
    /// The Node registered; we made it schedulable and bound the pods.
    Registered,
}

/// The instance a claim got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimInstance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    pub provider_id: String,
    pub launched_at: Timestamp,
    /// The capacity reservation it runs in, and that reservation's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_type: Option<crate::cloud::ReservationType>,
    /// That reservation is interruptible.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capacity_reservation_interruptible: bool,
}

impl From<&Instance> for ClaimInstance {
    fn from(i: &Instance) -> Self {
        ClaimInstance {
            id: i.id.clone(),
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            capacity_type: i.capacity_type.clone(),
            price: i.price,
            provider_id: i.provider_id.clone(),
            launched_at: i.launched_at,
            capacity_reservation_id: i.capacity_reservation_id.clone(),
            capacity_reservation_type: i.capacity_reservation_type,
            capacity_reservation_interruptible: i.capacity_reservation_interruptible,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// `<pool>-<5 lowercase alphanumerics>`, like a Karpenter NodeClaim name.
    pub id: String,
    pub pool: String,
    pub node_class: Option<String>,
    /// Bumped by every write; conditional writes compare it.
    pub version: u64,
    pub created_at: Timestamp,
    /// Launch options, cheapest first.
    pub options: Vec<PricedOffering>,
    pub labels: BTreeMap<String, String>,
    /// The NodePool template's `metadata.annotations` when the claim was
    /// made, as Karpenter's NodeClaim carries them (repair reads
    /// `karpenter.sh/do-not-repair` here too); registration puts the pool's
    /// on the Node (`lifecycle::node_metadata`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Taints the node registers with.
    pub taints: Vec<Taint>,
    pub kubelet: KubeletConfig,
    /// Pods we plan to bind to this node.
    pub pods: Vec<PodKey>,
    /// Sum of those pods' requests.
    pub requests: Usage,
    /// What the claim counts against its pool's limits: the largest capacity
    /// among its options until launched, then the actual type's capacity.
    pub reservation: Usage,
    #[serde(default)]
    pub launch_attempts: u32,
    #[serde(default)]
    pub instance: Option<ClaimInstance>,
    #[serde(default)]
    pub running_at: Option<Timestamp>,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub registered_at: Option<Timestamp>,
    /// What drift compares against: the hashes of the NodePool template and
    /// the NodeClass at launch, and what the instance was launched with.
    #[serde(default)]
    pub stamp: LaunchStamp,
    /// What the disruption decision tracks between invocations.
    #[serde(default)]
    pub disruption: DisruptionState,
}

/// The configuration a claim was launched from, as drift needs it. Every
/// field is optional: a claim written before a field existed (or whose launch
/// did not report it) is simply not compared on that field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchStamp {
    /// `config::hash::pool_hash` of the NodePool at the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodepool_hash: Option<String>,
    /// `config::hash::class_hash` of the NodeClass at the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodeclass_hash: Option<String>,
    /// The AMI the instance booted (set from the launch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The subnet the instance is in (set from the launch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// The security groups of the instance (set from the launch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
}

/// Disruption bookkeeping of a registered claim, updated by
/// `disruption::observe` (so that "empty for 30 s" is measured from when
/// the last pod left, across invocations).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisruptionState {
    /// A fingerprint of the reschedulable pods last seen on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_fingerprint: Option<String>,
    /// When that set of pods was first seen (a pod arrived or left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_at: Option<Timestamp>,
    /// When the node was first seen without reschedulable pods; `None` while it has some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_since: Option<Timestamp>,
    /// Repairs of this node rolled back because their replacement failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repair_failures: u32,
    /// No repair of this node before this time (after a rolled-back one:
    /// [`repair_backoff`] of `repair_failures`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair_retry_at: Option<Timestamp>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How long a node waits for its next repair after `failures` repairs
/// rolled back in a row: 5 minutes, doubling, at most an hour — a pool
/// whose replacements keep failing (no capacity, a bad AMI) is not asked
/// for a new one on every pass.
pub fn repair_backoff(failures: u32) -> SignedDuration {
    let mins = 5i64.saturating_mul(1i64 << failures.saturating_sub(1).min(10));
    SignedDuration::from_mins(mins.min(60))
}

impl Claim {
    pub fn phase(&self) -> Phase {
        match (&self.instance, &self.node_name) {
            (None, _) => Phase::Pending,
            (Some(_), None) => Phase::Launched,
            (Some(_), Some(_)) => Phase::Registered,
        }
    }

    /// The same claim, one version later (for a conditional update).
    pub fn next(&self) -> Claim {
        let mut next = self.clone();
        next.version += 1;
        next
    }

    /// The client token for CreateFleet: stable per claim, so a retried
    /// launch returns the instance the first attempt made.
    pub fn client_token(&self) -> String {
        format!("nodewright-{}", self.id)
    }

    pub fn instance_id(&self) -> Option<&str> {
        self.instance.as_ref().map(|i| i.id.as_str())
    }
}

/// A resource vector as a name → amount map (`cpu` in millicores, `memory`
/// in bytes, …), the form the Store keeps and limits compare.
pub fn usage_of(r: &Resources) -> Usage {
    let mut u = Usage::new();
    for (name, v) in [
        (resources::CPU, r.cpu_millis),
        (resources::MEMORY, r.memory_bytes),
        (resources::PODS, r.pods),
        (resources::EPHEMERAL_STORAGE, r.ephemeral_bytes),
    ] {
        if v != 0 {
            u.insert(name.to_owned(), v);
        }
    }
    for (name, v) in &r.extended {
        if *v != 0 {
            u.insert(name.clone(), *v);
        }
    }
    u
}

/// A node's reservation: its capacity plus one node.
pub fn reservation_of(capacity: &Resources) -> Usage {
    let mut u = usage_of(capacity);
    u.insert(NODES.to_owned(), 1);
    u
}

/// The `nodes` pseudo-resource of NodePool limits.
pub const NODES: &str = "nodes";

/// Adds `b` to `a`, resource by resource.
pub fn add_usage(a: &mut Usage, b: &Usage) {
    for (k, v) in b {
        *a.entry(k.clone()).or_insert(0) += v;
    }
}

/// Subtracts `b` from `a`, resource by resource, dropping zeros.
pub fn sub_usage(a: &mut Usage, b: &Usage) {
    for (k, v) in b {
        *a.entry(k.clone()).or_insert(0) -= v;
    }
    a.retain(|_, v| *v != 0);
}

/// The first limited resource that `used + extra` would exceed.
pub fn exceeded_limit(
    limits: &crate::config::Limits,
    used: &Usage,
    extra: &Usage,
) -> Option<String> {
    limits.resources.iter().find_map(|(name, limit)| {
        let after = used.get(name).copied().unwrap_or(0) + extra.get(name).copied().unwrap_or(0);
        (extra.get(name).copied().unwrap_or(0) > 0 && after > *limit).then(|| name.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;

    #[test]
    fn limits_compare_only_what_grows() {
        let mut limits = Limits::default();
        limits.resources.insert("cpu".into(), 1_000_000);
        limits.resources.insert(NODES.into(), 2);
        let used: Usage = [("cpu".to_owned(), 999_000), (NODES.to_owned(), 1)].into();
        let one_cpu: Usage = [("cpu".to_owned(), 1000), (NODES.to_owned(), 1)].into();
        assert_eq!(exceeded_limit(&limits, &used, &one_cpu), None);
        let two_cpu: Usage = [("cpu".to_owned(), 2000)].into();
        assert_eq!(
            exceeded_limit(&limits, &used, &two_cpu).as_deref(),
            Some("cpu")
        );
        // Already over a limit (the user lowered it): shrinking is still allowed.
        let over: Usage = [("cpu".to_owned(), 2_000_000)].into();
        let shrink: Usage = [("cpu".to_owned(), -1000)].into();
        assert_eq!(exceeded_limit(&limits, &over, &shrink), None);
    }

    #[test]
    fn usage_round_trip() {
        let mut a = Usage::new();
        let b: Usage = [("cpu".to_owned(), 4000), ("memory".to_owned(), 8)].into();
        add_usage(&mut a, &b);
        add_usage(&mut a, &b);
        sub_usage(&mut a, &b);
        assert_eq!(a, b);
        sub_usage(&mut a, &b);
        assert!(a.is_empty());
    }
}
