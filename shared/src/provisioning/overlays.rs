//! NodeOverlays applied to a pool's instance types, before the packer
//! sees them: the price of the offerings an overlay selects, and extended
//! resources added to the types' capacity. Karpenter's rules: overlays are
//! weighed highest weight first (ties: later names first); an offering's
//! price is set by the first overlay that selects it, a capacity resource
//! by the first that names it; an overlay that would change what another
//! of the same weight already changed conflicts and is left out whole.
//!
//! An overlay selects a type when every key it requires is defined by the
//! pool (its name and template labels) or the type and intersects it (or
//! accepts absence), and, within the type, the offerings whose zone and
//! capacity type it allows.

use std::collections::BTreeMap;

use crate::cloud::InstanceType;
use crate::config::NodePool;
use crate::config::overlay::{NodeOverlay, by_weight};
use crate::scheduling::labels;
use crate::scheduling::requirements::{Requirement, Requirements};

/// `types` with `pool`'s overlays applied (unchanged without overlays).
pub fn apply(pool: &NodePool, types: Vec<InstanceType>) -> Vec<InstanceType> {
    if pool.overlays.is_empty() {
        return types;
    }
    let ordered = by_weight(&pool.overlays);
    let mut base = Requirements::from_labels(&pool.labels);
    base.add(labels::NODEPOOL, Requirement::single(pool.name.clone()));
    // What each overlay would change, per type: offering indices, and
    // whether it changes capacity.
    let mut plans: Vec<(&NodeOverlay, Vec<TypeOfferings>)> = Vec::new();
    for o in &ordered {
        let mut per_type = Vec::new();
        for (t, it) in types.iter().enumerate() {
            let mut reqs = base.clone();
            reqs.add_all(&it.requirements);
            if !selects(&o.requirements, &reqs) {
                continue;
            }
            let offerings: Vec<usize> = it
                .offerings
                .iter()
                .enumerate()
                .filter(|(_, of)| {
                    o.requirements.allows(labels::ZONE, Some(&of.zone))
                        && o.requirements
                            .allows(labels::CAPACITY_TYPE, Some(&of.capacity_type))
                })
                .map(|(i, _)| i)
                .collect();
            if !offerings.is_empty() {
                per_type.push((t, offerings));
            }
        }
        plans.push((o, per_type));
    }
    // (type, offering) → weight of the overlay that priced it;
    // (type, resource) → weight of the overlay that set it.
    let mut priced: BTreeMap<(usize, usize), i32> = BTreeMap::new();
    let mut sized: BTreeMap<(usize, String), i32> = BTreeMap::new();
    let mut types = types;
    for (o, per_type) in plans {
        let conflict = per_type.iter().any(|(t, offerings)| {
            (o.price.is_some()
                && offerings
                    .iter()
                    .any(|i| priced.get(&(*t, *i)) == Some(&o.weight)))
                || o.capacity
                    .extended
                    .iter()
                    .any(|(r, _)| sized.get(&(*t, r.clone())) == Some(&o.weight))
        });
        if conflict {
            continue;
        }
        for (t, offerings) in per_type {
            let it = &mut types[t];
            if let Some(change) = o.price {
                for i in offerings {
                    if let std::collections::btree_map::Entry::Vacant(e) = priced.entry((t, i)) {
                        e.insert(o.weight);
                        it.offerings[i].price = change.apply(it.offerings[i].price);
                    }
                }
            }
            let mut capacity = it.capacity.clone();
            let mut grew = false;
            for (r, v) in &o.capacity.extended {
                if let std::collections::btree_map::Entry::Vacant(e) = sized.entry((t, r.clone())) {
                    e.insert(o.weight);
                    capacity.set_extended(r, *v);
                    grew = true;
                }
            }
            if grew {
                *it = InstanceType::new(
                    &it.name,
                    it.requirements.clone(),
                    std::mem::take(&mut it.offerings),
                    capacity,
                    it.overhead.clone(),
                );
            }
        }
    }
    types
}

/// Karpenter's compatibility without undefined keys allowed: every key the
/// overlay names is defined on the type side and intersects it, or the
/// overlay accepts its absence.
fn selects(overlay: &Requirements, ty: &Requirements) -> bool {
    overlay.iter().all(|(k, r)| match ty.get(k) {
        Some(t) => t.intersects(r),
        None => r.allows_absence(),
    })
}

/// An instance type (its index) and the indices of its offerings an
/// overlay applies to.
type TypeOfferings = (usize, Vec<usize>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::Offering;
    use crate::config::overlay::PriceChange;
    use crate::resources::Resources;
    use std::sync::Arc;

    fn ty(name: &str, family: &str) -> InstanceType {
        let mut r = Requirements::new();
        r.add(labels::INSTANCE_FAMILY, Requirement::single(family));
        InstanceType::new(
            name,
            r,
            vec![
                Offering::new("z1", "on-demand", 1.0),
                Offering::new("z1", "spot", 0.4),
            ],
            Resources::new(2000, 8 << 30, 29),
            Resources::new(100, 1 << 30, 0),
        )
    }

    fn overlay(
        name: &str,
        weight: i32,
        reqs: &[(&str, Requirement)],
        price: Option<PriceChange>,
        ext: &[(&str, i64)],
    ) -> NodeOverlay {
        let mut requirements = Requirements::new();
        for (k, r) in reqs {
            requirements.add(k, r.clone());
        }
        let mut capacity = Resources::default();
        for (r, v) in ext {
            capacity.set_extended(r, *v);
        }
        NodeOverlay {
            name: name.into(),
            requirements,
            price,
            capacity,
            weight,
        }
    }

    fn pool(overlays: Vec<NodeOverlay>) -> NodePool {
        let mut p = NodePool::open("p");
        p.overlays = Arc::from(overlays);
        p
    }

    #[test]
    fn the_heaviest_overlay_prices_each_offering_and_a_tie_is_left_out() {
        let spot_only = overlay(
            "spot",
            10,
            &[(labels::CAPACITY_TYPE, Requirement::single("spot"))],
            Some(PriceChange::Percent(-50.0)),
            &[],
        );
        let all_m5 = overlay(
            "m5",
            5,
            &[(labels::INSTANCE_FAMILY, Requirement::single("m5"))],
            Some(PriceChange::Set(0.1)),
            &[("example.com/fuse", 2)],
        );
        let tie = overlay(
            "a-tie",
            10,
            &[(labels::CAPACITY_TYPE, Requirement::single("spot"))],
            Some(PriceChange::Add(5.0)),
            &[],
        );
        let out = apply(
            &pool(vec![all_m5, spot_only, tie]),
            vec![ty("m5.large", "m5"), ty("c5.large", "c5")],
        );
        let prices = |i: usize| -> Vec<f64> { out[i].offerings.iter().map(|o| o.price).collect() };
        // m5: on-demand set by the weight-5 overlay, spot halved by weight 10.
        assert_eq!(prices(0), [0.1, 0.2]);
        // c5: only the spot overlay selects it; the tie changed nothing.
        assert_eq!(prices(1), [1.0, 0.2]);
        assert_eq!(out[0].allocatable().extended("example.com/fuse"), 2);
        assert_eq!(out[1].allocatable().extended("example.com/fuse"), 0);
    }

    #[test]
    fn an_overlay_naming_a_key_the_type_lacks_selects_nothing() {
        let custom = overlay(
            "gpu",
            1,
            &[("example.com/accelerator", Requirement::single("x"))],
            Some(PriceChange::Set(0.0)),
            &[],
        );
        let out = apply(&pool(vec![custom]), vec![ty("m5.large", "m5")]);
        assert_eq!(out[0].offerings[0].price, 1.0);
        // …unless the pool's labels define it.
        let mut p = pool(vec![overlay(
            "team",
            1,
            &[("team", Requirement::single("a"))],
            Some(PriceChange::Set(0.0)),
            &[],
        )]);
        p.labels.insert("team".into(), "a".into());
        let out = apply(&p, vec![ty("m5.large", "m5")]);
        assert_eq!(out[0].offerings[0].price, 0.0);
    }
}
