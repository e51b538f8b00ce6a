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
use nodewright::config::Limits;
use nodewright::disruption::Tuning;
use nodewright::handlers::disruption::{DryRun, dry_run};
use nodewright::ports::{Cluster, ConfigItem, OfferingKey, Ports, Store, Timestamp};
use nodewright::provisioning::Claim;
use nodewright::sim::driver::ClusterDriver;
use nodewright::sim::{MemStore, SimClock, SimCloud, SimCluster, Simulation, catalog};
use nodewright::termination::Command;
use serde::{Deserialize, Serialize};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A snapshot file (`nodewright simulate SCENARIO --save-snapshot FILE`).
    #[arg(long, value_name = "FILE")]
    snapshot: PathBuf,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
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
        let until = now + nodewright::ports::SignedDuration::from_mins(3);
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
            unavailable: sim.store.unavailable_offerings(now).await?.into_iter().map(|o| (o, until)).collect(),
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
        store.put_config_item(&ConfigItem { version: 1, ..item.clone() }).await.context("loading a configuration item")?;
    }
    for claim in &snap.claims {
        store.create_claim(claim, &Limits::default()).await.with_context(|| format!("loading claim {}", claim.id))?;
    }
    for command in &snap.commands {
        let mut c = command.clone();
        c.version = 1;
        store.put_command(None, &c).await.with_context(|| format!("loading command {}", c.id))?;
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
        cluster.apply(&serde_json::to_value(d)?).map_err(anyhow::Error::msg)?;
    }
    let ports = Ports { cloud, cluster, store, clock };
    Ok(dry_run(&ports, Tuning::default()).await?)
}

pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.snapshot).with_context(|| format!("reading {}", args.snapshot.display()))?;
    let snap: PlanSnapshot =
        serde_json::from_str(&text).with_context(|| format!("{} is not a plan snapshot", args.snapshot.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let plan = runtime.block_on(plan_of(&snap))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan.render());
        let counts = plan.nodes.iter().fold(BTreeMap::<&str, usize>::new(), |mut m, n| {
            *m.entry(n.action.as_str()).or_default() += 1;
            m
        });
        let summary: Vec<String> = counts.iter().map(|(a, n)| format!("{a} {n}")).collect();
        println!("{} launch(es); nodes: {}", plan.launches.len(), summary.join(", "));
    }
    Ok(())
}
