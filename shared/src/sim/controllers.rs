//! The cluster's own machinery, as the simulator plays it: the ReplicaSet
//! controller (Deployments → pods), the DaemonSet controller, pod garbage
//! collection, the kubelet's part (a bound pod starts, a pod being deleted
//! on its node goes away) and kube-scheduler.
//!
//! Pure: a view of the objects in, actions out. The in-memory cluster
//! applies them to its maps; the API-server driver in the tests applies
//! them through the Kubernetes API — so the scenarios run the same
//! controllers against both.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::ports::PodKey;
use crate::provisioning::plan::existing_node;
use crate::scheduling::taints::{Taint, first_untolerated};
use crate::scheduling::volumes::VolumeIndex;
use crate::scheduling::{ExistingNode, SchedPod, SolveOptions, solve};

/// The objects the controllers look at.
#[derive(Debug, Default)]
pub struct ClusterView<'a> {
    pub pods: Vec<&'a Pod>,
    pub nodes: Vec<&'a Node>,
    pub deployments: Vec<&'a Deployment>,
    pub daemon_sets: Vec<&'a DaemonSet>,
    /// PVCs, PVs and StorageClasses: the zones pods' volumes pin them to.
    pub volumes: VolumeIndex,
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
    p.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

pub fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

pub fn is_finished(p: &Pod) -> bool {
    matches!(phase(p), Some("Succeeded" | "Failed"))
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
    let mut h = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
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
    let nodes: HashSet<&str> = view.nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
    for pod in &view.pods {
        let key = PodKey::of(pod);
        match node_of(pod) {
            // Pod GC: bound to a node that no longer exists.
            Some(n) if !nodes.contains(n) => actions.push(ControllerAction::RemovePod(key)),
            // The kubelet finishes a graceful deletion.
            Some(_) if pod.metadata.deletion_timestamp.is_some() => actions.push(ControllerAction::RemovePod(key)),
            Some(_) if phase(pod).is_none_or(|p| p == "Pending") => actions.push(ControllerAction::Start(key)),
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
    let ns = d.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned());
    let name = d.metadata.name.clone().unwrap_or_default();
    let Some(spec) = d.spec.as_ref() else { return Vec::new() };
    let want = usize::try_from(spec.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    let owner = replica_set_name(&name);
    let mut mine: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.metadata.owner_references.iter().flatten().any(|o| o.name == owner))
        .collect();
    if mine.len() > want {
        // Like the ReplicaSet controller: unscheduled pods go first, then the newest.
        mine.sort_by_key(|p| (node_of(p).is_some(), std::cmp::Reverse(p.metadata.creation_timestamp.clone())));
        return mine[..mine.len() - want].iter().map(|p| ControllerAction::RemovePod(PodKey::of(p))).collect();
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
                status: Some(PodStatus { phase: Some("Pending".to_owned()), ..Default::default() }),
            }))
        })
        .collect()
}

fn place_daemon_pods(ds: &DaemonSet, view: &ClusterView<'_>) -> Vec<ControllerAction> {
    let ns = ds.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned());
    let name = ds.metadata.name.clone().unwrap_or_default();
    let Some(spec) = ds.spec.as_ref() else { return Vec::new() };
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
        let mut pod = Pod { metadata: meta, spec: template.spec, status: None };
        // Only on nodes the pod's selector allows.
        let Ok(sp) = SchedPod::from_pod(&pod) else { continue };
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if !sp.node_selector.keys().all(|k| sp.node_selector.allows(k, labels.get(k).map(String::as_str))) {
            continue;
        }
        // Like the DaemonSet controller: a NoSchedule/NoExecute taint the
        // pod does not tolerate keeps it off (a node being drained), save
        // the node-condition taints every daemon pod tolerates.
        let taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|ts| ts.iter().filter_map(|t| Taint::from_k8s(t).ok()).filter(|t| !t.key.starts_with("node.kubernetes.io/")).collect())
            .unwrap_or_default();
        if first_untolerated(&taints, &sp.tolerations, true).is_some() {
            continue;
        }
        pod.spec.get_or_insert_with(Default::default).node_name = Some(node_name);
        pod.status = Some(PodStatus { phase: Some("Running".to_owned()), ..Default::default() });
        actions.push(ControllerAction::CreatePod(Box::new(pod)));
    }
    actions
}

/// kube-scheduler: place what fits on existing Ready nodes; mark the rest
/// Unschedulable (once: a pod already marked is left alone).
pub fn schedule(view: &ClusterView<'_>) -> Vec<ControllerAction> {
    let pending: Vec<&Pod> = view
        .pods
        .iter()
        .copied()
        .filter(|p| node_of(p).is_none() && p.metadata.deletion_timestamp.is_none() && !is_finished(p))
        .collect();
    if pending.is_empty() {
        return Vec::new();
    }
    let mut by_node: BTreeMap<&str, Vec<SchedPod>> = BTreeMap::new();
    for p in &view.pods {
        if let (Some(n), Ok(sp)) = (node_of(p), SchedPod::from_pod(p)) {
            by_node.entry(n).or_default().push(sp);
        }
    }
    let nodes: Vec<ExistingNode> = view
        .nodes
        .iter()
        .map(|n| {
            let mut node = existing_node(n, by_node.remove(n.metadata.name.as_deref().unwrap_or_default()).unwrap_or_default());
            // kube-scheduler places nothing on a node that is not Ready.
            node.unschedulable |= !is_ready(n);
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
            Err(e) => actions.push(ControllerAction::Unschedulable { pod: PodKey::of(p), message: e.to_string() }),
        }
    }
    let plan = solve(&sched_pods, &nodes, &[], &[], &SolveOptions::default());
    let mut placed = vec![false; candidates.len()];
    for (i, node) in &plan.bindings {
        placed[*i] = true;
        actions.push(ControllerAction::Place { pod: PodKey::of(candidates[*i]), node: node.clone() });
    }
    let message = format!("0/{} nodes are available", view.nodes.len());
    for (p, placed) in candidates.into_iter().zip(placed) {
        let marked = p.status.as_ref().and_then(|st| st.conditions.as_ref()).is_some_and(|cs| {
            cs.iter().any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
        });
        if !placed && !marked {
            actions.push(ControllerAction::Unschedulable { pod: PodKey::of(p), message: message.clone() });
        }
    }
    actions
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
        let view = ClusterView { pods: pods.iter().collect(), nodes: vec![&n1], deployments: vec![&d], ..Default::default() };
        let actions = reconcile_workloads(&view);
        assert_eq!(actions.len(), 2, "{actions:?}");
        for a in &actions {
            let ControllerAction::CreatePod(p) = a else { panic!("{a:?}") };
            assert_eq!(p.metadata.generate_name.as_deref(), Some("web-5d8f7c9b6-"));
            assert!(p.metadata.name.is_none());
        }

        let d = deployment(1);
        let pods = [pod_of_web("old", Some("n1"), 1), pod_of_web("new", Some("n1"), 2), pod_of_web("pending", None, 0)];
        let view = ClusterView { pods: pods.iter().collect(), nodes: vec![&n1], deployments: vec![&d], ..Default::default() };
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
        bound.status = Some(PodStatus { phase: Some("Pending".to_owned()), ..Default::default() });
        let pods = [bound, pod_of_web("orphan", Some("gone"), 1)];
        let view = ClusterView { pods: pods.iter().collect(), nodes: vec![&n1], ..Default::default() };
        let actions = reconcile_workloads(&view);
        assert!(actions.contains(&ControllerAction::Start(PodKey::of(&pods[0]))), "{actions:?}");
        assert!(actions.contains(&ControllerAction::RemovePod(PodKey::of(&pods[1]))), "{actions:?}");
    }

    #[test]
    fn the_scheduler_places_what_fits_and_marks_the_rest_once() {
        let n1 = ready_node("n1");
        let mut pods: Vec<Pod> = (0..6).map(|i| pod_of_web(&format!("p{i}"), None, i)).collect();
        for p in &mut pods {
            p.spec.as_mut().unwrap().containers[0].resources =
                Some(serde_json::from_value(json!({"requests": {"cpu": "1"}})).unwrap());
        }
        let view = ClusterView { pods: pods.iter().collect(), nodes: vec![&n1], ..Default::default() };
        let actions = schedule(&view);
        let placed = actions.iter().filter(|a| matches!(a, ControllerAction::Place { .. })).count();
        let marked = actions.iter().filter(|a| matches!(a, ControllerAction::Unschedulable { .. })).count();
        assert_eq!((placed, marked), (4, 2), "{actions:?}");

        // A pod already marked Unschedulable is not marked again.
        let mut marked_pod = pods[5].clone();
        marked_pod.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))
        .unwrap();
        let view = ClusterView { pods: vec![&marked_pod], ..Default::default() };
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
        let view = ClusterView { nodes: vec![&n1, &n2], daemon_sets: vec![&ds], ..Default::default() };
        let actions = reconcile_workloads(&view);
        assert_eq!(actions.len(), 1, "{actions:?}");
        let ControllerAction::CreatePod(p) = &actions[0] else { panic!() };
        assert_eq!(node_of(p), Some("n1"));
        assert_eq!(phase(p), Some("Running"));
    }
}

/// A PodDisruptionBudget's floor and where its pods stand: (the fewest
/// healthy pods it allows, healthy pods now), counting Running pods that
/// are not terminating. `None` for a budget without a usable selector.
pub fn pdb_health(pdb: &k8s_openapi::api::policy::v1::PodDisruptionBudget, pods: &[Pod]) -> Option<(usize, usize)> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let spec = pdb.spec.as_ref()?;
    let selector = crate::scheduling::selector::LabelSelector::from_k8s(spec.selector.as_ref()?).ok()?;
    let ns = pdb.metadata.namespace.as_deref().unwrap_or("default");
    let empty = BTreeMap::new();
    let selected: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == ns)
        .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&empty)))
        .collect();
    let expected = selected.len();
    let healthy = selected.iter().filter(|p| phase(p) == Some("Running") && p.metadata.deletion_timestamp.is_none()).count();
    let resolve = |v: &IntOrString, round_up: bool| match v {
        IntOrString::Int(i) => usize::try_from(*i).unwrap_or(0),
        IntOrString::String(s) => {
            let pct: usize = s.trim_end_matches('%').parse().unwrap_or(0);
            if round_up { (expected * pct).div_ceil(100) } else { expected * pct / 100 }
        }
    };
    let floor = match (&spec.min_available, &spec.max_unavailable) {
        (Some(min), _) => resolve(min, true),
        (None, Some(max)) => expected.saturating_sub(resolve(max, true)),
        (None, None) => 0,
    };
    Some((floor, healthy))
}
