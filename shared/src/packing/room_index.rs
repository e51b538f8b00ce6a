//! Which instance types have room for a request, as bitset intersections.
//!
//! Per resource the pool's types are ordered by their room, and for each
//! position the set of types with at least that much is kept, so "the
//! types that still hold these pods" is three intersections (CPU, memory,
//! pods) instead of a fits check per type, and "the most room any of these
//! types has" is found from the roomiest type down: a guided claim on the
//! whole catalog keeps a thousand types, and every claim is checked again
//! at the end of placement.

use fixedbitset::FixedBitSet;

use crate::resources::Resources;

/// For one resource: the types with at least a given room.
#[derive(Debug)]
struct Thresholds {
    /// The types by their room, ascending, and that room.
    order: Vec<usize>,
    values: Vec<i64>,
    /// `at_least[k]`: the types whose room is at least `values[k]`;
    /// `at_least[values.len()]` is empty.
    at_least: Vec<FixedBitSet>,
}

impl Thresholds {
    fn new(room: &[Resources], value: impl Fn(&Resources) -> i64) -> Self {
        let mut order: Vec<usize> = (0..room.len()).collect();
        order.sort_by_key(|&t| value(&room[t]));
        let values: Vec<i64> = order.iter().map(|&t| value(&room[t])).collect();
        let mut at_least = vec![FixedBitSet::with_capacity(room.len())];
        for &t in order.iter().rev() {
            let mut set = at_least[at_least.len() - 1].clone();
            set.insert(t);
            at_least.push(set);
        }
        at_least.reverse();
        Thresholds {
            order,
            values,
            at_least,
        }
    }

    /// The most room any of `types` has (0 for none).
    fn max_in(&self, types: &FixedBitSet) -> i64 {
        self.order
            .iter()
            .rev()
            .position(|&t| types.contains(t))
            .map_or(0, |k| self.values[self.values.len() - 1 - k])
    }

    /// The types whose room is at least `need`.
    fn holding(&self, need: i64) -> &FixedBitSet {
        &self.at_least[self.values.partition_point(|&v| v < need)]
    }
}

/// Per extended resource name, the types with some of it, most room first.
fn by_extended_room(room: &[Resources]) -> Vec<(String, Vec<(usize, i64)>)> {
    let mut by_name: std::collections::BTreeMap<&str, Vec<(usize, i64)>> = Default::default();
    for (t, r) in room.iter().enumerate() {
        for (name, v) in &r.extended {
            by_name.entry(name.as_str()).or_default().push((t, *v));
        }
    }
    by_name
        .into_iter()
        .map(|(name, mut holders)| {
            holders.sort_by_key(|&(t, v)| (std::cmp::Reverse(v), t));
            (name.to_owned(), holders)
        })
        .collect()
}

/// A pool's types by their room (allocatable less DaemonSets).
#[derive(Debug)]
pub(super) struct RoomIndex {
    cpu: Thresholds,
    memory: Thresholds,
    pods: Thresholds,
    ephemeral: Thresholds,
    /// The types with extended resources (GPUs, trunk ENIs, …).
    with_extended: FixedBitSet,
    /// Per extended resource some type has: the types holding it by their
    /// room, most first, and that room — so the most room is found from
    /// the top, not by reading every type's named resources.
    extended: Vec<(String, Vec<(usize, i64)>)>,
}

impl RoomIndex {
    pub(super) fn new(room: &[Resources]) -> Self {
        RoomIndex {
            cpu: Thresholds::new(room, |r| r.cpu_millis),
            memory: Thresholds::new(room, |r| r.memory_bytes),
            pods: Thresholds::new(room, |r| r.pods),
            ephemeral: Thresholds::new(room, |r| r.ephemeral_bytes),
            with_extended: room
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.extended.is_empty())
                .map(|(t, _)| t)
                .collect(),
            extended: by_extended_room(room),
        }
    }

    /// Per resource, the most room any of `types` has (what
    /// `Resources::max_each` over their rooms gives).
    pub(super) fn max_room(&self, types: &FixedBitSet) -> Resources {
        let mut max = Resources::new(
            self.cpu.max_in(types),
            self.memory.max_in(types),
            self.pods.max_in(types),
        );
        max.ephemeral_bytes = self.ephemeral.max_in(types);
        if !self.with_extended.is_disjoint(types) {
            for (name, holders) in &self.extended {
                if let Some(&(_, v)) = holders.iter().find(|(t, _)| types.contains(*t))
                    && v > 0
                {
                    max.set_extended(name, v);
                }
            }
        }
        max
    }

    /// Keeps in `types` those whose room holds `need` (`Resources::fits_in`).
    /// Ephemeral storage and extended resources, rarely requested, are
    /// checked type by type among those left.
    pub(super) fn keep_holding(
        &self,
        need: &Resources,
        types: &mut FixedBitSet,
        room: &[Resources],
    ) {
        types.intersect_with(self.cpu.holding(need.cpu_millis));
        types.intersect_with(self.memory.holding(need.memory_bytes));
        types.intersect_with(self.pods.holding(need.pods));
        if need.ephemeral_bytes != 0 || !need.extended.is_empty() {
            let short: Vec<usize> = types.ones().filter(|&t| !need.fits_in(&room[t])).collect();
            for t in short {
                types.set(t, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn resources() -> impl Strategy<Value = Resources> {
        crate::resources::strategies::coarse(8, 8, 4, 3, 3)
    }

    proptest! {
        /// The index keeps exactly the types a fits check per type keeps,
        /// ties and ephemeral storage (0 = not modelled) included.
        #[test]
        fn keeps_exactly_the_types_that_fit(
            room in proptest::collection::vec(resources(), 0..40),
            need in resources(),
            start in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let index = RoomIndex::new(&room);
            let mut types = FixedBitSet::with_capacity(room.len());
            for (t, &on) in start.iter().enumerate().take(room.len()) {
                types.set(t, on);
            }
            let expected: Vec<usize> = types.ones().filter(|&t| need.fits_in(&room[t])).collect();
            index.keep_holding(&need, &mut types, &room);
            prop_assert_eq!(types.ones().collect::<Vec<_>>(), expected);
        }

        /// The most room per resource is what `max_each` over the types gives.
        #[test]
        fn max_room_is_the_maximum_over_the_types(
            room in proptest::collection::vec(resources(), 0..40),
            start in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let index = RoomIndex::new(&room);
            let mut types = FixedBitSet::with_capacity(room.len());
            let mut expected = Resources::default();
            for t in (0..room.len()).filter(|&t| start[t]) {
                types.insert(t);
                expected.max_each(&room[t]);
            }
            prop_assert_eq!(index.max_room(&types), expected);
        }
    }
}
