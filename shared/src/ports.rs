//! The narrow traits the handlers need from the outside world.
//!
//! Each trait lists only the calls the handlers make. Every one has a real
//! implementation (EC2/DynamoDB in `aws/`, the Kubernetes API in `kube/`) and
//! an in-memory one in [`crate::sim`], held to the same semantics: the
//! scenario tests run against both.
//!
//! The traits use `impl Future + Send` so handlers stay generic (static
//! dispatch, no boxing) and their futures can run on a multi-threaded runtime.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use serde::{Deserialize, Serialize};

use crate::config::buffer::ScalableKind;
use crate::config::{ConfigItem, ConfigKind, ConfigWrite, Limits, NodeClass};
use crate::model::{
    Batch, Claim, CloudCatalog, Command, Instance, LaunchRequest, LaunchTemplate, Launched, Lease,
    OfferingKey, PodKey, ResolvedClass, ScalableWorkload, Timestamp, Usage,
};
use crate::scheduling::taints::Taint;

// ---------------------------------------------------------------- clock

/// Where handlers read the time. Decisions take `now` as an argument; only
/// handlers call this.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The machine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

// ---------------------------------------------------------------- cloud

/// What a failed call to a service (EC2, DynamoDB, SSM, …) was, as far as
/// a caller's decision goes: whether the same call can succeed later on
/// its own, and what an operator has to fix when it cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// Throttled (HTTP 429, a throttling or provisioned-throughput code):
    /// the same call succeeds a little later.
    Throttled,
    /// The service or the way to it failed (a 5xx, a timeout, a dropped
    /// connection): the same call may succeed a little later.
    Unavailable,
    /// Not allowed: credentials, an IAM policy, or a KMS key that refuses
    /// or is disabled (401/403, `AccessDenied`, `UnauthorizedOperation`,
    /// `KMS…`). Nothing changes until an operator fixes the grant.
    AccessDenied,
    /// Something the call names does not exist (a table, a parameter, a
    /// launch template).
    NotFound,
    /// The service refused the request itself (validation, a bad parameter).
    InvalidRequest,
}

impl FailureKind {
    /// The same call may succeed later without anyone changing anything.
    pub fn is_transient(self) -> bool {
        matches!(self, FailureKind::Throttled | FailureKind::Unavailable)
    }

    /// The short name logs and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Throttled => "throttled",
            FailureKind::Unavailable => "unavailable",
            FailureKind::AccessDenied => "access denied",
            FailureKind::NotFound => "not found",
            FailureKind::InvalidRequest => "invalid request",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call a service refused or failed: its kind, and what the service
/// said (operation, error code and message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ServiceError {
    /// The retry class: what a caller branches on.
    pub kind: FailureKind,
    /// The call that failed (`CreateFleet`, `TransactWriteItems`), when known.
    pub operation: Option<String>,
    /// The service's error code (`InsufficientInstanceCapacity`,
    /// `ConditionalCheckFailed`), when it gave one.
    pub code: Option<String>,
    /// The whole account as logs read it: operation, code and what the
    /// service said (with any context callers put in front).
    pub message: String,
}

impl ServiceError {
    /// A failure known only by its kind and text.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        ServiceError {
            kind,
            operation: None,
            code: None,
            message: message.into(),
        }
    }

    /// A failure of one call: `message` is what the service said, read as
    /// `<operation>: <code>: <message>` (the code left out when there is none).
    pub fn of_call(
        kind: FailureKind,
        operation: impl Into<String>,
        code: Option<String>,
        message: &str,
    ) -> Self {
        let operation = operation.into();
        let message = match &code {
            Some(code) => format!("{operation}: {code}: {message}"),
            None => format!("{operation}: {message}"),
        };
        ServiceError {
            kind,
            operation: Some(operation),
            code,
            message,
        }
    }

    /// The same failure, naming the call that failed (its message as it was).
    pub fn with_operation(self, operation: impl Into<String>) -> Self {
        ServiceError {
            operation: Some(operation.into()),
            ..self
        }
    }

    /// The same failure, naming the service's error code (its message as it was).
    pub fn with_code(self, code: Option<String>) -> Self {
        ServiceError { code, ..self }
    }

    /// The call that failed, when known.
    pub fn operation(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// The service's error code, when it gave one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

/// What the cloud port failed at. Each variant names what it was about
/// (the operation, or the object found wrong) apart from why, so a caller
/// can branch and a log can say which call on which object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// Every option failed for lack of capacity; each is worth avoiding for a while.
    #[error("insufficient capacity for all {} option(s): {message}", offerings.len())]
    InsufficientCapacity {
        offerings: Vec<OfferingKey>,
        message: String,
    },
    /// Not ready yet for a reason of our own (a catalog still loading):
    /// worth retrying later.
    #[error("transient cloud error: {op}: {reason}")]
    Transient {
        /// What we were doing (`catalog`, `DescribeCluster demo`).
        op: String,
        reason: String,
    },
    /// Bad input or configuration found before any call (a selector
    /// matching nothing, an unknown type): retrying cannot help.
    #[error("{object}: {reason}")]
    Invalid {
        /// What is wrong (`nodeclass default`, `SSM parameter /x`, `region`).
        object: String,
        reason: String,
    },
    /// The cloud refused or failed a call, classified.
    #[error("{0}")]
    Service(ServiceError),
}

impl CloudError {
    /// A [`CloudError::Transient`] of `op`.
    pub fn transient(op: impl Into<String>, reason: impl Into<String>) -> Self {
        CloudError::Transient {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// A [`CloudError::Invalid`] about `object`.
    pub fn invalid(object: impl Into<String>, reason: impl Into<String>) -> Self {
        CloudError::Invalid {
            object: object.into(),
            reason: reason.into(),
        }
    }

    pub fn is_retryable(&self) -> bool {
        match self {
            CloudError::Transient { .. } => true,
            CloudError::Service(e) => e.kind.is_transient(),
            CloudError::InsufficientCapacity { .. } | CloudError::Invalid { .. } => false,
        }
    }

    /// What kind of service failure this is, when the cloud reported one.
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            CloudError::Service(e) => Some(e.kind),
            _ => None,
        }
    }

    /// The same error with `context` before what it is about (its kind kept).
    pub fn context(self, context: &str) -> CloudError {
        match self {
            CloudError::Transient { op, reason } => CloudError::Transient {
                op: format!("{context}: {op}"),
                reason,
            },
            CloudError::Invalid { object, reason } => CloudError::Invalid {
                object: format!("{context}: {object}"),
                reason,
            },
            CloudError::Service(e) => CloudError::Service(ServiceError {
                message: format!("{context}: {}", e.message),
                ..e
            }),
            other @ CloudError::InsufficientCapacity { .. } => other,
        }
    }
}

/// EC2 as the handlers see it.
pub trait Cloud: Send + Sync {
    /// Instance types, zones and prices of the region (cached by the adapter).
    fn catalog(&self) -> impl Future<Output = Result<Arc<CloudCatalog>, CloudError>> + Send;
    /// Buys one instance for a claim. Idempotent per `client_token`.
    fn launch(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<Launched, CloudError>> + Send;
    /// Terminates those of the instances that are ours; unknown, already
    /// terminated and foreign ids are skipped (logged), not an error.
    fn terminate(
        &self,
        instance_ids: &[String],
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Our instances (ownership tag `nodewright.io/cluster=<cluster>`) that
    /// are not terminated; never another's (a node group's, a Karpenter's,
    /// another cluster's).
    fn instances(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send;
    /// Our launch templates (ownership tag `nodewright.io/cluster=<cluster>`);
    /// never another's. The default lists none: an adapter that makes no
    /// templates has nothing to clean up.
    fn launch_templates(
        &self,
    ) -> impl Future<Output = Result<Vec<LaunchTemplate>, CloudError>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Deletes one of our launch templates. `Ok(false)` when it is already
    /// gone or is not ours (then it is left alone, and logged): only a
    /// template carrying our ownership tag is ever deleted.
    fn delete_launch_template(
        &self,
        template: &LaunchTemplate,
    ) -> impl Future<Output = Result<bool, CloudError>> + Send {
        let _ = template;
        async { Ok(false) }
    }
    /// What a NodeClass resolves to now (AMIs, subnets, security groups),
    /// for drift. The default knows nothing (every list empty), which
    /// drift reads as "not compared": an adapter that does not resolve
    /// selectors never drifts a node on them.
    fn resolved_class(
        &self,
        class: &NodeClass,
    ) -> impl Future<Output = Result<ResolvedClass, CloudError>> + Send {
        let _ = class;
        async { Ok(ResolvedClass::default()) }
    }
    /// The active capacity reservations of the region (ours and those
    /// shared with us), with how many instances each can still take; the
    /// NodeClasses' selector terms pick among them
    /// ([`crate::provisioning::reservations::select`]). Asked only when a
    /// NodeClass has `capacityReservationSelectorTerms`, never cached
    /// across ticks. The default lists none.
    fn capacity_reservations(
        &self,
    ) -> impl Future<Output = Result<Vec<crate::cloud::CapacityReservation>, CloudError>> + Send
    {
        async { Ok(Vec::new()) }
    }
    /// The instances EC2 reports unhealthy now, account-wide (the caller
    /// keeps its own claims' and acts on no other): a failed or impaired
    /// instance, system or EBS status check, or a scheduled event
    /// (DescribeInstanceStatus; only running instances are checked). Asked
    /// at most once a minute ([`crate::interruption::health::POLL_EVERY`]).
    /// The default reports none.
    fn instance_health(
        &self,
    ) -> impl Future<Output = Result<Vec<crate::model::InstanceHealth>, CloudError>> + Send {
        async { Ok(Vec::new()) }
    }
}

/// A shared cloud is a cloud: adapters that hold caches (and so are not
/// `Clone`) can be shared between a simulation and its handlers.
impl<C: Cloud> Cloud for Arc<C> {
    fn catalog(&self) -> impl Future<Output = Result<Arc<CloudCatalog>, CloudError>> + Send {
        (**self).catalog()
    }
    fn launch(
        &self,
        request: &LaunchRequest,
    ) -> impl Future<Output = Result<Launched, CloudError>> + Send {
        (**self).launch(request)
    }
    fn terminate(
        &self,
        instance_ids: &[String],
    ) -> impl Future<Output = Result<(), CloudError>> + Send {
        (**self).terminate(instance_ids)
    }
    fn instances(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send {
        (**self).instances()
    }
    fn launch_templates(
        &self,
    ) -> impl Future<Output = Result<Vec<LaunchTemplate>, CloudError>> + Send {
        (**self).launch_templates()
    }
    fn delete_launch_template(
        &self,
        template: &LaunchTemplate,
    ) -> impl Future<Output = Result<bool, CloudError>> + Send {
        (**self).delete_launch_template(template)
    }
    fn resolved_class(
        &self,
        class: &NodeClass,
    ) -> impl Future<Output = Result<ResolvedClass, CloudError>> + Send {
        (**self).resolved_class(class)
    }
    fn capacity_reservations(
        &self,
    ) -> impl Future<Output = Result<Vec<crate::cloud::CapacityReservation>, CloudError>> + Send
    {
        (**self).capacity_reservations()
    }
    fn instance_health(
        &self,
    ) -> impl Future<Output = Result<Vec<crate::model::InstanceHealth>, CloudError>> + Send {
        (**self).instance_health()
    }
}

// ---------------------------------------------------------------- cluster

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindOutcome {
    Bound,
    /// The pod already has a node (kube-scheduler was first) or is being deleted.
    AlreadyBound,
    /// The pod no longer exists.
    Gone,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictOutcome {
    Evicted,
    /// 404/409: nothing left to evict.
    Gone,
    /// 429 (or the multi-PDB 500): a PodDisruptionBudget forbids it now.
    Blocked(String),
}

/// A Kubernetes Event a user sees in `kubectl describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterEvent {
    /// `Pod` or `Node`.
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    pub message: String,
}

/// What the cluster port failed at: every variant names the operation (the
/// verb and the object it acted on, as logs read it: `list pods`,
/// `patch node/a (add taint …)`) apart from what the API said, so a 403 in
/// the logs says which verb on which resource the RBAC lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The object the call names does not exist (404).
    #[error("not found: {op}: {reason}")]
    NotFound { op: String, reason: String },
    /// The object changed under the call (409), or kept changing.
    #[error("conflict: {op}: {reason}")]
    Conflict { op: String, reason: String },
    /// Not allowed: RBAC refused the verb (403), or the API did not accept
    /// our credentials (401: `unauthorized`, a token to fetch again).
    #[error(
        "forbidden: {op}: {}{reason}",
        if *unauthorized { "unauthorized (bad or expired credentials): " } else { "" }
    )]
    Forbidden {
        op: String,
        reason: String,
        unauthorized: bool,
    },
    /// Worth retrying: 408, 429, 5xx, the wire, an attempt with no answer.
    /// `gave_up` when our own retries ran out on it.
    #[error(
        "transient Kubernetes API error: {}{op}: {reason}",
        gave_up.as_ref().map(|g| format!("{g}: ")).unwrap_or_default()
    )]
    Transient {
        op: String,
        reason: String,
        gave_up: Option<GaveUp>,
    },
    /// Anything else (400, 422, a bad kubeconfig or endpoint): retrying
    /// cannot help.
    #[error("{op}: {reason}")]
    Other { op: String, reason: String },
}

/// How long a retried call kept trying before it gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaveUp {
    pub attempts: u32,
    pub elapsed_ms: u64,
}

impl std::fmt::Display for GaveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "gave up after {} attempt(s) in {} ms",
            self.attempts, self.elapsed_ms
        )
    }
}

impl ClusterError {
    /// A [`ClusterError::NotFound`] of `op`.
    pub fn not_found(op: impl Into<String>, reason: impl Into<String>) -> Self {
        ClusterError::NotFound {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// A [`ClusterError::Conflict`] of `op`.
    pub fn conflict(op: impl Into<String>, reason: impl Into<String>) -> Self {
        ClusterError::Conflict {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// A [`ClusterError::Forbidden`] of `op` (RBAC, not credentials).
    pub fn forbidden(op: impl Into<String>, reason: impl Into<String>) -> Self {
        ClusterError::Forbidden {
            op: op.into(),
            reason: reason.into(),
            unauthorized: false,
        }
    }

    /// A [`ClusterError::Transient`] of `op`, on its first attempt.
    pub fn transient(op: impl Into<String>, reason: impl Into<String>) -> Self {
        ClusterError::Transient {
            op: op.into(),
            reason: reason.into(),
            gave_up: None,
        }
    }

    /// A [`ClusterError::Other`] of `op`.
    pub fn other(op: impl Into<String>, reason: impl Into<String>) -> Self {
        ClusterError::Other {
            op: op.into(),
            reason: reason.into(),
        }
    }

    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClusterError::Transient { .. } | ClusterError::Conflict { .. }
        )
    }

    /// The operation that failed (`list pods`, `patch node/a (…)`).
    pub fn op(&self) -> &str {
        match self {
            ClusterError::NotFound { op, .. }
            | ClusterError::Conflict { op, .. }
            | ClusterError::Forbidden { op, .. }
            | ClusterError::Transient { op, .. }
            | ClusterError::Other { op, .. } => op,
        }
    }

    /// What the API (or the adapter) said.
    pub fn reason(&self) -> &str {
        match self {
            ClusterError::NotFound { reason, .. }
            | ClusterError::Conflict { reason, .. }
            | ClusterError::Forbidden { reason, .. }
            | ClusterError::Transient { reason, .. }
            | ClusterError::Other { reason, .. } => reason,
        }
    }
}

/// The Kubernetes API as the handlers see it.
pub trait Cluster: Send + Sync {
    /// Pods with no node yet (`spec.nodeName=`, phase Pending).
    fn pending_pods(&self) -> impl Future<Output = Result<Vec<Pod>, ClusterError>> + Send;
    /// Pods bound to a node that have not finished.
    fn scheduled_pods(&self) -> impl Future<Output = Result<Vec<Pod>, ClusterError>> + Send;
    /// Pods bound to `node` that have not finished (what a drain evicts).
    fn pods_on_node(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Vec<Pod>, ClusterError>> + Send;
    fn nodes(&self) -> impl Future<Output = Result<Vec<Node>, ClusterError>> + Send;
    fn daemon_sets(&self) -> impl Future<Output = Result<Vec<DaemonSet>, ClusterError>> + Send;
    /// The workload a CapacityBuffer's `scalableRef` names (its pod
    /// template and replicas); `None` when no such object exists.
    fn scalable_workload(
        &self,
        kind: ScalableKind,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ScalableWorkload>, ClusterError>> + Send;
    fn pod_disruption_budgets(
        &self,
    ) -> impl Future<Output = Result<Vec<PodDisruptionBudget>, ClusterError>> + Send;
    /// PersistentVolumeClaims of every namespace. The three volume listings
    /// are read only when a pod to place has a PVC-backed volume.
    fn persistent_volume_claims(
        &self,
    ) -> impl Future<Output = Result<Vec<PersistentVolumeClaim>, ClusterError>> + Send;
    fn persistent_volumes(
        &self,
    ) -> impl Future<Output = Result<Vec<PersistentVolume>, ClusterError>> + Send;
    fn storage_classes(
        &self,
    ) -> impl Future<Output = Result<Vec<StorageClass>, ClusterError>> + Send;
    /// Every node's CSINode (what each CSI driver registered there, with
    /// its volume attach limit), read with the volume listings.
    fn csi_nodes(&self) -> impl Future<Output = Result<Vec<CSINode>, ClusterError>> + Send;
    /// The VolumeAttachments of node `node` (`spec.nodeName`): volumes
    /// attached there, which a removal waits to see detach.
    fn volume_attachments(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Vec<VolumeAttachment>, ClusterError>> + Send;
    /// Binds a pending pod to a node (the Binding subresource).
    fn bind(
        &self,
        pod: &PodKey,
        node: &str,
    ) -> impl Future<Output = Result<BindOutcome, ClusterError>> + Send;
    /// Adds a taint unless the node already has one with that key and effect.
    fn add_taint(
        &self,
        node: &str,
        taint: &Taint,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Removes every taint with that key; a node without it is left alone.
    fn remove_taint(
        &self,
        node: &str,
        key: &str,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    fn cordon(&self, node: &str) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Sets these labels and annotations on the node (adding or replacing
    /// each key given; every other key is left as it is): a registered
    /// node gets the labels its kubelet could not set (its instance type's
    /// facts) and its NodePool's annotations. A missing node is `NotFound`.
    fn label_node(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Removes these labels from the node (a key it lacks is no error):
    /// a node whose capacity reservation ended loses its reservation
    /// labels. A missing node is `NotFound`.
    fn unlabel_node(
        &self,
        node: &str,
        keys: &[&str],
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Evicts through the Eviction API, so PodDisruptionBudgets are honoured.
    fn evict(
        &self,
        pod: &PodKey,
    ) -> impl Future<Output = Result<EvictOutcome, ClusterError>> + Send;
    fn delete_pod(
        &self,
        pod: &PodKey,
        grace_seconds: Option<i64>,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
    /// Deletes a Node; returns false when it did not exist.
    fn delete_node(&self, node: &str) -> impl Future<Output = Result<bool, ClusterError>> + Send;
    fn record_event(
        &self,
        event: &ClusterEvent,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
}

// ---------------------------------------------------------------- store

/// A state item (a claim or a removal command) that cannot be read back:
/// its key and why. Listings skip it; garbage collection and terminations
/// wait while one exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// What the store port failed at. Each variant names the item (its key:
/// `claim#<id>`, `command#<id>`, `nodepool#<name>`, `batch#provisioner`)
/// or the operation apart from why, so a caller can tell which write lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost: the item changed (or exists, or is gone).
    #[error("conditional write failed: {item}: {reason}")]
    Conflict { item: String, reason: String },
    /// Reserving a claim would take its NodePool past a limit.
    #[error("nodepool {pool}: limit {resource} would be exceeded")]
    LimitExceeded { pool: String, resource: String },
    /// Our own retries ran out (transactions that kept losing to
    /// concurrent ones): worth retrying later.
    #[error("transient store error: {op}: {reason}")]
    Transient {
        /// What we were doing (`creating nodeclaim default-x`).
        op: String,
        reason: String,
    },
    /// An item that cannot be read back (corrupt or from an incompatible
    /// version), or a write that breaks the store's rules.
    #[error("{item}: {reason}")]
    Invalid { item: String, reason: String },
    /// The database refused or failed a call, classified.
    #[error("{0}")]
    Service(ServiceError),
}

impl StoreError {
    /// A [`StoreError::Conflict`] on `item`.
    pub fn conflict(item: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Conflict {
            item: item.into(),
            reason: reason.into(),
        }
    }

    /// A [`StoreError::Transient`] of `op`.
    pub fn transient(op: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Transient {
            op: op.into(),
            reason: reason.into(),
        }
    }

    /// A [`StoreError::Invalid`] about `item`.
    pub fn invalid(item: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Invalid {
            item: item.into(),
            reason: reason.into(),
        }
    }

    /// Worth retrying as it is: the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Transient { .. } | StoreError::Conflict { .. } => true,
            StoreError::Service(e) => e.kind.is_transient(),
            StoreError::LimitExceeded { .. } | StoreError::Invalid { .. } => false,
        }
    }

    /// What kind of service failure this is, when the database reported one.
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            StoreError::Service(e) => Some(e.kind),
            _ => None,
        }
    }
}

/// What [`Store::state`] answers: the state items a tick reads, together.
#[derive(Debug, Clone, Default)]
pub struct StateRead {
    /// Every readable claim (as [`Store::claims`]).
    pub claims: Vec<Claim>,
    /// Reserved usage per pool (as [`Store::pool_usage`]).
    pub usage: BTreeMap<String, Usage>,
    /// Removal commands in progress (as [`Store::commands`]).
    pub commands: Vec<Command>,
    /// Offerings still marked unavailable (as [`Store::unavailable_offerings`]).
    pub unavailable: Vec<OfferingKey>,
}

/// DynamoDB as the handlers see it: the only state that outlives an invocation.
///
/// **Unreadable items are quarantined, never fatal.** A configuration item
/// whose body cannot be read is listed by `config_items` as
/// [`ConfigItem::unreadable`] (reported invalid beside the valid ones); a
/// claim or removal command that cannot be read is left out of `claims` and
/// `commands` (logged) and listed by `unreadable_state`.
pub trait Store: Send + Sync {
    fn config_items(&self) -> impl Future<Output = Result<Vec<ConfigItem>, StoreError>> + Send;
    /// A counter every configuration write moves: a reader that saw this
    /// number has seen every item as it is now (0 before the first write).
    /// One strongly consistent read, so each tick can afford it.
    fn config_version(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Writes `item` if the stored version is `item.version - 1` (absent for version 1).
    fn put_config_item(
        &self,
        item: &ConfigItem,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    fn delete_config_item(
        &self,
        kind: ConfigKind,
        name: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Applies every change and moves the version counter, or none of them:
    /// `Conflict` naming an item whose version is not the one expected.
    /// At most [`crate::config::MAX_CONFIG_WRITES`] changes.
    fn write_config(
        &self,
        writes: &[ConfigWrite],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every readable claim (unreadable ones are in `unreadable_state`).
    fn claims(&self) -> impl Future<Output = Result<Vec<Claim>, StoreError>> + Send;
    /// Claims and removal commands that cannot be read, as of the view
    /// `claims` and `commands` answer from. While any exists, garbage
    /// collection does nothing and no instance is terminated (fail closed):
    /// the missing claim may be the very one of an instance.
    fn unreadable_state(&self) -> impl Future<Output = Result<Vec<Unreadable>, StoreError>> + Send;
    /// Writes a new claim and adds its reservation to its pool's usage in one
    /// atomic step; refuses if the claim exists or a limit would be exceeded.
    fn create_claim(
        &self,
        claim: &Claim,
        limits: &Limits,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Replaces `previous` (same id, same version) by `next` (version + 1),
    /// moving the pool's usage by the change in reservation; a grown
    /// reservation is checked against `limits`.
    fn update_claim(
        &self,
        previous: &Claim,
        next: &Claim,
        limits: &Limits,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes a claim and releases its reservation atomically; deleting a
    /// claim that is already gone is not an error.
    fn delete_claim(&self, claim: &Claim) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Reserved usage per pool (sum of its claims' reservations).
    fn pool_usage(
        &self,
    ) -> impl Future<Output = Result<BTreeMap<String, Usage>, StoreError>> + Send;
    /// Claims, usage, removal commands and offerings unavailable at `now`,
    /// as of one read of the state: a tick that needs several of them asks
    /// once. The DynamoDB adapter answers from one state view, so this costs
    /// one `state#version` read where asking for each costs one per call
    /// (the provisioner's quiet tick read the marker twice, for claims and
    /// usage; a disruption decision three times). Adapters without such a
    /// view answer call by call.
    fn state(&self, now: Timestamp) -> impl Future<Output = Result<StateRead, StoreError>> + Send {
        async move {
            Ok(StateRead {
                claims: self.claims().await?,
                usage: self.pool_usage().await?,
                commands: self.commands().await?,
                unavailable: self.unavailable_offerings(now).await?,
            })
        }
    }

    fn batch(&self) -> impl Future<Output = Result<Option<Batch>, StoreError>> + Send;
    /// Writes `next` if the stored batch is `previous` (by version; `None` = absent).
    fn put_batch(
        &self,
        previous: Option<&Batch>,
        next: &Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes the batch if it is still `batch` (by version).
    fn delete_batch(&self, batch: &Batch) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Takes or renews the lease when it is free, expired, or already ours.
    fn acquire_lease(
        &self,
        lease: &Lease,
        now: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    fn release_lease(
        &self,
        name: &str,
        holder: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removal commands in progress (`command#<id>`, one per claim), readable ones.
    fn commands(&self) -> impl Future<Output = Result<Vec<Command>, StoreError>> + Send;
    /// Writes `next` if the stored command is `previous` (by version);
    /// `None` means it must not exist yet, so a node gets one command only.
    fn put_command(
        &self,
        previous: Option<&Command>,
        next: &Command,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes the command if it is still `command` (by version); a command
    /// that is already gone is not an error.
    fn delete_command(
        &self,
        command: &Command,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn mark_unavailable(
        &self,
        offering: &OfferingKey,
        until: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Offerings still marked unavailable at `now`.
    fn unavailable_offerings(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<OfferingKey>, StoreError>> + Send;
}

/// A command write keeps its id and moves one version up (1 when created),
/// in every adapter: a skipped or repeated version would let two writers
/// both believe they advanced it.
pub fn check_command_write(previous: Option<&Command>, next: &Command) -> Result<(), StoreError> {
    let expected = previous.map_or(1, |p| p.version + 1);
    if previous.is_some_and(|p| p.id != next.id) || next.version != expected {
        return Err(StoreError::invalid(
            format!("command#{}", next.id),
            format!(
                "a write must keep its id and have version {expected}, not {}",
                next.version
            ),
        ));
    }
    Ok(())
}

/// The adapters a handler works with, bundled.
#[derive(Debug, Clone)]
pub struct Ports<C, K, S, T> {
    pub cloud: C,
    pub cluster: K,
    pub store: S,
    pub clock: T,
}

/// Every adapter set a handler can run on.
pub trait PortSet: Send + Sync {
    type Cloud: Cloud;
    type Cluster: Cluster;
    type Store: Store;
    type Clock: Clock;
    fn cloud(&self) -> &Self::Cloud;
    fn cluster(&self) -> &Self::Cluster;
    fn store(&self) -> &Self::Store;
    fn clock(&self) -> &Self::Clock;
}

/// A borrowed port set is one too: a Lambda keeps its adapters for the
/// container's life and lends them to each invocation.
impl<P: PortSet> PortSet for &P {
    type Cloud = P::Cloud;
    type Cluster = P::Cluster;
    type Store = P::Store;
    type Clock = P::Clock;
    fn cloud(&self) -> &Self::Cloud {
        (**self).cloud()
    }
    fn cluster(&self) -> &Self::Cluster {
        (**self).cluster()
    }
    fn store(&self) -> &Self::Store {
        (**self).store()
    }
    fn clock(&self) -> &Self::Clock {
        (**self).clock()
    }
}

impl<C: Cloud, K: Cluster, S: Store, T: Clock> PortSet for Ports<C, K, S, T> {
    type Cloud = C;
    type Cluster = K;
    type Store = S;
    type Clock = T;
    fn cloud(&self) -> &C {
        &self.cloud
    }
    fn cluster(&self) -> &K {
        &self.cluster
    }
    fn store(&self) -> &S {
        &self.store
    }
    fn clock(&self) -> &T {
        &self.clock
    }
}
