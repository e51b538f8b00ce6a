//! `solve` and its strategies: a prototype solve works out the batch's
//! classes once, each strategy's solve is forked from it, and
//! `Strategy::Best` keeps the best plan.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::claims::{Claim, Join};
use super::classes::{Alike, AlikeKey, BatchPods, Class, ClassKey, Guidance, ShapeKey};
use super::guided::Target;
use super::outcome::{Outcome, better};
use super::place::NodeState;
use super::pools::PoolState;
use super::{ExistingNode, Plan, PoolInput, SolveOptions, guide, labels, repair};
use crate::resources::Resources;
use crate::scheduling::pod::{Constraints, SchedPod};
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::taints::Effect;
use crate::scheduling::topology::{Candidate, HostId, Topology, TopologyReject};

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
    /// The guide's whole-pod program (`packing::patterns`) picks the
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
pub(super) const CLOSE_TO_BOUND: f64 = 0.005;

/// The most pods `Strategy::Best` also solves `Standalone` for (a few
/// milliseconds there; it scans every claim for each pod, so it grows
/// quadratically).
pub const STANDALONE_UP_TO: usize = 500;

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

pub(super) struct Solver<'a> {
    pub(super) pods: &'a [SchedPod],
    pub(super) nodes: &'a [ExistingNode],
    pub(super) options: &'a SolveOptions,
    /// `Karpenter` or `Guided`.
    pub(super) strategy: Strategy,
    pub(super) pools: Vec<PoolState<'a>>,
    /// Pools by weight (high first), then name.
    pub(super) pool_order: Vec<usize>,
    pub(super) node_state: Vec<NodeState>,
    pub(super) claims: Vec<Claim>,
    /// For Karpenter's order: claim indices by pod count, each bucket by age.
    pub(super) by_pods: Vec<Vec<u32>>,
    pub(super) topology: Topology,
    pub(super) classes: Vec<Class>,
    /// Shared by the solves forked from one (`Solver::fork`), copied on
    /// the first write of one (a class made for a relaxed pod).
    pub(super) class_index: Arc<FxHashMap<ClassKey, usize>>,
    pub(super) class_by_shape: Arc<FxHashMap<ShapeKey, usize>>,
    /// (Free class, guidance) → its guided variant.
    pub(super) guided_classes: FxHashMap<(u32, Guidance), usize>,
    /// The batch's pods grouped by what decides their class (`BatchPods`).
    pub(super) batch: &'a BatchPods,
    /// Per `BatchPods` group, its Free class at its first relaxation, once known.
    pub(super) group_class: Vec<Option<u32>>,
    /// Per placed pod, the Free class it was placed as (at the relaxation
    /// it was placed at).
    pub(super) placed: Vec<Option<u32>>,
    /// Split candidates by (pool, the pods' compatibility sets, the claim's
    /// requirements): see `repair`.
    pub(super) split_memo: FxHashMap<(usize, Vec<u32>, u32), Rc<[(f64, usize)]>>,
    /// Re-packings by what decides them: see `repair::RepackKey`.
    pub(super) repack_memo: FxHashMap<repair::RepackKey, Option<repair::Repack>>,
    /// `zone_scope` by the requirements it narrows and the pools tolerated.
    pub(super) zone_scopes: FxHashMap<(Requirements, Vec<bool>), Requirements>,
    /// Node requirements of classes and requirements of claims, interned:
    /// their ids, and by id the one shared copy.
    pub(super) req_index: FxHashMap<Arc<Requirements>, u32>,
    pub(super) req_table: Vec<Arc<Requirements>>,
    /// (claim's, class's requirements) → how they join (see `Join`).
    pub(super) joins: FxHashMap<(u32, u32), Join>,
    /// (pool, interned node requirements) → index into `compat_sets`.
    pub(super) compat_index: FxHashMap<(usize, u32), u32>,
    /// Per pool and node requirements: the instance types that satisfy them,
    /// and what the requirements allow of the pool's offerings.
    pub(super) compat_sets: Vec<FixedBitSet>,
    pub(super) compat_masks: Vec<u128>,
    /// (compatibility set, requests) → `alone_price`.
    pub(super) alone_prices: FxHashMap<(u32, Resources), f64>,
    /// Per `AlikeKey`, the claims that refused its classes for good.
    pub(super) alike: Vec<Alike>,
    pub(super) alike_index: FxHashMap<AlikeKey, u32>,
    /// Per pod, the type the guide sends it to (guided solves only).
    pub(super) targets: Vec<Option<Target>>,
    /// What any whole-pod plan pays at least for the pods the guide
    /// serves, when the pattern program proves it (`patterns::Planned::bound`).
    pub(super) bound: Option<f64>,
    pub(super) any_prefer_no_schedule: bool,
    pub(super) bindings: Vec<(usize, String)>,
    /// Topology answers within one `place` call (topology does not change
    /// until the pod is placed), by the claim's requirements on the keys.
    pub(super) admit_memo: Vec<(u32, Result<Requirements, TopologyReject>)>,
    /// Every non-hostname topology key; a claim's requirements on them, interned, are its signature.
    pub(super) topo_keys: Vec<String>,
    pub(super) signatures: FxHashMap<Vec<Option<Requirement>>, u32>,
    /// What a plan of Karpenter's algorithm may cost before the solve is
    /// abandoned (`run_within`), and what its claims cost at least so far.
    pub(super) budget: f64,
    pub(super) committed: f64,
    /// The guide's split, shared by the solves of one batch.
    pub(super) splits: &'a guide::SplitMemo,
}

impl<'a> Solver<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
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
    pub(super) fn classify(&mut self) {
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
    pub(super) fn fork(&self, strategy: Strategy) -> Solver<'a> {
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
    pub(super) fn run_with_bound(mut self) -> (Outcome<'a>, Option<f64>) {
        let failed = self.place_all();
        let bound = self.bound;
        (self.conclude(failed), bound)
    }

    /// The plan of Karpenter's algorithm, unless it would cost more than
    /// `budget`: the solve stops as soon as its claims cost more. A claim's
    /// price only rises as pods join it (its types and offerings only
    /// narrow) and nothing is repaired after, so what the claims cost so
    /// far is a lower bound of what the plan will cost.
    pub(super) fn run_within(mut self, budget: f64) -> Option<Outcome<'a>> {
        debug_assert_eq!(self.strategy, Strategy::Karpenter);
        self.budget = budget;
        let failed = self.place_all();
        (!self.over_budget()).then(|| self.conclude(failed))
    }

    pub(super) fn over_budget(&self) -> bool {
        // The margin absorbs the rounding of a running sum.
        self.committed > self.budget + 1e-6
    }

    pub(super) fn conclude(mut self, failed: Vec<usize>) -> Outcome<'a> {
        self.settle_types();
        if self.strategy != Strategy::Karpenter {
            self.split_claims();
        }
        self.into_outcome(failed)
    }

    /// Places every pod it can; returns those it could not.
    pub(super) fn place_all(&mut self) -> Vec<usize> {
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
    pub(super) fn settle_types(&mut self) {
        for c in &mut self.claims {
            let ps = &self.pools[c.pool];
            if settles_late(ps, c.target, &c.reqs) {
                ps.room_index.keep_holding(&c.used, &mut c.types, &ps.room);
                c.room_stale = true;
            }
        }
    }

    pub(super) fn into_outcome(mut self, failed: Vec<usize>) -> Outcome<'a> {
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

    /// Karpenter's pod order (`BatchPods::largest_first`).
    pub(super) fn pod_order(&self) -> Vec<usize> {
        self.batch.largest_first.clone()
    }

    /// Places one pod, relaxing its preferences as long as it does not fit.
    pub(super) fn schedule(&mut self, i: usize) -> bool {
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
}

/// Zones and capacity types from every pool's offerings, plus the labels of
/// existing nodes, for every key a topology constraint may use.
pub(super) fn domain_universe(
    pools: &[PoolInput],
    nodes: &[ExistingNode],
) -> FxHashMap<String, Vec<String>> {
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

/// Whether a claim's types are checked against its pods only once placement
/// ends (`Solver::settle_types`): a guided claim, in a pool without limits
/// (whose reservations need the exact set) and without `minValues` (whose
/// count does).
pub(super) fn settles_late(ps: &PoolState, target: Option<u32>, reqs: &Requirements) -> bool {
    target.is_some()
        && ps.input.pool.limits.is_empty()
        && reqs.iter().all(|(_, r)| r.min_values.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::offerings::OfferingMasks;
    use crate::provisioning::plan::instance_types;
    use crate::workload::w2::{self, Capacity, Mix, PoolRequirements};

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
