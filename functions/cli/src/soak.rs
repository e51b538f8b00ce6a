//! `nodewright soak [--hours H] [--seed S] [--json] [--stop-after H]`: the chaos soak of
//! `nodewright::sim::soak` — a seeded workload and fault schedule on the
//! embedded simulator, the invariants checked every few simulated seconds,
//! violations counted by kind. Exits non-zero when any invariant broke.

use clap::Args;
use nodewright::model::SignedDuration;
use nodewright::sim::soak::{self, SoakOptions, SoakReport};

#[derive(Args)]
pub struct SoakArgs {
    /// Simulated hours.
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// Seed of the workload and of the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (`violations`, `figures`, `faults`, …) instead of text.
    #[arg(long)]
    json: bool,
    /// Run the workload without faults.
    #[arg(long)]
    no_faults: bool,
    /// Stop after this many simulated hours, keeping the workload and fault
    /// schedule of `--hours`: replays the start of a long run.
    #[arg(long)]
    stop_after: Option<f64>,
}

pub fn run(args: &SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.hours > 0.0 && args.hours <= 24.0 * 90.0,
        "--hours must be above 0 and at most 2160"
    );
    if let Some(stop) = args.stop_after {
        anyhow::ensure!(
            stop > 0.0 && stop <= args.hours,
            "--stop-after must be above 0 and at most --hours"
        );
    }
    let options = SoakOptions {
        seed: args.seed,
        duration: SignedDuration::from_secs_f64(args.hours * 3600.0),
        faults: !args.no_faults,
        stop_after: args
            .stop_after
            .map(|h| SignedDuration::from_secs_f64(h * 3600.0)),
        ..SoakOptions::default()
    };
    // `RUST_LOG=nodewright::sim::soak=info` shows each fault as it strikes.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = std::time::Instant::now();
    let report = runtime.block_on(soak::run(options))?;
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["wall_seconds"] = serde_json::json!((wall * 10.0).round() / 10.0);
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", render(&report));
        println!("({wall:.0} s wall)");
    }
    anyhow::ensure!(
        report.total_violations() == 0,
        "{} invariant violation(s)",
        report.total_violations()
    );
    Ok(())
}

fn render(r: &SoakReport) -> String {
    use std::fmt::Write;
    let f = &r.figures;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chaos soak: seed {}, {:.1} simulated hour(s), {} checks",
        r.seed, r.hours, f.checks
    );
    let _ = writeln!(out, "\nviolations ({} in all)", r.total_violations());
    for (kind, n) in &r.violations {
        let _ = writeln!(out, "  {kind:<36} {n:>6}");
        for e in r.examples.get(kind).into_iter().flatten() {
            let _ = writeln!(out, "      {e}");
        }
    }
    let _ = writeln!(
        out,
        "\nfaults injected ({} in all)",
        r.faults.values().sum::<usize>()
    );
    for (kind, n) in &r.faults {
        let _ = writeln!(out, "  {kind:<36} {n:>6}");
    }
    let _ = writeln!(out, "\nworkload");
    let _ = writeln!(
        out,
        "  peak pods / nodes                    {:>6} / {}",
        f.peak_pods, f.peak_nodes
    );
    let _ = writeln!(
        out,
        "  job pods created / completed / rerun {:>6} / {} / {}",
        f.job_pods_created, f.job_pods_completed, f.job_pods_rerun
    );
    let _ = writeln!(
        out,
        "  launches (CreateFleet calls)         {:>6} ({})",
        f.launches, f.launch_calls
    );
    let removals: Vec<String> = f.removals.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        out,
        "  removals                             {}",
        removals.join(", ")
    );
    let _ = writeln!(
        out,
        "  rolled back                          {:>6}",
        f.rolled_back
    );
    let _ = writeln!(
        out,
        "  pods evicted                         {:>6}",
        f.pods_evicted
    );
    let messages: Vec<String> = f
        .interruption_messages
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        out,
        "  interruption messages                {} (lost: {})",
        messages.join(", "),
        f.queue_messages_lost
    );
    let _ = writeln!(
        out,
        "  store writes throttled / conflicts   {:>6} / {}",
        f.store_writes_throttled, f.store_write_conflicts
    );
    let _ = writeln!(
        out,
        "  longest pending                      {:>6} s (bound {} s)",
        f.longest_pending_seconds,
        r.bounds.pending.as_secs()
    );
    // No trailing hour is judged before the warm-up and a whole window
    // have passed: a short run has no worst hour (0 in the JSON), not one
    // that cost nothing.
    let worst = if f.worst_hour_cost_ratio > 0.0 {
        format!("{:.2}×", f.worst_hour_cost_ratio)
    } else {
        format!(
            "none judged: the first ends about {} min in",
            (r.bounds.cost_warmup + r.bounds.cost_window).as_secs() / 60
        )
    };
    let _ = writeln!(
        out,
        "  fleet $-hours / LP bound             {:>6.2} / {:.2} = {:.2}× (worst hour {worst}, factor {})",
        f.fleet_dollar_hours, f.lower_bound_dollar_hours, f.cost_ratio, r.bounds.cost_factor
    );
    let _ = writeln!(out, "\nnot modelled");
    for n in &r.not_modelled {
        let _ = writeln!(out, "  - {n}");
    }
    out
}
