//! `nodewright bench disruption --pods N --pending P`: what one disruption
//! decision costs on a running cluster, and what a backlog of pending pods
//! adds to it (the decision places the pending pods first: a node one would
//! be placed on is nominated, and the room they take is held).
//!
//! The cluster: `bench invocation`'s burst of N pods launched for and bound
//! on the in-memory adapters and the embedded us-east-1 catalog, then a
//! third of the `web` replicas scaled away so consolidation has candidates.
//! The backlog: a Deployment of P pods of 2 CPU / 4 GiB, kube-scheduler
//! binding those that fit (most do not, the cluster is packed): the rest
//! pend, as while the provisioner's nodes boot. The decision is timed on the
//! same gathered state with and without the backlog, the median of
//! `--runs` each, alternated. Last, what a loop beside the decision in the
//! same task waits at worst (the provisioner's loop shares the disruption
//! loop's task in the functions): the decision computed inside the task,
//! then the disruption handler's own tick, which computes it on a thread
//! of its own.

use anyhow::Context;
use clap::Args;
use nodewright::disruption::{Tuning, decide};
use nodewright::handlers::disruption::{Disruption, DisruptionSettings, gather};
use nodewright::model::SignedDuration;
use nodewright::ports::{Cluster, Ports};
use nodewright::sim::SimSettings;
use serde_json::json;

#[derive(Args)]
pub struct DisruptionArgs {
    /// Pods running in the cluster.
    #[arg(long, default_value_t = 5_000)]
    pods: usize,
    /// Pods of the pending backlog.
    #[arg(long, default_value_t = 5_000)]
    pending: usize,
    /// Decisions timed with and without the backlog (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &DisruptionArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.pods >= 1, "--pods must be at least 1");
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench(args))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

async fn bench(args: &DisruptionArgs) -> anyhow::Result<()> {
    let (mut sim, cloud) = crate::bench::loaded_simulation(
        "cluster",
        crate::invocation::objects(args.pods),
        SimSettings::default(),
    )
    .await?;
    sim.run_for(SignedDuration::from_mins(10)).await;
    let web = crate::invocation::replicas(args.pods, 0);
    sim.cluster
        .scale("default", "web", (web - web / 3) as i32)
        .context("scaling web down")?;
    sim.run_for(SignedDuration::from_secs(30)).await;
    sim.cluster
        .apply(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "backlog", "namespace": "default"}, "spec": {
            "replicas": args.pending, "selector": {"matchLabels": {"app": "backlog"}},
            "template": {"metadata": {"labels": {"app": "backlog"}}, "spec": {
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}}}))
        .context("the backlog")?;
    sim.cluster.reconcile(); // the ReplicaSet controller creates the pods
    sim.cluster.reconcile(); // kube-scheduler binds those that fit

    let ports = Ports {
        cloud: cloud.clone(),
        cluster: sim.cluster.clone(),
        store: sim.store.clone(),
        clock: sim.clock.clone(),
    };
    let config = nodewright::handlers::config::load(&ports.store)
        .await
        .context("the configuration")?;
    let with_backlog = gather(&ports, &config).await.context("gathering")?;
    let mut without = with_backlog.clone();
    without.pending.clear();
    let nodes = with_backlog.nodes.len();
    let bound = with_backlog.pods.len();
    let pending = ports.cluster.pending_pods().await?.len();
    anyhow::ensure!(
        args.pending == 0 || pending > 0,
        "no pod of the backlog pends: the bench would time nothing of it"
    );

    let seed = 42;
    let (mut with_s, mut without_s) = (Vec::new(), Vec::new());
    let (mut commands_with, mut commands_without) = (0, 0);
    for _ in 0..args.runs {
        let started = std::time::Instant::now();
        commands_without = decide(&without.snapshot(Tuning::default(), seed))
            .commands
            .len();
        without_s.push(started.elapsed().as_secs_f64());
        let started = std::time::Instant::now();
        commands_with = decide(&with_backlog.snapshot(Tuning::default(), seed))
            .commands
            .len();
        with_s.push(started.elapsed().as_secs_f64());
    }
    let (with_m, without_m) = (median(with_s), median(without_s));

    // What a loop beside the decision (the provisioner's, in the same
    // invocation's task) waits: the decision computed inside the task, and
    // the disruption handler's own tick, which computes it on a thread of
    // its own.
    let (_, inline_wait) =
        longest_wait_beside(async { decide(&with_backlog.snapshot(Tuning::default(), seed)) })
            .await;
    let mut handler = Disruption::new(
        ports.clone(),
        DisruptionSettings::default(),
        "bench-disruption",
    );
    // Past the simulation's own disruption invocation and its lease; the
    // cluster does not change meanwhile (nothing runs).
    sim.clock.set(sim.now() + SignedDuration::from_mins(2));
    let until = sim.now() + SignedDuration::from_mins(10);
    anyhow::ensure!(
        handler.acquire_lease(until).await?,
        "the simulation's disruption lease has expired"
    );
    let (tick, handler_wait) = longest_wait_beside(handler.tick()).await;
    anyhow::ensure!(
        tick?.plan.is_some(),
        "the handler's tick decided (the wait beside it would mean nothing otherwise)"
    );
    let (inline_wait, handler_wait) = (inline_wait.as_secs_f64(), handler_wait.as_secs_f64());
    if args.json {
        println!(
            "{}",
            json!({
                "pods": args.pods, "nodes": nodes, "bound_pods": bound, "pending_pods": pending, "runs": args.runs,
                "decision_s": without_m, "decision_with_backlog_s": with_m,
                "commands": commands_without, "commands_with_backlog": commands_with,
                "wait_beside_inline_s": inline_wait, "wait_beside_handler_s": handler_wait,
            })
        );
        return Ok(());
    }
    println!(
        "one disruption decision: {nodes} nodes, {bound} pods bound, {pending} pending (us-east-1 catalog, in-memory adapters)"
    );
    println!(
        "  without the backlog: {without_m:.3} s (median of {}), {commands_without} commands",
        args.runs
    );
    println!(
        "  with the backlog:    {with_m:.3} s (median of {}), {commands_with} commands",
        args.runs
    );
    println!(
        "  the longest a loop beside it waited: {inline_wait:.3} s computed in the task, {handler_wait:.3} s in the handler's tick (on its own thread)"
    );
    Ok(())
}

/// Runs `work` with a loop beside it in the same task that wakes every
/// 10 ms, as the provisioner's loop shares the disruption loop's task, and
/// returns how late that loop woke at worst.
async fn longest_wait_beside<F: std::future::Future>(work: F) -> (F::Output, std::time::Duration) {
    use std::time::{Duration, Instant};
    let period = Duration::from_millis(10);
    let done = std::cell::Cell::new(false);
    let beside = async {
        let mut longest = Duration::ZERO;
        while !done.get() {
            let asleep = Instant::now();
            tokio::time::sleep(period).await;
            longest = longest.max(asleep.elapsed().saturating_sub(period));
        }
        longest
    };
    let work = async {
        // The loop beside goes to sleep first, as it would be mid-wait.
        tokio::task::yield_now().await;
        let out = work.await;
        done.set(true);
        out
    };
    tokio::join!(work, beside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_cluster_with_a_backlog_is_decided_on() {
        let args = DisruptionArgs {
            pods: 200,
            pending: 100,
            runs: 1,
            json: true,
        };
        run(&args).expect("a decision on a cluster with pending pods");
    }
}
