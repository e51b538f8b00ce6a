//! The cluster's own machinery, as the simulator plays it: the ReplicaSet
//! controller (Deployments → pods), the DaemonSet controller, pod garbage
//! collection, the kubelet's part (a bound pod starts and becomes Ready, a
//! pod being deleted on its node goes away once its grace period is over),
//! the disruption controller (PodDisruptionBudget status) and kube-scheduler.
//!
//! Pure: a view of the objects in, actions out. The in-memory cluster
//! applies them to its maps; the API-server driver in the tests applies
//! them through the Kubernetes API — so the scenarios run the same
//! controllers against both.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::model::{PodKey, SignedDuration, Timestamp};
use crate::packing::{ExistingNode, SolveOptions, solve};
use crate::provisioning::plan::existing_node;
use crate::scheduling::SchedPod;
use crate::scheduling::selector::LabelSelector;
use crate::scheduling::taints::{Effect, Taint, Toleration, first_untolerated};
use crate::scheduling::volumes::VolumeIndex;

/// The objects the controllers look at.
#[derive(Debug, Default)]
pub struct ClusterView<'a> {
    pub pods: Vec<&'a Pod>,
    pub nodes: Vec<&'a Node>,
    pub deployments: Vec<&'a Deployment>,
    pub daemon_sets: Vec<&'a DaemonSet>,
    pub pdbs: Vec<&'a PodDisruptionBudget>,
    /// PVCs, PVs and StorageClasses: the zones pods' volumes pin them to.
    pub volumes: VolumeIndex,
    /// The cluster's time: a terminating pod goes once it reaches its
    /// `deletionTimestamp`; disrupted pods expire after two minutes.
    pub now: Timestamp,
}

/// What the controllers want done.
#[derive(Debug, Clone, PartialEq)]
pub enum ControllerAction {
    /// Create a pod. A Deployment's pod has a `generateName` and no name
    /// (the cluster names it); a DaemonSet pod arrives bound and running.
    CreatePod(Box<Pod>),
    /// Remove a pod at once: scale-down, garbage collection of a pod whose
    /// node is gone, or the kubelet confirming a graceful deletion.
    RemovePod(PodKey),
    /// kube-scheduler's choice: bind the pod to the node.
    Place { pod: PodKey, node: String },
    /// The kubelet started a pod bound to its node.
    Start(PodKey),
    /// kube-scheduler found no node: `PodScheduled=False`, `Unschedulable`.
    Unschedulable { pod: PodKey, message: String },
}

pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

pub fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

pub fn is_finished(p: &Pod) -> bool {
    matches!(phase(p), Some("Succeeded" | "Failed"))
}

/// The pod has begun graceful deletion (it stays until its kubelet confirms).
pub fn is_terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

/// `Ready=True`: what the disruption controller and the eviction API count as healthy.
pub fn is_pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The name of the ReplicaSet a Deployment's pods belong to (one template
/// revision is all the simulator models).
pub fn replica_set_name(deployment: &str) -> String {
    format!("{deployment}-5d8f7c9b6")
}

/// Five characters derived from `seed`, like the suffixes Kubernetes' generateName adds.
pub fn name_suffix(seed: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (0..5)
        .map(|_| {
            let c = ALPHABET[(h % ALPHABET.len() as u64) as usize] as char;
            h /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn owned_by(kind: &str, name: &str, uid: String) -> Vec<OwnerReference> {
    vec![OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid,
        controller: Some(true),
        ..Default::default()
    }]
}

/// Everything but scheduling: Deployments to their replica counts,
/// DaemonSet pods on every node that admits them, garbage collection and
/// the kubelet's part.
pub fn reconcile_workloads(view: &ClusterView<'_>) -> Vec<ControllerAction> {
    let mut actions = Vec::new();
    let nodes: HashSet<&str> = view
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    for pod in &view.pods {
        let key = PodKey::of(pod);
        match node_of(pod) {
            // Pod GC: bound to a node that no longer exists.
            Some(n) if !nodes.contains(n) => actions.push(ControllerAction::RemovePod(key)),
            // The kubelet confirms a graceful deletion once its grace period
            // is over (a container that ignores SIGTERM, the slowest case).
            Some(_)
                if is_terminating(pod)
                    && pod
                        .metadata
                        .deletion_timestamp
                        .as_ref()
                        .is_some_and(|t| view.now >= t.0) =>
            {
                actions.push(ControllerAction::RemovePod(key));
            }
            Some(_) if phase(pod).is_none_or(|p| p == "Pending") => {
                actions.push(ControllerAction::Start(key))
            }
            _ => {}
        }
    }
    for d in &view.deployments {
        actions.extend(scale_deployment(d, &view.pods));
    }
    for ds in &view.daemon_sets {
        actions.extend(place_daemon_pods(ds, view));
    }
    actions
}

fn scale_deployment(d: &Deployment, pods: &[&Pod]) -> Vec<ControllerAction> {
    let ns = d
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let name = d.metadata.name.clone().unwrap_or_default();
    let Some(spec) = d.spec.as_ref() else {
        return Vec::new();
    };
    let want = usize::try_from(spec.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    let owner = replica_set_name(&name);
    let mut mine: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.name == owner)
        })
        .collect();
    if mine.len() > want {
        // Like the ReplicaSet controller: unscheduled pods go first, then the newest.
        mine.sort_by_key(|p| {
            (
                node_of(p).is_some(),
                std::cmp::Reverse(p.metadata.creation_timestamp.clone()),
            )
        });
        return mine[..mine.len() - want]
            .iter()
            .map(|p| ControllerAction::RemovePod(PodKey::of(p)))
            .collect();
    }
    (mine.len()..want)
        .map(|_| {
            let template = spec.template.clone();
            let mut meta = template.metadata.unwrap_or_default();
            meta.name = None;
            meta.generate_name = Some(format!("{owner}-"));
            meta.namespace = Some(ns.clone());
            meta.owner_references = Some(owned_by("ReplicaSet", &owner, format!("rs-{name}")));
            ControllerAction::CreatePod(Box::new(Pod {
                metadata: meta,
                spec: template.spec,
                status: Some(PodStatus {
                    phase: Some("Pending".to_owned()),
                    ..Default::default()
                }),
            }))
        })
        .collect()
}

/// The tolerations the DaemonSet controller gives every daemon pod.
fn daemon_tolerations() -> Vec<Toleration> {
    let tol = |key: &str, effect| Toleration {
        key: key.to_owned(),
        exists: true,
        value: String::new(),
        effect: Some(effect),
    };
    vec![
        tol("node.kubernetes.io/not-ready", Effect::NoExecute),
        tol("node.kubernetes.io/unreachable", Effect::NoExecute),
        tol("node.kubernetes.io/disk-pressure", Effect::NoSchedule),
        tol("node.kubernetes.io/memory-pressure", Effect::NoSchedule),
        tol("node.kubernetes.io/pid-pressure", Effect::NoSchedule),
        tol("node.kubernetes.io/unschedulable", Effect::NoSchedule),
    ]
}

fn place_daemon_pods(ds: &DaemonSet, view: &ClusterView<'_>) -> Vec<ControllerAction> {
    let ns = ds
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let name = ds.metadata.name.clone().unwrap_or_default();
    let Some(spec) = ds.spec.as_ref() else {
        return Vec::new();
    };
    let existing: HashSet<&str> = view
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let mut actions = Vec::new();
    for node in &view.nodes {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let pod_name = format!("{name}-{}", name_suffix(&node_name));
        if existing.contains(pod_name.as_str()) {
            continue;
        }
        let template = spec.template.clone();
        let mut meta = template.metadata.unwrap_or_default();
        meta.name = Some(pod_name);
        meta.namespace = Some(ns.clone());
        meta.owner_references = Some(owned_by("DaemonSet", &name, format!("ds-{name}")));
        let mut pod = Pod {
            metadata: meta,
            spec: template.spec,
            status: None,
        };
        // Only on nodes the pod's selector and required node affinity allow.
        let Ok(sp) = SchedPod::from_pod(&pod) else {
            continue;
        };
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if !sp.node_selector.satisfied_by(&labels)
            || !(sp.required_terms.is_empty()
                || sp.required_terms.iter().any(|t| t.satisfied_by(&labels)))
        {
            continue;
        }
        // Nor on nodes with a taint it does not tolerate (a node being
        // drained carries `karpenter.sh/disrupted:NoSchedule`): its own
        // tolerations plus those the DaemonSet controller adds.
        let taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|ts| ts.iter().filter_map(|t| Taint::from_k8s(t).ok()).collect())
            .unwrap_or_default();
        let mut tolerations = sp.tolerations.clone();
        tolerations.extend(daemon_tolerations());
        if first_untolerated(&taints, &tolerations, true).is_some() {
            continue;
        }
        pod.spec.get_or_insert_with(Default::default).node_name = Some(node_name);
        pod.status = Some(PodStatus {
            phase: Some("Running".to_owned()),
            ..Default::default()
        });
        actions.push(ControllerAction::CreatePod(Box::new(pod)));
    }
    actions
}

/// How long an evicted pod counts as disrupted if it never starts terminating
/// (the disruption controller's `DeletionTimeout`).
pub const PDB_DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// A new status for a PodDisruptionBudget, written through its status
/// subresource on the object's `resource_version` (a write that loses to
/// an eviction's decrement is dropped and recomputed on the next round).
#[derive(Debug, Clone, PartialEq)]
pub struct PdbStatusUpdate {
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    pub status: PodDisruptionBudgetStatus,
}

/// The pods a budget selects: its namespace, its selector (a missing
/// selector selects nothing, an empty one everything).
pub fn pdb_selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let ns = pdb.metadata.namespace.as_deref().unwrap_or("default");
    if pod.metadata.namespace.as_deref().unwrap_or("default") != ns {
        return false;
    }
    let empty = BTreeMap::new();
    pdb.spec
        .as_ref()
        .and_then(|sp| sp.selector.as_ref())
        .and_then(|sel| LabelSelector::from_k8s(sel).ok())
        .is_some_and(|sel| sel.matches(pod.metadata.labels.as_ref().unwrap_or(&empty)))
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
fn scaled(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"))?;
            Ok(i32::try_from((pct * i64::from(total) + 99).div_euclid(100)).unwrap_or(i32::MAX))
        }
    }
}

/// The scale of the controllers of `pods` (the disruption controller's
/// `getExpectedScale`): each controller counted once, by its replicas.
/// Only Deployments' ReplicaSets are modelled; unmanaged pods are skipped.
fn expected_scale(pods: &[&Pod], deployments: &[&Deployment]) -> Result<i32, String> {
    let mut scales: BTreeMap<(String, String), i32> = BTreeMap::new();
    for pod in pods {
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        else {
            continue;
        };
        let ns = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        if scales.contains_key(&(ns.clone(), owner.name.clone())) {
            continue;
        }
        let deployment = (owner.kind == "ReplicaSet")
            .then(|| {
                deployments.iter().find(|d| {
                    d.metadata.namespace.as_deref().unwrap_or("default") == ns
                        && d.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| replica_set_name(n) == owner.name)
                })
            })
            .flatten();
        let Some(d) = deployment else {
            return Err(format!(
                "found no controllers for pod {:?}",
                pod.metadata.name.as_deref().unwrap_or_default()
            ));
        };
        scales.insert(
            (ns, owner.name.clone()),
            d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        );
    }
    Ok(scales.values().sum())
}

fn disruption_allowed_condition(
    status: &PodDisruptionBudgetStatus,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Condition {
    let allowed = reason == "SufficientPods";
    let value = if allowed { "True" } else { "False" };
    // A condition keeps its transition time while its status holds.
    let since = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed" && c.status == value)
        .map_or(Time(now), |c| c.last_transition_time.clone());
    Condition {
        type_: "DisruptionAllowed".to_owned(),
        status: value.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: Some(status.observed_generation.unwrap_or(0)),
    }
}

/// The disruption controller's status for one budget, given every pod of
/// the cluster: `expectedPods` (the pods selected for an integer
/// `minAvailable`, else the scale of their controllers), `currentHealthy`
/// (Ready, not terminating, not disrupted within the last two minutes),
/// `desiredHealthy` (`minAvailable`, or `expectedPods − maxUnavailable`;
/// percentages round up), `disruptionsAllowed` (`currentHealthy −
/// desiredHealthy`, never below 0, and 0 while nothing is expected),
/// `disruptedPods` (the eviction API's entries, dropped once their pod
/// terminates, is gone, or two minutes have passed) and `observedGeneration`.
/// A budget whose pods' controllers cannot be found fails safe: nothing allowed.
pub fn pdb_status(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    deployments: &[&Deployment],
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let old = pdb.status.clone().unwrap_or_default();
    let generation = pdb.metadata.generation.unwrap_or(1);
    let selected: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| pdb_selects(pdb, p))
        .collect();
    let spec = pdb.spec.clone().unwrap_or_default();
    let expected = match (&spec.max_unavailable, &spec.min_available) {
        (Some(max), _) => expected_scale(&selected, deployments)
            .and_then(|n| scaled(max, n).map(|m| (n, (n - m).max(0)))),
        (None, Some(min @ IntOrString::Int(_))) => {
            scaled(min, 0).map(|m| (selected.len() as i32, m))
        }
        (None, Some(min)) => {
            expected_scale(&selected, deployments).and_then(|n| scaled(min, n).map(|m| (n, m)))
        }
        (None, None) => Ok((0, 0)),
    };
    let (expected_pods, desired_healthy) = match expected {
        Ok(v) => v,
        Err(message) => {
            let mut status = PodDisruptionBudgetStatus {
                disruptions_allowed: 0,
                ..old.clone()
            };
            status.conditions = Some(vec![disruption_allowed_condition(
                &old,
                "SyncFailed",
                message,
                now,
            )]);
            return status;
        }
    };
    let mut disrupted = BTreeMap::new();
    for pod in &selected {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if is_terminating(pod) {
            continue;
        }
        if let Some(at) = old.disrupted_pods.as_ref().and_then(|m| m.get(&name))
            && at.0 + PDB_DELETION_TIMEOUT >= now
        {
            disrupted.insert(name, at.clone());
        }
    }
    let current_healthy = selected
        .iter()
        .filter(|p| !is_terminating(p) && is_pod_ready(p))
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
        .count() as i32;
    let mut allowed = current_healthy - desired_healthy;
    if expected_pods <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let mut status = PodDisruptionBudgetStatus {
        current_healthy,
        desired_healthy,
        expected_pods,
        disruptions_allowed: allowed,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        observed_generation: Some(generation),
        conditions: None,
    };
    let reason = if allowed > 0 {
        "SufficientPods"
    } else {
        "InsufficientPods"
    };
    status.conditions = Some(vec![disruption_allowed_condition(
        &PodDisruptionBudgetStatus {
            observed_generation: Some(generation),
            ..old
        },
        reason,
        String::new(),
        now,
    )]);
    status
}

/// Whether two statuses differ in anything but condition timestamps (the
/// controller writes only when something changed).
pub fn pdb_status_differs(a: &PodDisruptionBudgetStatus, b: &PodDisruptionBudgetStatus) -> bool {
    let strip = |s: &PodDisruptionBudgetStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        if s.disrupted_pods.as_ref().is_some_and(BTreeMap::is_empty) {
            s.disrupted_pods = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// The disruption controller's round: the budgets whose status is out of date.
pub fn disruption_budgets(view: &ClusterView<'_>) -> Vec<PdbStatusUpdate> {
    view.pdbs
        .iter()
        .filter_map(|pdb| {
            let status = pdb_status(pdb, &view.pods, &view.deployments, view.now);
            let stale = pdb
                .status
                .as_ref()
                .is_none_or(|old| pdb_status_differs(old, &status));
            stale.then(|| PdbStatusUpdate {
                namespace: pdb
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_owned()),
                name: pdb.metadata.name.clone().unwrap_or_default(),
                resource_version: pdb.metadata.resource_version.clone(),
                status,
            })
        })
        .collect()
}

/// The attach/detach controller's wish: a VolumeAttachment for each
/// persistent volume of a CSI driver that a pod bound to a node uses (a
/// pod terminating there still holds it; a finished one does not), named
/// after the volume and the node → (driver, volume, node).
pub fn attachments_wanted(view: &ClusterView<'_>) -> BTreeMap<String, (String, String, String)> {
    let mut out = BTreeMap::new();
    for p in &view.pods {
        let Some(node) = node_of(p) else { continue };
        if is_finished(p) {
            continue;
        }
        for (driver, volume) in crate::scheduling::volumes::attached_volumes(p, &view.volumes) {
            out.insert(
                format!("csi-{volume}-{node}"),
                (driver, volume, node.to_owned()),
            );
        }
    }
    out
}

/// kube-scheduler: place what fits on existing Ready nodes; mark the rest
/// Unschedulable (once: a pod already marked is left alone).
pub fn schedule(view: &ClusterView<'_>) -> Vec<ControllerAction> {
    let pending: Vec<&Pod> = view
        .pods
        .iter()
        .copied()
        .filter(|p| {
            node_of(p).is_none() && p.metadata.deletion_timestamp.is_none() && !is_finished(p)
        })
        .collect();
    if pending.is_empty() {
        return Vec::new();
    }
    let mut by_node: BTreeMap<&str, Vec<SchedPod>> = BTreeMap::new();
    for p in &view.pods {
        if let (Some(n), Ok(sp)) = (node_of(p), SchedPod::from_pod(p)) {
            by_node
                .entry(n)
                .or_default()
                .push(crate::provisioning::plan::with_attachments(
                    sp,
                    p,
                    &view.volumes,
                ));
        }
    }
    let nodes: Vec<ExistingNode> = view
        .nodes
        .iter()
        .map(|n| {
            let mut node = existing_node(
                n,
                by_node
                    .remove(n.metadata.name.as_deref().unwrap_or_default())
                    .unwrap_or_default(),
            );
            // kube-scheduler places nothing on a node that is not Ready,
            // nor past its volume attach limits.
            node.unschedulable |= !is_ready(n);
            node.volume_limits = view.volumes.limits_of(&node.name);
            node
        })
        .collect();
    let mut actions = Vec::new();
    let mut candidates = Vec::new();
    let mut sched_pods = Vec::new();
    for p in pending {
        match SchedPod::from_pod_with_volumes(p, &view.volumes) {
            Ok(sp) => {
                sched_pods.push(sp);
                candidates.push(p);
            }
            Err(e) => actions.push(ControllerAction::Unschedulable {
                pod: PodKey::of(p),
                message: e.to_string(),
            }),
        }
    }
    let plan = solve(&sched_pods, &nodes, &[], &[], &SolveOptions::default());
    let mut placed = vec![false; candidates.len()];
    for (i, node) in &plan.bindings {
        placed[*i] = true;
        actions.push(ControllerAction::Place {
            pod: PodKey::of(candidates[*i]),
            node: node.clone(),
        });
    }
    let message = format!("0/{} nodes are available", view.nodes.len());
    for (p, placed) in candidates.into_iter().zip(placed) {
        let marked = p
            .status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable")
                })
            });
        if !placed && !marked {
            actions.push(ControllerAction::Unschedulable {
                pod: PodKey::of(p),
                message: message.clone(),
            });
        }
    }
    actions
}

/// A PodDisruptionBudget's floor and where its pods stand: (the fewest
/// healthy pods it allows, healthy pods now), counting Running pods that
/// are not terminating. `None` for a budget without a usable selector.
pub fn pdb_health(
    pdb: &k8s_openapi::api::policy::v1::PodDisruptionBudget,
    pods: &[Pod],
) -> Option<(usize, usize)> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let spec = pdb.spec.as_ref()?;
    let selector =
        crate::scheduling::selector::LabelSelector::from_k8s(spec.selector.as_ref()?).ok()?;
    let ns = pdb.metadata.namespace.as_deref().unwrap_or("default");
    let empty = BTreeMap::new();
    let selected: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == ns)
        .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty)))
        .collect();
    let expected = selected.len();
    let healthy = selected
        .iter()
        .filter(|p| phase(p) == Some("Running") && p.metadata.deletion_timestamp.is_none())
        .count();
    let resolve = |v: &IntOrString, round_up: bool| match v {
        IntOrString::Int(i) => usize::try_from(*i).unwrap_or(0),
        IntOrString::String(s) => {
            let pct: usize = s.trim_end_matches('%').parse().unwrap_or(0);
            if round_up {
                (expected * pct).div_ceil(100)
            } else {
                expected * pct / 100
            }
        }
    };
    let floor = match (&spec.min_available, &spec.max_unavailable) {
        (Some(min), _) => resolve(min, true),
        (None, Some(max)) => expected.saturating_sub(resolve(max, true)),
        (None, None) => 0,
    };
    Some((floor, healthy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i32) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}
                }
            }
        }))
        .unwrap()
    }

    fn pod_of_web(name: &str, node: Option<&str>, created: i64) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "default", "uid": name,
                "creationTimestamp": jiff::Timestamp::from_second(created).unwrap().to_string(),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set_name("web"), "uid": "rs-web", "controller": true}]
            },
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}
        }))
        .unwrap()
    }

    fn ready_node(name: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_is_scaled_up_with_generated_names_and_down_unscheduled_first() {
        let d = deployment(3);
        let n1 = ready_node("n1");
        let pods = [pod_of_web("a", Some("n1"), 1)];
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: vec![&n1],
            deployments: vec![&d],
            ..Default::default()
        };
        let actions = reconcile_workloads(&view);
        assert_eq!(actions.len(), 2, "{actions:?}");
        for a in &actions {
            let ControllerAction::CreatePod(p) = a else {
                panic!("{a:?}")
            };
            assert_eq!(p.metadata.generate_name.as_deref(), Some("web-5d8f7c9b6-"));
            assert!(p.metadata.name.is_none());
        }

        let d = deployment(1);
        let pods = [
            pod_of_web("old", Some("n1"), 1),
            pod_of_web("new", Some("n1"), 2),
            pod_of_web("pending", None, 0),
        ];
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: vec![&n1],
            deployments: vec![&d],
            ..Default::default()
        };
        let removed: Vec<String> = reconcile_workloads(&view)
            .into_iter()
            .filter_map(|a| match a {
                ControllerAction::RemovePod(k) => Some(k.name),
                _ => None,
            })
            .collect();
        assert_eq!(removed, ["pending", "new"]);
    }

    #[test]
    fn pods_of_a_vanished_node_are_collected_and_bound_pods_start() {
        let n1 = ready_node("n1");
        let mut bound = pod_of_web("bound", Some("n1"), 1);
        bound.status = Some(PodStatus {
            phase: Some("Pending".to_owned()),
            ..Default::default()
        });
        let pods = [bound, pod_of_web("orphan", Some("gone"), 1)];
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: vec![&n1],
            ..Default::default()
        };
        let actions = reconcile_workloads(&view);
        assert!(
            actions.contains(&ControllerAction::Start(PodKey::of(&pods[0]))),
            "{actions:?}"
        );
        assert!(
            actions.contains(&ControllerAction::RemovePod(PodKey::of(&pods[1]))),
            "{actions:?}"
        );
    }

    #[test]
    fn the_scheduler_places_what_fits_and_marks_the_rest_once() {
        let n1 = ready_node("n1");
        let mut pods: Vec<Pod> = (0..6)
            .map(|i| pod_of_web(&format!("p{i}"), None, i))
            .collect();
        for p in &mut pods {
            p.spec.as_mut().unwrap().containers[0].resources =
                Some(serde_json::from_value(json!({"requests": {"cpu": "1"}})).unwrap());
        }
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: vec![&n1],
            ..Default::default()
        };
        let actions = schedule(&view);
        let placed = actions
            .iter()
            .filter(|a| matches!(a, ControllerAction::Place { .. }))
            .count();
        let marked = actions
            .iter()
            .filter(|a| matches!(a, ControllerAction::Unschedulable { .. }))
            .count();
        assert_eq!((placed, marked), (4, 2), "{actions:?}");

        // A pod already marked Unschedulable is not marked again.
        let mut marked_pod = pods[5].clone();
        marked_pod.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))
        .unwrap();
        let view = ClusterView {
            pods: vec![&marked_pod],
            ..Default::default()
        };
        assert!(schedule(&view).is_empty());
    }

    #[test]
    fn daemon_pods_go_only_to_nodes_their_selector_admits() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "n1"},
                    "containers": [{"name": "c", "image": "i"}]}}
            }
        }))
        .unwrap();
        let (n1, n2) = (ready_node("n1"), ready_node("n2"));
        let view = ClusterView {
            nodes: vec![&n1, &n2],
            daemon_sets: vec![&ds],
            ..Default::default()
        };
        let actions = reconcile_workloads(&view);
        assert_eq!(actions.len(), 1, "{actions:?}");
        let ControllerAction::CreatePod(p) = &actions[0] else {
            panic!()
        };
        assert_eq!(node_of(p), Some("n1"));
        assert_eq!(phase(p), Some("Running"));
    }

    /// The DaemonSet controller honours required node affinity too (any one
    /// of its terms), not only `nodeSelector`.
    #[test]
    fn daemon_pods_go_only_to_nodes_their_required_affinity_admits() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]},
                            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n3"]}]}
                        ]}}},
                    "containers": [{"name": "c", "image": "i"}]}}
            }
        }))
        .unwrap();
        let (n1, n2, n3) = (ready_node("n1"), ready_node("n2"), ready_node("n3"));
        let view = ClusterView {
            nodes: vec![&n1, &n2, &n3],
            daemon_sets: vec![&ds],
            ..Default::default()
        };
        let actions = reconcile_workloads(&view);
        let mut on: Vec<&str> = actions
            .iter()
            .filter_map(|a| match a {
                ControllerAction::CreatePod(p) => node_of(p),
                _ => None,
            })
            .collect();
        on.sort_unstable();
        assert_eq!(on, ["n1", "n3"]);
    }

    fn budget(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "generation": 2},
            "spec": spec
        }))
        .unwrap()
    }

    fn ready(mut p: Pod) -> Pod {
        p.status.get_or_insert_with(Default::default).conditions = Some(vec![
            serde_json::from_value(json!({"type": "Ready", "status": "True"})).unwrap(),
        ]);
        p.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
        p
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn numbers(s: &PodDisruptionBudgetStatus) -> (i32, i32, i32, i32) {
        (
            s.current_healthy,
            s.desired_healthy,
            s.expected_pods,
            s.disruptions_allowed,
        )
    }

    #[test]
    fn budgets_count_ready_pods_and_round_percentages_up() {
        let d = deployment(3);
        let mut pods: Vec<Pod> = (0..3)
            .map(|i| ready(pod_of_web(&format!("p{i}"), Some("n1"), i)))
            .collect();
        // An unready pod is not healthy; a pod of another app is not selected.
        pods[2].status.as_mut().unwrap().conditions = None;
        let mut other = ready(pod_of_web("other", Some("n1"), 9));
        other.metadata.labels = Some([("app".to_owned(), "db".to_owned())].into());
        pods.push(other);
        let refs: Vec<&Pod> = pods.iter().collect();
        let status = |spec| pdb_status(&budget(spec), &refs, &[&d], t(0));

        // Integer minAvailable: expected = the selected pods.
        let s = status(json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}));
        assert_eq!(numbers(&s), (2, 1, 3, 1));
        assert_eq!(s.observed_generation, Some(2));
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("DisruptionAllowed", "True", "SufficientPods")
        );
        // 50 % of 3 rounds up to 2.
        assert_eq!(
            numbers(&status(
                json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}})
            )),
            (2, 2, 3, 0)
        );
        // maxUnavailable 50 % of 3 → 2 may be down → 1 desired.
        assert_eq!(
            numbers(&status(
                json!({"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}})
            )),
            (2, 1, 3, 1)
        );
        assert_eq!(
            numbers(&status(
                json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}})
            )),
            (2, 3, 3, 0)
        );
        // A missing selector selects nothing; an empty one everything.
        assert_eq!(
            numbers(&status(json!({"minAvailable": 0}))),
            (0, 0, 0, 0),
            "nothing expected: nothing allowed"
        );
        assert_eq!(
            numbers(&status(json!({"minAvailable": 1, "selector": {}}))),
            (3, 1, 4, 2)
        );
    }

    #[test]
    fn a_budget_whose_pods_have_no_known_controller_fails_safe() {
        let pods = [
            ready(pod_of_web("p0", Some("n1"), 0)),
            ready(pod_of_web("p1", Some("n1"), 1)),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut pdb =
            budget(json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}));
        pdb.status = Some(PodDisruptionBudgetStatus {
            disruptions_allowed: 1,
            ..Default::default()
        });
        let s = pdb_status(&pdb, &refs, &[], t(0));
        assert_eq!(s.disruptions_allowed, 0);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "SyncFailed")
        );
        assert!(c.message.contains("found no controllers"), "{}", c.message);
        // Integer minAvailable needs no controller.
        pdb.spec =
            budget(json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}})).spec;
        assert_eq!(numbers(&pdb_status(&pdb, &refs, &[], t(0))), (2, 1, 2, 1));
    }

    #[test]
    fn disrupted_pods_are_not_healthy_until_they_terminate_or_two_minutes_pass() {
        let mut pods: Vec<Pod> = (0..3)
            .map(|i| ready(pod_of_web(&format!("p{i}"), Some("n1"), i)))
            .collect();
        pods[1].metadata.deletion_timestamp = Some(Time(t(30)));
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut pdb =
            budget(json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}));
        pdb.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(
                [
                    ("p0".to_owned(), Time(t(0))),
                    ("p1".to_owned(), Time(t(0))),
                    ("gone".to_owned(), Time(t(0))),
                ]
                .into(),
            ),
            ..Default::default()
        });
        // p0 is disrupted (kept), p1 terminating (dropped), "gone" no longer exists (dropped).
        let s = pdb_status(&pdb, &refs, &[], t(60));
        assert_eq!(numbers(&s), (1, 1, 3, 0));
        assert_eq!(
            s.disrupted_pods
                .as_ref()
                .map(|m| m.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["p0".to_owned()])
        );
        // Two minutes on, p0 never went: it counts again.
        let s = pdb_status(&pdb, &refs, &[], t(121));
        assert_eq!(numbers(&s), (2, 1, 3, 1));
        assert_eq!(s.disrupted_pods, None);
        // An unchanged status is not rewritten; a changed one is.
        let mut current = pdb.clone();
        current.status = Some(s.clone());
        let view = ClusterView {
            pods: refs.clone(),
            pdbs: vec![&current],
            now: t(200),
            ..Default::default()
        };
        assert!(disruption_budgets(&view).is_empty());
        let view = ClusterView {
            pods: refs[..1].to_vec(),
            pdbs: vec![&current],
            now: t(200),
            ..Default::default()
        };
        assert_eq!(disruption_budgets(&view).len(), 1);
    }

    #[test]
    fn the_kubelet_confirms_a_deletion_once_its_grace_period_is_over() {
        let n1 = ready_node("n1");
        let mut p = pod_of_web("p0", Some("n1"), 0);
        p.metadata.deletion_timestamp = Some(Time(t(30)));
        let pods = [p];
        let at = |now| ClusterView {
            pods: pods.iter().collect(),
            nodes: vec![&n1],
            now,
            ..Default::default()
        };
        assert!(
            reconcile_workloads(&at(t(29))).is_empty(),
            "within the grace period"
        );
        assert_eq!(
            reconcile_workloads(&at(t(30))),
            vec![ControllerAction::RemovePod(PodKey::of(&pods[0]))]
        );
    }

    #[test]
    fn daemon_pods_stay_off_nodes_with_taints_they_do_not_tolerate() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        let mut drained = ready_node("drained");
        drained.spec = serde_json::from_value(json!({"unschedulable": true, "taints": [
            {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}))
        .unwrap();
        let mut cordoned = ready_node("cordoned");
        cordoned.spec = serde_json::from_value(json!({"unschedulable": true, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}))
        .unwrap();
        let view = ClusterView {
            nodes: vec![&drained, &cordoned],
            daemon_sets: vec![&ds],
            ..Default::default()
        };
        let placed: Vec<Option<String>> = reconcile_workloads(&view)
            .into_iter()
            .filter_map(|a| match a {
                ControllerAction::CreatePod(p) => Some(node_of(&p).map(str::to_owned)),
                _ => None,
            })
            .collect();
        assert_eq!(
            placed,
            [Some("cordoned".to_owned())],
            "a cordon alone is tolerated; karpenter.sh/disrupted is not"
        );
    }
}
