//! Carrying out the drain-and-terminate machine: start a removal command,
//! and advance commands step by step. Every function may advance any
//! command (the interruption function right after a warning, the
//! disruption function, the provisioner's tick as the safety net); each
//! step is recorded with a write conditional on the command's version, so
//! two invocations at once never both move it forward, and a crash at any
//! point leaves a command the next one resumes.
//!
//! What may happen twice is harmless by construction: a taint already
//! there, an eviction of a pod already gone, a termination of a
//! terminated instance. Replacement claims are written into the command
//! before they are created, so a node never gets two replacement plans.
//!
//! Here: starting a removal and advancing commands (the machine's moves
//! carried out, rolled back, handed over); `replacements` (the replacement
//! capacity planned with the provisioner's decision, then launched),
//! `eviction` (the drain: evictions in budget order, pods deleted at the
//! deadline, their Events), `events` (the Events and metrics of removals).

mod events;
mod eviction;
mod replacements;

use std::collections::{BTreeMap, HashSet};

use futures_util::future::join_all;
use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use tracing::{Instrument, debug, info, info_span, warn};

use super::HandlerError;
use super::config::LoadedConfig;
use super::launcher::{LaunchEnd, LaunchSettings, Launcher};
use super::metrics::{self, Metric};
use super::plan_inputs::PlanInputs;
use crate::model::claim::{Claim, repair_backoff};
use crate::model::{Command, PodKey, RemovalReason, RemovalSpec, SignedDuration, Step, Timestamp};
use crate::ports::{
    Clock, Cloud, Cluster, ClusterError, ClusterEvent, EvictOutcome, PortSet, Store, StoreError,
};
use crate::provisioning::plan;
use crate::termination::disrupted_taint;
use crate::termination::drain::{self, DrainPlan};
use crate::termination::machine::{self, Move, View};

use self::events::{event, publish_disrupted, publish_event, publish_metrics, publish_released};
use self::eviction::{awaiting_volumes_event, drain};
use self::replacements::{launch_replacements, plan_replacements, reschedulable};

/// Evictions (and the pass's pod deletions and Events) in flight at once:
/// a 110-pod node drains in a few round trips.
const EVICTION_CONCURRENCY: usize = 32;
/// Moves one pass makes on one command before handing back (a bound, not a
/// target: a command normally stops at its first wait).
const MOVES_PER_PASS: usize = 24;

/// How starting a removal ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A new command.
    New(String),
    /// The node already had a command; its deadline was brought forward
    /// (`true`) or was already as early.
    Existing { id: String, tightened: bool },
}

/// How soon a termination held back by unreadable state items is tried again.
pub const UNREADABLE_RETRY: SignedDuration = SignedDuration::from_secs(30);

/// Where a pass left a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Waiting (for replacements, evictions, terminating pods) until about then.
    Waiting(Timestamp),
    /// Released and deleted: the node is gone.
    Finished,
    /// Another invocation moved the command meanwhile; it is theirs for now.
    Contended,
}

/// Starts a removal, or merges it into the node's command if it has one
/// (never a second command, never a second replacement): an earlier
/// deadline wins, offerings to avoid add up, a replacement once asked for
/// stays asked for.
pub async fn start<P: PortSet>(ports: &P, spec: RemovalSpec) -> Result<Started, HandlerError> {
    start_replacing(ports, spec, Vec::new()).await
}

/// [`start`] with the replacement already decided (`replacement`: claims
/// not yet written, the same for every removal that shares them): a new
/// command launches exactly those instead of planning its own. A node that
/// already has a command keeps it (merged as `start` does; the given
/// replacement is not added to it).
pub async fn start_replacing<P: PortSet>(
    ports: &P,
    spec: RemovalSpec,
    replacement: Vec<Claim>,
) -> Result<Started, HandlerError> {
    let now = ports.clock().now();
    for _ in 0..4 {
        let existing = ports
            .store()
            .commands()
            .await?
            .into_iter()
            .find(|c| c.id == spec.claim_id);
        let Some(existing) = existing else {
            let command = Command::with_replacement(spec.clone(), replacement.clone(), now);
            match ports.store().put_command(None, &command).await {
                Ok(()) => {
                    info!(
                        nodeclaim = %spec.claim_id, node = ?spec.node, reason = %spec.reason, replace = spec.replace,
                        deadline = ?spec.deadline, "disrupting node(s)"
                    );
                    publish_disrupted(ports, &spec, now).await;
                    return Ok(Started::New(command.id));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let mut next = existing.next(now);
        let earlier = match (spec.deadline, existing.spec.deadline) {
            (Some(new), Some(old)) => new < old,
            (Some(_), None) => true,
            _ => false,
        };
        if earlier {
            next.spec.deadline = spec.deadline;
            next.spec.reason = spec.reason;
            next.spec.event_at = spec.event_at.or(existing.spec.event_at);
        }
        for o in &spec.avoid {
            if !next.spec.avoid.contains(o) {
                next.spec.avoid.push(o.clone());
            }
        }
        // Replacements not started yet can still be asked for.
        next.spec.replace |= spec.replace && existing.step <= Step::Replace;
        if next.spec == existing.spec {
            debug!(nodeclaim = %existing.id, "node already being removed");
            return Ok(Started::Existing {
                id: existing.id,
                tightened: false,
            });
        }
        match ports.store().put_command(Some(&existing), &next).await {
            Ok(()) => {
                info!(nodeclaim = %existing.id, deadline = ?next.spec.deadline, "node already being removed; deadline brought forward");
                return Ok(Started::Existing {
                    id: existing.id,
                    tightened: earlier,
                });
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::conflict(
        format!("command#{}", spec.claim_id),
        "keeps changing under us",
    )
    .into())
}

/// Advances every command once; returns the earliest time one is waiting for.
pub async fn advance_all<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
) -> Result<Option<Timestamp>, HandlerError> {
    let commands = ports.store().commands().await?;
    if commands.is_empty() {
        return Ok(None);
    }
    let mut next_wake: Option<Timestamp> = None;
    for command in commands {
        let span = info_span!("command", nodeclaim = %command.id, reason = %command.spec.reason);
        match advance(ports, config, launch, command)
            .instrument(span)
            .await
        {
            Ok(Progress::Waiting(t)) => next_wake = Some(next_wake.map_or(t, |w| w.min(t))),
            Ok(Progress::Finished | Progress::Contended) => {}
            Err(e) if e.is_retryable() => warn!(error = %e, "could not advance removal; retrying"),
            Err(e) => return Err(e),
        }
    }
    Ok(next_wake)
}

/// What a pass reads once per command move.
struct Seen {
    node: Option<Node>,
    pods: Vec<Pod>,
    claims: Vec<Claim>,
    /// The node's VolumeAttachments the removal waits for, once drained.
    attachments: Vec<String>,
    /// The initialized nodes (names), read while a command awaits its replacements.
    initialized: Vec<String>,
}

async fn look<P: PortSet>(ports: &P, command: &Command) -> Result<Seen, HandlerError> {
    let claims = ports.store().claims().await?;
    let node_name = command.spec.node.clone().or_else(|| {
        claims
            .iter()
            .find(|c| c.id == command.id)
            .and_then(|c| c.node_name.clone())
    });
    let mut initialized = Vec::new();
    let (node, pods) = match node_name {
        Some(name) => {
            let nodes = ports.cluster().nodes().await?;
            if command.step == Step::AwaitReplacement {
                initialized = nodes
                    .iter()
                    .filter(|n| machine::is_initialized(n))
                    .filter_map(|n| n.metadata.name.clone())
                    .collect();
            }
            let node = nodes
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(name.as_str()));
            let pods = if node.is_some() {
                ports.cluster().pods_on_node(&name).await?
            } else {
                Vec::new()
            };
            (node, pods)
        }
        None => (None, Vec::new()),
    };
    // Only a drained node waits for its volumes: listed once it is.
    let drained = || {
        crate::termination::drain::plan(&pods, ports.clock().now(), command.spec.deadline)
            .is_drained()
    };
    let attachments = match &node {
        Some(n) if command.step == Step::Drain && drained() => {
            awaited_attachments(ports, n.metadata.name.as_deref().unwrap_or_default(), &pods)
                .await?
        }
        _ => Vec::new(),
    };
    Ok(Seen {
        node,
        pods,
        claims,
        attachments,
        initialized,
    })
}

/// The node's VolumeAttachments a removal waits for (see
/// `drain::awaited_attachments`); the claims are read only when a pod the
/// drain leaves has PVC-backed volumes.
async fn awaited_attachments<P: PortSet>(
    ports: &P,
    node: &str,
    pods: &[Pod],
) -> Result<Vec<String>, HandlerError> {
    let attachments = ports.cluster().volume_attachments(node).await?;
    if attachments.is_empty() {
        return Ok(Vec::new());
    }
    let now = ports.clock().now();
    let left_with_claims = pods.iter().any(|p| {
        !crate::termination::drain::is_drainable(p, now)
            && crate::scheduling::volumes::uses_claims(p)
    });
    let mut claims = BTreeMap::new();
    if left_with_claims {
        for c in ports.cluster().persistent_volume_claims().await? {
            let volume = c.spec.as_ref().and_then(|s| s.volume_name.clone());
            if let Some(v) = volume.filter(|v| !v.is_empty()) {
                let ns = c
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_owned());
                claims.insert((ns, c.metadata.name.clone().unwrap_or_default()), v);
            }
        }
    }
    Ok(crate::termination::drain::awaited_attachments(
        &attachments,
        pods,
        &claims,
        now,
    ))
}

/// Advances one command until it has to wait, finishes, or another
/// invocation takes it over.
pub async fn advance<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
    command: Command,
) -> Result<Progress, HandlerError> {
    advance_before(ports, config, launch, command, None).await
}

/// [`advance`], stopping (as if waiting, due now) once the command has
/// reached `stop` — the interruption function takes its new commands
/// through their taint only (`Step::Replace`), in its invocation, and
/// leaves the replacement and the drain to the loops that drive every
/// command.
pub async fn advance_before<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
    mut command: Command,
    stop: Option<Step>,
) -> Result<Progress, HandlerError> {
    for _ in 0..MOVES_PER_PASS {
        if stop.is_some_and(|s| command.step >= s) {
            return Ok(Progress::Waiting(ports.clock().now()));
        }
        let seen = look(ports, &command).await?;
        let now = ports.clock().now();
        let view = View {
            now,
            node: seen.node.as_ref(),
            pods: &seen.pods,
            claim: seen.claims.iter().find(|c| c.id == command.id),
            claims: &seen.claims,
            attachments: &seen.attachments,
            initialized: &seen.initialized,
        };
        let step_move = machine::next(&command, &view);
        let outcome = match step_move {
            Move::Advance { step, why } => {
                let mut next = command.next(now);
                next.step = step;
                match step {
                    Step::AwaitReplacement if command.step == Step::Replace => {
                        next.replacing_since.get_or_insert(now);
                        next.replacement_rounds += 1;
                    }
                    Step::Replace if next.milestones.tainted_at.is_none() => {
                        next.milestones.tainted_at = Some(now)
                    }
                    Step::Terminate if command.step == Step::Drain => {
                        next.milestones.drained_at = Some(now);
                        next.milestones.evictions_issued_at.get_or_insert(now);
                        info!(node = ?view.node.and_then(|n| n.metadata.name.clone()), %why, "drained node");
                    }
                    _ => {}
                }
                debug!(from = ?command.step, to = ?step, %why, "removal step");
                write(ports, &command, next).await?
            }
            Move::Taint { node } => {
                match ports.cluster().add_taint(&node, &disrupted_taint()).await {
                    Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                info!(node = %node, taint = %disrupted_taint(), "tainted node");
                let mut next = command.next(ports.clock().now());
                next.step = Step::Replace;
                next.milestones.tainted_at = Some(ports.clock().now());
                write(ports, &command, next).await?
            }
            Move::ExcludeFromLoadBalancers { node } => {
                let label = BTreeMap::from([(
                    crate::termination::EXCLUDE_FROM_LOAD_BALANCERS.to_owned(),
                    crate::termination::EXCLUDE_FROM_LOAD_BALANCERS_VALUE.to_owned(),
                )]);
                match ports
                    .cluster()
                    .label_node(&node, &label, &BTreeMap::new())
                    .await
                {
                    // A node gone meanwhile is seen as gone on the next look.
                    Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                info!(node = %node, "excluded node from external load balancers");
                Some(command)
            }
            Move::Replace => plan_replacements(ports, config, &command, &seen, now).await?,
            Move::LaunchReplacements { claims } => {
                launch_replacements(ports, config, launch, &command, &claims, &seen).await?
            }
            Move::Wait { until, why } => {
                debug!(%why, "removal waiting");
                if command.step == Step::Drain
                    && !seen.attachments.is_empty()
                    && command.milestones.awaiting_volumes_at.is_none()
                    && let Some(node) = seen.node.as_ref().and_then(|n| n.metadata.name.clone())
                {
                    // Once per removal, as Karpenter's Event is deduplicated per node.
                    awaiting_volumes_event(ports, &node, &seen.attachments).await;
                    let mut next = command.next(now);
                    next.milestones.awaiting_volumes_at = Some(now);
                    if write(ports, &command, next).await?.is_none() {
                        return Ok(Progress::Contended);
                    }
                }
                return Ok(Progress::Waiting(until));
            }
            Move::Rollback { node, why } => {
                return rollback(ports, &command, node.as_deref(), &why).await;
            }
            Move::Drain(plan) => {
                return drain(ports, command, seen.node.as_ref(), &seen.pods, &plan).await;
            }
            Move::Terminate { instance_id } => {
                // Fail closed: while a claim or command cannot be read, no
                // instance is terminated (the removal waits, drained).
                let unreadable = ports.store().unreadable_state().await?;
                if !unreadable.is_empty() {
                    let items: Vec<String> = unreadable.iter().map(ToString::to_string).collect();
                    tracing::error!(instance = %instance_id, unreadable = ?items, "not terminating while state items cannot be read; fix or remove them");
                    return Ok(Progress::Waiting(now + UNREADABLE_RETRY));
                }
                ports
                    .cloud()
                    .terminate(std::slice::from_ref(&instance_id))
                    .await?;
                info!(instance = %instance_id, "terminated instance");
                let mut next = command.next(ports.clock().now());
                next.milestones.terminated_at = Some(ports.clock().now());
                next.step = Step::DeleteNode;
                write(ports, &command, next).await?
            }
            Move::DeleteNode { node } => {
                if ports.cluster().delete_node(&node).await? {
                    info!(node = %node, "deleted node");
                    if command.spec.handover {
                        handed_over(ports, &command, &node).await;
                    }
                }
                let mut next = command.next(ports.clock().now());
                next.step = Step::Release;
                write(ports, &command, next).await?
            }
            Move::Release => {
                if let Some(claim) = view.claim {
                    ports.store().delete_claim(claim).await?;
                    info!(nodeclaim = %claim.id, "released nodeclaim");
                }
                match ports.store().delete_command(&command).await {
                    Ok(()) => {}
                    Err(StoreError::Conflict { .. }) => return Ok(Progress::Contended),
                    Err(e) => return Err(e.into()),
                }
                publish_metrics(&command, ports.clock().now());
                publish_released(&command, view.claim, ports.clock().now());
                return Ok(Progress::Finished);
            }
        };
        match outcome {
            Some(next) => command = next,
            None => return Ok(Progress::Contended),
        }
    }
    Ok(Progress::Waiting(ports.clock().now() + machine::POLL))
}

/// A node of Karpenter's deleted for a handover: said in the log and as an
/// Event on the Node (best effort: the deletion is done).
async fn handed_over<P: PortSet>(ports: &P, command: &Command, node: &str) {
    info!(
        pool = %command.spec.pool, node = %node, replacements = command.replacements.len(),
        "deleted a node Karpenter launched for a pool handed over (nodewright.io/karpenter-nodes=replace), its replacements initialized; Karpenter drains it and terminates its instance"
    );
    let event = ClusterEvent {
        kind: "Node".to_owned(),
        namespace: None,
        name: node.to_owned(),
        type_: "Normal".to_owned(),
        reason: "HandedOver".to_owned(),
        message: format!(
            "NodePool {} is handed over to nodewright (nodewright.io/karpenter-nodes=replace): {} replacement(s) initialized, Node deleted for Karpenter to drain and terminate",
            command.spec.pool,
            command.replacements.len()
        ),
    };
    publish_event(ports, &event).await;
}

/// Undoes a voluntary removal whose replacement failed: the taint comes
/// off (so the node takes pods again) and the command is deleted; the
/// claim stays. Replacement claims that did launch are left to register
/// (an extra node the next decisions can remove) or to the provisioner's
/// registration timeout.
async fn rollback<P: PortSet>(
    ports: &P,
    command: &Command,
    node: Option<&str>,
    why: &str,
) -> Result<Progress, HandlerError> {
    if let Some(node) = node {
        match ports
            .cluster()
            .remove_taint(node, crate::model::DISRUPTED_TAINT_KEY)
            .await
        {
            Ok(()) | Err(ClusterError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match ports.store().delete_command(command).await {
        Ok(()) => {}
        Err(StoreError::Conflict { .. }) => return Ok(Progress::Contended),
        Err(e) => return Err(e.into()),
    }
    warn!(node = ?node, reason = %command.spec.reason, %why, "rolled back disruption: node untainted, command removed");
    if command.spec.reason == RemovalReason::Unhealthy {
        back_off_repair(ports, &command.spec.claim_id).await;
    }
    Ok(Progress::Finished)
}

/// Records a rolled-back repair on the node's claim, so the next repair
/// of that node waits [`repair_backoff`] (5 minutes, doubling with each
/// failure, at most an hour) instead of asking for a new replacement on
/// the next pass. Best effort: the rollback itself is done; a lost write
/// only means an earlier retry.
async fn back_off_repair<P: PortSet>(ports: &P, claim_id: &str) {
    let claims = match ports.store().claims().await {
        Ok(claims) => claims,
        Err(e) => {
            warn!(nodeclaim = %claim_id, error = %e, "repair backoff not recorded");
            return;
        }
    };
    let Some(claim) = claims.iter().find(|c| c.id == claim_id) else {
        return;
    };
    let now = ports.clock().now();
    let mut next = claim.next();
    next.disruption.repair_failures = claim.disruption.repair_failures.saturating_add(1);
    let wait = repair_backoff(next.disruption.repair_failures);
    next.disruption.repair_retry_at = Some(now + wait);
    match ports
        .store()
        .update_claim(claim, &next, &Default::default())
        .await
    {
        Ok(()) => {
            info!(nodeclaim = %claim_id, failures = next.disruption.repair_failures, retry_in = %crate::disruption::blockers::short(wait), "repair backing off")
        }
        Err(e) => warn!(nodeclaim = %claim_id, error = %e, "repair backoff not recorded"),
    }
}

/// Writes `next` over `previous`; `None` when another invocation won.
async fn write<P: PortSet>(
    ports: &P,
    previous: &Command,
    next: Command,
) -> Result<Option<Command>, HandlerError> {
    match ports.store().put_command(Some(previous), &next).await {
        Ok(()) => Ok(Some(next)),
        Err(e @ StoreError::Conflict { .. }) => {
            debug!(error = %e, "removal moved by another invocation");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

fn seed_of(id: &str, round: u32) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) ^ u64::from(round)
}
