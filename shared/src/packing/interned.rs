//! What a batch's solves work out once and ask again and again: interned
//! requirements, how a class's requirements join a claim's, the compatible
//! types of a pool, a pod's price alone, topology signatures.

use std::sync::Arc;

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::Solver;
use super::claims::Join;
use crate::resources::Resources;
use crate::scheduling::requirements::{Requirement, Requirements, Undefined};

/// What a batch's solves ask again and again, answered once. Worked out
/// by the prototype solve and copied into every solve forked from it.
#[derive(Debug, Clone, Default)]
pub(super) struct Interned {
    /// Node requirements of classes and requirements of claims, interned:
    /// their ids, and by id the one shared copy.
    req_index: FxHashMap<Arc<Requirements>, u32>,
    req_table: Vec<Arc<Requirements>>,
    /// (claim's, class's requirements) → how they join (see `Join`).
    joins: FxHashMap<(u32, u32), Join>,
    /// (pool, interned node requirements) → index into `compat_sets`.
    compat_index: FxHashMap<(usize, u32), u32>,
    /// Per pool and node requirements: the instance types that satisfy them,
    /// and what the requirements allow of the pool's offerings.
    pub(super) compat_sets: Vec<FixedBitSet>,
    pub(super) compat_masks: Vec<u128>,
    /// (compatibility set, requests) → `alone_price`.
    alone_prices: FxHashMap<(u32, Resources), f64>,
    /// `zone_scope` by the requirements it narrows and the pools tolerated.
    pub(super) zone_scopes: FxHashMap<(Requirements, Vec<bool>), Requirements>,
    /// Every non-hostname topology key; a claim's requirements on them,
    /// interned, are its signature.
    pub(super) topo_keys: Vec<String>,
    signatures: FxHashMap<Vec<Option<Requirement>>, u32>,
}

impl<'a> Solver<'a> {
    /// The index in `compat_sets` of the types of `pool` that class `k`'s node requirements allow.
    pub(super) fn compat_id(&mut self, pool: usize, k: usize) -> usize {
        if let Some(id) = self.classes[k].compat[pool] {
            return id as usize;
        }
        let req_id = self.classes[k].shape.req_id;
        let id = match self.interned.compat_index.get(&(pool, req_id)) {
            Some(id) => *id,
            None => {
                let node = &self.classes[k].shape.constraints.node;
                let ps = &self.pools[pool];
                let combined = ps.input.pool.requirements.intersection(node);
                let mut set = FixedBitSet::with_capacity(ps.input.instance_types.len());
                for t in ps.base.ones() {
                    let it = &ps.input.instance_types[t];
                    if it.requirements.intersects(&combined) && it.has_offering(&combined) {
                        set.insert(t);
                    }
                }
                let id = self.interned.compat_sets.len() as u32;
                self.interned.compat_sets.push(set);
                self.interned.compat_masks.push(ps.offerings.allowed(node));
                self.interned.compat_index.insert((pool, req_id), id);
                id
            }
        };
        self.classes[k].compat[pool] = Some(id);
        id as usize
    }

    pub(super) fn compat(&mut self, pool: usize, k: usize) -> &FixedBitSet {
        let id = self.compat_id(pool, k);
        &self.interned.compat_sets[id]
    }

    /// The price of the cheapest node of `pool` that holds one pod of class
    /// `k` alone; the same for every class with its requests and node
    /// requirements (`compat_id` stands for the pool and the requirements).
    pub(super) fn alone_price(&mut self, pool: usize, compat_id: usize, k: usize) -> f64 {
        let cls = &self.classes[k];
        let key = (compat_id as u32, cls.shape.requests.clone());
        if let Some(&price) = self.interned.alone_prices.get(&key) {
            return price;
        }
        let ps = &self.pools[pool];
        let reqs = ps
            .input
            .pool
            .requirements
            .intersection(&cls.shape.constraints.node);
        let compat = &self.interned.compat_sets[compat_id];
        let mut fits = compat.clone();
        ps.room_index
            .keep_holding(&cls.shape.requests, &mut fits, &ps.room);
        let price = ps
            .cheapest_in(&fits, &reqs)
            .map_or(f64::INFINITY, |(p, _)| p);
        self.interned.alone_prices.insert(key, price);
        price
    }

    /// The interned id of node requirements (a class's) or requirements (a claim's).
    pub(super) fn req_id(&mut self, reqs: &Requirements) -> u32 {
        match self.interned.req_index.get(reqs) {
            Some(&id) => id,
            None => self.intern(reqs.clone()).0,
        }
    }

    /// The interned id of requirements and their shared copy, copied only
    /// when they are new.
    pub(super) fn shared(&mut self, reqs: &Requirements) -> (u32, Arc<Requirements>) {
        let id = self.req_id(reqs);
        (id, self.interned.req_table[id as usize].clone())
    }

    /// Requirements' interned id and their shared copy.
    pub(super) fn intern(&mut self, reqs: Requirements) -> (u32, Arc<Requirements>) {
        if let Some(&id) = self.interned.req_index.get(&reqs) {
            return (id, self.interned.req_table[id as usize].clone());
        }
        let id = self.interned.req_table.len() as u32;
        let shared = Arc::new(reqs);
        self.interned.req_index.insert(shared.clone(), id);
        self.interned.req_table.push(shared.clone());
        (id, shared)
    }

    /// How class `k`'s node requirements join claim `ci`'s requirements;
    /// asked at every join, answered once per pair of requirements.
    pub(super) fn join(&mut self, ci: usize, k: usize) -> Join {
        let (c, cls) = (&self.claims[ci], &self.classes[k]);
        *self
            .interned
            .joins
            .entry((c.req_id, cls.shape.req_id))
            .or_insert_with(|| {
                let node = &cls.shape.constraints.node;
                Join {
                    compatible: node.is_empty()
                        || c.reqs.compatible(node, Undefined::WellKnownOnly).is_ok(),
                    implied: node.iter().all(|(key, r)| c.reqs.get(key) == Some(r)),
                }
            })
    }

    /// The interned requirements on every topology key: claims with the same
    /// signature get the same answer from domain-level topology.
    pub(super) fn signature(&mut self, reqs: &Requirements) -> u32 {
        let sig: Vec<Option<Requirement>> = self
            .interned
            .topo_keys
            .iter()
            .map(|k| reqs.get(k).cloned())
            .collect();
        let next = self.interned.signatures.len() as u32;
        *self.interned.signatures.entry(sig).or_insert(next)
    }
}
