//! `nodewright bench scheduling --catalog REGION`: the W2 mixes planned on a
//! region's real catalog, with the LP lower bound of the pods on the
//! NodePool (DaemonSets and kube-reserved included) and the same input under
//! Karpenter's algorithm (`Strategy::Karpenter`), the stand-in for Karpenter.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::Context;
use nodewright::packing::{Plan, PoolInput, SolveOptions, Strategy, solve};
use nodewright::provisioning::plan::instance_types;
use nodewright::scheduling::SchedPod;
use nodewright::workload::fleet_bound::FleetBound;
use nodewright::workload::w2::{self, Capacity, Mix, PoolRequirements};
use serde_json::json;

use super::common::{
    CapacityArg, RequirementsArg, SchedulingArgs, dump, peak_rss_mb, sched_pods, solve_options,
};

pub(super) fn run(args: &SchedulingArgs, region: &str) -> anyhow::Result<()> {
    let mix: Mix = args
        .mix
        .as_deref()
        .unwrap_or("mixed")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let catalog = nodewright::sim::catalog::catalog(region)?;
    let capacity = match args.capacity {
        CapacityArg::Spot => Capacity::SpotAndOnDemand,
        CapacityArg::OnDemand => Capacity::OnDemand,
    };
    let requirements = match args.requirements {
        RequirementsArg::Walkthrough => PoolRequirements::Walkthrough,
        RequirementsArg::Open => PoolRequirements::Open,
    };
    let pool = w2::pool(capacity, requirements);
    let pools = vec![PoolInput::new(
        pool.clone(),
        instance_types(&pool, &catalog, &[]),
    )];
    let zones = w2::zones(&pool, &catalog);
    let daemons = w2::daemon_pods()
        .iter()
        .map(SchedPod::from_pod)
        .collect::<Result<Vec<_>, _>>()?;
    let options = solve_options(args);

    let mut times = Vec::with_capacity(args.runs);
    let mut result: Option<(Vec<SchedPod>, Plan)> = None;
    for _ in 0..args.runs {
        // The last run's pods and plan go first, so the peak is one run's.
        drop(result.take());
        let mut clock = std::time::Duration::ZERO;
        let pods = sched_pods(
            w2::pods_lazily(args.pods, mix, args.seed, &zones),
            &mut clock,
        )?;
        let start = Instant::now();
        let plan = solve(&pods, &[], &pools, &daemons, &options);
        times.push((clock + start.elapsed()).as_secs_f64());
        result = Some((pods, plan));
    }
    let (pods, plan) = result.context("no run")?;
    let peak_rss = peak_rss_mb();
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];

    let karpenter = solve(
        &pods,
        &[],
        &pools,
        &daemons,
        &SolveOptions {
            strategy: Strategy::Karpenter,
            ..options
        },
    );
    let mut everything = pods.clone();
    everything.extend(daemons.iter().cloned().map(|mut d| {
        d.daemon = true;
        d
    }));
    // Zones seen: a zone-pinned pod only on its zone's offerings. The
    // zone-blind bound beside it shows how much the pins alone cost.
    let bound = FleetBound::with_zones(std::slice::from_ref(&pool), &catalog).bound(&everything);
    let zone_blind = FleetBound::new(std::slice::from_ref(&pool), &catalog).bound(&everything);
    let cost = plan.cost_per_hour();
    let chosen = |plan: &Plan| -> BTreeSet<(String, String, String)> {
        plan.claims
            .iter()
            .filter_map(|c| c.options.first())
            .map(|o| {
                (
                    o.instance_type.to_string(),
                    o.zone.to_string(),
                    o.capacity_type.to_string(),
                )
            })
            .collect()
    };
    let report = json!({
        "workload": "W2",
        "catalog": region,
        "mix": mix.name(),
        "topology": mix.has_topology(),
        "capacity": format!("{:?}", capacity),
        "requirements": format!("{:?}", requirements),
        "instance_types": pools[0].instance_types().len(),
        "seed": args.seed,
        "runs": args.runs,
        "pods": pods.len(),
        "scheduled": plan.scheduled(),
        "unschedulable": plan.unschedulable.len(),
        "nodes": plan.claims.len(),
        "seconds": seconds,
        "seconds_min": times[0],
        "cost_per_hour": cost,
        "lower_bound_cost_per_hour": bound,
        "cost_over_lower_bound": bound.map(|b| cost / b),
        "zone_blind_lower_bound_cost_per_hour": zone_blind,
        "karpenter_order_cost_per_hour": karpenter.cost_per_hour(),
        "karpenter_order_nodes": karpenter.claims.len(),
        "saving_over_karpenter_order": 1.0 - cost / karpenter.cost_per_hour(),
        "cheapest_offerings_used": chosen(&plan).len(),
        "spot_pools_launched": spot_pools_launched(&catalog, &plan)?,
        "peak_rss_mb": peak_rss,
    });
    if let Some(dir) = &args.dump {
        dump(
            dir,
            &w2::pods(args.pods, mix, args.seed, &zones),
            &pools[0],
            &pods,
            &plan,
        )?;
    }
    if args.json {
        println!("{report}");
    } else {
        let f = |k: &str| report[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "W2 {} mix on {region}, {:?}, {:?} requirements ({} instance types), seed {}",
            mix.name(),
            capacity,
            requirements,
            report["instance_types"],
            args.seed
        );
        println!(
            "pods              {} ({} scheduled)",
            report["pods"], report["scheduled"]
        );
        println!("nodes             {}", report["nodes"]);
        println!(
            "seconds           {:.3} (median of {})",
            f("seconds"),
            args.runs
        );
        println!("fleet $/hour      {:.2}", f("cost_per_hour"));
        match bound {
            Some(b) => println!(
                "LP lower bound    {b:.2} $/hour (plan = {:.4} × bound; zones seen, {:.2} without)",
                f("cost_over_lower_bound"),
                f("zone_blind_lower_bound_cost_per_hour")
            ),
            None => println!("LP lower bound    none (the pool cannot hold the pods)"),
        }
        println!(
            "Karpenter algo    {:.2} $/hour, {} nodes (ours {:.1} % cheaper)",
            f("karpenter_order_cost_per_hour"),
            report["karpenter_order_nodes"],
            100.0 * f("saving_over_karpenter_order")
        );
        println!(
            "spot pools        {} distinct (type, zone), the plan launched on the simulated EC2",
            report["spot_pools_launched"]
        );
        if let Some(m) = peak_rss {
            println!("peak RSS          {m:.0} MB");
        }
        for (i, reason) in plan.unschedulable.iter().take(5) {
            println!("  unschedulable {}: {reason}", pods[*i].pod);
        }
    }
    Ok(())
}

/// The distinct spot pools (type, zone) the plan's claims land on when each
/// is launched, as the provisioner would, on the simulated EC2 (its default
/// pool depths and price-capacity-optimized spot).
fn spot_pools_launched(
    catalog: &nodewright::model::CloudCatalog,
    plan: &Plan,
) -> anyhow::Result<usize> {
    use nodewright::model::{LaunchRequest, PricedOffering};
    use nodewright::ports::Cloud;
    let cloud =
        nodewright::sim::SimCloud::new(catalog.clone(), nodewright::sim::SimClock::default());
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let mut pools = BTreeSet::new();
    for (i, c) in plan.claims.iter().enumerate() {
        let request = LaunchRequest {
            claim_id: format!("w2-{i}"),
            client_token: format!("w2-{i}"),
            pool: c.pool.clone(),
            node_class: None,
            node_class_spec: None,
            options: c.options.iter().map(PricedOffering::from).collect(),
            labels: Default::default(),
            taints: Vec::new(),
            kubelet: Default::default(),
            reservations: Vec::new(),
        };
        let launched = runtime
            .block_on(cloud.launch(&request))
            .with_context(|| format!("launching claim {i} of the plan"))?;
        if launched.instance.capacity_type == nodewright::scheduling::labels::CAPACITY_TYPE_SPOT {
            pools.insert((launched.instance.instance_type, launched.instance.zone));
        }
    }
    Ok(pools.len())
}
