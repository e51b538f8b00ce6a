//! `nodewright bench …`. `scheduling`: Karpenter's scheduling benchmark
//! (W1), solved by the same solver the provisioner runs, with the figures
//! Karpenter reports plus the plan's cost and, for the generic mix, its LP
//! lower bound (`w1.rs`), or the W2 mixes on a region's real catalog
//! (`w2.rs`). `churn`, `invocation` (their own modules) and `disruption`
//! run the handlers on a simulated cluster (`cluster.rs`).

use clap::Subcommand;

mod cluster;
mod common;
mod disruption;
mod w1;
mod w2;

pub(crate) use cluster::loaded_simulation;
pub use common::SchedulingArgs;

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
    /// One disruption decision on a running cluster, with and without a backlog of pending pods
    /// (the decision places them first), and how late a loop beside it wakes.
    Disruption(disruption::DisruptionArgs),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Scheduling(args) => {
            anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
            match &args.catalog {
                Some(region) => w2::run(&args, region),
                None => w1::run(&args),
            }
        }
        BenchCommand::Churn(args) => crate::churn::run(&args),
        BenchCommand::Invocation(args) => crate::invocation::run(&args),
        BenchCommand::Disruption(args) => disruption::run(&args),
    }
}
