//! Offerings as bit masks over a pool's (zone, capacity type, capacity
//! reservation) pairs: what a set of requirements allows of them is a mask,
//! and the mask of a join is the AND of its parts'.

use std::collections::BTreeSet;

use crate::cloud::{InstanceType, OfferingReservation};
use crate::scheduling::labels;
use crate::scheduling::requirements::Requirements;

/// Each type's available offerings as a bit mask over the pool's (zone,
/// capacity type) pairs, so "does this type still have an offering in the
/// zones left" is one AND instead of string comparisons.
#[derive(Debug, Clone)]
pub(super) struct OfferingMasks {
    /// The pairs (zone, capacity type, and the reservation of a `reserved`
    /// offering), at most 128; `None` when there are more (then checks fall
    /// back to strings).
    pub(super) pairs: Option<Vec<Pair>>,
    pub(super) masks: Vec<u128>,
    /// Per type, per offering: its pair's bit index (unavailable offerings: none).
    pub(super) offering_bits: Vec<Vec<Option<u8>>>,
    /// Per zone, and per capacity type, the bits of its pairs.
    pub(super) by_zone: Vec<(String, u128)>,
    pub(super) by_capacity_type: Vec<(String, u128)>,
}

/// What an offering's bit stands for: its zone, capacity type and reservation.
pub(super) type Pair = (String, String, Option<OfferingReservation>);

impl OfferingMasks {
    pub(super) fn new(types: &[InstanceType]) -> Self {
        let pairs: BTreeSet<(&str, &str, Option<&str>)> = types
            .iter()
            .flat_map(|t| {
                t.offerings.iter().filter(|o| o.available).map(|o| {
                    (
                        o.zone.as_str(),
                        o.capacity_type.as_str(),
                        o.reservation.as_ref().map(|r| r.id.as_str()),
                    )
                })
            })
            .collect();
        if pairs.len() > 128 {
            return OfferingMasks {
                pairs: None,
                masks: Vec::new(),
                offering_bits: Vec::new(),
                by_zone: Vec::new(),
                by_capacity_type: Vec::new(),
            };
        }
        let reservation_of = |id: &str| {
            types
                .iter()
                .flat_map(|t| &t.offerings)
                .find_map(|o| o.reservation.as_ref().filter(|r| r.id == id))
                .cloned()
        };
        let pairs: Vec<Pair> = pairs
            .into_iter()
            .map(|(z, c, r)| (z.to_owned(), c.to_owned(), r.and_then(reservation_of)))
            .collect();
        let offering_bits: Vec<Vec<Option<u8>>> = types
            .iter()
            .map(|t| {
                t.offerings
                    .iter()
                    .map(|o| {
                        o.available
                            .then(|| {
                                pairs.iter().position(|(z, c, r)| {
                                    *z == o.zone
                                        && *c == o.capacity_type
                                        && r.as_ref().map(|r| &r.id)
                                            == o.reservation.as_ref().map(|r| &r.id)
                                })
                            })
                            .flatten()
                            .map(|i| i as u8)
                    })
                    .collect()
            })
            .collect();
        let masks = offering_bits
            .iter()
            .map(|bits| bits.iter().flatten().fold(0u128, |m, i| m | (1 << i)))
            .collect();
        let bits_by = |value: &dyn Fn(&Pair) -> &String| {
            let mut out: Vec<(String, u128)> = Vec::new();
            for (i, pair) in pairs.iter().enumerate() {
                match out.iter_mut().find(|(v, _)| v == value(pair)) {
                    Some((_, bits)) => *bits |= 1 << i,
                    None => out.push((value(pair).clone(), 1 << i)),
                }
            }
            out
        };
        let by_zone = bits_by(&|(zone, _, _)| zone);
        let by_capacity_type = bits_by(&|(_, capacity_type, _)| capacity_type);
        OfferingMasks {
            pairs: Some(pairs),
            masks,
            offering_bits,
            by_zone,
            by_capacity_type,
        }
    }

    /// What the requirements allow of the pool's offerings.
    pub(super) fn of<'r>(&self, reqs: &'r Requirements) -> Offered<'r> {
        match self.pairs {
            Some(_) => Offered::Mask(self.allowed(reqs)),
            None => Offered::Reqs(reqs),
        }
    }

    /// True when offering `oi` of type `t` is available and allowed.
    pub(super) fn offering_allowed(
        &self,
        t: usize,
        oi: usize,
        offered: Offered,
        o: &crate::cloud::Offering,
    ) -> bool {
        match offered {
            Offered::Mask(allowed) => {
                self.offering_bits[t][oi].is_some_and(|b| allowed & (1 << b) != 0)
            }
            Offered::Reqs(reqs) => o.allowed_by(reqs),
        }
    }

    /// The pairs the requirements allow: those of an allowed zone and an
    /// allowed capacity type (a few set lookups, not one per pair), and,
    /// when the requirements say anything of the capacity-reservation
    /// labels, of an allowed reservation (or none).
    pub(super) fn allowed(&self, reqs: &Requirements) -> u128 {
        let pick = |key: &str, masks: &[(String, u128)]| match reqs.get(key) {
            None => u128::MAX,
            Some(r) => masks
                .iter()
                .filter(|(v, _)| r.has(v))
                .fold(0, |m, (_, bits)| m | bits),
        };
        let mut allowed =
            pick(labels::ZONE, &self.by_zone) & pick(labels::CAPACITY_TYPE, &self.by_capacity_type);
        if let Some(pairs) = &self.pairs
            && labels::CAPACITY_RESERVATION
                .iter()
                .any(|k| reqs.contains_key(k))
        {
            for (i, (_, _, r)) in pairs.iter().enumerate() {
                if !crate::cloud::instance_type::reservation_allowed(r.as_ref(), reqs) {
                    allowed &= !(1u128 << i);
                }
            }
        }
        allowed
    }

    pub(super) fn offered(&self, t: usize, offered: Offered, it: &InstanceType) -> bool {
        match offered {
            Offered::Mask(allowed) => self.masks[t] & allowed != 0,
            Offered::Reqs(reqs) => it.has_offering(reqs),
        }
    }
}

/// The offerings a claim may launch as: a mask over its pool's (zone,
/// capacity type) pairs (`OfferingMasks::allowed`; the mask of a join of
/// requirements is the AND of theirs), or, in a pool with too many pairs
/// for masks, the requirements themselves.
#[derive(Debug, Clone, Copy)]
pub(super) enum Offered<'r> {
    Mask(u128),
    Reqs(&'r Requirements),
}

/// The keys offerings depend on: zone, capacity type and the
/// capacity-reservation labels.
pub(super) const OFFERING_KEYS: [&str; 5] = [
    labels::ZONE,
    labels::CAPACITY_TYPE,
    labels::CAPACITY_RESERVATION_ID,
    labels::CAPACITY_RESERVATION_TYPE,
    labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// Only the requirements on [`OFFERING_KEYS`]: all that offerings depend on.
pub(super) fn offering_keys(reqs: &Requirements) -> Requirements {
    let mut out = Requirements::new();
    for key in OFFERING_KEYS {
        if let Some(r) = reqs.get(key) {
            out.add(key, r.clone());
        }
    }
    out
}
