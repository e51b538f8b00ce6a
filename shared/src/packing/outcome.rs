//! A solve's outcome: enough to compare it with another strategy's; only
//! the one kept is finished into a `Plan` (its claims into launch requests).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::claims::{Claim, relax_min_values};
use super::pools::PoolState;
use super::{LaunchOption, MinValuesPolicy, NewClaim, Plan, SolveOptions};
use crate::cloud::InstanceType;
use crate::scheduling::requirements::Requirements;

/// The outcome that schedules more pods, then costs less, then has fewer
/// claims; `a` on a tie.
pub(super) fn better<'a>(a: Outcome<'a>, b: Outcome<'a>) -> Outcome<'a> {
    if prefers(&b, &a) { b } else { a }
}

/// Whether plan `b` is better than `a` (see `better`; on a tie, no).
pub(super) fn prefers(b: &Outcome, a: &Outcome) -> bool {
    let key = |o: &Outcome| (o.scheduled(), -o.cost, -(o.claims.len() as i64));
    key(b) > key(a)
}

/// A solve's plan before its claims are turned into launch requests:
/// enough to compare with another strategy's. Only the one kept is
/// finished (thousands of claims × 60 launch options).
pub(super) struct Outcome<'a> {
    pub(super) pools: Vec<PoolState<'a>>,
    pub(super) options: &'a SolveOptions,
    pub(super) claims: Vec<Claim>,
    pub(super) bindings: Vec<(usize, String)>,
    pub(super) unschedulable: Vec<(usize, String)>,
    /// What the finished plan's `cost_per_hour` will be: per claim, the
    /// price of its cheapest type (its first launch option).
    pub(super) cost: f64,
}

impl Outcome<'_> {
    pub(super) fn scheduled(&self) -> usize {
        self.bindings.len() + self.claims.iter().map(|c| c.pods.len()).sum::<usize>()
    }

    pub(super) fn finish(mut self) -> Plan {
        let claims = std::mem::take(&mut self.claims);
        let claims = claims.into_iter().map(|c| self.launch_request(c)).collect();
        let plan = Plan {
            bindings: self.bindings,
            claims,
            unschedulable: self.unschedulable,
        };
        // Strategies were compared by this cost: it must be the plan's.
        debug_assert!(
            (plan.cost_per_hour() - self.cost).abs() <= 1e-9 * self.cost.max(1.0),
            "{} vs {}",
            plan.cost_per_hour(),
            self.cost
        );
        plan
    }

    /// Turns a claim into its launch request: types cheapest first, at most
    /// `max_instance_types`, keeping `minValues` satisfied.
    pub(super) fn launch_request(&self, mut c: Claim) -> NewClaim {
        let ps = &self.pools[c.pool];
        // BestEffort: a claim kept although a minValues is unmet launches
        // with that minValues lowered to what its types offer.
        let relaxed = (self.options.min_values == MinValuesPolicy::BestEffort)
            .then(|| relax_min_values(&c.reqs, &c.types, &ps.input.instance_types))
            .flatten();
        let min_values_relaxed = relaxed.is_some();
        if let Some(r) = relaxed {
            c.reqs = Arc::new(r);
        }
        // minValues may reach past the first options for a missing value.
        let first = c
            .reqs
            .iter()
            .all(|(_, r)| r.min_values.is_none())
            .then_some(self.options.max_instance_types);
        let cheapest = ps.priced_types(&c.types, ps.offerings.of(&c.reqs), first);
        let types = &ps.input.instance_types;
        let kept =
            truncate_keeping_min_values(cheapest, self.options.max_instance_types, &c.reqs, types);
        let options = kept
            .into_iter()
            .map(|(price, t, oi)| {
                let (zone, capacity_type) = ps.names.offering(t, oi);
                LaunchOption {
                    instance_type: ps.names.types[t].clone(),
                    zone,
                    capacity_type,
                    price,
                }
            })
            .collect();
        NewClaim {
            pool: ps.input.pool.name.clone(),
            requirements: c.reqs,
            options,
            pods: c.pods,
            requests: c.used,
            min_values_relaxed,
        }
    }
}

/// The first `max` options, extended with the cheapest options that add a
/// missing value while some `minValues` is unmet. Options are
/// (price, type index, offering index), cheapest first.
pub(super) fn truncate_keeping_min_values(
    options: Vec<(f64, usize, usize)>,
    max: usize,
    reqs: &Requirements,
    catalog: &[InstanceType],
) -> Vec<(f64, usize, usize)> {
    let min_keys: Vec<(&str, usize)> = reqs
        .iter()
        .filter_map(|(k, r)| r.min_values.map(|m| (k, m as usize)))
        .collect();
    if options.len() <= max || min_keys.is_empty() {
        return options.into_iter().take(max).collect();
    }
    let value = |t: usize, key: &str| {
        catalog[t]
            .requirements
            .get(key)
            .and_then(|r| r.single_value())
            .map(str::to_owned)
    };
    let mut kept = options;
    let mut rest = kept.split_off(max);
    for (key, min) in min_keys {
        let mut seen: BTreeSet<String> = kept.iter().filter_map(|o| value(o.1, key)).collect();
        let mut remaining = Vec::new();
        for o in rest {
            match value(o.1, key) {
                Some(v) if seen.len() < min && !seen.contains(&v) => {
                    seen.insert(v);
                    kept.push(o);
                }
                _ => remaining.push(o),
            }
        }
        rest = remaining;
    }
    kept
}
