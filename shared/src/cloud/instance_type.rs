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
    /// The capacity reservation a `reserved` offering launches into (one
    /// offering per reservation, as Karpenter's); `None` for capacity bought
    /// on-demand or spot, whose nodes carry no reservation labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<OfferingReservation>,
}

/// What a node launched into a capacity reservation is labelled with: the
/// values a requirement on `karpenter.k8s.aws/capacity-reservation-id`,
/// `-type` or `-interruptible` selects offerings by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferingReservation {
    pub id: String,
    pub reservation_type: crate::cloud::ReservationType,
    pub interruptible: bool,
}

impl OfferingReservation {
    /// The node's value for `key` (one of [`labels::CAPACITY_RESERVATION`]).
    pub fn label(&self, key: &str) -> Option<&str> {
        match key {
            labels::CAPACITY_RESERVATION_ID => Some(&self.id),
            labels::CAPACITY_RESERVATION_TYPE => Some(self.reservation_type.as_str()),
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE => {
                Some(if self.interruptible { "true" } else { "false" })
            }
            _ => None,
        }
    }
}

/// True when a node of `reservation` (or of none) satisfies what `reqs`
/// say of the capacity-reservation labels.
#[inline]
pub fn reservation_allowed(reservation: Option<&OfferingReservation>, reqs: &Requirements) -> bool {
    labels::CAPACITY_RESERVATION
        .iter()
        .all(|key| reqs.allows(key, reservation.and_then(|r| r.label(key))))
}

impl Offering {
    pub fn new(zone: &str, capacity_type: &str, price: f64) -> Self {
        Offering {
            zone: zone.to_owned(),
            capacity_type: capacity_type.to_owned(),
            price,
            available: true,
            reservation: None,
        }
    }

    /// True when the offering is available and its zone, capacity type and
    /// reservation (if any) are allowed.
    #[inline]
    pub fn allowed_by(&self, reqs: &Requirements) -> bool {
        self.available
            && reqs.allows(labels::ZONE, Some(&self.zone))
            && reqs.allows(labels::CAPACITY_TYPE, Some(&self.capacity_type))
            && reservation_allowed(self.reservation.as_ref(), reqs)
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
    /// A type with an offering in a capacity reservation leaves the
    /// reservation labels to its offerings (a node of it may carry them or
    /// not, by offering).
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
        if offerings.iter().any(|o| o.reservation.is_some()) {
            for key in labels::CAPACITY_RESERVATION {
                requirements.remove(key);
            }
        }
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
