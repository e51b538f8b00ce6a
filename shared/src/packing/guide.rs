//! The solver's guide to instance types: a linear program over the pending
//! pods that says which types serve them most cheaply and how many pods of
//! each kind each type should take.
//!
//! The greedy packer alone judges a claim by what its pods cost now, so on
//! real catalogs it settles on one family (say m6g, 4 GiB per core) for a
//! mix that two families serve more cheaply together: CPU-heavy pods on c6g
//! and memory-heavy ones on r6g. This program sees the whole demand at once:
//!
//! minimise Σ_c price_c · x_c subject to
//!   Σ_c n_gc = count_g                         for each demand g,
//!   Σ_g request_g,r · n_gc ≤ room_c,r · x_c    for each supply c and r ∈ {cpu, memory, pods},
//!   x, n ≥ 0,
//!
//! where x_c is how many nodes of supply c (fractional) and n_gc how many
//! pods of demand g go there. A demand only uses supplies a single one of
//! its pods fits on. The split is then rounded to whole pods; the packer
//! places each pod on claims of its type and right-sizes them at the end.
//!
//! It is a guide, not a plan: zones, spreads and affinity are not seen, and
//! pods are fluid. The solver keeps the guided plan only when it is cheaper.

use std::cell::RefCell;

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOutcome, Variable};

/// Pods of one size that admit the same supplies.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    pub count: u32,
    /// Of one pod: cores, GiB, pods.
    pub request: [f64; 3],
    /// The supplies one such pod fits on (indices into the supplies).
    pub supplies: Vec<usize>,
}

/// One kind of node: an instance type at its price under some requirements.
#[derive(Debug, Clone, PartialEq)]
pub struct Supply {
    pub price: f64,
    /// Room for pods on one node: cores, GiB, pods.
    pub room: [f64; 3],
}

/// A split per demand: (supply, pods) pairs.
pub type Split = Vec<Vec<(usize, u32)>>;

/// The last program split, with its answer: the solves of one batch pose
/// the same program (the pattern and the guided solve), and it is solved
/// once.
#[derive(Debug, Default)]
pub struct SplitMemo(RefCell<Option<SplitMemoEntry>>);

/// What [`SplitMemo`] keeps: the demands and supplies a split was worked out
/// for, and the split.
type SplitMemoEntry = (Vec<Demand>, Vec<Supply>, Option<Split>);

impl SplitMemo {
    /// `split`, or its answer for the same program asked last.
    pub fn split(&self, demands: &[Demand], supplies: &[Supply]) -> Option<Split> {
        if let Some((d, s, answer)) = &*self.0.borrow()
            && d == demands
            && s == supplies
        {
            return answer.clone();
        }
        let answer = split(demands, supplies);
        *self.0.borrow_mut() = Some((demands.to_vec(), supplies.to_vec(), answer.clone()));
        answer
    }
}

/// Per demand, the pods each supply takes: (supply, pods), summing to the
/// demand's count. `None` when the program has no solution (a demand with
/// no supply) or the solver fails.
pub fn split(demands: &[Demand], supplies: &[Supply]) -> Option<Split> {
    let (_, shares) = solve(demands, supplies)?;
    Some(
        demands
            .iter()
            .zip(shares)
            .map(|(d, row)| round(d.count, row.into_iter()))
            .collect(),
    )
}

/// The program's optimum: what the fluid pods cost at least, so no plan of
/// whole pods costs less. (A rounded split's `cost` may be a little more.)
pub fn optimum(demands: &[Demand], supplies: &[Supply]) -> Option<f64> {
    solve(demands, supplies).map(|(optimum, _)| optimum)
}

/// Per demand, the fractional pods each supply takes: (supply, pods).
type Shares = Vec<Vec<(usize, f64)>>;

/// The program's optimum and its shares.
fn solve(demands: &[Demand], supplies: &[Supply]) -> Option<(f64, Shares)> {
    if demands.iter().any(|d| d.count > 0 && d.supplies.is_empty()) {
        return None;
    }
    let kept = undominated(demands, supplies);
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    // Node counts, per kept supply.
    let x: Vec<Variable> = kept
        .iter()
        .map(|&c| lp.add_var(supplies[c].price, (0.0, f64::INFINITY)))
        .collect();
    let position: Vec<Option<usize>> = {
        let mut p = vec![None; supplies.len()];
        for (k, &c) in kept.iter().enumerate() {
            p[c] = Some(k);
        }
        p
    };
    // Per kept supply, the (demand, pods variable) that may go there.
    let mut takes: Vec<Vec<(usize, Variable)>> = vec![Vec::new(); kept.len()];
    let mut vars: Vec<Vec<(usize, Variable)>> = Vec::with_capacity(demands.len());
    for (g, d) in demands.iter().enumerate() {
        let mut row = Vec::new();
        if d.count > 0 {
            for &c in &d.supplies {
                if let Some(k) = position[c] {
                    let v = lp.add_var(0.0, (0.0, f64::INFINITY));
                    takes[k].push((g, v));
                    row.push((c, v));
                }
            }
            lp.add_constraint(
                row.iter().map(|(_, v)| (*v, 1.0)).collect::<Vec<_>>(),
                ComparisonOp::Eq,
                f64::from(d.count),
            );
        }
        vars.push(row);
    }
    for (k, &c) in kept.iter().enumerate() {
        for r in 0..3 {
            if takes[k].iter().all(|(g, _)| demands[*g].request[r] <= 0.0) {
                continue;
            }
            let mut expr: Vec<(Variable, f64)> = vec![(x[k], -supplies[c].room[r])];
            expr.extend(takes[k].iter().map(|(g, v)| (*v, demands[*g].request[r])));
            lp.add_constraint(expr, ComparisonOp::Le, 0.0);
        }
    }
    let solution = match lp.solve() {
        Ok(SolveOutcome::Solution(s)) => s,
        _ => return None,
    };
    let shares = vars
        .iter()
        .map(|row| {
            row.iter()
                .map(|(c, v)| (*c, solution.var_value(*v)))
                .collect()
        })
        .collect();
    Some((solution.objective(), shares))
}

/// What a split costs in fractional nodes: per supply, its price times
/// the nodes its busiest resource needs.
pub fn cost(demands: &[Demand], supplies: &[Supply], split: &[Vec<(usize, u32)>]) -> f64 {
    let mut load = vec![[0.0f64; 3]; supplies.len()];
    for (d, shares) in demands.iter().zip(split) {
        for &(c, n) in shares {
            for (load, request) in load[c].iter_mut().zip(d.request) {
                *load += request * f64::from(n);
            }
        }
    }
    let nodes = |c: usize| {
        (0..3)
            .filter(|&r| supplies[c].room[r] > 0.0)
            .map(|r| load[c][r] / supplies[c].room[r])
            .fold(0.0, f64::max)
    };
    (0..supplies.len())
        .map(|c| supplies[c].price * nodes(c))
        .sum()
}

/// Whole pods from a fractional split: floors, then the pods left over to
/// the largest fractions (ties to the earlier supply).
fn round(count: u32, shares: impl Iterator<Item = (usize, f64)>) -> Vec<(usize, u32)> {
    let shares: Vec<(usize, f64)> = shares.map(|(c, v)| (c, v.max(0.0))).collect();
    let mut whole: Vec<(usize, u32)> = shares
        .iter()
        .map(|(c, v)| (*c, (v + 1e-6).floor() as u32))
        .collect();
    let placed: u32 = whole.iter().map(|(_, n)| n).sum();
    if placed > count {
        // Numerical noise only: trim from the largest.
        let mut excess = placed - count;
        whole.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for w in &mut whole {
            let cut = excess.min(w.1);
            w.1 -= cut;
            excess -= cut;
        }
    } else {
        let mut by_fraction: Vec<usize> = (0..shares.len()).collect();
        by_fraction.sort_by(|&a, &b| {
            let fa = shares[a].1 - f64::from(whole[a].1);
            let fb = shares[b].1 - f64::from(whole[b].1);
            fb.total_cmp(&fa).then(a.cmp(&b))
        });
        for &i in by_fraction.iter().cycle().take((count - placed) as usize) {
            whole[i].1 += 1;
        }
    }
    whole.retain(|(_, n)| *n > 0);
    whole.sort_by_key(|(c, _)| *c);
    whole
}

/// The supplies worth the program's time: a supply is dropped when another
/// one, open to every demand it is open to, gives at least as much of each
/// resource per dollar (copies of it cover one of the dropped supply for no
/// more money; the program buys fractions of nodes, so only that ratio
/// matters).
fn undominated(demands: &[Demand], supplies: &[Supply]) -> Vec<usize> {
    let words = demands.len().div_ceil(64);
    let mut open = vec![vec![0u64; words]; supplies.len()];
    for (g, d) in demands.iter().enumerate().filter(|(_, d)| d.count > 0) {
        for &c in &d.supplies {
            open[c][g / 64] |= 1 << (g % 64);
        }
    }
    let used: Vec<usize> = (0..supplies.len())
        .filter(|&c| open[c].iter().any(|w| *w != 0))
        .collect();
    let covers = |i: usize, j: usize| open[i].iter().zip(&open[j]).all(|(a, b)| a & b == *b);
    // Whether some supply dominates `j` does not depend on the order they
    // are tried in; those giving the most per dollar are tried first, as
    // they are the likeliest to (on a catalog whose larger sizes give more
    // per dollar, the first try finds one instead of a scan of the smaller).
    let per_dollar = |c: usize| {
        let s = &supplies[c];
        if s.price > 0.0 {
            s.room.iter().sum::<f64>() / s.price
        } else {
            f64::INFINITY
        }
    };
    let mut tried = used.clone();
    tried.sort_by(|&a, &b| per_dollar(b).total_cmp(&per_dollar(a)).then(a.cmp(&b)));
    used.iter()
        .copied()
        .filter(|&j| {
            !tried.iter().any(|&i| {
                if i == j || !covers(i, j) {
                    return false;
                }
                let (si, sj) = (&supplies[i], &supplies[j]);
                let (Some(lambda), Some(back)) = (copies(si, sj), copies(sj, si)) else {
                    return false;
                };
                let cost = lambda * si.price;
                let tie = (cost - sj.price).abs() <= 1e-9 * sj.price.max(1e-9);
                // On a tie j is no better than i, so it goes too — unless
                // the two are the same node scaled (then either can stand
                // for the other): the lower index stays, or the one open
                // to more demands.
                let proportional = lambda * back <= 1.0 + 1e-9;
                cost < sj.price && !tie || tie && (!proportional || i < j || !covers(j, i))
            })
        })
        .collect()
}

/// How many nodes of `a` hold what one node of `b` holds, in every resource.
fn copies(a: &Supply, b: &Supply) -> Option<f64> {
    let mut lambda: f64 = 0.0;
    for r in 0..3 {
        if b.room[r] > 0.0 {
            if a.room[r] <= 0.0 {
                return None;
            }
            lambda = lambda.max(b.room[r] / a.room[r]);
        }
    }
    Some(lambda)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_heavy_pods_go_to_the_cpu_type_and_memory_heavy_ones_to_the_memory_type() {
        let supplies = [
            Supply {
                price: 1.0,
                room: [16.0, 32.0, 100.0],
            }, // 2 GiB per core
            Supply {
                price: 1.5,
                room: [8.0, 64.0, 100.0],
            }, // 8 GiB per core
            Supply {
                price: 1.8,
                room: [16.0, 64.0, 100.0],
            }, // 4 GiB per core: the pair costs 17.5 $, any use of this more
        ];
        let demands = [
            Demand {
                count: 160,
                request: [1.0, 2.0, 1.0],
                supplies: vec![0, 1, 2],
            },
            Demand {
                count: 80,
                request: [0.5, 4.0, 1.0],
                supplies: vec![0, 1, 2],
            },
        ];
        let s = split(&demands, &supplies).expect("a solution");
        assert_eq!(s[0], vec![(0, 160)]);
        assert_eq!(s[1], vec![(1, 80)]);
    }

    #[test]
    fn a_demand_uses_only_the_supplies_it_fits_and_none_means_no_split() {
        let supplies = [
            Supply {
                price: 1.0,
                room: [4.0, 8.0, 20.0],
            },
            Supply {
                price: 3.0,
                room: [16.0, 32.0, 50.0],
            },
        ];
        let demands = [Demand {
            count: 7,
            request: [6.0, 1.0, 1.0],
            supplies: vec![1],
        }];
        assert_eq!(split(&demands, &supplies), Some(vec![vec![(1, 7)]]));
        let impossible = [Demand {
            count: 1,
            request: [64.0, 1.0, 1.0],
            supplies: vec![],
        }];
        assert_eq!(split(&impossible, &supplies), None);
    }

    fn instance() -> impl Strategy<Value = (Vec<Demand>, Vec<Supply>)> {
        let supply = (1u32..64, 1u32..256, 0.05f64..5.0).prop_map(|(cpu, mem, price)| Supply {
            price,
            room: [f64::from(cpu), f64::from(mem), 110.0],
        });
        proptest::collection::vec(supply, 1..12)
            .prop_flat_map(|supplies| {
                let n = supplies.len();
                let demand = (
                    1u32..300,
                    1u32..16_000,
                    1u32..64_000,
                    proptest::collection::vec(any::<bool>(), n),
                )
                    .prop_map(move |(count, cpu, mem, open)| {
                        (
                            count,
                            [f64::from(cpu) / 1000.0, f64::from(mem) / 1024.0, 1.0],
                            open,
                        )
                    });
                (Just(supplies), proptest::collection::vec(demand, 1..6))
            })
            .prop_map(|(supplies, raw)| {
                let demands = raw
                    .into_iter()
                    .map(|(count, request, open)| Demand {
                        count,
                        request,
                        supplies: (0..supplies.len())
                            .filter(|&c| {
                                open[c] && (0..3).all(|r| request[r] <= supplies[c].room[r])
                            })
                            .collect(),
                    })
                    .collect();
                (demands, supplies)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Every pod is given a supply it fits on, and dropping dominated
        /// supplies never makes the fluid cost of the split worse than
        /// solving over all of them.
        #[test]
        fn splits_place_every_pod_on_a_supply_it_fits((demands, supplies) in instance()) {
            let Some(s) = split(&demands, &supplies) else {
                prop_assert!(demands.iter().any(|d| d.supplies.is_empty()));
                return Ok(());
            };
            for (d, row) in demands.iter().zip(&s) {
                prop_assert_eq!(row.iter().map(|(_, n)| n).sum::<u32>(), d.count);
                prop_assert!(row.iter().all(|(c, _)| d.supplies.contains(c)));
            }
            // Each demand alone on its cheapest-per-pod supply is a feasible
            // fluid split; the program's (before rounding) is no dearer, and
            // rounding moves less than one pod per (demand, supply).
            let naive: Vec<Vec<(usize, u32)>> = demands.iter().map(|d| {
                let best = d.supplies.iter().copied().min_by(|&a, &b| {
                    let per = |c: usize| supplies[c].price * (0..3).map(|r| d.request[r] / supplies[c].room[r]).fold(0.0, f64::max);
                    per(a).total_cmp(&per(b))
                });
                best.map(|c| vec![(c, d.count)]).unwrap_or_default()
            }).collect();
            let slack: f64 = demands.iter().zip(&s).map(|(d, row)| row.len() as f64 * row.iter().map(|(c, _)| {
                supplies[*c].price * (0..3).map(|r| d.request[r] / supplies[*c].room[r]).fold(0.0, f64::max)
            }).fold(0.0, f64::max)).sum();
            prop_assert!(cost(&demands, &supplies, &s) <= cost(&demands, &supplies, &naive) + slack + 1e-6);
        }
    }
}
