//! [`KubeCluster`]: the [`Cluster`] port over the Kubernetes API.
//!
//! Every call goes through [`KubeCluster::call`]: a fresh bearer token, then
//! the bounded [`RetryPolicy`](super::RetryPolicy). Answers that are not
//! failures become values before the retry loop sees them (a 409 on a
//! binding is `AlreadyBound`, a 429 on an eviction is `Blocked`).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use ::kube::core::{ObjectList, Status};
use ::kube::{Client, Resource};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Binding, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Taint as K8sTaint,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    DeleteOptions, MicroTime, ObjectMeta, Preconditions as K8sPreconditions, Time,
};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{debug, info, warn};

use super::CONTROLLER_NAME;
use super::connect::{Auth, ClientSettings, Connection, Endpoint, TokenSource};
use super::errors::{
    classify, is_conflict, is_not_found, message, message_with_causes, status_code,
};
use crate::config::buffer::ScalableKind;
use crate::model::{PodKey, ScalableWorkload, Timestamp};
use crate::ports::{BindOutcome, Cluster, ClusterError, ClusterEvent, EvictOutcome};
use crate::scheduling::taints::{Effect, Taint};

/// Field selectors of the two pod listings.
pub const PENDING_PODS: &str = "spec.nodeName=,status.phase=Pending";
pub const SCHEDULED_PODS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// Read-modify-write rounds of a node patch that keeps losing to other writers.
const MAX_CONFLICTS: u32 = 5;
/// A repeat of an event within this long updates the first one's series.
const EVENT_SERIES_WINDOW: Duration = Duration::from_secs(600);
const EVENT_CACHE_MAX: usize = 512;
/// events.k8s.io limits `note` to 1 kB.
const EVENT_NOTE_MAX: usize = 1024;

/// The Kubernetes API as the handlers see it. Cheap to clone.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    auth: Option<Auth>,
    settings: ClientSettings,
    events: Arc<Mutex<HashMap<EventKey, RecordedEvent>>>,
}

impl fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCluster")
            .field("auth", &self.auth.as_ref().map(|a| &a.source))
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EventKey {
    kind: String,
    namespace: Option<String>,
    name: String,
    type_: String,
    reason: String,
    message: String,
}

#[derive(Debug, Clone)]
struct RecordedEvent {
    namespace: String,
    name: String,
    count: i32,
    first: Instant,
}

/// What a binding attempt said, before a 409 is looked into.
enum BindReply {
    Done(BindOutcome),
    Conflict,
}

impl KubeCluster {
    /// The cluster behind `connection`.
    pub fn new(connection: Connection) -> KubeCluster {
        KubeCluster {
            client: connection.client,
            auth: connection.auth,
            settings: connection.settings,
            events: Arc::default(),
        }
    }

    /// A cluster reached at `endpoint` with tokens from `tokens` (the EKS
    /// mode): [`Connection::with_token_source`]. Like every constructor
    /// below, it must run inside a Tokio runtime.
    pub fn with_token_source(
        endpoint: &Endpoint,
        tokens: Arc<dyn TokenSource>,
        settings: ClientSettings,
    ) -> Result<KubeCluster, ClusterError> {
        Connection::with_token_source(endpoint, tokens, settings).map(KubeCluster::new)
    }

    /// A cluster at `url` whose CA is in `ca_file` (PEM), with a fixed
    /// token: [`Connection::with_static_token`].
    pub fn with_static_token(
        url: &str,
        ca_file: &std::path::Path,
        token: &str,
        settings: ClientSettings,
    ) -> Result<KubeCluster, ClusterError> {
        Connection::with_static_token(url, ca_file, token, settings).map(KubeCluster::new)
    }

    /// A cluster from a kubeconfig: [`Connection::from_kubeconfig`].
    pub async fn from_kubeconfig(
        path: Option<&std::path::Path>,
        context: Option<&str>,
        settings: ClientSettings,
    ) -> Result<KubeCluster, ClusterError> {
        Connection::from_kubeconfig(path, context, settings)
            .await
            .map(KubeCluster::new)
    }

    /// A cluster over a client built elsewhere (its retry should be off).
    pub fn from_client(client: Client, settings: ClientSettings) -> KubeCluster {
        KubeCluster::new(Connection::from_client(client, settings))
    }

    /// The underlying client (tests use it to play the other controllers).
    /// Its requests carry the token last fetched by an adapter call (a
    /// static token from the start); call [`KubeCluster::authorize`] first
    /// when using it directly with a token source that expires.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn settings(&self) -> &ClientSettings {
        &self.settings
    }

    /// Fetches a fresh token (if this cluster has a token source) for the
    /// requests that follow.
    pub async fn authorize(&self) -> Result<(), ClusterError> {
        match &self.auth {
            Some(auth) => auth.refresh().await,
            None => Ok(()),
        }
    }

    /// A JSON merge patch of the Node `node` (`what` names it in errors):
    /// it sets the fields given and leaves the others, so no
    /// resourceVersion precondition is needed.
    async fn merge_patch_node(
        &self,
        node: &str,
        what: &str,
        patch: &serde_json::Value,
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let what = format!("patch node/{node} ({what})");
        let pp = PatchParams::default();
        self.call(&what, || async {
            api.patch(node, &pp, &Patch::Merge(patch))
                .await
                .map(|_| ())
                .map_err(|e| classify(&what, &e))
        })
        .await
    }

    /// Runs one API operation under the retry policy, with a fresh token before each attempt.
    pub async fn call<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let result = self
            .settings
            .retry
            .run(what, || {
                let fut = attempt();
                let auth = self.auth.clone();
                async move {
                    if let Some(auth) = auth {
                        auth.refresh().await?;
                    }
                    fut.await
                }
            })
            .await;
        if let (
            Err(ClusterError::Forbidden {
                unauthorized: true, ..
            }),
            Some(auth),
        ) = (&result, &self.auth)
        {
            auth.source.invalidate();
        }
        result
    }

    /// One namespaced object, `None` when it does not exist.
    async fn get_opt<K>(
        &self,
        what: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, ClusterError>
    where
        K: Resource<Scope = ::kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
        <K as Resource>::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        self.call(what, || async {
            api.get_opt(name).await.map_err(|e| classify(what, &e))
        })
        .await
    }

    /// Every object of a list, page by page (`limit` + `continue`). A
    /// continue token that expired (410) restarts the listing, twice at most.
    async fn list_all<K>(
        &self,
        api: &Api<K>,
        what: &str,
        fields: Option<&str>,
    ) -> Result<Vec<K>, ClusterError>
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug,
    {
        let mut restarts = 0;
        'listing: loop {
            let mut items = Vec::new();
            let mut token: Option<String> = None;
            let mut pages = 0u32;
            loop {
                let mut params = ListParams::default().limit(self.settings.page_size);
                if let Some(f) = fields {
                    params = params.fields(f);
                }
                if let Some(t) = &token {
                    params = params.continue_token(t);
                }
                let page: Result<ObjectList<K>, ::kube::Error> = {
                    let params = &params;
                    self.call(what, || async move {
                        match api.list(params).await {
                            Err(e) if status_code(&e) == Some(410) => Ok(Err(e)),
                            Err(e) => Err(classify(what, &e)),
                            Ok(list) => Ok(Ok(list)),
                        }
                    })
                    .await?
                };
                let page = match page {
                    Ok(p) => p,
                    Err(e) if restarts < 2 => {
                        restarts += 1;
                        debug!(operation = what, error = %message(&e), "list continue token expired; listing again");
                        continue 'listing;
                    }
                    Err(e) => return Err(classify(what, &e)),
                };
                pages += 1;
                // managedFields (often the largest part of an object) are
                // read by nothing here: not kept, so a listing of 10,000
                // pods weighs what the pods' specs and statuses weigh.
                items.extend(page.items.into_iter().map(|mut item| {
                    item.meta_mut().managed_fields = None;
                    item
                }));
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(next) => token = Some(next),
                    None => {
                        debug!(operation = what, pages, items = items.len(), "listed");
                        return Ok(items);
                    }
                }
            }
        }
    }

    /// Reads a node, lets `change` edit its taints (or say nothing needs doing),
    /// and writes them back with a merge patch conditional on the read's
    /// resourceVersion; a conflict means someone wrote in between: read again.
    async fn update_taints<F>(
        &self,
        node: &str,
        what: &str,
        mut change: F,
    ) -> Result<(), ClusterError>
    where
        F: FnMut(&mut Vec<K8sTaint>) -> bool,
    {
        let api: Api<Node> = Api::all(self.client.clone());
        for round in 1..=MAX_CONFLICTS {
            let current = self
                .call(&format!("get node/{node}"), || async {
                    api.get(node)
                        .await
                        .map_err(|e| classify(&format!("get node/{node}"), &e))
                })
                .await?;
            let mut taints = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if !change(&mut taints) {
                return Ok(());
            }
            let rv = current
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            let patch = json!({
                "metadata": { "resourceVersion": rv },
                "spec": { "taints": if taints.is_empty() { serde_json::Value::Null } else { json!(taints) } },
            });
            let pp = PatchParams::default();
            let written = self
                .call(what, || async {
                    match api.patch(node, &pp, &Patch::Merge(&patch)).await {
                        Ok(_) => Ok(true),
                        Err(e) if is_conflict(&e) => Ok(false),
                        Err(e) => Err(classify(what, &e)),
                    }
                })
                .await?;
            if written {
                return Ok(());
            }
            debug!(
                node,
                round,
                operation = what,
                "node changed since it was read; reading it again"
            );
        }
        Err(ClusterError::conflict(
            what,
            format!("node kept changing; gave up after {MAX_CONFLICTS} read-modify-write rounds"),
        ))
    }

    /// The uid of the object an event is about, so `kubectl describe` (which
    /// selects events by uid) shows it. Best effort.
    async fn uid_of(&self, event: &ClusterEvent) -> Option<String> {
        let what = format!("get {} {}", event.kind.to_lowercase(), event.name);
        let uid = match event.kind.as_str() {
            "Pod" => {
                let ns = event.namespace.as_deref().unwrap_or("default");
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                self.call(&what, || async {
                    api.get_metadata_opt(&event.name)
                        .await
                        .map_err(|e| classify(&what, &e))
                })
                .await
                .map(|m| m.and_then(|m| m.metadata.uid))
            }
            "Node" => {
                let api: Api<Node> = Api::all(self.client.clone());
                self.call(&what, || async {
                    api.get_metadata_opt(&event.name)
                        .await
                        .map_err(|e| classify(&what, &e))
                })
                .await
                .map(|m| m.and_then(|m| m.metadata.uid))
            }
            _ => return None,
        };
        uid.inspect_err(|e| debug!(error = %e, "event subject's uid unknown"))
            .ok()
            .flatten()
    }

    fn remember_event(&self, key: EventKey, recorded: RecordedEvent) {
        let mut cache = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= EVENT_CACHE_MAX {
            cache.retain(|_, r| r.first.elapsed() < EVENT_SERIES_WINDOW);
            if cache.len() >= EVENT_CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(key, recorded);
    }
}

fn k8s_taint(t: &Taint) -> K8sTaint {
    K8sTaint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.as_str().to_owned(),
        // As kubectl does: NoExecute taints carry the time they were added
        // (tolerationSeconds count from it).
        time_added: (t.effect == Effect::NoExecute).then(|| Time(Timestamp::now())),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

fn uid_preconditions(pod: &PodKey) -> Option<Preconditions> {
    (!pod.uid.is_empty()).then(|| Preconditions {
        uid: Some(pod.uid.clone()),
        resource_version: None,
    })
}

impl Cluster for KubeCluster {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        self.list_all(&api, "list pods (pending)", Some(PENDING_PODS))
            .await
    }

    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        self.list_all(&api, "list pods (scheduled)", Some(SCHEDULED_PODS))
            .await
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let selector = format!("spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed");
        self.list_all(&api, &format!("list pods on node {node}"), Some(&selector))
            .await
    }

    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        self.list_all(&api, "list nodes", None).await
    }

    async fn daemon_sets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        let api: Api<DaemonSet> = Api::all(self.client.clone());
        self.list_all(&api, "list daemonsets.apps", None).await
    }

    async fn scalable_workload(
        &self,
        kind: ScalableKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ScalableWorkload>, ClusterError> {
        let what = format!("get {} {namespace}/{name}", kind.resource());
        let (template, replicas) = match kind {
            ScalableKind::Deployment => self
                .get_opt::<Deployment>(&what, namespace, name)
                .await?
                .and_then(|o| o.spec)
                .map(|s| (s.template, s.replicas)),
            ScalableKind::ReplicaSet => self
                .get_opt::<ReplicaSet>(&what, namespace, name)
                .await?
                .and_then(|o| o.spec)
                .map(|s| (s.template.unwrap_or_default(), s.replicas)),
            ScalableKind::StatefulSet => self
                .get_opt::<StatefulSet>(&what, namespace, name)
                .await?
                .and_then(|o| o.spec)
                .map(|s| (s.template, s.replicas)),
        }
        .unzip();
        Ok(template.map(|template| ScalableWorkload {
            template,
            replicas: replicas.flatten().unwrap_or(1),
        }))
    }

    async fn pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        let api: Api<PodDisruptionBudget> = Api::all(self.client.clone());
        self.list_all(&api, "list poddisruptionbudgets.policy", None)
            .await
    }

    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        let api: Api<PersistentVolumeClaim> = Api::all(self.client.clone());
        self.list_all(&api, "list persistentvolumeclaims", None)
            .await
    }

    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        self.list_all(&api, "list persistentvolumes", None).await
    }

    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        let api: Api<StorageClass> = Api::all(self.client.clone());
        self.list_all(&api, "list storageclasses.storage.k8s.io", None)
            .await
    }

    async fn csi_nodes(&self) -> Result<Vec<CSINode>, ClusterError> {
        let api: Api<CSINode> = Api::all(self.client.clone());
        self.list_all(&api, "list csinodes.storage.k8s.io", None)
            .await
    }

    async fn volume_attachments(&self, node: &str) -> Result<Vec<VolumeAttachment>, ClusterError> {
        // VolumeAttachments have no field selector on spec.nodeName.
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        let all = self
            .list_all(&api, "list volumeattachments.storage.k8s.io", None)
            .await?;
        Ok(all
            .into_iter()
            .filter(|a| a.spec.node_name == node)
            .collect())
    }

    async fn bind(&self, pod: &PodKey, node: &str) -> Result<BindOutcome, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                // The API server refuses (409) a binding whose uid is not the pod's.
                uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Node".to_owned()),
                name: Some(node.to_owned()),
                ..Default::default()
            },
        };
        let what = format!("create pods/binding {pod} → node/{node}");
        let pp = PostParams::default();
        let reply = self
            .call(&what, || async {
                match api
                    .create_subresource::<_, Status>("binding", &pod.name, &pp, &binding)
                    .await
                {
                    Ok(_) => Ok(BindReply::Done(BindOutcome::Bound)),
                    Err(e) if is_not_found(&e) => Ok(BindReply::Done(BindOutcome::Gone)),
                    Err(e) if is_conflict(&e) => Ok(BindReply::Conflict),
                    Err(e) => Err(classify(&what, &e)),
                }
            })
            .await?;
        match reply {
            BindReply::Done(outcome) => Ok(outcome),
            // Already on a node, being deleted, or not the pod we meant (uid):
            // only a look tells the last apart.
            BindReply::Conflict => {
                let get = format!("get pod {pod}");
                let current = self
                    .call(&get, || async {
                        api.get_opt(&pod.name).await.map_err(|e| classify(&get, &e))
                    })
                    .await?;
                Ok(match current {
                    None => BindOutcome::Gone,
                    Some(p)
                        if !pod.uid.is_empty()
                            && p.metadata.uid.as_deref() != Some(pod.uid.as_str()) =>
                    {
                        BindOutcome::Gone
                    }
                    Some(_) => BindOutcome::AlreadyBound,
                })
            }
        }
    }

    async fn add_taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        let what = format!("patch node/{node} (add taint {taint})");
        self.update_taints(node, &what, |taints| {
            if taints
                .iter()
                .any(|t| t.key == taint.key && t.effect == taint.effect.as_str())
            {
                return false;
            }
            taints.push(k8s_taint(taint));
            true
        })
        .await
    }

    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError> {
        let what = format!("patch node/{node} (remove taint {key})");
        self.update_taints(node, &what, |taints| {
            let before = taints.len();
            taints.retain(|t| t.key != key);
            taints.len() != before
        })
        .await
    }

    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        // One field set to a fixed value: nothing another writer did can be
        // lost, so no resourceVersion precondition is needed.
        let patch = json!({ "spec": { "unschedulable": true } });
        self.merge_patch_node(node, "cordon", &patch).await
    }

    async fn label_node(
        &self,
        node: &str,
        labels: &std::collections::BTreeMap<String, String>,
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        // A merge patch sets the keys given and leaves the others: what
        // another writer set meanwhile is kept, so no precondition.
        let mut metadata = serde_json::Map::new();
        metadata.insert("labels".to_owned(), json!(labels));
        if !annotations.is_empty() {
            metadata.insert("annotations".to_owned(), json!(annotations));
        }
        let patch = json!({ "metadata": metadata });
        self.merge_patch_node(node, "labels", &patch).await
    }

    async fn unlabel_node(&self, node: &str, keys: &[&str]) -> Result<(), ClusterError> {
        // A merge patch's null removes the key; a key already gone is no
        // change.
        let labels: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| ((*k).to_owned(), serde_json::Value::Null))
            .collect();
        let patch = json!({ "metadata": { "labels": labels } });
        self.merge_patch_node(node, "remove labels", &patch).await
    }

    async fn evict(&self, pod: &PodKey) -> Result<EvictOutcome, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let what = format!("create pods/eviction {pod}");
        // Not `Api::evict`: kube 5 sends its delete options under the key
        // `delete_options`, which the API server ignores, so the uid
        // precondition would be lost. k8s-openapi's Eviction says `deleteOptions`.
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..Default::default()
            },
            delete_options: uid_preconditions(pod).map(|p| DeleteOptions {
                preconditions: Some(K8sPreconditions {
                    uid: p.uid,
                    resource_version: None,
                }),
                ..Default::default()
            }),
        };
        let pp = PostParams::default();
        let outcome = self
            .call(&what, || async {
                match api
                    .create_subresource::<_, Status>("eviction", &pod.name, &pp, &eviction)
                    .await
                {
                    Ok(_) => Ok(EvictOutcome::Evicted),
                    Err(e) => match status_code(&e) {
                        // 409: the uid precondition failed (another pod has the
                        // name now). The API checks budgets first, so a stale
                        // pod whose budget is exhausted is reported Blocked.
                        Some(404 | 409) => Ok(EvictOutcome::Gone),
                        // A PodDisruptionBudget's answer, not throttling: never
                        // retried. The budget's name is in the causes.
                        Some(429) => Ok(EvictOutcome::Blocked(message_with_causes(&e))),
                        Some(500) if message(&e).contains("more than one PodDisruptionBudget") => {
                            Ok(EvictOutcome::Blocked(message(&e)))
                        }
                        _ => Err(classify(&what, &e)),
                    },
                }
            })
            .await?;
        if let EvictOutcome::Blocked(reason) = &outcome {
            info!(pod = %pod, reason = %reason, "did not evict pod {pod} due to PDB violation: {reason}");
        }
        Ok(outcome)
    }

    async fn delete_pod(
        &self,
        pod: &PodKey,
        grace_seconds: Option<i64>,
    ) -> Result<(), ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let what = format!("delete pod {pod}");
        let dp = DeleteParams {
            grace_period_seconds: grace_seconds
                .map(|g| u32::try_from(g.max(0)).unwrap_or(u32::MAX)),
            preconditions: uid_preconditions(pod),
            ..Default::default()
        };
        self.call(&what, || async {
            match api.delete(&pod.name, &dp).await {
                Ok(_) => Ok(()),
                // Gone already, or a different pod now has the name: nothing of ours to delete.
                Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
                Err(e) => Err(classify(&what, &e)),
            }
        })
        .await
    }

    async fn delete_node(&self, node: &str) -> Result<bool, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let what = format!("delete node/{node}");
        let dp = DeleteParams::default();
        self.call(&what, || async {
            match api.delete(node, &dp).await {
                Ok(_) => Ok(true),
                Err(e) if is_not_found(&e) => Ok(false),
                Err(e) => Err(classify(&what, &e)),
            }
        })
        .await
    }

    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        let now = Timestamp::now();
        let key = EventKey {
            kind: event.kind.clone(),
            namespace: event.namespace.clone(),
            name: event.name.clone(),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            message: event.message.clone(),
        };
        let previous = {
            let cache = self.events.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .get(&key)
                .filter(|r| r.first.elapsed() < EVENT_SERIES_WINDOW)
                .cloned()
        };
        // A repeat: count it on the first one's series.
        if let Some(mut recorded) = previous {
            recorded.count += 1;
            let api: Api<Event> = Api::namespaced(self.client.clone(), &recorded.namespace);
            let what = format!(
                "patch events.events.k8s.io {}/{}",
                recorded.namespace, recorded.name
            );
            let patch = json!({ "series": { "count": recorded.count, "lastObservedTime": MicroTime(now) } });
            let pp = PatchParams::default();
            let patched = self
                .call(&what, || async {
                    match api.patch(&recorded.name, &pp, &Patch::Merge(&patch)).await {
                        Ok(_) => Ok(true),
                        Err(e) if is_not_found(&e) => Ok(false),
                        Err(e) => Err(classify(&what, &e)),
                    }
                })
                .await?;
            if patched {
                self.remember_event(key, recorded);
                return Ok(());
            }
        }

        let namespace = match (event.kind.as_str(), &event.namespace) {
            (_, Some(ns)) if !ns.is_empty() => ns.clone(),
            // Events about cluster-scoped objects live in `default`, as the kubelet's do.
            _ => "default".to_owned(),
        };
        let uid = self.uid_of(event).await;
        let regarding = ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some(event.kind.clone()),
            name: Some(event.name.clone()),
            namespace: event
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty() && event.kind != "Node"),
            uid,
            ..Default::default()
        };
        let object = Event {
            metadata: ObjectMeta {
                // As client-go names them: the object's name and a unique-enough suffix.
                name: Some(format!(
                    "{}.{:x}",
                    truncate(&event.name, 200),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(CONTROLLER_NAME.to_owned()),
            reporting_instance: Some(truncate(&self.settings.reporting_instance, 128)),
            action: Some(truncate(&event.reason, 128)),
            reason: Some(truncate(&event.reason, 128)),
            note: Some(truncate(&event.message, EVENT_NOTE_MAX)),
            type_: Some(event.type_.clone()),
            regarding: Some(regarding),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let what = format!(
            "create events.events.k8s.io in {namespace} ({} {})",
            event.kind, event.name
        );
        let pp = PostParams::default();
        let created = self
            .call(&what, || async {
                api.create(&pp, &object)
                    .await
                    .map_err(|e| classify(&what, &e))
            })
            .await
            .inspect_err(|e| warn!(error = %e, reason = %event.reason, "could not record event"))?;
        if let Some(name) = created.metadata.name {
            self.remember_event(
                key,
                RecordedEvent {
                    namespace,
                    name,
                    count: 1,
                    first: Instant::now(),
                },
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noexecute_taints_carry_their_time() {
        let t = k8s_taint(&Taint::new("k", "", Effect::NoExecute));
        assert!(t.time_added.is_some());
        assert_eq!(t.value, None);
        let t = k8s_taint(&Taint::new("k", "v", Effect::NoSchedule));
        assert!(t.time_added.is_none());
        assert_eq!(t.value.as_deref(), Some("v"));
    }

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("aé", 2), "a");
    }
}
