//! The provisioner: pending pods → batches → claims → launched instances →
//! registered nodes with their pods bound.
//!
//! One invocation holds the `provisioner` lease and calls [`Provisioner::tick`]
//! about every second until its deadline; the simulator calls the same
//! `tick` on its clock. Everything that must survive the invocation is in
//! the Store: the batch window, parked pods, claims, limit usage and
//! unavailable offerings.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::{Instrument, debug, info, info_span, warn};

use super::HandlerError;
use super::config::{ConfigReader, LoadedConfig};
use super::launcher::{LaunchEnd, LaunchSettings, Launcher};
use super::leased_loop::{self, LeasedLoop, Step};
use super::termination;
use crate::model::batch::{MAX_PARKED_MORE, Parked, ParkedGroup, Solving, uid_hash};
use crate::model::claim::{BINDING_TAINT_KEY, Claim, Phase, UNREGISTERED_TAINT_KEY};
use crate::model::{Batch, CloudCatalog, Lease, OfferingKey, PodKey, SignedDuration, Timestamp};
use crate::ports::{BindOutcome, Clock, Cloud, Cluster, ClusterEvent, PortSet, Store, StoreError};
use crate::provisioning::admission::Admission;
use crate::provisioning::batcher::{self, BatchStep, BatchWindow};
use crate::provisioning::buffers::{self, BufferStatus};
use crate::provisioning::lifecycle::{self, LifecycleAction};
use crate::provisioning::plan::{self, Snapshot};
use crate::provisioning::reservations;
use crate::scheduling::pod::is_provisionable;
use crate::scheduling::taints::{Effect, Taint};
use crate::scheduling::volumes;

/// The batch window: the stored Settings' when there is a settings item,
/// else the provisioner's own (tests set it).
fn batch_window(config: &LoadedConfig, own: BatchWindow) -> BatchWindow {
    if config.settings_stored {
        BatchWindow {
            idle: config.settings.batch_idle,
            max: config.settings.batch_max,
        }
    } else {
        own
    }
}

/// "no NodePool exists" misleads when NodePools are stored but none is
/// valid: say which and why.
fn with_config_reason(
    unschedulable: Vec<(PodKey, String)>,
    config: &LoadedConfig,
) -> Vec<(PodKey, String)> {
    match config.no_pool_reason() {
        Some(reason) => unschedulable
            .into_iter()
            .map(|(k, _)| (k, reason.clone()))
            .collect(),
        None => unschedulable,
    }
}

/// How often the provisioner publishes its gauges (pending pods, each
/// pool's usage, limits and cost): CloudWatch's standard resolution is a
/// minute, and a gauge is a line of log each time.
const GAUGES_EVERY: SignedDuration = SignedDuration::from_secs(10);
/// How long a quiet provisioner trusts the empty batch record it last read.
const QUIET_BATCH_REREAD: SignedDuration = SignedDuration::from_secs(30);

/// How often the CapacityBuffers are planned for when nothing else asks:
/// real pods taking buffer room are refilled within this (Karpenter plans
/// them on every provisioning pass).
pub const BUFFERS_EVERY: SignedDuration = SignedDuration::from_secs(10);

/// Karpenter's gauges: pods waiting for capacity
/// (`karpenter_scheduler_queue_depth`), and per pool what its claims
/// reserve, its limits (cpu in cores, memory in bytes, nodes) and what its
/// instances cost an hour at their launch prices.
fn publish_gauges(
    config: &LoadedConfig,
    claims: &[Claim],
    usage: &std::collections::BTreeMap<String, crate::model::Usage>,
    pending: &[Pod],
    now: Timestamp,
) {
    use super::metrics::{gauge, karpenter};
    let t = now.as_millisecond();
    let waiting = pending.iter().filter(|p| is_provisionable(p)).count();
    gauge(
        t,
        karpenter::SCHEDULER_QUEUE_DEPTH,
        &[("controller", "provisioner")],
        waiting as f64,
    );
    let value = |resource: &str, v: i64| {
        if resource == "cpu" {
            v as f64 / 1000.0
        } else {
            v as f64
        }
    };
    for pool in &config.pools {
        let name = pool.name.as_str();
        for (resource, v) in usage.get(name).into_iter().flatten() {
            gauge(
                t,
                karpenter::NODEPOOLS_USAGE,
                &[("nodepool", name), ("resource_type", resource.as_str())],
                value(resource, *v),
            );
        }
        for (resource, v) in &pool.limits.resources {
            gauge(
                t,
                karpenter::NODEPOOLS_LIMIT,
                &[("nodepool", name), ("resource_type", resource.as_str())],
                value(resource, *v),
            );
        }
        let cost: f64 = claims
            .iter()
            .filter(|c| c.pool == pool.name)
            .filter_map(|c| c.instance.as_ref())
            .map(|i| i.price)
            .sum();
        gauge(t, karpenter::NODEPOOLS_COST, &[("nodepool", name)], cost);
    }
}

/// Whether a tick leaves nothing in flight: it launched and bound nothing,
/// and every claim's node registered and has its binding taint lifted (a
/// launch awaiting registration is followed every tick, to bind its pods
/// as soon as the node registers).
fn settled(claims: &[Claim], report: &TickReport, now: Timestamp) -> bool {
    report.launched.is_empty()
        && report.bound == 0
        && !report.solved
        && claims.iter().all(|c| {
            c.phase() == Phase::Registered
                && c.registered_at
                    .is_none_or(|at| now.duration_since(at) >= lifecycle::BINDING_SETTLE)
        })
}

impl<P: PortSet> LeasedLoop for Provisioner<P> {
    const NAME: &'static str = "provisioner";

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
        self.release_lease().await
    }

    async fn step(&mut self) -> Result<Step, HandlerError> {
        let report = self.tick().await?;
        let stop = self.settings.end_when_quiet && report.quiet;
        if stop {
            info!(
                ticks = self.ticks,
                "nothing left to follow; the invocation ends early"
            );
        }
        Ok(Step {
            wake_at: report.wake_at,
            stop,
        })
    }
}

/// The lease that makes one provisioner invocation the active one.
pub const LEASE: &str = "provisioner";

/// How long a solve may hold the batch before another invocation may take over.
const SOLVE_CLAIM: SignedDuration = SignedDuration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ProvisionerSettings {
    pub window: BatchWindow,
    /// Launches: concurrency, attempts, how long an offering out of capacity is avoided.
    pub launch: LaunchSettings,
    /// A parked pod is looked at again after this long even if nothing changed.
    pub parked_retry: SignedDuration,
    /// The same for a parked pod with PVC-backed volumes: its claim may get
    /// bound or created, which the configuration fingerprint does not see.
    pub parked_volume_retry: SignedDuration,
    /// How often instances are compared with claims.
    pub gc_interval: SignedDuration,
    /// How often pending pods are polled when nothing else is due.
    pub poll: SignedDuration,
    /// How often the provisioner advances removal commands as a safety net
    /// (commands with a deadline — interruptions — are followed at their
    /// own pace once seen).
    pub removals_interval: SignedDuration,
    /// End the invocation at the first quiet tick ([`TickReport::quiet`])
    /// instead of ticking until the deadline: the next scheduled invocation
    /// (a minute later) sees what became pending meanwhile. Lambda bills the
    /// seconds an invocation runs, and ticking all minute is most of the
    /// running cost; the price is up to a minute's reaction from quiet.
    pub end_when_quiet: bool,
    /// Publish Karpenter's gauges (queue depth, each pool's usage, limits
    /// and cost). Each is a CloudWatch custom metric billed by the month.
    pub gauges: bool,
}

impl Default for ProvisionerSettings {
    fn default() -> Self {
        ProvisionerSettings {
            window: BatchWindow::default(),
            launch: LaunchSettings::default(),
            parked_retry: SignedDuration::from_mins(5),
            parked_volume_retry: SignedDuration::from_secs(30),
            gc_interval: SignedDuration::from_secs(60),
            poll: SignedDuration::from_secs(1),
            removals_interval: SignedDuration::from_secs(15),
            end_when_quiet: false,
            gauges: true,
        }
    }
}

/// What one tick did, for tests and the simulator.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickReport {
    /// When the next tick is due.
    pub wake_at: Option<Timestamp>,
    pub launched: Vec<String>,
    pub bound: usize,
    pub solved: bool,
    /// Removal commands were advanced (they may have launched replacements).
    pub removals: bool,
    /// Nothing is left for this invocation to follow: no pod waits to be
    /// batched or solved (parked pods wait for a change, not a tick), every
    /// claim has its node, and no removal is in progress.
    pub quiet: bool,
}

/// The provisioner of one invocation.
#[derive(Debug)]
pub struct Provisioner<P: PortSet> {
    ports: P,
    settings: ProvisionerSettings,
    /// Lease holder id (the invocation's request id).
    holder: String,
    last_gc: Option<Timestamp>,
    /// When this invocation advances removal commands next (the safety net).
    next_removals: Option<Timestamp>,
    /// When this invocation last published its gauges.
    last_gauges: Option<Timestamp>,
    /// When this invocation last read the batch record and found it empty
    /// (no window, nothing parked, nobody solving): while no pod is
    /// pending, ticks skip reading it again for [`QUIET_BATCH_REREAD`].
    batch_seen_empty_at: Option<Timestamp>,
    /// When this invocation last planned for the CapacityBuffers.
    last_buffers: Option<Timestamp>,
    /// Where the buffers' chunks were at that pass.
    buffer_status: Vec<BufferStatus>,
    ticks: u64,
    config: ConfigReader,
}

impl<P: PortSet> Provisioner<P> {
    pub fn new(ports: P, settings: ProvisionerSettings, holder: impl Into<String>) -> Self {
        Provisioner {
            ports,
            settings,
            holder: holder.into(),
            last_gc: None,
            next_removals: None,
            last_gauges: None,
            batch_seen_empty_at: None,
            last_buffers: None,
            buffer_status: Vec::new(),
            ticks: 0,
            config: ConfigReader::new(),
        }
    }

    /// Shares a configuration reader across invocations (one per process),
    /// so a warm container re-reads only what changed.
    pub fn with_config_reader(mut self, reader: ConfigReader) -> Self {
        self.config = reader;
        self
    }

    /// The reader to hand to the next invocation's provisioner.
    pub fn config_reader(&self) -> ConfigReader {
        self.config.clone()
    }

    pub fn ports(&self) -> &P {
        &self.ports
    }

    /// Takes (or renews) the lease until `until`. False: another invocation is active.
    pub async fn acquire_lease(&self, until: Timestamp) -> Result<bool, HandlerError> {
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

    /// Runs ticks until `deadline` (or, with `end_when_quiet`, the first
    /// quiet tick), sleeping with `sleep` between them: the Lambda's loop
    /// ([`leased_loop::run`]); it holds the lease for the whole invocation.
    pub async fn run_until<F, Fut>(
        &mut self,
        deadline: Timestamp,
        sleep: F,
    ) -> Result<u64, HandlerError>
    where
        F: Fn(SignedDuration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let span =
            info_span!("provisioner_invocation", holder = %self.holder, deadline = %deadline);
        leased_loop::run(self, deadline, sleep)
            .instrument(span)
            .await
    }

    /// One pass: lifecycle of existing claims, garbage collection when due,
    /// then the batch window and, when it closes, a solve and launches.
    pub async fn tick(&mut self) -> Result<TickReport, HandlerError> {
        self.ticks += 1;
        let span = info_span!("provisioner_tick", holder = %self.holder, tick = self.ticks);
        self.tick_inner().instrument(span).await
    }

    async fn tick_inner(&mut self) -> Result<TickReport, HandlerError> {
        let mut report = TickReport::default();
        let now = self.ports.clock().now();
        let store = self.ports.store();
        let cluster = self.ports.cluster();

        let config = LoadedConfig::clone(&*self.config.read(store, now).await?);
        // Claims and usage from one read of the state (one `state#version`
        // GetItem in DynamoDB, the quiet tick's cost); read again, both,
        // only when this tick changed them.
        let state = store.state(now).await?;
        let (mut claims, mut usage) = (state.claims, state.usage);
        let pending = cluster.pending_pods().await?;
        let nodes = cluster.nodes().await?;

        if self.settings.gauges
            && self
                .last_gauges
                .is_none_or(|t| now.duration_since(t) >= GAUGES_EVERY)
        {
            self.last_gauges = Some(now);
            publish_gauges(&config, &claims, &usage, &pending, now);
        }

        // Claims first: launches to finish, nodes that registered, timeouts.
        // The claims are read again only when an action changed them.
        let actions = lifecycle::registration(&claims, &nodes, &pending, now);
        let mut changed = !actions.is_empty();
        for action in actions {
            self.carry_out(action, &config, &mut report).await?;
        }
        if self
            .last_gc
            .is_none_or(|t| now.duration_since(t) >= self.settings.gc_interval)
        {
            self.last_gc = Some(now);
            if std::mem::take(&mut changed) {
                let state = store.state(now).await?;
                (claims, usage) = (state.claims, state.usage);
            }
            let instances = self.ports.cloud().instances().await?;
            let unreadable = store.unreadable_state().await?;
            if !unreadable.is_empty() {
                let items: Vec<String> = unreadable.iter().map(ToString::to_string).collect();
                tracing::error!(unreadable = ?items, "state items cannot be read: garbage collection and terminations wait until they are fixed or removed");
            }
            let blocked = (!unreadable.is_empty())
                .then_some(lifecycle::GcBlock::Unreadable(unreadable.len()));
            let garbage = lifecycle::collect_garbage(&claims, &instances, &nodes, blocked, now);
            for left in &garbage.left_alone {
                info!(subject = %left.subject, reason = %left.reason, "garbage collection leaves this alone");
            }
            debug!(
                instances = instances.len(),
                claims = claims.len(),
                actions = garbage.actions.len(),
                left_alone = garbage.left_alone.len(),
                "garbage collection"
            );
            changed = !garbage.actions.is_empty();
            for action in garbage.actions {
                self.carry_out(action, &config, &mut report).await?;
            }
            self.collect_launch_templates(&config, &claims, blocked, now)
                .await;
            if self.reconcile_reservations(&config, &claims, now).await? {
                changed = true;
            }
        }
        // Removals in progress: the disruption loop drives them every few
        // seconds; the provisioner is the safety net should it stop. Not
        // every tick: advancing one reads its node and pods. A command with
        // a deadline (an interruption: the instance goes whatever we do) is
        // followed at the machine's pace once seen, so a drain never waits
        // on the safety net's interval.
        let mut removal_wake = None;
        if self.next_removals.is_none_or(|t| now >= t) {
            // A removal that finished released its claim's usage.
            changed = true;
            removal_wake =
                termination::advance_all(&self.ports, &config, &self.settings.launch).await?;
            let urgent = removal_wake.is_some()
                && store
                    .commands()
                    .await?
                    .iter()
                    .any(|c| c.spec.deadline.is_some());
            let floor = if urgent {
                crate::termination::machine::POLL
            } else {
                self.settings.removals_interval
            };
            let next = removal_wake.map_or(now + self.settings.removals_interval, |w| {
                w.max(now + floor)
            });
            self.next_removals = Some(next);
            report.removals = removal_wake.is_some();
            removal_wake = removal_wake.map(|_| next);
        }
        if changed || removal_wake.is_some() {
            let state = store.state(now).await?;
            (claims, usage) = (state.claims, state.usage);
        }
        // Static pools keep their size (interrupted or removed nodes replaced).
        if config.pools.iter().any(|p| p.replicas.is_some())
            && self.keep_static(&config, &claims, now, &mut report).await?
        {
            let state = store.state(now).await?;
            (claims, usage) = (state.claims, state.usage);
        }

        // Then the batch window over the pods nobody is taking care of.
        let nominated: HashSet<&str> = claims
            .iter()
            .filter(|c| c.node_name.is_none())
            .flat_map(|c| c.pods.iter().map(|k| k.uid.as_str()))
            .collect();
        // A quiet tick: no pod pending and the batch record empty when last
        // read. The tick would find nothing to batch and nothing to clean
        // up, so the GetItem is skipped (one read unit a second of the
        // running cost); the lease keeps other writers away, and the record
        // is read again at least every QUIET_BATCH_REREAD.
        if !pending.iter().any(is_provisionable)
            && self
                .batch_seen_empty_at
                .is_some_and(|t| now.duration_since(t) < QUIET_BATCH_REREAD)
        {
            report.wake_at = removal_wake;
            self.keep_buffers(&config, now, false, &mut report).await?;
            report.quiet = removal_wake.is_none() && settled(&claims, &report, now);
            return Ok(report);
        }
        let stored = store.batch().await?;
        let state = stored.clone().unwrap_or_default();
        self.batch_seen_empty_at = state.is_empty().then_some(now);
        if state
            .solving
            .as_ref()
            .is_some_and(|s| s.holder != self.holder && s.until > now)
        {
            debug!("another invocation is solving; batching waits for it");
            report.wake_at = Some(now + self.settings.poll);
            return Ok(report);
        }
        // Parked pods are looked at again when the configuration or any
        // pool's reserved usage changes (room may have appeared), or after a while.
        let fingerprint = fingerprint(config.fingerprint, &usage);
        let parked_now = |uid: &str| state.is_parked(uid, fingerprint, now);
        let waiting_pods: Vec<&Pod> = pending
            .iter()
            .filter(|p| is_provisionable(p))
            .filter(|p| {
                p.metadata
                    .uid
                    .as_deref()
                    .is_some_and(|u| !nominated.contains(u) && !parked_now(u))
            })
            .collect();
        let waiting: BTreeSet<String> = waiting_pods
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();

        report.wake_at = removal_wake;
        // Real pods first: the buffers are planned for when no real pod
        // waits in the batch window, right after a batch was solved.
        let mut buffers_now = true;
        let mut batch_idle = false;
        match batcher::step(
            state.window.as_ref(),
            &waiting,
            now,
            batch_window(&config, self.settings.window),
        ) {
            BatchStep::Idle => {
                batch_idle = state.solving.is_none();
                let pending_uids = uids(&pending);
                let mut next = state.clone();
                next.retain_pending(&pending_uids);
                if next != state {
                    next.version += 1;
                    self.write_batch(stored.as_ref(), &next).await?;
                }
            }
            BatchStep::Wait {
                window,
                changed,
                wake_at,
            } => {
                buffers_now = false;
                report.wake_at = Some(report.wake_at.map_or(wake_at, |w| w.min(wake_at)));
                if changed {
                    let mut next = state.clone();
                    next.window = Some(window);
                    next.version += 1;
                    if !self.write_batch(stored.as_ref(), &next).await? {
                        return Ok(report);
                    }
                }
            }
            BatchStep::Close { pods, waited } => {
                let mut next = state.clone();
                next.window = None;
                next.version += 1;
                if pods > 0 {
                    next.solving = Some(Solving {
                        holder: self.holder.clone(),
                        until: now + SOLVE_CLAIM,
                    });
                }
                // Claim the close first: of two racing invocations only one solves.
                if !self.write_batch(stored.as_ref(), &next).await? {
                    return Ok(report);
                }
                if pods > 0 {
                    info!(pods, duration = %format_duration(waited), "batched {pods} pod(s) in {}", format_duration(waited));
                    // What parking needs of the listing, kept as uids: the
                    // waiting pods move into the solve and the rest of the
                    // listing is dropped, so a burst's pods are held once
                    // while it is solved, not twice.
                    let pending_uids: HashSet<String> = pending
                        .iter()
                        .filter_map(|p| p.metadata.uid.clone())
                        .collect();
                    let with_claims: HashSet<String> = pending
                        .iter()
                        .filter(|p| volumes::uses_claims(p))
                        .filter_map(|p| p.metadata.uid.clone())
                        .collect();
                    let owned: Vec<Pod> = pending
                        .into_iter()
                        .filter(|p| {
                            p.metadata
                                .uid
                                .as_deref()
                                .is_some_and(|u| waiting.contains(u))
                        })
                        .collect();
                    let outcome = self.provision(&config, owned, &mut report).await;
                    let parked = outcome.clone().unwrap_or_default();
                    // Parked against the usage the solve saw: the launches just
                    // made shrink reservations to the real types, and that room
                    // is worth a second look next tick.
                    // Park what fit nowhere and hand the solve back, even after a failure.
                    fn as_str(set: &HashSet<String>) -> HashSet<&str> {
                        set.iter().map(String::as_str).collect()
                    }
                    let (pending_uids, with_claims) = (as_str(&pending_uids), as_str(&with_claims));
                    self.park(&next, parked, &pending_uids, &with_claims, fingerprint, now)
                        .await?;
                    outcome?;
                }
                report.solved = true;
            }
        }
        if buffers_now {
            let solved = report.solved;
            self.keep_buffers(&config, now, solved, &mut report).await?;
        }
        report.quiet = batch_idle && report.wake_at.is_none() && settled(&claims, &report, now);
        Ok(report)
    }

    /// Where the CapacityBuffers' chunks were at the last pass.
    pub fn buffer_status(&self) -> &[BufferStatus] {
        &self.buffer_status
    }

    /// Plans for the CapacityBuffers' virtual pods as for pending pods, on
    /// the cluster as it is (real pods, nominated ones and claims in
    /// flight hold their room first) and launches the nodes the chunks
    /// that fit nowhere need; nothing is bound or nominated for a virtual
    /// pod. Every [`BUFFERS_EVERY`], or now when `force` (a batch was just
    /// solved: its pods may have taken buffer room).
    async fn keep_buffers(
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
        let resolved = super::resolve_buffers(cluster, &config.buffers).await;
        let virtual_pods = buffers::virtual_pods(&resolved);
        let state = store.state(now).await?;
        let (claims, unavailable, usage) = (state.claims, state.unavailable, state.usage);
        let (nodes, scheduled, pending, daemon_sets) = futures_util::future::try_join4(
            cluster.nodes(),
            cluster.scheduled_pods(),
            cluster.pending_pods(),
            cluster.daemon_sets(),
        )
        .await?;
        let nominated = plan::nominated_pods(pending, &claims);
        let catalog: Arc<CloudCatalog> = self.catalog_now(config, now).await?;
        let volumes = crate::scheduling::volumes::VolumeIndex::default();
        let decision = plan::decide(&Snapshot {
            now,
            pending: &virtual_pods,
            scheduled: &scheduled,
            nominated: &nominated,
            nodes: &nodes,
            daemon_sets: &daemon_sets,
            claims: &claims,
            pools: &config.pools,
            node_classes: &config.node_classes,
            catalog: &catalog,
            unavailable: &unavailable,
            usage: &usage,
            volumes: &volumes,
            settings: &config.settings,
            seed: seed_of(now, self.ticks, 11),
        });
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
        for (_, end) in self.launcher().launch_all(claims, config, &catalog).await {
            if let LaunchEnd::Launched(id) = end {
                report.launched.push(id);
            }
        }
        Ok(())
    }

    /// Deletes the launch templates of ours nothing uses any more
    /// (`lifecycle::unused_launch_templates`), logging each delete and
    /// each template kept with why. Best effort: a failure is logged and
    /// the next pass tries again; it never stops the tick.
    async fn collect_launch_templates(
        &self,
        config: &LoadedConfig,
        claims: &[Claim],
        blocked: Option<lifecycle::GcBlock>,
        now: Timestamp,
    ) {
        let cloud = self.ports.cloud();
        let templates = match cloud.launch_templates().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list our launch templates; clean-up waits for the next pass");
                return;
            }
        };
        if templates.is_empty() {
            return;
        }
        let mut current: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for class in &config.node_classes {
            let images = match cloud.resolved_class(class).await {
                Ok(r) => r.image_ids,
                Err(e) => {
                    tracing::warn!(nodeclass = %class.name, error = %e, "cannot resolve the NodeClass's AMIs; its launch templates are kept");
                    Vec::new()
                }
            };
            current.insert(class.name.clone(), images);
        }
        // A class set aside as invalid may come back: its templates are kept.
        for e in &config.invalid {
            if let Some(name) = e.item.strip_prefix("nodeclass/") {
                current.entry(name.to_owned()).or_default();
            }
        }
        let garbage =
            lifecycle::unused_launch_templates(&templates, claims, &current, blocked, now);
        for kept in &garbage.kept {
            debug!(launch_template = %kept.subject, reason = %kept.reason, "launch template kept");
        }
        for (t, why) in &garbage.delete {
            match cloud.delete_launch_template(t).await {
                Ok(true) => {
                    info!(launch_template = %t.name, id = %t.id, reason = %why, "deleted a launch template of ours nothing uses")
                }
                Ok(false) => {
                    debug!(launch_template = %t.name, "launch template already gone")
                }
                Err(e) => {
                    tracing::warn!(launch_template = %t.name, error = %e, "cannot delete the launch template; the next pass tries again")
                }
            }
        }
    }

    /// The catalog with the capacity reservations the NodeClasses select
    /// ([`super::catalog_with_reservations`]).
    async fn catalog_now(
        &self,
        config: &LoadedConfig,
        now: Timestamp,
    ) -> Result<Arc<CloudCatalog>, HandlerError> {
        super::catalog_with_reservations(&self.ports, config, now).await
    }

    /// The claims in capacity reservations against the reservations
    /// active now (one listing, only when some claim is `reserved`):
    /// a claim whose reservation ended is demoted to on-demand, on its
    /// node too (Karpenter's capacity-type controller); one that does not
    /// know its reservation's kind learns it; then nodes in a capacity
    /// block that ends within 40 minutes are drained and replaced, before
    /// EC2 takes the instances back (Karpenter's capacity-reservation
    /// expiration controller). True when it changed or started anything.
    async fn reconcile_reservations(
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

    /// Solves for `pods`, creates and launches claims; re-plans the pods of
    /// claims that found no capacity (a few rounds). Returns the pods that fit nowhere.
    async fn provision(
        &self,
        config: &LoadedConfig,
        mut pods: Vec<Pod>,
        report: &mut TickReport,
    ) -> Result<Vec<(PodKey, String)>, HandlerError> {
        let store = self.ports.store();
        let cluster = self.ports.cluster();
        let catalog: Arc<CloudCatalog> = self.catalog_now(config, self.ports.clock().now()).await?;
        let scheduled = cluster.scheduled_pods().await?;
        let daemon_sets = cluster.daemon_sets().await?;
        let volumes = super::volume_index(cluster, &pods).await?;
        let mut unplaceable = Vec::new();
        const ROUNDS: usize = 3;
        for round in 0..ROUNDS {
            if pods.is_empty() {
                break;
            }
            let now = self.ports.clock().now();
            // Claims, unavailable offerings and usage: one read of the state.
            let state = store.state(now).await?;
            let (claims, unavailable, usage) = (state.claims, state.unavailable, state.usage);
            let nodes = cluster.nodes().await?;
            // The pods are listed again, and those that went away (bound by
            // kube-scheduler, deleted) since the window opened are left out.
            // Only their uids are kept meanwhile and the fresh listing's
            // pods are moved, not copied: a burst's pods are held once.
            let wanted: HashSet<String> =
                pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
            drop(std::mem::take(&mut pods));
            let all_pending = cluster.pending_pods().await?;
            let nominated_uids = plan::nominated_uids(&claims);
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
            if round == 0 {
                info!(
                    pods = pods.len(),
                    "found provisionable pod(s): {}",
                    pod_list(&pods)
                );
            }
            let solve_started = std::time::Instant::now();
            let decision = plan::decide(&Snapshot {
                now,
                pending: &pods,
                scheduled: &scheduled,
                nominated: &nominated,
                nodes: &nodes,
                daemon_sets: &daemon_sets,
                claims: &claims,
                pools: &config.pools,
                node_classes: &config.node_classes,
                catalog: &catalog,
                unavailable: &unavailable,
                usage: &usage,
                volumes: &volumes,
                settings: &config.settings,
                seed: seed_of(now, self.ticks, round),
            });
            super::metrics::seconds(
                now.as_millisecond(),
                super::metrics::karpenter::SCHEDULING_DURATION,
                &[("controller", "provisioner")],
                solve_started.elapsed().as_secs_f64(),
            );
            if !decision.fit_existing.is_empty() {
                debug!(
                    pods = decision.fit_existing.len(),
                    "pod(s) fit on existing or in-flight nodes"
                );
                self.nominate(&claims, &decision.fit_existing, config).await;
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
                .launch_all(decision.new_claims, config, &catalog)
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

    /// Launches and removes nodes of the static pools (`replicas`) so each
    /// holds its size; true when it changed a claim.
    async fn keep_static(
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

    /// Pods that fit on a claim still in flight join its nominated pods, so
    /// they are bound when its node registers and nobody plans their room twice.
    async fn nominate(&self, claims: &[Claim], fits: &[(PodKey, String)], config: &LoadedConfig) {
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

    fn launcher(&self) -> Launcher<'_, P> {
        Launcher::new(&self.ports, &self.settings.launch)
    }

    async fn carry_out(
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
                    let volume_index = super::volume_index(cluster, &owned).await?;
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
                super::metrics::count(
                    self.ports.clock().now().as_millisecond(),
                    super::metrics::karpenter::NODES_CREATED,
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

    /// Records pods that fit nowhere; logs and publishes an Event for each
    /// new reason only.
    async fn park(
        &self,
        state: &Batch,
        unplaceable: Vec<(PodKey, String)>,
        pending_uids: &HashSet<&str>,
        with_claims: &HashSet<&str>,
        fingerprint: u64,
        now: Timestamp,
    ) -> Result<(), HandlerError> {
        let mut next = state.clone();
        next.solving = None;
        next.retain_pending(pending_uids);
        // Pods parked by hash stay known (reported) across solves; this
        // solve's pods move from their old group to this solve's.
        let solved: HashSet<u32> = unplaceable.iter().map(|(k, _)| uid_hash(&k.uid)).collect();
        let known_by_hash: HashSet<u32> = next
            .parked_more
            .iter()
            .flat_map(|g| g.pods.iter().copied())
            .filter(|h| solved.contains(h))
            .collect();
        for g in &mut next.parked_more {
            g.pods.retain(|h| !solved.contains(h));
        }
        next.parked_more.retain(|g| !g.pods.is_empty());
        let mut more = ParkedGroup {
            config_fingerprint: fingerprint,
            retry_at: now + self.settings.parked_retry,
            pods: Default::default(),
        };
        let mut more_room =
            MAX_PARKED_MORE.saturating_sub(next.parked_more.iter().map(|g| g.pods.len()).sum());
        let (mut reported, mut unreported, mut unparked) = (0usize, 0usize, 0usize);
        let mut events = Vec::new();
        let mut size: usize = next.parked.iter().map(|(uid, p)| parked_size(uid, p)).sum();
        for (pod, reason) in unplaceable {
            // The record keeps a bounded copy; the event and the log line the whole reason.
            let stored = stored_reason(&reason);
            let retry = if with_claims.contains(pod.uid.as_str()) {
                self.settings.parked_volume_retry
            } else {
                self.settings.parked_retry
            };
            let hash = uid_hash(&pod.uid);
            let known = next
                .parked
                .get(&pod.uid)
                .is_some_and(|p| p.reason == stored)
                || known_by_hash.contains(&hash);
            if !known && reported >= REPORTS_PER_SOLVE {
                // Not parked either: solved again with the next window, and reported then.
                unreported += 1;
                continue;
            } else if !known {
                reported += 1;
                if reported <= LOG_LINES_PER_SOLVE {
                    warn!(pod = %pod, %reason, "could not schedule pod");
                }
                events.push(ClusterEvent {
                    kind: "Pod".to_owned(),
                    namespace: Some(pod.namespace.clone()),
                    name: pod.name.clone(),
                    type_: "Warning".to_owned(),
                    reason: "FailedScheduling".to_owned(),
                    message: format!("Failed to schedule pod, {reason}"),
                });
            }
            let entry = Parked {
                pod: pod.to_string(),
                reason: stored,
                config_fingerprint: fingerprint,
                retry_at: now + retry,
            };
            let (old, new) = (
                next.parked
                    .get(&pod.uid)
                    .map_or(0, |p| parked_size(&pod.uid, p)),
                parked_size(&pod.uid, &entry),
            );
            if old == 0 && size + new > PARKED_BUDGET {
                // Beyond the detailed budget: parked by hash, if there is room.
                if more_room > 0 {
                    more_room -= 1;
                    if with_claims.contains(pod.uid.as_str()) {
                        more.retry_at = more.retry_at.min(now + self.settings.parked_volume_retry);
                    }
                    more.pods.insert(hash);
                } else {
                    unparked += 1;
                }
                continue;
            }
            size = size + new - old;
            next.parked.insert(pod.uid.clone(), entry);
        }
        if !more.pods.is_empty() {
            next.parked_more.push(more);
        }
        for chunk in events.chunks(EVENT_CONCURRENCY) {
            let posted = futures_util::future::join_all(
                chunk.iter().map(|e| self.ports.cluster().record_event(e)),
            )
            .await;
            for (event, result) in chunk.iter().zip(posted) {
                if let Err(e) = result {
                    debug!(pod = %event.name, error = %e, "could not publish event");
                }
            }
        }
        if reported > LOG_LINES_PER_SOLVE {
            warn!(
                pods = reported - LOG_LINES_PER_SOLVE,
                "could not schedule {} more pod(s) (a line for the first {LOG_LINES_PER_SOLVE}; an event for each)",
                reported - LOG_LINES_PER_SOLVE
            );
        }
        if unreported > 0 {
            info!(
                pods = unreported,
                "{unreported} more unschedulable pod(s) are reported with the next window (at most {REPORTS_PER_SOLVE} a solve)"
            );
        }
        if unparked > 0 {
            warn!(
                pods = unparked,
                "{unparked} unschedulable pod(s) not parked: the batch record is at its size bound; they are solved again with each window"
            );
        }
        if next != *state {
            next.version += 1;
            self.write_batch(Some(state), &next).await?;
        }
        debug!(reported, "parked unschedulable pods");
        Ok(())
    }

    /// Conditional write of the batch state; false when another writer won.
    async fn write_batch(
        &self,
        previous: Option<&Batch>,
        next: &Batch,
    ) -> Result<bool, HandlerError> {
        match self.ports.store().put_batch(previous, next).await {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict { .. }) => {
                debug!("batch state changed under us; leaving this tick to the other writer");
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// What the batch record may spend on parked pods with their reasons: a
/// DynamoDB item is at most 400 KB; the window's hashes take up to 80 KB
/// and the pods parked by hash up to 200 KB (so 20,000 unschedulable pods
/// are all parked, and solved again only when something changed).
const PARKED_BUDGET: usize = 60_000;
/// A parked reason is kept to this many bytes in the record.
const PARKED_REASON_MAX: usize = 300;
/// Pods newly reported (a FailedScheduling event each) per solve; the
/// rest stay unparked and are reported with the next window.
const REPORTS_PER_SOLVE: usize = 10_000;
/// Of those, a log line each for the first few; one line counts the rest.
const LOG_LINES_PER_SOLVE: usize = 20;
/// Events posted at once.
const EVENT_CONCURRENCY: usize = 32;

/// A parked entry's share of the serialised record (JSON keys and punctuation included).
fn parked_size(uid: &str, p: &Parked) -> usize {
    uid.len() + p.pod.len() + p.reason.len() + 110
}

fn stored_reason(reason: &str) -> String {
    if reason.len() <= PARKED_REASON_MAX {
        return reason.to_owned();
    }
    let mut cut = PARKED_REASON_MAX - 3;
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &reason[..cut])
}

fn uids(pods: &[Pod]) -> HashSet<&str> {
    pods.iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect()
}

/// The configuration's fingerprint combined with every pool's usage.
fn fingerprint(
    config: u64,
    usage: &std::collections::BTreeMap<String, crate::model::Usage>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    config.hash(&mut h);
    usage.hash(&mut h);
    h.finish()
}

fn seed_of(now: Timestamp, tick: u64, round: usize) -> u64 {
    (now.as_nanosecond() as u64) ^ tick.rotate_left(17) ^ (round as u64).rotate_left(40)
}

/// `namespace/name` of up to five pods, then a count.
fn pod_list(pods: &[Pod]) -> String {
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

/// `1.0555s`, `15m0s`: how Go prints durations, which Karpenter users read.
pub fn format_duration(d: SignedDuration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        let s = format!("{secs:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s}s")
    } else {
        let total = d.as_secs();
        let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
        if h > 0 {
            format!("{h}h{m}m{s}s")
        } else {
            format!("{m}m{s}s")
        }
    }
}
