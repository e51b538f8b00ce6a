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
//!
//! Here: the invocation (settings, lease, loop, memory) and the tick: decide,
//! re-validate, act; `gather` (what a decision reads, through the ports),
//! `dry_run` (a decision made and reported, nothing acted on), `publish`
//! (the metrics a decision publishes).

mod dry_run;
mod gather;
mod publish;

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
use super::off_the_loop;
use super::termination::{self, Started};
use crate::disruption::{self, InFlight, Plan, Reason, Snapshot, Tuning, Verdict};
use crate::model::claim::Claim;
use crate::model::{
    CloudCatalog, DISRUPTED_TAINT_KEY, OfferingKey, RemovalReason, ResolvedClass, SignedDuration,
    Timestamp,
};
use crate::ports::{Clock, Cloud, Cluster, PortSet, Store, StoreError};
use crate::scheduling::volumes::VolumeIndex;

pub use self::dry_run::{DryRun, PlannedLaunch, PlannedNode, dry_run};
pub use self::gather::{Gathered, gather, reason_of};
use self::publish::{consolidation_type, publish_decisions, publish_eligible, publish_startups};

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

/// How often decisions come when invocations end at their first quiet
/// tick. A decision gathers every pod and node of the cluster; the
/// provisioner's wake queue brings an invocation every few seconds, and
/// deciding in each would be most of what a quiet cluster costs. Once a
/// minute is what the scheduled invocations brought before the wake queue;
/// invocations listening all minute decide every 10 s, as Karpenter's
/// controller polls.
pub const QUIET_DECIDE_EVERY: SignedDuration = SignedDuration::from_mins(1);

impl DisruptionSettings {
    /// These settings for invocations that end at their first quiet tick:
    /// decisions once a minute ([`QUIET_DECIDE_EVERY`]).
    pub fn ending_when_quiet(self) -> DisruptionSettings {
        DisruptionSettings {
            end_when_quiet: true,
            decide_every: QUIET_DECIDE_EVERY,
            ..self
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
    /// How long the last decision took, by the ports' clock (a simulated
    /// clock does not move during one: always zero there).
    last_decision_took: Option<SignedDuration>,
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
/// claims still launching, the pending pods, the removals in flight, the
/// unavailable offerings.
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
    // A pending pod nominates the node it would be placed on.
    let mut pending: Vec<&str> = g
        .pending
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    pending.sort_unstable();
    pending.hash(&mut h);
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
        leased_loop::take(&self.ports, LEASE, &self.holder, until).await
    }

    pub async fn release_lease(&self) -> Result<(), HandlerError> {
        leased_loop::give_back(&self.ports, LEASE, &self.holder).await
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
        let fits = self.decision_fits(now);
        let decide = !due
            && self.pending.is_empty()
            && self.memory.lock().next_decision.is_none_or(|t| now >= t)
            && fits;
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
        // A decision left to the next invocation is no reason to wake:
        // due already, it would bring the loop back at once, tick after tick.
        candidates.extend(self.memory.lock().next_decision.filter(|_| fits));
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

    /// Whether a decision started now ends well before the invocation
    /// does: twice the last one's time must fit in what is left. A decision
    /// cut by the Lambda timeout would fail the whole invocation — the
    /// provisioner's too, when it runs beside it — and leave its leases to
    /// expire; the next invocation decides at its start instead.
    fn decision_fits(&self, now: Timestamp) -> bool {
        let (Some(until), Some(took)) = (self.lease_until, self.memory.lock().last_decision_took)
        else {
            return true;
        };
        let fits = now + took * 2 <= until;
        if !fits {
            debug!(
                last_took_s = took.as_secs_f64(),
                left_s = until.duration_since(now).as_secs_f64(),
                "not deciding this close to the end of the invocation; the next one decides"
            );
        }
        fits
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
        let seed = self.seed(now);
        let started = self.ports.clock().now();
        let (gathered, plan) = off_the_loop::compute(move || {
            let plan = disruption::decide(&gathered.snapshot(tuning, seed));
            (gathered, plan)
        })
        .await;
        let took = self.ports.clock().now().duration_since(started);
        self.memory.lock().last_decision_took = Some(took);
        debug!(took_s = took.as_secs_f64(), "disruption decided");
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
            let (tuning, seed) = (self.settings.tuning, self.seed(now));
            let (back, command, verdict) = off_the_loop::compute(move || {
                let verdict = disruption::validate(&command, &gathered.snapshot(tuning, seed));
                (gathered, command, verdict)
            })
            .await;
            gathered = back;
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
