//! The Events and metrics of removals: a pod's Event, the node's
//! disruption, the claim released, the command's durations.

use super::*;

pub(super) async fn event<P: PortSet>(
    ports: &P,
    pod: &PodKey,
    type_: &str,
    reason: &str,
    message: String,
) {
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
pub(super) async fn publish_event<P: PortSet>(ports: &P, e: &ClusterEvent) {
    if let Err(err) = ports.cluster().record_event(e).await {
        debug!(kind = %e.kind, name = %e.name, reason = %e.reason, error = %err, "could not publish event");
    }
}

/// `karpenter_nodeclaims_disrupted_total` for a removal just started, and
/// `karpenter_pods_disruption_initiated_total` by the node's reschedulable
/// pods (DaemonSet and mirror pods excluded), with Karpenter's labels but
/// `consolidation_policy` (the removal does not carry its pool's policy).
pub(super) async fn publish_disrupted<P: PortSet>(ports: &P, spec: &RemovalSpec, now: Timestamp) {
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
pub(super) fn termination_mode(deadline: Option<Timestamp>, now: Timestamp) -> &'static str {
    match deadline {
        None => "graceful",
        Some(d) if d <= now => "forceful",
        Some(_) => "eventual",
    }
}

/// The released claim's Karpenter figures: terminated (claim and node),
/// drained, how long the removal took and how long the node lived.
pub(super) fn publish_released(command: &Command, claim: Option<&Claim>, now: Timestamp) {
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
pub(super) fn publish_metrics(command: &Command, now: Timestamp) {
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
