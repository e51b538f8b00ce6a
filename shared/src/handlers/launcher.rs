//! Launching claims: the one code path that turns a planned claim into an
//! instance, used by the provisioner (capacity for pending pods) and by the
//! drain machine (replacement capacity before a node is drained).
//!
//! A claim is written to the Store — reserving against its pool's limits
//! atomically — **before** the launch, and the launch's client token is the
//! claim's, so a retry never buys twice and a crash leaves a record the
//! provisioner's lifecycle finishes or cleans up.

use futures_util::{StreamExt, stream};
use tracing::{Instrument, debug, info, info_span, warn};

use super::config::LoadedConfig;
use crate::config::{Limits, NodePool};
use crate::model::claim::{Claim, ClaimInstance, reservation_of};
use crate::model::{CloudCatalog, LaunchRequest, OfferingKey, PodKey, SignedDuration, Timestamp};
use crate::ports::{Clock, Cloud, CloudError, PortSet, Store, StoreError};

#[derive(Debug, Clone)]
pub struct LaunchSettings {
    /// How long an offering that ran out of capacity is avoided (Karpenter: 3 min).
    pub unavailable_for: SignedDuration,
    /// Launches in flight at once.
    pub concurrency: usize,
    /// A claim whose launch failed transiently this many times is dropped.
    pub max_attempts: u32,
}

impl Default for LaunchSettings {
    fn default() -> Self {
        LaunchSettings {
            unavailable_for: SignedDuration::from_mins(3),
            concurrency: 16,
            max_attempts: 5,
        }
    }
}

/// How a launch attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum LaunchEnd {
    /// The claim's id.
    Launched(String),
    /// Out of capacity everywhere it asked; the claim was dropped and the
    /// offerings marked unavailable. Its pods are worth planning again.
    NoCapacity(Vec<PodKey>),
    /// Dropped for good (invalid request, too many attempts, a limit), with the reason.
    Dropped(Vec<PodKey>, String),
    /// Left for a later attempt (the claim stays recorded).
    Retry,
}

/// Launches claims through the ports of one invocation.
#[derive(Debug)]
pub struct Launcher<'a, P: PortSet> {
    ports: &'a P,
    settings: &'a LaunchSettings,
    /// Why the claims are launched, as Karpenter's `reason` label says it
    /// (`provisioned`, or a replacement's removal reason).
    reason: &'static str,
}

impl<'a, P: PortSet> Launcher<'a, P> {
    pub fn new(ports: &'a P, settings: &'a LaunchSettings) -> Self {
        Launcher {
            ports,
            settings,
            reason: "provisioned",
        }
    }

    /// Claims launched as replacements for a removal of this reason.
    pub fn for_removal(mut self, reason: crate::model::RemovalReason) -> Self {
        self.reason = super::metrics::reason_label(reason);
        self
    }

    /// Creates and launches each claim, a few at a time.
    pub async fn launch_all(
        &self,
        claims: Vec<Claim>,
        config: &LoadedConfig,
        catalog: &CloudCatalog,
    ) -> Vec<(String, LaunchEnd)> {
        stream::iter(claims.into_iter().map(|claim| {
            let limits = config.limits(&claim.pool);
            let pool = config.pool(&claim.pool);
            async move {
                let id = claim.id.clone();
                (
                    id,
                    self.create_and_launch(claim, &limits, pool, catalog).await,
                )
            }
        }))
        .buffer_unordered(self.settings.concurrency.max(1))
        .collect()
        .await
    }

    /// Writes the claim (reserving against its pool's limits), then launches it.
    pub async fn create_and_launch(
        &self,
        claim: Claim,
        limits: &Limits,
        pool: Option<&NodePool>,
        catalog: &CloudCatalog,
    ) -> LaunchEnd {
        let span = info_span!("nodeclaim_create", nodeclaim = %claim.id, nodepool = %claim.pool);
        let created = self
            .ports
            .store()
            .create_claim(&claim, limits)
            .instrument(span)
            .await;
        match created {
            Ok(()) => {}
            Err(StoreError::LimitExceeded { pool, resource }) => {
                let reason = format!("NodePool {pool} limit {resource} reached");
                warn!(nodeclaim = %claim.id, %reason, "not launching nodeclaim");
                return LaunchEnd::Dropped(claim.pods, reason);
            }
            Err(e) => {
                warn!(nodeclaim = %claim.id, error = %e, "could not record nodeclaim; its pods will be planned again");
                return LaunchEnd::Retry;
            }
        }
        self.launch(claim, limits, pool, catalog).await
    }

    /// Launches a recorded claim. Idempotent: the client token is the claim's.
    /// Everything it logs is inside a `nodeclaim_launch` span naming the claim.
    pub async fn launch(
        &self,
        claim: Claim,
        limits: &Limits,
        pool: Option<&NodePool>,
        catalog: &CloudCatalog,
    ) -> LaunchEnd {
        let span = info_span!("nodeclaim_launch", nodeclaim = %claim.id, nodepool = %claim.pool);
        self.launch_inner(claim, limits, pool, catalog)
            .instrument(span)
            .await
    }

    async fn launch_inner(
        &self,
        claim: Claim,
        limits: &Limits,
        pool: Option<&NodePool>,
        catalog: &CloudCatalog,
    ) -> LaunchEnd {
        let store = self.ports.store();
        let now = self.ports.clock().now();
        // The NodeClass as configured now (live reload), resolved with the pool.
        let node_class = pool.and_then(|p| p.class_named(claim.node_class.as_deref()));
        // The reservations a `reserved` option may be launched into.
        let mut reservations: Vec<_> = pool
            .map(|p| crate::provisioning::reservations::of_pool(p, catalog))
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.available > 0)
            .cloned()
            .collect();
        crate::provisioning::reservations::by_preference(&mut reservations);
        let request = LaunchRequest {
            claim_id: claim.id.clone(),
            client_token: claim.client_token(),
            pool: claim.pool.clone(),
            node_class: claim.node_class.clone(),
            node_class_spec: node_class,
            options: claim.options.clone(),
            labels: claim.labels.clone(),
            taints: claim.taints.clone(),
            kubelet: claim.kubelet.clone(),
            reservations,
        };
        match self.ports.cloud().launch(&request).await {
            Ok(launched) => {
                self.mark_unavailable(&launched.unavailable, now).await;
                let instance = launched.instance;
                let mut next = claim.next();
                next.launch_attempts += 1;
                if let Some(info) = catalog
                    .instance_types
                    .iter()
                    .find(|i| i.name == instance.instance_type)
                {
                    let kubelet = pool.map(|p| p.kubelet.clone()).unwrap_or_default();
                    next.reservation = reservation_of(&info.capacity(&kubelet));
                }
                next.instance = Some(ClaimInstance::from(&instance));
                // What drift compares with later: what the instance booted
                // with, as the cloud says; else what the class resolved to at
                // this launch, when the cloud resolves it to one image.
                if instance.image_id.is_some() {
                    next.stamp.image_id.clone_from(&instance.image_id);
                }
                if instance.subnet_id.is_some() {
                    next.stamp.subnet_id.clone_from(&instance.subnet_id);
                }
                if !instance.security_group_ids.is_empty() {
                    next.stamp
                        .security_group_ids
                        .clone_from(&instance.security_group_ids);
                }
                if next.stamp.image_id.is_none()
                    && let Some(class) = &request.node_class_spec
                    && let Ok(resolved) = self.ports.cloud().resolved_class(class).await
                    && let [image] = resolved.image_ids.as_slice()
                {
                    next.stamp.image_id = Some(image.clone());
                }
                // The options served their purpose; the record keeps what was bought.
                next.options.clear();
                if let Err(e) = store.update_claim(&claim, &next, limits).await {
                    // The instance exists and carries the claim's tag; the next
                    // attempt re-launches with the same token and records it.
                    warn!(nodeclaim = %claim.id, error = %e, "launched but could not record the instance yet");
                    return LaunchEnd::Retry;
                }
                info!(
                    nodeclaim = %claim.id,
                    instance_type = %instance.instance_type,
                    zone = %instance.zone,
                    capacity_type = %instance.capacity_type,
                    provider_id = %instance.provider_id,
                    "launched nodeclaim"
                );
                super::metrics::count(
                    now.as_millisecond(),
                    super::metrics::karpenter::NODECLAIMS_CREATED,
                    &[
                        ("reason", self.reason),
                        ("nodepool", claim.pool.as_str()),
                        ("min_values_relaxed", min_values_relaxed(&claim)),
                    ],
                    1.0,
                );
                LaunchEnd::Launched(next.id)
            }
            Err(CloudError::InsufficientCapacity { offerings, message }) => {
                warn!(nodeclaim = %claim.id, offerings = offerings.len(), %message, "insufficient capacity; planning again on other offerings");
                self.mark_unavailable(&offerings, now).await;
                self.drop_claim(&claim).await;
                LaunchEnd::NoCapacity(claim.pods)
            }
            Err(e) if !e.is_retryable() => {
                warn!(nodeclaim = %claim.id, error = %e, "launch failed; dropping nodeclaim");
                self.drop_claim(&claim).await;
                LaunchEnd::Dropped(claim.pods, format!("launch failed: {e}"))
            }
            Err(e) => {
                let mut next = claim.next();
                next.launch_attempts += 1;
                if next.launch_attempts >= self.settings.max_attempts {
                    warn!(nodeclaim = %claim.id, error = %e, attempts = next.launch_attempts, "launch keeps failing; dropping nodeclaim");
                    self.drop_claim(&claim).await;
                    return LaunchEnd::Dropped(claim.pods, format!("launch failed: {e}"));
                }
                warn!(nodeclaim = %claim.id, error = %e, "launch failed; retrying later");
                if let Err(e) = store.update_claim(&claim, &next, limits).await {
                    debug!(nodeclaim = %claim.id, error = %e, "could not count the launch attempt");
                }
                LaunchEnd::Retry
            }
        }
    }

    /// Marks offerings unavailable for [`LaunchSettings::unavailable_for`] (best effort).
    pub async fn mark_unavailable(&self, offerings: &[OfferingKey], now: Timestamp) {
        for o in offerings {
            if let Err(e) = self
                .ports
                .store()
                .mark_unavailable(o, now + self.settings.unavailable_for)
                .await
            {
                warn!(offering = %o, error = %e, "could not mark offering unavailable");
            }
        }
    }

    /// Deletes a claim and releases its reservation (best effort: a claim
    /// left behind is released by the lifecycle's garbage collection).
    pub async fn drop_claim(&self, claim: &Claim) {
        if let Err(e) = self.ports.store().delete_claim(claim).await {
            warn!(nodeclaim = %claim.id, error = %e, "could not delete nodeclaim");
        }
    }
}

/// The `min_values_relaxed` label of the nodeclaims-created metric.
fn min_values_relaxed(claim: &Claim) -> &'static str {
    match claim
        .annotations
        .get(crate::model::claim::MIN_VALUES_RELAXED_ANNOTATION)
        .map(String::as_str)
    {
        Some("true") => "true",
        _ => "false",
    }
}
