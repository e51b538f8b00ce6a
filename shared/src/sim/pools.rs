//! Spot capacity pools for the in-memory EC2. Each spot (instance type,
//! zone) is a pool of finite depth: a launch takes one unit, an instance
//! that shuts down, is terminated or is reclaimed gives it back. A pool with
//! nothing left answers insufficient capacity, as EC2 does.
//!
//! Which pool a spot launch lands on follows EC2's price-capacity-optimized
//! strategy, made deterministic ([`price_capacity_optimized`]): among the
//! pools priced within [`PRICE_MARGIN`] of the cheapest one that has
//! capacity, the deepest, where depth counts only up to [`DEEP`]. While
//! every pool is deep (the default depths: [`DEFAULT_DEPTHS`]) that is the
//! cheapest pool, so ordinary fleets cost what they did under lowest-price;
//! shallow pools (a scenario's `spotPools`) make a fleet spread over pools.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;

use super::catalog::fnv1a;
use super::rng::Rng;
use crate::model::{OfferingKey, PricedOffering};

/// The seed of the default depths when nothing sets one.
pub const DEFAULT_SEED: u64 = 0x5907_0001;

/// A pool's default depth, drawn per pool from its seed and key: deep
/// enough that a fleet of a few hundred nodes never empties its cheapest
/// pool, shallow enough that a very large one does.
pub const DEFAULT_DEPTHS: RangeInclusive<u64> = 600..=3_000;

/// Remaining depth from which a pool counts as deep. Depth only breaks the
/// choice between near-cheapest pools below it, so a pool with plenty left
/// does not lose to a slightly dearer one that merely has more.
pub const DEEP: u64 = 100;

/// Pools priced at most this share above the cheapest available one are
/// "low-priced" for price-capacity-optimized.
pub const PRICE_MARGIN: f64 = 0.10;

/// The deepest pool a scenario may ask for (a million instances in one
/// pool is already far beyond any simulated fleet).
pub const MAX_DEPTH: u64 = 1_000_000;

/// How deep the spot pools are: every pool's depth, or one drawn per pool
/// from `seed`; `offerings` overrides single pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDepths {
    pub seed: u64,
    pub all: Option<u64>,
    pub offerings: BTreeMap<OfferingKey, u64>,
}

impl Default for PoolDepths {
    fn default() -> Self {
        PoolDepths::seeded(DEFAULT_SEED)
    }
}

impl PoolDepths {
    /// Default depths drawn from `seed`, no override.
    pub fn seeded(seed: u64) -> Self {
        PoolDepths {
            seed,
            all: None,
            offerings: BTreeMap::new(),
        }
    }

    /// The depth of one pool.
    pub fn depth(&self, pool: &OfferingKey) -> u64 {
        self.offerings
            .get(pool)
            .copied()
            .or(self.all)
            .unwrap_or_else(|| seeded_depth(self.seed, pool))
    }
}

/// A pool's default depth: the same for the same seed and pool on every
/// run and platform (FNV-1a of the key into splitmix64).
pub fn seeded_depth(seed: u64, pool: &OfferingKey) -> u64 {
    let key = format!(
        "{}/{}/{}",
        pool.capacity_type, pool.instance_type, pool.zone
    );
    Rng::new(seed ^ fnv1a(key.as_bytes())).range(*DEFAULT_DEPTHS.start(), *DEFAULT_DEPTHS.end())
}

/// The pools' depths and how much of each live instances hold.
#[derive(Debug, Clone, Default)]
pub struct SpotPools {
    depths: PoolDepths,
    in_use: HashMap<OfferingKey, u64>,
}

impl SpotPools {
    /// New depths; what live instances hold stays held.
    pub fn set_depths(&mut self, depths: PoolDepths) {
        self.depths = depths;
    }

    pub fn depth(&self, pool: &OfferingKey) -> u64 {
        self.depths.depth(pool)
    }

    /// What a launch could still take from the pool.
    pub fn remaining(&self, pool: &OfferingKey) -> u64 {
        self.depth(pool)
            .saturating_sub(self.in_use.get(pool).copied().unwrap_or(0))
    }

    /// A launch took one unit.
    pub fn take(&mut self, pool: &OfferingKey) {
        *self.in_use.entry(pool.clone()).or_insert(0) += 1;
    }

    /// An instance went away: its unit is free again.
    pub fn give_back(&mut self, pool: &OfferingKey) {
        if let Some(n) = self.in_use.get_mut(pool) {
            *n = n.saturating_sub(1);
        }
    }
}

/// The spot option EC2's price-capacity-optimized strategy picks among
/// `candidates` (each with the depth its pool has left, all > 0): of the
/// options priced within [`PRICE_MARGIN`] of the cheapest, the one with the
/// most depth left counted up to [`DEEP`]; ties go to the cheaper, then to
/// the instance type and zone that sort first. `None` when empty.
pub fn price_capacity_optimized<'a>(
    candidates: &[(&'a PricedOffering, u64)],
) -> Option<&'a PricedOffering> {
    let cheapest = candidates
        .iter()
        .map(|(o, _)| o.price)
        .min_by(f64::total_cmp)?;
    let ceiling = cheapest * (1.0 + PRICE_MARGIN);
    candidates
        .iter()
        .filter(|(o, _)| o.price <= ceiling)
        .min_by(|(a, da), (b, db)| {
            db.min(&DEEP)
                .cmp(da.min(&DEEP))
                .then(a.price.total_cmp(&b.price))
                .then_with(|| (&a.instance_type, &a.zone).cmp(&(&b.instance_type, &b.zone)))
        })
        .map(|(o, _)| *o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(t: &str, zone: &str, price: f64) -> PricedOffering {
        PricedOffering {
            reservation_ids: Vec::new(),
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type: "spot".into(),
            price,
        }
    }

    fn key(t: &str, zone: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: "spot".into(),
            instance_type: t.into(),
            zone: zone.into(),
        }
    }

    #[test]
    fn the_deepest_near_cheapest_pool_wins_and_deep_pools_go_by_price() {
        let (a, b, far) = (
            offer("m5.large", "z-a", 0.030),
            offer("m5.large", "z-b", 0.032),
            offer("c5.large", "z-a", 0.040),
        );
        // a is cheapest, b within 10 %, far is not.
        assert_eq!(
            price_capacity_optimized(&[(&a, 2), (&b, 5), (&far, 50)]),
            Some(&b)
        );
        // Both deep: depth stops counting at DEEP, price decides.
        assert_eq!(
            price_capacity_optimized(&[(&a, DEEP + 1), (&b, 10 * DEEP), (&far, 10 * DEEP)]),
            Some(&a)
        );
        // Same depth: the cheaper; same price too: the name.
        assert_eq!(price_capacity_optimized(&[(&b, 3), (&a, 3)]), Some(&a));
        let a2 = offer("m5.large", "z-0", 0.030);
        assert_eq!(price_capacity_optimized(&[(&a, 3), (&a2, 3)]), Some(&a2));
        assert_eq!(price_capacity_optimized(&[]), None);
    }

    #[test]
    fn default_depths_follow_the_seed_within_their_range() {
        let keys: Vec<OfferingKey> = (0..50)
            .map(|i| key(&format!("t{i}.large"), "z-a"))
            .collect();
        let depths = |seed| {
            keys.iter()
                .map(|k| seeded_depth(seed, k))
                .collect::<Vec<_>>()
        };
        assert_eq!(depths(7), depths(7));
        assert_ne!(depths(7), depths(8));
        assert!(depths(7).iter().all(|d| DEFAULT_DEPTHS.contains(d)));
        assert!(
            depths(7).iter().any(|d| *d != depths(7)[0]),
            "depths differ by pool"
        );
    }

    #[test]
    fn overrides_beat_the_depth_for_all_which_beats_the_seed() {
        let mut d = PoolDepths::seeded(3);
        let (x, y) = (key("m5.large", "z-a"), key("m5.large", "z-b"));
        assert_eq!(d.depth(&x), seeded_depth(3, &x));
        d.all = Some(4);
        d.offerings.insert(y.clone(), 1);
        assert_eq!((d.depth(&x), d.depth(&y)), (4, 1));
        let mut pools = SpotPools::default();
        pools.set_depths(d);
        pools.take(&y);
        assert_eq!(pools.remaining(&y), 0);
        pools.take(&y);
        assert_eq!(pools.remaining(&y), 0, "never below zero");
        pools.give_back(&y);
        pools.give_back(&y);
        pools.give_back(&y);
        assert_eq!(pools.remaining(&y), 1);
    }
}
