//! Instance types and their offerings, as the packer sees them.
//!
//! An instance type carries the requirements a node of that type satisfies
//! (its well-known labels), the offerings it can be bought as (zone ×
//! capacity type, each with a price and availability), and its capacity and
//! overhead. Allocatable = capacity − overhead is computed once.

use serde::{Deserialize, Serialize};

use crate::resources::Resources;
use crate::scheduling::labels;
use crate::scheduling::requirements::{Requirement, Requirements};

/// One way to buy an instance type: a zone and a capacity type at a price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    /// False while the offering is marked unavailable (recent insufficient capacity).
    pub available: bool,
}

impl Offering {
    pub fn new(zone: &str, capacity_type: &str, price: f64) -> Self {
        Offering {
            zone: zone.to_owned(),
            capacity_type: capacity_type.to_owned(),
            price,
            available: true,
        }
    }

    /// True when the offering is available and its zone and capacity type are allowed.
    #[inline]
    pub fn allowed_by(&self, reqs: &Requirements) -> bool {
        self.available
            && reqs.allows(labels::ZONE, Some(&self.zone))
            && reqs.allows(labels::CAPACITY_TYPE, Some(&self.capacity_type))
    }
}

#[derive(Debug, Clone)]
pub struct InstanceType {
    pub name: String,
    /// What a node of this type satisfies: instance-type, arch, os, zone and
    /// capacity type (from the offerings), category, family, cpu, memory, ….
    pub requirements: Requirements,
    pub offerings: Vec<Offering>,
    pub capacity: Resources,
    /// Kube-reserved, system-reserved and the eviction threshold.
    pub overhead: Resources,
    allocatable: Resources,
}

impl InstanceType {
    /// Builds an instance type; adds the instance-type, zone and
    /// capacity-type requirements derived from the name and the offerings.
    pub fn new(
        name: &str,
        mut requirements: Requirements,
        offerings: Vec<Offering>,
        capacity: Resources,
        overhead: Resources,
    ) -> Self {
        requirements.add(labels::INSTANCE_TYPE, Requirement::single(name));
        let zones: Vec<&str> = offerings.iter().map(|o| o.zone.as_str()).collect();
        requirements.add(labels::ZONE, Requirement::any_of(zones));
        let cts: Vec<&str> = offerings.iter().map(|o| o.capacity_type.as_str()).collect();
        requirements.add(labels::CAPACITY_TYPE, Requirement::any_of(cts));
        let allocatable = capacity.saturating_sub(&overhead);
        InstanceType {
            name: name.to_owned(),
            requirements,
            offerings,
            capacity,
            overhead,
            allocatable,
        }
    }

    /// What pods can use: capacity − overhead.
    #[inline]
    pub fn allocatable(&self) -> &Resources {
        &self.allocatable
    }

    /// The cheapest available offering the requirements allow.
    pub fn cheapest_offering(&self, reqs: &Requirements) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.allowed_by(reqs))
            .min_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
            })
    }

    /// True when some available offering is allowed by the requirements.
    #[inline]
    pub fn has_offering(&self, reqs: &Requirements) -> bool {
        self.offerings.iter().any(|o| o.allowed_by(reqs))
    }
}
