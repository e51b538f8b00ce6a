//! Running a scenario: its timed actions applied to the simulation.

use super::*;

/// Runs a loaded scenario's actions and then until its end.
pub async fn run<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    scenario: &Scenario,
) -> Result<(), ScenarioError> {
    let capture = crate::handlers::metrics::Capture::start();
    let ran = run_actions(sim, scenario).await;
    let metrics = capture.finish();
    sim.metrics.extend(metrics);
    ran
}

async fn run_actions<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    scenario: &Scenario,
) -> Result<(), ScenarioError> {
    let start = sim.now();
    sim.scenario_start = Some(start);
    let mut actions: Vec<(SignedDuration, &Action)> = scenario
        .actions
        .iter()
        .map(|a| Ok((parse_duration(&a.at)?, a)))
        .collect::<Result<_, ScenarioError>>()?;
    actions.sort_by_key(|(t, _)| *t);
    for (at, action) in actions {
        sim.run_until(start + at).await;
        apply_action(sim, action).await?;
    }
    sim.run_until(start + parse_duration(&scenario.run)?).await;
    Ok(())
}

async fn apply_action<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    action: &Action,
) -> Result<(), ScenarioError> {
    let err = |reason: String| ScenarioError::Action {
        at: action.at.clone(),
        reason,
    };
    match &action.what {
        ActionKind::Scale {
            deployment,
            replicas,
            namespace,
        } => sim
            .cluster
            .scale(namespace, deployment, *replicas)
            .await
            .map_err(|e| err(e.to_string())),
        ActionKind::Apply(objects) => {
            // Validated with what came before by `validate`: only read here.
            let (docs, workloads, errors) = read_objects(objects, "apply");
            if !errors.is_empty() {
                return Err(ScenarioError::Invalid(errors));
            }
            let items: Vec<ConfigItem> = docs.iter().map(|d| d.to_item(1, sim.now())).collect();
            put_config(&sim.store, items).await?;
            for w in workloads {
                sim.cluster
                    .apply(&w)
                    .await
                    .map_err(|e| err(e.to_string()))?;
            }
            Ok(())
        }
        ActionKind::RemoveCapacity(offerings) => {
            let sim_cloud: &SimCloud = sim
                .sim_cloud
                .as_ref()
                .ok_or_else(|| err("removeCapacity needs the in-memory cloud".to_owned()))?;
            for o in offerings {
                sim_cloud.remove_capacity(OfferingKey {
                    capacity_type: o.capacity_type.clone(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                });
            }
            Ok(())
        }
        ActionKind::RestoreCapacity(offerings) => {
            let sim_cloud: &SimCloud = sim
                .sim_cloud
                .as_ref()
                .ok_or_else(|| err("restoreCapacity needs the in-memory cloud".to_owned()))?;
            for o in offerings {
                sim_cloud.restore_capacity(&OfferingKey {
                    capacity_type: o.capacity_type.clone(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                });
            }
            Ok(())
        }
        ActionKind::NeverRegister(types) => {
            sim.never_register.extend(types.iter().cloned());
            Ok(())
        }
        ActionKind::Interrupt(selector)
        | ActionKind::Rebalance(selector)
        | ActionKind::ScheduledChange(selector) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("interruptions need the in-memory cloud".to_owned()))?;
            let ids = select_instances(sim, selector).await;
            if ids.is_empty() {
                return Err(err(format!("no instance matches {selector:?}")));
            }
            match &action.what {
                ActionKind::Interrupt(_) => {
                    for id in &ids {
                        if !sim_cloud.interrupt_spot(id) {
                            return Err(err(format!("instance {id} is not live spot capacity")));
                        }
                    }
                }
                ActionKind::Rebalance(_) => {
                    for id in &ids {
                        sim_cloud.recommend_rebalance(id);
                    }
                }
                _ => {
                    let after = parse_duration(selector.after.as_deref().unwrap_or("10m"))?;
                    sim_cloud.schedule_change(&ids, sim.now() + after);
                }
            }
            Ok(())
        }
        ActionKind::ImpairInstance(spec) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("impairInstance needs the in-memory cloud".to_owned()))?;
            let check = spec.status_check(sim.now()).map_err(err)?;
            let selector = spec.selector();
            let ids = select_instances(sim, &selector).await;
            if ids.is_empty() {
                return Err(err(format!("no instance matches {selector:?}")));
            }
            for id in &ids {
                if !sim_cloud.impair(id, check.clone()) {
                    return Err(err(format!("instance {id} is not live")));
                }
            }
            Ok(())
        }
        ActionKind::RecoverInstance(selector) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("recoverInstance needs the in-memory cloud".to_owned()))?;
            for id in select_instances(sim, selector).await {
                sim_cloud.recover(&id);
            }
            Ok(())
        }
        ActionKind::KubernetesVersion(version) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("kubernetesVersion needs the in-memory cloud".to_owned()))?;
            sim_cloud.set_kubernetes_version(version);
            Ok(())
        }
        ActionKind::NodeNotReady(selector) => {
            let names = select_nodes(sim, selector).await;
            if names.is_empty() {
                return Err(err(format!("no node matches {selector:?}")));
            }
            for name in names {
                sim.cluster
                    .set_node_ready(&name, false)
                    .await
                    .map_err(|e| err(e.to_string()))?;
            }
            Ok(())
        }
        ActionKind::Expect(expect) => {
            let failures = check_now(sim, expect).await;
            sim.failures.extend(
                failures
                    .into_iter()
                    .map(|f| format!("at {}: {f}", action.at)),
            );
            Ok(())
        }
        ActionKind::DeletePods(selector) => {
            let pods: Vec<crate::model::PodKey> = sim
                .cluster
                .all_pods()
                .await
                .iter()
                .filter(|p| {
                    p.metadata.namespace.as_deref().unwrap_or("default") == selector.namespace
                })
                .filter(|p| {
                    selector
                        .name
                        .as_ref()
                        .is_none_or(|n| p.metadata.name.as_ref() == Some(n))
                })
                .filter(|p| {
                    let labels = p.metadata.labels.clone().unwrap_or_default();
                    selector
                        .labels
                        .iter()
                        .all(|(k, v)| labels.get(k) == Some(v))
                })
                .map(crate::model::PodKey::of)
                .collect();
            if pods.is_empty() {
                return Err(err(format!("no pod matches {selector:?}")));
            }
            let port = sim.cluster.port();
            for pod in &pods {
                crate::ports::Cluster::delete_pod(&port, pod, selector.grace_period_seconds)
                    .await
                    .map_err(|e| err(e.to_string()))?;
            }
            Ok(())
        }
        ActionKind::Plan {} => {
            let plan = crate::handlers::disruption::dry_run(&sim.ports(), sim.disruption_tuning())
                .await
                .map_err(|e| err(e.to_string()))?;
            sim.dry_runs.push(plan);
            Ok(())
        }
        ActionKind::Enqueue(body) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("enqueue needs the in-memory cloud".to_owned()))?;
            let text = match body {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            sim_cloud.enqueue(text);
            Ok(())
        }
    }
}
