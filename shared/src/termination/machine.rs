//! The machine's next move for one command, from what the command's handler
//! sees now. Pure: the handler does the I/O and records the step.

use k8s_openapi::api::core::v1::{Node, Pod};

use super::drain::{self, DrainPlan};
use crate::model::claim::Claim;
use crate::model::{Command, DISRUPTED_TAINT_KEY, SignedDuration, Step, Timestamp};

/// The longest a command waits for its replacements to register.
pub const REPLACEMENT_WAIT: SignedDuration = SignedDuration::from_mins(10);
/// With a deadline, the wait for replacements ends this long before it, so
/// the drain keeps time to evict (a spot notice leaves ~45 s for the drain).
pub const DRAIN_RESERVE: SignedDuration = SignedDuration::from_secs(45);
/// How often a waiting command looks again.
pub const POLL: SignedDuration = SignedDuration::from_secs(2);
/// Replacement planning rounds when launches keep finding no capacity.
pub const REPLACEMENT_ROUNDS: u32 = 3;

/// What the handler sees of a command's world.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub now: Timestamp,
    /// The command's Node, if it exists.
    pub node: Option<&'a Node>,
    /// The pods bound to it that have not finished.
    pub pods: &'a [Pod],
    /// The command's claim, if it still exists.
    pub claim: Option<&'a Claim>,
    /// Every claim (to find the replacements).
    pub claims: &'a [Claim],
    /// The node's VolumeAttachments the removal waits for once drained
    /// (`drain::awaited_attachments`), by name.
    pub attachments: &'a [String],
    /// Nodes that are initialized (Ready, no `node.kubernetes.io/` taint
    /// left), by name: a command waits for its replacements to be.
    pub initialized: &'a [String],
}

/// The next move.
#[derive(Debug, Clone, PartialEq)]
pub enum Move {
    /// Taint the node `karpenter.sh/disrupted:NoSchedule`.
    Taint {
        node: String,
    },
    /// Plan and launch replacement capacity for the node's pods.
    Replace,
    /// Launch planned replacement claims that were never launched.
    LaunchReplacements {
        claims: Vec<String>,
    },
    /// Label the node `node.kubernetes.io/exclude-from-external-load-balancers`
    /// as its drain starts (Karpenter's termination controller does so
    /// before it drains), so load balancers stop routing to it.
    ExcludeFromLoadBalancers {
        node: String,
    },
    /// Nothing to do until then.
    Wait {
        until: Timestamp,
        why: String,
    },
    /// Act on the node's pods.
    Drain(DrainPlan),
    Terminate {
        instance_id: String,
    },
    DeleteNode {
        node: String,
    },
    /// Release the claim, then delete the command.
    Release,
    /// Move on to `step` (and why), with no I/O.
    Advance {
        step: Step,
        why: String,
    },
    /// A voluntary removal whose replacement failed: untaint the node (if
    /// there is one) and delete the command, leaving the node as it was.
    Rollback {
        node: Option<String>,
        why: String,
    },
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

fn has_label(node: &Node, key: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(key))
}

/// When the wait for replacements ends.
pub fn replacement_deadline(command: &Command) -> Timestamp {
    let since = command.replacing_since.unwrap_or(command.created_at);
    let bound = since + REPLACEMENT_WAIT;
    match command.spec.deadline {
        Some(d) => bound.min(d - DRAIN_RESERVE),
        None => bound,
    }
}

/// The command's replacement claims not launched yet.
fn unlaunched_replacements(command: &Command) -> Vec<String> {
    command
        .replacements
        .iter()
        .filter(|id| !command.launched.contains(id))
        .cloned()
        .collect()
}

/// Why a launched replacement can no longer be had: a launch attempted
/// and dropped (no capacity, a limit, an invalid request — its id left
/// `replacements`), or its claim gone before it registered.
fn failed_replacement(command: &Command, view: &View<'_>) -> Option<String> {
    if let Some(id) = command
        .launched
        .iter()
        .find(|id| !command.replacements.contains(id))
    {
        return Some(format!("replacement {id} could not be launched"));
    }
    command
        .replacements
        .iter()
        .find(|id| !view.claims.iter().any(|c| &c.id == *id))
        .map(|id| format!("replacement {id} is gone"))
}

/// Whether `node` is initialized: Ready, and no `node.kubernetes.io/`
/// taint left (not-ready, unreachable, the uninitialized cloud taint).
pub fn is_initialized(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key.starts_with("node.kubernetes.io/") || t.key == UNINITIALIZED_TAINT)
        });
    ready && !tainted
}

/// The taint a cloud provider's node controller lifts once it has
/// initialized the node.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// How often a handover looks whether Karpenter has let its Node go.
pub const HANDOVER_POLL: SignedDuration = SignedDuration::from_secs(10);

/// The next move of a handover (a node of Karpenter's, see
/// `RemovalSpec::handover`): replacements launched and initialized, then
/// the Node deleted (Karpenter drains it), then wait for it to be gone.
/// nodewright neither taints it (Karpenter lifts a disruption taint it did
/// not put), nor drains it, nor terminates its instance.
fn next_handover(command: &Command, view: &View<'_>, node_name: Option<String>) -> Move {
    match command.step {
        Step::Taint => Move::Advance {
            step: Step::Replace,
            why: "a node of Karpenter's: Karpenter taints it as it drains it".to_owned(),
        },
        Step::Replace => {
            if !command.spec.replace {
                Move::Advance {
                    step: Step::Drain,
                    why: "its pods fit on the nodes there are".to_owned(),
                }
            } else if command.given_replacement && command.replacement_rounds == 0 {
                Move::Advance {
                    step: Step::AwaitReplacement,
                    why: "replacement decided with the handover".to_owned(),
                }
            } else {
                Move::Rollback {
                    node: None,
                    why: "its replacement found no capacity".to_owned(),
                }
            }
        }
        Step::AwaitReplacement => {
            let unlaunched = unlaunched_replacements(command);
            if !unlaunched.is_empty() {
                return Move::LaunchReplacements { claims: unlaunched };
            }
            if let Some(why) = failed_replacement(command, view) {
                return Move::Rollback { node: None, why };
            }
            let mine: Vec<&Claim> = view
                .claims
                .iter()
                .filter(|c| command.replacements.contains(&c.id))
                .collect();
            let unregistered = mine.iter().filter(|c| c.node_name.is_none()).count();
            let uninitialized = mine
                .iter()
                .filter_map(|c| c.node_name.as_ref())
                .filter(|n| !view.initialized.contains(n))
                .count();
            if unregistered == 0 && uninitialized == 0 {
                return Move::Advance {
                    step: Step::Drain,
                    why: format!("{} replacement(s) initialized", mine.len()),
                };
            }
            let why = format!(
                "waiting for {} replacement(s) to register and {uninitialized} to initialize",
                unregistered
            );
            let until = replacement_deadline(command);
            if view.now >= until {
                return Move::Rollback {
                    node: None,
                    why: format!("replacements not initialized in time ({why})"),
                };
            }
            Move::Wait {
                until: until.min(view.now + POLL),
                why,
            }
        }
        Step::Drain | Step::Terminate => Move::Advance {
            step: Step::DeleteNode,
            why: "Karpenter drains the nodes it launched".to_owned(),
        },
        Step::DeleteNode => match (view.node, node_name) {
            (Some(node), Some(name)) if node.metadata.deletion_timestamp.is_none() => {
                Move::DeleteNode { node: name }
            }
            _ => Move::Advance {
                step: Step::Release,
                why: "node deleted".to_owned(),
            },
        },
        Step::Release => match (view.node, node_name) {
            (Some(_), Some(name)) => Move::Wait {
                until: view.now + HANDOVER_POLL,
                why: format!(
                    "Karpenter is draining node {name} and terminating its instance (its finalizer {KARPENTER_FINALIZER})"
                ),
            },
            _ => Move::Release,
        },
    }
}

/// Karpenter's termination finalizer (`disruption::handover`).
const KARPENTER_FINALIZER: &str = "karpenter.sh/termination";

/// The command's next move.
pub fn next(command: &Command, view: &View<'_>) -> Move {
    let node_name = command
        .spec
        .node
        .clone()
        .or_else(|| view.claim.and_then(|c| c.node_name.clone()));
    if command.spec.handover {
        return next_handover(command, view, node_name);
    }
    match command.step {
        Step::Taint => match (view.node, node_name) {
            (Some(node), Some(name)) if !has_taint(node, DISRUPTED_TAINT_KEY) => {
                Move::Taint { node: name }
            }
            (Some(_), _) => Move::Advance {
                step: Step::Replace,
                why: "node tainted".to_owned(),
            },
            (None, _) => Move::Advance {
                step: Step::Replace,
                why: "no node to taint".to_owned(),
            },
        },
        Step::Replace => {
            if !command.spec.replace {
                Move::Advance {
                    step: Step::Drain,
                    why: "no replacement asked for".to_owned(),
                }
            } else if view.claim.is_none() {
                Move::Advance {
                    step: Step::Drain,
                    why: "the claim is gone".to_owned(),
                }
            } else if command.given_replacement && command.replacement_rounds == 0 {
                Move::Advance {
                    step: Step::AwaitReplacement,
                    why: "replacement decided with the removal".to_owned(),
                }
            } else if command.spec.reason.rolls_back() && command.replacement_rounds > 0 {
                Move::Rollback {
                    node: node_name,
                    why: "its replacement found no capacity".to_owned(),
                }
            } else {
                Move::Replace
            }
        }
        Step::AwaitReplacement => {
            let unlaunched = unlaunched_replacements(command);
            if !unlaunched.is_empty() {
                return Move::LaunchReplacements { claims: unlaunched };
            }
            if command.spec.reason.rolls_back()
                && let Some(why) = failed_replacement(command, view)
            {
                return Move::Rollback {
                    node: node_name,
                    why,
                };
            }
            let waiting: Vec<&Claim> = view
                .claims
                .iter()
                .filter(|c| command.replacements.contains(&c.id) && c.node_name.is_none())
                .collect();
            // Registered but not initialized yet: Karpenter waits for its
            // replacements to be initialized before it drains (with no node
            // left there is nothing to drain onto them, no reason to wait).
            let booting: Vec<&Claim> = view
                .claims
                .iter()
                .filter(|c| {
                    command.replacements.contains(&c.id)
                        && c.node_name
                            .as_ref()
                            .is_some_and(|n| !view.initialized.contains(n))
                })
                .collect();
            if waiting.is_empty() && !booting.is_empty() && view.node.is_some() {
                let until = replacement_deadline(command);
                let n = booting.len();
                if view.now >= until && command.spec.reason.rolls_back() {
                    return Move::Rollback {
                        node: node_name,
                        why: format!("{n} replacement(s) not initialized in time"),
                    };
                }
                if view.now >= until {
                    return Move::Advance {
                        step: Step::Drain,
                        why: format!("{n} replacement(s) not initialized in time; draining anyway"),
                    };
                }
                return Move::Wait {
                    until: until.min(view.now + POLL),
                    why: format!("waiting for {n} replacement(s) to initialize"),
                };
            }
            if waiting.is_empty() {
                let live = view
                    .claims
                    .iter()
                    .filter(|c| command.replacements.contains(&c.id))
                    .count();
                return Move::Advance {
                    step: Step::Drain,
                    why: format!("{live} replacement(s) registered"),
                };
            }
            let until = replacement_deadline(command);
            if view.now >= until && command.spec.reason.rolls_back() {
                return Move::Rollback {
                    node: node_name,
                    why: format!("{} replacement(s) not registered in time", waiting.len()),
                };
            }
            if view.now >= until {
                return Move::Advance {
                    step: Step::Drain,
                    why: format!(
                        "{} replacement(s) not registered in time; draining anyway",
                        waiting.len()
                    ),
                };
            }
            Move::Wait {
                until: until.min(view.now + POLL),
                why: format!("waiting for {} replacement(s) to register", waiting.len()),
            }
        }
        Step::Drain => {
            let Some(node) = view.node else {
                return Move::Advance {
                    step: Step::Terminate,
                    why: "the node is gone".to_owned(),
                };
            };
            if let Some(name) = node.metadata.name.as_ref().or(node_name.as_ref())
                && !has_label(node, drain::EXCLUDE_FROM_LOAD_BALANCERS)
            {
                return Move::ExcludeFromLoadBalancers { node: name.clone() };
            }
            let plan = drain::plan(view.pods, view.now, command.spec.deadline);
            if !plan.is_drained() {
                return Move::Drain(plan);
            }
            // Drained: the volumes of its pods detach before the instance
            // goes (they can then attach where the pods went), until the
            // deadline (the terminationGracePeriod) if there is one.
            if view.attachments.is_empty() {
                return Move::Advance {
                    step: Step::Terminate,
                    why: "drained".to_owned(),
                };
            }
            let left = format!(
                "{} volume attachment(s) ({})",
                view.attachments.len(),
                view.attachments.join(", ")
            );
            match command.spec.deadline {
                Some(d) if view.now >= d => Move::Advance {
                    step: Step::Terminate,
                    why: format!("drained; termination grace period elapsed with {left} left"),
                },
                d => Move::Wait {
                    until: d.map_or(view.now + POLL, |d| d.min(view.now + POLL)),
                    why: format!("drained; waiting for {left} to detach"),
                },
            }
        }
        Step::Terminate => {
            let instance = command
                .spec
                .instance_id
                .clone()
                .or_else(|| view.claim.and_then(|c| c.instance_id().map(str::to_owned)));
            match instance {
                Some(id) if command.milestones.terminated_at.is_none() => {
                    Move::Terminate { instance_id: id }
                }
                _ => Move::Advance {
                    step: Step::DeleteNode,
                    why: "instance terminated".to_owned(),
                },
            }
        }
        Step::DeleteNode => match (view.node, node_name) {
            (Some(_), Some(name)) => Move::DeleteNode { node: name },
            _ => Move::Advance {
                step: Step::Release,
                why: "node deleted".to_owned(),
            },
        },
        Step::Release => Move::Release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RemovalReason, RemovalSpec};
    use k8s_openapi::api::core::v1::{NodeSpec, Taint as K8sTaint};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    fn command(replace: bool, deadline: Option<Timestamp>) -> Command {
        Command::new(
            RemovalSpec {
                claim_id: "default-abcde".into(),
                pool: "default".into(),
                node: Some("n1".into()),
                instance_id: Some("i-1".into()),
                reason: RemovalReason::SpotInterrupted,
                replace,
                deadline,
                avoid: vec![],
                event_at: None,
                handover: false,
            },
            t(0),
        )
    }

    fn node(tainted: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        if tainted {
            n.spec = Some(NodeSpec {
                taints: Some(vec![K8sTaint {
                    key: DISRUPTED_TAINT_KEY.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        n
    }

    fn claim(id: &str, registered: bool) -> Claim {
        let json = serde_json::json!({
            "id": id, "pool": "default", "node_class": null, "version": 1, "created_at": "2026-01-01T00:00:00Z",
            "options": [], "labels": {}, "taints": [], "kubelet": {}, "pods": [], "requests": {}, "reservation": {},
            "node_name": if registered { Some("n2") } else { None }
        });
        serde_json::from_value(json).expect("claim")
    }

    fn view<'a>(now: i64, node: Option<&'a Node>, claims: &'a [Claim]) -> View<'a> {
        View {
            now: t(now),
            node,
            pods: &[],
            claim: claims.iter().find(|c| c.id == "default-abcde"),
            claims,
            attachments: &[],
            // A registered replacement (node n2) is initialized, unless a test says otherwise.
            initialized: INITIALIZED.as_slice(),
        }
    }

    static INITIALIZED: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| vec!["n2".to_owned()]);

    #[test]
    fn taints_first_then_moves_on() {
        let claims = [claim("default-abcde", true)];
        let c = command(true, None);
        assert_eq!(
            next(&c, &view(0, Some(&node(false)), &claims)),
            Move::Taint { node: "n1".into() }
        );
        assert!(matches!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::Advance {
                step: Step::Replace,
                ..
            }
        ));
    }

    #[test]
    fn replacements_are_awaited_within_a_bound_that_leaves_time_to_drain() {
        let mut c = command(true, Some(t(105)));
        c.step = Step::AwaitReplacement;
        c.replacing_since = Some(t(1));
        c.replacements = vec!["default-new01".into()];
        c.launched = vec!["default-new01".into()];
        let booting = [claim("default-abcde", true), claim("default-new01", false)];
        let n = node(true);
        assert!(matches!(
            next(&c, &view(10, Some(&n), &booting)),
            Move::Wait { .. }
        ));
        // The spot notice leaves DRAIN_RESERVE for the drain: give up at 105 − 45 = 60 s.
        assert!(matches!(
            next(&c, &view(60, Some(&n), &booting)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
        let registered = [claim("default-abcde", true), claim("default-new01", true)];
        assert!(matches!(
            next(&c, &view(10, Some(&n), &registered)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
        c.launched.clear();
        assert_eq!(
            next(&c, &view(10, Some(&n), &booting)),
            Move::LaunchReplacements {
                claims: vec!["default-new01".into()]
            }
        );
    }

    fn voluntary(replacement: &str) -> Command {
        let mut c = command(true, None);
        c.spec.reason = RemovalReason::Drifted;
        c.given_replacement = true;
        c.replacements = vec![replacement.into()];
        c
    }

    #[test]
    fn a_given_replacement_is_launched_as_given_not_planned() {
        let mut c = voluntary("default-new01");
        c.step = Step::Replace;
        let claims = [claim("default-abcde", true)];
        assert!(matches!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::Advance {
                step: Step::AwaitReplacement,
                ..
            }
        ));
        c.step = Step::AwaitReplacement;
        c.replacement_rounds = 1;
        assert_eq!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::LaunchReplacements {
                claims: vec!["default-new01".into()]
            }
        );
    }

    #[test]
    fn a_voluntary_removal_whose_replacement_fails_is_rolled_back_a_forceful_one_drains() {
        let n = node(true);
        let claims = [claim("default-abcde", true)];
        // Launched, then dropped (no capacity): its id left `replacements`.
        let mut c = voluntary("default-new01");
        c.step = Step::AwaitReplacement;
        c.replacement_rounds = 1;
        c.launched = vec!["default-new01".into()];
        c.replacements.clear();
        assert!(matches!(
            next(&c, &view(10, Some(&n), &claims)),
            Move::Rollback { node: Some(_), .. }
        ));
        // Launched, and its claim is gone before registering.
        let mut gone = voluntary("default-new01");
        gone.step = Step::AwaitReplacement;
        gone.launched = vec!["default-new01".into()];
        assert!(matches!(
            next(&gone, &view(10, Some(&n), &claims)),
            Move::Rollback { .. }
        ));
        // Launched, never registered within the bound.
        let booting = [claim("default-abcde", true), claim("default-new01", false)];
        let mut slow = gone.clone();
        slow.replacing_since = Some(t(0));
        assert!(matches!(
            next(&slow, &view(10, Some(&n), &booting)),
            Move::Wait { .. }
        ));
        assert!(matches!(
            next(&slow, &view(601, Some(&n), &booting)),
            Move::Rollback { .. }
        ));
        // The same for an expiration: drained anyway.
        slow.spec.reason = RemovalReason::Expired;
        assert!(matches!(
            next(&slow, &view(601, Some(&n), &booting)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
        c.spec.reason = RemovalReason::SpotInterrupted;
        assert!(matches!(
            next(&c, &view(10, Some(&n), &claims)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
    }

    fn reason_strategy() -> impl proptest::strategy::Strategy<Value = RemovalReason> {
        proptest::sample::select(vec![
            RemovalReason::SpotInterrupted,
            RemovalReason::ScheduledChange,
            RemovalReason::CapacityReservationInterrupted,
            RemovalReason::InstanceStopping,
            RemovalReason::Rebalance,
            RemovalReason::Expired,
            RemovalReason::Drifted,
            RemovalReason::Empty,
            RemovalReason::Underutilized,
            RemovalReason::Unhealthy,
        ])
    }

    proptest::proptest! {
        /// Whatever the command's state and what is seen: only a voluntary
        /// removal is ever rolled back, and only before its drain starts;
        /// a forceful one always gets to drain.
        #[test]
        fn only_voluntary_removals_roll_back_and_never_once_draining(
            reason in reason_strategy(),
            step in proptest::sample::select(vec![Step::Taint, Step::Replace, Step::AwaitReplacement, Step::Drain, Step::Terminate, Step::DeleteNode, Step::Release]),
            given in proptest::bool::ANY,
            rounds in 0u32..4,
            planned in proptest::collection::vec(0usize..3, 0..3),
            launched in proptest::collection::vec(0usize..3, 0..3),
            existing in proptest::collection::vec((0usize..3, proptest::bool::ANY), 0..3),
            now in 0i64..2000,
        ) {
            let id = |i: usize| format!("default-new{i:02}");
            let mut c = command(true, None);
            c.spec.reason = reason;
            c.step = step;
            c.given_replacement = given;
            c.replacement_rounds = rounds;
            c.replacing_since = Some(t(0));
            c.replacements = planned.iter().map(|i| id(*i)).collect();
            c.launched = launched.iter().map(|i| id(*i)).collect();
            let mut claims = vec![claim("default-abcde", true)];
            claims.extend(existing.iter().map(|(i, registered)| claim(&id(*i), *registered)));
            let n = node(true);
            let m = next(&c, &view(now, Some(&n), &claims));
            if let Move::Rollback { .. } = m {
                proptest::prop_assert!(reason.rolls_back(), "{reason:?} rolled back");
                proptest::prop_assert!(step < Step::Drain, "rolled back at {step:?}");
            }
        }
    }

    // Translations of kubernetes-sigs/karpenter pkg/controllers/disruption/
    // queue_test.go (Describe "Queue" / Context "Reconcile"): Karpenter's
    // orchestration queue is this machine, one command per record. Its
    // commands are drifts (voluntary). As Karpenter, the drain starts once
    // every replacement is initialized (Ready, no startup taint left).

    fn drift_with(replacement: &str) -> Command {
        let mut c = voluntary(replacement);
        c.step = Step::AwaitReplacement;
        c.replacing_since = Some(t(0));
        c.launched = vec![replacement.into()];
        c
    }

    /// It("should not return an error when handling commands before the timeout") and
    /// It("should not return an error when the NodeClaim doesn't exist but the NodeCliam is in
    /// cluster state"): a launched replacement that has not registered keeps the command waiting
    /// (the node tainted), neither failed nor rolled back, until the bound.
    #[test]
    fn karpenter_queue_a_command_waits_for_its_replacement_before_the_timeout() {
        let c = drift_with("default-new01");
        let booting = [claim("default-abcde", true), claim("default-new01", false)];
        let n = node(true);
        for now in [1, 300, 599] {
            assert!(
                matches!(next(&c, &view(now, Some(&n), &booting)), Move::Wait { .. }),
                "at {now} s"
            );
        }
    }

    /// It("should untaint nodes when a command times out"): past the replacement wait (10
    /// minutes, as Karpenter's), a voluntary command is rolled back, which untaints its node.
    #[test]
    fn karpenter_queue_a_timed_out_command_untaints_its_node() {
        let c = drift_with("default-new01");
        let booting = [claim("default-abcde", true), claim("default-new01", false)];
        let n = node(true);
        assert_eq!(
            next(&c, &view(601, Some(&n), &booting)),
            Move::Rollback {
                node: Some("n1".into()),
                why: "1 replacement(s) not registered in time".into()
            }
        );
    }

    /// It("should keep nodes tainted when replacements haven't finished initialization"): a
    /// registered replacement that is not initialized (not Ready, or startup taints left) keeps
    /// the command waiting, its node tainted and undrained; once initialized, the drain starts.
    #[test]
    fn karpenter_queue_the_node_waits_tainted_until_its_replacement_is_initialized() {
        let c = drift_with("default-new01");
        let registered = [claim("default-abcde", true), claim("default-new01", true)];
        let n = node(true);
        let mut v = view(5, Some(&n), &registered);
        v.initialized = &[];
        assert_eq!(
            next(&c, &v),
            Move::Wait {
                until: t(7),
                why: "waiting for 1 replacement(s) to initialize".into()
            }
        );
        // Past the bound, a voluntary command is rolled back (untainted).
        let mut late = view(601, Some(&n), &registered);
        late.initialized = &[];
        assert!(matches!(
            next(&c, &late),
            Move::Rollback { node: Some(_), .. }
        ));
        assert!(matches!(
            next(&c, &view(5, Some(&n), &registered)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
    }

    /// It("should fully handle a command when replacements are initialized"): initialized
    /// replacement, then the drain, then the instance is terminated.
    #[test]
    fn karpenter_queue_a_command_with_an_initialized_replacement_is_carried_out() {
        let mut c = drift_with("default-new01");
        let registered = [claim("default-abcde", true), claim("default-new01", true)];
        let mut n = node(true);
        assert!(matches!(
            next(&c, &view(5, Some(&n), &registered)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
        c.step = Step::Drain;
        n.metadata.labels = Some(
            [(
                drain::EXCLUDE_FROM_LOAD_BALANCERS.to_owned(),
                "true".to_owned(),
            )]
            .into_iter()
            .collect(),
        );
        assert!(matches!(
            next(&c, &view(6, Some(&n), &registered)),
            Move::Advance {
                step: Step::Terminate,
                ..
            }
        ));
        c.step = Step::Terminate;
        assert_eq!(
            next(&c, &view(7, Some(&n), &registered)),
            Move::Terminate {
                instance_id: "i-1".into()
            }
        );
    }

    /// It("should only finish a command when all replacements are initialized"): two
    /// replacements, one initialized: the command waits; both: it drains.
    #[test]
    fn karpenter_queue_every_replacement_must_be_initialized() {
        let mut c = drift_with("default-new01");
        c.replacements.push("default-new02".into());
        c.launched.push("default-new02".into());
        let mut second = claim("default-new02", true);
        second.node_name = Some("n3".into());
        let claims = [
            claim("default-abcde", true),
            claim("default-new01", true),
            second,
        ];
        let n = node(true);
        let one = ["n2".to_owned()];
        let mut v = view(5, Some(&n), &claims);
        v.initialized = &one;
        assert!(
            matches!(next(&c, &v), Move::Wait { .. }),
            "{:?}",
            next(&c, &v)
        );
        let both = ["n2".to_owned(), "n3".to_owned()];
        v.initialized = &both;
        assert!(matches!(
            next(&c, &v),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
    }

    /// It("should not wait for replacements when none are needed"): a drift without replacement
    /// goes from the taint to the drain.
    #[test]
    fn karpenter_queue_no_replacement_no_wait() {
        let mut c = command(false, None);
        c.spec.reason = RemovalReason::Drifted;
        let claims = [claim("default-abcde", true)];
        assert!(matches!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::Advance {
                step: Step::Replace,
                ..
            }
        ));
        c.step = Step::Replace;
        assert!(matches!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
    }

    /// It("should finish two commands in order as replacements are initialized"): two commands,
    /// each moves on when its own replacement arrives, whatever the other's.
    #[test]
    fn karpenter_queue_two_commands_move_on_as_their_own_replacements_arrive() {
        let c1 = drift_with("default-new01");
        let c2 = drift_with("default-new02");
        let n = node(true);
        let neither = [
            claim("default-abcde", true),
            claim("default-new01", false),
            claim("default-new02", false),
        ];
        assert!(matches!(
            next(&c1, &view(5, Some(&n), &neither)),
            Move::Wait { .. }
        ));
        assert!(matches!(
            next(&c2, &view(5, Some(&n), &neither)),
            Move::Wait { .. }
        ));
        let first = [
            claim("default-abcde", true),
            claim("default-new01", true),
            claim("default-new02", false),
        ];
        assert!(matches!(
            next(&c1, &view(6, Some(&n), &first)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
        assert!(matches!(
            next(&c2, &view(6, Some(&n), &first)),
            Move::Wait { .. }
        ));
        let both = [
            claim("default-abcde", true),
            claim("default-new01", true),
            claim("default-new02", true),
        ];
        assert!(matches!(
            next(&c2, &view(7, Some(&n), &both)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
    }

    #[test]
    fn without_replacement_the_drain_follows_the_taint() {
        let mut c = command(false, None);
        c.step = Step::Replace;
        let claims = [claim("default-abcde", true)];
        assert!(matches!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
    }

    #[test]
    fn a_gone_node_skips_to_termination_and_release() {
        let claims = [claim("default-abcde", true)];
        let mut c = command(false, None);
        c.step = Step::Drain;
        assert!(matches!(
            next(&c, &view(0, None, &claims)),
            Move::Advance {
                step: Step::Terminate,
                ..
            }
        ));
        c.step = Step::Terminate;
        assert_eq!(
            next(&c, &view(0, None, &claims)),
            Move::Terminate {
                instance_id: "i-1".into()
            }
        );
        c.milestones.terminated_at = Some(t(1));
        assert!(matches!(
            next(&c, &view(0, None, &claims)),
            Move::Advance {
                step: Step::DeleteNode,
                ..
            }
        ));
        c.step = Step::DeleteNode;
        assert!(matches!(
            next(&c, &view(0, None, &claims)),
            Move::Advance {
                step: Step::Release,
                ..
            }
        ));
        assert_eq!(
            next(&c, &view(0, Some(&node(true)), &claims)),
            Move::DeleteNode { node: "n1".into() }
        );
    }

    /// Karpenter's `pkg/controllers/node/termination/suite_test.go`,
    /// "should exclude nodes from load balancers when terminating": the
    /// label comes first as the drain starts, before any pod is acted on;
    /// once it is there, the drain proceeds.
    #[test]
    fn the_drain_starts_by_excluding_the_node_from_load_balancers() {
        let claims = [claim("default-abcde", true)];
        let mut c = command(false, None);
        c.step = Step::Drain;
        let mut n = node(true);
        assert_eq!(
            next(&c, &view(0, Some(&n), &claims)),
            Move::ExcludeFromLoadBalancers { node: "n1".into() }
        );
        n.metadata.labels = Some(
            [(
                drain::EXCLUDE_FROM_LOAD_BALANCERS.to_owned(),
                drain::EXCLUDE_FROM_LOAD_BALANCERS_VALUE.to_owned(),
            )]
            .into(),
        );
        assert!(matches!(
            next(&c, &view(0, Some(&n), &claims)),
            Move::Advance {
                step: Step::Terminate,
                ..
            }
        ));
    }

    fn excluded(mut n: Node) -> Node {
        n.metadata.labels = Some(
            [(
                drain::EXCLUDE_FROM_LOAD_BALANCERS.to_owned(),
                drain::EXCLUDE_FROM_LOAD_BALANCERS_VALUE.to_owned(),
            )]
            .into(),
        );
        n
    }

    /// Karpenter's `pkg/controllers/node/termination/suite_test.go`,
    /// VolumeAttachments: "should wait for volume attachments" (the drained
    /// node's instance waits while one is left, then goes), and "should
    /// wait for volume attachments until the nodeclaim's termination grace
    /// period expires" (past the deadline it goes with them left).
    #[test]
    fn a_drained_node_waits_for_its_volume_attachments_until_the_deadline() {
        let claims = [claim("default-abcde", true)];
        let n = excluded(node(true));
        let left = ["csi-pv-1".to_owned()];
        let mut c = command(false, Some(t(60)));
        c.step = Step::Drain;
        let mut v = view(10, Some(&n), &claims);
        v.attachments = &left;
        match next(&c, &v) {
            Move::Wait { until, why } => {
                assert_eq!(until, t(10) + POLL);
                assert!(why.contains("csi-pv-1"), "{why}");
            }
            other => panic!("expected a wait, got {other:?}"),
        }
        // Close to the deadline, the wait ends at it.
        let mut v = view(59, Some(&n), &claims);
        v.attachments = &left;
        assert!(matches!(next(&c, &v), Move::Wait { until, .. } if until == t(60)));
        // At the deadline the instance goes, attachments left or not.
        let mut v = view(60, Some(&n), &claims);
        v.attachments = &left;
        assert!(matches!(
            next(&c, &v),
            Move::Advance { step: Step::Terminate, why } if why.contains("grace period elapsed")
        ));
        // Without a deadline it waits for as long as they are there;
        // once they are gone, it moves on.
        let c = Command {
            spec: RemovalSpec {
                deadline: None,
                ..c.spec.clone()
            },
            ..c
        };
        let mut v = view(100_000, Some(&n), &claims);
        v.attachments = &left;
        assert!(matches!(next(&c, &v), Move::Wait { .. }));
        assert!(matches!(
            next(&c, &view(100_000, Some(&n), &claims)),
            Move::Advance {
                step: Step::Terminate,
                ..
            }
        ));
    }

    /// A handover of a node of Karpenter's (`RemovalSpec::handover`), its
    /// replacement `default-new01` given.
    fn handover() -> Command {
        let mut c = voluntary("default-new01");
        c.id = "handover-n1".into();
        c.spec.claim_id = "handover-n1".into();
        c.spec.instance_id = None;
        c.spec.handover = true;
        c
    }

    fn ready(name: &str, ready: bool) -> Node {
        let mut n = node(false);
        n.metadata.name = Some(name.into());
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    }

    /// Karpenter `pkg/controllers/disruption/queue_test.go`, "should keep
    /// nodes tainted when replacements haven't finished initialization" and
    /// "should only finish a command when all replacements are
    /// initialized", for a node of Karpenter's handed over; we differ on
    /// purpose in that we never taint it (Karpenter does as it drains) and
    /// only delete its Node.
    #[test]
    fn a_handover_launches_and_awaits_initialized_replacements_before_deleting_the_node() {
        let karpenters = node(false);
        let mut c = handover();
        // Never tainted by us: Karpenter taints it as it drains it.
        assert!(matches!(
            next(&c, &view(0, Some(&karpenters), &[])),
            Move::Advance {
                step: Step::Replace,
                ..
            }
        ));
        c.step = Step::Replace;
        assert!(matches!(
            next(&c, &view(0, Some(&karpenters), &[])),
            Move::Advance {
                step: Step::AwaitReplacement,
                ..
            }
        ));
        c.step = Step::AwaitReplacement;
        c.replacing_since = Some(t(0));
        assert_eq!(
            next(&c, &view(0, Some(&karpenters), &[])),
            Move::LaunchReplacements {
                claims: vec!["default-new01".into()]
            }
        );
        c.launched = vec!["default-new01".into()];
        // Registered (as n2) but not Ready: still waiting, nothing deleted.
        let registered = [claim("default-new01", true)];
        let mut not_up = view(10, Some(&karpenters), &registered);
        not_up.initialized = &[];
        assert!(matches!(
            next(&c, &not_up),
            Move::Wait { why, .. } if why.contains("1 to initialize")
        ));
        let booting = ready("n2", false);
        assert!(!is_initialized(&booting));
        let up = [String::from("n2")];
        let mut v = view(10, Some(&karpenters), &registered);
        v.initialized = &up;
        assert!(matches!(
            next(&c, &v),
            Move::Advance {
                step: Step::Drain,
                ..
            }
        ));
        assert!(is_initialized(&ready("n2", true)));
        // Then the Node is deleted (Karpenter drains it), never terminated by us.
        c.step = Step::Drain;
        assert!(matches!(
            next(&c, &view(20, Some(&karpenters), &registered)),
            Move::Advance {
                step: Step::DeleteNode,
                ..
            }
        ));
        c.step = Step::DeleteNode;
        assert_eq!(
            next(&c, &view(20, Some(&karpenters), &registered)),
            Move::DeleteNode { node: "n1".into() }
        );
        // The command holds (and counts against the budget) until the Node is gone.
        c.step = Step::Release;
        let mut deleting = karpenters.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(21)));
        assert!(matches!(
            next(&c, &view(30, Some(&deleting), &registered)),
            Move::Wait { why, .. } if why.contains("Karpenter is draining")
        ));
        assert_eq!(next(&c, &view(40, None, &registered)), Move::Release);
    }

    #[test]
    fn a_handover_whose_replacement_fails_or_never_initializes_is_rolled_back_untouched() {
        let karpenters = node(false);
        let mut c = handover();
        c.step = Step::AwaitReplacement;
        c.replacing_since = Some(t(0));
        c.launched = vec!["default-new01".into()];
        // Its launch found no capacity: the claim is gone.
        assert!(matches!(
            next(&c, &view(10, Some(&karpenters), &[])),
            Move::Rollback { node: None, .. }
        ));
        // Registered, never initialized within REPLACEMENT_WAIT.
        let registered = [claim("default-new01", true)];
        let late = REPLACEMENT_WAIT.as_secs();
        let mut never_up = view(late, Some(&karpenters), &registered);
        never_up.initialized = &[];
        assert!(matches!(
            next(&c, &never_up),
            Move::Rollback { node: None, why } if why.contains("initialize")
        ));
        // A second planning round is never made for a handover.
        c.step = Step::Replace;
        c.replacement_rounds = 1;
        assert!(matches!(
            next(&c, &view(10, Some(&karpenters), &[])),
            Move::Rollback { node: None, .. }
        ));
    }
}
