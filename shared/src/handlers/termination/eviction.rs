//! The drain: evictions sent in the order the PodDisruptionBudgets allow
//! (a few in flight at once), pods deleted once the deadline passed, and
//! what the drain tells through Events and metrics.

use super::*;

/// One eviction's answer.
pub(super) type Evicted = (PodKey, Result<EvictOutcome, ClusterError>);

/// An eviction sent alone, or a budget's chain (see [`evict_all`]).
pub(super) enum Sending {
    One(PodKey),
    Chain(drain::BudgetedEvictions),
}

/// Sends `evict`'s evictions in the order [`drain::eviction_order`] gives
/// (the pods of a budget that allows disruptions one after the other, so
/// the API server never sleeps on a conflict over that budget; everything
/// else at once), at most [`EVICTION_CONCURRENCY`] in flight. Budgets that
/// cannot be listed only cost the ordering: the API server enforces them
/// either way.
pub(super) async fn evict_all<P: PortSet>(
    ports: &P,
    pods: &[Pod],
    evict: &[PodKey],
) -> Vec<Evicted> {
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
pub(super) async fn drain<P: PortSet>(
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
pub(super) async fn awaiting_volumes_event<P: PortSet>(
    ports: &P,
    node: &str,
    attachments: &[String],
) {
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
pub(super) fn drained_reason(reason: RemovalReason) -> &'static str {
    match reason {
        RemovalReason::Empty => "Empty",
        RemovalReason::Underutilized => "Underutilized",
        RemovalReason::Drifted => "Drifted",
        RemovalReason::Unhealthy => "Unhealthy",
        _ => "",
    }
}
