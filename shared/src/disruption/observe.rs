//! The bookkeeping that makes "empty for 30 s" and "consolidatable after
//! `consolidateAfter`" measurable across invocations: for every node we
//! launched, a fingerprint of its reschedulable pods, when that set last
//! changed, and since when it is empty. Pure: the handler writes the
//! updates back; a lost update only delays a removal (times are taken when
//! a change is first *seen*, so a removal is never early).

use super::decision::ClaimUpdate;
use super::snapshot::NodeFacts;
use crate::config::hash::{self, fnv1a};
use crate::model::Timestamp;
use crate::model::claim::DisruptionState;

/// The fingerprint of a node's reschedulable pods (their uids, sorted).
pub fn fingerprint(facts: &NodeFacts<'_>) -> String {
    let mut uids: Vec<String> = facts
        .reschedulable
        .iter()
        .map(|p| {
            p.metadata
                .uid
                .clone()
                .unwrap_or_else(|| crate::model::PodKey::of(p).to_string())
        })
        .collect();
    uids.sort();
    format!("{:016x}", fnv1a(uids.join(",").as_bytes()))
}

/// The state a claim should have now, given what its node holds.
pub fn next_state(
    previous: &DisruptionState,
    facts: &NodeFacts<'_>,
    now: Timestamp,
) -> DisruptionState {
    let print = fingerprint(facts);
    let changed = previous.pods_fingerprint.as_deref() != Some(print.as_str());
    let last_pod_event_at = if changed {
        Some(now)
    } else {
        previous.last_pod_event_at.or(Some(now))
    };
    let empty = facts.reschedulable.is_empty();
    let empty_since = match (empty, previous.empty_since) {
        (false, _) => None,
        (true, Some(since)) => Some(since),
        (true, None) => Some(now),
    };
    DisruptionState {
        pods_fingerprint: Some(print),
        last_pod_event_at,
        empty_since,
        // Written by a rolled-back repair; carried as they are.
        repair_failures: previous.repair_failures,
        repair_retry_at: previous.repair_retry_at,
    }
}

/// The updates to write for `facts` at `now`: claims whose state changed,
/// and claims stamped with another drift hash version (re-stamped, so
/// changing the hash scheme never drifts a fleet).
pub fn observe(facts: &[NodeFacts<'_>], now: Timestamp) -> Vec<ClaimUpdate> {
    let mut out = Vec::new();
    for f in facts {
        let Some(claim) = f.claim else { continue };
        let next = next_state(&claim.disruption, f, now);
        let restamp = match (claim.stamp.nodepool_hash.as_deref(), f.pool) {
            (Some(h), Some(pool)) if !hash::is_current_pool(h) => Some(hash::pool_hash(pool)),
            (None, Some(pool)) => Some(hash::pool_hash(pool)),
            _ => None,
        };
        if next != claim.disruption || restamp.is_some() {
            out.push(ClaimUpdate {
                claim_id: claim.id.clone(),
                disruption: next,
                nodepool_hash: restamp,
            });
        }
    }
    out
}
