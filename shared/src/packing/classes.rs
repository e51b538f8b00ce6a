//! Classes: pods that place alike share one — its fixed `Shape` and what a
//! solve learns of where it fits. They are made once per batch
//! (`BatchPods`) and forked into every strategy's solve; `Alike` shares
//! refusals between classes that differ only in their topology.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::guided::Target;
use super::place::labels_satisfy;
use super::{PreferencePolicy, Solver};
use crate::resources::Resources;
use crate::scheduling::labels;
use crate::scheduling::pod::{Constraints, HostPort, Relaxation, SchedPod};
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::shared_list::SharedList;
use crate::scheduling::taints::first_untolerated;
use crate::scheduling::topology::PodTopology;

/// How a class of pods is placed by a guided solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Guidance {
    /// Any claim whose price rises by no more than a node of its own
    /// would cost the pod (so no claim costs more than its pods would
    /// alone), else a new claim: for pods the guide gave no type or whose
    /// type cannot take them (a limit, a topology pin).
    Free,
    /// Only into room a claim of this pool already pays for: a guided
    /// claim's target still holds it, another claim's price does not rise.
    /// Never opens a claim. The guide's program sees pods as fluid; whole
    /// pods leave gaps (a node of four 3.5-core pods keeps 1.5 cores idle)
    /// that smaller pods fill here for nothing before their own type is
    /// opened. Only the pool the guide chose, so NodePool weights hold.
    Fill(u32),
    /// Only claims guided to this type, opening them as needed.
    To(Target),
}

/// What decides where a class's pods may go. Fixed for a batch: built
/// once and shared by every solve's copy of the class (`Solver::fork`).
#[derive(Debug)]
pub(super) struct Shape {
    pub(super) constraints: Constraints,
    pub(super) requests: Resources,
    pub(super) ports: Vec<HostPort>,
    pub(super) topo: PodTopology,
    /// Refusals by hosts are final (all topology is host-level).
    pub(super) host_level: bool,
    /// Its admission depends only on the claim's topology signature (no hostname group).
    pub(super) domain_only: bool,
    /// Interned node requirements, the key of the compatibility bitsets.
    pub(super) req_id: u32,
    /// Per pool: tolerates its taints.
    pub(super) tolerates: Vec<bool>,
}

/// The shared view of pods with identical constraints, labels and requests,
/// and what one solve has learnt of where they fit.
#[derive(Debug)]
pub(super) struct Class {
    pub(super) shape: Arc<Shape>,
    /// Claims (and nodes) before these indices refused this class for good.
    pub(super) claim_cursor: usize,
    pub(super) node_cursor: usize,
    /// Other claims that refused this class for good.
    pub(super) refused: FixedBitSet,
    /// Claims that refused this class for now, with their pod count then.
    /// Without topology a refusal depends only on the claim, and claims only
    /// grow: while the count is unchanged, the answer is the same. Keeps
    /// thousands of identical pods from re-trying hundreds of full claims.
    pub(super) refused_at: FxHashMap<u32, u32>,
    /// Per pool: index into `Solver::compat_sets`, computed on first use.
    pub(super) compat: Vec<Option<u32>>,
    /// Per pool: the price of the cheapest node that holds one such pod alone.
    pub(super) alone: Vec<Option<f64>>,
    /// Per pool: the pool generation at which its limits left no type for this class.
    pub(super) limited_at: Vec<Option<u64>>,
    /// Where it may go in a guided solve.
    pub(super) guidance: Guidance,
    /// Index into `Solver::alike`.
    pub(super) alike: u32,
}

/// The classes of a batch's solve, and the indexes that find them.
#[derive(Debug)]
pub(super) struct Classes {
    list: Vec<Class>,
    /// Shared by the solves forked from one (`Solver::fork`), copied on
    /// the first write of one (a class made for a relaxed pod).
    pub(super) index: Arc<FxHashMap<ClassKey, usize>>,
    pub(super) by_shape: Arc<FxHashMap<ShapeKey, usize>>,
    /// (Free class, guidance) → its guided variant.
    pub(super) guided: FxHashMap<(u32, Guidance), usize>,
    /// Per `BatchPods` group, its Free class at its first relaxation, once known.
    pub(super) group_class: Vec<Option<u32>>,
    /// Per `AlikeKey`, the claims that refused its classes for good.
    pub(super) alike: Vec<Alike>,
    pub(super) alike_index: FxHashMap<AlikeKey, u32>,
}

impl Classes {
    /// None yet, for a batch of `groups` `BatchPods` groups.
    pub(super) fn new(groups: usize) -> Self {
        Classes {
            list: Vec::new(),
            index: Arc::default(),
            by_shape: Arc::default(),
            guided: FxHashMap::default(),
            group_class: vec![None; groups],
            alike: Vec::new(),
            alike_index: FxHashMap::default(),
        }
    }

    /// The same classes for another solve: what depends on the batch kept,
    /// what a solve learns of them (refusals, guided variants) empty.
    pub(super) fn fork(&self) -> Self {
        Classes {
            list: self.list.iter().map(Class::forked).collect(),
            index: self.index.clone(),
            by_shape: self.by_shape.clone(),
            guided: FxHashMap::default(),
            group_class: self.group_class.clone(),
            alike: self
                .alike
                .iter()
                .map(|_| Alike {
                    cursor: 0,
                    refused: FixedBitSet::new(),
                    refused_at: FxHashMap::default(),
                })
                .collect(),
            alike_index: self.alike_index.clone(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    fn push(&mut self, class: Class) {
        self.list.push(class);
    }
}

impl std::ops::Index<usize> for Classes {
    type Output = Class;

    fn index(&self, k: usize) -> &Class {
        &self.list[k]
    }
}

impl std::ops::IndexMut<usize> for Classes {
    fn index_mut(&mut self, k: usize) -> &mut Class {
        &mut self.list[k]
    }
}

/// What makes two pods place alike: the same constraints, requests and
/// ports, and the same part in every topology group. Pods of different
/// apps (labels) with no topology in common share one class, so its cursors
/// and refusals serve all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ShapeKey {
    pub(super) constraints: Constraints,
    pub(super) requests: Resources,
    pub(super) ports: Vec<HostPort>,
    pub(super) topo: PodTopology,
}

impl Class {
    /// The same pods under another guidance, with nothing yet refused.
    pub(super) fn guided(&self, guidance: Guidance) -> Class {
        Class {
            guidance,
            alike: u32::MAX,
            ..self.forked()
        }
    }

    /// The same class for another solve: nothing refused, what depends on
    /// the class and pools alone (`compat`, `alone`) kept.
    pub(super) fn forked(&self) -> Class {
        Class {
            shape: self.shape.clone(),
            claim_cursor: 0,
            node_cursor: 0,
            refused: FixedBitSet::new(),
            refused_at: FxHashMap::default(),
            compat: self.compat.clone(),
            alone: self.alone.clone(),
            limited_at: vec![None; self.limited_at.len()],
            guidance: self.guidance,
            alike: self.alike,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ClassKey {
    pub(super) constraints: Constraints,
    pub(super) requests: Resources,
    pub(super) namespace: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) ports: Vec<HostPort>,
}

/// A pod's fields that decide its `ClassKey` at its first relaxation, by
/// reference: pods equal in these are placed alike, so their key is built
/// once (pods equal in their keys but not in these only cost a lookup).
#[derive(PartialEq, Eq, Hash)]
pub(super) struct PodFields<'a> {
    pub(super) requests: &'a Resources,
    pub(super) namespace: &'a str,
    pub(super) labels: &'a BTreeMap<String, String>,
    pub(super) node_selector: &'a Requirements,
    pub(super) required_terms: &'a SharedList<Requirements>,
    pub(super) preferred_terms: &'a SharedList<(i32, Requirements)>,
    pub(super) tolerations: &'a [crate::scheduling::taints::Toleration],
    pub(super) spreads: &'a [crate::scheduling::pod::Spread],
    /// Shared by pods read one after another with the same affinity
    /// (`PodReader`): such pods compare equal here without reading the terms.
    pub(super) affinity: &'a SharedList<crate::scheduling::pod::AffinityTerm>,
    pub(super) host_ports: &'a [HostPort],
    pub(super) volume: &'a Requirements,
}

impl<'a> PodFields<'a> {
    pub(super) fn of(p: &'a SchedPod) -> Self {
        PodFields {
            requests: &p.requests,
            namespace: &p.pod.namespace,
            labels: &p.labels,
            node_selector: &p.node_selector,
            required_terms: &p.required_terms,
            preferred_terms: &p.preferred_terms,
            tolerations: &p.tolerations,
            spreads: &p.spreads,
            affinity: &p.affinity,
            host_ports: &p.host_ports,
            volume: &p.volume,
        }
    }
}

/// The batch's pods as every strategy's solve reads them, worked out once:
/// grouped by `PodFields` (per pod its group, per group one member), and
/// in Karpenter's order.
#[derive(Debug)]
pub(super) struct BatchPods {
    pub(super) group_of: Vec<u32>,
    pub(super) representatives: Vec<u32>,
    /// Per group, its pods' relaxation without preferences (the first one
    /// under `PreferencePolicy::Ignore`): read for every try of every pod,
    /// worked out once per group (its pods' preferences are alike).
    pub(super) without_preferences: Vec<Relaxation>,
    /// Karpenter's pod order: CPU, then memory, descending; then age, then name.
    pub(super) largest_first: Vec<usize>,
}

impl BatchPods {
    pub(super) fn new(pods: &[SchedPod]) -> Self {
        let mut index: FxHashMap<PodFields, u32> = FxHashMap::default();
        let mut representatives = Vec::new();
        let mut group_of: Vec<u32> = Vec::with_capacity(pods.len());
        for (i, p) in pods.iter().enumerate() {
            let fields = PodFields::of(p);
            // A batch lists a workload's pods one after another: a pod
            // equal to the one before joins its group without hashing.
            if let Some(&g) = group_of.last()
                && fields == PodFields::of(&pods[i - 1])
            {
                group_of.push(g);
                continue;
            }
            let g = *index.entry(fields).or_insert_with(|| {
                representatives.push(i as u32);
                representatives.len() as u32 - 1
            });
            group_of.push(g);
        }
        let mut largest_first: Vec<usize> = (0..pods.len()).collect();
        largest_first.sort_by(|&a, &b| {
            let (pa, pb) = (&pods[a], &pods[b]);
            pb.requests
                .cpu_millis
                .cmp(&pa.requests.cpu_millis)
                .then_with(|| pb.requests.memory_bytes.cmp(&pa.requests.memory_bytes))
                .then_with(|| pa.created_millis.cmp(&pb.created_millis))
                .then_with(|| pa.pod.cmp(&pb.pod))
        });
        let without_preferences = representatives
            .iter()
            .map(|&i| pods[i as usize].without_preferences())
            .collect();
        BatchPods {
            group_of,
            representatives,
            without_preferences,
            largest_first,
        }
    }
}

/// Claims that refused the classes of one `AlikeKey` for good: all before
/// `cursor`, and those in `refused`; and claims that refused one of them
/// for price while their pods stay the same (`refused_at`, with the claim's
/// pod count then).
#[derive(Debug)]
pub(super) struct Alike {
    pub(super) cursor: usize,
    pub(super) refused: FixedBitSet,
    /// A stable refusal (the price, with no zone or capacity type added)
    /// depends on the requests, node requirements and guidance the
    /// `AlikeKey` holds and on the claim, not on topology: a class alike
    /// would be refused the same there (a topology that pins a zone only
    /// narrows the offerings, which only raises the price).
    pub(super) refused_at: FxHashMap<u32, u32>,
}

/// What a claim's refusals before topology depend on. Pods of different
/// apps in zone or hostname spreads are classes of their own (each its own
/// group), but alike in this: claims that refused one of them for capacity
/// refuse the others too, so a new class starts past them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct AlikeKey {
    pub(super) requests: Resources,
    pub(super) req_id: u32,
    pub(super) tolerates: Vec<bool>,
    pub(super) ports: Vec<HostPort>,
    pub(super) guidance: Guidance,
}

impl<'a> Solver<'a> {
    /// The class of pod `i` at relaxation `r`, placed with `guidance`.
    pub(super) fn class_for(&mut self, i: usize, r: &Relaxation, guidance: Guidance) -> usize {
        let base = self.base_class(i, r);
        self.variant(base, guidance)
    }

    /// Class `base` (a Free class) under `guidance`.
    pub(super) fn variant(&mut self, base: usize, guidance: Guidance) -> usize {
        if guidance == Guidance::Free {
            return base;
        }
        if let Some(&k) = self.classes.guided.get(&(base as u32, guidance)) {
            return k;
        }
        let k = self.classes.len();
        let variant = self.classes[base].guided(guidance);
        self.classes.push(variant);
        self.set_alike(k);
        self.classes.guided.insert((base as u32, guidance), k);
        k
    }

    /// The `Guidance::Free` class of pod `i` at relaxation `r`; remembered
    /// per pod for its first relaxation, which most pods never leave.
    pub(super) fn base_class(&mut self, i: usize, r: &Relaxation) -> usize {
        let first = *r == self.first_relaxation(i);
        let group = self.batch.group_of[i] as usize;
        if first && let Some(k) = self.classes.group_class[group] {
            return k as usize;
        }
        let pod = &self.pods[i];
        let key = ClassKey {
            constraints: pod.constraints(r),
            requests: pod.requests.clone(),
            namespace: pod.pod.namespace.clone(),
            labels: pod.labels.clone(),
            ports: pod.host_ports.clone(),
        };
        let k = match self.classes.index.get(&key) {
            Some(&k) => k,
            None => self.new_class(key),
        };
        if first {
            self.classes.group_class[group] = Some(k as u32);
        }
        k
    }

    /// The relaxation a pod is first tried at.
    pub(super) fn first_relaxation(&self, i: usize) -> Relaxation {
        match self.options.preferences {
            PreferencePolicy::Respect => Relaxation::default(),
            PreferencePolicy::Ignore => {
                self.batch.without_preferences[self.batch.group_of[i] as usize]
            }
        }
    }

    pub(super) fn new_class(&mut self, key: ClassKey) -> usize {
        let topo = self
            .topology
            .pod_topology(&key.constraints, &key.namespace, &key.labels);
        let shape_key = ShapeKey {
            constraints: key.constraints.clone(),
            requests: key.requests.clone(),
            ports: key.ports.clone(),
            topo,
        };
        if let Some(&k) = self.classes.by_shape.get(&shape_key) {
            Arc::make_mut(&mut self.classes.index).insert(key, k);
            return k;
        }
        let topo = shape_key.topo.clone();
        let host_level = self.topology.host_level_only(&topo);
        let domain_only = !topo.is_empty() && self.topology.domain_only(&topo);
        let req_id = self.req_id(&key.constraints.node);
        let tolerates: Vec<bool> = self
            .pools
            .iter()
            .map(|p| {
                first_untolerated(
                    &p.input.pool.taints,
                    &key.constraints.tolerations,
                    key.constraints.ignore_prefer_no_schedule,
                )
                .is_none()
            })
            .collect();
        let mut constraints = key.constraints.clone();
        if constraints.spreads.iter().any(|s| s.key == labels::ZONE) {
            let key = (
                constraints
                    .spread_scope
                    .clone()
                    .unwrap_or_else(|| constraints.node.clone()),
                tolerates.clone(),
            );
            let scope = match self.interned.zone_scopes.get(&key) {
                Some(scope) => scope.clone(),
                None => {
                    let scope = self.zone_scope(&constraints, &tolerates);
                    self.interned.zone_scopes.insert(key, scope.clone());
                    scope
                }
            };
            constraints.spread_scope = Some(scope);
        }
        let k = self.classes.len();
        let shape = Arc::new(Shape {
            constraints,
            requests: key.requests.clone(),
            ports: key.ports.clone(),
            topo,
            host_level,
            domain_only,
            req_id,
            tolerates,
        });
        self.classes.push(Class {
            shape,
            claim_cursor: 0,
            refused_at: FxHashMap::default(),
            node_cursor: 0,
            refused: FixedBitSet::new(),
            compat: vec![None; self.pools.len()],
            alone: vec![None; self.pools.len()],
            limited_at: vec![None; self.pools.len()],
            guidance: Guidance::Free,
            alike: u32::MAX,
        });
        self.set_alike(k);
        Arc::make_mut(&mut self.classes.index).insert(key, k);
        Arc::make_mut(&mut self.classes.by_shape).insert(shape_key, k);
        k
    }

    /// Files class `k` under its `AlikeKey`.
    pub(super) fn set_alike(&mut self, k: usize) {
        let cls = &self.classes[k];
        let key = AlikeKey {
            requests: cls.shape.requests.clone(),
            req_id: cls.shape.req_id,
            tolerates: cls.shape.tolerates.clone(),
            ports: cls.shape.ports.clone(),
            guidance: cls.guidance,
        };
        let next = self.classes.alike.len() as u32;
        let id = *self.classes.alike_index.entry(key).or_insert(next);
        if id == next {
            self.classes.alike.push(Alike {
                cursor: 0,
                refused: FixedBitSet::new(),
                refused_at: FxHashMap::default(),
            });
        }
        self.classes[k].alike = id;
    }

    /// The domains a zone spread counts, as kube-scheduler does with
    /// `nodeAffinityPolicy: Honor`: only zones where a node the pod could
    /// run on can exist — an existing node, or a type of a pool it tolerates
    /// that its requirements allow, offered there. (Counting a zone where no
    /// such type is sold would leave the pod waiting for it forever.)
    pub(super) fn zone_scope(&self, c: &Constraints, tolerates: &[bool]) -> Requirements {
        // Without the volumes' zones (see `Constraints::spread_scope`).
        let mut scope = c.spread_scope.clone().unwrap_or_else(|| c.node.clone());
        let node_reqs = scope.clone();
        let mut zones: BTreeSet<&str> = self
            .nodes
            .iter()
            .filter(|n| labels_satisfy(&n.labels, &node_reqs))
            .filter_map(|n| n.labels.get(labels::ZONE).map(String::as_str))
            .collect();
        for (ps, _) in self.pools.iter().zip(tolerates).filter(|(_, t)| **t) {
            let reqs = ps.input.pool.requirements.intersection(&node_reqs);
            for t in ps.base.ones() {
                let it = &ps.input.instance_types[t];
                if !it.requirements.intersects(&reqs) {
                    continue;
                }
                for o in &it.offerings {
                    if o.allowed_by(&reqs) {
                        zones.insert(o.zone.as_str());
                    }
                }
            }
        }
        let zones: Vec<String> = zones.into_iter().map(str::to_owned).collect();
        if let Ok(r) = Requirement::new(
            labels::ZONE,
            crate::scheduling::requirements::Operator::In,
            &zones,
        ) {
            scope.add(labels::ZONE, r);
        }
        scope
    }
}
