//! The interruption function: EventBridge events delivered through SQS
//! (spot interruption warnings, rebalance recommendations, AWS Health
//! scheduled changes, capacity-reservation interruptions, and state changes
//! if they are routed here), turned into removal commands.
//!
//! Each message ends in exactly one of: handled (a command started or
//! merged, a node cordoned), ignored (not ours, a kind or policy that asks
//! for nothing — the message is deleted), dropped (it can never be handled:
//! logged with its id and deleted), or failed for a reason worth retrying
//! (returned to SQS through the partial batch response). Nothing is acted
//! on unless the instance is one of our claims: events are account-wide.

use std::collections::BTreeMap;

use tracing::{Instrument, info, info_span, warn};

use super::HandlerError;
use super::config::LoadedConfig;
use super::launcher::LaunchSettings;
use super::metrics::{self, Metric};
use super::termination::{self, Started};
use crate::config::settings::REBALANCE_ANNOTATION;
use crate::config::{RebalancePolicy, Settings};
use crate::interruption::{self, Message, ParseError};
use crate::ports::{
    Clock, Cluster, ClusterError, InstanceState, OfferingKey, PortSet, SignedDuration, Store,
    Timestamp,
};
use crate::provisioning::claim::Claim;
use crate::termination::{RemovalReason, RemovalSpec, disrupted_taint};

#[derive(Debug, Clone)]
pub struct InterruptionSettings {
    /// EC2's spot (and capacity-reservation) interruption notice.
    pub notice: SignedDuration,
    /// The drain must be done this long before the notice runs out.
    pub margin: SignedDuration,
    /// How long the interrupted offering is avoided (Karpenter: 3 min).
    pub unavailable_for: SignedDuration,
    /// With no startTime on a scheduled change, the drain's deadline is this far off.
    pub scheduled_change_default: SignedDuration,
    pub launch: LaunchSettings,
}

impl Default for InterruptionSettings {
    fn default() -> Self {
        InterruptionSettings {
            notice: SignedDuration::from_mins(2),
            margin: SignedDuration::from_secs(15),
            unavailable_for: SignedDuration::from_mins(3),
            scheduled_change_default: SignedDuration::from_mins(10),
            launch: LaunchSettings::default(),
        }
    }
}

/// How one message ended (for the log, the metrics and the tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageOutcome {
    /// Removal commands started or merged (one per affected node of ours).
    Removing(Vec<Started>),
    /// Rebalance under the `Cordon` policy: the node was tainted.
    Cordoned(String),
    /// Nothing to do; the message is deleted.
    Ignored(String),
    /// Can never be handled (malformed); logged and deleted.
    Dropped(String),
}

impl MessageOutcome {
    /// The short name metrics count by.
    pub fn kind(&self) -> &'static str {
        match self {
            MessageOutcome::Removing(_) => "removing",
            MessageOutcome::Cordoned(_) => "cordoned",
            MessageOutcome::Ignored(_) => "ignored",
            MessageOutcome::Dropped(_) => "dropped",
        }
    }
}

/// The rebalance policy for a claim's nodes: the NodePool's annotation,
/// else the Settings item's.
pub fn rebalance_policy(config: &LoadedConfig, settings: &Settings, pool: &str) -> RebalancePolicy {
    config
        .pool(pool)
        .and_then(|p| p.annotations.get(REBALANCE_ANNOTATION))
        .and_then(|v| RebalancePolicy::parse(v))
        .unwrap_or(settings.rebalance_policy)
}

/// Handles one message body (an EventBridge event as JSON). `Err` only for
/// failures worth retrying; everything else is an outcome.
pub async fn handle_message<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    settings: &Settings,
    options: &InterruptionSettings,
    body: &str,
) -> Result<MessageOutcome, HandlerError> {
    let json: serde_json::Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return Ok(MessageOutcome::Dropped(format!("body is not JSON: {e}"))),
    };
    let (envelope, message) = match interruption::parse(&json) {
        Ok(parsed) => parsed,
        Err(e @ ParseError::Unsupported { .. }) => {
            return Ok(MessageOutcome::Ignored(e.to_string()));
        }
        Err(e) => return Ok(MessageOutcome::Dropped(e.to_string())),
    };
    let now = ports.clock().now();
    let event_at = envelope.time.unwrap_or(now);
    let claims = ports.store().claims().await?;
    let ours = |id: &str| claims.iter().find(|c| c.instance_id() == Some(id));
    let notice_deadline = event_at + options.notice - options.margin;
    let (targets, reason, deadline): (Vec<&Claim>, RemovalReason, Option<Timestamp>) =
        match &message {
            Message::SpotInterruption { instance_id } => {
                let Some(claim) = ours(instance_id) else {
                    return Ok(not_ours(instance_id));
                };
                mark_offering_unavailable(ports, claim, now + options.unavailable_for).await;
                (
                    vec![claim],
                    RemovalReason::SpotInterrupted,
                    Some(notice_deadline),
                )
            }
            Message::CapacityReservationInterruption { instance_id } => {
                let Some(claim) = ours(instance_id) else {
                    return Ok(not_ours(instance_id));
                };
                (
                    vec![claim],
                    RemovalReason::CapacityReservationInterrupted,
                    Some(notice_deadline),
                )
            }
            Message::ScheduledChange {
                instance_ids,
                start_time,
            } => {
                let mine: Vec<&Claim> = instance_ids.iter().filter_map(|id| ours(id)).collect();
                if mine.is_empty() {
                    return Ok(MessageOutcome::Ignored(format!(
                        "none of {} instance(s) is one of ours",
                        instance_ids.len()
                    )));
                }
                let deadline = start_time.unwrap_or(event_at + options.scheduled_change_default);
                (mine, RemovalReason::ScheduledChange, Some(deadline))
            }
            Message::StateChange { instance_id, state } => {
                if !matches!(state, InstanceState::Stopping | InstanceState::ShuttingDown) {
                    return Ok(MessageOutcome::Ignored(format!(
                        "state {state:?} asks for nothing here"
                    )));
                }
                let Some(claim) = ours(instance_id) else {
                    return Ok(not_ours(instance_id));
                };
                (vec![claim], RemovalReason::InstanceStopping, Some(event_at))
            }
            Message::RebalanceRecommendation { instance_id } => {
                let Some(claim) = ours(instance_id) else {
                    return Ok(not_ours(instance_id));
                };
                match rebalance_policy(config, settings, &claim.pool) {
                    RebalancePolicy::Ignore => {
                        return Ok(MessageOutcome::Ignored(
                            "rebalance recommendation: policy Ignore".to_owned(),
                        ));
                    }
                    RebalancePolicy::Cordon => {
                        let Some(node) = &claim.node_name else {
                            return Ok(MessageOutcome::Ignored(
                                "rebalance recommendation for a node not registered yet".to_owned(),
                            ));
                        };
                        // A failed taint is returned for a retry: the message must not be lost.
                        match ports.cluster().add_taint(node, &disrupted_taint()).await {
                            Ok(()) => {}
                            Err(ClusterError::NotFound(_)) => {
                                return Ok(MessageOutcome::Ignored(format!("node {node} is gone")));
                            }
                            Err(e) => return Err(e.into()),
                        }
                        info!(node = %node, nodeclaim = %claim.id, "cordoned node on a rebalance recommendation");
                        return Ok(MessageOutcome::Cordoned(node.clone()));
                    }
                    RebalancePolicy::Replace => (vec![claim], RemovalReason::Rebalance, None),
                }
            }
        };
    let mut started = Vec::new();
    for claim in targets {
        let avoid = match reason {
            RemovalReason::SpotInterrupted | RemovalReason::CapacityReservationInterrupted => {
                offering_of(claim).into_iter().collect()
            }
            _ => Vec::new(),
        };
        let spec = RemovalSpec {
            claim_id: claim.id.clone(),
            pool: claim.pool.clone(),
            node: claim.node_name.clone(),
            instance_id: claim.instance_id().map(str::to_owned),
            reason,
            replace: true,
            deadline,
            avoid,
            event_at: Some(event_at),
        };
        started.push(termination::start(ports, spec).await?);
    }
    Ok(MessageOutcome::Removing(started))
}

fn not_ours(instance_id: &str) -> MessageOutcome {
    MessageOutcome::Ignored(format!("instance {instance_id} is not one of ours"))
}

fn offering_of(claim: &Claim) -> Option<OfferingKey> {
    claim.instance.as_ref().map(|i| OfferingKey {
        capacity_type: i.capacity_type.clone(),
        instance_type: i.instance_type.clone(),
        zone: i.zone.clone(),
    })
}

async fn mark_offering_unavailable<P: PortSet>(ports: &P, claim: &Claim, until: Timestamp) {
    let Some(offering) = offering_of(claim) else {
        return;
    };
    match ports.store().mark_unavailable(&offering, until).await {
        Ok(()) => info!(offering = %offering, "marked interrupted offering unavailable"),
        Err(e) => {
            warn!(offering = %offering, error = %e, "could not mark interrupted offering unavailable")
        }
    }
}

/// One SQS record: its message id and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub message_id: String,
    pub body: String,
}

/// What a batch came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Message ids to hand back to SQS (retryable failures only).
    pub failures: Vec<String>,
    pub outcomes: Vec<(String, MessageOutcome)>,
}

/// Handles a batch of SQS records, each in its own span; then advances every
/// removal once so the new ones are tainted and their replacements
/// launched before the function returns.
pub async fn handle_batch<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    settings: &Settings,
    options: &InterruptionSettings,
    records: &[Record],
) -> Result<BatchReport, HandlerError> {
    let mut report = BatchReport::default();
    for record in records {
        let span = info_span!("message", message_id = %record.message_id);
        match handle_message(ports, config, settings, options, &record.body)
            .instrument(span.clone())
            .await
        {
            Ok(outcome) => {
                span.in_scope(|| match &outcome {
                    MessageOutcome::Dropped(reason) => warn!(message_id = %record.message_id, %reason, "dropping message that can never be handled"),
                    MessageOutcome::Ignored(reason) => info!(message_id = %record.message_id, %reason, "ignoring message"),
                    _ => {}
                });
                report.outcomes.push((record.message_id.clone(), outcome));
            }
            Err(e) if e.is_retryable() => {
                span.in_scope(|| warn!(message_id = %record.message_id, error = %e, "message failed; returning it for a retry"));
                report.failures.push(record.message_id.clone());
            }
            Err(e) => {
                span.in_scope(
                    || warn!(message_id = %record.message_id, error = %e, "dropping message"),
                );
                report.outcomes.push((
                    record.message_id.clone(),
                    MessageOutcome::Dropped(e.to_string()),
                ));
            }
        }
    }
    publish_counts(&report, ports.clock().now());
    if let Err(e) = termination::advance_all(ports, config, &options.launch).await {
        // The commands are stored: the next pass (or the provisioner's tick) resumes them.
        warn!(error = %e, "could not advance removals after the batch");
    }
    Ok(report)
}

fn publish_counts(report: &BatchReport, now: Timestamp) {
    let mut by_kind: BTreeMap<&'static str, f64> = BTreeMap::new();
    for (_, o) in &report.outcomes {
        *by_kind.entry(o.kind()).or_default() += 1.0;
    }
    let figures: Vec<Metric> = [
        ("MessagesRemoving", by_kind.get("removing")),
        ("MessagesCordoned", by_kind.get("cordoned")),
        ("MessagesIgnored", by_kind.get("ignored")),
        ("MessagesDropped", by_kind.get("dropped")),
    ]
    .into_iter()
    .map(|(name, v)| Metric::count(name, v.copied().unwrap_or(0.0)))
    .chain(std::iter::once(Metric::count(
        "MessagesRetried",
        report.failures.len() as f64,
    )))
    .collect();
    let dims: BTreeMap<&str, String> = [("Function", "interruption".to_owned())].into();
    metrics::emit(now.as_millisecond(), &dims, &figures);
}

/// Keeps advancing removals until none is left or `until` comes, sleeping
/// with `sleep` between passes: the function works through a 2-minute
/// notice inside its invocation instead of once a minute.
pub async fn drive_until<P, F, Fut>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
    until: Timestamp,
    sleep: F,
) -> Result<u64, HandlerError>
where
    P: PortSet,
    F: Fn(SignedDuration) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut passes = 0;
    loop {
        let wake = termination::advance_all(ports, config, launch).await?;
        passes += 1;
        let now = ports.clock().now();
        let Some(wake) = wake else { break };
        if wake >= until {
            break;
        }
        sleep(
            wake.duration_since(now)
                .max(SignedDuration::from_millis(200)),
        )
        .await;
    }
    Ok(passes)
}
