//! `nodewright bench churn [--seed S | --seeds 1-8] [--hours H]`: a seeded simulated day
//! of Deployments scaling up and down, run twice on the embedded
//! simulator — with nodewright's defaults, and as a stand-in for Karpenter
//! (savings threshold 0, spot-to-spot consolidation on with Karpenter's
//! 15-type rule, no `Balanced` scoring) — reporting replacements, pods
//! evicted and the fleet's $-hours for each.
//!
//! The workload: eight Deployments with seeded requests (250m–2 CPU,
//! 512Mi–4Gi), each following a daily sine with its own phase and ±20 %
//! noise, re-scaled every 15 simulated minutes; one NodePool (spot and
//! on-demand, c/m/r families, WhenEmptyOrUnderutilized, consolidateAfter
//! 0s as Karpenter v1's default, default budget).

use clap::Args;
use nodewright::model::{InstanceState, SignedDuration};
use nodewright::sim::SimSettings;
use nodewright::sim::rng::Rng;
use serde_json::json;

#[derive(Args)]
pub struct ChurnArgs {
    /// Seed of the workload.
    #[arg(long, default_value_t = 7, conflicts_with = "seeds")]
    seed: u64,
    /// Several seeds (`1,2,3` or `1-8`), run on parallel threads, each
    /// reported and then all of them summed: one seed's day is chaotic
    /// (a different choice early changes the rest of the day), the sum is
    /// the figure to judge by.
    #[arg(long, value_parser = parse_seeds)]
    seeds: Option<Seeds>,
    /// Simulated hours.
    #[arg(long, default_value_t = 24)]
    hours: i64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

struct Workload {
    name: String,
    base: f64,
    phase: f64,
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Figures {
    replacements: usize,
    removals: usize,
    evicted: usize,
    dollar_hours: f64,
    launches: usize,
}

/// The benchmarks' NodePool `default` (c/m/r, spot and on-demand, amd64,
/// Karpenter v1's default disruption) and its EC2NodeClass.
pub(crate) fn pool_and_class() -> Vec<serde_json::Value> {
    vec![
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                ]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}}}),
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}}),
    ]
}

fn objects(rng: &mut Rng, karpenter_like: bool) -> (Vec<serde_json::Value>, Vec<Workload>) {
    let mut objects = pool_and_class();
    if karpenter_like {
        objects
            .push(json!({"apiVersion": "nodewright.io/v1alpha1", "kind": "Settings", "metadata": {"name": "default"}, "spec": {
            "consolidationSavingsThreshold": "0%", "featureGates": {"spotToSpotConsolidation": true}}}));
    }
    let mut workloads = Vec::new();
    for i in 0..8 {
        let name = format!("app-{i}");
        let cpu = *rng.pick(&["250m", "500m", "1", "2"]);
        let memory = *rng.pick(&["512Mi", "1Gi", "2Gi", "4Gi"]);
        let base = 3.0 + rng.unit() * 9.0;
        let phase = rng.unit() * std::f64::consts::TAU;
        objects.push(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": {
            "replicas": base.round() as i32, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}}),
        );
        workloads.push(Workload { name, base, phase });
    }
    (objects, workloads)
}

/// Replicas of `w` at `minute`: a daily sine (±60 %) with ±20 % noise.
fn replicas(w: &Workload, minute: i64, rng: &mut Rng) -> i32 {
    let day = minute as f64 / (24.0 * 60.0) * std::f64::consts::TAU;
    let level = w.base * (1.0 + 0.6 * (day + w.phase).sin()) * (0.8 + 0.4 * rng.unit());
    level.round().max(0.0) as i32
}

async fn run_one(seed: u64, hours: i64, karpenter_like: bool) -> anyhow::Result<Figures> {
    let mut rng = Rng::new(seed);
    let (objects, workloads) = objects(&mut rng, karpenter_like);
    let mut settings = SimSettings::default();
    if karpenter_like {
        settings.disruption.tuning.balanced = false;
    }
    let (mut sim, cloud) = crate::bench::loaded_simulation("churn", objects, settings).await?;
    // The workload is re-drawn every 15 minutes; the fleet's cost sampled every minute.
    let mut noise = Rng::new(seed ^ 0x5eed);
    let mut dollar_hours = 0.0;
    for minute in 0..hours * 60 {
        if minute % 15 == 0 && minute > 0 {
            for w in &workloads {
                let n = replicas(w, minute, &mut noise);
                sim.cluster
                    .scale("default", &w.name, n)
                    .map_err(anyhow::Error::msg)?;
            }
        }
        sim.run_for(SignedDuration::from_mins(1)).await;
        let live: f64 = cloud
            .all_instances()
            .iter()
            .filter(|i| i.instance.state != InstanceState::Terminated)
            .map(|i| i.instance.price)
            .sum();
        dollar_hours += live / 60.0;
    }
    let evicted = sim
        .cluster
        .events()
        .iter()
        .filter(|(_, e)| e.reason == "Evicted")
        .count();
    Ok(Figures {
        replacements: sim.replacements.len(),
        removals: sim.removed_nodes.len(),
        evicted,
        dollar_hours,
        launches: cloud.launches(),
    })
}

/// The seeds of `--seeds`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeds(Vec<u64>);

fn parse_seeds(text: &str) -> Result<Seeds, String> {
    let mut seeds = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let number = |n: &str| {
            n.trim()
                .parse::<u64>()
                .map_err(|_| format!("{n:?} is not a seed"))
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if hi < lo || hi - lo >= 1000 {
                    return Err(format!("{part:?}: a range of 1 to 1000 seeds, low to high"));
                }
                seeds.extend(lo..=hi);
            }
            None => seeds.push(number(part)?),
        }
    }
    if seeds.is_empty() {
        return Err("no seed given".to_owned());
    }
    Ok(Seeds(seeds))
}

/// Both runs of one seed.
#[derive(Debug, Clone, Copy)]
struct Pair {
    seed: u64,
    ours: Figures,
    theirs: Figures,
}

fn compare(evicted: (usize, usize), dollar_hours: (f64, f64)) -> (f64, f64) {
    let fewer = if evicted.1 == 0 {
        0.0
    } else {
        1.0 - evicted.0 as f64 / evicted.1 as f64
    };
    let dearer = if dollar_hours.1 == 0.0 {
        0.0
    } else {
        dollar_hours.0 / dollar_hours.1 - 1.0
    };
    (fewer, dearer)
}

fn run_pair(seed: u64, hours: i64) -> anyhow::Result<Pair> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ours = runtime.block_on(run_one(seed, hours, false))?;
    let theirs = runtime.block_on(run_one(seed, hours, true))?;
    Ok(Pair { seed, ours, theirs })
}

/// Every seed's pair, `threads` seeds at a time, in seed order.
fn run_all(seeds: &[u64], hours: i64, threads: usize) -> anyhow::Result<Vec<Pair>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, seeds.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(seed) = seeds.get(i) else { break };
                    let pair = run_pair(*seed, hours);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((i, pair));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, pair)| pair).collect()
}

pub fn run(args: &ChurnArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.hours >= 1, "--hours must be at least 1");
    let seeds = args.seeds.clone().map_or_else(|| vec![args.seed], |s| s.0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let pairs = run_all(&seeds, args.hours, threads)?;
    let wall = started.elapsed().as_secs_f64();
    let total = |pick: fn(&Pair) -> Figures| Figures {
        replacements: pairs.iter().map(|p| pick(p).replacements).sum(),
        removals: pairs.iter().map(|p| pick(p).removals).sum(),
        evicted: pairs.iter().map(|p| pick(p).evicted).sum(),
        dollar_hours: pairs.iter().map(|p| pick(p).dollar_hours).sum(),
        launches: pairs.iter().map(|p| pick(p).launches).sum(),
    };
    let (ours, theirs) = (total(|p| p.ours), total(|p| p.theirs));
    let (fewer, dearer) = compare(
        (ours.evicted, theirs.evicted),
        (ours.dollar_hours, theirs.dollar_hours),
    );
    let fig = |f: &Figures| {
        json!({"replacements": f.replacements, "removals": f.removals, "pods_evicted": f.evicted,
               "fleet_dollar_hours": (f.dollar_hours * 100.0).round() / 100.0, "launches": f.launches})
    };
    if args.json {
        let per_seed: Vec<serde_json::Value> = pairs
            .iter()
            .map(|p| {
                let (fewer, dearer) = compare(
                    (p.ours.evicted, p.theirs.evicted),
                    (p.ours.dollar_hours, p.theirs.dollar_hours),
                );
                json!({"seed": p.seed, "nodewright": fig(&p.ours), "karpenter_like": fig(&p.theirs),
                       "fewer_evictions": fewer, "extra_cost": dearer})
            })
            .collect();
        let mut report = json!({
            "seeds": seeds, "hours": args.hours,
            "nodewright": fig(&ours), "karpenter_like": fig(&theirs),
            "fewer_evictions": fewer, "extra_cost": dearer, "wall_seconds": wall,
        });
        if seeds.len() > 1 {
            report["per_seed"] = per_seed.into();
        } else {
            report["seed"] = seeds[0].into();
        }
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "churn benchmark: seed(s) {}, {} simulated hour(s), 8 Deployments re-scaled every 15 min",
        seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
        args.hours
    );
    println!(
        "{:<6} {:<40} {:>12} {:>9} {:>12} {:>14} {:>9}",
        "seed", "", "replacements", "removals", "pods evicted", "fleet $-hours", "launches"
    );
    let row = |seed: &str, name: &str, f: &Figures| {
        println!(
            "{seed:<6} {name:<40} {:>12} {:>9} {:>12} {:>14.2} {:>9}",
            f.replacements, f.removals, f.evicted, f.dollar_hours, f.launches
        );
    };
    let many = pairs.len() > 1;
    for p in &pairs {
        row(&p.seed.to_string(), "nodewright (defaults)", &p.ours);
        row(
            &p.seed.to_string(),
            "threshold 0 + spot-to-spot (Karpenter)",
            &p.theirs,
        );
        if many {
            let (fewer, dearer) = compare(
                (p.ours.evicted, p.theirs.evicted),
                (p.ours.dollar_hours, p.theirs.dollar_hours),
            );
            println!(
                "{:<6} evictions {:.0} % fewer, cost {:+.1} %",
                p.seed,
                fewer * 100.0,
                dearer * 100.0
            );
        }
    }
    if many {
        row("all", "nodewright (defaults)", &ours);
        row("all", "threshold 0 + spot-to-spot (Karpenter)", &theirs);
    }
    println!(
        "evictions: {:.0} % fewer; cost: {:+.1} %  ({wall:.0} s wall)",
        fewer * 100.0,
        dearer * 100.0
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{ChurnArgs, Seeds, parse_seeds};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        churn: ChurnArgs,
    }

    #[test]
    fn seeds_are_lists_and_ranges() {
        assert_eq!(parse_seeds("7"), Ok(Seeds(vec![7])));
        assert_eq!(parse_seeds("1-3,7, 11"), Ok(Seeds(vec![1, 2, 3, 7, 11])));
        assert!(parse_seeds("3-1").is_err());
        assert!(parse_seeds("x").unwrap_err().contains("\"x\""));
        assert!(parse_seeds("").is_err());
    }

    #[test]
    fn the_command_line_reads_seeds() {
        let cli = Cli::try_parse_from(["churn", "--seeds", "1-2,11"]).expect("parses");
        assert_eq!(cli.churn.seeds, Some(Seeds(vec![1, 2, 11])));
        assert!(
            Cli::try_parse_from(["churn", "--seeds", "1", "--seed", "2"]).is_err(),
            "one or the other"
        );
        let one = Cli::try_parse_from(["churn"]).expect("parses");
        assert_eq!((one.churn.seed, one.churn.seeds), (7, None));
    }
}
