//! Which pods a drain acts on now, and how. Pure.
//!
//! Karpenter's order: pods are evicted in tiers — non-critical non-daemon,
//! non-critical daemon, critical non-daemon, critical daemon (critical =
//! `system-cluster-critical` / `system-node-critical`) — and a tier starts
//! only when the ones before it are gone. Pods that are Pending (or
//! finished) are deleted without asking their PodDisruptionBudgets; pods
//! that tolerate the `karpenter.sh/disrupted` taint stay (they asked to);
//! static (mirror) pods cannot be evicted and stay too. After the deadline,
//! whatever is left is deleted regardless of PDBs.

use k8s_openapi::api::core::v1::Pod;

use crate::ports::{PodKey, Timestamp};
use crate::scheduling::taints::{Effect, Taint, Toleration};

/// The taint a node being removed carries, so nothing new lands on it.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";

pub fn disrupted_taint() -> Taint {
    Taint::new(DISRUPTED_TAINT_KEY, "", Effect::NoSchedule)
}

/// What to do with the pods of a node being drained, now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// Evict through the Eviction API (PDBs decide).
    pub evict: Vec<PodKey>,
    /// Delete without PDB checks, with this grace period (`None`: the pod's own).
    pub delete: Vec<PodKey>,
    pub delete_grace: Option<i64>,
    /// Already terminating: wait for them to go.
    pub terminating: usize,
    /// Pods in later tiers, not touched until the current tier is gone.
    pub later: usize,
    /// Pods left on purpose (tolerate the disrupted taint, mirror pods).
    pub staying: usize,
}

impl DrainPlan {
    /// Nothing left to evict, delete or wait for: the node is drained.
    pub fn is_drained(&self) -> bool {
        self.evict.is_empty() && self.delete.is_empty() && self.terminating == 0 && self.later == 0
    }
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn is_daemon(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// A static pod's mirror: the kubelet owns it, the API cannot evict it.
fn is_mirror(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
        || p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Node")
}

fn is_critical(p: &Pod) -> bool {
    matches!(
        p.spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref()),
        Some("system-cluster-critical" | "system-node-critical")
    )
}

/// The pod tolerates `karpenter.sh/disrupted:NoSchedule`, so draining it
/// would only bring it back: Karpenter leaves such pods alone.
pub fn tolerates_disruption(p: &Pod) -> bool {
    let taint = disrupted_taint();
    p.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .filter_map(|t| Toleration::from_k8s(t).ok())
                .any(|t| t.tolerates(&taint))
        })
}

/// The eviction tier: 0 non-critical non-daemon … 3 critical daemon.
fn tier(p: &Pod) -> u8 {
    u8::from(is_critical(p)) * 2 + u8::from(is_daemon(p))
}

/// The drain's next move for the pods on a node (as `Cluster::pods_on_node`
/// lists them: bound there, not finished).
pub fn plan(pods: &[Pod], now: Timestamp, deadline: Option<Timestamp>) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let past_deadline = deadline.is_some_and(|d| now >= d);
    let mut candidates: Vec<&Pod> = Vec::new();
    for p in pods {
        if is_mirror(p) || tolerates_disruption(p) {
            plan.staying += 1;
        } else if p.metadata.deletion_timestamp.is_some() {
            plan.terminating += 1;
        } else if past_deadline || matches!(phase(p), "Pending" | "Succeeded" | "Failed") {
            plan.delete.push(PodKey::of(p));
        } else {
            candidates.push(p);
        }
    }
    if past_deadline {
        // The node goes now; a grace period would only delay its termination.
        plan.delete_grace = Some(0);
    }
    // Pods already terminating hold their tier open, as Karpenter waits for them.
    let terminating_tiers = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_some() && !is_mirror(p) && !tolerates_disruption(p)
        })
        .map(tier);
    let Some(current) = candidates
        .iter()
        .map(|p| tier(p))
        .chain(terminating_tiers)
        .min()
    else {
        return plan;
    };
    for p in candidates {
        if tier(p) == current {
            plan.evict.push(PodKey::of(p));
        } else {
            plan.later += 1;
        }
    }
    plan.evict.sort();
    plan.delete.sort();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus, Toleration as K8sToleration};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn pod(name: &str, phase: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.to_owned());
        p.metadata.namespace = Some("default".to_owned());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.spec = Some(PodSpec {
            node_name: Some("n1".to_owned()),
            ..Default::default()
        });
        p.status = Some(PodStatus {
            phase: Some(phase.to_owned()),
            ..Default::default()
        });
        p
    }

    fn daemon(mut p: Pod) -> Pod {
        p.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            name: "ds".into(),
            ..Default::default()
        }]);
        p
    }

    fn critical(mut p: Pod) -> Pod {
        p.spec
            .get_or_insert_with(Default::default)
            .priority_class_name = Some("system-node-critical".to_owned());
        p
    }

    fn names(keys: &[PodKey]) -> Vec<&str> {
        keys.iter().map(|k| k.name.as_str()).collect()
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    #[test]
    fn tiers_go_one_after_the_other() {
        let pods = vec![
            critical(daemon(pod("cd", "Running"))),
            daemon(pod("d", "Running")),
            pod("a", "Running"),
            critical(pod("c", "Running")),
        ];
        let p = plan(&pods, t(0), None);
        assert_eq!(names(&p.evict), ["a"]);
        assert_eq!(p.later, 3);
        let p = plan(&pods[..2], t(0), None);
        assert_eq!(names(&p.evict), ["d"]);
        let p = plan(&[pods[0].clone(), pods[3].clone()], t(0), None);
        assert_eq!(names(&p.evict), ["c"]);
        let p = plan(&pods[..1], t(0), None);
        assert_eq!(names(&p.evict), ["cd"]);
        assert!(!p.is_drained());
    }

    #[test]
    fn a_terminating_pod_holds_its_tier_open() {
        let mut going = pod("a", "Running");
        going.metadata.deletion_timestamp = Some(Time(t(0)));
        let p = plan(&[going, daemon(pod("d", "Running"))], t(1), None);
        assert!(p.evict.is_empty());
        assert_eq!((p.terminating, p.later), (1, 1));
    }

    #[test]
    fn pending_and_finished_pods_are_deleted_without_pdb_checks() {
        let p = plan(&[pod("p", "Pending"), pod("r", "Running")], t(0), None);
        assert_eq!(names(&p.delete), ["p"]);
        assert_eq!(names(&p.evict), ["r"]);
        assert_eq!(p.delete_grace, None);
    }

    #[test]
    fn after_the_deadline_everything_left_is_deleted_at_once() {
        let p = plan(
            &[pod("a", "Running"), critical(daemon(pod("cd", "Running")))],
            t(10),
            Some(t(10)),
        );
        assert_eq!(names(&p.delete), ["a", "cd"]);
        assert!(p.evict.is_empty());
        assert_eq!(p.delete_grace, Some(0));
        let before = plan(&[pod("a", "Running")], t(9), Some(t(10)));
        assert_eq!(names(&before.evict), ["a"]);
    }

    #[test]
    fn pods_that_tolerate_the_disrupted_taint_and_mirror_pods_stay() {
        let mut tolerant = pod("tol", "Running");
        tolerant
            .spec
            .get_or_insert_with(Default::default)
            .tolerations = Some(vec![K8sToleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
        let mut mirror = pod("static", "Running");
        mirror.metadata.annotations =
            Some([("kubernetes.io/config.mirror".to_owned(), "x".to_owned())].into());
        let p = plan(&[tolerant, mirror], t(0), Some(t(0)));
        assert!(p.is_drained());
        assert_eq!(p.staying, 2);
    }
}
