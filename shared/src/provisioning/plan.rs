//! The provisioning decision: from a snapshot of the cluster, our claims,
//! the configuration and the catalog to the claims to create. Pure.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use rand::{RngExt, SeedableRng};

use crate::cloud::{InstanceType, InstanceTypeInfo, Offering};
use crate::config::hash::{class_hash, pool_hash};
use crate::config::{NodeClass, NodePool, Settings};
use crate::model::claim::{
    self, Claim, LaunchStamp, UNREGISTERED_TAINT_KEY, reservation_of, usage_of,
};
use crate::model::{
    CloudCatalog, OfferingKey, PodKey, PricedOffering, SignedDuration, Timestamp, Usage,
};
use crate::packing::{ExistingNode, LaunchOption, NewClaim, PoolInput, SolveOptions, solve};
use crate::resources::{self, Resources};
use crate::scheduling::labels;
use crate::scheduling::taints::{Effect, Taint};
use crate::scheduling::volumes::VolumeIndex;
use crate::scheduling::{PodReader, Requirements, SchedPod};

/// Everything the decision looks at.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub now: Timestamp,
    /// Provisionable pods that no claim has nominated yet.
    pub pending: &'a [Pod],
    /// Pods with a node.
    pub scheduled: &'a [Pod],
    /// Pending pods nominated to claims that have no node yet, by uid.
    pub nominated: &'a [Pod],
    pub nodes: &'a [Node],
    pub daemon_sets: &'a [DaemonSet],
    pub claims: &'a [Claim],
    pub pools: &'a [NodePool],
    /// The NodeClasses, for the drift stamp of new claims (a class missing
    /// here leaves the stamp's class hash unset: no class drift for it).
    pub node_classes: &'a [NodeClass],
    pub catalog: &'a CloudCatalog,
    pub unavailable: &'a [OfferingKey],
    pub usage: &'a BTreeMap<String, Usage>,
    /// The PVCs, PVs and StorageClasses the pending pods' volumes name
    /// (empty when no pending pod has a PVC-backed volume).
    pub volumes: &'a VolumeIndex,
    /// The Settings in force (read fresh on every invocation): the
    /// scheduling policies every solve of this pass follows.
    pub settings: &'a Settings,
    /// Seeds claim ids (the only randomness).
    pub seed: u64,
}

/// What to do.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub new_claims: Vec<Claim>,
    /// Pods that will fit on a node, or on an in-flight claim (named by its
    /// id), that already exists.
    pub fit_existing: Vec<(PodKey, String)>,
    /// Pods that fit nowhere, with the reason.
    pub unschedulable: Vec<(PodKey, String)>,
}

/// Instance types of a pool: the catalog's types with their offerings minus
/// the unavailable ones, and the pool's kubelet settings applied.
pub fn instance_types(
    pool: &NodePool,
    catalog: &CloudCatalog,
    unavailable: &[OfferingKey],
) -> Vec<InstanceType> {
    let unavailable_keys = unavailable;
    let unavailable: HashSet<(&str, &str, &str)> = unavailable
        .iter()
        .map(|k| {
            (
                k.capacity_type.as_str(),
                k.instance_type.as_str(),
                k.zone.as_str(),
            )
        })
        .collect();
    // A whole capacity type or zone marked unavailable (`OfferingKey::ANY`).
    let wildcards: Vec<&OfferingKey> = unavailable_keys
        .iter()
        .filter(|k| k.is_wildcard())
        .collect();
    let unavailable_offering = |ct: &str, ty: &str, zone: &str| {
        unavailable.contains(&(ct, ty, zone)) || wildcards.iter().any(|k| k.matches(ct, ty, zone))
    };
    let mut offerings: HashMap<&str, Vec<Offering>> = HashMap::new();
    for o in &catalog.offerings {
        let mut offering = Offering::new(&o.zone, &o.capacity_type, o.price);
        offering.available = !unavailable_offering(
            o.capacity_type.as_str(),
            o.instance_type.as_str(),
            o.zone.as_str(),
        );
        offerings
            .entry(o.instance_type.as_str())
            .or_default()
            .push(offering);
    }
    // The pool's capacity reservations: `reserved` offerings, near free.
    let reserved = super::reservations::offerings(pool, catalog);
    for (ty, offers) in &reserved {
        if let Some(list) = offerings.get_mut(ty.as_str()) {
            list.extend(offers.iter().map(|o| {
                let mut o = o.clone();
                o.available &=
                    !unavailable_offering(o.capacity_type.as_str(), ty.as_str(), o.zone.as_str());
                o
            }));
        }
    }
    let class = pool.resolved_class.as_deref();
    // Kubelet expressions resolved per type; one that cannot be resolved
    // fails the pool's whole list, as Karpenter's resolver fails List (no
    // partial list: `kubelet_resolution_error` says why).
    if kubelet_resolution_error(pool, catalog).is_some() {
        return Vec::new();
    }
    let expressions = !pool.kubelet.expressions.is_empty();
    let types = catalog
        .instance_types
        .iter()
        .filter_map(|info| {
            let mut offers = offerings.remove(info.name.as_str())?;
            // A type the NodeClass cannot launch keeps its offerings, unavailable.
            if !compatible_with_class(info, class) {
                for o in &mut offers {
                    o.available = false;
                }
            }
            let it = if expressions {
                let resolved = info.resolve_kubelet(&pool.kubelet).ok()?;
                info.to_instance_type(offers, &resolved.config)
            } else {
                info.to_instance_type(offers, &pool.kubelet)
            };
            // A type the pool's requirements rule out never helps; drop it early.
            pool.requirements.intersects(&it.requirements).then_some(it)
        })
        .collect();
    // The pool's NodeOverlays change prices and capacity before any solve.
    super::overlays::apply(pool, types)
}

/// Why the pool's kubelet expressions cannot be resolved for every type of
/// the catalog (its first failing type), if they cannot: the pool then
/// offers no instance type at all.
pub fn kubelet_resolution_error(pool: &NodePool, catalog: &CloudCatalog) -> Option<String> {
    if pool.kubelet.expressions.is_empty() {
        return None;
    }
    catalog.instance_types.iter().find_map(|info| {
        info.resolve_kubelet(&pool.kubelet)
            .err()
            .map(|e| format!("nodepool {}: {e}", pool.name))
    })
}

/// Whether a NodeClass can launch this type, as far as the catalog's facts
/// tell (Karpenter's compatibility checks): AL2023 does not run on the
/// first Graviton generation (a1), the Windows families run on amd64 only,
/// and the class's EFA-only interfaces need
/// as many EFA interfaces. Network-card counts and devices per card are
/// not in the catalog, so a class asking for more cards than a type has is
/// not caught here (the launch fails instead).
pub fn compatible_with_class(info: &InstanceTypeInfo, class: Option<&NodeClass>) -> bool {
    let Some(class) = class else {
        return true;
    };
    if class.ami_family == crate::config::AmiFamily::AL2023 && info.name.starts_with("a1.") {
        return false;
    }
    // Windows AMIs are amd64 only.
    if class.ami_family.is_windows() && info.arch != "amd64" {
        return false;
    }
    let efa_only = class
        .network_interfaces
        .iter()
        .filter(|ni| ni.interface_type == "efa-only")
        .count();
    efa_only == 0 || efa_only <= info.efa_interfaces as usize
}

/// A DaemonSet's pod template as a pod that lands on every matching node.
pub fn daemon_pods(daemon_sets: &[DaemonSet]) -> Vec<SchedPod> {
    daemon_sets
        .iter()
        .filter_map(|ds| {
            let template = ds.spec.as_ref()?.template.clone();
            let mut meta = template.metadata.unwrap_or_default();
            meta.namespace = ds.metadata.namespace.clone();
            meta.name = ds.metadata.name.clone();
            let pod = Pod {
                metadata: meta,
                spec: template.spec,
                status: None,
            };
            let mut sp = SchedPod::from_pod(&pod).ok()?;
            // Where the DaemonSet controller puts a pod: its nodeSelector
            // and required node affinity; a preference keeps it off no node.
            sp.preferred_terms = Default::default();
            sp.affinity = sp
                .affinity
                .iter()
                .filter(|t| t.weight.is_none())
                .cloned()
                .collect();
            sp.spreads.retain(|s| s.hard);
            // Required terms are alternatives; ORed terms on one key are
            // that key's union (the packer reads one term).
            if let Some(union) = single_key_union(&sp.required_terms) {
                sp.required_terms = vec![union].into();
            }
            Some(sp)
        })
        .collect()
}

/// Terms that each constrain the same one key to a finite set of values,
/// as the one term allowing any of them.
fn single_key_union(
    terms: &[crate::scheduling::Requirements],
) -> Option<crate::scheduling::Requirements> {
    if terms.len() < 2 {
        return None;
    }
    let key = terms[0].keys().next()?.to_owned();
    let mut values = std::collections::BTreeSet::new();
    for t in terms {
        if t.len() != 1 {
            return None;
        }
        let r = t.get(&key)?;
        values.extend(r.finite_values()?.iter().cloned());
    }
    let mut union = crate::scheduling::Requirements::new();
    union.add(&key, crate::scheduling::Requirement::any_of(values));
    Some(union)
}

fn node_of_pod(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

fn provider_id(n: &Node) -> Option<&str> {
    n.spec.as_ref()?.provider_id.as_deref()
}

/// A node on its way out: being deleted, or carrying the
/// `karpenter.sh/disrupted` taint of a removal.
fn is_leaving(n: &Node) -> bool {
    n.metadata.deletion_timestamp.is_some()
        || n.spec
            .as_ref()
            .and_then(|sp| sp.taints.as_ref())
            .is_some_and(|ts| {
                ts.iter()
                    .any(|t| t.key == crate::model::DISRUPTED_TAINT_KEY)
            })
}

/// Nodes and in-flight claims as the solver's existing nodes.
pub(crate) fn existing_nodes(s: &Snapshot<'_>) -> Vec<ExistingNode> {
    let mut pods_by_node: HashMap<&str, Vec<SchedPod>> = HashMap::new();
    for p in s.scheduled {
        if let (Some(node), Ok(sp)) = (node_of_pod(p), SchedPod::from_pod(p)) {
            pods_by_node
                .entry(node)
                .or_default()
                .push(with_attachments(sp, p, s.volumes));
        }
    }
    // A claim's pods by uid: pending pods nominated to it, and pods still
    // running on a node being removed (a replacement's pods move only once
    // it registers — counted on it meanwhile, so the next replacement or
    // pending pod does not plan onto room they will take).
    let leaving: HashSet<&str> = s
        .nodes
        .iter()
        .filter(|n| is_leaving(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let nominated: HashMap<&str, &Pod> = s
        .nominated
        .iter()
        .chain(
            s.scheduled
                .iter()
                .filter(|p| node_of_pod(p).is_some_and(|n| leaving.contains(n))),
        )
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
        .collect();
    let claim_pods = |c: &Claim| -> Vec<SchedPod> {
        c.pods
            .iter()
            .filter_map(|k| nominated.get(k.uid.as_str()))
            .filter_map(|p| Some(with_attachments(SchedPod::from_pod(p).ok()?, p, s.volumes)))
            .collect()
    };
    let claim_by_provider: HashMap<&str, &Claim> = s
        .claims
        .iter()
        .filter_map(|c| Some((c.instance.as_ref()?.provider_id.as_str(), c)))
        .collect();

    let mut out = Vec::new();
    let mut claims_with_nodes = HashSet::new();
    for n in s.nodes {
        let pods = pods_by_node
            .remove(n.metadata.name.as_deref().unwrap_or_default())
            .unwrap_or_default();
        let mut node = existing_node(n, pods);
        node.volume_limits = s.volumes.limits_of(&node.name);
        node.unschedulable |= lost_readiness(n, s.now);
        if let Some(c) = provider_id(n).and_then(|id| claim_by_provider.get(id)) {
            // Our node: the unregistered and binding taints are ours to
            // lift; its nominated pods are coming.
            claims_with_nodes.insert(c.id.as_str());
            node.taints
                .retain(|t| !claim::is_registration_taint(&t.key));
            node.pods.extend(claim_pods(c));
            node.requested = sum_requests(&node.pods);
        }
        out.push(node);
    }
    for c in s.claims {
        if claims_with_nodes.contains(c.id.as_str()) {
            continue;
        }
        let Some((info, zone, capacity_type)) = claim_shape(c, s.catalog) else {
            continue;
        };
        let pool = s.pools.iter().find(|p| p.name == c.pool);
        let kubelet = pool.map(|p| p.kubelet.clone()).unwrap_or_default();
        let allocatable = info
            .capacity(&kubelet)
            .saturating_sub(&info.overhead(&kubelet));
        let mut node_labels = info.requirements_for(&kubelet).single_valued_labels();
        node_labels.extend(c.labels.clone());
        node_labels.insert(labels::INSTANCE_TYPE.to_owned(), info.name.clone());
        if let Some(id) = s.catalog.zone_ids.get(&zone) {
            node_labels.insert(labels::ZONE_ID.to_owned(), id.clone());
        }
        node_labels.insert(labels::ZONE.to_owned(), zone);
        node_labels.insert(labels::CAPACITY_TYPE.to_owned(), capacity_type);
        node_labels.insert(labels::HOSTNAME.to_owned(), c.id.clone());
        let pods = claim_pods(c);
        let requested = sum_requests(&pods);
        // A node still booting will lose its startup taints (something
        // else lifts them) and our unregistered taint: as Karpenter, pods
        // that do not tolerate those may still count on it.
        let taints = c
            .taints
            .iter()
            .filter(|t| t.key != UNREGISTERED_TAINT_KEY)
            .filter(|t| !pool.is_some_and(|p| p.startup_taints.contains(t)))
            .cloned()
            .collect();
        out.push(ExistingNode {
            name: c.id.clone(),
            labels: node_labels,
            taints,
            allocatable,
            requested,
            pods,
            unschedulable: false,
            volume_limits: Default::default(),
        });
    }
    out
}

/// A pod with the volumes it attaches (`SchedPod::attachments`), for the
/// attach limits of the node it is on or bound for.
pub fn with_attachments(mut sp: SchedPod, p: &Pod, volumes: &VolumeIndex) -> SchedPod {
    if crate::scheduling::volumes::uses_claims(p) {
        sp.attachments = crate::scheduling::volumes::attachments(p, volumes);
    }
    sp
}

/// How long a node that is not Ready still counts as room for pending
/// pods: it is booting (kubelet registered, CNI or kubelet not yet Ready).
pub const BOOT_GRACE: SignedDuration = SignedDuration::from_mins(15);

/// A node whose Ready condition is not True is booting and counts as room —
/// unless it has been NotReady past [`BOOT_GRACE`] since it registered, or
/// its condition moved after registration (it was Ready and lost it). Such
/// a node takes no new pods (kube-scheduler places none on it), so pods
/// must not wait for it: they get a node of their own, and node repair
/// deals with the sick one.
pub fn lost_readiness(n: &Node, now: Timestamp) -> bool {
    let Some(ready) = n
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
    else {
        return false;
    };
    if ready.status == "True" {
        return false;
    }
    let Some(created) = n.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return false;
    };
    // The kubelet posts its first condition at registration: a transition
    // well after that is a change of state, not the boot.
    let moved_since_boot = ready
        .last_transition_time
        .as_ref()
        .is_some_and(|t| t.0.duration_since(created) > SignedDuration::from_secs(60));
    moved_since_boot || now.duration_since(created) >= BOOT_GRACE
}

/// A Kubernetes Node and the pods on it as the solver sees them. Cordoned
/// and deleting nodes take no new pods but count for topology. A node that
/// is not Ready yet still counts as room here: it is usually one of ours
/// booting (the provisioner also asks [`lost_readiness`]).
pub fn existing_node(n: &Node, pods: Vec<SchedPod>) -> ExistingNode {
    ExistingNode {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints: n
            .spec
            .as_ref()
            .and_then(|sp| sp.taints.as_ref())
            .map(|ts| ts.iter().filter_map(|t| Taint::from_k8s(t).ok()).collect())
            .unwrap_or_default(),
        allocatable: n
            .status
            .as_ref()
            .and_then(|st| st.allocatable.as_ref())
            .and_then(|a| Resources::from_list(a).ok())
            .unwrap_or_default(),
        requested: sum_requests(&pods),
        pods,
        volume_limits: Default::default(),
        unschedulable: n.metadata.deletion_timestamp.is_some()
            || n.spec
                .as_ref()
                .and_then(|sp| sp.unschedulable)
                .unwrap_or(false),
    }
}

/// The instance type, zone and capacity type an in-flight claim will have:
/// the launched instance's, or its cheapest option's before launch.
fn claim_shape<'c>(
    c: &Claim,
    catalog: &'c CloudCatalog,
) -> Option<(&'c InstanceTypeInfo, String, String)> {
    let (name, zone, ct) = match &c.instance {
        Some(i) => (
            i.instance_type.as_str(),
            i.zone.clone(),
            i.capacity_type.clone(),
        ),
        None => {
            let o = c.options.first()?;
            (
                o.instance_type.as_str(),
                o.zone.clone(),
                o.capacity_type.clone(),
            )
        }
    };
    Some((
        catalog.instance_types.iter().find(|i| i.name == name)?,
        zone,
        ct,
    ))
}

pub(crate) fn resources_of(u: &Usage) -> Resources {
    let mut r = Resources::default();
    for (k, v) in u {
        match k.as_str() {
            resources::CPU => r.cpu_millis = *v,
            resources::MEMORY => r.memory_bytes = *v,
            resources::PODS => r.pods = *v,
            resources::EPHEMERAL_STORAGE => r.ephemeral_bytes = *v,
            claim::NODES => {}
            other => r.extended.push((other.to_owned(), *v)),
        }
    }
    r.extended.sort();
    r
}

/// A pod's requirements on `topology.k8s.aws/zone-id` read as requirements
/// on the zones whose ids they allow (the solver plans zones; a node's zone
/// id follows from its zone). Without known ids the requirement stays, on a
/// key no NodePool defines: the pod waits rather than be placed by guess.
pub fn zone_ids_as_zones(sp: &mut SchedPod, zone_ids: &std::collections::BTreeMap<String, String>) {
    if zone_ids.is_empty() {
        return;
    }
    let translate = |reqs: &mut crate::scheduling::Requirements| {
        if let Some(r) = reqs.remove(labels::ZONE_ID) {
            let zones = zone_ids
                .iter()
                .filter(|(_, id)| r.has(id))
                .map(|(zone, _)| zone.clone());
            reqs.add(labels::ZONE, crate::scheduling::Requirement::any_of(zones));
        }
    };
    translate(&mut sp.node_selector);
    // The terms are shared with the pods read alongside: copied only when
    // they name a zone ID.
    if sp
        .required_terms
        .iter()
        .any(|t| t.contains_key(labels::ZONE_ID))
    {
        for t in sp.required_terms.to_mut() {
            translate(t);
        }
    }
    if sp
        .preferred_terms
        .iter()
        .any(|(_, t)| t.contains_key(labels::ZONE_ID))
    {
        for (_, t) in sp.preferred_terms.to_mut() {
            translate(t);
        }
    }
}

/// The uids of the pods `claims` hold room for (nominated to them, not yet
/// bound).
pub fn nominated_uids<'a>(claims: impl IntoIterator<Item = &'a Claim>) -> HashSet<&'a str> {
    claims
        .into_iter()
        .flat_map(|c| c.pods.iter().map(|k| k.uid.as_str()))
        .collect()
}

/// The pending pods nominated to one of `claims`: every plan counts them on
/// their claim's node until they are bound.
pub fn nominated_pods<'a>(
    pending: Vec<Pod>,
    claims: impl IntoIterator<Item = &'a Claim>,
) -> Vec<Pod> {
    let uids = nominated_uids(claims);
    pending
        .into_iter()
        .filter(|p| p.metadata.uid.as_deref().is_some_and(|u| uids.contains(u)))
        .collect()
}

/// The solver options the Settings ask for (Karpenter's
/// `--preference-policy` and `--min-values-policy`).
pub fn solve_options(settings: &Settings) -> SolveOptions {
    SolveOptions {
        preferences: settings.preference_policy,
        min_values: settings.min_values_policy,
        ..SolveOptions::default()
    }
}

/// Decides which claims to create for the pending pods.
pub fn decide(s: &Snapshot<'_>) -> Decision {
    let mut decision = Decision::default();
    let mut pods = Vec::with_capacity(s.pending.len());
    let mut keys = Vec::with_capacity(s.pending.len());
    let mut reader = PodReader::new();
    for p in s.pending {
        match reader.read_with_volumes(p, s.volumes) {
            Ok(mut sp) => {
                zone_ids_as_zones(&mut sp, &s.catalog.zone_ids);
                pods.push(sp);
                keys.push(PodKey::of(p));
            }
            Err(e) => decision.unschedulable.push((PodKey::of(p), e.to_string())),
        }
    }
    if pods.is_empty() {
        return decision;
    }
    let nodes = existing_nodes(s);
    let mut pools: Vec<PoolInput> = s
        .pools
        .iter()
        // Static pools (`replicas`) keep their size: pending pods never grow them.
        .filter(|pool| pool.replicas.is_none())
        .map(|pool| {
            let mut input =
                PoolInput::new(pool.clone(), instance_types(pool, s.catalog, s.unavailable));
            if let Some(u) = s.usage.get(&pool.name) {
                input.in_use = resources_of(u);
                input.nodes_in_use = u.get(claim::NODES).copied().unwrap_or(0);
            }
            input
        })
        .collect();
    pools.sort_by(|a, b| {
        b.pool()
            .weight
            .cmp(&a.pool().weight)
            .then_with(|| a.pool().name.cmp(&b.pool().name))
    });
    let daemons = daemon_pods(s.daemon_sets);
    let plan = solve(&pods, &nodes, &pools, &daemons, &solve_options(s.settings));

    decision.fit_existing = plan
        .bindings
        .iter()
        .map(|(i, node)| (keys[*i].clone(), node.clone()))
        .collect();
    // A pool whose kubelet expressions cannot be resolved offers nothing:
    // every pod left over says why.
    let resolution: Vec<String> = s
        .pools
        .iter()
        .filter_map(|pool| kubelet_resolution_error(pool, s.catalog))
        .collect();
    decision
        .unschedulable
        .extend(plan.unschedulable.iter().map(|(i, reason)| {
            let reason = if resolution.is_empty() {
                reason.clone()
            } else {
                format!("{reason} ({})", resolution.join("; "))
            };
            (keys[*i].clone(), reason)
        }));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(s.seed);
    for planned in &plan.claims {
        let Some(input) = pools.iter().find(|p| p.pool().name == planned.pool) else {
            continue;
        };
        let class = input
            .pool()
            .node_class
            .as_deref()
            .and_then(|n| s.node_classes.iter().find(|c| c.name == n));
        let id = format!("{}-{}", input.pool().name, random_suffix(&mut rng));
        let pods = planned.pods.iter().map(|i| keys[*i].clone()).collect();
        decision
            .new_claims
            .push(new_claim(input, planned, pods, id, s.now, class));
    }
    // No more claims count on a reservation than it has room for.
    let full = super::reservations::limit(
        &mut decision.new_claims,
        &s.catalog.reservations,
        &s.catalog.offerings,
    );
    decision.unschedulable.extend(full);
    decision
}

/// The tenancy a claim launches with, as Karpenter's `getTenancyType`:
/// shared hardware unless its requirements allow only dedicated. It is the
/// claim's `instance-tenancy` label, which the launch reads.
pub fn tenancy(requirements: &Requirements) -> &'static str {
    match requirements.get(labels::INSTANCE_TENANCY) {
        Some(r) if !r.has(labels::TENANCY_DEFAULT) && r.has(labels::TENANCY_DEDICATED) => {
            labels::TENANCY_DEDICATED
        }
        _ => labels::TENANCY_DEFAULT,
    }
}

/// The reservations a `reserved` option of a claim whose requirements say
/// something of the capacity-reservation labels may launch into: those of
/// its type and zone in the pool that the requirements allow (a launch
/// into another would carry labels the claim's pods refuse). Empty, for
/// any of the pool's, when the requirements are silent on those labels or
/// the option is bought capacity.
fn reservation_ids(
    input: &PoolInput,
    requirements: &Requirements,
    option: &PricedOffering,
) -> Vec<String> {
    if option.capacity_type != labels::CAPACITY_TYPE_RESERVED
        || !labels::CAPACITY_RESERVATION
            .iter()
            .any(|k| requirements.contains_key(k))
    {
        return Vec::new();
    }
    input
        .instance_types()
        .iter()
        .filter(|it| it.name == option.instance_type)
        .flat_map(|it| &it.offerings)
        .filter(|o| o.zone == option.zone)
        .filter_map(|o| o.reservation.as_ref())
        .filter(|r| crate::cloud::instance_type::reservation_allowed(Some(r), requirements))
        .map(|r| r.id.clone())
        .collect()
}

/// The claim for one planned node of `input`'s pool: its options, labels,
/// taints (ours included), reservation and the drift stamp of the pool and
/// its NodeClass (`class`, when known).
pub fn new_claim(
    input: &PoolInput,
    planned: &NewClaim,
    pods: Vec<PodKey>,
    id: String,
    now: Timestamp,
    class: Option<&NodeClass>,
) -> Claim {
    let pool = &input.pool();
    let capacity_of: HashMap<&str, &Resources> = input
        .instance_types()
        .iter()
        .map(|it| (it.name.as_str(), &it.capacity))
        .collect();
    let options = launch_filters(&planned.options, &planned.requirements, &capacity_of);
    let largest = options
        .iter()
        .filter_map(|o| capacity_of.get(&*o.instance_type))
        .fold(Resources::default(), |mut acc, c| {
            acc.max_each(c);
            acc
        });
    let mut node_labels = pool.labels.clone();
    node_labels.insert(labels::NODEPOOL.to_owned(), pool.name.clone());
    // The NodePool's own keys (not the cloud's) become labels, as Karpenter
    // does: a single-valued requirement's value, and for a multi-valued one
    // a value the claim's pods all accept (the claim's requirements are the
    // pool's narrowed by every pod's and by the topology's decisions).
    for (key, pool_req) in pool.requirements.iter() {
        if node_labels.contains_key(key) || labels::is_provided_by_cloud(key) {
            continue;
        }
        let req = planned.requirements.get(key).unwrap_or(pool_req);
        if let Some(value) = req.any_value() {
            node_labels.insert(key.to_owned(), value);
        }
    }
    node_labels.insert(
        labels::INSTANCE_TENANCY.to_owned(),
        tenancy(&planned.requirements).to_owned(),
    );
    let mut taints = pool.taints.clone();
    taints.extend(pool.startup_taints.iter().cloned());
    taints.push(Taint::new(UNREGISTERED_TAINT_KEY, "", Effect::NoExecute));
    let mut annotations = pool.template_annotations.clone();
    if planned.min_values_relaxed {
        annotations.insert(
            crate::model::claim::MIN_VALUES_RELAXED_ANNOTATION.to_owned(),
            "true".to_owned(),
        );
    }
    Claim {
        id,
        pool: pool.name.clone(),
        node_class: pool.node_class.clone(),
        version: 1,
        created_at: now,
        options: options
            .into_iter()
            .map(|o| {
                let mut priced = PricedOffering::from(o);
                priced.reservation_ids = reservation_ids(input, &planned.requirements, &priced);
                priced
            })
            .collect(),
        labels: node_labels,
        annotations,
        taints,
        kubelet: pool.kubelet.clone(),
        pods,
        requests: usage_of(&planned.requests),
        reservation: reservation_of(&largest),
        launch_attempts: 0,
        instance: None,
        running_at: None,
        node_name: None,
        registered_at: None,
        stamp: LaunchStamp {
            nodepool_hash: Some(pool_hash(pool)),
            nodeclass_hash: class.map(class_hash),
            ..LaunchStamp::default()
        },
        disruption: Default::default(),
    }
}

/// Extended resources that make a type a specialist (GPUs, accelerators).
const EXOTIC_RESOURCES: [&str; 5] = [
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "habana.ai/gaudi",
];

/// Karpenter's launch-time filters over a claim's options, unless its
/// requirements carry `minValues` (then every option is kept, as the
/// flexibility asked for). Metal and GPU/accelerator types are dropped when
/// another type would do, so a claim whose pods need none is not launched
/// as one when the cheap types run short; and for a claim that may be spot
/// or on-demand, spot options priced above its cheapest on-demand one are
/// dropped, so a mixed claim never pays more for spot.
fn launch_filters<'o>(
    options: &'o [LaunchOption],
    requirements: &Requirements,
    capacity_of: &HashMap<&str, &Resources>,
) -> Vec<&'o LaunchOption> {
    let all: Vec<&LaunchOption> = options.iter().collect();
    if requirements.iter().any(|(_, r)| r.min_values.is_some()) {
        return all;
    }
    let exotic = |o: &LaunchOption| {
        o.instance_type
            .split_once('.')
            .is_some_and(|(_, size)| size.contains("metal"))
            || capacity_of
                .get(&*o.instance_type)
                .is_some_and(|c| EXOTIC_RESOURCES.iter().any(|r| c.extended(r) > 0))
    };
    let generic: Vec<&LaunchOption> = all.iter().copied().filter(|o| !exotic(o)).collect();
    let kept = if generic.is_empty() { all } else { generic };
    let ct = requirements.get(labels::CAPACITY_TYPE);
    let mixed = ct.is_none_or(|r| {
        r.has(labels::CAPACITY_TYPE_SPOT) && r.has(labels::CAPACITY_TYPE_ON_DEMAND)
    });
    let cheapest_on_demand = kept
        .iter()
        .filter(|o| &*o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND)
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    if !mixed || cheapest_on_demand.is_infinite() {
        return kept;
    }
    kept.into_iter()
        .filter(|o| {
            &*o.capacity_type != labels::CAPACITY_TYPE_SPOT || o.price <= cheapest_on_demand
        })
        .collect()
}

fn sum_requests(pods: &[SchedPod]) -> Resources {
    let mut sum = Resources::default();
    for p in pods {
        sum.add(&p.requests);
    }
    sum
}

/// Five lowercase alphanumerics, like Kubernetes' generateName suffixes.
pub(crate) fn random_suffix(rng: &mut impl rand::Rng) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::Requirement;

    fn node(created: i64, ready: Option<(&str, i64)>) -> Node {
        let mut v = serde_json::json!({"metadata": {"name": "n", "creationTimestamp": Timestamp::from_second(created).unwrap().to_string()}});
        if let Some((status, since)) = ready {
            v["status"] = serde_json::json!({"conditions": [{"type": "Ready", "status": status,
                "lastTransitionTime": Timestamp::from_second(since).unwrap().to_string()}]});
        }
        serde_json::from_value(v).expect("node")
    }

    /// Karpenter's `getTenancyType` (aws/karpenter-provider-aws
    /// pkg/providers/instance/instance.go): default when the claim allows
    /// it, dedicated only when that is all it allows.
    #[test]
    fn tenancy_is_default_unless_only_dedicated_is_allowed() {
        let with = |values: &[&str]| {
            let mut r = Requirements::new();
            let values: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
            r.add(
                labels::INSTANCE_TENANCY,
                Requirement::new(
                    labels::INSTANCE_TENANCY,
                    crate::scheduling::requirements::Operator::In,
                    &values,
                )
                .expect("requirement"),
            );
            r
        };
        assert_eq!(tenancy(&Requirements::new()), "default");
        assert_eq!(tenancy(&with(&["default", "dedicated"])), "default");
        assert_eq!(tenancy(&with(&["default"])), "default");
        assert_eq!(tenancy(&with(&["dedicated"])), "dedicated");
    }

    #[test]
    fn a_node_that_lost_readiness_is_no_room_but_a_booting_one_is() {
        let t0 = 1_767_225_600;
        let now = |mins: i64| Timestamp::from_second(t0 + mins * 60).unwrap();
        // Booting: no condition yet, or NotReady since it registered.
        assert!(!lost_readiness(&node(t0, None), now(1)));
        assert!(!lost_readiness(&node(t0, Some(("False", t0))), now(5)));
        // Ready: room.
        assert!(!lost_readiness(&node(t0, Some(("True", t0 + 40))), now(60)));
        // NotReady since its registration, past the boot grace.
        assert!(lost_readiness(&node(t0, Some(("False", t0))), now(15)));
        // Was Ready, lost it an hour later: no room at once.
        assert!(lost_readiness(
            &node(t0, Some(("Unknown", t0 + 3600))),
            now(61)
        ));
        assert!(lost_readiness(
            &node(t0, Some(("False", t0 + 3600))),
            now(61)
        ));
    }

    #[test]
    fn launch_filters_drop_exotic_types_and_dearer_spot_unless_min_values() {
        let option = |t: &str, ct: &str, price: f64| LaunchOption {
            instance_type: t.into(),
            zone: "us-east-1a".into(),
            capacity_type: ct.into(),
            price,
        };
        let mut gpu = Resources::new(4000, 16 << 30, 29);
        gpu.set_extended("nvidia.com/gpu", 1);
        let plain = Resources::new(2000, 8 << 30, 29);
        let capacity_of: HashMap<&str, &Resources> = [
            ("m5.large", &plain),
            ("m5.metal", &plain),
            ("g4dn.xlarge", &gpu),
            ("c5.large", &plain),
        ]
        .into_iter()
        .collect();
        let options = vec![
            option("m5.large", "spot", 0.03),
            option("g4dn.xlarge", "spot", 0.05),
            option("c5.large", "on-demand", 0.085),
            option("m5.metal", "spot", 1.2),
        ];
        let names = |kept: Vec<&LaunchOption>| -> Vec<String> {
            kept.iter().map(|o| o.instance_type.to_string()).collect()
        };
        let mut mixed = Requirements::new();
        mixed.add(
            labels::CAPACITY_TYPE,
            Requirement::any_of(["spot", "on-demand"]),
        );
        assert_eq!(
            names(launch_filters(&options, &mixed, &capacity_of)),
            ["m5.large", "c5.large"],
            "no GPU, no metal; no spot dearer than on-demand"
        );
        let mut spot = Requirements::new();
        spot.add(labels::CAPACITY_TYPE, Requirement::single("spot"));
        assert_eq!(
            names(launch_filters(&options, &spot, &capacity_of)),
            ["m5.large", "c5.large"],
            "a spot-only claim keeps its spot options"
        );
        let exotic_only = vec![
            option("g4dn.xlarge", "spot", 0.05),
            option("m5.metal", "spot", 1.2),
        ];
        assert_eq!(
            names(launch_filters(&exotic_only, &spot, &capacity_of)).len(),
            2,
            "exotic types when nothing else would do"
        );
        let mut flexible = mixed.clone();
        flexible.add(
            labels::INSTANCE_TYPE,
            Requirement::exists().with_min_values(Some(2)),
        );
        assert_eq!(
            launch_filters(&options, &flexible, &capacity_of).len(),
            4,
            "minValues keeps every option"
        );
    }
    /// A NodePool `default` on an EC2NodeClass `default` whose spec is the
    /// given YAML, resolved as the functions resolve it.
    fn pool_on_class(class_spec: &str) -> NodePool {
        let text = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n{class_spec}"
        );
        let docs = crate::config::parse_documents(&text).expect("documents");
        let set = crate::config::ConfigSet::from_documents(&docs).expect("valid");
        set.node_pool("default").expect("pool").clone()
    }

    fn key(ct: &str, t: &str, zone: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: ct.into(),
            instance_type: t.into(),
            zone: zone.into(),
        }
    }

    fn available(types: &[InstanceType], name: &str) -> Vec<(String, String)> {
        types
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} listed"))
            .offerings
            .iter()
            .filter(|o| o.available)
            .map(|o| (o.zone.clone(), o.capacity_type.clone()))
            .collect()
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    /// Context "Insufficient Capacity Error Cache": "should return all
    /// instance types, even though with no offerings due to Insufficient
    /// Capacity Error" and "should not return an offering when marking an
    /// offering as unavailable in the Insufficient Capacity Error Cache".
    /// Translated onto the simulator's us-east-1 catalog (m5.large and
    /// m5.xlarge in five zones, spot and on-demand): a type whose every
    /// offering ran out of capacity is still listed, with none available;
    /// marking one type's offerings leaves another's alone, and each mark
    /// takes exactly its offering away.
    #[test]
    fn unavailable_offerings_are_kept_but_not_available() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        let pool = pool_on_class("  amiSelectorTerms:\n  - alias: al2023@latest\n");
        let all = available(&instance_types(&pool, &catalog, &[]), "m5.large");
        assert_eq!(all.len(), 10, "five zones × spot and on-demand: {all:?}");
        let zones: Vec<String> = all.iter().map(|(z, _)| z.clone()).collect();
        // Every m5.xlarge offering out of capacity: the type stays, with none.
        let xl: Vec<OfferingKey> = all.iter().map(|(z, ct)| key(ct, "m5.xlarge", z)).collect();
        let types = instance_types(&pool, &catalog, &xl);
        assert!(available(&types, "m5.xlarge").is_empty());
        assert!(
            !types
                .iter()
                .find(|t| t.name == "m5.xlarge")
                .expect("m5.xlarge")
                .offerings
                .is_empty(),
            "its offerings are kept, unavailable"
        );
        assert_eq!(available(&types, "m5.large"), all, "m5.large untouched");
        // One spot offering of m5.large, then two on-demand ones.
        let mut marks = xl.clone();
        marks.push(key("spot", "m5.large", &zones[0]));
        let got = available(&instance_types(&pool, &catalog, &marks), "m5.large");
        assert_eq!(got.len(), 9);
        assert!(!got.contains(&(zones[0].clone(), "spot".into())));
        marks.push(key("on-demand", "m5.large", &zones[1]));
        marks.push(key("on-demand", "m5.large", &zones[2]));
        let got = available(&instance_types(&pool, &catalog, &marks), "m5.large");
        assert_eq!(got.len(), 7);
        for (z, ct) in [(0, "spot"), (1, "on-demand"), (2, "on-demand")] {
            assert!(!got.contains(&(zones[z].clone(), ct.into())), "{z} {ct}");
        }
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    /// Context "Offerings" / It "should create a single offering per
    /// instance pool": no (instance type, zone, capacity type) appears twice
    /// among a pool's offerings, on the simulator's whole us-east-1 catalog,
    /// listed twice.
    #[test]
    fn one_offering_per_instance_pool() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        let pool = pool_on_class("  amiSelectorTerms:\n  - alias: al2023@latest\n");
        for _ in 0..2 {
            let types = instance_types(&pool, &catalog, &[]);
            assert!(types.len() > 100);
            let mut seen = HashSet::new();
            for t in &types {
                for o in &t.offerings {
                    assert!(
                        seen.insert((t.name.clone(), o.zone.clone(), o.capacity_type.clone())),
                        "{} {} {} twice",
                        t.name,
                        o.zone,
                        o.capacity_type
                    );
                }
            }
        }
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    /// Context "Instance Type and NodeClass Compatibility" / "AMI
    /// Compatibility" / DescribeTable "should mark availability of a1
    /// instance type offerings based on AMI": on AL2023 every a1.medium
    /// offering is kept but unavailable (AL2023 does not run on the first
    /// Graviton); on Bottlerocket they are available.
    #[test]
    fn a1_types_are_unavailable_on_al2023_only() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        for (alias, expect_available) in [("al2023@latest", false), ("bottlerocket@latest", true)] {
            let pool = pool_on_class(&format!("  amiSelectorTerms:\n  - alias: {alias}\n"));
            let types = instance_types(&pool, &catalog, &[]);
            let a1 = types
                .iter()
                .find(|t| t.name == "a1.medium")
                .expect("a1.medium listed");
            assert!(!a1.offerings.is_empty(), "{alias}");
            assert!(
                a1.offerings.iter().all(|o| o.available == expect_available),
                "{alias}"
            );
        }
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    /// Context "Instance Type and NodeClass Compatibility" / "Network
    /// Interfaces": an EC2NodeClass with one EFA-only interface leaves
    /// p5.48xlarge's offerings as they were; one with five EFA-only
    /// interfaces makes every offering of m6idn.32xlarge (two EFAs)
    /// unavailable. And Context "Network Interfaces": EFA-only interfaces
    /// on network card 0 hold no pod IPs, so m6idn.32xlarge's max pods drop
    /// by one ENI's worth (49) per such interface; one on card 1 changes
    /// nothing. Karpenter's figures (394, 345) come from its fake data's 8
    /// ENIs on card 0; the simulator's catalog has 16 (786, 737).
    #[test]
    fn efa_only_interfaces_decide_availability_and_max_pods() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        let ni = |list: &[(u32, u32, &str)]| {
            let mut s =
                "  amiSelectorTerms:\n  - alias: al2023@latest\n  networkInterfaces:\n".to_owned();
            for (card, device, kind) in list {
                s += &format!(
                    "  - {{networkCardIndex: {card}, deviceIndex: {device}, interfaceType: {kind}}}\n"
                );
            }
            s
        };
        let plain = pool_on_class("  amiSelectorTerms:\n  - alias: al2023@latest\n");
        let before = available(&instance_types(&plain, &catalog, &[]), "p5.48xlarge");
        assert!(!before.is_empty());
        let one = pool_on_class(&ni(&[(0, 0, "interface"), (0, 1, "efa-only")]));
        let types = instance_types(&one, &catalog, &[]);
        assert_eq!(available(&types, "p5.48xlarge"), before);
        let pods = |types: &[InstanceType]| {
            types
                .iter()
                .find(|t| t.name == "m6idn.32xlarge")
                .expect("m6idn.32xlarge")
                .capacity
                .pods
        };
        assert_eq!(pods(&instance_types(&plain, &catalog, &[])), 786);
        assert_eq!(pods(&types), 737, "one EFA-only interface on card 0");
        let card1 = pool_on_class(&ni(&[(0, 0, "interface"), (1, 0, "efa-only")]));
        assert_eq!(pods(&instance_types(&card1, &catalog, &[])), 786);
        let five = pool_on_class(&ni(&[
            (0, 0, "interface"),
            (0, 1, "efa-only"),
            (1, 0, "efa-only"),
            (2, 0, "efa-only"),
            (3, 0, "efa-only"),
            (4, 0, "efa-only"),
        ]));
        let types = instance_types(&five, &catalog, &[]);
        assert!(available(&types, "m6idn.32xlarge").is_empty());
        assert!(
            !types
                .iter()
                .find(|t| t.name == "m6idn.32xlarge")
                .expect("listed")
                .offerings
                .is_empty()
        );
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    /// Context "Insufficient Capacity Error Cache": "should not return a
    /// capacity type when marking a capacity type as unavailable in the
    /// Insufficient Capacity Error Cache". Spot marked as a whole
    /// (`OfferingKey::capacity_type`): only on-demand offerings stay
    /// available, of every type, in every zone.
    #[test]
    fn should_not_return_a_capacity_type_when_marking_a_capacity_type_as_unavailable() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        let pool = pool_on_class("  amiSelectorTerms:\n  - alias: al2023@latest\n");
        let kinds = |types: &[InstanceType]| -> std::collections::BTreeSet<String> {
            types
                .iter()
                .flat_map(|t| t.offerings.iter().filter(|o| o.available))
                .map(|o| o.capacity_type.clone())
                .collect()
        };
        let before = kinds(&instance_types(&pool, &catalog, &[]));
        assert_eq!(before.len(), 2, "{before:?}");
        let marks = [OfferingKey::capacity_type("spot")];
        let after = kinds(&instance_types(&pool, &catalog, &marks));
        assert_eq!(
            after,
            std::collections::BTreeSet::from(["on-demand".to_owned()])
        );
    }

    /// The same Context: "should not return a zone when marking a zone as
    /// unavailable in the Insufficient Capacity Error Cache" (Karpenter marks
    /// the zone's subnets; nodewright launches into one subnet per zone and
    /// marks the zone, `OfferingKey::zone`): us-east-1a is gone from every
    /// type's available offerings, the other zones stay.
    #[test]
    fn should_not_return_a_zone_when_marking_a_zone_as_unavailable() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        let pool = pool_on_class("  amiSelectorTerms:\n  - alias: al2023@latest\n");
        let zones = |types: &[InstanceType]| -> std::collections::BTreeSet<String> {
            types
                .iter()
                .flat_map(|t| t.offerings.iter().filter(|o| o.available))
                .map(|o| o.zone.clone())
                .collect()
        };
        let mut before = zones(&instance_types(&pool, &catalog, &[]));
        assert!(
            before.contains("us-east-1a") && before.len() > 2,
            "{before:?}"
        );
        let after = zones(&instance_types(
            &pool,
            &catalog,
            &[OfferingKey::zone("us-east-1a")],
        ));
        before.remove("us-east-1a");
        assert_eq!(after, before);
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    /// Context "Resolution Failures": kubelet expressions (the NodeClassCEL
    /// gate; nodewright's Settings `featureGates.nodeClassCEL`) resolved per
    /// instance type of the simulator's us-east-1 catalog. Where Karpenter's
    /// List fails, nodewright's pool offers no instance type and
    /// `kubelet_resolution_error` says why (the pending pods carry it).
    mod kubelet_expressions {
        use super::*;
        use crate::resources::MIB;

        /// m5.large (2 vCPUs, 8192 MiB) of `catalog`.
        fn m5_large(catalog: &crate::model::CloudCatalog) -> &crate::cloud::InstanceTypeInfo {
            catalog
                .instance_types
                .iter()
                .find(|i| i.name == "m5.large")
                .expect("m5.large")
        }

        fn pool(gate: bool, kubelet: &str) -> Result<NodePool, Vec<crate::config::ConfigError>> {
            let text = format!(
                "apiVersion: nodewright.io/v1alpha1\nkind: Settings\nmetadata: {{name: default}}\nspec: {{featureGates: {{nodeClassCEL: {gate}}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: []\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms:\n  - alias: al2023@latest\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  kubelet: {kubelet}\n"
            );
            let docs = crate::config::parse_documents(&text).expect("documents");
            let set = crate::config::ConfigSet::from_documents(&docs)?;
            Ok(set.node_pool("default").expect("pool").clone())
        }

        fn type_of(types: &[InstanceType], name: &str) -> InstanceType {
            types
                .iter()
                .find(|t| t.name == name)
                .unwrap_or_else(|| panic!("{name} listed"))
                .clone()
        }

        /// "should fail resolution when the maxPods expression can't be
        /// resolved", its three entries: a negative result, a result above
        /// math.MaxInt32, a runtime evaluation error. Each is a valid
        /// expression (the configuration takes it), and fails for every type.
        #[test]
        fn should_fail_resolution_when_the_max_pods_expression_cant_be_resolved() {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            for (expression, why) in [
                ("0 - 1", "-1 is not between 0 and 2147483647"),
                (
                    "2147483647 + 1",
                    "2147483648 is not between 0 and 2147483647",
                ),
                ("1 / (vcpus - vcpus)", "division by zero"),
            ] {
                let pool = pool(true, &format!("{{maxPods: {expression:?}}}")).expect("valid");
                let error = kubelet_resolution_error(&pool, &catalog).expect(expression);
                assert!(error.contains("resolving maxPods"), "{error}");
                assert!(error.contains(why), "{expression}: {error}");
                assert!(
                    instance_types(&pool, &catalog, &[]).is_empty(),
                    "{expression}: no partial list"
                );
            }
        }

        /// "should resolve maxPods from an expression when it evaluates in
        /// range": `min(110, vcpus * 8)` on m5.large (2 vCPUs) is 16, not
        /// the ENI-limited 29; on m5.24xlarge (96 vCPUs) it is 110.
        #[test]
        fn should_resolve_max_pods_from_an_expression_when_it_evaluates_in_range() {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            let pool = pool(true, "{maxPods: \"min(110, vcpus * 8)\"}").expect("valid");
            assert_eq!(kubelet_resolution_error(&pool, &catalog), None);
            let types = instance_types(&pool, &catalog, &[]);
            assert_eq!(type_of(&types, "m5.large").capacity.pods, 16);
            assert_eq!(type_of(&types, "m5.24xlarge").capacity.pods, 110);
        }

        /// "should use the default maxPods (not the expression result) when
        /// the gate is disabled": the resolution path never evaluates an
        /// expression the settings did not enable (t3.large keeps its 35
        /// ENI-limited pods), and the configuration refuses such a class,
        /// naming the field (Karpenter's KubeletExpressionsDisabled).
        #[test]
        fn should_use_the_default_max_pods_not_the_expression_result_when_the_gate_is_disabled() {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            let errors = pool(
                false,
                "{maxPods: \"7\", kubeReserved: {cpu: \"vcpus * 30\", memory: 1Gi}}",
            )
            .expect_err("gate off");
            let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(
                fields,
                ["spec.kubelet.maxPods", "spec.kubelet.kubeReserved[cpu]"]
            );
            assert!(
                errors[0].reason.contains("featureGates.nodeClassCEL"),
                "{}",
                errors[0].reason
            );
            // The resolution path alone: the gate on, then its expressions
            // dropped as the configuration does with the gate off.
            let mut pool = pool(true, "{maxPods: \"7\"}").expect("valid");
            assert_eq!(
                type_of(&instance_types(&pool, &catalog, &[]), "t3.large")
                    .capacity
                    .pods,
                7
            );
            pool.kubelet.expressions = Default::default();
            assert_eq!(
                type_of(&instance_types(&pool, &catalog, &[]), "t3.large")
                    .capacity
                    .pods,
                35
            );
        }

        /// "should resolve kubeReserved expressions into the instance type's
        /// reserved overhead": m5.large (2 vCPUs, 8192 MiB): cpu `vcpus * 30`
        /// is 60m, memory `memory_mib / 100` is 81, rounded up to 96Mi, and
        /// a quantity beside them (ephemeral-storage 3Gi) stays as written.
        #[test]
        fn should_resolve_kube_reserved_expressions_into_the_instance_types_reserved_overhead() {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            let pool = pool(
                true,
                "{kubeReserved: {cpu: \"vcpus * 30\", memory: \"memory_mib / 100\", ephemeral-storage: 3Gi}}",
            )
            .expect("valid");
            let info = m5_large(&catalog);
            let resolved = info.resolve_kubelet(&pool.kubelet).expect("resolves");
            assert_eq!(resolved.config.kube_reserved.cpu_millis, Some(60));
            assert_eq!(resolved.config.kube_reserved.memory_bytes, Some(96 * MIB));
            assert_eq!(resolved.config.kube_reserved.ephemeral_bytes, Some(3 << 30));
            assert_eq!(
                resolved.kube_reserved,
                [
                    ("cpu".to_owned(), "60m".to_owned()),
                    ("memory".to_owned(), "96Mi".to_owned())
                ]
                .into_iter()
                .collect(),
                "what the node's user data carries"
            );
            // And the overhead the plan packs against: 60m, 96Mi + the
            // 100Mi eviction threshold, 3Gi + 10 % of the 20 GiB volume.
            let m5 = type_of(&instance_types(&pool, &catalog, &[]), "m5.large");
            assert_eq!(m5.overhead.cpu_millis, 60);
            assert_eq!(m5.overhead.memory_bytes, (96 + 100) * MIB);
            assert_eq!(
                m5.overhead.ephemeral_bytes,
                (3 << 30) + ((20 << 30) + 9) / 10
            );
        }

        /// "should evaluate a max_pods reference in kubeReserved against the
        /// resolved maxPods expression": maxPods `min(110, vcpus * 8)` is 16
        /// on m5.large, so kubeReserved memory `max_pods * 11` is 176Mi (with
        /// the ENI-limited 29 it would be 320Mi).
        #[test]
        fn should_evaluate_a_max_pods_reference_in_kube_reserved_against_the_resolved_max_pods_expression()
         {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            let pool = pool(
                true,
                "{maxPods: \"min(110, vcpus * 8)\", kubeReserved: {memory: \"max_pods * 11\"}}",
            )
            .expect("valid");
            let m5 = type_of(&instance_types(&pool, &catalog, &[]), "m5.large");
            assert_eq!(m5.capacity.pods, 16);
            assert_eq!(m5.overhead.memory_bytes, (176 + 100) * MIB);
        }

        /// "should resolve systemReserved expressions into the instance
        /// type's reserved overhead": the same values land in
        /// systemReserved, on top of the default kube-reserved (70m, 11 × 29
        /// + 255 MiB on m5.large).
        #[test]
        fn should_resolve_system_reserved_expressions_into_the_instance_types_reserved_overhead() {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            let pool = pool(
                true,
                "{systemReserved: {cpu: \"vcpus * 30\", memory: \"memory_mib / 100\"}}",
            )
            .expect("valid");
            let info = m5_large(&catalog);
            let resolved = info.resolve_kubelet(&pool.kubelet).expect("resolves");
            assert_eq!(resolved.config.system_reserved.cpu_millis, Some(60));
            assert_eq!(resolved.config.system_reserved.memory_bytes, Some(96 * MIB));
            assert!(resolved.config.kube_reserved.is_empty());
            let m5 = type_of(&instance_types(&pool, &catalog, &[]), "m5.large");
            assert_eq!(m5.overhead.cpu_millis, 70 + 60);
            assert_eq!(m5.overhead.memory_bytes, (11 * 29 + 255 + 96 + 100) * MIB);
        }

        /// A reserved expression that fails for a type is left out (that
        /// resource keeps its default), as Karpenter drops it; an expression
        /// that does not read is refused with the class, with its field.
        #[test]
        fn a_failing_reserved_expression_keeps_the_default_and_a_bad_one_is_refused() {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            let pool = pool(
                true,
                "{kubeReserved: {cpu: \"0 - vcpus\", memory: \"1 / (vcpus - vcpus)\"}}",
            )
            .expect("valid");
            let m5 = type_of(&instance_types(&pool, &catalog, &[]), "m5.large");
            assert_eq!(m5.overhead.cpu_millis, 70);
            assert_eq!(m5.overhead.memory_bytes, (11 * 29 + 255 + 100) * MIB);
            let errors = pool_errors(
                true,
                "{maxPods: \"vcpus *\", systemReserved: {memory: \"cores * 2\"}}",
            );
            let got: Vec<(&str, bool)> = errors
                .iter()
                .map(|e| (e.field.as_str(), e.reason.contains("expression")))
                .collect();
            assert_eq!(
                got,
                [
                    ("spec.kubelet.maxPods", true),
                    ("spec.kubelet.systemReserved[memory]", true)
                ]
            );
        }

        fn pool_errors(gate: bool, kubelet: &str) -> Vec<crate::config::ConfigError> {
            pool(gate, kubelet).expect_err("invalid")
        }
    }
}
