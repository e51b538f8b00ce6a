//! Which pods a drain acts on now, and how. Pure.
//!
//! Karpenter's order: pods are evicted in tiers — non-critical non-daemon,
//! non-critical daemon, critical non-daemon, critical daemon (critical =
//! `system-cluster-critical` / `system-node-critical`) — and a tier starts
//! only when the ones before it are gone. Pods that are Pending are deleted
//! without asking their PodDisruptionBudgets; pods that tolerate the
//! `karpenter.sh/disrupted` taint stay (they asked to); static (mirror) pods
//! cannot be evicted and stay too; finished pods and pods stuck terminating
//! a minute past their grace period are not waited for.
//!
//! A pod with an active `karpenter.sh/do-not-disrupt` annotation is never
//! evicted: it holds its tier (and so the node) until it finishes or its
//! protection ends. Only a deadline overrides it.
//!
//! With a deadline (the NodePool's `terminationGracePeriod`, a spot notice,
//! a scheduled change), a pod whose own grace period would run past it is
//! deleted — whatever its PDBs and annotation say, across every tier — with
//! the time left to the deadline as its grace period, at least 1 s: the
//! pod is told to stop while the instance still runs it, and never deleted
//! with grace 0 (which removes it from the API at once while its
//! containers may still run — a StatefulSet could then start a second copy
//! of the same identity). A pod already terminating past the deadline is
//! deleted again with the shorter grace.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use crate::config::disruption::parse_duration;
use crate::model::{DISRUPTED_TAINT_KEY, PodKey, SignedDuration, Timestamp};
use crate::scheduling::selector::LabelSelector;
use crate::scheduling::taints::{Effect, Taint, Toleration};
/// `"true"` or a duration from the pod's start (or the node's creation).
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// A pod's grace period when its spec gives none (the API server's default).
pub const DEFAULT_POD_GRACE: SignedDuration = SignedDuration::from_secs(30);
/// A pod still terminating this long after its `deletionTimestamp` is not
/// waited for (its kubelet is gone or stuck), as Karpenter does.
pub const STUCK_TERMINATING_AFTER: SignedDuration = SignedDuration::from_mins(1);
/// The shortest grace period a deletion at a deadline gets: never 0.
pub const MIN_DEADLINE_GRACE: i64 = 1;

/// The label a node gets as its drain starts, so cloud load balancers
/// stop sending it traffic (the service controller leaves such nodes out
/// of their targets) before its pods go; the value is Karpenter's.
pub const EXCLUDE_FROM_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
pub const EXCLUDE_FROM_LOAD_BALANCERS_VALUE: &str = "karpenter";

pub fn disrupted_taint() -> Taint {
    Taint::new(DISRUPTED_TAINT_KEY, "", Effect::NoSchedule)
}

/// Until when a `karpenter.sh/do-not-disrupt` value counted from `start`
/// protects: `None` = not protecting, `Some(None)` = for good. `"true"` is
/// for good; a Go duration (`"30m"`) protects until `start` + it; `"false"`
/// and an empty value protect nothing; any other value protects for good
/// (the user asked not to disrupt; we do not guess — Karpenter ignores
/// such a value, a deliberate difference).
pub fn protected_until(value: &str, start: Timestamp, now: Timestamp) -> Option<Option<Timestamp>> {
    match value.trim() {
        "true" => Some(None),
        "false" | "" => None,
        other => match parse_duration(other) {
            Ok(d) => {
                let until = start.checked_add(d).unwrap_or(Timestamp::MAX);
                (until > now).then_some(Some(until))
            }
            Err(_) => Some(None),
        },
    }
}

/// When a pod started, for a duration-valued do-not-disrupt: its
/// `status.startTime`; without one (not started yet) the protection runs
/// from `now`, i.e. it is still in force, as Karpenter fails safe.
pub fn pod_start(p: &Pod, now: Timestamp) -> Timestamp {
    p.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now, |t| t.0)
}

/// The pod's do-not-disrupt protection now (see [`protected_until`]).
pub fn pod_protection(p: &Pod, now: Timestamp) -> Option<Option<Timestamp>> {
    let value = p.metadata.annotations.as_ref()?.get(DO_NOT_DISRUPT)?;
    protected_until(value, pod_start(p, now), now)
}

/// What to do with the pods of a node being drained, now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// Evict through the Eviction API (PDBs decide).
    pub evict: Vec<PodKey>,
    /// Delete without PDB checks, with the pod's own grace period (Pending pods).
    pub delete: Vec<PodKey>,
    /// Delete at the deadline, whatever PDBs and annotations say, with
    /// `deadline_grace` seconds of grace.
    pub at_deadline: Vec<PodKey>,
    /// The time left to the deadline, at least [`MIN_DEADLINE_GRACE`].
    pub deadline_grace: i64,
    /// Already terminating: wait for them to go.
    pub terminating: usize,
    /// Protected by `karpenter.sh/do-not-disrupt`: never evicted, waited for.
    pub protected: usize,
    /// Pods in later tiers, not touched until the current tier is gone.
    pub later: usize,
    /// Pods left on purpose (tolerate the disrupted taint, mirror pods,
    /// finished pods, pods stuck terminating).
    pub staying: usize,
}

impl DrainPlan {
    /// Nothing left to evict, delete or wait for: the node is drained.
    pub fn is_drained(&self) -> bool {
        self.evict.is_empty()
            && self.delete.is_empty()
            && self.at_deadline.is_empty()
            && self.terminating == 0
            && self.protected == 0
            && self.later == 0
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
pub fn is_mirror(p: &Pod) -> bool {
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

/// The pod's own grace period (`terminationGracePeriodSeconds`, else the default).
pub fn pod_grace(p: &Pod) -> SignedDuration {
    p.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .map_or(DEFAULT_POD_GRACE, SignedDuration::from_secs)
}

/// Must the pod be deleted now to be gone by the deadline? A running pod:
/// once its own grace period would end past it. A terminating one: when
/// its deletion ends past the deadline (and a deletion now can shorten it).
fn due_at_deadline(p: &Pod, now: Timestamp, deadline: Option<Timestamp>) -> bool {
    let Some(deadline) = deadline else {
        return false;
    };
    match &p.metadata.deletion_timestamp {
        Some(t) => t.0 > deadline && t.0 > now + SignedDuration::from_secs(MIN_DEADLINE_GRACE),
        None => now + pod_grace(p) > deadline,
    }
}

/// A pod the drain acts on (Karpenter's "drainable"): not one that stays
/// (it tolerates the disrupted taint, or is a static pod) nor one stuck
/// terminating past its grace period.
pub fn is_drainable(p: &Pod, now: Timestamp) -> bool {
    let stuck = p
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now > t.0 + STUCK_TERMINATING_AFTER);
    !(is_mirror(p) || tolerates_disruption(p) || stuck)
}

/// The node's VolumeAttachments (by name) a removal waits for before its
/// instance goes, so the volumes of the pods it drained detach cleanly and
/// can attach where those pods go next: every attachment of a persistent
/// volume except those the pods the drain leaves still use (they detach
/// when the node goes), and those of no persistent volume (inline), as
/// Karpenter does. `claims` are the PVCs that name the volumes of the pods
/// left (namespace, name → volume name); sorted.
pub fn awaited_attachments(
    attachments: &[VolumeAttachment],
    pods: &[Pod],
    claims: &BTreeMap<(String, String), String>,
    now: Timestamp,
) -> Vec<String> {
    let kept: BTreeSet<&str> = pods
        .iter()
        .filter(|p| !is_drainable(p, now))
        .flat_map(|p| {
            let ns = p
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned());
            crate::scheduling::volumes::claim_names(p)
                .into_iter()
                .filter_map(move |c| claims.get(&(ns.clone(), c)))
        })
        .map(String::as_str)
        .collect();
    let mut out: Vec<String> = attachments
        .iter()
        .filter(|a| {
            a.spec
                .source
                .persistent_volume_name
                .as_deref()
                .is_some_and(|pv| !kept.contains(pv))
        })
        .filter_map(|a| a.metadata.name.clone())
        .collect();
    out.sort();
    out
}

/// The drain's next move for the pods on a node (as `Cluster::pods_on_node`
/// lists them: bound there, not finished).
pub fn plan(pods: &[Pod], now: Timestamp, deadline: Option<Timestamp>) -> DrainPlan {
    let mut plan = DrainPlan {
        deadline_grace: deadline.map_or(MIN_DEADLINE_GRACE, |d| {
            d.duration_since(now).as_secs().max(MIN_DEADLINE_GRACE)
        }),
        ..DrainPlan::default()
    };
    let mut graceful: Vec<&Pod> = Vec::new();
    for p in pods {
        if !is_drainable(p, now) || matches!(phase(p), "Succeeded" | "Failed") {
            plan.staying += 1;
        } else if due_at_deadline(p, now, deadline) {
            // Every tier at once: a deadline is not held up by an earlier tier's PDB.
            plan.at_deadline.push(PodKey::of(p));
        } else {
            graceful.push(p);
        }
    }
    // Pods already terminating or protected hold their tier open, as
    // Karpenter waits for them.
    if let Some(current) = graceful.iter().map(|p| tier(p)).min() {
        for p in graceful {
            if tier(p) != current {
                plan.later += 1;
            } else if p.metadata.deletion_timestamp.is_some() {
                plan.terminating += 1;
            } else if pod_protection(p, now).is_some() {
                plan.protected += 1;
            } else if phase(p) == "Pending" {
                plan.delete.push(PodKey::of(p));
            } else {
                plan.evict.push(PodKey::of(p));
            }
        }
    }
    plan.evict.sort();
    plan.delete.sort();
    plan.at_deadline.sort();
    plan
}

/// How a drain pass sends its evictions so the API server never makes one
/// wait. An eviction of a pod a PodDisruptionBudget selects, while that
/// budget still allows disruptions, writes the budget's status; two such
/// evictions at once conflict, and the API server retries the loser only
/// after sleeping 500 ms (its `EvictionsRetry` backoff) — a 110-pod drain
/// with a budget allowing 5 spent most of its second there. So the pods of
/// one such budget go one after the other until it has allowed what it
/// allows (or refuses one); every other eviction — pods no budget selects,
/// pods of a budget that allows nothing now (refused without a write),
/// pods selected by more than one budget (refused by the API) — goes at
/// once, bounded only by the pass's concurrency.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictionOrder {
    /// Sent concurrently.
    pub at_once: Vec<PodKey>,
    /// One entry per budget that allows disruptions now.
    pub budgeted: Vec<BudgetedEvictions>,
}

/// The pods one budget selects, while it allows `allowed` more disruptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetedEvictions {
    /// `namespace/name` of the budget.
    pub budget: String,
    /// `status.disruptionsAllowed` as listed (at least 1 here).
    pub allowed: usize,
    /// In the plan's order: the first `allowed` are sent one after the
    /// other (a refusal ends that early); the rest are refused without a
    /// write, so they go at once.
    pub pods: Vec<PodKey>,
}

/// Orders `evict` (a [`DrainPlan`]'s evictions; `pods` are the node's pods,
/// for their labels) against the listed `budgets`. A pod missing from
/// `pods` goes at once.
pub fn eviction_order(
    evict: &[PodKey],
    pods: &[Pod],
    budgets: &[PodDisruptionBudget],
) -> EvictionOrder {
    let selectors: Vec<(&PodDisruptionBudget, LabelSelector)> = budgets
        .iter()
        .filter_map(|b| {
            // A budget without a selector (or one we cannot read) selects
            // nothing, as in policy/v1.
            let sel = b.spec.as_ref()?.selector.as_ref()?;
            Some((b, LabelSelector::from_k8s(sel).ok()?))
        })
        .collect();
    let empty = BTreeMap::new();
    let mut order = EvictionOrder::default();
    let mut groups: BTreeMap<String, BudgetedEvictions> = BTreeMap::new();
    for key in evict {
        let pod = pods.iter().find(|p| {
            p.metadata.name.as_deref() == Some(key.name.as_str())
                && p.metadata.namespace.as_deref().unwrap_or("default") == key.namespace
        });
        let matching: Vec<&PodDisruptionBudget> = pod
            .map(|p| {
                let labels = p.metadata.labels.as_ref().unwrap_or(&empty);
                selectors
                    .iter()
                    .filter(|(b, _)| {
                        b.metadata.namespace.as_deref().unwrap_or("default") == key.namespace
                    })
                    .filter(|(_, sel)| sel.matches(labels))
                    .map(|(b, _)| *b)
                    .collect()
            })
            .unwrap_or_default();
        // Only a pod exactly one budget selects can be evicted; the API
        // refuses one selected by several without writing anything.
        let single = match matching.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
        let allowed = single
            .and_then(|b| b.status.as_ref())
            .map_or(0, |s| usize::try_from(s.disruptions_allowed).unwrap_or(0));
        let Some(budget) = single.filter(|_| allowed > 0) else {
            order.at_once.push(key.clone());
            continue;
        };
        let budget = format!(
            "{}/{}",
            key.namespace,
            budget.metadata.name.as_deref().unwrap_or_default()
        );
        groups
            .entry(budget.clone())
            .or_insert_with(|| BudgetedEvictions {
                budget,
                allowed,
                pods: Vec::new(),
            })
            .pods
            .push(key.clone());
    }
    order.budgeted = groups.into_values().collect();
    order
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

    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should evict non-critical pods first"
    fn labelled(mut p: Pod, app: &str) -> Pod {
        p.metadata.labels = Some(BTreeMap::from([("app".to_owned(), app.to_owned())]));
        p
    }

    fn budget(namespace: &str, name: &str, app: &str, allowed: Option<i32>) -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, "minAvailable": 1},
            "status": allowed.map(|a| serde_json::json!({
                "disruptionsAllowed": a, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0
            })),
        }))
        .expect("budget")
    }

    #[test]
    fn evictions_under_a_budget_that_allows_some_go_one_by_one_and_the_rest_at_once() {
        let pods = vec![
            labelled(pod("free-a", "Running"), "free"),
            labelled(pod("web-b", "Running"), "web"),
            labelled(pod("web-a", "Running"), "web"),
            labelled(pod("db-a", "Running"), "db"),
            labelled(pod("both-a", "Running"), "both"),
            labelled(pod("blocked-a", "Running"), "blocked"),
            labelled(pod("fresh-a", "Running"), "fresh"),
            labelled(pod("cache-a", "Running"), "cache"),
        ];
        let budgets = vec![
            budget("default", "web", "web", Some(5)),
            budget("default", "db", "db", Some(1)),
            // Two budgets select `both`: the API refuses it without a write.
            budget("default", "both-1", "both", Some(3)),
            budget("default", "both-2", "both", Some(3)),
            budget("default", "blocked", "blocked", Some(0)),
            // No status yet: refused too.
            budget("default", "fresh", "fresh", None),
            // Another namespace's budget selects nothing here.
            budget("other", "cache", "cache", Some(2)),
        ];
        let mut evict: Vec<PodKey> = pods.iter().map(PodKey::of).collect();
        evict.sort();
        // A pod the listing no longer holds goes at once too.
        evict.push(PodKey {
            namespace: "default".into(),
            name: "gone".into(),
            uid: "uid-gone".into(),
        });
        let order = eviction_order(&evict, &pods, &budgets);
        assert_eq!(
            names(&order.at_once),
            [
                "blocked-a",
                "both-a",
                "cache-a",
                "free-a",
                "fresh-a",
                "gone"
            ]
        );
        let groups: Vec<(&str, usize, Vec<&str>)> = order
            .budgeted
            .iter()
            .map(|g| (g.budget.as_str(), g.allowed, names(&g.pods)))
            .collect();
        assert_eq!(
            groups,
            [
                ("default/db", 1, vec!["db-a"]),
                ("default/web", 5, vec!["web-a", "web-b"]),
            ]
        );
        // Every eviction of the plan is sent exactly once.
        let total =
            order.at_once.len() + order.budgeted.iter().map(|g| g.pods.len()).sum::<usize>();
        assert_eq!(total, evict.len());
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

    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should evict pods in order and wait until pods are fully deleted"
    #[test]
    fn a_terminating_pod_holds_its_tier_open() {
        let mut going = pod("a", "Running");
        going.metadata.deletion_timestamp = Some(Time(t(0)));
        let p = plan(&[going, daemon(pod("d", "Running"))], t(1), None);
        assert!(p.evict.is_empty());
        assert_eq!((p.terminating, p.later), (1, 1));
    }

    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should delete nodes with terminal pods"
    #[test]
    fn pending_pods_are_deleted_without_pdb_checks_and_finished_ones_left_alone() {
        let p = plan(
            &[
                pod("p", "Pending"),
                pod("r", "Running"),
                pod("done", "Succeeded"),
            ],
            t(0),
            None,
        );
        assert_eq!(names(&p.delete), ["p"]);
        assert_eq!(names(&p.evict), ["r"]);
        assert_eq!(p.staying, 1);
    }

    fn grace(mut p: Pod, secs: i64) -> Pod {
        p.spec
            .get_or_insert_with(Default::default)
            .termination_grace_period_seconds = Some(secs);
        p
    }

    fn terminating(mut p: Pod, until: i64) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(t(until)));
        p
    }

    fn protected(mut p: Pod, value: &str, started: Option<i64>) -> Pod {
        p.metadata.annotations = Some([(DO_NOT_DISRUPT.to_owned(), value.to_owned())].into());
        p.status.get_or_insert_with(Default::default).start_time = started.map(|s| Time(t(s)));
        p
    }

    /// Karpenter never evicts a pod whose do-not-disrupt is in force: the
    /// drain waits for it (it holds its tier), and only a deadline deletes it.
    #[test]
    fn a_do_not_disrupt_pod_is_never_evicted_and_holds_the_drain() {
        let pods = [
            protected(pod("batch", "Running"), "true", Some(0)),
            pod("web", "Running"),
            daemon(pod("d", "Running")),
        ];
        let p = plan(&pods, t(100), None);
        assert_eq!(names(&p.evict), ["web"]);
        assert_eq!((p.protected, p.later), (1, 1));
        assert!(!p.is_drained());
        // Alone, it still holds the node: no deadline, no eviction.
        let p = plan(&pods[..1], t(10_000), None);
        assert!(p.evict.is_empty() && p.at_deadline.is_empty());
        assert!(!p.is_drained());
        // A duration counts from the pod's start: "10m" started at 0 is over at 600.
        let timed = [protected(pod("job", "Running"), "10m", Some(0))];
        assert_eq!(plan(&timed, t(599), None).protected, 1);
        assert_eq!(names(&plan(&timed, t(600), None).evict), ["job"]);
        // Not started yet: the protection holds (fail safe).
        let unstarted = [protected(pod("job", "Running"), "10m", None)];
        assert_eq!(plan(&unstarted, t(10_000), None).protected, 1);
        // At its deadline it is deleted like any other pod, with grace.
        let p = plan(&pods[..1], t(100), Some(t(110)));
        assert_eq!(names(&p.at_deadline), ["batch"]);
        assert_eq!(p.deadline_grace, 10);
    }

    /// A pod is deleted once its own grace period would run past the
    /// deadline, with the time left as its grace: gone by the deadline.
    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should only delete pods when their terminationGracePeriodSeconds is less than the the node's remaining terminationGracePeriod"
    #[test]
    fn pods_are_deleted_ahead_of_the_deadline_by_their_own_grace_period() {
        let pods = [
            grace(pod("slow", "Running"), 60),
            grace(pod("quick", "Running"), 5),
        ];
        let p = plan(&pods, t(0), Some(t(100)));
        assert_eq!(names(&p.evict), ["quick", "slow"]);
        let p = plan(&pods, t(41), Some(t(100)));
        assert_eq!(names(&p.at_deadline), ["slow"]);
        assert_eq!(names(&p.evict), ["quick"]);
        assert_eq!(p.deadline_grace, 59);
        // No grace period in the spec: the API server's 30 s.
        let p = plan(&[pod("plain", "Running")], t(71), Some(t(100)));
        assert_eq!(names(&p.at_deadline), ["plain"]);
    }

    /// At and past the deadline a pod is deleted with grace 1, never 0 —
    /// which would drop it from the API while its containers still run.
    #[test]
    fn past_the_deadline_everything_left_is_deleted_with_a_grace_period_never_zero() {
        let p = plan(
            &[pod("a", "Running"), critical(daemon(pod("cd", "Running")))],
            t(10),
            Some(t(10)),
        );
        assert_eq!(names(&p.at_deadline), ["a", "cd"]);
        assert!(p.evict.is_empty() && p.delete.is_empty());
        assert_eq!(p.deadline_grace, 1);
        let late = plan(&[pod("a", "Running")], t(500), Some(t(10)));
        assert_eq!(late.deadline_grace, 1);
        let before = plan(&[grace(pod("a", "Running"), 0)], t(9), Some(t(10)));
        assert_eq!(names(&before.evict), ["a"]);
    }

    /// A pod already terminating whose deletion ends after the deadline is
    /// deleted again with the shorter grace; one ending before is waited for.
    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should update deletion timestamp for terminating pods when it is after node deletion timestamp"
    #[test]
    fn a_terminating_pod_past_the_deadline_is_deleted_again_with_the_time_left() {
        let late = terminating(pod("late", "Running"), 500);
        let p = plan(std::slice::from_ref(&late), t(90), Some(t(100)));
        assert_eq!(names(&p.at_deadline), ["late"]);
        assert_eq!(p.deadline_grace, 10);
        let p = plan(std::slice::from_ref(&late), t(200), Some(t(100)));
        assert_eq!(names(&p.at_deadline), ["late"]);
        assert_eq!(p.deadline_grace, 1);
        // Already as short as a deletion could make it: waited for.
        let ending = terminating(pod("ending", "Running"), 201);
        let p = plan(&[ending], t(200), Some(t(100)));
        assert!(p.at_deadline.is_empty());
        assert_eq!(p.terminating, 1);
        let early = terminating(pod("early", "Running"), 95);
        let p = plan(&[early], t(90), Some(t(100)));
        assert_eq!((p.terminating, p.at_deadline.len()), (1, 0));
    }

    /// A PDB-blocked pod of an earlier tier does not hold back a later
    /// tier's pod whose deadline came.
    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should not gate past-deadline pods behind graceful eviction of earlier tiers"
    #[test]
    fn a_deadline_is_not_held_up_by_an_earlier_tier() {
        let pods = [
            pod("guarded", "Running"),
            grace(critical(pod("critical", "Running")), 60),
        ];
        let p = plan(&pods, t(50), Some(t(100)));
        assert_eq!(names(&p.evict), ["guarded"]);
        assert_eq!(names(&p.at_deadline), ["critical"]);
    }

    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should bypass pods which are stuck terminating past their grace period"
    #[test]
    fn a_pod_stuck_terminating_a_minute_past_its_grace_is_not_waited_for() {
        let p = plan(&[terminating(pod("stuck", "Running"), 0)], t(60), None);
        assert_eq!(p.terminating, 1);
        let p = plan(&[terminating(pod("stuck", "Running"), 0)], t(61), None);
        assert!(p.is_drained());
    }

    /// kubernetes-sigs/karpenter node/termination/suite_test.go: "should not evict static pods"
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

    // Translations of kubernetes-sigs/karpenter pkg/utils/pod/suite_test.go
    // (IsDoNotDisruptActive, IsDisruptable): when a do-not-disrupt value
    // protects a pod. `pod_protection` is `Some` while it is in force.

    /// should return false when no annotation exists
    #[test]
    fn karpenter_pod_no_annotation_is_not_protected() {
        assert_eq!(pod_protection(&pod("a", "Running"), t(0)), None);
    }

    /// should return true for 'true' annotation (and: should not emit disruptable-at event for indefinite protection)
    #[test]
    fn karpenter_pod_true_protects_for_good() {
        let p = protected(pod("a", "Running"), "true", Some(0));
        assert_eq!(pod_protection(&p, t(1_000_000)), Some(None));
    }

    /// should return false and emit event for invalid duration format; ... for negative duration
    /// (deliberate difference: nodewright takes a value it cannot read as "true")
    #[test]
    fn karpenter_pod_an_unreadable_value_protects_for_good_here() {
        for v in ["invalid-format", "-5m", "10 minutes"] {
            let p = protected(pod("a", "Running"), v, Some(0));
            assert_eq!(pod_protection(&p, t(0)), Some(None), "{v}");
        }
    }

    /// should return false and emit event for zero duration
    #[test]
    fn karpenter_pod_a_zero_duration_protects_nothing() {
        let p = protected(pod("a", "Running"), "0s", Some(0));
        assert_eq!(pod_protection(&p, t(0)), None);
    }

    /// should return true and emit disruptable-at event when duration has not expired;
    /// should return false and emit grace period elapsed event when duration has expired
    #[test]
    fn karpenter_pod_a_duration_counts_from_the_start_time() {
        let p = protected(pod("a", "Running"), "5m", Some(100));
        assert_eq!(pod_protection(&p, t(399)), Some(Some(t(400))));
        assert_eq!(pod_protection(&p, t(400)), None);
    }

    /// should fail safe when start time is nil
    #[test]
    fn karpenter_pod_without_a_start_time_stays_protected() {
        let p = protected(pod("a", "Pending"), "5m", None);
        assert!(pod_protection(&p, t(1_000_000)).is_some());
    }

    /// should be disruptable for active pod without annotation; should not be disruptable for active pod
    /// with 'true' annotation; should be disruptable for active pod with expired duration; should not be
    /// disruptable for active pod with non-expired duration; should be disruptable for terminal pod even
    /// with annotation (a drain leaves finished pods alone, whatever their annotation)
    #[test]
    fn karpenter_pod_disruptable() {
        assert_eq!(
            names(&plan(&[pod("free", "Running")], t(0), None).evict),
            ["free"]
        );
        assert_eq!(
            plan(
                &[protected(pod("p", "Running"), "true", Some(0))],
                t(0),
                None
            )
            .protected,
            1
        );
        assert_eq!(
            names(
                &plan(
                    &[protected(pod("e", "Running"), "1m", Some(0))],
                    t(60),
                    None
                )
                .evict
            ),
            ["e"]
        );
        assert_eq!(
            plan(
                &[protected(pod("n", "Running"), "1m", Some(0))],
                t(59),
                None
            )
            .protected,
            1
        );
        assert!(
            plan(
                &[protected(pod("done", "Succeeded"), "true", Some(0))],
                t(0),
                None
            )
            .is_drained()
        );
    }

    /// kubernetes-sigs/karpenter pkg/controllers/node/termination/suite_test.go:
    /// should not evict pods that tolerate karpenter disruption taint with equal operator;
    /// should evict pods that tolerate the node.kubernetes.io/unschedulable taint
    #[test]
    fn karpenter_termination_tolerations() {
        let tolerate = |key: &str, op: &str| {
            let mut p = pod(key, "Running");
            p.spec.get_or_insert_with(Default::default).tolerations = Some(vec![K8sToleration {
                key: Some(key.to_owned()),
                operator: Some(op.to_owned()),
                effect: Some("NoSchedule".to_owned()),
                ..Default::default()
            }]);
            p
        };
        let p = plan(&[tolerate(DISRUPTED_TAINT_KEY, "Equal")], t(0), None);
        assert!(p.is_drained());
        let p = plan(
            &[tolerate("node.kubernetes.io/unschedulable", "Exists")],
            t(0),
            None,
        );
        assert_eq!(names(&p.evict), ["node.kubernetes.io/unschedulable"]);
    }

    /// Karpenter's `pkg/controllers/node/termination/suite_test.go`,
    /// VolumeAttachments / "should only wait for volume attachments
    /// associated with drainable pods": the attachment of a volume a pod
    /// the drain leaves (it tolerates the disrupted taint) still uses does
    /// not hold the instance; the other one does, and one of no persistent
    /// volume does not.
    #[test]
    fn only_attachments_of_volumes_drained_pods_used_are_awaited() {
        let attachment = |name: &str, pv: Option<&str>| -> VolumeAttachment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "n1", "source": {"persistentVolumeName": pv}},
            }))
            .expect("attachment")
        };
        let mut staying = pod("stays", "Running");
        staying
            .spec
            .get_or_insert_with(Default::default)
            .tolerations = Some(vec![K8sToleration {
            key: Some(DISRUPTED_TAINT_KEY.to_owned()),
            operator: Some("Exists".to_owned()),
            ..Default::default()
        }]);
        staying.spec.get_or_insert_with(Default::default).volumes = Some(vec![serde_json::from_value(
            serde_json::json!({"name": "data", "persistentVolumeClaim": {"claimName": "bar-claim"}}),
        )
        .expect("volume")]);
        let claims = BTreeMap::from([(
            (
                staying
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_owned()),
                "bar-claim".to_owned(),
            ),
            "bar".to_owned(),
        )]);
        let attachments = [
            attachment("va-foo", Some("foo")),
            attachment("va-bar", Some("bar")),
            attachment("va-inline", None),
        ];
        assert_eq!(
            awaited_attachments(&attachments, &[staying.clone()], &claims, t(0)),
            ["va-foo"]
        );
        // Without the pod that keeps it, "bar" is awaited too.
        assert_eq!(
            awaited_attachments(&attachments, &[], &claims, t(0)),
            ["va-bar", "va-foo"]
        );
    }
}
