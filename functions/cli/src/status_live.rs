//! `nodewright status`: the fleet view of `status.rs`, read live through the
//! same adapters the functions use — the cluster through the Kubernetes
//! adapter (a kubeconfig, or an EKS token signed from the AWS credentials),
//! claims, removals and the provisioner's reasons from the state table,
//! instances and prices from EC2. Reads only; changes nothing.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use nodewright::aws::ClientOptions;
use nodewright::live::{FunctionEnv, LivePorts};
use nodewright::model::Timestamp;
use nodewright::ports::{Cloud, Cluster, Store};

use crate::status::{FleetSnapshot, pod_name, render, scheduler_reason, to_json};
use crate::target::Target;

/// How a live command reaches the cluster, the tables and EC2 — the
/// functions' variables, with flags over them.
#[derive(Debug, Args)]
pub struct LiveArgs {
    #[command(flatten)]
    pub target: Target,
    /// A kubeconfig to reach the cluster with (default: an EKS token from
    /// the AWS credentials, as the functions do).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// A kubeconfig context other than its current one.
    #[arg(long, env = "NODEWRIGHT_KUBE_CONTEXT")]
    pub context: Option<String>,
}

impl LiveArgs {
    pub fn cluster_name(&self) -> anyhow::Result<String> {
        self.target
            .cluster_name
            .clone()
            .context("name the cluster: --cluster-name or NODEWRIGHT_CLUSTER_NAME")
    }

    /// The region the commands talk to: `--region`, else the SDK's variables.
    pub fn region(&self) -> Option<String> {
        self.target
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
    }

    /// The functions' adapters, built as they build them.
    pub async fn connect(&self, who: &str) -> anyhow::Result<LivePorts> {
        let env = FunctionEnv {
            cluster_name: self.cluster_name()?,
            tables: self.target.tables(),
            kubeconfig: self.kubeconfig.clone(),
            kube_context: self.context.clone(),
            default_instance_profile: None,
            provisioner_runs_disruption: false,
            end_when_quiet: false,
            gauges: false,
            wake_queue_url: None,
            quiet_wake: nodewright::live::DEFAULT_QUIET_WAKE,
        };
        let options = ClientOptions {
            region: self.target.region.clone(),
            ..Default::default()
        };
        nodewright::live::connect_with(&env, who, &options)
            .await
            .map_err(anyhow::Error::msg)
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub live: LiveArgs,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
    /// Refresh every SECONDS (5 when given alone) until interrupted.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "5")]
    pub watch: Option<u64>,
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let cluster_name = args.live.cluster_name()?;
        let ports = args.live.connect("nodewright-status").await?;
        loop {
            let snap = read(&ports).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&to_json(&snap))?);
            } else {
                if args.watch.is_some() {
                    // Clear the screen and go home, as `watch` does.
                    print!("\x1b[2J\x1b[H");
                }
                println!(
                    "{cluster_name} at {}",
                    snap.now.map(|t| t.to_string()).unwrap_or_default()
                );
                print!("{}", render(&snap));
            }
            let Some(every) = args.watch else {
                return Ok(());
            };
            tokio::time::sleep(Duration::from_secs(every.max(1))).await;
        }
    })
}

/// Everything the view shows, read once (the reads run concurrently).
pub async fn read(ports: &LivePorts) -> anyhow::Result<FleetSnapshot> {
    let (nodes, pending, scheduled) = tokio::try_join!(
        ports.cluster.nodes(),
        ports.cluster.pending_pods(),
        ports.cluster.scheduled_pods()
    )
    .context("reading the cluster")?;
    let (claims, commands, batch) = tokio::try_join!(
        ports.store.claims(),
        ports.store.commands(),
        ports.store.batch()
    )
    .context("reading the state table")?;
    // The catalog first: instances are priced from it.
    let catalog = ports
        .cloud
        .catalog()
        .await
        .context("reading the EC2 catalog")?;
    let instances = ports
        .cloud
        .instances()
        .await
        .context("reading EC2 instances")?;
    // The handovers from Karpenter need the pools, and the CapacityBuffers'
    // placement the configuration (as the provisioner would plan them now:
    // the dry run, only when some buffer is configured); a configuration
    // that cannot be read leaves those sections out, not the whole view.
    let config = match nodewright::handlers::config::load(&ports.store).await {
        Ok(config) => Some(config),
        Err(e) => {
            eprintln!(
                "note: the configuration could not be read ({e}); handovers and capacity buffers not shown"
            );
            None
        }
    };
    let handovers = config.as_ref().map_or_else(Vec::new, |config| {
        nodewright::disruption::handover::status(
            &config.pools,
            &nodes,
            &claims,
            &commands,
            Timestamp::now(),
        )
    });
    let buffers = match &config {
        Some(c) if !c.buffers.is_empty() => {
            nodewright::handlers::disruption::dry_run(
                ports,
                nodewright::disruption::Tuning::default(),
            )
            .await
            .context("placing the capacity buffers")?
            .buffers
        }
        _ => Vec::new(),
    };
    let mut pods = scheduled;
    pods.extend(pending);
    let mut snap = FleetSnapshot {
        buffers,
        now: Some(Timestamp::now()),
        nodes,
        instances,
        on_demand: crate::status::on_demand_prices(&catalog),
        claims,
        commands,
        handovers,
        ..Default::default()
    };
    // Why each pending pod waits: the provisioner's word (parked with a
    // reason, or nominated to a claim in flight), else the scheduler's.
    let batch = batch.unwrap_or_default();
    for p in pods.iter().filter(|p| crate::status::pod_node(p).is_none()) {
        let uid = p.metadata.uid.as_deref().unwrap_or_default();
        let hash = nodewright::model::batch::uid_hash(uid);
        let reason = batch
            .parked
            .get(uid)
            .map(|x| x.reason.clone())
            .or_else(|| {
                // Parked by hash (beyond the record's budget for reasons).
                batch
                    .parked_more
                    .iter()
                    .any(|g| g.pods.contains(&hash))
                    .then(|| {
                        "fits nowhere (the reason is in its FailedScheduling event)".to_owned()
                    })
            })
            .or_else(|| {
                snap.claims
                    .iter()
                    .find(|c| c.node_name.is_none() && c.pods.iter().any(|k| k.uid == uid))
                    .map(|c| format!("nominated to nodeclaim {} (not registered yet)", c.id))
            })
            .or_else(|| scheduler_reason(p));
        if let Some(r) = reason {
            snap.pending_reasons.insert(pod_name(p), r);
        }
    }
    snap.pods = pods;
    Ok(snap)
}
