//! The guided solves' targets and pod order: the batch as the guide's
//! demands and supplies, and the program's fluid split (`guide`) or
//! whole-pod nodes (`patterns`) read back as a type per pod.

use rustc_hash::FxHashMap;

use super::classes::Guidance;
use super::solve::Strategy;
use super::{Solver, guide, patterns};
use crate::resources::{self, Resources};
use crate::scheduling::pod::SchedPod;
use crate::scheduling::requirements::{Requirement, Undefined};

/// An instance type of a pool that a pod or claim is guided to: (pool, type).
pub(super) type Target = (u32, u32);

impl<'a> Solver<'a> {
    /// The type each pod is guided to: pods are grouped by the first pool
    /// (by weight) that can take them, the types of it they fit and what
    /// their requirements allow of zones and capacity types, and the guide's
    /// program splits each group over those types at their prices there.
    /// Pods the program cannot serve get no target.
    pub(super) fn guide(&mut self) -> (Vec<Option<Target>>, Vec<usize>) {
        type OfferingKey = [Option<Requirement>; 5];
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
            // Pods in zone spreads may be left to the packer: the program
            // prices a type at its cheapest zone, but a spread sends an
            // app's pods to every zone, and guided to the program's type
            // each pinned a node of it in a dear zone, which the pods after
            // then filled (W2 `zonal` on the whole catalog: 4 % dearer than
            // `standalone`). Placed free, after the guided pods, they take
            // room already bought in each zone (the zone-pinned pods'
            // nodes among them) or the zone's cheapest node that holds them.
            if !self.spreads_guided && super::solve::in_zone_spread(&self.pods[i]) {
                class_demand.insert(k, None);
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
            let offering_key: OfferingKey =
                super::offerings::OFFERING_KEYS.map(|k| reqs.get(k).cloned());
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
                    for t in self.interned.compat_sets[compat_id]
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
    pub(super) fn follow(
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
}

/// The lists merged so that every prefix holds each list in proportion to
/// its length (a smooth weighted round robin).
pub(super) fn interleave(lists: &[Vec<usize>]) -> Vec<usize> {
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

/// Pods by CPU, then memory, descending; then by index.
pub(super) fn larger_first(pods: &[SchedPod], a: usize, b: usize) -> std::cmp::Ordering {
    let (ra, rb) = (&pods[a].requests, &pods[b].requests);
    rb.cpu_millis
        .cmp(&ra.cpu_millis)
        .then(rb.memory_bytes.cmp(&ra.memory_bytes))
        .then(a.cmp(&b))
}

/// Cores, GiB and pods: the guide's units.
pub(super) fn units(r: &Resources) -> [f64; 3] {
    [
        r.cpu_millis as f64 / 1000.0,
        r.memory_bytes as f64 / resources::GIB as f64,
        r.pods as f64,
    ]
}
