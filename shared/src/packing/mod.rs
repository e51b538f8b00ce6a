//! The packing solver: pending pods → placements on existing nodes, new
//! claims (a NodePool and the instance types that may serve it, cheapest
//! first) and the pods that cannot be placed, each with a reason.
//!
//! ## How it works
//! Each pod tries, in order: existing nodes; claims already planned in this
//! solve; a new claim from each NodePool by weight. A claim keeps every
//! instance type that still fits all of its pods and every requirement;
//! adding a pod narrows the requirements (a spread may pin the zone) and the
//! type set. Limits are reserved per claim as the per-resource maximum over
//! its launch options, so whatever type CreateFleet picks, a NodePool's
//! limits hold. A pod that fails everywhere has one preference relaxed
//! (Karpenter's order) and tries again; pods that still fail are retried
//! after the rest are placed (their affinity peers may have appeared), then
//! reported with a reason. At the end each claim is right-sized: its launch
//! options are the cheapest types that hold its pods.
//!
//! ## Strategies
//! `Strategy` names them: Karpenter's algorithm, the guide's fluid program
//! (`Guided`, `guide`), its whole-pod program (`Patterns`, `patterns`),
//! `Standalone`, and `Best`, the default, which solves several and keeps
//! the best plan — the rule is written once, on `Strategy::Best`.
//!
//! ## Why it is fast
//! Pods with identical constraints, requests and part in every topology
//! group share a *class* (pods of different apps with no topology share
//! one); classes are made once per batch and shared by every strategy's
//! solve (`Solver::fork`), and only the plan kept becomes launch requests.
//! Compatibility of a class's node requirements with each instance type is
//! a bitset computed once; which types still hold a claim's pods, which
//! offerings a join leaves (masks over zone and capacity type) and the
//! cheapest type left are bitset and mask arithmetic. Per class, a cursor
//! skips the prefix of claims that refused it for good (capacity only
//! shrinks, requirements only narrow, host-level topology counts only
//! grow), and a claim that refused it for now is not asked again until its
//! pods change. Refusals for
//! capacity, requirements or guidance are shared by every class with the
//! same requests, requirements and guidance (`AlikeKey`): the pods of 500
//! apps in 500 spreads ask each full claim once, not 500 times. The whole
//! account is in `shared/docs/packing.md` ("How the packer works, and
//! why"); the invariants are in ARCHITECTURE.md.

mod claims;
mod classes;
mod diagnosis;
pub mod guide;
mod guided;
mod interned;
pub mod knapsack;
mod offerings;
mod outcome;
pub mod patterns;
mod place;
mod pools;
mod repair;
mod room_index;
mod solve;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cloud::InstanceType;
use crate::config::NodePool;
use crate::resources::Resources;
use crate::scheduling::labels;
use crate::scheduling::pod::SchedPod;
use crate::scheduling::requirements::Requirements;
use crate::scheduling::taints::Taint;

use solve::Solver;
pub use solve::{STANDALONE_UP_TO, Strategy, solve};

/// The most instance types one claim offers CreateFleet.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// A NodePool with the instance types its NodeClass can launch.
///
/// The pool and its types are private and only read once made (a
/// different pool is a new input): what is derived from them alone is
/// computed once per input and kept ([`PoolInput::domain_offers`]), which
/// a disruption decision's many simulations of the same pools share.
#[derive(Debug, Clone)]
pub struct PoolInput {
    pool: NodePool,
    instance_types: Vec<InstanceType>,
    /// Capacity already launched by this pool (nodes and in-flight claims), for limits.
    pub in_use: Resources,
    pub nodes_in_use: i64,
    domain_offers: std::sync::OnceLock<Arc<[(String, String)]>>,
}

impl PoolInput {
    pub fn new(pool: NodePool, instance_types: Vec<InstanceType>) -> Self {
        PoolInput {
            pool,
            instance_types,
            in_use: Resources::default(),
            nodes_in_use: 0,
            domain_offers: std::sync::OnceLock::new(),
        }
    }

    /// The NodePool.
    pub fn pool(&self) -> &NodePool {
        &self.pool
    }

    /// The instance types its NodeClass can launch.
    pub fn instance_types(&self) -> &[InstanceType] {
        &self.instance_types
    }

    /// Every topology domain (label key, value) a node of this pool can
    /// have, each once, in the order first offered: the zones and capacity
    /// types of the offerings its requirements allow, the types'
    /// single-valued labels, and the finite values of its own
    /// requirements (a zone or capacity type listed without an offering
    /// only when it is the one value).
    pub(crate) fn domain_offers(&self) -> &[(String, String)] {
        self.domain_offers.get_or_init(|| {
            let mut offers = Offers::default();
            for it in &self.instance_types {
                for o in &it.offerings {
                    if o.allowed_by(&self.pool.requirements) {
                        offers.offer(labels::ZONE, &o.zone);
                        offers.offer(labels::CAPACITY_TYPE, &o.capacity_type);
                    }
                }
                for (k, r) in it.requirements.iter() {
                    if let Some(v) = r.single_value()
                        && k != labels::ZONE
                        && k != labels::CAPACITY_TYPE
                    {
                        offers.offer(k, v);
                    }
                }
            }
            for (k, r) in self.pool.requirements.iter() {
                if (k == labels::ZONE || k == labels::CAPACITY_TYPE) && r.single_value().is_none() {
                    // Zones and capacity types come from the offerings above: a
                    // listed zone without one is no domain a node can reach.
                    continue;
                }
                for v in r.finite_values().into_iter().flatten() {
                    offers.offer(k, v);
                }
            }
            offers.out.into()
        })
    }
}

/// (key, value) pairs, each kept once, in the order first offered.
#[derive(Default)]
struct Offers<'s> {
    seen: rustc_hash::FxHashSet<(&'s str, &'s str)>,
    out: Vec<(String, String)>,
}

impl<'s> Offers<'s> {
    fn offer(&mut self, k: &'s str, v: &'s str) {
        if self.seen.insert((k, v)) {
            self.out.push((k.to_owned(), v.to_owned()));
        }
    }
}

/// A node that exists or is being launched (an in-flight claim is a node
/// whose labels come from its requirements).
#[derive(Debug, Clone, Default)]
pub struct ExistingNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Requests of the pods already on it (DaemonSet pods included).
    pub requested: Resources,
    /// Its pods, for topology counts.
    pub pods: Vec<SchedPod>,
    /// Cordoned or being deleted: counts for topology, takes no pods.
    pub unschedulable: bool,
    /// Per CSI driver, the most volumes it attaches (its CSINode); its
    /// pods' `attachments` count against them. Empty: no limit (an
    /// in-flight claim, a node whose driver has not registered).
    pub volume_limits: crate::scheduling::volumes::VolumeLimits,
}

#[derive(Debug, Clone, Copy)]
pub struct SolveOptions {
    pub max_instance_types: usize,
    pub strategy: Strategy,
    pub preferences: PreferencePolicy,
    pub min_values: MinValuesPolicy,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            max_instance_types: MAX_INSTANCE_TYPES,
            strategy: Strategy::Best,
            preferences: PreferencePolicy::Respect,
            min_values: MinValuesPolicy::Strict,
        }
    }
}

/// Karpenter's `preferencePolicy` (the Settings' `preferencePolicy`):
/// `Respect` tries each pod with its preferences and relaxes them one by
/// one; `Ignore` plans every pod as if it had none (preferred node and pod
/// affinity, `ScheduleAnyway` spreads). Karpenter's `minValuesPolicy`:
/// `BestEffort` keeps a claim whose types cannot meet a `minValues`.
pub use crate::config::settings::{MinValuesPolicy, PreferencePolicy};

/// What the solver decided.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Pods placed on existing nodes: (pod index, node name).
    pub bindings: Vec<(usize, String)>,
    pub claims: Vec<NewClaim>,
    /// Pods that fit nowhere: (pod index, reason).
    pub unschedulable: Vec<(usize, String)>,
}

impl Plan {
    /// Sum of the new claims' cheapest prices, USD per hour.
    pub fn cost_per_hour(&self) -> f64 {
        self.claims.iter().map(NewClaim::price).sum()
    }

    pub fn scheduled(&self) -> usize {
        self.bindings.len() + self.claims.iter().map(|c| c.pods.len()).sum::<usize>()
    }
}

/// One instance type a claim may launch as, at its cheapest allowed offering.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOption {
    /// Shared with every other option naming the same type (a plan can hold
    /// thousands of claims × 60 options).
    pub instance_type: Arc<str>,
    pub zone: Arc<str>,
    pub capacity_type: Arc<str>,
    pub price: f64,
}

impl From<&LaunchOption> for crate::model::PricedOffering {
    /// What a launch request offers CreateFleet for this option.
    fn from(o: &LaunchOption) -> Self {
        crate::model::PricedOffering {
            reservation_ids: Vec::new(),
            instance_type: o.instance_type.to_string(),
            zone: o.zone.to_string(),
            capacity_type: o.capacity_type.to_string(),
            price: o.price,
        }
    }
}

/// A node to launch.
#[derive(Debug, Clone)]
pub struct NewClaim {
    pub pool: String,
    /// NodePool template ∩ every pod's requirements ∩ topology decisions;
    /// shared by the claims that require the same (a plan of thousands of
    /// claims holds a few hundred distinct sets).
    pub requirements: Arc<Requirements>,
    /// Cheapest first, at most `max_instance_types`.
    pub options: Vec<LaunchOption>,
    /// Pod indices.
    pub pods: Vec<usize>,
    /// Sum of the pods' requests (DaemonSet overhead not included).
    pub requests: Resources,
    /// Under `MinValuesPolicy::BestEffort`, some `minValues` of the pool
    /// could not be met by the types that hold the pods: `requirements`
    /// carries the count that was (Karpenter's relaxed claim).
    pub min_values_relaxed: bool,
}

impl NewClaim {
    /// The price of the cheapest option, what the fleet will most likely pay.
    pub fn price(&self) -> f64 {
        self.options.first().map_or(0.0, |o| o.price)
    }
}
