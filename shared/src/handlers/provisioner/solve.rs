//! A closed batch solved and launched (a few rounds, re-planning the pods of
//! claims that found no capacity), and pods that fit on claims still in
//! flight nominated to them.

use super::*;

impl<P: PortSet> Provisioner<P> {
    /// Solves for `pods`, creates and launches claims; re-plans the pods of
    /// claims that found no capacity (a few rounds). Returns the pods that fit nowhere.
    pub(super) async fn provision(
        &self,
        config: &LoadedConfig,
        mut pods: Vec<Pod>,
        report: &mut TickReport,
    ) -> Result<Vec<(PodKey, String)>, HandlerError> {
        let store = self.ports.store();
        let cluster = self.ports.cluster();
        // Held across the rounds: the catalog, the scheduled pods, the
        // DaemonSets and the volumes; each round reads the rest again.
        let mut inputs = PlanInputs {
            catalog: self.catalog_now(config, self.ports.clock().now()).await?,
            scheduled: cluster.scheduled_pods().await?,
            daemon_sets: cluster.daemon_sets().await?,
            volumes: super::super::volume_index(cluster, &pods).await?,
            nodes: Vec::new(),
            nominated: Vec::new(),
            claims: Vec::new(),
            unavailable: Vec::new(),
            usage: BTreeMap::new(),
        };
        let mut unplaceable = Vec::new();
        const ROUNDS: usize = 3;
        for round in 0..ROUNDS {
            if pods.is_empty() {
                break;
            }
            let now = self.ports.clock().now();
            // Claims, unavailable offerings and usage: one read of the state.
            let state = store.state(now).await?;
            (inputs.claims, inputs.unavailable, inputs.usage) =
                (state.claims, state.unavailable, state.usage);
            inputs.nodes = cluster.nodes().await?;
            // The pods are listed again, and those that went away (bound by
            // kube-scheduler, deleted) since the window opened are left out.
            // Only their uids are kept meanwhile and the fresh listing's
            // pods are moved, not copied: a burst's pods are held once.
            let wanted: HashSet<String> =
                pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
            drop(std::mem::take(&mut pods));
            let all_pending = cluster.pending_pods().await?;
            let nominated_uids = plan::nominated_uids(&inputs.claims);
            let mut nominated: Vec<Pod> = Vec::new();
            for p in all_pending {
                let uid = p.metadata.uid.as_deref();
                let is_wanted = uid.is_some_and(|u| wanted.contains(u));
                if uid.is_some_and(|u| nominated_uids.contains(u)) {
                    if is_wanted {
                        nominated.push(p.clone());
                    } else {
                        nominated.push(p);
                        continue;
                    }
                }
                if is_wanted {
                    pods.push(p);
                }
            }
            drop(wanted);
            inputs.nominated = nominated;
            if round == 0 {
                info!(
                    pods = pods.len(),
                    "found provisionable pod(s): {}",
                    pod_list(&pods)
                );
            }
            let solve_started = std::time::Instant::now();
            let decision = inputs.decide(now, &pods, config, seed_of(now, self.ticks, round));
            super::super::metrics::seconds(
                now.as_millisecond(),
                super::super::metrics::karpenter::SCHEDULING_DURATION,
                &[("controller", "provisioner")],
                solve_started.elapsed().as_secs_f64(),
            );
            if !decision.fit_existing.is_empty() {
                debug!(
                    pods = decision.fit_existing.len(),
                    "pod(s) fit on existing or in-flight nodes"
                );
                self.nominate(&inputs.claims, &decision.fit_existing, config)
                    .await;
            }
            unplaceable.extend(with_config_reason(decision.unschedulable, config));
            if decision.new_claims.is_empty() {
                break;
            }
            let pod_count: usize = decision.new_claims.iter().map(|c| c.pods.len()).sum();
            info!(
                nodeclaims = decision.new_claims.len(),
                pods = pod_count,
                "computed new nodeclaim(s) to fit pod(s)"
            );
            let ends = self
                .launcher()
                .launch_all(decision.new_claims, config, &inputs.catalog)
                .await;
            let mut replan: HashSet<String> = HashSet::new();
            for (_, end) in ends {
                match end {
                    LaunchEnd::Launched(id) => report.launched.push(id),
                    LaunchEnd::NoCapacity(keys) => replan.extend(keys.into_iter().map(|k| k.uid)),
                    LaunchEnd::Dropped(keys, reason) => {
                        unplaceable.extend(keys.into_iter().map(|k| (k, reason.clone())));
                    }
                    LaunchEnd::Retry => {}
                }
            }
            pods.retain(|p| {
                p.metadata
                    .uid
                    .as_deref()
                    .is_some_and(|u| replan.contains(u))
            });
        }
        Ok(unplaceable)
    }

    /// Pods that fit on a claim still in flight join its nominated pods, so
    /// they are bound when its node registers and nobody plans their room twice.
    pub(super) async fn nominate(
        &self,
        claims: &[Claim],
        fits: &[(PodKey, String)],
        config: &LoadedConfig,
    ) {
        let mut by_claim: std::collections::BTreeMap<&str, Vec<PodKey>> =
            std::collections::BTreeMap::new();
        for (pod, node) in fits {
            by_claim.entry(node.as_str()).or_default().push(pod.clone());
        }
        for (id, pods) in by_claim {
            let Some(claim) = claims.iter().find(|c| c.id == id && c.node_name.is_none()) else {
                continue;
            };
            let mut next = claim.next();
            next.pods.extend(pods);
            let limits = config.limits(&claim.pool);
            match self.ports.store().update_claim(claim, &next, &limits).await {
                Ok(()) => {
                    info!(nodeclaim = %id, pods = next.pods.len() - claim.pods.len(), "nominated pod(s) to in-flight nodeclaim")
                }
                Err(e) => {
                    debug!(nodeclaim = %id, error = %e, "could not nominate pods; they will be planned again")
                }
            }
        }
    }
}

/// `namespace/name` of up to five pods, then a count.
pub(super) fn pod_list(pods: &[Pod]) -> String {
    let names: Vec<String> = pods
        .iter()
        .take(5)
        .map(|p| PodKey::of(p).to_string())
        .collect();
    if pods.len() > 5 {
        format!("{} and {} other(s)", names.join(", "), pods.len() - 5)
    } else {
        names.join(", ")
    }
}
