//! The metrics a disruption decision publishes: pods' startup times, the
//! eligible nodes per reason, the decisions made.

use super::*;

/// `karpenter_pods_startup_duration_seconds`: from creation to Ready, for
/// each pod that became Ready in (`since`, `now`] (the first decision of a
/// process looks back one decision interval at most, so a warm start
/// publishes nothing twice and a cold one nothing old).
pub(super) fn publish_startups(pods: &[Pod], since: Option<Timestamp>, now: Timestamp) {
    let since = since.unwrap_or(now - SignedDuration::from_secs(10));
    for p in pods {
        let Some(created) = p.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
            continue;
        };
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        if let Some(ready) = ready
            && ready > since
            && ready <= now
        {
            super::super::metrics::seconds(
                now.as_millisecond(),
                super::super::metrics::karpenter::PODS_STARTUP,
                &[],
                ready.duration_since(created).as_secs_f64().max(0.0),
            );
        }
    }
}

/// Karpenter's `consolidation_type` label of a command's method.
pub(super) fn consolidation_type(c: &disruption::Command) -> &'static str {
    match c.method {
        "emptiness" => "empty",
        "multi-node-consolidation" => "multi",
        "single-node-consolidation" => "single",
        _ => "",
    }
}

/// `karpenter_voluntary_disruption_decisions_total` for each command that
/// starts (a voluntary one once re-validated, as Karpenter counts it when
/// its queue takes it): `replace` or `delete`, its reason, and which
/// consolidation (`empty`, `single`, `multi`) when it is one; and
/// `…_decisions_by_nodepool_total` once per pool among its targets.
/// nodewright's emptiness makes one command per empty node, Karpenter's
/// one for all the nodes a pass finds empty: emptiness commands starting
/// together count as one decision, as Karpenter counts them.
/// Karpenter's `eligible_nodes` gauge, per reason whose method ran.
pub(super) fn publish_eligible(plan: &Plan, now: Timestamp) {
    for (reason, n) in &plan.eligible {
        super::super::metrics::gauge(
            now.as_millisecond(),
            super::super::metrics::karpenter::DISRUPTION_ELIGIBLE_NODES,
            &[("reason", reason.metric_label())],
            *n as f64,
        );
    }
}

pub(super) fn publish_decisions(commands: &[&disruption::Command], now: Timestamp) {
    // (decision, reason, consolidation type) → the pools of its targets.
    type Labels = (&'static str, &'static str, &'static str);
    let mut decisions: Vec<(Labels, Vec<&str>)> = Vec::new();
    for c in commands {
        let decision = if c.replacement.is_some() {
            "replace"
        } else {
            "delete"
        };
        let consolidation_type = consolidation_type(c);
        let reason = c.reason.metric_label();
        let key = (decision, reason, consolidation_type);
        let pools = c.targets.iter().map(|t| t.pool.as_str());
        match decisions
            .iter_mut()
            .find(|(k, _)| c.method == "emptiness" && *k == key)
        {
            Some((_, seen)) => seen.extend(pools),
            None => decisions.push((key, pools.collect())),
        }
    }
    for ((decision, reason, consolidation_type), mut pools) in decisions {
        super::super::metrics::count(
            now.as_millisecond(),
            super::super::metrics::karpenter::DISRUPTION_DECISIONS,
            &[
                ("decision", decision),
                ("reason", reason),
                ("consolidation_type", consolidation_type),
            ],
            1.0,
        );
        pools.sort_unstable();
        pools.dedup();
        for pool in pools {
            super::super::metrics::count(
                now.as_millisecond(),
                super::super::metrics::karpenter::DISRUPTION_DECISIONS_BY_NODEPOOL,
                &[
                    ("nodepool", pool),
                    ("decision", decision),
                    ("reason", reason),
                    ("consolidation_type", consolidation_type),
                ],
                1.0,
            );
        }
    }
}
