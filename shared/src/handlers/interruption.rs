//! The interruption function: EventBridge events delivered through SQS
//! (spot interruption warnings, rebalance recommendations, AWS Health
//! scheduled changes, capacity-reservation interruptions, and state changes
//! if they are routed here), turned into removal commands.
//!
//! Each message ends in exactly one of: handled (a command started or
//! merged, a node cordoned), ignored (not ours, a kind, entity or policy
//! that asks for nothing — the message is deleted), dropped (the body can
//! never be read: logged with its id and deleted), or **failed**: any
//! failure of the store, the cluster or the cloud, whatever its kind
//! (throttled, unavailable, access denied, a KMS key that refuses, an item
//! we cannot read), goes back to SQS through the partial batch response
//! and is received again after the queue's visibility timeout; one that
//! keeps failing moves to the dead-letter queue, where an alarm sees it.
//! No message is deleted unhandled because something on our side failed
//! (NTH #360, #1284). Nothing is acted on unless the instance is one of
//! our claims: events are account-wide.
//!
//! The invocation is short: it records the batch's removal commands and
//! takes each new one through its taint (the node takes no new pods from
//! then on), then returns. The replacement, the drain and the termination
//! are carried on by the loops that advance every command — the
//! disruption loop's tick (every ~2 s) and the provisioner's tick, which
//! follows commands with a deadline at their own pace.

use std::collections::BTreeMap;

use tracing::{Instrument, info, info_span, warn};

use super::HandlerError;
use super::config::LoadedConfig;
use super::launcher::LaunchSettings;
use super::metrics::{self, Metric};
use super::termination::{self, Progress, Started};
use crate::config::settings::REBALANCE_ANNOTATION;
use crate::config::{RebalancePolicy, Settings};
use crate::interruption::{self, Message};
use crate::model::claim::Claim;
use crate::model::{
    InstanceState, OfferingKey, RemovalReason, RemovalSpec, SignedDuration, Step, Timestamp,
};
use crate::ports::{Clock, Cluster, ClusterError, PortSet, Store};

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
    /// Rebalance under the `Cordon` policy: the node was cordoned.
    Cordoned(String),
    /// Nothing to do; the message is deleted.
    Ignored(String),
    /// Can never be handled (a body that cannot be read); logged and deleted.
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
        Err(e) if e.is_ignorable() => return Ok(MessageOutcome::Ignored(e.to_string())),
        Err(e) => return Ok(MessageOutcome::Dropped(e.to_string())),
    };
    let now = ports.clock().now();
    let event_at = envelope.time.unwrap_or(now);
    let claims = ports.store().claims().await?;
    let ours = |id: &str| claims.iter().find(|c| c.instance_id() == Some(id));
    let notice_deadline = event_at + options.notice - options.margin;
    let (targets, reason, deadline): (Vec<&Claim>, RemovalReason, Option<Timestamp>) =
        match &message {
            Message::SpotInterruption {
                instance_id,
                hibernate,
            } => {
                let Some(claim) = ours(instance_id) else {
                    return Ok(not_ours(instance_id));
                };
                // Hibernation begins at once: no two minutes.
                let deadline = if *hibernate {
                    event_at
                } else {
                    notice_deadline
                };
                (vec![claim], RemovalReason::SpotInterrupted, Some(deadline))
            }
            Message::CapacityReservationInterruption {
                instance_id,
                terminates_at,
            } => {
                let Some(claim) = ours(instance_id) else {
                    return Ok(not_ours(instance_id));
                };
                let deadline = terminates_at.map_or(notice_deadline, |t| t - options.margin);
                (
                    vec![claim],
                    RemovalReason::CapacityReservationInterrupted,
                    Some(deadline),
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
                        // A cordon, not the removal's taint: the node takes no new pods
                        // but is no removal — emptiness, consolidation, expiration and
                        // budgets see it as any other node. A failed cordon is returned
                        // for a retry: the message must not be lost.
                        match ports.cluster().cordon(node).await {
                            Ok(()) => {}
                            Err(ClusterError::NotFound { .. }) => {
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
            handover: false,
        };
        started.push(termination::start(ports, spec).await?);
        if matches!(
            reason,
            RemovalReason::SpotInterrupted | RemovalReason::CapacityReservationInterrupted
        ) {
            // After the command, so a failure here (returned for a retry)
            // leaves the removal recorded; the retry merges into it. A
            // reservation being reclaimed takes no new launch either
            // (Karpenter sets its available count to 0).
            mark_offering_unavailable(ports, claim, now + options.unavailable_for).await?;
        }
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

/// Marks the interrupted offering unavailable; a failure fails the
/// message (the replacement must not land on the same offering).
async fn mark_offering_unavailable<P: PortSet>(
    ports: &P,
    claim: &Claim,
    until: Timestamp,
) -> Result<(), HandlerError> {
    let Some(offering) = offering_of(claim) else {
        return Ok(());
    };
    ports.store().mark_unavailable(&offering, until).await?;
    info!(offering = %offering, "marked interrupted offering unavailable");
    Ok(())
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
    /// Message ids to hand back to SQS: every message whose handling
    /// failed, and those the invocation had no time left to start.
    pub failures: Vec<String>,
    pub outcomes: Vec<(String, MessageOutcome)>,
}

/// Handles a batch of SQS records, each in its own span, until `until`
/// (messages not started by then go back untouched); then takes each
/// removal the batch started through its taint. Every failure is a batch
/// item failure, whatever its kind: SQS delivers the message again, and
/// the dead-letter queue keeps one that never succeeds.
pub async fn handle_batch<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    settings: &Settings,
    options: &InterruptionSettings,
    records: &[Record],
    until: Timestamp,
) -> Result<BatchReport, HandlerError> {
    let mut report = BatchReport::default();
    let mut commands: Vec<String> = Vec::new();
    for record in records {
        if ports.clock().now() >= until {
            warn!(message_id = %record.message_id, "no time left in this invocation; returning the message");
            report.failures.push(record.message_id.clone());
            continue;
        }
        publish_received(&record.body, ports.clock().now());
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
                if let MessageOutcome::Removing(started) = &outcome {
                    for s in started {
                        let id = match s {
                            Started::New(id) | Started::Existing { id, .. } => id,
                        };
                        if !commands.contains(id) {
                            commands.push(id.clone());
                        }
                    }
                }
                report.outcomes.push((record.message_id.clone(), outcome));
            }
            Err(e) => {
                let kind = failure_kind(&e);
                span.in_scope(|| warn!(message_id = %record.message_id, error = %e, kind, retryable = e.is_retryable(), "message failed; returning it to the queue"));
                report.failures.push(record.message_id.clone());
            }
        }
    }
    publish_counts(&report, ports.clock().now());
    taint_started(ports, config, &options.launch, &commands, until).await;
    Ok(report)
}

/// What kind of failure a handler error is, for the log.
pub fn failure_kind(e: &HandlerError) -> &'static str {
    match e {
        HandlerError::Store(s) => s.failure_kind().map_or(
            match s {
                crate::ports::StoreError::Conflict { .. } => "conflict",
                crate::ports::StoreError::Invalid { .. } => "unreadable item",
                _ => "store",
            },
            |k| k.as_str(),
        ),
        HandlerError::Cloud(c) => c.failure_kind().map_or("cloud", |k| k.as_str()),
        HandlerError::Cluster(c) => match c {
            ClusterError::Forbidden { .. } => "access denied",
            ClusterError::NotFound { .. } => "not found",
            ClusterError::Conflict { .. } => "conflict",
            ClusterError::Transient { .. } => "unavailable",
            ClusterError::Other { .. } => "cluster",
        },
        HandlerError::Invalid(_) => "invalid input",
    }
}

/// Takes the batch's commands that are still at their first step through
/// their taint, within the invocation's time. A failure here loses
/// nothing: the command is stored, and the loops that advance every
/// command taint it within seconds.
async fn taint_started<P: PortSet>(
    ports: &P,
    config: &LoadedConfig,
    launch: &LaunchSettings,
    ids: &[String],
    until: Timestamp,
) {
    if ids.is_empty() {
        return;
    }
    let commands = match ports.store().commands().await {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "could not read the removals to taint; the next pass taints them");
            return;
        }
    };
    for command in commands
        .into_iter()
        .filter(|c| ids.contains(&c.id) && c.step < Step::Replace)
    {
        if ports.clock().now() >= until {
            break;
        }
        let id = command.id.clone();
        let span = info_span!("command", nodeclaim = %id, reason = %command.spec.reason);
        match termination::advance_before(ports, config, launch, command, Some(Step::Replace))
            .instrument(span)
            .await
        {
            Ok(Progress::Waiting(_) | Progress::Finished | Progress::Contended) => {}
            Err(e) => {
                warn!(nodeclaim = %id, error = %e, "could not taint the node; the next pass does")
            }
        }
    }
}

/// Karpenter's `message_type` of a queue message (`no_op` when it does
/// not parse), as its interruption controller counts them.
pub fn message_type(body: &str) -> &'static str {
    use crate::interruption::Message;
    let Ok(json) = serde_json::from_str::<serde_json::Value>(body) else {
        return "no_op";
    };
    match crate::interruption::parse(&json) {
        Ok((_, Message::SpotInterruption { .. })) => "spot_interrupted",
        Ok((_, Message::RebalanceRecommendation { .. })) => "rebalance_recommendation",
        Ok((_, Message::ScheduledChange { .. })) => "scheduled_change",
        Ok((_, Message::CapacityReservationInterruption { .. })) => {
            "capacity_reservation_interrupted"
        }
        Ok((_, Message::StateChange { state, .. })) => match state {
            InstanceState::Stopping | InstanceState::Stopped => "instance_stopped",
            InstanceState::ShuttingDown | InstanceState::Terminated => "instance_terminated",
            _ => "state_change",
        },
        Err(_) => "no_op",
    }
}

/// `karpenter_interruption_received_messages_total` by message type, and
/// how long the event waited for us (`…_message_queue_duration_seconds`,
/// from the event's time).
fn publish_received(body: &str, now: Timestamp) {
    let t = now.as_millisecond();
    metrics::count(
        t,
        metrics::karpenter::INTERRUPTION_RECEIVED,
        &[("message_type", message_type(body))],
        1.0,
    );
    let at = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|j| j.get("time")?.as_str()?.parse::<Timestamp>().ok());
    if let Some(at) = at {
        metrics::seconds(
            t,
            metrics::karpenter::INTERRUPTION_QUEUE_DURATION,
            &[],
            now.duration_since(at).as_secs_f64().max(0.0),
        );
    }
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
    // Every message not handed back is deleted from the queue.
    let deleted = report.outcomes.len();
    if deleted > 0 {
        metrics::count(
            now.as_millisecond(),
            metrics::karpenter::INTERRUPTION_DELETED,
            &[],
            deleted as f64,
        );
    }
    let dropped = by_kind.get("dropped").copied().unwrap_or(0.0);
    if dropped > 0.0 {
        metrics::count(
            now.as_millisecond(),
            metrics::own::INTERRUPTION_DROPPED,
            &[],
            dropped,
        );
    }
}
