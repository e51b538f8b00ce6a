//! `nodewright simulate [SCENARIO.yaml] [--json]`: the whole system on the
//! embedded simulator — the same handler code the Lambda functions run, on
//! in-memory EC2, cluster and DynamoDB, on a simulated clock.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::model::Instance;
use nodewright::ports::{Clock, Cloud};
use nodewright::resources::Resources;
use nodewright::scheduling::labels;
use nodewright::sim::{MemStore, SimClock, SimCloud, SimSettings, Simulation, catalog, scenario};
use serde_json::json;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A scenario file or the name of a built-in one (see --list); without
    /// one, the first source walkthrough runs.
    scenario: Option<PathBuf>,
    /// List the built-in scenarios.
    #[arg(long)]
    list: bool,
    /// Print the final state as JSON instead of logs and tables.
    #[arg(long)]
    json: bool,
    /// Also print debug logs.
    #[arg(long, short)]
    verbose: bool,
    /// Print the dry-run plan (what would be launched, expired, replaced,
    /// consolidated, repaired or kept, and why) at these simulated times,
    /// e.g. `--plan-at 30m` (repeatable; a scenario's `plan` actions too).
    #[arg(long = "plan-at", value_name = "DURATION")]
    plan_at: Vec<String>,
    /// At the end of the run, write what `nodewright plan --snapshot` reads.
    #[arg(long, value_name = "FILE")]
    save_snapshot: Option<PathBuf>,
}

/// Log timestamps from the simulated clock.
struct SimTime(SimClock);

impl FormatTime for SimTime {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(w, "{:.3}", self.0.now())
    }
}

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    if args.list {
        for (name, text) in scenario::BUILT_IN {
            let description = scenario::parse(text)
                .map(|s| s.description)
                .unwrap_or_default();
            println!("{name:<16} {description}");
        }
        return Ok(());
    }
    let built_in = |name: &str| {
        scenario::BUILT_IN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| (*t).to_owned())
    };
    let text = match &args.scenario {
        None => scenario::WALKTHROUGH_1.to_owned(),
        Some(path) if !path.exists() && built_in(&path.to_string_lossy()).is_some() => {
            built_in(&path.to_string_lossy()).unwrap_or_default()
        }
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
    };
    let mut scenario = scenario::parse(&text)?;
    for at in &args.plan_at {
        scenario::parse_duration(at)?;
        scenario.actions.push(scenario::Action {
            at: at.clone(),
            what: scenario::ActionKind::Plan {},
        });
    }
    let clock = SimClock::default();
    let level = if args.json {
        tracing::Level::ERROR
    } else if args.verbose {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    tracing_subscriber::fmt()
        .with_timer(SimTime(clock.clone()))
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .init();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let sim_cloud = SimCloud::new(catalog::catalog(&scenario.region)?, clock.clone());
        let mut sim = Simulation::new(
            clock.clone(),
            sim_cloud.clone(),
            Some(sim_cloud),
            MemStore::new(),
            SimSettings::default(),
        );
        let started = std::time::Instant::now();
        let start = sim.now();
        scenario::load(&mut sim, &scenario).await?;
        scenario::run(&mut sim, &scenario).await?;
        let failures = scenario::check(&sim, &scenario.expect).await;
        if let Some(path) = &args.save_snapshot {
            let snap = crate::plan::PlanSnapshot::capture(&sim, &scenario.region).await?;
            std::fs::write(path, serde_json::to_string_pretty(&snap)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let instances = sim.cloud.instances().await?;
        let catalog = sim.cloud.catalog().await?;
        let claims = nodewright::ports::Store::claims(&sim.store).await?;
        let report = Report {
            name: &scenario.name,
            nodes: sim.cluster.all_nodes(),
            pods: sim.cluster.all_pods(),
            instances,
            events: sim.cluster.events(),
            simulated: sim.now().duration_since(start).as_secs_f64(),
            wall: started.elapsed().as_secs_f64(),
        };
        let mut snapshot = crate::status::FleetSnapshot {
            now: Some(sim.now()),
            nodes: report.nodes.clone(),
            pods: report.pods.clone(),
            instances: report.instances.clone(),
            on_demand: crate::status::on_demand_prices(&catalog),
            claims,
            pending_reasons: Default::default(),
            commands: nodewright::ports::Store::commands(&sim.store).await?,
            // The simulator launches no node of Karpenter's: nothing to hand over.
            handovers: Vec::new(),
            buffers: Vec::new(),
        };
        if !nodewright::handlers::config::load(&sim.store)
            .await?
            .buffers
            .is_empty()
        {
            snapshot.buffers = nodewright::handlers::disruption::dry_run(
                &sim.ports(),
                nodewright::disruption::Tuning::default(),
            )
            .await?
            .buffers;
        }
        for p in report.pods.iter().filter(|p| pod_node(p).is_none()) {
            if let Some(r) = report.pending_reason(p) {
                snapshot.pending_reasons.insert(pod_name(p), r);
            }
        }
        if args.json {
            let mut v = report.json(&failures);
            v["summary"]["spot_pools"] = json!(crate::status::spot_pools(&snapshot.rows()));
            v["status"] = crate::status::to_json(&snapshot);
            v["plans"] = serde_json::to_value(&sim.dry_runs)?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            for plan in &sim.dry_runs {
                println!("{}", plan.render());
            }
            report.print(&failures);
            println!();
            print!("{}", crate::status::render(&snapshot));
        }
        if !failures.is_empty() {
            anyhow::bail!(
                "{} expectation(s) of scenario {} failed",
                failures.len(),
                scenario.name
            );
        }
        Ok(())
    })
}

struct Report<'a> {
    name: &'a str,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    instances: Vec<Instance>,
    events: Vec<(
        nodewright::model::Timestamp,
        nodewright::ports::ClusterEvent,
    )>,
    simulated: f64,
    wall: f64,
}

fn label<'n>(n: &'n Node, key: &str) -> &'n str {
    n.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn pod_node(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

fn pod_name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

impl Report<'_> {
    /// Why a pod is pending: the provisioner's latest FailedScheduling event
    /// for it (current), else the scheduler's condition (set once, when the
    /// pod was first found unschedulable, so often stale).
    fn pending_reason(&self, p: &Pod) -> Option<String> {
        let (ns, name) = (
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or(""),
        );
        let from_event = self
            .events
            .iter()
            .rev()
            .find(|(_, e)| {
                e.kind == "Pod"
                    && e.reason == "FailedScheduling"
                    && e.name == name
                    && e.namespace.as_deref().unwrap_or("default") == ns
            })
            .map(|(_, e)| {
                e.message
                    .strip_prefix("Failed to schedule pod, ")
                    .unwrap_or(&e.message)
                    .to_owned()
            });
        from_event.or_else(|| crate::status::scheduler_reason(p))
    }

    fn price(&self, n: &Node) -> f64 {
        let pid = n
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default();
        self.instances
            .iter()
            .find(|i| i.provider_id == pid)
            .map_or(0.0, |i| i.price)
    }

    fn pods_on<'p>(&'p self, n: &Node) -> Vec<&'p Pod> {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        self.pods
            .iter()
            .filter(|p| pod_node(p) == Some(name))
            .collect()
    }

    fn print(&self, failures: &[String]) {
        println!();
        println!(
            "{:<45} {:<7} {:<16} {:<7} {:<13} {:<12}",
            "NAME", "STATUS", "INSTANCE-TYPE", "ARCH", "CAPACITY-TYPE", "ZONE"
        );
        for n in &self.nodes {
            println!(
                "{:<45} {:<7} {:<16} {:<7} {:<13} {:<12}",
                n.metadata.name.as_deref().unwrap_or(""),
                "Ready",
                label(n, labels::INSTANCE_TYPE),
                label(n, labels::ARCH),
                label(n, labels::CAPACITY_TYPE),
                label(n, labels::ZONE),
            );
        }
        println!();
        let pending = self.pods.iter().filter(|p| pod_node(p).is_none()).count();
        let mut total_cpu = (0i64, 0i64);
        let mut cost = 0.0;
        for n in &self.nodes {
            let alloc = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| Resources::from_list(a).ok())
                .unwrap_or_default();
            let pods = self.pods_on(n);
            let mut used = Resources::default();
            for p in &pods {
                if let Ok(sp) = nodewright::scheduling::SchedPod::from_pod(p) {
                    used.add(&sp.requests);
                }
            }
            total_cpu.0 += used.cpu_millis;
            total_cpu.1 += alloc.cpu_millis;
            let share = if alloc.cpu_millis > 0 {
                used.cpu_millis as f64 / alloc.cpu_millis as f64
            } else {
                0.0
            };
            let bar: String = (0..20)
                .map(|i| {
                    if (i as f64) < share * 20.0 {
                        '█'
                    } else {
                        '░'
                    }
                })
                .collect();
            let price = self.price(n);
            cost += price;
            println!(
                "{:<45} cpu {bar} {:>3.0}% ({} pods) {}/${price:.4} {}",
                n.metadata.name.as_deref().unwrap_or(""),
                share * 100.0,
                pods.len(),
                label(n, labels::INSTANCE_TYPE),
                label(n, labels::CAPACITY_TYPE),
            );
        }
        println!(
            "{} node(s) ({}/{} cpu) {} pod(s) ({} pending) ${cost:.4}/hour ${:.2}/month",
            self.nodes.len(),
            nodewright::resources::format_cpu(total_cpu.0),
            nodewright::resources::format_cpu(total_cpu.1),
            self.pods.len(),
            pending,
            cost * 730.0
        );
        println!(
            "scenario {}: {:.0}s simulated in {:.2}s",
            self.name, self.simulated, self.wall
        );
        if failures.is_empty() {
            println!("expectations: all met");
        } else {
            for f in failures {
                println!("expectation FAILED: {f}");
            }
        }
    }

    fn json(&self, failures: &[String]) -> serde_json::Value {
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "name": n.metadata.name,
                    "instance_type": label(n, labels::INSTANCE_TYPE),
                    "zone": label(n, labels::ZONE),
                    "capacity_type": label(n, labels::CAPACITY_TYPE),
                    "arch": label(n, labels::ARCH),
                    "price": self.price(n),
                    "labels": n.metadata.labels.clone().unwrap_or_default(),
                    "pods": self.pods_on(n).iter().map(|p| pod_name(p)).collect::<Vec<_>>(),
                })
            })
            .collect();
        let pods: Vec<serde_json::Value> = self
            .pods
            .iter()
            .map(|p| {
                let error = self.pending_reason(p);
                let mut v = json!({"name": pod_name(p), "node": pod_node(p)});
                if pod_node(p).is_none() {
                    v["error"] = json!(error);
                }
                v
            })
            .collect();
        let cost: f64 = self.nodes.iter().map(|n| self.price(n)).sum();
        let mut summary = BTreeMap::new();
        summary.insert("nodes", json!(self.nodes.len()));
        summary.insert("pods", json!(self.pods.len()));
        summary.insert("cost_per_hour", json!(cost));
        json!({
            "scenario": self.name,
            "simulated_seconds": self.simulated,
            "summary": summary,
            "nodes": nodes,
            "pods": pods,
            "expectations": {"passed": failures.is_empty(), "failures": failures},
        })
    }
}
