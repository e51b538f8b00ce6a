//! The disruption function: one invocation a minute (EventBridge schedule),
//! ticking inside it like the provisioner. Each tick reads the cluster, our
//! claims, the configuration and the catalog through the ports, runs the
//! pure decision ([`crate::disruption::decide`]), writes the claims'
//! bookkeeping back, and hands every command to the drain-and-terminate
//! machine ([`super::termination`]), which it then advances.
//!
//! **Re-validation.** A voluntary command (Empty, Drifted, Underutilized)
//! is kept in this invocation's memory, not in the Store, until its
//! `validate_at` (15 s later); then a fresh snapshot is taken and
//! [`crate::disruption::validate`] decides whether it still holds. Nothing
//! has been acted on before that, so an invocation that ends or crashes in
//! between loses nothing: the next decision finds the same move again if
//! it still makes sense. (A pending item in the Store would need its own
//! expiry, its own cleanup and a second place where budgets are counted.)
//! While a command waits, no new decision is made, so it is never counted
//! twice. Forceful commands (Expired, Unhealthy) start at once.
//!
//! **Concurrency.** One invocation decides at a time: it holds the
//! `disruption` lease, renewed (a conditional write) before each tick
//! decides or acts, so two invocations at once never both spend a budget.
//! A node gets one command at most: commands are created with a write
//! conditional on there being none (`Store::put_command`), whoever creates
//! them. Advancing commands needs no lease (every step is conditional).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use tracing::{Instrument, debug, info, info_span, warn};

use super::HandlerError;
use super::config::{ConfigReader, LoadedConfig};
use super::launcher::LaunchSettings;
use super::leased_loop::{self, LeasedLoop, Step};
use super::termination::{self, Started};
use crate::disruption::{self, InFlight, Plan, Reason, Snapshot, Tuning, Verdict};
use crate::model::claim::Claim;
use crate::model::{
    CloudCatalog, DISRUPTED_TAINT_KEY, Lease, OfferingKey, RemovalReason, ResolvedClass,
    SignedDuration, Timestamp,
};
use crate::ports::{Clock, Cloud, Cluster, PortSet, Store, StoreError};
use crate::scheduling::volumes::VolumeIndex;

/// The lease that makes one disruption invocation the one that decides.
pub const LEASE: &str = "disruption";

#[derive(Debug, Clone)]
pub struct DisruptionSettings {
    /// Time between two decisions (Karpenter's controller polls every 10 s).
    pub decide_every: SignedDuration,
    /// How often a tick comes when nothing else is due.
    pub poll: SignedDuration,
    /// Replacement launches (shared with the provisioner's launcher).
    pub launch: LaunchSettings,
    pub tuning: Tuning,
    /// End the invocation at the first quiet tick ([`TickReport::quiet`]):
    /// the provisioner's setting of the same name, for the loop beside it.
    pub end_when_quiet: bool,
    /// Publish Karpenter's `eligible_nodes` gauge (the provisioner's
    /// setting of the same name: each gauge series is billed by the month).
    pub gauges: bool,
    /// EC2 instance status checks are polled and counted, but no node is
    /// removed for them (Karpenter's `InstanceStatusDryRun`).
    pub instance_status_dry_run: bool,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        DisruptionSettings {
            decide_every: SignedDuration::from_secs(10),
            poll: SignedDuration::from_secs(2),
            launch: LaunchSettings::default(),
            tuning: Tuning::default(),
            end_when_quiet: false,
            gauges: true,
            instance_status_dry_run: false,
        }
    }
}

/// What one tick did, for tests, the simulator and the log.
#[derive(Debug, Clone, Default)]
pub struct TickReport {
    pub wake_at: Option<Timestamp>,
    /// The decision, when one was made this tick.
    pub plan: Option<Plan>,
    /// Removal commands started: (claim id, reason).
    pub started: Vec<(String, RemovalReason)>,
    /// Voluntary commands dropped on re-validation: (command id, why).
    pub rejected: Vec<(String, String)>,
    /// This invocation does not hold the lease: it decided nothing.
    pub idle: bool,
    /// Removal commands were advanced (they may have launched replacements).
    pub removals: bool,
    /// Nodes whose verdict or reason changed, logged at info this tick.
    pub logged: Vec<String>,
    /// Nothing is left for this invocation to follow: no command waits for
    /// its re-validation, none started, no removal is in progress.
    pub quiet: bool,
    /// EC2's instance status checks, when they were polled this tick.
    pub health: Option<super::health::HealthPoll>,
}

impl<P: PortSet> LeasedLoop for Disruption<P> {
    const NAME: &'static str = "disruption";

    fn holder(&self) -> &str {
        &self.holder
    }

    fn now(&self) -> Timestamp {
        self.ports.clock().now()
    }

    fn poll(&self) -> SignedDuration {
        self.settings.poll
    }

    async fn take_lease(&mut self, until: Timestamp) -> Result<bool, HandlerError> {
        self.acquire_lease(until).await
    }

    async fn give_back_lease(&self) -> Result<(), HandlerError> {
        if !self.pending.is_empty() {
            info!(
                pending = self.pending.len(),
                "invocation ends before re-validating; the next one decides again"
            );
        }
        self.release_lease().await
    }

    async fn step(&mut self) -> Result<Step, HandlerError> {
        let report = self.tick().await?;
        Ok(Step {
            wake_at: report.wake_at,
            stop: report.idle || (self.settings.end_when_quiet && report.quiet),
        })
    }
}

/// Everything a decision reads, owned (a [`Snapshot`] borrows it).
#[derive(Debug, Clone)]
pub struct Gathered {
    pub now: Timestamp,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
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
fn invalid_pools(config: &LoadedConfig) -> Vec<String> {
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
    let nodes = cluster.nodes().await?;
    let pods = cluster.scheduled_pods().await?;
    // Claims, unavailable offerings and commands from one read of the state.
    let state = store.state(now).await?;
    let claims = state.claims;
    // With the reservations the NodeClasses select, listed once per
    // decision: a node may be consolidated into a reservation.
    let catalog = super::catalog_with_reservations(ports, config, now).await?;
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
    let volumes = super::volume_index(cluster, &pods).await?;
    let resolved_buffers = super::resolve_buffers(cluster, &config.buffers).await;
    Ok(Gathered {
        now,
        nodes,
        pods,
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

/// The disruption function of one invocation.
#[derive(Debug)]
pub struct Disruption<P: PortSet> {
    ports: P,
    settings: DisruptionSettings,
    holder: String,
    /// Until when this invocation holds (and renews) the lease.
    lease_until: Option<Timestamp>,
    config: ConfigReader,
    /// Voluntary commands decided and waiting for their re-validation.
    pending: Vec<disruption::Command>,
    memory: Memory,
    decisions: u64,
}

/// What a process remembers between invocations (a warm Lambda container,
/// the simulator): when the next decision is due, and the reason last
/// logged per node, so a line comes when a reason changes, not every minute.
#[derive(Debug, Clone, Default)]
pub struct Memory(std::sync::Arc<std::sync::Mutex<MemoryState>>);

#[derive(Debug, Default)]
struct MemoryState {
    next_decision: Option<Timestamp>,
    /// Per node: the last line logged at info, and that line without what
    /// consolidation said.
    logged: BTreeMap<String, (String, String)>,
    /// What consolidation looked at when a pass last found no move, and when.
    consolidated: Option<(u64, Timestamp)>,
    /// Pods that became Ready up to this time have had their startup time
    /// published (`karpenter_pods_startup_duration_seconds`).
    startups_until: Option<Timestamp>,
    /// When EC2's instance status checks were last asked for.
    health_polled_at: Option<Timestamp>,
    /// What that poll found unhealthy (each counts once in the metric).
    unhealthy: std::collections::BTreeSet<crate::interruption::health::Unhealthy>,
}

/// The longest consolidation is skipped on an unchanged cluster (budget
/// windows and prices move with time alone; Karpenter keeps the same mark).
pub const CONSOLIDATED_FOR: SignedDuration = SignedDuration::from_mins(5);

/// A fingerprint of what consolidation looks at: the configuration, each
/// node (its claim, readiness, whether it is disrupting, its pods, whether
/// its pods have been quiet for `consolidateAfter`, do-not-disrupt), the
/// claims still launching, the removals in flight, the unavailable offerings.
fn consolidation_fingerprint(g: &Gathered, s: &Snapshot<'_>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    g.config.fingerprint.hash(&mut h);
    for f in disruption::snapshot::node_facts(s) {
        f.name.hash(&mut h);
        f.claim.map(|c| c.id.as_str()).hash(&mut h);
        (f.ready, f.disrupting.is_some()).hash(&mut h);
        let mut uids: Vec<&str> = f
            .reschedulable
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        uids.sort_unstable();
        uids.hash(&mut h);
        let quiet = match (
            f.claim.and_then(|c| c.disruption.last_pod_event_at),
            f.pool.and_then(|p| p.disruption.consolidate_after),
        ) {
            (Some(at), Some(after)) => g.now.duration_since(at) >= after,
            _ => false,
        };
        quiet.hash(&mut h);
        disruption::blockers::do_not_disrupt(&f, g.now)
            .is_some()
            .hash(&mut h);
    }
    for c in g.claims.iter().filter(|c| c.node_name.is_none()) {
        c.id.hash(&mut h);
    }
    for f in &g.in_flight {
        f.claim_id.hash(&mut h);
    }
    for o in &g.unavailable {
        o.hash(&mut h);
    }
    h.finish()
}

impl Memory {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<P: PortSet> Disruption<P> {
    pub fn new(ports: P, settings: DisruptionSettings, holder: impl Into<String>) -> Self {
        Disruption {
            ports,
            settings,
            holder: holder.into(),
            lease_until: None,
            config: ConfigReader::new(),
            pending: Vec::new(),
            memory: Memory::default(),
            decisions: 0,
        }
    }

    /// Shares a configuration reader across invocations (one per process).
    pub fn with_config_reader(mut self, reader: ConfigReader) -> Self {
        self.config = reader;
        self
    }

    pub fn config_reader(&self) -> ConfigReader {
        self.config.clone()
    }

    /// Shares what the invocations of one process remember.
    pub fn with_memory(mut self, memory: Memory) -> Self {
        self.memory = memory;
        self
    }

    pub fn memory(&self) -> Memory {
        self.memory.clone()
    }

    pub fn ports(&self) -> &P {
        &self.ports
    }

    /// Voluntary commands waiting for their re-validation.
    pub fn pending(&self) -> &[disruption::Command] {
        &self.pending
    }

    /// Takes (or renews) the lease until `until`. False: another invocation decides.
    pub async fn acquire_lease(&mut self, until: Timestamp) -> Result<bool, HandlerError> {
        self.lease_until = Some(until);
        self.renew().await
    }

    async fn renew(&self) -> Result<bool, HandlerError> {
        let Some(until) = self.lease_until else {
            return Ok(false);
        };
        let lease = Lease {
            name: LEASE.to_owned(),
            holder: self.holder.clone(),
            expires_at: until,
        };
        Ok(self
            .ports
            .store()
            .acquire_lease(&lease, self.ports.clock().now())
            .await?)
    }

    pub async fn release_lease(&self) -> Result<(), HandlerError> {
        Ok(self
            .ports
            .store()
            .release_lease(LEASE, &self.holder)
            .await?)
    }

    /// Ticks until `deadline` (or, with `end_when_quiet`, the first quiet
    /// tick), sleeping with `sleep` in between: the Lambda's loop, the
    /// provisioner's ([`leased_loop::run`]).
    pub async fn run_until<F, Fut>(
        &mut self,
        deadline: Timestamp,
        sleep: F,
    ) -> Result<u64, HandlerError>
    where
        F: Fn(SignedDuration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let span = info_span!("disruption_invocation", holder = %self.holder, deadline = %deadline);
        leased_loop::run(self, deadline, sleep)
            .instrument(span)
            .await
    }

    /// One pass: re-validate and start the voluntary commands that are due,
    /// decide when due (nothing pending), start forceful commands, then
    /// advance every removal once.
    pub async fn tick(&mut self) -> Result<TickReport, HandlerError> {
        let span = info_span!("disruption_tick", holder = %self.holder);
        self.tick_inner().instrument(span).await
    }

    async fn tick_inner(&mut self) -> Result<TickReport, HandlerError> {
        let mut report = TickReport::default();
        let now = self.ports.clock().now();
        let config = LoadedConfig::clone(&*self.config.read(self.ports.store(), now).await?);
        let due = self
            .pending
            .iter()
            .any(|c| c.validate_at.is_none_or(|t| t <= now));
        let decide = !due
            && self.pending.is_empty()
            && self.memory.lock().next_decision.is_none_or(|t| now >= t);
        // The lease is renewed (a conditional write) only by a tick that
        // decides or acts: the ticks between only advance removals, which
        // needs no lease, and a write every tick would cost more than them.
        if (due || decide) && !self.renew().await? {
            // Another invocation decides; what this one had pending is theirs to find again.
            self.pending.clear();
            report.idle = true;
            return Ok(report);
        }
        if due {
            self.revalidate(&config, now, &mut report).await?;
        } else if decide {
            self.poll_health(now, &mut report).await?;
            self.decide(&config, now, &mut report).await?;
        }
        let wake = termination::advance_all(&self.ports, &config, &self.settings.launch).await?;
        report.removals = wake.is_some() || !report.started.is_empty();
        report.quiet = !report.removals && self.pending.is_empty();
        let mut candidates: Vec<Timestamp> = wake.into_iter().collect();
        candidates.extend(self.pending.iter().filter_map(|c| c.validate_at));
        candidates.extend(self.memory.lock().next_decision);
        report.wake_at = candidates.into_iter().min();
        Ok(report)
    }

    /// Asks EC2 for its instance status checks when the last poll is a
    /// minute old, and starts the removals they call for.
    async fn poll_health(
        &mut self,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), HandlerError> {
        let seen = {
            let memory = self.memory.lock();
            if memory
                .health_polled_at
                .is_some_and(|t| now.duration_since(t) < crate::interruption::health::POLL_EVERY)
            {
                return Ok(());
            }
            memory.unhealthy.clone()
        };
        let poll = super::health::poll(
            &self.ports,
            &seen,
            self.settings.instance_status_dry_run,
            now,
        )
        .await?;
        {
            let mut memory = self.memory.lock();
            memory.health_polled_at = Some(now);
            if poll.error.is_none() {
                memory.unhealthy = poll.plan.unhealthy.clone();
            }
        }
        report.started.extend(poll.started.iter().cloned());
        report.health = Some(poll);
        Ok(())
    }

    fn seed(&self, now: Timestamp) -> u64 {
        let h = self.holder.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        h ^ (now.as_millisecond() as u64) ^ self.decisions
    }

    async fn decide(
        &mut self,
        config: &LoadedConfig,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), HandlerError> {
        self.memory.lock().next_decision = Some(now + self.settings.decide_every);
        self.decisions += 1;
        let mut gathered = gather(&self.ports, config).await?;
        self.untaint_leftovers(&mut gathered).await;
        {
            let mut memory = self.memory.lock();
            let since = memory.startups_until.replace(now);
            publish_startups(&gathered.pods, since, now);
        }
        let mut tuning = self.settings.tuning;
        let fingerprint = consolidation_fingerprint(&gathered, &gathered.snapshot(tuning, 0));
        let skip =
            self.memory.lock().consolidated.is_some_and(|(fp, at)| {
                fp == fingerprint && now.duration_since(at) < CONSOLIDATED_FOR
            });
        if skip {
            debug!(
                "nothing consolidation looks at changed since its last pass found no move; not consolidating this pass"
            );
            tuning.consolidation = false;
        }
        let plan = disruption::decide(&gathered.snapshot(tuning, self.seed(now)));
        report.logged = self.log_decisions(&plan, skip);
        // Forceful commands act now; voluntary ones count once re-validated.
        let acting: Vec<&disruption::Command> = plan
            .commands
            .iter()
            .filter(|c| c.validate_at.is_none())
            .collect();
        publish_decisions(&acting, now);
        if self.settings.gauges {
            publish_eligible(&plan, now);
        }
        self.write_claim_updates(&gathered, &plan).await;
        self.log_handovers(&plan);
        if !skip {
            let consolidated = !plan
                .commands
                .iter()
                .any(|c| c.reason == Reason::Underutilized);
            // What the next pass compares with: the claims as this pass
            // leaves them. Taken before its own observations were written
            // back, a pod change it has only just seen would still read as
            // quiet, the next pass (quiet by then) would match it, and
            // consolidation would wait for CONSOLIDATED_FOR instead of
            // consolidateAfter.
            let fingerprint = if consolidated {
                let mut after = gathered;
                for update in &plan.claim_updates {
                    if let Some(c) = after.claims.iter_mut().find(|c| c.id == update.claim_id) {
                        c.disruption = update.disruption.clone();
                    }
                }
                consolidation_fingerprint(&after, &after.snapshot(tuning, 0))
            } else {
                fingerprint
            };
            self.memory.lock().consolidated = consolidated.then_some((fingerprint, now));
        }
        // A voluntary command must be re-validated before this invocation ends.
        let ends = self.lease_until.unwrap_or(Timestamp::MAX);
        for command in &plan.commands {
            match command.validate_at {
                None => self.act(command, report).await?,
                Some(at) if at < ends => {
                    info!(command = %command.id, reason = command.reason.as_str(), validate_at = %at, "disruption decided; re-validating before acting");
                    self.pending.push(command.clone());
                }
                Some(_) => {
                    debug!(command = %command.id, "decided too close to the end of the invocation; left to the next one")
                }
            }
        }
        report.plan = Some(plan);
        Ok(())
    }

    /// Pools handed over from Karpenter with `replace`
    /// ([`disruption::handover`]): their commands start with the others
    /// (replacements first, then the Node is deleted for Karpenter to
    /// drain); what waits, and why, is logged when it changes.
    fn log_handovers(&self, plan: &Plan) {
        let mut memory = self.memory.lock();
        for h in &plan.handovers {
            let line = format!(
                "{:?} {:?} {:?}",
                h.start,
                h.in_progress,
                h.waiting.as_deref().map(without_figures)
            );
            let key = format!("handover/{}", h.pool);
            if memory.logged.get(&key).is_some_and(|(l, _)| *l == line) {
                debug!(pool = %h.pool, karpenter_nodes = h.remaining, next = ?h.next, waiting = ?h.waiting, "handing over Karpenter's nodes");
                continue;
            }
            info!(
                pool = %h.pool, karpenter_nodes = h.remaining, starting = ?h.start, in_progress = ?h.in_progress,
                next = ?h.next, waiting = ?h.waiting, "handing over Karpenter's nodes (nodewright.io/karpenter-nodes=replace)"
            );
            memory.logged.insert(key, (line.clone(), line));
        }
    }

    /// Lifts the `karpenter.sh/disrupted` taint from nodes that carry it
    /// with no removal command (a removal that crashed between its taint and
    /// its rollback, say), as Karpenter does before each pass: such a node
    /// would otherwise take no pods and count as "being disrupted" for good.
    /// Nodes are read before commands (`gather`), so a taint seen here was
    /// put by a command that was in the list unless it has finished. Only
    /// nodes of ours (with a claim): on a node Karpenter launched, the same
    /// taint is Karpenter's own disruption at work.
    async fn untaint_leftovers(&self, gathered: &mut Gathered) {
        let removing: BTreeSet<&str> = gathered.in_flight.iter().map(|f| f.node.as_str()).collect();
        let leftovers: Vec<String> = gathered
            .nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter(|n| disruption::snapshot::claim_of(n, &gathered.claims).is_some())
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
            })
            .filter_map(|n| n.metadata.name.clone())
            .filter(|name| !removing.contains(name.as_str()))
            .collect();
        for name in leftovers {
            match self
                .ports
                .cluster()
                .remove_taint(&name, DISRUPTED_TAINT_KEY)
                .await
            {
                Ok(()) => {
                    info!(node = %name, taint = DISRUPTED_TAINT_KEY, "removed a disruption taint no removal owns");
                    if let Some(node) = gathered
                        .nodes
                        .iter_mut()
                        .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
                        && let Some(taints) = node.spec.as_mut().and_then(|s| s.taints.as_mut())
                    {
                        taints.retain(|t| t.key != DISRUPTED_TAINT_KEY);
                    }
                }
                Err(e) => {
                    warn!(node = %name, error = %e, "could not remove a disruption taint no removal owns")
                }
            }
        }
    }

    /// Re-checks the due voluntary commands on a fresh snapshot; each one
    /// that still holds starts, and counts against the budgets for the next.
    async fn revalidate(
        &mut self,
        config: &LoadedConfig,
        now: Timestamp,
        report: &mut TickReport,
    ) -> Result<(), HandlerError> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|c| c.validate_at.is_none_or(|t| t <= now));
        self.pending = later;
        let mut gathered = gather(&self.ports, config).await?;
        let mut acted = Vec::new();
        for command in due {
            let verdict = disruption::validate(
                &command,
                &gathered.snapshot(self.settings.tuning, self.seed(now)),
            );
            match verdict {
                Ok(()) => {
                    self.act(&command, report).await?;
                    acted.push(command.clone());
                    gathered.in_flight.extend(command.targets.iter().map(|t| {
                        InFlight {
                            node: t.node.clone(),
                            claim_id: t.claim_id.clone(),
                            reason: command.reason,
                            replace: command.replacement.is_some(),
                            replacements: command
                                .replacement
                                .iter()
                                .flat_map(|r| r.claims.iter().map(|c| c.id.clone()))
                                .collect(),
                        }
                    }));
                }
                Err(why) => {
                    info!(command = %command.id, reason = command.reason.as_str(), %why, "disruption no longer holds after re-validation; not acting");
                    // Once per node of the command, as Karpenter counts a
                    // dropped consolidation (a multi-node one of two
                    // nodes counts 2).
                    super::metrics::count(
                        now.as_millisecond(),
                        super::metrics::karpenter::DISRUPTION_FAILED_VALIDATIONS,
                        &[("consolidation_type", consolidation_type(&command))],
                        command.targets.len() as f64,
                    );
                    report.rejected.push((command.id.clone(), why));
                }
            }
        }
        publish_decisions(&acted.iter().collect::<Vec<_>>(), now);
        // Decide again right away: the world moved on.
        self.memory.lock().next_decision = Some(now);
        Ok(())
    }

    /// Starts a removal for every target of `command` through the machine.
    /// A voluntary command's replacement is the one decided (launched as
    /// given, and rolled back if it fails); a forceful one asks the machine
    /// to plan capacity for the node's pods when they need it.
    async fn act(
        &mut self,
        command: &disruption::Command,
        report: &mut TickReport,
    ) -> Result<(), HandlerError> {
        let span = info_span!("disruption_command", command = %command.id, reason = command.reason.as_str(), method = command.method);
        async {
            let given: Vec<Claim> = if command.reason.is_forceful() {
                Vec::new()
            } else {
                command.replacement.as_ref().map(|r| r.claims.clone()).unwrap_or_default()
            };
            let planned = command.replacement.as_ref().map_or(0, |r| r.claims.len());
            info!(
                nodes = ?command.nodes().collect::<Vec<_>>(), replacements = planned, replacement_given = !given.is_empty(),
                savings_per_hour = command.savings, summary = %command.summary, "disrupting"
            );
            for spec in command.removals() {
                let claim_id = spec.claim_id.clone();
                let reason = spec.reason;
                match termination::start_replacing(&self.ports, spec, given.clone()).await? {
                    Started::New(id) => report.started.push((id, reason)),
                    Started::Existing { id, .. } => debug!(nodeclaim = %id, "node already had a removal command"),
                }
                debug!(nodeclaim = %claim_id, "removal started");
            }
            Ok::<(), HandlerError>(())
        }
        .instrument(span)
        .await
    }

    /// A line for every node with its verdict and reason: at info when it
    /// changed since the last one logged for that node, else at debug.
    /// Returns the nodes logged at info.
    fn log_decisions(&mut self, plan: &Plan, consolidation_skipped: bool) -> Vec<String> {
        let mut memory = self.memory.lock();
        let mut changed = Vec::new();
        let words = |verdict: &str, reason: &str| -> String {
            without_figures(&format!("{verdict}: {reason}"))
        };
        for d in &plan.nodes {
            let verdict = match &d.verdict {
                Verdict::Disrupt { reason, .. } => reason.as_str(),
                Verdict::Keep => "Keep",
            };
            let line = words(verdict, &d.reason);
            let base = words(verdict, &d.base_reason);
            // A pass that skipped consolidation says nothing of what it
            // would have said: its line is compared with what the last
            // line said besides consolidation, so a change in what the
            // other methods say is logged at once, and an unchanged node
            // keeps the last full reason (it still holds).
            let same = match memory.logged.get(&d.node) {
                Some((last, _)) if !consolidation_skipped => *last == line,
                Some((_, last_base)) => *last_base == base,
                None => false,
            };
            if same {
                debug!(node = %d.node, verdict, reason = %d.reason, "disruption candidate");
            } else {
                info!(node = %d.node, nodeclaim = ?d.claim_id, pool = ?d.pool, verdict, reason = %d.reason, "disruption candidate");
                memory.logged.insert(d.node.clone(), (line, base));
                changed.push(d.node.clone());
            }
        }
        memory.logged.retain(|key, _| {
            plan.nodes.iter().any(|d| &d.node == key)
                || key
                    .strip_prefix("handover/")
                    .is_some_and(|p| plan.handovers.iter().any(|h| h.pool == p))
        });
        changed
    }

    /// The claims' bookkeeping (pods seen, empty since, re-stamped hashes),
    /// each conditional on the claim's version: a lost write only delays a
    /// removal, it never makes one early.
    async fn write_claim_updates(&self, gathered: &Gathered, plan: &Plan) {
        for update in &plan.claim_updates {
            let Some(claim) = gathered.claims.iter().find(|c| c.id == update.claim_id) else {
                continue;
            };
            let mut next = claim.next();
            next.disruption = update.disruption.clone();
            if let Some(h) = &update.nodepool_hash {
                next.stamp.nodepool_hash = Some(h.clone());
            }
            let limits = gathered.config.limits(&claim.pool);
            match self.ports.store().update_claim(claim, &next, &limits).await {
                Ok(()) => {}
                Err(e @ StoreError::Conflict { .. }) => {
                    debug!(nodeclaim = %claim.id, error = %e, "claim moved meanwhile; bookkeeping next time")
                }
                Err(e) => {
                    warn!(nodeclaim = %claim.id, error = %e, "could not record disruption bookkeeping")
                }
            }
        }
    }
}

/// A node the dry run would launch, and for which pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedLaunch {
    pub claim_id: String,
    pub pool: String,
    /// The cheapest options offered (type / capacity type / zone).
    pub options: Vec<String>,
    pub pods: Vec<String>,
    /// The cheapest option's price, USD per hour.
    pub price: f64,
}

/// What the dry run would do with one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedNode {
    pub node: String,
    pub nodeclaim: Option<String>,
    pub pool: Option<String>,
    pub instance_type: String,
    pub capacity_type: String,
    pub price: f64,
    /// `keep`, `remove-empty`, `expire`, `replace-drifted`, `consolidate`, `repair`,
    /// `handover` (a Karpenter node replaced, then deleted for Karpenter to drain), `removing`.
    pub action: String,
    pub reason: String,
}

/// `nodewright plan`: the provisioning and the disruption decisions on
/// what the ports show now, acted on in no way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DryRun {
    pub now: Timestamp,
    pub launches: Vec<PlannedLaunch>,
    /// Pending pods that fit nowhere, with the reason.
    pub unschedulable: Vec<(String, String)>,
    pub nodes: Vec<PlannedNode>,
    /// Each CapacityBuffer: chunks wanted, placed on existing (or
    /// launching) room, to launch for, and fitting nowhere.
    pub buffers: Vec<crate::provisioning::buffers::BufferStatus>,
    /// Fleet USD per hour now (every node we know the price of), and after
    /// the launches, removals and replacements of this plan.
    pub cost_now: f64,
    pub cost_after: f64,
    /// Pools being handed over from Karpenter: nodes left, starting now,
    /// in progress, the next and why it waits.
    pub handovers: Vec<disruption::handover::Handover>,
}

fn action_of(reason: Reason, replaced: bool) -> &'static str {
    match reason {
        Reason::Empty => "remove-empty",
        Reason::Expired => "expire",
        Reason::Drifted => "replace-drifted",
        Reason::Underutilized if replaced => "consolidate-replace",
        Reason::Underutilized => "consolidate-delete",
        Reason::Unhealthy => "repair",
        Reason::Interrupted => "interrupted",
    }
}

/// Runs both decisions on what the ports show now, without acting (no
/// write of any kind: not even the claims' bookkeeping).
pub async fn dry_run<P: PortSet>(ports: &P, tuning: Tuning) -> Result<DryRun, HandlerError> {
    let config = super::config::load(ports.store()).await?;
    let gathered = gather(ports, &config).await?;
    let now = gathered.now;
    let plan = disruption::decide(&gathered.snapshot(tuning, now.as_millisecond().unsigned_abs()));
    let all_pending = ports.cluster().pending_pods().await?;
    let nominated_uids = crate::provisioning::plan::nominated_uids(&gathered.claims);
    let nominated_by = |p: &Pod| {
        p.metadata
            .uid
            .as_deref()
            .is_some_and(|u| nominated_uids.contains(u))
    };
    let pending: Vec<Pod> = all_pending
        .iter()
        .filter(|p| crate::scheduling::pod::is_provisionable(p) && !nominated_by(p))
        .cloned()
        .collect();
    let nominated: Vec<Pod> = all_pending
        .iter()
        .filter(|p| nominated_by(p))
        .cloned()
        .collect();
    let usage = ports.store().pool_usage().await?;
    // The provisioner's decision for `pods` on the cluster as gathered.
    let no_volumes = VolumeIndex::default();
    let provision = |pods: &[Pod], volumes: &VolumeIndex, seed: u64| {
        crate::provisioning::plan::decide(&crate::provisioning::plan::Snapshot {
            now,
            pending: pods,
            scheduled: &gathered.pods,
            nominated: &nominated,
            nodes: &gathered.nodes,
            daemon_sets: &gathered.daemon_sets,
            claims: &gathered.claims,
            pools: &config.pools,
            node_classes: &config.node_classes,
            catalog: &gathered.catalog,
            unavailable: &gathered.unavailable,
            usage: &usage,
            volumes,
            settings: &config.settings,
            seed,
        })
    };
    let seed = now.as_millisecond().unsigned_abs();
    let provisioning = provision(&pending, &gathered.volumes, seed);
    // The buffers' chunks after the real pods (the provisioner plans them
    // once no real pod waits): on the cluster as it is now.
    let buffers_plan = (!gathered.buffers.is_empty())
        .then(|| provision(&gathered.buffers, &no_volumes, seed ^ 11));
    // Every buffer, those that make no chunk too (their status says why).
    let buffers = {
        let (mut placed, mut launching, mut unplaced) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(d) = &buffers_plan {
            placed.extend(d.fit_existing.iter().map(|(k, _)| k.clone()));
            launching.extend(d.new_claims.iter().flat_map(|c| c.pods.iter().cloned()));
            unplaced.extend(d.unschedulable.iter().cloned());
        }
        crate::provisioning::buffers::statuses(
            &gathered.resolved_buffers,
            &placed,
            &launching,
            &unplaced,
        )
    };
    let launches: Vec<PlannedLaunch> = provisioning
        .new_claims
        .iter()
        .chain(buffers_plan.iter().flat_map(|d| d.new_claims.iter()))
        .map(|c| PlannedLaunch {
            claim_id: c.id.clone(),
            pool: c.pool.clone(),
            options: c
                .options
                .iter()
                .take(3)
                .map(|o| format!("{}/{}/{}", o.instance_type, o.capacity_type, o.zone))
                .collect(),
            pods: c.pods.iter().map(ToString::to_string).collect(),
            price: c.options.first().map_or(0.0, |o| o.price),
        })
        .collect();
    let facts = disruption::snapshot::node_facts(&gathered.snapshot(tuning, 0));
    let mut nodes = Vec::new();
    let mut cost_now = 0.0;
    let mut removed = 0.0;
    for d in &plan.nodes {
        let f = facts.iter().find(|f| f.name == d.node);
        let price = f.map_or(0.0, |f| f.price);
        cost_now += price;
        let action = match &d.verdict {
            Verdict::Disrupt { reason, command } => {
                removed += price;
                let command = plan.commands.get(*command);
                let replaced = command.is_some_and(|c| c.replacement.is_some());
                if command.is_some_and(|c| c.method == disruption::handover::METHOD) {
                    "handover".to_owned()
                } else {
                    action_of(*reason, replaced).to_owned()
                }
            }
            Verdict::Keep if f.is_some_and(|f| f.disrupting.is_some()) => "removing".to_owned(),
            Verdict::Keep => "keep".to_owned(),
        };
        nodes.push(PlannedNode {
            node: d.node.clone(),
            nodeclaim: d.claim_id.clone(),
            pool: d.pool.clone(),
            instance_type: f.map(|f| f.instance_type.clone()).unwrap_or_default(),
            capacity_type: f.map(|f| f.capacity_type.clone()).unwrap_or_default(),
            price,
            action,
            reason: d.reason.clone(),
        });
    }
    let replacements: f64 = plan
        .commands
        .iter()
        .filter_map(|c| c.replacement.as_ref())
        .map(|r| r.price)
        .sum();
    let launched: f64 = launches.iter().map(|l| l.price).sum();
    Ok(DryRun {
        now,
        launches,
        unschedulable: provisioning
            .unschedulable
            .iter()
            .map(|(k, r)| (k.to_string(), r.clone()))
            .collect(),
        nodes,
        buffers,
        cost_now,
        cost_after: cost_now - removed + replacements + launched,
        handovers: plan.handovers,
    })
}

impl DryRun {
    /// The plan as a table a person reads.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "plan at {}", self.now);
        if self.launches.is_empty() && self.unschedulable.is_empty() {
            let _ = writeln!(out, "launch: nothing (no pending pod needs a node)");
        }
        for l in &self.launches {
            let _ = writeln!(
                out,
                "launch  {:<20} pool {:<12} ${:.4}/h  {} pod(s): {}  options: {}",
                l.claim_id,
                l.pool,
                l.price,
                l.pods.len(),
                l.pods.join(", "),
                l.options.join(", ")
            );
        }
        for (pod, why) in &self.unschedulable {
            let _ = writeln!(out, "cannot place pod {pod}: {why}");
        }
        for b in &self.buffers {
            let (condition, message) = b.condition();
            let condition = if b.not_ready.is_some() {
                format!("{condition}: {message}")
            } else {
                condition.to_owned()
            };
            let _ = writeln!(
                out,
                "buffer  {:<20} wanted {}, placed {}, launching {}, fitting nowhere {}  ({condition}){}",
                b.buffer,
                b.wanted,
                b.placed,
                b.launching,
                b.unplaced,
                b.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "{:<20} {:<46} {:<14} {:<10} {:<9} ${:.4}/h  {}",
                n.action,
                n.node,
                n.instance_type,
                n.capacity_type,
                n.pool.as_deref().unwrap_or("-"),
                n.price,
                n.reason
            );
        }
        for h in &self.handovers {
            let _ = write!(
                out,
                "handover from Karpenter, NodePool {}: {} Karpenter node(s) left",
                h.pool, h.remaining
            );
            if !h.start.is_empty() {
                let _ = write!(out, "; replacing now: {}", h.start.join(", "));
            }
            if !h.in_progress.is_empty() {
                let _ = write!(out, "; in progress: {}", h.in_progress.join(", "));
            }
            let _ = write!(out, "; next: {}", h.next.as_deref().unwrap_or("none"));
            if let Some(why) = &h.waiting {
                let _ = write!(out, "; waits: {why}");
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "fleet ${:.4}/h now, ${:.4}/h after this plan",
            self.cost_now, self.cost_after
        );
        out
    }
}

/// `karpenter_pods_startup_duration_seconds`: from creation to Ready, for
/// each pod that became Ready in (`since`, `now`] (the first decision of a
/// process looks back one decision interval at most, so a warm start
/// publishes nothing twice and a cold one nothing old).
fn publish_startups(pods: &[Pod], since: Option<Timestamp>, now: Timestamp) {
    let since = since.unwrap_or(now - SignedDuration::from_secs(10));
    for p in pods {
        let Some(created) = p.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
            continue;
        };
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        if let Some(ready) = ready
            && ready > since
            && ready <= now
        {
            super::metrics::seconds(
                now.as_millisecond(),
                super::metrics::karpenter::PODS_STARTUP,
                &[],
                ready.duration_since(created).as_secs_f64().max(0.0),
            );
        }
    }
}

/// Karpenter's `consolidation_type` label of a command's method.
fn consolidation_type(c: &disruption::Command) -> &'static str {
    match c.method {
        "emptiness" => "empty",
        "multi-node-consolidation" => "multi",
        "single-node-consolidation" => "single",
        _ => "",
    }
}

/// `karpenter_voluntary_disruption_decisions_total` for each command that
/// starts (a voluntary one once re-validated, as Karpenter counts it when
/// its queue takes it): `replace` or `delete`, its reason, and which
/// consolidation (`empty`, `single`, `multi`) when it is one; and
/// `…_decisions_by_nodepool_total` once per pool among its targets.
/// nodewright's emptiness makes one command per empty node, Karpenter's
/// one for all the nodes a pass finds empty: emptiness commands starting
/// together count as one decision, as Karpenter counts them.
/// Karpenter's `eligible_nodes` gauge, per reason whose method ran.
fn publish_eligible(plan: &Plan, now: Timestamp) {
    for (reason, n) in &plan.eligible {
        super::metrics::gauge(
            now.as_millisecond(),
            super::metrics::karpenter::DISRUPTION_ELIGIBLE_NODES,
            &[("reason", reason.metric_label())],
            *n as f64,
        );
    }
}

fn publish_decisions(commands: &[&disruption::Command], now: Timestamp) {
    // (decision, reason, consolidation type) → the pools of its targets.
    type Labels = (&'static str, &'static str, &'static str);
    let mut decisions: Vec<(Labels, Vec<&str>)> = Vec::new();
    for c in commands {
        let decision = if c.replacement.is_some() {
            "replace"
        } else {
            "delete"
        };
        let consolidation_type = consolidation_type(c);
        let reason = c.reason.metric_label();
        let key = (decision, reason, consolidation_type);
        let pools = c.targets.iter().map(|t| t.pool.as_str());
        match decisions
            .iter_mut()
            .find(|(k, _)| c.method == "emptiness" && *k == key)
        {
            Some((_, seen)) => seen.extend(pools),
            None => decisions.push((key, pools.collect())),
        }
    }
    for ((decision, reason, consolidation_type), mut pools) in decisions {
        super::metrics::count(
            now.as_millisecond(),
            super::metrics::karpenter::DISRUPTION_DECISIONS,
            &[
                ("decision", decision),
                ("reason", reason),
                ("consolidation_type", consolidation_type),
            ],
            1.0,
        );
        pools.sort_unstable();
        pools.dedup();
        for pool in pools {
            super::metrics::count(
                now.as_millisecond(),
                super::metrics::karpenter::DISRUPTION_DECISIONS_BY_NODEPOOL,
                &[
                    ("nodepool", pool),
                    ("decision", decision),
                    ("reason", reason),
                    ("consolidation_type", consolidation_type),
                ],
                1.0,
            );
        }
    }
}

/// A decision line with its figures and durations folded to `#`: the
/// durations in a reason ("empty for 20s", "repaired after 29m30s") change
/// every pass, and so do their units ("30m", "29m30s", "45s"), so lines
/// are compared without them and a line comes when the words change.
fn without_figures(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if !c.is_ascii_digit() {
            out.push(c);
            continue;
        }
        while chars
            .peek()
            .is_some_and(|n| n.is_ascii_digit() || matches!(n, 'h' | 'm' | 's' | 'd'))
        {
            chars.next();
        }
        out.push('#');
    }
    out
}

#[cfg(test)]
mod tests;
