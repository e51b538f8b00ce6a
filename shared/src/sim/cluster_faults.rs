//! Kubernetes API faults over any simulated cluster, as the functions would
//! meet them once the Kubernetes adapter's own retries are spent: requests
//! refused (429 Too Many Requests, 5xx) before they reach the API server,
//! and connections dropped after a write reached it — the write took
//! effect, the caller only saw an error.
//!
//! [`FaultyCluster`] wraps a [`ClusterDriver`]: the world (controllers,
//! kubelets, the soak's checks) goes to the inner cluster untouched; only
//! the port the handlers are given ([`FaultyClusterPort`]) fails.
//!
//! It can also make kube-scheduler race the handlers: the world's
//! controllers take a round before each bind of theirs goes through, as
//! the real kube-scheduler binds pods while a handler is between its list
//! and its writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::{
    apps::v1::DaemonSet, policy::v1::PodDisruptionBudget, storage::v1::StorageClass,
};

use super::Interleave;
use super::driver::ClusterDriver;
use crate::model::{PodKey, Timestamp};
use crate::ports::{BindOutcome, Cluster, ClusterError, ClusterEvent, EvictOutcome};
use crate::scheduling::taints::Taint;

#[derive(Debug, Default)]
struct Faults {
    /// Calls left to refuse before they reach the cluster.
    refuse: usize,
    /// Writes left whose response is lost after they took effect.
    drop_responses: usize,
    refused: usize,
    dropped: usize,
    /// The world takes a round before each bind of the handlers.
    race_binds: bool,
    /// Rounds so taken.
    raced: usize,
}

/// What one round of the world's controllers returns to await.
type Round = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One round of the world's controllers (the inner driver's `reconcile`).
#[derive(Clone)]
struct WorldRound(Arc<dyn Fn() -> Round + Send + Sync>);

impl std::fmt::Debug for WorldRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorldRound")
    }
}

/// A cluster whose handler-facing port can be made to fail.
#[derive(Debug, Clone)]
pub struct FaultyCluster<K> {
    inner: K,
    faults: Arc<Mutex<Faults>>,
    /// Told of every read of the handlers (see [`Interleave`]).
    interleave: Interleave,
}

/// The port of a [`FaultyCluster`]: the inner port behind the faults.
#[derive(Debug, Clone)]
pub struct FaultyClusterPort<P> {
    inner: P,
    faults: Arc<Mutex<Faults>>,
    world: WorldRound,
    interleave: Interleave,
}

fn lock(faults: &Mutex<Faults>) -> MutexGuard<'_, Faults> {
    faults.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: ClusterDriver> FaultyCluster<K> {
    pub fn new(inner: K) -> Self {
        FaultyCluster {
            inner,
            faults: Arc::default(),
            interleave: Interleave::default(),
        }
    }

    /// Reports every read of the handlers to `interleave` (shared with the
    /// store's decorator, another function's writes can run between any
    /// two reads).
    pub fn with_interleave(mut self, interleave: Interleave) -> Self {
        self.interleave = interleave;
        self
    }

    /// The cluster itself, without faults (what the world sees).
    pub fn inner(&self) -> &K {
        &self.inner
    }

    /// The next `n` calls of the handlers fail with a transient error and
    /// reach nothing, as a 429 or 503 the adapter gave up retrying would.
    pub fn refuse_next_calls(&self, n: usize) {
        lock(&self.faults).refuse = n;
    }

    /// The next `n` writes of the handlers (bind, taint, cordon, evict,
    /// delete, event) take effect, and their caller gets a transient error:
    /// the connection dropped before the response came back.
    pub fn drop_next_responses(&self, n: usize) {
        lock(&self.faults).drop_responses = n;
    }

    /// Whether the world's controllers (kube-scheduler among them) take a
    /// round before each bind of the handlers reaches the cluster: pods
    /// the handler listed as pending may be bound meanwhile, and a node it
    /// opened may be filled by the scheduler before its own binds land.
    pub fn race_binds(&self, on: bool) {
        lock(&self.faults).race_binds = on;
    }

    /// Rounds the world took racing the handlers' binds.
    pub fn raced(&self) -> usize {
        lock(&self.faults).raced
    }

    /// (Calls refused, write responses dropped) so far.
    pub fn injected(&self) -> (usize, usize) {
        let f = lock(&self.faults);
        (f.refused, f.dropped)
    }
}

impl<P: Cluster> FaultyClusterPort<P> {
    /// Refuses the call when a refusal is due.
    fn refuse(&self, what: &str) -> Result<(), ClusterError> {
        let mut f = lock(&self.faults);
        if f.refuse == 0 {
            return Ok(());
        }
        f.refuse -= 1;
        f.refused += 1;
        let status = if f.refused.is_multiple_of(2) {
            "429 Too Many Requests"
        } else {
            "503 Service Unavailable"
        };
        Err(ClusterError::transient(what, format!("injected: {status}")))
    }

    async fn read<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, ClusterError>>,
    ) -> Result<T, ClusterError> {
        self.refuse(what)?;
        let out = call.await;
        self.interleave.read_done(what).await;
        out
    }

    /// A write: refused, or carried out and then (maybe) its response lost.
    async fn write<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, ClusterError>>,
    ) -> Result<T, ClusterError> {
        self.refuse(what)?;
        let outcome = call.await?;
        let mut f = lock(&self.faults);
        if f.drop_responses > 0 {
            f.drop_responses -= 1;
            f.dropped += 1;
            return Err(ClusterError::transient(
                what,
                "injected: connection reset after the request was sent",
            ));
        }
        Ok(outcome)
    }
}

impl<P: Cluster> Cluster for FaultyClusterPort<P> {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        self.read("list pods (pending)", self.inner.pending_pods())
            .await
    }
    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        self.read("list pods (scheduled)", self.inner.scheduled_pods())
            .await
    }
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        self.read("list pods on a node", self.inner.pods_on_node(node))
            .await
    }
    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        self.read("list nodes", self.inner.nodes()).await
    }
    async fn daemon_sets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        self.read("list daemonsets", self.inner.daemon_sets()).await
    }
    async fn scalable_workload(
        &self,
        kind: crate::config::buffer::ScalableKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<crate::model::ScalableWorkload>, ClusterError> {
        self.read(
            "get a buffer's workload",
            self.inner.scalable_workload(kind, namespace, name),
        )
        .await
    }
    async fn pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        self.read(
            "list poddisruptionbudgets",
            self.inner.pod_disruption_budgets(),
        )
        .await
    }
    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        self.read(
            "list persistentvolumeclaims",
            self.inner.persistent_volume_claims(),
        )
        .await
    }
    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        self.read("list persistentvolumes", self.inner.persistent_volumes())
            .await
    }
    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        self.read("list storageclasses", self.inner.storage_classes())
            .await
    }
    async fn csi_nodes(&self) -> Result<Vec<k8s_openapi::api::storage::v1::CSINode>, ClusterError> {
        self.read("list csinodes", self.inner.csi_nodes()).await
    }
    async fn volume_attachments(
        &self,
        node: &str,
    ) -> Result<Vec<k8s_openapi::api::storage::v1::VolumeAttachment>, ClusterError> {
        self.read(
            "list volumeattachments",
            self.inner.volume_attachments(node),
        )
        .await
    }
    async fn bind(&self, pod: &PodKey, node: &str) -> Result<BindOutcome, ClusterError> {
        let race = {
            let mut f = lock(&self.faults);
            f.raced += usize::from(f.race_binds);
            f.race_binds
        };
        if race {
            (self.world.0)().await;
        }
        self.write("bind a pod", self.inner.bind(pod, node)).await
    }
    async fn add_taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        self.write("taint a node", self.inner.add_taint(node, taint))
            .await
    }
    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError> {
        self.write("untaint a node", self.inner.remove_taint(node, key))
            .await
    }
    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        self.write("cordon a node", self.inner.cordon(node)).await
    }
    async fn label_node(
        &self,
        node: &str,
        labels: &std::collections::BTreeMap<String, String>,
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        self.write(
            "label a node",
            self.inner.label_node(node, labels, annotations),
        )
        .await
    }
    async fn unlabel_node(&self, node: &str, keys: &[&str]) -> Result<(), ClusterError> {
        self.write("unlabel a node", self.inner.unlabel_node(node, keys))
            .await
    }
    async fn evict(&self, pod: &PodKey) -> Result<EvictOutcome, ClusterError> {
        self.write("evict a pod", self.inner.evict(pod)).await
    }
    async fn delete_pod(
        &self,
        pod: &PodKey,
        grace_seconds: Option<i64>,
    ) -> Result<(), ClusterError> {
        self.write("delete a pod", self.inner.delete_pod(pod, grace_seconds))
            .await
    }
    async fn delete_node(&self, node: &str) -> Result<bool, ClusterError> {
        self.write("delete a node", self.inner.delete_node(node))
            .await
    }
    async fn record_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        self.write("record an event", self.inner.record_event(event))
            .await
    }
}

impl<K: ClusterDriver + 'static> ClusterDriver for FaultyCluster<K> {
    type Port = FaultyClusterPort<K::Port>;

    fn port(&self) -> Self::Port {
        let world = self.inner.clone();
        FaultyClusterPort {
            inner: self.inner.port(),
            faults: Arc::clone(&self.faults),
            interleave: self.interleave.clone(),
            world: WorldRound(Arc::new(move || {
                let world = world.clone();
                Box::pin(async move {
                    // The world's own failures are not the handler's.
                    let _ = world.reconcile().await;
                })
            })),
        }
    }
    async fn apply(&self, object: &serde_json::Value) -> Result<(), crate::sim::DriverError> {
        self.inner.apply(object).await
    }
    async fn scale(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
    ) -> Result<(), crate::sim::DriverError> {
        self.inner.scale(namespace, name, replicas).await
    }
    async fn register_node(&self, node: Node) -> Result<(), crate::sim::DriverError> {
        self.inner.register_node(node).await
    }
    async fn reconcile(&self) -> Result<(), crate::sim::DriverError> {
        self.inner.reconcile().await
    }
    async fn all_pods(&self) -> Vec<Pod> {
        self.inner.all_pods().await
    }
    async fn all_nodes(&self) -> Vec<Node> {
        self.inner.all_nodes().await
    }
    async fn events(&self) -> Vec<(Timestamp, ClusterEvent)> {
        self.inner.events().await
    }
    async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), crate::sim::DriverError> {
        self.inner.set_node_ready(node, ready).await
    }
    async fn set_detach_time(
        &self,
        detach: crate::model::SignedDuration,
    ) -> Result<(), crate::sim::DriverError> {
        self.inner.set_detach_time(detach).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimClock, SimCluster};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("a node")
    }

    #[test]
    fn refused_calls_reach_nothing_and_the_world_is_untouched() {
        block_on(async {
            let cluster = FaultyCluster::new(SimCluster::new(SimClock::default()));
            cluster.inner().add_node(node("a"));
            let port = cluster.port();
            cluster.refuse_next_calls(2);
            let e = port.delete_node("a").await.expect_err("refused");
            assert!(e.is_retryable(), "{e}");
            assert_eq!(
                cluster.all_nodes().await.len(),
                1,
                "a refused delete deletes nothing"
            );
            assert!(
                port.nodes().await.is_err(),
                "the second call is refused too"
            );
            // The world's own view never fails.
            assert_eq!(cluster.all_nodes().await.len(), 1);
            assert_eq!(
                port.nodes()
                    .await
                    .expect("the third call goes through")
                    .len(),
                1
            );
            assert_eq!(cluster.injected(), (2, 0));
        });
    }

    #[test]
    fn a_dropped_response_still_took_effect_and_reads_are_not_dropped() {
        block_on(async {
            let cluster = FaultyCluster::new(SimCluster::new(SimClock::default()));
            cluster.inner().add_node(node("a"));
            cluster.inner().add_node(node("b"));
            let port = cluster.port();
            cluster.drop_next_responses(1);
            assert_eq!(port.nodes().await.expect("reads pass").len(), 2);
            let e = port
                .delete_node("a")
                .await
                .expect_err("the response was lost");
            assert!(e.is_retryable(), "{e}");
            assert_eq!(cluster.all_nodes().await.len(), 1, "the delete happened");
            assert!(
                !port.delete_node("a").await.expect("answered"),
                "asked again: already gone"
            );
            assert!(port.delete_node("b").await.expect("answered"));
            assert_eq!(cluster.injected(), (0, 1));
        });
    }
}
