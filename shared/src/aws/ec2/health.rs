//! Instance health: DescribeInstanceStatus read into [`InstanceHealth`]es,
//! as Karpenter's instance-status provider asks it — three filtered
//! listings (instance checks impaired, system checks impaired, a scheduled
//! event of the kinds that take the host away), their union by instance.
//! EC2 answers for the whole account; the caller acts on its own claims'
//! instances only.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    EventCode, Filter, InstanceStatus as Ec2Status, InstanceStatusSummary, StatusType,
    SummaryStatus,
};

use super::Ec2Cloud;
use crate::aws::ApiError;
use crate::aws::prices::PriceSource;
use crate::model::{InstanceHealth, StatusCategory, StatusCheck, Timestamp};
use crate::ports::CloudError;

/// The three listings (EC2 ANDs filters of different names, so each is
/// asked on its own).
fn filters() -> [Filter; 3] {
    let impaired = SummaryStatus::Impaired.as_str();
    [
        Filter::builder()
            .name("instance-status.status")
            .values(impaired)
            .build(),
        Filter::builder()
            .name("system-status.status")
            .values(impaired)
            .build(),
        Filter::builder()
            .name("event.code")
            .set_values(Some(
                [
                    EventCode::InstanceReboot,
                    EventCode::SystemReboot,
                    EventCode::SystemMaintenance,
                    EventCode::InstanceRetirement,
                    EventCode::InstanceStop,
                ]
                .iter()
                .map(|c| c.as_str().to_owned())
                .collect(),
            ))
            .build(),
    ]
}

impl<P: PriceSource> Ec2Cloud<P> {
    /// Every running instance of the account with a failed check or a
    /// scheduled event. One call per filter and page.
    pub(super) async fn list_instance_health(&self) -> Result<Vec<InstanceHealth>, CloudError> {
        let mut found: BTreeMap<String, InstanceHealth> = BTreeMap::new();
        for filter in filters() {
            let mut pages = self
                .ec2
                .describe_instance_status()
                .filters(filter)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                self.count();
                let page = page.map_err(|e| {
                    CloudError::from(ApiError::from_sdk("DescribeInstanceStatus", e))
                })?;
                for s in page.instance_statuses() {
                    if let Some(h) = from_ec2(s) {
                        found.entry(h.instance_id.clone()).or_insert(h);
                    }
                }
            }
        }
        Ok(found
            .into_values()
            .filter(|h| h.checks.iter().any(|c| c.failed))
            .collect())
    }
}

fn time(t: Option<&aws_sdk_ec2::primitives::DateTime>) -> Option<Timestamp> {
    t.and_then(|t| Timestamp::new(t.secs(), i32::try_from(t.subsec_nanos()).unwrap_or(0)).ok())
}

fn checks(summary: Option<&InstanceStatusSummary>, category: StatusCategory) -> Vec<StatusCheck> {
    summary
        .map(|s| s.details())
        .unwrap_or_default()
        .iter()
        .map(|d| StatusCheck {
            category,
            name: d.name().map(|n| n.as_str().to_owned()).unwrap_or_default(),
            failed: d.status() == Some(&StatusType::Failed),
            impaired_since: time(d.impaired_since()),
        })
        .collect()
}

/// EC2's status of one instance as ours: its checks (failed or not) and
/// its scheduled events (each a failed `EventStatus` check, as Karpenter
/// counts them); `None` without an instance id.
pub(crate) fn from_ec2(s: &Ec2Status) -> Option<InstanceHealth> {
    let mut all = checks(s.instance_status(), StatusCategory::InstanceStatus);
    all.extend(checks(s.system_status(), StatusCategory::SystemStatus));
    if let Some(ebs) = s.attached_ebs_status() {
        all.extend(ebs.details().iter().map(|d| StatusCheck {
            category: StatusCategory::EbsStatus,
            name: d.name().map(|n| n.as_str().to_owned()).unwrap_or_default(),
            failed: d.status() == Some(&StatusType::Failed),
            impaired_since: time(d.impaired_since()),
        }));
    }
    all.extend(s.events().iter().map(|e| StatusCheck {
        category: StatusCategory::EventStatus,
        name: e.code().map(|c| c.as_str().to_owned()).unwrap_or_default(),
        failed: true,
        impaired_since: None,
    }));
    Some(InstanceHealth {
        instance_id: s.instance_id()?.to_owned(),
        checks: all,
    })
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{InstanceStatusDetails, InstanceStatusEvent, StatusName};

    use super::*;

    /// A failed system check keeps its time; a passing instance check is
    /// not failed; a retirement is a failed event.
    #[test]
    fn ec2s_status_reads_into_checks_and_events() {
        let detail = |status: StatusType| {
            InstanceStatusDetails::builder()
                .name(StatusName::Reachability)
                .status(status)
                .set_impaired_since(Some(aws_sdk_ec2::primitives::DateTime::from_secs(
                    1_800_000_000,
                )))
                .build()
        };
        let s = Ec2Status::builder()
            .instance_id("i-0123456789abcdef0")
            .system_status(
                InstanceStatusSummary::builder()
                    .status(SummaryStatus::Impaired)
                    .details(detail(StatusType::Failed))
                    .build(),
            )
            .instance_status(
                InstanceStatusSummary::builder()
                    .status(SummaryStatus::Ok)
                    .details(detail(StatusType::Passed))
                    .build(),
            )
            .events(
                InstanceStatusEvent::builder()
                    .code(EventCode::InstanceRetirement)
                    .build(),
            )
            .build();
        let h = from_ec2(&s).expect("health");
        assert_eq!(h.instance_id, "i-0123456789abcdef0");
        let by = |c: StatusCategory| h.checks.iter().find(|x| x.category == c).expect("check");
        assert!(by(StatusCategory::SystemStatus).failed);
        assert_eq!(
            by(StatusCategory::SystemStatus).impaired_since,
            Timestamp::from_second(1_800_000_000).ok()
        );
        assert!(!by(StatusCategory::InstanceStatus).failed);
        let event = by(StatusCategory::EventStatus);
        assert!(event.failed);
        assert_eq!(event.name, "instance-retirement");
    }
}
