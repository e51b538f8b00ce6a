//! The chaos soak (`nodewright soak`): the whole system on the simulator for
//! hours under a seeded, realistic workload, with faults injected at seeded
//! random times, and the product's invariants checked every few simulated
//! seconds. A run is one seed: the workload, the fault schedule and every
//! choice the simulator makes follow from it, so a seed that found a
//! violation reproduces it exactly.
//!
//! **Workload** ([`Workload`]): eight Deployments on daily curves with
//! noise (re-scaled every 15 minutes), some pinned to arm64, amd64 or
//! on-demand capacity, three under PodDisruptionBudgets and one whose pods
//! carry `karpenter.sh/do-not-disrupt`; batch Jobs (the simulated cluster
//! has no Job controller, so the soak plays it: bare pods that run for
//! their duration once bound and are then deleted, re-created under a new
//! name when something removes them early; half the Jobs' pods carry
//! do-not-disrupt); a DaemonSet on every node; three
//! NodePools — spot and on-demand, amd64 and arm64 — with CPU limits the
//! peaks reach, weights, budgets (one on a cron schedule), expiration, and a
//! rebalance policy; node repair on. Halfway through, the cluster moves to
//! a new Kubernetes version, so every node drifts.
//!
//! **Faults** ([`FaultKind`]): spot interruptions, rebalance
//! recommendations and scheduled changes as EC2 and AWS Health publish them
//! to the interruption queue; insufficient capacity on offerings in use;
//! failed and slow launches; nodes that never register or go NotReady;
//! state-change events duplicated, reordered, delayed or lost; queue
//! messages duplicated or lost; DynamoDB writes throttled or losing their
//! condition; an invocation dying after a launch before its record, or
//! between two steps of a removal.
//!
//! **Invariants** ([`Violation`], checked by [`Checker`]): see each kind's
//! [`Violation::rule`]; the bounds are [`Bounds`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::json;

use super::controllers::{is_finished, is_pod_ready, is_terminating, node_of, pdb_selects};
use super::rng::Rng;
use super::simulation::node_name;
use super::{
    FaultyCloud, FaultyCluster, FaultyStore, MemStore, SimClock, SimCloud, SimCluster, SimSettings,
    Simulation, catalog, scenario,
};
use crate::config::NodePool;
use crate::config::disruption::DisruptionReason;
use crate::disruption::snapshot::DO_NOT_DISRUPT;
use crate::model::claim::{Claim, NODES, usage_of};
use crate::model::{
    InstanceState, OfferingKey, PodKey, RemovalReason, SignedDuration, Timestamp, Usage,
};
use crate::ports::{Cloud, Cluster, Store};
use crate::scheduling::labels;
use crate::workload::fleet_bound::FleetBound;

/// The simulation a soak runs: the in-memory EC2 and DynamoDB behind the fault decorators.
pub type SoakSim =
    Simulation<FaultyCloud<SimCloud>, FaultyStore<MemStore>, FaultyCluster<SimCluster>>;

/// The region the soak's cluster runs in.
pub const REGION: &str = "us-east-1";

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("soak: {0}")]
    Setup(String),
}

/// What one soak runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub seed: u64,
    /// Simulated time.
    pub duration: SignedDuration,
    /// Inject faults (off: the workload alone).
    pub faults: bool,
    /// Simulated time between two invariant checks.
    pub check_every: SignedDuration,
    /// End this early, with the workload and the fault schedule of the
    /// whole `duration` (both depend on it: each fault kind's draws stop at
    /// its end, the upgrade comes at half time) — to replay the first hours
    /// of a long run that found something.
    pub stop_after: Option<SignedDuration>,
}

impl Default for SoakOptions {
    fn default() -> Self {
        SoakOptions {
            seed: 1,
            duration: SignedDuration::from_hours(24),
            faults: true,
            check_every: SignedDuration::from_secs(5),
            stop_after: None,
        }
    }
}

// ---------------------------------------------------------------- invariants

/// One kind of invariant violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Violation {
    PendingWithoutReason,
    PendingTooLong,
    PdbBelowMinimum,
    LimitExceeded,
    LaunchedTwice,
    InstanceWithoutClaim,
    ClaimWithoutInstance,
    DisruptedAgainstBudget,
    DisruptedAgainstDoNotDisrupt,
    CostAboveBound,
}

impl Violation {
    pub const ALL: [Violation; 10] = [
        Violation::PendingWithoutReason,
        Violation::PendingTooLong,
        Violation::PdbBelowMinimum,
        Violation::LimitExceeded,
        Violation::LaunchedTwice,
        Violation::InstanceWithoutClaim,
        Violation::ClaimWithoutInstance,
        Violation::DisruptedAgainstBudget,
        Violation::DisruptedAgainstDoNotDisrupt,
        Violation::CostAboveBound,
    ];

    /// The key in the report's `violations` object.
    pub fn as_str(self) -> &'static str {
        match self {
            Violation::PendingWithoutReason => "pod_pending_without_reason",
            Violation::PendingTooLong => "pod_pending_too_long",
            Violation::PdbBelowMinimum => "pdb_below_minimum",
            Violation::LimitExceeded => "nodepool_limit_exceeded",
            Violation::LaunchedTwice => "instance_launched_twice",
            Violation::InstanceWithoutClaim => "instance_without_claim",
            Violation::ClaimWithoutInstance => "claim_without_instance",
            Violation::DisruptedAgainstBudget => "disrupted_against_budget",
            Violation::DisruptedAgainstDoNotDisrupt => "disrupted_against_do_not_disrupt",
            Violation::CostAboveBound => "cost_above_bound",
        }
    }

    /// What the invariant says, and what one count is.
    pub fn rule(self) -> &'static str {
        match self {
            Violation::PendingWithoutReason => {
                "a pending pod is nominated to a claim or parked with the solver's reason within the grace of its becoming pending or losing its last reason (once per pod)"
            }
            Violation::PendingTooLong => {
                "no pod waits longer than the pending bound for a node (once per pod)"
            }
            Violation::PdbBelowMinimum => {
                "a pod our drain evicts or deletes gracefully leaves its PodDisruptionBudget at or above desiredHealthy (once per pod)"
            }
            Violation::LimitExceeded => {
                "a NodePool's reservations and its live instances' capacity stay within its limits (once per pool, resource and excursion)"
            }
            Violation::LaunchedTwice => "no claim ever has more than one instance (once per claim)",
            Violation::InstanceWithoutClaim => {
                "no live instance of ours is without a claim beyond the orphan grace (once per instance)"
            }
            Violation::ClaimWithoutInstance => {
                "no claim is without an instance beyond its bound (once per claim)"
            }
            Violation::DisruptedAgainstBudget => {
                "an Empty, Drifted, Underutilized or Unhealthy removal starts only within its pool's active budgets (once per removal)"
            }
            Violation::DisruptedAgainstDoNotDisrupt => {
                "no Empty, Drifted, Underutilized or Unhealthy removal is of a node with a do-not-disrupt pod (once per removal)"
            }
            Violation::CostAboveBound => {
                "the fleet's cost over the trailing hour stays within the factor of the LP lower bound of its pods (once per excursion)"
            }
        }
    }
}

/// The bounds the invariants are stated with.
#[derive(Debug, Clone, Serialize)]
pub struct Bounds {
    /// A pending pod needs no reason yet this long after it started pending
    /// or last had one (a nomination whose claim went away): the batch
    /// window (≤ 10 s), a provisioner poll, a tick lost to an injected
    /// store fault.
    pub reason_grace: SignedDuration,
    /// The longest a pod may wait for a node: the 15-minute registration
    /// timeout of a node that never registers, a relaunch and its boot.
    pub pending: SignedDuration,
    /// An instance of ours without a claim: orphans are collected once
    /// older than 2 minutes, by a collection that runs every minute.
    pub orphan_grace: SignedDuration,
    /// A claim without a live instance: a launch not recorded is resumed
    /// after 30 s; a vanished instance is noticed by the next collection.
    pub claim_without_instance: SignedDuration,
    /// Fleet $ ÷ LP bound $, over the trailing `cost_window`.
    pub cost_factor: f64,
    pub cost_window: SignedDuration,
    /// Windows that start before this much of the run are not judged: the
    /// fleet grows from nothing while the first pods wait for nodes.
    pub cost_warmup: SignedDuration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            reason_grace: SignedDuration::from_mins(2),
            pending: SignedDuration::from_mins(20),
            orphan_grace: SignedDuration::from_mins(5),
            claim_without_instance: SignedDuration::from_mins(5),
            cost_factor: 5.0,
            cost_window: SignedDuration::from_hours(1),
            cost_warmup: SignedDuration::from_mins(30),
        }
    }
}

/// A pod seen pending: since when, when it was last seen with a reason
/// (nominated or parked; its first sighting when never), and what was
/// already counted for it.
#[derive(Debug, Clone)]
struct Waiting {
    since: Timestamp,
    reason_at: Timestamp,
    name: String,
    no_reason: bool,
    too_long: bool,
}

/// Checks the invariants on the simulation as it is, each time it is asked;
/// counts each violation once.
#[derive(Debug)]
pub struct Checker {
    pub bounds: Bounds,
    pools: Vec<NodePool>,
    lower_bound: FleetBound,
    counts: BTreeMap<Violation, usize>,
    examples: BTreeMap<Violation, Vec<String>>,
    waiting: BTreeMap<String, Waiting>,
    terminating: BTreeSet<String>,
    orphans: BTreeMap<String, Timestamp>,
    claimless: BTreeMap<String, Timestamp>,
    flagged: BTreeSet<(Violation, String)>,
    over_limit: BTreeSet<String>,
    starts_seen: usize,
    cost: VecDeque<(Timestamp, f64, f64)>,
    cost_over: bool,
    last: Option<Timestamp>,
    first: Option<Timestamp>,
    /// Fleet ÷ bound $ of each whole hour of the run.
    pub hourly_cost_ratio: Vec<f64>,
    hour: (f64, f64),
    /// Figures over the run.
    pub checks: usize,
    pub fleet_dollar_hours: f64,
    pub bound_dollar_hours: f64,
    pub worst_window_ratio: f64,
    pub longest_pending: SignedDuration,
    pub peak_pods: usize,
    pub peak_nodes: usize,
}

/// Examples kept per violation kind.
const EXAMPLES: usize = 5;

impl Checker {
    /// A checker for this configuration (pools) and catalog.
    pub fn new(pools: Vec<NodePool>, catalog: &crate::model::CloudCatalog, bounds: Bounds) -> Self {
        let lower_bound = FleetBound::new(&pools, catalog);
        Checker {
            bounds,
            pools,
            lower_bound,
            counts: Violation::ALL.iter().map(|v| (*v, 0)).collect(),
            examples: BTreeMap::new(),
            waiting: BTreeMap::new(),
            terminating: BTreeSet::new(),
            orphans: BTreeMap::new(),
            claimless: BTreeMap::new(),
            flagged: BTreeSet::new(),
            over_limit: BTreeSet::new(),
            starts_seen: 0,
            cost: VecDeque::new(),
            cost_over: false,
            last: None,
            first: None,
            hourly_cost_ratio: Vec::new(),
            hour: (0.0, 0.0),
            checks: 0,
            fleet_dollar_hours: 0.0,
            bound_dollar_hours: 0.0,
            worst_window_ratio: 0.0,
            longest_pending: SignedDuration::ZERO,
            peak_pods: 0,
            peak_nodes: 0,
        }
    }

    /// Violations so far, by kind (every kind present).
    pub fn counts(&self) -> &BTreeMap<Violation, usize> {
        &self.counts
    }

    pub fn count(&self, v: Violation) -> usize {
        self.counts.get(&v).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// The first few violations of each kind, worded.
    pub fn examples(&self) -> &BTreeMap<Violation, Vec<String>> {
        &self.examples
    }

    fn flag(&mut self, v: Violation, key: &str, now: Timestamp, what: String) {
        if !self.flagged.insert((v, key.to_owned())) {
            return;
        }
        *self.counts.entry(v).or_default() += 1;
        let list = self.examples.entry(v).or_default();
        if list.len() < EXAMPLES {
            list.push(format!("{now}: {what}"));
        }
    }

    /// Checks every invariant on `sim` as it is now.
    pub async fn check(&mut self, sim: &SoakSim) {
        let now = sim.now();
        let pods = sim.cluster.inner().all_pods();
        let nodes = sim.cluster.inner().all_nodes();
        let instances = sim
            .sim_cloud
            .as_ref()
            .map(SimCloud::all_instances)
            .unwrap_or_default();
        let (Ok(claims), Ok(commands), Ok(batch), Ok(usage), Ok(pdbs)) = (
            sim.store.claims().await,
            sim.store.commands().await,
            sim.store.batch().await,
            sim.store.pool_usage().await,
            sim.cluster.inner().pod_disruption_budgets().await,
        ) else {
            return;
        };
        let catalog = match sim.cloud.catalog().await {
            Ok(c) => c,
            Err(_) => return,
        };
        self.checks += 1;
        self.peak_pods = self
            .peak_pods
            .max(pods.iter().filter(|p| !is_finished(p)).count());
        self.peak_nodes = self.peak_nodes.max(nodes.len());
        self.check_pending(now, &pods, &claims, &commands, batch.as_ref());
        self.check_pdbs(now, &pods, &pdbs, &commands);
        self.check_limits(now, &claims, &usage, &instances, &catalog);
        self.check_instances(now, &claims, &instances);
        self.check_disruptions(now, sim, &pods, &commands);
        self.check_cost(now, &pods, &instances);
        self.last = Some(now);
    }

    fn check_pending(
        &mut self,
        now: Timestamp,
        pods: &[Pod],
        claims: &[Claim],
        commands: &[crate::model::Command],
        batch: Option<&crate::model::Batch>,
    ) {
        let nominated: BTreeSet<(String, String)> = claims
            .iter()
            .chain(commands.iter().flat_map(|c| c.planned.iter()))
            .flat_map(|c| c.pods.iter())
            .map(|k| (k.namespace.clone(), k.name.clone()))
            .collect();
        let mut still = BTreeMap::new();
        for p in pods {
            let Some(uid) = p.metadata.uid.clone() else {
                continue;
            };
            if node_of(p).is_some() || is_finished(p) || is_terminating(p) {
                continue;
            }
            let key = PodKey::of(p);
            let mut w = self.waiting.remove(&uid).unwrap_or(Waiting {
                since: now,
                reason_at: now,
                name: key.to_string(),
                no_reason: false,
                too_long: false,
            });
            let waited = now.duration_since(w.since);
            self.longest_pending = self.longest_pending.max(waited);
            let reason = nominated.contains(&(key.namespace.clone(), key.name.clone()))
                || batch.is_some_and(|b| b.parked.contains_key(&uid));
            // The grace runs from the last moment the pod had a reason: a
            // nomination that ends (its claim timed out, failed or was
            // removed) hands the pod back to the provisioner, which decides
            // again at its next batch, as Karpenter's does once a NodeClaim
            // is deleted — not at once.
            if reason {
                w.reason_at = now;
            }
            let unexplained = now.duration_since(w.reason_at);
            if unexplained > self.bounds.reason_grace && !reason && !w.no_reason {
                w.no_reason = true;
                let what = format!(
                    "pod {} pending {}s, neither nominated to a claim nor parked with a reason for {}s",
                    w.name,
                    waited.as_secs(),
                    unexplained.as_secs()
                );
                self.flag(Violation::PendingWithoutReason, &uid, now, what);
            }
            if waited > self.bounds.pending && !w.too_long {
                w.too_long = true;
                let why = batch
                    .and_then(|b| b.parked.get(&uid))
                    .map(|p| p.reason.clone())
                    .unwrap_or_default();
                let what = format!("pod {} pending {}s {why}", w.name, waited.as_secs());
                self.flag(Violation::PendingTooLong, &uid, now, what);
            }
            still.insert(uid, w);
        }
        self.waiting = still;
    }

    fn check_pdbs(
        &mut self,
        now: Timestamp,
        pods: &[Pod],
        pdbs: &[k8s_openapi::api::policy::v1::PodDisruptionBudget],
        commands: &[crate::model::Command],
    ) {
        let terminating: BTreeSet<String> = pods
            .iter()
            .filter(|p| is_terminating(p))
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        for pdb in pdbs {
            let Some(desired) = pdb.status.as_ref().map(|s| s.desired_healthy) else {
                continue;
            };
            let ns = pdb.metadata.namespace.as_deref().unwrap_or("default");
            let selected: Vec<&Pod> = pods
                .iter()
                .filter(|p| {
                    p.metadata.namespace.as_deref().unwrap_or("default") == ns
                        && pdb_selects(pdb, p)
                })
                .collect();
            let healthy = selected
                .iter()
                .filter(|p| is_pod_ready(p) && !is_terminating(p))
                .count();
            if i64::try_from(healthy).unwrap_or(i64::MAX) >= i64::from(desired) {
                continue;
            }
            let name = pdb.metadata.name.clone().unwrap_or_default();
            for p in selected {
                let Some(uid) = p.metadata.uid.as_deref() else {
                    continue;
                };
                if is_terminating(p)
                    && !self.terminating.contains(uid)
                    && !due_at_a_removal_deadline(p, now, commands)
                {
                    let what = format!(
                        "pod {} evicted or deleted: PodDisruptionBudget {ns}/{name} at {healthy} healthy, desired {desired}",
                        PodKey::of(p)
                    );
                    self.flag(Violation::PdbBelowMinimum, uid, now, what);
                }
            }
        }
        self.terminating = terminating;
    }

    fn check_limits(
        &mut self,
        now: Timestamp,
        claims: &[Claim],
        usage: &BTreeMap<String, Usage>,
        instances: &[super::cloud::SimInstance],
        catalog: &crate::model::CloudCatalog,
    ) {
        let mut launched: BTreeMap<String, Usage> = BTreeMap::new();
        for i in instances {
            let inst = &i.instance;
            if !matches!(inst.state, InstanceState::Pending | InstanceState::Running) {
                continue;
            }
            let Some(pool) = inst.pool.clone() else {
                continue;
            };
            let Some(info) = catalog
                .instance_types
                .iter()
                .find(|t| t.name == inst.instance_type)
            else {
                continue;
            };
            let kubelet = claims
                .iter()
                .find(|c| Some(&c.id) == inst.claim_id.as_ref())
                .map(|c| c.kubelet.clone())
                .unwrap_or_default();
            let mut u = usage_of(&info.capacity(&kubelet));
            u.insert(NODES.to_owned(), 1);
            crate::model::claim::add_usage(launched.entry(pool).or_default(), &u);
        }
        let mut over = BTreeSet::new();
        let mut flags = Vec::new();
        for pool in &self.pools {
            for (what, used) in [
                ("reserved", usage.get(&pool.name)),
                ("launched", launched.get(&pool.name)),
            ] {
                let Some(used) = used else { continue };
                for (resource, limit) in &pool.limits.resources {
                    let have = used.get(resource).copied().unwrap_or(0);
                    if have <= *limit {
                        continue;
                    }
                    let key = format!("{}/{resource}/{what}", pool.name);
                    over.insert(key.clone());
                    if !self.over_limit.contains(&key) {
                        let text = format!(
                            "NodePool {} {what} {resource} {have}, above its limit {limit}",
                            pool.name
                        );
                        flags.push((key, text));
                    }
                }
            }
        }
        for (key, text) in flags {
            // A new excursion: counted again even if an earlier one was.
            self.flagged
                .remove(&(Violation::LimitExceeded, key.clone()));
            self.flag(Violation::LimitExceeded, &key, now, text);
        }
        self.over_limit = over;
    }

    fn check_instances(
        &mut self,
        now: Timestamp,
        claims: &[Claim],
        instances: &[super::cloud::SimInstance],
    ) {
        let mut per_claim: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for i in instances {
            if let Some(c) = i.instance.claim_id.as_deref() {
                per_claim.entry(c).or_default().push(i.instance.id.as_str());
            }
        }
        for (claim, ids) in &per_claim {
            if ids.len() > 1 {
                self.flag(
                    Violation::LaunchedTwice,
                    claim,
                    now,
                    format!("claim {claim} has instances {ids:?}"),
                );
            }
        }
        let claim_ids: BTreeSet<&str> = claims.iter().map(|c| c.id.as_str()).collect();
        let mut orphans = BTreeMap::new();
        for i in instances {
            let inst = &i.instance;
            if inst.state.is_gone_or_going()
                || inst
                    .claim_id
                    .as_deref()
                    .is_some_and(|c| claim_ids.contains(c))
            {
                continue;
            }
            let since = self.orphans.get(&inst.id).copied().unwrap_or(now);
            if now.duration_since(since) > self.bounds.orphan_grace {
                let what = format!(
                    "instance {} ({}) has had no claim for {}s",
                    inst.id,
                    inst.instance_type,
                    now.duration_since(since).as_secs()
                );
                self.flag(Violation::InstanceWithoutClaim, &inst.id, now, what);
            }
            orphans.insert(inst.id.clone(), since);
        }
        self.orphans = orphans;
        let live: BTreeSet<&str> = instances
            .iter()
            .filter(|i| i.instance.state != InstanceState::Terminated)
            .filter_map(|i| i.instance.claim_id.as_deref())
            .collect();
        let mut claimless = BTreeMap::new();
        for c in claims {
            if live.contains(c.id.as_str()) {
                continue;
            }
            let since = self.claimless.get(&c.id).copied().unwrap_or(now);
            if now.duration_since(since) > self.bounds.claim_without_instance {
                let what = format!(
                    "claim {} ({:?}) has had no instance for {}s",
                    c.id,
                    c.phase(),
                    now.duration_since(since).as_secs()
                );
                self.flag(Violation::ClaimWithoutInstance, &c.id, now, what);
            }
            claimless.insert(c.id.clone(), since);
        }
        self.claimless = claimless;
    }

    fn check_disruptions(
        &mut self,
        now: Timestamp,
        sim: &SoakSim,
        pods: &[Pod],
        commands: &[crate::model::Command],
    ) {
        let voluntary = |r: RemovalReason| match r {
            RemovalReason::Empty => Some(DisruptionReason::Empty),
            RemovalReason::Drifted => Some(DisruptionReason::Drifted),
            RemovalReason::Underutilized => Some(DisruptionReason::Underutilized),
            RemovalReason::Unhealthy => Some(DisruptionReason::Unhealthy),
            _ => None,
        };
        let starts = &sim.disruption_starts[self.starts_seen.min(sim.disruption_starts.len())..];
        self.starts_seen = sim.disruption_starts.len();
        let mut flags = Vec::new();
        for s in starts {
            let Some(reason) = voluntary(s.reason) else {
                continue;
            };
            let Some(pool) = self.pools.iter().find(|p| p.name == s.pool) else {
                continue;
            };
            // Started by the same tick in the same pool, voluntary: they count together.
            let group: Vec<_> = starts
                .iter()
                .filter(|o| o.at == s.at && o.pool == s.pool && voluntary(o.reason).is_some())
                .collect();
            let total = s.nodes;
            let allowed = pool.disruption.allowed_disruptions(reason, total, s.at);
            let disrupting = s.in_flight + group.len();
            if disrupting > allowed {
                flags.push((
                    s.claim.clone(),
                    format!(
                        "{} removal of {} in pool {}: {disrupting} disrupting, budgets allow {allowed} of {total} nodes",
                        s.reason.as_str(),
                        s.claim,
                        s.pool
                    ),
                ));
            }
        }
        for (key, what) in flags {
            self.flag(Violation::DisruptedAgainstBudget, &key, now, what);
        }
        for c in commands {
            if voluntary(c.spec.reason).is_none() {
                continue;
            }
            let Some(node) = c.spec.node.as_deref() else {
                continue;
            };
            let blocked = pods.iter().filter(|p| node_of(p) == Some(node)).find(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DO_NOT_DISRUPT))
                    .is_some_and(|v| v.trim() == "true")
            });
            if let Some(p) = blocked {
                let what = format!(
                    "{} removal of node {node} with do-not-disrupt pod {}",
                    c.spec.reason.as_str(),
                    PodKey::of(p)
                );
                self.flag(Violation::DisruptedAgainstDoNotDisrupt, &c.id, now, what);
            }
        }
    }

    fn check_cost(
        &mut self,
        now: Timestamp,
        pods: &[Pod],
        instances: &[super::cloud::SimInstance],
    ) {
        let fleet: f64 = instances
            .iter()
            .filter(|i| i.instance.state != InstanceState::Terminated)
            .map(|i| i.instance.price)
            .sum();
        let running: Vec<_> = pods
            .iter()
            .filter(|p| !is_finished(p) && !is_terminating(p))
            .filter_map(|p| crate::scheduling::SchedPod::from_pod(p).ok())
            .collect();
        let bound = self.lower_bound.bound(&running).unwrap_or(0.0);
        let first = *self.first.get_or_insert(now);
        if let Some(last) = self.last {
            let hours = now.duration_since(last).as_secs_f64() / 3600.0;
            self.fleet_dollar_hours += fleet * hours;
            self.bound_dollar_hours += bound * hours;
            self.hour.0 += fleet * hours;
            self.hour.1 += bound * hours;
            let whole = now.duration_since(first).as_secs() / 3600;
            if whole > self.hourly_cost_ratio.len() as i64 {
                self.hourly_cost_ratio.push(if self.hour.1 > 0.0 {
                    round2(self.hour.0 / self.hour.1)
                } else {
                    0.0
                });
                self.hour = (0.0, 0.0);
            }
        }
        self.cost.push_back((now, fleet, bound));
        while self
            .cost
            .front()
            .is_some_and(|(t, _, _)| now.duration_since(*t) > self.bounds.cost_window)
        {
            self.cost.pop_front();
        }
        let full = self.cost.front().is_some_and(|(t, _, _)| {
            now.duration_since(*t) >= self.bounds.cost_window - SignedDuration::from_mins(1)
                && t.duration_since(first) >= self.bounds.cost_warmup
        });
        if !full {
            return;
        }
        let (f, b) = self
            .cost
            .iter()
            .fold((0.0, 0.0), |(f, b), (_, cf, cb)| (f + cf, b + cb));
        if b <= 0.0 {
            return;
        }
        let ratio = f / b;
        self.worst_window_ratio = self.worst_window_ratio.max(ratio);
        let over = ratio > self.bounds.cost_factor;
        if over && !self.cost_over {
            let key = format!("cost-{}", now.as_second());
            let what = format!(
                "fleet cost over the last hour is {ratio:.2}× the LP bound of its pods (factor {})",
                self.bounds.cost_factor
            );
            self.flag(Violation::CostAboveBound, &key, now, what);
        }
        self.cost_over = over;
    }
}

// ------------------------------------------------------------------ workload

/// A Deployment following a daily curve.
#[derive(Debug, Clone)]
struct Scaled {
    name: String,
    base: f64,
    phase: f64,
}

/// A batch Job's pod, as the soak's Job controller tracks it.
#[derive(Debug, Clone)]
struct JobPod {
    job: String,
    /// The pod's current name (a new one after each early removal).
    name: String,
    attempt: u32,
    /// How long it runs once bound.
    runtime: SignedDuration,
    /// When it was first seen bound (its run started).
    started: Option<Timestamp>,
    cpu: &'static str,
    memory: &'static str,
    arm64: bool,
    /// `karpenter.sh/do-not-disrupt: "true"`, as batch users are told to set.
    keep: bool,
}

/// The seeded workload: its objects, and what it changes over time.
#[derive(Debug)]
pub struct Workload {
    rng: Rng,
    deployments: Vec<Scaled>,
    jobs: Vec<JobPod>,
    next_job: u64,
    /// Figures.
    pub job_pods_created: usize,
    pub job_pods_completed: usize,
    pub job_pods_rerun: usize,
}

/// Which Deployments the soak runs: name, cpu, memory, base replicas
/// (min, max), node selector, a PDB, do-not-disrupt.
type DeploymentShape = (
    &'static str,
    &'static str,
    &'static str,
    (f64, f64),
    Option<(&'static str, &'static str)>,
    Option<serde_json::Value>,
    bool,
);

fn deployment_shapes() -> Vec<DeploymentShape> {
    vec![
        (
            "web",
            "250m",
            "512Mi",
            (6.0, 10.0),
            None,
            Some(json!({"maxUnavailable": 1})),
            false,
        ),
        (
            "api",
            "500m",
            "1Gi",
            (4.0, 8.0),
            None,
            Some(json!({"minAvailable": "50%"})),
            false,
        ),
        (
            "cache",
            "1",
            "4Gi",
            (2.0, 3.0),
            None,
            Some(json!({"minAvailable": 1})),
            true,
        ),
        (
            "worker-arm",
            "1",
            "2Gi",
            (3.0, 6.0),
            Some((labels::ARCH, "arm64")),
            None,
            false,
        ),
        (
            "billing",
            "500m",
            "1Gi",
            (2.0, 4.0),
            Some((labels::CAPACITY_TYPE, "on-demand")),
            Some(json!({"maxUnavailable": 1})),
            false,
        ),
        (
            "ml",
            "2",
            "8Gi",
            (1.0, 3.0),
            Some((labels::ARCH, "amd64")),
            None,
            false,
        ),
        ("queue", "250m", "256Mi", (3.0, 6.0), None, None, false),
        ("search", "1", "2Gi", (2.0, 5.0), None, None, false),
    ]
}

fn config_objects() -> Vec<serde_json::Value> {
    let class = json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"});
    vec![
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "soak"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "soak"}}]}}),
        json!({"apiVersion": "nodewright.io/v1alpha1", "kind": "Settings", "metadata": {"name": "default"}, "spec": {
            "featureGates": {"nodeRepair": true}}}),
        // Spot first, both architectures, a CPU limit the daily peak reaches.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "annotations": {"nodewright.io/rebalance-policy": "Replace"}}, "spec": {
            "weight": 50,
            "limits": {"cpu": "48", "memory": "192Gi"},
            "template": {"spec": {"nodeClassRef": class, "expireAfter": "12h", "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8", "16"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m",
                "budgets": [{"nodes": "20%"}]}}}),
        // On-demand amd64, the fallback when spot's limit is reached.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "on-demand"}, "spec": {
            "weight": 10,
            "limits": {"cpu": "200"},
            "template": {"spec": {"nodeClassRef": class, "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8", "16"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m",
                "budgets": [{"nodes": "1"}, {"nodes": "0", "schedule": "0 */6 * * *", "duration": "1h", "reasons": ["Underutilized", "Drifted"]}]}}}),
        // Spot arm64 for batch pods only (tainted), emptied quickly.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "batch-arm"}, "spec": {
            "weight": 80,
            "limits": {"cpu": "16"},
            "template": {"spec": {"nodeClassRef": class,
                "taints": [{"key": "batch", "value": "true", "effect": "NoSchedule"}],
                "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m", "budgets": [{"nodes": "2"}]}}}),
    ]
}

impl Workload {
    fn new(seed: u64) -> (Workload, Vec<serde_json::Value>) {
        let mut rng = Rng::new(seed);
        let mut objects = config_objects();
        objects.push(json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent", "namespace": "kube-system"}, "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {"metadata": {"labels": {"app": "node-agent"}}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}));
        let mut deployments = Vec::new();
        for (name, cpu, memory, (lo, hi), selector, pdb, dnd) in deployment_shapes() {
            let base = lo + rng.unit() * (hi - lo);
            let phase = rng.unit() * std::f64::consts::TAU;
            let mut template = json!({"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": rng.range(5, 30),
                "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}});
            if let Some((k, v)) = selector {
                template["spec"]["nodeSelector"] = json!({k: v});
            }
            if dnd {
                template["metadata"]["annotations"] = json!({DO_NOT_DISRUPT: "true"});
            }
            objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": {
                "replicas": base.round() as i32, "selector": {"matchLabels": {"app": name}}, "template": template}}));
            if let Some(mut spec) = pdb {
                spec["selector"] = json!({"matchLabels": {"app": name}});
                objects.push(
                    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
                );
            }
            deployments.push(Scaled {
                name: name.to_owned(),
                base,
                phase,
            });
        }
        let w = Workload {
            rng,
            deployments,
            jobs: Vec::new(),
            next_job: 1,
            job_pods_created: 0,
            job_pods_completed: 0,
            job_pods_rerun: 0,
        };
        (w, objects)
    }

    /// Replicas of a Deployment at `minute`: a daily sine (±60 %) with ±20 % noise.
    fn replicas(&mut self, i: usize, minute: i64) -> i32 {
        let d = &self.deployments[i];
        let day = minute as f64 / (24.0 * 60.0) * std::f64::consts::TAU;
        let level = d.base * (1.0 + 0.6 * (day + d.phase).sin());
        (level * (0.8 + 0.4 * self.rng.unit())).round().max(0.0) as i32
    }

    fn job_pod(p: &JobPod) -> serde_json::Value {
        let mut spec = json!({"restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
            "tolerations": [{"key": "batch", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "containers": [{"name": "job", "image": "batch", "resources": {"requests": {"cpu": p.cpu, "memory": p.memory}}}]});
        if p.arm64 {
            spec["nodeSelector"] = json!({labels::ARCH: "arm64"});
        }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": p.name, "namespace": "batch",
            "labels": {"job-name": p.job}}, "spec": spec});
        if p.keep {
            pod["metadata"]["annotations"] = json!({DO_NOT_DISRUPT: "true"});
        }
        pod
    }

    /// What changes at the start of `minute`: Deployments re-scaled every
    /// 15 minutes; a new Job every 20 minutes or so.
    fn at_minute(&mut self, sim: &SoakSim, minute: i64) -> Result<(), SoakError> {
        if minute > 0 && minute % 15 == 0 {
            for i in 0..self.deployments.len() {
                let n = self.replicas(i, minute);
                sim.cluster
                    .inner()
                    .scale("default", &self.deployments[i].name, n)
                    .map_err(SoakError::Setup)?;
            }
        }
        if minute % 5 == 0 && self.rng.chance(0.25) {
            let job = format!("job-{:04}", self.next_job);
            self.next_job += 1;
            let cpu = *self.rng.pick(&["500m", "1", "2"]);
            let memory = *self.rng.pick(&["1Gi", "2Gi", "4Gi"]);
            let arm64 = self.rng.chance(0.5);
            let keep = self.rng.chance(0.5);
            for k in 0..self.rng.range(1, 6) {
                let runtime = SignedDuration::from_mins(self.rng.range(5, 45) as i64);
                let p = JobPod {
                    job: job.clone(),
                    name: format!("{job}-{k}-0"),
                    attempt: 0,
                    runtime,
                    started: None,
                    cpu,
                    memory,
                    arm64,
                    keep,
                };
                sim.cluster
                    .inner()
                    .apply(&Self::job_pod(&p))
                    .map_err(SoakError::Setup)?;
                self.job_pods_created += 1;
                self.jobs.push(p);
            }
        }
        Ok(())
    }

    /// The Job controller: a pod that ran its time completes (and is
    /// cleaned up); one that vanished early runs again under a new name.
    async fn reconcile_jobs(&mut self, sim: &SoakSim) -> Result<(), SoakError> {
        let now = sim.now();
        let pods: BTreeMap<String, Pod> = sim
            .cluster
            .inner()
            .all_pods()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some("batch"))
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        let mut keep = Vec::new();
        for mut j in std::mem::take(&mut self.jobs) {
            match pods.get(&j.name) {
                Some(p) if is_terminating(p) => keep.push(j),
                Some(p) => {
                    if node_of(p).is_some() && j.started.is_none() {
                        j.started = Some(now);
                    }
                    if j.started
                        .is_some_and(|s| now.duration_since(s) >= j.runtime)
                    {
                        let _ = sim
                            .cluster
                            .inner()
                            .delete_pod(&PodKey::of(p), Some(0))
                            .await;
                        self.job_pods_completed += 1;
                    } else {
                        keep.push(j);
                    }
                }
                None => {
                    // Evicted or its node went away: the Job makes a new pod.
                    j.attempt += 1;
                    let stem = j
                        .name
                        .rsplit_once('-')
                        .map_or(j.name.clone(), |(s, _)| s.to_owned());
                    j.name = format!("{stem}-{}", j.attempt);
                    j.started = None;
                    sim.cluster
                        .inner()
                        .apply(&Self::job_pod(&j))
                        .map_err(SoakError::Setup)?;
                    self.job_pods_rerun += 1;
                    keep.push(j);
                }
            }
        }
        self.jobs = keep;
        Ok(())
    }
}

// -------------------------------------------------------------------- faults

/// A fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    SpotInterruption,
    Rebalance,
    ScheduledChange,
    InsufficientCapacity,
    FailedLaunches,
    SlowBoot,
    NeverRegister,
    NodeNotReady,
    EventsDuplicated,
    EventsReordered,
    EventsDelayed,
    EventsLost,
    MessagesDuplicated,
    MessagesLost,
    StoreThrottled,
    StoreConflicts,
    CrashAfterLaunch,
    CrashBetweenSteps,
    KubernetesApiRefused,
    KubernetesResponsesDropped,
    KubernetesUpgrade,
}

impl FaultKind {
    /// Each kind and how often it strikes (per simulated hour).
    pub const RATES: [(FaultKind, f64); 20] = [
        (FaultKind::SpotInterruption, 1.5),
        (FaultKind::Rebalance, 1.0),
        (FaultKind::ScheduledChange, 0.5),
        (FaultKind::InsufficientCapacity, 1.0),
        (FaultKind::FailedLaunches, 1.0),
        (FaultKind::SlowBoot, 0.3),
        (FaultKind::NeverRegister, 0.3),
        (FaultKind::NodeNotReady, 0.4),
        (FaultKind::EventsDuplicated, 0.3),
        (FaultKind::EventsReordered, 0.3),
        (FaultKind::EventsDelayed, 0.3),
        (FaultKind::EventsLost, 0.3),
        (FaultKind::MessagesDuplicated, 0.3),
        (FaultKind::MessagesLost, 0.2),
        (FaultKind::StoreThrottled, 1.0),
        (FaultKind::StoreConflicts, 1.0),
        (FaultKind::CrashAfterLaunch, 0.5),
        (FaultKind::CrashBetweenSteps, 1.0),
        (FaultKind::KubernetesApiRefused, 1.0),
        (FaultKind::KubernetesResponsesDropped, 1.0),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::SpotInterruption => "spot_interruption",
            FaultKind::Rebalance => "rebalance_recommendation",
            FaultKind::ScheduledChange => "scheduled_change",
            FaultKind::InsufficientCapacity => "insufficient_capacity",
            FaultKind::FailedLaunches => "failed_launches",
            FaultKind::SlowBoot => "slow_boot",
            FaultKind::NeverRegister => "never_register",
            FaultKind::NodeNotReady => "node_not_ready",
            FaultKind::EventsDuplicated => "state_events_duplicated",
            FaultKind::EventsReordered => "state_events_reordered",
            FaultKind::EventsDelayed => "state_events_delayed",
            FaultKind::EventsLost => "state_events_lost",
            FaultKind::MessagesDuplicated => "queue_messages_duplicated",
            FaultKind::MessagesLost => "queue_messages_lost",
            FaultKind::StoreThrottled => "store_throttled",
            FaultKind::StoreConflicts => "store_conflicts",
            FaultKind::CrashAfterLaunch => "crash_after_launch",
            FaultKind::CrashBetweenSteps => "crash_between_removal_steps",
            FaultKind::KubernetesApiRefused => "kubernetes_api_refused",
            FaultKind::KubernetesResponsesDropped => "kubernetes_responses_dropped",
            FaultKind::KubernetesUpgrade => "kubernetes_upgrade",
        }
    }
}

/// What the soak could not inject, and why (printed with every report).
pub const NOT_MODELLED: [&str; 2] = [
    "a function killed at an arbitrary instruction: crashes are injected at store writes (after a launch before its record; between two removal steps), not between any two calls",
    "concurrent invocations of one function: the simulator runs one invocation of each at a time",
];

/// Something to undo when a windowed fault ends.
#[derive(Debug, Clone)]
enum Undo {
    Capacity(Vec<OfferingKey>),
    Boot(SignedDuration),
    NeverRegister(String),
    Ready(String),
    Events(FaultKind, SignedDuration),
    Messages(FaultKind),
}

/// The seeded fault schedule and what is in force.
#[derive(Debug)]
struct Faults {
    rng: Rng,
    due: VecDeque<(Timestamp, FaultKind)>,
    undo: Vec<(Timestamp, Undo)>,
    injected: BTreeMap<FaultKind, usize>,
}

impl Faults {
    fn new(seed: u64, start: Timestamp, duration: SignedDuration, on: bool) -> Faults {
        let mut rng = Rng::new(seed ^ 0xfa01_7500_c4a0_5eed);
        let mut due = Vec::new();
        if on {
            for (kind, per_hour) in FaultKind::RATES {
                // Exponential gaps: a Poisson process at the kind's rate, after a quiet first 10 minutes.
                let mut t = SignedDuration::from_mins(10);
                loop {
                    // Whole seconds: the simulated clock keeps milliseconds.
                    let gap = (-(1.0 - rng.unit()).ln() / per_hour * 3600.0)
                        .round()
                        .max(1.0);
                    t += SignedDuration::from_secs(gap as i64);
                    if t >= duration {
                        break;
                    }
                    due.push((start + t, kind));
                }
            }
            // Not a fault: an upgrade halfway through, which drifts every node.
            due.push((
                start + SignedDuration::from_secs(duration.as_secs() / 2),
                FaultKind::KubernetesUpgrade,
            ));
        }
        due.sort();
        Faults {
            rng,
            due: due.into(),
            undo: Vec::new(),
            injected: BTreeMap::new(),
        }
    }

    fn next_due(&self) -> Option<Timestamp> {
        self.due
            .front()
            .map(|d| d.0)
            .into_iter()
            .chain(self.undo.iter().map(|u| u.0))
            .min()
    }

    fn minutes(&mut self, lo: u64, hi: u64) -> SignedDuration {
        SignedDuration::from_mins(self.rng.range(lo, hi) as i64)
    }

    /// Injects what is due at `now`; undoes what ended.
    async fn apply(&mut self, soak: &mut SoakParts<'_>, now: Timestamp) {
        let ended: Vec<Undo> = {
            let (done, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.undo)
                .into_iter()
                .partition(|(t, _)| *t <= now);
            self.undo = later;
            done.into_iter().map(|(_, u)| u).collect()
        };
        for u in ended {
            tracing::info!(undo = ?u, "soak: fault over");
            soak.undo(u);
        }
        while self.due.front().is_some_and(|(t, _)| *t <= now) {
            let Some((_, kind)) = self.due.pop_front() else {
                break;
            };
            if self.inject(soak, kind, now).await {
                tracing::info!(fault = kind.as_str(), "soak: fault injected");
                *self.injected.entry(kind).or_default() += 1;
            }
        }
    }

    /// Injects one fault; false when there was nothing to hit.
    async fn inject(&mut self, soak: &mut SoakParts<'_>, kind: FaultKind, now: Timestamp) -> bool {
        let live: Vec<super::cloud::SimInstance> = soak
            .cloud
            .all_instances()
            .into_iter()
            .filter(|i| i.instance.state == InstanceState::Running)
            .collect();
        let registered: Vec<&super::cloud::SimInstance> = {
            let nodes = soak.sim.cluster.inner().all_nodes();
            live.iter()
                .filter(|i| {
                    nodes.iter().any(|n| {
                        n.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                            == Some(i.instance.provider_id.as_str())
                    })
                })
                .collect()
        };
        match kind {
            FaultKind::SpotInterruption => {
                let spot: Vec<_> = registered
                    .iter()
                    .filter(|i| i.instance.capacity_type == labels::CAPACITY_TYPE_SPOT)
                    .collect();
                if spot.is_empty() {
                    return false;
                }
                let id = self.rng.pick(&spot).instance.id.clone();
                soak.cloud.interrupt_spot(&id)
            }
            FaultKind::Rebalance => {
                if registered.is_empty() {
                    return false;
                }
                let id = self.rng.pick(&registered).instance.id.clone();
                soak.cloud.recommend_rebalance(&id)
            }
            FaultKind::ScheduledChange => {
                if registered.is_empty() {
                    return false;
                }
                let id = self.rng.pick(&registered).instance.id.clone();
                let start = now + self.minutes(5, 20);
                soak.cloud.schedule_change(&[id], start);
                true
            }
            FaultKind::InsufficientCapacity => {
                if live.is_empty() {
                    return false;
                }
                // The offerings of a few instances in use: what the next launches want most.
                let mut keys = BTreeSet::new();
                for _ in 0..self.rng.range(1, 4) {
                    let i = &self.rng.pick(&live).instance;
                    keys.insert(OfferingKey {
                        capacity_type: i.capacity_type.clone(),
                        instance_type: i.instance_type.clone(),
                        zone: i.zone.clone(),
                    });
                }
                let keys: Vec<OfferingKey> = keys.into_iter().collect();
                for k in &keys {
                    soak.cloud.remove_capacity(k.clone());
                }
                let until = now + self.minutes(10, 40);
                self.undo.push((until, Undo::Capacity(keys)));
                true
            }
            FaultKind::FailedLaunches => {
                soak.faulty_cloud
                    .fail_next_launches(self.rng.range(1, 3) as usize);
                true
            }
            FaultKind::SlowBoot => {
                let before = soak.sim.settings.boot;
                soak.sim.settings.boot = self.minutes(3, 6);
                let until = now + self.minutes(10, 20);
                self.undo.push((until, Undo::Boot(before)));
                true
            }
            FaultKind::NeverRegister => {
                if live.is_empty() {
                    return false;
                }
                // Launches of a type in use hang at bootstrap for a while; those never register.
                let t = self.rng.pick(&live).instance.instance_type.clone();
                soak.sim.never_register.insert(t.clone());
                let until = now + self.minutes(5, 10);
                self.undo.push((until, Undo::NeverRegister(t)));
                true
            }
            FaultKind::NodeNotReady => {
                if registered.is_empty() {
                    return false;
                }
                let id = self.rng.pick(&registered).instance.id.clone();
                let name = node_name(&id, REGION);
                if soak
                    .sim
                    .cluster
                    .inner()
                    .set_node_ready(&name, false)
                    .is_err()
                {
                    return false;
                }
                // Some come back before node repair's 30 minutes, some do not.
                let until = now + self.minutes(5, 50);
                self.undo.push((until, Undo::Ready(name)));
                true
            }
            FaultKind::EventsDuplicated
            | FaultKind::EventsReordered
            | FaultKind::EventsDelayed
            | FaultKind::EventsLost => {
                let s = &mut soak.sim.settings;
                let before = s.event_delay;
                match kind {
                    FaultKind::EventsDuplicated => s.duplicate_events = true,
                    FaultKind::EventsReordered => s.reorder_events = true,
                    FaultKind::EventsLost => s.drop_events = true,
                    _ => s.event_delay = SignedDuration::from_secs(self.rng.range(20, 120) as i64),
                }
                let until = now + self.minutes(5, 20);
                self.undo.push((until, Undo::Events(kind, before)));
                true
            }
            FaultKind::MessagesDuplicated | FaultKind::MessagesLost => {
                if kind == FaultKind::MessagesDuplicated {
                    soak.sim.settings.duplicate_messages = true;
                } else {
                    soak.sim.settings.drop_messages = true;
                }
                let until = now + self.minutes(5, 20);
                self.undo.push((until, Undo::Messages(kind)));
                true
            }
            FaultKind::StoreThrottled => {
                soak.store
                    .throttle_next_writes(self.rng.range(1, 8) as usize);
                true
            }
            FaultKind::StoreConflicts => {
                soak.store
                    .conflict_next_writes(self.rng.range(1, 4) as usize);
                true
            }
            FaultKind::CrashAfterLaunch => {
                soak.store.fail_next_claim_updates(1);
                true
            }
            FaultKind::CrashBetweenSteps => {
                soak.store
                    .crash_after_command_writes(self.rng.range(0, 5) as usize);
                true
            }
            FaultKind::KubernetesApiRefused => {
                // A burst of 429s and 503s outlasting the adapter's own retries.
                soak.sim
                    .cluster
                    .refuse_next_calls(self.rng.range(1, 12) as usize);
                true
            }
            FaultKind::KubernetesResponsesDropped => {
                soak.sim
                    .cluster
                    .drop_next_responses(self.rng.range(1, 4) as usize);
                true
            }
            FaultKind::KubernetesUpgrade => {
                let next = match soak.cloud.kubernetes_version().split_once('.') {
                    Some((major, minor)) => {
                        format!("{major}.{}", minor.parse::<u32>().unwrap_or(30) + 1)
                    }
                    None => "1.31".to_owned(),
                };
                soak.cloud.set_kubernetes_version(&next);
                true
            }
        }
    }
}

/// What a fault touches.
struct SoakParts<'a> {
    sim: &'a mut SoakSim,
    cloud: &'a SimCloud,
    faulty_cloud: &'a FaultyCloud<SimCloud>,
    store: &'a FaultyStore<MemStore>,
}

impl SoakParts<'_> {
    fn undo(&mut self, u: Undo) {
        match u {
            Undo::Capacity(keys) => {
                for k in &keys {
                    self.cloud.restore_capacity(k);
                }
            }
            Undo::Boot(before) => self.sim.settings.boot = before,
            Undo::NeverRegister(t) => {
                // Instances launched meanwhile stay unregistered for good.
                self.sim.never_register.remove(&t);
                let nodes = self.sim.cluster.inner().all_nodes();
                for i in self.cloud.all_instances() {
                    let joined = nodes.iter().any(|n| {
                        n.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                            == Some(i.instance.provider_id.as_str())
                    });
                    if i.instance.instance_type == t
                        && !joined
                        && !i.instance.state.is_gone_or_going()
                    {
                        self.sim
                            .never_register_instances
                            .insert(i.instance.id.clone());
                    }
                }
            }
            Undo::Ready(name) => {
                let _ = self.sim.cluster.inner().set_node_ready(&name, true);
            }
            Undo::Events(kind, before) => {
                let s = &mut self.sim.settings;
                match kind {
                    FaultKind::EventsDuplicated => s.duplicate_events = false,
                    FaultKind::EventsReordered => s.reorder_events = false,
                    FaultKind::EventsLost => s.drop_events = false,
                    _ => s.event_delay = before,
                }
            }
            Undo::Messages(kind) => {
                if kind == FaultKind::MessagesDuplicated {
                    self.sim.settings.duplicate_messages = false;
                } else {
                    self.sim.settings.drop_messages = false;
                }
            }
        }
    }
}

// -------------------------------------------------------------------- driver

/// A soak in progress.
#[derive(Debug)]
pub struct Soak {
    pub options: SoakOptions,
    pub sim: SoakSim,
    pub cloud: SimCloud,
    pub faulty_cloud: FaultyCloud<SimCloud>,
    pub store: FaultyStore<MemStore>,
    pub checker: Checker,
    pub workload: Workload,
    faults: Faults,
    start: Timestamp,
    next_minute: i64,
    next_check: Timestamp,
}

impl Soak {
    /// The cluster loaded with the seed's workload, nothing run yet.
    pub async fn new(options: SoakOptions) -> Result<Soak, SoakError> {
        let clock = SimClock::default();
        let cloud = SimCloud::new(
            catalog::catalog(REGION).map_err(|e| SoakError::Setup(e.to_string()))?,
            clock.clone(),
        );
        let faulty_cloud = FaultyCloud::new(cloud.clone());
        let store = FaultyStore::new(MemStore::new());
        let cluster = FaultyCluster::new(SimCluster::new(clock.clone()));
        let mut sim = Simulation::with_cluster(
            clock,
            faulty_cloud.clone(),
            Some(cloud.clone()),
            store.clone(),
            cluster,
            SimSettings::default(),
        );
        let (workload, objects) = Workload::new(options.seed);
        let s = scenario::Scenario {
            name: "soak".into(),
            description: String::new(),
            region: REGION.into(),
            objects,
            actions: Vec::new(),
            run: "0s".into(),
            simulator: scenario::Pace::default(),
            // The pools' default depths follow the run's seed, as every other choice does.
            spot_pools: scenario::SpotPoolsSpec {
                seed: Some(options.seed),
                ..Default::default()
            },
            capacity_reservations: Vec::new(),
            expect: scenario::Expect::default(),
        };
        scenario::load(&mut sim, &s)
            .await
            .map_err(|e| SoakError::Setup(e.to_string()))?;
        let config = crate::handlers::config::load(&store)
            .await
            .map_err(|e| SoakError::Setup(e.to_string()))?;
        let catalog = cloud
            .catalog()
            .await
            .map_err(|e| SoakError::Setup(e.to_string()))?;
        let checker = Checker::new(config.pools, &catalog, Bounds::default());
        let start = sim.now();
        let faults = Faults::new(options.seed, start, options.duration, options.faults);
        Ok(Soak {
            options,
            sim,
            cloud,
            faulty_cloud,
            store,
            checker,
            workload,
            faults,
            start,
            next_minute: 0,
            next_check: start,
        })
    }

    /// When the soak ends.
    pub fn end(&self) -> Timestamp {
        self.start
            + self
                .options
                .stop_after
                .map_or(self.options.duration, |stop| {
                    stop.min(self.options.duration)
                })
    }

    /// Runs until `until` (or the soak's end): the workload's changes, the
    /// faults and the checks at their times, the simulation in between.
    pub async fn run_until(&mut self, until: Timestamp) -> Result<(), SoakError> {
        let until = until.min(self.end());
        while self.sim.now() < until {
            let now = self.sim.now();
            let minute_at = self.start + SignedDuration::from_mins(self.next_minute);
            if now >= minute_at {
                if self.next_minute % 60 == 0 {
                    tracing::info!(
                        hour = self.next_minute / 60,
                        pods = self.checker.peak_pods,
                        "soak: hour"
                    );
                }
                self.workload.at_minute(&self.sim, self.next_minute)?;
                self.next_minute += 1;
            }
            let mut parts = SoakParts {
                sim: &mut self.sim,
                cloud: &self.cloud,
                faulty_cloud: &self.faulty_cloud,
                store: &self.store,
            };
            self.faults.apply(&mut parts, now).await;
            if now >= self.next_check {
                self.workload.reconcile_jobs(&self.sim).await?;
                self.checker.check(&self.sim).await;
                self.next_check = now + self.options.check_every;
            }
            let next = [
                Some(self.start + SignedDuration::from_mins(self.next_minute)),
                Some(self.next_check),
                self.faults.next_due(),
            ]
            .into_iter()
            .flatten()
            .filter(|t| *t > now)
            .min()
            .unwrap_or(until)
            .min(until)
            // The simulated clock keeps milliseconds: never ask for less than one.
            .max(now + SignedDuration::from_millis(1));
            tracing::trace!(%now, %next, "soak: run");
            Box::pin(self.sim.run_until(next)).await;
        }
        Ok(())
    }

    /// Runs the whole soak.
    pub async fn run(&mut self) -> Result<(), SoakError> {
        let end = self.end();
        self.run_until(end).await?;
        self.checker.check(&self.sim).await;
        Ok(())
    }

    /// The run's figures and violations.
    pub fn report(&self) -> SoakReport {
        let c = &self.checker;
        let mut removals: BTreeMap<String, usize> = BTreeMap::new();
        for r in self.sim.removal_reasons.values() {
            *removals.entry(r.clone()).or_default() += 1;
        }
        let mut interruptions: BTreeMap<String, usize> = BTreeMap::new();
        for o in &self.sim.interruptions {
            *interruptions
                .entry(
                    format!("{o:?}")
                        .split(['(', ' ', '{'])
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                )
                .or_default() += 1;
        }
        let (throttled, conflicts) = self.store.write_faults();
        let events = self.sim.cluster.inner().events();
        let count = |reason: &str| events.iter().filter(|(_, e)| e.reason == reason).count();
        SoakReport {
            seed: self.options.seed,
            hours: self.sim.now().duration_since(self.start).as_secs_f64() / 3600.0,
            violations: c.counts().iter().map(|(k, v)| (k.as_str(), *v)).collect(),
            examples: c
                .examples()
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect(),
            faults: self
                .faults
                .injected
                .iter()
                .map(|(k, v)| (k.as_str(), *v))
                .collect(),
            figures: Figures {
                checks: c.checks,
                peak_pods: c.peak_pods,
                peak_nodes: c.peak_nodes,
                job_pods_created: self.workload.job_pods_created,
                job_pods_completed: self.workload.job_pods_completed,
                job_pods_rerun: self.workload.job_pods_rerun,
                launches: self.cloud.launches(),
                launch_calls: self.faulty_cloud.launch_calls(),
                removals,
                rolled_back: self.sim.rolled_back.len(),
                interruption_messages: interruptions,
                queue_messages_lost: self.sim.messages_lost,
                pods_evicted: count("Evicted"),
                store_writes_throttled: throttled,
                store_write_conflicts: conflicts,
                longest_pending_seconds: c.longest_pending.as_secs(),
                fleet_dollar_hours: round2(c.fleet_dollar_hours),
                lower_bound_dollar_hours: round2(c.bound_dollar_hours),
                cost_ratio: if c.bound_dollar_hours > 0.0 {
                    round2(c.fleet_dollar_hours / c.bound_dollar_hours)
                } else {
                    0.0
                },
                worst_hour_cost_ratio: round2(c.worst_window_ratio),
                hourly_cost_ratio: c.hourly_cost_ratio.clone(),
            },
            bounds: c.bounds.clone(),
            not_modelled: NOT_MODELLED.to_vec(),
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// What a soak reports.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub seed: u64,
    pub hours: f64,
    /// Violation kind → how many.
    pub violations: BTreeMap<&'static str, usize>,
    /// The first few of each kind, worded.
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// Fault kind → how many were injected.
    pub faults: BTreeMap<&'static str, usize>,
    pub figures: Figures,
    pub bounds: Bounds,
    pub not_modelled: Vec<&'static str>,
}

impl SoakReport {
    pub fn total_violations(&self) -> usize {
        self.violations.values().sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub checks: usize,
    pub peak_pods: usize,
    pub peak_nodes: usize,
    pub job_pods_created: usize,
    pub job_pods_completed: usize,
    pub job_pods_rerun: usize,
    pub launches: usize,
    pub launch_calls: usize,
    /// Removal reason → nodes.
    pub removals: BTreeMap<String, usize>,
    pub rolled_back: usize,
    /// Interruption-queue message outcome → count.
    pub interruption_messages: BTreeMap<String, usize>,
    pub queue_messages_lost: usize,
    pub pods_evicted: usize,
    pub store_writes_throttled: usize,
    pub store_write_conflicts: usize,
    pub longest_pending_seconds: i64,
    pub fleet_dollar_hours: f64,
    pub lower_bound_dollar_hours: f64,
    pub cost_ratio: f64,
    /// Worst trailing-hour fleet ÷ bound after the warm-up.
    pub worst_hour_cost_ratio: f64,
    /// Fleet ÷ bound of each whole hour.
    pub hourly_cost_ratio: Vec<f64>,
}

/// Runs a whole soak.
pub async fn run(options: SoakOptions) -> Result<SoakReport, SoakError> {
    let mut soak = Soak::new(options).await?;
    soak.run().await?;
    Ok(soak.report())
}

/// A pod on a node whose removal has a deadline (a spot notice, a
/// scheduled change, the pool's `terminationGracePeriod`) may be deleted
/// whatever its PodDisruptionBudget says once the time left is within its
/// own grace period, as Karpenter deletes it so that it is gone by the
/// deadline: such a deletion is forced, not a graceful disruption.
fn due_at_a_removal_deadline(p: &Pod, now: Timestamp, commands: &[crate::model::Command]) -> bool {
    let Some(node) = node_of(p) else {
        return false;
    };
    let grace = p
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    commands
        .iter()
        .filter(|c| c.spec.node.as_deref() == Some(node))
        .filter_map(|c| c.spec.deadline)
        .any(|deadline| now + SignedDuration::from_secs(grace) > deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;
    use crate::model::{Command, RemovalSpec};

    /// A deletion at a removal's deadline is forced, not a disruption the
    /// budget must allow: the PDB check leaves it out once the time left
    /// is within the pod's grace period (seed 11 flagged ten such deletes
    /// of a spot node's pods at its notice's deadline), and only then.
    #[test]
    fn deletions_at_a_removal_deadline_are_not_pdb_violations() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "api-1", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "node-a", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "app", "image": "pause"}]}
        }))
        .expect("pod");
        let deadline = Timestamp::UNIX_EPOCH + SignedDuration::from_secs(600);
        let spec = RemovalSpec {
            claim_id: "c1".to_owned(),
            pool: "general".to_owned(),
            node: Some("node-a".to_owned()),
            instance_id: None,
            reason: crate::model::RemovalReason::SpotInterrupted,
            replace: true,
            deadline: Some(deadline),
            avoid: Vec::new(),
            event_at: None,
            handover: false,
        };
        let command = Command::new(spec.clone(), Timestamp::UNIX_EPOCH);
        let at = |secs_before: i64| deadline - SignedDuration::from_secs(secs_before);
        assert!(due_at_a_removal_deadline(
            &pod,
            at(20),
            std::slice::from_ref(&command)
        ));
        assert!(!due_at_a_removal_deadline(
            &pod,
            at(60),
            std::slice::from_ref(&command)
        ));
        // No deadline (a voluntary removal), or another node's: PDBs hold.
        let voluntary = Command::new(
            RemovalSpec {
                deadline: None,
                ..spec.clone()
            },
            Timestamp::UNIX_EPOCH,
        );
        assert!(!due_at_a_removal_deadline(&pod, at(20), &[voluntary]));
        let other = Command::new(
            RemovalSpec {
                node: Some("node-b".to_owned()),
                ..spec
            },
            Timestamp::UNIX_EPOCH,
        );
        assert!(!due_at_a_removal_deadline(&pod, at(20), &[other]));
    }

    /// A pod whose nomination ends (its claim timed out registering) gets
    /// the grace again to be nominated or parked, as Karpenter's
    /// provisioner decides again at its next batch; a pod without a reason
    /// for longer than the grace is still counted, once. (Seed 3 flagged
    /// two Job pods 605 s pending, 5 s after their claim's registration
    /// timeout and before their next batch.)
    #[test]
    fn the_reason_grace_runs_from_the_last_reason() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("region");
        let mut checker = Checker::new(Vec::new(), &catalog, Bounds::default());
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "job-1", "namespace": "batch", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "pause"}]}
        }))
        .expect("pod");
        let start = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1);
        let at = |secs: i64| start + SignedDuration::from_secs(secs);
        let mut parked = crate::model::Batch::default();
        parked.parked.insert(
            "u1".to_owned(),
            crate::model::batch::Parked {
                pod: "batch/job-1".to_owned(),
                reason: "no room".to_owned(),
                config_fingerprint: 0,
                retry_at: at(600),
            },
        );
        let pods = std::slice::from_ref(&pod);
        // Ten minutes with a reason, checked every 5 s.
        for t in (0..=600).step_by(5) {
            checker.check_pending(at(t), pods, &[], &[], Some(&parked));
        }
        // The reason ends; the next batch is seconds away.
        checker.check_pending(at(605), pods, &[], &[], None);
        checker.check_pending(at(700), pods, &[], &[], None);
        assert_eq!(
            checker.count(Violation::PendingWithoutReason),
            0,
            "{:?}",
            checker.examples()
        );
        // No reason for longer than the grace: counted, once.
        checker.check_pending(at(726), pods, &[], &[], None);
        checker.check_pending(at(800), pods, &[], &[], None);
        assert_eq!(checker.count(Violation::PendingWithoutReason), 1);
        // A pod never given a reason is counted after the grace from its first sighting.
        let stray: Pod = serde_json::from_value(json!({
            "metadata": {"name": "stray", "namespace": "default", "uid": "u2"},
            "spec": {"containers": [{"name": "c", "image": "pause"}]}
        }))
        .expect("pod");
        let strays = std::slice::from_ref(&stray);
        checker.check_pending(at(1000), strays, &[], &[], None);
        checker.check_pending(at(1115), strays, &[], &[], None);
        assert_eq!(checker.count(Violation::PendingWithoutReason), 1);
        checker.check_pending(at(1125), strays, &[], &[], None);
        assert_eq!(checker.count(Violation::PendingWithoutReason), 2);
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// A soak without faults, run long enough for a fleet to exist.
    async fn warmed(minutes: i64) -> Soak {
        let options = SoakOptions {
            seed: 3,
            duration: SignedDuration::from_hours(10),
            faults: false,
            ..SoakOptions::default()
        };
        let mut soak = Soak::new(options).await.expect("soak");
        let until = soak.sim.now() + SignedDuration::from_mins(minutes);
        soak.run_until(until).await.expect("runs");
        assert_eq!(soak.checker.total(), 0, "{:?}", soak.checker.examples());
        soak
    }

    /// Moves the clock without running anything (so nothing repairs what a test broke) and checks.
    async fn later(soak: &mut Soak, d: SignedDuration) {
        soak.sim.clock.set(soak.sim.now() + d);
        soak.checker.check(&soak.sim).await;
    }

    fn counted(soak: &Soak, v: Violation, before: &BTreeMap<Violation, usize>) -> usize {
        soak.checker.count(v) - before.get(&v).copied().unwrap_or(0)
    }

    #[test]
    fn the_checker_counts_every_kind_of_violation_it_claims() {
        block_on(async {
            let mut soak = warmed(20).await;
            let claims = soak.store.claims().await.expect("claims");
            let registered: Vec<&Claim> = claims.iter().filter(|c| c.node_name.is_some()).collect();
            assert!(
                registered.len() >= 2,
                "a fleet after 20 minutes: {claims:?}"
            );

            // A second instance for a claim.
            let before = soak.checker.counts().clone();
            let first = soak
                .cloud
                .all_instances()
                .into_iter()
                .find(|i| i.instance.claim_id.is_some())
                .expect("an instance");
            let mut request = first.request.clone();
            request.client_token = format!("{}-again", request.client_token);
            soak.cloud.launch(&request).await.expect("launch");
            soak.checker.check(&soak.sim).await;
            assert_eq!(counted(&soak, Violation::LaunchedTwice, &before), 1);

            // Two pods of a budget allowing one disruption deleted gracefully at once.
            let before = soak.checker.counts().clone();
            let web: Vec<Pod> = soak
                .sim
                .cluster
                .inner()
                .all_pods()
                .into_iter()
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app"))
                        .is_some_and(|a| a == "web")
                })
                .filter(|p| is_pod_ready(p) && !is_terminating(p))
                .collect();
            assert!(web.len() >= 2, "{}", web.len());
            for p in &web[..2] {
                soak.sim
                    .cluster
                    .inner()
                    .delete_pod(&PodKey::of(p), Some(30))
                    .await
                    .expect("delete");
            }
            soak.checker.check(&soak.sim).await;
            assert!(
                counted(&soak, Violation::PdbBelowMinimum, &before) >= 1,
                "{:?}",
                soak.checker.examples()
            );

            // A pod nothing provisions (a scheduler nominated it elsewhere), and one the solver parks.
            let before = soak.checker.counts().clone();
            soak.sim
                .cluster
                .inner()
                .apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "400"}}}]}}))
                .expect("apply");
            soak.sim
                .cluster
                .inner()
                .update_pod("default", "stray", |p| {
                    p.status
                        .get_or_insert_with(Default::default)
                        .nominated_node_name = Some("elsewhere".into());
                });
            soak.sim
                .cluster
                .inner()
                .apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500"}}}]}}))
                .expect("apply");
            soak.checker.check(&soak.sim).await;
            // The solver parks the huge pod with its reason.
            soak.sim.run_for(SignedDuration::from_secs(30)).await;
            soak.checker.check(&soak.sim).await;
            later(&mut soak, SignedDuration::from_mins(3)).await;
            assert_eq!(
                counted(&soak, Violation::PendingWithoutReason, &before),
                1,
                "{:?}",
                soak.checker.examples()
            );
            assert_eq!(counted(&soak, Violation::PendingTooLong, &before), 0);
            later(&mut soak, SignedDuration::from_mins(18)).await;
            assert_eq!(
                counted(&soak, Violation::PendingWithoutReason, &before),
                1,
                "counted once per pod"
            );
            // Both pods, once each. (A pod the workload created just before
            // the clock jumped waits too long as well: nothing ran meanwhile.)
            let too_long = soak
                .checker
                .examples()
                .get(&Violation::PendingTooLong)
                .cloned()
                .unwrap_or_default();
            for name in ["default/huge ", "default/stray "] {
                assert_eq!(
                    too_long.iter().filter(|e| e.contains(name)).count(),
                    1,
                    "{name}: {too_long:?}"
                );
            }
            assert!(counted(&soak, Violation::PendingTooLong, &before) >= 2);

            // An instance of ours that no claim knows.
            let before = soak.checker.counts().clone();
            let mut ghost = first.request.clone();
            ghost.claim_id = "general-ghost".into();
            ghost.client_token = "general-ghost".into();
            soak.cloud.launch(&ghost).await.expect("launch");
            soak.checker.check(&soak.sim).await;
            later(&mut soak, SignedDuration::from_mins(4)).await;
            assert_eq!(
                counted(&soak, Violation::InstanceWithoutClaim, &before),
                0,
                "within the grace"
            );
            later(&mut soak, SignedDuration::from_mins(2)).await;
            assert_eq!(counted(&soak, Violation::InstanceWithoutClaim, &before), 1);

            // A claim that never got an instance, reserving far past its pool's limit.
            let before = soak.checker.counts().clone();
            let mut claim = registered[0].clone();
            claim.id = format!("{}-nobody", claim.pool);
            claim.instance = None;
            claim.node_name = None;
            claim.version = 1;
            claim.reservation.insert("cpu".into(), 1_000_000);
            soak.store
                .create_claim(&claim, &Limits::default())
                .await
                .expect("create");
            soak.checker.check(&soak.sim).await;
            assert_eq!(
                counted(&soak, Violation::LimitExceeded, &before),
                1,
                "{:?}",
                soak.checker.examples()
            );
            later(&mut soak, SignedDuration::from_mins(6)).await;
            assert_eq!(counted(&soak, Violation::ClaimWithoutInstance, &before), 1);
            assert_eq!(
                counted(&soak, Violation::LimitExceeded, &before),
                1,
                "one excursion, counted once"
            );

            // A voluntary removal started past its pool's budget.
            let before = soak.checker.counts().clone();
            let victim = registered[0];
            soak.sim
                .disruption_starts
                .push(super::super::simulation::DisruptionStart {
                    at: soak.sim.now(),
                    claim: victim.id.clone(),
                    pool: victim.pool.clone(),
                    reason: RemovalReason::Underutilized,
                    nodes: 5,
                    in_flight: 3,
                });
            soak.checker.check(&soak.sim).await;
            assert_eq!(
                counted(&soak, Violation::DisruptedAgainstBudget, &before),
                1
            );

            // A voluntary removal of a node that runs a do-not-disrupt pod.
            let before = soak.checker.counts().clone();
            let pods = soak.sim.cluster.inner().all_pods();
            let cache = pods
                .iter()
                .find(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app"))
                        .is_some_and(|a| a == "cache")
                        && node_of(p).is_some()
                })
                .expect("a cache pod runs");
            let node = node_of(cache).expect("bound").to_owned();
            let claim = claims
                .iter()
                .find(|c| c.node_name.as_deref() == Some(node.as_str()))
                .expect("its claim");
            let spec = RemovalSpec {
                claim_id: claim.id.clone(),
                pool: claim.pool.clone(),
                node: Some(node),
                instance_id: claim.instance_id().map(str::to_owned),
                reason: RemovalReason::Drifted,
                replace: true,
                deadline: None,
                avoid: Vec::new(),
                event_at: None,
                handover: false,
            };
            soak.store
                .put_command(None, &Command::new(spec, soak.sim.now()))
                .await
                .expect("command");
            soak.checker.check(&soak.sim).await;
            assert_eq!(
                counted(&soak, Violation::DisruptedAgainstDoNotDisrupt, &before),
                1
            );

            // A fleet far dearer than its pods need, for an hour.
            let before = soak.checker.counts().clone();
            let catalog = soak.cloud.catalog().await.expect("catalog");
            let dearest = catalog
                .offerings
                .iter()
                .max_by(|a, b| a.price.total_cmp(&b.price))
                .expect("offerings")
                .clone();
            for k in 0..10 {
                let mut r = first.request.clone();
                r.claim_id = format!("on-demand-dear{k}");
                r.client_token = r.claim_id.clone();
                r.options = vec![dearest.clone()];
                soak.cloud.launch(&r).await.expect("launch");
            }
            for _ in 0..61 {
                later(&mut soak, SignedDuration::from_mins(1)).await;
            }
            assert_eq!(
                counted(&soak, Violation::CostAboveBound, &before),
                1,
                "one excursion: {:?}",
                soak.checker.examples()
            );
            assert!(soak.checker.worst_window_ratio > soak.checker.bounds.cost_factor);
        });
    }

    #[test]
    fn fault_schedules_follow_the_seed_and_their_rates() {
        let start = Timestamp::UNIX_EPOCH;
        let a = Faults::new(5, start, SignedDuration::from_hours(24), true);
        let b = Faults::new(5, start, SignedDuration::from_hours(24), true);
        let c = Faults::new(6, start, SignedDuration::from_hours(24), true);
        assert_eq!(a.due, b.due);
        assert_ne!(a.due, c.due);
        assert!(
            Faults::new(5, start, SignedDuration::from_hours(24), false)
                .due
                .is_empty()
        );
        let spot = a
            .due
            .iter()
            .filter(|(_, k)| *k == FaultKind::SpotInterruption)
            .count();
        // 1.5 an hour over 24 hours: 36 expected; a Poisson count within ±50 %.
        assert!((18..=54).contains(&spot), "{spot}");
        assert!(
            a.due
                .iter()
                .all(|(t, _)| *t >= start + SignedDuration::from_mins(10)
                    && *t < start + SignedDuration::from_hours(24))
        );
        for (kind, _) in FaultKind::RATES {
            assert!(
                a.due.iter().any(|(_, k)| *k == kind),
                "{kind:?} never scheduled in a day"
            );
        }
    }
}

#[cfg(test)]
mod soak_tests {
    use super::*;

    /// Simulated hours under faults, on a fixed seed: no invariant breaks.
    #[test]
    fn an_hour_of_chaos_breaks_no_invariant() {
        let options = SoakOptions {
            seed: 2,
            duration: SignedDuration::from_mins(60),
            faults: true,
            check_every: SignedDuration::from_secs(20),
            stop_after: None,
        };
        let report = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(run(options))
            .expect("soak");
        assert_eq!(report.total_violations(), 0, "{:#?}", report.examples);
        // The run did what a soak is for: faults struck, removals happened, Jobs ran.
        assert!(
            report.faults.values().sum::<usize>() >= 10,
            "{:?}",
            report.faults
        );
        assert!(
            !report.figures.removals.is_empty(),
            "{:?}",
            report.figures.removals
        );
        assert!(report.figures.interruption_messages.values().sum::<usize>() > 0);
        assert!(report.figures.job_pods_completed > 0);
        assert!(report.figures.peak_nodes >= 5);
    }
}
