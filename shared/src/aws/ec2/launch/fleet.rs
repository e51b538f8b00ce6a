//! One CreateFleet: the request (one `LaunchTemplateConfigs` entry per
//! group, an override per option and zone's subnet; spot with
//! price-capacity-optimized, else on-demand lowest-price), its client
//! token, and what the reply means ([`fleet_outcome`]: the instance and the
//! offerings that ran out on the way, or why nothing launched).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceLifecycle, OnDemandOptionsRequest,
    ResourceType, SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use sha2::Digest as _;

use super::Group;
use super::network::Network;
use super::templates::tag;
use crate::aws::ApiError;
use crate::aws::ec2::Ec2Cloud;
use crate::aws::prices::PriceSource;
use crate::model::{Instance, InstanceState, LaunchRequest, Launched, OfferingKey, Timestamp};
use crate::ports::CloudError;
use crate::scheduling::labels;

/// Fleet error codes that mean "no capacity for this offering now".
pub const INSUFFICIENT_CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "ReservationCapacityExceeded",
];

/// CreateFleet's ClientToken is at most 64 ASCII characters.
pub fn fleet_client_token(token: &str) -> String {
    if token.len() <= 64 && token.is_ascii() {
        return token.to_owned();
    }
    let digest = sha2::Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().take(24).map(|b| format!("{b:02x}")).collect();
    format!("nodewright-{hex}")
}

impl<P: PriceSource> Ec2Cloud<P> {
    pub(super) async fn create_fleet(
        &self,
        req: &LaunchRequest,
        capacity_type: &str,
        capacity_block: bool,
        groups: &[Group<'_>],
        network: &Network,
        resource_tags: BTreeMap<String, String>,
    ) -> Result<Launched, CloudError> {
        let spot = capacity_type == labels::CAPACITY_TYPE_SPOT;
        let configs: Vec<FleetLaunchTemplateConfigRequest> = groups
            .iter()
            .filter_map(|g| {
                let name = g.template.as_deref()?;
                let overrides = g
                    .options
                    .iter()
                    .filter_map(|o| {
                        let subnet = network.subnets.get(&o.zone)?;
                        Some(
                            FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(aws_sdk_ec2::types::InstanceType::from(
                                    o.instance_type.as_str(),
                                ))
                                .subnet_id(subnet)
                                .build(),
                        )
                    })
                    .collect();
                Some(
                    FleetLaunchTemplateConfigRequest::builder()
                        .launch_template_specification(
                            FleetLaunchTemplateSpecificationRequest::builder()
                                .launch_template_name(name)
                                .version("$Latest")
                                .build(),
                        )
                        .set_overrides(Some(overrides))
                        .build(),
                )
            })
            .collect();
        let tag_specs = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .map(|rt| {
            TagSpecification::builder()
                .resource_type(rt)
                .set_tags(Some(resource_tags.iter().map(|(k, v)| tag(k, v)).collect()))
                .build()
        });
        let mut call = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(fleet_client_token(&req.client_token))
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(if spot {
                        DefaultTargetCapacityType::Spot
                    } else if capacity_block {
                        DefaultTargetCapacityType::CapacityBlock
                    } else {
                        DefaultTargetCapacityType::OnDemand
                    })
                    .build(),
            )
            .set_launch_template_configs(Some(configs))
            .set_tag_specifications(Some(tag_specs.to_vec()));
        call = if spot {
            call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
        } else {
            call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
        };
        let all_keys = || -> Vec<OfferingKey> {
            groups
                .iter()
                .flat_map(|g| g.options.iter())
                .map(|o| OfferingKey {
                    capacity_type: capacity_type.to_owned(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                })
                .collect()
        };
        self.count();
        let out = match call.send().await {
            Ok(out) => out,
            Err(e) => {
                let e = ApiError::from_sdk("CreateFleet", e);
                if e.code
                    .as_deref()
                    .is_some_and(|c| INSUFFICIENT_CAPACITY_CODES.contains(&c))
                {
                    return Err(CloudError::InsufficientCapacity {
                        offerings: all_keys(),
                        message: e.to_string(),
                    });
                }
                return Err(e.into());
            }
        };
        let mut launched = fleet_outcome(&out, req, capacity_type, &all_keys(), &network.subnets)?;
        // What it booted with, for drift: the group's AMI, the zone's subnet, the class's groups.
        let i = &mut launched.instance;
        i.image_id = groups
            .iter()
            .find(|g| g.options.iter().any(|o| o.instance_type == i.instance_type))
            .and_then(|g| g.image.clone());
        i.subnet_id = network.subnets.get(&i.zone).cloned();
        i.security_group_ids.clone_from(&network.security_groups);
        Ok(launched)
    }
}

/// What a CreateFleet reply means: the launched instance with the offerings
/// that ran out on the way, or why nothing launched. `all_keys` are the
/// offerings the fleet was asked for; `subnets` maps zone → subnet id.
pub(crate) fn fleet_outcome(
    out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    req: &LaunchRequest,
    capacity_type: &str,
    all_keys: &[OfferingKey],
    subnets: &BTreeMap<String, String>,
) -> Result<Launched, CloudError> {
    let zone_of_subnet: HashMap<&str, &str> = subnets
        .iter()
        .map(|(z, s)| (s.as_str(), z.as_str()))
        .collect();
    let zone_of =
        |ov: Option<&aws_sdk_ec2::types::FleetLaunchTemplateOverrides>| -> Option<String> {
            let ov = ov?;
            ov.availability_zone().map(str::to_owned).or_else(|| {
                ov.subnet_id()
                    .and_then(|s| zone_of_subnet.get(s))
                    .map(|z| (*z).to_owned())
            })
        };
    let lifecycle = |l: Option<&InstanceLifecycle>| match l {
        Some(InstanceLifecycle::Spot) => labels::CAPACITY_TYPE_SPOT,
        Some(InstanceLifecycle::OnDemand) => labels::CAPACITY_TYPE_ON_DEMAND,
        _ => capacity_type,
    };

    let mut unavailable = Vec::new();
    let mut ice_messages = Vec::new();
    let mut other_errors = Vec::new();
    for err in out.errors() {
        let code = err.error_code().unwrap_or("Unknown");
        let message = err.error_message().unwrap_or_default();
        let ov = err
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        if INSUFFICIENT_CAPACITY_CODES.contains(&code) {
            ice_messages.push(format!("{code}: {message}"));
            if let (Some(ty), Some(zone)) = (ov.and_then(|o| o.instance_type()), zone_of(ov)) {
                let key = OfferingKey {
                    capacity_type: lifecycle(err.lifecycle()).to_owned(),
                    instance_type: ty.as_str().to_owned(),
                    zone,
                };
                if !unavailable.contains(&key) {
                    unavailable.push(key);
                }
            }
            // A subnet out of addresses takes its zone out for every type
            // and capacity type (Karpenter marks the subnet; the launch uses
            // one subnet per zone).
            if code == "InsufficientFreeAddressesInSubnet"
                && let Some(zone) = zone_of(ov)
            {
                let key = OfferingKey::zone(&zone);
                if !unavailable.contains(&key) {
                    unavailable.push(key);
                }
            }
        } else {
            other_errors.push((code.to_owned(), message.to_owned()));
        }
    }

    let launched = out.instances().iter().find_map(|i| {
        let id = i.instance_ids().first()?;
        let ov = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let ty = i
            .instance_type()
            .or_else(|| ov.and_then(|o| o.instance_type()))
            .map(|t| t.as_str().to_owned())?;
        Some((id.clone(), ty, zone_of(ov), lifecycle(i.lifecycle())))
    });
    if let Some((id, instance_type, zone, ct)) = launched {
        let zone = zone
            .or_else(|| {
                all_keys
                    .iter()
                    .find(|k| k.instance_type == instance_type)
                    .map(|k| k.zone.clone())
            })
            .unwrap_or_default();
        let price = req
            .options
            .iter()
            .find(|o| o.capacity_type == ct && o.instance_type == instance_type && o.zone == zone)
            .map_or(0.0, |o| o.price);
        let instance = Instance {
            provider_id: format!("aws:///{zone}/{id}"),
            id,
            instance_type,
            zone,
            capacity_type: ct.to_owned(),
            state: InstanceState::Pending,
            launched_at: Timestamp::now(),
            claim_id: Some(req.claim_id.clone()),
            pool: Some(req.pool.clone()),
            node_class: req.node_class.clone(),
            price,
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            capacity_reservation_id: None,
            capacity_reservation_type: None,
            capacity_reservation_interruptible: false,
        };
        return Ok(Launched {
            instance,
            unavailable,
        });
    }
    if !ice_messages.is_empty() || other_errors.is_empty() {
        let message = if ice_messages.is_empty() {
            "UnfulfillableCapacity: CreateFleet launched no instance and reported no error"
                .to_owned()
        } else {
            ice_messages.join("; ")
        };
        let offerings = if unavailable.is_empty() {
            all_keys.to_vec()
        } else {
            unavailable
        };
        return Err(CloudError::InsufficientCapacity { offerings, message });
    }
    let text = other_errors
        .iter()
        .map(|(c, m)| format!("{c}: {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    // A transient code anywhere makes the whole launch worth retrying;
    // otherwise the first error says what is wrong.
    let kind = other_errors
        .iter()
        .map(|(c, _)| crate::aws::classify(Some(c.as_str()), None))
        .find(|k| k.is_transient())
        .or_else(|| {
            other_errors
                .first()
                .map(|(c, _)| crate::aws::classify(Some(c.as_str()), None))
        })
        .unwrap_or(crate::ports::FailureKind::InvalidRequest);
    // The code named is the first error's; the message lists them all.
    Err(CloudError::Service(
        crate::ports::ServiceError::of_call(kind, "CreateFleet", None, &text)
            .with_code(other_errors.first().map(|(c, _)| c.clone())),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PricedOffering;
    use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
    use aws_sdk_ec2::types::{
        CreateFleetError, CreateFleetInstance, FleetLaunchTemplateOverrides,
        InstanceType as Ec2Type, LaunchTemplateAndOverridesResponse,
    };

    fn overrides(ty: &str, subnet: &str) -> LaunchTemplateAndOverridesResponse {
        LaunchTemplateAndOverridesResponse::builder()
            .overrides(
                FleetLaunchTemplateOverrides::builder()
                    .instance_type(Ec2Type::from(ty))
                    .subnet_id(subnet)
                    .build(),
            )
            .build()
    }

    fn fleet_error(code: &str, ty: &str, subnet: &str) -> CreateFleetError {
        CreateFleetError::builder()
            .error_code(code)
            .error_message(format!("{code} for {ty}"))
            .lifecycle(InstanceLifecycle::Spot)
            .launch_template_and_overrides(overrides(ty, subnet))
            .build()
    }

    fn key(ty: &str, zone: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: "spot".into(),
            instance_type: ty.into(),
            zone: zone.into(),
        }
    }

    fn fixture() -> (LaunchRequest, Vec<OfferingKey>, BTreeMap<String, String>) {
        let req = LaunchRequest {
            claim_id: "default-abcde".into(),
            client_token: "nodewright-default-abcde".into(),
            pool: "default".into(),
            node_class: None,
            node_class_spec: None,
            options: vec![
                PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: "m5.large".into(),
                    zone: "za".into(),
                    capacity_type: "spot".into(),
                    price: 0.03,
                },
                PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: "m5.large".into(),
                    zone: "zb".into(),
                    capacity_type: "spot".into(),
                    price: 0.031,
                },
                PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: "c5.large".into(),
                    zone: "za".into(),
                    capacity_type: "spot".into(),
                    price: 0.032,
                },
            ],
            labels: BTreeMap::new(),
            taints: vec![],
            kubelet: Default::default(),
            reservations: Vec::new(),
        };
        let keys = vec![
            key("m5.large", "za"),
            key("m5.large", "zb"),
            key("c5.large", "za"),
        ];
        let subnets = [
            ("za".to_owned(), "subnet-a".to_owned()),
            ("zb".to_owned(), "subnet-b".to_owned()),
        ]
        .into();
        (req, keys, subnets)
    }

    #[test]
    fn a_launch_reports_the_offerings_that_ran_out_on_the_way() {
        let (req, keys, subnets) = fixture();
        let out = CreateFleetOutput::builder()
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .instances(
                CreateFleetInstance::builder()
                    .instance_ids("i-0abc")
                    .instance_type(Ec2Type::from("m5.large"))
                    .lifecycle(InstanceLifecycle::Spot)
                    .launch_template_and_overrides(overrides("m5.large", "subnet-b"))
                    .build(),
            )
            .build();
        let l = fleet_outcome(&out, &req, "spot", &keys, &subnets).expect("launched");
        assert_eq!(l.instance.id, "i-0abc");
        assert_eq!(
            (
                l.instance.zone.as_str(),
                l.instance.capacity_type.as_str(),
                l.instance.price
            ),
            ("zb", "spot", 0.031)
        );
        assert_eq!(l.instance.provider_id, "aws:///zb/i-0abc");
        assert_eq!(l.unavailable, vec![key("m5.large", "za")], "deduplicated");
    }

    #[test]
    fn nothing_launched_is_insufficient_capacity_or_an_error() {
        let (req, keys, subnets) = fixture();
        // Every capacity error names its offering.
        let out = CreateFleetOutput::builder()
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .errors(fleet_error(
                "MaxSpotInstanceCountExceeded",
                "c5.large",
                "subnet-a",
            ))
            .build();
        match fleet_outcome(&out, &req, "spot", &keys, &subnets) {
            Err(CloudError::InsufficientCapacity { offerings, message }) => {
                assert_eq!(
                    offerings,
                    vec![key("m5.large", "za"), key("c5.large", "za")]
                );
                assert!(message.contains("MaxSpotInstanceCountExceeded"));
            }
            other => panic!("{other:?}"),
        }
        // An empty reply is UnfulfillableCapacity for everything asked.
        match fleet_outcome(
            &CreateFleetOutput::builder().build(),
            &req,
            "spot",
            &keys,
            &subnets,
        ) {
            Err(CloudError::InsufficientCapacity { offerings, message }) => {
                assert_eq!(offerings, keys);
                assert!(message.starts_with("UnfulfillableCapacity"));
            }
            other => panic!("{other:?}"),
        }
        // Other errors: retryable or not by their code.
        let out = CreateFleetOutput::builder()
            .errors(fleet_error(
                "InvalidLaunchTemplateName.NotFoundException",
                "m5.large",
                "subnet-a",
            ))
            .build();
        match fleet_outcome(&out, &req, "spot", &keys, &subnets) {
            Err(e @ CloudError::Service(_)) => {
                assert_eq!(e.failure_kind(), Some(crate::ports::FailureKind::NotFound));
                assert!(!e.is_retryable());
                assert!(e.to_string().contains("InvalidLaunchTemplateName"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let out = CreateFleetOutput::builder()
            .errors(fleet_error("RequestLimitExceeded", "m5.large", "subnet-a"))
            .build();
        let e = fleet_outcome(&out, &req, "spot", &keys, &subnets).expect_err("throttled");
        assert_eq!(e.failure_kind(), Some(crate::ports::FailureKind::Throttled));
        assert!(e.is_retryable());
        let out = CreateFleetOutput::builder()
            .errors(fleet_error("UnauthorizedOperation", "m5.large", "subnet-a"))
            .build();
        let e = fleet_outcome(&out, &req, "spot", &keys, &subnets).expect_err("denied");
        assert_eq!(
            e.failure_kind(),
            Some(crate::ports::FailureKind::AccessDenied)
        );
    }

    #[test]
    fn client_tokens_fit_fleet_limits() {
        assert_eq!(
            fleet_client_token("nodewright-default-abcde"),
            "nodewright-default-abcde"
        );
        let long = format!("nodewright-{}-abcde", "p".repeat(63));
        let t = fleet_client_token(&long);
        assert!(t.len() <= 64);
        assert_eq!(t, fleet_client_token(&long), "stable");
        assert_ne!(t, fleet_client_token(&format!("{long}x")));
    }
}
