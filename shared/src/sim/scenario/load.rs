//! Loading a scenario into a simulation: configuration, objects, spot
//! pools, reservations and neighbours' instances.

use super::*;

/// Writes configuration items, replacing what is stored under the same name.
pub async fn put_config<S: Store>(store: &S, items: Vec<ConfigItem>) -> Result<(), ScenarioError> {
    let stored = store
        .config_items()
        .await
        .map_err(|e| ScenarioError::Parse(e.to_string()))?;
    for mut item in items {
        item.version = stored
            .iter()
            .find(|s| s.kind == item.kind && s.name == item.name)
            .map_or(1, |s| s.version + 1);
        store
            .put_config_item(&item)
            .await
            .map_err(|e| ScenarioError::Parse(e.to_string()))?;
    }
    Ok(())
}

/// Loads a scenario into a simulation: configuration into the store, workloads into the cluster.
pub async fn load<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    scenario: &Scenario,
) -> Result<(), ScenarioError> {
    validate(scenario)?;
    if let Some(depths) = scenario.spot_pools.depths() {
        let sim_cloud = sim.sim_cloud.as_ref().ok_or_else(|| {
            ScenarioError::Parse("spotPools needs the in-memory cloud".to_owned())
        })?;
        sim_cloud.set_spot_pools(depths);
    }
    if !scenario.capacity_reservations.is_empty() {
        let sim_cloud = sim.sim_cloud.as_ref().ok_or_else(|| {
            ScenarioError::Parse("capacityReservations needs the in-memory cloud".to_owned())
        })?;
        let start = sim.now();
        for r in &scenario.capacity_reservations {
            let end_time = match &r.ends_after {
                Some(d) => Some(start + parse_duration(d)?),
                None => None,
            };
            sim_cloud.add_reservation(crate::cloud::CapacityReservation {
                id: r.id.clone(),
                instance_type: r.instance_type.clone(),
                zone: r.zone.clone(),
                owner_id: r.owner_id.clone(),
                reservation_type: r.reservation_type,
                instance_match_criteria: r.instance_match_criteria.clone(),
                interruptible: r.interruptible,
                total: r.count,
                available: r.count,
                end_time,
                tags: r.tags.clone(),
            });
        }
    }
    let pace = &scenario.simulator;
    let set = |text: &Option<String>, field: &mut SignedDuration| -> Result<(), ScenarioError> {
        if let Some(t) = text {
            *field = parse_duration(t)?;
        }
        Ok(())
    };
    set(&pace.step, &mut sim.settings.step)?;
    set(&pace.provisioner_poll, &mut sim.settings.provisioner.poll)?;
    set(
        &pace.disruption_every,
        &mut sim.settings.disruption.decide_every,
    )?;
    set(&pace.disruption_poll, &mut sim.settings.disruption.poll)?;
    if let Some(on) = pace.disruption {
        sim.settings.disruption_enabled = on;
    }
    if let Some(d) = &pace.detach {
        sim.cluster
            .set_detach_time(parse_duration(d)?)
            .await
            .map_err(|e| ScenarioError::Parse(e.to_string()))?;
    }
    let (items, workloads) = split_objects(&scenario.objects, sim.now())?;
    put_config(&sim.store, items).await?;
    for w in workloads {
        sim.cluster
            .apply(&w)
            .await
            .map_err(|e| ScenarioError::Parse(e.to_string()))?;
    }
    sim.track_pending |= scenario.expect.max_pending_seconds.is_some()
        || scenario
            .actions
            .iter()
            .any(|a| matches!(&a.what, ActionKind::Expect(e) if e.max_pending_seconds.is_some()));
    Ok(())
}

/// The instance ids an interruption action names, from the nodes' labels
/// and provider ids, or from the in-memory cloud's instances.
pub(super) async fn select_instances<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    selector: &InstanceSelector,
) -> Vec<String> {
    let nodes = sim.cluster.all_nodes().await;
    let mut ids = Vec::new();
    for n in nodes {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let matches = selector
            .labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && selector
                .instance_type
                .as_ref()
                .is_none_or(|t| labels.get(crate::scheduling::labels::INSTANCE_TYPE) == Some(t))
            && selector
                .zone
                .as_ref()
                .is_none_or(|z| labels.get(crate::scheduling::labels::ZONE) == Some(z))
            && selector
                .node
                .as_ref()
                .is_none_or(|name| n.metadata.name.as_ref() == Some(name));
        let provider = n
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        if matches
            && let Some(id) = provider
                .rsplit('/')
                .next()
                .filter(|id| id.starts_with("i-"))
        {
            ids.push(id.to_owned());
        }
    }
    ids.sort();
    ids
}

/// The names of the nodes an action's selector matches.
pub(super) async fn select_nodes<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    selector: &InstanceSelector,
) -> Vec<String> {
    let mut names: Vec<String> =
        sim.cluster
            .all_nodes()
            .await
            .into_iter()
            .filter(|n| {
                let labels = n.metadata.labels.clone().unwrap_or_default();
                selector
                    .labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
                    && selector.instance_type.as_ref().is_none_or(|t| {
                        labels.get(crate::scheduling::labels::INSTANCE_TYPE) == Some(t)
                    })
                    && selector
                        .zone
                        .as_ref()
                        .is_none_or(|z| labels.get(crate::scheduling::labels::ZONE) == Some(z))
                    && selector
                        .node
                        .as_ref()
                        .is_none_or(|name| n.metadata.name.as_ref() == Some(name))
            })
            .filter_map(|n| n.metadata.name)
            .collect();
    names.sort();
    names
}
