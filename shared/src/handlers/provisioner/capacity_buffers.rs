//! CapacityBuffers: their virtual pods planned for on the cluster as it is,
//! and the nodes launched for the chunks that fit nowhere.

use super::*;

impl<P: PortSet> Provisioner<P> {
    /// Plans for the CapacityBuffers' virtual pods as for pending pods, on
    /// the cluster as it is (real pods, nominated ones and claims in
    /// flight hold their room first) and launches the nodes the chunks
    /// that fit nowhere need; nothing is bound or nominated for a virtual
    /// pod. Every [`BUFFERS_EVERY`], or now when `force` (a batch was just
    /// solved: its pods may have taken buffer room).
    pub(super) async fn keep_buffers(
        &mut self,
        config: &LoadedConfig,
        now: Timestamp,
        force: bool,
        report: &mut TickReport,
    ) -> Result<(), HandlerError> {
        if config.buffers.is_empty() {
            self.buffer_status.clear();
            return Ok(());
        }
        if !force
            && self
                .last_buffers
                .is_some_and(|t| now.duration_since(t) < BUFFERS_EVERY)
        {
            return Ok(());
        }
        self.last_buffers = Some(now);
        let store = self.ports.store();
        let cluster = self.ports.cluster();
        let resolved = super::super::resolve_buffers(cluster, &config.buffers).await;
        let virtual_pods = buffers::virtual_pods(&resolved);
        let state = store.state(now).await?;
        let (nodes, scheduled, pending, daemon_sets) = futures_util::future::try_join4(
            cluster.nodes(),
            cluster.scheduled_pods(),
            cluster.pending_pods(),
            cluster.daemon_sets(),
        )
        .await?;
        let inputs = PlanInputs {
            nominated: plan::nominated_pods(pending, &state.claims),
            claims: state.claims,
            unavailable: state.unavailable,
            usage: state.usage,
            nodes,
            scheduled,
            daemon_sets,
            catalog: self.catalog_now(config, now).await?,
            // Virtual pods have no volumes.
            volumes: crate::scheduling::volumes::VolumeIndex::default(),
        };
        let decision = inputs.decide(now, &virtual_pods, config, seed_of(now, self.ticks, 11));
        let placed: Vec<PodKey> = decision
            .fit_existing
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        let launching: Vec<PodKey> = decision
            .new_claims
            .iter()
            .flat_map(|c| c.pods.iter().cloned())
            .collect();
        let status = buffers::statuses(
            &resolved,
            &placed,
            &launching,
            &with_config_reason(decision.unschedulable, config),
        );
        // Said when it changes (a pass every 10 s would repeat it).
        if status != self.buffer_status {
            for s in &status {
                let (reason, message) = s.condition();
                info!(buffer = %s.buffer, wanted = s.wanted, placed = s.placed, launching = s.launching, unplaced = s.unplaced, condition = reason, "capacity buffer: {message}");
                if s.unplaced > 0 {
                    warn!(buffer = %s.buffer, wanted = s.wanted, unplaced = s.unplaced, reason = s.reason.as_deref().unwrap_or_default(), "capacity buffer chunk(s) fit nowhere");
                }
            }
        }
        self.buffer_status = status;
        if decision.new_claims.is_empty() {
            return Ok(());
        }
        // The nodes hold buffer room: no pod is nominated to them.
        let claims: Vec<Claim> = decision
            .new_claims
            .into_iter()
            .map(|mut c| {
                c.pods.clear();
                c
            })
            .collect();
        info!(
            nodeclaims = claims.len(),
            chunks = launching.len(),
            "launching node(s) to hold capacity buffer(s)"
        );
        for (_, end) in self
            .launcher()
            .launch_all(claims, config, &inputs.catalog)
            .await
        {
            if let LaunchEnd::Launched(id) = end {
                report.launched.push(id);
            }
        }
        Ok(())
    }
}
