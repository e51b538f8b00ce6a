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

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::controllers::node_of;
use super::{
    FaultyCloud, FaultyCluster, FaultyStore, MemStore, SimClock, SimCloud, SimCluster, SimSettings,
    Simulation, catalog, scenario,
};
use crate::model::{SignedDuration, Timestamp};
use crate::ports::Cloud;

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

mod checks;
mod faults;
mod workload;

pub use checks::{Bounds, Checker, Violation};
pub use faults::{FaultKind, NOT_MODELLED};
use faults::{Faults, SoakParts};
pub use workload::Workload;

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
mod tests;

#[cfg(test)]
mod soak_tests;
