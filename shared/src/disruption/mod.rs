//! The disruption decision, pure: from a snapshot of the cluster, our
//! claims, the configuration and the catalog to a verdict with a reason for
//! every node, and the commands to carry out (which the drain-and-terminate
//! machine executes).
//!
//! Methods run in a fixed order, Karpenter's: [`Emptiness`] → [`Expiration`]
//! → [`Drift`] → [`MultiNodeConsolidation`] → [`SingleNodeConsolidation`] →
//! [`Repair`]. A node taken by one is not seen by the next; budgets and the
//! simulated cluster carry over, so later moves count on what earlier ones
//! did. Voluntary commands are re-checked with [`validate`] at
//! `Command::validate_at` before acting; forceful ones act at once.
//!
//! No I/O, no clock: `Snapshot::now` is the time.

pub mod blockers;
pub mod budget;
pub mod consolidation;
pub mod context;
pub mod decision;
pub mod drift;
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
pub use drift::ResolvedClass;
pub use methods::{Drift, Emptiness, Expiration, Method, Repair};
pub use observe::observe;
pub use snapshot::{InFlight, Snapshot, Tuning};
pub use validate::validate;

use context::Context;

/// The methods, in the order they run.
pub const METHODS: [&dyn Method; 6] = [
    &Emptiness,
    &Expiration,
    &Drift,
    &MultiNodeConsolidation,
    &SingleNodeConsolidation,
    &Repair,
];

/// Decides what to disrupt. Deterministic for the same snapshot.
pub fn decide(s: &Snapshot<'_>) -> Plan {
    let mut cx = Context::new(s);
    for method in METHODS {
        let _span = tracing::debug_span!("disruption_method", method = method.name()).entered();
        method.run(&mut cx);
    }
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
            NodeDecision {
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
    Plan {
        now: s.now,
        nodes,
        commands: cx.commands,
        claim_updates,
    }
}
