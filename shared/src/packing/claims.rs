//! Claims: the nodes a solve plans, and whether a pod joins one
//! (`try_claim`) or opens one (`new_claim`).

use std::collections::BTreeSet;
use std::sync::Arc;

use fixedbitset::FixedBitSet;

use super::Solver;
use super::classes::Guidance;
use super::offerings::{Offered, offering_keys};
use super::place::{FINAL_ALIKE, FOR_NOW, Refused, ports_conflict};
use super::solve::{Strategy, settles_late};
use crate::cloud::InstanceType;
use crate::resources::Resources;
use crate::scheduling::labels;
use crate::scheduling::pod::HostPort;
use crate::scheduling::requirements::{Requirements, Undefined};
use crate::scheduling::topology::{Candidate, HostId};

#[derive(Debug, Clone)]
pub(super) struct Claim {
    pub(super) pool: usize,
    pub(super) host: HostId,
    /// Interned (`Solver::intern`): claims with equal requirements share them.
    pub(super) reqs: Arc<Requirements>,
    pub(super) types: FixedBitSet,
    pub(super) used: Resources,
    /// Per resource, the most room any of its types has: a bound that
    /// refuses a pod before its types are looked at. After types are
    /// dropped it may be stale (`room_stale`), still an upper bound, and
    /// is taken again when a pod passes it.
    pub(super) max_room: Resources,
    pub(super) room_stale: bool,
    /// What the claim reserves against its pool's limits: under limits the
    /// capacity of its launch options; without, nothing reads it.
    pub(super) max_capacity: Resources,
    pub(super) pods: Vec<usize>,
    pub(super) ports: Vec<HostPort>,
    /// Interned requirements on the topology keys (see `Solver::signature`).
    pub(super) signature: u32,
    /// Its requirements, interned with the classes' (`Solver::req_id`).
    pub(super) req_id: u32,
    /// What its requirements allow of the pool's offerings
    /// (`OfferingMasks::allowed`; unused in pools without masks).
    pub(super) offer_mask: u128,
    /// The cheapest type's price under the claim's requirements, and that type.
    pub(super) price: f64,
    pub(super) cheapest: usize,
    /// The type the claim is filled to (guided solves): its pods always fit it.
    pub(super) target: Option<u32>,
}

/// How a class's node requirements join a claim's requirements.
#[derive(Debug, Clone, Copy)]
pub(super) struct Join {
    /// The claim can satisfy both.
    pub(super) compatible: bool,
    /// The claim already requires each of them: joining adds nothing.
    pub(super) implied: bool,
}

impl<'a> Solver<'a> {
    pub(super) fn try_claim(&mut self, i: usize, k: usize, ci: usize) -> Result<(), Refused> {
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
    pub(super) fn fits_max_room(&mut self, k: usize, ci: usize) -> bool {
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

    /// Opens a claim from pool `p` for pod `i`; keeps it if the pod fits.
    pub(super) fn new_claim(&mut self, i: usize, k: usize, p: usize) -> bool {
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
    pub(super) fn claim_types(&mut self, p: usize, k: usize) -> Option<FixedBitSet> {
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

    /// Moves claim `ci` between pod-count buckets (`usize::MAX` = none).
    pub(super) fn move_bucket(&mut self, ci: usize, from: usize, to: usize) {
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
}

/// True when every `minValues` of the requirements is met by the types kept.
pub(super) fn min_values_hold(
    reqs: &Requirements,
    types: &FixedBitSet,
    catalog: &[InstanceType],
) -> bool {
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
