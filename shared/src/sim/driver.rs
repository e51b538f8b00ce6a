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

/// What a driver could not do: the step (`Deployment` for an object it
/// could not read, `scale default/inflate`, `set node x Ready`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {reason}")]
pub struct DriverError {
    pub op: String,
    pub reason: String,
}

impl DriverError {
    pub fn new(op: impl Into<String>, reason: impl Into<String>) -> Self {
        DriverError {
            op: op.into(),
            reason: reason.into(),
        }
    }
}

pub trait ClusterDriver: Clone + Send + Sync {
    /// What the handlers are given: the cluster as the functions see it.
    type Port: Cluster + Clone + std::fmt::Debug;
    fn port(&self) -> Self::Port;
    /// Adds or replaces a workload object (Deployment, DaemonSet, PDB, Pod).
    fn apply(
        &self,
        object: &serde_json::Value,
    ) -> impl Future<Output = Result<(), DriverError>> + Send;
    /// Sets a Deployment's replicas.
    fn scale(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
    ) -> impl Future<Output = Result<(), DriverError>> + Send;
    /// A booted instance's kubelet registers its Node (Ready).
    fn register_node(&self, node: Node) -> impl Future<Output = Result<(), DriverError>> + Send;
    /// One round of the controllers, the kubelets and kube-scheduler.
    fn reconcile(&self) -> impl Future<Output = Result<(), DriverError>> + Send;
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
    ) -> impl Future<Output = Result<(), DriverError>> + Send {
        let _ = ready;
        async move {
            Err(DriverError::new(
                format!("set node {node} Ready"),
                "this cluster cannot change a node's Ready condition",
            ))
        }
    }
    /// How long a volume takes to detach from now on (the attach/detach
    /// controller and CSI attacher the cluster plays). Not every driver
    /// plays them: the default says so.
    fn set_detach_time(
        &self,
        detach: SignedDuration,
    ) -> impl Future<Output = Result<(), DriverError>> + Send {
        let _ = detach;
        async {
            Err(DriverError::new(
                "set the detach time",
                "this cluster cannot set how long volumes take to detach",
            ))
        }
    }
}
