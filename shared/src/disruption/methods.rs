//! The disruption methods, one small type each, run in a fixed order by
//! [`super::decide`]. Each looks at the nodes no earlier method took, and
//! either proposes a command or notes why it passed a node over.

use std::collections::BTreeMap;

use super::blockers::short;
use super::context::{Context, Proposal};
use super::decision::Reason;
use super::drift::{self, ResolvedClass};
use crate::config::ConsolidationPolicy;
use crate::ports::SignedDuration;

/// One way to disrupt nodes.
pub trait Method {
    fn name(&self) -> &'static str;
    fn run(&self, cx: &mut Context<'_, '_>);
}

/// How long a node must be NotReady before repair (Karpenter's 30 minutes).
pub const REPAIR_AFTER: SignedDuration = SignedDuration::from_mins(30);
/// Repair pauses in a pool with more unhealthy nodes than this share.
pub const REPAIR_MAX_UNHEALTHY: f64 = 0.20;

/// Nodes without reschedulable pods for `consolidateAfter` (both policies;
/// `ttlSecondsAfterEmpty` converts to WhenEmpty + consolidateAfter).
#[derive(Debug, Clone, Copy)]
pub struct Emptiness;

impl Method for Emptiness {
    fn name(&self) -> &'static str {
        "emptiness"
    }

    fn run(&self, cx: &mut Context<'_, '_>) {
        for i in 0..cx.facts.len() {
            if !cx.open(i) || !cx.facts[i].reschedulable.is_empty() {
                continue;
            }
            let Some(pool) = cx.facts[i].pool else {
                continue;
            };
            let Some(after) = pool.disruption.consolidate_after else {
                cx.note(
                    i,
                    format!(
                        "empty, but NodePool {} has consolidateAfter: Never",
                        pool.name
                    ),
                );
                continue;
            };
            let since = cx.states[i]
                .as_ref()
                .and_then(|s| s.empty_since)
                .unwrap_or(cx.s.now);
            let empty_for = cx.s.now.duration_since(since);
            if empty_for < after {
                cx.note(
                    i,
                    format!(
                        "empty for {}, consolidateAfter is {}",
                        short(empty_for),
                        short(after)
                    ),
                );
                continue;
            }
            if !cx.eligible(i, Reason::Empty) {
                continue;
            }
            let summary = format!(
                "empty for {} (consolidateAfter {})",
                short(empty_for),
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

/// Nodes older than their pool's `expireAfter` (default 720 h). Forceful:
/// not limited by budgets or blockers; a replacement is launched first when
/// the pods need one.
#[derive(Debug, Clone, Copy)]
pub struct Expiration;

impl Method for Expiration {
    fn name(&self) -> &'static str {
        "expiration"
    }

    fn run(&self, cx: &mut Context<'_, '_>) {
        for i in 0..cx.facts.len() {
            if !cx.open(i) {
                continue;
            }
            let Some(pool) = cx.facts[i].pool else {
                continue;
            };
            let Some(expire_after) = pool.expire_after else {
                continue;
            };
            let age = cx.s.now.duration_since(cx.facts[i].created_at);
            if age < expire_after {
                continue;
            }
            let summary = format!(
                "expired: {} old, expireAfter is {}",
                short(age),
                short(expire_after)
            );
            replace_and_commit(cx, i, Reason::Expired, self.name(), summary, true);
        }
    }
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
    let outcome = match cx.simulate(&[i]) {
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

    fn run(&self, cx: &mut Context<'_, '_>) {
        for i in 0..cx.facts.len() {
            if cx.verdicts[i].is_some() || cx.facts[i].disrupting.is_some() {
                continue;
            }
            let f = &cx.facts[i];
            let Some(claim) = f
                .claim
                .filter(|c| c.phase() == crate::provisioning::Phase::Registered)
            else {
                continue;
            };
            let why = drift_reason(cx, i, claim);
            let f = &cx.facts[i];
            let Some(why) = why else { continue };
            if f.pool.is_none() {
                if cx.s.invalid_pools.contains(&claim.pool) {
                    cx.note(i, format!("NodePool {} failed validation: its nodes are left alone until it is fixed", claim.pool));
                    continue;
                }
                // A deleted pool: remove its nodes (default budgets), nothing to launch them as.
                let pool = cx.pool_name(i);
                if let Some(b) = cx.blocked(i) {
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

/// Why node `i` (of `claim`) has drifted, if it has.
pub fn drift_reason(
    cx: &Context<'_, '_>,
    i: usize,
    claim: &crate::provisioning::Claim,
) -> Option<String> {
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
            .map(|t| t.requirements().single_valued_labels())
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

/// Nodes whose `Ready` condition is False or Unknown for 30 minutes (behind
/// the NodeRepair gate). Forceful, and the drain's deadline is now: an
/// unhealthy node's pods are not running anyway.
#[derive(Debug, Clone, Copy)]
pub struct Repair;

impl Method for Repair {
    fn name(&self) -> &'static str {
        "repair"
    }

    fn run(&self, cx: &mut Context<'_, '_>) {
        let mut unhealthy: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for f in &cx.facts {
            if let Some(pool) = f.pool {
                let e = unhealthy.entry(pool.name.clone()).or_default();
                e.1 += 1;
                if f.unhealthy_since.is_some() {
                    e.0 += 1;
                }
            }
        }
        for i in 0..cx.facts.len() {
            let Some(since) = cx.facts[i].unhealthy_since else {
                continue;
            };
            if !cx.open(i) {
                continue;
            }
            if !cx.s.settings.node_repair {
                cx.note(
                    i,
                    "NotReady, but node repair is off (NodeRepair feature gate)",
                );
                continue;
            }
            let down_for = cx.s.now.duration_since(since);
            if down_for < REPAIR_AFTER {
                cx.note(
                    i,
                    format!(
                        "NotReady for {}, repaired after {}",
                        short(down_for),
                        short(REPAIR_AFTER)
                    ),
                );
                continue;
            }
            let pool = cx.pool_name(i);
            let (bad, total) = unhealthy.get(&pool).copied().unwrap_or((0, 0));
            if total > 0 && bad as f64 / total as f64 > REPAIR_MAX_UNHEALTHY {
                cx.note(i, format!("NotReady, but {bad} of {total} nodes of NodePool {pool} are unhealthy (more than 20 %): repair paused"));
                continue;
            }
            let summary = format!("NotReady for {}", short(down_for));
            cx.commit(Proposal {
                reason: Reason::Unhealthy,
                method: self.name(),
                targets: vec![i],
                outcome: None,
                replacements: vec![],
                replacement_price: None,
                savings: 0.0,
                summary,
            });
        }
    }
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
    if claim.phase() != crate::provisioning::Phase::Registered {
        return "still registering".to_owned();
    }
    let Some(pool) = f.pool else {
        return format!("NodePool {} not in force", claim.pool);
    };
    match (pool.disruption.policy, pool.disruption.consolidate_after) {
        (_, None) => format!("in use; NodePool {} has consolidateAfter: Never", pool.name),
        (ConsolidationPolicy::WhenEmpty, _) => {
            format!(
                "{} pod(s); NodePool {} consolidates only empty nodes (WhenEmpty)",
                f.reschedulable.len(),
                pool.name
            )
        }
        (ConsolidationPolicy::WhenEmptyOrUnderutilized, _) => {
            "in use; no cheaper placement for its pods".to_owned()
        }
    }
}
