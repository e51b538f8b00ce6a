//! EventBridge events about our instances, parsed into one [`Message`] enum:
//! one parser per `detail-type`. Pure.
//!
//! Lenient where AWS is untidy and we do not look: the envelope's `time`
//! may be missing, empty or unreadable (the message's receipt stands in),
//! `resources` may be missing, `null`, a string or a list, `id` and
//! `region` may be anything. Instances are named by bare id (`i-…`) or by
//! ARN (`arn:aws:ec2:<region>:<account>:instance/i-…`, as AWS Health's
//! current EC2 events and every EC2 event's `resources` do). A date in RFC
//! 2822 form whose weekday does not match its day (AWS Health has sent
//! such) keeps its date.
//!
//! A [`ParseError`] says why nothing is asked of us: [`ParseError::is_ignorable`]
//! ones are well-formed events that concern no instance (a Health event
//! about a dedicated host, a state we do not act on, a kind we do not
//! handle); the rest cannot be read and never will be (the caller logs and
//! drops them).

use serde_json::Value;

pub mod health;

use crate::model::{InstanceState, Timestamp};

/// The EventBridge envelope (`version` "0"), read leniently: only
/// `detail-type` and `source` must be strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub id: String,
    pub detail_type: String,
    pub source: String,
    /// When the event happened; `None` when missing or unreadable.
    pub time: Option<Timestamp>,
    pub region: String,
    /// Affected resources (ARNs), whatever shape they came in.
    pub resources: Vec<String>,
    pub detail: Value,
}

impl Envelope {
    /// Reads the envelope of one event.
    pub fn from_json(json: &Value) -> Result<Envelope, ParseError> {
        let Some(obj) = json.as_object() else {
            return Err(ParseError::Envelope(
                "the event is not a JSON object".into(),
            ));
        };
        let required = |key: &str| -> Result<String, ParseError> {
            obj.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| ParseError::Envelope(format!("{key} is missing or not a string")))
        };
        let text = |key: &str| {
            obj.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let resources = match obj.get("resources") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(one)) if !one.is_empty() => vec![one.clone()],
            _ => Vec::new(),
        };
        Ok(Envelope {
            id: text("id"),
            detail_type: required("detail-type")?,
            source: required("source")?,
            time: obj
                .get("time")
                .and_then(Value::as_str)
                .and_then(parse_event_time),
            region: text("region"),
            resources,
            detail: obj.get("detail").cloned().unwrap_or(Value::Null),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// EC2 Instance State-change Notification.
    StateChange {
        instance_id: String,
        state: InstanceState,
    },
    /// EC2 Spot Instance Interruption Warning: two minutes' notice, or none
    /// when the instance hibernates (`instance-action: hibernate`:
    /// hibernation begins at once).
    SpotInterruption {
        instance_id: String,
        hibernate: bool,
    },
    /// EC2 Instance Rebalance Recommendation.
    RebalanceRecommendation { instance_id: String },
    /// AWS Health scheduled change for EC2 instances: the maintenance
    /// window opens at `start_time` (when the event gives one).
    ScheduledChange {
        instance_ids: Vec<String>,
        start_time: Option<Timestamp>,
    },
    /// EC2 Capacity Reservation Instance Interruption Warning: the
    /// instance is terminated at `terminates_at`
    /// (`instance-termination-time`), two minutes after the warning.
    CapacityReservationInterruption {
        instance_id: String,
        terminates_at: Option<Timestamp>,
    },
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
    /// Well-formed, but about nothing we act on (no instance named, a
    /// state that asks for nothing).
    #[error("{detail_type}: {reason}")]
    NotForUs { detail_type: String, reason: String },
    #[error("{detail_type}: {reason}")]
    Detail { detail_type: String, reason: String },
}

impl ParseError {
    /// A well-formed event that asks nothing of us: ignored, not dropped.
    pub fn is_ignorable(&self) -> bool {
        matches!(
            self,
            ParseError::Unsupported { .. } | ParseError::NotForUs { .. }
        )
    }
}

/// The instance id a bare id (`i-0abc…`) or an EC2 instance ARN
/// (`arn:<partition>:ec2:<region>:<account>:instance/i-0abc…`) names.
pub fn instance_id_of(value: &str) -> Option<&str> {
    let id = if value.starts_with("arn:") {
        let (prefix, id) = value.rsplit_once(":instance/")?;
        if prefix.split(':').nth(2) != Some("ec2") {
            return None;
        }
        id
    } else {
        value
    };
    let rest = id.strip_prefix("i-")?;
    (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(id)
}

/// Parses one EventBridge event (the JSON an SQS message body or a Lambda
/// EventBridge invocation carries).
pub fn parse(json: &Value) -> Result<(Envelope, Message), ParseError> {
    let env = Envelope::from_json(json)?;
    let detail_err = |reason: &str| ParseError::Detail {
        detail_type: env.detail_type.clone(),
        reason: reason.to_owned(),
    };
    let not_for_us = |reason: String| ParseError::NotForUs {
        detail_type: env.detail_type.clone(),
        reason,
    };
    let field = |key: &str| env.detail.get(key).and_then(Value::as_str);
    let instance_id = || -> Result<String, ParseError> {
        field("instance-id")
            .and_then(instance_id_of)
            .map(str::to_owned)
            .ok_or_else(|| detail_err("detail.instance-id is missing or not an instance id"))
    };
    let message = match (env.source.as_str(), env.detail_type.as_str()) {
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let instance_id = instance_id()?;
            let Some(raw) = field("state") else {
                return Err(detail_err("detail.state is missing"));
            };
            // A state EC2 may add one day (or Karpenter's test's
            // "creating") asks for nothing: ignored, as Karpenter does.
            let state = InstanceState::parse(raw)
                .ok_or_else(|| not_for_us(format!("state {raw:?} asks for nothing")))?;
            Message::StateChange { instance_id, state }
        }
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => Message::SpotInterruption {
            instance_id: instance_id()?,
            hibernate: field("instance-action") == Some("hibernate"),
        },
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Message::RebalanceRecommendation {
            instance_id: instance_id()?,
        },
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => {
            Message::CapacityReservationInterruption {
                instance_id: instance_id()?,
                terminates_at: field("instance-termination-time").and_then(parse_event_time),
            }
        }
        ("aws.health", "AWS Health Event") => {
            if field("service") != Some("EC2")
                || field("eventTypeCategory") != Some("scheduledChange")
            {
                return Err(ParseError::Unsupported {
                    source_name: env.source.clone(),
                    detail_type: format!("{} (not an EC2 scheduledChange)", env.detail_type),
                });
            }
            let entities: Vec<&str> = env
                .detail
                .get("affectedEntities")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.get("entityValue").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            let mut instance_ids: Vec<String> = Vec::new();
            for id in entities.iter().filter_map(|e| instance_id_of(e)) {
                if !instance_ids.iter().any(|known| known == id) {
                    instance_ids.push(id.to_owned());
                }
            }
            if instance_ids.is_empty() {
                // A dedicated host, a volume, …: not an instance of ours.
                let code = field("eventTypeCode").unwrap_or("an EC2 scheduled change");
                return Err(not_for_us(format!(
                    "{code} names no instance ({} other entit{})",
                    entities.len(),
                    if entities.len() == 1 { "y" } else { "ies" }
                )));
            }
            Message::ScheduledChange {
                instance_ids,
                start_time: field("startTime").and_then(parse_event_time),
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

/// RFC 2822 as AWS Health writes it, whatever the weekday says.
static RFC2822: jiff::fmt::rfc2822::DateTimeParser =
    jiff::fmt::rfc2822::DateTimeParser::new().relaxed_weekday(true);

/// A time as AWS events write it: RFC 3339, or RFC 2822 (AWS Health's
/// `startTime`: "Fri, 04 Dec 2026 09:00:00 GMT").
pub fn parse_event_time(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(t) = s.parse::<Timestamp>() {
        return Some(t);
    }
    RFC2822.parse_timestamp(s).ok()
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
                instance_id: "i-1".into(),
                hibernate: false,
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
            json!({"instance-id": "i-1", "state": 7}),
        );
        assert!(matches!(parse(&bad_state), Err(ParseError::Detail { .. })));
        // A state we do not know asks for nothing: ignored, not dropped
        // (Karpenter's "should delete a state change message when the
        // state isn't in accepted states" sends "creating").
        let unknown_state = event(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            json!({"instance-id": "i-1", "state": "creating"}),
        );
        let e = parse(&unknown_state).expect_err("not acted on");
        assert!(e.is_ignorable(), "{e:?}");
        assert!(!parse(&bad_state).expect_err("bad").is_ignorable());
        let no_id = event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({}),
        );
        assert!(matches!(parse(&no_id), Err(ParseError::Detail { .. })));
        let other = event("Something Else", "aws.s3", json!({}));
        assert!(matches!(parse(&other), Err(ParseError::Unsupported { .. })));
    }

    #[test]
    fn fields_we_do_not_use_may_be_odd() {
        let mut e = event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"}),
        );
        for (field, value) in [
            ("time", json!("")),
            ("time", json!(null)),
            ("time", json!("yesterday")),
            ("resources", json!(null)),
            (
                "resources",
                json!("arn:aws:ec2:us-east-1:123456789012:instance/i-0b662ef9931388ba0"),
            ),
            ("resources", json!([1, {"a": 2}])),
            ("id", json!(42)),
            ("region", json!(null)),
        ] {
            e[field] = value.clone();
            let (env, m) = parse(&e).unwrap_or_else(|err| panic!("{field} = {value}: {err}"));
            assert_eq!(
                m,
                Message::SpotInterruption {
                    instance_id: "i-0b662ef9931388ba0".into(),
                    hibernate: false
                },
                "{field} = {value}"
            );
            if field == "time" {
                assert_eq!(env.time, None, "an unreadable time is no time");
            }
        }
        let mut missing = event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({}),
        );
        missing
            .as_object_mut()
            .expect("object")
            .remove("detail-type");
        assert!(matches!(parse(&missing), Err(ParseError::Envelope(_))));
    }

    #[test]
    fn instances_by_bare_id_or_by_arn() {
        for (value, want) in [
            ("i-0b662ef9931388ba0", Some("i-0b662ef9931388ba0")),
            (
                "arn:aws:ec2:us-east-2:123456789012:instance/i-1234567890abcdef0",
                Some("i-1234567890abcdef0"),
            ),
            // Karpenter's and NTH's fixtures leave out the account.
            (
                "arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0",
                Some("i-0b662ef9931388ba0"),
            ),
            (
                "arn:aws-cn:ec2:cn-north-1:123456789012:instance/i-0abc",
                Some("i-0abc"),
            ),
            ("h-0123456789abcdef0", None),
            ("vol-0123456789abcdef0", None),
            ("arn:aws:ec2:us-east-1:123456789012:volume/vol-0abc", None),
            ("arn:aws:s3:::instance/i-0abc", None),
            ("i-", None),
            ("", None),
        ] {
            assert_eq!(instance_id_of(value), want, "{value}");
        }
        let by_arn = event(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            json!({"instance-id": "arn:aws:ec2:us-east-2:123456789012:instance/i-1234567890abcdef0"}),
        );
        assert_eq!(
            parse(&by_arn).expect("rebalance").1,
            Message::RebalanceRecommendation {
                instance_id: "i-1234567890abcdef0".into()
            }
        );
        let health = event(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                   "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                   "affectedEntities": [
                       {"entityValue": "arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"},
                       {"entityValue": "i-abcd1111"},
                       {"entityValue": "i-abcd2222"}]}),
        );
        assert_eq!(
            parse(&health).expect("health").1,
            Message::ScheduledChange {
                instance_ids: vec!["i-abcd1111".into(), "i-abcd2222".into()],
                start_time: None
            }
        );
    }

    #[test]
    fn a_health_event_about_no_instance_is_ignorable() {
        let host = event(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                   "eventTypeCode": "AWS_EC2_DEDICATED_HOST_RETIREMENT_SCHEDULED",
                   "affectedEntities": [{"entityValue": "h-0123456789abcdef0"}]}),
        );
        let e = parse(&host).expect_err("no instance");
        assert!(e.is_ignorable(), "{e:?}");
        assert!(
            e.to_string()
                .contains("AWS_EC2_DEDICATED_HOST_RETIREMENT_SCHEDULED")
        );
        let none = event(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange"}),
        );
        assert!(parse(&none).expect_err("no entities").is_ignorable());
    }

    #[test]
    fn a_start_time_whose_weekday_is_wrong_keeps_its_date() {
        // NTH's scheduled-change fixture: 5 June 2016 was a Sunday.
        assert_eq!(
            parse_event_time("Sat, 05 Jun 2016 15:10:09 GMT"),
            Some("2016-06-05T15:10:09Z".parse().expect("time"))
        );
        // A single-digit day, as AWS Health writes it.
        assert_eq!(
            parse_event_time("Thu, 1 Nov 2018 22:00:00 GMT"),
            Some("2018-11-01T22:00:00Z".parse().expect("time"))
        );
        assert_eq!(
            parse_event_time("2026-12-01T09:02:00Z"),
            Some("2026-12-01T09:02:00Z".parse().expect("time"))
        );
        assert_eq!(parse_event_time("Wat, 05 Jun 2016 15:10:09 GMT"), None);
        assert_eq!(parse_event_time(""), None);
    }

    #[test]
    fn hibernation_and_a_reservation_s_termination_time() {
        let hibernate = event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": "i-1", "instance-action": "hibernate"}),
        );
        assert_eq!(
            parse(&hibernate).expect("spot").1,
            Message::SpotInterruption {
                instance_id: "i-1".into(),
                hibernate: true
            }
        );
        let reservation = event(
            "EC2 Capacity Reservation Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": "i-1", "instance-action": "terminate",
                   "instance-termination-time": "2026-11-30T12:02:00Z", "azId": "use1-az1"}),
        );
        assert_eq!(
            parse(&reservation).expect("reservation").1,
            Message::CapacityReservationInterruption {
                instance_id: "i-1".into(),
                terminates_at: Some("2026-11-30T12:02:00Z".parse().expect("time"))
            }
        );
    }
}
