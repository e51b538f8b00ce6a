//! A Kubernetes cluster in memory: pods, Deployments (replicas → pods),
//! DaemonSets, PodDisruptionBudgets and nodes, with the controllers of
//! [`controllers`] applied to them — so pods evicted or orphaned by a
//! deleted node come back pending and reschedule as they would in a cluster.
//!
//! The [`Cluster`] port answers as the API server does (the contract suite
//! in `tests/tests/suite/cluster_contract.rs` runs the same tests here and against
//! a real kube-apiserver): a pod key whose uid is not the pod's is a
//! precondition failure; deletion is graceful (`deletionTimestamp` = now +
//! grace, the pod stays until the kubelet confirms), immediate for unbound
//! or finished pods and grace 0; an eviction follows the API server's
//! eviction handler, deciding from the budget's `status.disruptionsAllowed`,
//! which the disruption controller ([`controllers::pdb_status`]) maintains
//! on every reconcile.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodStatus, Taint as K8sTaint,
};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::api::storage::v1::{
    CSINode, StorageClass, VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
    VolumeAttachmentStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::clock::SimClock;
use super::controllers::{
    self, ClusterView, ControllerAction, is_finished, is_pod_ready, is_terminating, name_suffix,
    node_of, pdb_selects, phase,
};
use super::driver::{ClusterDriver, DriverError};
use crate::config::buffer::ScalableKind;
use crate::model::{PodKey, ScalableWorkload, SignedDuration, Timestamp};
use crate::ports::{BindOutcome, Clock, Cluster, ClusterError, ClusterEvent, EvictOutcome};
use crate::resources::Resources;
use crate::scheduling::taints::Taint;
use crate::scheduling::volumes::VolumeIndex;

/// How long the simulated CSI attacher takes to detach a volume.
pub const DEFAULT_DETACH: SignedDuration = SignedDuration::from_secs(10);

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
    /// CSINodes by name (a node's), as given: the drivers' attach limits.
    csi_nodes: BTreeMap<String, CSINode>,
    /// VolumeAttachments by name, as the attach/detach controller keeps
    /// them (`SimCluster::attach_detach`).
    attachments: BTreeMap<String, VolumeAttachment>,
    /// How long a volume takes to detach once no pod on its node uses it
    /// (default [`DEFAULT_DETACH`]).
    detach: Option<SignedDuration>,
    events: Vec<(Timestamp, ClusterEvent)>,
    next_uid: u64,
    /// Something changed that the scheduler should look at.
    dirty: bool,
    evictions_blocked: usize,
}

impl State {
    fn view(&self, now: Timestamp) -> ClusterView<'_> {
        ClusterView {
            pods: self.pods.values().collect(),
            nodes: self.nodes.values().collect(),
            deployments: self.deployments.values().collect(),
            daemon_sets: self.daemon_sets.values().collect(),
            pdbs: self.pdbs.values().collect(),
            volumes: VolumeIndex::new(
                self.claims.values().cloned().collect(),
                self.volumes.values().cloned().collect(),
                self.storage_classes.values().cloned().collect(),
            )
            .with_csi_nodes(self.csi_nodes.values().cloned().collect()),
            now,
        }
    }

    /// The pod under `key`, if its uid matches (an empty uid matches any).
    fn pod_of(&self, key: &PodKey) -> Option<&Pod> {
        self.pods
            .get(&(key.namespace.clone(), key.name.clone()))
            .filter(|p| key.uid.is_empty() || p.metadata.uid.as_deref() == Some(key.uid.as_str()))
    }

    /// A pod DELETE as the API server does it: the uid precondition was
    /// checked by the caller; an unbound or finished pod, or grace 0, goes
    /// at once; otherwise the pod is marked terminating with
    /// `deletionTimestamp` = now + grace (the request's, else the pod's
    /// `terminationGracePeriodSeconds`, else 30 s). A second deletion may
    /// only shorten the grace period.
    fn delete(&mut self, key: &(String, String), grace: Option<i64>, now: Timestamp) {
        let Some(p) = self.pods.get_mut(key) else {
            return;
        };
        let spec_grace = p
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let mut grace = grace.unwrap_or(spec_grace).max(0);
        if node_of(p).is_none() || is_finished(p) {
            grace = 0;
        }
        self.dirty = true;
        if grace == 0 {
            self.pods.remove(key);
            return;
        }
        let at = now + SignedDuration::from_secs(grace);
        let meta = &mut p.metadata;
        match (&meta.deletion_timestamp, meta.deletion_grace_period_seconds) {
            (Some(_), Some(current)) if current <= grace => {}
            _ => {
                meta.deletion_timestamp = Some(Time(at));
                meta.deletion_grace_period_seconds = Some(grace);
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimCluster {
    state: Arc<Mutex<State>>,
    clock: SimClock,
}

fn key(ns: Option<&String>, name: Option<&String>) -> (String, String) {
    (
        ns.cloned().unwrap_or_else(|| "default".to_owned()),
        name.cloned().unwrap_or_default(),
    )
}

fn set_condition(
    pod: &mut Pod,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) {
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

/// The kubelet runs a bound pod: `Running` and `Ready` (what budgets
/// count), with `status.startTime` (what a duration-valued do-not-disrupt
/// counts from).
fn start(pod: &mut Pod, now: Timestamp) {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    status.phase = Some("Running".to_owned());
    status.start_time.get_or_insert(Time(now));
    if !is_pod_ready(pod) {
        set_condition(pod, "Ready", "True", None, None, now);
    }
}

/// A resource vector as a Kubernetes resource list.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    let mut m = BTreeMap::new();
    m.insert("cpu".to_owned(), Quantity(format!("{}m", r.cpu_millis)));
    m.insert("memory".to_owned(), Quantity(r.memory_bytes.to_string()));
    m.insert("pods".to_owned(), Quantity(r.pods.to_string()));
    if r.ephemeral_bytes > 0 {
        m.insert(
            "ephemeral-storage".to_owned(),
            Quantity(r.ephemeral_bytes.to_string()),
        );
    }
    for (name, v) in &r.extended {
        m.insert(name.clone(), Quantity(v.to_string()));
    }
    m
}

impl SimCluster {
    pub fn new(clock: SimClock) -> Self {
        SimCluster {
            state: Arc::new(Mutex::new(State::default())),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn uid(s: &mut State) -> String {
        s.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012x}", s.next_uid)
    }

    /// Adds or replaces an object of a kind the simulator models.
    pub fn apply(&self, object: &serde_json::Value) -> Result<(), DriverError> {
        let kind = object
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        let mut s = self.lock();
        s.dirty = true;
        let err = |e: serde_json::Error| DriverError::new(kind, e.to_string());
        match kind {
            "Deployment" => {
                let d: Deployment = serde_json::from_value(object.clone()).map_err(err)?;
                s.deployments.insert(
                    key(d.metadata.namespace.as_ref(), d.metadata.name.as_ref()),
                    d,
                );
            }
            "DaemonSet" => {
                let d: DaemonSet = serde_json::from_value(object.clone()).map_err(err)?;
                s.daemon_sets.insert(
                    key(d.metadata.namespace.as_ref(), d.metadata.name.as_ref()),
                    d,
                );
            }
            "PodDisruptionBudget" => {
                let mut p: PodDisruptionBudget =
                    serde_json::from_value(object.clone()).map_err(err)?;
                p.metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned());
                let k = key(p.metadata.namespace.as_ref(), p.metadata.name.as_ref());
                // As the API server: generation 1 on create, +1 on each spec
                // change; the status is the controller's, never the writer's.
                match s.pdbs.get(&k) {
                    Some(old) => {
                        let generation = old.metadata.generation.unwrap_or(1);
                        p.metadata.generation = Some(if old.spec == p.spec {
                            generation
                        } else {
                            generation + 1
                        });
                        p.metadata.uid = old.metadata.uid.clone();
                        p.status = old.status.clone();
                    }
                    None => {
                        p.metadata.generation = Some(1);
                        p.metadata.uid = Some(Self::uid(&mut s));
                        p.status = None;
                    }
                }
                s.pdbs.insert(k, p);
            }
            "PersistentVolumeClaim" => {
                let mut c: PersistentVolumeClaim =
                    serde_json::from_value(object.clone()).map_err(err)?;
                // A claim that names its volume and says nothing of its
                // binding is one the volume binder has bound (the simulator
                // runs no binder): marked bound as the binder marks it. A
                // claim given a status is kept as given.
                let names_volume = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .is_some_and(|v| !v.is_empty());
                // The API server's DefaultStorageClass admission: a claim
                // created without a class name gets the default class.
                let created = !s.claims.contains_key(&key(
                    c.metadata.namespace.as_ref(),
                    c.metadata.name.as_ref(),
                ));
                let spec = c.spec.get_or_insert_with(Default::default);
                if spec.storage_class_name.is_none() && created {
                    let classes = VolumeIndex::new(
                        Vec::new(),
                        Vec::new(),
                        s.storage_classes.values().cloned().collect(),
                    );
                    spec.storage_class_name = classes.default_class().map(str::to_owned);
                }
                if names_volume && c.status.is_none() {
                    c.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .entry("pv.kubernetes.io/bind-completed".to_owned())
                        .or_insert_with(|| "yes".to_owned());
                    c.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                        phase: Some("Bound".to_owned()),
                        ..Default::default()
                    });
                }
                s.claims.insert(
                    key(c.metadata.namespace.as_ref(), c.metadata.name.as_ref()),
                    c,
                );
            }
            "PersistentVolume" => {
                let v: PersistentVolume = serde_json::from_value(object.clone()).map_err(err)?;
                s.volumes
                    .insert(v.metadata.name.clone().unwrap_or_default(), v);
            }
            "StorageClass" => {
                let c: StorageClass = serde_json::from_value(object.clone()).map_err(err)?;
                s.storage_classes
                    .insert(c.metadata.name.clone().unwrap_or_default(), c);
            }
            "CSINode" => {
                let c: CSINode = serde_json::from_value(object.clone()).map_err(err)?;
                s.csi_nodes
                    .insert(c.metadata.name.clone().unwrap_or_default(), c);
            }
            "VolumeAttachment" => {
                // Kept while a pod on its node uses its volume, else
                // detached as any other (`attach_detach`).
                let a: VolumeAttachment = serde_json::from_value(object.clone()).map_err(err)?;
                s.attachments
                    .insert(a.metadata.name.clone().unwrap_or_default(), a);
            }
            "Pod" => {
                let mut p: Pod = serde_json::from_value(object.clone()).map_err(err)?;
                let now = self.clock.now();
                p.metadata
                    .namespace
                    .get_or_insert_with(|| "default".to_owned());
                p.metadata.uid = Some(Self::uid(&mut s));
                p.metadata.creation_timestamp = Some(Time(now));
                // A pod given as finished (a Job's) stays so; any other starts Pending.
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|st| st.phase.clone())
                    .filter(|ph| ph == "Succeeded" || ph == "Failed")
                    .unwrap_or_else(|| "Pending".to_owned());
                p.status = Some(PodStatus {
                    phase: Some(phase),
                    ..Default::default()
                });
                s.pods.insert(
                    key(p.metadata.namespace.as_ref(), p.metadata.name.as_ref()),
                    p,
                );
            }
            "Node" => {
                // A node that is not ours (joined by other means): stored as
                // given, Ready unless its conditions say otherwise.
                let mut n: Node = serde_json::from_value(object.clone()).map_err(err)?;
                n.metadata
                    .creation_timestamp
                    .get_or_insert(Time(self.clock.now()));
                let status = n.status.get_or_insert_with(NodeStatus::default);
                if status.capacity.is_none() {
                    status.capacity = status.allocatable.clone();
                }
                status.conditions.get_or_insert_with(|| {
                    vec![NodeCondition {
                        type_: "Ready".to_owned(),
                        status: "True".to_owned(),
                        reason: Some("KubeletReady".to_owned()),
                        ..Default::default()
                    }]
                });
                s.nodes
                    .insert(n.metadata.name.clone().unwrap_or_default(), n);
            }
            other => {
                return Err(DriverError::new(
                    format!("apply {other:?}"),
                    "the simulated cluster does not model this kind",
                ));
            }
        }
        Ok(())
    }

    /// Sets a Deployment's replicas.
    pub fn scale(&self, namespace: &str, name: &str, replicas: i32) -> Result<(), DriverError> {
        let mut s = self.lock();
        let d = s
            .deployments
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .ok_or_else(|| {
                DriverError::new(format!("scale {namespace}/{name}"), "no such deployment")
            })?;
        d.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        s.dirty = true;
        Ok(())
    }

    /// Adds a Node (the simulator calls this when an instance registers).
    pub fn add_node(&self, node: Node) {
        let mut s = self.lock();
        s.dirty = true;
        s.nodes
            .insert(node.metadata.name.clone().unwrap_or_default(), node);
    }

    /// Makes a node Ready and its startup taints gone (what the CNI and
    /// friends would do shortly after registration).
    pub fn ready_node(
        name: &str,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
        provider_id: &str,
        capacity: &Resources,
        allocatable: &Resources,
        now: Timestamp,
    ) -> Node {
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

    /// Puts back a pod or a PodDisruptionBudget exactly as recorded (uid,
    /// status and all), for a cluster rebuilt from a saved snapshot; `apply`
    /// would create them afresh.
    pub fn restore_pod(&self, pod: Pod) {
        let mut s = self.lock();
        s.dirty = true;
        s.pods.insert(
            key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref()),
            pod,
        );
    }

    /// See [`Self::restore_pod`].
    pub fn restore_pdb(&self, pdb: PodDisruptionBudget) {
        let mut s = self.lock();
        s.pdbs.insert(
            key(pdb.metadata.namespace.as_ref(), pdb.metadata.name.as_ref()),
            pdb,
        );
    }

    /// The node's kubelet reports `Ready` as `ready` from now on (its
    /// condition's transition time is now when the status changes).
    pub fn set_node_ready(&self, name: &str, ready: bool) -> Result<(), DriverError> {
        let now = self.clock.now();
        let mut s = self.lock();
        s.dirty = true;
        let node = s
            .nodes
            .get_mut(name)
            .ok_or_else(|| DriverError::new(format!("set node {name} Ready"), "no such node"))?;
        let status = if ready { "True" } else { "False" };
        let conditions = node
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        match conditions.iter_mut().find(|c| c.type_ == "Ready") {
            Some(c) if c.status == status => {}
            Some(c) => {
                c.status = status.to_owned();
                c.reason = Some(
                    if ready {
                        "KubeletReady"
                    } else {
                        "KubeletNotReady"
                    }
                    .to_owned(),
                );
                c.last_transition_time = Some(Time(now));
            }
            None => conditions.push(NodeCondition {
                type_: "Ready".to_owned(),
                status: status.to_owned(),
                last_transition_time: Some(Time(now)),
                ..Default::default()
            }),
        }
        Ok(())
    }

    /// Changes a stored pod as its kubelet would (a phase, a condition).
    pub fn update_pod(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Pod)) -> bool {
        let mut s = self.lock();
        s.dirty = true;
        s.pods
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .map(change)
            .is_some()
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
        let actions = controllers::reconcile_workloads(&s.view(now));
        Self::apply_actions(&mut s, actions, now);
        let updates = controllers::disruption_budgets(&s.view(now));
        for update in updates {
            if let Some(pdb) = s.pdbs.get_mut(&(update.namespace, update.name)) {
                pdb.status = Some(update.status);
            }
        }
        if s.dirty {
            s.dirty = false;
            let actions = controllers::schedule(&s.view(now));
            Self::apply_actions(&mut s, actions, now);
        }
        Self::attach_detach(&mut s, now);
    }

    /// The attach/detach controller and the CSI attacher: a volume a pod
    /// on a node uses gets its VolumeAttachment at once (attached); one no
    /// pod there uses any more is marked for deletion and goes once its
    /// detach time has passed (a volume wanted again meanwhile is left to
    /// finish detaching and attached anew).
    fn attach_detach(s: &mut State, now: Timestamp) {
        let wanted = controllers::attachments_wanted(&s.view(now));
        let detach = s.detach.unwrap_or(DEFAULT_DETACH);
        let mut changed = false;
        s.attachments.retain(|name, a| {
            if wanted.contains_key(name) && a.metadata.deletion_timestamp.is_none() {
                return true;
            }
            match &a.metadata.deletion_timestamp {
                None => {
                    a.metadata.deletion_timestamp = Some(Time(now));
                    true
                }
                Some(t) => {
                    let keep = now < t.0 + detach;
                    changed |= !keep;
                    keep
                }
            }
        });
        for (name, (driver, volume, node)) in wanted {
            if s.attachments.contains_key(&name) {
                continue;
            }
            let a = VolumeAttachment {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    creation_timestamp: Some(Time(now)),
                    ..Default::default()
                },
                spec: VolumeAttachmentSpec {
                    attacher: driver,
                    node_name: node,
                    source: VolumeAttachmentSource {
                        persistent_volume_name: Some(volume),
                        ..Default::default()
                    },
                },
                status: Some(VolumeAttachmentStatus {
                    attached: true,
                    ..Default::default()
                }),
            };
            s.attachments.insert(name, a);
            changed = true;
        }
        if changed {
            s.dirty = true;
        }
    }

    /// How long a volume takes to detach in this cluster from now on.
    pub fn set_detach_time(&self, detach: SignedDuration) {
        self.lock().detach = Some(detach);
    }

    /// The stored PodDisruptionBudget (with the status the reconcile keeps).
    pub fn pdb(&self, namespace: &str, name: &str) -> Option<PodDisruptionBudget> {
        self.lock()
            .pdbs
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn apply_actions(s: &mut State, actions: Vec<ControllerAction>, now: Timestamp) {
        for action in actions {
            match action {
                ControllerAction::CreatePod(pod) => {
                    let mut pod = *pod;
                    if phase(&pod) == Some("Running") {
                        start(&mut pod, now);
                    }
                    let uid = Self::uid(s);
                    if pod.metadata.name.is_none() {
                        let prefix = pod.metadata.generate_name.clone().unwrap_or_default();
                        pod.metadata.name = Some(format!("{prefix}{}", name_suffix(&uid)));
                    }
                    pod.metadata.uid = Some(uid);
                    pod.metadata.creation_timestamp = Some(Time(now));
                    s.pods.insert(
                        key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref()),
                        pod,
                    );
                    s.dirty = true;
                }
                ControllerAction::RemovePod(pod) => {
                    s.pods.remove(&(pod.namespace, pod.name));
                    s.dirty = true;
                }
                ControllerAction::Place { pod, node } => {
                    if let Some(p) = s.pods.get_mut(&(pod.namespace, pod.name)) {
                        p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                        set_condition(p, "PodScheduled", "True", None, None, now);
                        start(p, now);
                    }
                }
                ControllerAction::Start(pod) => {
                    if let Some(p) = s.pods.get_mut(&(pod.namespace, pod.name)) {
                        start(p, now);
                    }
                }
                ControllerAction::Unschedulable { pod, message } => {
                    if let Some(p) = s.pods.get_mut(&(pod.namespace, pod.name)) {
                        set_condition(
                            p,
                            "PodScheduled",
                            "False",
                            Some("Unschedulable"),
                            Some(message),
                            now,
                        );
                    }
                }
            }
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
        Ok(self
            .lock()
            .pods
            .values()
            .filter(|p| node_of(p) == Some(node) && !is_finished(p))
            .cloned()
            .collect())
    }

    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        Ok(self
            .lock()
            .pods
            .values()
            .filter(|p| node_of(p).is_some() && !is_finished(p))
            .cloned()
            .collect())
    }

    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        Ok(self.all_nodes())
    }

    async fn daemon_sets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        Ok(self.lock().daemon_sets.values().cloned().collect())
    }

    /// Deployments only: the simulator models no other workload kind, so
    /// a ReplicaSet or StatefulSet named is one that does not exist.
    async fn scalable_workload(
        &self,
        kind: ScalableKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ScalableWorkload>, ClusterError> {
        if kind != ScalableKind::Deployment {
            return Ok(None);
        }
        Ok(self
            .lock()
            .deployments
            .get(&(namespace.to_owned(), name.to_owned()))
            .and_then(|d| d.spec.as_ref())
            .map(|spec| ScalableWorkload {
                template: spec.template.clone(),
                replicas: spec.replicas.unwrap_or(1),
            }))
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

    async fn csi_nodes(&self) -> Result<Vec<CSINode>, ClusterError> {
        Ok(self.lock().csi_nodes.values().cloned().collect())
    }

    async fn volume_attachments(&self, node: &str) -> Result<Vec<VolumeAttachment>, ClusterError> {
        Ok(self
            .lock()
            .attachments
            .values()
            .filter(|a| a.spec.node_name == node)
            .cloned()
            .collect())
    }

    async fn bind(&self, pod: &PodKey, node: &str) -> Result<BindOutcome, ClusterError> {
        let now = self.clock.now();
        let mut s = self.lock();
        s.dirty = true;
        let Some(p) = s.pods.get_mut(&(pod.namespace.clone(), pod.name.clone())) else {
            return Ok(BindOutcome::Gone);
        };
        if !pod.uid.is_empty() && p.metadata.uid.as_deref() != Some(pod.uid.as_str()) {
            return Ok(BindOutcome::Gone);
        }
        if node_of(p).is_some() || p.metadata.deletion_timestamp.is_some() {
            return Ok(BindOutcome::AlreadyBound);
        }
        p.spec.get_or_insert_with(Default::default).node_name = Some(node.to_owned());
        set_condition(p, "PodScheduled", "True", None, None, now);
        start(p, now);
        Ok(BindOutcome::Bound)
    }

    async fn add_taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        let mut s = self.lock();
        s.dirty = true;
        let n = s.nodes.get_mut(node).ok_or_else(|| {
            ClusterError::not_found(
                format!("patch node/{node} (add taint {taint})"),
                "no such node",
            )
        })?;
        let taints = n
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new);
        if !taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect.as_str())
        {
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
        let n = s.nodes.get_mut(node).ok_or_else(|| {
            ClusterError::not_found(
                format!("patch node/{node} (remove taint {key})"),
                "no such node",
            )
        })?;
        if let Some(taints) = n.spec.as_mut().and_then(|sp| sp.taints.as_mut()) {
            taints.retain(|t| t.key != key);
        }
        Ok(())
    }

    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        let mut s = self.lock();
        let n = s.nodes.get_mut(node).ok_or_else(|| {
            ClusterError::not_found(format!("patch node/{node} (cordon)"), "no such node")
        })?;
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        s.dirty = true;
        Ok(())
    }

    async fn label_node(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        let mut s = self.lock();
        let n = s.nodes.get_mut(node).ok_or_else(|| {
            ClusterError::not_found(format!("patch node/{node} (labels)"), "no such node")
        })?;
        n.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        if !annotations.is_empty() {
            n.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        s.dirty = true;
        Ok(())
    }

    async fn unlabel_node(&self, node: &str, keys: &[&str]) -> Result<(), ClusterError> {
        let mut s = self.lock();
        let n = s.nodes.get_mut(node).ok_or_else(|| {
            ClusterError::not_found(format!("patch node/{node} (remove labels)"), "no such node")
        })?;
        if let Some(labels) = n.metadata.labels.as_mut() {
            for k in keys {
                labels.remove(*k);
            }
        }
        s.dirty = true;
        Ok(())
    }

    /// The API server's eviction handler, step for step (see the module doc).
    async fn evict(&self, pod: &PodKey) -> Result<EvictOutcome, ClusterError> {
        let now = self.clock.now();
        let mut guard = self.lock();
        let s: &mut State = &mut guard;
        let k = (pod.namespace.clone(), pod.name.clone());
        let Some(p) = s.pods.get(&k).cloned() else {
            return Ok(EvictOutcome::Gone);
        };
        // The uid precondition is checked when the pod is deleted, which is
        // after the budget was consulted (and decremented): the server's order.
        let current = s.pod_of(pod).is_some();
        let delete = |s: &mut State| {
            if !current {
                return EvictOutcome::Gone;
            }
            if let Some(p) = s.pods.get_mut(&k) {
                set_condition(
                    p,
                    "DisruptionTarget",
                    "True",
                    Some("EvictionByEvictionAPI"),
                    Some("Eviction API: evicting".to_owned()),
                    now,
                );
            }
            s.delete(&k, None, now);
            EvictOutcome::Evicted
        };
        // canIgnorePDB: the pod is not running, or is already being deleted.
        if matches!(phase(&p), Some("Pending" | "Succeeded" | "Failed")) || is_terminating(&p) {
            return Ok(delete(s));
        }
        let budgets: Vec<(String, String)> = s
            .pdbs
            .iter()
            .filter(|(_, pdb)| pdb_selects(pdb, &p))
            .map(|(k, _)| k.clone())
            .collect();
        let budget = match budgets.as_slice() {
            [] => return Ok(delete(s)),
            [one] => one.clone(),
            _ => {
                s.evictions_blocked += 1;
                return Ok(EvictOutcome::Blocked(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                        .to_owned(),
                ));
            }
        };
        let Some(pdb) = s.pdbs.get_mut(&budget) else {
            return Ok(delete(s));
        };
        let name = budget.1.clone();
        let status = pdb
            .status
            .get_or_insert_with(PodDisruptionBudgetStatus::default);
        if !is_pod_ready(&p) {
            let always = pdb
                .spec
                .as_ref()
                .and_then(|sp| sp.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow");
            // An unready pod of a healthy application goes without using the budget.
            if always
                || (status.current_healthy >= status.desired_healthy && status.desired_healthy > 0)
            {
                return Ok(delete(s));
            }
        }
        let blocked =
            if status.observed_generation.unwrap_or(0) < pdb.metadata.generation.unwrap_or(1) {
                Some(format!(
                    "The disruption budget {name} is still being processed by the server."
                ))
            } else if status.disruptions_allowed < 0 {
                return Err(ClusterError::forbidden(
                    format!("create pods/eviction {pod}"),
                    format!("poddisruptionbudget {name}: pdb disruptions allowed is negative"),
                ));
            } else if status.disruptions_allowed == 0 {
                Some(if status.current_healthy <= status.desired_healthy {
                    format!(
                        "The disruption budget {name} needs {} healthy pods and has {} currently",
                        status.desired_healthy, status.current_healthy
                    )
                } else {
                    format!("The disruption budget {name} does not allow evicting pods currently")
                })
            } else {
                None
            };
        if let Some(cause) = blocked {
            s.evictions_blocked += 1;
            return Ok(EvictOutcome::Blocked(format!(
                "Cannot evict pod as it would violate the pod's disruption budget. {cause}"
            )));
        }
        status.disruptions_allowed -= 1;
        status
            .disrupted_pods
            .get_or_insert_with(BTreeMap::new)
            .insert(pod.name.clone(), Time(now));
        Ok(delete(s))
    }

    async fn delete_pod(
        &self,
        pod: &PodKey,
        grace_seconds: Option<i64>,
    ) -> Result<(), ClusterError> {
        let now = self.clock.now();
        let mut s = self.lock();
        // A pod of that name with another uid is not ours to delete (the API's 409).
        if s.pod_of(pod).is_some() {
            s.delete(
                &(pod.namespace.clone(), pod.name.clone()),
                grace_seconds,
                now,
            );
        }
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

    async fn apply(&self, object: &serde_json::Value) -> Result<(), DriverError> {
        SimCluster::apply(self, object)
    }

    async fn scale(&self, namespace: &str, name: &str, replicas: i32) -> Result<(), DriverError> {
        SimCluster::scale(self, namespace, name, replicas)
    }

    async fn register_node(&self, node: Node) -> Result<(), DriverError> {
        self.add_node(node);
        Ok(())
    }

    async fn reconcile(&self) -> Result<(), DriverError> {
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

    async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), DriverError> {
        SimCluster::set_node_ready(self, node, ready)
    }

    async fn set_detach_time(&self, detach: SignedDuration) -> Result<(), DriverError> {
        SimCluster::set_detach_time(self, detach);
        Ok(())
    }
}
