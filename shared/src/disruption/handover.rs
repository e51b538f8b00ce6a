//! Handing a pool over from Karpenter (`nodewright config import --adopt
//! replace`): the nodes Karpenter launched for a pool that nodewright now
//! serves are replaced a few at a time, within the pool's disruption
//! budgets for `Drifted`, as drift would replace nodewright's own.
//!
//! nodewright never drains nor terminates what it did not launch. It
//! deletes the **Node**; Karpenter's termination finalizer
//! (`karpenter.sh/termination`, on every Node Karpenter manages) makes
//! Karpenter taint it, drain it through the Eviction API (honouring
//! PodDisruptionBudgets), terminate its instance and only then let the
//! Node go — what `kubectl delete node` does on a Karpenter cluster. The
//! pods go pending and nodewright launches for them (Karpenter, its pool's
//! limits at zero, launches nothing). A Node without the finalizer is left
//! alone: deleting it would drain nothing.
//!
//! A node of the pool counts against the budget from the moment it is
//! deleted until it is gone, so a removal Karpenter does not finish (it is
//! not running) holds the next ones: never all at once.
//!
//! No I/O, no clock: `now` is the time.

use k8s_openapi::api::core::v1::{Node, Pod};

use super::snapshot::{DISRUPTED_TAINT_KEY, InFlight, claim_of};
use crate::config::settings::{KARPENTER_NODES_ANNOTATION, KarpenterNodes};
use crate::config::{DisruptionReason, NodePool};
use crate::ports::Timestamp;
use crate::provisioning::Claim;
use crate::scheduling::labels;
use crate::termination::drain::DO_NOT_DISRUPT;

/// The finalizer Karpenter puts on the Nodes it manages: deleting such a
/// Node makes Karpenter drain it and terminate its instance first.
pub const KARPENTER_TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// What to do with the Karpenter nodes of one pool now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    pub pool: String,
    /// Nodes to delete now (oldest first), so that Karpenter drains them.
    pub delete: Vec<String>,
    /// Karpenter's nodes of the pool still there (being deleted included).
    pub remaining: usize,
    /// Why no (more) node is deleted now, worded for the user.
    pub waiting: Option<String>,
}

/// What a pool says about Karpenter's nodes (`none` when unset).
pub fn karpenter_nodes(pool: &NodePool) -> KarpenterNodes {
    pool.annotations
        .get(KARPENTER_NODES_ANNOTATION)
        .and_then(|v| KarpenterNodes::parse(v))
        .unwrap_or_default()
}

/// Whether `node` is one Karpenter launched for `pool`: labelled with the
/// pool, no claim of ours, Karpenter's termination finalizer on it.
fn is_karpenters(node: &Node, pool: &str, claims: &[Claim]) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .is_some_and(|p| p == pool);
    labelled && claim_of(node, claims).is_none() && has_finalizer(node)
}

fn has_finalizer(node: &Node) -> bool {
    node.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == KARPENTER_TERMINATION_FINALIZER)
}

/// Going already: deleted, or tainted by Karpenter's own disruption.
fn is_going(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_some()
        || node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

fn name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// A pod on the node asks not to be disrupted (`karpenter.sh/do-not-disrupt`).
fn blocked(node: &Node, pods: &[Pod]) -> Option<String> {
    let annotated = |a: Option<&std::collections::BTreeMap<String, String>>| {
        a.and_then(|a| a.get(DO_NOT_DISRUPT))
            .is_some_and(|v| v == "true")
    };
    if annotated(node.metadata.annotations.as_ref()) {
        return Some(format!("node {} is annotated {DO_NOT_DISRUPT}", name(node)));
    }
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name(node)))
        .find(|p| annotated(p.metadata.annotations.as_ref()))
        .map(|p| {
            format!(
                "pod {}/{} on {} is annotated {DO_NOT_DISRUPT}",
                p.metadata.namespace.as_deref().unwrap_or("default"),
                p.metadata.name.as_deref().unwrap_or_default(),
                name(node)
            )
        })
}

/// For every pool annotated `replace`, which of Karpenter's nodes of it to
/// delete now. The budget counts the pool's nodes of both (nodewright's
/// registered ones and Karpenter's); those going (Karpenter's deleted or
/// tainted, nodewright's removals in flight) count against it.
pub fn handover(
    pools: &[NodePool],
    nodes: &[Node],
    pods: &[Pod],
    claims: &[Claim],
    in_flight: &[InFlight],
    now: Timestamp,
) -> Vec<Handover> {
    let mut out = Vec::new();
    for pool in pools {
        if karpenter_nodes(pool) != KarpenterNodes::Replace {
            continue;
        }
        let mut theirs: Vec<&Node> = nodes
            .iter()
            .filter(|n| is_karpenters(n, &pool.name, claims))
            .collect();
        if theirs.is_empty() {
            continue;
        }
        let ours: Vec<&Node> = nodes
            .iter()
            .filter(|n| claim_of(n, claims).is_some_and(|c| c.pool == pool.name))
            .collect();
        let ours_going = in_flight
            .iter()
            .filter(|f| ours.iter().any(|n| name(n) == f.node))
            .count();
        let total = ours.len() + theirs.len();
        let going = ours_going + theirs.iter().filter(|n| is_going(n)).count();
        let allowed = pool
            .disruption
            .allowed_disruptions(DisruptionReason::Drifted, total, now);
        let mut room = allowed.saturating_sub(going);
        theirs.sort_by_key(|n| {
            (
                n.metadata.creation_timestamp.as_ref().map(|t| t.0),
                name(n).to_owned(),
            )
        });
        let mut delete = Vec::new();
        let mut waiting = None;
        for n in theirs.iter().filter(|n| !is_going(n)) {
            if room == 0 {
                waiting.get_or_insert_with(|| {
                    format!(
                        "budget for Drifted in NodePool {} ({allowed} of {total} nodes, {going} going)",
                        pool.name
                    )
                });
                break;
            }
            if let Some(why) = blocked(n, pods) {
                waiting.get_or_insert(why);
                continue;
            }
            delete.push(name(n).to_owned());
            room -= 1;
        }
        out.push(Handover {
            pool: pool.name.clone(),
            delete,
            remaining: theirs.len(),
            waiting,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::NodePool;

    fn pool(name: &str, annotation: Option<&str>, budget: &str) -> NodePool {
        let spec: crate::config::NodePoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
            }},
            "disruption": {"budgets": [{"nodes": budget}]}
        }))
        .expect("nodepool spec");
        let mut p = NodePool::from_spec(name, &spec).expect("valid nodepool");
        if let Some(a) = annotation {
            p.annotations
                .insert(KARPENTER_NODES_ANNOTATION.to_owned(), a.to_owned());
        }
        p
    }

    fn node(name: &str, pool: &str, finalizer: bool, created: i64) -> Node {
        let mut labels = BTreeMap::new();
        labels.insert(labels::NODEPOOL.to_owned(), pool.to_owned());
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "labels": labels,
                "finalizers": if finalizer { vec![KARPENTER_TERMINATION_FINALIZER] } else { vec![] },
                "creationTimestamp": Timestamp::from_second(created).expect("time").to_string(),
            },
            "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")}
        }))
        .expect("node")
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_000_000).expect("time")
    }

    #[test]
    fn a_pool_left_at_none_or_unannotated_hands_nothing_over() {
        let nodes = [node("k1", "web", true, 1)];
        for p in [pool("web", None, "100%"), pool("web", Some("none"), "100%")] {
            assert!(handover(&[p], &nodes, &[], &[], &[], now()).is_empty());
        }
    }

    #[test]
    fn karpenters_nodes_are_deleted_oldest_first_within_the_budget() {
        let nodes = [
            node("k-new", "web", true, 30),
            node("k-old", "web", true, 10),
            node("k-mid", "web", true, 20),
            node("other-pool", "legacy", true, 5),
        ];
        let h = handover(
            &[pool("web", Some("replace"), "1")],
            &nodes,
            &[],
            &[],
            &[],
            now(),
        );
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].delete, vec!["k-old".to_owned()]);
        assert_eq!(h[0].remaining, 3);
        assert!(
            h[0].waiting
                .as_deref()
                .is_some_and(|w| w.contains("budget"))
        );
    }

    #[test]
    fn a_node_being_deleted_holds_the_next_until_it_is_gone() {
        let mut going = node("k-old", "web", true, 10);
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        let nodes = [going, node("k-new", "web", true, 30)];
        let h = handover(
            &[pool("web", Some("replace"), "1")],
            &nodes,
            &[],
            &[],
            &[],
            now(),
        );
        assert!(h[0].delete.is_empty(), "{h:?}");
        assert_eq!(h[0].remaining, 2);
    }

    #[test]
    fn a_node_without_karpenters_finalizer_or_of_another_pool_is_never_deleted() {
        let nodes = [node("bare", "web", false, 1), node("k", "legacy", true, 1)];
        let h = handover(
            &[pool("web", Some("replace"), "100%")],
            &nodes,
            &[],
            &[],
            &[],
            now(),
        );
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn a_do_not_disrupt_pod_keeps_its_node_and_says_so() {
        let nodes = [node("k1", "web", true, 1), node("k2", "web", true, 2)];
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "annotations": {DO_NOT_DISRUPT: "true"}},
            "spec": {"nodeName": "k1", "containers": []}
        }))
        .expect("pod");
        let h = handover(
            &[pool("web", Some("replace"), "100%")],
            &nodes,
            &[pod],
            &[],
            &[],
            now(),
        );
        assert_eq!(h[0].delete, vec!["k2".to_owned()]);
        assert!(
            h[0].waiting
                .as_deref()
                .is_some_and(|w| w.contains("default/p")),
            "{h:?}"
        );
    }
}
