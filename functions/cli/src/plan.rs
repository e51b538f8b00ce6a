//! `nodewright plan --snapshot FILE [--json]`: the dry run. The provisioning
//! and disruption decisions on a saved snapshot (written by `nodewright
//! simulate … --save-snapshot FILE`), acted on in no way: the nodes it would
//! launch and for which pods, the nodes it would expire, replace for drift,
//! consolidate, repair or keep — each with its reason — and the fleet's
//! $/hour now and after.
//!
//! The snapshot is loaded into the in-memory adapters and read back
//! through the same ports the functions use, so the plan is exactly what
//! the disruption function's handler would decide on that state.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use nodewright::config::{ConfigItem, Limits};
use nodewright::disruption::Tuning;
use nodewright::handlers::disruption::{DryRun, dry_run};
use nodewright::model::{Claim, Command, OfferingKey, Timestamp};
use nodewright::ports::{Cluster, Ports, Store};
use nodewright::sim::driver::ClusterDriver;
use nodewright::sim::{MemStore, SimClock, SimCloud, SimCluster, Simulation, catalog};
use serde::{Deserialize, Serialize};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A snapshot file (`nodewright simulate SCENARIO --save-snapshot FILE`,
    /// or `nodewright plan --save-snapshot FILE`); without it, the live
    /// cluster (build with `--features aws`).
    #[arg(long, value_name = "FILE")]
    snapshot: Option<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Also write what was read from the live cluster as a snapshot, to ask
    /// "what would it do" offline later.
    #[cfg(feature = "aws")]
    #[arg(long, value_name = "FILE", conflicts_with = "snapshot")]
    save_snapshot: Option<PathBuf>,
    #[cfg(feature = "aws")]
    #[command(flatten)]
    live: crate::status_live::LiveArgs,
}

/// Everything the decisions read, as a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanSnapshot {
    pub now: Timestamp,
    /// The region whose simulated catalog (types, zones, prices) is used.
    pub region: String,
    /// The simulated cluster's Kubernetes version (which AMI classes resolve to).
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    pub config: Vec<ConfigItem>,
    pub claims: Vec<Claim>,
    #[serde(default)]
    pub commands: Vec<Command>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    #[serde(default)]
    pub pdbs: Vec<PodDisruptionBudget>,
    #[serde(default)]
    pub daemon_sets: Vec<DaemonSet>,
    /// Offerings out of capacity, and until when.
    #[serde(default)]
    pub unavailable: Vec<(OfferingKey, Timestamp)>,
}

impl PlanSnapshot {
    /// What a simulation holds now.
    pub async fn capture<C, S>(sim: &Simulation<C, S>, region: &str) -> anyhow::Result<PlanSnapshot>
    where
        C: nodewright::ports::Cloud + Clone,
        S: Store + Clone,
    {
        let now = sim.now();
        let port = sim.cluster.port();
        let until = now + nodewright::model::SignedDuration::from_mins(3);
        Ok(PlanSnapshot {
            now,
            region: region.to_owned(),
            kubernetes_version: sim.sim_cloud.as_ref().map(SimCloud::kubernetes_version),
            config: sim.store.config_items().await?,
            claims: sim.store.claims().await?,
            commands: sim.store.commands().await?,
            nodes: sim.cluster.all_nodes(),
            pods: sim.cluster.all_pods(),
            pdbs: port.pod_disruption_budgets().await?,
            daemon_sets: port.daemon_sets().await?,
            unavailable: sim
                .store
                .unavailable_offerings(now)
                .await?
                .into_iter()
                .map(|o| (o, until))
                .collect(),
        })
    }
}

/// Loads a snapshot into in-memory adapters and runs the dry run on them.
pub async fn plan_of(snap: &PlanSnapshot) -> anyhow::Result<DryRun> {
    let clock = SimClock::default();
    clock.set(snap.now);
    let cloud = SimCloud::new(catalog::catalog(&snap.region)?, clock.clone());
    if let Some(v) = &snap.kubernetes_version {
        cloud.set_kubernetes_version(v);
    }
    let store = MemStore::new();
    for item in &snap.config {
        store
            .put_config_item(&ConfigItem {
                version: 1,
                ..item.clone()
            })
            .await
            .context("loading a configuration item")?;
    }
    for claim in &snap.claims {
        store
            .create_claim(claim, &Limits::default())
            .await
            .with_context(|| format!("loading claim {}", claim.id))?;
    }
    for command in &snap.commands {
        let mut c = command.clone();
        c.version = 1;
        store
            .put_command(None, &c)
            .await
            .with_context(|| format!("loading command {}", c.id))?;
    }
    for (offering, until) in &snap.unavailable {
        store.mark_unavailable(offering, *until).await?;
    }
    let cluster = SimCluster::new(clock.clone());
    for n in &snap.nodes {
        cluster.add_node(n.clone());
    }
    for p in &snap.pods {
        cluster.restore_pod(p.clone());
    }
    for p in &snap.pdbs {
        cluster.restore_pdb(p.clone());
    }
    for d in &snap.daemon_sets {
        cluster
            .apply(&serde_json::to_value(d)?)
            .map_err(anyhow::Error::msg)?;
    }
    let ports = Ports {
        cloud,
        cluster,
        store,
        clock,
    };
    Ok(dry_run(&ports, Tuning::default()).await?)
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let plan = match &args.snapshot {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let snap: PlanSnapshot = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a plan snapshot", path.display()))?;
            runtime.block_on(plan_of(&snap))?
        }
        None => runtime.block_on(live_plan(&args))?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan.render());
        let counts = plan
            .nodes
            .iter()
            .fold(BTreeMap::<&str, usize>::new(), |mut m, n| {
                *m.entry(n.action.as_str()).or_default() += 1;
                m
            });
        let summary: Vec<String> = counts.iter().map(|(a, n)| format!("{a} {n}")).collect();
        println!(
            "{} launch(es); nodes: {}",
            plan.launches.len(),
            summary.join(", ")
        );
    }
    Ok(())
}

/// The dry run on the live cluster, through the functions' adapters.
#[cfg(feature = "aws")]
async fn live_plan(args: &PlanArgs) -> anyhow::Result<DryRun> {
    let ports = args.live.connect("nodewright-plan").await?;
    if let Some(path) = &args.save_snapshot {
        let snap =
            capture_live(&ports, args.live.region().as_deref().unwrap_or("us-east-1")).await?;
        std::fs::write(path, serde_json::to_string_pretty(&snap)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("snapshot written to {}", path.display());
    }
    Ok(dry_run(&ports, Tuning::default()).await?)
}

#[cfg(not(feature = "aws"))]
async fn live_plan(_: &PlanArgs) -> anyhow::Result<DryRun> {
    anyhow::bail!(
        "no --snapshot given: reading a live cluster needs the CLI built with `--features aws`"
    )
}

/// What the live cluster, the tables and EC2 hold now, as a snapshot. (The
/// offline plan prices it with the simulator's catalog for `region`.)
#[cfg(feature = "aws")]
async fn capture_live(
    ports: &nodewright::live::LivePorts,
    region: &str,
) -> anyhow::Result<PlanSnapshot> {
    let now = Timestamp::now();
    let mut pods = ports.cluster.scheduled_pods().await?;
    pods.extend(ports.cluster.pending_pods().await?);
    let until = now + nodewright::model::SignedDuration::from_mins(3);
    Ok(PlanSnapshot {
        now,
        region: region.to_owned(),
        kubernetes_version: None,
        config: ports.store.config_items().await?,
        claims: ports.store.claims().await?,
        commands: ports.store.commands().await?,
        nodes: ports.cluster.nodes().await?,
        pods,
        pdbs: ports.cluster.pod_disruption_budgets().await?,
        daemon_sets: ports.cluster.daemon_sets().await?,
        unavailable: ports
            .store
            .unavailable_offerings(now)
            .await?
            .into_iter()
            .map(|o| (o, until))
            .collect(),
    })
}
