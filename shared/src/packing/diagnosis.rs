//! Why a pod fits nowhere, in words a Karpenter user recognises.

use std::collections::BTreeSet;

use fixedbitset::FixedBitSet;

use super::Solver;
use super::classes::Guidance;
use crate::cloud::InstanceType;
use crate::resources;
use crate::scheduling::labels;
use crate::scheduling::pod::Relaxation;
use crate::scheduling::requirements::{Requirements, Undefined};
use crate::scheduling::taints::first_untolerated;
use crate::scheduling::topology::{Candidate, HostId};

impl<'a> Solver<'a> {
    /// Why a pod fits nowhere, in words a Karpenter user recognises.
    pub(super) fn diagnose(&mut self, i: usize) -> String {
        let pod = &self.pods[i];
        // Judge the most relaxed form of the pod.
        let mut r = Relaxation::default();
        while let Some(n) = pod.relax(&r) {
            r = n;
        }
        let k = self.class_for(i, &r, Guidance::Free);
        if self.pools.is_empty() {
            return "no NodePool exists".to_owned();
        }
        let mut reasons = Vec::new();
        for oi in 0..self.pool_order.len() {
            let p = self.pool_order[oi];
            let compat = self.compat(p, k).clone();
            let limited = self.claim_types(p, k).is_none();
            reasons.push(self.pool_reason(p, k, &compat, limited));
        }
        reasons.join("; ")
    }

    /// Why class `k` cannot get a new claim from pool `p`.
    pub(super) fn pool_reason(
        &self,
        p: usize,
        k: usize,
        compat: &FixedBitSet,
        limited: bool,
    ) -> String {
        let ps = &self.pools[p];
        let name = &ps.input.pool.name;
        let cls = &self.classes[k];
        if let Some(t) = first_untolerated(
            &ps.input.pool.taints,
            &cls.shape.constraints.tolerations,
            true,
        ) {
            return format!("did not tolerate taint {t} of NodePool {name}");
        }
        if let Err(e) = ps
            .input
            .pool
            .requirements
            .compatible(&cls.shape.constraints.node, Undefined::WellKnownOnly)
        {
            return format!("incompatible with NodePool {name}: {e}");
        }
        let combined = ps
            .input
            .pool
            .requirements
            .intersection(&cls.shape.constraints.node);
        let wanted = cls.shape.constraints.node.summary_or(&combined);
        if compat.is_clear() {
            let any_type = ps
                .input
                .instance_types
                .iter()
                .any(|t| t.requirements.intersects(&combined));
            return if any_type {
                format!("no available offering satisfies {wanted} in NodePool {name}")
            } else {
                format!("no instance type satisfies {wanted} in NodePool {name}")
            };
        }
        let requests = &cls.shape.requests;
        let fitting: Vec<usize> = compat
            .ones()
            .filter(|&t| requests.fits_in(&ps.room[t]))
            .collect();
        if fitting.is_empty() {
            let largest = compat
                .ones()
                .map(|t| &ps.room[t])
                .max_by_key(|r| (r.cpu_millis, r.memory_bytes));
            let over = largest
                .map(|l| requests.exceeding(l).join(", "))
                .unwrap_or_default();
            return format!(
                "no instance type in NodePool {name} has room for requests {requests} (too much {over}, DaemonSet overhead included)"
            );
        }
        let ports = &cls.shape.ports;
        if !ports.is_empty()
            && !ps.daemon_ports.is_empty()
            && fitting
                .iter()
                .all(|&t| super::place::ports_conflict(&ps.daemon_ports[t], ports))
        {
            let held: Vec<String> = ports
                .iter()
                .filter(|p| fitting.iter().any(|&t| ps.daemon_ports[t].contains(p)))
                .map(|p| format!("{}/{}", p.port, format!("{:?}", p.protocol).to_uppercase()))
                .collect();
            return format!(
                "host port {} held by a DaemonSet on every instance type in NodePool {name} that fits",
                held.join(", ")
            );
        }
        if let Some((key, min, found)) =
            unmet_min_values(&combined, &fitting, &ps.input.instance_types)
        {
            return format!(
                "minValues {min} of {key} in NodePool {name} cannot be met: only {found} distinct value(s) among the instance types that fit"
            );
        }
        if limited {
            let mut used = ps.input.in_use.clone();
            used.add(&ps.reserved);
            let smallest = fitting
                .iter()
                .map(|&t| &ps.input.instance_types[t].capacity)
                .min_by_key(|c| (c.cpu_millis, c.memory_bytes));
            let nodes = ps.input.nodes_in_use + ps.claims;
            if let Some((res, limit)) =
                smallest.and_then(|cap| ps.input.pool.limits.exceeded_by(&used, nodes, cap))
            {
                let shown = match res {
                    resources::CPU => resources::format_cpu(limit),
                    resources::MEMORY => resources::format_bytes(limit),
                    _ => limit.to_string(),
                };
                return format!("NodePool {name} limit {res} {shown} reached");
            }
        }
        if !cls.shape.topo.is_empty() {
            let host = (self.nodes.len() + self.claims.len()) as HostId;
            let cand = Candidate::Claim {
                host,
                requirements: &ps.input.pool.requirements,
            };
            if let Err(t) = self
                .topology
                .admit(&cls.shape.topo, &cls.shape.constraints, cand)
            {
                return format!(
                    "would violate {} in NodePool {name}",
                    self.topology.describe(&t)
                );
            }
        }
        format!(
            "no instance type in NodePool {name} satisfies all of the pod's constraints together"
        )
    }
}

impl Requirements {
    /// The pod's own summary when it has requirements, else the combined one.
    pub(super) fn summary_or(&self, combined: &Requirements) -> String {
        let mut own = self.clone();
        own.remove(labels::NODEPOOL);
        if own.is_empty() {
            combined.summary()
        } else {
            own.summary()
        }
    }
}

/// The first `minValues` the types cannot meet: (key, minValues, distinct values found).
pub(super) fn unmet_min_values(
    reqs: &Requirements,
    types: &[usize],
    catalog: &[InstanceType],
) -> Option<(String, u32, usize)> {
    reqs.iter().find_map(|(key, r)| {
        let min = r.min_values?;
        let distinct: BTreeSet<&str> = types
            .iter()
            .filter_map(|&t| {
                catalog[t]
                    .requirements
                    .get(key)
                    .and_then(|r| r.single_value())
            })
            .collect();
        (distinct.len() < min as usize).then(|| (key.to_owned(), min, distinct.len()))
    })
}
