//! A simulation's cluster played on the real kube-apiserver: the handlers
//! reach it through `KubeCluster` as the restricted function identity.
//! Nothing is simulated inside the server: pods, bindings, taints,
//! evictions and Events are real API objects. Who plays the rest of the
//! cluster depends on the server ([`Controllers`]):
//!
//! - On a bare server, the cluster's own controllers
//!   (`nodewright::sim::controllers` — ReplicaSets, DaemonSets, pod GC, the
//!   kubelets, kube-scheduler) act as the admin through the API, as
//!   kube-controller-manager, kube-scheduler and the kubelets would. There
//!   is no kube-controller-manager, so the disruption controller is played
//!   here too: each reconcile recomputes every PodDisruptionBudget's status
//!   ([`controllers::disruption_budgets`]) and writes it through the status
//!   subresource, conditional on the budget's resourceVersion — the
//!   server's eviction handler decides from that status, as in a cluster.
//!   The kubelets confirm a graceful deletion once the pod's
//!   `deletionTimestamp` has passed.
//! - On a server started with its control plane (`kube.sh start
//!   --control-plane`), the real kube-controller-manager and kube-scheduler
//!   do all of that, and kwok plays the kubelets: the only part played here
//!   is the registrar, the boot of an instance's kubelet — its Node,
//!   created with the instance type's capacity and allocatable, the
//!   launch's labels and startup taints, and kwok's annotation; kwok then
//!   reports it Ready and the node lifecycle controller lifts the
//!   not-ready taint. Such a simulation runs on a wall clock
//!   (`SimClock::wall`): the controllers beside it live in real time.
//!
//! The server is shared by every test of a binary, and the provisioner
//! looks at the whole cluster, so a scenario takes [`ApiServerCluster::exclusive`]:
//! one scenario at a time, on a cluster emptied of workloads and nodes.

use std::sync::Arc;

use futures_util::future::try_join_all;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, Resource};
use nodewright::kube::{ClientSettings, KubeCluster};
use nodewright::model::{PodKey, Timestamp};
use nodewright::ports::ClusterEvent;
use nodewright::scheduling::volumes::VolumeIndex;
use nodewright::sim::controllers::{self, ClusterView, ControllerAction, PdbStatusUpdate};
use nodewright::sim::{ClusterDriver, DriverError};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::kube_harness::{KubeEnv, apply_rbac};

const FIELD_MANAGER: &str = "nodewright-sim";
/// Deletions in flight at once while a cluster is emptied.
const WIPE_CONCURRENCY: usize = 32;
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The annotation kwok selects the Nodes it plays the kubelet of by
/// (`kube.sh start --control-plane`).
pub const KWOK_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// Who plays the cluster's controllers, kube-scheduler and the kubelets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controllers {
    /// `nodewright::sim::controllers`, acting through the API as the admin.
    Played,
    /// kube-controller-manager, kube-scheduler and kwok beside the server.
    Real,
}
/// Who published the Events the scenarios count.
const REPORTING_CONTROLLER: &str = nodewright::kube::CONTROLLER_NAME;

#[derive(Clone)]
pub struct ApiServerCluster {
    /// The functions' view: user `nodewright`, the shipped ClusterRole.
    function: KubeCluster,
    /// The controllers' view: the test admin.
    admin: Client,
    /// Events before this are another test's.
    since: Timestamp,
    controllers: Controllers,
    _exclusive: Arc<OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for ApiServerCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerCluster")
            .field("function", &self.function)
            .finish_non_exhaustive()
    }
}

fn err(what: &str) -> impl Fn(kube::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Every object of a kind, in all namespaces.
async fn list<K>(admin: &Client) -> Result<Vec<K>, String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(admin.clone());
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(err("list"))?
        .items)
}

impl ApiServerCluster {
    /// Waits for the cluster, then empties it of pods, workloads, PDBs and
    /// nodes left by earlier tests, and applies the shipped RBAC. On a
    /// server with its control plane, the real controllers play the
    /// cluster ([`Controllers::Real`]); otherwise they are played here.
    pub async fn exclusive(env: &KubeEnv) -> ApiServerCluster {
        static PLAYED: std::sync::OnceLock<Arc<Mutex<()>>> = std::sync::OnceLock::new();
        static REAL: std::sync::OnceLock<Arc<Mutex<()>>> = std::sync::OnceLock::new();
        let (lock, controllers) = if env.control_plane {
            (&REAL, Controllers::Real)
        } else {
            (&PLAYED, Controllers::Played)
        };
        let guard = lock
            .get_or_init(|| Arc::new(Mutex::new(())))
            .clone()
            .lock_owned()
            .await;
        apply_rbac(env).await;
        let admin = env.admin_client();
        match controllers {
            Controllers::Played => wipe(&admin).await,
            Controllers::Real => wipe_with_controllers(&admin).await,
        }
        .expect("emptying the cluster");
        ApiServerCluster {
            function: env.function(ClientSettings::default()),
            admin,
            since: Timestamp::now(),
            controllers,
            _exclusive: Arc::new(guard),
        }
    }

    /// When this test took the cluster: Events before are another test's.
    pub fn since(&self) -> Timestamp {
        self.since
    }

    /// Who plays the controllers of this cluster.
    pub fn controllers(&self) -> Controllers {
        self.controllers
    }

    /// The test admin's client (`system:masters`).
    pub fn admin(&self) -> &Client {
        &self.admin
    }

    async fn ensure_namespace(&self, ns: &str) -> Result<(), String> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        let object: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).map_err(|e| e.to_string())?;
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(()),
            Err(e) if is_code(&e, 409) => Ok(()),
            Err(e) => Err(format!("create namespace {ns}: {e}")),
        }
    }

    async fn apply_namespaced<K>(&self, object: &Value) -> Result<(), String>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .ok_or("an object without metadata.name")?
            .to_owned();
        self.ensure_namespace(&ns).await?;
        let api: Api<K> = Api::namespaced(self.admin.clone(), &ns);
        let mut object = object.clone();
        object["metadata"]["namespace"] = json!(ns);
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(err(&format!("apply {ns}/{name}")))?;
        Ok(())
    }

    async fn apply_cluster_scoped<K>(&self, object: &Value) -> Result<(), String>
    where
        K: Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let name = object["metadata"]["name"]
            .as_str()
            .ok_or("an object without metadata.name")?
            .to_owned();
        let api: Api<K> = Api::all(self.admin.clone());
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map_err(err(&format!("apply {name}")))?;
        Ok(())
    }

    /// One controller action through the API, as the admin.
    async fn act(&self, action: ControllerAction) -> Result<(), String> {
        match action {
            ControllerAction::CreatePod(pod) => {
                let ns = pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_owned());
                let running = controllers::phase(&pod) == Some("Running");
                let api: Api<Pod> = Api::namespaced(self.admin.clone(), &ns);
                match api.create(&PostParams::default(), &pod).await {
                    Ok(created) if running => self.start(&PodKey::of(&created)).await,
                    Ok(_) => Ok(()),
                    // A DaemonSet pod another round already created.
                    Err(e) if is_code(&e, 409) => Ok(()),
                    Err(e) => Err(format!("create pod in {ns}: {e}")),
                }
            }
            ControllerAction::RemovePod(key) => remove_pod(&self.admin, &key).await,
            ControllerAction::Place { pod, node } => {
                let api: Api<Pod> = Api::namespaced(self.admin.clone(), &pod.namespace);
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}
                });
                match api
                    .create_subresource::<Value, Value>(
                        "binding",
                        &pod.name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => self.start(&pod).await,
                    // Bound meanwhile (by the provisioner), or gone.
                    Err(e) if is_code(&e, 409) || is_code(&e, 404) => Ok(()),
                    Err(e) => Err(format!("bind {pod} to {node}: {e}")),
                }
            }
            ControllerAction::Start(pod) => self.start(&pod).await,
            ControllerAction::Unschedulable { pod, message } => {
                let status = json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                    "lastTransitionTime": Timestamp::now().to_string()
                }]}});
                self.patch_status(&pod, &status).await
            }
        }
    }

    /// The kubelet: the pod runs and is ready.
    async fn start(&self, pod: &PodKey) -> Result<(), String> {
        let now = Timestamp::now().to_string();
        let status = json!({"status": {"phase": "Running", "startTime": now, "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
        ]}});
        self.patch_status(pod, &status).await
    }

    async fn patch_status(&self, pod: &PodKey, status: &Value) -> Result<(), String> {
        let api: Api<Pod> = Api::namespaced(self.admin.clone(), &pod.namespace);
        match api
            .patch_status(
                &pod.name,
                &PatchParams::default(),
                &Patch::Strategic(status),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_code(&e, 404) => Ok(()),
            Err(e) => Err(format!("pod status {pod}: {e}")),
        }
    }

    async fn act_all(&self, actions: Vec<ControllerAction>) -> Result<(), String> {
        try_join_all(actions.into_iter().map(|a| self.act(a)))
            .await
            .map(drop)
    }

    async fn snapshot(&self) -> Result<Snapshot, String> {
        let volumes = VolumeIndex::new(
            list(&self.admin).await?,
            list(&self.admin).await?,
            list(&self.admin).await?,
        )
        .with_csi_nodes(list::<CSINode>(&self.admin).await?);
        Ok(Snapshot {
            pods: list(&self.admin).await?,
            nodes: list(&self.admin).await?,
            deployments: list(&self.admin).await?,
            daemon_sets: list(&self.admin).await?,
            volumes,
        })
    }
}

/// Removes a pod at once (grace 0, on its uid), as the kubelet confirms a
/// deletion or the garbage collector removes an orphan; gone already is fine.
pub async fn remove_pod(admin: &Client, key: &PodKey) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), &key.namespace);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: (!key.uid.is_empty()).then(|| Preconditions {
            uid: Some(key.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&key.name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_code(&e, 404) || is_code(&e, 409) => Ok(()),
        Err(e) => Err(format!("delete pod {key}: {e}")),
    }
}

/// The disruption controller's writes: each budget's status through the
/// status subresource, on the resourceVersion it was computed from. A
/// conflict means an eviction decremented the budget meanwhile: that write
/// is dropped, and the next round recomputes from the new status.
pub async fn write_pdb_statuses(
    admin: &Client,
    pdbs: &[PodDisruptionBudget],
    updates: Vec<PdbStatusUpdate>,
) -> Result<(), String> {
    try_join_all(updates.into_iter().map(|u| async move {
        let api: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), &u.namespace);
        let Some(mut object) = pdbs
            .iter()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(u.namespace.as_str())
                    && p.metadata.name.as_deref() == Some(u.name.as_str())
            })
            .cloned()
        else {
            return Ok(());
        };
        object.metadata.resource_version = u.resource_version.clone();
        object.metadata.managed_fields = None;
        object.status = Some(u.status);
        match api
            .replace_status(&u.name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_code(&e, 409) || is_code(&e, 404) => Ok(()),
            Err(e) => Err(format!("pdb status {}/{}: {e}", u.namespace, u.name)),
        }
    }))
    .await
    .map(drop)
}

struct Snapshot {
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    deployments: Vec<Deployment>,
    daemon_sets: Vec<DaemonSet>,
    volumes: VolumeIndex,
}

/// Deletes every pod, Deployment, DaemonSet, PDB, PVC, PV, StorageClass, CSINode and Node.
async fn wipe(admin: &Client) -> Result<(), String> {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for d in list::<Deployment>(admin).await? {
        let api: Api<Deployment> = Api::namespaced(
            admin.clone(),
            d.metadata.namespace.as_deref().unwrap_or("default"),
        );
        api.delete(d.metadata.name.as_deref().unwrap_or_default(), &now)
            .await
            .map_err(err("delete deployment"))?;
    }
    for d in list::<DaemonSet>(admin).await? {
        let api: Api<DaemonSet> = Api::namespaced(
            admin.clone(),
            d.metadata.namespace.as_deref().unwrap_or("default"),
        );
        api.delete(d.metadata.name.as_deref().unwrap_or_default(), &now)
            .await
            .map_err(err("delete daemonset"))?;
    }
    for p in list::<PodDisruptionBudget>(admin).await? {
        let api: Api<PodDisruptionBudget> = Api::namespaced(
            admin.clone(),
            p.metadata.namespace.as_deref().unwrap_or("default"),
        );
        api.delete(p.metadata.name.as_deref().unwrap_or_default(), &now)
            .await
            .map_err(err("delete pdb"))?;
    }
    let pods: Vec<Pod> = list(admin).await?;
    // A few at a time: a thousand connections at once are refused.
    stream::iter(pods.iter().map(|p| {
        let api: Api<Pod> = Api::namespaced(
            admin.clone(),
            p.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let name = p.metadata.name.clone().unwrap_or_default();
        let now = now.clone();
        async move {
            match api.delete(&name, &now).await {
                Ok(_) => Ok(()),
                Err(e) if is_code(&e, 404) => Ok(()),
                Err(e) => Err(format!("delete pod {name}: {e}")),
            }
        }
    }))
    .buffer_unordered(WIPE_CONCURRENCY)
    .try_collect::<Vec<()>>()
    .await?;
    // Without the controllers that clear them, the protection finalizers
    // would keep deleted claims and volumes around for good.
    let no_finalizers = json!({"metadata": {"finalizers": null}});
    for c in list::<PersistentVolumeClaim>(admin).await? {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(
            admin.clone(),
            c.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let name = c.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&no_finalizers),
        )
        .await
        .map_err(err("unprotect pvc"))?;
        let _ = api.delete(&name, &now).await;
    }
    let volumes: Api<PersistentVolume> = Api::all(admin.clone());
    for v in list::<PersistentVolume>(admin).await? {
        let name = v.metadata.name.clone().unwrap_or_default();
        volumes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&no_finalizers),
            )
            .await
            .map_err(err("unprotect pv"))?;
        let _ = volumes.delete(&name, &now).await;
    }
    let classes: Api<StorageClass> = Api::all(admin.clone());
    for c in list::<StorageClass>(admin).await? {
        let _ = classes
            .delete(c.metadata.name.as_deref().unwrap_or_default(), &now)
            .await;
    }
    let csi_nodes: Api<CSINode> = Api::all(admin.clone());
    for c in list::<CSINode>(admin).await? {
        let _ = csi_nodes
            .delete(c.metadata.name.as_deref().unwrap_or_default(), &now)
            .await;
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    for n in list::<Node>(admin).await? {
        // A finalizer of Karpenter's (a test's Karpenter node) has nobody
        // here to lift it once the test is over.
        if n.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty())
        {
            nodes
                .patch(
                    n.metadata.name.as_deref().unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(&no_finalizers),
                )
                .await
                .map_err(err("lift node finalizers"))?;
        }
        match nodes
            .delete(n.metadata.name.as_deref().unwrap_or_default(), &now)
            .await
        {
            Ok(_) => {}
            Err(e) if is_code(&e, 404) => {}
            Err(e) => return Err(format!("delete node: {e}")),
        }
    }
    Ok(())
}

/// Empties a cluster whose controllers run: the workload controllers'
/// objects first (so nothing re-creates pods), then budgets, pods (at
/// once), volumes and Nodes; waits until no pod is left.
async fn wipe_with_controllers(admin: &Client) -> Result<(), String> {
    use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    let background = DeleteParams {
        grace_period_seconds: Some(0),
        propagation_policy: Some(kube::api::PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    async fn delete_all<K>(admin: &Client, dp: &DeleteParams) -> Result<(), String>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        for o in list::<K>(admin).await? {
            let api: Api<K> = Api::namespaced(
                admin.clone(),
                o.meta().namespace.as_deref().unwrap_or("default"),
            );
            match api
                .delete(o.meta().name.as_deref().unwrap_or_default(), dp)
                .await
            {
                Ok(_) => {}
                Err(e) if is_code(&e, 404) => {}
                Err(e) => {
                    return Err(format!(
                        "delete {}: {e}",
                        K::kind(&K::DynamicType::default())
                    ));
                }
            }
        }
        Ok(())
    }
    delete_all::<Deployment>(admin, &background).await?;
    delete_all::<StatefulSet>(admin, &background).await?;
    delete_all::<ReplicaSet>(admin, &background).await?;
    delete_all::<DaemonSet>(admin, &background).await?;
    delete_all::<Job>(admin, &background).await?;
    delete_all::<PodDisruptionBudget>(admin, &background).await?;
    // What `wipe` does for the rest: pods at once, volumes, classes, Nodes.
    wipe(admin).await?;
    let start = std::time::Instant::now();
    loop {
        let pods: Vec<Pod> = list(admin).await?;
        if pods.is_empty() {
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            return Err(format!("{} pod(s) still there after 60 s", pods.len()));
        }
        let keys: Vec<PodKey> = pods.iter().map(PodKey::of).collect();
        stream::iter(keys.iter().map(|k| remove_pod(admin, k)))
            .buffer_unordered(WIPE_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// The driver's steps, in the test harness's own words (strings); the
/// trait below names each step in its [`DriverError`].
impl ApiServerCluster {
    async fn apply_object(&self, object: &Value) -> Result<(), String> {
        match object["kind"].as_str().unwrap_or_default() {
            "Deployment" => self.apply_namespaced::<Deployment>(object).await,
            "DaemonSet" => self.apply_namespaced::<DaemonSet>(object).await,
            "PodDisruptionBudget" => self.apply_namespaced::<PodDisruptionBudget>(object).await,
            "Pod" => self.apply_namespaced::<Pod>(object).await,
            "PersistentVolumeClaim" => self.apply_namespaced::<PersistentVolumeClaim>(object).await,
            "PersistentVolume" => self.apply_cluster_scoped::<PersistentVolume>(object).await,
            "StorageClass" => self.apply_cluster_scoped::<StorageClass>(object).await,
            "CSINode" => self.apply_cluster_scoped::<CSINode>(object).await,
            other => Err(format!(
                "the API-server driver does not apply kind {other:?}"
            )),
        }
    }

    async fn scale_deployment(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
    ) -> Result<(), String> {
        let api: Api<Deployment> = Api::namespaced(self.admin.clone(), namespace);
        let patch = json!({"spec": {"replicas": replicas}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(err(&format!("scale {namespace}/{name}")))?;
        Ok(())
    }

    async fn register(&self, mut node: Node) -> Result<(), String> {
        let api: Api<Node> = Api::all(self.admin.clone());
        if self.controllers == Controllers::Real {
            // The kubelet (kwok) reports the conditions, not the registrar.
            node.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(KWOK_ANNOTATION.0.to_owned(), KWOK_ANNOTATION.1.to_owned());
            if let Some(status) = node.status.as_mut() {
                status.conditions = None;
            }
        }
        // A Node's status may be set on create (as the kubelet registers).
        let created = match api.create(&PostParams::default(), &node).await {
            Ok(created) => created,
            Err(e) if is_code(&e, 409) => return Ok(()),
            Err(e) => return Err(format!("register node: {e}")),
        };
        if self.controllers == Controllers::Real {
            // The node lifecycle controller lifts the not-ready taint.
            return Ok(());
        }
        // Admission taints every new node not-ready; the node lifecycle
        // controller lifts that once the node reports Ready, as this one does.
        let taints = created
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(|t| t.key == NOT_READY_TAINT) {
            let wanted: Vec<_> = taints
                .into_iter()
                .filter(|t| t.key != NOT_READY_TAINT)
                .collect();
            let name = created.metadata.name.clone().unwrap_or_default();
            let patch = json!({"spec": {"taints": wanted}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(err("lift not-ready"))?;
        }
        Ok(())
    }

    async fn reconcile_round(&self) -> Result<(), String> {
        if self.controllers == Controllers::Real {
            // kube-controller-manager, kube-scheduler and kwok are at work.
            return Ok(());
        }
        let Snapshot {
            pods,
            nodes,
            deployments,
            daemon_sets,
            volumes,
        } = self.snapshot().await?;
        let now = Timestamp::now();
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: nodes.iter().collect(),
            deployments: deployments.iter().collect(),
            daemon_sets: daemon_sets.iter().collect(),
            now,
            ..ClusterView::default()
        };
        let actions = controllers::reconcile_workloads(&view);
        let changed = !actions.is_empty();
        self.act_all(actions).await?;
        let pods: Vec<Pod> = if changed {
            list(&self.admin).await?
        } else {
            pods
        };
        // The disruption controller, on the pods as they are now.
        let pdbs: Vec<PodDisruptionBudget> = list(&self.admin).await?;
        let view = ClusterView {
            pods: pods.iter().collect(),
            deployments: deployments.iter().collect(),
            pdbs: pdbs.iter().collect(),
            now,
            ..ClusterView::default()
        };
        write_pdb_statuses(&self.admin, &pdbs, controllers::disruption_budgets(&view)).await?;
        let view = ClusterView {
            pods: pods.iter().collect(),
            nodes: nodes.iter().collect(),
            volumes,
            now,
            ..ClusterView::default()
        };
        self.act_all(controllers::schedule(&view)).await
    }
}

impl ClusterDriver for ApiServerCluster {
    type Port = KubeCluster;

    fn port(&self) -> KubeCluster {
        self.function.clone()
    }

    async fn apply(&self, object: &Value) -> Result<(), DriverError> {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        self.apply_object(object)
            .await
            .map_err(|reason| DriverError::new(format!("apply {kind}"), reason))
    }

    async fn scale(&self, namespace: &str, name: &str, replicas: i32) -> Result<(), DriverError> {
        self.scale_deployment(namespace, name, replicas)
            .await
            .map_err(|reason| DriverError::new(format!("scale {namespace}/{name}"), reason))
    }

    async fn register_node(&self, node: Node) -> Result<(), DriverError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.register(node)
            .await
            .map_err(|reason| DriverError::new(format!("register node {name}"), reason))
    }

    async fn reconcile(&self) -> Result<(), DriverError> {
        self.reconcile_round()
            .await
            .map_err(|reason| DriverError::new("reconcile", reason))
    }

    async fn all_pods(&self) -> Vec<Pod> {
        list(&self.admin).await.expect("list pods")
    }

    async fn all_nodes(&self) -> Vec<Node> {
        list(&self.admin).await.expect("list nodes")
    }

    async fn events(&self) -> Vec<(Timestamp, ClusterEvent)> {
        let events: Vec<Event> = list(&self.admin).await.expect("list events");
        let mut out = Vec::new();
        for e in events {
            if e.reporting_controller.as_deref() != Some(REPORTING_CONTROLLER) {
                continue;
            }
            let Some(at) = e.event_time.as_ref().map(|t| t.0) else {
                continue;
            };
            if at < self.since {
                continue;
            }
            let (event, times) = cluster_event(&e);
            out.extend(std::iter::repeat_n((at, event), times));
        }
        out.sort_by_key(|(at, _)| *at);
        out
    }
}

/// An `events.k8s.io` Event as the port's [`ClusterEvent`], and how many
/// times it happened (a repeat is counted on the first Event's series).
pub fn cluster_event(e: &Event) -> (ClusterEvent, usize) {
    let regarding = e.regarding.clone().unwrap_or_default();
    let event = ClusterEvent {
        kind: regarding.kind.unwrap_or_default(),
        namespace: regarding.namespace,
        name: regarding.name.unwrap_or_default(),
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.note.clone().unwrap_or_default(),
    };
    let times = e.series.as_ref().map_or(1, |s| s.count.max(1));
    (event, times as usize)
}
