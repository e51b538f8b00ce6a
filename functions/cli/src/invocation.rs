//! `nodewright bench invocation --pods N`: one provisioner invocation facing
//! a burst of N pending pods, on the in-memory adapters and the embedded
//! us-east-1 catalog — the figures that choose the function's memory size
//! and show that a tick ends well inside the Lambda timeout.
//!
//! The burst: four Deployments of typical shapes (web 250m/512Mi, API
//! 1/2Gi, worker 2/4Gi, cache 500m/8Gi) whose replicas add up to N, and
//! `bench churn`'s NodePool (c/m/r, spot and on-demand, amd64); the pods
//! are created at once and marked unschedulable as kube-scheduler would. The provisioner then ticks as its
//! Lambda loop does (the clock moved to each tick's wake time) until its
//! batch window closed, it solved and it launched. Each tick's wall time
//! is measured, and the process's resident memory before the first tick
//! and at its peak (`VmRSS`, `VmHWM` of /proc/self/status, Linux only).
//! The in-memory cluster keeps its own copy of every pod (the API server's,
//! in production), so the peak overstates the function's memory by that
//! copy; the growth from before the first tick is the invocation's own.

use anyhow::Context;
use clap::Args;
use nodewright::handlers::provisioner::{Provisioner, ProvisionerSettings};
use nodewright::model::SignedDuration;
use nodewright::ports::{Clock, Cluster, Ports, Store};
use nodewright::sim::SimSettings;
use serde_json::json;

#[derive(Args)]
pub struct InvocationArgs {
    /// Pending pods in the burst.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The burst's Deployments: name, CPU, memory, share of the pods.
const SHAPES: [(&str, &str, &str, f64); 4] = [
    ("web", "250m", "512Mi", 0.4),
    ("api", "1", "2Gi", 0.3),
    ("worker", "2", "4Gi", 0.2),
    ("cache", "500m", "8Gi", 0.1),
];

/// The replicas of `SHAPES[shape]` in a burst of `pods`: each its share,
/// the last what is left.
pub(crate) fn replicas(pods: usize, shape: usize) -> usize {
    let mut left = pods;
    for (i, (_, _, _, share)) in SHAPES.iter().enumerate() {
        let replicas = if i + 1 == SHAPES.len() {
            left
        } else {
            ((pods as f64 * share).round() as usize).min(left)
        };
        if i == shape {
            return replicas;
        }
        left -= replicas;
    }
    0
}

/// The burst's NodePool, EC2NodeClass and Deployments.
pub(crate) fn objects(pods: usize) -> Vec<serde_json::Value> {
    let mut objects = crate::churn::pool_and_class();
    for (i, (name, cpu, memory, _)) in SHAPES.iter().enumerate() {
        let replicas = replicas(pods, i);
        objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}}));
    }
    objects
}

/// Resident and peak resident memory of this process, in bytes.
fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// One tick's figures.
struct Tick {
    seconds: f64,
    solved: bool,
    launched: usize,
}

pub fn run(args: &InvocationArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.pods >= 1, "--pods must be at least 1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(invocation(args))
}

async fn invocation(args: &InvocationArgs) -> anyhow::Result<()> {
    let (sim, cloud) =
        crate::bench::loaded_simulation("burst", objects(args.pods), SimSettings::default())
            .await?;
    let clock = sim.clock.clone();
    sim.cluster.reconcile(); // the ReplicaSet controller creates the pods
    sim.cluster.reconcile(); // kube-scheduler finds no node for them
    // What one listing of the pending pods holds (the function lists them
    // every tick): the RSS growth while a copy is alive.
    let unlisted = memory();
    let listing = sim.cluster.pending_pods().await?;
    let listed = memory();
    anyhow::ensure!(
        listing.len() == args.pods,
        "{} pods pending, {} expected",
        listing.len(),
        args.pods
    );
    drop(listing);

    let ports = Ports {
        cloud: cloud.clone(),
        cluster: sim.cluster.clone(),
        store: sim.store.clone(),
        clock: clock.clone(),
    };
    let mut provisioner =
        Provisioner::new(&ports, ProvisionerSettings::default(), "bench-invocation");
    let before = memory();
    let mut ticks = Vec::new();
    // The Lambda loop: tick, sleep until the tick's wake time; here the
    // clock jumps there. A burst closes its window within 10 s; a minute
    // of ticks is the invocation's whole deadline.
    for _ in 0..60 {
        let started = std::time::Instant::now();
        let report = provisioner.tick().await.context("a provisioner tick")?;
        ticks.push(Tick {
            seconds: started.elapsed().as_secs_f64(),
            solved: report.solved,
            launched: report.launched.len(),
        });
        if !report.launched.is_empty() {
            break;
        }
        let now = clock.now();
        let wake = report
            .wake_at
            .unwrap_or(now + SignedDuration::from_secs(1))
            .max(now + SignedDuration::from_millis(50));
        clock.advance(wake.duration_since(now));
    }
    let after = memory();
    anyhow::ensure!(
        ticks.iter().any(|t| t.launched > 0),
        "no launch within a minute of ticks"
    );

    let instances = cloud.all_instances();
    let dollars: f64 = instances.iter().map(|i| i.instance.price).sum();
    let spot = instances
        .iter()
        .filter(|i| i.instance.capacity_type == "spot")
        .count();
    let batch = ports
        .store
        .batch()
        .await?
        .map(|b| serde_json::to_string(&b).map(|j| j.len()))
        .transpose()?
        .unwrap_or(0);
    let claims = ports.store.claims().await?;
    let largest_claim = claims
        .iter()
        .map(|c| serde_json::to_string(c).map(|j| j.len()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    let solve = ticks
        .iter()
        .filter(|t| t.solved)
        .map(|t| t.seconds)
        .sum::<f64>();
    let total = ticks.iter().map(|t| t.seconds).sum::<f64>();
    let slowest = ticks.iter().map(|t| t.seconds).fold(0.0, f64::max);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let (rss_before, peak) = match (before, after) {
        (Some((rss, _)), Some((_, hwm))) => (Some(mib(rss)), Some(mib(hwm))),
        _ => (None, None),
    };
    let listing_mib = unlisted
        .zip(listed)
        .map(|((a, _), (b, _))| mib(b.saturating_sub(a)));
    if args.json {
        println!(
            "{}",
            json!({
                "pods": args.pods, "ticks": ticks.len(), "seconds": total, "slowest_tick_s": slowest, "solve_s": solve,
                "nodes": instances.len(), "spot_nodes": spot, "dollars_per_hour": dollars, "claims": claims.len(),
                "rss_before_mib": rss_before, "peak_rss_mib": peak, "one_listing_mib": listing_mib,
                "batch_record_bytes": batch, "largest_claim_bytes": largest_claim,
            })
        );
        return Ok(());
    }
    println!(
        "one provisioner invocation, {} pending pods (us-east-1 catalog, in-memory adapters)",
        args.pods
    );
    println!(
        "  ticks until launch: {} ({total:.3} s in all; slowest {slowest:.3} s; solving {solve:.3} s)",
        ticks.len()
    );
    println!(
        "  launched: {} nodes ({spot} spot), {dollars:.2} $/h, {} claims",
        instances.len(),
        claims.len()
    );
    match (rss_before, peak) {
        (Some(b), Some(p)) => println!(
            "  resident memory: {b:.1} MiB before the first tick (pods in the simulated API server included), {p:.1} MiB at the peak"
        ),
        _ => println!("  resident memory: not readable on this system (/proc/self/status)"),
    }
    if let Some(l) = listing_mib {
        println!("  one listing of the pending pods: {l:.1} MiB");
    }
    println!(
        "  store items: batch record {batch} B, largest claim {largest_claim} B (DynamoDB's limit: 400 KB)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_has_exactly_the_pods_asked_for() {
        for pods in [1, 7, 1000, 20_001] {
            let replicas: u64 = objects(pods)
                .iter()
                .filter_map(|o| o["spec"]["replicas"].as_u64())
                .sum();
            assert_eq!(replicas, pods as u64);
        }
    }

    #[test]
    fn a_small_burst_is_launched_for_in_one_invocation() {
        let args = InvocationArgs {
            pods: 60,
            json: true,
        };
        run(&args).expect("an invocation that launches");
    }
}
