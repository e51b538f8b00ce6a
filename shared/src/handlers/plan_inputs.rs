//! What a provisioning plan reads of the cluster and the Store, owned, in
//! one place for the three passes that plan: the provisioner's solve
//! (`provisioner/solve.rs`), its CapacityBuffers pass
//! (`provisioner/capacity_buffers.rs`) and the replacements of a node
//! being removed (`termination/replacements.rs`). [`PlanInputs::snapshot`]
//! lends it to the pure [`plan::decide`] as its [`Snapshot`].
//!
//! **Each pass fills it in its own order, on purpose.** The reads are not
//! one fetch because what each pass holds and re-reads differs:
//! - the solve lists the scheduled pods, DaemonSets and volumes once, then
//!   per round reads the state (claims, unavailable offerings, usage)
//!   before the nodes and the pending pods: the pods it places are picked
//!   out of that round's fresh listing, and a pod nominated to a claim of
//!   that state is told apart from one still waiting;
//! - the buffers' pass reads the state, then the four listings at once
//!   (its virtual pods need no volumes);
//! - a replacement leaves the node being removed and its pods out of the
//!   listings, takes the claims its command's pass already read (the
//!   command's own claim left out) and avoids the command's offerings on
//!   top of the unavailable ones.
//!
//! Moving a read changes what a pass can miss between two reads (a pod
//! bound, a claim written, a node gone meanwhile), and no test pins these
//! orders, so each pass keeps its reads where they were and the shared
//! part is the owned view and its snapshot. The disruption decision reads
//! another view (`disruption::Gathered`) in an order that matters for a
//! known reason (the nodes before the commands: see its `gather`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::config::LoadedConfig;
use crate::model::claim::Claim;
use crate::model::{CloudCatalog, OfferingKey, Timestamp, Usage};
use crate::provisioning::plan::{self, Snapshot};
use crate::scheduling::volumes::VolumeIndex;

/// The cluster and the Store as a plan sees them, besides the pods it
/// places, the configuration and the time.
#[derive(Debug, Clone)]
pub(crate) struct PlanInputs {
    /// Pods with a node.
    pub scheduled: Vec<Pod>,
    /// Pending pods nominated to claims that have no node yet.
    pub nominated: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub daemon_sets: Vec<DaemonSet>,
    pub claims: Vec<Claim>,
    pub unavailable: Vec<OfferingKey>,
    pub usage: BTreeMap<String, Usage>,
    /// With the capacity reservations the NodeClasses select
    /// ([`super::catalog_with_reservations`]).
    pub catalog: Arc<CloudCatalog>,
    /// Empty unless some pod the plan places has PVC-backed volumes
    /// ([`super::volume_index`]).
    pub volumes: VolumeIndex,
}

impl PlanInputs {
    /// The plan's view: `pending` placed on this cluster under `config`.
    pub(crate) fn snapshot<'a>(
        &'a self,
        now: Timestamp,
        pending: &'a [Pod],
        config: &'a LoadedConfig,
        seed: u64,
    ) -> Snapshot<'a> {
        Snapshot {
            now,
            pending,
            scheduled: &self.scheduled,
            nominated: &self.nominated,
            nodes: &self.nodes,
            daemon_sets: &self.daemon_sets,
            claims: &self.claims,
            pools: &config.pools,
            node_classes: &config.node_classes,
            catalog: &self.catalog,
            unavailable: &self.unavailable,
            usage: &self.usage,
            volumes: &self.volumes,
            settings: &config.settings,
            seed,
        }
    }

    /// [`plan::decide`] on [`Self::snapshot`].
    pub(crate) fn decide(
        &self,
        now: Timestamp,
        pending: &[Pod],
        config: &LoadedConfig,
        seed: u64,
    ) -> plan::Decision {
        plan::decide(&self.snapshot(now, pending, config, seed))
    }
}
