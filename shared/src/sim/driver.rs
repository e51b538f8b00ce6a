//! What a simulation needs from its cluster beyond the [`Cluster`] port the
//! handlers use: to load workloads, register the nodes of booted
//! instances, run the cluster's own controllers, and look at the outcome.
//!
//! [`SimCluster`](super::SimCluster) is one; the tests drive a real
//! kube-apiserver through the same trait, so the provisioning scenarios
//! hold against both.

use std::future::Future;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::model::{SignedDuration, Timestamp};
use crate::ports::{Cluster, ClusterEvent};

pub trait ClusterDriver: Clone + Send + Sync {
    /// What the handlers are given: the cluster as the functions see it.
    type Port: Cluster + Clone + std::fmt::Debug;
    fn port(&self) -> Self::Port;
    /// Adds or replaces a workload object (Deployment, DaemonSet, PDB, Pod).
    fn apply(&self, object: &serde_json::Value) -> impl Future<Output = Result<(), String>> + Send;
    /// Sets a Deployment's replicas.
    fn scale(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// A booted instance's kubelet registers its Node (Ready).
    fn register_node(&self, node: Node) -> impl Future<Output = Result<(), String>> + Send;
    /// One round of the controllers, the kubelets and kube-scheduler.
    fn reconcile(&self) -> impl Future<Output = Result<(), String>> + Send;
    fn all_pods(&self) -> impl Future<Output = Vec<Pod>> + Send;
    fn all_nodes(&self) -> impl Future<Output = Vec<Node>> + Send;
    /// Every Kubernetes Event the handlers published, each repeat counted.
    fn events(&self) -> impl Future<Output = Vec<(Timestamp, ClusterEvent)>> + Send;
    /// A node's kubelet reports `Ready` True or False (from now). Not every
    /// driver can play a kubelet: the default says so.
    fn set_node_ready(
        &self,
        node: &str,
        ready: bool,
    ) -> impl Future<Output = Result<(), String>> + Send {
        let _ = (node, ready);
        async { Err("this cluster cannot change a node's Ready condition".to_owned()) }
    }
    /// How long a volume takes to detach from now on (the attach/detach
    /// controller and CSI attacher the cluster plays). Not every driver
    /// plays them: the default says so.
    fn set_detach_time(
        &self,
        detach: SignedDuration,
    ) -> impl Future<Output = Result<(), String>> + Send {
        let _ = detach;
        async { Err("this cluster cannot set how long volumes take to detach".to_owned()) }
    }
}
