//! Capacity reservations in the provisioning decision, pure: which
//! reservations a NodeClass's `capacityReservationSelectorTerms` select,
//! the `reserved` offerings they add to a pool's instance types, how many
//! claims of a batch may count on each, and which nodes sit in a capacity
//! block about to end.
//!
//! As Karpenter v1.15 does it (aws/karpenter-provider-aws
//! `pkg/providers/capacityreservation`, `pkg/providers/instancetype/offering`,
//! `pkg/controllers/capacityreservation/expiration`): one `reserved`
//! offering per reservation, carrying its id, type and interruptibility
//! for requirements to select. Two differences on purpose: a claim's
//! reserved option may go into any reservation of its type and zone that
//! its requirements allow (the option names them when the requirements say
//! anything of the reservation labels), and a claim keeps its on-demand and
//! spot options beside its reserved ones, so a reservation found full at
//! launch falls back in the same launch instead of in the next scheduling
//! pass.

use std::collections::{BTreeMap, BTreeSet};

use crate::cloud::{CapacityReservation, Offering, OfferingReservation, ReservationType};
use crate::config::nodeclass::CapacityReservationSelectorTermSpec;
use crate::config::{NodeClass, NodePool};
use crate::model::claim::Claim;
use crate::model::{CloudCatalog, PricedOffering, Timestamp};
use crate::scheduling::labels;

/// True when `term` selects `r`: by id alone, or by every tag (value `*`:
/// any value), the owner and the instance match criteria it names.
pub fn selects(term: &CapacityReservationSelectorTermSpec, r: &CapacityReservation) -> bool {
    if let Some(id) = &term.id {
        return *id == r.id;
    }
    if term.owner_id.as_ref().is_some_and(|o| *o != r.owner_id) {
        return false;
    }
    if term
        .instance_match_criteria
        .as_ref()
        .is_some_and(|m| *m != r.instance_match_criteria)
    {
        return false;
    }
    term.tags
        .iter()
        .all(|(k, v)| r.tags.get(k).is_some_and(|have| v == "*" || have == v))
}

/// The reservations any of `terms` selects (terms are ORed), by id.
pub fn select<'a>(
    terms: &[CapacityReservationSelectorTermSpec],
    all: &'a [CapacityReservation],
) -> Vec<&'a CapacityReservation> {
    let mut out: Vec<&CapacityReservation> = all
        .iter()
        .filter(|r| terms.iter().any(|t| selects(t, r)))
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out.dedup_by(|a, b| a.id == b.id);
    out
}

/// The reservations `pool`'s NodeClass selects from those of the tick.
pub fn of_pool<'a>(pool: &NodePool, catalog: &'a CloudCatalog) -> Vec<&'a CapacityReservation> {
    match pool.resolved_class.as_deref() {
        Some(class) if !catalog.reservations.is_empty() => select(
            &class.capacity_reservation_selector_terms,
            &catalog.reservations,
        ),
        _ => Vec::new(),
    }
}

/// The reservations the tick plans with: those any NodeClass selects,
/// each with no room once it is an expiring capacity block (nothing new
/// goes into one).
pub fn for_tick(
    all: Vec<CapacityReservation>,
    classes: &[NodeClass],
    now: Timestamp,
) -> Vec<CapacityReservation> {
    let mut out: Vec<CapacityReservation> = all
        .into_iter()
        .filter(|r| {
            classes.iter().any(|c| {
                c.capacity_reservation_selector_terms
                    .iter()
                    .any(|t| selects(t, r))
            })
        })
        .map(|mut r| {
            if r.is_expiring(now) {
                r.available = 0;
            }
            r
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out.dedup_by(|a, b| a.id == b.id);
    out
}

/// True when some NodeClass selects capacity reservations (then the tick
/// lists them).
pub fn wanted(classes: &[NodeClass]) -> bool {
    classes
        .iter()
        .any(|c| !c.capacity_reservation_selector_terms.is_empty())
}

/// True when a launch of `option` (a `reserved` one) may target `r`: the
/// same type and zone, and one of the reservations the option names if it
/// names any.
pub fn may_target(option: &PricedOffering, r: &CapacityReservation) -> bool {
    r.instance_type == option.instance_type
        && r.zone == option.zone
        && (option.reservation_ids.is_empty() || option.reservation_ids.contains(&r.id))
}

/// The `reserved` offerings `pool`'s reservations add, by instance type:
/// one per reservation (as Karpenter's `reserved_capacity_resolver`),
/// carrying its id, type and interruptibility for requirements to select,
/// priced at the type's on-demand price in that zone divided by
/// 10,000,000, available while the reservation has room.
pub fn offerings(pool: &NodePool, catalog: &CloudCatalog) -> BTreeMap<String, Vec<Offering>> {
    let mut out: BTreeMap<String, Vec<Offering>> = BTreeMap::new();
    for r in of_pool(pool, catalog) {
        let on_demand = catalog
            .offerings
            .iter()
            .find(|o| {
                o.instance_type == r.instance_type
                    && o.zone == r.zone
                    && o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND
            })
            .map(|o| o.price);
        let mut offering = Offering::new(
            &r.zone,
            labels::CAPACITY_TYPE_RESERVED,
            crate::cloud::reservation::reserved_price(on_demand),
        );
        offering.available = r.available > 0;
        offering.reservation = Some(OfferingReservation {
            id: r.id.clone(),
            reservation_type: r.reservation_type,
            interruptible: r.interruptible,
        });
        out.entry(r.instance_type.clone())
            .or_default()
            .push(offering);
    }
    out
}

/// The order a launch tries the reservations of one offering in, as
/// Karpenter ranks them at the same price (aws/karpenter-provider-aws
/// `pkg/providers/instance/filter` `CapacityReservationTypeFilter`): an
/// on-demand capacity reservation first, then a capacity block, an
/// interruptible reservation (its owner may take it back) last; by id
/// within each.
pub fn by_preference(reservations: &mut [CapacityReservation]) {
    let rank = |r: &CapacityReservation| match (r.reservation_type, r.interruptible) {
        (ReservationType::Default, false) => 0u8,
        (ReservationType::CapacityBlock, _) => 1,
        (ReservationType::Default, true) => 2,
    };
    reservations.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.id.cmp(&b.id)));
}

/// The reservations of `pool` with room for `option` (a `reserved` one),
/// fullest-first by id for a stable choice.
pub fn targets<'a>(
    reservations: &[&'a CapacityReservation],
    option: &PricedOffering,
) -> Vec<&'a CapacityReservation> {
    reservations
        .iter()
        .copied()
        .filter(|r| may_target(option, r) && r.available > 0)
        .collect()
}

/// Claims of one batch may not count on more reserved instances than the
/// reservations hold: in order, each claim keeps the reserved options that
/// still have room and takes one unit of its cheapest one; the others lose
/// their reserved options (they launch on-demand or spot). A reserved
/// option dropped becomes the same type and zone bought as each capacity
/// type the claim already has an option of (so the claim's requirements
/// allow it), at the catalog's price: a full reservation falls back to its
/// own type, not only to the claim's dearer ones. A claim left with no
/// option at all is removed and its pods returned with the reason.
/// (Karpenter's `ReservationManager` reserves every compatible offering of
/// a claim; taking one keeps the rest for the next claims, and a launch
/// that finds its reservation full falls back on the spot.)
pub fn limit(
    claims: &mut Vec<Claim>,
    reservations: &[CapacityReservation],
    catalog: &[PricedOffering],
) -> Vec<(crate::model::PodKey, String)> {
    // Room per reservation, taken in the order a launch tries them.
    let mut ordered = reservations.to_vec();
    by_preference(&mut ordered);
    let mut room: Vec<(&CapacityReservation, u32)> =
        ordered.iter().map(|r| (r, r.available)).collect();
    let mut out = Vec::new();
    claims.retain_mut(|c| {
        let mut cheapest: Option<(f64, usize)> = None;
        let mut dropped = Vec::new();
        c.options.retain(|o| {
            if o.capacity_type != labels::CAPACITY_TYPE_RESERVED {
                return true;
            }
            let target = room.iter().position(|(r, n)| *n > 0 && may_target(o, r));
            match target {
                Some(i) => {
                    if cheapest.as_ref().is_none_or(|(p, _)| o.price < *p) {
                        cheapest = Some((o.price, i));
                    }
                    true
                }
                None => {
                    dropped.push((o.instance_type.clone(), o.zone.clone()));
                    false
                }
            }
        });
        if !dropped.is_empty() {
            let kinds: BTreeSet<String> = c
                .options
                .iter()
                .filter(|o| o.capacity_type != labels::CAPACITY_TYPE_RESERVED)
                .map(|o| o.capacity_type.clone())
                .collect();
            for (ty, zone) in dropped {
                for bought in catalog.iter().filter(|o| {
                    o.instance_type == ty && o.zone == zone && kinds.contains(&o.capacity_type)
                }) {
                    if !c.options.contains(bought) {
                        c.options.push(bought.clone());
                    }
                }
            }
            c.options.sort_by(|a, b| a.price.total_cmp(&b.price));
        }
        if let Some((_, i)) = cheapest {
            room[i].1 -= 1;
        }
        if c.options.is_empty() {
            for p in &c.pods {
                out.push((
                    p.clone(),
                    "the capacity reservations this pod may use are full".to_owned(),
                ));
            }
            return false;
        }
        true
    });
    out
}

/// Claims whose instance runs in a capacity block that is expiring now
/// (within 40 minutes of its end), with the block's end: they are drained
/// and replaced before EC2 takes the instances back. A block the listing
/// no longer shows is past its end: its claims are not named here (EC2's
/// own interruption event covers them).
pub fn in_expiring_blocks<'a>(
    claims: &'a [Claim],
    all: &[CapacityReservation],
    now: Timestamp,
) -> Vec<(&'a Claim, Timestamp)> {
    let expiring: BTreeMap<&str, Timestamp> = all
        .iter()
        .filter(|r| r.is_expiring(now))
        .filter_map(|r| Some((r.id.as_str(), r.end_time?)))
        .collect();
    let mut seen = BTreeSet::new();
    claims
        .iter()
        .filter_map(|c| {
            let i = c.instance.as_ref()?;
            if i.capacity_reservation_type != Some(ReservationType::CapacityBlock) {
                return None;
            }
            let end = *expiring.get(i.capacity_reservation_id.as_deref()?)?;
            seen.insert(c.id.as_str()).then_some((c, end))
        })
        .collect()
}

/// The instance a claim in a capacity reservation has once the listing
/// of active reservations is taken into account, when that changes it:
///
/// - its reservation is no longer listed (expired, cancelled): the
///   instance runs on as on-demand capacity, so the claim is demoted to
///   `on-demand` at `on_demand(type, zone)`'s price (kept when unknown)
///   and loses its reservation (Karpenter's capacity-type controller,
///   aws/karpenter-provider-aws
///   `pkg/controllers/capacityreservation/capacitytype`);
/// - its reservation is listed but the claim does not say its kind
///   (a claim adopted from an instance whose lifecycle did not say, or
///   recorded before the kind was kept): the kind and interruptibility
///   the listing gives, so a capacity block is drained before it ends.
///
/// Only claims whose instance is `reserved` are looked at (Karpenter
/// never promotes on-demand capacity to reserved).
///
/// A listing that comes back empty is no evidence by itself (a listing
/// scoped or answered wrong would demote every reserved node, and their
/// price with it): Karpenter reads the end from the instance itself (its
/// capacity-type controller takes the capacity type the cloud provider
/// gives each instance, reserved only while the instance names a
/// reservation), so with an empty listing a claim is demoted only when
/// `instances` (the cloud's description, read by the caller only then)
/// show its instance no longer in its reservation; an instance not
/// described keeps its claim as it is.
pub fn reconcile<'a>(
    claims: &'a [Claim],
    active: &[CapacityReservation],
    instances: &[crate::model::Instance],
    on_demand: impl Fn(&str, &str) -> Option<f64>,
) -> Vec<(&'a Claim, crate::model::claim::ClaimInstance)> {
    let by_id: BTreeMap<&str, &CapacityReservation> =
        active.iter().map(|r| (r.id.as_str(), r)).collect();
    let left = |i: &crate::model::claim::ClaimInstance| {
        !active.is_empty()
            || instances.iter().any(|d| {
                d.id == i.id
                    && d.capacity_reservation_id.as_deref() != i.capacity_reservation_id.as_deref()
            })
    };
    claims
        .iter()
        .filter_map(|c| {
            let i = c.instance.as_ref()?;
            if i.capacity_type != labels::CAPACITY_TYPE_RESERVED {
                return None;
            }
            let mut next = i.clone();
            match i
                .capacity_reservation_id
                .as_deref()
                .and_then(|id| by_id.get(id))
            {
                None if !left(i) => return None,
                None => {
                    next.capacity_type = labels::CAPACITY_TYPE_ON_DEMAND.to_owned();
                    next.capacity_reservation_id = None;
                    next.capacity_reservation_type = None;
                    next.capacity_reservation_interruptible = false;
                    if let Some(p) = on_demand(&i.instance_type, &i.zone) {
                        next.price = p;
                    }
                }
                Some(r) => {
                    next.capacity_reservation_type = Some(r.reservation_type);
                    next.capacity_reservation_interruptible = r.interruptible;
                }
            }
            (next != *i).then_some((c, next))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(id: &str, ty: &str, zone: &str, available: u32) -> CapacityReservation {
        CapacityReservation {
            id: id.into(),
            instance_type: ty.into(),
            zone: zone.into(),
            owner_id: "012345678901".into(),
            reservation_type: ReservationType::Default,
            instance_match_criteria: "targeted".into(),
            interruptible: false,
            total: available,
            available,
            end_time: None,
            tags: [("team".to_owned(), "ml".to_owned())].into_iter().collect(),
        }
    }

    fn term(json: serde_json::Value) -> CapacityReservationSelectorTermSpec {
        serde_json::from_value(json).expect("term")
    }

    /// aws/karpenter-provider-aws pkg/providers/capacityreservation
    /// suite_test.go and types.go: a term selects by id alone, or by tags
    /// (all of them), owner and instance match criteria together; terms
    /// are ORed.
    #[test]
    fn terms_select_by_id_or_by_tags_owner_and_criteria() {
        let a = cr("cr-0000000000000000a", "m5.large", "us-east-1a", 1);
        let mut b = cr("cr-0000000000000000b", "m5.large", "us-east-1b", 1);
        b.owner_id = "999999999999".into();
        b.instance_match_criteria = "open".into();
        let all = vec![a.clone(), b.clone()];
        let ids = |terms: &[CapacityReservationSelectorTermSpec]| -> Vec<String> {
            select(terms, &all).iter().map(|r| r.id.clone()).collect()
        };
        assert_eq!(
            ids(&[term(serde_json::json!({"id": a.id}))]),
            vec![a.id.clone()]
        );
        assert_eq!(
            ids(&[term(serde_json::json!({"tags": {"team": "*"}}))]),
            [a.id.clone(), b.id.clone()]
        );
        assert_eq!(
            ids(&[term(
                serde_json::json!({"tags": {"team": "ml"}, "ownerID": "999999999999"})
            )]),
            vec![b.id.clone()]
        );
        assert_eq!(
            ids(&[term(
                serde_json::json!({"instanceMatchCriteria": "targeted"})
            )]),
            vec![a.id.clone()]
        );
        assert!(ids(&[term(serde_json::json!({"tags": {"team": "web"}}))]).is_empty());
        // ORed, and one reservation once.
        assert_eq!(
            ids(&[
                term(serde_json::json!({"id": a.id})),
                term(serde_json::json!({"tags": {"team": "ml"}})),
            ]),
            [a.id.clone(), b.id.clone()]
        );
    }

    fn claim(id: &str, options: &[(&str, &str, f64)]) -> Claim {
        let mut v = serde_json::json!({
            "id": id, "pool": "p", "node_class": null, "version": 1,
            "created_at": "2026-01-01T00:00:00Z",
            "options": [], "labels": {}, "taints": [], "kubelet": {},
            "pods": [{"namespace": "default", "name": format!("pod-{id}"), "uid": format!("uid-{id}")}],
            "requests": {}, "reservation": {},
        });
        v["options"] = options
            .iter()
            .map(|(t, ct, price)| {
                serde_json::json!({"instance_type": t, "zone": "us-east-1a", "capacity_type": ct, "price": price})
            })
            .collect();
        serde_json::from_value(v).expect("claim")
    }

    #[test]
    fn a_batch_counts_on_no_more_reserved_instances_than_there_are() {
        let reservations = vec![cr("cr-0000000000000000a", "m5.large", "us-east-1a", 2)];
        let mut claims = vec![
            claim(
                "a",
                &[
                    ("m5.large", "reserved", 1e-8),
                    ("m5.large", "on-demand", 0.096),
                ],
            ),
            claim(
                "b",
                &[
                    ("m5.large", "reserved", 1e-8),
                    ("m5.large", "on-demand", 0.096),
                ],
            ),
            claim(
                "c",
                &[
                    ("m5.large", "reserved", 1e-8),
                    ("m5.xlarge", "on-demand", 0.192),
                ],
            ),
            claim("d", &[("m5.large", "reserved", 1e-8)]),
        ];
        let catalog = vec![PricedOffering {
            reservation_ids: Vec::new(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price: 0.096,
        }];
        let refused = limit(&mut claims, &reservations, &catalog);
        let kinds: Vec<Vec<&str>> = claims
            .iter()
            .map(|c| c.options.iter().map(|o| o.capacity_type.as_str()).collect())
            .collect();
        assert_eq!(
            kinds,
            [
                vec!["reserved", "on-demand"],
                vec!["reserved", "on-demand"],
                vec!["on-demand", "on-demand"]
            ],
            "two reserved, the third falls back, the fourth has nothing left"
        );
        assert_eq!(
            claims[2]
                .options
                .iter()
                .map(|o| o.instance_type.as_str())
                .collect::<Vec<_>>(),
            ["m5.large", "m5.xlarge"],
            "the third falls back to the reserved type on-demand first, then its own options"
        );
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0.name, "pod-d");
    }

    fn reserved(id: &str, reservation: Option<&str>, kind: Option<ReservationType>) -> Claim {
        let mut c = claim(id, &[]);
        c.instance = Some(crate::model::claim::ClaimInstance {
            id: format!("i-{id}"),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "reserved".into(),
            price: 1e-8,
            provider_id: format!("aws:///us-east-1a/i-{id}"),
            launched_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            capacity_reservation_id: reservation.map(str::to_owned),
            capacity_reservation_type: kind,
            capacity_reservation_interruptible: false,
        });
        c
    }

    /// aws/karpenter-provider-aws
    /// pkg/controllers/capacityreservation/capacitytype/suite_test.go,
    /// It("should demote nodeclaims and nodes from reserved to on-demand"):
    /// a reservation no longer active demotes its claims to on-demand and
    /// drops their reservation. Ours keeps the listing as the signal (the
    /// instance's own view in Karpenter) and also fills in the kind of a
    /// reservation still listed when the claim does not know it.
    #[test]
    fn a_claim_whose_reservation_ended_becomes_on_demand() {
        let mut listed = cr("cr-0000000000000000a", "m5.large", "us-east-1a", 0);
        listed.reservation_type = ReservationType::CapacityBlock;
        listed.interruptible = false;
        let mut odcr = cr("cr-0000000000000000c", "m5.large", "us-east-1a", 0);
        odcr.interruptible = true;
        let claims = vec![
            reserved(
                "ended",
                Some("cr-0000000000000000b"),
                Some(ReservationType::Default),
            ),
            reserved("adopted", Some("cr-0000000000000000a"), None),
            reserved(
                "known",
                Some("cr-0000000000000000a"),
                Some(ReservationType::CapacityBlock),
            ),
            reserved(
                "interruptible",
                Some("cr-0000000000000000c"),
                Some(ReservationType::Default),
            ),
        ];
        let price =
            |ty: &str, zone: &str| (ty == "m5.large" && zone == "us-east-1a").then_some(0.096);
        let changed = reconcile(&claims, &[listed.clone(), odcr], &[], price);
        let by: BTreeMap<&str, &crate::model::claim::ClaimInstance> =
            changed.iter().map(|(c, i)| (c.id.as_str(), i)).collect();
        assert_eq!(
            by.len(),
            3,
            "the claim that says what is listed is left: {by:?}"
        );
        let ended = by["ended"];
        assert_eq!(ended.capacity_type, "on-demand");
        assert_eq!(ended.capacity_reservation_id, None);
        assert_eq!(ended.capacity_reservation_type, None);
        assert_eq!(ended.price, 0.096, "a demoted node costs on-demand now");
        assert_eq!(by["adopted"].capacity_type, "reserved");
        assert_eq!(
            by["adopted"].capacity_reservation_type,
            Some(ReservationType::CapacityBlock)
        );
        assert!(by["interruptible"].capacity_reservation_interruptible);
        // An on-demand claim is never promoted.
        let mut on_demand = reserved("od", None, None);
        on_demand.instance.as_mut().unwrap().capacity_type = "on-demand".into();
        let all = [claims[0].clone(), on_demand];
        let changed = reconcile(&all, &[listed.clone()], &[], |_, _| None);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].0.id, "ended");
        assert_eq!(changed[0].1.price, 1e-8, "an unknown price is kept");
    }

    /// An empty listing demotes nothing by itself; the instance's own
    /// description decides, as in Karpenter (capacitytype/controller.go
    /// takes the capacity type the cloud provider gives each instance:
    /// suite_test.go It("should demote nodeclaims and nodes from reserved
    /// to on-demand") changes the instance, not a listing).
    #[test]
    fn an_empty_listing_demotes_only_claims_whose_instance_left_its_reservation() {
        let claims = vec![
            reserved(
                "still",
                Some("cr-0000000000000000a"),
                Some(ReservationType::Default),
            ),
            reserved(
                "left",
                Some("cr-0000000000000000b"),
                Some(ReservationType::Default),
            ),
            reserved(
                "unknown",
                Some("cr-0000000000000000c"),
                Some(ReservationType::Default),
            ),
        ];
        let described = |c: &Claim, reservation: Option<&str>| {
            let i = c.instance.as_ref().unwrap();
            crate::model::Instance {
                id: i.id.clone(),
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
                capacity_type: if reservation.is_some() {
                    "reserved"
                } else {
                    "on-demand"
                }
                .into(),
                state: crate::model::InstanceState::Running,
                launched_at: i.launched_at,
                claim_id: Some(c.id.clone()),
                pool: None,
                node_class: None,
                provider_id: i.provider_id.clone(),
                price: 0.096,
                image_id: None,
                subnet_id: None,
                security_group_ids: vec![],
                capacity_reservation_id: reservation.map(str::to_owned),
                capacity_reservation_type: None,
                capacity_reservation_interruptible: false,
            }
        };
        // Nothing described: nothing demoted (the listing alone says nothing).
        assert!(reconcile(&claims, &[], &[], |_, _| Some(0.096)).is_empty());
        let instances = [
            described(&claims[0], Some("cr-0000000000000000a")),
            described(&claims[1], None),
        ];
        let changed = reconcile(&claims, &[], &instances, |_, _| Some(0.096));
        let ids: Vec<&str> = changed.iter().map(|(c, _)| c.id.as_str()).collect();
        assert_eq!(ids, ["left"]);
        assert_eq!(changed[0].1.capacity_type, "on-demand");
        assert_eq!(changed[0].1.capacity_reservation_id, None);
        assert_eq!(changed[0].1.price, 0.096);
    }

    /// aws/karpenter-provider-aws pkg/providers/instance/filter
    /// `CapacityReservationTypeFilter`: at the same price a plain
    /// reservation is used before a capacity block, an interruptible one last.
    #[test]
    fn a_launch_prefers_a_plain_reservation_and_an_interruptible_one_last() {
        let mut interruptible = cr("cr-0000000000000000a", "m5.large", "us-east-1a", 1);
        interruptible.interruptible = true;
        let mut block = cr("cr-0000000000000000b", "m5.large", "us-east-1a", 1);
        block.reservation_type = ReservationType::CapacityBlock;
        let plain = cr("cr-0000000000000000c", "m5.large", "us-east-1a", 1);
        let mut all = vec![interruptible, block, plain];
        by_preference(&mut all);
        let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "cr-0000000000000000c",
                "cr-0000000000000000b",
                "cr-0000000000000000a"
            ]
        );
    }
}
