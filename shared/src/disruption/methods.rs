//! The disruption methods, one small type each, run in a fixed order by
//! [`super::decide`]. Each looks at the nodes no earlier method took, and
//! either proposes a command or notes why it passed a node over.

use std::collections::BTreeMap;

use super::blockers::short;
use super::context::{Context, Proposal};
use super::decision::Reason;
use super::drift;
use crate::config::ConsolidationPolicy;
use crate::model::{ResolvedClass, SignedDuration};

/// One way to disrupt nodes, as Karpenter's disruption `Method`: which
/// nodes it considers, and the commands it makes of them. [`super::decide`]
/// owns the loop: it asks `should_disrupt` of every node, in node order,
/// then hands the candidates to `compute_commands`.
pub trait Method {
    fn name(&self) -> &'static str;
    /// Whether node `i` is a candidate of this method (Karpenter's
    /// `ShouldDisrupt`). A node passed over for a reason the user should
    /// read gets a note saying it.
    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool;
    /// Turns the candidates (in node order) into commands, within the
    /// budgets, noting why a candidate was not taken (Karpenter's
    /// `ComputeCommands`).
    fn compute_commands(&self, cx: &mut Context<'_, '_>, candidates: Vec<usize>);
}

/// Runs `method` over every node of `cx`: the loop each method shares.
pub fn run(method: &dyn Method, cx: &mut Context<'_, '_>) {
    let candidates: Vec<usize> = (0..cx.facts.len())
        .filter(|&i| method.should_disrupt(cx, i))
        .collect();
    method.compute_commands(cx, candidates);
}

/// How long a node must be NotReady before repair (Karpenter's 30 minutes).
pub const REPAIR_AFTER: SignedDuration = SignedDuration::from_mins(30);
/// Repair pauses in a pool with more unhealthy nodes than this share (in
/// percent, of the pool's nodes, rounded up).
pub const REPAIR_MAX_UNHEALTHY_PERCENT: usize = 20;

/// Nodes without reschedulable pods for `consolidateAfter` (both policies;
/// `ttlSecondsAfterEmpty` converts to WhenEmpty + consolidateAfter).
#[derive(Debug, Clone, Copy)]
pub struct Emptiness;

impl Method for Emptiness {
    fn name(&self) -> &'static str {
        "emptiness"
    }

    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool {
        if !cx.open(i) || !cx.facts[i].reschedulable.is_empty() {
            return false;
        }
        let Some(pool) = cx.facts[i].pool else {
            return false;
        };
        if pool.replicas.is_some() {
            cx.note(
                i,
                format!("empty; NodePool {} is static (replicas): kept", pool.name),
            );
            return false;
        }
        if let Some(why) = cx.holds_buffer(i) {
            cx.note(i, why);
            return false;
        }
        let Some(after) = pool.disruption.consolidate_after else {
            cx.note(
                i,
                format!(
                    "empty, but NodePool {} has consolidateAfter: Never",
                    pool.name
                ),
            );
            return false;
        };
        let empty_for = empty_for(cx, i);
        if empty_for < after {
            cx.note(
                i,
                format!(
                    "empty for {}, consolidateAfter is {}",
                    short(empty_for),
                    short(after)
                ),
            );
            return false;
        }
        true
    }

    fn compute_commands(&self, cx: &mut Context<'_, '_>, candidates: Vec<usize>) {
        for i in candidates {
            if !cx.eligible(i, Reason::Empty) {
                continue;
            }
            let after = cx.facts[i]
                .pool
                .and_then(|p| p.disruption.consolidate_after)
                .unwrap_or_default();
            let summary = format!(
                "empty for {} (consolidateAfter {})",
                short(empty_for(cx, i)),
                short(after)
            );
            let price = cx.facts[i].price;
            cx.commit(Proposal {
                reason: Reason::Empty,
                method: self.name(),
                targets: vec![i],
                outcome: None,
                replacements: Vec::new(),
                replacement_price: None,
                savings: price,
                summary,
            });
        }
    }
}

/// How long node `i` has been seen empty.
fn empty_for(cx: &Context<'_, '_>, i: usize) -> SignedDuration {
    let since = cx.states[i]
        .as_ref()
        .and_then(|s| s.empty_since)
        .unwrap_or(cx.s.now);
    cx.s.now.duration_since(since)
}

/// Nodes older than their pool's `expireAfter` (default 720 h). Forceful:
/// not limited by budgets or blockers; a replacement is launched first when
/// the pods need one.
#[derive(Debug, Clone, Copy)]
pub struct Expiration;

impl Method for Expiration {
    fn name(&self) -> &'static str {
        "expiration"
    }

    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool {
        cx.open(i) && expired(cx, i).is_some()
    }

    fn compute_commands(&self, cx: &mut Context<'_, '_>, candidates: Vec<usize>) {
        for i in candidates {
            let Some((age, expire_after)) = expired(cx, i) else {
                continue;
            };
            let summary = format!(
                "expired: {} old, expireAfter is {}",
                short(age),
                short(expire_after)
            );
            replace_and_commit(cx, i, Reason::Expired, self.name(), summary, true);
        }
    }
}

/// Node `i`'s age and its pool's `expireAfter`, when it is past it.
fn expired(cx: &Context<'_, '_>, i: usize) -> Option<(SignedDuration, SignedDuration)> {
    let expire_after = cx.facts[i].pool?.expire_after?;
    let age = cx.s.now.duration_since(cx.facts[i].created_at);
    (age >= expire_after).then_some((age, expire_after))
}

/// Launches what the node's pods need (if anything) and removes it. A
/// voluntary method gives up when some pod would fit nowhere.
fn replace_and_commit(
    cx: &mut Context<'_, '_>,
    i: usize,
    reason: Reason,
    method: &'static str,
    summary: String,
    forceful: bool,
) {
    // Drift plans room only for the pods its drain will move; pods that
    // refuse eviction (allowed past by a terminationGracePeriod) stay until
    // the deadline, as Karpenter's drift simulates. Repair and expiration
    // plan for every pod.
    let simulated = if reason == Reason::Drifted {
        let pods = cx.movable(i);
        cx.simulate_pods(&[i], &pods)
    } else {
        cx.simulate(&[i])
    };
    let outcome = match simulated {
        Ok(o) => o,
        Err(e) if forceful => {
            // Forceful: the node goes regardless; the provisioner will place what it can.
            let summary = format!("{summary}; {e}");
            cx.commit(Proposal {
                reason,
                method,
                targets: vec![i],
                outcome: None,
                replacements: vec![],
                replacement_price: None,
                savings: 0.0,
                summary,
            });
            return;
        }
        Err(e) => {
            cx.note(i, e);
            return;
        }
    };
    if !forceful && let Some((pod, why)) = outcome.unschedulable.first() {
        cx.note(
            i,
            format!("{summary}, but pod {pod} would fit nowhere: {why}"),
        );
        return;
    }
    let replacements = outcome.claims.clone();
    let summary = match replacements.len() {
        0 => format!("{summary}; its pods fit on other nodes"),
        n => format!("{summary}; {n} replacement node(s) first"),
    };
    cx.commit(Proposal {
        reason,
        method,
        targets: vec![i],
        outcome: Some(outcome),
        replacements,
        replacement_price: None,
        savings: 0.0,
        summary,
    });
}

/// Nodes that no longer match their NodePool or NodeClass (see [`drift`]).
#[derive(Debug, Clone, Copy)]
pub struct Drift;

impl Method for Drift {
    fn name(&self) -> &'static str {
        "drift"
    }

    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool {
        cx.verdicts[i].is_none() && cx.facts[i].disrupting.is_none() && drifted(cx, i).is_some()
    }

    fn compute_commands(&self, cx: &mut Context<'_, '_>, mut candidates: Vec<usize>) {
        // Empty nodes first, as Karpenter: they take no replacement, and a
        // non-empty node's pods would otherwise land on them and move again.
        candidates.sort_by_key(|i| !cx.facts[*i].reschedulable.is_empty());
        for i in candidates {
            let Some((claim, why)) = drifted(cx, i) else {
                continue;
            };
            let f = &cx.facts[i];
            if f.pool.is_none() {
                if cx.s.invalid_pools.contains(&claim.pool) {
                    cx.note(i, format!("NodePool {} failed validation: its nodes are left alone until it is fixed", claim.pool));
                    continue;
                }
                // A deleted pool: remove its nodes (default budgets), nothing to launch them as.
                let pool = cx.pool_name(i);
                if let Some(b) = cx.blocked_for(i, Reason::Drifted) {
                    cx.note(i, format!("drifted ({why}), but {b}"));
                } else if cx.budgets.remaining(&pool, Reason::Drifted) == 0 {
                    let b = cx.budgets.exhausted(&pool, Reason::Drifted);
                    cx.note(i, format!("drifted ({why}), but {b}"));
                } else {
                    cx.commit(Proposal {
                        reason: Reason::Drifted,
                        method: self.name(),
                        targets: vec![i],
                        outcome: None,
                        replacements: vec![],
                        replacement_price: None,
                        savings: 0.0,
                        summary: format!("drifted: {why}"),
                    });
                }
                continue;
            }
            // A static pool above its replicas is scaled down first: its
            // drifted nodes wait (Karpenter's static drift), so that the
            // scale-down and drift do not both remove nodes.
            if let Some(pool) = f.pool
                && let Some(replicas) = pool.replicas
            {
                let nodes = cx
                    .facts
                    .iter()
                    .filter(|g| g.pool.is_some_and(|p| p.name == pool.name))
                    .count();
                if nodes as u64 > replicas {
                    cx.note(
                        i,
                        format!(
                            "drifted ({why}), but static NodePool {} has {nodes} node(s) for {replicas} replica(s): waiting for its scale-down",
                            pool.name
                        ),
                    );
                    continue;
                }
            }
            if !cx.eligible(i, Reason::Drifted) {
                let last = cx.notes[i].pop().unwrap_or_default();
                cx.note(i, format!("drifted ({why}), but {last}"));
                continue;
            }
            replace_and_commit(
                cx,
                i,
                Reason::Drifted,
                self.name(),
                format!("drifted: {why}"),
                false,
            );
        }
    }
}

/// Node `i`'s registered claim and why it has drifted, if it has.
fn drifted<'a>(cx: &Context<'a, '_>, i: usize) -> Option<(&'a crate::model::Claim, String)> {
    let claim = cx.facts[i]
        .claim
        .filter(|c| c.phase() == crate::model::Phase::Registered)?;
    drift_reason(cx, i, claim).map(|why| (claim, why))
}

/// Why node `i` (of `claim`) has drifted, if it has.
pub fn drift_reason(cx: &Context<'_, '_>, i: usize, claim: &crate::model::Claim) -> Option<String> {
    let f = &cx.facts[i];
    let Some(pool) = f.pool else {
        return Some(format!("NodePool {} no longer exists", claim.pool));
    };
    let class_name = pool.node_class.as_deref().or(claim.node_class.as_deref());
    let class = class_name.and_then(|n| cx.s.classes.iter().find(|c| c.name == n));
    let resolved: Option<&ResolvedClass> = class_name.and_then(|n| cx.s.resolved.get(n));
    let mut node_labels =
        cx.s.catalog
            .instance_types
            .iter()
            .find(|t| t.name == f.instance_type)
            .map(|t| t.requirements_for(&claim.kubelet).single_valued_labels())
            .unwrap_or_default();
    // What the instance is, whether or not the node's labels say it.
    for (key, value) in [
        (crate::scheduling::labels::INSTANCE_TYPE, &f.instance_type),
        (crate::scheduling::labels::ZONE, &f.zone),
        (crate::scheduling::labels::CAPACITY_TYPE, &f.capacity_type),
    ] {
        if !value.is_empty() {
            node_labels.insert(key.to_owned(), value.clone());
        }
    }
    node_labels.extend(f.node.metadata.labels.clone().unwrap_or_default());
    drift::drifted(claim, pool, class, resolved, &node_labels)
}

/// A node condition repair acts on, and how long it is tolerated first:
/// the AWS provider's repair policies (the kubelet's `Ready`, and the EKS
/// node monitoring agent's conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: &'static str,
    pub status: &'static str,
    pub toleration: SignedDuration,
}

/// Karpenter's AWS provider's policies (`RepairPolicies`).
pub const REPAIR_POLICIES: [RepairPolicy; 7] = [
    RepairPolicy {
        condition: "Ready",
        status: "False",
        toleration: REPAIR_AFTER,
    },
    RepairPolicy {
        condition: "Ready",
        status: "Unknown",
        toleration: REPAIR_AFTER,
    },
    RepairPolicy {
        condition: "AcceleratedHardwareReady",
        status: "False",
        toleration: SignedDuration::from_mins(10),
    },
    RepairPolicy {
        condition: "StorageReady",
        status: "False",
        toleration: REPAIR_AFTER,
    },
    RepairPolicy {
        condition: "NetworkingReady",
        status: "False",
        toleration: REPAIR_AFTER,
    },
    RepairPolicy {
        condition: "KernelReady",
        status: "False",
        toleration: REPAIR_AFTER,
    },
    RepairPolicy {
        condition: "ContainerRuntimeReady",
        status: "False",
        toleration: REPAIR_AFTER,
    },
];

/// The node has never been Ready: its `Ready` condition is not True and
/// has not changed since the node registered (a minute's slack).
pub fn never_initialized(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let Some(ready) = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
    else {
        return true;
    };
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ready.status != "True"
        && match (ready.last_transition_time.as_ref().map(|t| t.0), created) {
            (Some(t), Some(c)) => t.duration_since(c) <= SignedDuration::from_secs(60),
            _ => true,
        }
}

/// The annotation (`"true"`, on the Node or its NodeClaim) that vetoes repair.
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";

/// A node's unhealthy conditions that match a policy: (condition, when its
/// toleration ends). A condition's transition time is taken no earlier than
/// the node's creation, as Karpenter clamps it.
pub fn unhealthy_conditions(
    node: &k8s_openapi::api::core::v1::Node,
) -> Vec<(String, crate::model::Timestamp)> {
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let policy = REPAIR_POLICIES
                .iter()
                .find(|p| p.condition == c.type_ && p.status == c.status)?;
            let since = match (c.last_transition_time.as_ref().map(|t| t.0), created) {
                (Some(t), Some(created)) => t.max(created),
                (Some(t), None) => t,
                (None, Some(created)) => created,
                (None, None) => crate::model::Timestamp::UNIX_EPOCH,
            };
            Some((
                format!("{}={}", c.type_, c.status),
                since + policy.toleration,
            ))
        })
        .collect()
}

/// Node repair as Karpenter 1.15 does it (behind the NodeRepair gate): a
/// voluntary disruption with reason `Unhealthy` — within the pool's
/// budgets, replacement first (its pods must fit somewhere), re-validated
/// before acting, rolled back if the replacement fails — of a node with a
/// condition past its policy's toleration. `karpenter.sh/do-not-repair:
/// "true"` on the node or its claim vetoes it (do-not-disrupt does not);
/// pods that would refuse eviction stop it unless the NodePool's
/// `terminationGracePeriod` bounds the drain; a pool with more than 20 % of
/// its nodes unhealthy (rounded up: one of three is not too many; counted
/// from the moment a condition matches, toleration or not) is not
/// repaired. One repair per decision, the longest overdue first.
#[derive(Debug, Clone, Copy)]
pub struct Repair;

impl Method for Repair {
    fn name(&self) -> &'static str {
        "repair"
    }

    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool {
        let bad = unhealthy_conditions(cx.facts[i].node);
        if bad.is_empty() || !cx.open(i) {
            return false;
        }
        if !cx.s.settings.node_repair {
            cx.note(
                i,
                format!(
                    "{}, but node repair is off (NodeRepair feature gate)",
                    bad[0].0
                ),
            );
            return false;
        }
        let Some((condition, eligible_at)) = most_overdue(bad) else {
            return false;
        };
        if eligible_at > cx.s.now {
            cx.note(
                i,
                format!(
                    "{condition}, repaired after {}",
                    short(eligible_at.duration_since(cx.s.now))
                ),
            );
            return false;
        }
        if let Some(claim) = cx.facts[i].claim
            && let Some(retry_at) = claim.disruption.repair_retry_at
            && retry_at > cx.s.now
        {
            cx.note(
                i,
                format!(
                    "{condition}, {} repair(s) rolled back (replacement failed): retried after {}",
                    claim.disruption.repair_failures,
                    short(retry_at.duration_since(cx.s.now))
                ),
            );
            return false;
        }
        true
    }

    fn compute_commands(&self, cx: &mut Context<'_, '_>, candidates: Vec<usize>) {
        // The circuit breaker, per NodePool: (unhealthy, all) nodes.
        let mut per_pool: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for f in &cx.facts {
            if let Some(claim) = f.claim {
                let e = per_pool.entry(claim.pool.clone()).or_default();
                e.1 += 1;
                if !unhealthy_conditions(f.node).is_empty() {
                    e.0 += 1;
                }
            }
        }
        // The longest overdue first.
        let mut due: Vec<(crate::model::Timestamp, usize, String)> = candidates
            .into_iter()
            .filter_map(|i| {
                let (condition, at) = most_overdue(unhealthy_conditions(cx.facts[i].node))?;
                Some((at, i, condition))
            })
            .collect();
        due.sort_by(|a, b| (a.0, &cx.facts[a.1].name).cmp(&(b.0, &cx.facts[b.1].name)));
        for (_, i, condition) in due {
            let vetoed = cx.facts[i]
                .node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DO_NOT_REPAIR))
                .or_else(|| {
                    cx.facts[i]
                        .claim
                        .and_then(|c| c.annotations.get(DO_NOT_REPAIR))
                })
                .is_some_and(|v| v == "true");
            if vetoed {
                cx.note(
                    i,
                    format!("{condition}, but repair is blocked through the \"{DO_NOT_REPAIR}\" annotation"),
                );
                continue;
            }
            let pool = cx.pool_name(i);
            let (bad, total) = per_pool.get(&pool).copied().unwrap_or((0, 0));
            let threshold = (total * REPAIR_MAX_UNHEALTHY_PERCENT).div_ceil(100);
            if bad > threshold {
                cx.note(i, format!("{condition}, but {bad} of {total} nodes of NodePool {pool} are unhealthy (more than 20 %): repair paused"));
                continue;
            }
            // A node that never became Ready runs no workload: as Karpenter,
            // it is repaired whatever the budgets, and spends none of them.
            let fresh = never_initialized(cx.facts[i].node);
            if fresh {
                if let Some(why) = cx.blocked_for(i, Reason::Unhealthy) {
                    cx.note(i, format!("{condition}, but {why}"));
                    continue;
                }
            } else if !cx.eligible(i, Reason::Unhealthy) {
                let last = cx.notes[i].pop().unwrap_or_default();
                cx.note(i, format!("{condition}, but {last}"));
                continue;
            }
            let before = cx.commands.len();
            replace_and_commit(
                cx,
                i,
                Reason::Unhealthy,
                self.name(),
                format!("unhealthy: {condition} past its toleration"),
                false,
            );
            if cx.commands.len() > before {
                if fresh {
                    let pool = cx.pool_name(i);
                    cx.budgets.give_back(&pool);
                }
                // One repair per decision (as drift): the next comes with the next pass.
                break;
            }
        }
    }
}

/// The unhealthy condition whose toleration ended first.
fn most_overdue(
    bad: Vec<(String, crate::model::Timestamp)>,
) -> Option<(String, crate::model::Timestamp)> {
    bad.into_iter().min_by_key(|(_, at)| *at)
}

/// Notes for nodes no method looked at closely, so every node has a reason.
pub fn default_reason(cx: &Context<'_, '_>, i: usize) -> String {
    let f = &cx.facts[i];
    if let Some(d) = &f.disrupting {
        return d.clone();
    }
    let Some(claim) = f.claim else {
        return "not launched by nodewright (no claim): never disrupted".to_owned();
    };
    if claim.phase() != crate::model::Phase::Registered {
        return "still registering".to_owned();
    }
    let Some(pool) = f.pool else {
        return format!("NodePool {} not in force", claim.pool);
    };
    if pool.replicas.is_some() {
        return format!(
            "in use; NodePool {} is static (replicas): never consolidated",
            pool.name
        );
    }
    match (pool.disruption.policy, pool.disruption.consolidate_after) {
        (_, None) => format!("in use; NodePool {} has consolidateAfter: Never", pool.name),
        (ConsolidationPolicy::WhenEmpty, _) => {
            format!(
                "{} pod(s); NodePool {} consolidates only empty nodes (WhenEmpty)",
                f.reschedulable.len(),
                pool.name
            )
        }
        (ConsolidationPolicy::WhenEmptyOrUnderutilized | ConsolidationPolicy::Balanced, _) => {
            "in use; no cheaper placement for its pods".to_owned()
        }
    }
}
