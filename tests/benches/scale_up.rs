//! A thousand pods at once beside the real control plane (kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok), in the shapes of
//! Karpenter's basic performance test: the time from the first pod's
//! creation to the last pod Running, the nodes, the reserved utilization,
//! and the peak resident memory of the functions' handlers (this process)
//! and of the control plane (`nodewright_tests::scale_up`). A benchmark:
//! it prints figures and asserts nothing about time.
//!
//! `cargo bench -p nodewright-tests --bench scale_up [-- --pods N]` (starts
//! its own control plane unless `NODEWRIGHT_CONTROL_PLANE_ENV` names one).

use std::time::Duration;

fn main() {
    // `cargo test --all-targets` builds this and runs it without `--bench`.
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!(
            "scale-up benchmark: run it with `cargo bench -p nodewright-tests --bench scale_up`"
        );
        return;
    }
    let pods = args
        .iter()
        .position(|a| a == "--pods")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let figures = runtime.block_on(async {
        let (_sim, figures) =
            nodewright_tests::scale_up::run(pods, Duration::from_secs(30 * 60)).await;
        figures
    });
    println!("{figures}");
}
