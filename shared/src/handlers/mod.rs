//! Handlers: the code each Lambda function runs, generic over the ports so
//! the simulator runs exactly the same code on in-memory adapters. They read
//! snapshots through the ports, call the pure decisions, and carry the
//! results out. Every handler is idempotent and safe to run concurrently
//! with itself: what must not happen twice is guarded by a conditional
//! write in the Store.

pub mod config;
pub mod config_write;
pub mod disruption;
pub mod health;
pub mod interruption;
pub mod launcher;
pub mod leased_loop;
pub mod metrics;
mod off_the_loop;
mod plan_inputs;
pub mod provisioner;
pub mod state_change;
pub mod termination;

use crate::ports::{CloudError, ClusterError, StoreError};

/// A handler's failure, classified for the function edge.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandlerError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    #[error("cluster: {0}")]
    Cluster(#[from] ClusterError),
    /// The input can never be handled (a malformed event): log and drop it.
    #[error("invalid input: {0}")]
    Invalid(String),
}

impl HandlerError {
    /// Worth retrying (the same input may succeed later).
    pub fn is_retryable(&self) -> bool {
        match self {
            HandlerError::Store(e) => e.is_retryable(),
            HandlerError::Cloud(e) => e.is_retryable(),
            HandlerError::Cluster(e) => e.is_retryable(),
            HandlerError::Invalid(_) => false,
        }
    }
}

/// The catalog with the capacity reservations the NodeClasses select,
/// listed now, when any NodeClass selects some (the cached catalog
/// otherwise): the provisioner, the disruption decision and the
/// replacements of removals plan with the same `reserved` offerings, one
/// listing per decision. A listing that fails is logged and planned
/// without: pods then get on-demand or spot capacity rather than wait.
pub(crate) async fn catalog_with_reservations<P: crate::ports::PortSet>(
    ports: &P,
    config: &config::LoadedConfig,
    now: crate::model::Timestamp,
) -> Result<std::sync::Arc<crate::model::CloudCatalog>, HandlerError> {
    use crate::ports::Cloud;
    use crate::provisioning::reservations;
    let catalog = ports.cloud().catalog().await?;
    if !reservations::wanted(&config.node_classes) {
        return Ok(catalog);
    }
    match ports.cloud().capacity_reservations().await {
        Ok(all) => {
            let mut with = crate::model::CloudCatalog::clone(&catalog);
            with.reservations = reservations::for_tick(all, &config.node_classes, now);
            tracing::debug!(
                capacity_reservations = with.reservations.len(),
                "capacity reservations the NodeClasses select"
            );
            Ok(std::sync::Arc::new(with))
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot list capacity reservations; planning without them");
            Ok(catalog)
        }
    }
}

/// The volume listings a plan needs, read only when some pod has
/// PVC-backed volumes (zonal volumes pin pods; nodes' CSINodes limit how
/// many attach): four LISTs otherwise saved.
/// One place for the provisioner, the drain machine's replacements and the
/// disruption decision.
pub(crate) async fn volume_index<C: crate::ports::Cluster>(
    cluster: &C,
    pods: &[k8s_openapi::api::core::v1::Pod],
) -> Result<crate::scheduling::volumes::VolumeIndex, ClusterError> {
    use crate::scheduling::volumes::{VolumeIndex, uses_claims};
    if !pods.iter().any(uses_claims) {
        return Ok(VolumeIndex::default());
    }
    let (claims, pvs, classes, csi_nodes) = futures_util::future::try_join4(
        cluster.persistent_volume_claims(),
        cluster.persistent_volumes(),
        cluster.storage_classes(),
        cluster.csi_nodes(),
    )
    .await?;
    Ok(VolumeIndex::new(claims, pvs, classes).with_csi_nodes(csi_nodes))
}

/// The CapacityBuffers resolved: each workload a `scalableRef` names is
/// read once (its pod template and replicas) and the pure
/// [`crate::provisioning::buffers::resolve`] settles every buffer. A read
/// that fails makes that buffer's chunks wait (it says why, with the
/// error); the other buffers, and the pass, go on.
pub(crate) async fn resolve_buffers<C: crate::ports::Cluster>(
    cluster: &C,
    buffers: &[crate::config::CapacityBuffer],
) -> Vec<crate::provisioning::buffers::ResolvedBuffer> {
    use crate::provisioning::buffers::{self, WorkloadRead};
    let mut workloads = std::collections::BTreeMap::new();
    for key in buffers::workloads_named(buffers) {
        let read = match cluster
            .scalable_workload(key.kind, &key.namespace, &key.name)
            .await
        {
            Ok(Some(w)) => WorkloadRead::Found(Box::new(w)),
            Ok(None) => WorkloadRead::Missing,
            Err(e) => {
                tracing::warn!(
                    workload = %format!("{}/{}/{}", key.kind.as_str(), key.namespace, key.name),
                    error = %e,
                    "cannot read a capacity buffer's workload; its chunks wait"
                );
                WorkloadRead::Failed(e.to_string())
            }
        };
        workloads.insert(key, read);
    }
    buffers::resolve(buffers, &workloads)
}
