//! Fixtures of the `Cluster` contract (`tests/suite/cluster_contract.rs`):
//! what the suite needs beyond the port — a way to set up objects and play
//! the cluster's controllers — for the in-memory cluster and for a real
//! kube-apiserver.
//!
//! The suite's bodies are generic over [`ContractCluster`]; each runs once
//! on [`SimFixture`] ([`sim`]: a `SimCluster` on a simulated clock) and once
//! on [`KubeFixture`] ([`kube`]: the `nodewright` identity with the shipped
//! ClusterRole against the real server, in a namespace of its own, the
//! admin playing the kubelets and the disruption controller through the API).

use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nodewright::kube::{ClientSettings, KubeCluster};
use nodewright::model::{PodKey, SignedDuration, Timestamp};
use nodewright::ports::{Cluster, ClusterEvent};
use nodewright::sim::controllers::{self, ClusterView, ControllerAction};
use nodewright::sim::{SimClock, SimCluster};
use serde_json::{Value, json};

use crate::kube_harness::{KubeEnv, apply_rbac, create_namespace, unique};
use crate::kube_world::{cluster_event, remove_pod, write_pdb_statuses};

/// The in-memory cluster, in a namespace named after the test.
pub async fn sim(test: &str) -> SimFixture {
    SimFixture::new(test)
}

/// The real server, in a namespace of its own named after the test.
pub async fn kube(test: &str) -> KubeFixture {
    let ns = test.replace('_', "-");
    KubeFixture::new(&ns[..ns.len().min(40)]).await
}

/// Where a new pod is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not bound to a node yet.
    Pending,
    /// Bound, started by the kubelet, Ready.
    Running,
    /// Bound and finished.
    Succeeded,
}

/// A pod to create: labelled `app=<app>`, bound to `node` unless Pending.
#[derive(Debug, Clone)]
pub struct NewPod<'a> {
    pub name: &'a str,
    pub app: &'a str,
    pub node: Option<&'a str>,
    pub phase: Phase,
    /// `terminationGracePeriodSeconds` (the API's default is 30).
    pub grace: Option<i64>,
}

impl<'a> NewPod<'a> {
    pub fn running(name: &'a str, app: &'a str, node: &'a str) -> Self {
        NewPod {
            name,
            app,
            node: Some(node),
            phase: Phase::Running,
            grace: None,
        }
    }
    pub fn pending(name: &'a str, app: &'a str) -> Self {
        NewPod {
            name,
            app,
            node: None,
            phase: Phase::Pending,
            grace: None,
        }
    }
}

fn pod_object(namespace: &str, p: &NewPod<'_>) -> Value {
    let mut spec = json!({
        "containers": [{
            "name": "app",
            "image": "pause:3.10",
            "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } }
        }]
    });
    if let Some(g) = p.grace {
        spec["terminationGracePeriodSeconds"] = json!(g);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": p.name, "namespace": namespace, "labels": { "app": p.app } },
        "spec": spec
    })
}

fn node_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
        "spec": { "providerID": format!("aws:///eu-west-1a/i-{name}") },
    })
}

fn pdb_object(namespace: &str, name: &str, app: &str, min_available: i32) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "minAvailable": min_available, "selector": { "matchLabels": { "app": app } } }
    })
}

/// Set-up and observation for one contract test, on either cluster.
#[allow(async_fn_in_trait)]
pub trait ContractCluster {
    type Port: Cluster;
    /// The cluster as the functions see it.
    fn port(&self) -> &Self::Port;
    /// This test's namespace.
    fn namespace(&self) -> &str;
    /// A Node (not Ready: nothing is scheduled on it but what the test binds); returns its name.
    async fn create_node(&self, base: &str) -> String;
    /// A pod; its key carries the uid the cluster gave it.
    async fn create_pod(&self, pod: NewPod<'_>) -> PodKey;
    /// A budget with an integer `minAvailable` over `app=<app>`.
    async fn create_pdb(&self, name: &str, app: &str, min_available: i32);
    /// One round of the kubelets (confirming deletions whose grace is
    /// over), pod garbage collection and the disruption controller.
    async fn reconcile(&self);
    /// Time passes for the cluster's controllers.
    async fn advance(&self, seconds: i64);
    async fn pod(&self, name: &str) -> Option<Pod>;
    async fn pdb(&self, name: &str) -> Option<PodDisruptionBudget>;
    async fn node(&self, name: &str) -> Option<Node>;
    /// Events recorded about objects of this namespace.
    async fn events(&self) -> Vec<ClusterEvent>;
    /// A cluster-scoped storage object (a CSINode, a VolumeAttachment), as
    /// the CSI driver's node plugin or the attach/detach controller writes it.
    async fn create_storage_object(&self, object: Value);
    /// A Deployment of `app=<name>` pods requesting `cpu`, with
    /// `spec.replicas` as given (absent when `None`).
    async fn create_deployment(&self, name: &str, replicas: Option<i32>, cpu: &str);
    /// Sets a Deployment's `spec.replicas` (what `kubectl scale` does).
    async fn scale_deployment(&self, name: &str, replicas: i32);
}

/// A Deployment as [`ContractCluster::create_deployment`] makes it.
pub fn deployment_object(namespace: &str, name: &str, replicas: Option<i32>, cpu: &str) -> Value {
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "c", "image": "pause",
                    "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }] }
            }
        }
    });
    if let Some(r) = replicas {
        d["spec"]["replicas"] = json!(r);
    }
    d
}

/// A VolumeAttachment of persistent volume `volume` to `node`.
pub fn volume_attachment_object(name: &str, node: &str, volume: &str) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": { "name": name },
        "spec": { "attacher": "ebs.csi.aws.com", "nodeName": node, "source": { "persistentVolumeName": volume } }
    })
}

/// The CSINode of `node`: one driver that attaches at most `count` volumes.
pub fn csi_node_object(node: &str, driver: &str, count: i32) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": { "name": node },
        "spec": { "drivers": [{ "name": driver, "nodeID": format!("i-{node}"), "allocatable": { "count": count } }] }
    })
}

// ---------------------------------------------------------------- in memory

#[derive(Debug)]
pub struct SimFixture {
    cluster: SimCluster,
    clock: SimClock,
    namespace: String,
}

impl SimFixture {
    pub fn new(base: &str) -> SimFixture {
        let clock = SimClock::default();
        SimFixture {
            cluster: SimCluster::new(clock.clone()),
            clock,
            namespace: base.to_owned(),
        }
    }
}

impl ContractCluster for SimFixture {
    type Port = SimCluster;

    fn port(&self) -> &SimCluster {
        &self.cluster
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn create_node(&self, base: &str) -> String {
        let name = format!("{}-{base}", self.namespace);
        self.cluster
            .add_node(serde_json::from_value(node_object(&name)).expect("node"));
        name
    }

    async fn create_pod(&self, pod: NewPod<'_>) -> PodKey {
        self.cluster
            .apply(&pod_object(&self.namespace, &pod))
            .expect("apply pod");
        let key = |c: &SimCluster| {
            c.all_pods()
                .iter()
                .find(|p| {
                    p.metadata.namespace.as_deref() == Some(self.namespace.as_str())
                        && p.metadata.name.as_deref() == Some(pod.name)
                })
                .map(PodKey::of)
                .expect("the pod just applied")
        };
        let k = key(&self.cluster);
        if let Some(node) = pod.node {
            assert_eq!(
                self.cluster.bind(&k, node).await,
                Ok(nodewright::ports::BindOutcome::Bound)
            );
        }
        if pod.phase == Phase::Succeeded {
            self.cluster.update_pod(&self.namespace, pod.name, |p| {
                let st = p.status.get_or_insert_with(Default::default);
                st.phase = Some("Succeeded".to_owned());
                // A finished pod is no longer Ready.
                st.conditions = None;
            });
        }
        k
    }

    async fn create_pdb(&self, name: &str, app: &str, min_available: i32) {
        self.cluster
            .apply(&pdb_object(&self.namespace, name, app, min_available))
            .expect("apply pdb");
    }

    async fn reconcile(&self) {
        self.cluster.reconcile();
    }

    async fn advance(&self, seconds: i64) {
        self.clock.advance(SignedDuration::from_secs(seconds));
    }

    async fn pod(&self, name: &str) -> Option<Pod> {
        self.cluster.all_pods().into_iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(self.namespace.as_str())
                && p.metadata.name.as_deref() == Some(name)
        })
    }

    async fn pdb(&self, name: &str) -> Option<PodDisruptionBudget> {
        self.cluster.pdb(&self.namespace, name)
    }

    async fn node(&self, name: &str) -> Option<Node> {
        self.cluster
            .all_nodes()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }

    async fn events(&self) -> Vec<ClusterEvent> {
        self.cluster
            .events()
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| e.namespace.as_deref() == Some(self.namespace.as_str()))
            .collect()
    }

    async fn create_storage_object(&self, object: Value) {
        self.cluster.apply(&object).expect("storage object");
    }

    async fn create_deployment(&self, name: &str, replicas: Option<i32>, cpu: &str) {
        self.cluster
            .apply(&deployment_object(&self.namespace, name, replicas, cpu))
            .expect("apply deployment");
    }

    async fn scale_deployment(&self, name: &str, replicas: i32) {
        self.cluster
            .scale(&self.namespace, name, replicas)
            .expect("scale deployment");
    }
}

// ---------------------------------------------------------------- the real server

pub struct KubeFixture {
    admin: Client,
    function: KubeCluster,
    namespace: String,
    /// How far the controllers' clock is ahead of the machine's.
    skew: Mutex<SignedDuration>,
}

impl std::fmt::Debug for KubeFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeFixture")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KubeFixture {
    /// A namespace of its own on the shared server, RBAC applied.
    pub async fn new(base: &str) -> KubeFixture {
        let env = KubeEnv::get();
        apply_rbac(env).await;
        let admin = env.admin_client();
        let namespace = unique(base);
        create_namespace(&admin, &namespace).await;
        KubeFixture {
            admin,
            function: env.function(ClientSettings::default()),
            namespace,
            skew: Mutex::new(SignedDuration::ZERO),
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::now() + *self.skew.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.namespace)
    }

    async fn set_status(&self, name: &str, status: Value) {
        self.pods_api()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(&json!({ "status": status })),
            )
            .await
            .expect("pod status");
    }
}

impl ContractCluster for KubeFixture {
    type Port = KubeCluster;

    fn port(&self) -> &KubeCluster {
        &self.function
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn create_node(&self, base: &str) -> String {
        let name = format!("{}-{base}", self.namespace);
        let node: Node = serde_json::from_value(node_object(&name)).expect("node");
        let nodes = Api::<Node>::all(self.admin.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        // The server's admission (TaintNodesByCondition) puts
        // `node.kubernetes.io/not-ready` on every new node; the node
        // lifecycle controller takes it off once the kubelet reports Ready.
        // There is no such controller here: do its part, so both clusters
        // start from the same node.
        let ready = json!({"spec": {"taints": node.spec.as_ref().and_then(|s| s.taints.clone())}});
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&ready))
            .await
            .expect("untaint the new node");
        name
    }

    async fn create_pod(&self, pod: NewPod<'_>) -> PodKey {
        let mut object = pod_object(&self.namespace, &pod);
        if let Some(node) = pod.node {
            object["spec"]["nodeName"] = json!(node);
        }
        let object: Pod = serde_json::from_value(object).expect("pod");
        let created = self
            .pods_api()
            .create(&PostParams::default(), &object)
            .await
            .expect("create pod");
        let now = Timestamp::now().to_string();
        match pod.phase {
            Phase::Pending => {}
            Phase::Running => {
                self.set_status(
                    pod.name,
                    json!({ "phase": "Running", "conditions": [
                        { "type": "Ready", "status": "True", "lastTransitionTime": now },
                        { "type": "PodScheduled", "status": "True", "lastTransitionTime": now }
                    ]}),
                )
                .await;
            }
            Phase::Succeeded => {
                self.set_status(pod.name, json!({ "phase": "Succeeded" }))
                    .await
            }
        }
        PodKey::of(&created)
    }

    async fn create_pdb(&self, name: &str, app: &str, min_available: i32) {
        let pdb: PodDisruptionBudget =
            serde_json::from_value(pdb_object(&self.namespace, name, app, min_available))
                .expect("pdb");
        Api::<PodDisruptionBudget>::namespaced(self.admin.clone(), &self.namespace)
            .create(&PostParams::default(), &pdb)
            .await
            .expect("create pdb");
    }

    async fn reconcile(&self) {
        let now = self.now();
        let pods = self
            .pods_api()
            .list(&ListParams::default())
            .await
            .expect("pods")
            .items;
        let nodes = Api::<Node>::all(self.admin.clone())
            .list(&ListParams::default())
            .await
            .expect("nodes")
            .items;
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: nodes.iter().collect(),
            now,
            ..ClusterView::default()
        };
        for action in controllers::reconcile_workloads(&view) {
            match action {
                ControllerAction::RemovePod(key) => {
                    remove_pod(&self.admin, &key).await.expect("remove pod")
                }
                other => panic!("the contract's pods need no {other:?}"),
            }
        }
        let pods = self
            .pods_api()
            .list(&ListParams::default())
            .await
            .expect("pods")
            .items;
        let pdbs = Api::<PodDisruptionBudget>::namespaced(self.admin.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("pdbs")
            .items;
        let view = ClusterView {
            pods: pods.iter().collect(),
            pdbs: pdbs.iter().collect(),
            now,
            ..ClusterView::default()
        };
        write_pdb_statuses(&self.admin, &pdbs, controllers::disruption_budgets(&view))
            .await
            .expect("pdb status");
    }

    async fn advance(&self, seconds: i64) {
        let mut skew = self.skew.lock().unwrap_or_else(|e| e.into_inner());
        *skew += SignedDuration::from_secs(seconds);
    }

    async fn pod(&self, name: &str) -> Option<Pod> {
        self.pods_api().get_opt(name).await.expect("get pod")
    }

    async fn pdb(&self, name: &str) -> Option<PodDisruptionBudget> {
        Api::<PodDisruptionBudget>::namespaced(self.admin.clone(), &self.namespace)
            .get_opt(name)
            .await
            .expect("get pdb")
    }

    async fn node(&self, name: &str) -> Option<Node> {
        Api::<Node>::all(self.admin.clone())
            .get_opt(name)
            .await
            .expect("get node")
    }

    async fn events(&self) -> Vec<ClusterEvent> {
        let events = Api::<Event>::namespaced(self.admin.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        let mut events: Vec<Event> = events
            .into_iter()
            .filter(|e| {
                e.reporting_controller.as_deref() == Some(nodewright::kube::CONTROLLER_NAME)
            })
            .collect();
        events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        let mut out = Vec::new();
        for e in events {
            let (event, times) = cluster_event(&e);
            out.extend(std::iter::repeat_n(event, times));
        }
        out
    }

    async fn create_storage_object(&self, object: Value) {
        use k8s_openapi::api::storage::v1::{CSINode, VolumeAttachment};
        match object["kind"].as_str() {
            Some("CSINode") => {
                let o: CSINode = serde_json::from_value(object).expect("csinode");
                Api::<CSINode>::all(self.admin.clone())
                    .create(&PostParams::default(), &o)
                    .await
                    .expect("create csinode");
            }
            Some("VolumeAttachment") => {
                let o: VolumeAttachment = serde_json::from_value(object).expect("attachment");
                Api::<VolumeAttachment>::all(self.admin.clone())
                    .create(&PostParams::default(), &o)
                    .await
                    .expect("create volumeattachment");
            }
            other => panic!("not a storage object: {other:?}"),
        }
    }

    async fn create_deployment(&self, name: &str, replicas: Option<i32>, cpu: &str) {
        use k8s_openapi::api::apps::v1::Deployment;
        let d: Deployment =
            serde_json::from_value(deployment_object(&self.namespace, name, replicas, cpu))
                .expect("deployment");
        Api::<Deployment>::namespaced(self.admin.clone(), &self.namespace)
            .create(&PostParams::default(), &d)
            .await
            .expect("create deployment");
    }

    async fn scale_deployment(&self, name: &str, replicas: i32) {
        use k8s_openapi::api::apps::v1::Deployment;
        Api::<Deployment>::namespaced(self.admin.clone(), &self.namespace)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": { "replicas": replicas } })),
            )
            .await
            .expect("scale deployment");
    }
}
