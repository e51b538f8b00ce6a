//! A Kubernetes cluster in memory: pods, Deployments (replicas → pods),
//! DaemonSets, PodDisruptionBudgets and nodes, with the controllers of
//! [`controllers`] applied to them — so pods evicted or orphaned by a
//! deleted node come back pending and reschedule as they would in a cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodStatus, Taint as K8sTaint};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::clock::SimClock;
use super::driver::ClusterDriver;
use super::controllers::{self, ClusterView, ControllerAction, is_finished, name_suffix, node_of};
use crate::ports::{
    BindOutcome, Clock, Cluster, ClusterError, ClusterEvent, EvictOutcome, PodKey, Timestamp,
};
use crate::resources::Resources;
use crate::scheduling::selector::LabelSelector;
use crate::scheduling::taints::Taint;
use crate::scheduling::volumes::VolumeIndex;

#[derive(Debug, Default)]
struct State {
    pods: BTreeMap<(String, String), Pod>,
    nodes: BTreeMap<String, Node>,
    deployments: BTreeMap<(String, String), Deployment>,
    daemon_sets: BTreeMap<(String, String), DaemonSet>,
    pdbs: BTreeMap<(String, String), PodDisruptionBudget>,
    /// Storage objects, kept as given: nothing binds or provisions volumes here.
    claims: BTreeMap<(String, String), PersistentVolumeClaim>,
    volumes: BTreeMap<String, PersistentVolume>,
    storage_classes: BTreeMap<String, StorageClass>,
    events: Vec<(Timestamp, ClusterEvent)>,
    next_uid: u64,
    /// Something changed that the scheduler should look at.
    dirty: bool,
    evictions_blocked: usize,
}

impl State {
    fn view(&self) -> ClusterView<'_> {
        ClusterView {
            pods: self.pods.values().collect(),
            nodes: self.nodes.values().collect(),
            deployments: self.deployments.values().collect(),
            daemon_sets: self.daemon_sets.values().collect(),
            volumes: VolumeIndex::new(
                self.claims.values().cloned().collect(),
                self.volumes.values().cloned().collect(),
                self.storage_classes.values().cloned().collect(),
            ),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimCluster {
    state: Arc<Mutex<State>>,
    clock: SimClock,
}

fn key(ns: Option<&String>, name: Option<&String>) -> (String, String) {
    (ns.cloned().unwrap_or_else(|| "default".to_owned()), name.cloned().unwrap_or_default())
}

fn set_condition(pod: &mut Pod, type_: &str, status: &str, reason: Option<&str>, message: Option<String>, now: Timestamp) {
    let st = pod.status.get_or_insert_with(PodStatus::default);
    let conds = st.conditions.get_or_insert_with(Vec::new);
    conds.retain(|c| c.type_ != type_);
    conds.push(PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        last_transition_time: Some(Time(now)),
        ..Default::default()
    });
}

/// A resource vector as a Kubernetes resource list.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    let mut m = BTreeMap::new();
    m.insert("cpu".to_owned(), Quantity(format!("{}m", r.cpu_millis)));
    m.insert("memory".to_owned(), Quantity(r.memory_bytes.to_string()));
    m.insert("pods".to_owned(), Quantity(r.pods.to_string()));
    if r.ephemeral_bytes > 0 {
        m.insert("ephemeral-storage".to_owned(), Quantity(r.ephemeral_bytes.to_string()));
    }
    for (name, v) in &r.extended {
        m.insert(name.clone(), Quantity(v.to_string()));
    }
    m
}

impl SimCluster {
    pub fn new(clock: SimClock) -> Self {
        SimCluster { state: Arc::new(Mutex::new(State::default())), clock }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn uid(s: &mut State) -> String {
        s.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012x}", s.next_uid)
    }

    /// Adds or replaces an object of a kind the simulator models.
    pub fn apply(&self, object: &serde_json::Value) -> Result<(), String> {
        let kind = object.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        let mut s = self.lock();
        s.dirty = true;
        let err = |e: serde_json::Error| format!("{kind}: {e}");
        match kind {
            "Deployment" => {
                let d: Deployment = serde_json::from_value(object.clone()).map_err(err)?;
                s.deployments.insert(key(d.metadata.namespace.as_ref(), d.metadata.name.as_ref()), d);
            }
            "DaemonSet" => {
                let d: DaemonSet = serde_json::from_value(object.clone()).map_err(err)?;
                s.daemon_sets.insert(key(d.metadata.namespace.as_ref(), d.metadata.name.as_ref()), d);
            }
            "PodDisruptionBudget" => {
                let p: PodDisruptionBudget = serde_json::from_value(object.clone()).map_err(err)?;
                s.pdbs.insert(key(p.metadata.namespace.as_ref(), p.metadata.name.as_ref()), p);
            }
            "PersistentVolumeClaim" => {
                let c: PersistentVolumeClaim = serde_json::from_value(object.clone()).map_err(err)?;
                s.claims.insert(key(c.metadata.namespace.as_ref(), c.metadata.name.as_ref()), c);
            }
            "PersistentVolume" => {
                let v: PersistentVolume = serde_json::from_value(object.clone()).map_err(err)?;
                s.volumes.insert(v.metadata.name.clone().unwrap_or_default(), v);
            }
            "StorageClass" => {
                let c: StorageClass = serde_json::from_value(object.clone()).map_err(err)?;
                s.storage_classes.insert(c.metadata.name.clone().unwrap_or_default(), c);
            }
            "Pod" => {
                let mut p: Pod = serde_json::from_value(object.clone()).map_err(err)?;
                let now = self.clock.now();
                p.metadata.namespace.get_or_insert_with(|| "default".to_owned());
                p.metadata.uid = Some(Self::uid(&mut s));
                p.metadata.creation_timestamp = Some(Time(now));
                p.status = Some(PodStatus { phase: Some("Pending".to_owned()), ..Default::default() });
                s.pods.insert(key(p.metadata.namespace.as_ref(), p.metadata.name.as_ref()), p);
            }
            other => return Err(format!("the simulated cluster does not model kind {other:?}")),
        }
        Ok(())
    }

    /// Sets a Deployment's replicas.
    pub fn scale(&self, namespace: &str, name: &str, replicas: i32) -> Result<(), String> {
        let mut s = self.lock();
        let d = s
            .deployments
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .ok_or_else(|| format!("no deployment {namespace}/{name}"))?;
        d.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        s.dirty = true;
        Ok(())
    }

    /// Adds a Node (the simulator calls this when an instance registers).
    pub fn add_node(&self, node: Node) {
        let mut s = self.lock();
        s.dirty = true;
        s.nodes.insert(node.metadata.name.clone().unwrap_or_default(), node);
    }

    /// Makes a node Ready and its startup taints gone (what the CNI and
    /// friends would do shortly after registration).
    pub fn ready_node(name: &str, labels: BTreeMap<String, String>, taints: Vec<Taint>, provider_id: &str, capacity: &Resources, allocatable: &Resources, now: Timestamp) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.to_owned());
        node.metadata.labels = Some(labels);
        node.metadata.creation_timestamp = Some(Time(now));
        node.spec = Some(NodeSpec {
            provider_id: Some(provider_id.to_owned()),
            taints: (!taints.is_empty()).then(|| {
                taints
                    .iter()
                    .map(|t| K8sTaint {
                        key: t.key.clone(),
                        value: (!t.value.is_empty()).then(|| t.value.clone()),
                        effect: t.effect.as_str().to_owned(),
                        time_added: None,
                    })
                    .collect()
            }),
            ..Default::default()
        });
        node.status = Some(NodeStatus {
            capacity: Some(quantities(capacity)),
            allocatable: Some(quantities(allocatable)),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                reason: Some("KubeletReady".to_owned()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        node
    }

    pub fn all_pods(&self) -> Vec<Pod> {
        self.lock().pods.values().cloned().collect()
    }

    pub fn all_nodes(&self) -> Vec<Node> {
        self.lock().nodes.values().cloned().collect()
    }

    pub fn events(&self) -> Vec<(Timestamp, ClusterEvent)> {
        self.lock().events.clone()
    }

    pub fn evictions_blocked(&self) -> usize {
        self.lock().evictions_blocked
    }

    /// One round of the controllers (see [`controllers`]): workloads,
    /// garbage collection and the kubelet, then the scheduler when
    /// anything changed since it last ran.
    pub fn reconcile(&self) {
        let now = self.clock.now();
        let mut s = self.lock();
        let actions = controllers::reconcile_workloads(&s.view());
        Self::apply_actions(&mut s, actions, now);
        if s.dirty {
            s.dirty = false;
            let actions = controllers::schedule(&s.view());
            Self::apply_actions(&mut s, actions, now);
        }
    }

    fn apply_actions(s: &mut State, actions: Vec<ControllerAction>, now: Timestamp) {
        for action in actions {
            match action {
                ControllerAction::CreatePod(pod) => {
                    let mut pod = *pod;
                    let uid = Self::uid(s);
                    if pod.metadata.name.is_none() {
                        let prefix = pod.metadata.generate_name.clone().unwrap_or_default();
                        pod.metadata.name = Some(format!("{prefix}{}", name_suffix(&uid)));
                    }
                    pod.metadata.uid = Some(uid);
                    pod.metadata.creation_timestamp = Some(Time(now));
                    s.pods.insert(key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref()), pod);
                    s.dirty = true;
                }
                ControllerAction::RemovePod(pod) => {
                    s.pods.remove(&(pod.namespace, pod.name));
                    s.dirty = true;
                }
                ControllerAction::Place { pod, node } => {
                    if let Some(p) = s.pods.get_mut(&(pod.namespace, pod.name)) {
                        p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                        p.status.get_or_insert_with(PodStatus::default).phase = Some("Running".to_owned());
                        set_condition(p, "PodScheduled", "True", None, None, now);
                    }
                }
                ControllerAction::Start(pod) => {
                    if let Some(p) = s.pods.get_mut(&(pod.namespace, pod.name)) {
                        p.status.get_or_insert_with(PodStatus::default).phase = Some("Running".to_owned());
                    }
                }
                ControllerAction::Unschedulable { pod, message } => {
                    if let Some(p) = s.pods.get_mut(&(pod.namespace, pod.name)) {
                        set_condition(p, "PodScheduled", "False", Some("Unschedulable"), Some(message), now);
                    }
                }
            }
        }
    }

    fn pdb_allows(s: &State, pod: &Pod) -> Result<(), String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let matching: Vec<&PodDisruptionBudget> = s
            .pdbs
            .iter()
            .filter(|((pns, _), _)| *pns == ns)
            .map(|(_, p)| p)
            .filter(|pdb| {
                pdb.spec
                    .as_ref()
                    .and_then(|sp| sp.selector.as_ref())
                    .and_then(|sel| LabelSelector::from_k8s(sel).ok())
                    .is_some_and(|sel| sel.matches(&labels))
            })
            .collect();
        match matching.as_slice() {
            [] => Ok(()),
            [pdb] => {
                let spec = pdb.spec.clone().unwrap_or_default();
                let Some(sel) = spec.selector.as_ref().and_then(|sel| LabelSelector::from_k8s(sel).ok()) else { return Ok(()) };
                let selected: Vec<&Pod> = s
                    .pods
                    .values()
                    .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
                    .filter(|p| sel.matches(p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
                    .collect();
                let expected = selected.len() as i32;
                let healthy = selected
                    .iter()
                    .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                    .count() as i32;
                let resolve = |v: &IntOrString| match v {
                    IntOrString::Int(i) => *i,
                    IntOrString::String(s) => {
                        let pct: i32 = s.trim_end_matches('%').parse().unwrap_or(0);
                        (expected * pct + 99) / 100
                    }
                };
                let desired = match (&spec.min_available, &spec.max_unavailable) {
                    (Some(min), _) => resolve(min),
                    (None, Some(max)) => expected - resolve(max),
                    (None, None) => 0,
                };
                let pod_healthy = pod.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running");
                if !pod_healthy || healthy > desired {
                    Ok(())
                } else {
                    Err(format!(
                        "Cannot evict pod as it would violate the pod's disruption budget {}",
                        pdb.metadata.name.clone().unwrap_or_default()
                    ))
                }
            }
            _ => Err("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                .to_owned()),
        }
    }
}

impl Cluster for SimCluster {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        Ok(self
            .lock()
            .pods
            .values()
            .filter(|p| node_of(p).is_none() && !is_finished(p))
            .cloned()
            .collect())
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        Ok(self.lock().pods.values().filter(|p| node_of(p) == Some(node) && !is_finished(p)).cloned().collect())
    }

    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        Ok(self.lock().pods.values().filter(|p| node_of(p).is_some() && !is_finished(p)).cloned().collect())
    }

    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        Ok(self.all_nodes())
    }

    async fn daemon_sets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        Ok(self.lock().daemon_sets.values().cloned().collect())
    }

    async fn pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        Ok(self.lock().pdbs.values().cloned().collect())
    }

    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        Ok(self.lock().claims.values().cloned().collect())
    }

    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        Ok(self.lock().volumes.values().cloned().collect())
    }

    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        Ok(self.lock().storage_classes.values().cloned().collect())
    }

    async fn bind(&self, pod: &PodKey, node: &str) -> Result<BindOutcome, ClusterError> {
        let now = self.clock.now();
        let mut s = self.lock();
        s.dirty = true;
        let Some(p) = s.pods.get_mut(&(pod.namespace.clone(), pod.name.clone())) else { return Ok(BindOutcome::Gone) };
        if !pod.uid.is_empty() && p.metadata.uid.as_deref() != Some(pod.uid.as_str()) {
            return Ok(BindOutcome::Gone);
        }
        if node_of(p).is_some() || p.metadata.deletion_timestamp.is_some() {
            return Ok(BindOutcome::AlreadyBound);
        }
        p.spec.get_or_insert_with(Default::default).node_name = Some(node.to_owned());
        p.status.get_or_insert_with(PodStatus::default).phase = Some("Running".to_owned());
        set_condition(p, "PodScheduled", "True", None, None, now);
        Ok(BindOutcome::Bound)
    }

    async fn add_taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        let mut s = self.lock();
        s.dirty = true;
        let n = s.nodes.get_mut(node).ok_or_else(|| ClusterError::NotFound(format!("node {node}")))?;
        let taints = n.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new);
        if !taints.iter().any(|t| t.key == taint.key && t.effect == taint.effect.as_str()) {
            taints.push(K8sTaint {
                key: taint.key.clone(),
                value: (!taint.value.is_empty()).then(|| taint.value.clone()),
                effect: taint.effect.as_str().to_owned(),
                time_added: None,
            });
        }
        Ok(())
    }

    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError> {
        let mut s = self.lock();
        s.dirty = true;
        let n = s.nodes.get_mut(node).ok_or_else(|| ClusterError::NotFound(format!("node {node}")))?;
        if let Some(taints) = n.spec.as_mut().and_then(|sp| sp.taints.as_mut()) {
            taints.retain(|t| t.key != key);
        }
        Ok(())
    }

    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        let mut s = self.lock();
        let n = s.nodes.get_mut(node).ok_or_else(|| ClusterError::NotFound(format!("node {node}")))?;
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        Ok(())
    }

    async fn evict(&self, pod: &PodKey) -> Result<EvictOutcome, ClusterError> {
        let mut s = self.lock();
        let k = (pod.namespace.clone(), pod.name.clone());
        let Some(p) = s.pods.get(&k) else { return Ok(EvictOutcome::Gone) };
        if let Err(reason) = Self::pdb_allows(&s, p) {
            s.evictions_blocked += 1;
            return Ok(EvictOutcome::Blocked(reason));
        }
        s.pods.remove(&k);
        s.dirty = true;
        Ok(EvictOutcome::Evicted)
    }

    async fn delete_pod(&self, pod: &PodKey, _grace_seconds: Option<i64>) -> Result<(), ClusterError> {
        let mut s = self.lock();
        s.pods.remove(&(pod.namespace.clone(), pod.name.clone()));
        s.dirty = true;
        Ok(())
    }

    async fn delete_node(&self, node: &str) -> Result<bool, ClusterError> {
        let mut s = self.lock();
        s.dirty = true;
        Ok(s.nodes.remove(node).is_some())
    }

    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        let now = self.clock.now();
        self.lock().events.push((now, event.clone()));
        Ok(())
    }
}

impl ClusterDriver for SimCluster {
    type Port = SimCluster;

    fn port(&self) -> SimCluster {
        self.clone()
    }

    async fn apply(&self, object: &serde_json::Value) -> Result<(), String> {
        SimCluster::apply(self, object)
    }

    async fn scale(&self, namespace: &str, name: &str, replicas: i32) -> Result<(), String> {
        SimCluster::scale(self, namespace, name, replicas)
    }

    async fn register_node(&self, node: Node) -> Result<(), String> {
        self.add_node(node);
        Ok(())
    }

    async fn reconcile(&self) -> Result<(), String> {
        SimCluster::reconcile(self);
        Ok(())
    }

    async fn all_pods(&self) -> Vec<Pod> {
        SimCluster::all_pods(self)
    }

    async fn all_nodes(&self) -> Vec<Node> {
        SimCluster::all_nodes(self)
    }

    async fn events(&self) -> Vec<(Timestamp, ClusterEvent)> {
        SimCluster::events(self)
    }
}
