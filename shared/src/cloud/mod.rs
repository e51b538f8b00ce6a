//! The cloud model the decisions need: instance types, offerings, and how
//! allocatable capacity follows from EC2's facts. Pure data and arithmetic.

pub mod catalog;
pub mod expression;
pub mod instance_type;
pub mod ownership;
pub mod reservation;

pub use catalog::{
    EphemeralStorage, InstanceTypeInfo, KubeletConfig, KubeletExpressions, Reserved,
    ResolvedKubelet, Threshold,
};
pub use instance_type::{InstanceType, Offering, OfferingReservation};
pub use reservation::{CapacityReservation, ReservationType};
