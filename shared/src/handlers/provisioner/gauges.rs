//! Karpenter's gauges the provisioner publishes: the queue of pods waiting
//! for capacity and, per pool, what its claims reserve, its limits and what
//! its instances cost.

use super::*;

/// Karpenter's gauges: pods waiting for capacity
/// (`karpenter_scheduler_queue_depth`), and per pool what its claims
/// reserve, its limits (cpu in cores, memory in bytes, nodes) and what its
/// instances cost an hour at their launch prices.
pub(super) fn publish_gauges(
    config: &LoadedConfig,
    claims: &[Claim],
    usage: &std::collections::BTreeMap<String, crate::model::Usage>,
    pending: &[Pod],
    now: Timestamp,
) {
    use super::super::metrics::{gauge, karpenter};
    let t = now.as_millisecond();
    let waiting = pending.iter().filter(|p| is_provisionable(p)).count();
    gauge(
        t,
        karpenter::SCHEDULER_QUEUE_DEPTH,
        &[("controller", "provisioner")],
        waiting as f64,
    );
    let value = |resource: &str, v: i64| {
        if resource == "cpu" {
            v as f64 / 1000.0
        } else {
            v as f64
        }
    };
    for pool in &config.pools {
        let name = pool.name.as_str();
        for (resource, v) in usage.get(name).into_iter().flatten() {
            gauge(
                t,
                karpenter::NODEPOOLS_USAGE,
                &[("nodepool", name), ("resource_type", resource.as_str())],
                value(resource, *v),
            );
        }
        for (resource, v) in &pool.limits.resources {
            gauge(
                t,
                karpenter::NODEPOOLS_LIMIT,
                &[("nodepool", name), ("resource_type", resource.as_str())],
                value(resource, *v),
            );
        }
        let cost: f64 = claims
            .iter()
            .filter(|c| c.pool == pool.name)
            .filter_map(|c| c.instance.as_ref())
            .map(|i| i.price)
            .sum();
        gauge(t, karpenter::NODEPOOLS_COST, &[("nodepool", name)], cost);
    }
}
