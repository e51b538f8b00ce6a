//! Static NodePools (`replicas`): nodes launched or removed so each holds its size.

use super::*;

impl<P: PortSet> Provisioner<P> {
    /// Launches and removes nodes of the static pools (`replicas`) so each
    /// holds its size; true when it changed a claim.
    pub(super) async fn keep_static(
        &self,
        config: &LoadedConfig,
        claims: &[Claim],
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<bool, HandlerError> {
        let store = self.ports.store();
        let removing: HashSet<String> = store.commands().await?.into_iter().map(|c| c.id).collect();
        let catalog: Arc<CloudCatalog> = self.ports.cloud().catalog().await?;
        let unavailable = store.unavailable_offerings(now).await?;
        let plan = crate::provisioning::static_capacity::plan(
            &config.pools,
            claims,
            &removing,
            &catalog,
            &unavailable,
            &config.node_classes,
            now,
            seed_of(now, self.ticks, 7),
        );
        let changed = !plan.launch.is_empty() || !plan.remove.is_empty();
        if !plan.launch.is_empty() {
            info!(
                nodeclaims = plan.launch.len(),
                "launching node(s) to keep static NodePool(s) at their replicas"
            );
            for (_, end) in self
                .launcher()
                .launch_all(plan.launch, config, &catalog)
                .await
            {
                if let LaunchEnd::Launched(id) = end {
                    report.launched.push(id);
                }
            }
        }
        for id in plan.remove {
            let Some(c) = claims.iter().find(|c| c.id == id) else {
                continue;
            };
            info!(nodeclaim = %id, pool = %c.pool, "removing a node above its static NodePool's replicas");
            termination::start(
                &self.ports,
                crate::model::RemovalSpec {
                    claim_id: c.id.clone(),
                    pool: c.pool.clone(),
                    node: c.node_name.clone(),
                    instance_id: c.instance.as_ref().map(|i| i.id.clone()),
                    reason: crate::model::RemovalReason::ScaledDown,
                    replace: false,
                    deadline: None,
                    avoid: Vec::new(),
                    event_at: None,
                    handover: false,
                },
            )
            .await?;
        }
        Ok(changed)
    }
}
