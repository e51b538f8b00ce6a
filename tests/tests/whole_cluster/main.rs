//! The tests that own the whole kube-apiserver while they run: each empties
//! it of pods, workloads, budgets and nodes first and then checks the
//! cluster as a whole (node counts, every Event), so they hold a lock
//! (`ApiServerCluster::exclusive`) among themselves and live in their own
//! binary, apart from the `suite` tests that share the server by namespace.
//!
//! `cargo test -p nodewright-tests --test whole_cluster interruption_real::`

mod interruption_real;
mod kube_scenarios;
mod neighbours_real;
