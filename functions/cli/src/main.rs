//! `nodewright`: the operator CLI. Thin: parses arguments and hands off to
//! one module per command.

mod bench;
#[cfg(feature = "aws")]
mod catalog;
mod churn;
mod config;
mod invocation;
mod plan;
mod simulate;
mod soak;
mod status;
#[cfg(feature = "aws")]
mod status_live;
mod target;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "nodewright",
    version,
    about = "Groupless node autoscaling for Amazon EKS, run as AWS Lambda functions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the system on reproducible workloads.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The dry run: what the provisioning and disruption decisions would do on a snapshot, and why.
    Plan(plan::PlanArgs),
    /// Run the system on the embedded simulator (no AWS): a scenario file, or the first walkthrough.
    Simulate(simulate::SimulateArgs),
    /// The chaos soak: a seeded workload and fault schedule on the simulator, invariants checked throughout.
    Soak(soak::SoakArgs),
    /// NodePools, EC2NodeClasses and Settings as DynamoDB items: validate, convert, apply, diff, get, delete.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Create the config and state tables (a local run or a first try; Terraform creates them in production).
    #[cfg(feature = "aws")]
    Init(config::InitArgs),
    /// The instance types a NodePool allows, with allocatable capacity and prices per zone.
    #[cfg(feature = "aws")]
    Catalog(catalog::CatalogArgs),
    /// The fleet at a glance: nodes per NodePool with usage bars and $/hour, pending pods and why, removals in progress.
    #[cfg(feature = "aws")]
    Status(status_live::StatusArgs),
}

/// A failure prints its message and the chain of causes, never a
/// backtrace (even with `RUST_BACKTRACE` set): the errors users meet are
/// theirs to fix, not the program's.
fn main() -> std::process::ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Plan(args) => plan::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Soak(args) => soak::run(&args),
        Command::Config(cmd) => config::run(cmd),
        #[cfg(feature = "aws")]
        Command::Init(args) => config::init(args),
        #[cfg(feature = "aws")]
        Command::Catalog(args) => catalog::run(args),
        #[cfg(feature = "aws")]
        Command::Status(args) => status_live::run(args),
    }
}
