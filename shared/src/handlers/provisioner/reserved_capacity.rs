//! Claims in capacity reservations against the reservations active now:
//! demoted when their reservation ended, told its kind, drained and
//! replaced before a capacity block ends.

use super::*;

impl<P: PortSet> Provisioner<P> {
    /// The claims in capacity reservations against the reservations
    /// active now (one listing, only when some claim is `reserved`):
    /// a claim whose reservation ended is demoted to on-demand, on its
    /// node too (Karpenter's capacity-type controller); one that does not
    /// know its reservation's kind learns it; then nodes in a capacity
    /// block that ends within 40 minutes are drained and replaced, before
    /// EC2 takes the instances back (Karpenter's capacity-reservation
    /// expiration controller). True when it changed or started anything.
    pub(super) async fn reconcile_reservations(
        &self,
        config: &LoadedConfig,
        claims: &[Claim],
        now: Timestamp,
    ) -> Result<bool, HandlerError> {
        let reserved = claims.iter().any(|c| {
            c.instance.as_ref().is_some_and(|i| {
                i.capacity_type == crate::scheduling::labels::CAPACITY_TYPE_RESERVED
            })
        });
        if !reserved {
            return Ok(false);
        }
        let all = match self.ports.cloud().capacity_reservations().await {
            Ok(all) => all,
            Err(e) => {
                warn!(error = %e, "cannot list capacity reservations; nodes in reservations are looked at next time");
                return Ok(false);
            }
        };
        // An empty listing is no evidence: the instances say whether
        // they left their reservations (`reservations::reconcile`).
        let instances = if all.is_empty() {
            match self.ports.cloud().instances().await {
                Ok(i) => i,
                Err(e) => {
                    warn!(error = %e, "no capacity reservation listed and the instances cannot be described; nodes in reservations are looked at next time");
                    return Ok(false);
                }
            }
        } else {
            Vec::new()
        };
        let catalog = self.ports.cloud().catalog().await?;
        let on_demand = |ty: &str, zone: &str| {
            catalog
                .offerings
                .iter()
                .find(|o| {
                    o.instance_type == ty
                        && o.zone == zone
                        && o.capacity_type == crate::scheduling::labels::CAPACITY_TYPE_ON_DEMAND
                })
                .map(|o| o.price)
        };
        let mut started = false;
        let mut claims = claims.to_vec();
        let changes: Vec<(Claim, crate::model::claim::ClaimInstance)> =
            reservations::reconcile(&claims, &all, &instances, on_demand)
                .into_iter()
                .map(|(c, i)| (c.clone(), i))
                .collect();
        for (claim, instance) in changes {
            let demoted =
                instance.capacity_type != crate::scheduling::labels::CAPACITY_TYPE_RESERVED;
            let mut next = claim.next();
            next.instance = Some(instance.clone());
            match self
                .ports
                .store()
                .update_claim(&claim, &next, &config.limits(&claim.pool))
                .await
            {
                Ok(()) => {}
                Err(e) => {
                    // Another writer moved it (a removal, a registration):
                    // the next pass looks again.
                    warn!(nodeclaim = %claim.id, error = %e, "cannot record the claim's capacity reservation change; trying next time");
                    continue;
                }
            }
            started = true;
            if let Some(c) = claims.iter_mut().find(|c| c.id == next.id) {
                *c = next.clone();
            }
            use crate::scheduling::labels as l;
            if demoted {
                info!(
                    nodeclaim = %claim.id,
                    capacity_reservation_id = ?claim.instance.as_ref().and_then(|i| i.capacity_reservation_id.as_deref()),
                    "the capacity reservation ended; the node is on-demand capacity now"
                );
            } else {
                info!(
                    nodeclaim = %claim.id,
                    capacity_reservation_id = ?instance.capacity_reservation_id,
                    capacity_reservation_type = ?instance.capacity_reservation_type.map(|t| t.as_str()),
                    "the capacity reservation's kind, from its listing"
                );
            }
            let Some(node) = &next.node_name else {
                continue;
            };
            let result = if demoted {
                let labels = [(
                    l::CAPACITY_TYPE.to_owned(),
                    l::CAPACITY_TYPE_ON_DEMAND.to_owned(),
                )]
                .into_iter()
                .collect();
                match self
                    .ports
                    .cluster()
                    .unlabel_node(node, &l::CAPACITY_RESERVATION)
                    .await
                {
                    Ok(()) => {
                        self.ports
                            .cluster()
                            .label_node(node, &labels, &BTreeMap::new())
                            .await
                    }
                    Err(e) => Err(e),
                }
            } else {
                let (labels, _) =
                    lifecycle::node_metadata(&next, &catalog, config.pool(&next.pool));
                let labels = labels
                    .into_iter()
                    .filter(|(k, _)| l::CAPACITY_RESERVATION.contains(&k.as_str()))
                    .collect();
                self.ports
                    .cluster()
                    .label_node(node, &labels, &BTreeMap::new())
                    .await
            };
            match result {
                Ok(()) | Err(crate::ports::ClusterError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for (claim, end) in reservations::in_expiring_blocks(&claims, &all, now) {
            let avoid = claim
                .instance
                .as_ref()
                .map(|i| OfferingKey {
                    capacity_type: i.capacity_type.clone(),
                    instance_type: i.instance_type.clone(),
                    zone: i.zone.clone(),
                })
                .into_iter()
                .collect();
            info!(
                nodeclaim = %claim.id,
                capacity_reservation_id = ?claim.instance.as_ref().and_then(|i| i.capacity_reservation_id.as_deref()),
                ends = %end,
                "initiating delete for capacity block expiration"
            );
            let spec = crate::model::RemovalSpec {
                claim_id: claim.id.clone(),
                pool: claim.pool.clone(),
                node: claim.node_name.clone(),
                instance_id: claim.instance_id().map(str::to_owned),
                reason: crate::model::RemovalReason::CapacityBlockExpiring,
                replace: true,
                deadline: Some(end),
                avoid,
                event_at: Some(now),
                handover: false,
            };
            termination::start(&self.ports, spec).await?;
            started = true;
        }
        Ok(started)
    }
}
