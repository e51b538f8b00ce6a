//! The pricing step of the whole-pod pattern guide (`patterns`): the most
//! valuable set of whole pods one node of a supply can hold, given a value
//! per pod of each demand (the duals of the pattern program).
//!
//! A bounded knapsack in three resources (millicores, bytes, pod slots),
//! solved depth first with a node budget. The bound at each node is the
//! least, over the three resources, of the fractional knapsack in that
//! resource alone: each relaxes the other two, so each is an upper bound.

/// One kind of pod a node may take.
#[derive(Debug, Clone)]
pub struct Item {
    pub value: f64,
    /// Of one pod: millicores, bytes, pod slots.
    pub weight: [i64; 3],
    /// At most this many (the pods left of the demand).
    pub max: u32,
}

/// The best pattern found: its value and the count of each item.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    pub value: f64,
    pub counts: Vec<u32>,
    /// Search nodes the answer took (at most the budget).
    pub searched: usize,
}

/// The most valuable whole-pod packing of `items` into `room` worth more
/// than `beat` that the search finds within `budget` nodes (the optimum
/// when the budget is not reached). None found: value `beat`, no pods.
/// (The pattern program asks only for packings worth more than the node's
/// price, and the search prunes every branch that cannot beat it.)
pub fn best(items: &[Item], room: [i64; 3], beat: f64, budget: usize) -> Pattern {
    // Search order: value per share of the node, densest first.
    let share = |it: &Item| {
        (0..3)
            .map(|r| it.weight[r] as f64 / room[r].max(1) as f64)
            .sum::<f64>()
    };
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].value > 0.0 && items[i].max > 0)
        .collect();
    order.sort_by(|&a, &b| {
        (items[b].value / share(&items[b]))
            .total_cmp(&(items[a].value / share(&items[a])))
            .then(a.cmp(&b))
    });
    // The bounds: fractional knapsacks in one resource, or in a sum of
    // resources each scaled by the room (a surrogate: any packing meets
    // it); each with its items by value per unit, densest first.
    let scale = room.map(|r| 1.0 / r.max(1) as f64);
    let surrogates: Vec<Surrogate> = SURROGATES
        .iter()
        .map(|mask| {
            let lambda: [f64; 3] = [0, 1, 2].map(|r| {
                if mask[r] {
                    if mask.iter().filter(|m| **m).count() == 1 {
                        1.0
                    } else {
                        scale[r]
                    }
                } else {
                    0.0
                }
            });
            let weight: Vec<f64> = items
                .iter()
                .map(|it| (0..3).map(|r| lambda[r] * it.weight[r] as f64).sum())
                .collect();
            let mut by_density = order.clone();
            let density = |i: usize| items[i].value / weight[i].max(f64::MIN_POSITIVE);
            by_density.sort_by(|&a, &b| density(b).total_cmp(&density(a)).then(a.cmp(&b)));
            Surrogate {
                lambda,
                weight,
                by_density,
            }
        })
        .collect();
    let mut search = Search {
        items,
        order: &order,
        depth_of: {
            let mut d = vec![usize::MAX; items.len()];
            for (k, &i) in order.iter().enumerate() {
                d[i] = k;
            }
            d
        },
        surrogates,
        counts: vec![0; items.len()],
        best: Pattern {
            value: beat,
            counts: vec![0; items.len()],
            searched: 0,
        },
        budget,
    };
    search.explore(0, room, 0.0);
    Pattern {
        searched: budget - search.budget,
        ..search.best
    }
}

struct Search<'a> {
    items: &'a [Item],
    order: &'a [usize],
    depth_of: Vec<usize>,
    surrogates: Vec<Surrogate>,
    counts: Vec<u32>,
    best: Pattern,
    budget: usize,
}

impl Search<'_> {
    fn explore(&mut self, depth: usize, rem: [i64; 3], value: f64) {
        if value > self.best.value + 1e-12 {
            self.best = Pattern {
                value,
                counts: self.counts.clone(),
                searched: 0,
            };
        }
        if depth == self.order.len() || self.budget == 0 {
            return;
        }
        self.budget -= 1;
        if self.bound(depth, rem, self.best.value + 1e-12 - value)
            <= self.best.value + 1e-12 - value
        {
            return;
        }
        let i = self.order[depth];
        let it = &self.items[i];
        let fit = (0..3)
            .filter(|&r| it.weight[r] > 0)
            .map(|r| (rem[r] / it.weight[r]) as u32)
            .min()
            .unwrap_or(it.max);
        let top = fit.min(it.max);
        for n in (0..=top).rev() {
            let left = [0, 1, 2].map(|r| rem[r] - it.weight[r] * i64::from(n));
            self.counts[i] = n;
            self.explore(depth + 1, left, value + it.value * f64::from(n));
            if self.budget == 0 {
                break;
            }
        }
        self.counts[i] = 0;
    }

    /// The least over the surrogates of the fractional knapsack of the
    /// items not yet decided (depth `depth` on) in what is left of the room;
    /// it stops at the first one no more than `need`.
    fn bound(&self, depth: usize, rem: [i64; 3], need: f64) -> f64 {
        let mut least = f64::INFINITY;
        for sur in &self.surrogates {
            let mut cap: f64 = (0..3).map(|r| sur.lambda[r] * rem[r] as f64).sum();
            let mut v = 0.0;
            for &i in &sur.by_density {
                if self.depth_of[i] < depth {
                    continue;
                }
                let it = &self.items[i];
                let w = sur.weight[i];
                let all = f64::from(it.max);
                if w <= 0.0 {
                    v += it.value * all;
                    continue;
                }
                let take = (cap / w).min(all);
                v += take * it.value;
                cap -= take * w;
                if cap <= 0.0 {
                    break;
                }
            }
            least = least.min(v);
            if least <= need {
                break;
            }
        }
        least
    }
}

/// Which resources each bound sums (scaled by the room when several).
const SURROGATES: [[bool; 3]; 7] = [
    [true, false, false],
    [false, true, false],
    [false, false, true],
    [true, true, false],
    [true, false, true],
    [false, true, true],
    [true, true, true],
];

/// One bound: its multipliers per resource, each item's weight in it, and
/// the items by value per unit of that weight, densest first.
struct Surrogate {
    lambda: [f64; 3],
    weight: Vec<f64>,
    by_density: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every packing, for small cases.
    fn brute(items: &[Item], room: [i64; 3]) -> f64 {
        fn go(items: &[Item], k: usize, rem: [i64; 3]) -> f64 {
            if k == items.len() {
                return 0.0;
            }
            let it = &items[k];
            let mut best: f64 = 0.0;
            for n in 0..=it.max {
                let left = [0, 1, 2].map(|r| rem[r] - it.weight[r] * i64::from(n));
                if left.iter().any(|v| *v < 0) {
                    break;
                }
                best = best.max(it.value.max(0.0) * f64::from(n) + go(items, k + 1, left));
            }
            best
        }
        go(items, 0, room)
    }

    #[test]
    fn a_memory_heavy_pod_beside_cpu_heavy_ones() {
        // 8 cores, 16 GiB (in GiB units), 20 slots: four 2-core/1-GiB pods
        // and one 0-core/12-GiB pod beat eight of the small ones.
        let items = [
            Item {
                value: 1.0,
                weight: [2000, 1, 1],
                max: 10,
            },
            Item {
                value: 1.5,
                weight: [0, 12, 1],
                max: 10,
            },
        ];
        let p = best(&items, [8000, 16, 20], 0.0, 10_000);
        assert_eq!(p.counts, vec![4, 1]);
        assert!((p.value - 5.5).abs() < 1e-9);
    }

    proptest! {
        #[test]
        fn finds_the_optimum_within_budget(
            raw in proptest::collection::vec((0.0f64..3.0, 1i64..8, 1i64..8, 0u32..4), 1..5),
            cpu in 1i64..20, mem in 1i64..20, slots in 1i64..8,
            beat in prop_oneof![Just(0.0f64), 0.0f64..6.0],
        ) {
            let items: Vec<Item> = raw.into_iter().map(|(value, c, m, max)| Item { value, weight: [c, m, 1], max }).collect();
            let room = [cpu, mem, slots];
            let p = best(&items, room, beat, usize::MAX);
            // Feasible, within the counts, its value as claimed, and optimal.
            for (r, room) in room.iter().enumerate() {
                let used: i64 = items.iter().zip(&p.counts).map(|(it, n)| it.weight[r] * i64::from(*n)).sum();
                prop_assert!(used <= *room);
            }
            prop_assert!(items.iter().zip(&p.counts).all(|(it, n)| *n <= it.max));
            let v: f64 = items.iter().zip(&p.counts).map(|(it, n)| it.value * f64::from(*n)).sum();
            let found = p.counts.iter().any(|n| *n > 0);
            // The optimum when it beats the threshold, else nothing.
            let optimum = brute(&items, room);
            if optimum > beat + 1e-9 {
                prop_assert!(found && (v - p.value).abs() < 1e-9);
                prop_assert!((p.value - optimum).abs() < 1e-9);
            } else if optimum < beat - 1e-9 {
                prop_assert!(!found && p.value == beat);
            }
        }
    }
}
