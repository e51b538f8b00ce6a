//! A disruption decision made on the cluster as it is and reported (the
//! nodes it would remove, the launches it would make), nothing acted on:
//! `nodewright plan`'s disruption part.

use super::*;

/// A node the dry run would launch, and for which pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedLaunch {
    pub claim_id: String,
    pub pool: String,
    /// The cheapest options offered (type / capacity type / zone).
    pub options: Vec<String>,
    pub pods: Vec<String>,
    /// The cheapest option's price, USD per hour.
    pub price: f64,
}

/// What the dry run would do with one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedNode {
    pub node: String,
    pub nodeclaim: Option<String>,
    pub pool: Option<String>,
    pub instance_type: String,
    pub capacity_type: String,
    pub price: f64,
    /// `keep`, `remove-empty`, `expire`, `replace-drifted`, `consolidate`, `repair`,
    /// `handover` (a Karpenter node replaced, then deleted for Karpenter to drain), `removing`.
    pub action: String,
    pub reason: String,
}

/// `nodewright plan`: the provisioning and the disruption decisions on
/// what the ports show now, acted on in no way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DryRun {
    pub now: Timestamp,
    pub launches: Vec<PlannedLaunch>,
    /// Pending pods that fit nowhere, with the reason.
    pub unschedulable: Vec<(String, String)>,
    pub nodes: Vec<PlannedNode>,
    /// Each CapacityBuffer: chunks wanted, placed on existing (or
    /// launching) room, to launch for, and fitting nowhere.
    pub buffers: Vec<crate::provisioning::buffers::BufferStatus>,
    /// Fleet USD per hour now (every node we know the price of), and after
    /// the launches, removals and replacements of this plan.
    pub cost_now: f64,
    pub cost_after: f64,
    /// Pools being handed over from Karpenter: nodes left, starting now,
    /// in progress, the next and why it waits.
    pub handovers: Vec<disruption::handover::Handover>,
}

pub(super) fn action_of(reason: Reason, replaced: bool) -> &'static str {
    match reason {
        Reason::Empty => "remove-empty",
        Reason::Expired => "expire",
        Reason::Drifted => "replace-drifted",
        Reason::Underutilized if replaced => "consolidate-replace",
        Reason::Underutilized => "consolidate-delete",
        Reason::Unhealthy => "repair",
        Reason::Interrupted => "interrupted",
    }
}

/// Runs both decisions on what the ports show now, without acting (no
/// write of any kind: not even the claims' bookkeeping).
pub async fn dry_run<P: PortSet>(ports: &P, tuning: Tuning) -> Result<DryRun, HandlerError> {
    let config = super::super::config::load(ports.store()).await?;
    let gathered = gather(ports, &config).await?;
    let now = gathered.now;
    let plan = disruption::decide(&gathered.snapshot(tuning, now.as_millisecond().unsigned_abs()));
    let all_pending = ports.cluster().pending_pods().await?;
    let nominated_uids = crate::provisioning::plan::nominated_uids(&gathered.claims);
    let nominated_by = |p: &Pod| {
        p.metadata
            .uid
            .as_deref()
            .is_some_and(|u| nominated_uids.contains(u))
    };
    let pending: Vec<Pod> = all_pending
        .iter()
        .filter(|p| crate::scheduling::pod::is_provisionable(p) && !nominated_by(p))
        .cloned()
        .collect();
    let nominated: Vec<Pod> = all_pending
        .iter()
        .filter(|p| nominated_by(p))
        .cloned()
        .collect();
    let usage = ports.store().pool_usage().await?;
    // The provisioner's decision for `pods` on the cluster as gathered.
    let no_volumes = VolumeIndex::default();
    let provision = |pods: &[Pod], volumes: &VolumeIndex, seed: u64| {
        crate::provisioning::plan::decide(&crate::provisioning::plan::Snapshot {
            now,
            pending: pods,
            scheduled: &gathered.pods,
            nominated: &nominated,
            nodes: &gathered.nodes,
            daemon_sets: &gathered.daemon_sets,
            claims: &gathered.claims,
            pools: &config.pools,
            node_classes: &config.node_classes,
            catalog: &gathered.catalog,
            unavailable: &gathered.unavailable,
            usage: &usage,
            volumes,
            settings: &config.settings,
            seed,
        })
    };
    let seed = now.as_millisecond().unsigned_abs();
    let provisioning = provision(&pending, &gathered.volumes, seed);
    // The buffers' chunks after the real pods (the provisioner plans them
    // once no real pod waits): on the cluster as it is now.
    let buffers_plan = (!gathered.buffers.is_empty())
        .then(|| provision(&gathered.buffers, &no_volumes, seed ^ 11));
    // Every buffer, those that make no chunk too (their status says why).
    let buffers = {
        let (mut placed, mut launching, mut unplaced) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(d) = &buffers_plan {
            placed.extend(d.fit_existing.iter().map(|(k, _)| k.clone()));
            launching.extend(d.new_claims.iter().flat_map(|c| c.pods.iter().cloned()));
            unplaced.extend(d.unschedulable.iter().cloned());
        }
        crate::provisioning::buffers::statuses(
            &gathered.resolved_buffers,
            &placed,
            &launching,
            &unplaced,
        )
    };
    let launches: Vec<PlannedLaunch> = provisioning
        .new_claims
        .iter()
        .chain(buffers_plan.iter().flat_map(|d| d.new_claims.iter()))
        .map(|c| PlannedLaunch {
            claim_id: c.id.clone(),
            pool: c.pool.clone(),
            options: c
                .options
                .iter()
                .take(3)
                .map(|o| format!("{}/{}/{}", o.instance_type, o.capacity_type, o.zone))
                .collect(),
            pods: c.pods.iter().map(ToString::to_string).collect(),
            price: c.options.first().map_or(0.0, |o| o.price),
        })
        .collect();
    let facts = disruption::snapshot::node_facts(&gathered.snapshot(tuning, 0));
    let mut nodes = Vec::new();
    let mut cost_now = 0.0;
    let mut removed = 0.0;
    for d in &plan.nodes {
        let f = facts.iter().find(|f| f.name == d.node);
        let price = f.map_or(0.0, |f| f.price);
        cost_now += price;
        let action = match &d.verdict {
            Verdict::Disrupt { reason, command } => {
                removed += price;
                let command = plan.commands.get(*command);
                let replaced = command.is_some_and(|c| c.replacement.is_some());
                if command.is_some_and(|c| c.method == disruption::handover::METHOD) {
                    "handover".to_owned()
                } else {
                    action_of(*reason, replaced).to_owned()
                }
            }
            Verdict::Keep if f.is_some_and(|f| f.disrupting.is_some()) => "removing".to_owned(),
            Verdict::Keep => "keep".to_owned(),
        };
        nodes.push(PlannedNode {
            node: d.node.clone(),
            nodeclaim: d.claim_id.clone(),
            pool: d.pool.clone(),
            instance_type: f.map(|f| f.instance_type.clone()).unwrap_or_default(),
            capacity_type: f.map(|f| f.capacity_type.clone()).unwrap_or_default(),
            price,
            action,
            reason: d.reason.clone(),
        });
    }
    let replacements: f64 = plan
        .commands
        .iter()
        .filter_map(|c| c.replacement.as_ref())
        .map(|r| r.price)
        .sum();
    let launched: f64 = launches.iter().map(|l| l.price).sum();
    Ok(DryRun {
        now,
        launches,
        unschedulable: provisioning
            .unschedulable
            .iter()
            .map(|(k, r)| (k.to_string(), r.clone()))
            .collect(),
        nodes,
        buffers,
        cost_now,
        cost_after: cost_now - removed + replacements + launched,
        handovers: plan.handovers,
    })
}

impl DryRun {
    /// The plan as a table a person reads.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "plan at {}", self.now);
        if self.launches.is_empty() && self.unschedulable.is_empty() {
            let _ = writeln!(out, "launch: nothing (no pending pod needs a node)");
        }
        for l in &self.launches {
            let _ = writeln!(
                out,
                "launch  {:<20} pool {:<12} ${:.4}/h  {} pod(s): {}  options: {}",
                l.claim_id,
                l.pool,
                l.price,
                l.pods.len(),
                l.pods.join(", "),
                l.options.join(", ")
            );
        }
        for (pod, why) in &self.unschedulable {
            let _ = writeln!(out, "cannot place pod {pod}: {why}");
        }
        for b in &self.buffers {
            let (condition, message) = b.condition();
            let condition = if b.not_ready.is_some() {
                format!("{condition}: {message}")
            } else {
                condition.to_owned()
            };
            let _ = writeln!(
                out,
                "buffer  {:<20} wanted {}, placed {}, launching {}, fitting nowhere {}  ({condition}){}",
                b.buffer,
                b.wanted,
                b.placed,
                b.launching,
                b.unplaced,
                b.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "{:<20} {:<46} {:<14} {:<10} {:<9} ${:.4}/h  {}",
                n.action,
                n.node,
                n.instance_type,
                n.capacity_type,
                n.pool.as_deref().unwrap_or("-"),
                n.price,
                n.reason
            );
        }
        for h in &self.handovers {
            let _ = write!(
                out,
                "handover from Karpenter, NodePool {}: {} Karpenter node(s) left",
                h.pool, h.remaining
            );
            if !h.start.is_empty() {
                let _ = write!(out, "; replacing now: {}", h.start.join(", "));
            }
            if !h.in_progress.is_empty() {
                let _ = write!(out, "; in progress: {}", h.in_progress.join(", "));
            }
            let _ = write!(out, "; next: {}", h.next.as_deref().unwrap_or("none"));
            if let Some(why) = &h.waiting {
                let _ = write!(out, "; waits: {why}");
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "fleet ${:.4}/h now, ${:.4}/h after this plan",
            self.cost_now, self.cost_after
        );
        out
    }
}
