//! The faults the soak injects at seeded times, and how each is undone.

use super::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::model::{InstanceState, OfferingKey, SignedDuration, Timestamp};
use crate::scheduling::labels;
use crate::sim::rng::Rng;
use crate::sim::simulation::node_name;
use crate::sim::{FaultyCloud, FaultyStore, MemStore, SimCloud};

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
pub(super) enum Undo {
    Capacity(Vec<OfferingKey>),
    Boot(SignedDuration),
    NeverRegister(String),
    Ready(String),
    Events(FaultKind, SignedDuration),
    Messages(FaultKind),
}

/// The seeded fault schedule and what is in force.
#[derive(Debug)]
pub(super) struct Faults {
    rng: Rng,
    pub(super) due: VecDeque<(Timestamp, FaultKind)>,
    undo: Vec<(Timestamp, Undo)>,
    pub(super) injected: BTreeMap<FaultKind, usize>,
}

impl Faults {
    pub(super) fn new(seed: u64, start: Timestamp, duration: SignedDuration, on: bool) -> Faults {
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

    pub(super) fn next_due(&self) -> Option<Timestamp> {
        self.due
            .front()
            .map(|d| d.0)
            .into_iter()
            .chain(self.undo.iter().map(|u| u.0))
            .min()
    }

    pub(super) fn minutes(&mut self, lo: u64, hi: u64) -> SignedDuration {
        SignedDuration::from_mins(self.rng.range(lo, hi) as i64)
    }

    /// Injects what is due at `now`; undoes what ended.
    pub(super) async fn apply(&mut self, soak: &mut SoakParts<'_>, now: Timestamp) {
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
    pub(super) async fn inject(
        &mut self,
        soak: &mut SoakParts<'_>,
        kind: FaultKind,
        now: Timestamp,
    ) -> bool {
        let live: Vec<crate::sim::cloud::SimInstance> = soak
            .cloud
            .all_instances()
            .into_iter()
            .filter(|i| i.instance.state == InstanceState::Running)
            .collect();
        let registered: Vec<&crate::sim::cloud::SimInstance> = {
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
pub(super) struct SoakParts<'a> {
    pub(super) sim: &'a mut SoakSim,
    pub(super) cloud: &'a SimCloud,
    pub(super) faulty_cloud: &'a FaultyCloud<SimCloud>,
    pub(super) store: &'a FaultyStore<MemStore>,
}

impl SoakParts<'_> {
    pub(super) fn undo(&mut self, u: Undo) {
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
