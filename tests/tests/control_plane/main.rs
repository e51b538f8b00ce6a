//! Scenarios beside the whole control plane: the real kube-apiserver with
//! kube-controller-manager, kube-scheduler and kwok (`kube.sh start
//! --control-plane`). Only two stand-ins are left: the emulated AWS (the
//! in-memory EC2 and store) and the registrar that creates a booted
//! instance's Node. kube-scheduler marks pods Unschedulable and binds
//! them, the ReplicaSet controller replaces evicted pods, the disruption
//! controller writes the PodDisruptionBudgets' status the API server's
//! evictions are decided by, the node lifecycle controller lifts the
//! not-ready taint, kwok reports Nodes Ready, runs the pods bound to them
//! and removes a deleted pod when its grace period is over.
//!
//! The controllers live in real time, so the scenarios do too: each runs
//! on a wall clock for a minute or a few (`tests/scenarios/control-plane/`).
//! The tests take the cluster one at a time (the provisioner looks at every
//! pending pod), and share one control plane: `tests/run` starts it
//! (`NODEWRIGHT_CONTROL_PLANE_ENV`); run alone, the binary starts its own.
//!
//! `cargo test -p nodewright-tests --test control_plane`

mod cluster;
mod disruption;
mod karpenter;
mod scale;
mod walkthroughs;
