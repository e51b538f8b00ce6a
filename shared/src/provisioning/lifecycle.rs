//! What happens to a claim after the decision: registration of its Node,
//! the registration timeout, and garbage collection in both directions
//! (instances without a claim, claims without an instance). Pure.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};

use super::claim::{Claim, Phase, UNREGISTERED_TAINT_KEY};
use crate::ports::{Instance, PodKey, SignedDuration, Timestamp};

/// Karpenter's registration TTL.
pub const REGISTRATION_TIMEOUT: SignedDuration = SignedDuration::from_mins(15);
/// An instance tagged as ours with no claim is left alone this long, in case
/// its claim write is not visible yet.
pub const ORPHAN_GRACE: SignedDuration = SignedDuration::from_mins(2);
/// A claim recorded but not launched is launched again after this long: its
/// own invocation normally records the launch well within it.
pub const RESUME_LAUNCH_AFTER: SignedDuration = SignedDuration::from_secs(30);
/// A claim whose instance the cloud no longer lists is kept this long after
/// launch (DescribeInstances is eventually consistent).
pub const MISSING_INSTANCE_GRACE: SignedDuration = SignedDuration::from_mins(1);

#[derive(Debug, Clone, PartialEq)]
pub enum LifecycleAction {
    /// The claim was written but its launch not recorded: launch (idempotently) again.
    Launch { claim: Claim },
    /// The claim's Node registered: lift our taint, bind the still-pending pods.
    Register {
        claim: Claim,
        node: String,
        lift_taint: bool,
        bind: Vec<PodKey>,
    },
    /// No Node within the timeout: terminate the instance and drop the claim.
    RegistrationTimedOut { claim: Claim },
    /// The instance is gone: drop the claim (and its Node, if any).
    InstanceGone { claim: Claim },
    /// An instance of ours that no claim knows: terminate it.
    Orphan { instance: Instance },
}

fn provider_id(n: &Node) -> Option<&str> {
    n.spec.as_ref()?.provider_id.as_deref()
}

/// Registration and launch retries, from claims, nodes and pending pods.
pub fn registration(
    claims: &[Claim],
    nodes: &[Node],
    pending: &[Pod],
    now: Timestamp,
) -> Vec<LifecycleAction> {
    let nodes_by_provider: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((provider_id(n)?, n)))
        .collect();
    let pending_uids: HashSet<&str> = pending
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let mut actions = Vec::new();
    for c in claims {
        match c.phase() {
            Phase::Pending => {
                if now.duration_since(c.created_at) >= RESUME_LAUNCH_AFTER {
                    actions.push(LifecycleAction::Launch { claim: c.clone() });
                }
            }
            Phase::Launched => {
                let Some(instance) = &c.instance else {
                    continue;
                };
                if let Some(node) = nodes_by_provider.get(instance.provider_id.as_str()) {
                    let lift_taint = node
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|ts| ts.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY));
                    let bind = c
                        .pods
                        .iter()
                        .filter(|k| pending_uids.contains(k.uid.as_str()))
                        .cloned()
                        .collect();
                    actions.push(LifecycleAction::Register {
                        claim: c.clone(),
                        node: node.metadata.name.clone().unwrap_or_default(),
                        lift_taint,
                        bind,
                    });
                } else if now.duration_since(instance.launched_at) >= REGISTRATION_TIMEOUT {
                    actions.push(LifecycleAction::RegistrationTimedOut { claim: c.clone() });
                }
            }
            Phase::Registered => {}
        }
    }
    actions
}

/// Garbage collection against the cloud's list of our instances.
pub fn collect_garbage(
    claims: &[Claim],
    instances: &[Instance],
    now: Timestamp,
) -> Vec<LifecycleAction> {
    let claimed: HashSet<&str> = claims.iter().map(|c| c.id.as_str()).collect();
    let claimed_instances: HashSet<&str> = claims.iter().filter_map(|c| c.instance_id()).collect();
    let live: HashSet<&str> = instances
        .iter()
        .filter(|i| !i.state.is_gone_or_going())
        .map(|i| i.id.as_str())
        .collect();
    let mut actions = Vec::new();
    for i in instances {
        if i.state.is_gone_or_going() || claimed_instances.contains(i.id.as_str()) {
            continue;
        }
        // A claim that launched but did not record its instance yet still owns it.
        let owned = i.claim_id.as_deref().is_some_and(|id| claimed.contains(id));
        if !owned && now.duration_since(i.launched_at) >= ORPHAN_GRACE {
            actions.push(LifecycleAction::Orphan {
                instance: i.clone(),
            });
        }
    }
    for c in claims {
        let Some(inst) = &c.instance else { continue };
        if !live.contains(inst.id.as_str())
            && now.duration_since(inst.launched_at) >= MISSING_INSTANCE_GRACE
        {
            actions.push(LifecycleAction::InstanceGone { claim: c.clone() });
        }
    }
    actions
}
