//! Static NodePools (`spec.replicas`, Karpenter's StaticCapacity): a pool
//! that keeps exactly N nodes whatever the pods ask for. Pure decisions:
//! which claims to launch so the pool holds N live nodes (a node whose
//! removal is under way is not live, so an interrupted, expired or drifted
//! node is replaced as soon as its removal starts), and which to remove
//! when it holds more (the replicas were lowered). The pool's
//! `limits.nodes`, the one limit a static pool takes, caps N.
//!
//! Pending pods never make a static pool launch (the solver is not given
//! it), but they land on its nodes like on any other; consolidation never
//! removes its nodes.

use std::collections::HashSet;
use std::sync::Arc;

use jiff::Timestamp;
use rand::SeedableRng;

use super::plan::{instance_types, new_claim, random_suffix};
use crate::config::{NodeClass, NodePool};
use crate::model::claim::{self, Claim};
use crate::model::{CloudCatalog, OfferingKey};
use crate::packing::{LaunchOption, NewClaim, PoolInput};

/// What keeping the static pools at their size asks for.
#[derive(Debug, Default)]
pub struct StaticPlan {
    pub launch: Vec<Claim>,
    /// Claims (ids) of nodes to remove, the newest first.
    pub remove: Vec<String>,
}

/// How many nodes a static pool keeps: its replicas, at most `limits.nodes`.
pub fn target(pool: &NodePool) -> Option<u64> {
    let n = pool.replicas?;
    Some(match pool.limits.resources.get(claim::NODES) {
        Some(&limit) => n.min(limit.max(0) as u64),
        None => n,
    })
}

/// The claims to launch and remove so every static pool of `pools` holds
/// its target; `removing` are the claims whose removal is under way.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    pools: &[NodePool],
    claims: &[Claim],
    removing: &HashSet<String>,
    catalog: &CloudCatalog,
    unavailable: &[OfferingKey],
    node_classes: &[NodeClass],
    now: Timestamp,
    seed: u64,
) -> StaticPlan {
    let mut out = StaticPlan::default();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for pool in pools {
        let Some(want) = target(pool) else {
            continue;
        };
        let mut live: Vec<&Claim> = claims
            .iter()
            .filter(|c| c.pool == pool.name && !removing.contains(&c.id))
            .collect();
        let have = live.len() as u64;
        if have > want {
            // Unlaunched and unregistered claims go first, then the newest.
            live.sort_by(|a, b| {
                (
                    a.node_name.is_some(),
                    std::cmp::Reverse(a.created_at),
                    &a.id,
                )
                    .cmp(&(
                        b.node_name.is_some(),
                        std::cmp::Reverse(b.created_at),
                        &b.id,
                    ))
            });
            out.remove.extend(
                live.iter()
                    .take((have - want) as usize)
                    .map(|c| c.id.clone()),
            );
            continue;
        }
        if have == want {
            continue;
        }
        let input = PoolInput::new(pool.clone(), instance_types(pool, catalog, unavailable));
        let Some(planned) = empty_node(&input) else {
            continue;
        };
        let class = pool
            .node_class
            .as_deref()
            .and_then(|n| node_classes.iter().find(|c| c.name == n));
        for _ in have..want {
            let id = format!("{}-{}", pool.name, random_suffix(&mut rng));
            out.launch
                .push(new_claim(&input, &planned, Vec::new(), id, now, class));
        }
    }
    out
}

/// One node of the pool with no pods: every available offering its
/// requirements allow, cheapest first (60 at most, as a launch sends).
fn empty_node(input: &PoolInput) -> Option<NewClaim> {
    let reqs = &input.pool().requirements;
    let mut options: Vec<LaunchOption> = input
        .instance_types()
        .iter()
        .filter(|it| reqs.intersects(&it.requirements))
        .flat_map(|it| {
            it.offerings
                .iter()
                .filter(|o| o.allowed_by(reqs))
                .map(|o| LaunchOption {
                    instance_type: Arc::from(it.name.as_str()),
                    zone: Arc::from(o.zone.as_str()),
                    capacity_type: Arc::from(o.capacity_type.as_str()),
                    price: o.price,
                })
        })
        .collect();
    options.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
    });
    options.truncate(60);
    (!options.is_empty()).then(|| NewClaim {
        pool: input.pool().name.clone(),
        requirements: Arc::new(reqs.clone()),
        options,
        pods: Vec::new(),
        requests: Default::default(),
        min_values_relaxed: false,
    })
}
