//! The real adapters from the environment, as the functions and the CLI's
//! live commands (`nodewright status`) build them.
//!
//! Environment:
//! - `NODEWRIGHT_CLUSTER_NAME` (required): the EKS cluster.
//! - `NODEWRIGHT_TABLE_PREFIX` (default `nodewright`): tables `<prefix>-config`
//!   and `<prefix>-state`.
//! - `KUBECONFIG` (optional): reach the cluster through a kubeconfig instead
//!   of EKS authentication — for `cargo lambda watch` on a laptop;
//!   `NODEWRIGHT_KUBE_CONTEXT` picks a context other than the current one.
//! - `NODEWRIGHT_DEFAULT_INSTANCE_PROFILE` (optional): the instance profile
//!   for NodeClasses converted from a v1alpha5 `defaultInstanceProfile`.
//! - `NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION` (`true` or `false`, default
//!   `false`): the provisioner's invocation runs the disruption loop too
//!   (the Terraform module's default, which then schedules no disruption
//!   function).
//! - `NODEWRIGHT_END_WHEN_QUIET` (`true` or `false`, default `false`): the
//!   scheduled invocations end at their first quiet tick instead of ticking
//!   until their deadline (a fraction of the Lambda bill; pods that become
//!   pending while the cluster is quiet wait for the next invocation: the
//!   wake queue's, below, or the minute's schedule).
//! - `NODEWRIGHT_GAUGES` (`true` or `false`, default `true`): publish
//!   Karpenter's gauges as CloudWatch metrics (each a custom metric billed
//!   by the month).
//! - `NODEWRIGHT_WAKE_QUEUE_URL` (optional): the provisioner's wake queue.
//!   An invocation that ends early (quiet) or at its deadline asks for the
//!   next one there, `NODEWRIGHT_QUIET_WAKE_SECONDS` later (whole seconds,
//!   1 to 900, default 10) — at most one such message waits at a time.
//! - the AWS SDK's usual variables (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL`).

use std::path::PathBuf;

use tracing::info;

use crate::aws::dynamo::{DynamoStore, DynamoTables};
use crate::aws::ec2::{Ec2Cloud, Ec2CloudSettings};
use crate::aws::{ClientOptions, sdk_config};
use crate::kube::{ClientSettings, EksClusterInfo, EksTokenSource, KubeCluster};
use crate::model::SignedDuration;
use crate::ports::{CloudError, ClusterError, Ports, SystemClock};

/// Why the real adapters could not be built: the setting or the call at
/// fault, with what it said. Every one is fatal to the invocation (nothing
/// was read or written yet).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// An environment variable is missing or not what it must be.
    #[error("{variable} {reason}")]
    Env {
        variable: &'static str,
        reason: String,
    },
    /// The AWS SDK found no region.
    #[error("no AWS region: set AWS_REGION")]
    NoRegion,
    /// The AWS SDK found no credentials to sign EKS tokens with.
    #[error("no AWS credentials provider")]
    NoCredentials,
    /// The EC2 adapter refused its settings.
    #[error("{0}")]
    Cloud(#[source] CloudError),
    /// The cluster could not be reached or described (kubeconfig, EKS
    /// endpoint, certificate).
    #[error("{0}")]
    Cluster(#[source] ClusterError),
    /// `eks:DescribeCluster` failed.
    #[error("eks:DescribeCluster {cluster}: {detail}")]
    DescribeCluster { cluster: String, detail: String },
    /// `eks:DescribeCluster` answered without the cluster.
    #[error("EKS cluster {0} not found")]
    ClusterNotFound(String),
}

/// The adapters a deployed function runs on.
pub type LivePorts = Ports<Ec2Cloud, KubeCluster, DynamoStore, SystemClock>;

#[derive(Debug, Clone)]
pub struct FunctionEnv {
    pub cluster_name: String,
    pub tables: DynamoTables,
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig context other than its current one.
    pub kube_context: Option<String>,
    /// For NodeClasses that ask for the default instance profile.
    pub default_instance_profile: Option<String>,
    /// The provisioner runs the disruption loop in its own invocation.
    pub provisioner_runs_disruption: bool,
    /// The scheduled invocations end at their first quiet tick.
    pub end_when_quiet: bool,
    /// Karpenter's gauges are published.
    pub gauges: bool,
    /// The provisioner's wake queue, when it has one.
    pub wake_queue_url: Option<String>,
    /// How long after an invocation's end its wake message invokes the
    /// provisioner again.
    pub quiet_wake: SignedDuration,
}

/// `NODEWRIGHT_QUIET_WAKE_SECONDS` when unset: Cluster Autoscaler's scan
/// interval, and Karpenter's longest batch window.
pub const DEFAULT_QUIET_WAKE: SignedDuration = SignedDuration::from_secs(10);

impl FunctionEnv {
    pub fn from_env() -> Result<FunctionEnv, LiveError> {
        let cluster_name =
            std::env::var("NODEWRIGHT_CLUSTER_NAME").map_err(|_| LiveError::Env {
                variable: "NODEWRIGHT_CLUSTER_NAME",
                reason: "is not set: name the EKS cluster to manage".to_owned(),
            })?;
        let prefix =
            std::env::var("NODEWRIGHT_TABLE_PREFIX").unwrap_or_else(|_| "nodewright".to_owned());
        let kubeconfig = std::env::var_os("KUBECONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let kube_context = std::env::var("NODEWRIGHT_KUBE_CONTEXT")
            .ok()
            .filter(|c| !c.is_empty());
        let default_instance_profile = std::env::var("NODEWRIGHT_DEFAULT_INSTANCE_PROFILE")
            .ok()
            .filter(|p| !p.is_empty());
        let provisioner_runs_disruption = flag(
            "NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION",
            std::env::var("NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION").ok(),
        )?;
        let end_when_quiet = flag(
            "NODEWRIGHT_END_WHEN_QUIET",
            std::env::var("NODEWRIGHT_END_WHEN_QUIET").ok(),
        )?;
        // Unset: on, as every Karpenter install publishes its metrics.
        let gauges = match std::env::var("NODEWRIGHT_GAUGES").ok() {
            Some(v) if !v.trim().is_empty() => flag("NODEWRIGHT_GAUGES", Some(v))?,
            _ => true,
        };
        let wake_queue_url = std::env::var("NODEWRIGHT_WAKE_QUEUE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty());
        let quiet_wake = wake_seconds(std::env::var("NODEWRIGHT_QUIET_WAKE_SECONDS").ok())?;
        Ok(FunctionEnv {
            cluster_name,
            tables: DynamoTables::with_prefix(&prefix),
            kubeconfig,
            kube_context,
            default_instance_profile,
            provisioner_runs_disruption,
            end_when_quiet,
            gauges,
            wake_queue_url,
            quiet_wake,
        })
    }
}

/// `NODEWRIGHT_QUIET_WAKE_SECONDS`: whole seconds from 1 to 900 (SQS's
/// longest message delay); unset or empty, [`DEFAULT_QUIET_WAKE`].
fn wake_seconds(value: Option<String>) -> Result<SignedDuration, LiveError> {
    let refused = |reason: String| LiveError::Env {
        variable: "NODEWRIGHT_QUIET_WAKE_SECONDS",
        reason,
    };
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(DEFAULT_QUIET_WAKE),
        Some(v) => match v.parse::<i64>() {
            Ok(s @ 1..=900) => Ok(SignedDuration::from_secs(s)),
            Ok(s) => Err(refused(format!("must be from 1 to 900 seconds, not {s}"))),
            Err(_) => Err(refused(format!("must be whole seconds, not {v:?}"))),
        },
    }
}

/// A boolean variable: `true` or `false` (unset or empty: false); anything
/// else is refused rather than guessed at.
fn flag(name: &'static str, value: Option<String>) -> Result<bool, LiveError> {
    match value.as_deref().map(str::trim) {
        None | Some("") | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(LiveError::Env {
            variable: name,
            reason: format!("must be true or false, not {other:?}"),
        }),
    }
}

/// Builds the real adapters. Must run inside a Tokio runtime.
pub async fn connect(env: &FunctionEnv, function: &str) -> Result<LivePorts, LiveError> {
    connect_with(env, function, &ClientOptions::default()).await
}

/// [`connect`] with AWS client options (the CLI's `--region`).
pub async fn connect_with(
    env: &FunctionEnv,
    function: &str,
    options: &ClientOptions,
) -> Result<LivePorts, LiveError> {
    let sdk = sdk_config(options).await;
    let region = sdk
        .region()
        .map(|r| r.to_string())
        .ok_or(LiveError::NoRegion)?;
    let store = DynamoStore::new(&sdk, env.tables.clone());
    // NodeClasses are not read here: each launch carries the validated class
    // the provisioner read from the configuration that tick (live reload).
    let mut settings = Ec2CloudSettings::new(env.cluster_name.clone());
    settings.default_instance_profile = env.default_instance_profile.clone();
    let cloud = Ec2Cloud::new(&sdk, settings).map_err(LiveError::Cloud)?;
    let client_settings = ClientSettings {
        reporting_instance: function.to_owned(),
        ..Default::default()
    };
    let cluster = match &env.kubeconfig {
        Some(path) => {
            KubeCluster::from_kubeconfig(Some(path), env.kube_context.as_deref(), client_settings)
                .await
                .map_err(LiveError::Cluster)?
        }
        None => {
            let eks = aws_sdk_eks::Client::new(&sdk);
            let described = eks
                .describe_cluster()
                .name(&env.cluster_name)
                .send()
                .await
                .map_err(|e| LiveError::DescribeCluster {
                    cluster: env.cluster_name.clone(),
                    detail: aws_sdk_eks::error::DisplayErrorContext(e).to_string(),
                })?;
            let c = described
                .cluster()
                .ok_or_else(|| LiveError::ClusterNotFound(env.cluster_name.clone()))?;
            let info = EksClusterInfo::from_describe(
                &env.cluster_name,
                c.endpoint(),
                c.certificate_authority().and_then(|ca| ca.data()),
                c.version(),
            )
            .map_err(LiveError::Cluster)?;
            let credentials = sdk.credentials_provider().ok_or(LiveError::NoCredentials)?;
            let tokens =
                EksTokenSource::new(&env.cluster_name, region.clone(), credentials, SystemClock);
            info.connect(tokens, client_settings)
                .map_err(LiveError::Cluster)?
        }
    };
    info!(cluster = %env.cluster_name, %region, function, "adapters ready");
    Ok(Ports {
        cloud,
        cluster,
        store,
        clock: SystemClock,
    })
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_QUIET_WAKE, SignedDuration, flag, wake_seconds};

    #[test]
    fn the_quiet_wake_is_whole_seconds_within_what_sqs_delays() {
        assert_eq!(wake_seconds(None).unwrap(), DEFAULT_QUIET_WAKE);
        assert_eq!(wake_seconds(Some(" ".into())).unwrap(), DEFAULT_QUIET_WAKE);
        assert_eq!(
            wake_seconds(Some("15".into())).unwrap(),
            SignedDuration::from_secs(15)
        );
        for refused in ["0", "901", "-3", "1.5", "ten"] {
            let e = wake_seconds(Some(refused.into()))
                .expect_err(refused)
                .to_string();
            assert!(
                e.starts_with("NODEWRIGHT_QUIET_WAKE_SECONDS must be") && e.contains(refused),
                "{e}"
            );
        }
    }

    #[test]
    fn a_flag_is_true_false_or_refused() {
        assert!(matches!(flag("X", None), Ok(false)));
        assert!(matches!(flag("X", Some(String::new())), Ok(false)));
        assert!(matches!(flag("X", Some("false".into())), Ok(false)));
        assert!(matches!(flag("X", Some("true".into())), Ok(true)));
        let refused = flag("X", Some("yes".into()))
            .expect_err("not a boolean")
            .to_string();
        assert!(
            refused.contains("X must be true or false") && refused.contains("yes"),
            "{refused}"
        );
    }
}
