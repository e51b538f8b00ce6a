//! Re-validation before acting (Karpenter waits 15 s): a voluntary command
//! decided on one snapshot is carried out only if it still holds on a fresh
//! one. What is re-checked: every target still exists with the same claim,
//! is not already disrupting, has the same pods, is not blocked and not
//! nominated (pods headed for it, `Context::nominated`); the
//! budgets still allow it; and the reason still holds (still empty, still
//! drifted, still consolidatable with a replacement no dearer than planned).
//!
//! The snapshot must not yet count the command itself as in flight.

use std::collections::BTreeMap;

use super::consolidation::{candidates, evaluate};
use super::context::Context;
use super::decision::{Command, Reason};
use super::methods::{drift_reason, never_initialized, unhealthy_conditions};
use super::observe::fingerprint;
use super::snapshot::Snapshot;

/// `Ok` when `command` may go ahead on `s`; `Err` says why not.
pub fn validate(command: &Command, s: &Snapshot<'_>) -> Result<(), String> {
    let mut cx = Context::new(s);
    let mut indices = Vec::new();
    for t in &command.targets {
        let Some(i) = cx.facts.iter().position(|f| f.name == t.node) else {
            return Err(format!("node {} is gone", t.node));
        };
        let f = &cx.facts[i];
        if f.claim.map(|c| c.id.as_str()) != Some(t.claim_id.as_str()) {
            return Err(format!(
                "node {} no longer belongs to claim {}",
                t.node, t.claim_id
            ));
        }
        if let Some(d) = &f.disrupting {
            return Err(format!("node {}: {d}", t.node));
        }
        if command.reason.is_forceful() {
            indices.push(i);
            continue;
        }
        if fingerprint(f) != t.pods_fingerprint {
            return Err(format!(
                "the pods on node {} changed since the decision",
                t.node
            ));
        }
        if let Some(why) = cx.blocked_for(i, command.reason) {
            return Err(why);
        }
        if command.reason != Reason::Unhealthy
            && let Some(why) = cx.nominated(i)
        {
            return Err(format!("node {}: {why}", t.node));
        }
        indices.push(i);
    }
    if command.reason.is_forceful() {
        return Ok(());
    }
    let mut per_pool: BTreeMap<String, usize> = BTreeMap::new();
    for i in &indices {
        // The repair of a node that never came up spends no budget.
        if command.reason == Reason::Unhealthy && never_initialized(cx.facts[*i].node) {
            continue;
        }
        *per_pool.entry(cx.pool_name(*i)).or_default() += 1;
    }
    for (pool, n) in &per_pool {
        if cx.budgets.remaining(pool, command.reason) < *n {
            return Err(cx.budgets.exhausted(pool, command.reason));
        }
    }
    match command.reason {
        Reason::Empty => match indices
            .iter()
            .find(|i| !cx.facts[**i].reschedulable.is_empty())
        {
            Some(i) => Err(format!("node {} is no longer empty", cx.facts[*i].name)),
            None => Ok(()),
        },
        Reason::Drifted => {
            for i in &indices {
                let claim = cx.facts[*i]
                    .claim
                    .ok_or_else(|| format!("node {} has no claim", cx.facts[*i].name))?;
                if drift_reason(&cx, *i, claim).is_none() {
                    return Err(format!("node {} is no longer drifted", cx.facts[*i].name));
                }
            }
            Ok(())
        }
        Reason::Underutilized => {
            let open = candidates(&mut cx);
            if let Some(i) = indices.iter().find(|i| !open.contains(i)) {
                let why = cx.notes[*i]
                    .last()
                    .cloned()
                    .unwrap_or_else(|| "no longer a consolidation candidate".to_owned());
                return Err(format!("node {}: {why}", cx.facts[*i].name));
            }
            let m = evaluate(&mut cx, &indices)?;
            match (&command.replacement, &m.replacement) {
                (None, Some(_)) => Err("its pods no longer fit on other nodes".to_owned()),
                (Some(planned), Some(_)) if m.replacement_price > planned.price + 1e-9 => {
                    Err(format!(
                        "the replacement would now cost ${:.4}/h, planned ${:.4}/h",
                        m.replacement_price, planned.price
                    ))
                }
                _ => Ok(()),
            }
        }
        Reason::Unhealthy => match indices
            .iter()
            .find(|i| unhealthy_conditions(cx.facts[**i].node).is_empty())
        {
            Some(i) => Err(format!("node {} is healthy again", cx.facts[*i].name)),
            None => Ok(()),
        },
        Reason::Expired | Reason::Interrupted => Ok(()),
    }
}
