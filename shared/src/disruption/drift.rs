//! Drift: a node no longer matches what its NodePool and NodeClass would
//! launch now. Two kinds, as in Karpenter:
//! - static: a hash of the NodePool template and one of the NodeClass,
//!   stamped on the claim at the decision, compared with today's hash;
//!   and the pool's requirements checked against the node's labels;
//! - dynamic: the AMI, subnet and security groups the instance was launched
//!   with, checked against what the NodeClass resolves to now (an input: the
//!   adapters resolve selectors, this module does no I/O).
//!
//! Selector terms are left out of the class hash on purpose: a changed
//! selector that resolves to the same AMI or subnets must not replace the
//! fleet; the dynamic check sees the change that matters.
//!
//! The hashes are computed in [`crate::config::hash`]; a pool stamp of
//! another version is not compared (it is re-stamped by
//! [`super::observe`]).

use std::collections::BTreeMap;

use crate::config::hash::{class_hash, is_current, is_current_pool, pool_hash};
use crate::config::{NodeClass, NodePool};
use crate::model::{Claim, ResolvedClass};

/// Why the node of `claim` has drifted, if it has: the first difference
/// found, worded for the user. `labels` are the node's labels (with the
/// instance type's well-known labels filled in).
pub fn drifted(
    claim: &Claim,
    pool: &NodePool,
    class: Option<&NodeClass>,
    resolved: Option<&ResolvedClass>,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    if let Some(stamped) = claim
        .stamp
        .nodepool_hash
        .as_deref()
        .filter(|h| is_current_pool(h))
        && stamped != pool_hash(pool)
    {
        return Some(format!(
            "NodePool {} template changed since launch",
            pool.name
        ));
    }
    if claim.node_class.as_deref() != pool.node_class.as_deref() && claim.node_class.is_some() {
        return Some(format!(
            "NodePool {} now refers to NodeClass {}, the node was launched from {}",
            pool.name,
            pool.node_class.as_deref().unwrap_or("(none)"),
            claim.node_class.as_deref().unwrap_or("(none)")
        ));
    }
    if let (Some(stamped), Some(class)) = (
        claim
            .stamp
            .nodeclass_hash
            .as_deref()
            .filter(|h| is_current(h)),
        class,
    ) && stamped != class_hash(class)
    {
        return Some(format!("NodeClass {} changed since launch", class.name));
    }
    for (key, req) in pool.requirements.iter() {
        // A key the node carries no label for cannot be judged from here.
        let Some(value) = labels.get(key) else {
            continue;
        };
        if !req.has(value) {
            return Some(format!(
                "label {key}={value} no longer allowed by NodePool {} ({})",
                pool.name,
                req.describe(key)
            ));
        }
    }
    let resolved = resolved?;
    let class_name = claim.node_class.as_deref().unwrap_or("(default)");
    if let Some(image) = &claim.stamp.image_id
        && !resolved.image_ids.is_empty()
        && !resolved.image_ids.contains(image)
    {
        return Some(format!(
            "AMI {image} is no longer what NodeClass {class_name} resolves to ({})",
            resolved.image_ids.join(", ")
        ));
    }
    if let Some(subnet) = &claim.stamp.subnet_id
        && !resolved.subnet_ids.is_empty()
        && !resolved.subnet_ids.contains(subnet)
    {
        return Some(format!(
            "subnet {subnet} is no longer selected by NodeClass {class_name}"
        ));
    }
    if !claim.stamp.security_group_ids.is_empty() && !resolved.security_group_ids.is_empty() {
        let mut have = claim.stamp.security_group_ids.clone();
        let mut want = resolved.security_group_ids.clone();
        have.sort();
        want.sort();
        if have != want {
            return Some(format!(
                "security groups {} differ from NodeClass {class_name}'s ({})",
                have.join(", "),
                want.join(", ")
            ));
        }
    }
    None
}
