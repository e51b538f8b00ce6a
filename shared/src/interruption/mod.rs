//! EventBridge events about our instances, parsed into one [`Message`] enum:
//! one parser per `detail-type`. Pure. A message that fails to parse is an
//! error the caller logs and drops (it can never succeed on a retry).

use serde::Deserialize;

use crate::ports::{InstanceState, Timestamp};

/// The EventBridge envelope (`version` "0").
#[derive(Debug, Clone, Deserialize)]
pub struct Envelope {
    #[serde(default)]
    pub id: String,
    #[serde(rename = "detail-type")]
    pub detail_type: String,
    pub source: String,
    #[serde(default)]
    pub time: Option<Timestamp>,
    #[serde(default)]
    pub region: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// EC2 Instance State-change Notification.
    StateChange {
        instance_id: String,
        state: InstanceState,
    },
    /// EC2 Spot Instance Interruption Warning: two minutes' notice.
    SpotInterruption { instance_id: String },
    /// EC2 Instance Rebalance Recommendation.
    RebalanceRecommendation { instance_id: String },
    /// AWS Health scheduled change for EC2 instances: the maintenance
    /// window opens at `start_time` (when the event gives one).
    ScheduledChange {
        instance_ids: Vec<String>,
        start_time: Option<Timestamp>,
    },
    /// EC2 Capacity Reservation Instance Interruption Warning.
    CapacityReservationInterruption { instance_id: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not an EventBridge event: {0}")]
    Envelope(String),
    #[error("unsupported event {source_name} / {detail_type}")]
    Unsupported {
        source_name: String,
        detail_type: String,
    },
    #[error("{detail_type}: {reason}")]
    Detail { detail_type: String, reason: String },
}

/// Parses one EventBridge event (the JSON an SQS message body or a Lambda
/// EventBridge invocation carries).
pub fn parse(json: &serde_json::Value) -> Result<(Envelope, Message), ParseError> {
    let env: Envelope =
        serde_json::from_value(json.clone()).map_err(|e| ParseError::Envelope(e.to_string()))?;
    let detail_err = |reason: &str| ParseError::Detail {
        detail_type: env.detail_type.clone(),
        reason: reason.to_owned(),
    };
    let instance_id = || -> Result<String, ParseError> {
        env.detail
            .get("instance-id")
            .and_then(|v| v.as_str())
            .filter(|s| s.starts_with("i-"))
            .map(str::to_owned)
            .ok_or_else(|| detail_err("detail.instance-id is missing or not an instance id"))
    };
    let message = match (env.source.as_str(), env.detail_type.as_str()) {
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let state = env
                .detail
                .get("state")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            let state = InstanceState::parse(state)
                .ok_or_else(|| detail_err("detail.state is not an EC2 instance state"))?;
            Message::StateChange {
                instance_id: instance_id()?,
                state,
            }
        }
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => Message::SpotInterruption {
            instance_id: instance_id()?,
        },
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Message::RebalanceRecommendation {
            instance_id: instance_id()?,
        },
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => {
            Message::CapacityReservationInterruption {
                instance_id: instance_id()?,
            }
        }
        ("aws.health", "AWS Health Event") => {
            let d = &env.detail;
            if d.get("service").and_then(|v| v.as_str()) != Some("EC2")
                || d.get("eventTypeCategory").and_then(|v| v.as_str()) != Some("scheduledChange")
            {
                return Err(ParseError::Unsupported {
                    source_name: env.source.clone(),
                    detail_type: format!("{} (not an EC2 scheduledChange)", env.detail_type),
                });
            }
            let instance_ids: Vec<String> = d
                .get("affectedEntities")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.get("entityValue").and_then(|v| v.as_str()))
                        .filter(|s| s.starts_with("i-"))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if instance_ids.is_empty() {
                return Err(detail_err("detail.affectedEntities names no instance"));
            }
            // `startTime` is RFC 1123 in AWS Health events ("Fri, 04 Dec 2026 09:00:00 GMT");
            // accept RFC 3339 too.
            let start_time = d
                .get("startTime")
                .and_then(|v| v.as_str())
                .and_then(parse_event_time);
            Message::ScheduledChange {
                instance_ids,
                start_time,
            }
        }
        _ => {
            return Err(ParseError::Unsupported {
                source_name: env.source.clone(),
                detail_type: env.detail_type.clone(),
            });
        }
    };
    Ok((env, message))
}

/// A time as AWS events write it: RFC 3339, or RFC 1123 (AWS Health).
fn parse_event_time(s: &str) -> Option<Timestamp> {
    if let Ok(t) = s.parse::<Timestamp>() {
        return Some(t);
    }
    jiff::fmt::rfc2822::parse(s).ok().map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(detail_type: &str, source: &str, detail: serde_json::Value) -> serde_json::Value {
        json!({"version": "0", "id": "e-1", "detail-type": detail_type, "source": source,
               "account": "123456789012", "time": "2026-11-30T12:00:00Z", "region": "ap-south-1",
               "resources": [], "detail": detail})
    }

    #[test]
    fn state_change() {
        let e = event(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            json!({"instance-id": "i-0abc", "state": "shutting-down"}),
        );
        let (_, m) = parse(&e).expect("parses");
        assert_eq!(
            m,
            Message::StateChange {
                instance_id: "i-0abc".into(),
                state: InstanceState::ShuttingDown
            }
        );
    }

    #[test]
    fn every_interruption_kind() {
        let spot = event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": "i-1", "instance-action": "terminate"}),
        );
        assert_eq!(
            parse(&spot).expect("spot").1,
            Message::SpotInterruption {
                instance_id: "i-1".into()
            }
        );
        let health = event(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
            "affectedEntities": [{"entityValue": "i-2"}, {"entityValue": "i-3"}]}),
        );
        assert_eq!(
            parse(&health).expect("health").1,
            Message::ScheduledChange {
                instance_ids: vec!["i-2".into(), "i-3".into()],
                start_time: None
            }
        );
        let dated = event(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
            "startTime": "Fri, 04 Dec 2026 09:00:00 GMT", "affectedEntities": [{"entityValue": "i-2"}]}),
        );
        let Message::ScheduledChange { start_time, .. } = parse(&dated).expect("dated").1 else {
            panic!("kind")
        };
        assert_eq!(
            start_time,
            Some("2026-12-04T09:00:00Z".parse().expect("time"))
        );
    }

    #[test]
    fn malformed_events_are_errors_not_panics() {
        assert!(matches!(
            parse(&json!({"hello": 1})),
            Err(ParseError::Envelope(_))
        ));
        let bad_state = event(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            json!({"instance-id": "i-1", "state": "melting"}),
        );
        assert!(matches!(parse(&bad_state), Err(ParseError::Detail { .. })));
        let no_id = event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({}),
        );
        assert!(matches!(parse(&no_id), Err(ParseError::Detail { .. })));
        let other = event("Something Else", "aws.s3", json!({}));
        assert!(matches!(parse(&other), Err(ParseError::Unsupported { .. })));
    }
}
