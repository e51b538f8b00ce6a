//! The soak's invariants: each kind of violation, its bounds, and the
//! checker that looks at the simulation every few simulated seconds.

use super::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::config::NodePool;
use crate::config::disruption::DisruptionReason;
use crate::disruption::snapshot::DO_NOT_DISRUPT;
use crate::model::claim::{Claim, NODES, usage_of};
use crate::model::{InstanceState, PodKey, RemovalReason, SignedDuration, Timestamp, Usage};
use crate::ports::{Cloud, Cluster, Store};
use crate::sim::SimCloud;
use crate::sim::controllers::{is_finished, is_pod_ready, is_terminating, node_of, pdb_selects};
use crate::workload::fleet_bound::FleetBound;

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
pub(super) struct Waiting {
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
pub(super) const EXAMPLES: usize = 5;

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

    pub(super) fn flag(&mut self, v: Violation, key: &str, now: Timestamp, what: String) {
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

    pub(super) fn check_pending(
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

    pub(super) fn check_pdbs(
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

    pub(super) fn check_limits(
        &mut self,
        now: Timestamp,
        claims: &[Claim],
        usage: &BTreeMap<String, Usage>,
        instances: &[crate::sim::cloud::SimInstance],
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

    pub(super) fn check_instances(
        &mut self,
        now: Timestamp,
        claims: &[Claim],
        instances: &[crate::sim::cloud::SimInstance],
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

    pub(super) fn check_disruptions(
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

    pub(super) fn check_cost(
        &mut self,
        now: Timestamp,
        pods: &[Pod],
        instances: &[crate::sim::cloud::SimInstance],
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
