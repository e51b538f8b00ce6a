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
//! candidates cheapest to disrupt that works, found by binary search, as
//! Karpenter), else the single-node move with the best score, then the
//! largest saving, then the fewest pods. One consolidation command per
//! decision: the next pass sees the cluster it left.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

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
}

fn pct(x: f64) -> String {
    let s = format!("{:.1}", x * 100.0);
    format!("{} %", s.strip_suffix(".0").unwrap_or(&s))
}

/// Nodes consolidation may look at, with the reason noted for the others.
pub fn candidates(cx: &mut Context<'_, '_>) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..cx.facts.len() {
        if !cx.open(i) || cx.facts[i].reschedulable.is_empty() {
            continue;
        }
        let Some(pool) = cx.facts[i].pool else {
            continue;
        };
        if pool.disruption.policy == ConsolidationPolicy::WhenEmpty || pool.replicas.is_some() {
            continue;
        }
        let Some(after) = pool.disruption.consolidate_after else {
            continue;
        };
        if !cx.facts[i].ready {
            cx.note(i, "not Ready: not consolidated");
            continue;
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
            continue;
        }
        if !cx.eligible(i, Reason::Underutilized) {
            continue;
        }
        out.push(i);
    }
    out
}

/// What disrupting node `i` costs: its pods' eviction costs, scaled by the
/// share of its lifetime left (a node about to expire is cheap to move).
pub fn disruption_cost(cx: &Context<'_, '_>, i: usize) -> f64 {
    let f = &cx.facts[i];
    let pods: f64 = f.reschedulable.iter().map(|p| eviction_cost(p)).sum();
    let left = f.pool.and_then(|p| p.expire_after).map_or(1.0, |life| {
        let age = cx.s.now.duration_since(f.created_at).as_secs_f64();
        (1.0 - age / life.as_secs_f64().max(1.0)).clamp(0.0, 1.0)
    });
    pods * left
}

/// Judges removing `targets`: `Err` says why not, in the user's words.
pub fn evaluate(cx: &mut Context<'_, '_>, targets: &[usize]) -> Result<Move, String> {
    let outcome = cx.simulate(targets)?;
    if let Some((pod, why)) = outcome.unschedulable.first() {
        return Err(format!("pod {pod} would fit nowhere else: {why}"));
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
    if let Some(pool) = balanced_policy_refuses(cx, targets, savings) {
        return Err(pool);
    }
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
        }
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

/// Karpenter v1.14's disruption cost of a node under `Balanced`: 1 for
/// draining the node itself, plus its pods' positive eviction costs.
fn node_disruption(f: &super::snapshot::NodeFacts<'_>) -> f64 {
    1.0 + f
        .reschedulable
        .iter()
        .map(|p| eviction_cost(p).max(0.0))
        .sum::<f64>()
}

/// `consolidationPolicy: Balanced`, as Karpenter v1.14 scores a move: for
/// each Balanced pool it touches, the share of the pool's cost it saves
/// (split by the candidates' prices when it spans pools) over the share
/// of the pool's disruption cost it causes (every node of the pool counts
/// 1 plus its pods' eviction costs) must reach 1/k, k = 2. Why not, when a
/// pool refuses.
fn balanced_policy_refuses(
    cx: &Context<'_, '_>,
    targets: &[usize],
    savings: f64,
) -> Option<String> {
    let mut pools: Vec<&str> = targets
        .iter()
        .filter_map(|i| cx.facts[*i].pool)
        .filter(|p| p.disruption.policy == ConsolidationPolicy::Balanced)
        .map(|p| p.name.as_str())
        .collect();
    pools.sort_unstable();
    pools.dedup();
    let source: f64 = targets.iter().map(|i| cx.facts[*i].price).sum();
    for name in pools {
        let in_pool = |f: &&super::snapshot::NodeFacts<'_>| f.pool.is_some_and(|p| p.name == name);
        let (total_cost, total_disruption) = cx
            .facts
            .iter()
            .filter(in_pool)
            .fold((0.0, 0.0), |(c, d), f| {
                (c + f.price, d + node_disruption(f))
            });
        let moved: Vec<&super::snapshot::NodeFacts<'_>> = targets
            .iter()
            .map(|i| &cx.facts[*i])
            .filter(in_pool)
            .collect();
        let pool_source: f64 = moved.iter().map(|f| f.price).sum();
        let disruption: f64 = moved.iter().map(|f| node_disruption(f)).sum();
        if total_cost <= 0.0 || total_disruption <= 0.0 {
            continue;
        }
        let pool_savings = if source > 0.0 && pool_source < source {
            savings * pool_source / source
        } else {
            savings
        };
        let score = (pool_savings / total_cost) / (disruption / total_disruption);
        if score < 1.0 / BALANCED_K {
            return Some(format!(
                "NodePool {name} is Balanced: saving {:.1} % of its cost does not justify {:.1} % of its disruption (score {score:.2} below {:.2})",
                100.0 * pool_savings / total_cost,
                100.0 * disruption / total_disruption,
                1.0 / BALANCED_K
            ));
        }
    }
    None
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
    let summary = format!(
        "underutilized: {what}; saves ${:.4}/h ({} of ${:.4}/h), {} pod(s) moved",
        m.savings,
        pct(m.savings / m.price.max(f64::MIN_POSITIVE)),
        m.price,
        m.pods
    );
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

    fn run(&self, cx: &mut Context<'_, '_>) {
        if !cx.s.tuning.consolidation {
            return;
        }
        let mut cands = candidates(cx);
        let mut sorted: Vec<(f64, usize)> = Vec::with_capacity(cands.len());
        for i in &cands {
            sorted.push((disruption_cost(cx, *i), *i));
        }
        sorted.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| cx.facts[a.1].name.cmp(&cx.facts[b.1].name))
        });
        // No more per pool than its budget allows.
        let mut per_pool: std::collections::BTreeMap<String, usize> =
            std::collections::BTreeMap::new();
        cands = sorted
            .into_iter()
            .map(|(_, i)| i)
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

    fn run(&self, cx: &mut Context<'_, '_>) {
        if !cx.s.tuning.consolidation {
            return;
        }
        let mut cands = candidates(cx);
        if consolidating(cx) {
            for i in cands {
                cx.note(i, "one consolidation at a time: looked at again next pass");
            }
            return;
        }
        // Cheapest to disrupt first; each evaluation is a solve, so the pass is bounded.
        let mut order: Vec<(f64, usize)> = Vec::with_capacity(cands.len());
        for i in &cands {
            order.push((disruption_cost(cx, *i), *i));
        }
        order.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| cx.facts[a.1].name.cmp(&cx.facts[b.1].name))
        });
        cands = order.into_iter().map(|(_, i)| i).collect();
        let limit = cx.s.tuning.max_single_node;
        for i in cands.split_off(limit.min(cands.len())) {
            cx.note(i, format!("not evaluated this pass (at most {limit} single-node candidates, cheapest to disrupt first)"));
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
