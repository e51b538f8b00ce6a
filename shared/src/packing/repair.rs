//! Repair after placement: a claim whose pods fit more cheaply on smaller
//! nodes is split.
//!
//! The guide's program buys fractions of nodes, so it sends each kind of
//! pod to the type that is cheapest per usable unit — on real catalogs the
//! largest of a family, where per-node overheads weigh least. The last node
//! of each type is then often far from full: 22 cores of pods on a 32-core
//! node, say, where a 16-core and an 8-core node cost a quarter less. Here
//! each claim's pods are packed again, first fit with the largest first,
//! onto nodes of each smaller type the pods all admit; each node is
//! right-sized, and the cheapest packing replaces the claim when it costs
//! less. Only pods outside every topology group move (their groups judged
//! them on the claim they joined), and only in pools without limits (each
//! new claim reserves against them) and claims without host ports.
//!
//! It runs on the guided and standalone solves only: Karpenter's algorithm
//! is the stand-in for Karpenter and stays as Karpenter plans.

use std::rc::Rc;

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::Solver;
use super::claims::Claim;
use super::guided::{larger_first, units};
use crate::resources::Resources;
use crate::scheduling::topology::HostId;

/// A claim's pool, its pods' compatibility sets and its requirements: what
/// decides its split candidates.
type SplitKey = (usize, Vec<u32>, u32);

/// What a solve's repair works out once per kind of claim.
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// Split candidates by (pool, the pods' compatibility sets, the
    /// claim's requirements): see `Solver::split_types`.
    splits: FxHashMap<SplitKey, Rc<[(f64, usize)]>>,
    /// Re-packings by what decides them: see `RepackKey`.
    repacks: FxHashMap<RepackKey, Option<Repack>>,
}

/// A claim's pods re-packed onto smaller nodes: per node, its pods and
/// what they request.
struct Split {
    nodes: Vec<(Vec<usize>, Resources)>,
    /// The types the pods all admit, cheapest first (`split_types`).
    types: Rc<[(f64, usize)]>,
}

/// What decides a claim's re-packing: the types its pods admit (the
/// `split_types` answer, by identity), the price to beat, and its pods'
/// requests, largest first.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RepackKey {
    types: usize,
    price: u64,
    requests: Vec<Resources>,
}

/// A re-packing by position in `RepackKey::requests`: per node, the
/// positions and what they request; and its cost.
#[derive(Debug, Clone)]
struct Repack {
    nodes: Vec<(Vec<u32>, Resources)>,
    cost: f64,
}

impl Solver<'_> {
    /// Every pod of the claim was placed and belongs to no topology group.
    fn movable(&self, ci: usize) -> bool {
        let c = &self.claims[ci];
        !c.pods.is_empty()
            && c.pods.iter().all(|&i| {
                self.placed[i].is_some_and(|k| self.classes[k as usize].shape.topo.is_empty())
            })
    }

    /// What the claim launches at: its cheapest type under its requirements.
    fn launch_price(&self, c: &Claim) -> f64 {
        self.pools[c.pool]
            .cheapest_in(&c.types, &c.reqs)
            .map_or(f64::INFINITY, |(p, _)| p)
    }

    /// Splits every claim it can onto cheaper smaller nodes.
    pub(super) fn split_claims(&mut self) {
        for ci in 0..self.claims.len() {
            if self.splittable(ci)
                && let Some(split) = self.best_split(ci)
            {
                self.apply_split(ci, split);
            }
        }
    }

    fn splittable(&self, ci: usize) -> bool {
        let c = &self.claims[ci];
        c.pods.len() >= 2
            && c.ports.is_empty()
            && self.pools[c.pool].input.pool.limits.is_empty()
            && self.movable(ci)
    }

    /// The types the claim's pods all admit under its requirements, offered
    /// there, cheapest first with their prices. Claims of one kind share
    /// the answer.
    fn split_types(&mut self, ci: usize) -> Rc<[(f64, usize)]> {
        let pool = self.claims[ci].pool;
        #[allow(clippy::expect_used, reason = "a claim's pods are all placed")]
        let mut classes: Vec<usize> = self.claims[ci]
            .pods
            .iter()
            .map(|&i| self.placed[i].expect("placed") as usize)
            .collect();
        classes.sort_unstable();
        classes.dedup();
        let mut compat: Vec<u32> = classes
            .iter()
            .map(|&k| self.compat_id(pool, k) as u32)
            .collect();
        compat.sort_unstable();
        compat.dedup();
        let key = (pool, compat, self.claims[ci].req_id);
        if let Some(types) = self.repair_memo.splits.get(&key) {
            return types.clone();
        }
        let mut types = self.interned.compat_sets[key.1[0] as usize].clone();
        for &id in &key.1[1..] {
            types.intersect_with(&self.interned.compat_sets[id as usize]);
        }
        let ps = &self.pools[pool];
        let mut priced: Vec<(f64, usize)> = types
            .ones()
            .filter(|&t| ps.room[t].pods > 0)
            .filter_map(|t| ps.price_of(t, &self.claims[ci].reqs).map(|p| (p, t)))
            .collect();
        priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let priced: Rc<[(f64, usize)]> = priced.into();
        self.repair_memo.splits.insert(key, priced.clone());
        priced
    }

    /// The cheapest re-packing of the claim's pods (first fit, largest pods
    /// first, onto nodes of one smaller type, each node then right-sized),
    /// if it costs less than the claim.
    fn best_split(&mut self, ci: usize) -> Option<Split> {
        let price = self.launch_price(&self.claims[ci]);
        let types = self.split_types(ci);
        let mut pods = self.claims[ci].pods.clone();
        pods.sort_by(|&a, &b| larger_first(self.pods, a, b));
        // Claims of one pattern repeat: the same requests in the same order
        // on the same types at the same price re-pack the same way.
        let key = RepackKey {
            types: Rc::as_ptr(&types) as *const () as usize,
            price: price.to_bits(),
            requests: pods
                .iter()
                .map(|&i| self.pods[i].requests.clone())
                .collect(),
        };
        let repack = match self.repair_memo.repacks.get(&key) {
            Some(repack) => repack.clone(),
            None => {
                let repack = self.repack(self.claims[ci].pool, price, &types, &key.requests);
                self.repair_memo.repacks.insert(key, repack.clone());
                repack
            }
        };
        let repack = repack?;
        let nodes = repack
            .nodes
            .into_iter()
            .map(|(at, used)| (at.into_iter().map(|k| pods[k as usize]).collect(), used))
            .collect();
        Some(Split { nodes, types })
    }

    /// The cheapest re-packing of `requests` (largest first) below `price`
    /// on nodes of `pool`, by position in `requests`: it depends on nothing
    /// else, so claims with the same key share it.
    fn repack(
        &self,
        pool: usize,
        price: f64,
        types: &[(f64, usize)],
        requests: &[Resources],
    ) -> Option<Repack> {
        let ps = &self.pools[pool];
        let mut total = Resources::default();
        for r in requests {
            total.add(r);
        }
        // No re-packing beats the pods' fluid cost on the cheapest type per unit.
        let used = units(&total);
        let fluid = types
            .iter()
            .map(|&(p, t)| {
                let room = units(&ps.room[t]);
                p * (0..3)
                    .map(|r| {
                        if used[r] > 0.0 {
                            used[r] / room[r]
                        } else {
                            0.0
                        }
                    })
                    .fold(0.0, f64::max)
            })
            .fold(f64::INFINITY, f64::min);
        // Nor can two nodes cost less than twice the cheapest type.
        let two = 2.0 * types.first().map_or(f64::INFINITY, |(p, _)| *p);
        if fluid.max(two) >= price - 1e-9 {
            return None;
        }
        let mut best: Option<Repack> = None;
        for &(p, t) in types
            .iter()
            .rev()
            .filter(|(p, t)| *p < price && !total.fits_in(&ps.room[*t]))
        {
            if best.as_ref().is_some_and(|b| p >= b.cost) {
                continue;
            }
            let Some(nodes) = first_fit(requests, &ps.room[t]) else {
                continue;
            };
            // Each node right-sized: the cheapest type that holds its pods.
            // Full nodes of pods alike use the same: priced once.
            let mut cost = 0.0;
            let mut priced: Option<(&Resources, f64)> = None;
            for (_, used) in &nodes {
                let p = match priced {
                    Some((same, p)) if same == used => p,
                    _ => {
                        let p = types
                            .iter()
                            .find(|(_, t)| used.fits_in(&ps.room[*t]))
                            .map_or(f64::INFINITY, |(p, _)| *p);
                        priced = Some((used, p));
                        p
                    }
                };
                cost += p;
            }
            if cost < price - 1e-9 && best.as_ref().is_none_or(|b| cost < b.cost) {
                best = Some(Repack { nodes, cost });
            }
        }
        best
    }

    /// Replaces claim `ci` by one claim per node of the split.
    fn apply_split(&mut self, ci: usize, split: Split) {
        let types = split.types;
        let pool = self.claims[ci].pool;
        let original = self.claims[ci].clone();
        let mut claims = Vec::with_capacity(split.nodes.len());
        for (pods, used) in split.nodes {
            let ps = &self.pools[pool];
            let mut set = FixedBitSet::with_capacity(ps.input.instance_types.len());
            let mut max_room = Resources::default();
            let mut max_capacity = Resources::default();
            for &(_, t) in types.iter().filter(|(_, t)| used.fits_in(&ps.room[*t])) {
                set.insert(t);
                max_room.max_each(&ps.room[t]);
                max_capacity.max_each(&ps.input.instance_types[t].capacity);
            }
            if !self.min_values_met(&original.reqs, &set, &ps.input.instance_types) {
                return;
            }
            let (price, cheapest) = ps
                .cheapest_in(&set, &original.reqs)
                .unwrap_or((f64::INFINITY, usize::MAX));
            claims.push(Claim {
                types: set,
                used,
                max_room,
                room_stale: false,
                max_capacity,
                pods,
                price,
                cheapest,
                target: None,
                ..original.clone()
            });
        }
        let ps = &mut self.pools[pool];
        ps.reserved = ps.reserved.saturating_sub(&original.max_capacity);
        for c in &claims {
            ps.reserved.add(&c.max_capacity);
        }
        ps.claims += claims.len() as i64 - 1;
        ps.generation += 1;
        let mut claims = claims.into_iter();
        #[allow(clippy::expect_used, reason = "a split has at least one node")]
        let first = claims.next().expect("a split has a node");
        self.claims[ci] = first;
        for mut c in claims {
            c.host = (self.nodes.len() + self.claims.len()) as HostId;
            self.claims.push(c);
        }
    }
}

/// First fit of `requests` (largest first) onto nodes of `room`: per node,
/// the positions it holds and what they use; `None` when one fits no node.
/// A run of equal requests is placed a node at a time: its first pod goes
/// to the first node that holds it, and each node takes as many of the run
/// as it holds before the next is tried (nodes passed refused the same
/// request and have not changed), which is what placing them one by one
/// gives, without a scan of every full node per pod.
fn first_fit(requests: &[Resources], room: &Resources) -> Option<Vec<(Vec<u32>, Resources)>> {
    let mut nodes: Vec<(Vec<u32>, Resources)> = Vec::new();
    let mut k = 0;
    while k < requests.len() {
        let r = &requests[k];
        let run = requests[k..].iter().take_while(|q| *q == r).count();
        if !r.fits_in(room) {
            return None;
        }
        let mut left = run;
        let mut from = 0;
        while left > 0 {
            let at = match nodes[from..]
                .iter()
                .position(|(_, used)| used.fits_with(r, room))
            {
                Some(at) => from + at,
                None => {
                    nodes.push((Vec::new(), Resources::default()));
                    nodes.len() - 1
                }
            };
            let (members, used) = &mut nodes[at];
            let n = take(used, r, room, left);
            let first = (k + run - left) as u32;
            members.extend(first..first + n as u32);
            left -= n;
            from = at + 1;
        }
        k += run;
    }
    Some(nodes)
}

/// Adds to `used` as many of `r` as the node holds (at least one: `r`
/// fits there once, at most `most`); how many.
fn take(used: &mut Resources, r: &Resources, room: &Resources, most: usize) -> usize {
    used.add(r);
    let mut n = 1;
    while n < most && used.fits_with(r, room) {
        used.add(r);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// First fit one pod at a time, scanning every node from the first.
    fn one_by_one(requests: &[Resources], room: &Resources) -> Option<Vec<(Vec<u32>, Resources)>> {
        let mut nodes: Vec<(Vec<u32>, Resources)> = Vec::new();
        for (k, r) in requests.iter().enumerate() {
            match nodes.iter_mut().find(|(_, used)| used.fits_with(r, room)) {
                Some((members, used)) => {
                    members.push(k as u32);
                    used.add(r);
                }
                None if r.fits_in(room) => nodes.push((vec![k as u32], r.clone())),
                None => return None,
            }
        }
        Some(nodes)
    }

    fn resources() -> impl Strategy<Value = Resources> {
        crate::resources::strategies::coarse(4, 4, 2, 2, 3)
    }

    proptest! {
        #[test]
        fn runs_of_pods_alike_fit_as_one_by_one(
            // Few distinct requests, each repeated: the runs first_fit places a node at a time.
            kinds in proptest::collection::vec((resources(), 1usize..40), 1..6),
            room in crate::resources::strategies::coarse(12, 12, 40, 4, 4),
        ) {
            let mut requests: Vec<Resources> = kinds
                .iter()
                .flat_map(|(r, n)| std::iter::repeat_n(r.clone(), *n))
                .collect();
            requests.sort_by(|a, b| b.cmp(a));
            prop_assert_eq!(first_fit(&requests, &room), one_by_one(&requests, &room));
        }
    }
}
