//! EC2 instance health: what EC2's status checks and scheduled events say
//! of our instances, turned into removals. Pure.
//!
//! EC2 reports an instance's status checks (its own, its host's, its EBS
//! volumes') and the events scheduled for it (DescribeInstanceStatus). As
//! Karpenter's instance-status controller does:
//! - a failed **instance** or **system** status check, failing for at
//!   least [`UNHEALTHY_THRESHOLD`], removes the node **forcefully**: its
//!   deadline is now, so its pods are deleted at once whatever their
//!   PodDisruptionBudgets, and no volume detachment is awaited (Karpenter
//!   sets its termination-timestamp annotation to now);
//! - a **scheduled event** (reboot, maintenance, retirement, stop) removes
//!   it **gracefully** at once, whatever its scheduled time (the host is
//!   suspect): no deadline of its own, so PodDisruptionBudgets hold (the
//!   NodePool's `terminationGracePeriod` still bounds it);
//! - both: forcefully;
//! - EBS status failures are ignored (a volume's trouble may be one pod's,
//!   not the node's);
//! - an instance that is not one of our claims' is never acted on: EC2
//!   reports the whole account.
//!
//! The unhealthy metric counts each instance and category once while it
//! stays unhealthy: `seen` is what the last poll found, and a category no
//! longer reported is forgotten, so an instance that recovers and fails
//! again counts again. A dry run counts and removes nothing.

use std::collections::BTreeSet;

use crate::model::claim::Claim;
use crate::model::{
    InstanceHealth, RemovalReason, RemovalSpec, SignedDuration, StatusCategory, Timestamp,
};

/// How often EC2 is asked (Karpenter polls once a minute).
pub const POLL_EVERY: SignedDuration = SignedDuration::from_mins(1);

/// How long a status check must have failed before it counts (Karpenter: 120 s).
pub const UNHEALTHY_THRESHOLD: SignedDuration = SignedDuration::from_secs(120);

/// An unhealthy instance and the category that makes it so.
pub type Unhealthy = (String, StatusCategory);

/// What one poll comes to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthPlan {
    /// The removals to start (none in a dry run), one per claim.
    pub removals: Vec<RemovalSpec>,
    /// Every (instance, category) of ours unhealthy now: the next poll's `seen`.
    pub unhealthy: BTreeSet<Unhealthy>,
    /// Those of `unhealthy` that `seen` did not hold: each counts once in
    /// the metric and is logged.
    pub newly_unhealthy: Vec<Unhealthy>,
}

/// The categories of `health` that count now: failed instance and system
/// checks that have failed for the threshold (or say not since when), and
/// every scheduled event.
pub fn failing(health: &InstanceHealth, now: Timestamp) -> BTreeSet<StatusCategory> {
    health
        .checks
        .iter()
        .filter(|c| c.failed)
        .filter(|c| match c.category {
            StatusCategory::EbsStatus => false,
            StatusCategory::EventStatus => true,
            StatusCategory::InstanceStatus | StatusCategory::SystemStatus => c
                .impaired_since
                .is_none_or(|since| now.duration_since(since) >= UNHEALTHY_THRESHOLD),
        })
        .map(|c| c.category)
        .collect()
}

/// Decides one poll: `statuses` as EC2 reported them, our `claims`, what
/// the last poll found unhealthy.
pub fn decide(
    statuses: &[InstanceHealth],
    claims: &[Claim],
    seen: &BTreeSet<Unhealthy>,
    now: Timestamp,
    dry_run: bool,
) -> HealthPlan {
    let mut plan = HealthPlan::default();
    let mut sorted: Vec<&InstanceHealth> = statuses.iter().collect();
    sorted.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    sorted.dedup_by(|a, b| a.instance_id == b.instance_id);
    for health in sorted {
        let Some(claim) = claims
            .iter()
            .find(|c| c.instance_id() == Some(health.instance_id.as_str()))
        else {
            continue;
        };
        let failing = failing(health, now);
        for category in &failing {
            let key = (health.instance_id.clone(), *category);
            if !seen.contains(&key) {
                plan.newly_unhealthy.push(key.clone());
            }
            plan.unhealthy.insert(key);
        }
        if dry_run {
            continue;
        }
        let (reason, deadline) = if failing.contains(&StatusCategory::SystemStatus) {
            (RemovalReason::SystemStatus, Some(now))
        } else if failing.contains(&StatusCategory::InstanceStatus) {
            (RemovalReason::InstanceStatus, Some(now))
        } else if failing.contains(&StatusCategory::EventStatus) {
            (RemovalReason::EventStatus, None)
        } else {
            continue;
        };
        plan.removals.push(RemovalSpec {
            claim_id: claim.id.clone(),
            pool: claim.pool.clone(),
            node: claim.node_name.clone(),
            instance_id: Some(health.instance_id.clone()),
            reason,
            replace: true,
            deadline,
            avoid: Vec::new(),
            event_at: Some(now),
            handover: false,
        });
    }
    plan
}

/// Status checks as EC2 reports them, for this module's tests and the
/// disruption handler's.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::model::{StatusCategory, StatusCheck, Timestamp};

    /// A failed reachability check of `category`, impaired since `since`.
    pub(crate) fn check(category: StatusCategory, since: Option<Timestamp>) -> StatusCheck {
        StatusCheck {
            category,
            name: "reachability".to_owned(),
            failed: true,
            impaired_since: since,
        }
    }

    /// A scheduled `instance-retirement` event.
    pub(crate) fn retirement() -> StatusCheck {
        StatusCheck {
            category: StatusCategory::EventStatus,
            name: "instance-retirement".to_owned(),
            failed: true,
            impaired_since: None,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Karpenter's instance-status cases (aws/karpenter-provider-aws
    //! `pkg/controllers/interruption/suite_test.go`, Describe
    //! "InterruptionHandling", Context "Processing Messages") as decisions;
    //! what the handler does with them is held in
    //! `handlers::disruption::tests::instance_health`.
    use super::fixtures::{check, retirement};
    use super::*;
    use crate::model::StatusCheck;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("time")
    }

    fn claim(id: &str, instance: &str) -> Claim {
        let json = serde_json::json!({
            "id": id, "pool": "default", "node_class": null, "version": 1, "created_at": "2026-01-01T00:00:00Z",
            "options": [], "labels": {}, "taints": [], "kubelet": {}, "pods": [], "requests": {}, "reservation": {},
            "node_name": format!("node-{id}"),
            "instance": {"id": instance, "instance_type": "m5.large", "zone": "us-east-1a",
                "capacity_type": "on-demand", "price": 0.096, "provider_id": format!("aws:///us-east-1a/{instance}"),
                "launched_at": "2026-01-01T00:00:00Z"},
        });
        serde_json::from_value(json).expect("claim")
    }

    fn health(instance: &str, checks: Vec<StatusCheck>) -> InstanceHealth {
        InstanceHealth {
            instance_id: instance.to_owned(),
            checks,
        }
    }

    #[test]
    fn a_failed_system_check_removes_the_node_forcefully_once_past_the_threshold() {
        let claims = [claim("a", "i-a")];
        let status = [health(
            "i-a",
            vec![check(StatusCategory::SystemStatus, Some(t(0)))],
        )];
        let early = decide(&status, &claims, &BTreeSet::new(), t(119), false);
        assert!(early.removals.is_empty(), "under 120 s: {early:?}");
        assert!(early.unhealthy.is_empty());
        let plan = decide(&status, &claims, &BTreeSet::new(), t(3600), false);
        assert_eq!(plan.removals.len(), 1, "{plan:?}");
        let r = &plan.removals[0];
        assert_eq!(r.reason, RemovalReason::SystemStatus);
        assert_eq!(r.deadline, Some(t(3600)), "forceful: the deadline is now");
        assert_eq!(r.node.as_deref(), Some("node-a"));
        assert!(r.replace);
        assert_eq!(
            plan.newly_unhealthy,
            vec![("i-a".to_owned(), StatusCategory::SystemStatus)]
        );
    }

    #[test]
    fn a_scheduled_event_removes_the_node_gracefully_at_once() {
        let plan = decide(
            &[health("i-a", vec![retirement()])],
            &[claim("a", "i-a")],
            &BTreeSet::new(),
            t(0),
            false,
        );
        assert_eq!(plan.removals.len(), 1, "{plan:?}");
        assert_eq!(plan.removals[0].reason, RemovalReason::EventStatus);
        assert_eq!(plan.removals[0].deadline, None, "PDBs hold");
    }

    #[test]
    fn a_failed_check_and_an_event_remove_forcefully_and_count_both() {
        let plan = decide(
            &[health(
                "i-a",
                vec![
                    check(StatusCategory::SystemStatus, Some(t(0))),
                    retirement(),
                ],
            )],
            &[claim("a", "i-a")],
            &BTreeSet::new(),
            t(3600),
            false,
        );
        assert_eq!(plan.removals.len(), 1);
        assert_eq!(plan.removals[0].deadline, Some(t(3600)));
        assert_eq!(plan.newly_unhealthy.len(), 2, "{plan:?}");
    }

    #[test]
    fn instances_not_ours_ebs_failures_and_passed_checks_ask_for_nothing() {
        let mut passed = check(StatusCategory::InstanceStatus, Some(t(0)));
        passed.failed = false;
        let plan = decide(
            &[
                health("i-neighbour", vec![retirement()]),
                health("i-a", vec![check(StatusCategory::EbsStatus, Some(t(0)))]),
                health("i-b", vec![passed]),
            ],
            &[claim("a", "i-a"), claim("b", "i-b")],
            &BTreeSet::new(),
            t(3600),
            false,
        );
        assert_eq!(plan, HealthPlan::default());
    }

    #[test]
    fn a_dry_run_counts_and_removes_nothing() {
        let plan = decide(
            &[health(
                "i-a",
                vec![check(StatusCategory::InstanceStatus, Some(t(0)))],
            )],
            &[claim("a", "i-a")],
            &BTreeSet::new(),
            t(3600),
            true,
        );
        assert!(plan.removals.is_empty());
        assert_eq!(plan.newly_unhealthy.len(), 1);
    }

    #[test]
    fn an_instance_counts_once_while_unhealthy_and_again_after_it_recovers() {
        let claims = [claim("a", "i-a")];
        let status = [health(
            "i-a",
            vec![check(StatusCategory::InstanceStatus, Some(t(0)))],
        )];
        let first = decide(&status, &claims, &BTreeSet::new(), t(3600), true);
        assert_eq!(first.newly_unhealthy.len(), 1);
        let second = decide(&status, &claims, &first.unhealthy, t(3660), true);
        assert!(second.newly_unhealthy.is_empty(), "{second:?}");
        let recovered = decide(&[], &claims, &second.unhealthy, t(3720), true);
        assert!(recovered.unhealthy.is_empty());
        let again = decide(&status, &claims, &recovered.unhealthy, t(3780), true);
        assert_eq!(again.newly_unhealthy.len(), 1);
    }
}
