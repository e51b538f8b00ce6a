//! On-demand capacity reservations (ODCRs) and capacity blocks, as the
//! cloud lists them: what a NodeClass's `capacityReservationSelectorTerms`
//! select, and what becomes a `reserved` offering. Pure data.
//!
//! Karpenter's model (aws/karpenter-provider-aws `pkg/apis/v1`
//! `CapacityReservationFromEC2`, `pkg/providers/instancetype/offering`
//! `reserved_capacity_resolver.go`): one offering per reservation, priced
//! at the type's on-demand price divided by 10,000,000 (so it is used
//! before anything bought, and still ranks types among themselves), and
//! unavailable when no instance is left in it or when it is a capacity
//! block within 40 minutes of its end ("expiring").

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// A capacity block is "expiring" this long before its end: no new node
/// goes into it, and the nodes in it are drained (EC2 reclaims the
/// instances at the end).
pub const CAPACITY_BLOCK_EXPIRY: SignedDuration = SignedDuration::from_mins(40);

/// What a reserved offering costs per hour is the on-demand price divided by this.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// `karpenter.k8s.aws/capacity-reservation-type`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationType {
    /// An on-demand capacity reservation.
    #[default]
    Default,
    /// A capacity block for ML: a fixed window, reclaimed at its end.
    CapacityBlock,
}

impl ReservationType {
    /// The label value (`default`, `capacity-block`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationType::Default => "default",
            ReservationType::CapacityBlock => "capacity-block",
        }
    }

    /// EC2's `ReservationType` (absent means `default`); `None` for a type
    /// this version does not know (such a reservation is left out).
    pub fn parse(s: Option<&str>) -> Option<ReservationType> {
        match s {
            None | Some("" | "default") => Some(ReservationType::Default),
            Some("capacity-block") => Some(ReservationType::CapacityBlock),
            Some(_) => None,
        }
    }
}

/// One active capacity reservation in the region (ours, or shared with us).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// `cr-…`.
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// The account that owns it (12 digits).
    #[serde(default)]
    pub owner_id: String,
    #[serde(default)]
    pub reservation_type: ReservationType,
    /// `open` or `targeted`.
    #[serde(default = "open")]
    pub instance_match_criteria: String,
    #[serde(default)]
    pub interruptible: bool,
    /// Instances it holds in all.
    #[serde(default)]
    pub total: u32,
    /// Instances that can still be launched into it.
    pub available: u32,
    /// When it ends (capacity blocks always have an end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

fn open() -> String {
    "open".to_owned()
}

impl CapacityReservation {
    /// A capacity block within [`CAPACITY_BLOCK_EXPIRY`] of its end (or
    /// past it): nothing new goes in, what is in it is drained.
    pub fn is_expiring(&self, now: Timestamp) -> bool {
        self.reservation_type == ReservationType::CapacityBlock
            && self
                .end_time
                .is_some_and(|end| now >= end - CAPACITY_BLOCK_EXPIRY)
    }

    /// A new node may go into it now.
    pub fn has_room(&self, now: Timestamp) -> bool {
        self.available > 0 && !self.is_expiring(now)
    }
}

/// The price of a reserved offering of a type whose on-demand price is
/// `on_demand` (zero when the on-demand price is unknown).
pub fn reserved_price(on_demand: Option<f64>) -> f64 {
    on_demand.map_or(0.0, |p| p / RESERVED_PRICE_DIVISOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(end: Timestamp) -> CapacityReservation {
        CapacityReservation {
            id: "cr-0123456789abcdef0".into(),
            instance_type: "p5.48xlarge".into(),
            zone: "us-east-1a".into(),
            owner_id: "012345678901".into(),
            reservation_type: ReservationType::CapacityBlock,
            instance_match_criteria: "targeted".into(),
            interruptible: false,
            total: 2,
            available: 2,
            end_time: Some(end),
            tags: BTreeMap::new(),
        }
    }

    /// aws/karpenter-provider-aws pkg/apis/v1 `CapacityReservationFromEC2`:
    /// a capacity block is expiring from 40 minutes before its end; an
    /// on-demand reservation never is.
    #[test]
    fn a_capacity_block_expires_forty_minutes_before_its_end() {
        let end = Timestamp::from_second(1_800_000_000).unwrap();
        let b = block(end);
        assert!(!b.is_expiring(end - SignedDuration::from_mins(41)));
        assert!(b.has_room(end - SignedDuration::from_mins(41)));
        assert!(b.is_expiring(end - SignedDuration::from_mins(40)));
        assert!(!b.has_room(end - SignedDuration::from_mins(39)));
        let odcr = CapacityReservation {
            reservation_type: ReservationType::Default,
            ..b
        };
        assert!(!odcr.is_expiring(end + SignedDuration::from_mins(1)));
    }

    #[test]
    fn a_full_reservation_has_no_room_and_reserved_is_near_free() {
        let end = Timestamp::from_second(1_800_000_000).unwrap();
        let mut b = block(end);
        b.available = 0;
        assert!(!b.has_room(end - SignedDuration::from_hours(5)));
        assert!(reserved_price(Some(98.32)) < 0.00001);
        assert!(reserved_price(Some(98.32)) > reserved_price(Some(3.0)));
        assert_eq!(reserved_price(None), 0.0);
        assert_eq!(ReservationType::parse(None), Some(ReservationType::Default));
        assert_eq!(
            ReservationType::parse(Some("capacity-block")),
            Some(ReservationType::CapacityBlock)
        );
        assert_eq!(ReservationType::parse(Some("interruptible-x")), None);
    }
}
