//! Wiring for the Lambda functions: the real adapters from the environment,
//! logging, and one function per handler that the thin binaries call.
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
//! - the AWS SDK's usual variables (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL`).

use std::path::PathBuf;

use lambda_runtime::LambdaEvent;
use tracing::{error, info, warn};

use crate::aws::dynamo::{DynamoStore, DynamoTables};
use crate::aws::ec2::{Ec2Cloud, Ec2CloudSettings};
use crate::aws::{ClientOptions, sdk_config};
use crate::handlers::config::ConfigReader;
use crate::handlers::disruption::{Disruption, DisruptionSettings, Memory};
use crate::handlers::provisioner::{Provisioner, ProvisionerSettings};
use crate::handlers::interruption::{self as interruption_handler, InterruptionSettings, Record};
use crate::handlers::state_change;
use crate::handlers::config as config_loader;
use crate::kube::{ClientSettings, EksClusterInfo, EksTokenSource, KubeCluster};
use crate::ports::{Ports, SignedDuration, SystemClock, Timestamp};

/// The adapters a deployed function runs on.
pub type LivePorts = Ports<Ec2Cloud, KubeCluster, DynamoStore, SystemClock>;

/// The provisioner stops this long before its Lambda deadline.
pub const DEADLINE_MARGIN: SignedDuration = SignedDuration::from_secs(5);

#[derive(Debug, Clone)]
pub struct FunctionEnv {
    pub cluster_name: String,
    pub tables: DynamoTables,
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig context other than its current one.
    pub kube_context: Option<String>,
    /// For NodeClasses that ask for the default instance profile.
    pub default_instance_profile: Option<String>,
}

impl FunctionEnv {
    pub fn from_env() -> Result<FunctionEnv, String> {
        let cluster_name = std::env::var("NODEWRIGHT_CLUSTER_NAME")
            .map_err(|_| "NODEWRIGHT_CLUSTER_NAME is not set: name the EKS cluster to manage".to_owned())?;
        let prefix = std::env::var("NODEWRIGHT_TABLE_PREFIX").unwrap_or_else(|_| "nodewright".to_owned());
        let kubeconfig = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()).map(PathBuf::from);
        let kube_context = std::env::var("NODEWRIGHT_KUBE_CONTEXT").ok().filter(|c| !c.is_empty());
        let default_instance_profile = std::env::var("NODEWRIGHT_DEFAULT_INSTANCE_PROFILE").ok().filter(|p| !p.is_empty());
        Ok(FunctionEnv { cluster_name, tables: DynamoTables::with_prefix(&prefix), kubeconfig, kube_context, default_instance_profile })
    }
}

/// JSON logs inside Lambda (one object per line, for CloudWatch), text
/// elsewhere; `RUST_LOG` overrides the level. kube's own 5xx logging is
/// quieted: our retry layer reports what matters.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        builder.json().without_time().init();
    } else {
        builder.init();
    }
}

/// Builds the real adapters. Must run inside a Tokio runtime.
pub async fn connect(env: &FunctionEnv, function: &str) -> Result<LivePorts, String> {
    let sdk = sdk_config(&ClientOptions::default()).await;
    let region = sdk.region().map(|r| r.to_string()).ok_or("no AWS region: set AWS_REGION")?;
    let store = DynamoStore::new(&sdk, env.tables.clone());
    // NodeClasses are not read here: each launch carries the validated class
    // the provisioner read from the configuration that tick (live reload).
    let mut settings = Ec2CloudSettings::new(env.cluster_name.clone());
    settings.default_instance_profile = env.default_instance_profile.clone();
    let cloud = Ec2Cloud::new(&sdk, settings).map_err(|e| e.to_string())?;
    let client_settings = ClientSettings { reporting_instance: function.to_owned(), ..Default::default() };
    let cluster = match &env.kubeconfig {
        Some(path) => KubeCluster::from_kubeconfig(Some(path), env.kube_context.as_deref(), client_settings)
            .await
            .map_err(|e| e.to_string())?,
        None => {
            let eks = aws_sdk_eks::Client::new(&sdk);
            let described = eks
                .describe_cluster()
                .name(&env.cluster_name)
                .send()
                .await
                .map_err(|e| format!("eks:DescribeCluster {}: {}", env.cluster_name, aws_sdk_eks::error::DisplayErrorContext(e)))?;
            let c = described.cluster().ok_or_else(|| format!("EKS cluster {} not found", env.cluster_name))?;
            let info = EksClusterInfo::from_describe(
                &env.cluster_name,
                c.endpoint(),
                c.certificate_authority().and_then(|ca| ca.data()),
                c.version(),
            )
            .map_err(|e| e.to_string())?;
            let credentials = sdk.credentials_provider().ok_or("no AWS credentials provider")?;
            let tokens = EksTokenSource::new(&env.cluster_name, region.clone(), credentials, SystemClock);
            info.connect(tokens, client_settings).map_err(|e| e.to_string())?
        }
    };
    info!(cluster = %env.cluster_name, %region, function, "adapters ready");
    Ok(Ports { cloud, cluster, store, clock: SystemClock })
}

/// Assumed when the runtime gives no usable deadline (local emulators may
/// send none): the provisioner's deployed timeout.
pub const DEFAULT_INVOCATION: SignedDuration = SignedDuration::from_secs(60);

/// The Lambda deadline of an invocation.
fn deadline_of<T>(event: &LambdaEvent<T>) -> Timestamp {
    let now = Timestamp::now();
    match i64::try_from(event.context.deadline).ok().and_then(|ms| Timestamp::from_millisecond(ms).ok()) {
        Some(deadline) if deadline > now => deadline,
        _ => {
            warn!(deadline_ms = event.context.deadline, "the runtime gave no deadline ahead of now; assuming 60 s");
            now + DEFAULT_INVOCATION
        }
    }
}

/// The provisioner function: one scheduled invocation, ticking until its
/// deadline minus a margin, holding the provisioner lease.
pub async fn provisioner(ports: &LivePorts, event: LambdaEvent<serde_json::Value>) -> Result<serde_json::Value, lambda_runtime::Error> {
    let deadline = deadline_of(&event);
    let until = deadline - DEADLINE_MARGIN;
    let remaining = deadline.duration_since(Timestamp::now());
    if remaining < DEADLINE_MARGIN + SignedDuration::from_secs(5) {
        warn!(remaining_s = remaining.as_secs_f64(), "the invocation has under 10 s left: give the provisioner a 60-s timeout");
    }
    // One reader per container: a warm container re-reads only what changed.
    static CONFIG: std::sync::LazyLock<ConfigReader> = std::sync::LazyLock::new(ConfigReader::new);
    let mut p = Provisioner::new(ports, ProvisionerSettings::default(), event.context.request_id.clone())
        .with_config_reader(CONFIG.clone());
    let ticks = p
        .run_until(until, |d| tokio::time::sleep(d.unsigned_abs()))
        .await
        .map_err(|e| lambda_runtime::Error::from(e.to_string()))?;
    info!(ticks, remaining_at_start_s = remaining.as_secs_f64(), "provisioner invocation done");
    Ok(serde_json::json!({ "ticks": ticks }))
}

/// The disruption function: one scheduled invocation, ticking until its
/// deadline minus a margin, holding the disruption lease (another
/// invocation still running makes this one exit at once). What the
/// container remembers between invocations (when the next decision is
/// due, the reasons already logged) lives as long as the container.
pub async fn disruption(ports: &LivePorts, event: LambdaEvent<serde_json::Value>) -> Result<serde_json::Value, lambda_runtime::Error> {
    let deadline = deadline_of(&event);
    let until = deadline - DEADLINE_MARGIN;
    let remaining = deadline.duration_since(Timestamp::now());
    static CONFIG: std::sync::LazyLock<ConfigReader> = std::sync::LazyLock::new(ConfigReader::new);
    static MEMORY: std::sync::LazyLock<Memory> = std::sync::LazyLock::new(Memory::default);
    let mut d = Disruption::new(ports, DisruptionSettings::default(), event.context.request_id.clone())
        .with_config_reader(CONFIG.clone())
        .with_memory(MEMORY.clone());
    let ticks = d
        .run_until(until, |t| tokio::time::sleep(t.unsigned_abs()))
        .await
        .map_err(|e| lambda_runtime::Error::from(e.to_string()))?;
    info!(ticks, remaining_at_start_s = remaining.as_secs_f64(), "disruption invocation done");
    Ok(serde_json::json!({ "ticks": ticks }))
}

/// The state-change function: one EventBridge event. A malformed event is
/// logged and dropped (returning an error would only make EventBridge retry
/// it); a failure worth retrying is returned as an error.
pub async fn state_change(ports: &LivePorts, event: LambdaEvent<serde_json::Value>) -> Result<serde_json::Value, lambda_runtime::Error> {
    match state_change::handle(ports, &event.payload).await {
        Ok(outcome) => Ok(serde_json::json!({ "outcome": format!("{outcome:?}") })),
        Err(e) if e.is_retryable() => Err(lambda_runtime::Error::from(e.to_string())),
        Err(e) => {
            error!(error = %e, "dropping an event that can never be handled");
            Ok(serde_json::json!({ "dropped": e.to_string() }))
        }
    }
}

/// The interruption function: one SQS batch. Each message is handled (or
/// dropped when it can never be); only retryable failures are returned, in
/// the partial batch response. Then the invocation keeps driving every
/// removal in progress until none is left or its deadline nears, so a
/// 2-minute notice is worked through every few seconds.
pub async fn interruption(
    ports: &LivePorts,
    event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>,
) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, lambda_runtime::Error> {
    let deadline = deadline_of(&event);
    let records: Vec<Record> = event
        .payload
        .records
        .into_iter()
        .map(|m| Record { message_id: m.message_id.unwrap_or_default(), body: m.body.unwrap_or_default() })
        .collect();
    let options = InterruptionSettings::default();
    let mut response = aws_lambda_events::event::sqs::SqsBatchResponse::default();
    let config = match config_loader::load(&ports.store).await {
        Ok(c) => c,
        Err(e) => {
            // Nothing was handled: every message goes back.
            warn!(error = %e, "could not read the configuration; returning the batch");
            for r in &records {
                response.add_failure(r.message_id.clone());
            }
            return Ok(response);
        }
    };
    let settings = config.settings.clone();
    let report = interruption_handler::handle_batch(ports, &config, &settings, &options, &records)
        .await
        .map_err(|e| lambda_runtime::Error::from(e.to_string()))?;
    for id in &report.failures {
        response.add_failure(id.clone());
    }
    let passes = interruption_handler::drive_until(ports, &config, &options.launch, deadline - DEADLINE_MARGIN, |d| {
        tokio::time::sleep(d.unsigned_abs())
    })
    .await
    .unwrap_or_else(|e| {
        // The commands are stored; the provisioner's tick or the next message resumes them.
        warn!(error = %e, "stopped driving removals");
        0
    });
    info!(messages = records.len(), failures = report.failures.len(), passes, "interruption invocation done");
    Ok(response)
}
