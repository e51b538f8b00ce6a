//! The drain-and-terminate machine every removal goes through: a stored
//! [`Command`] per node, advanced one step at a time by whichever function
//! runs next (the interruption function, the disruption function, or the
//! provisioner's tick as the safety net). Pure: the decisions here take a
//! snapshot and return what to do; `handlers::termination` carries it out.

pub mod drain;
pub mod machine;

pub use drain::{
    DrainPlan, EXCLUDE_FROM_LOAD_BALANCERS, EXCLUDE_FROM_LOAD_BALANCERS_VALUE, disrupted_taint,
};
