//! Capacity reservations in the provisioning decision, pure: which
//! reservations a NodeClass's `capacityReservationSelectorTerms` select,
//! the `reserved` offerings they add to a pool's instance types, how many
//! claims of a batch may count on each, and which nodes sit in a capacity
//! block about to end.
//!
//! As Karpenter v1.15 does it (aws/karpenter-provider-aws
//! `pkg/providers/capacityreservation`, `pkg/providers/instancetype/offering`,
//! `pkg/controllers/capacityreservation/expiration`), with two differences
//! on purpose: the reservations of one (type, zone) make one offering
//! (its room is their sum; the launch targets one of them with room), and a
//! claim keeps its on-demand and spot options beside its reserved ones, so
//! a reservation found full at launch falls back in the same launch instead
//! of in the next scheduling pass.

use std::collections::{BTreeMap, BTreeSet};

use crate::cloud::{CapacityReservation, Offering, ReservationType};
use crate::config::nodeclass::CapacityReservationSelectorTermSpec;
use crate::config::{NodeClass, NodePool};
use crate::ports::{CloudCatalog, PricedOffering, Timestamp};
use crate::provisioning::claim::Claim;
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

/// Room left per (instance type, zone) in `reservations`.
fn room(reservations: &[&CapacityReservation]) -> BTreeMap<(String, String), u32> {
    let mut room = BTreeMap::new();
    for r in reservations {
        *room
            .entry((r.instance_type.clone(), r.zone.clone()))
            .or_insert(0) += r.available;
    }
    room
}

/// The `reserved` offerings `pool`'s reservations add, by instance type:
/// one per (type, zone), priced at the type's on-demand price in that zone
/// divided by 10,000,000, available while a reservation there has room.
pub fn offerings(pool: &NodePool, catalog: &CloudCatalog) -> BTreeMap<String, Vec<Offering>> {
    let mut out: BTreeMap<String, Vec<Offering>> = BTreeMap::new();
    for ((ty, zone), left) in room(&of_pool(pool, catalog)) {
        let on_demand = catalog
            .offerings
            .iter()
            .find(|o| {
                o.instance_type == ty
                    && o.zone == zone
                    && o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND
            })
            .map(|o| o.price);
        let mut offering = Offering::new(
            &zone,
            labels::CAPACITY_TYPE_RESERVED,
            crate::cloud::reservation::reserved_price(on_demand),
        );
        offering.available = left > 0;
        out.entry(ty).or_default().push(offering);
    }
    out
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
        .filter(|r| {
            r.instance_type == option.instance_type && r.zone == option.zone && r.available > 0
        })
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
) -> Vec<(crate::ports::PodKey, String)> {
    let refs: Vec<&CapacityReservation> = reservations.iter().collect();
    let mut room = room(&refs);
    let mut out = Vec::new();
    claims.retain_mut(|c| {
        let mut cheapest: Option<(f64, (String, String))> = None;
        let mut dropped = Vec::new();
        c.options.retain(|o| {
            if o.capacity_type != labels::CAPACITY_TYPE_RESERVED {
                return true;
            }
            let key = (o.instance_type.clone(), o.zone.clone());
            let keep = room.get(&key).is_some_and(|n| *n > 0);
            if keep && cheapest.as_ref().is_none_or(|(p, _)| o.price < *p) {
                cheapest = Some((o.price, key.clone()));
            }
            if !keep {
                dropped.push(key);
            }
            keep
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
        if let Some((_, key)) = cheapest
            && let Some(n) = room.get_mut(&key)
        {
            *n -= 1;
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
}
