//! Capacity reservations: DescribeCapacityReservations read into
//! [`CapacityReservation`]s (every active one of the region, ours and those
//! shared with us; the NodeClasses' selector terms pick among them in the
//! pure code, `provisioning::reservations::select`).

use aws_sdk_ec2::types::{CapacityReservation as Ec2Reservation, Filter, InstanceMatchCriteria};
use tracing::warn;

use super::Ec2Cloud;
use crate::aws::ApiError;
use crate::aws::prices::PriceSource;
use crate::cloud::{CapacityReservation, ReservationType};
use crate::model::Timestamp;
use crate::ports::CloudError;

impl<P: PriceSource> Ec2Cloud<P> {
    /// Every active capacity reservation of the region. One call per page;
    /// never cached (the available counts change with every launch).
    pub(super) async fn list_capacity_reservations(
        &self,
    ) -> Result<Vec<CapacityReservation>, CloudError> {
        let mut out = Vec::new();
        let mut pages = self
            .ec2
            .describe_capacity_reservations()
            .filters(Filter::builder().name("state").values("active").build())
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            self.count();
            let page = page.map_err(|e| {
                CloudError::from(ApiError::from_sdk("DescribeCapacityReservations", e))
            })?;
            for r in page.capacity_reservations() {
                match from_ec2(r) {
                    Some(r) => out.push(r),
                    None => warn!(
                        capacity_reservation_id = ?r.capacity_reservation_id(),
                        reservation_type = ?r.reservation_type(),
                        instance_match_criteria = ?r.instance_match_criteria(),
                        "leaving out a capacity reservation of a kind this version does not know"
                    ),
                }
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// EC2's reservation as ours; `None` for one this version cannot use (no
/// id, type or zone; an unknown reservation type or instance match
/// criteria — Karpenter leaves those out too).
pub(crate) fn from_ec2(r: &Ec2Reservation) -> Option<CapacityReservation> {
    let criteria = match r.instance_match_criteria() {
        Some(InstanceMatchCriteria::Open) => "open",
        Some(InstanceMatchCriteria::Targeted) => "targeted",
        _ => return None,
    };
    let reservation_type = ReservationType::parse(r.reservation_type().map(|t| t.as_str()))?;
    let count = |n: Option<i32>| u32::try_from(n.unwrap_or(0)).unwrap_or(0);
    Some(CapacityReservation {
        id: r.capacity_reservation_id()?.to_owned(),
        instance_type: r.instance_type()?.to_owned(),
        zone: r.availability_zone()?.to_owned(),
        owner_id: r.owner_id().unwrap_or_default().to_owned(),
        reservation_type,
        instance_match_criteria: criteria.to_owned(),
        interruptible: r.interruptible().unwrap_or(false),
        total: count(r.total_instance_count()),
        available: count(r.available_instance_count()),
        end_time: r.end_date().and_then(|t| {
            Timestamp::new(t.secs(), i32::try_from(t.subsec_nanos()).unwrap_or(0)).ok()
        }),
        tags: r
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{CapacityReservationType, Tag};

    use super::*;

    #[test]
    fn an_ec2_reservation_reads_and_unknown_kinds_are_left_out() {
        let base = Ec2Reservation::builder()
            .capacity_reservation_id("cr-0123456789abcdef0")
            .instance_type("p5.48xlarge")
            .availability_zone("us-east-1a")
            .owner_id("012345678901")
            .instance_match_criteria(InstanceMatchCriteria::Targeted)
            .reservation_type(CapacityReservationType::CapacityBlock)
            .total_instance_count(4)
            .available_instance_count(1)
            .end_date(aws_sdk_ec2::primitives::DateTime::from_secs(1_800_000_000))
            .tags(Tag::builder().key("team").value("ml").build());
        let r = from_ec2(&base.clone().build()).expect("reads");
        assert_eq!(r.reservation_type, ReservationType::CapacityBlock);
        assert_eq!((r.total, r.available), (4, 1));
        assert_eq!(r.instance_match_criteria, "targeted");
        assert_eq!(r.end_time, Timestamp::from_second(1_800_000_000).ok());
        assert_eq!(r.tags.get("team").map(String::as_str), Some("ml"));
        let unknown = base
            .instance_match_criteria(InstanceMatchCriteria::from("someday"))
            .build();
        assert!(from_ec2(&unknown).is_none());
    }
}
