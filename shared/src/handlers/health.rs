//! EC2 instance health, polled by the disruption loop (under its lease, so
//! one invocation polls): what EC2's status checks and scheduled events say
//! of our instances ([`Cloud::instance_health`]), decided by
//! [`crate::interruption::health::decide`] and carried out as removal
//! commands, at most once a minute, as Karpenter's instance-status
//! controller does (without an interruption queue).
//!
//! A poll that cannot ask EC2 (DescribeInstanceStatus refused by the IAM
//! policy, EC2 unavailable) is logged and tried again a minute later; it
//! never fails the disruption tick. One that cannot read the claims or
//! start a removal fails the tick and is polled again on the next one, so
//! no removal is lost.

use std::collections::BTreeSet;

use tracing::{error, info, warn};

use super::HandlerError;
use super::metrics;
use super::termination::{self, Started};
use crate::interruption::health::{self, HealthPlan, Unhealthy};
use crate::model::{RemovalReason, Timestamp};
use crate::ports::{Cloud, FailureKind, PortSet, Store};

/// What one poll did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HealthPoll {
    pub plan: HealthPlan,
    /// Removals started or merged into one already running: (claim, reason).
    pub started: Vec<(String, RemovalReason)>,
    /// EC2 could not be asked (logged); nothing was decided.
    pub error: Option<String>,
}

/// Polls EC2 once and acts: `seen` is what the last poll found unhealthy
/// (the metric counts what is new); `dry_run` counts and removes nothing.
pub async fn poll<P: PortSet>(
    ports: &P,
    seen: &BTreeSet<Unhealthy>,
    dry_run: bool,
    now: Timestamp,
) -> Result<HealthPoll, HandlerError> {
    let statuses = match ports.cloud().instance_health().await {
        Ok(s) => s,
        Err(e) => {
            if e.failure_kind() == Some(FailureKind::AccessDenied) {
                error!(error = %e, "ec2:DescribeInstanceStatus is not allowed: grant it to the functions' role to act on EC2 instance status checks");
            } else {
                warn!(error = %e, "could not read EC2 instance status checks; asking again in a minute");
            }
            return Ok(HealthPoll {
                error: Some(e.to_string()),
                ..HealthPoll::default()
            });
        }
    };
    if statuses.is_empty() && seen.is_empty() {
        return Ok(HealthPoll::default());
    }
    let claims = ports.store().claims().await?;
    let plan = health::decide(&statuses, &claims, seen, now, dry_run);
    let mut started = Vec::new();
    for spec in &plan.removals {
        let reason = spec.reason;
        let claim = spec.claim_id.clone();
        match termination::start(ports, spec.clone()).await? {
            Started::New(_) => {
                info!(nodeclaim = %claim, node = ?spec.node, instance = ?spec.instance_id, %reason, "initiating delete from instance status check");
            }
            Started::Existing { .. } => {}
        }
        started.push((claim, reason));
    }
    for (instance, category) in &plan.newly_unhealthy {
        info!(instance = %instance, category = category.as_str(), dry_run, "detected unhealthy instance owned by cluster");
        metrics::count(
            now.as_millisecond(),
            metrics::karpenter::INSTANCE_STATUS_UNHEALTHY,
            &[("category", category.as_str())],
            1.0,
        );
    }
    Ok(HealthPoll {
        plan,
        started,
        error: None,
    })
}
