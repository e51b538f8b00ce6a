use super::*;

/// Simulated hours under faults, on a fixed seed: no invariant breaks.
#[test]
fn an_hour_of_chaos_breaks_no_invariant() {
    let options = SoakOptions {
        seed: 2,
        duration: SignedDuration::from_mins(60),
        faults: true,
        check_every: SignedDuration::from_secs(20),
        stop_after: None,
    };
    let report = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(run(options))
        .expect("soak");
    assert_eq!(report.total_violations(), 0, "{:#?}", report.examples);
    // The run did what a soak is for: faults struck, removals happened, Jobs ran.
    assert!(
        report.faults.values().sum::<usize>() >= 10,
        "{:?}",
        report.faults
    );
    assert!(
        !report.figures.removals.is_empty(),
        "{:?}",
        report.figures.removals
    );
    assert!(report.figures.interruption_messages.values().sum::<usize>() > 0);
    assert!(report.figures.job_pods_completed > 0);
    assert!(report.figures.peak_nodes >= 5);
}
