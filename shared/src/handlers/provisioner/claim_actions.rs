//! What the claims' lifecycle asks for, carried out: a launch resumed, a
//! registered node labelled and its pods bound, a timeout, an instance gone,
//! an orphan terminated or adopted.

use super::*;

impl<P: PortSet> Provisioner<P> {
    pub(super) async fn carry_out(
        &self,
        action: LifecycleAction,
        config: &LoadedConfig,
        report: &mut TickReport,
    ) -> Result<(), HandlerError> {
        let store = self.ports.store();
        let cluster = self.ports.cluster();
        match action {
            LifecycleAction::Launch { claim } => {
                let limits = config.limits(&claim.pool);
                let pool = config.pool(&claim.pool);
                let catalog = self.catalog_now(config, self.ports.clock().now()).await?;
                info!(nodeclaim = %claim.id, "resuming launch of recorded nodeclaim");
                if let LaunchEnd::Launched(id) =
                    self.launcher().launch(claim, &limits, pool, &catalog).await
                {
                    report.launched.push(id);
                }
            }
            LifecycleAction::Register {
                claim,
                node,
                lift_taint,
                bind,
            } => {
                // The labels its kubelet could not set (the instance type's
                // facts, the zone id) and the NodePool's template
                // annotations, before any pod is bound there: what pods
                // select it by.
                let catalog = self.ports.cloud().catalog().await?;
                let (labels, annotations) =
                    lifecycle::node_metadata(&claim, &catalog, config.pool(&claim.pool));
                cluster.label_node(&node, &labels, &annotations).await?;
                // While nodewright binds, the node stays closed to
                // kube-scheduler: the binding taint (NoSchedule, which the
                // kubelet admits) goes on before the unregistered one
                // (NoExecute: the kubelet would reject the pods) comes off,
                // and comes off once kube-scheduler has seen the binds. The
                // API server checks no capacity, and the pods bound here are
                // counted against what the node holds only while nobody
                // else can add to it.
                if !bind.is_empty() {
                    cluster
                        .add_taint(
                            &node,
                            &Taint::new(BINDING_TAINT_KEY, "", Effect::NoSchedule),
                        )
                        .await?;
                }
                if lift_taint {
                    cluster.remove_taint(&node, UNREGISTERED_TAINT_KEY).await?;
                }
                let mut bound = 0;
                if !bind.is_empty() {
                    // Bind only what the node's kubelet and kube-scheduler
                    // would accept; the rest stays pending for kube-scheduler.
                    let (pending, scheduled, nodes) = futures_util::future::try_join3(
                        cluster.pending_pods(),
                        cluster.scheduled_pods(),
                        cluster.nodes(),
                    )
                    .await?;
                    let to_bind: Vec<&Pod> = bind
                        .iter()
                        .filter_map(|k| {
                            pending
                                .iter()
                                .find(|p| p.metadata.uid.as_deref() == Some(k.uid.as_str()))
                        })
                        .collect();
                    let owned: Vec<Pod> = to_bind.iter().map(|p| (*p).clone()).collect();
                    let volume_index = super::super::volume_index(cluster, &owned).await?;
                    let mut admission = Admission::new(&nodes, &scheduled, &volume_index);
                    for pod in &bind {
                        let Some(p) = to_bind
                            .iter()
                            .find(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str()))
                        else {
                            continue; // bound or deleted meanwhile
                        };
                        if let Err(reason) = admission.admit(p, &node, Some(&volume_index)) {
                            info!(pod = %pod, node = %node, reason = %reason, "left pod {pod} to kube-scheduler: {reason}");
                            continue;
                        }
                        match cluster.bind(pod, &node).await {
                            Ok(BindOutcome::Bound) => bound += 1,
                            Ok(BindOutcome::AlreadyBound | BindOutcome::Gone) => {}
                            Err(e) => {
                                warn!(pod = %pod, node = %node, error = %e, "could not bind pod")
                            }
                        }
                    }
                }
                // Open to kube-scheduler: at once when nothing was bound
                // here; else a later pass lifts it once kube-scheduler has
                // had time to see the bindings (lifecycle::BINDING_SETTLE).
                if bound == 0 && (!bind.is_empty() || lift_taint) {
                    cluster.remove_taint(&node, BINDING_TAINT_KEY).await?;
                }
                let mut next = claim.next();
                next.node_name = Some(node.clone());
                next.registered_at = Some(self.ports.clock().now());
                // The nomination ends here: a pod still pending is anyone's again.
                next.pods.clear();
                let limits = config.limits(&claim.pool);
                match store.update_claim(&claim, &next, &limits).await {
                    Ok(()) | Err(StoreError::Conflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                info!(nodeclaim = %claim.id, node = %node, "registered nodeclaim");
                super::super::metrics::count(
                    self.ports.clock().now().as_millisecond(),
                    super::super::metrics::karpenter::NODES_CREATED,
                    &[
                        ("nodepool", claim.pool.as_str()),
                        (
                            "zone",
                            claim.instance.as_ref().map_or("", |i| i.zone.as_str()),
                        ),
                    ],
                    1.0,
                );
                if bound > 0 {
                    info!(node = %node, pods = bound, "bound {bound} pod(s) to node {node}");
                    report.bound += bound;
                }
            }
            LifecycleAction::LiftBindingTaint { claim, node } => {
                info!(nodeclaim = %claim.id, node = %node, "lifting the binding taint left on registered node {node}");
                cluster.remove_taint(&node, BINDING_TAINT_KEY).await?;
            }
            LifecycleAction::RegistrationTimedOut { claim } => {
                // Fail closed: no termination while state items cannot be read.
                let unreadable = store.unreadable_state().await?;
                if !unreadable.is_empty() {
                    warn!(nodeclaim = %claim.id, unreadable = unreadable.len(), "node did not register in time; not terminating while state items cannot be read");
                    return Ok(());
                }
                warn!(nodeclaim = %claim.id, timeout = %format_duration(lifecycle::REGISTRATION_TIMEOUT), "node did not register in time; terminating instance");
                if let Some(id) = claim.instance_id() {
                    self.ports.cloud().terminate(&[id.to_owned()]).await?;
                }
                self.launcher().drop_claim(&claim).await;
            }
            LifecycleAction::InstanceGone { claim } => {
                info!(nodeclaim = %claim.id, "instance is gone; releasing nodeclaim");
                if let Some(node) = &claim.node_name {
                    cluster.delete_node(node).await?;
                }
                self.launcher().drop_claim(&claim).await;
            }
            LifecycleAction::Orphan { instance } => {
                warn!(instance = %instance.id, launched_at = %instance.launched_at, "terminating instance tagged as ours with no nodeclaim and no Node past the registration timeout");
                self.ports
                    .cloud()
                    .terminate(std::slice::from_ref(&instance.id))
                    .await?;
            }
            LifecycleAction::Adopt {
                instance,
                node,
                claim,
            } => {
                let mut claim = *claim;
                let catalog = self.ports.cloud().catalog().await?;
                claim.reservation =
                    lifecycle::adopted_reservation(&catalog, &instance.instance_type);
                // The instance exists whatever the limits say: its
                // reservation is counted, never refused.
                match store
                    .create_claim(&claim, &crate::config::Limits::default())
                    .await
                {
                    Ok(()) => {
                        warn!(instance = %instance.id, nodeclaim = %claim.id, pool = %claim.pool, node = ?node, "adopted an instance of ours that no nodeclaim knew (state lost or restored from an older copy)")
                    }
                    Err(StoreError::Conflict { .. }) => {
                        debug!(instance = %instance.id, nodeclaim = %claim.id, "nodeclaim appeared meanwhile; not adopted again")
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
}
