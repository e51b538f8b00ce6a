//! The disruption decision, pure: from a snapshot of the cluster, our
//! claims, the configuration and the catalog to a verdict with a reason for
//! every node, and the commands to carry out (which the drain-and-terminate
//! machine executes).
//!
//! Methods run in a fixed order, Karpenter's: [`Emptiness`] → [`Expiration`]
//! → [`Repair`] → [`Drift`] → [`MultiNodeConsolidation`] →
//! [`SingleNodeConsolidation`]. A node taken by one is not seen by the next; budgets and the
//! simulated cluster carry over, so later moves count on what earlier ones
//! did. Voluntary commands are re-checked with [`validate`] at
//! `Command::validate_at` before acting; forceful ones act at once.
//! Last, [`handover`] hands over the Karpenter nodes of pools annotated
//! `nodewright.io/karpenter-nodes: replace` (replacement first).
//!
//! No I/O, no clock: `Snapshot::now` is the time.

pub mod balanced;
pub mod blockers;
pub mod budget;
pub mod consolidation;
pub mod context;
pub mod decision;
pub mod drift;
pub mod handover;
pub mod methods;
pub mod observe;
pub mod simulate;
pub mod snapshot;
pub mod validate;

#[cfg(test)]
mod tests;

pub use consolidation::{MultiNodeConsolidation, SingleNodeConsolidation};
pub use decision::{
    ClaimUpdate, Command, NodeDecision, Plan, Reason, Replacement, Target, Verdict,
};
pub use methods::{Drift, Emptiness, Expiration, Method, Repair};
pub use observe::observe;
pub use snapshot::{InFlight, Snapshot, Tuning};
pub use validate::validate;

use context::Context;

/// The methods, in the order they run.
pub const METHODS: [&dyn Method; 6] = [
    &Emptiness,
    &Expiration,
    &Repair,
    &Drift,
    &MultiNodeConsolidation,
    &SingleNodeConsolidation,
];

/// Decides what to disrupt. Deterministic for the same snapshot.
pub fn decide(s: &Snapshot<'_>) -> Plan {
    let mut cx = Context::new(s);
    // Which of each node's notes the consolidation methods wrote (their
    // passes may be skipped; see `NodeDecision::base_reason`).
    let mut consolidation_notes: Vec<std::ops::Range<usize>> = vec![0..0; cx.facts.len()];
    for method in METHODS {
        let _span = tracing::debug_span!("disruption_method", method = method.name()).entered();
        let consolidating = method.name().ends_with("consolidation");
        let before: Vec<usize> = cx.notes.iter().map(Vec::len).collect();
        methods::run(method, &mut cx);
        if consolidating {
            for (i, n) in before.into_iter().enumerate() {
                let r = &mut consolidation_notes[i];
                if r.start == r.end {
                    *r = n..cx.notes[i].len();
                } else {
                    r.end = cx.notes[i].len();
                }
            }
        }
    }
    let handovers = {
        let _span = tracing::debug_span!("disruption_method", method = handover::METHOD).entered();
        handover::run(&mut cx)
    };
    let nodes = (0..cx.facts.len())
        .map(|i| {
            let f = &cx.facts[i];
            let (verdict, reason) = match cx.verdicts[i] {
                Some((reason, command)) => (
                    Verdict::Disrupt { reason, command },
                    cx.commands[command].summary.clone(),
                ),
                None if cx.notes[i].is_empty() => (Verdict::Keep, methods::default_reason(&cx, i)),
                None => (Verdict::Keep, cx.notes[i].join("; ")),
            };
            let others: Vec<&String> = cx.notes[i]
                .iter()
                .enumerate()
                .filter(|(k, _)| !consolidation_notes[i].contains(k))
                .map(|(_, n)| n)
                .collect();
            let base_reason = match cx.verdicts[i] {
                Some(_) => reason.clone(),
                None if others.is_empty() => methods::default_reason(&cx, i),
                None => others
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            };
            NodeDecision {
                base_reason,
                node: f.name.clone(),
                claim_id: f.claim.map(|c| c.id.clone()),
                pool: f
                    .pool
                    .map(|p| p.name.clone())
                    .or_else(|| f.claim.map(|c| c.pool.clone())),
                verdict,
                reason,
            }
        })
        .collect();
    let claim_updates = observe::observe(&cx.facts, s.now);
    // Every reason whose method ran is reported, 0 when nothing qualified.
    let mut eligible: std::collections::BTreeMap<Reason, usize> = [Reason::Empty, Reason::Drifted]
        .into_iter()
        .chain(s.tuning.consolidation.then_some(Reason::Underutilized))
        .map(|r| (r, 0))
        .collect();
    for (reason, nodes) in &cx.eligible {
        if let Some(n) = eligible.get_mut(reason) {
            *n = nodes.len();
        }
    }
    Plan {
        now: s.now,
        nodes,
        commands: cx.commands,
        claim_updates,
        handovers,
        eligible,
    }
}
