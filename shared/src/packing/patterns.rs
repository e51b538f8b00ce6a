//! The guide's whole-pod plan: which nodes to open and which pods each one
//! takes, found by column generation over node patterns.
//!
//! `guide::split` sees pods as fluid: it cannot see that a 16-core node
//! takes four 3.5-core pods and leaves 2 cores idle, nor that those 2 cores
//! are best filled with small pods of another kind. This program does:
//!
//! minimise Σ_p price_p · x_p subject to Σ_p a_gp · x_p ≥ count_g for each demand g,
//!
//! where a *pattern* p is one node of a supply holding a_gp whole pods of
//! each demand g (they fit it together), and x_p ≥ 0 is how many such nodes.
//! Patterns are too many to list, so they are generated: the program over
//! the patterns found so far values each demand's pod (its dual π_g); for
//! each supply, the most valuable set of pods one node holds
//! (`knapsack::best`) joins the program when it is worth more than the
//! node's price. When no supply has such a node, the program's optimum is
//! that over all patterns (the cutting-stock bound, at least the fluid
//! one). microlp reports no duals, so the dual is what is solved: maximise
//! Σ_g count_g · π_g subject to Σ_g a_gp · π_g ≤ price_p, one row per
//! pattern, each new pattern a row added to the solved program.
//!
//! The fractional optimum is then made whole: ⌊x_p⌋ nodes of each pattern,
//! then, for the pods left, rounds of the program over the patterns it used
//! trimmed to what is left, each round committing at least one node. The
//! last nodes may be part full; the solver right-sizes every claim.

use microlp::{ComparisonOp, OptimizationDirection, Problem, Solution, SolveOutcome, Variable};
use rustc_hash::FxHashSet;

use super::guide::{Demand, Supply};
use super::knapsack::{self, Item};
use crate::resources::GIB;

/// One node of the plan: a supply and its pods as (demand, count).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub supply: usize,
    pub pods: Vec<(usize, u32)>,
}

/// The plan, and what the program proves of every plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub nodes: Vec<Node>,
    /// When the generation ran to its end (no supply has a node worth more
    /// than its price, every knapsack searched to its optimum): the
    /// program's optimum, a lower bound on the cost of any whole-pod plan
    /// for these demands, and at least the fluid one.
    pub bound: Option<f64>,
}

/// Pricing rounds at most (each adds up to `PER_ROUND` patterns).
const MAX_ROUNDS: usize = 80;
/// New patterns per round at most: the most profitable, one per supply.
const PER_ROUND: usize = 32;
/// Search nodes of one knapsack.
const KNAPSACK_BUDGET: usize = 20_000;
/// Search nodes of all knapsacks of one plan, per pod, and at least and at
/// most: past it, the patterns found so far are used (still a feasible
/// plan, only less cheap). A small batch is not worth a long search: what
/// the search saves is a share of the batch's cost, what it costs is not.
const WORK_PER_POD: usize = 150;
const WORK_BUDGET: (usize, usize) = (400_000, 1_500_000);
/// A pattern must beat its price by this share to join: the duals are
/// only as exact as the simplex's tolerances.
const PROFIT: f64 = 1e-3;

/// A node of one supply holding some pods: counts by demand, ascending.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pattern {
    supply: usize,
    pods: Vec<(usize, u32)>,
}

/// The whole-pod plan for `demands` on `supplies`: every pod of every
/// demand on exactly one node. `None` when a demand has pods but no
/// supply, or the program cannot be solved. `fluid`, when given, is the
/// fluid program's split (`guide::split`): per demand, (supply, pods); its
/// per-node mixes start the program, so the generation begins near the
/// fluid optimum instead of searching its way there.
pub fn plan(
    demands: &[Demand],
    supplies: &[Supply],
    fluid: Option<&[Vec<(usize, u32)>]>,
) -> Option<Planned> {
    if demands.iter().any(|d| d.count > 0 && d.supplies.is_empty()) {
        return None;
    }
    let weights: Vec<[i64; 3]> = demands.iter().map(|d| ints(&d.request)).collect();
    let rooms: Vec<[i64; 3]> = supplies.iter().map(|s| ints(&s.room)).collect();
    let fit = |g: usize, s: usize| -> u32 {
        let w = &weights[g];
        let n = (0..3)
            .filter(|&r| w[r] > 0)
            .map(|r| (rooms[s][r] / w[r]).max(0))
            .min()
            .unwrap_or(i64::MAX);
        n.min(i64::from(demands[g].count)) as u32
    };
    // Per supply, the demands with pods that one of fits on it.
    let mut open: Vec<Vec<usize>> = vec![Vec::new(); supplies.len()];
    for (g, d) in demands.iter().enumerate().filter(|(_, d)| d.count > 0) {
        for &s in &d.supplies {
            if fit(g, s) > 0 {
                open[s].push(g);
            }
        }
    }
    let active: Vec<usize> = (0..demands.len())
        .filter(|&g| demands[g].count > 0)
        .collect();
    if active
        .iter()
        .any(|&g| demands[g].supplies.iter().all(|&s| fit(g, s) == 0))
    {
        return None;
    }
    let priced = undominated(&open, &rooms, supplies);
    // The supply of demand g that fits one of its pods and costs least by `cost`.
    #[allow(
        clippy::expect_used,
        reason = "only called for active demands, each of which fits some supply (checked above)"
    )]
    let cheapest = |g: usize, cost: &dyn Fn(usize) -> f64| {
        demands[g]
            .supplies
            .iter()
            .copied()
            .filter(|&s| fit(g, s) > 0)
            .min_by(|&a, &b| cost(a).total_cmp(&cost(b)).then(a.cmp(&b)))
            .expect("checked above: some supply fits")
    };

    // The start: each demand alone on the supply that holds it most cheaply per pod.
    let mut patterns: Vec<Pattern> = active
        .iter()
        .map(|&g| {
            let s = cheapest(g, &|s| supplies[s].price / f64::from(fit(g, s)));
            Pattern {
                supply: s,
                pods: vec![(g, fit(g, s))],
            }
        })
        .collect();
    let mut seen: FxHashSet<Pattern> = patterns.iter().cloned().collect();
    for p in fluid
        .map(|split| mixes(split, &weights, &rooms, demands))
        .unwrap_or_default()
    {
        if seen.insert(p.clone()) {
            patterns.push(p);
        }
    }

    let mut dual = Problem::new(OptimizationDirection::Maximize);
    let values: Vec<Option<Variable>> = {
        let mut v = vec![None; demands.len()];
        for &g in &active {
            v[g] = Some(dual.add_var(f64::from(demands[g].count), (0.0, f64::INFINITY)));
        }
        v
    };
    let row = |p: &Pattern| -> Vec<(Variable, f64)> {
        p.pods
            .iter()
            // Every demand a pattern holds is active (has a variable).
            .filter_map(|&(g, n)| values[g].map(|v| (v, f64::from(n))))
            .collect()
    };
    for p in &patterns {
        dual.add_constraint(row(p), ComparisonOp::Le, supplies[p.supply].price);
    }
    let mut solution = match dual.solve() {
        Ok(SolveOutcome::Solution(s)) => Some(s),
        _ => None,
    };
    let pods: usize = active.iter().map(|&g| demands[g].count as usize).sum();
    let budget = (pods * WORK_PER_POD).clamp(WORK_BUDGET.0, WORK_BUDGET.1);
    let mut work = 0usize;
    let mut bound = None;
    for _ in 0..MAX_ROUNDS {
        let Some(current) = solution.as_ref() else {
            break;
        };
        let pi: Vec<f64> = values
            .iter()
            .map(|v| v.map_or(0.0, |v| current.var_value(v).max(0.0)))
            .collect();
        let mut found: Vec<(f64, Pattern)> = Vec::new();
        let mut exhaustive = true;
        for &s in &priced {
            if work >= budget {
                exhaustive = false;
                break;
            }
            let items: Vec<Item> = open[s]
                .iter()
                .map(|&g| Item {
                    value: pi[g],
                    weight: weights[g],
                    max: fit(g, s),
                })
                .collect();
            let price = supplies[s].price;
            let best = knapsack::best(&items, rooms[s], price * (1.0 + PROFIT), KNAPSACK_BUDGET);
            work += best.searched;
            exhaustive &= best.searched < KNAPSACK_BUDGET;
            if best.counts.iter().all(|n| *n == 0) {
                continue;
            }
            let pods: Vec<(usize, u32)> = open[s]
                .iter()
                .zip(&best.counts)
                .filter(|(_, n)| **n > 0)
                .map(|(&g, &n)| (g, n))
                .collect();
            found.push((best.value / price, Pattern { supply: s, pods }));
        }
        found.retain(|(_, p)| !seen.contains(p));
        if found.is_empty() {
            // The values π are then feasible for the program over every
            // pattern once shrunk by the tolerance a pattern had to beat,
            // so Σ count·π bounds it from below (weak duality).
            if exhaustive {
                bound = Some(current.objective() / (1.0 + PROFIT));
            }
            break;
        }
        found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.supply.cmp(&b.1.supply)));
        for (_, p) in found.into_iter().take(PER_ROUND) {
            let Some(s) = solution.take() else { break };
            solution = match s.add_constraint(row(&p), ComparisonOp::Le, supplies[p.supply].price) {
                Ok(SolveOutcome::Solution(s)) => Some(s),
                _ => None,
            };
            seen.insert(p.clone());
            patterns.push(p);
        }
        if work >= budget {
            break;
        }
    }
    let mixed = round(demands, supplies, &active, &patterns);
    // Rounding can lose to each demand alone on the supply that holds it
    // most cheaply in whole nodes (few pods: 8 small pods on one node for
    // 0.13 rather than 7 on one for 0.11 and the eighth on another); then
    // that is the plan.
    let alone: Vec<Node> = active
        .iter()
        .flat_map(|&g| {
            let count = demands[g].count;
            let s = cheapest(g, &|s| {
                supplies[s].price * f64::from(count.div_ceil(fit(g, s)))
            });
            let per = fit(g, s);
            (0..count.div_ceil(per)).map(move |k| Node {
                supply: s,
                pods: vec![(g, per.min(count - k * per))],
            })
        })
        .collect();
    let cost = |nodes: &[Node]| nodes.iter().map(|n| supplies[n.supply].price).sum::<f64>();
    let nodes = if cost(&alone) < cost(&mixed) - 1e-9 {
        alone
    } else {
        mixed
    };
    Some(Planned { nodes, bound })
}

/// One node's share of each supply's pods in a fluid split: the supply
/// takes x nodes' worth (its busiest resource), so ⌊pods / x⌋ of each
/// demand fit one node together.
fn mixes(
    split: &[Vec<(usize, u32)>],
    weights: &[[i64; 3]],
    rooms: &[[i64; 3]],
    demands: &[Demand],
) -> Vec<Pattern> {
    let mut by_supply: Vec<Vec<(usize, u32)>> = vec![Vec::new(); rooms.len()];
    for (g, shares) in split.iter().enumerate() {
        for &(s, n) in shares {
            by_supply[s].push((g, n));
        }
    }
    by_supply
        .into_iter()
        .enumerate()
        .filter(|(_, pods)| !pods.is_empty())
        .filter_map(|(s, pods)| {
            let x = (0..3)
                .map(|r| {
                    pods.iter()
                        .map(|&(g, n)| (weights[g][r] * i64::from(n)) as f64)
                        .sum::<f64>()
                        / rooms[s][r].max(1) as f64
                })
                .fold(0.0, f64::max);
            let pods: Vec<(usize, u32)> = pods
                .into_iter()
                .map(|(g, n)| {
                    (
                        g,
                        ((f64::from(n) / x + 1e-9).floor() as u32).min(demands[g].count),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            let fits = (0..3).all(|r| {
                pods.iter()
                    .map(|&(g, n)| weights[g][r] * i64::from(n))
                    .sum::<i64>()
                    <= rooms[s][r]
            });
            (fits && !pods.is_empty()).then_some(Pattern { supply: s, pods })
        })
        .collect()
}

/// Whole nodes from the program over `patterns`: ⌊x_p⌋ of each, then
/// rounds over the used patterns trimmed to the pods left.
fn round(
    demands: &[Demand],
    supplies: &[Supply],
    active: &[usize],
    patterns: &[Pattern],
) -> Vec<Node> {
    let mut left: Vec<u32> = demands.iter().map(|d| d.count).collect();
    let mut nodes = Vec::new();
    // The single-demand starts stay in every round, so each is solvable.
    let starts = &patterns[..active.len()];
    let mut pool: Vec<Pattern> = patterns.to_vec();
    while active.iter().any(|&g| left[g] > 0) {
        let trimmed: Vec<Pattern> = pool.iter().filter_map(|p| trim(p, &left)).collect();
        let x = match cover(supplies, active, &left, &trimmed) {
            Some(x) => x,
            None => {
                // Cannot happen with the starts in; commit one start so the loop ends.
                #[allow(
                    clippy::expect_used,
                    reason = "the loop runs while pods are left, and the starts hold every demand"
                )]
                let p = starts
                    .iter()
                    .find_map(|p| trim(p, &left))
                    .expect("pods are left");
                commit(&p, &mut left, &mut nodes);
                continue;
            }
        };
        let mut by_use: Vec<usize> = (0..trimmed.len()).filter(|&k| x[k] > 1e-9).collect();
        by_use.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
        let mut committed = false;
        for &k in &by_use {
            for _ in 0..(x[k] + 1e-6).floor() as u64 {
                let Some(p) = trim(&trimmed[k], &left) else {
                    break;
                };
                commit(&p, &mut left, &mut nodes);
                committed = true;
            }
        }
        if !committed {
            // Every x below one: the most used pattern, once.
            #[allow(
                clippy::expect_used,
                reason = "trimmed patterns all hold pods that are left"
            )]
            let p = trim(&trimmed[by_use[0]], &left).expect("a used pattern has pods left");
            commit(&p, &mut left, &mut nodes);
        }
        // Later rounds choose among what this one used, and the starts.
        let mut next: Vec<Pattern> = starts.to_vec();
        next.extend(by_use.iter().map(|&k| trimmed[k].clone()));
        pool = next;
    }
    nodes
}

/// The program over `patterns` for the pods `left`: x per pattern.
fn cover(
    supplies: &[Supply],
    active: &[usize],
    left: &[u32],
    patterns: &[Pattern],
) -> Option<Vec<f64>> {
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let x: Vec<Variable> = patterns
        .iter()
        .map(|p| lp.add_var(supplies[p.supply].price, (0.0, f64::INFINITY)))
        .collect();
    let mut rows: Vec<Vec<(Variable, f64)>> = vec![Vec::new(); left.len()];
    for (p, &v) in patterns.iter().zip(&x) {
        for &(g, n) in &p.pods {
            rows[g].push((v, f64::from(n)));
        }
    }
    for &g in active.iter().filter(|&&g| left[g] > 0) {
        lp.add_constraint(
            std::mem::take(&mut rows[g]),
            ComparisonOp::Ge,
            f64::from(left[g]),
        );
    }
    let solution: Solution = match lp.solve() {
        Ok(SolveOutcome::Solution(s)) => s,
        _ => return None,
    };
    Some(x.iter().map(|&v| solution.var_value(v)).collect())
}

/// `p` with each count cut to the pods left; `None` when none are.
fn trim(p: &Pattern, left: &[u32]) -> Option<Pattern> {
    let pods: Vec<(usize, u32)> = p
        .pods
        .iter()
        .map(|&(g, n)| (g, n.min(left[g])))
        .filter(|(_, n)| *n > 0)
        .collect();
    (!pods.is_empty()).then_some(Pattern {
        supply: p.supply,
        pods,
    })
}

fn commit(p: &Pattern, left: &mut [u32], nodes: &mut Vec<Node>) {
    for &(g, n) in &p.pods {
        left[g] -= n;
    }
    nodes.push(Node {
        supply: p.supply,
        pods: p.pods.clone(),
    });
}

/// The supplies worth pricing: one is dropped when another is open to
/// every demand it is open to, has at least its room in each resource and
/// costs no more (ties: the lower index stays). Any pattern of the dropped
/// one is a pattern of the other at no more cost. In ascending order.
///
/// Supplies are visited so that whatever beats one comes before it (no
/// dearer, then roomier, then the lower index), and beating is transitive,
/// so each is compared with the undominated ones before it only, not with
/// every supply (the whole catalog under a few zone pins is thousands).
fn undominated(open: &[Vec<usize>], rooms: &[[i64; 3]], supplies: &[Supply]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..supplies.len())
        .filter(|&s| !open[s].is_empty())
        .collect();
    order.sort_by(|&a, &b| {
        supplies[a]
            .price
            .total_cmp(&supplies[b].price)
            .then_with(|| rooms[b].cmp(&rooms[a]))
            .then(a.cmp(&b))
    });
    let mut kept: Vec<usize> = Vec::new();
    for j in order {
        if !kept.iter().any(|&i| beats(open, rooms, supplies, i, j)) {
            kept.push(j);
        }
    }
    kept.sort_unstable();
    kept
}

/// Supply `i` stands for `j`: open to every demand `j` is open to, at
/// least its room in each resource, no dearer (the same node: the lower
/// index stands for the other).
fn beats(open: &[Vec<usize>], rooms: &[[i64; 3]], supplies: &[Supply], i: usize, j: usize) -> bool {
    let (pi, pj) = (supplies[i].price, supplies[j].price);
    let roomier = (0..3).all(|r| rooms[i][r] >= rooms[j][r]);
    let same = pi == pj && rooms[i] == rooms[j];
    i != j
        && roomier
        && pi <= pj
        && (!same || i < j)
        && open[j].iter().all(|g| open[i].binary_search(g).is_ok())
}

/// Millicores, bytes and pod slots from the guide's cores, GiB and pods.
fn ints(u: &[f64; 3]) -> [i64; 3] {
    [
        (u[0] * 1000.0).round() as i64,
        (u[1] * GIB as f64).round() as i64,
        u[2].round() as i64,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packing::guide;
    use proptest::prelude::*;

    proptest! {
        /// The supplies kept are exactly those no other supply beats.
        #[test]
        fn undominated_keeps_exactly_what_nothing_beats(
            supplies in proptest::collection::vec((1u32..4, 1u32..4, 1u32..4, 1u32..4, 0u8..8), 1..24),
        ) {
            let rooms: Vec<[i64; 3]> = supplies.iter().map(|&(c, m, p, _, _)| [i64::from(c), i64::from(m), i64::from(p)]).collect();
            let priced: Vec<Supply> = supplies.iter().map(|&(c, m, p, price, _)| Supply { price: f64::from(price) / 4.0, room: [f64::from(c), f64::from(m), f64::from(p)] }).collect();
            let open: Vec<Vec<usize>> = supplies.iter().map(|&(.., mask)| (0..3).filter(|g| mask & (1 << g) != 0).collect()).collect();
            let everyone = (0..priced.len()).filter(|&j| !open[j].is_empty() && !(0..priced.len()).any(|i| !open[i].is_empty() && beats(&open, &rooms, &priced, i, j)));
            prop_assert_eq!(undominated(&open, &rooms, &priced), everyone.collect::<Vec<_>>());
        }
    }

    fn cost(supplies: &[Supply], nodes: &[Node]) -> f64 {
        nodes.iter().map(|n| supplies[n.supply].price).sum()
    }

    /// Every pod on one node, and every node holding what it takes.
    fn check(demands: &[Demand], supplies: &[Supply], nodes: &[Node]) -> Result<(), TestCaseError> {
        let mut placed = vec![0u32; demands.len()];
        for n in nodes {
            let mut used = [0i64; 3];
            for &(g, k) in &n.pods {
                prop_assert!(
                    demands[g].supplies.contains(&n.supply),
                    "demand {g} is not open to supply {}",
                    n.supply
                );
                placed[g] += k;
                let w = ints(&demands[g].request);
                for r in 0..3 {
                    used[r] += w[r] * i64::from(k);
                }
            }
            let room = ints(&supplies[n.supply].room);
            prop_assert!(
                (0..3).all(|r| used[r] <= room[r]),
                "node {n:?} holds more than its room"
            );
        }
        for (g, d) in demands.iter().enumerate() {
            prop_assert_eq!(placed[g], d.count);
        }
        Ok(())
    }

    #[test]
    fn mixes_cpu_heavy_and_memory_heavy_pods_on_one_node() {
        // A 16-core/64-GiB node holds four 3.5-core/2-GiB pods (by CPU) or
        // four 0.5-core/14-GiB ones (by memory): 4 nodes for 8 of each kind
        // apart. Four of each fill one exactly: 2 nodes.
        let demands = vec![
            Demand {
                count: 8,
                request: [3.5, 2.0, 1.0],
                supplies: vec![0],
            },
            Demand {
                count: 8,
                request: [0.5, 14.0, 1.0],
                supplies: vec![0],
            },
        ];
        let supplies = vec![Supply {
            price: 1.0,
            room: [16.0, 64.0, 58.0],
        }];
        let nodes = plan(&demands, &supplies, None).unwrap().nodes;
        check(&demands, &supplies, &nodes).unwrap();
        assert_eq!(nodes.len(), 2);
        assert!(nodes.iter().all(|n| n.pods == vec![(0, 4), (1, 4)]));
    }

    #[test]
    fn a_demand_with_no_supply_means_no_plan() {
        let demands = vec![Demand {
            count: 1,
            request: [1.0, 1.0, 1.0],
            supplies: vec![],
        }];
        assert!(
            plan(
                &demands,
                &[Supply {
                    price: 1.0,
                    room: [4.0, 4.0, 10.0]
                }],
                None
            )
            .is_none()
        );
        // Nor when it is open to one it does not fit on.
        let demands = vec![Demand {
            count: 1,
            request: [8.0, 1.0, 1.0],
            supplies: vec![0],
        }];
        assert!(
            plan(
                &demands,
                &[Supply {
                    price: 1.0,
                    room: [4.0, 4.0, 10.0]
                }],
                None
            )
            .is_none()
        );
    }

    fn instance() -> impl Strategy<Value = (Vec<Demand>, Vec<Supply>)> {
        let supply = (1u32..5, 1u32..5, 2u32..12).prop_map(|(cpu, mem, pods)| {
            let (cpu, mem) = (f64::from(cpu * 2), f64::from(mem * 4));
            Supply {
                price: 0.04 * cpu + 0.005 * mem + 0.01,
                room: [cpu, mem, f64::from(pods)],
            }
        });
        (
            proptest::collection::vec(supply, 1..6),
            proptest::collection::vec((1u32..40, 1u32..16, 1u32..32, any::<u8>()), 1..5),
        )
            .prop_map(|(supplies, raw)| {
                let demands = raw
                    .into_iter()
                    .map(|(count, cpu, mem, mask)| {
                        let request = [f64::from(cpu) / 4.0, f64::from(mem) / 4.0, 1.0];
                        let open: Vec<usize> = (0..supplies.len())
                            .filter(|&s| mask & (1 << s) != 0 || s == 0)
                            .collect();
                        Demand {
                            count,
                            request,
                            supplies: open,
                        }
                    })
                    .collect();
                (demands, supplies)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn plans_place_every_pod_within_room_and_cost_no_more_than_a_node_per_demand_kind(
            (demands, supplies) in instance(),
        ) {
            let fits = |d: &Demand| d.supplies.iter().any(|&s| (0..3).all(|r| d.request[r] <= supplies[s].room[r]));
            let fluid = guide::split(&demands, &supplies);
            match plan(&demands, &supplies, fluid.as_deref()) {
                None => prop_assert!(!demands.iter().all(fits)),
                Some(Planned { nodes, bound }) => {
                    check(&demands, &supplies, &nodes)?;
                    // The whole-pod bound is one: at least the fluid bound (the
                    // program's optimum, not its rounded split's cost, which
                    // may exceed it), at most the plan.
                    if let (Some(bound), Some(fluid_bound)) = (bound, guide::optimum(&demands, &supplies)) {
                        prop_assert!(bound >= fluid_bound * (1.0 - 1e-3) - 1e-9, "bound {bound} < fluid {fluid_bound}");
                        prop_assert!(bound <= cost(&supplies, &nodes) + 1e-9, "bound {bound} > plan {}", cost(&supplies, &nodes));
                    }
                    // No dearer than each demand alone on its best supply.
                    let alone: f64 = demands
                        .iter()
                        .map(|d| {
                            d.supplies
                                .iter()
                                .filter_map(|&s| {
                                    let room = ints(&supplies[s].room);
                                    let w = ints(&d.request);
                                    let per = (0..3).map(|r| room[r] / w[r]).min().unwrap();
                                    (per > 0).then(|| supplies[s].price * f64::from(d.count.div_ceil(per as u32)))
                                })
                                .fold(f64::INFINITY, f64::min)
                        })
                        .sum();
                    prop_assert!(cost(&supplies, &nodes) <= alone + 1e-9, "{} > {}", cost(&supplies, &nodes), alone);
                    // Deterministic.
                    prop_assert_eq!(plan(&demands, &supplies, fluid.as_deref()), Some(Planned { nodes, bound }));
                }
            }
        }
    }
}
