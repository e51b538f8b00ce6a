//! In-memory adapters (filled next), and [`FaultyCloud`], a fault-injecting
//! decorator over any `Cloud`.

pub mod faulty;

pub use faulty::FaultyCloud;
