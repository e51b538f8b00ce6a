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
//! ## Strategies, the cheapest plan kept
//! - **Karpenter's algorithm** (`Strategy::Karpenter`): pods largest first
//!   (CPU, then memory, then age), each into the claim with the fewest pods
//!   that still has a type holding it, whatever that type costs.
//! - **Guided** (`Strategy::Guided`): a linear program over the whole demand
//!   (`scheduling::guide`) picks the instance types that serve it most
//!   cheaply and how many pods of each kind go to each; on real catalogs
//!   that pairs CPU-heavy pods on c-family nodes with memory-heavy ones on
//!   r-family nodes, and takes large nodes where per-node overheads make
//!   them cheaper per usable core. Pods are then placed type by type, in
//!   the program's proportions, each first into room a claim already pays
//!   for, then onto claims of its type; a pod its type cannot take (a limit,
//!   a topology pin) joins a claim only if the claim's price rises by no
//!   more than a node of its own would cost. After placement a repair pass
//!   (`repair`) splits each claim whose pods fit more cheaply on smaller
//!   nodes — typically the last, half-full node of a type.
//!
//! - **Patterns** (`Strategy::Patterns`): the guide's whole-pod program
//!   (`scheduling::patterns`) chooses the nodes and the pods each holds,
//!   so whole pods leave less idle room; pods are placed node by node.
//!
//! `Strategy::Best` (the default) solves Patterns, and Guided too unless
//! the Patterns plan is within `CLOSE_TO_BOUND` of the whole-pod bound
//! the pattern program proves (when it does), and
//! Karpenter's, and keeps the cheapest plan,
//! so no plan is costlier than Karpenter's on the same input (Karpenter's
//! solve stops as soon as its claims cost more than the plan it would
//! have to beat). On batches of
//! up to `STANDALONE_UP_TO` pods it also solves `Strategy::Standalone`, in
//! which a pod joins a claim only if the claim's price rises by no more
//! than a node of its own would cost: a few pods on few nodes are where the
//! guide's fluid view is furthest from whole pods, and there no plan then
//! costs more than a node per pod.
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
//! apps in 500 spreads ask each full claim once, not 500 times.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::guide;
use super::labels;
use super::patterns;
use super::pod::{Constraints, HostPort, Relaxation, SchedPod};
use super::requirements::{Requirement, Requirements, Undefined};
use super::taints::{Effect, Taint, first_untolerated};
use super::topology::{Candidate, HostId, PodTopology, Topology, TopologyReject};
use crate::cloud::InstanceType;
use crate::config::NodePool;
use crate::resources::{self, Resources};

mod repair;
mod room_index;

/// The most instance types one claim offers CreateFleet.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// A NodePool with the instance types its NodeClass can launch.
#[derive(Debug, Clone)]
pub struct PoolInput {
    pub pool: NodePool,
    pub instance_types: Vec<InstanceType>,
    /// Capacity already launched by this pool (nodes and in-flight claims), for limits.
    pub in_use: Resources,
    pub nodes_in_use: i64,
}

impl PoolInput {
    pub fn new(pool: NodePool, instance_types: Vec<InstanceType>) -> Self {
        PoolInput {
            pool,
            instance_types,
            in_use: Resources::default(),
            nodes_in_use: 0,
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
}

/// How a solve plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Karpenter's algorithm: pods largest first, each into the in-flight
    /// claim with the fewest pods that still has a type holding it
    /// (whatever that type costs), else a new claim; each claim launches as
    /// the cheapest type that holds its pods.
    Karpenter,
    /// The guide's fluid linear program picks the types and how many pods
    /// of each kind each takes (see `Solver::guide`).
    Guided,
    /// The guide's whole-pod program (`scheduling::patterns`) picks the
    /// nodes and the pods each holds; the fluid split where it has no plan.
    Patterns,
    /// Pods largest first, each into the oldest claim whose price rises by
    /// no more than a node of its own would cost the pod: no claim costs
    /// more than its pods would alone. Sound on small batches, where whole
    /// pods on few nodes are far from the guide's fluid view.
    Standalone,
    /// The cheapest of Guided, Karpenter and, for batches of up to
    /// `STANDALONE_UP_TO` pods, Standalone: never costlier than Karpenter's
    /// plan, nor (on those batches) than a node per pod.
    Best,
}

/// How far over the whole-pod bound a `Strategy::Patterns` plan may be for
/// `Strategy::Best` to skip `Strategy::Guided`: no plan of those pods can
/// then be cheaper by more. (The fluid bound is no test: a plan 0.07 %
/// over it may still be beaten by a tenth of that.)
const CLOSE_TO_BOUND: f64 = 0.005;

/// The most pods `Strategy::Best` also solves `Standalone` for (a few
/// milliseconds there; it scans every claim for each pod, so it grows
/// quadratically).
pub const STANDALONE_UP_TO: usize = 500;

/// An instance type of a pool that a pod or claim is guided to: (pool, type).
type Target = (u32, u32);

/// How a class of pods is placed by a guided solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Guidance {
    /// Any claim whose price rises by no more than a node of its own
    /// would cost the pod (so no claim costs more than its pods would
    /// alone), else a new claim: for pods the guide gave no type or whose
    /// type cannot take them (a limit, a topology pin).
    Free,
    /// Only into room a claim of this pool already pays for: a guided
    /// claim's target still holds it, another claim's price does not rise.
    /// Never opens a claim. The guide's program sees pods as fluid; whole
    /// pods leave gaps (a node of four 3.5-core pods keeps 1.5 cores idle)
    /// that smaller pods fill here for nothing before their own type is
    /// opened. Only the pool the guide chose, so NodePool weights hold.
    Fill(u32),
    /// Only claims guided to this type, opening them as needed.
    To(Target),
}

#[derive(Debug, Clone, Copy)]
pub struct SolveOptions {
    pub max_instance_types: usize,
    pub strategy: Strategy,
    pub preferences: PreferencePolicy,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            max_instance_types: MAX_INSTANCE_TYPES,
            strategy: Strategy::Best,
            preferences: PreferencePolicy::Respect,
        }
    }
}

/// Karpenter's `preferencePolicy`: `Respect` tries each pod with its
/// preferences and relaxes them one by one; `Ignore` plans every pod as if
/// it had none (preferred node and pod affinity, `ScheduleAnyway` spreads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PreferencePolicy {
    #[default]
    Respect,
    Ignore,
}

/// What the solver decided.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Pods placed on existing nodes: (pod index, node name).
    pub bindings: Vec<(usize, String)>,
    pub claims: Vec<NewClaim>,
    /// Pods that fit nowhere: (pod index, reason).
    pub unschedulable: Vec<(usize, String)>,
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

impl From<&LaunchOption> for crate::ports::PricedOffering {
    /// What a launch request offers CreateFleet for this option.
    fn from(o: &LaunchOption) -> Self {
        crate::ports::PricedOffering {
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
}

impl NewClaim {
    /// The price of the cheapest option, what the fleet will most likely pay.
    pub fn price(&self) -> f64 {
        self.options.first().map_or(0.0, |o| o.price)
    }
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

/// Solves: which pods go on which existing nodes and which new claims.
/// Deterministic for the same input.
pub fn solve(
    pods: &[SchedPod],
    nodes: &[ExistingNode],
    pools: &[PoolInput],
    daemonsets: &[SchedPod],
    options: &SolveOptions,
) -> Plan {
    let splits = guide::SplitMemo::default();
    let batch = BatchPods::new(pods);
    let mut prototype = Solver::new(
        pods,
        &batch,
        nodes,
        pools,
        daemonsets,
        options,
        options.strategy,
        &splits,
    );
    prototype.classify();
    let solver = |strategy| prototype.fork(strategy);
    let run_with_bound = |strategy| solver(strategy).run_with_bound();
    let run = |strategy| run_with_bound(strategy).0;
    let outcome = match options.strategy {
        Strategy::Best => {
            // Pods in spreads or (anti-)affinity go where their groups let
            // them, not where the pattern program packs them: where they
            // are most of the batch (four fifths of W1's Karpenter mix) its
            // plan has not been the cheaper one, and only guided is solved.
            let grouped = pods
                .iter()
                .filter(|p| !p.spreads.is_empty() || !p.affinity.is_empty())
                .count();
            let guided = if 2 * grouped > pods.len() {
                run(Strategy::Guided)
            } else {
                let (patterns, bound) = run_with_bound(Strategy::Patterns);
                // The whole-pod plan within a hair of its proven bound is
                // kept without the fluid guide's solve (as dear as this one
                // again); else both are tried.
                let close =
                    bound.is_some_and(|bound| patterns.cost <= bound * (1.0 + CLOSE_TO_BOUND));
                if close && patterns.unschedulable.is_empty() {
                    patterns
                } else {
                    better(patterns, run(Strategy::Guided))
                }
            };
            // Karpenter's plan can only win by scheduling more pods or
            // costing less: with every pod placed, its solve stops once it
            // costs more.
            let karpenter = solver(Strategy::Karpenter);
            let best = if guided.unschedulable.is_empty() {
                match karpenter.run_within(guided.cost) {
                    Some(karpenter) => better(guided, karpenter),
                    None => guided,
                }
            } else {
                better(guided, karpenter.run_with_bound().0)
            };
            if pods.len() <= STANDALONE_UP_TO {
                better(best, run(Strategy::Standalone))
            } else {
                best
            }
        }
        strategy => run(strategy),
    };
    outcome.finish()
}

/// The outcome that schedules more pods, then costs less, then has fewer
/// claims; `a` on a tie.
fn better<'a>(a: Outcome<'a>, b: Outcome<'a>) -> Outcome<'a> {
    let key = |o: &Outcome| (o.scheduled(), -o.cost, -(o.claims.len() as i64));
    if key(&b) > key(&a) { b } else { a }
}

/// A solve's plan before its claims are turned into launch requests:
/// enough to compare with another strategy's. Only the one kept is
/// finished (thousands of claims × 60 launch options).
struct Outcome<'a> {
    pools: Vec<PoolState<'a>>,
    options: &'a SolveOptions,
    claims: Vec<Claim>,
    bindings: Vec<(usize, String)>,
    unschedulable: Vec<(usize, String)>,
    /// What the finished plan's `cost_per_hour` will be: per claim, the
    /// price of its cheapest type (its first launch option).
    cost: f64,
}

impl Outcome<'_> {
    fn scheduled(&self) -> usize {
        self.bindings.len() + self.claims.iter().map(|c| c.pods.len()).sum::<usize>()
    }

    fn finish(mut self) -> Plan {
        let claims = std::mem::take(&mut self.claims);
        let claims = claims.into_iter().map(|c| self.launch_request(c)).collect();
        let plan = Plan {
            bindings: self.bindings,
            claims,
            unschedulable: self.unschedulable,
        };
        // Strategies were compared by this cost: it must be the plan's.
        debug_assert!(
            (plan.cost_per_hour() - self.cost).abs() <= 1e-9 * self.cost.max(1.0),
            "{} vs {}",
            plan.cost_per_hour(),
            self.cost
        );
        plan
    }

    /// Turns a claim into its launch request: types cheapest first, at most
    /// `max_instance_types`, keeping `minValues` satisfied.
    fn launch_request(&self, c: Claim) -> NewClaim {
        let ps = &self.pools[c.pool];
        // minValues may reach past the first options for a missing value.
        let first = c
            .reqs
            .iter()
            .all(|(_, r)| r.min_values.is_none())
            .then_some(self.options.max_instance_types);
        let cheapest = ps.priced_types(&c.types, ps.offerings.of(&c.reqs), first);
        let types = &ps.input.instance_types;
        let kept =
            truncate_keeping_min_values(cheapest, self.options.max_instance_types, &c.reqs, types);
        let options = kept
            .into_iter()
            .map(|(price, t, oi)| {
                let (zone, capacity_type) = ps.names.offering(t, oi);
                LaunchOption {
                    instance_type: ps.names.types[t].clone(),
                    zone,
                    capacity_type,
                    price,
                }
            })
            .collect();
        NewClaim {
            pool: ps.input.pool.name.clone(),
            requirements: c.reqs,
            options,
            pods: c.pods,
            requests: c.used,
        }
    }
}

/// What decides where a class's pods may go. Fixed for a batch: built
/// once and shared by every solve's copy of the class (`Solver::fork`).
#[derive(Debug)]
struct Shape {
    constraints: Constraints,
    requests: Resources,
    ports: Vec<HostPort>,
    topo: PodTopology,
    /// Refusals by hosts are final (all topology is host-level).
    host_level: bool,
    /// Its admission depends only on the claim's topology signature (no hostname group).
    domain_only: bool,
    /// Interned node requirements, the key of the compatibility bitsets.
    req_id: u32,
    /// Per pool: tolerates its taints.
    tolerates: Vec<bool>,
}

/// The shared view of pods with identical constraints, labels and requests,
/// and what one solve has learnt of where they fit.
#[derive(Debug)]
struct Class {
    shape: Arc<Shape>,
    /// Claims (and nodes) before these indices refused this class for good.
    claim_cursor: usize,
    node_cursor: usize,
    /// Other claims that refused this class for good.
    refused: FixedBitSet,
    /// Claims that refused this class for now, with their pod count then.
    /// Without topology a refusal depends only on the claim, and claims only
    /// grow: while the count is unchanged, the answer is the same. Keeps
    /// thousands of identical pods from re-trying hundreds of full claims.
    refused_at: FxHashMap<u32, u32>,
    /// Per pool: index into `Solver::compat_sets`, computed on first use.
    compat: Vec<Option<u32>>,
    /// Per pool: the price of the cheapest node that holds one such pod alone.
    alone: Vec<Option<f64>>,
    /// Per pool: the pool generation at which its limits left no type for this class.
    limited_at: Vec<Option<u64>>,
    /// Where it may go in a guided solve.
    guidance: Guidance,
    /// Index into `Solver::alike`.
    alike: u32,
}

/// What makes two pods place alike: the same constraints, requests and
/// ports, and the same part in every topology group. Pods of different
/// apps (labels) with no topology in common share one class, so its cursors
/// and refusals serve all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ShapeKey {
    constraints: Constraints,
    requests: Resources,
    ports: Vec<HostPort>,
    topo: PodTopology,
}

impl Class {
    /// The same pods under another guidance, with nothing yet refused.
    fn guided(&self, guidance: Guidance) -> Class {
        Class {
            guidance,
            alike: u32::MAX,
            ..self.forked()
        }
    }

    /// The same class for another solve: nothing refused, what depends on
    /// the class and pools alone (`compat`, `alone`) kept.
    fn forked(&self) -> Class {
        Class {
            shape: self.shape.clone(),
            claim_cursor: 0,
            node_cursor: 0,
            refused: FixedBitSet::new(),
            refused_at: FxHashMap::default(),
            compat: self.compat.clone(),
            alone: self.alone.clone(),
            limited_at: vec![None; self.limited_at.len()],
            guidance: self.guidance,
            alike: self.alike,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClassKey {
    constraints: Constraints,
    requests: Resources,
    namespace: String,
    labels: BTreeMap<String, String>,
    ports: Vec<HostPort>,
}

/// A pod's fields that decide its `ClassKey` at its first relaxation, by
/// reference: pods equal in these are placed alike, so their key is built
/// once (pods equal in their keys but not in these only cost a lookup).
#[derive(PartialEq, Eq, Hash)]
struct PodFields<'a> {
    requests: &'a Resources,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    node_selector: &'a Requirements,
    required_terms: &'a [Requirements],
    preferred_terms: &'a [(i32, Requirements)],
    tolerations: &'a [super::taints::Toleration],
    spreads: &'a [super::pod::Spread],
    affinity: &'a [super::pod::AffinityTerm],
    host_ports: &'a [HostPort],
    volume: &'a Requirements,
}

impl<'a> PodFields<'a> {
    fn of(p: &'a SchedPod) -> Self {
        PodFields {
            requests: &p.requests,
            namespace: &p.pod.namespace,
            labels: &p.labels,
            node_selector: &p.node_selector,
            required_terms: &p.required_terms,
            preferred_terms: &p.preferred_terms,
            tolerations: &p.tolerations,
            spreads: &p.spreads,
            affinity: &p.affinity,
            host_ports: &p.host_ports,
            volume: &p.volume,
        }
    }
}

/// The batch's pods as every strategy's solve reads them, worked out once:
/// grouped by `PodFields` (per pod its group, per group one member), and
/// in Karpenter's order.
#[derive(Debug)]
struct BatchPods {
    group_of: Vec<u32>,
    representatives: Vec<u32>,
    /// Karpenter's pod order: CPU, then memory, descending; then age, then name.
    largest_first: Vec<usize>,
}

impl BatchPods {
    fn new(pods: &[SchedPod]) -> Self {
        let mut index: FxHashMap<PodFields, u32> = FxHashMap::default();
        let mut representatives = Vec::new();
        let group_of = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                *index.entry(PodFields::of(p)).or_insert_with(|| {
                    representatives.push(i as u32);
                    representatives.len() as u32 - 1
                })
            })
            .collect();
        let mut largest_first: Vec<usize> = (0..pods.len()).collect();
        largest_first.sort_by(|&a, &b| {
            let (pa, pb) = (&pods[a], &pods[b]);
            pb.requests
                .cpu_millis
                .cmp(&pa.requests.cpu_millis)
                .then_with(|| pb.requests.memory_bytes.cmp(&pa.requests.memory_bytes))
                .then_with(|| pa.created_millis.cmp(&pb.created_millis))
                .then_with(|| pa.pod.cmp(&pb.pod))
        });
        BatchPods {
            group_of,
            representatives,
            largest_first,
        }
    }
}

#[derive(Debug, Clone)]
struct PoolState<'a> {
    input: &'a PoolInput,
    /// Allocatable minus the DaemonSet pods that would run there, per type.
    room: Vec<Resources>,
    /// The types by their room: which hold a request (shared by forks).
    room_index: Arc<room_index::RoomIndex>,
    /// Types that the template allows, with an available offering and room.
    base: FixedBitSet,
    /// Σ over this solve's claims of the per-resource max capacity of their types.
    reserved: Resources,
    claims: i64,
    /// Bumped whenever `reserved` or `claims` change: a limit refusal holds
    /// until it moves.
    generation: u64,
    offerings: OfferingMasks,
    names: SharedNames,
    /// The types sold in a set of (zone, capacity type) pairs, by the pairs'
    /// mask (`OfferingMasks::allowed`): a claim pinned to a zone drops the
    /// types not sold there in one intersection, not a scan of its types.
    offered_index: FxHashMap<u128, usize>,
    offered_sets: Vec<FixedBitSet>,
    /// Types by `floor_price`, cheapest first.
    by_price: Vec<usize>,
    /// Per type: its cheapest available offering's price (any zone or capacity type).
    floor_price: Vec<f64>,
    /// Per mask of allowed offerings, the types with such an offering by
    /// their cheapest allowed price, then by `by_price`: the cheapest type
    /// of a set is its first member here. Made on first use.
    cheapest_orders: RefCell<FxHashMap<u128, PriceOrder>>,
}

/// Types as (price, type), cheapest first (`PoolState::cheapest_order`).
type PriceOrder = Rc<[(f64, u32)]>;

/// Instance type, zone and capacity type names as shared strings.
#[derive(Debug, Clone)]
struct SharedNames {
    types: Vec<Arc<str>>,
    /// Per type, per offering: (zone, capacity type).
    offerings: Vec<Vec<(Arc<str>, Arc<str>)>>,
}

impl SharedNames {
    fn new(types: &[InstanceType]) -> Self {
        let mut interned: FxHashMap<String, Arc<str>> = FxHashMap::default();
        let mut intern = |s: &str| -> Arc<str> {
            interned
                .entry(s.to_owned())
                .or_insert_with(|| Arc::from(s))
                .clone()
        };
        let offerings = types
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .map(|o| (intern(&o.zone), intern(&o.capacity_type)))
                    .collect()
            })
            .collect();
        SharedNames {
            types: types.iter().map(|t| Arc::from(t.name.as_str())).collect(),
            offerings,
        }
    }

    fn offering(&self, t: usize, oi: usize) -> (Arc<str>, Arc<str>) {
        self.offerings[t][oi].clone()
    }
}

/// Each type's available offerings as a bit mask over the pool's (zone,
/// capacity type) pairs, so "does this type still have an offering in the
/// zones left" is one AND instead of string comparisons.
#[derive(Debug, Clone)]
struct OfferingMasks {
    /// The pairs, at most 128; `None` when there are more (then checks fall back to strings).
    pairs: Option<Vec<(String, String)>>,
    masks: Vec<u128>,
    /// Per type, per offering: its pair's bit index (unavailable offerings: none).
    offering_bits: Vec<Vec<Option<u8>>>,
    /// Per zone, and per capacity type, the bits of its pairs.
    by_zone: Vec<(String, u128)>,
    by_capacity_type: Vec<(String, u128)>,
}

impl OfferingMasks {
    fn new(types: &[InstanceType]) -> Self {
        let pairs: BTreeSet<(String, String)> = types
            .iter()
            .flat_map(|t| {
                t.offerings
                    .iter()
                    .filter(|o| o.available)
                    .map(|o| (o.zone.clone(), o.capacity_type.clone()))
            })
            .collect();
        if pairs.len() > 128 {
            return OfferingMasks {
                pairs: None,
                masks: Vec::new(),
                offering_bits: Vec::new(),
                by_zone: Vec::new(),
                by_capacity_type: Vec::new(),
            };
        }
        let pairs: Vec<(String, String)> = pairs.into_iter().collect();
        let offering_bits: Vec<Vec<Option<u8>>> = types
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .map(|o| {
                        o.available
                            .then(|| {
                                pairs
                                    .iter()
                                    .position(|(z, c)| *z == o.zone && *c == o.capacity_type)
                            })
                            .flatten()
                            .map(|i| i as u8)
                    })
                    .collect()
            })
            .collect();
        let masks = offering_bits
            .iter()
            .map(|bits| bits.iter().flatten().fold(0u128, |m, i| m | (1 << i)))
            .collect();
        let bits_by = |value: &dyn Fn(&(String, String)) -> &String| {
            let mut out: Vec<(String, u128)> = Vec::new();
            for (i, pair) in pairs.iter().enumerate() {
                match out.iter_mut().find(|(v, _)| v == value(pair)) {
                    Some((_, bits)) => *bits |= 1 << i,
                    None => out.push((value(pair).clone(), 1 << i)),
                }
            }
            out
        };
        let by_zone = bits_by(&|(zone, _)| zone);
        let by_capacity_type = bits_by(&|(_, capacity_type)| capacity_type);
        OfferingMasks {
            pairs: Some(pairs),
            masks,
            offering_bits,
            by_zone,
            by_capacity_type,
        }
    }

    /// What the requirements allow of the pool's offerings.
    fn of<'r>(&self, reqs: &'r Requirements) -> Offered<'r> {
        match self.pairs {
            Some(_) => Offered::Mask(self.allowed(reqs)),
            None => Offered::Reqs(reqs),
        }
    }

    /// True when offering `oi` of type `t` is available and allowed.
    fn offering_allowed(
        &self,
        t: usize,
        oi: usize,
        offered: Offered,
        o: &crate::cloud::Offering,
    ) -> bool {
        match offered {
            Offered::Mask(allowed) => {
                self.offering_bits[t][oi].is_some_and(|b| allowed & (1 << b) != 0)
            }
            Offered::Reqs(reqs) => o.allowed_by(reqs),
        }
    }

    /// The pairs the requirements allow: those of an allowed zone and an
    /// allowed capacity type (a few set lookups, not one per pair).
    fn allowed(&self, reqs: &Requirements) -> u128 {
        let pick = |key: &str, masks: &[(String, u128)]| match reqs.get(key) {
            None => u128::MAX,
            Some(r) => masks
                .iter()
                .filter(|(v, _)| r.has(v))
                .fold(0, |m, (_, bits)| m | bits),
        };
        pick(labels::ZONE, &self.by_zone) & pick(labels::CAPACITY_TYPE, &self.by_capacity_type)
    }

    fn offered(&self, t: usize, offered: Offered, it: &InstanceType) -> bool {
        match offered {
            Offered::Mask(allowed) => self.masks[t] & allowed != 0,
            Offered::Reqs(reqs) => it.has_offering(reqs),
        }
    }
}

/// The offerings a claim may launch as: a mask over its pool's (zone,
/// capacity type) pairs (`OfferingMasks::allowed`; the mask of a join of
/// requirements is the AND of theirs), or, in a pool with too many pairs
/// for masks, the requirements themselves.
#[derive(Debug, Clone, Copy)]
enum Offered<'r> {
    Mask(u128),
    Reqs(&'r Requirements),
}

/// How a class's node requirements join a claim's requirements.
#[derive(Debug, Clone, Copy)]
struct Join {
    /// The claim can satisfy both.
    compatible: bool,
    /// The claim already requires each of them: joining adds nothing.
    implied: bool,
}

#[derive(Debug, Clone)]
struct Claim {
    pool: usize,
    host: HostId,
    /// Interned (`Solver::intern`): claims with equal requirements share them.
    reqs: Arc<Requirements>,
    types: FixedBitSet,
    used: Resources,
    /// Per resource, the most room any of its types has: a bound that
    /// refuses a pod before its types are looked at. After types are
    /// dropped it may be stale (`room_stale`), still an upper bound, and
    /// is taken again when a pod passes it.
    max_room: Resources,
    room_stale: bool,
    /// What the claim reserves against its pool's limits: under limits the
    /// capacity of its launch options; without, nothing reads it.
    max_capacity: Resources,
    pods: Vec<usize>,
    ports: Vec<HostPort>,
    /// Interned requirements on the topology keys (see `Solver::signature`).
    signature: u32,
    /// Its requirements, interned with the classes' (`Solver::req_id`).
    req_id: u32,
    /// What its requirements allow of the pool's offerings
    /// (`OfferingMasks::allowed`; unused in pools without masks).
    offer_mask: u128,
    /// The cheapest type's price under the claim's requirements, and that type.
    price: f64,
    cheapest: usize,
    /// The type the claim is filled to (guided solves): its pods always fit it.
    target: Option<u32>,
}

#[derive(Debug, Clone)]
struct NodeState {
    used: Resources,
    ports: Vec<HostPort>,
}

/// A refusal; `permanent` ones let the class cursor move past the host.
#[derive(Debug, Clone, Copy)]
struct Refused {
    permanent: bool,
    /// The refusal holds while the claim keeps its pods, whatever the
    /// topology counts do (a price refusal: narrowing can only raise it).
    stable: bool,
    /// A permanent refusal that holds for every class placed alike (see
    /// `AlikeKey`), whatever its topology: remembered once for all of them.
    alike: bool,
}

const FINAL: Refused = Refused {
    permanent: true,
    stable: true,
    alike: false,
};
/// Refused for its requests, node requirements, tolerations, ports or
/// guidance: every class alike is refused too, for good.
const FINAL_ALIKE: Refused = Refused {
    permanent: true,
    stable: true,
    alike: true,
};
const FOR_NOW: Refused = Refused {
    permanent: false,
    stable: false,
    alike: false,
};

/// Claims that refused the classes of one `AlikeKey` for good: all before
/// `cursor`, and those in `refused`.
#[derive(Debug)]
struct Alike {
    cursor: usize,
    refused: FixedBitSet,
}

/// What a claim's refusals before topology depend on. Pods of different
/// apps in zone or hostname spreads are classes of their own (each its own
/// group), but alike in this: claims that refused one of them for capacity
/// refuse the others too, so a new class starts past them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AlikeKey {
    requests: Resources,
    req_id: u32,
    tolerates: Vec<bool>,
    ports: Vec<HostPort>,
    guidance: Guidance,
}

struct Solver<'a> {
    pods: &'a [SchedPod],
    nodes: &'a [ExistingNode],
    options: &'a SolveOptions,
    /// `Karpenter` or `Guided`.
    strategy: Strategy,
    pools: Vec<PoolState<'a>>,
    /// Pools by weight (high first), then name.
    pool_order: Vec<usize>,
    node_state: Vec<NodeState>,
    claims: Vec<Claim>,
    /// For Karpenter's order: claim indices by pod count, each bucket by age.
    by_pods: Vec<Vec<u32>>,
    topology: Topology,
    classes: Vec<Class>,
    /// Shared by the solves forked from one (`Solver::fork`), copied on
    /// the first write of one (a class made for a relaxed pod).
    class_index: Arc<FxHashMap<ClassKey, usize>>,
    class_by_shape: Arc<FxHashMap<ShapeKey, usize>>,
    /// (Free class, guidance) → its guided variant.
    guided_classes: FxHashMap<(u32, Guidance), usize>,
    /// The batch's pods grouped by what decides their class (`BatchPods`).
    batch: &'a BatchPods,
    /// Per `BatchPods` group, its Free class at its first relaxation, once known.
    group_class: Vec<Option<u32>>,
    /// Per placed pod, the Free class it was placed as (at the relaxation
    /// it was placed at).
    placed: Vec<Option<u32>>,
    /// Split candidates by (pool, the pods' compatibility sets, the claim's
    /// requirements): see `repair`.
    split_memo: FxHashMap<(usize, Vec<u32>, u32), Rc<[(f64, usize)]>>,
    /// Re-packings by what decides them: see `repair::RepackKey`.
    repack_memo: FxHashMap<repair::RepackKey, Option<repair::Repack>>,
    /// `zone_scope` by the requirements it narrows and the pools tolerated.
    zone_scopes: FxHashMap<(Requirements, Vec<bool>), Requirements>,
    /// Node requirements of classes and requirements of claims, interned:
    /// their ids, and by id the one shared copy.
    req_index: FxHashMap<Arc<Requirements>, u32>,
    req_table: Vec<Arc<Requirements>>,
    /// (claim's, class's requirements) → how they join (see `Join`).
    joins: FxHashMap<(u32, u32), Join>,
    /// (pool, interned node requirements) → index into `compat_sets`.
    compat_index: FxHashMap<(usize, u32), u32>,
    /// Per pool and node requirements: the instance types that satisfy them,
    /// and what the requirements allow of the pool's offerings.
    compat_sets: Vec<FixedBitSet>,
    compat_masks: Vec<u128>,
    /// (compatibility set, requests) → `alone_price`.
    alone_prices: FxHashMap<(u32, Resources), f64>,
    /// Per `AlikeKey`, the claims that refused its classes for good.
    alike: Vec<Alike>,
    alike_index: FxHashMap<AlikeKey, u32>,
    /// Per pod, the type the guide sends it to (guided solves only).
    targets: Vec<Option<Target>>,
    /// What any whole-pod plan pays at least for the pods the guide
    /// serves, when the pattern program proves it (`patterns::Planned::bound`).
    bound: Option<f64>,
    any_prefer_no_schedule: bool,
    bindings: Vec<(usize, String)>,
    /// Topology answers within one `place` call (topology does not change
    /// until the pod is placed), by the claim's requirements on the keys.
    admit_memo: Vec<(u32, Result<Requirements, TopologyReject>)>,
    /// Every non-hostname topology key; a claim's requirements on them, interned, are its signature.
    topo_keys: Vec<String>,
    signatures: FxHashMap<Vec<Option<Requirement>>, u32>,
    /// What a plan of Karpenter's algorithm may cost before the solve is
    /// abandoned (`run_within`), and what its claims cost at least so far.
    budget: f64,
    committed: f64,
    /// The guide's split, shared by the solves of one batch.
    splits: &'a guide::SplitMemo,
}

impl<'a> Solver<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        pods: &'a [SchedPod],
        batch: &'a BatchPods,
        nodes: &'a [ExistingNode],
        pools: &'a [PoolInput],
        daemonsets: &'a [SchedPod],
        options: &'a SolveOptions,
        strategy: Strategy,
        splits: &'a guide::SplitMemo,
    ) -> Self {
        let pool_states: Vec<PoolState<'a>> = pools
            .iter()
            .map(|p| PoolState::new(p, daemonsets))
            .collect();
        let mut pool_order: Vec<usize> = (0..pools.len()).collect();
        pool_order.sort_by(|a, b| {
            pools[*b]
                .pool
                .weight
                .cmp(&pools[*a].pool.weight)
                .then_with(|| pools[*a].pool.name.cmp(&pools[*b].pool.name))
        });

        let mut topology = Topology::new(domain_universe(pools, nodes));
        // Pods of one group carry the same constraints: one registers them.
        for &i in &batch.representatives {
            let p = &pods[i as usize];
            topology.register(&p.spreads, &p.affinity, &p.pod.namespace);
        }
        for n in nodes {
            for p in &n.pods {
                // Only anti-affinity of running pods constrains newcomers.
                let anti: Vec<_> = p
                    .affinity
                    .iter()
                    .filter(|t| t.anti && t.weight.is_none())
                    .cloned()
                    .collect();
                topology.register(&[], &anti, &p.pod.namespace);
            }
        }
        let any_prefer_no_schedule = pools.iter().any(|p| {
            p.pool
                .taints
                .iter()
                .any(|t| t.effect == Effect::PreferNoSchedule)
        }) || nodes.iter().any(|n| {
            n.taints
                .iter()
                .any(|t| t.effect == Effect::PreferNoSchedule)
        });
        let mut solver = Solver {
            pods,
            nodes,
            options,
            strategy,
            pools: pool_states,
            pool_order,
            node_state: nodes
                .iter()
                .map(|n| NodeState {
                    used: n.requested.clone(),
                    ports: Vec::new(),
                })
                .collect(),
            claims: Vec::new(),
            by_pods: Vec::new(),
            topology,
            classes: Vec::new(),
            class_index: Arc::default(),
            class_by_shape: Arc::default(),
            guided_classes: FxHashMap::default(),
            batch,
            group_class: vec![None; batch.representatives.len()],
            placed: vec![None; pods.len()],
            split_memo: FxHashMap::default(),
            repack_memo: FxHashMap::default(),
            zone_scopes: FxHashMap::default(),
            req_index: FxHashMap::default(),
            req_table: Vec::new(),
            joins: FxHashMap::default(),
            compat_index: FxHashMap::default(),
            compat_sets: Vec::new(),
            compat_masks: Vec::new(),
            alone_prices: FxHashMap::default(),
            any_prefer_no_schedule,
            targets: Vec::new(),
            bound: None,
            alike: Vec::new(),
            alike_index: FxHashMap::default(),
            bindings: Vec::new(),
            admit_memo: Vec::new(),
            topo_keys: Vec::new(),
            signatures: FxHashMap::default(),
            budget: f64::INFINITY,
            committed: 0.0,
            splits,
        };
        solver.topo_keys = solver.topology.domain_keys_all();
        // Pods already running count towards topology.
        for (i, n) in nodes.iter().enumerate() {
            for p in &n.pods {
                let anti: Vec<_> = p
                    .affinity
                    .iter()
                    .filter(|t| t.anti && t.weight.is_none())
                    .cloned()
                    .collect();
                let c = Constraints {
                    node: Requirements::new(),
                    spread_scope: None,
                    spreads: Vec::new(),
                    affinity: anti,
                    tolerations: Vec::new(),
                    ignore_prefer_no_schedule: false,
                };
                let pt = solver
                    .topology
                    .pod_topology(&c, &p.pod.namespace, &p.labels);
                solver.topology.record(
                    &pt,
                    Candidate::Node {
                        host: i as HostId,
                        labels: &n.labels,
                    },
                );
                solver.node_state[i]
                    .ports
                    .extend(p.host_ports.iter().copied());
            }
        }
        solver
    }

    /// Works out the class of every pod at its first relaxation (one pod of
    /// each `BatchPods` group), so that the solves forked from this one share
    /// them instead of each making its own.
    fn classify(&mut self) {
        for g in 0..self.batch.representatives.len() {
            let i = self.batch.representatives[g] as usize;
            let r = self.first_relaxation(i);
            self.base_class(i, &r);
        }
    }

    /// A solve of the same batch with `strategy`, from this one before it
    /// placed anything: what depends only on the batch (topology groups and
    /// counts of running pods, classes, interned requirements, compatible
    /// types) is shared or copied, what a solve learns starts empty.
    fn fork(&self, strategy: Strategy) -> Solver<'a> {
        debug_assert!(
            self.claims.is_empty() && self.bindings.is_empty(),
            "forked after placing"
        );
        Solver {
            pods: self.pods,
            nodes: self.nodes,
            options: self.options,
            strategy,
            pools: self.pools.clone(),
            pool_order: self.pool_order.clone(),
            node_state: self.node_state.clone(),
            claims: Vec::new(),
            by_pods: Vec::new(),
            topology: self.topology.clone(),
            classes: self.classes.iter().map(Class::forked).collect(),
            class_index: self.class_index.clone(),
            class_by_shape: self.class_by_shape.clone(),
            guided_classes: FxHashMap::default(),
            batch: self.batch,
            group_class: self.group_class.clone(),
            placed: vec![None; self.pods.len()],
            split_memo: FxHashMap::default(),
            repack_memo: FxHashMap::default(),
            zone_scopes: self.zone_scopes.clone(),
            req_index: self.req_index.clone(),
            req_table: self.req_table.clone(),
            joins: self.joins.clone(),
            compat_index: self.compat_index.clone(),
            compat_sets: self.compat_sets.clone(),
            compat_masks: self.compat_masks.clone(),
            alone_prices: self.alone_prices.clone(),
            alike: self
                .alike
                .iter()
                .map(|_| Alike {
                    cursor: 0,
                    refused: FixedBitSet::new(),
                })
                .collect(),
            alike_index: self.alike_index.clone(),
            targets: Vec::new(),
            bound: None,
            any_prefer_no_schedule: self.any_prefer_no_schedule,
            bindings: Vec::new(),
            admit_memo: Vec::new(),
            topo_keys: self.topo_keys.clone(),
            signatures: self.signatures.clone(),
            budget: f64::INFINITY,
            committed: 0.0,
            splits: self.splits,
        }
    }

    /// The plan, and the whole-pod bound on the pods it guided, if proven.
    fn run_with_bound(mut self) -> (Outcome<'a>, Option<f64>) {
        let failed = self.place_all();
        let bound = self.bound;
        (self.conclude(failed), bound)
    }

    /// The plan of Karpenter's algorithm, unless it would cost more than
    /// `budget`: the solve stops as soon as its claims cost more. A claim's
    /// price only rises as pods join it (its types and offerings only
    /// narrow) and nothing is repaired after, so what the claims cost so
    /// far is a lower bound of what the plan will cost.
    fn run_within(mut self, budget: f64) -> Option<Outcome<'a>> {
        debug_assert_eq!(self.strategy, Strategy::Karpenter);
        self.budget = budget;
        let failed = self.place_all();
        (!self.over_budget()).then(|| self.conclude(failed))
    }

    fn over_budget(&self) -> bool {
        // The margin absorbs the rounding of a running sum.
        self.committed > self.budget + 1e-6
    }

    fn conclude(mut self, failed: Vec<usize>) -> Outcome<'a> {
        self.settle_types();
        if self.strategy != Strategy::Karpenter {
            self.split_claims();
        }
        self.into_outcome(failed)
    }

    /// Places every pod it can; returns those it could not.
    fn place_all(&mut self) -> Vec<usize> {
        let mut failed = Vec::new();
        let order = match self.strategy {
            Strategy::Guided | Strategy::Patterns => {
                let (targets, order) = self.guide();
                self.targets = targets;
                order
            }
            _ => self.pod_order(),
        };
        for i in order {
            if self.over_budget() {
                return failed;
            }
            if !self.schedule(i) {
                failed.push(i);
            }
        }
        // Pods whose affinity peers were placed later get another chance.
        while !failed.is_empty() && !self.over_budget() {
            let before = failed.len();
            failed.retain(|&i| !self.schedule(i));
            if failed.len() == before {
                break;
            }
        }
        failed
    }

    /// Drops from each claim that `settles_late` the types that cannot hold
    /// its pods (`try_claim` leaves that to now). Its most room is then
    /// stale, and no one reads it after placement; nor its capacity, which
    /// only limits read (such claims are in pools without).
    fn settle_types(&mut self) {
        for c in &mut self.claims {
            let ps = &self.pools[c.pool];
            if settles_late(ps, c.target, &c.reqs) {
                ps.room_index.keep_holding(&c.used, &mut c.types, &ps.room);
                c.room_stale = true;
            }
        }
    }

    fn into_outcome(mut self, failed: Vec<usize>) -> Outcome<'a> {
        let unschedulable = failed.iter().map(|&i| (i, self.diagnose(i))).collect();
        // What each claim launches at: the price of its first option once finished.
        let cost = self
            .claims
            .iter()
            .map(|c| {
                self.pools[c.pool]
                    .cheapest_in(&c.types, &c.reqs)
                    .map_or(0.0, |(p, _)| p)
            })
            .sum();
        Outcome {
            pools: std::mem::take(&mut self.pools),
            options: self.options,
            claims: std::mem::take(&mut self.claims),
            bindings: std::mem::take(&mut self.bindings),
            unschedulable,
            cost,
        }
    }

    /// The type each pod is guided to: pods are grouped by the first pool
    /// (by weight) that can take them, the types of it they fit and what
    /// their requirements allow of zones and capacity types, and the guide's
    /// program splits each group over those types at their prices there.
    /// Pods the program cannot serve get no target.
    fn guide(&mut self) -> (Vec<Option<Target>>, Vec<usize>) {
        type OfferingKey = (Option<Requirement>, Option<Requirement>);
        let mut demands: Vec<guide::Demand> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut demand_index: FxHashMap<(usize, usize, Resources, OfferingKey), usize> =
            FxHashMap::default();
        let mut supplies: Vec<guide::Supply> = Vec::new();
        let mut supply_target: Vec<Target> = Vec::new();
        let mut supply_index: FxHashMap<(usize, usize, OfferingKey), usize> = FxHashMap::default();
        // Per class, its demand (none when no pool can take it): pods of
        // one class always share one.
        let mut class_demand: FxHashMap<usize, Option<usize>> = FxHashMap::default();
        for i in 0..self.pods.len() {
            let r = self.first_relaxation(i);
            let k = self.class_for(i, &r, Guidance::Free);
            if let Some(&g) = class_demand.get(&k) {
                if let Some(g) = g {
                    demands[g].count += 1;
                    members[g].push(i);
                }
                continue;
            }
            let Some(p) = self.pool_order.clone().into_iter().find(|&p| {
                let cls = &self.classes[k];
                cls.shape.tolerates[p]
                    && self.pools[p]
                        .input
                        .pool
                        .requirements
                        .compatible(&cls.shape.constraints.node, Undefined::WellKnownOnly)
                        .is_ok()
                    && !self.compat(p, k).is_clear()
            }) else {
                class_demand.insert(k, None);
                continue;
            };
            let compat_id = self.compat_id(p, k);
            let cls = &self.classes[k];
            let reqs = self.pools[p]
                .input
                .pool
                .requirements
                .intersection(&cls.shape.constraints.node);
            let offering_key: OfferingKey = (
                reqs.get(labels::ZONE).cloned(),
                reqs.get(labels::CAPACITY_TYPE).cloned(),
            );
            let key = (
                p,
                compat_id,
                cls.shape.requests.clone(),
                offering_key.clone(),
            );
            let g = match demand_index.get(&key) {
                Some(&g) => g,
                None => {
                    let ps = &self.pools[p];
                    let requests = &cls.shape.requests;
                    let mut open = Vec::new();
                    for t in self.compat_sets[compat_id]
                        .ones()
                        .filter(|&t| requests.fits_in(&ps.room[t]))
                    {
                        let c = match supply_index.get(&(p, t, offering_key.clone())) {
                            Some(&c) => c,
                            None => {
                                let Some(price) = ps.price_of(t, &reqs) else {
                                    continue;
                                };
                                supplies.push(guide::Supply {
                                    price,
                                    room: units(&ps.room[t]),
                                });
                                supply_target.push((p as u32, t as u32));
                                supply_index
                                    .insert((p, t, offering_key.clone()), supplies.len() - 1);
                                supplies.len() - 1
                            }
                        };
                        open.push(c);
                    }
                    demands.push(guide::Demand {
                        count: 0,
                        request: units(requests),
                        supplies: open,
                    });
                    members.push(Vec::new());
                    demand_index.insert(key, demands.len() - 1);
                    demands.len() - 1
                }
            };
            class_demand.insert(k, Some(g));
            demands[g].count += 1;
            members[g].push(i);
        }
        let mut targets = vec![None; self.pods.len()];
        // Demands no type can hold are left out: those pods are reported.
        let servable: Vec<usize> = (0..demands.len())
            .filter(|&g| !demands[g].supplies.is_empty())
            .collect();
        let kept: Vec<guide::Demand> = servable.iter().map(|&g| demands[g].clone()).collect();
        let split = self.splits.split(&kept, &supplies);
        if let Some(planned) = (self.strategy == Strategy::Patterns)
            .then(|| patterns::plan(&kept, &supplies, split.as_deref()))
            .flatten()
        {
            self.bound = planned.bound;
            return self.follow(
                planned.nodes,
                &servable,
                &members,
                &supply_target,
                &supplies,
                targets,
            );
        }
        let Some(split) = split else {
            return (targets, self.pod_order());
        };
        // Per supply, its pods by demand.
        let mut by_supply: Vec<Vec<Vec<usize>>> = vec![Vec::new(); supplies.len()];
        for (&g, shares) in servable.iter().zip(split) {
            let mut pods = members[g].iter();
            for (c, n) in shares {
                let taken: Vec<usize> = pods.by_ref().take(n as usize).copied().collect();
                for &i in &taken {
                    targets[i] = Some(supply_target[c]);
                }
                by_supply[c].push(taken);
            }
        }
        // The biggest supplies first; each one's pods interleaved in the
        // proportions of its demands, so every claim filled in turn gets
        // the program's mix (largest-first would fill the first claims with
        // CPU-heavy pods only, and leave their memory idle).
        let weight = |c: usize| {
            by_supply[c]
                .iter()
                .map(|pods| pods.len() as f64 * supplies[c].price)
                .sum::<f64>()
        };
        let mut supply_order: Vec<usize> = (0..supplies.len())
            .filter(|&c| !by_supply[c].is_empty())
            .collect();
        supply_order.sort_by(|&a, &b| weight(b).total_cmp(&weight(a)).then(a.cmp(&b)));
        let mut order = Vec::with_capacity(self.pods.len());
        for c in supply_order {
            order.extend(interleave(&by_supply[c]));
        }
        order.extend(
            self.pod_order()
                .into_iter()
                .filter(|&i| targets[i].is_none()),
        );
        (targets, order)
    }

    /// Targets and order from the pattern plan: node by node, the dearest
    /// supplies first, each node's pods together (larger first) so the
    /// claims fill as the program packed them.
    fn follow(
        &self,
        mut nodes: Vec<patterns::Node>,
        servable: &[usize],
        members: &[Vec<usize>],
        supply_target: &[Target],
        supplies: &[guide::Supply],
        mut targets: Vec<Option<Target>>,
    ) -> (Vec<Option<Target>>, Vec<usize>) {
        nodes.sort_by(|a, b| {
            supplies[b.supply]
                .price
                .total_cmp(&supplies[a.supply].price)
                .then(a.supply.cmp(&b.supply))
        });
        let mut next: Vec<usize> = vec![0; servable.len()];
        let mut order = Vec::with_capacity(self.pods.len());
        for n in &nodes {
            let start = order.len();
            for &(g, k) in &n.pods {
                let pods = &members[servable[g]][next[g]..next[g] + k as usize];
                next[g] += k as usize;
                for &i in pods {
                    targets[i] = Some(supply_target[n.supply]);
                }
                order.extend_from_slice(pods);
            }
            order[start..].sort_by(|&a, &b| larger_first(self.pods, a, b));
        }
        order.extend(
            self.pod_order()
                .into_iter()
                .filter(|&i| targets[i].is_none()),
        );
        (targets, order)
    }

    /// Karpenter's pod order (`BatchPods::largest_first`).
    fn pod_order(&self) -> Vec<usize> {
        self.batch.largest_first.clone()
    }

    /// Places one pod, relaxing its preferences as long as it does not fit.
    fn schedule(&mut self, i: usize) -> bool {
        let pod = &self.pods[i];
        let mut r = self.first_relaxation(i);
        let target = self.targets.get(i).copied().flatten();
        loop {
            if let Some(target) = target {
                // Pods in topology groups are not filled in: their groups
                // judge every claim anew (no refusal is remembered), so each
                // would scan every claim: on the W2 zonal mix that took three
                // times as long, for a plan within 1 % of the same cost.
                let base = self.base_class(i, &r);
                let fill = self.classes[base]
                    .shape
                    .topo
                    .is_empty()
                    .then_some(Guidance::Fill(target.0));
                for guidance in fill.into_iter().chain([Guidance::To(target)]) {
                    let k = self.class_for(i, &r, guidance);
                    if self.place(i, k) {
                        self.placed[i] = Some(self.base_class(i, &r) as u32);
                        return true;
                    }
                }
            }
            let k = self.class_for(i, &r, Guidance::Free);
            if self.place(i, k) {
                self.placed[i] = Some(k as u32);
                return true;
            }
            match pod.relax(&r) {
                Some(n)
                    if n.tolerate_prefer_no_schedule
                        && !r.tolerate_prefer_no_schedule
                        && !self.any_prefer_no_schedule =>
                {
                    return false;
                }
                Some(n) => r = n,
                None => return false,
            }
        }
    }

    /// The class of pod `i` at relaxation `r`, placed with `guidance`.
    fn class_for(&mut self, i: usize, r: &Relaxation, guidance: Guidance) -> usize {
        let base = self.base_class(i, r);
        self.variant(base, guidance)
    }

    /// Class `base` (a Free class) under `guidance`.
    fn variant(&mut self, base: usize, guidance: Guidance) -> usize {
        if guidance == Guidance::Free {
            return base;
        }
        if let Some(&k) = self.guided_classes.get(&(base as u32, guidance)) {
            return k;
        }
        let k = self.classes.len();
        let variant = self.classes[base].guided(guidance);
        self.classes.push(variant);
        self.set_alike(k);
        self.guided_classes.insert((base as u32, guidance), k);
        k
    }

    /// The `Guidance::Free` class of pod `i` at relaxation `r`; remembered
    /// per pod for its first relaxation, which most pods never leave.
    fn base_class(&mut self, i: usize, r: &Relaxation) -> usize {
        let first = *r == self.first_relaxation(i);
        let group = self.batch.group_of[i] as usize;
        if first && let Some(k) = self.group_class[group] {
            return k as usize;
        }
        let pod = &self.pods[i];
        let key = ClassKey {
            constraints: pod.constraints(r),
            requests: pod.requests.clone(),
            namespace: pod.pod.namespace.clone(),
            labels: pod.labels.clone(),
            ports: pod.host_ports.clone(),
        };
        let k = match self.class_index.get(&key) {
            Some(&k) => k,
            None => self.new_class(key),
        };
        if first {
            self.group_class[group] = Some(k as u32);
        }
        k
    }

    /// The relaxation a pod is first tried at.
    fn first_relaxation(&self, i: usize) -> Relaxation {
        match self.options.preferences {
            PreferencePolicy::Respect => Relaxation::default(),
            PreferencePolicy::Ignore => self.pods[i].without_preferences(),
        }
    }

    fn new_class(&mut self, key: ClassKey) -> usize {
        let topo = self
            .topology
            .pod_topology(&key.constraints, &key.namespace, &key.labels);
        let shape_key = ShapeKey {
            constraints: key.constraints.clone(),
            requests: key.requests.clone(),
            ports: key.ports.clone(),
            topo,
        };
        if let Some(&k) = self.class_by_shape.get(&shape_key) {
            Arc::make_mut(&mut self.class_index).insert(key, k);
            return k;
        }
        let topo = shape_key.topo.clone();
        let host_level = self.topology.host_level_only(&topo);
        let domain_only = !topo.is_empty() && self.topology.domain_only(&topo);
        let req_id = self.req_id(&key.constraints.node);
        let tolerates: Vec<bool> = self
            .pools
            .iter()
            .map(|p| {
                first_untolerated(
                    &p.input.pool.taints,
                    &key.constraints.tolerations,
                    key.constraints.ignore_prefer_no_schedule,
                )
                .is_none()
            })
            .collect();
        let mut constraints = key.constraints.clone();
        if constraints.spreads.iter().any(|s| s.key == labels::ZONE) {
            let key = (
                constraints
                    .spread_scope
                    .clone()
                    .unwrap_or_else(|| constraints.node.clone()),
                tolerates.clone(),
            );
            let scope = match self.zone_scopes.get(&key) {
                Some(scope) => scope.clone(),
                None => {
                    let scope = self.zone_scope(&constraints, &tolerates);
                    self.zone_scopes.insert(key, scope.clone());
                    scope
                }
            };
            constraints.spread_scope = Some(scope);
        }
        let k = self.classes.len();
        let shape = Arc::new(Shape {
            constraints,
            requests: key.requests.clone(),
            ports: key.ports.clone(),
            topo,
            host_level,
            domain_only,
            req_id,
            tolerates,
        });
        self.classes.push(Class {
            shape,
            claim_cursor: 0,
            refused_at: FxHashMap::default(),
            node_cursor: 0,
            refused: FixedBitSet::new(),
            compat: vec![None; self.pools.len()],
            alone: vec![None; self.pools.len()],
            limited_at: vec![None; self.pools.len()],
            guidance: Guidance::Free,
            alike: u32::MAX,
        });
        self.set_alike(k);
        Arc::make_mut(&mut self.class_index).insert(key, k);
        Arc::make_mut(&mut self.class_by_shape).insert(shape_key, k);
        k
    }

    /// Files class `k` under its `AlikeKey`.
    fn set_alike(&mut self, k: usize) {
        let cls = &self.classes[k];
        let key = AlikeKey {
            requests: cls.shape.requests.clone(),
            req_id: cls.shape.req_id,
            tolerates: cls.shape.tolerates.clone(),
            ports: cls.shape.ports.clone(),
            guidance: cls.guidance,
        };
        let next = self.alike.len() as u32;
        let id = *self.alike_index.entry(key).or_insert(next);
        if id == next {
            self.alike.push(Alike {
                cursor: 0,
                refused: FixedBitSet::new(),
            });
        }
        self.classes[k].alike = id;
    }

    /// The domains a zone spread counts, as kube-scheduler does with
    /// `nodeAffinityPolicy: Honor`: only zones where a node the pod could
    /// run on can exist — an existing node, or a type of a pool it tolerates
    /// that its requirements allow, offered there. (Counting a zone where no
    /// such type is sold would leave the pod waiting for it forever.)
    fn zone_scope(&self, c: &Constraints, tolerates: &[bool]) -> Requirements {
        // Without the volumes' zones (see `Constraints::spread_scope`).
        let mut scope = c.spread_scope.clone().unwrap_or_else(|| c.node.clone());
        let node_reqs = scope.clone();
        let mut zones: BTreeSet<&str> = self
            .nodes
            .iter()
            .filter(|n| labels_satisfy(&n.labels, &node_reqs))
            .filter_map(|n| n.labels.get(labels::ZONE).map(String::as_str))
            .collect();
        for (ps, _) in self.pools.iter().zip(tolerates).filter(|(_, t)| **t) {
            let reqs = ps.input.pool.requirements.intersection(&node_reqs);
            for t in ps.base.ones() {
                let it = &ps.input.instance_types[t];
                if !it.requirements.intersects(&reqs) {
                    continue;
                }
                for o in it.offerings.iter().filter(|o| o.available) {
                    if reqs.allows(labels::CAPACITY_TYPE, Some(&o.capacity_type))
                        && reqs.allows(labels::ZONE, Some(&o.zone))
                    {
                        zones.insert(o.zone.as_str());
                    }
                }
            }
        }
        let zones: Vec<String> = zones.into_iter().map(str::to_owned).collect();
        if let Ok(r) = Requirement::new(labels::ZONE, super::requirements::Operator::In, &zones) {
            scope.add(labels::ZONE, r);
        }
        scope
    }

    fn place(&mut self, i: usize, k: usize) -> bool {
        self.admit_memo.clear();
        // Existing nodes first.
        let mut advancing = true;
        for n in self.classes[k].node_cursor..self.nodes.len() {
            match self.try_node(i, k, n) {
                Ok(()) => return true,
                Err(r) if r.permanent && advancing => self.classes[k].node_cursor = n + 1,
                Err(_) => advancing = false,
            }
        }
        // Then claims planned in this solve.
        if self.strategy == Strategy::Karpenter {
            // Claims by pod count, then age; a bucket per count.
            let mut count = 0;
            while count < self.by_pods.len() {
                let mut pos = 0;
                while pos < self.by_pods[count].len() {
                    let ci = self.by_pods[count][pos] as usize;
                    if !self.classes[k].refused.contains(ci) && !self.refused_for_now(k, ci) {
                        match self.try_claim(i, k, ci) {
                            Ok(()) => return true,
                            Err(r) if r.permanent => self.refuse(k, ci),
                            Err(r) => self.refuse_for_now(k, ci, r),
                        }
                    }
                    pos += 1;
                }
                count += 1;
            }
        } else {
            let mut advancing = true;
            let a = self.classes[k].alike as usize;
            let mut ci = self.classes[k].claim_cursor.max(self.alike[a].cursor);
            self.classes[k].claim_cursor = ci;
            while ci < self.claims.len() {
                // Claims refused for good are skipped a word at a time: a pod
                // in a spread of its own may have thousands behind it.
                let free = next_unrefused(
                    &[&self.alike[a].refused, &self.classes[k].refused],
                    ci,
                    self.claims.len(),
                );
                if free > ci {
                    if self.alike[a].cursor == ci {
                        self.alike[a].cursor = next_unrefused(&[&self.alike[a].refused], ci, free);
                    }
                    if advancing {
                        self.classes[k].claim_cursor = free;
                    }
                    ci = free;
                    continue;
                }
                if self.refused_for_now(k, ci) {
                    advancing = false;
                } else {
                    match self.try_claim(i, k, ci) {
                        Ok(()) => return true,
                        Err(r) if r.permanent => {
                            if r.alike {
                                self.refuse_alike(a, ci);
                            }
                            if advancing {
                                self.classes[k].claim_cursor = ci + 1;
                            } else if !r.alike {
                                self.refuse(k, ci);
                            }
                        }
                        Err(r) => {
                            advancing = false;
                            self.refuse_for_now(k, ci, r);
                        }
                    }
                }
                ci += 1;
            }
        }
        // Then a new claim, NodePools by weight.
        for oi in 0..self.pool_order.len() {
            let p = self.pool_order[oi];
            if self.new_claim(i, k, p) {
                return true;
            }
        }
        false
    }

    fn refused_for_now(&self, k: usize, ci: usize) -> bool {
        self.classes[k].refused_at.get(&(ci as u32)) == Some(&(self.claims[ci].pods.len() as u32))
    }

    /// Remembers a transient refusal while the claim's pods stay the same:
    /// without topology any refusal depends only on the claim, and a stable
    /// one does whatever the topology counts.
    fn refuse_for_now(&mut self, k: usize, ci: usize, r: Refused) {
        if self.classes[k].shape.topo.is_empty() || r.stable {
            let pods = self.claims[ci].pods.len() as u32;
            self.classes[k].refused_at.insert(ci as u32, pods);
        }
    }

    /// Remembers that claim `ci` refuses class `k` for good.
    /// Remembers that claim `ci` refuses every class of `AlikeKey` `a` for good.
    fn refuse_alike(&mut self, a: usize, ci: usize) {
        let alike = &mut self.alike[a];
        if alike.cursor == ci {
            alike.cursor = ci + 1;
        } else {
            if alike.refused.len() <= ci {
                alike.refused.grow(self.claims.len().max(ci + 1));
            }
            alike.refused.insert(ci);
        }
    }

    fn refuse(&mut self, k: usize, ci: usize) {
        let refused = &mut self.classes[k].refused;
        if refused.len() <= ci {
            refused.grow(self.claims.len().max(ci + 1));
        }
        refused.insert(ci);
    }

    fn try_node(&mut self, i: usize, k: usize, n: usize) -> Result<(), Refused> {
        let node = &self.nodes[n];
        let cls = &self.classes[k];
        let state = &self.node_state[n];
        if node.unschedulable || !state.used.fits_with(&cls.shape.requests, &node.allocatable) {
            return Err(FINAL);
        }
        if first_untolerated(
            &node.taints,
            &cls.shape.constraints.tolerations,
            cls.shape.constraints.ignore_prefer_no_schedule,
        )
        .is_some()
        {
            return Err(FINAL);
        }
        if !labels_satisfy(&node.labels, &cls.shape.constraints.node)
            || ports_conflict(&state.ports, &cls.shape.ports)
        {
            return Err(FINAL);
        }
        let cand = Candidate::Node {
            host: n as HostId,
            labels: &node.labels,
        };
        if !cls.shape.topo.is_empty() {
            self.topology
                .admit(&cls.shape.topo, &cls.shape.constraints, cand)
                .map_err(|r| Refused {
                    permanent: r.permanent,
                    stable: false,
                    alike: false,
                })?;
        }
        let state = &mut self.node_state[n];
        state.used.add(&cls.shape.requests);
        state.ports.extend(cls.shape.ports.iter().copied());
        if !cls.shape.topo.is_empty() {
            self.topology.record(&cls.shape.topo, cand);
        }
        self.bindings.push((i, node.name.clone()));
        Ok(())
    }

    /// The index in `compat_sets` of the types of `pool` that class `k`'s node requirements allow.
    fn compat_id(&mut self, pool: usize, k: usize) -> usize {
        if let Some(id) = self.classes[k].compat[pool] {
            return id as usize;
        }
        let req_id = self.classes[k].shape.req_id;
        let id = match self.compat_index.get(&(pool, req_id)) {
            Some(id) => *id,
            None => {
                let node = &self.classes[k].shape.constraints.node;
                let ps = &self.pools[pool];
                let combined = ps.input.pool.requirements.intersection(node);
                let mut set = FixedBitSet::with_capacity(ps.input.instance_types.len());
                for t in ps.base.ones() {
                    let it = &ps.input.instance_types[t];
                    if it.requirements.intersects(&combined) && it.has_offering(&combined) {
                        set.insert(t);
                    }
                }
                let id = self.compat_sets.len() as u32;
                self.compat_sets.push(set);
                self.compat_masks.push(ps.offerings.allowed(node));
                self.compat_index.insert((pool, req_id), id);
                id
            }
        };
        self.classes[k].compat[pool] = Some(id);
        id as usize
    }

    fn compat(&mut self, pool: usize, k: usize) -> &FixedBitSet {
        let id = self.compat_id(pool, k);
        &self.compat_sets[id]
    }

    fn try_claim(&mut self, i: usize, k: usize, ci: usize) -> Result<(), Refused> {
        if !self.fits_max_room(k, ci) {
            return Err(FINAL_ALIKE);
        }
        let join = self.join(ci, k);
        {
            let c = &self.claims[ci];
            let cls = &self.classes[k];
            if !join.compatible {
                return Err(FINAL_ALIKE);
            }
            if ports_conflict(&c.ports, &cls.shape.ports) {
                return Err(FINAL_ALIKE);
            }
            let elsewhere = match cls.guidance {
                Guidance::To((p, t)) => p as usize != c.pool || c.target != Some(t),
                Guidance::Fill(p) => p as usize != c.pool,
                Guidance::Free => false,
            };
            if elsewhere {
                return Err(FINAL_ALIKE);
            }
            if c.target.is_some_and(|t| {
                !c.used
                    .fits_with(&cls.shape.requests, &self.pools[c.pool].room[t as usize])
            }) {
                return Err(FINAL_ALIKE);
            }
        }
        let pool = self.claims[ci].pool;
        let compat_id = self.compat_id(pool, k);
        if self.strategy != Strategy::Karpenter && self.classes[k].alone[pool].is_none() {
            let alone = self.alone_price(pool, compat_id, k);
            self.classes[k].alone[pool] = Some(alone);
        }
        let compat = &self.compat_sets[compat_id];
        let cls = &self.classes[k];
        let c = &self.claims[ci];
        let extra = if cls.shape.topo.is_empty() {
            Requirements::new()
        } else {
            let cand = Candidate::Claim {
                host: c.host,
                requirements: &c.reqs,
            };
            let answer = if cls.shape.domain_only {
                match self.admit_memo.iter().find(|(sig, _)| *sig == c.signature) {
                    Some((_, answer)) => answer.clone(),
                    None => {
                        let answer =
                            self.topology
                                .admit(&cls.shape.topo, &cls.shape.constraints, cand);
                        self.admit_memo.push((c.signature, answer.clone()));
                        answer
                    }
                }
            } else {
                self.topology
                    .admit(&cls.shape.topo, &cls.shape.constraints, cand)
            };
            answer.map_err(|r| Refused {
                permanent: r.permanent || cls.shape.host_level,
                stable: false,
                alike: false,
            })?
        };
        // Most joins add nothing the claim does not already require.
        let implied = |more: &Requirements| more.iter().all(|(key, r)| c.reqs.get(key) == Some(r));
        let adds = !(join.implied && implied(&extra));
        // Most tries are refused, so the whole join is built only once the
        // pod is admitted: until then offerings need only its zones and
        // capacity types, and minValues (rare) the whole of it.
        let joined = || {
            let mut r = c.reqs.intersection(&cls.shape.constraints.node);
            r.add_all(&extra);
            r
        };
        let min_values = |r: &Requirements| r.iter().any(|(_, r)| r.min_values.is_some());
        let full = (adds
            && (min_values(&c.reqs)
                || min_values(&cls.shape.constraints.node)
                || min_values(&extra)))
        .then(joined);
        // What the join allows of the pool's offerings. With masks it is the
        // AND of what the claim, the class and the topology allow, nothing
        // built; pools too varied for masks build the join's zone and
        // capacity-type requirements.
        let masks = self.pools[pool].offerings.pairs.is_some();
        let offering_join;
        let (offered, offerings_changed) = if !adds {
            (
                if masks {
                    Offered::Mask(c.offer_mask)
                } else {
                    Offered::Reqs(&c.reqs)
                },
                false,
            )
        } else if masks {
            let offerings = &self.pools[pool].offerings;
            let extra_mask = if extra.is_empty() {
                u128::MAX
            } else {
                offerings.allowed(&extra)
            };
            let allowed = c.offer_mask & self.compat_masks[compat_id] & extra_mask;
            (Offered::Mask(allowed), allowed != c.offer_mask)
        } else {
            offering_join = match &full {
                Some(full) => offering_keys(full),
                None => {
                    let mut r = offering_keys(&c.reqs);
                    r.add_all(&offering_keys(&cls.shape.constraints.node));
                    r.add_all(&offering_keys(&extra));
                    r
                }
            };
            let changed = offering_join.get(labels::ZONE) != c.reqs.get(labels::ZONE)
                || offering_join.get(labels::CAPACITY_TYPE) != c.reqs.get(labels::CAPACITY_TYPE);
            (Offered::Reqs(&offering_join), changed)
        };
        // minValues and limits are judged by `reqs`: the join's where any
        // minValues is set, else the claim's, which then has none either.
        let reqs = full.as_ref().unwrap_or(&c.reqs);
        let offered_types = match offered {
            Offered::Mask(allowed) if offerings_changed => self.pools[pool].offered_types(allowed),
            _ => None,
        };
        let ps = &self.pools[pool];
        // A target not offered under the join: refused before any copy.
        let target_lost = |t: u32| {
            !compat.contains(t as usize)
                || offered_types.is_some_and(|set| !ps.offered_sets[set].contains(t as usize))
        };
        if c.target.is_some_and(target_lost) {
            return Err(Refused {
                permanent: extra.is_empty() || cls.shape.host_level,
                stable: false,
                alike: extra.is_empty(),
            });
        }
        let mut need = c.used.clone();
        need.add(&cls.shape.requests);
        // The claim's types that the pod admits, that still hold the pods
        // and are offered (one copy: this runs for every claim tried). A
        // guided claim holds its target (checked above), prices by it and
        // reserves no limit, so which of its types still hold the pods can
        // wait until placement ends (`settle_types`): pods only join, and a
        // type that cannot hold them now never will. Without minValues,
        // whose count needs the exact set.
        let deferred = settles_late(ps, c.target, reqs);
        let mut kept = c.types.clone();
        if let Some(set) = offered_types {
            kept.intersect_with(&ps.offered_sets[set]);
        }
        kept.intersect_with(compat);
        if !deferred {
            ps.room_index.keep_holding(&need, &mut kept, &ps.room);
        }
        // Only pools too varied for offering masks check type by type.
        if offerings_changed && offered_types.is_none() {
            for t in c.types.ones().filter(|&t| {
                !ps.offerings
                    .offered(t, offered, &ps.input.instance_types[t])
            }) {
                kept.set(t, false);
            }
        }
        let off_target = c.target.is_some_and(|t| !kept.contains(t as usize));
        if kept.is_clear() || off_target || !min_values_hold(reqs, &kept, &ps.input.instance_types)
        {
            // Only a topology decision (a pinned zone) can make this transient.
            return Err(Refused {
                permanent: extra.is_empty() || cls.shape.host_level,
                stable: false,
                alike: extra.is_empty(),
            });
        }
        // Types dropped may have held the most room: taken again when needed.
        let room_stale = c.room_stale || kept.count_ones(..) != c.types.count_ones(..);
        // Guided solves judge price; Karpenter's algorithm does not.
        let judged = self.strategy != Strategy::Karpenter && c.target.is_none();
        let priced = judged || self.budget.is_finite();
        let (price, cheapest) = if !priced || (kept.contains(c.cheapest) && !offerings_changed) {
            (c.price, c.cheapest)
        } else {
            ps.cheapest_offered(&kept, offered)
                .unwrap_or((f64::INFINITY, usize::MAX))
        };
        if judged {
            // Filling uses room the claim already pays for; otherwise the
            // claim's price may rise by at most what the pod would cost on
            // a node of its own. (A guided claim grows to its target.)
            let allowed = match cls.guidance {
                Guidance::Fill(_) => 0.0,
                _ if c.pods.is_empty() => f64::INFINITY,
                _ => cls.alone[pool].unwrap_or(f64::INFINITY),
            };
            if price - c.price > allowed + 1e-9 {
                // Narrower zones or capacity types only raise the price, so a
                // refusal with none added stands until the claim changes.
                return Err(Refused {
                    permanent: false,
                    stable: !offerings_changed,
                    alike: false,
                });
            }
        }
        let max_capacity = if ps.input.pool.limits.is_empty() {
            c.max_capacity.clone()
        } else {
            // The launch's options move to larger types as the claim grows,
            // and so does what it reserves: the pool's limits must still hold.
            let capacity = ps.launch_capacity(&kept, offered, self.options.max_instance_types);
            if !capacity.fits_in(&c.max_capacity) {
                let mut others = ps.input.in_use.clone();
                others.add(&ps.reserved.saturating_sub(&c.max_capacity));
                let nodes = ps.input.nodes_in_use + ps.claims - 1;
                if ps
                    .input
                    .pool
                    .limits
                    .exceeded_by(&others, nodes, &capacity)
                    .is_some()
                {
                    return Err(FOR_NOW);
                }
            }
            capacity
        };
        let new_reqs = adds.then(|| full.unwrap_or_else(joined));
        let ports = cls.shape.ports.clone();
        let host = c.host;
        let old_pods = c.pods.len();
        let old_capacity = c.max_capacity.clone();
        let ps = &mut self.pools[pool];
        ps.reserved = ps.reserved.saturating_sub(&old_capacity);
        ps.reserved.add(&max_capacity);
        ps.generation += 1;
        if let Some(r) = new_reqs {
            let signature = self.signature(&r);
            let offer_mask = self.pools[pool].offerings.allowed(&r);
            let (req_id, r) = self.intern(r);
            let c = &mut self.claims[ci];
            c.offer_mask = offer_mask;
            c.reqs = r;
            c.signature = signature;
            c.req_id = req_id;
        }
        let c = &mut self.claims[ci];
        if self.budget.is_finite() {
            self.committed += price - c.price;
        }
        c.types = kept;
        c.price = price;
        c.cheapest = cheapest;
        c.used = need;
        c.room_stale = room_stale;
        c.max_capacity = max_capacity;
        c.pods.push(i);
        c.ports.extend(ports);
        if self.strategy == Strategy::Karpenter {
            self.move_bucket(ci, old_pods, old_pods + 1);
        }
        let cls = &self.classes[k];
        if !cls.shape.topo.is_empty() {
            let c = &self.claims[ci];
            self.topology.record(
                &cls.shape.topo,
                Candidate::Claim {
                    host,
                    requirements: &c.reqs,
                },
            );
        }
        Ok(())
    }

    /// Whether claim `ci` may have room for a pod of class `k` (and tolerates
    /// it): its pods and the pod fit the most room of its types.
    fn fits_max_room(&mut self, k: usize, ci: usize) -> bool {
        let cls = &self.classes[k];
        let c = &self.claims[ci];
        if !cls.shape.tolerates[c.pool] || !c.used.fits_with(&cls.shape.requests, &c.max_room) {
            return false;
        }
        if !c.room_stale {
            return true;
        }
        let ps = &self.pools[c.pool];
        let max_room = ps.room_index.max_room(&c.types, &ps.room);
        let c = &mut self.claims[ci];
        c.max_room = max_room;
        c.room_stale = false;
        c.used.fits_with(&cls.shape.requests, &c.max_room)
    }

    /// The price of the cheapest node of `pool` that holds one pod of class
    /// `k` alone; the same for every class with its requests and node
    /// requirements (`compat_id` stands for the pool and the requirements).
    fn alone_price(&mut self, pool: usize, compat_id: usize, k: usize) -> f64 {
        let cls = &self.classes[k];
        let key = (compat_id as u32, cls.shape.requests.clone());
        if let Some(&price) = self.alone_prices.get(&key) {
            return price;
        }
        let ps = &self.pools[pool];
        let reqs = ps
            .input
            .pool
            .requirements
            .intersection(&cls.shape.constraints.node);
        let compat = &self.compat_sets[compat_id];
        let mut fits = compat.clone();
        ps.room_index
            .keep_holding(&cls.shape.requests, &mut fits, &ps.room);
        let price = ps
            .cheapest_in(&fits, &reqs)
            .map_or(f64::INFINITY, |(p, _)| p);
        self.alone_prices.insert(key, price);
        price
    }

    /// The interned id of node requirements (a class's) or requirements (a claim's).
    fn req_id(&mut self, reqs: &Requirements) -> u32 {
        match self.req_index.get(reqs) {
            Some(&id) => id,
            None => self.intern(reqs.clone()).0,
        }
    }

    /// Requirements' interned id and their shared copy.
    fn intern(&mut self, reqs: Requirements) -> (u32, Arc<Requirements>) {
        if let Some(&id) = self.req_index.get(&reqs) {
            return (id, self.req_table[id as usize].clone());
        }
        let id = self.req_table.len() as u32;
        let shared = Arc::new(reqs);
        self.req_index.insert(shared.clone(), id);
        self.req_table.push(shared.clone());
        (id, shared)
    }

    /// How class `k`'s node requirements join claim `ci`'s requirements;
    /// asked at every join, answered once per pair of requirements.
    fn join(&mut self, ci: usize, k: usize) -> Join {
        let (c, cls) = (&self.claims[ci], &self.classes[k]);
        *self
            .joins
            .entry((c.req_id, cls.shape.req_id))
            .or_insert_with(|| {
                let node = &cls.shape.constraints.node;
                Join {
                    compatible: node.is_empty()
                        || c.reqs.compatible(node, Undefined::WellKnownOnly).is_ok(),
                    implied: node.iter().all(|(key, r)| c.reqs.get(key) == Some(r)),
                }
            })
    }

    /// The interned requirements on every topology key: claims with the same
    /// signature get the same answer from domain-level topology.
    fn signature(&mut self, reqs: &Requirements) -> u32 {
        let sig: Vec<Option<Requirement>> = self
            .topo_keys
            .iter()
            .map(|k| reqs.get(k).cloned())
            .collect();
        let next = self.signatures.len() as u32;
        *self.signatures.entry(sig).or_insert(next)
    }

    /// Moves claim `ci` between pod-count buckets (`usize::MAX` = none).
    fn move_bucket(&mut self, ci: usize, from: usize, to: usize) {
        let ci = ci as u32;
        if let Some(b) = self.by_pods.get_mut(from) {
            if let Ok(pos) = b.binary_search(&ci) {
                b.remove(pos);
            }
        }
        if to != usize::MAX {
            if self.by_pods.len() <= to {
                self.by_pods.resize_with(to + 1, Vec::new);
            }
            let b = &mut self.by_pods[to];
            let pos = b.binary_search(&ci).unwrap_or_else(|p| p);
            b.insert(pos, ci);
        }
    }

    /// Opens a claim from pool `p` for pod `i`; keeps it if the pod fits.
    fn new_claim(&mut self, i: usize, k: usize, p: usize) -> bool {
        let target = match self.classes[k].guidance {
            Guidance::Fill(_) => return false,
            Guidance::To(target) => Some(target),
            Guidance::Free => None,
        };
        if !self.classes[k].shape.tolerates[p] || target.is_some_and(|(tp, _)| tp as usize != p) {
            return false;
        }
        let ps = &self.pools[p];
        if ps
            .input
            .pool
            .requirements
            .compatible(
                &self.classes[k].shape.constraints.node,
                Undefined::WellKnownOnly,
            )
            .is_err()
        {
            return false;
        }
        let generation = self.pools[p].generation;
        if self.classes[k].limited_at[p] == Some(generation) {
            return false;
        }
        let types = match self.claim_types(p, k) {
            Some(t) => t,
            None => {
                self.classes[k].limited_at[p] = Some(generation);
                return false;
            }
        };
        if target.is_some_and(|(_, t)| !types.contains(t as usize)) {
            return false;
        }
        let ps = &self.pools[p];
        let max_room = ps.room_index.max_room(&types, &ps.room);
        // Only limits read what a claim reserves.
        let max_capacity = if ps.input.pool.limits.is_empty() {
            Resources::default()
        } else {
            ps.launch_capacity(
                &types,
                ps.offerings.of(&ps.input.pool.requirements),
                self.options.max_instance_types,
            )
        };
        let ci = self.claims.len();
        let input = self.pools[p].input;
        let signature = self.signature(&input.pool.requirements);
        let req_id = self.req_id(&input.pool.requirements);
        let reqs = self.req_table[req_id as usize].clone();
        let offer_mask = self.pools[p].offerings.allowed(&reqs);
        self.claims.push(Claim {
            signature,
            req_id,
            offer_mask,
            price: 0.0,
            cheapest: usize::MAX,
            target: target.map(|(_, t)| t),
            pool: p,
            host: (self.nodes.len() + ci) as HostId,
            reqs,
            types,
            used: Resources::default(),
            max_room,
            room_stale: false,
            max_capacity: max_capacity.clone(),
            pods: Vec::new(),
            ports: Vec::new(),
        });
        let ps = &mut self.pools[p];
        ps.reserved.add(&max_capacity);
        ps.claims += 1;
        ps.generation += 1;
        if self.strategy == Strategy::Karpenter {
            self.move_bucket(ci, usize::MAX, 0);
        }
        if self.try_claim(i, k, ci).is_ok() {
            return true;
        }
        // Undo the tentative claim.
        let c = self.claims.pop();
        if self.strategy == Strategy::Karpenter {
            self.move_bucket(ci, 0, usize::MAX);
        }
        let ps = &mut self.pools[p];
        if let Some(c) = c {
            ps.reserved = ps.reserved.saturating_sub(&c.max_capacity);
        }
        ps.claims -= 1;
        ps.generation += 1;
        false
    }

    /// The types a new claim from pool `p` may start with for class `k`:
    /// compatible, with an offering, and within the pool's remaining limits.
    fn claim_types(&mut self, p: usize, k: usize) -> Option<FixedBitSet> {
        let mut types = self.compat(p, k).clone();
        let ps = &self.pools[p];
        let limits = &ps.input.pool.limits;
        if !limits.is_empty() {
            let mut used = ps.input.in_use.clone();
            used.add(&ps.reserved);
            let nodes = ps.input.nodes_in_use + ps.claims;
            let within: Vec<usize> = types
                .ones()
                .filter(|&t| {
                    limits
                        .exceeded_by(&used, nodes, &ps.input.instance_types[t].capacity)
                        .is_none()
                })
                .collect();
            types.clear();
            for t in within {
                types.insert(t);
            }
        }
        (!types.is_clear()).then_some(types)
    }

    /// Why a pod fits nowhere, in words a Karpenter user recognises.
    fn diagnose(&mut self, i: usize) -> String {
        let pod = &self.pods[i];
        // Judge the most relaxed form of the pod.
        let mut r = Relaxation::default();
        while let Some(n) = pod.relax(&r) {
            r = n;
        }
        let k = self.class_for(i, &r, Guidance::Free);
        if self.pools.is_empty() {
            return "no NodePool exists".to_owned();
        }
        let mut reasons = Vec::new();
        for oi in 0..self.pool_order.len() {
            let p = self.pool_order[oi];
            let compat = self.compat(p, k).clone();
            let limited = self.claim_types(p, k).is_none();
            reasons.push(self.pool_reason(p, k, &compat, limited));
        }
        reasons.join("; ")
    }

    /// Why class `k` cannot get a new claim from pool `p`.
    fn pool_reason(&self, p: usize, k: usize, compat: &FixedBitSet, limited: bool) -> String {
        let ps = &self.pools[p];
        let name = &ps.input.pool.name;
        let cls = &self.classes[k];
        if let Some(t) = first_untolerated(
            &ps.input.pool.taints,
            &cls.shape.constraints.tolerations,
            true,
        ) {
            return format!("did not tolerate taint {t} of NodePool {name}");
        }
        if let Err(e) = ps
            .input
            .pool
            .requirements
            .compatible(&cls.shape.constraints.node, Undefined::WellKnownOnly)
        {
            return format!("incompatible with NodePool {name}: {e}");
        }
        let combined = ps
            .input
            .pool
            .requirements
            .intersection(&cls.shape.constraints.node);
        let wanted = cls.shape.constraints.node.summary_or(&combined);
        if compat.is_clear() {
            let any_type = ps
                .input
                .instance_types
                .iter()
                .any(|t| t.requirements.intersects(&combined));
            return if any_type {
                format!("no available offering satisfies {wanted} in NodePool {name}")
            } else {
                format!("no instance type satisfies {wanted} in NodePool {name}")
            };
        }
        let requests = &cls.shape.requests;
        let fitting: Vec<usize> = compat
            .ones()
            .filter(|&t| requests.fits_in(&ps.room[t]))
            .collect();
        if fitting.is_empty() {
            let largest = compat
                .ones()
                .map(|t| &ps.room[t])
                .max_by_key(|r| (r.cpu_millis, r.memory_bytes));
            let over = largest
                .map(|l| requests.exceeding(l).join(", "))
                .unwrap_or_default();
            return format!(
                "no instance type in NodePool {name} has room for requests {requests} (too much {over}, DaemonSet overhead included)"
            );
        }
        if let Some((key, min, found)) =
            unmet_min_values(&combined, &fitting, &ps.input.instance_types)
        {
            return format!(
                "minValues {min} of {key} in NodePool {name} cannot be met: only {found} distinct value(s) among the instance types that fit"
            );
        }
        if limited {
            let mut used = ps.input.in_use.clone();
            used.add(&ps.reserved);
            let smallest = fitting
                .iter()
                .map(|&t| &ps.input.instance_types[t].capacity)
                .min_by_key(|c| (c.cpu_millis, c.memory_bytes));
            let nodes = ps.input.nodes_in_use + ps.claims;
            if let Some((res, limit)) =
                smallest.and_then(|cap| ps.input.pool.limits.exceeded_by(&used, nodes, cap))
            {
                let shown = match res {
                    resources::CPU => resources::format_cpu(limit),
                    resources::MEMORY => resources::format_bytes(limit),
                    _ => limit.to_string(),
                };
                return format!("NodePool {name} limit {res} {shown} reached");
            }
        }
        if !cls.shape.topo.is_empty() {
            let host = (self.nodes.len() + self.claims.len()) as HostId;
            let cand = Candidate::Claim {
                host,
                requirements: &ps.input.pool.requirements,
            };
            if let Err(t) = self
                .topology
                .admit(&cls.shape.topo, &cls.shape.constraints, cand)
            {
                return format!(
                    "would violate {} in NodePool {name}",
                    self.topology.describe(&t)
                );
            }
        }
        format!(
            "no instance type in NodePool {name} satisfies all of the pod's constraints together"
        )
    }
}

impl Requirements {
    /// The pod's own summary when it has requirements, else the combined one.
    fn summary_or(&self, combined: &Requirements) -> String {
        let mut own = self.clone();
        own.remove(labels::NODEPOOL);
        if own.is_empty() {
            combined.summary()
        } else {
            own.summary()
        }
    }
}

impl<'a> PoolState<'a> {
    /// (price, type, offering) of each type's cheapest allowed offering,
    /// cheapest first (ties by name): the order launch options take. With
    /// `first`, only that many of the cheapest (no full sort of a whole
    /// catalog's types for 60 options).
    fn priced_types(
        &self,
        types: &FixedBitSet,
        offered: Offered,
        first: Option<usize>,
    ) -> Vec<(f64, usize, usize)> {
        let cheapest_offering = |t: usize| {
            self.cheapest_offering(t, offered)
                .map(|(price, oi)| (price, t, oi))
        };
        let types_ = &self.input.instance_types;
        let order = |a: &(f64, usize, usize), b: &(f64, usize, usize)| {
            a.0.total_cmp(&b.0)
                .then_with(|| types_[a.1].name.cmp(&types_[b.1].name))
        };
        let Some(n) = first.filter(|&n| n > 0) else {
            let mut priced: Vec<(f64, usize, usize)> =
                types.ones().filter_map(cheapest_offering).collect();
            priced.sort_by(order);
            return priced;
        };
        if let Offered::Mask(allowed) = offered {
            // The mask's types by price: the first n of `types`, and any
            // priced as the n-th (names break the tie), are the n cheapest.
            let mut priced: Vec<(f64, usize, usize)> = Vec::with_capacity(n + 1);
            for &(price, t) in self.cheapest_order(allowed).iter() {
                if priced.len() >= n && price > priced[n - 1].0 {
                    break;
                }
                if types.contains(t as usize) {
                    priced.extend(cheapest_offering(t as usize));
                }
            }
            priced.sort_by(order);
            priced.truncate(n);
            return priced;
        }
        // Types in order of their cheapest price anywhere: once n are found
        // and the next type's floor is above the n-th price, none can enter.
        let mut priced: Vec<(f64, usize, usize)> = Vec::with_capacity(n + 1);
        for &t in &self.by_price {
            if priced.len() == n && self.floor_price[t] > priced[n - 1].0 {
                break;
            }
            if !types.contains(t) {
                continue;
            }
            if let Some(option) = cheapest_offering(t) {
                let at = priced.partition_point(|p| order(p, &option).is_lt());
                if at < n {
                    priced.insert(at, option);
                    priced.truncate(n);
                }
            }
        }
        priced
    }

    /// What a claim of a pool with limits reserves: the per-resource maximum
    /// capacity over the types its launch would offer (the `max_types`
    /// cheapest), which is every type CreateFleet could pick. Reserving the
    /// largest of *all* remaining types instead would let a 1,000-CPU limit
    /// admit three claims for 1-CPU pods.
    fn launch_capacity(
        &self,
        types: &FixedBitSet,
        offered: Offered,
        max_types: usize,
    ) -> Resources {
        let mut capacity = Resources::default();
        for (_, t, _) in self.priced_types(types, offered, Some(max_types)) {
            capacity.max_each(&self.input.instance_types[t].capacity);
        }
        capacity
    }

    /// Type `t`'s cheapest offering allowed, as (price, offering index);
    /// of equal prices, the first zone by name.
    fn cheapest_offering(&self, t: usize, offered: Offered) -> Option<(f64, usize)> {
        self.input.instance_types[t]
            .offerings
            .iter()
            .enumerate()
            .filter(|(oi, o)| self.offerings.offering_allowed(t, *oi, offered, o))
            .min_by(|a, b| {
                a.1.price
                    .total_cmp(&b.1.price)
                    .then_with(|| a.1.zone.cmp(&b.1.zone))
            })
            .map(|(oi, o)| (o.price, oi))
    }

    /// The price of type `t`'s cheapest offering the requirements allow.
    fn price_of(&self, t: usize, reqs: &Requirements) -> Option<f64> {
        self.cheapest_offering(t, self.offerings.of(reqs))
            .map(|(price, _)| price)
    }

    /// The cheapest (price, type) among `types` under the requirements.
    fn cheapest_in(&self, types: &FixedBitSet, reqs: &Requirements) -> Option<(f64, usize)> {
        self.cheapest_offered(types, self.offerings.of(reqs))
    }

    /// The cheapest (price, type) among `types` with an offering allowed;
    /// of equal prices, the type first by `by_price`. Types are visited by
    /// their cheapest price over all offerings, so the scan stops as soon
    /// as no later type can beat the best found.
    fn cheapest_offered(&self, types: &FixedBitSet, offered: Offered) -> Option<(f64, usize)> {
        if let Offered::Mask(allowed) = offered {
            let order = self.cheapest_order(allowed);
            return order
                .iter()
                .find(|(_, t)| types.contains(*t as usize))
                .map(|&(price, t)| (price, t as usize));
        }
        let mut best: Option<(f64, usize)> = None;
        for &t in &self.by_price {
            if best.is_some_and(|(p, _)| self.floor_price[t] >= p) {
                break;
            }
            if !types.contains(t) {
                continue;
            }
            if let Some((price, _)) = self.cheapest_offering(t, offered)
                && best.is_none_or(|(p, _)| price < p)
            {
                best = Some((price, t));
            }
        }
        best
    }

    /// The types with an offering `allowed` by the mask, cheapest first
    /// (see `cheapest_orders`).
    fn cheapest_order(&self, allowed: u128) -> PriceOrder {
        if let Some(order) = self.cheapest_orders.borrow().get(&allowed) {
            return order.clone();
        }
        let offered = Offered::Mask(allowed);
        let mut order: Vec<(f64, usize, u32)> = self
            .by_price
            .iter()
            .enumerate()
            .filter_map(|(rank, &t)| {
                self.cheapest_offering(t, offered)
                    .map(|(price, _)| (price, rank, t as u32))
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let order: PriceOrder = order.into_iter().map(|(price, _, t)| (price, t)).collect();
        self.cheapest_orders
            .borrow_mut()
            .insert(allowed, order.clone());
        order
    }

    fn new(input: &'a PoolInput, daemonsets: &[SchedPod]) -> Self {
        let pool = &input.pool;
        let daemons: Vec<(Requirements, &Resources)> = daemonsets
            .iter()
            .filter_map(|d| {
                let c = d.constraints(&Relaxation::default());
                let tolerated = first_untolerated(&pool.taints, &c.tolerations, true).is_none();
                let compatible = pool
                    .requirements
                    .compatible(&c.node, Undefined::WellKnownOnly)
                    .is_ok();
                (tolerated && compatible).then_some((c.node, &d.requests))
            })
            .collect();
        let mut base = FixedBitSet::with_capacity(input.instance_types.len());
        let mut room = Vec::with_capacity(input.instance_types.len());
        for (t, it) in input.instance_types.iter().enumerate() {
            let mut overhead = Resources::default();
            for (node, req) in &daemons {
                if it.requirements.intersects(node) {
                    overhead.add(req);
                }
            }
            let mut r = it.allocatable().saturating_sub(&overhead);
            if !overhead.fits_in(it.allocatable()) {
                r = Resources::default();
            }
            if r.pods > 0
                && it.requirements.intersects(&pool.requirements)
                && it.has_offering(&pool.requirements)
            {
                base.insert(t);
            }
            room.push(r);
        }
        let floor_price: Vec<f64> = input
            .instance_types
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .filter(|o| o.available)
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)
                    .unwrap_or(f64::INFINITY)
            })
            .collect();
        let mut by_price: Vec<usize> = (0..input.instance_types.len()).collect();
        by_price.sort_by(|a, b| {
            floor_price[*a]
                .total_cmp(&floor_price[*b])
                .then_with(|| a.cmp(b))
        });
        PoolState {
            input,
            room_index: Arc::new(room_index::RoomIndex::new(&room)),
            room,
            base,
            reserved: Resources::default(),
            claims: 0,
            generation: 0,
            offerings: OfferingMasks::new(&input.instance_types),
            names: SharedNames::new(&input.instance_types),
            offered_index: FxHashMap::default(),
            offered_sets: Vec::new(),
            by_price,
            floor_price,
            cheapest_orders: RefCell::default(),
        }
    }

    /// The index in `offered_sets` of the types with an offering among the
    /// `allowed` pairs; none when the pool has too many pairs for masks.
    fn offered_types(&mut self, allowed: u128) -> Option<usize> {
        self.offerings.pairs.as_ref()?;
        if let Some(&id) = self.offered_index.get(&allowed) {
            return Some(id);
        }
        let mut set = FixedBitSet::with_capacity(self.input.instance_types.len());
        for (t, mask) in self.offerings.masks.iter().enumerate() {
            set.set(t, mask & allowed != 0);
        }
        self.offered_sets.push(set);
        self.offered_index
            .insert(allowed, self.offered_sets.len() - 1);
        Some(self.offered_sets.len() - 1)
    }
}

/// Zones and capacity types from every pool's offerings, plus the labels of
/// existing nodes, for every key a topology constraint may use.
fn domain_universe(pools: &[PoolInput], nodes: &[ExistingNode]) -> FxHashMap<String, Vec<String>> {
    let mut u: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in pools {
        for it in &p.instance_types {
            for o in &it.offerings {
                if o.available
                    && p.pool.requirements.allows(labels::ZONE, Some(&o.zone))
                    && p.pool
                        .requirements
                        .allows(labels::CAPACITY_TYPE, Some(&o.capacity_type))
                {
                    u.entry(labels::ZONE.to_owned())
                        .or_default()
                        .insert(o.zone.clone());
                    u.entry(labels::CAPACITY_TYPE.to_owned())
                        .or_default()
                        .insert(o.capacity_type.clone());
                }
            }
            for (k, r) in it.requirements.iter() {
                if let Some(v) = r.single_value() {
                    if k != labels::ZONE && k != labels::CAPACITY_TYPE {
                        u.entry(k.to_owned()).or_default().insert(v.to_owned());
                    }
                }
            }
        }
        for (k, r) in p.pool.requirements.iter() {
            if let Some(v) = r.single_value() {
                u.entry(k.to_owned()).or_default().insert(v.to_owned());
            }
        }
    }
    for n in nodes {
        for (k, v) in &n.labels {
            u.entry(k.clone()).or_default().insert(v.clone());
        }
    }
    u.into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect()
}

/// The lists merged so that every prefix holds each list in proportion to
/// its length (a smooth weighted round robin).
fn interleave(lists: &[Vec<usize>]) -> Vec<usize> {
    let total: usize = lists.iter().map(Vec::len).sum();
    let mut taken = vec![0usize; lists.len()];
    let mut out = Vec::with_capacity(total);
    for step in 1..=total {
        // The list furthest behind its share of the first `step` items.
        let behind = |l: usize| (lists[l].len() * step) as f64 / total as f64 - taken[l] as f64;
        let Some(l) = (0..lists.len())
            .filter(|&l| taken[l] < lists[l].len())
            .max_by(|&a, &b| behind(a).total_cmp(&behind(b)).then(b.cmp(&a)))
        else {
            break;
        };
        out.push(lists[l][taken[l]]);
        taken[l] += 1;
    }
    out
}

/// Whether a claim's types are checked against its pods only once placement
/// ends (`Solver::settle_types`): a guided claim, in a pool without limits
/// (whose reservations need the exact set) and without `minValues` (whose
/// count does).
fn settles_late(ps: &PoolState, target: Option<u32>, reqs: &Requirements) -> bool {
    target.is_some()
        && ps.input.pool.limits.is_empty()
        && reqs.iter().all(|(_, r)| r.min_values.is_none())
}

/// Pods by CPU, then memory, descending; then by index.
fn larger_first(pods: &[SchedPod], a: usize, b: usize) -> std::cmp::Ordering {
    let (ra, rb) = (&pods[a].requests, &pods[b].requests);
    rb.cpu_millis
        .cmp(&ra.cpu_millis)
        .then(rb.memory_bytes.cmp(&ra.memory_bytes))
        .then(a.cmp(&b))
}

/// The first index in `from..end` in none of the sets (`end` when none), a
/// word at a time.
fn next_unrefused(sets: &[&FixedBitSet], from: usize, end: usize) -> usize {
    let bits = usize::BITS as usize;
    let mut word = from / bits;
    let mut mask = usize::MAX << (from % bits);
    while word * bits < end {
        let refused = sets.iter().fold(0, |all, set| {
            all | set.as_slice().get(word).copied().unwrap_or(0)
        });
        let free = !refused & mask;
        if free != 0 {
            return (word * bits + free.trailing_zeros() as usize).min(end);
        }
        word += 1;
        mask = usize::MAX;
    }
    end
}

/// Only the zone and capacity-type requirements: all that offerings depend on.
fn offering_keys(reqs: &Requirements) -> Requirements {
    let mut out = Requirements::new();
    for key in [labels::ZONE, labels::CAPACITY_TYPE] {
        if let Some(r) = reqs.get(key) {
            out.add(key, r.clone());
        }
    }
    out
}

/// Cores, GiB and pods: the guide's units.
fn units(r: &Resources) -> [f64; 3] {
    [
        r.cpu_millis as f64 / 1000.0,
        r.memory_bytes as f64 / resources::GIB as f64,
        r.pods as f64,
    ]
}

/// True when `r` equals `max` in some resource (removing it may lower the maximum).
/// A node with these labels meets the requirements (a missing label meets
/// only those that allow absence).
fn labels_satisfy(node_labels: &BTreeMap<String, String>, reqs: &Requirements) -> bool {
    reqs.iter().all(|(key, r)| match node_labels.get(key) {
        Some(v) => r.has(v),
        None => r.allows_absence(),
    })
}

fn ports_conflict(used: &[HostPort], wanted: &[HostPort]) -> bool {
    wanted.iter().any(|w| used.contains(w))
}

/// The first `minValues` the types cannot meet: (key, minValues, distinct values found).
fn unmet_min_values(
    reqs: &Requirements,
    types: &[usize],
    catalog: &[InstanceType],
) -> Option<(String, u32, usize)> {
    reqs.iter().find_map(|(key, r)| {
        let min = r.min_values?;
        let distinct: BTreeSet<&str> = types
            .iter()
            .filter_map(|&t| {
                catalog[t]
                    .requirements
                    .get(key)
                    .and_then(|r| r.single_value())
            })
            .collect();
        (distinct.len() < min as usize).then(|| (key.to_owned(), min, distinct.len()))
    })
}

/// True when every `minValues` of the requirements is met by the types kept.
fn min_values_hold(reqs: &Requirements, types: &FixedBitSet, catalog: &[InstanceType]) -> bool {
    reqs.iter().all(|(key, r)| match r.min_values {
        None => true,
        Some(min) => {
            let distinct: BTreeSet<&str> = types
                .ones()
                .filter_map(|t| {
                    catalog[t]
                        .requirements
                        .get(key)
                        .and_then(|r| r.single_value())
                })
                .collect();
            distinct.len() >= min as usize
        }
    })
}

/// The first `max` options, extended with the cheapest options that add a
/// missing value while some `minValues` is unmet. Options are
/// (price, type index, offering index), cheapest first.
fn truncate_keeping_min_values(
    options: Vec<(f64, usize, usize)>,
    max: usize,
    reqs: &Requirements,
    catalog: &[InstanceType],
) -> Vec<(f64, usize, usize)> {
    let min_keys: Vec<(&str, usize)> = reqs
        .iter()
        .filter_map(|(k, r)| r.min_values.map(|m| (k, m as usize)))
        .collect();
    if options.len() <= max || min_keys.is_empty() {
        return options.into_iter().take(max).collect();
    }
    let value = |t: usize, key: &str| {
        catalog[t]
            .requirements
            .get(key)
            .and_then(|r| r.single_value())
            .map(str::to_owned)
    };
    let mut kept = options;
    let mut rest = kept.split_off(max);
    for (key, min) in min_keys {
        let mut seen: BTreeSet<String> = kept.iter().filter_map(|o| value(o.1, key)).collect();
        let mut remaining = Vec::new();
        for o in rest {
            match value(o.1, key) {
                Some(v) if seen.len() < min && !seen.contains(&v) => {
                    seen.insert(v);
                    kept.push(o);
                }
                _ => remaining.push(o),
            }
        }
        rest = remaining;
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provisioning::plan::instance_types;
    use crate::workload::w2::{self, Capacity, Mix, PoolRequirements};

    proptest::proptest! {
        /// The word-at-a-time skip finds what a bit-by-bit scan finds, sets
        /// shorter than the range included.
        #[test]
        fn next_unrefused_is_the_first_index_in_no_set(
            a in proptest::collection::vec(proptest::bool::ANY, 0..200),
            b in proptest::collection::vec(proptest::bool::ANY, 0..200),
            from in 0usize..220,
            len in 0usize..220,
        ) {
            let set = |bits: &[bool]| bits.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| i).collect::<FixedBitSet>();
            let (a, b) = (set(&a), set(&b));
            let end = from + len;
            let expected = (from..end).find(|&i| !a.contains(i) && !b.contains(i)).unwrap_or(end);
            proptest::prop_assert_eq!(next_unrefused(&[&a, &b], from, end), expected);
        }
    }

    /// Pools with more (zone, capacity type) pairs than a mask holds judge
    /// offerings by requirements: the same answers as masks give. Each
    /// strategy is solved twice on one batch, once with the pool's masks
    /// taken away, and the plans must be the same.
    #[test]
    fn offerings_are_judged_alike_with_and_without_masks() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("embedded region");
        let daemons: Vec<SchedPod> = w2::daemon_pods()
            .iter()
            .map(|p| SchedPod::from_pod(p).expect("daemon pod"))
            .collect();
        for requirements in [PoolRequirements::Walkthrough, PoolRequirements::Open] {
            let pool = w2::pool(Capacity::SpotAndOnDemand, requirements);
            let zones = w2::zones(&pool, &catalog);
            let pools = vec![PoolInput::new(
                pool.clone(),
                instance_types(&pool, &catalog, &[]),
            )];
            for mix in [Mix::Zonal, Mix::Mixed] {
                let pods: Vec<SchedPod> = w2::pods(400, mix, 3, &zones)
                    .iter()
                    .map(|p| SchedPod::from_pod(p).expect("w2 pod"))
                    .collect();
                let options = SolveOptions::default();
                let splits = guide::SplitMemo::default();
                let batch = BatchPods::new(&pods);
                let mut prototype = Solver::new(
                    &pods,
                    &batch,
                    &[],
                    &pools,
                    &daemons,
                    &options,
                    Strategy::Best,
                    &splits,
                );
                prototype.classify();
                for strategy in [
                    Strategy::Guided,
                    Strategy::Patterns,
                    Strategy::Karpenter,
                    Strategy::Standalone,
                ] {
                    let masked = prototype.fork(strategy).run_with_bound().0.finish();
                    let mut unmasked = prototype.fork(strategy);
                    for ps in &mut unmasked.pools {
                        ps.offerings = OfferingMasks::new(&[]);
                        ps.offerings.pairs = None;
                    }
                    for c in &mut unmasked.compat_masks {
                        *c = 0;
                    }
                    let unmasked = unmasked.run_with_bound().0.finish();
                    let what = format!("{} {requirements:?} {strategy:?}", mix.name());
                    assert!(masked.scheduled() > 0, "{what}: nothing placed");
                    assert_eq!(masked.claims.len(), unmasked.claims.len(), "{what}");
                    for (a, b) in masked.claims.iter().zip(&unmasked.claims) {
                        assert_eq!((&a.pods, &a.options), (&b.pods, &b.options), "{what}");
                    }
                }
            }
        }
    }

    /// What Karpenter's claims cost so far never exceeds what its plan
    /// costs in the end (else `Strategy::Best` would drop a plan that
    /// could win), and a budget under that cost does stop the solve.
    #[test]
    fn karpenters_running_cost_bounds_its_plan() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("embedded region");
        for requirements in [PoolRequirements::Walkthrough, PoolRequirements::Open] {
            let pool = w2::pool(Capacity::SpotAndOnDemand, requirements);
            let zones = w2::zones(&pool, &catalog);
            let pools = vec![PoolInput::new(
                pool.clone(),
                instance_types(&pool, &catalog, &[]),
            )];
            let daemons: Vec<SchedPod> = w2::daemon_pods()
                .iter()
                .map(|p| SchedPod::from_pod(p).expect("daemon pod"))
                .collect();
            for mix in Mix::ALL {
                for seed in 1..3 {
                    let pods: Vec<SchedPod> = w2::pods(300, mix, seed, &zones)
                        .iter()
                        .map(|p| SchedPod::from_pod(p).expect("w2 pod"))
                        .collect();
                    let options = SolveOptions::default();
                    let splits = guide::SplitMemo::default();
                    let batch = BatchPods::new(&pods);
                    let solver = || {
                        Solver::new(
                            &pods,
                            &batch,
                            &[],
                            &pools,
                            &daemons,
                            &options,
                            Strategy::Karpenter,
                            &splits,
                        )
                    };
                    let plan = solver().run_with_bound().0.finish();
                    let cost = plan.cost_per_hour();
                    let within = solver()
                        .run_within(cost)
                        .unwrap_or_else(|| {
                            panic!("{} seed {seed}: abandoned at its own cost", mix.name())
                        })
                        .finish();
                    assert_eq!(within.claims.len(), plan.claims.len());
                    assert!(
                        within
                            .claims
                            .iter()
                            .zip(&plan.claims)
                            .all(|(a, b)| a.pods == b.pods && a.options == b.options)
                    );
                    assert!(
                        solver().run_within(cost * 0.99 - 1e-3).is_none(),
                        "{} seed {seed}: not stopped under its cost",
                        mix.name()
                    );
                }
            }
        }
    }
}
