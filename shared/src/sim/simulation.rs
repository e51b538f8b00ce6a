//! The simulation loop: a simulated clock and event bus that invoke the
//! handlers exactly as AWS would — the provisioner once a minute (each
//! invocation ticking until its deadline), the state-change function for
//! every EC2 state-change notification — while in-memory controllers play
//! the cluster (Deployments, DaemonSets, kube-scheduler) and nodes register
//! after a boot delay.
//!
//! Generic over the cloud, the store and the cluster, so the same scenarios
//! run on the in-memory adapters, on the real AWS adapters against an
//! emulator, and on the real Kubernetes adapter against a kube-apiserver.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use tracing::{info, warn};

use super::clock::SimClock;
use super::cloud::SimCloud;
use super::cluster::SimCluster;
use super::driver::ClusterDriver;
use crate::handlers::config as config_loader;
use crate::handlers::disruption::{Disruption, DisruptionSettings};
use crate::handlers::interruption::{self, InterruptionSettings, MessageOutcome, Record};
use crate::handlers::provisioner::{Provisioner, ProvisionerSettings};
use crate::handlers::state_change::{self, StateChangeOutcome};
use crate::model::claim::CLAIM_LABEL;
use crate::model::{InstanceState, SignedDuration, Timestamp, Usage};
use crate::ports::{Clock, Cloud, Cluster, Ports, Store};
use crate::scheduling::labels;

#[derive(Debug, Clone)]
pub struct SimSettings {
    /// Launch → the Node registers.
    pub boot: SignedDuration,
    /// Lambda timeout of the provisioner (it is invoked every minute).
    pub invocation: SignedDuration,
    /// The provisioner stops this long before its deadline.
    pub margin: SignedDuration,
    /// EventBridge's delivery delay for state-change events.
    pub event_delay: SignedDuration,
    /// Deliver every state-change event twice.
    pub duplicate_events: bool,
    /// Deliver each due batch of state-change events newest first.
    pub reorder_events: bool,
    /// Lose every state-change event (a broken rule or queue): the
    /// provisioner's garbage collection must notice on its own.
    pub drop_events: bool,
    /// Deliver every interruption-queue message twice, in two batches (SQS
    /// delivers at least once).
    pub duplicate_messages: bool,
    /// Lose every interruption-queue message (an EventBridge target that
    /// failed to deliver): the instance is taken back with no warning heeded.
    pub drop_messages: bool,
    pub provisioner: ProvisionerSettings,
    pub interruption: InterruptionSettings,
    /// SQS's delay before a message handed back (a failed batch item) is
    /// seen again: the queue's visibility timeout.
    pub redelivery: SignedDuration,
    /// The interruption function's timeout: it starts no message after it.
    pub interruption_invocation: SignedDuration,
    /// Lambda's delays before it retries a failed asynchronous invocation
    /// (the state-change function), one per retry.
    pub state_change_retries: Vec<SignedDuration>,
    /// The loop's resolution when nothing is due sooner (1 s; a long,
    /// quiet scenario may take bigger steps).
    pub step: SignedDuration,
    /// Run the disruption function (invoked every minute, ticking inside).
    pub disruption_enabled: bool,
    pub disruption: DisruptionSettings,
    /// Lambda timeout of the disruption function.
    pub disruption_invocation: SignedDuration,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            boot: SignedDuration::from_secs(40),
            invocation: SignedDuration::from_secs(60),
            margin: SignedDuration::from_secs(3),
            event_delay: SignedDuration::from_millis(500),
            duplicate_events: false,
            reorder_events: false,
            drop_events: false,
            duplicate_messages: false,
            drop_messages: false,
            provisioner: ProvisionerSettings::default(),
            interruption: InterruptionSettings::default(),
            redelivery: SignedDuration::from_secs(30),
            interruption_invocation: SignedDuration::from_secs(5),
            state_change_retries: vec![SignedDuration::from_mins(1), SignedDuration::from_mins(2)],
            step: SignedDuration::from_secs(1),
            disruption_enabled: true,
            disruption: DisruptionSettings::default(),
            disruption_invocation: SignedDuration::from_secs(60),
        }
    }
}

/// A removal command a disruption tick started, with what else its pool
/// was removing at that moment (what its budgets count).
#[derive(Debug, Clone, PartialEq)]
pub struct DisruptionStart {
    pub at: Timestamp,
    /// The claim (and command) id.
    pub claim: String,
    pub pool: String,
    pub reason: crate::model::RemovalReason,
    /// The pool's nodes right after the tick, with those the tick started
    /// removing and already deleted: what the decision counted.
    pub nodes: usize,
    /// The pool's removal commands in flight right after the tick that this
    /// tick did not start, of nodes still there (what the decision counted
    /// as disrupting).
    pub in_flight: usize,
}

pub type SimPorts<C, S, K = SimCluster> = Ports<C, <K as ClusterDriver>::Port, S, SimClock>;

/// The whole system on a simulated clock.
#[derive(Debug)]
pub struct Simulation<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver = SimCluster> {
    pub clock: SimClock,
    pub cluster: K,
    /// The in-memory EC2 underneath `cloud`, when there is one: it moves
    /// instances through their states and publishes their notifications.
    pub sim_cloud: Option<SimCloud>,
    pub cloud: C,
    pub store: S,
    pub settings: SimSettings,
    provisioner: Provisioner<SimPorts<C, S, K>>,
    disruption: Disruption<SimPorts<C, S, K>>,
    /// The disruption invocation running: its deadline; the next invocation; the next tick.
    disruption_deadline: Option<Timestamp>,
    next_disruption_invocation: Timestamp,
    next_disruption_tick: Timestamp,
    invocation_deadline: Option<Timestamp>,
    next_invocation: Timestamp,
    next_tick: Timestamp,
    /// An invocation whose lease write failed transiently: its deadline,
    /// the attempts so far, when it tries again.
    lease_retry: Option<(Timestamp, u32, Timestamp)>,
    /// The same for the disruption function's invocation.
    disruption_lease_retry: Option<(Timestamp, u32, Timestamp)>,
    registered: HashSet<String>,
    /// When to look for instances due to register: the next boot to
    /// complete, or `None` when none is booting — until a launch. (Looking
    /// every step costs a DescribeInstances and a Scan on the AWS adapters.)
    registration_due: Option<Timestamp>,
    /// Look at the next step whatever `registration_due` says.
    look_for_registrations: bool,
    /// `never_register` as last seen: a change means a look.
    never_register_seen: BTreeSet<String>,
    /// Instance types whose nodes never register (a broken AMI, say).
    pub never_register: BTreeSet<String>,
    /// Instances whose nodes never register (a bootstrap that hung on them).
    pub never_register_instances: BTreeSet<String>,
    /// Every state-change outcome, for tests.
    pub state_changes: Vec<StateChangeOutcome>,
    /// The highest usage each pool reached, resource by resource.
    pub peak_usage: BTreeMap<String, Usage>,
    /// Every interruption-queue message's outcome, for tests.
    pub interruptions: Vec<MessageOutcome>,
    /// Replacement claims removal commands planned over the run.
    pub replacements: BTreeSet<String>,
    /// Claims (nodes) that got a removal command over the run.
    pub removed_nodes: BTreeSet<String>,
    /// Per claim that got a removal command: its reason (`Drifted`, …).
    pub removal_reasons: BTreeMap<String, String>,
    /// Claims whose removal command ended while the claim lived on (rolled back).
    pub rolled_back: BTreeSet<String>,
    /// Commands seen at the last step.
    live_commands: BTreeSet<String>,
    /// Every disruption decision's plan, when asked (`record_plans`).
    pub plans: Vec<crate::disruption::Plan>,
    pub record_plans: bool,
    /// Failed expectations of the scenario's `expect` actions, with their time.
    pub failures: Vec<String>,
    /// Pool → the most removal commands it had at once.
    pub max_concurrent: BTreeMap<String, usize>,
    /// Dry-run plans the scenario asked for (`plan` actions).
    pub dry_runs: Vec<crate::handlers::disruption::DryRun>,
    /// Per PodDisruptionBudget (`namespace/name`): its minimum of healthy
    /// pods and the fewest seen once it had been met.
    pub pdb_floors: BTreeMap<String, (usize, usize)>,
    /// Track how long pods wait for a node (costs a pod listing per step).
    pub track_pending: bool,
    pending_since: BTreeMap<String, (Timestamp, String)>,
    /// State-change events whose invocation failed, as Lambda holds them
    /// for a retry: when, the retries left after it, the event.
    state_change_retry: Vec<(Timestamp, usize, serde_json::Value)>,
    /// State-change events that failed every retry (Lambda's on-failure
    /// destination, the failed-invocations queue).
    pub state_changes_failed: usize,
    /// The longest any pod waited for a node, and which.
    pub longest_pending: Option<(SignedDuration, String)>,
    /// When the scenario's run began (`scenario::run`): what its times count from.
    pub scenario_start: Option<Timestamp>,
    /// The metrics the scenario's run published, as parsed EMF documents
    /// (`scenario::run` captures them on its thread).
    pub metrics: Vec<serde_json::Value>,
    /// Every finished wait of a pod for a node: when it began, how long it
    /// lasted, which pod (waits still going on are in `pending_since`).
    pub pending_waits: Vec<(Timestamp, SignedDuration, String)>,
    /// Every removal a disruption tick started, with its pool's other
    /// removals at that moment (budgets are checked against these).
    pub disruption_starts: Vec<DisruptionStart>,
    /// Interruption-queue messages lost (`SimSettings::drop_messages`).
    pub messages_lost: usize,
    /// Instances whose kubelet stopped with them (shut down, stopped,
    /// terminated): when the node lifecycle controller marks their Node
    /// not Ready ([`NODE_MONITOR_GRACE`] later).
    kubelets_stopped: BTreeMap<String, Timestamp>,
}

/// kube-controller-manager's `node-monitor-grace-period`: a Node whose
/// kubelet stopped posting status turns Ready=Unknown this long after.
pub const NODE_MONITOR_GRACE: SignedDuration = SignedDuration::from_secs(40);

impl<C: Cloud + Clone, S: Store + Clone> Simulation<C, S> {
    /// A simulation on the in-memory cluster.
    pub fn new(
        clock: SimClock,
        cloud: C,
        sim_cloud: Option<SimCloud>,
        store: S,
        settings: SimSettings,
    ) -> Self {
        let cluster = SimCluster::new(clock.clone());
        Simulation::with_cluster(clock, cloud, sim_cloud, store, cluster, settings)
    }
}

impl<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver> Simulation<C, S, K> {
    pub fn with_cluster(
        clock: SimClock,
        cloud: C,
        sim_cloud: Option<SimCloud>,
        store: S,
        cluster: K,
        settings: SimSettings,
    ) -> Self {
        let ports = Ports {
            cloud: cloud.clone(),
            cluster: cluster.port(),
            store: store.clone(),
            clock: clock.clone(),
        };
        let provisioner = Provisioner::new(
            ports.clone(),
            settings.provisioner.clone(),
            "sim-invocation-0",
        );
        let disruption = Disruption::new(ports, settings.disruption.clone(), "sim-disruption-0");
        let now = clock.now();
        Simulation {
            clock,
            cluster,
            sim_cloud,
            cloud,
            store,
            settings,
            provisioner,
            disruption,
            disruption_deadline: None,
            next_disruption_invocation: now,
            next_disruption_tick: now,
            invocation_deadline: None,
            next_invocation: now,
            next_tick: now,
            lease_retry: None,
            disruption_lease_retry: None,
            registered: HashSet::new(),
            registration_due: None,
            look_for_registrations: true,
            never_register_seen: BTreeSet::new(),
            never_register: BTreeSet::new(),
            never_register_instances: BTreeSet::new(),
            state_changes: Vec::new(),
            peak_usage: BTreeMap::new(),
            interruptions: Vec::new(),
            replacements: BTreeSet::new(),
            removed_nodes: BTreeSet::new(),
            removal_reasons: BTreeMap::new(),
            rolled_back: BTreeSet::new(),
            live_commands: BTreeSet::new(),
            plans: Vec::new(),
            record_plans: false,
            dry_runs: Vec::new(),
            failures: Vec::new(),
            max_concurrent: BTreeMap::new(),
            pdb_floors: BTreeMap::new(),
            track_pending: false,
            pending_since: BTreeMap::new(),
            longest_pending: None,
            state_change_retry: Vec::new(),
            state_changes_failed: 0,
            pending_waits: Vec::new(),
            scenario_start: None,
            metrics: Vec::new(),
            disruption_starts: Vec::new(),
            messages_lost: 0,
            kubelets_stopped: BTreeMap::new(),
        }
    }

    pub fn ports(&self) -> SimPorts<C, S, K> {
        Ports {
            cloud: self.cloud.clone(),
            cluster: self.cluster.port(),
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The disruption decision's knobs the simulated function runs with.
    pub fn disruption_tuning(&self) -> crate::disruption::Tuning {
        self.settings.disruption.tuning
    }

    /// Runs everything due up to `end`, then leaves the clock at `end`.
    /// On a wall clock (`SimClock::wall`) it waits for each due time
    /// instead of jumping to it, and returns at `end` or just after.
    pub async fn run_until(&mut self, end: Timestamp) {
        let wall = self.clock.follows_wall();
        loop {
            let now = self.clock.now();
            let next_due = Box::pin(self.step(now)).await;
            let next = next_due.max(now + SignedDuration::from_millis(1));
            if next > end {
                break;
            }
            if wall {
                sleep_until(&self.clock, next).await;
            } else {
                self.clock.set(next);
            }
        }
        if self.clock.now() < end {
            if wall {
                sleep_until(&self.clock, end).await;
            } else {
                self.clock.set(end);
            }
            Box::pin(self.step(self.clock.now())).await;
        }
    }

    pub async fn run_for(&mut self, d: SignedDuration) {
        let end = self.clock.now() + d;
        self.run_until(end).await;
    }

    /// Does everything due at `now`; returns when something is next due.
    ///
    /// Every function's invocation in here is boxed: awaited inline, their
    /// futures would nest into one state machine as large as all of them,
    /// which a debug build pins on the awaiting thread's stack (a test
    /// thread has 2 MiB).
    async fn step(&mut self, now: Timestamp) -> Timestamp {
        let mut next = now + self.settings.step;
        if let Some(sim) = self.sim_cloud.clone() {
            sim.advance(now);
            let mut due = sim.take_notifications(now - self.settings.event_delay);
            // The kubelet goes with its instance, whether or not the event
            // reaches anyone: its Node turns not Ready a grace later.
            for (at, id, state) in &due {
                if state.is_gone_or_going() {
                    self.kubelets_stopped
                        .entry(id.clone())
                        .or_insert(*at + NODE_MONITOR_GRACE);
                }
            }
            if self.settings.reorder_events {
                due.reverse();
            }
            if self.settings.drop_events {
                due.clear();
            }
            let mut events: Vec<(usize, serde_json::Value)> = Vec::new();
            for (at, id, state) in due {
                let event = sim.state_change_event(&id, state, at);
                let times = if self.settings.duplicate_events { 2 } else { 1 };
                for _ in 0..times {
                    events.push((self.settings.state_change_retries.len(), event.clone()));
                }
            }
            let (retry, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.state_change_retry)
                .into_iter()
                .partition(|(t, _, _)| *t <= now);
            self.state_change_retry = later;
            events.extend(retry.into_iter().map(|(_, left, e)| (left, e)));
            for (left, event) in events {
                match Box::pin(state_change::handle(&self.ports(), &event)).await {
                    Ok(outcome) => self.state_changes.push(outcome),
                    Err(e) => {
                        // As Lambda does with a failed asynchronous
                        // invocation: retried later, then kept aside.
                        let attempt = self.settings.state_change_retries.len() - left;
                        match self.settings.state_change_retries.get(attempt) {
                            Some(delay) => {
                                warn!(error = %e, "state-change handler failed; Lambda retries it");
                                self.state_change_retry
                                    .push((now + *delay, left - 1, event));
                            }
                            None => {
                                warn!(error = %e, "state-change handler failed its last retry");
                                self.state_changes_failed += 1;
                            }
                        }
                    }
                }
            }
            if let Some(t) = self.state_change_retry.iter().map(|(t, _, _)| *t).min() {
                next = next.min(t.max(now + SignedDuration::from_millis(1)));
            }
            let mut messages = sim.take_messages(now);
            if self.settings.drop_messages {
                self.messages_lost += messages.len();
                messages.clear();
            }
            if !messages.is_empty() {
                let mut failed = Box::pin(self.deliver_interruptions(&messages)).await;
                if self.settings.duplicate_messages {
                    // The same messages again, as a second batch would carry them.
                    failed.extend(Box::pin(self.deliver_interruptions(&messages)).await);
                }
                let back = messages
                    .into_iter()
                    .filter(|(id, _)| failed.contains(id))
                    .collect();
                sim.requeue(back, self.settings.redelivery);
            }
            if let Some(t) = sim.next_due() {
                next = next
                    .min((t + self.settings.event_delay).max(now + SignedDuration::from_millis(1)));
            }
            let region = sim.catalog_region();
            let stopped: Vec<String> = self
                .kubelets_stopped
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in stopped {
                self.kubelets_stopped.remove(&id);
                // A Node already deleted has nothing to mark.
                let _ = self
                    .cluster
                    .set_node_ready(&node_name(&id, &region), false)
                    .await;
            }
            if let Some(at) = self.kubelets_stopped.values().min() {
                next = next.min((*at).max(now + SignedDuration::from_millis(1)));
            }
        }
        if std::mem::take(&mut self.look_for_registrations)
            || self.registration_due.is_some_and(|t| now >= t)
            || self.never_register != self.never_register_seen
        {
            self.never_register_seen.clone_from(&self.never_register);
            self.registration_due = self.register_nodes(now).await;
        }
        if let Some(t) = self.registration_due {
            next = next.min(t);
        }
        self.reconcile_cluster().await;

        // The provisioner: a new invocation every minute; ticks inside it.
        if self
            .invocation_deadline
            .is_none_or(|d| now >= d - self.settings.margin)
        {
            if let Some(_ended) = self.invocation_deadline.take() {
                let _ = self.provisioner.release_lease().await;
            }
            if now >= self.next_invocation {
                let deadline = self.next_invocation + self.settings.invocation;
                let holder = format!("sim-invocation-{}", self.next_invocation.as_second());
                self.provisioner =
                    Provisioner::new(self.ports(), self.settings.provisioner.clone(), holder)
                        .with_config_reader(self.provisioner.config_reader());
                self.lease_retry = Some((deadline, 0, now));
                self.next_invocation += SignedDuration::from_mins(1);
            }
            // The invocation takes its lease, retrying a transient failure
            // (a throttled write) with the Lambda loop's backoff.
            if let Some((deadline, attempt, at)) = self.lease_retry
                && now >= at
            {
                self.lease_retry = None;
                match self.provisioner.acquire_lease(deadline).await {
                    Ok(true) => {
                        self.invocation_deadline = Some(deadline);
                        self.next_tick = now;
                    }
                    Ok(false) => info!("provisioner lease held elsewhere; this invocation exits"),
                    Err(e) => match crate::handlers::leased_loop::lease_retry(
                        &e,
                        attempt,
                        now,
                        deadline - self.settings.margin,
                    ) {
                        Some(wait) => {
                            warn!(error = %e, attempt, "provisioner could not take its lease; retrying");
                            self.lease_retry = Some((deadline, attempt + 1, now + wait));
                        }
                        None => warn!(error = %e, "provisioner could not take its lease"),
                    },
                }
            }
        }
        if self.invocation_deadline.is_some() && now >= self.next_tick {
            match Box::pin(self.provisioner.tick()).await {
                Ok(report) => {
                    self.look_for_registrations |= !report.launched.is_empty() || report.removals;
                    let poll = now + self.settings.provisioner.poll;
                    self.next_tick = report.wake_at.map_or(poll, |w| w.min(poll));
                }
                Err(e) => {
                    warn!(error = %e, "provisioner tick failed");
                    self.next_tick = now + self.settings.provisioner.poll;
                }
            }
            // Pods just bound or nominated change what the scheduler sees.
            self.reconcile_cluster().await;
        }
        if self.settings.disruption_enabled {
            Box::pin(self.run_disruption(now)).await;
        }
        self.record_usage().await;
        self.observe(now).await;
        let mut candidates = vec![next, self.next_invocation];
        if let Some((_, _, at)) = self.lease_retry {
            candidates.push(at);
        }
        if let Some(d) = self.invocation_deadline {
            candidates.push(self.next_tick);
            candidates.push(d - self.settings.margin);
        }
        if self.settings.disruption_enabled {
            candidates.push(self.next_disruption_invocation);
            if let Some((_, _, at)) = self.disruption_lease_retry {
                candidates.push(at);
            }
            if let Some(d) = self.disruption_deadline {
                candidates.push(self.next_disruption_tick);
                candidates.push(d - self.settings.margin);
            }
        }
        candidates
            .into_iter()
            .filter(|t| *t > now)
            .min()
            .unwrap_or(next)
    }

    /// The disruption function: a new invocation every minute (holding the
    /// `disruption` lease), ticking inside it until its deadline.
    async fn run_disruption(&mut self, now: Timestamp) {
        if self
            .disruption_deadline
            .is_none_or(|d| now >= d - self.settings.margin)
        {
            if self.disruption_deadline.take().is_some() {
                let _ = self.disruption.release_lease().await;
            }
            if now >= self.next_disruption_invocation {
                let deadline =
                    self.next_disruption_invocation + self.settings.disruption_invocation;
                let holder = format!(
                    "sim-disruption-{}",
                    self.next_disruption_invocation.as_second()
                );
                self.disruption =
                    Disruption::new(self.ports(), self.settings.disruption.clone(), holder)
                        .with_config_reader(self.disruption.config_reader())
                        .with_memory(self.disruption.memory());
                self.disruption_lease_retry = Some((deadline, 0, now));
                self.next_disruption_invocation += SignedDuration::from_mins(1);
            }
            // The invocation takes its lease, retrying a transient failure
            // (a throttled write) with the Lambda loop's backoff.
            if let Some((deadline, attempt, at)) = self.disruption_lease_retry
                && now >= at
            {
                self.disruption_lease_retry = None;
                let until = deadline - self.settings.margin;
                match self.disruption.acquire_lease(until).await {
                    Ok(true) => {
                        self.disruption_deadline = Some(deadline);
                        self.next_disruption_tick = now;
                    }
                    Ok(false) => info!("disruption lease held elsewhere; this invocation exits"),
                    Err(e) => {
                        match crate::handlers::leased_loop::lease_retry(&e, attempt, now, until) {
                            Some(wait) => {
                                warn!(error = %e, attempt, "disruption function could not take its lease; retrying");
                                self.disruption_lease_retry =
                                    Some((deadline, attempt + 1, now + wait));
                            }
                            None => {
                                warn!(error = %e, "disruption function could not take its lease")
                            }
                        }
                    }
                }
            }
        }
        if self.disruption_deadline.is_none() || now < self.next_disruption_tick {
            return;
        }
        match Box::pin(self.disruption.tick()).await {
            Ok(report) => {
                self.look_for_registrations |= report.removals;
                // A removal may start and finish within the tick (an empty node).
                for (id, reason) in &report.started {
                    self.removed_nodes.insert(id.clone());
                    self.removal_reasons
                        .insert(id.clone(), reason.as_str().to_owned());
                }
                // … or be rolled back within it: its command gone, its claim still there.
                if !report.started.is_empty()
                    && let (Ok(commands), Ok(claims)) =
                        (self.store.commands().await, self.store.claims().await)
                {
                    let nodes = self.cluster.all_nodes().await;
                    let node_of_claim = |id: &str| {
                        nodes.iter().find(|n| {
                            n.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(CLAIM_LABEL))
                                .is_some_and(|c| c == id)
                        })
                    };
                    let in_pool = |pool: &str| {
                        nodes
                            .iter()
                            .filter(|n| {
                                n.metadata
                                    .labels
                                    .as_ref()
                                    .and_then(|l| l.get(labels::NODEPOOL))
                                    .is_some_and(|p| p == pool)
                            })
                            .count()
                    };
                    for (id, reason) in &report.started {
                        if !commands.iter().any(|c| &c.id == id)
                            && claims.iter().any(|c| &c.id == id)
                        {
                            self.rolled_back.insert(id.clone());
                        }
                        let pool = commands
                            .iter()
                            .find(|c| &c.id == id)
                            .map(|c| c.spec.pool.clone())
                            .or_else(|| claims.iter().find(|c| &c.id == id).map(|c| c.pool.clone()))
                            .unwrap_or_else(|| {
                                id.rsplit_once('-')
                                    .map_or(id.as_str(), |(p, _)| p)
                                    .to_owned()
                            });
                        let in_flight = commands
                            .iter()
                            .filter(|c| {
                                c.spec.pool == pool
                                    && !report.started.iter().any(|(s, _)| s == &c.id)
                            })
                            .filter(|c| node_of_claim(&c.id).is_some())
                            .count();
                        let gone = report
                            .started
                            .iter()
                            .filter(|(s, _)| {
                                s.rsplit_once('-').is_some_and(|(p, _)| p == pool)
                                    && node_of_claim(s).is_none()
                            })
                            .count();
                        let nodes = in_pool(&pool) + gone;
                        self.disruption_starts.push(DisruptionStart {
                            at: now,
                            claim: id.clone(),
                            pool,
                            reason: *reason,
                            nodes,
                            in_flight,
                        });
                    }
                }
                if self.record_plans
                    && let Some(plan) = report.plan
                {
                    self.plans.push(plan);
                }
                let poll = now + self.settings.disruption.poll;
                self.next_disruption_tick = report
                    .wake_at
                    .map_or(poll, |w| w.min(poll))
                    .max(now + SignedDuration::from_millis(200));
            }
            Err(e) => {
                warn!(error = %e, "disruption tick failed");
                self.next_disruption_tick = now + self.settings.disruption.poll;
            }
        }
        self.reconcile_cluster().await;
    }

    /// Registers a Node for every running instance whose boot time passed;
    /// returns when the next one is due (`None`: none is booting).
    async fn register_nodes(&mut self, now: Timestamp) -> Option<Timestamp> {
        let (Ok(instances), Ok(claims), Ok(catalog)) = (
            self.cloud.instances().await,
            self.store.claims().await,
            self.cloud.catalog().await,
        ) else {
            return Some(now + SignedDuration::from_secs(1));
        };
        let config = config_loader::load(&self.store).await.ok();
        let mut next: Option<Timestamp> = None;
        for i in instances {
            if self.registered.contains(&i.id)
                || i.state.is_gone_or_going()
                || self.never_register.contains(&i.instance_type)
                || self.never_register_instances.contains(&i.id)
            {
                continue;
            }
            let due = i.launched_at + self.settings.boot;
            if due > now {
                next = Some(next.map_or(due, |n: Timestamp| n.min(due)));
                continue;
            }
            // An instance booted without a claim (an orphan) joins no
            // cluster here (its labels come from the claim) until it is
            // adopted: looked at again in 10 s.
            let Some(claim) = claims
                .iter()
                .find(|c| Some(c.id.as_str()) == i.claim_id.as_deref())
            else {
                let again = now + SignedDuration::from_secs(10);
                next = Some(next.map_or(again, |n: Timestamp| n.min(again)));
                continue;
            };
            let Some(info) = catalog
                .instance_types
                .iter()
                .find(|t| t.name == i.instance_type)
            else {
                continue;
            };
            self.registered.insert(i.id.clone());
            let name = node_name(&i.id, &catalog.region);
            // What a kubelet registers with: the labels its user data
            // passes (the claim's) and its own (architecture, OS, and the
            // cloud's instance type, zone and region). The instance type's
            // other facts are nodewright's to add when it sees the node.
            let mut node_labels = claim.labels.clone();
            node_labels.insert(labels::ARCH.to_owned(), info.arch.clone());
            // A Windows node's kubelet says so, and which build it runs.
            match &claim.kubelet.windows_build {
                Some(build) if info.runs_windows(&claim.kubelet) => {
                    node_labels.insert(labels::OS.to_owned(), "windows".to_owned());
                    node_labels.insert(labels::WINDOWS_BUILD.to_owned(), build.clone());
                }
                _ => {
                    node_labels.insert(labels::OS.to_owned(), "linux".to_owned());
                }
            }
            for (k, v) in [
                (labels::INSTANCE_TYPE, i.instance_type.as_str()),
                (labels::ZONE, i.zone.as_str()),
                (labels::REGION, catalog.region.as_str()),
                (labels::CAPACITY_TYPE, i.capacity_type.as_str()),
                (labels::HOSTNAME, name.as_str()),
                (CLAIM_LABEL, claim.id.as_str()),
            ] {
                node_labels.insert(k.to_owned(), v.to_owned());
            }
            // A node in a capacity reservation says which (the user data's
            // labels, as the EC2 adapter writes them).
            if let (Some(id), Some(kind)) =
                (&i.capacity_reservation_id, i.capacity_reservation_type)
            {
                node_labels.insert(labels::CAPACITY_RESERVATION_ID.to_owned(), id.clone());
                node_labels.insert(
                    labels::CAPACITY_RESERVATION_TYPE.to_owned(),
                    kind.as_str().to_owned(),
                );
                node_labels.insert(
                    labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
                    i.capacity_reservation_interruptible.to_string(),
                );
            }
            let capacity = info.capacity(&claim.kubelet);
            let allocatable = capacity.saturating_sub(&info.overhead(&claim.kubelet));
            // The agents a NodePool's startup taints wait for (a CNI…) are
            // ready as the node is: those taints are gone by registration.
            let startup: Vec<_> = config
                .as_ref()
                .and_then(|c| c.pool(&claim.pool))
                .map(|p| p.startup_taints.clone())
                .unwrap_or_default();
            let taints = claim
                .taints
                .iter()
                .filter(|t| !startup.contains(t))
                .cloned()
                .collect();
            let node = SimCluster::ready_node(
                &name,
                node_labels,
                taints,
                &i.provider_id,
                &capacity,
                &allocatable,
                now,
            );
            if let Err(e) = self.cluster.register_node(node).await {
                // Not registered: tried again in a second.
                warn!(node = %name, error = %e, "node registration failed");
                self.registered.remove(&i.id);
                next = Some(next.map_or(now + SignedDuration::from_secs(1), |n| {
                    n.min(now + SignedDuration::from_secs(1))
                }));
            }
        }
        next
    }

    /// The interruption function's invocation for a batch of queue messages
    /// (message id, body); returns the ids handed back for a retry, as the
    /// partial batch response would.
    pub async fn deliver_interruptions(&mut self, messages: &[(String, String)]) -> Vec<String> {
        let ports = self.ports();
        let config = match config_loader::load(&self.store).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "interruption function could not read its configuration");
                return messages.iter().map(|(id, _)| id.clone()).collect();
            }
        };
        let records: Vec<Record> = messages
            .iter()
            .map(|(id, body)| Record {
                message_id: id.clone(),
                body: body.clone(),
            })
            .collect();
        let until = self.clock.now() + self.settings.interruption_invocation;
        match Box::pin(interruption::handle_batch(
            &ports,
            &config,
            &config.settings,
            &self.settings.interruption,
            &records,
            until,
        ))
        .await
        {
            Ok(report) => {
                self.interruptions
                    .extend(report.outcomes.into_iter().map(|(_, o)| o));
                report.failures
            }
            Err(e) => {
                warn!(error = %e, "interruption function failed its batch");
                messages.iter().map(|(id, _)| id.clone()).collect()
            }
        }
    }

    /// What the scenario expectations look at over the run: replacements,
    /// PDB floors, pending times.
    async fn observe(&mut self, now: Timestamp) {
        if let Ok(commands) = self.store.commands().await {
            let live: BTreeSet<String> = commands.iter().map(|c| c.id.clone()).collect();
            let ended: Vec<String> = self.live_commands.difference(&live).cloned().collect();
            if !ended.is_empty()
                && let Ok(claims) = self.store.claims().await
            {
                self.rolled_back.extend(
                    ended
                        .into_iter()
                        .filter(|id| claims.iter().any(|c| &c.id == id)),
                );
            }
            self.live_commands = live;
            let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
            for c in &commands {
                *per_pool.entry(c.spec.pool.as_str()).or_default() += 1;
            }
            for (pool, n) in per_pool {
                let most = self.max_concurrent.entry(pool.to_owned()).or_default();
                *most = (*most).max(n);
            }
            for c in commands {
                self.removed_nodes.insert(c.id.clone());
                self.removal_reasons
                    .insert(c.id.clone(), c.spec.reason.as_str().to_owned());
                self.replacements.extend(c.replacements);
            }
        }
        let cluster = self.cluster.port();
        let pdbs = cluster.pod_disruption_budgets().await.unwrap_or_default();
        if pdbs.is_empty() && !self.track_pending {
            return;
        }
        let pods = self.cluster.all_pods().await;
        for pdb in &pdbs {
            let Some((min, healthy)) = super::controllers::pdb_health(pdb, &pods) else {
                continue;
            };
            let key = format!(
                "{}/{}",
                pdb.metadata.namespace.as_deref().unwrap_or("default"),
                pdb.metadata.name.as_deref().unwrap_or_default()
            );
            match self.pdb_floors.get_mut(&key) {
                Some(floor) => floor.1 = floor.1.min(healthy),
                None if healthy >= min => {
                    self.pdb_floors.insert(key, (min, healthy));
                }
                None => {}
            }
        }
        if self.track_pending {
            let mut still = BTreeMap::new();
            for p in &pods {
                let Some(uid) = p.metadata.uid.clone() else {
                    continue;
                };
                let name = crate::model::PodKey::of(p).to_string();
                let was = self.pending_since.remove(&uid);
                let since = was.as_ref().map_or(now, |(t, _)| *t);
                let waited = now.duration_since(since);
                if self
                    .longest_pending
                    .as_ref()
                    .is_none_or(|(w, _)| waited > *w)
                {
                    self.longest_pending = Some((waited, name.clone()));
                }
                if super::controllers::node_of(p).is_none() {
                    still.insert(uid, (since, name));
                } else if was.is_some() {
                    self.pending_waits.push((since, waited, name));
                }
            }
            // Pods removed while they waited: their wait ended with them.
            for (since, name) in std::mem::take(&mut self.pending_since).into_values() {
                self.pending_waits
                    .push((since, now.duration_since(since), name));
            }
            self.pending_since = still;
        }
    }

    /// The longest wait for a node among pods whose wait began in
    /// `[from, until)` (waits still going on count up to now), and which pod.
    pub fn longest_wait_begun(
        &self,
        from: Timestamp,
        until: Timestamp,
    ) -> Option<(SignedDuration, String)> {
        let now = self.now();
        self.pending_waits
            .iter()
            .map(|(since, waited, name)| (*since, *waited, name))
            .chain(
                self.pending_since
                    .values()
                    .map(|(since, name)| (*since, now.duration_since(*since), name)),
            )
            .filter(|(since, _, _)| *since >= from && *since < until)
            .max_by_key(|(_, waited, _)| *waited)
            .map(|(_, waited, name)| (waited, name.clone()))
    }

    async fn reconcile_cluster(&self) {
        if let Err(e) = self.cluster.reconcile().await {
            warn!(error = %e, "cluster controllers failed a round");
        }
    }

    async fn record_usage(&mut self) {
        let Ok(usage) = self.store.pool_usage().await else {
            return;
        };
        for (pool, u) in usage {
            let peak = self.peak_usage.entry(pool).or_default();
            for (k, v) in u {
                let e = peak.entry(k).or_insert(v);
                *e = (*e).max(v);
            }
        }
    }

    /// Instances still alive (not terminated), from the cloud.
    pub async fn live_instances(&self) -> usize {
        self.cloud
            .instances()
            .await
            .map(|v| {
                v.iter()
                    .filter(|i| i.state != InstanceState::Terminated)
                    .count()
            })
            .unwrap_or(0)
    }

    /// Pending pods right now.
    pub async fn pending(&self) -> usize {
        self.cluster
            .port()
            .pending_pods()
            .await
            .map(|p| p.len())
            .unwrap_or(0)
    }
}

/// Waits until `clock` reads `t` or later: on tokio's timer where the
/// adapters bring tokio in (a wall clock is only used beside them, with a
/// real control plane).
async fn sleep_until(clock: &SimClock, t: Timestamp) {
    let left = t.duration_since(clock.now());
    if left.is_positive() {
        let left = std::time::Duration::from_millis(left.as_millis() as u64);
        wait(left).await;
    }
}

#[cfg(any(feature = "kube", feature = "aws"))]
async fn wait(d: std::time::Duration) {
    tokio::time::sleep(d).await;
}

/// The decision core builds without an async runtime (no adapter): the
/// thread sleeps. A simulated clock never waits, so this only runs for a
/// wall clock, which nothing in such a build uses.
#[cfg(not(any(feature = "kube", feature = "aws")))]
async fn wait(d: std::time::Duration) {
    std::thread::sleep(d);
}

/// EC2's private DNS name for an instance, which EKS nodes are named after.
pub fn node_name(instance_id: &str, region: &str) -> String {
    let h = instance_id
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let region_part = if region == "us-east-1" {
        "ec2".to_owned()
    } else {
        format!("{region}.compute")
    };
    format!(
        "ip-192-168-{}-{}.{region_part}.internal",
        (h >> 8) % 256,
        h % 254 + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{MemStore, catalog};

    /// A spot warning for an instance that is not ours: handled (ignored) once per delivery.
    fn foreign_warning() -> String {
        serde_json::json!({"version": "0", "id": "e1", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
            "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0fffffffffffffff0"],
            "detail": {"instance-id": "i-0fffffffffffffff0", "instance-action": "terminate"}})
        .to_string()
    }

    fn outcomes(settings: SimSettings) -> (usize, usize) {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(async {
                let clock = SimClock::default();
                let cloud = SimCloud::new(
                    catalog::catalog("us-east-1").expect("region"),
                    clock.clone(),
                );
                let mut sim = Simulation::new(
                    clock,
                    cloud.clone(),
                    Some(cloud.clone()),
                    MemStore::new(),
                    settings,
                );
                cloud.enqueue(foreign_warning());
                sim.run_for(SignedDuration::from_secs(5)).await;
                (sim.interruptions.len(), sim.messages_lost)
            })
    }

    /// A throttled lease write costs the provisioner seconds, not its
    /// invocation: it takes the lease again within the same minute. (Seed
    /// 11 of the soak lost three invocations in a row to one burst of
    /// throttled writes, and a Job pod waited 125 s without a decision.)
    #[test]
    fn a_throttled_lease_write_is_retried_within_the_invocation() {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(async {
                let clock = SimClock::default();
                let cloud = SimCloud::new(
                    catalog::catalog("us-east-1").expect("region"),
                    clock.clone(),
                );
                let store = crate::sim::FaultyStore::new(MemStore::new());
                let mut sim = Simulation::new(
                    clock,
                    cloud.clone(),
                    Some(cloud),
                    store.clone(),
                    SimSettings::default(),
                );
                let start = sim.now();
                store.throttle_next_writes(3);
                sim.run_for(SignedDuration::from_secs(10)).await;
                assert!(store.write_faults().0 >= 3, "{:?}", store.write_faults());
                let deadline = sim.invocation_deadline.expect("the lease was taken");
                assert_eq!(
                    deadline,
                    start + sim.settings.invocation,
                    "by the first invocation, not the next minute's"
                );
            });
    }

    /// The same for the disruption function: a throttled lease write is
    /// retried within its invocation, not left to the next minute's.
    #[test]
    fn a_throttled_disruption_lease_write_is_retried_within_the_invocation() {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(async {
                let clock = SimClock::default();
                let cloud = SimCloud::new(
                    catalog::catalog("us-east-1").expect("region"),
                    clock.clone(),
                );
                let store = crate::sim::FaultyStore::new(MemStore::new());
                let mut sim = Simulation::new(
                    clock,
                    cloud.clone(),
                    Some(cloud),
                    store.clone(),
                    SimSettings::default(),
                );
                let start = sim.now();
                // Four: the provisioner's and the disruption function's
                // lease writes at the start and at their first retry.
                store.throttle_next_writes(4);
                sim.run_for(SignedDuration::from_secs(10)).await;
                assert!(store.write_faults().0 >= 4, "{:?}", store.write_faults());
                let deadline = sim
                    .disruption_deadline
                    .expect("the disruption lease was taken");
                assert_eq!(
                    deadline,
                    start + sim.settings.disruption_invocation,
                    "by the first invocation, not the next minute's"
                );
                assert!(sim.invocation_deadline.is_some(), "the provisioner's too");
            });
    }

    #[test]
    fn queue_messages_can_be_duplicated_or_lost() {
        assert_eq!(outcomes(SimSettings::default()), (1, 0));
        assert_eq!(
            outcomes(SimSettings {
                duplicate_messages: true,
                ..SimSettings::default()
            }),
            (2, 0)
        );
        assert_eq!(
            outcomes(SimSettings {
                drop_messages: true,
                ..SimSettings::default()
            }),
            (0, 1)
        );
    }
}
