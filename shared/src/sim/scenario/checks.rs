//! Checking a scenario's expectations against the simulation, at the end
//! or at any moment.

use super::*;

/// `costOverBoundAtMost`: the fleet's price against the LP bound of the
/// pods (DaemonSet pods included, each node pays for its own) on the pools.
async fn check_cost<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    pods: &[k8s_openapi::api::core::v1::Pod],
    at_most: f64,
) -> Option<String> {
    let (instances, catalog, config) = match (
        sim.cloud.instances().await,
        sim.cloud.catalog().await,
        crate::handlers::config::load(&sim.store).await,
    ) {
        (Ok(i), Ok(c), Ok(l)) => (i, c, l),
        _ => {
            return Some(
                "costOverBoundAtMost: the fleet, catalog or configuration could not be read"
                    .to_owned(),
            );
        }
    };
    let fleet: f64 = instances
        .iter()
        .filter(|i| i.state != crate::model::InstanceState::Terminated)
        .map(|i| i.price)
        .sum();
    let pods: Vec<crate::scheduling::SchedPod> = pods
        .iter()
        .filter(|p| {
            !crate::sim::controllers::is_finished(p) && !crate::sim::controllers::is_terminating(p)
        })
        .filter_map(|p| crate::scheduling::SchedPod::from_pod(p).ok())
        .collect();
    match crate::workload::fleet_bound::FleetBound::new(&config.pools, &catalog).bound(&pods) {
        Some(bound) if bound > 0.0 && fleet <= at_most * bound + 1e-9 => None,
        Some(bound) if bound > 0.0 => Some(format!(
            "fleet costs {fleet:.4} $/hour, {:.4} × the lower bound {bound:.4}, above {at_most}",
            fleet / bound
        )),
        _ => Some(format!(
            "costOverBoundAtMost: no lower bound for the pods on the pools (fleet {fleet:.4} $/hour)"
        )),
    }
}

/// Checks the expectations at the end of a run; returns every failed one,
/// with those of the run's `expect` actions first.
pub async fn check<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    expect: &Expect,
) -> Vec<String> {
    let mut failures = sim.failures.clone();
    failures.extend(check_now(sim, expect).await);
    failures
}

/// The `metrics` expectations against the published EMF documents.
fn check_metrics(want: &[MetricExpect], docs: &[serde_json::Value]) -> Vec<String> {
    let mut failures = Vec::new();
    for m in want {
        let values: Vec<f64> = docs
            .iter()
            .filter(|d| {
                m.labels
                    .iter()
                    .all(|(k, v)| d.get(k).and_then(|x| x.as_str()) == Some(v.as_str()))
            })
            .filter_map(|d| d.get(&m.name).and_then(serde_json::Value::as_f64))
            .collect();
        let what = if m.labels.is_empty() {
            m.name.clone()
        } else {
            format!("{} {:?}", m.name, m.labels)
        };
        if let Some(total) = m.total {
            let got: f64 = values.iter().sum();
            if (got - total).abs() > 1e-9 {
                failures.push(format!("expected {what} to total {total}, found {got}"));
            }
        }
        if let Some(n) = m.observations
            && values.len() != n
        {
            failures.push(format!(
                "expected {n} figure(s) of {what}, found {}",
                values.len()
            ));
        }
        if let Some(last) = m.last {
            match values.last() {
                Some(v) if (v - last).abs() <= 1e-9 => {}
                got => failures.push(format!("expected {what} last at {last}, found {got:?}")),
            }
        }
    }
    failures
}

/// Checks the expectations against the simulation as it is now.
pub async fn check_now<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    expect: &Expect,
) -> Vec<String> {
    let mut failures = Vec::new();
    let nodes = sim.cluster.all_nodes().await;
    let pods = sim.cluster.all_pods().await;
    let is_daemon = |p: &k8s_openapi::api::core::v1::Pod| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet")
    };
    let bound = pods
        .iter()
        .filter(|p| !is_daemon(p) && node_of(p).is_some())
        .count();
    let pending = pods.iter().filter(|p| node_of(p).is_none()).count();
    if let Some(n) = expect.nodes
        && nodes.len() != n
    {
        failures.push(format!("expected {n} node(s), found {}", nodes.len()));
    }
    if let Some(pc) = &expect.pods {
        if let Some(b) = pc.bound
            && b != bound
        {
            failures.push(format!("expected {b} bound pod(s), found {bound}"));
        }
        if let Some(p) = pc.pending
            && p != pending
        {
            failures.push(format!("expected {p} pending pod(s), found {pending}"));
        }
    }
    for nw in &expect.nodes_with {
        let matching: Vec<_> = nodes
            .iter()
            .filter(|n| {
                let labels = n.metadata.labels.clone().unwrap_or_default();
                nw.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                    && nw.without_labels.iter().all(|k| !labels.contains_key(k))
            })
            .collect();
        if matching.len() != nw.count {
            failures.push(format!(
                "expected {} node(s) with {:?}{}, found {}",
                nw.count,
                nw.labels,
                if nw.without_labels.is_empty() {
                    String::new()
                } else {
                    format!(" and none of {:?}", nw.without_labels)
                },
                matching.len()
            ));
        }
        if let Some(want) = nw.pods {
            for n in matching {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                let on = pods
                    .iter()
                    .filter(|p| !is_daemon(p) && node_of(p) == Some(name))
                    .count();
                if on != want {
                    failures.push(format!("expected {want} pod(s) on node {name}, found {on}"));
                }
            }
        }
    }
    failures.extend(placement::check_pods(
        &expect.placements,
        &expect.spread,
        &nodes,
        &pods,
    ));
    if let Some(want) = &expect.launch_options {
        match (&sim.sim_cloud, sim.cloud.catalog().await) {
            (Some(c), Ok(catalog)) => {
                let requests: Vec<_> = c.all_instances().into_iter().map(|i| i.request).collect();
                failures.extend(placement::check_launches(want, &requests, &catalog));
            }
            _ => {
                failures.push("launchOptions: needs the in-memory cloud and its catalog".to_owned())
            }
        }
    }
    if let Some(at_most) = expect.cost_over_bound_at_most {
        failures.extend(check_cost(sim, &pods, at_most).await);
    }
    if let Some(l) = expect.launches {
        let launched = match &sim.sim_cloud {
            Some(c) => c.launches(),
            None => sim.cloud.instances().await.map(|v| v.len()).unwrap_or(0),
        };
        if launched != l {
            failures.push(format!("expected {l} launch(es), found {launched}"));
        }
    }
    if !expect.metrics.is_empty() {
        let mut docs = sim.metrics.clone();
        docs.extend(crate::handlers::metrics::captured_so_far());
        failures.extend(check_metrics(&expect.metrics, &docs));
    }
    let events = sim.cluster.events().await;
    for (reason, want) in &expect.events {
        let got = events.iter().filter(|(_, e)| &e.reason == reason).count();
        if got != *want {
            failures.push(format!("expected {want} {reason} event(s), found {got}"));
        }
    }
    for (pool, limits) in &expect.peak_usage_at_most {
        for (resource, value) in limits {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut r = resources::Resources::default();
            let limit = if resource == "nodes" {
                text.parse::<i64>().ok()
            } else {
                r.set(resource, &text).ok().map(|()| r.get(resource))
            };
            let Some(limit) = limit else {
                failures.push(format!(
                    "peakUsageAtMost.{pool}.{resource}: {text:?} is not a quantity"
                ));
                continue;
            };
            let peak = sim
                .peak_usage
                .get(pool)
                .and_then(|u| u.get(resource))
                .copied()
                .unwrap_or(0);
            if peak > limit {
                failures.push(format!(
                    "pool {pool} reserved {peak} of {resource}, above {limit}"
                ));
            }
        }
    }
    if expect.pdbs_held == Some(true) {
        for (pdb, (min, lowest)) in &sim.pdb_floors {
            if lowest < min {
                failures.push(format!("PodDisruptionBudget {pdb} went down to {lowest} healthy pod(s), below its minimum {min}"));
            }
        }
    }
    if let Some(want) = expect.replacements
        && sim.replacements.len() != want
    {
        failures.push(format!(
            "expected {want} replacement(s), found {}",
            sim.replacements.len()
        ));
    }
    if let Some(want) = expect.removed_nodes
        && sim.removed_nodes.len() != want
    {
        failures.push(format!(
            "expected {want} removed node(s), found {:?}",
            sim.removed_nodes
        ));
    }
    for (reason, want) in &expect.removed_for {
        let got = sim
            .removal_reasons
            .values()
            .filter(|r| *r == reason)
            .count();
        if got != *want {
            failures.push(format!(
                "expected {want} node(s) removed for {reason}, found {got} (removals: {:?})",
                sim.removal_reasons
            ));
        }
    }
    if let Some(want) = expect.rolled_back
        && sim.rolled_back.len() != want
    {
        failures.push(format!(
            "expected {want} rolled-back removal(s), found {:?}",
            sim.rolled_back
        ));
    }
    if let Some(want) = expect.tainted_nodes {
        let key = crate::model::DISRUPTED_TAINT_KEY;
        let tainted = nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key == key))
            })
            .count();
        if tainted != want {
            failures.push(format!(
                "expected {want} node(s) with the {key} taint, found {tainted}"
            ));
        }
    }
    for (pool, want) in &expect.max_concurrent_removals {
        let got = sim.max_concurrent.get(pool).copied().unwrap_or(0);
        if got > *want {
            failures.push(format!(
                "pool {pool} had {got} removals at once, more than {want}"
            ));
        }
    }
    for pool in &expect.untouched_pools {
        let prefix = format!("{pool}-");
        let touched: Vec<&String> = sim
            .removed_nodes
            .iter()
            .filter(|id| id.starts_with(&prefix))
            .collect();
        if !touched.is_empty() {
            failures.push(format!(
                "expected no removal in pool {pool}, found {touched:?}"
            ));
        }
    }
    match &expect.max_pending_seconds {
        None => {}
        Some(PendingBound::Run(max)) => {
            if let Some((waited, pod)) = &sim.longest_pending
                && waited.as_secs() > i64::try_from(*max).unwrap_or(i64::MAX)
            {
                failures.push(format!(
                    "pod {pod} waited {}s for a node, more than {max}s",
                    waited.as_secs()
                ));
            }
        }
        Some(PendingBound::Window(w)) => {
            let start = sim.scenario_start.unwrap_or(sim.now());
            let from = parse_duration(&w.from).map(|d| start + d);
            let until = w
                .until
                .as_deref()
                .map(|u| parse_duration(u).map(|d| start + d))
                .transpose();
            match (from, until) {
                (Ok(from), Ok(until)) => {
                    if let Some((waited, pod)) =
                        sim.longest_wait_begun(from, until.unwrap_or(Timestamp::MAX))
                        && waited.as_secs() > i64::try_from(w.seconds).unwrap_or(i64::MAX)
                    {
                        failures.push(format!(
                            "pod {pod} began waiting between {} and {} and waited {}s for a node, more than {}s",
                            w.from,
                            w.until.as_deref().unwrap_or("the end"),
                            waited.as_secs(),
                            w.seconds
                        ));
                    }
                }
                (Err(e), _) | (_, Err(e)) => failures.push(format!("maxPendingSeconds: {e}")),
            }
        }
    }
    failures
}
