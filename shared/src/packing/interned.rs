//! What a batch's solves work out once and ask again and again: interned
//! requirements, how a class's requirements join a claim's, the compatible
//! types of a pool, a pod's price alone, topology signatures.

use std::sync::Arc;

use fixedbitset::FixedBitSet;

use super::Solver;
use super::claims::Join;
use crate::scheduling::requirements::{Requirement, Requirements, Undefined};

impl<'a> Solver<'a> {
    /// The index in `compat_sets` of the types of `pool` that class `k`'s node requirements allow.
    pub(super) fn compat_id(&mut self, pool: usize, k: usize) -> usize {
        if let Some(id) = self.classes[k].compat[pool] {
            return id as usize;
        }
        let req_id = self.classes[k].shape.req_id;
        let id = match self.compat_index.get(&(pool, req_id)) {
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
                let id = self.compat_sets.len() as u32;
                self.compat_sets.push(set);
                self.compat_masks.push(ps.offerings.allowed(node));
                self.compat_index.insert((pool, req_id), id);
                id
            }
        };
        self.classes[k].compat[pool] = Some(id);
        id as usize
    }

    pub(super) fn compat(&mut self, pool: usize, k: usize) -> &FixedBitSet {
        let id = self.compat_id(pool, k);
        &self.compat_sets[id]
    }

    /// The price of the cheapest node of `pool` that holds one pod of class
    /// `k` alone; the same for every class with its requests and node
    /// requirements (`compat_id` stands for the pool and the requirements).
    pub(super) fn alone_price(&mut self, pool: usize, compat_id: usize, k: usize) -> f64 {
        let cls = &self.classes[k];
        let key = (compat_id as u32, cls.shape.requests.clone());
        if let Some(&price) = self.alone_prices.get(&key) {
            return price;
        }
        let ps = &self.pools[pool];
        let reqs = ps
            .input
            .pool
            .requirements
            .intersection(&cls.shape.constraints.node);
        let compat = &self.compat_sets[compat_id];
        let mut fits = compat.clone();
        ps.room_index
            .keep_holding(&cls.shape.requests, &mut fits, &ps.room);
        let price = ps
            .cheapest_in(&fits, &reqs)
            .map_or(f64::INFINITY, |(p, _)| p);
        self.alone_prices.insert(key, price);
        price
    }

    /// The interned id of node requirements (a class's) or requirements (a claim's).
    pub(super) fn req_id(&mut self, reqs: &Requirements) -> u32 {
        match self.req_index.get(reqs) {
            Some(&id) => id,
            None => self.intern(reqs.clone()).0,
        }
    }

    /// Requirements' interned id and their shared copy.
    pub(super) fn intern(&mut self, reqs: Requirements) -> (u32, Arc<Requirements>) {
        if let Some(&id) = self.req_index.get(&reqs) {
            return (id, self.req_table[id as usize].clone());
        }
        let id = self.req_table.len() as u32;
        let shared = Arc::new(reqs);
        self.req_index.insert(shared.clone(), id);
        self.req_table.push(shared.clone());
        (id, shared)
    }

    /// How class `k`'s node requirements join claim `ci`'s requirements;
    /// asked at every join, answered once per pair of requirements.
    pub(super) fn join(&mut self, ci: usize, k: usize) -> Join {
        let (c, cls) = (&self.claims[ci], &self.classes[k]);
        *self
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
            .topo_keys
            .iter()
            .map(|k| reqs.get(k).cloned())
            .collect();
        let next = self.signatures.len() as u32;
        *self.signatures.entry(sig).or_insert(next)
    }
}
