//! What a disruption decision reads, gathered through the ports and owned
//! ([`Gathered`]; the decision's [`Snapshot`] borrows it).

use super::*;

/// Everything a decision reads, owned (a [`Snapshot`] borrows it).
#[derive(Debug, Clone)]
pub struct Gathered {
    pub now: Timestamp,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// Pods with no node yet (none of them also in `pods`).
    pub pending: Vec<Pod>,
    pub claims: Vec<Claim>,
    pub config: LoadedConfig,
    pub invalid_pools: Vec<String>,
    pub resolved: BTreeMap<String, ResolvedClass>,
    pub catalog: std::sync::Arc<CloudCatalog>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub daemon_sets: Vec<DaemonSet>,
    pub unavailable: Vec<OfferingKey>,
    pub in_flight: Vec<InFlight>,
    pub volumes: VolumeIndex,
    /// The CapacityBuffers' virtual pods.
    pub buffers: Vec<Pod>,
    /// The CapacityBuffers, resolved (their workloads read).
    pub resolved_buffers: Vec<crate::provisioning::buffers::ResolvedBuffer>,
}

impl Gathered {
    /// The decision's view of it.
    pub fn snapshot(&self, tuning: Tuning, seed: u64) -> Snapshot<'_> {
        Snapshot {
            now: self.now,
            nodes: &self.nodes,
            pods: &self.pods,
            pending: &self.pending,
            claims: &self.claims,
            pools: &self.config.pools,
            invalid_pools: &self.invalid_pools,
            classes: &self.config.node_classes,
            resolved: &self.resolved,
            catalog: &self.catalog,
            pdbs: &self.pdbs,
            daemon_sets: &self.daemon_sets,
            unavailable: &self.unavailable,
            in_flight: &self.in_flight,
            buffers: &self.buffers,
            volumes: &self.volumes,
            settings: &self.config.settings,
            tuning,
            seed,
        }
    }
}

/// The disruption reason a stored removal counts as.
pub fn reason_of(r: RemovalReason) -> Reason {
    match r {
        RemovalReason::Expired => Reason::Expired,
        RemovalReason::Drifted => Reason::Drifted,
        RemovalReason::Empty => Reason::Empty,
        RemovalReason::Underutilized => Reason::Underutilized,
        RemovalReason::Unhealthy => Reason::Unhealthy,
        RemovalReason::SpotInterrupted
        | RemovalReason::ScheduledChange
        | RemovalReason::CapacityReservationInterrupted
        | RemovalReason::CapacityBlockExpiring
        | RemovalReason::InstanceStopping
        | RemovalReason::Rebalance
        | RemovalReason::InstanceStatus
        | RemovalReason::SystemStatus
        | RemovalReason::EventStatus => Reason::Interrupted,
        // A static pool scaled down: forceful, as the node goes whatever happens.
        RemovalReason::ScaledDown => Reason::Interrupted,
    }
}

/// Names of the pools that exist but failed validation (their nodes are left alone).
pub(super) fn invalid_pools(config: &LoadedConfig) -> Vec<String> {
    let mut names: Vec<String> = config
        .invalid
        .iter()
        .filter_map(|e| {
            e.item
                .strip_prefix("nodepool/")
                .or_else(|| e.item.strip_prefix("provisioner/"))
        })
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Reads what a decision needs through the ports.
pub async fn gather<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
) -> Result<Gathered, HandlerError> {
    let now = ports.clock().now();
    let cluster = ports.cluster();
    let store = ports.store();
    // The order matters. Nodes, then the state (claims, commands in
    // flight), then the pods:
    // - nodes before commands: a removal writes its command before its
    //   machine puts the `karpenter.sh/disrupted` taint on the node, so a
    //   taint in this listing belongs to a command the later read returns,
    //   unless that command has finished; `untaint_leftovers` lifts only
    //   taints no command owns, and read the other way round it would take
    //   a taint being put for a leftover and open a node being drained;
    // - claims before pods: the provisioner binds a new node's pods before
    //   it records the node on the claim, so a claim read here as
    //   registered had its pods bound already and the listing after it
    //   shows them. Pods listed first, a node registering in between would
    //   look empty to this pass (and be decided Empty, only for its
    //   re-validation to drop it 15 s later);
    // - pending pods before the bound ones: a pod bound in between shows
    //   in both listings (kept as bound) rather than in neither, so the
    //   node it is headed for never looks empty and un-nominated (a
    //   removal's pods are re-created pending, then bound to its
    //   replacement).
    // (Not shared with the provisioning plans' reads, `handlers::plan_inputs`:
    // this view and its order are the decision's own.)
    let nodes = cluster.nodes().await?;
    // Claims, unavailable offerings and commands from one read of the state.
    let state = store.state(now).await?;
    let pending = cluster.pending_pods().await?;
    let pods = cluster.scheduled_pods().await?;
    let bound: std::collections::BTreeSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let pending: Vec<Pod> = pending
        .into_iter()
        .filter(|p| p.metadata.uid.as_deref().is_none_or(|u| !bound.contains(u)))
        .collect();
    let claims = state.claims;
    // With the reservations the NodeClasses select, listed once per
    // decision: a node may be consolidated into a reservation.
    let catalog = super::super::catalog_with_reservations(ports, config, now).await?;
    let pdbs = cluster.pod_disruption_budgets().await?;
    let daemon_sets = cluster.daemon_sets().await?;
    let unavailable = state.unavailable;
    let in_flight = state
        .commands
        .into_iter()
        .map(|c| InFlight {
            node: c
                .spec
                .node
                .clone()
                .or_else(|| {
                    claims
                        .iter()
                        .find(|k| k.id == c.id)
                        .and_then(|k| k.node_name.clone())
                })
                .unwrap_or_default(),
            claim_id: c.id.clone(),
            reason: reason_of(c.spec.reason),
            replace: c.spec.replace,
            replacements: c.replacements.clone(),
        })
        .collect();
    let mut resolved = BTreeMap::new();
    for class in &config.node_classes {
        resolved.insert(
            class.name.clone(),
            ports.cloud().resolved_class(class).await?,
        );
    }
    let volumes = super::super::volume_index(cluster, &pods).await?;
    let resolved_buffers = super::super::resolve_buffers(cluster, &config.buffers).await;
    Ok(Gathered {
        now,
        nodes,
        pods,
        pending,
        claims,
        invalid_pools: invalid_pools(config),
        config: config.clone(),
        resolved,
        catalog,
        pdbs,
        daemon_sets,
        unavailable,
        in_flight,
        volumes,
        buffers: crate::provisioning::buffers::virtual_pods(&resolved_buffers),
        resolved_buffers,
    })
}
