//! Provisioning decisions, pure: the batch window, the claims to create for
//! pending pods, and what each claim needs next in its life.

pub mod admission;
pub mod batcher;
pub mod buffers;
pub mod lifecycle;
pub mod overlays;
pub mod plan;
pub mod reservations;
pub mod static_capacity;
