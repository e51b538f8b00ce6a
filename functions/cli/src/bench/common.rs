//! What the benches of `nodewright bench scheduling` share: their
//! arguments, the solver's options and view of the pods they ask for, the
//! process's peak memory and the dump of one run's input and plan.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use nodewright::packing::{Plan, PoolInput, PreferencePolicy, SolveOptions, Strategy};
use nodewright::resources::Resources;
use nodewright::scheduling::{PodReader, SchedPod};
use serde_json::json;

#[derive(Args)]
pub struct SchedulingArgs {
    /// Number of pending pods.
    #[arg(long, default_value_t = 1000)]
    pub(crate) pods: usize,
    /// W1: karpenter (Karpenter's diverse mix, the default), generic, or preferences.
    /// W2 (with --catalog): shapes, web, arch, zonal, or mixed (the default).
    #[arg(long)]
    pub(crate) mix: Option<String>,
    /// Plan on this region's real catalog (the simulator's: us-east-1, us-west-2,
    /// eu-west-1, ap-south-1) with the W2 mixes, instead of W1's synthetic types.
    #[arg(long)]
    pub(crate) catalog: Option<String>,
    /// W2: the NodePool's capacity types (spot = spot and on-demand).
    #[arg(long, value_enum, default_value_t = CapacityArg::Spot)]
    pub(crate) capacity: CapacityArg,
    /// W2: the NodePool's requirements: walkthrough (c/m/r, 4-32 vCPU, nitro,
    /// generation > 2) or open (the whole catalog).
    #[arg(long, value_enum, default_value_t = RequirementsArg::Walkthrough)]
    pub(crate) requirements: RequirementsArg,
    /// Number of synthetic instance types.
    #[arg(long, default_value_t = 400)]
    pub(crate) instance_types: usize,
    /// Seed of the pod generator.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Solve this many times and report the median time.
    #[arg(long, default_value_t = 1)]
    pub(crate) runs: usize,
    /// How to plan: best (what the provisioner runs: the best plan of
    /// several of the others, as `Strategy::Best` says), guided (the fluid linear program's
    /// types), patterns (the whole-pod program's nodes), karpenter
    /// (Karpenter's algorithm: fewest-pods claim order, no price judgement)
    /// or standalone (no claim dearer than its pods on nodes of their own).
    #[arg(long, value_enum, default_value_t = StrategyArg::Best)]
    pub(crate) strategy: StrategyArg,
    /// Karpenter's preferencePolicy: respect (relax preferences one by one
    /// when a pod does not fit) or ignore (plan as if pods had none).
    #[arg(long, value_enum, default_value_t = Preferences::Respect)]
    pub(crate) preferences: Preferences,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write pods.json, instance-types.json and plan.json to this folder.
    #[arg(long)]
    pub(crate) dump: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Preferences {
    Respect,
    Ignore,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum StrategyArg {
    Best,
    Guided,
    Patterns,
    Karpenter,
    Standalone,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CapacityArg {
    /// Spot and on-demand.
    Spot,
    OnDemand,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum RequirementsArg {
    Walkthrough,
    Open,
}

/// Pods per page of the listing: the Kubernetes adapter's `limit`.
pub(crate) const PAGE: usize = 500;

/// The solver's view of the pods, read a page of `PAGE` Kubernetes pods at
/// a time, each page dropped as soon as it is read (a listing's pages as the API
/// serves them: the whole listing of 20,000 W1 pods would be ≈ 90 MB of
/// Kubernetes objects, two thirds of the old peak). Only the reading (and
/// the dropping) is timed, not the making of each page; the time is added
/// to `clock`.
pub(crate) fn sched_pods(
    k8s_pods: impl Iterator<Item = k8s_openapi::api::core::v1::Pod>,
    clock: &mut std::time::Duration,
) -> anyhow::Result<Vec<SchedPod>> {
    let mut k8s_pods = k8s_pods.peekable();
    // As many as the listing says it holds (the generator knows): the
    // vector does not grow by doubling, copying every pod read so far.
    let mut pods = Vec::with_capacity(k8s_pods.size_hint().0);
    let mut page = Vec::with_capacity(PAGE);
    // One reader for the whole listing, as the provisioner reads it.
    let mut reader = PodReader::new();
    while k8s_pods.peek().is_some() {
        page.extend(k8s_pods.by_ref().take(PAGE));
        let start = std::time::Instant::now();
        for p in &page {
            pods.push(reader.read(p)?);
        }
        // Dropped in place (moving each ~2 KB pod out of the page to drop
        // it was a copy per pod), within the clock as before.
        page.clear();
        *clock += start.elapsed();
    }
    let start = std::time::Instant::now();
    // Give back what a short hint left unused.
    pods.shrink_to_fit();
    *clock += start.elapsed();
    Ok(pods)
}

/// The solver options the flags ask for.
pub(crate) fn solve_options(args: &SchedulingArgs) -> SolveOptions {
    SolveOptions {
        strategy: match args.strategy {
            StrategyArg::Best => Strategy::Best,
            StrategyArg::Guided => Strategy::Guided,
            StrategyArg::Patterns => Strategy::Patterns,
            StrategyArg::Karpenter => Strategy::Karpenter,
            StrategyArg::Standalone => Strategy::Standalone,
        },
        preferences: match args.preferences {
            Preferences::Respect => PreferencePolicy::Respect,
            Preferences::Ignore => PreferencePolicy::Ignore,
        },
        ..SolveOptions::default()
    }
}

/// Peak resident set size of this process (Linux), in MB.
pub(crate) fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1000.0)
}

pub(crate) fn dump(
    dir: &std::path::Path,
    k8s_pods: &[nodewright::k8s::Pod],
    pool: &PoolInput,
    pods: &[SchedPod],
    plan: &Plan,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, value: serde_json::Value| -> anyhow::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(&value)?)
            .with_context(|| format!("writing {}", path.display()))
    };
    write(
        "pods.json",
        json!({"apiVersion": "v1", "kind": "List", "items": k8s_pods}),
    )?;
    let res = |r: &Resources| json!({"cpu": nodewright::resources::format_cpu(r.cpu_millis), "memory": nodewright::resources::format_bytes(r.memory_bytes), "pods": r.pods.to_string()});
    let types: Vec<_> = pool
        .instance_types()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "capacity": res(&t.capacity),
                "allocatable": res(t.allocatable()),
                "offerings": t.offerings.iter().map(|o| json!({"zone": o.zone, "capacity_type": o.capacity_type, "price": o.price})).collect::<Vec<_>>(),
            })
        })
        .collect();
    write("instance-types.json", json!(types))?;
    let claims: Vec<_> = plan
        .claims
        .iter()
        .map(|c| {
            let chosen = c.options.first();
            json!({
                "nodepool": c.pool,
                "instance_type": chosen.map(|o| o.instance_type.as_ref()),
                "zone": chosen.map(|o| o.zone.as_ref()),
                "capacity_type": chosen.map(|o| o.capacity_type.as_ref()),
                "price": chosen.map(|o| o.price),
                "instance_type_options": c.options.iter().map(|o| o.instance_type.as_ref()).collect::<Vec<_>>(),
                "requirements": c.requirements.to_string(),
                "pods": c.pods.iter().map(|i| pods[*i].pod.name.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let unschedulable: Vec<_> = plan
        .unschedulable
        .iter()
        .map(|(i, r)| json!({"pod": pods[*i].pod.name, "reason": r}))
        .collect();
    write(
        "plan.json",
        json!({"cost_per_hour": plan.cost_per_hour(), "claims": claims, "unschedulable": unschedulable}),
    )?;
    Ok(())
}
