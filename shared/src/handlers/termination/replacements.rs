//! Replacement capacity for a node being removed: planned with the
//! provisioner's own decision (recorded in the command before anything is
//! created), then launched through the provisioner's launcher.

use super::*;

/// Pods that need a new home when the node goes: not DaemonSet or mirror
/// pods, not pods that tolerate the disrupted taint.
pub(super) fn reschedulable(pods: &[Pod]) -> Vec<Pod> {
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
pub(super) async fn plan_replacements<P: PortSet>(
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
    let catalog = super::super::catalog_with_reservations(ports, config, now).await?;
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
    let inputs = PlanInputs {
        scheduled,
        nominated,
        nodes,
        daemon_sets,
        claims: others,
        unavailable,
        usage: store.pool_usage().await?,
        catalog,
        volumes: super::super::volume_index(cluster, &pods).await?,
    };
    let decision = inputs.decide(
        now,
        &pods,
        config,
        seed_of(&command.id, command.replacement_rounds),
    );
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
pub(super) async fn launch_replacements<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
    command: &Command,
    ids: &[String],
    seen: &Seen,
) -> Result<Option<Command>, HandlerError> {
    let existing: HashSet<&str> = seen.claims.iter().map(|c| c.id.as_str()).collect();
    let catalog =
        super::super::catalog_with_reservations(ports, config, ports.clock().now()).await?;
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
