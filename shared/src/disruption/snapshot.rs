//! What the disruption decision looks at, and the per-node facts derived
//! from it once (pods, price, age, health, blockers).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::decision::Reason;
use crate::config::{NodeClass, NodePool, Settings};
use crate::model::claim::CLAIM_LABEL;
use crate::model::{
    Claim, CloudCatalog, DISRUPTED_TAINT_KEY, OfferingKey, PodKey, ResolvedClass, Timestamp,
};
use crate::scheduling::labels;
use crate::scheduling::volumes::VolumeIndex;

/// `"true"` or a duration, on a pod or a node.
pub use crate::termination::drain::DO_NOT_DISRUPT;
/// A pod's deletion cost (ReplicaSet scale-down order), part of its eviction cost.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The annotation of static (mirror) pods.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";

/// A removal already under way (the Store's command), counted against budgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub node: String,
    pub claim_id: String,
    pub reason: Reason,
    /// A replacement was (or is being) launched for its pods. When false,
    /// its pods are still looking for room and are placed in every
    /// simulation, so no other move counts on the room they will take.
    pub replace: bool,
    /// The claims launched (or to be launched) for its pods: while those
    /// pods are still on the node, such a claim's node is where they are
    /// headed (Karpenter's nominated node), not a candidate.
    pub replacements: Vec<String>,
}

/// Knobs of the decision that are not user settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Score every consolidation move's savings against its pod disruption
    /// (Karpenter 1.14's `Balanced`, with its k = 2) on top of the threshold.
    pub balanced: bool,
    /// The most candidates one multi-node consolidation looks at (Karpenter's 100).
    pub max_multi_node: usize,
    /// The most candidates single-node consolidation evaluates per decision.
    pub max_single_node: usize,
    /// Seconds between deciding a voluntary move and acting on it, when it is re-validated.
    pub validation_delay_secs: i64,
    /// Run the consolidation methods. A caller that knows nothing they look
    /// at changed since a pass that found no move may skip them (their
    /// solves are most of a decision's cost); the other methods always run.
    pub consolidation: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            balanced: true,
            max_multi_node: 100,
            max_single_node: 100,
            validation_delay_secs: 15,
            consolidation: true,
        }
    }
}

/// Everything the decision reads. Borrowed, so a handler builds it from what
/// it fetched without copying.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub now: Timestamp,
    pub nodes: &'a [Node],
    /// Pods bound to nodes (others are ignored).
    pub pods: &'a [Pod],
    /// Pods with no node yet. A node one of them would be placed on is
    /// nominated for it (Karpenter's nomination): no voluntary candidate.
    pub pending: &'a [Pod],
    pub claims: &'a [Claim],
    pub pools: &'a [NodePool],
    /// Names of NodePools that exist but failed validation: their nodes are
    /// left alone (not taken for nodes of a deleted pool).
    pub invalid_pools: &'a [String],
    pub classes: &'a [NodeClass],
    /// Per NodeClass name: what it resolves to now.
    pub resolved: &'a BTreeMap<String, ResolvedClass>,
    pub catalog: &'a CloudCatalog,
    pub pdbs: &'a [PodDisruptionBudget],
    pub daemon_sets: &'a [DaemonSet],
    pub unavailable: &'a [OfferingKey],
    pub in_flight: &'a [InFlight],
    /// The CapacityBuffers' virtual pods (`provisioning::buffers`): placed
    /// on the cluster, a node holding some is not empty, and a move must
    /// find them room again.
    pub buffers: &'a [Pod],
    /// The PVCs, PVs and StorageClasses the candidates' pods use (zonal volumes pin pods).
    pub volumes: &'a VolumeIndex,
    pub settings: &'a Settings,
    pub tuning: Tuning,
    /// Seeds the ids of replacement claims (the only randomness).
    pub seed: u64,
}

/// One Node as the methods see it.
#[derive(Debug, Clone)]
pub struct NodeFacts<'a> {
    pub name: String,
    pub node: &'a Node,
    /// Our claim for it; `None`: not a node we launched (never disrupted).
    pub claim: Option<&'a Claim>,
    pub pool: Option<&'a NodePool>,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    /// Every pod on the node that is not finished.
    pub pods: Vec<&'a Pod>,
    /// The pods a drain would evict and that need room elsewhere: not
    /// DaemonSet pods, not static pods, not being deleted (but for
    /// StatefulSet pods, re-created only once gone).
    pub reschedulable: Vec<&'a Pod>,
    pub created_at: Timestamp,
    /// `Some(since)` when `Ready` is False or Unknown since then.
    pub unhealthy_since: Option<Timestamp>,
    /// Being disrupted already: an in-flight command, our taint, or deleting.
    pub disrupting: Option<String>,
    pub ready: bool,
}

impl NodeFacts<'_> {
    pub fn pod_keys(&self) -> Vec<PodKey> {
        self.reschedulable.iter().map(|p| PodKey::of(p)).collect()
    }

    /// The offering the node runs on.
    pub fn offering(&self) -> OfferingKey {
        OfferingKey {
            capacity_type: self.capacity_type.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
        }
    }

    pub fn is_spot(&self) -> bool {
        self.capacity_type == labels::CAPACITY_TYPE_SPOT
    }
}

/// The node a pod is bound to, if any.
pub(super) fn node_of_pod(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Succeeded or Failed: holds no room.
pub(super) fn finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Owned by a DaemonSet or a static pod: goes away with the node, needs no room elsewhere.
pub fn is_node_bound(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" || o.kind == "Node")
        || p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD))
}

/// Owned by a StatefulSet: such a pod is re-created only once it is gone,
/// so even terminating it still needs room (Karpenter counts it as
/// reschedulable: its node is not empty).
pub fn is_stateful(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "StatefulSet")
}

/// The claim of a node: by provider id, then by the nodeclaim label, then by name.
pub fn claim_of<'a>(node: &Node, claims: &'a [Claim]) -> Option<&'a Claim> {
    let provider = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    let name = node.metadata.name.as_deref();
    let label = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLAIM_LABEL))
        .map(String::as_str);
    claims
        .iter()
        .find(|c| {
            provider.is_some() && c.instance.as_ref().map(|i| i.provider_id.as_str()) == provider
        })
        .or_else(|| claims.iter().find(|c| label == Some(c.id.as_str())))
        .or_else(|| {
            claims
                .iter()
                .find(|c| c.node_name.is_some() && c.node_name.as_deref() == name)
        })
}

/// The facts of every node, sorted by name.
pub fn node_facts<'a>(s: &Snapshot<'a>) -> Vec<NodeFacts<'a>> {
    let mut by_node: BTreeMap<&str, Vec<&'a Pod>> = BTreeMap::new();
    for p in s.pods {
        if let Some(n) = node_of_pod(p)
            && !finished(p)
        {
            by_node.entry(n).or_default().push(p);
        }
    }
    let in_flight: BTreeMap<&str, &InFlight> =
        s.in_flight.iter().map(|f| (f.node.as_str(), f)).collect();
    let mut out: Vec<NodeFacts<'a>> = s
        .nodes
        .iter()
        .map(|node| {
            let name = node.metadata.name.clone().unwrap_or_default();
            let node_labels = node.metadata.labels.clone().unwrap_or_default();
            let claim = claim_of(node, s.claims);
            let pool = claim.and_then(|c| s.pools.iter().find(|p| p.name == c.pool));
            let instance = claim.and_then(|c| c.instance.as_ref());
            let label = |k: &str| node_labels.get(k).cloned().unwrap_or_default();
            let instance_type =
                instance.map_or_else(|| label(labels::INSTANCE_TYPE), |i| i.instance_type.clone());
            let zone = instance.map_or_else(|| label(labels::ZONE), |i| i.zone.clone());
            let capacity_type =
                instance.map_or_else(|| label(labels::CAPACITY_TYPE), |i| i.capacity_type.clone());
            let price = instance.map(|i| i.price).unwrap_or_else(|| {
                s.catalog
                    .offerings
                    .iter()
                    .find(|o| {
                        o.instance_type == instance_type
                            && o.zone == zone
                            && o.capacity_type == capacity_type
                    })
                    .map_or(0.0, |o| o.price)
            });
            let pods = by_node.remove(name.as_str()).unwrap_or_default();
            let reschedulable = pods
                .iter()
                .copied()
                .filter(|p| {
                    !is_node_bound(p) && (p.metadata.deletion_timestamp.is_none() || is_stateful(p))
                })
                .collect();
            let created_at = claim
                .map(|c| c.created_at)
                .or_else(|| node.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or(s.now);
            let ready_condition = node
                .status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
            let ready = ready_condition.is_some_and(|c| c.status == "True");
            let unhealthy_since = ready_condition
                .filter(|c| c.status == "False" || c.status == "Unknown")
                .map(|c| c.last_transition_time.as_ref().map_or(s.now, |t| t.0));
            let tainted = node
                .spec
                .as_ref()
                .and_then(|sp| sp.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY));
            let disrupting = if let Some(f) = in_flight.get(name.as_str()) {
                Some(format!("already being disrupted ({})", f.reason.as_str()))
            } else if node.metadata.deletion_timestamp.is_some() {
                Some("being deleted".to_owned())
            } else if tainted {
                Some(format!(
                    "already being disrupted ({DISRUPTED_TAINT_KEY} taint)"
                ))
            } else {
                None
            };
            NodeFacts {
                name,
                node,
                claim,
                pool,
                instance_type,
                zone,
                capacity_type,
                price,
                pods,
                reschedulable,
                created_at,
                unhealthy_since,
                disrupting,
                ready,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
