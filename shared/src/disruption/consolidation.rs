//! Consolidation (`WhenEmptyOrUnderutilized`, after `consolidateAfter`):
//! remove nodes whose pods fit elsewhere, or replace them with one strictly
//! cheaper node — without the churn Karpenter users complain of.
//!
//! A move (delete or replace some candidates) is taken only when all of
//! these hold:
//! 1. every pod of the candidates fits on the rest of the cluster plus at
//!    most one new node (the provisioner's solver decides);
//! 2. a replacement is strictly cheaper, saves at least
//!    `consolidationSavingsThreshold` (default 10 %) of the candidates'
//!    price with *every* option offered to the fleet (options that save
//!    less are dropped), and never by the instance type and capacity type
//!    of one of the candidates;
//! 3. spot → spot only with the SpotToSpotConsolidation gate and at least
//!    15 cheaper spot types (Karpenter's rule, so price-capacity-optimized
//!    keeps a choice);
//! 4. Karpenter 1.14's `Balanced` test: the savings' share of the pool's
//!    cost divided by the disrupted pods' share of the pool's disruption
//!    cost is at least 1/k with k = 2.
//!
//! Among the moves that pass, multi-node first (the longest prefix of the
//! candidates by savings ratio, price over disruption cost, highest first,
//! that works, found by binary search, as Karpenter), else the single-node move with the best score, then the
//! largest saving, then the fewest pods. One consolidation command per
//! decision: the next pass sees the cluster it left.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

use super::balanced::{self, Scored};
use super::blockers::short;
use super::context::{Context, Proposal};
use super::decision::Reason;
use super::methods::Method;
use super::simulate::Outcome;
use super::snapshot::POD_DELETION_COST;
use crate::config::ConsolidationPolicy;
use crate::packing::NewClaim;
use crate::scheduling::labels::CAPACITY_TYPE_SPOT;

/// Karpenter's `Balanced` k: a move is worth it when savings share / disruption share ≥ 1/k.
pub const BALANCED_K: f64 = 2.0;
/// Cheaper spot types a spot → spot replacement needs (Karpenter's rule).
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// Karpenter's eviction cost of a pod: 1, plus its deletion cost and
/// priority scaled down, clamped to [-10, 10].
pub fn eviction_cost(p: &Pod) -> f64 {
    let mut cost = 1.0;
    if let Some(dc) = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.parse::<i32>().ok())
    {
        cost += f64::from(dc) / 2f64.powi(27);
    }
    if let Some(priority) = p.spec.as_ref().and_then(|s| s.priority) {
        cost += f64::from(priority) / 2f64.powi(25);
    }
    cost.clamp(-10.0, 10.0)
}

/// A move that passed every test.
#[derive(Debug)]
pub struct Move {
    pub targets: Vec<usize>,
    pub outcome: Outcome,
    pub replacement: Option<NewClaim>,
    pub replacement_price: f64,
    pub savings: f64,
    pub price: f64,
    /// Savings share / disruption share (infinite when nothing is disrupted).
    pub score: f64,
    pub pods: usize,
    /// Each Balanced pool's score of the move, in words.
    pub balanced: Vec<String>,
}

fn pct(x: f64) -> String {
    let s = format!("{:.1}", x * 100.0);
    format!("{} %", s.strip_suffix(".0").unwrap_or(&s))
}

/// Nodes consolidation may look at, with the reason noted for the others.
pub fn candidates(cx: &mut Context<'_, '_>) -> Vec<usize> {
    (0..cx.facts.len())
        .filter(|&i| is_candidate(cx, i))
        .collect()
}

/// Whether node `i` is a consolidation candidate (see [`candidates`]).
fn is_candidate(cx: &mut Context<'_, '_>, i: usize) -> bool {
    if !cx.open(i) || cx.facts[i].reschedulable.is_empty() {
        return false;
    }
    let Some(pool) = cx.facts[i].pool else {
        return false;
    };
    if pool.disruption.policy == ConsolidationPolicy::WhenEmpty || pool.replicas.is_some() {
        return false;
    }
    let Some(after) = pool.disruption.consolidate_after else {
        return false;
    };
    if !cx.facts[i].ready {
        cx.note(i, "not Ready: not consolidated");
        return false;
    }
    let since = cx.states[i]
        .as_ref()
        .and_then(|s| s.last_pod_event_at)
        .unwrap_or(cx.s.now);
    let quiet = cx.s.now.duration_since(since);
    if quiet < after {
        cx.note(
            i,
            format!(
                "pods changed {} ago, consolidateAfter is {}",
                short(quiet),
                short(after)
            ),
        );
        return false;
    }
    cx.eligible(i, Reason::Underutilized)
}

/// The candidates by savings ratio (price over disruption cost), highest
/// first, as Karpenter orders them for both consolidation methods: the
/// moves worth most per unit of disruption come first.
pub fn by_savings_ratio(cx: &Context<'_, '_>, cands: Vec<usize>) -> Vec<usize> {
    let mut order: Vec<(f64, usize)> = cands
        .into_iter()
        .map(|i| (scored(cx, i).map_or(0.0, |n| n.savings_ratio()), i))
        .collect();
    order.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| cx.facts[a.1].name.cmp(&cx.facts[b.1].name))
    });
    order.into_iter().map(|(_, i)| i).collect()
}

/// Judges removing `targets`: `Err` says why not, in the user's words.
pub fn evaluate(cx: &mut Context<'_, '_>, targets: &[usize]) -> Result<Move, String> {
    let outcome = cx.simulate_consolidation(targets)?;
    if let Some((pod, why)) = outcome.unschedulable.first() {
        return Err(format!("pod {pod} would fit nowhere else: {why}"));
    }
    // As Karpenter: `minValuesPolicy: BestEffort` relaxes minValues for
    // pending pods, never to consolidate onto a replacement.
    if outcome.claims.iter().any(|c| c.min_values_relaxed) {
        return Err(
            "minValues requirement is not met: its replacement would launch with minValues relaxed"
                .to_owned(),
        );
    }
    let price: f64 = targets.iter().map(|i| cx.facts[*i].price).sum();
    let (replacement, replacement_price) = match outcome.claims.len() {
        0 => (None, 0.0),
        1 => {
            let (claim, worst) = narrow(cx, targets, &outcome.claims[0], price)?;
            (Some(claim), worst)
        }
        n => {
            return Err(format!(
                "its pods would need {n} new nodes (consolidation replaces with at most one)"
            ));
        }
    };
    let savings = price - replacement_price;
    let pods: usize = targets
        .iter()
        .map(|i| cx.facts[*i].reschedulable.len())
        .sum();
    let score = balanced_score(cx, targets, savings);
    let balanced = balanced_policy(cx, targets, savings)?;
    if cx.s.tuning.balanced && score < 1.0 / BALANCED_K {
        return Err(format!(
            "saving ${savings:.4}/h does not justify evicting {pods} pod(s) (balanced score {score:.2} below {:.2})",
            1.0 / BALANCED_K
        ));
    }
    Ok(Move {
        targets: targets.to_vec(),
        outcome,
        replacement,
        replacement_price,
        savings,
        price,
        score,
        pods,
        balanced,
    })
}

/// The replacement's options that pass the threshold and the capacity-type
/// rules, and what it will cost at worst.
fn narrow(
    cx: &Context<'_, '_>,
    targets: &[usize],
    claim: &NewClaim,
    price: f64,
) -> Result<(NewClaim, f64), String> {
    let settings = cx.s.settings;
    let threshold = settings.consolidation_savings_threshold;
    // Never the type and capacity type of a candidate: for one node that is
    // churn for nothing, for several it is "delete the others", which a
    // delete-only move does with fewer evictions.
    let same = |o: &crate::packing::LaunchOption| {
        targets.iter().any(|i| {
            *o.instance_type == *cx.facts[*i].instance_type
                && *o.capacity_type == *cx.facts[*i].capacity_type
        })
    };
    let max_price = price * (1.0 - threshold);
    let mut kept: Vec<_> = claim
        .options
        .iter()
        .filter(|o| !same(o) && o.price < price && o.price <= max_price + 1e-12)
        .cloned()
        .collect();
    if kept.is_empty() {
        let cheapest = claim
            .options
            .iter()
            .filter(|o| !same(o))
            .min_by(|a, b| a.price.total_cmp(&b.price));
        return Err(match cheapest {
            None => "the only replacement that fits is the same instance type and capacity type"
                .to_owned(),
            Some(o) if o.price >= price => format!(
                "no cheaper replacement: the cheapest that fits is {} {} at ${:.4}/h, the node{} cost ${price:.4}/h",
                o.instance_type,
                o.capacity_type,
                o.price,
                if targets.len() > 1 { "s" } else { "" }
            ),
            Some(o) => format!(
                "savings {} below threshold {}",
                pct((price - o.price) / price),
                pct(threshold)
            ),
        });
    }
    let spot = kept.iter().any(|o| *o.capacity_type == *CAPACITY_TYPE_SPOT);
    if spot {
        // The fleet buys spot whenever a spot option is offered.
        kept.retain(|o| *o.capacity_type == *CAPACITY_TYPE_SPOT);
        if targets.iter().all(|i| cx.facts[*i].is_spot()) {
            if !settings.spot_to_spot_consolidation {
                return Err(
                    "spot-to-spot consolidation is off (SpotToSpotConsolidation feature gate)"
                        .to_owned(),
                );
            }
            let types: BTreeSet<&str> = kept.iter().map(|o| &*o.instance_type).collect();
            if types.len() < SPOT_TO_SPOT_MIN_TYPES {
                return Err(format!(
                    "spot-to-spot consolidation needs {SPOT_TO_SPOT_MIN_TYPES} cheaper spot instance types, {} found",
                    types.len()
                ));
            }
            if targets.len() == 1 {
                // Launch with the cheapest 15 types only (or as many as
                // the minValues need, if more), as Karpenter: the fleet
                // then buys one of them, and the new node is not itself
                // replaced by a cheaper one at once.
                let order = types_by_price(&kept);
                let need =
                    types_for_min_values(cx, &claim.requirements, &order).unwrap_or(order.len());
                let keep: BTreeSet<String> = order
                    .into_iter()
                    .take(need.max(SPOT_TO_SPOT_MIN_TYPES))
                    .collect();
                kept.retain(|o| keep.contains(&*o.instance_type));
            }
        }
    }
    // Leaving out the dearer types (and the candidates' own) must keep
    // every minValues of the requirements, as Karpenter checks.
    if let Some(why) = min_values_unmet(cx, &claim.requirements, &kept) {
        return Err(format!("the cheaper replacements {why}"));
    }
    // Spot: price-capacity-optimized may buy any option, count the dearest;
    // on-demand: the cheapest is bought.
    let worst = if spot {
        kept.iter().map(|o| o.price).fold(0.0, f64::max)
    } else {
        kept.iter().map(|o| o.price).fold(f64::INFINITY, f64::min)
    };
    let mut narrowed = claim.clone();
    narrowed.options = kept;
    Ok((narrowed, worst))
}

/// The distinct instance types of `options`, cheapest (by its cheapest
/// option) first.
fn types_by_price(options: &[crate::packing::LaunchOption]) -> Vec<String> {
    let mut cheapest: Vec<(f64, &str)> = Vec::new();
    for o in options {
        match cheapest.iter_mut().find(|(_, t)| *t == &*o.instance_type) {
            Some(c) => c.0 = c.0.min(o.price),
            None => cheapest.push((o.price, &o.instance_type)),
        }
    }
    cheapest.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    cheapest.into_iter().map(|(_, t)| t.to_owned()).collect()
}

/// The value of label `key` on instance type `name`, from the catalog.
fn type_label(cx: &Context<'_, '_>, name: &str, key: &str) -> Option<String> {
    if key == crate::scheduling::labels::INSTANCE_TYPE {
        return Some(name.to_owned());
    }
    let t =
        cx.s.catalog
            .instance_types
            .iter()
            .find(|t| t.name == name)?;
    t.requirements()
        .get(key)
        .and_then(|r| r.single_value())
        .map(str::to_owned)
}

/// How many of `types` (in order) it takes to meet every `minValues` of
/// `reqs` (0 when there is none); `None` when all of them do not.
fn types_for_min_values(
    cx: &Context<'_, '_>,
    reqs: &crate::scheduling::requirements::Requirements,
    types: &[String],
) -> Option<usize> {
    let mins: Vec<(&str, usize)> = reqs
        .iter()
        .filter_map(|(k, r)| r.min_values.map(|m| (k, m as usize)))
        .collect();
    if mins.is_empty() {
        return Some(0);
    }
    let mut seen: Vec<BTreeSet<String>> = vec![BTreeSet::new(); mins.len()];
    for (n, t) in types.iter().enumerate() {
        for ((key, _), values) in mins.iter().zip(seen.iter_mut()) {
            if let Some(v) = type_label(cx, t, key) {
                values.insert(v);
            }
        }
        if mins.iter().zip(&seen).all(|((_, min), v)| v.len() >= *min) {
            return Some(n + 1);
        }
    }
    None
}

/// Which `minValues` of `reqs` the instance types of `options` no longer
/// meet, in words; `None` when they meet all.
fn min_values_unmet(
    cx: &Context<'_, '_>,
    reqs: &crate::scheduling::requirements::Requirements,
    options: &[crate::packing::LaunchOption],
) -> Option<String> {
    let types = types_by_price(options);
    reqs.iter().find_map(|(key, r)| {
        let min = r.min_values? as usize;
        let values: BTreeSet<String> = types
            .iter()
            .filter_map(|t| type_label(cx, t, key))
            .collect();
        (values.len() < min).then(|| {
            format!(
                "offer {} value(s) of {key}, below its minValues {min}",
                values.len()
            )
        })
    })
}

/// A node as the `Balanced` score sees it (`None` outside our pools).
pub fn scored<'c>(cx: &'c Context<'_, '_>, i: usize) -> Option<Scored<'c>> {
    let f = &cx.facts[i];
    let pool = f.pool?;
    Some(Scored {
        name: &f.name,
        pool: &pool.name,
        policy: pool.disruption.policy,
        price: f.price,
        disruption: balanced::node_disruption(f.reschedulable.iter().map(|p| eviction_cost(p))),
    })
}

/// `consolidationPolicy: Balanced` (see [`balanced`]): every Balanced pool
/// the move touches must approve it. `Ok` with each Balanced pool's score
/// in words (none when no Balanced pool is touched); `Err` with the first
/// refusing pool's.
fn balanced_policy(
    cx: &Context<'_, '_>,
    targets: &[usize],
    savings: f64,
) -> Result<Vec<String>, String> {
    let moved: Vec<Scored<'_>> = targets.iter().filter_map(|i| scored(cx, *i)).collect();
    if !moved
        .iter()
        .any(|n| n.policy == ConsolidationPolicy::Balanced)
    {
        return Ok(Vec::new());
    }
    let all: Vec<Scored<'_>> = (0..cx.facts.len()).filter_map(|i| scored(cx, i)).collect();
    let totals = balanced::pool_totals(&all);
    let (approved, scores) = balanced::evaluate(&moved, savings, &totals);
    if approved {
        Ok(scores.iter().map(|(p, s)| s.describe(p)).collect())
    } else {
        Err(scores.iter().find(|(_, s)| !s.approved()).map_or_else(
            || "no Balanced NodePool to score the move".to_owned(),
            |(p, s)| s.describe(p),
        ))
    }
}

/// Savings share of the pools' cost over the evicted pods' share of the
/// pools' disruption cost (Karpenter 1.14's `Balanced` score).
fn balanced_score(cx: &Context<'_, '_>, targets: &[usize], savings: f64) -> f64 {
    let pools: BTreeSet<String> = targets.iter().map(|i| cx.pool_name(*i)).collect();
    let (mut cost, mut disruption) = (0.0, 0.0);
    for f in &cx.facts {
        if f.pool.is_some_and(|p| pools.contains(&p.name)) {
            cost += f.price;
            disruption += f
                .reschedulable
                .iter()
                .map(|p| eviction_cost(p))
                .sum::<f64>();
        }
    }
    let moved: f64 = targets
        .iter()
        .flat_map(|i| cx.facts[*i].reschedulable.iter())
        .map(|p| eviction_cost(p))
        .sum();
    if moved <= 0.0 || disruption <= 0.0 {
        return f64::INFINITY;
    }
    let savings_share = if cost > 0.0 { savings / cost } else { 0.0 };
    savings_share / (moved / disruption)
}

fn propose(cx: &mut Context<'_, '_>, m: Move, method: &'static str) {
    let what = match &m.replacement {
        None => "its pods fit on other nodes".to_owned(),
        Some(r) => format!(
            "replaced by one {} node ({}…) at ${:.4}/h",
            r.options.first().map_or("", |o| &*o.capacity_type),
            r.options
                .iter()
                .take(3)
                .map(|o| &*o.instance_type)
                .collect::<Vec<_>>()
                .join(", "),
            m.replacement_price
        ),
    };
    let mut summary = format!(
        "underutilized: {what}; saves ${:.4}/h ({} of ${:.4}/h), {} pod(s) moved",
        m.savings,
        pct(m.savings / m.price.max(f64::MIN_POSITIVE)),
        m.price,
        m.pods
    );
    for score in &m.balanced {
        summary.push_str("; ");
        summary.push_str(score);
    }
    cx.commit(Proposal {
        reason: Reason::Underutilized,
        method,
        targets: m.targets,
        outcome: Some(m.outcome),
        replacements: m.replacement.into_iter().collect(),
        replacement_price: Some(m.replacement_price),
        savings: m.savings,
        summary,
    });
}

fn consolidating(cx: &Context<'_, '_>) -> bool {
    cx.commands
        .iter()
        .any(|c| c.reason == Reason::Underutilized)
}

/// Several nodes at once: deleted, or replaced by one cheaper node.
#[derive(Debug, Clone, Copy)]
pub struct MultiNodeConsolidation;

impl Method for MultiNodeConsolidation {
    fn name(&self) -> &'static str {
        "multi-node-consolidation"
    }

    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool {
        cx.s.tuning.consolidation && is_candidate(cx, i)
    }

    fn compute_commands(&self, cx: &mut Context<'_, '_>, cands: Vec<usize>) {
        let cands = by_savings_ratio(cx, cands);
        // No more per pool than its budget allows.
        let mut per_pool: std::collections::BTreeMap<String, usize> =
            std::collections::BTreeMap::new();
        let cands: Vec<usize> = cands
            .into_iter()
            .filter(|i| {
                let pool = cx.pool_name(*i);
                let taken = per_pool.entry(pool.clone()).or_default();
                *taken += 1;
                *taken <= cx.budgets.remaining(&pool, Reason::Underutilized)
            })
            .take(cx.s.tuning.max_multi_node)
            .collect();
        if cands.len() < 2 {
            return;
        }
        let (mut lo, mut hi) = (2, cands.len());
        let mut best: Option<Move> = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            match evaluate(cx, &cands[..mid]) {
                Ok(m) => {
                    best = Some(m);
                    lo = mid + 1;
                }
                Err(_) => hi = mid - 1,
            }
        }
        if let Some(m) = best {
            propose(cx, m, self.name());
        }
    }
}

/// One node: deleted, or replaced by one cheaper node; the best-scoring move.
#[derive(Debug, Clone, Copy)]
pub struct SingleNodeConsolidation;

impl Method for SingleNodeConsolidation {
    fn name(&self) -> &'static str {
        "single-node-consolidation"
    }

    fn should_disrupt(&self, cx: &mut Context<'_, '_>, i: usize) -> bool {
        cx.s.tuning.consolidation && is_candidate(cx, i)
    }

    fn compute_commands(&self, cx: &mut Context<'_, '_>, mut cands: Vec<usize>) {
        if consolidating(cx) {
            for i in cands {
                cx.note(i, "one consolidation at a time: looked at again next pass");
            }
            return;
        }
        // Highest savings ratio first; each evaluation is a solve, so the pass is bounded.
        cands = by_savings_ratio(cx, cands);
        let limit = cx.s.tuning.max_single_node;
        for i in cands.split_off(limit.min(cands.len())) {
            cx.note(i, format!("not evaluated this pass (at most {limit} single-node candidates, highest savings ratio first)"));
        }
        let mut moves = Vec::new();
        for i in cands {
            match evaluate(cx, &[i]) {
                Ok(m) => moves.push(m),
                Err(why) => cx.note(i, why),
            }
        }
        moves.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.savings.total_cmp(&a.savings))
                .then_with(|| a.pods.cmp(&b.pods))
                .then_with(|| {
                    cx.facts[a.targets[0]]
                        .name
                        .cmp(&cx.facts[b.targets[0]].name)
                })
        });
        let mut moves = moves.into_iter();
        let Some(best) = moves.next() else { return };
        let chosen = cx.facts[best.targets[0]].name.clone();
        for other in moves {
            cx.note(
                other.targets[0],
                format!(
                    "could save ${:.4}/h, but one consolidation at a time: {chosen} goes first",
                    other.savings
                ),
            );
        }
        propose(cx, best, self.name());
    }
}
