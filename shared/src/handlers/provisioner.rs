//! The provisioner: pending pods → batches → claims → launched instances →
//! registered nodes with their pods bound.
//!
//! One invocation holds the `provisioner` lease and calls [`Provisioner::tick`]
//! about every second until its deadline; the simulator calls the same
//! `tick` on its clock. Everything that must survive the invocation is in
//! the Store: the batch window, parked pods, claims, limit usage and
//! unavailable offerings.
//!
//! Here: the invocation (its settings, lease and loop) and the tick; `claim_actions`
//! (carrying out what the claims' lifecycle asks: launch, register and bind,
//! timeouts, garbage), `solve` (a closed batch solved and launched, pods
//! nominated to claims in flight), `parking` (the batch record: pods that fit
//! nowhere parked with their reasons), `capacity_buffers` (CapacityBuffers),
//! `static_pools` (pools with `replicas`), `reserved_capacity` (claims in capacity
//! reservations), `templates` (unused launch templates deleted), `gauges`
//! (Karpenter's gauges).

mod capacity_buffers;
mod claim_actions;
mod gauges;
mod parking;
mod reserved_capacity;
mod solve;
mod static_pools;
mod templates;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::{Instrument, debug, info, info_span, warn};

use super::HandlerError;
use super::config::{ConfigReader, LoadedConfig};
use super::launcher::{LaunchEnd, LaunchSettings, Launcher};
use super::leased_loop::{self, LeasedLoop, Step};
use super::plan_inputs::PlanInputs;
use super::termination;
use crate::model::batch::{MAX_PARKED_MORE, Parked, ParkedGroup, Solving, uid_hash};
use crate::model::claim::{BINDING_TAINT_KEY, Claim, Phase, UNREGISTERED_TAINT_KEY};
use crate::model::{Batch, CloudCatalog, OfferingKey, PodKey, SignedDuration, Timestamp};
use crate::ports::{BindOutcome, Clock, Cloud, Cluster, ClusterEvent, PortSet, Store, StoreError};
use crate::provisioning::admission::Admission;
use crate::provisioning::batcher::{self, BatchStep, BatchWindow};
use crate::provisioning::buffers::{self, BufferStatus};
use crate::provisioning::lifecycle::{self, LifecycleAction};
use crate::provisioning::plan;
use crate::provisioning::reservations;
use crate::scheduling::pod::is_provisionable;
use crate::scheduling::taints::{Effect, Taint};
use crate::scheduling::volumes;

use self::gauges::publish_gauges;

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
/// minute, and a gauge is a line of log each time; twice a minute leaves
/// no minute without a value.
const GAUGES_EVERY: SignedDuration = SignedDuration::from_secs(30);
/// How long a quiet provisioner trusts the empty batch record it last read.
const QUIET_BATCH_REREAD: SignedDuration = SignedDuration::from_secs(30);

/// How often the CapacityBuffers are planned for when nothing else asks:
/// real pods taking buffer room are refilled within this (Karpenter plans
/// them on every provisioning pass).
pub const BUFFERS_EVERY: SignedDuration = SignedDuration::from_secs(10);

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
    /// instead of ticking until the deadline: the next invocation (the wake
    /// queue's, seconds later, or the minute's schedule) sees what became
    /// pending meanwhile. Lambda bills the seconds an invocation runs, and
    /// ticking all minute is most of the running cost; the price is that
    /// wait's reaction from quiet.
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

/// What a process remembers between provisioner invocations (a warm
/// Lambda container, the simulator): when it last compared instances with
/// claims and last published the gauges. Invocations may come every few
/// seconds (the wake queue); neither is done more often than its interval
/// however many there are.
#[derive(Debug, Clone, Default)]
pub struct Memory(std::sync::Arc<std::sync::Mutex<MemoryState>>);

#[derive(Debug, Default)]
struct MemoryState {
    last_gc: Option<Timestamp>,
    last_gauges: Option<Timestamp>,
}

impl Memory {
    /// Whether what `field` remembers is `every` old (or never done); if so
    /// it is remembered as done `now`.
    fn due(
        &self,
        field: impl FnOnce(&mut MemoryState) -> &mut Option<Timestamp>,
        every: SignedDuration,
        now: Timestamp,
    ) -> bool {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let last = field(&mut state);
        let due = last.is_none_or(|t| now.duration_since(t) >= every);
        if due {
            *last = Some(now);
        }
        due
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
    /// When the process last compared instances with claims and last
    /// published the gauges.
    memory: Memory,
    /// When this invocation advances removal commands next (the safety net).
    next_removals: Option<Timestamp>,
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
            memory: Memory::default(),
            next_removals: None,
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

    /// Shares what the process remembers across invocations ([`Memory`]).
    pub fn with_memory(mut self, memory: Memory) -> Self {
        self.memory = memory;
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
        leased_loop::take(&self.ports, LEASE, &self.holder, until).await
    }

    pub async fn release_lease(&self) -> Result<(), HandlerError> {
        leased_loop::give_back(&self.ports, LEASE, &self.holder).await
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

        if self.settings.gauges && self.memory.due(|m| &mut m.last_gauges, GAUGES_EVERY, now) {
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
            .memory
            .due(|m| &mut m.last_gc, self.settings.gc_interval, now)
        {
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

    /// The catalog with the capacity reservations the NodeClasses select
    /// ([`super::catalog_with_reservations`]).
    async fn catalog_now(
        &self,
        config: &LoadedConfig,
        now: Timestamp,
    ) -> Result<Arc<CloudCatalog>, HandlerError> {
        super::catalog_with_reservations(&self.ports, config, now).await
    }

    fn launcher(&self) -> Launcher<'_, P> {
        Launcher::new(&self.ports, &self.settings.launch)
    }
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
