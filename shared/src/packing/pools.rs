//! A NodePool as a solve sees it: per type its room after DaemonSets, the
//! types it may launch, what its claims reserve against its limits, and its
//! types by price under a mask of offerings.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::offerings::{Offered, OfferingMasks};
use super::{PoolInput, room_index};
use crate::cloud::InstanceType;
use crate::resources::Resources;
use crate::scheduling::pod::{HostPort, Relaxation, SchedPod};
use crate::scheduling::requirements::{Requirements, Undefined};
use crate::scheduling::taints::first_untolerated;

#[derive(Debug, Clone)]
pub(super) struct PoolState<'a> {
    pub(super) input: &'a PoolInput,
    /// Allocatable minus the DaemonSet pods that would run there, per type.
    pub(super) room: Vec<Resources>,
    /// The host ports those DaemonSet pods hold, per type (empty without
    /// any: then `daemon_ports` is empty too).
    pub(super) daemon_ports: Arc<Vec<Vec<HostPort>>>,
    /// The types by their room: which hold a request (shared by forks).
    pub(super) room_index: Arc<room_index::RoomIndex>,
    /// Types that the template allows, with an available offering and room.
    pub(super) base: FixedBitSet,
    /// Σ over this solve's claims of the per-resource max capacity of their types.
    pub(super) reserved: Resources,
    pub(super) claims: i64,
    /// Bumped whenever `reserved` or `claims` change: a limit refusal holds
    /// until it moves.
    pub(super) generation: u64,
    pub(super) offerings: OfferingMasks,
    pub(super) names: SharedNames,
    /// The types sold in a set of (zone, capacity type) pairs, by the pairs'
    /// mask (`OfferingMasks::allowed`): a claim pinned to a zone drops the
    /// types not sold there in one intersection, not a scan of its types.
    pub(super) offered_index: FxHashMap<u128, usize>,
    pub(super) offered_sets: Vec<FixedBitSet>,
    /// Types by `floor_price`, cheapest first.
    pub(super) by_price: Vec<usize>,
    /// Per type: its cheapest available offering's price (any zone or capacity type).
    pub(super) floor_price: Vec<f64>,
    /// Per mask of allowed offerings, the types with such an offering by
    /// their cheapest allowed price, then by `by_price`: the cheapest type
    /// of a set is its first member here. Made on first use.
    pub(super) cheapest_orders: RefCell<FxHashMap<u128, PriceOrder>>,
}

/// Types as (price, type), cheapest first (`PoolState::cheapest_order`).
pub(super) type PriceOrder = Rc<[(f64, u32)]>;

/// Instance type, zone and capacity type names as shared strings.
#[derive(Debug, Clone)]
pub(super) struct SharedNames {
    pub(super) types: Vec<Arc<str>>,
    /// Per type, per offering: (zone, capacity type).
    pub(super) offerings: Vec<Vec<(Arc<str>, Arc<str>)>>,
}

impl SharedNames {
    pub(super) fn new(types: &[InstanceType]) -> Self {
        let mut interned: FxHashMap<String, Arc<str>> = FxHashMap::default();
        let mut intern = |s: &str| -> Arc<str> {
            interned
                .entry(s.to_owned())
                .or_insert_with(|| Arc::from(s))
                .clone()
        };
        let offerings = types
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .map(|o| (intern(&o.zone), intern(&o.capacity_type)))
                    .collect()
            })
            .collect();
        SharedNames {
            types: types.iter().map(|t| Arc::from(t.name.as_str())).collect(),
            offerings,
        }
    }

    pub(super) fn offering(&self, t: usize, oi: usize) -> (Arc<str>, Arc<str>) {
        self.offerings[t][oi].clone()
    }
}

impl<'a> PoolState<'a> {
    pub(super) fn new(input: &'a PoolInput, daemonsets: &[SchedPod]) -> Self {
        let pool = &input.pool;
        let daemons: Vec<(Requirements, &SchedPod)> = daemonsets
            .iter()
            .filter_map(|d| {
                let c = d.constraints(&Relaxation::default());
                let tolerated = first_untolerated(&pool.taints, &c.tolerations, true).is_none();
                let compatible = pool
                    .requirements
                    .compatible(&c.node, Undefined::WellKnownOnly)
                    .is_ok();
                (tolerated && compatible).then_some((c.node, d))
            })
            .collect();
        let any_ports = daemons.iter().any(|(_, d)| !d.host_ports.is_empty());
        let mut daemon_ports = Vec::new();
        let mut base = FixedBitSet::with_capacity(input.instance_types.len());
        let mut room = Vec::with_capacity(input.instance_types.len());
        for (t, it) in input.instance_types.iter().enumerate() {
            let mut overhead = Resources::default();
            let mut ports = Vec::new();
            for (node, d) in &daemons {
                // A DaemonSet runs on the types its node affinity allows
                // (Karpenter groups types by the DaemonSets they run).
                if it.requirements.intersects(node) {
                    overhead.add(&d.requests);
                    ports.extend(d.host_ports.iter().copied());
                }
            }
            if any_ports {
                daemon_ports.push(ports);
            }
            let mut r = it.allocatable().saturating_sub(&overhead);
            if !overhead.fits_in(it.allocatable()) {
                r = Resources::default();
            }
            if r.pods > 0
                && it.requirements.intersects(&pool.requirements)
                && it.has_offering(&pool.requirements)
            {
                base.insert(t);
            }
            room.push(r);
        }
        let floor_price: Vec<f64> = input
            .instance_types
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .filter(|o| o.available)
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)
                    .unwrap_or(f64::INFINITY)
            })
            .collect();
        let mut by_price: Vec<usize> = (0..input.instance_types.len()).collect();
        by_price.sort_by(|a, b| {
            floor_price[*a]
                .total_cmp(&floor_price[*b])
                .then_with(|| a.cmp(b))
        });
        PoolState {
            input,
            room_index: Arc::new(room_index::RoomIndex::new(&room)),
            room,
            daemon_ports: Arc::new(daemon_ports),
            base,
            reserved: Resources::default(),
            claims: 0,
            generation: 0,
            offerings: OfferingMasks::new(&input.instance_types),
            names: SharedNames::new(&input.instance_types),
            offered_index: FxHashMap::default(),
            offered_sets: Vec::new(),
            by_price,
            floor_price,
            cheapest_orders: RefCell::default(),
        }
    }

    /// (price, type, offering) of each type's cheapest allowed offering,
    /// cheapest first (ties by name): the order launch options take. With
    /// `first`, only that many of the cheapest (no full sort of a whole
    /// catalog's types for 60 options).
    pub(super) fn priced_types(
        &self,
        types: &FixedBitSet,
        offered: Offered,
        first: Option<usize>,
    ) -> Vec<(f64, usize, usize)> {
        let cheapest_offering = |t: usize| {
            self.cheapest_offering(t, offered)
                .map(|(price, oi)| (price, t, oi))
        };
        let types_ = &self.input.instance_types;
        let order = |a: &(f64, usize, usize), b: &(f64, usize, usize)| {
            a.0.total_cmp(&b.0)
                .then_with(|| types_[a.1].name.cmp(&types_[b.1].name))
        };
        let Some(n) = first.filter(|&n| n > 0) else {
            let mut priced: Vec<(f64, usize, usize)> =
                types.ones().filter_map(cheapest_offering).collect();
            priced.sort_by(order);
            return priced;
        };
        if let Offered::Mask(allowed) = offered {
            // The mask's types by price: the first n of `types`, and any
            // priced as the n-th (names break the tie), are the n cheapest.
            let mut priced: Vec<(f64, usize, usize)> = Vec::with_capacity(n + 1);
            for &(price, t) in self.cheapest_order(allowed).iter() {
                if priced.len() >= n && price > priced[n - 1].0 {
                    break;
                }
                if types.contains(t as usize) {
                    priced.extend(cheapest_offering(t as usize));
                }
            }
            priced.sort_by(order);
            priced.truncate(n);
            return priced;
        }
        // Types in order of their cheapest price anywhere: once n are found
        // and the next type's floor is above the n-th price, none can enter.
        let mut priced: Vec<(f64, usize, usize)> = Vec::with_capacity(n + 1);
        for &t in &self.by_price {
            if priced.len() == n && self.floor_price[t] > priced[n - 1].0 {
                break;
            }
            if !types.contains(t) {
                continue;
            }
            if let Some(option) = cheapest_offering(t) {
                let at = priced.partition_point(|p| order(p, &option).is_lt());
                if at < n {
                    priced.insert(at, option);
                    priced.truncate(n);
                }
            }
        }
        priced
    }

    /// What a claim of a pool with limits reserves: the per-resource maximum
    /// capacity over the types its launch would offer (the `max_types`
    /// cheapest), which is every type CreateFleet could pick. Reserving the
    /// largest of *all* remaining types instead would let a 1,000-CPU limit
    /// admit three claims for 1-CPU pods.
    pub(super) fn launch_capacity(
        &self,
        types: &FixedBitSet,
        offered: Offered,
        max_types: usize,
    ) -> Resources {
        let mut capacity = Resources::default();
        for (_, t, _) in self.priced_types(types, offered, Some(max_types)) {
            capacity.max_each(&self.input.instance_types[t].capacity);
        }
        capacity
    }

    /// Type `t`'s cheapest offering allowed, as (price, offering index);
    /// of equal prices, the first zone by name.
    pub(super) fn cheapest_offering(&self, t: usize, offered: Offered) -> Option<(f64, usize)> {
        self.input.instance_types[t]
            .offerings
            .iter()
            .enumerate()
            .filter(|(oi, o)| self.offerings.offering_allowed(t, *oi, offered, o))
            .min_by(|a, b| {
                a.1.price
                    .total_cmp(&b.1.price)
                    .then_with(|| a.1.zone.cmp(&b.1.zone))
            })
            .map(|(oi, o)| (o.price, oi))
    }

    /// The price of type `t`'s cheapest offering the requirements allow.
    pub(super) fn price_of(&self, t: usize, reqs: &Requirements) -> Option<f64> {
        self.cheapest_offering(t, self.offerings.of(reqs))
            .map(|(price, _)| price)
    }

    /// The cheapest (price, type) among `types` under the requirements.
    pub(super) fn cheapest_in(
        &self,
        types: &FixedBitSet,
        reqs: &Requirements,
    ) -> Option<(f64, usize)> {
        self.cheapest_offered(types, self.offerings.of(reqs))
    }

    /// The cheapest (price, type) among `types` with an offering allowed;
    /// of equal prices, the type first by `by_price`. Types are visited by
    /// their cheapest price over all offerings, so the scan stops as soon
    /// as no later type can beat the best found.
    pub(super) fn cheapest_offered(
        &self,
        types: &FixedBitSet,
        offered: Offered,
    ) -> Option<(f64, usize)> {
        if let Offered::Mask(allowed) = offered {
            let order = self.cheapest_order(allowed);
            return order
                .iter()
                .find(|(_, t)| types.contains(*t as usize))
                .map(|&(price, t)| (price, t as usize));
        }
        let mut best: Option<(f64, usize)> = None;
        for &t in &self.by_price {
            if best.is_some_and(|(p, _)| self.floor_price[t] >= p) {
                break;
            }
            if !types.contains(t) {
                continue;
            }
            if let Some((price, _)) = self.cheapest_offering(t, offered)
                && best.is_none_or(|(p, _)| price < p)
            {
                best = Some((price, t));
            }
        }
        best
    }

    /// The types with an offering `allowed` by the mask, cheapest first
    /// (see `cheapest_orders`).
    pub(super) fn cheapest_order(&self, allowed: u128) -> PriceOrder {
        if let Some(order) = self.cheapest_orders.borrow().get(&allowed) {
            return order.clone();
        }
        let offered = Offered::Mask(allowed);
        let mut order: Vec<(f64, usize, u32)> = self
            .by_price
            .iter()
            .enumerate()
            .filter_map(|(rank, &t)| {
                self.cheapest_offering(t, offered)
                    .map(|(price, _)| (price, rank, t as u32))
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let order: PriceOrder = order.into_iter().map(|(price, _, t)| (price, t)).collect();
        self.cheapest_orders
            .borrow_mut()
            .insert(allowed, order.clone());
        order
    }

    /// The index in `offered_sets` of the types with an offering among the
    /// `allowed` pairs; none when the pool has too many pairs for masks.
    pub(super) fn offered_types(&mut self, allowed: u128) -> Option<usize> {
        self.offerings.pairs.as_ref()?;
        if let Some(&id) = self.offered_index.get(&allowed) {
            return Some(id);
        }
        let mut set = FixedBitSet::with_capacity(self.input.instance_types.len());
        for (t, mask) in self.offerings.masks.iter().enumerate() {
            set.set(t, mask & allowed != 0);
        }
        self.offered_sets.push(set);
        self.offered_index
            .insert(allowed, self.offered_sets.len() - 1);
        Some(self.offered_sets.len() - 1)
    }
}
