//! The Kubernetes API adapter: [`KubeCluster`] implements
//! [`crate::ports::Cluster`] over a `kube::Client`, with the same semantics
//! as the in-memory [`crate::sim::cluster::SimCluster`].
//!
//! Built only with the crate feature `kube`; nothing outside this module
//! depends on it, so the decision modules compile without it.
//!
//! - [`connect`]: client construction in three modes — EKS (endpoint, CA and
//!   an STS-presigned bearer token, [`eks`]), a kubeconfig (local runs), or
//!   an explicit URL + CA file + static token (what the tests use). The
//!   client's built-in retry is always off.
//! - [`retry`]: our bounded retry policy (attempts, backoff, per-attempt
//!   timeout, overall deadline).
//! - [`errors`]: Kubernetes API errors → [`crate::ports::ClusterError`].
//! - [`cluster`]: the `Cluster` operations.
//! - [`import`]: Karpenter's configuration read from a cluster (`nodewright
//!   config import --from-cluster`).
//!
//! The permissions the adapter needs are in `infra/rbac/clusterrole.yaml`.

pub mod cluster;
pub mod connect;
pub mod eks;
pub mod errors;
pub mod import;
pub mod retry;

pub use cluster::KubeCluster;
pub use connect::{ClientSettings, Connection, Endpoint, StaticToken, TokenSource};
pub use eks::{EksClusterInfo, EksToken, EksTokenSource};
pub use retry::RetryPolicy;

/// The name we report as: Events' `reportingController`, field manager.
pub const CONTROLLER_NAME: &str = "nodewright";
