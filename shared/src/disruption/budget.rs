//! Budget accounting for one decision: per NodePool, how many more nodes may
//! start disrupting for a reason. Nodes already disrupting (in-flight
//! commands, deleting, tainted) and nodes chosen earlier in this decision
//! count against every reason, as in Karpenter; forceful removals are not
//! limited but still count.

use std::collections::BTreeMap;

use super::decision::Reason;
use super::snapshot::NodeFacts;
use crate::config::Disruption;
use crate::ports::Timestamp;

#[derive(Debug, Clone, Default)]
struct PoolCount {
    total: usize,
    disrupting: usize,
}

#[derive(Debug, Clone)]
pub struct Budgets<'a> {
    now: Timestamp,
    /// Per pool name (the claims' `pool`): its disruption settings — the
    /// defaults (10 %) for a pool that was deleted — and its counts.
    pools: BTreeMap<&'a str, (Disruption, PoolCount)>,
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
            entry.1.total += 1;
            if f.disrupting.is_some() {
                entry.1.disrupting += 1;
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
    }

    /// Records that a node of `pool` starts disrupting.
    pub fn take(&mut self, pool: &str) {
        if let Some((_, c)) = self.pools.get_mut(pool) {
            c.disrupting += 1;
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
            count.disrupting
        )
    }

    pub fn total(&self, pool: &str) -> usize {
        self.pools.get(pool).map_or(0, |(_, c)| c.total)
    }
}
