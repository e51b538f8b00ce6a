//! `nodewright bench scheduling`: Karpenter's scheduling benchmark (W1),
//! solved by the same solver the provisioner runs, with the figures
//! Karpenter reports plus the plan's cost and, for the generic mix, its LP
//! lower bound.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use nodewright::config::NodePool;
use nodewright::packing::{Plan, PoolInput, PreferencePolicy, SolveOptions, Strategy, solve};
use nodewright::resources::Resources;
use nodewright::scheduling::SchedPod;
use nodewright::workload::lower_bound::{Candidate, lp_lower_bound};
use nodewright::workload::w1::{self, Mix};
use serde_json::json;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Solve Karpenter's scheduling benchmark workload (W1) and report speed and cost.
    Scheduling(SchedulingArgs),
    /// A seeded simulated day of Deployments scaling up and down: replacements, evictions and
    /// fleet $-hours with nodewright's defaults and with Karpenter's consolidation rules.
    Churn(crate::churn::ChurnArgs),
    /// One provisioner invocation facing a burst of pending pods: ticks, wall time, peak memory
    /// and store item sizes (the figures behind the function's memory size and timeout).
    Invocation(crate::invocation::InvocationArgs),
}

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
    #[arg(long, value_enum, default_value_t = crate::bench_w2::CapacityArg::Spot)]
    pub(crate) capacity: crate::bench_w2::CapacityArg,
    /// W2: the NodePool's requirements: walkthrough (c/m/r, 4-32 vCPU, nitro,
    /// generation > 2) or open (the whole catalog).
    #[arg(long, value_enum, default_value_t = crate::bench_w2::RequirementsArg::Walkthrough)]
    pub(crate) requirements: crate::bench_w2::RequirementsArg,
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

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Scheduling(args) => scheduling(&args),
        BenchCommand::Churn(args) => crate::churn::run(&args),
        BenchCommand::Invocation(args) => crate::invocation::run(&args),
    }
}

fn scheduling(args: &SchedulingArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    if let Some(region) = &args.catalog {
        return crate::bench_w2::run(args, region);
    }
    let mix: Mix = args
        .mix
        .as_deref()
        .unwrap_or("karpenter")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let types = w1::instance_types(args.instance_types);
    let pools = vec![PoolInput::new(NodePool::open("default"), types)];
    let options = solve_options(args);

    let mut times = Vec::with_capacity(args.runs);
    let mut result: Option<(Vec<SchedPod>, Plan)> = None;
    for _ in 0..args.runs {
        // Generated outside the clock; each Kubernetes pod is dropped as soon
        // as it is read, as a provisioner reading pages from the API would.
        drop(result.take()); // free the previous run before measuring the next
        let k8s_pods = w1::pods(args.pods, mix, args.seed);
        let start = Instant::now();
        let pods = sched_pods(k8s_pods)?;
        let plan = solve(&pods, &[], &pools, &[], &options);
        times.push(start.elapsed().as_secs_f64());
        result = Some((pods, plan));
    }
    let (pods, plan) = result.context("no run")?;
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];

    let lower_bound = (mix == Mix::Generic).then(|| {
        let mut total = Resources::default();
        for p in &pods {
            total.add(&p.requests);
        }
        let candidates: Vec<Candidate> = pools[0]
            .instance_types
            .iter()
            .filter_map(|t| {
                let price = t
                    .offerings
                    .iter()
                    .filter(|o| o.available)
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)?;
                Some(Candidate {
                    price,
                    allocatable: t.allocatable().clone(),
                })
            })
            .collect();
        lp_lower_bound(&total, &candidates)
    });
    let lower_bound = lower_bound.flatten();
    let cost = plan.cost_per_hour();
    let report = json!({
        "workload": "W1",
        "mix": format!("{mix:?}").to_lowercase(),
        "preferences": format!("{:?}", options.preferences).to_lowercase(),
        "instance_types": args.instance_types,
        "seed": args.seed,
        "runs": args.runs,
        "pods": pods.len(),
        "scheduled": plan.scheduled(),
        "unschedulable": plan.unschedulable.len(),
        "nodes": plan.claims.len(),
        "seconds": seconds,
        "seconds_min": times[0],
        "pods_per_second": pods.len() as f64 / seconds,
        "cost_per_hour": cost,
        "lower_bound_cost_per_hour": lower_bound,
        "cost_over_lower_bound": lower_bound.map(|b| cost / b),
        "peak_rss_mb": peak_rss_mb(),
    });
    if let Some(dir) = &args.dump {
        dump(
            dir,
            &w1::pods(args.pods, mix, args.seed),
            &pools[0],
            &pods,
            &plan,
        )?;
    }
    if args.json {
        println!("{report}");
    } else {
        print_text(&report);
        for (i, reason) in plan.unschedulable.iter().take(5) {
            println!("  unschedulable {}: {reason}", pods[*i].pod);
        }
    }
    Ok(())
}

/// The solver's view of the pods, each Kubernetes pod dropped as soon as it
/// is read (as a provisioner reading pages from the API would).
pub(crate) fn sched_pods(
    k8s_pods: Vec<k8s_openapi::api::core::v1::Pod>,
) -> anyhow::Result<Vec<SchedPod>> {
    let mut pods = k8s_pods
        .into_iter()
        .map(|p| SchedPod::from_pod(&p))
        .collect::<Result<Vec<_>, _>>()?;
    // The collect reuses the Kubernetes pods' buffer, several times larger
    // than the pods it now holds: give the rest back before solving.
    pods.shrink_to_fit();
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

fn print_text(r: &serde_json::Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "W1 {} mix, {} instance types, seed {}, preferences {}",
        r["mix"].as_str().unwrap_or(""),
        r["instance_types"],
        r["seed"],
        r["preferences"].as_str().unwrap_or("")
    );
    println!("pods              {}", r["pods"]);
    println!("pods scheduled    {}", r["scheduled"]);
    println!("nodes             {}", r["nodes"]);
    println!(
        "seconds           {:.3} (median of {})",
        f("seconds"),
        r["runs"]
    );
    println!("pods per second   {:.0}", f("pods_per_second"));
    println!("fleet $/hour      {:.2}", f("cost_per_hour"));
    if let Some(b) = r["lower_bound_cost_per_hour"].as_f64() {
        println!(
            "LP lower bound    {b:.2} $/hour (plan = {:.4} × bound)",
            f("cost_over_lower_bound")
        );
    }
    if let Some(m) = r["peak_rss_mb"].as_f64() {
        println!("peak RSS          {m:.0} MB");
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
        .instance_types
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
