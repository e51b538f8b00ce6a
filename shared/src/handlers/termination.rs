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

use std::collections::{BTreeMap, HashSet};

use futures_util::future::join_all;
use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use tracing::{Instrument, debug, info, info_span, warn};

use super::HandlerError;
use super::config::LoadedConfig;
use super::launcher::{LaunchEnd, LaunchSettings, Launcher};
use super::metrics::{self, Metric};
use crate::model::claim::{Claim, repair_backoff};
use crate::model::{Command, PodKey, RemovalReason, RemovalSpec, SignedDuration, Step, Timestamp};
use crate::ports::{
    Clock, Cloud, Cluster, ClusterError, ClusterEvent, EvictOutcome, PortSet, Store, StoreError,
};
use crate::provisioning::plan::{self, Snapshot};
use crate::termination::disrupted_taint;
use crate::termination::drain::{self, DrainPlan};
use crate::termination::machine::{self, Move, View};

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

/// Pods that need a new home when the node goes: not DaemonSet or mirror
/// pods, not pods that tolerate the disrupted taint.
fn reschedulable(pods: &[Pod]) -> Vec<Pod> {
    pods.iter()
        .filter(|p| {
            !p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "DaemonSet" || o.kind == "Node")
        })
        .filter(|p| !drain::tolerates_disruption(p))
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() || crate::disruption::snapshot::is_stateful(p)
        })
        .cloned()
        .map(|mut p| {
            // Planned as if pending: the solver looks for a new node for it.
            if let Some(spec) = p.spec.as_mut() {
                spec.node_name = None;
            }
            p
        })
        .collect()
}

/// Plans replacement capacity for the node's pods with the provisioner's
/// own decision (the rest of the cluster as it is, the node itself left
/// out, the interrupted offering avoided), and records the plan in the
/// command before anything is created.
async fn plan_replacements<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    command: &Command,
    seen: &Seen,
    now: Timestamp,
) -> Result<Option<Command>, HandlerError> {
    let cluster = ports.cluster();
    let store = ports.store();
    let node_name = seen.node.as_ref().and_then(|n| n.metadata.name.clone());
    let pods = reschedulable(&seen.pods);
    let mut next = command.next(now);
    next.step = Step::AwaitReplacement;
    next.replacing_since.get_or_insert(now);
    next.replacement_rounds += 1;
    if pods.is_empty() {
        info!("no pod needs replacement capacity");
        return write(ports, command, next).await;
    }
    // The reservations the NodeClasses select: a replacement may land in one.
    let catalog = super::catalog_with_reservations(ports, config, now).await?;
    let scheduled: Vec<Pod> = cluster
        .scheduled_pods()
        .await?
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != node_name.as_deref())
        .collect();
    let nodes: Vec<Node> = cluster
        .nodes()
        .await?
        .into_iter()
        .filter(|n| n.metadata.name != node_name)
        .collect();
    let daemon_sets = cluster.daemon_sets().await?;
    let pending = cluster.pending_pods().await?;
    let others: Vec<Claim> = seen
        .claims
        .iter()
        .filter(|c| c.id != command.id)
        .cloned()
        .collect();
    let nominated = plan::nominated_pods(pending, &others);
    let mut unavailable = store.unavailable_offerings(now).await?;
    unavailable.extend(command.spec.avoid.iter().cloned());
    let usage = store.pool_usage().await?;
    let volumes = super::volume_index(cluster, &pods).await?;
    let decision = plan::decide(&Snapshot {
        now,
        pending: &pods,
        scheduled: &scheduled,
        nominated: &nominated,
        nodes: &nodes,
        daemon_sets: &daemon_sets,
        claims: &others,
        pools: &config.pools,
        node_classes: &config.node_classes,
        catalog: &catalog,
        unavailable: &unavailable,
        usage: &usage,
        volumes: &volumes,
        settings: &config.settings,
        seed: seed_of(&command.id, command.replacement_rounds),
    });
    for (pod, reason) in &decision.unschedulable {
        warn!(pod = %pod, %reason, "no replacement capacity can hold pod; it will be drained anyway");
    }
    let fit = decision.fit_existing.len();
    info!(
        nodeclaims = decision.new_claims.len(),
        pods = pods.len(),
        fit_existing = fit,
        "computed replacement nodeclaim(s) for pod(s) of a node being removed"
    );
    next.replacements
        .extend(decision.new_claims.iter().map(|c| c.id.clone()));
    next.planned.extend(decision.new_claims);
    write(ports, command, next).await
}

/// Creates and launches the planned replacement claims (through the
/// provisioner's launcher: claim first, limits, client token); a round that
/// found no capacity anywhere plans again on other offerings.
async fn launch_replacements<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
    command: &Command,
    ids: &[String],
    seen: &Seen,
) -> Result<Option<Command>, HandlerError> {
    let existing: HashSet<&str> = seen.claims.iter().map(|c| c.id.as_str()).collect();
    let catalog = super::catalog_with_reservations(ports, config, ports.clock().now()).await?;
    let launcher = Launcher::new(ports, launch).for_removal(command.spec.reason);
    let mut next = command.next(ports.clock().now());
    let (mut no_capacity, mut attempted) = (0usize, 0usize);
    let mut fresh = Vec::new();
    for id in ids {
        if existing.contains(id.as_str()) {
            // Created by an earlier attempt: the provisioner's lifecycle
            // resumes its launch if it was never recorded.
            next.launched.push(id.clone());
        } else if let Some(claim) = command.planned.iter().find(|c| &c.id == id) {
            fresh.push(claim.clone());
        } else {
            next.launched.push(id.clone());
        }
    }
    for (id, end) in launcher.launch_all(fresh, config, &catalog).await {
        attempted += 1;
        match end {
            LaunchEnd::Launched(_) => next.launched.push(id),
            LaunchEnd::NoCapacity(_) => {
                no_capacity += 1;
                next.launched.push(id.clone());
                next.replacements.retain(|r| *r != id);
            }
            LaunchEnd::Dropped(_, reason) => {
                warn!(nodeclaim = %id, %reason, "replacement not launched");
                next.launched.push(id.clone());
                next.replacements.retain(|r| *r != id);
            }
            // The claim is recorded; its launch is resumed later.
            LaunchEnd::Retry => next.launched.push(id),
        }
    }
    next.planned.retain(|c| !next.launched.contains(&c.id));
    // A voluntary removal does not look elsewhere: the machine rolls it back.
    if attempted > 0
        && no_capacity == attempted
        && next.replacement_rounds < machine::REPLACEMENT_ROUNDS
        && !command.spec.reason.rolls_back()
    {
        info!(
            round = next.replacement_rounds,
            "replacements found no capacity; planning again on other offerings"
        );
        next.step = Step::Replace;
    }
    write(ports, command, next).await
}

/// One eviction's answer.
type Evicted = (PodKey, Result<EvictOutcome, ClusterError>);

/// An eviction sent alone, or a budget's chain (see [`evict_all`]).
enum Sending {
    One(PodKey),
    Chain(drain::BudgetedEvictions),
}

/// Sends `evict`'s evictions in the order [`drain::eviction_order`] gives
/// (the pods of a budget that allows disruptions one after the other, so
/// the API server never sleeps on a conflict over that budget; everything
/// else at once), at most [`EVICTION_CONCURRENCY`] in flight. Budgets that
/// cannot be listed only cost the ordering: the API server enforces them
/// either way.
async fn evict_all<P: PortSet>(ports: &P, pods: &[Pod], evict: &[PodKey]) -> Vec<Evicted> {
    if evict.is_empty() {
        return Vec::new();
    }
    let cluster = ports.cluster();
    let order = match cluster.pod_disruption_budgets().await {
        Ok(budgets) => drain::eviction_order(evict, pods, &budgets),
        Err(e) => {
            warn!(error = %e, "could not list PodDisruptionBudgets; evicting every pod at once (the API server still enforces them)");
            drain::EvictionOrder {
                at_once: evict.to_vec(),
                budgeted: Vec::new(),
            }
        }
    };
    // The budgets' chains first: they are the longest.
    let sends = (order.budgeted.into_iter().map(Sending::Chain))
        .chain(order.at_once.into_iter().map(Sending::One));
    let first: Vec<(Vec<Evicted>, Vec<PodKey>)> = stream::iter(sends)
        .map(|send| async move {
            let group = match send {
                Sending::One(pod) => {
                    let outcome = cluster.evict(&pod).await;
                    return (vec![(pod, outcome)], Vec::new());
                }
                Sending::Chain(group) => group,
            };
            let mut answered = Vec::new();
            let mut pods = group.pods.into_iter();
            let mut granted = 0usize;
            while granted < group.allowed
                && let Some(pod) = pods.next()
            {
                let outcome = cluster.evict(&pod).await;
                let go_on = match &outcome {
                    Ok(EvictOutcome::Evicted) => {
                        granted += 1;
                        true
                    }
                    // Gone already: the budget was not consumed.
                    Ok(EvictOutcome::Gone) => true,
                    // Refused (or failed): the rest are sent at once.
                    Ok(EvictOutcome::Blocked(_)) | Err(_) => false,
                };
                answered.push((pod, outcome));
                if !go_on {
                    break;
                }
            }
            debug!(budget = %group.budget, granted, "a budget's evictions sent one by one");
            (answered, pods.collect())
        })
        .buffer_unordered(EVICTION_CONCURRENCY)
        .collect()
        .await;
    let mut outcomes = Vec::with_capacity(evict.len());
    let mut rest = Vec::new();
    for (answered, left) in first {
        outcomes.extend(answered);
        rest.extend(left);
    }
    // What a budget has nothing left for: refused without a write.
    let refused: Vec<Evicted> = stream::iter(rest)
        .map(|pod| async move {
            let outcome = cluster.evict(&pod).await;
            (pod, outcome)
        })
        .buffer_unordered(EVICTION_CONCURRENCY)
        .collect()
        .await;
    outcomes.extend(refused);
    outcomes
}

/// One drain pass: evictions of the current tier (PDBs decide), deletions
/// that need no PDB, events for what was blocked.
async fn drain<P: PortSet>(
    ports: &P,
    command: Command,
    node: Option<&Node>,
    pods: &[Pod],
    plan: &DrainPlan,
) -> Result<Progress, HandlerError> {
    let cluster = ports.cluster();
    let node_name = node
        .and_then(|n| n.metadata.name.clone())
        .unwrap_or_default();
    let outcomes = evict_all(ports, pods, &plan.evict).await;
    // Pending pods with their own grace; pods at the deadline with the time
    // left to it (at least 1 s: never 0 while the instance still runs them).
    let deletions: Vec<(&PodKey, Option<i64>)> = plan
        .delete
        .iter()
        .map(|p| (p, None))
        .chain(
            plan.at_deadline
                .iter()
                .map(|p| (p, Some(plan.deadline_grace))),
        )
        .collect();
    for chunk in deletions.chunks(EVICTION_CONCURRENCY) {
        let deleted = join_all(
            chunk
                .iter()
                .map(|(pod, grace)| cluster.delete_pod(pod, *grace)),
        )
        .await;
        for ((pod, grace), result) in chunk.iter().zip(deleted) {
            result?;
            if grace.is_some() {
                info!(pod = %pod, grace_seconds = ?grace, deadline = ?command.spec.deadline, "deleting pod at the removal's deadline");
            } else {
                debug!(pod = %pod, "deleted pending pod");
            }
        }
    }
    let mut blocked = Vec::new();
    let mut evicted = 0usize;
    // Events go out together at the end of the pass, as the evictions did.
    let mut events: Vec<(PodKey, &'static str, &'static str, String)> = Vec::new();
    for (pod, outcome) in outcomes {
        match outcome? {
            EvictOutcome::Evicted => {
                evicted += 1;
                events.push((
                    pod,
                    "Normal",
                    "Evicted",
                    format!("Evicted pod: {}", command.spec.reason),
                ));
            }
            EvictOutcome::Gone => {}
            EvictOutcome::Blocked(reason) => blocked.push((pod, reason)),
        }
    }
    let now = ports.clock().now();
    // The API server's answers, as Karpenter counts them (200, 429; 404
    // and 409 are pods already gone).
    for (code, n) in [("200", evicted), ("429", blocked.len())] {
        if n > 0 {
            metrics::count(
                now.as_millisecond(),
                metrics::karpenter::PODS_EVICTION_REQUESTS,
                &[("code", code)],
                n as f64,
            );
        }
    }
    if evicted > 0 {
        metrics::count(
            now.as_millisecond(),
            metrics::karpenter::PODS_DRAINED,
            &[("reason", drained_reason(command.spec.reason))],
            evicted as f64,
        );
    }
    let mut next = command.next(now);
    for (pod, reason) in &blocked {
        next.evictions_blocked += 1;
        if next.reported_blocked.contains(&pod.uid) {
            debug!(pod = %pod, "did not evict pod {pod} due to PDB violation");
        } else {
            info!(pod = %pod, %reason, "did not evict pod {pod} due to PDB violation");
            next.reported_blocked.push(pod.uid.clone());
            events.push((
                pod.clone(),
                "Warning",
                "FailedDraining",
                format!("Failed to drain node {node_name}, {reason}"),
            ));
        }
    }
    for chunk in events.chunks(EVICTION_CONCURRENCY) {
        join_all(chunk.iter().map(|(pod, type_, reason, message)| {
            event(ports, pod, type_, reason, message.clone())
        }))
        .await;
    }
    if evicted + deletions.len() > 0 {
        info!(node = %node_name, evicted, deleted = deletions.len(), blocked = blocked.len(), protected = plan.protected, "draining node");
    }
    if blocked.is_empty() && plan.later == 0 && next.milestones.evictions_issued_at.is_none() {
        next.milestones.evictions_issued_at = Some(now);
    }
    // Only worth a write when something the command keeps changed.
    let changed =
        next.milestones != command.milestones || next.reported_blocked != command.reported_blocked;
    if changed && write(ports, &command, next).await?.is_none() {
        return Ok(Progress::Contended);
    }
    Ok(Progress::Waiting(now + machine::POLL))
}

/// Karpenter's `AwaitingVolumeDetachment` Event on a drained node whose
/// VolumeAttachments have not gone yet (at most five named, as Karpenter
/// lists them).
async fn awaiting_volumes_event<P: PortSet>(ports: &P, node: &str, attachments: &[String]) {
    let mut names = attachments
        .iter()
        .take(5)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if attachments.len() > 5 {
        names.push_str(&format!(" and {} other(s)", attachments.len() - 5));
    }
    let e = ClusterEvent {
        kind: "Node".to_owned(),
        namespace: None,
        name: node.to_owned(),
        type_: "Normal".to_owned(),
        reason: "AwaitingVolumeDetachment".to_owned(),
        message: format!("Awaiting deletion of bound volumeattachments ({names})"),
    };
    publish_event(ports, &e).await;
}

/// The `reason` of `karpenter_pods_drained_total`: the disruption reason
/// Karpenter writes on the NodeClaim for a voluntary disruption; none for
/// the forceful removals (expiration, interruption), which write none.
fn drained_reason(reason: RemovalReason) -> &'static str {
    match reason {
        RemovalReason::Empty => "Empty",
        RemovalReason::Underutilized => "Underutilized",
        RemovalReason::Drifted => "Drifted",
        RemovalReason::Unhealthy => "Unhealthy",
        _ => "",
    }
}

async fn event<P: PortSet>(ports: &P, pod: &PodKey, type_: &str, reason: &str, message: String) {
    let e = ClusterEvent {
        kind: "Pod".to_owned(),
        namespace: Some(pod.namespace.clone()),
        name: pod.name.clone(),
        type_: type_.to_owned(),
        reason: reason.to_owned(),
        message,
    };
    publish_event(ports, &e).await;
}

/// Events are best effort: one that cannot be written is logged, never
/// fails the removal.
async fn publish_event<P: PortSet>(ports: &P, e: &ClusterEvent) {
    if let Err(err) = ports.cluster().record_event(e).await {
        debug!(kind = %e.kind, name = %e.name, reason = %e.reason, error = %err, "could not publish event");
    }
}

/// `karpenter_nodeclaims_disrupted_total` for a removal just started, and
/// `karpenter_pods_disruption_initiated_total` by the node's reschedulable
/// pods (DaemonSet and mirror pods excluded), with Karpenter's labels but
/// `consolidation_policy` (the removal does not carry its pool's policy).
async fn publish_disrupted<P: PortSet>(ports: &P, spec: &RemovalSpec, now: Timestamp) {
    let claims = ports.store().claims().await.unwrap_or_default();
    let capacity_type = claims
        .iter()
        .find(|c| c.id == spec.claim_id)
        .and_then(|c| c.instance.as_ref())
        .map_or(String::new(), |i| i.capacity_type.clone());
    let pods = match &spec.node {
        Some(node) => ports
            .cluster()
            .pods_on_node(node)
            .await
            .map(|p| reschedulable(&p).len())
            .unwrap_or(0),
        None => 0,
    };
    let labels = [
        ("reason", metrics::reason_label(spec.reason)),
        ("nodepool", spec.pool.as_str()),
        ("capacity_type", capacity_type.as_str()),
        ("termination_mode", termination_mode(spec.deadline, now)),
    ];
    metrics::count(
        now.as_millisecond(),
        metrics::karpenter::NODECLAIMS_DISRUPTED,
        &labels,
        1.0,
    );
    metrics::count(
        now.as_millisecond(),
        metrics::karpenter::PODS_DISRUPTION_INITIATED,
        &labels,
        pods as f64,
    );
}

/// Karpenter's `termination_mode` label: `graceful` when PDBs and
/// `do-not-disrupt` are always respected (no deadline), `forceful` when
/// the deadline is already here, `eventual` when it is to come.
fn termination_mode(deadline: Option<Timestamp>, now: Timestamp) -> &'static str {
    match deadline {
        None => "graceful",
        Some(d) if d <= now => "forceful",
        Some(_) => "eventual",
    }
}

/// The released claim's Karpenter figures: terminated (claim and node),
/// drained, how long the removal took and how long the node lived.
fn publish_released(command: &Command, claim: Option<&Claim>, now: Timestamp) {
    let t = now.as_millisecond();
    let pool = command.spec.pool.as_str();
    let (zone, capacity_type) = claim
        .and_then(|c| c.instance.as_ref())
        .map_or(("", ""), |i| (i.zone.as_str(), i.capacity_type.as_str()));
    metrics::count(
        t,
        metrics::karpenter::NODECLAIMS_TERMINATED,
        &[
            ("nodepool", pool),
            ("capacity_type", capacity_type),
            ("zone", zone),
        ],
        1.0,
    );
    if command.spec.node.is_some() {
        metrics::count(
            t,
            metrics::karpenter::NODES_TERMINATED,
            &[("nodepool", pool), ("zone", zone)],
            1.0,
        );
    }
    if command.milestones.drained_at.is_some() {
        metrics::count(
            t,
            metrics::karpenter::NODES_DRAINED,
            &[("nodepool", pool)],
            1.0,
        );
    }
    metrics::seconds(
        t,
        metrics::karpenter::NODES_TERMINATION_DURATION,
        &[("nodepool", pool)],
        now.duration_since(command.created_at).as_secs_f64(),
    );
    if let Some(registered) = claim.and_then(|c| c.registered_at) {
        metrics::seconds(
            t,
            metrics::karpenter::NODES_LIFETIME,
            &[("nodepool", pool)],
            now.duration_since(registered).as_secs_f64(),
        );
    }
}

/// Reaction times from the triggering event, when it had a time.
fn publish_metrics(command: &Command, now: Timestamp) {
    let Some(event_at) = command.spec.event_at else {
        return;
    };
    let since = |t: Option<Timestamp>| t.map(|t| t.duration_since(event_at).as_secs_f64());
    let mut figures = Vec::new();
    if let Some(s) = since(command.milestones.tainted_at) {
        figures.push(Metric::seconds("TimeToTainted", s));
    }
    if let Some(s) = since(command.milestones.evictions_issued_at) {
        figures.push(Metric::seconds("TimeToEvictionsIssued", s));
    }
    if let Some(s) = since(command.milestones.drained_at) {
        figures.push(Metric::seconds("TimeToDrained", s));
    }
    figures.push(Metric::count(
        "EvictionsBlocked",
        command.evictions_blocked as f64,
    ));
    let dims: BTreeMap<&str, String> = [("Reason", command.spec.reason.to_string())].into();
    metrics::emit(now.as_millisecond(), &dims, &figures);
}

fn seed_of(id: &str, round: u32) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) ^ u64::from(round)
}
