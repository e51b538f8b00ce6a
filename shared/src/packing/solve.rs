//! `solve` and its strategies: a prototype solve works out the batch's
//! classes once, each strategy's solve is forked from it, and
//! `Strategy::Best` keeps the best plan.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use super::claims::Claim;
use super::classes::{BatchPods, Classes, Guidance};
use super::guided::Target;
use super::interned::Interned;
use super::outcome::{Outcome, better, prefers};
use super::place::NodeState;
use super::pools::PoolState;
use super::{ExistingNode, Plan, PoolInput, PreferencePolicy, SolveOptions, guide, labels, repair};
use crate::scheduling::pod::{Constraints, SchedPod};
use crate::scheduling::requirements::Requirements;
use crate::scheduling::taints::Effect;
use crate::scheduling::topology::{
    Candidate, DomainSource, DomainSources, HostId, Topology, TopologyReject,
};

/// How a solve plans. `Best` is what the provisioner and disruption run;
/// the others are its parts, and can be run alone (`nodewright bench
/// scheduling --strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Karpenter's algorithm: pods largest first, each into the in-flight
    /// claim with the fewest pods that still has a type holding it
    /// (whatever that type costs), else a new claim; each claim launches as
    /// the cheapest type that holds its pods.
    Karpenter,
    /// The guide's fluid linear program (`packing::guide`) picks the types
    /// and how many pods of each kind each takes; pods are placed type by
    /// type in its proportions (`Solver::guide`), then claims are repaired
    /// onto smaller nodes where that is cheaper (`packing::repair`).
    Guided,
    /// The guide's whole-pod program (`packing::patterns`) picks the
    /// nodes and the pods each holds; the fluid split where it has no plan.
    /// Pods in zone spreads are left out of it and placed free after the
    /// others (`Solver::spreads_guided`).
    Patterns,
    /// Pods largest first, each into the oldest claim whose price rises by
    /// no more than a node of its own would cost the pod: no claim costs
    /// more than its pods would alone. Sound on small batches, where whole
    /// pods on few nodes are far from the guide's fluid view.
    Standalone,
    /// The best of several strategies' plans: the one that places more
    /// pods, then costs less, then has fewer claims. It solves, in order:
    /// 1. `Patterns`, and `Guided` too unless the Patterns plan placed
    ///    every pod within `CLOSE_TO_BOUND` (0.5 %) of the whole-pod bound
    ///    its program proved. `Patterns` leaves pods in zone spreads out of
    ///    its program (they are placed free after the others); when the
    ///    batch has such pods it is solved again with them in, and the
    ///    cheaper of the two plans goes on. When more than half of the
    ///    batch's pods are in spreads or (anti-)affinity groups, `Guided`
    ///    alone: those pods go where their groups let them, not where the
    ///    program packs them.
    /// 2. `Karpenter`, stopped as soon as its claims cost more than the
    ///    plan so far when that plan placed every pod (a claim's price only
    ///    rises as pods join it, so such a plan could not win). So `Best` is
    ///    never costlier than Karpenter's algorithm on the same input.
    /// 3. On batches of up to `STANDALONE_UP_TO` (500) pods, `Standalone`:
    ///    there no plan costs more than a node per pod.
    ///
    /// Every solve is forked from one prototype that worked out the batch's
    /// classes, and only the plan kept becomes launch requests (`Outcome`).
    /// This is the one description of `Best`; the module doc,
    /// `shared/docs/packing.md` and `shared/docs/benchmarks.md` point here.
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
                let first = run_with_bound(Strategy::Patterns);
                // With pods in zone spreads, the pattern program is solved
                // again with them in it: left out, they fill in each zone
                // what the others' nodes leave (the whole catalog's `zonal`
                // mix, 4 % cheaper); in it, the program's types serve them
                // well where zones' prices differ little (the walkthrough's
                // requirements).
                let (patterns, bound) = if pods.iter().any(in_zone_spread) {
                    let mut with_spreads = solver(Strategy::Patterns);
                    with_spreads.spreads_guided = true;
                    let other = with_spreads.run_with_bound();
                    if prefers(&other.0, &first.0) {
                        other
                    } else {
                        first
                    }
                } else {
                    first
                };
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

/// One solve of a batch with one strategy. Its fields, in four parts:
/// what it reads; the batch's classes and what the batch asks again and
/// again (worked out by a prototype and copied into each solve forked from
/// it: `fork`); what the solve has placed so far; and what its strategy
/// keeps (the guide's targets, Karpenter's budget, the repair's memo).
pub(super) struct Solver<'a> {
    // What the solve reads.
    pub(super) pods: &'a [SchedPod],
    /// The batch's pods grouped by what decides their class (`BatchPods`).
    pub(super) batch: &'a BatchPods,
    pub(super) nodes: &'a [ExistingNode],
    pub(super) options: &'a SolveOptions,
    pub(super) strategy: Strategy,
    /// Per pool, what a solve knows of it and has reserved against its limits.
    pub(super) pools: Vec<PoolState<'a>>,
    /// Pools by weight (high first), then name.
    pub(super) pool_order: Vec<usize>,
    pub(super) any_prefer_no_schedule: bool,

    // What the batch's solves share.
    pub(super) classes: Classes,
    pub(super) interned: Interned,
    /// The guide's split, shared by the solves of one batch.
    pub(super) splits: &'a guide::SplitMemo,

    // What the solve has placed.
    /// Per existing node, what this solve placed on it.
    pub(super) node_state: Vec<NodeState>,
    pub(super) claims: Vec<Claim>,
    /// For Karpenter's order: claim indices by pod count, each bucket by age.
    pub(super) by_pods: Vec<Vec<u32>>,
    /// The topology groups and their counts, placements included.
    pub(super) topology: Topology,
    /// Per placed pod, the Free class it was placed as (at the relaxation
    /// it was placed at).
    pub(super) placed: Vec<Option<u32>>,
    pub(super) bindings: Vec<(usize, String)>,
    /// Topology answers within one `place` call (topology does not change
    /// until the pod is placed), by the claim's requirements on the keys.
    pub(super) admit_memo: Vec<(u32, Result<Requirements, TopologyReject>)>,

    // What the strategy keeps.
    /// Per pod, the type the guide sends it to (guided solves only).
    pub(super) targets: Vec<Option<Target>>,
    /// Whether the guide's programs take pods in zone spreads too (else
    /// they are placed free, after the guided pods: `Solver::guide`). Off
    /// in `Patterns`' solve, on in `Guided`'s; `Best` solves the pattern
    /// program both ways when the batch has such pods.
    pub(super) spreads_guided: bool,
    /// What any whole-pod plan pays at least for the pods the guide
    /// serves, when the pattern program proves it (`patterns::Planned::bound`).
    pub(super) bound: Option<f64>,
    /// Karpenter's solve under `run_within`.
    pub(super) budget: Budget,
    /// What the repair works out once per kind of claim.
    pub(super) repair_memo: repair::Memo,
}

/// What a plan of Karpenter's algorithm may cost before its solve is
/// abandoned (`Solver::run_within`), and what its claims cost at least so
/// far; no limit in every other solve.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    pub(super) limit: f64,
    pub(super) committed: f64,
}

impl Budget {
    const NONE: Budget = Budget {
        limit: f64::INFINITY,
        committed: 0.0,
    };

    /// A limit was set: the solve keeps its running cost.
    pub(super) fn is_set(&self) -> bool {
        self.limit.is_finite()
    }
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

        let (universe, sources) = domain_universe(pools, nodes);
        let mut topology = Topology::new(universe).with_sources(sources);
        // Pods of one group carry the same constraints: one registers them.
        // Under `PreferencePolicy::Ignore` no pod ever holds a preference
        // (each starts without them and relaxing only drops more): groups of
        // preferred terms and ScheduleAnyway spreads would count every pod
        // they select for no owner, and make topology of pods that have none.
        for &i in &batch.representatives {
            let p = &pods[i as usize];
            match options.preferences {
                PreferencePolicy::Respect => {
                    topology.register(&p.spreads, &p.affinity, &p.pod.namespace, &p.tolerations);
                }
                PreferencePolicy::Ignore => {
                    let spreads: Vec<_> = p.spreads.iter().filter(|s| s.hard).cloned().collect();
                    let affinity: Vec<_> = p
                        .affinity
                        .iter()
                        .filter(|t| t.weight.is_none())
                        .cloned()
                        .collect();
                    topology.register(&spreads, &affinity, &p.pod.namespace, &p.tolerations);
                }
            }
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
                topology.register(&[], &anti, &p.pod.namespace, &[]);
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
            batch,
            nodes,
            options,
            strategy,
            pools: pool_states,
            pool_order,
            any_prefer_no_schedule,
            classes: Classes::new(batch.representatives.len()),
            interned: Interned::default(),
            splits,
            node_state: nodes
                .iter()
                .map(|n| NodeState {
                    used: n.requested.clone(),
                    ports: Vec::new(),
                    volumes: Vec::new(),
                })
                .collect(),
            claims: Vec::new(),
            by_pods: Vec::new(),
            topology,
            placed: vec![None; pods.len()],
            bindings: Vec::new(),
            admit_memo: Vec::new(),
            targets: Vec::new(),
            spreads_guided: strategy != Strategy::Patterns,
            bound: None,
            budget: Budget::NONE,
            repair_memo: repair::Memo::default(),
        };
        solver.interned.topo_keys = solver.topology.domain_keys_all();
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
                    &n.taints,
                );
                solver.node_state[i]
                    .ports
                    .extend(p.host_ports.iter().copied());
                solver.node_state[i]
                    .volumes
                    .extend(p.attachments.iter().cloned());
            }
            solver.node_state[i].volumes.sort();
            solver.node_state[i].volumes.dedup();
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
            batch: self.batch,
            nodes: self.nodes,
            options: self.options,
            strategy,
            pools: self.pools.clone(),
            pool_order: self.pool_order.clone(),
            any_prefer_no_schedule: self.any_prefer_no_schedule,
            classes: self.classes.fork(),
            interned: self.interned.clone(),
            splits: self.splits,
            node_state: self.node_state.clone(),
            claims: Vec::new(),
            by_pods: Vec::new(),
            topology: self.topology.clone(),
            placed: vec![None; self.pods.len()],
            bindings: Vec::new(),
            admit_memo: Vec::new(),
            targets: Vec::new(),
            spreads_guided: strategy != Strategy::Patterns,
            bound: None,
            budget: Budget::NONE,
            repair_memo: repair::Memo::default(),
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
        self.budget.limit = budget;
        let failed = self.place_all();
        (!self.over_budget()).then(|| self.conclude(failed))
    }

    pub(super) fn over_budget(&self) -> bool {
        // The margin absorbs the rounding of a running sum.
        self.budget.committed > self.budget.limit + 1e-6
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

/// Zones and capacity types from every pool's offerings, the values its
/// requirements and labels allow (every value of an `In`: a claim picks
/// one, so each is a domain, as in Karpenter's domain groups) and those of
/// its instance types, plus the labels of existing nodes, for every key a
/// topology constraint may use; and which NodePool or node offers each.
pub(super) fn domain_universe(
    pools: &[PoolInput],
    nodes: &[ExistingNode],
) -> (FxHashMap<String, Vec<String>>, DomainSources) {
    let mut u: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut sources = DomainSources::default();
    for p in pools {
        // An untainted pool's values are open to every pod.
        let source = (!p.pool.taints.is_empty()).then(|| {
            sources.add(DomainSource {
                node_labels: None,
                taints: p.pool.taints.clone(),
            })
        });
        for (k, v) in p.domain_offers() {
            sources.offer(k, v, source);
            // Most pools offer keys and values already known (every pool
            // the same zones): copied only when new.
            if !u.contains_key(k.as_str()) {
                u.insert(k.clone(), BTreeSet::new());
            }
            if let Some(values) = u.get_mut(k.as_str())
                && !values.contains(v.as_str())
            {
                values.insert(v.clone());
            }
        }
    }
    for n in nodes {
        let mut source = None;
        for (k, v) in &n.labels {
            u.entry(k.clone()).or_default().insert(v.clone());
            if !sources.open_by_pool(k, v) {
                let s = *source.get_or_insert_with(|| {
                    sources.add(DomainSource {
                        node_labels: Some(n.labels.clone()),
                        taints: n.taints.clone(),
                    })
                });
                sources.offer(k, v, Some(s));
            }
        }
    }
    let universe = u
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect();
    (universe, sources)
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

/// Whether a pod is in a zone spread (any spread but a hostname one): the
/// pods the pattern program is solved with and without (`Strategy::Best`).
pub(super) fn in_zone_spread(pod: &SchedPod) -> bool {
    pod.spreads.iter().any(|s| s.key != labels::HOSTNAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::offerings::OfferingMasks;
    use crate::provisioning::plan::instance_types;
    use crate::workload::w2::{self, Capacity, Mix, PoolRequirements};

    /// Every value a NodePool's `In` requirement allows is a domain (a
    /// claim picks one), open to every pod when the pool is untainted and
    /// offered by the pool alone when it is tainted; a value only an
    /// existing node has is offered by that node.
    #[test]
    fn pool_requirement_values_are_domains_with_their_sources() {
        use crate::scheduling::requirements::Requirement;
        use crate::scheduling::taints::Taint;
        let mut open = w2::pool(Capacity::SpotAndOnDemand, PoolRequirements::Open);
        open.name = "open".to_owned();
        open.requirements
            .add("spread", Requirement::any_of(["1", "2"]));
        let mut tainted = w2::pool(Capacity::SpotAndOnDemand, PoolRequirements::Open);
        tainted.name = "tainted".to_owned();
        tainted.requirements.add("spread", Requirement::single("3"));
        tainted.taints = vec![Taint::new("k", "v", Effect::NoSchedule)];
        let node = ExistingNode {
            name: "n".to_owned(),
            labels: BTreeMap::from([("spread".to_owned(), "4".to_owned())]),
            ..Default::default()
        };
        let (universe, sources) = domain_universe(
            &[
                PoolInput::new(open, vec![]),
                PoolInput::new(tainted, vec![]),
            ],
            &[node],
        );
        assert_eq!(universe["spread"], ["1", "2", "3", "4"]);
        assert!(sources.open_by_pool("spread", "1") && sources.open_by_pool("spread", "2"));
        for v in ["3", "4"] {
            assert!(!sources.open_by_pool("spread", v), "{v} is not open");
            assert_eq!(sources.by_value["spread"][v].len(), 1, "{v}: one source");
        }
        let of = |v: &str| &sources.sources[sources.by_value["spread"][v][0] as usize];
        assert!(of("3").node_labels.is_none() && of("3").taints.len() == 1);
        assert!(of("4").node_labels.is_some() && of("4").taints.is_empty());
    }

    /// W2's pool (spot and on-demand, with `requirements`) on the embedded
    /// us-east-1 catalog, its DaemonSet pods, and its batches read as the
    /// packer reads them.
    struct W2Batch {
        pools: Vec<PoolInput>,
        daemons: Vec<SchedPod>,
        zones: Vec<String>,
    }

    impl W2Batch {
        fn new(requirements: PoolRequirements) -> Self {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("embedded region");
            let pool = w2::pool(Capacity::SpotAndOnDemand, requirements);
            let zones = w2::zones(&pool, &catalog);
            let types = instance_types(&pool, &catalog, &[]);
            let daemons = w2::daemon_pods()
                .iter()
                .map(|p| SchedPod::from_pod(p).expect("daemon pod"))
                .collect();
            W2Batch {
                pools: vec![PoolInput::new(pool, types)],
                daemons,
                zones,
            }
        }

        fn pods(&self, n: usize, mix: Mix, seed: u64) -> Vec<SchedPod> {
            w2::pods(n, mix, seed, &self.zones)
                .iter()
                .map(|p| SchedPod::from_pod(p).expect("w2 pod"))
                .collect()
        }
    }

    /// Pools with more (zone, capacity type) pairs than a mask holds judge
    /// offerings by requirements: the same answers as masks give. Each
    /// strategy is solved twice on one batch, once with the pool's masks
    /// taken away, and the plans must be the same.
    #[test]
    fn offerings_are_judged_alike_with_and_without_masks() {
        for requirements in [PoolRequirements::Walkthrough, PoolRequirements::Open] {
            let w2 = W2Batch::new(requirements);
            for mix in [Mix::Zonal, Mix::Mixed] {
                let pods = w2.pods(400, mix, 3);
                let options = SolveOptions::default();
                let splits = guide::SplitMemo::default();
                let batch = BatchPods::new(&pods);
                let mut prototype = Solver::new(
                    &pods,
                    &batch,
                    &[],
                    &w2.pools,
                    &w2.daemons,
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
                    for c in &mut unmasked.interned.compat_masks {
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
        for requirements in [PoolRequirements::Walkthrough, PoolRequirements::Open] {
            let w2 = W2Batch::new(requirements);
            for mix in Mix::ALL {
                for seed in 1..3 {
                    let pods = w2.pods(300, mix, seed);
                    let options = SolveOptions::default();
                    let splits = guide::SplitMemo::default();
                    let batch = BatchPods::new(&pods);
                    let solver = || {
                        Solver::new(
                            &pods,
                            &batch,
                            &[],
                            &w2.pools,
                            &w2.daemons,
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

    /// With pods in zone spreads, the pattern program is solved with them
    /// left out (placed free after the guided pods) and with them in it:
    /// `Best` is never dearer than either solve, nor than `Guided`, and
    /// every solve places every pod (none lost by leaving them out).
    #[test]
    fn best_keeps_the_cheaper_pattern_plan_with_or_without_zone_spreads() {
        for requirements in [PoolRequirements::Walkthrough, PoolRequirements::Open] {
            let w2 = W2Batch::new(requirements);
            let pods = w2.pods(400, Mix::Zonal, 5);
            assert!(pods.iter().any(in_zone_spread));
            let options = SolveOptions::default();
            let best = solve(&pods, &[], &w2.pools, &w2.daemons, &options);
            let splits = guide::SplitMemo::default();
            let batch = BatchPods::new(&pods);
            let mut prototype = Solver::new(
                &pods,
                &batch,
                &[],
                &w2.pools,
                &w2.daemons,
                &options,
                Strategy::Best,
                &splits,
            );
            prototype.classify();
            let mut with_spreads = prototype.fork(Strategy::Patterns);
            with_spreads.spreads_guided = true;
            let without = prototype.fork(Strategy::Patterns);
            assert!(!without.spreads_guided);
            let costs: Vec<f64> = [with_spreads, without, prototype.fork(Strategy::Guided)]
                .into_iter()
                .map(|s| {
                    let plan = s.run_with_bound().0;
                    assert_eq!(plan.scheduled(), pods.len(), "{requirements:?}");
                    plan.cost
                })
                .collect();
            let what = format!(
                "{requirements:?}: best {} against {costs:?}",
                best.cost_per_hour()
            );
            assert!(best.unschedulable.is_empty(), "{what}");
            assert!(
                costs.iter().all(|&c| best.cost_per_hour() <= c + 1e-6),
                "{what}"
            );
        }
    }
}
