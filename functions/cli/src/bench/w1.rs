//! `nodewright bench scheduling`: Karpenter's scheduling benchmark (W1),
//! its synthetic instance types, with the figures Karpenter reports plus
//! the plan's cost and, for the generic mix, its LP lower bound.

use std::time::Instant;

use anyhow::Context;
use nodewright::config::NodePool;
use nodewright::packing::{Plan, PoolInput, solve};
use nodewright::resources::Resources;
use nodewright::scheduling::SchedPod;
use nodewright::workload::lower_bound::{Candidate, lp_lower_bound};
use nodewright::workload::w1::{self, Mix};
use serde_json::json;

use super::common::{SchedulingArgs, dump, peak_rss_mb, sched_pods, solve_options};

pub(super) fn run(args: &SchedulingArgs) -> anyhow::Result<()> {
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
        // Made a page at a time outside the clock; only their reading is
        // timed, each page of Kubernetes pods dropped once read (`sched_pods`).
        drop(result.take()); // free the previous run before measuring the next
        let mut clock = std::time::Duration::ZERO;
        let pods = sched_pods(w1::pods_lazily(args.pods, mix, args.seed), &mut clock)?;
        let start = Instant::now();
        let plan = solve(&pods, &[], &pools, &[], &options);
        times.push((clock + start.elapsed()).as_secs_f64());
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
            .instance_types()
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
