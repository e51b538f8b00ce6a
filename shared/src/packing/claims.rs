//! Claims: the nodes a solve plans, and whether a pod joins one
//! (`try_claim`) or opens one (`new_claim`).

use std::collections::BTreeSet;
use std::sync::Arc;

use fixedbitset::FixedBitSet;

use super::classes::Guidance;
use super::offerings::{Offered, offering_keys};
use super::place::{FINAL_ALIKE, FOR_NOW, Refused, ports_conflict};
use super::solve::{Strategy, settles_late};
use super::{MinValuesPolicy, Solver};
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

/// What joining a pod to a claim changes, worked out before anything
/// changes (`Solver::plan_join`) and then carried out (`Solver::apply_join`).
#[derive(Debug)]
struct JoinPlan {
    /// The claim's requirements after the join, when it adds to them.
    reqs: Option<Requirements>,
    /// Its types that admit the pod, are offered under the join and (unless
    /// they settle late) hold its pods.
    types: FixedBitSet,
    /// Its pods' requests, the new pod's included.
    used: Resources,
    room_stale: bool,
    /// The price of its cheapest type under the join, and that type.
    price: f64,
    cheapest: usize,
    /// What it reserves against its pool's limits.
    max_capacity: Resources,
}

/// What a join allows of its pool's offerings: a mask, or in pools too
/// varied for masks the join's zone and capacity-type requirements.
#[derive(Debug)]
enum JoinOffers {
    Mask(u128),
    Reqs(Arc<Requirements>),
}

impl JoinOffers {
    fn offered(&self) -> Offered<'_> {
        match self {
            JoinOffers::Mask(allowed) => Offered::Mask(*allowed),
            JoinOffers::Reqs(reqs) => Offered::Reqs(reqs),
        }
    }
}

impl<'a> Solver<'a> {
    /// Joins pod `i` (of class `k`) to claim `ci` if the claim takes it.
    /// In steps, the cheapest first, as most tries are refused: what needs
    /// no copy (`may_join`), the topology (`topology_adds`), the join's
    /// plan (`plan_join`); only a plan changes anything (`apply_join`).
    pub(super) fn try_claim(&mut self, i: usize, k: usize, ci: usize) -> Result<(), Refused> {
        let join = self.may_join(k, ci)?;
        let pool = self.claims[ci].pool;
        let compat_id = self.compat_id(pool, k);
        // What a pod of the class costs alone bounds what a claim's price
        // may rise by in the solves that judge price.
        if self.strategy != Strategy::Karpenter && self.classes[k].alone[pool].is_none() {
            let alone = self.alone_price(pool, compat_id, k);
            self.classes[k].alone[pool] = Some(alone);
        }
        let extra = self.topology_adds(k, ci)?;
        let plan = self.plan_join(k, ci, compat_id, join, extra)?;
        self.apply_join(i, k, ci, plan);
        Ok(())
    }

    /// The refusals that need no copy of anything: the claim's most room,
    /// its requirements, host ports, the class's guidance and the claim's
    /// target type. Each holds for every class placed alike, for good.
    fn may_join(&mut self, k: usize, ci: usize) -> Result<Join, Refused> {
        if !self.fits_max_room(k, ci) {
            return Err(FINAL_ALIKE);
        }
        let join = self.join(ci, k);
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
        Ok(join)
    }

    /// Whether the class's topology admits a pod on the claim, and the
    /// requirements it adds there (a spread pins an undecided zone).
    /// Domain-level answers are memoised by the claim's signature for the
    /// rest of the pod's `place`.
    fn topology_adds(&mut self, k: usize, ci: usize) -> Result<Requirements, Refused> {
        let cls = &self.classes[k];
        if cls.shape.topo.is_empty() {
            return Ok(Requirements::new());
        }
        let c = &self.claims[ci];
        let cand = Candidate::Claim {
            host: c.host,
            requirements: &c.reqs,
        };
        let answer = if cls.shape.domain_only {
            match self.admit_memo.iter().find(|(sig, _)| *sig == c.signature) {
                Some((_, answer)) => answer.clone(),
                None => {
                    let answer = self
                        .topology
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
        })
    }

    /// What joining a pod of class `k` to claim `ci` changes, with the
    /// topology's `extra` requirements; or why the claim refuses it. Most
    /// tries are refused, so the whole join of requirements is built only
    /// once the pod is admitted (or where a `minValues` needs it).
    fn plan_join(
        &mut self,
        k: usize,
        ci: usize,
        compat_id: usize,
        join: Join,
        extra: Requirements,
    ) -> Result<JoinPlan, Refused> {
        let pool = self.claims[ci].pool;
        // Most joins add nothing the claim does not already require.
        let adds = {
            let c = &self.claims[ci];
            !(join.implied && extra.iter().all(|(key, r)| c.reqs.get(key) == Some(r)))
        };
        let full =
            (adds && self.min_values_in_join(k, ci, &extra)).then(|| self.joined(k, ci, &extra));
        let (offers, offers_changed) =
            self.join_offers(k, ci, compat_id, adds, full.as_ref(), &extra);
        let offered_types = match offers {
            JoinOffers::Mask(allowed) if offers_changed => self.pools[pool].offered_types(allowed),
            _ => None,
        };
        let c = &self.claims[ci];
        // minValues and limits are judged by `reqs`: the join's where any
        // minValues is set, else the claim's, which then has none either.
        let reqs = full.as_ref().unwrap_or(&c.reqs);
        let offered = offers.offered();
        let Some((types, used)) = self.kept_types(
            k,
            ci,
            compat_id,
            offered,
            offers_changed,
            offered_types,
            reqs,
            &extra,
        ) else {
            // Only a topology decision (a pinned zone) can make this transient.
            let host_level = self.classes[k].shape.host_level;
            return Err(Refused {
                permanent: extra.is_empty() || host_level,
                stable: false,
                alike: extra.is_empty(),
            });
        };
        // Types dropped may have held the most room: taken again when needed.
        let room_stale = c.room_stale || types.count_ones(..) != c.types.count_ones(..);
        let (price, cheapest) = self.judge_price(k, ci, &types, offered, offers_changed)?;
        let max_capacity = self.reservation(ci, &types, offered)?;
        let reqs = adds.then(|| full.unwrap_or_else(|| self.joined(k, ci, &extra)));
        Ok(JoinPlan {
            reqs,
            types,
            used,
            room_stale,
            price,
            cheapest,
            max_capacity,
        })
    }

    /// Whether the claim, the class or the topology sets a `minValues`
    /// (rare): its count needs the whole join.
    fn min_values_in_join(&self, k: usize, ci: usize, extra: &Requirements) -> bool {
        let min_values = |r: &Requirements| r.iter().any(|(_, r)| r.min_values.is_some());
        min_values(&self.claims[ci].reqs)
            || min_values(&self.classes[k].shape.constraints.node)
            || min_values(extra)
    }

    /// The claim's requirements joined with the class's node requirements
    /// and the topology's `extra`.
    fn joined(&self, k: usize, ci: usize, extra: &Requirements) -> Requirements {
        let mut r = self.claims[ci]
            .reqs
            .intersection(&self.classes[k].shape.constraints.node);
        r.add_all(extra);
        r
    }

    /// What the join allows of the pool's offerings, and whether that is
    /// less than the claim allowed. With masks it is the AND of what the
    /// claim, the class and the topology allow, nothing built; pools too
    /// varied for masks build the join's zone and capacity-type
    /// requirements.
    fn join_offers(
        &self,
        k: usize,
        ci: usize,
        compat_id: usize,
        adds: bool,
        full: Option<&Requirements>,
        extra: &Requirements,
    ) -> (JoinOffers, bool) {
        let c = &self.claims[ci];
        let offerings = &self.pools[c.pool].offerings;
        let masks = offerings.pairs.is_some();
        if !adds {
            let offers = if masks {
                JoinOffers::Mask(c.offer_mask)
            } else {
                JoinOffers::Reqs(c.reqs.clone())
            };
            return (offers, false);
        }
        if masks {
            let extra_mask = if extra.is_empty() {
                u128::MAX
            } else {
                offerings.allowed(extra)
            };
            let allowed = c.offer_mask & self.interned.compat_masks[compat_id] & extra_mask;
            return (JoinOffers::Mask(allowed), allowed != c.offer_mask);
        }
        let join = match full {
            Some(full) => offering_keys(full),
            None => {
                let mut r = offering_keys(&c.reqs);
                r.add_all(&offering_keys(&self.classes[k].shape.constraints.node));
                r.add_all(&offering_keys(extra));
                r
            }
        };
        let changed = super::offerings::OFFERING_KEYS
            .iter()
            .any(|k| join.get(k) != c.reqs.get(k));
        (JoinOffers::Reqs(Arc::new(join)), changed)
    }

    /// The claim's types that the pod admits, that are offered under the
    /// join, that the topology's `extra` requirements allow and that still
    /// hold the pods, with the pods' requests the new pod's included; none
    /// when no type is left (or not the claim's target, or too few for a
    /// `minValues`). One copy of the claim's types: this runs for every
    /// claim tried.
    #[allow(clippy::too_many_arguments)]
    fn kept_types(
        &self,
        k: usize,
        ci: usize,
        compat_id: usize,
        offered: Offered,
        offers_changed: bool,
        offered_types: Option<usize>,
        reqs: &Requirements,
        extra: &Requirements,
    ) -> Option<(FixedBitSet, Resources)> {
        let c = &self.claims[ci];
        let ps = &self.pools[c.pool];
        let compat = &self.interned.compat_sets[compat_id];
        // A target not offered under the join: refused before any copy.
        let target_lost = |t: u32| {
            !compat.contains(t as usize)
                || offered_types.is_some_and(|set| !ps.offered_sets[set].contains(t as usize))
        };
        if c.target.is_some_and(target_lost) {
            return None;
        }
        let mut need = c.used.clone();
        need.add(&self.classes[k].shape.requests);
        // A guided claim holds its target (checked above), prices by it and
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
        // A type whose DaemonSet pods hold a host port the pod needs cannot
        // run it.
        let ports = &self.classes[k].shape.ports;
        if !ports.is_empty() && !ps.daemon_ports.is_empty() {
            let held: Vec<usize> = kept
                .ones()
                .filter(|&t| ports_conflict(&ps.daemon_ports[t], ports))
                .collect();
            for t in held {
                kept.set(t, false);
            }
        }
        // A topology decision on a key of the types (an anti-affinity on
        // the architecture, a spread over instance families) narrows the
        // types; zones and capacity types narrow the offerings above.
        for (key, r) in extra
            .iter()
            .filter(|(key, _)| *key != labels::ZONE && *key != labels::CAPACITY_TYPE)
        {
            let types = &ps.input.instance_types;
            let refused: Vec<usize> = kept
                .ones()
                .filter(|&t| {
                    types[t]
                        .requirements
                        .get(key)
                        .is_some_and(|tr| !tr.compatible(r))
                })
                .collect();
            for t in refused {
                kept.set(t, false);
            }
        }
        if !deferred {
            ps.room_index.keep_holding(&need, &mut kept, &ps.room);
        }
        // Only pools too varied for offering masks check type by type.
        if offers_changed && offered_types.is_none() {
            for t in c.types.ones().filter(|&t| {
                !ps.offerings
                    .offered(t, offered, &ps.input.instance_types[t])
            }) {
                kept.set(t, false);
            }
        }
        let off_target = c.target.is_some_and(|t| !kept.contains(t as usize));
        if kept.is_clear()
            || off_target
            || !self.min_values_met(reqs, &kept, &ps.input.instance_types)
        {
            return None;
        }
        Some((kept, need))
    }

    /// The claim's price with the pod (its cheapest type among `types`),
    /// and that type. The solves that judge price (not Karpenter's
    /// algorithm, not a claim guided to a type) refuse a pod that raises it
    /// by more than the pod would cost alone, or at all when the class
    /// only fills room already paid for.
    fn judge_price(
        &self,
        k: usize,
        ci: usize,
        types: &FixedBitSet,
        offered: Offered,
        offers_changed: bool,
    ) -> Result<(f64, usize), Refused> {
        let c = &self.claims[ci];
        let ps = &self.pools[c.pool];
        let judged = self.strategy != Strategy::Karpenter && c.target.is_none();
        // Karpenter's solve under a budget keeps its running cost.
        let priced = judged || self.budget.is_set();
        let (price, cheapest) = if !priced || (types.contains(c.cheapest) && !offers_changed) {
            (c.price, c.cheapest)
        } else {
            ps.cheapest_offered(types, offered)
                .unwrap_or((f64::INFINITY, usize::MAX))
        };
        if judged {
            // Filling uses room the claim already pays for; otherwise the
            // claim's price may rise by at most what the pod would cost on
            // a node of its own. (A guided claim grows to its target.)
            let cls = &self.classes[k];
            let allowed = match cls.guidance {
                Guidance::Fill(_) => 0.0,
                _ if c.pods.is_empty() => f64::INFINITY,
                _ => cls.alone[c.pool].unwrap_or(f64::INFINITY),
            };
            if price - c.price > allowed + 1e-9 {
                // Narrower zones or capacity types only raise the price, so a
                // refusal with none added stands until the claim changes.
                return Err(Refused {
                    permanent: false,
                    stable: !offers_changed,
                    alike: false,
                });
            }
        }
        Ok((price, cheapest))
    }

    /// What the claim reserves against its pool's limits with `types`: the
    /// capacity of its launch options, which move to larger types as it
    /// grows; refused for now when that would pass a limit. Without limits
    /// nothing reads it.
    fn reservation(
        &self,
        ci: usize,
        types: &FixedBitSet,
        offered: Offered,
    ) -> Result<Resources, Refused> {
        let c = &self.claims[ci];
        let ps = &self.pools[c.pool];
        if ps.input.pool.limits.is_empty() {
            return Ok(c.max_capacity.clone());
        }
        let capacity = ps.launch_capacity(types, offered, self.options.max_instance_types);
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
        Ok(capacity)
    }

    /// Carries out a join: the pool's reservation, the claim's
    /// requirements (interned), types, price and pods, Karpenter's claim
    /// order, and the topology counts.
    fn apply_join(&mut self, i: usize, k: usize, ci: usize, plan: JoinPlan) {
        let c = &self.claims[ci];
        let pool = c.pool;
        let host = c.host;
        let old_pods = c.pods.len();
        let ps = &mut self.pools[pool];
        ps.reserved = ps.reserved.saturating_sub(&c.max_capacity);
        ps.reserved.add(&plan.max_capacity);
        ps.generation += 1;
        if let Some(r) = plan.reqs {
            let signature = self.signature(&r);
            let offer_mask = self.pools[pool].offerings.allowed(&r);
            let (req_id, r) = self.intern(r);
            let c = &mut self.claims[ci];
            c.offer_mask = offer_mask;
            c.reqs = r;
            c.signature = signature;
            c.req_id = req_id;
        }
        let cls = &self.classes[k];
        let c = &mut self.claims[ci];
        if self.budget.is_set() {
            self.budget.committed += plan.price - c.price;
        }
        c.types = plan.types;
        c.price = plan.price;
        c.cheapest = plan.cheapest;
        c.used = plan.used;
        c.room_stale = plan.room_stale;
        c.max_capacity = plan.max_capacity;
        c.pods.push(i);
        c.ports.extend(cls.shape.ports.iter().copied());
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
                &self.pools[c.pool].input.pool.taints,
            );
        }
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
        let max_room = ps.room_index.max_room(&c.types);
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
        let max_room = ps.room_index.max_room(&types);
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
        let (req_id, reqs) = self.shared(&input.pool.requirements);
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
        if let Some(b) = self.by_pods.get_mut(from)
            && let Ok(pos) = b.binary_search(&ci)
        {
            b.remove(pos);
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

impl Solver<'_> {
    /// Whether a claim may keep `types`: every `minValues` met, or the
    /// policy is `BestEffort` (the claim is relaxed at launch,
    /// `relax_min_values`).
    pub(super) fn min_values_met(
        &self,
        reqs: &Requirements,
        types: &FixedBitSet,
        catalog: &[InstanceType],
    ) -> bool {
        self.options.min_values == MinValuesPolicy::BestEffort
            || min_values_hold(reqs, types, catalog)
    }
}

/// Under `BestEffort`: each `minValues` the types cannot meet lowered to
/// the number of distinct values they offer among those `reqs` allow (as
/// Karpenter relaxes a claim); `None` when every one is met.
pub(super) fn relax_min_values(
    reqs: &Requirements,
    types: &FixedBitSet,
    catalog: &[InstanceType],
) -> Option<Requirements> {
    let mut relaxed: Option<Requirements> = None;
    for (key, r) in reqs.iter() {
        let Some(min) = r.min_values else { continue };
        let mut distinct: BTreeSet<&str> = BTreeSet::new();
        for t in types.ones() {
            let Some(tr) = catalog[t].requirements.get(key) else {
                continue;
            };
            match tr.finite_values() {
                Some(values) => {
                    distinct.extend(values.iter().map(String::as_str).filter(|v| r.has(v)))
                }
                None => distinct.extend(tr.single_value()),
            }
        }
        let found = distinct.len() as u32;
        if found < min {
            let out = relaxed.get_or_insert_with(|| reqs.clone());
            out.remove(key);
            out.add(key, r.clone().with_min_values(Some(found)));
        }
    }
    relaxed
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
