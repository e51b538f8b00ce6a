//! Budget accounting for one decision: per NodePool, how many more nodes may
//! start disrupting for a reason. Nodes already disrupting (in-flight
//! commands, deleting, tainted) and nodes chosen earlier in this decision
//! count against every reason, as in Karpenter; forceful removals are not
//! limited but still count. A node that lost its readiness counts as
//! disrupting too (as Karpenter counts NotReady nodes) — but not against
//! repair, whose candidates those nodes are. A node still booting (never
//! Ready yet) is not counted at all, as Karpenter leaves out uninitialized
//! nodes.

use std::collections::BTreeMap;

use super::decision::Reason;
use super::snapshot::NodeFacts;
use crate::config::Disruption;
use crate::model::Timestamp;

#[derive(Debug, Clone, Default)]
struct PoolCount {
    total: usize,
    disrupting: usize,
    /// Not Ready after having been (and not otherwise disrupting).
    not_ready: usize,
}

#[derive(Debug, Clone)]
pub struct Budgets<'a> {
    now: Timestamp,
    /// Per pool name (the claims' `pool`): its disruption settings — the
    /// defaults (10 %) for a pool that was deleted — and its counts.
    pools: BTreeMap<&'a str, (Disruption, PoolCount)>,
}

impl PoolCount {
    /// NotReady nodes count against every reason but repair.
    fn counted_not_ready(&self, reason: Reason) -> usize {
        if reason == Reason::Unhealthy {
            0
        } else {
            self.not_ready
        }
    }
}

impl<'a> Budgets<'a> {
    pub fn new(facts: &[NodeFacts<'a>], now: Timestamp) -> Self {
        let mut pools: BTreeMap<&'a str, (Disruption, PoolCount)> = BTreeMap::new();
        for f in facts {
            let Some(claim) = f.claim else { continue };
            let disruption = f.pool.map(|p| p.disruption.clone()).unwrap_or_default();
            let entry = pools
                .entry(claim.pool.as_str())
                .or_insert((disruption, PoolCount::default()));
            let lost = !f.ready && crate::provisioning::plan::lost_readiness(f.node, now);
            if !f.ready && !lost && f.disrupting.is_none() {
                // Booting: not initialized, not counted.
                continue;
            }
            entry.1.total += 1;
            if f.disrupting.is_some() {
                entry.1.disrupting += 1;
            } else if lost {
                entry.1.not_ready += 1;
            }
        }
        Budgets { now, pools }
    }

    /// How many more nodes of `pool` may start disrupting for `reason` now
    /// (unbounded for forceful reasons).
    pub fn remaining(&self, pool: &str, reason: Reason) -> usize {
        let Some(budget_reason) = reason.budget_reason() else {
            return usize::MAX;
        };
        let Some((p, count)) = self.pools.get(pool) else {
            return 0;
        };
        p.allowed_disruptions(budget_reason, count.total, self.now)
            .saturating_sub(count.disrupting)
            .saturating_sub(count.counted_not_ready(reason))
    }

    /// Records that a node of `pool` starts disrupting for `reason`. A
    /// NotReady node taken by repair moves from one count to the other (it
    /// was not counted against repair); taken for another reason it counts
    /// twice, as in Karpenter, whose budget mapping subtracts NotReady nodes
    /// before any candidate is chosen.
    pub fn take(&mut self, pool: &str, facts: &NodeFacts<'_>, reason: Reason) {
        let lost = reason == Reason::Unhealthy
            && !facts.ready
            && facts.disrupting.is_none()
            && crate::provisioning::plan::lost_readiness(facts.node, self.now);
        if let Some((_, c)) = self.pools.get_mut(pool) {
            c.disrupting += 1;
            if lost {
                c.not_ready = c.not_ready.saturating_sub(1);
            }
        }
    }

    /// Undoes a [`Self::take`] for a removal that spends no budget (the
    /// repair of a node that never came up).
    pub fn give_back(&mut self, pool: &str) {
        if let Some((_, c)) = self.pools.get_mut(pool) {
            c.disrupting = c.disrupting.saturating_sub(1);
        }
    }

    /// Why `reason` may not disrupt another node of `pool`, worded for the user.
    pub fn exhausted(&self, pool: &str, reason: Reason) -> String {
        let Some((p, count)) = self.pools.get(pool) else {
            return format!("NodePool {pool} not found");
        };
        let allowed = reason.budget_reason().map_or(count.total, |r| {
            p.allowed_disruptions(r, count.total, self.now)
        });
        format!(
            "budget for {} exhausted in NodePool {pool} ({allowed} of {} nodes allowed, {} disrupting)",
            reason.as_str(),
            count.total,
            count.disrupting + count.counted_not_ready(reason)
        )
    }

    pub fn total(&self, pool: &str) -> usize {
        self.pools.get(pool).map_or(0, |(_, c)| c.total)
    }
}
