//! How the EC2 adapter reads a validated [`NodeClass`]: the NodeClasses among
//! stored configuration items, the AMI family and pinned version a launch
//! uses, and the instance profile its launch template names.
//!
//! The model and its validation live in [`crate::config::nodeclass`]; this
//! module only adds what is particular to the launch path.
//!
//! [`LaunchSettings`] is what a launch template takes from the class, as
//! Karpenter's AWS provider maps it: `blockDeviceMappings` (or the family's
//! default volumes), `metadataOptions` (defaults: IMDSv2 required, hop
//! limit 1), `detailedMonitoring`, the network interfaces
//! (`networkInterfaces`, `ipPrefixCount`, `associatePublicIPAddress`,
//! `connectionTracking`) and the placement group.
//!
//! Not read yet: `context`, `capacityReservationSelectorTerms` (launches
//! buy on-demand or spot), `cpuOptions.nestedVirtualization: enabled`
//! (refused at launch: the EC2 API version this adapter speaks has no such
//! field), a placement group's partition chosen from requirements, and AMI
//! terms by name, owner or tags. The Custom family is rejected at launch;
//! Windows2025 needs Kubernetes 1.35 or later (its EKS AMIs start there).

use std::collections::BTreeMap;

use serde::Serialize;

#[cfg(test)]
use crate::config::nodeclass::EC2NodeClassSpec;
use crate::config::nodeclass::{AmiSelector, NodeIdentity, volume_size_gib};
use crate::config::{AmiFamily, ConfigError, ConfigItem, ConfigKind, NodeClass};

/// The families the launch path can launch (Custom: the NodeClass's own
/// AMI and user data, nothing rendered).
pub const LAUNCH_FAMILIES: [AmiFamily; 7] = [
    AmiFamily::AL2023,
    AmiFamily::AL2,
    AmiFamily::Bottlerocket,
    AmiFamily::Windows2019,
    AmiFamily::Windows2022,
    AmiFamily::Windows2025,
    AmiFamily::Custom,
];

/// A NodeClass field the launch path cannot honour or render into user
/// data: the field as the NodeClass spells it (`amiFamily`, `userData`,
/// `blockDeviceMappings[0].ebs.volumeSize`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct LaunchFieldError {
    pub field: String,
    pub reason: String,
}

impl LaunchFieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        LaunchFieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Whether EKS publishes AMIs of `family` for Kubernetes `k8s` (`1.34`):
/// Windows Server 2025's start at 1.35, as Karpenter checks.
pub fn family_runs_kubernetes(family: AmiFamily, k8s: &str) -> Result<(), LaunchFieldError> {
    let minor = k8s
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok());
    match (family, minor) {
        (AmiFamily::Windows2025, Some(m)) if m < 35 => Err(LaunchFieldError::new(
            "amiFamily",
            format!("Windows2025 needs Kubernetes 1.35 or later; the cluster runs {k8s}"),
        )),
        _ => Ok(()),
    }
}

/// The NodeClasses among stored configuration items (`nodeclass#<name>`),
/// validated, keyed by name, for [`crate::aws::Ec2CloudSettings::node_classes`].
/// An item that does not parse or validate is returned as an error naming
/// the item, the field and the reason, and left out.
pub fn node_classes_from_items(
    items: &[ConfigItem],
) -> (BTreeMap<String, NodeClass>, Vec<ConfigError>) {
    let classes: Vec<ConfigItem> = items
        .iter()
        .filter(|i| i.kind == ConfigKind::NodeClass)
        .cloned()
        .collect();
    let resolved = crate::config::resolve_items(&classes);
    (
        resolved
            .set
            .node_classes
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect(),
        resolved.errors,
    )
}

/// The family a launch bootstraps and looks AMIs up for, and the version an
/// `alias` term pins (`None`: latest).
pub fn launch_family(class: &NodeClass) -> Result<(AmiFamily, Option<String>), LaunchFieldError> {
    let family = class.ami_family;
    if !LAUNCH_FAMILIES.contains(&family) {
        let supported: Vec<&str> = LAUNCH_FAMILIES.iter().map(|f| f.as_str()).collect();
        return Err(LaunchFieldError::new(
            "amiFamily",
            format!(
                "{family} is not supported by the launch path yet ({})",
                supported.join(", ")
            ),
        ));
    }
    let pinned = class.ami_selector_terms.iter().find_map(|t| match t {
        AmiSelector::Alias { version, .. } if version != "latest" => Some(version.clone()),
        _ => None,
    });
    Ok((family, pinned))
}

/// The instance profile the launch template names: the NodeClass's own, or
/// one named like its role (the deployment creates it), or the adapter's
/// default for a NodeClass that asks for it (none: the template names none).
pub fn instance_profile_name<'a>(
    class: &'a NodeClass,
    default: Option<&'a str>,
) -> Option<&'a str> {
    match &class.identity {
        NodeIdentity::InstanceProfile(p) => Some(p),
        NodeIdentity::Role(r) => Some(r),
        NodeIdentity::DefaultInstanceProfile => default,
    }
}

/// One EBS volume of a launch template (`blockDeviceMappings[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockDevice {
    pub device_name: Option<String>,
    pub volume_size_gib: Option<i32>,
    pub volume_type: Option<String>,
    pub iops: Option<i32>,
    pub throughput: Option<i32>,
    pub kms_key_id: Option<String>,
    pub snapshot_id: Option<String>,
    pub encrypted: Option<bool>,
    pub delete_on_termination: Option<bool>,
    pub volume_initialization_rate: Option<i32>,
}

impl BlockDevice {
    /// Karpenter's default volume: gp3, encrypted, deleted with the instance.
    fn default_gp3(device: &str, gib: i32) -> BlockDevice {
        BlockDevice {
            device_name: Some(device.to_owned()),
            volume_size_gib: Some(gib),
            volume_type: Some("gp3".to_owned()),
            iops: None,
            throughput: None,
            kms_key_id: None,
            snapshot_id: None,
            encrypted: Some(true),
            delete_on_termination: Some(true),
            volume_initialization_rate: None,
        }
    }
}

/// The instance metadata service settings (`metadataOptions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetadataOptions {
    pub http_endpoint: String,
    pub http_protocol_ipv6: String,
    pub http_put_response_hop_limit: i32,
    pub http_tokens: String,
}

/// `connectionTracking`, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConnectionTracking {
    pub tcp_established_timeout: Option<i32>,
    pub udp_stream_timeout: Option<i32>,
    pub udp_timeout: Option<i32>,
}

/// One network interface of a launch template. The security groups are
/// the class's (added by the adapter); the subnet is the fleet override's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkInterface {
    pub network_card_index: i32,
    pub device_index: i32,
    /// `interface`, `efa`, `efa-only`; none: EC2's default (`interface`).
    pub interface_type: Option<String>,
    pub ipv4_prefix_count: Option<i32>,
    pub ipv6_prefix_count: Option<i32>,
    /// IPv6 clusters: one address and it is the primary one.
    pub ipv6_address_count: Option<i32>,
    pub primary_ipv6: Option<bool>,
    pub associate_public_ip_address: Option<bool>,
    pub connection_tracking: Option<ConnectionTracking>,
}

/// The placement group a launch template names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementGroup {
    pub id: Option<String>,
    pub name: Option<String>,
}

/// What a launch template takes from a NodeClass, beyond the AMI, user
/// data, security groups and instance profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchSettings {
    pub block_devices: Vec<BlockDevice>,
    pub metadata: MetadataOptions,
    pub detailed_monitoring: bool,
    /// Empty: the security groups are set on the template and EC2 makes
    /// the one default interface.
    pub network_interfaces: Vec<NetworkInterface>,
    pub placement_group: Option<PlacementGroup>,
    /// Dedicated hardware (`Placement.Tenancy`); false: EC2's default, shared.
    pub dedicated: bool,
    /// The capacity reservation the template targets
    /// (`CapacityReservationSpecification.CapacityReservationTarget`): a
    /// launch into one reservation has a template of its own, as Karpenter's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<String>,
    /// That reservation is a capacity block (`InstanceMarketOptions.MarketType`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub capacity_block: bool,
}

/// The launch template settings of `class` for `family`, in a cluster
/// whose pods use IPv6 addresses when `ipv6` (Karpenter's mapping: the
/// prefix count becomes IPv6 prefixes and each interface gets one IPv6
/// address). An error names the field a launch cannot honour.
pub fn launch_settings(
    class: &NodeClass,
    family: AmiFamily,
    ipv6: bool,
) -> Result<LaunchSettings, LaunchFieldError> {
    if let Some(cpu) = &class.cpu_options
        && cpu.nested_virtualization.as_deref() == Some("enabled")
    {
        return Err(LaunchFieldError::new(
            "cpuOptions.nestedVirtualization",
            "enabled is not supported by the launch path yet (the EC2 API version it speaks has no such option)",
        ));
    }
    Ok(LaunchSettings {
        block_devices: block_devices(class, family)?,
        metadata: metadata_options(class),
        detailed_monitoring: class.detailed_monitoring,
        network_interfaces: network_interfaces(class, ipv6),
        placement_group: class
            .placement_group_selector
            .as_ref()
            .map(|p| PlacementGroup {
                id: p.id.clone(),
                name: p.name.clone(),
            }),
        dedicated: false,
        capacity_reservation: None,
        capacity_block: false,
    })
}

/// `blockDeviceMappings` as written, or Karpenter's defaults for the
/// family: a 20 GiB root volume (Bottlerocket: a 4 GiB OS volume and a
/// 20 GiB data volume; Windows: a 50 GiB `/dev/sda1`; Custom: none, so EC2
/// uses the volumes the AMI defines).
fn block_devices(
    class: &NodeClass,
    family: AmiFamily,
) -> Result<Vec<BlockDevice>, LaunchFieldError> {
    if class.block_device_mappings.is_empty() {
        return Ok(match family {
            AmiFamily::Custom => Vec::new(),
            AmiFamily::Bottlerocket => vec![
                BlockDevice::default_gp3("/dev/xvda", 4),
                BlockDevice::default_gp3("/dev/xvdb", 20),
            ],
            f if f.is_windows() => vec![BlockDevice::default_gp3("/dev/sda1", 50)],
            _ => vec![BlockDevice::default_gp3("/dev/xvda", 20)],
        });
    }
    let mut out = Vec::new();
    for (i, m) in class.block_device_mappings.iter().enumerate() {
        let ebs = m.get("ebs");
        let str_of = |k: &str| {
            ebs.and_then(|e| e.get(k))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let int_of = |k: &str| {
            ebs.and_then(|e| e.get(k))
                .and_then(serde_json::Value::as_i64)
                .and_then(|v| i32::try_from(v).ok())
        };
        let bool_of = |k: &str| {
            ebs.and_then(|e| e.get(k))
                .and_then(serde_json::Value::as_bool)
        };
        let size = match str_of("volumeSize") {
            None => None,
            Some(s) => Some(
                volume_size_gib(&s)
                    .ok()
                    .and_then(|g| i32::try_from(g).ok())
                    .ok_or_else(|| {
                        LaunchFieldError::new(
                            format!("blockDeviceMappings[{i}].ebs.volumeSize"),
                            format!("{s:?} is not a size"),
                        )
                    })?,
            ),
        };
        out.push(BlockDevice {
            device_name: m
                .get("deviceName")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            volume_size_gib: size,
            volume_type: str_of("volumeType"),
            iops: int_of("iops"),
            throughput: int_of("throughput"),
            kms_key_id: str_of("kmsKeyID"),
            snapshot_id: str_of("snapshotID"),
            encrypted: bool_of("encrypted"),
            delete_on_termination: bool_of("deleteOnTermination"),
            volume_initialization_rate: int_of("volumeInitializationRate"),
        });
    }
    Ok(out)
}

/// `metadataOptions` over Karpenter's defaults (endpoint enabled, IPv6
/// endpoint disabled, hop limit 1, tokens required).
fn metadata_options(class: &NodeClass) -> MetadataOptions {
    let m = class.metadata_options.as_ref();
    let text = |k: &str, default: &str| {
        m.and_then(|m| m.get(k))
            .and_then(serde_json::Value::as_str)
            .unwrap_or(default)
            .to_owned()
    };
    MetadataOptions {
        http_endpoint: text("httpEndpoint", "enabled"),
        http_protocol_ipv6: text("httpProtocolIPv6", "disabled"),
        http_put_response_hop_limit: m
            .and_then(|m| m.get("httpPutResponseHopLimit"))
            .and_then(serde_json::Value::as_i64)
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(1),
        http_tokens: text("httpTokens", "required"),
    }
}

/// The network interfaces a launch template lists. None when the class
/// sets nothing that lives on an interface (the template then names the
/// security groups itself); otherwise `networkInterfaces` as written, or
/// one primary interface, carrying `ipPrefixCount`,
/// `associatePublicIPAddress` and `connectionTracking` — except on
/// `efa-only` interfaces, which take none of them (EC2 refuses them there).
fn network_interfaces(class: &NodeClass, ipv6: bool) -> Vec<NetworkInterface> {
    let conntrack = class.connection_tracking.as_ref().and_then(|c| {
        let t = |v: Option<i64>| v.and_then(|v| i32::try_from(v).ok());
        let c = ConnectionTracking {
            tcp_established_timeout: t(c.tcp_established_timeout),
            udp_stream_timeout: t(c.udp_stream_timeout),
            udp_timeout: t(c.udp_timeout),
        };
        (c.tcp_established_timeout.is_some()
            || c.udp_stream_timeout.is_some()
            || c.udp_timeout.is_some())
        .then_some(c)
    });
    let interface = |card: i32, device: i32, kind: Option<String>| {
        let full = kind.as_deref() != Some("efa-only");
        NetworkInterface {
            network_card_index: card,
            device_index: device,
            ipv4_prefix_count: if full && !ipv6 {
                class.ip_prefix_count
            } else {
                None
            },
            ipv6_prefix_count: if full && ipv6 {
                class.ip_prefix_count
            } else {
                None
            },
            ipv6_address_count: (full && ipv6).then_some(1),
            primary_ipv6: (full && ipv6).then_some(true),
            associate_public_ip_address: if full {
                class.associate_public_ip_address
            } else {
                None
            },
            connection_tracking: if full { conntrack } else { None },
            interface_type: kind,
        }
    };
    if !class.network_interfaces.is_empty() {
        return class
            .network_interfaces
            .iter()
            .map(|n| {
                interface(
                    i32::try_from(n.network_card_index).unwrap_or(0),
                    i32::try_from(n.device_index).unwrap_or(0),
                    Some(n.interface_type.clone()).filter(|t| !t.is_empty()),
                )
            })
            .collect();
    }
    if class.ip_prefix_count.is_none()
        && class.associate_public_ip_address.is_none()
        && conntrack.is_none()
        && !ipv6
    {
        return Vec::new();
    }
    vec![interface(0, 0, None)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn item(kind: ConfigKind, name: &str, spec: serde_json::Value) -> ConfigItem {
        ConfigItem {
            kind,
            name: name.into(),
            spec,
            annotations: Default::default(),
            version: 1,
            updated_at: Timestamp::UNIX_EPOCH,
        }
    }

    fn valid() -> serde_json::Value {
        serde_json::json!({
            "amiSelectorTerms": [{"alias": "al2@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"tags": {"kubernetes.io/cluster/demo": "*"}}],
            "role": "KarpenterNodeRole-demo"
        })
    }

    #[test]
    fn node_classes_from_stored_items() {
        let mut no_subnets = valid();
        no_subnets["subnetSelectorTerms"] = serde_json::json!([]);
        let items = [
            item(ConfigKind::NodeClass, "default", valid()),
            item(
                ConfigKind::NodeClass,
                "broken",
                serde_json::json!({"subnetSelectorTerms": "not a list"}),
            ),
            item(ConfigKind::NodeClass, "empty", no_subnets),
            item(ConfigKind::NodePool, "default", serde_json::json!({})),
        ];
        let (classes, errors) = node_classes_from_items(&items);
        assert_eq!(classes.keys().collect::<Vec<_>>(), ["default"]);
        assert_eq!(
            launch_family(&classes["default"]),
            Ok((AmiFamily::AL2, None))
        );
        assert_eq!(errors.len(), 2);
        assert_eq!(
            (errors[0].item.as_str(), errors[0].field.as_str()),
            ("nodeclass/broken", "spec.subnetSelectorTerms")
        );
        assert_eq!(
            (errors[1].item.as_str(), errors[1].field.as_str()),
            ("nodeclass/empty", "spec.subnetSelectorTerms")
        );
        assert!(
            errors[1].reason.contains("at least one term"),
            "{}",
            errors[1].reason
        );
    }

    #[test]
    fn families_versions_and_profiles() {
        let class = |patch: serde_json::Value| {
            let mut v = valid();
            for (k, val) in patch.as_object().into_iter().flatten() {
                v[k] = val.clone();
            }
            let spec: EC2NodeClassSpec = serde_json::from_value(v).expect("parses");
            NodeClass::from_spec("c", &spec).expect("valid")
        };
        let c = class(serde_json::json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}));
        assert_eq!(launch_family(&c), Ok((AmiFamily::Bottlerocket, None)));
        assert_eq!(
            instance_profile_name(&c, Some("fallback")),
            Some("KarpenterNodeRole-demo")
        );
        let c = class(serde_json::json!({"amiSelectorTerms": [{"alias": "al2@v20240807"}]}));
        assert_eq!(
            launch_family(&c),
            Ok((AmiFamily::AL2, Some("v20240807".into())))
        );
        let c = class(
            serde_json::json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-1"}]}),
        );
        assert_eq!(launch_family(&c), Ok((AmiFamily::AL2023, None)));
        let c = class(serde_json::json!({"amiSelectorTerms": [{"alias": "windows2022@latest"}]}));
        assert_eq!(launch_family(&c), Ok((AmiFamily::Windows2022, None)));
        assert_eq!(
            launch_settings(&c, AmiFamily::Windows2022, false)
                .expect("settings")
                .block_devices,
            vec![BlockDevice::default_gp3("/dev/sda1", 50)],
            "Windows boots from a 50 GiB /dev/sda1"
        );
        assert_eq!(
            family_runs_kubernetes(AmiFamily::Windows2022, "1.30"),
            Ok(())
        );
        assert_eq!(
            family_runs_kubernetes(AmiFamily::Windows2025, "1.35"),
            Ok(())
        );
        assert!(
            family_runs_kubernetes(AmiFamily::Windows2025, "1.34")
                .is_err_and(|e| e.field == "amiFamily"
                    && e.reason.contains("1.35")
                    && e.reason.contains("1.34"))
        );
        let c = class(
            serde_json::json!({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-1"}]}),
        );
        assert_eq!(launch_family(&c), Ok((AmiFamily::Custom, None)));
        assert_eq!(
            launch_settings(&c, AmiFamily::Custom, false)
                .expect("settings")
                .block_devices,
            vec![],
            "Custom: the AMI's own volumes"
        );
        let c = class(serde_json::json!({"role": null, "instanceProfile": "profile-a"}));
        assert_eq!(
            instance_profile_name(&c, Some("fallback")),
            Some("profile-a")
        );
        let c = class(serde_json::json!({"role": null, "defaultInstanceProfile": true}));
        assert_eq!(
            instance_profile_name(&c, Some("fallback")),
            Some("fallback")
        );
        assert_eq!(instance_profile_name(&c, None), None);
    }

    fn spec_class(patch: serde_json::Value) -> NodeClass {
        let mut v = valid();
        for (k, val) in patch.as_object().into_iter().flatten() {
            v[k] = val.clone();
        }
        let spec: EC2NodeClassSpec = serde_json::from_value(v).expect("parses");
        NodeClass::from_spec("c", &spec).expect("valid")
    }

    /// Karpenter's defaults when the class sets none of the launch fields:
    /// one 20 GiB gp3 root (Bottlerocket: 4 GiB + 20 GiB), IMDSv2 with hop
    /// limit 1, no detailed monitoring, no interfaces of our own.
    #[test]
    fn launch_settings_default_as_karpenter() {
        let c = spec_class(serde_json::json!({}));
        let s = launch_settings(&c, AmiFamily::AL2, false).expect("settings");
        assert_eq!(s.block_devices, [BlockDevice::default_gp3("/dev/xvda", 20)]);
        assert_eq!(
            s.metadata,
            MetadataOptions {
                http_endpoint: "enabled".into(),
                http_protocol_ipv6: "disabled".into(),
                http_put_response_hop_limit: 1,
                http_tokens: "required".into(),
            }
        );
        assert!(!s.detailed_monitoring);
        assert!(s.network_interfaces.is_empty());
        assert_eq!(s.placement_group, None);
        let s = launch_settings(&c, AmiFamily::Bottlerocket, false).expect("settings");
        let sizes: Vec<_> = s
            .block_devices
            .iter()
            .map(|b| (b.device_name.as_deref(), b.volume_size_gib))
            .collect();
        assert_eq!(
            sizes,
            [(Some("/dev/xvda"), Some(4)), (Some("/dev/xvdb"), Some(20))]
        );
    }

    /// Every launch field of v1.15's EC2NodeClass reaches the settings.
    #[test]
    fn launch_settings_carry_every_field() {
        let c = spec_class(serde_json::json!({
            "blockDeviceMappings": [{
                "deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"volumeSize": "100G", "volumeType": "io2", "iops": 4000,
                        "throughput": 250, "kmsKeyID": "arn:aws:kms:us-east-1:111122223333:key/k",
                        "snapshotID": "snap-0123", "encrypted": true,
                        "deleteOnTermination": false, "volumeInitializationRate": 200}
            }],
            "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "enabled",
                                "httpPutResponseHopLimit": 2, "httpTokens": "optional"},
            "detailedMonitoring": true,
            "associatePublicIPAddress": true,
            "ipPrefixCount": 2,
            "connectionTracking": {"tcpEstablishedTimeout": 3600, "udpTimeout": 40},
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}
            ],
            "placementGroupSelector": {"name": "training"},
            "cpuOptions": {"nestedVirtualization": "disabled"}
        }));
        let s = launch_settings(&c, AmiFamily::AL2023, false).expect("settings");
        assert_eq!(
            s.block_devices,
            [BlockDevice {
                device_name: Some("/dev/xvda".into()),
                // 100 G = 93.13 GiB, rounded up as Karpenter does.
                volume_size_gib: Some(94),
                volume_type: Some("io2".into()),
                iops: Some(4000),
                throughput: Some(250),
                kms_key_id: Some("arn:aws:kms:us-east-1:111122223333:key/k".into()),
                snapshot_id: Some("snap-0123".into()),
                encrypted: Some(true),
                delete_on_termination: Some(false),
                volume_initialization_rate: Some(200),
            }]
        );
        assert_eq!(s.metadata.http_tokens, "optional");
        assert_eq!(s.metadata.http_protocol_ipv6, "enabled");
        assert_eq!(s.metadata.http_put_response_hop_limit, 2);
        assert!(s.detailed_monitoring);
        let conntrack = Some(ConnectionTracking {
            tcp_established_timeout: Some(3600),
            udp_stream_timeout: None,
            udp_timeout: Some(40),
        });
        assert_eq!(
            s.network_interfaces,
            [
                NetworkInterface {
                    network_card_index: 0,
                    device_index: 0,
                    interface_type: Some("interface".into()),
                    ipv4_prefix_count: Some(2),
                    ipv6_prefix_count: None,
                    ipv6_address_count: None,
                    primary_ipv6: None,
                    associate_public_ip_address: Some(true),
                    connection_tracking: conntrack,
                },
                // EFA-only interfaces take no prefixes, public address or tracking.
                NetworkInterface {
                    network_card_index: 1,
                    device_index: 1,
                    interface_type: Some("efa-only".into()),
                    ipv4_prefix_count: None,
                    ipv6_prefix_count: None,
                    ipv6_address_count: None,
                    primary_ipv6: None,
                    associate_public_ip_address: None,
                    connection_tracking: None,
                },
            ]
        );
        assert_eq!(
            s.placement_group,
            Some(PlacementGroup {
                id: None,
                name: Some("training".into())
            })
        );
    }

    /// `ipPrefixCount` alone makes one primary interface; in an IPv6
    /// cluster the prefixes are IPv6 ones and the interface gets one IPv6
    /// address, its primary.
    #[test]
    fn prefixes_make_a_primary_interface_by_ip_family() {
        let c = spec_class(serde_json::json!({"ipPrefixCount": 1}));
        let v4 = launch_settings(&c, AmiFamily::AL2023, false).expect("settings");
        assert_eq!(v4.network_interfaces.len(), 1);
        let ni = &v4.network_interfaces[0];
        assert_eq!((ni.device_index, ni.network_card_index), (0, 0));
        assert_eq!(
            (ni.ipv4_prefix_count, ni.ipv6_prefix_count),
            (Some(1), None)
        );
        let v6 = launch_settings(&c, AmiFamily::AL2023, true).expect("settings");
        let ni = &v6.network_interfaces[0];
        assert_eq!(
            (ni.ipv4_prefix_count, ni.ipv6_prefix_count),
            (None, Some(1))
        );
        assert_eq!(
            (ni.ipv6_address_count, ni.primary_ipv6),
            (Some(1), Some(true))
        );
    }

    #[test]
    fn nested_virtualization_enabled_is_refused_at_launch() {
        let c = spec_class(serde_json::json!({"cpuOptions": {"nestedVirtualization": "enabled"}}));
        assert!(
            launch_settings(&c, AmiFamily::AL2023, false)
                .is_err_and(|e| e.field == "cpuOptions.nestedVirtualization")
        );
    }

    /// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go:
    /// the Custom AMI family's entries and case. The class launches (its
    /// AMI, its user data verbatim: suite test
    /// `aws_cloud::the_custom_family_launches_its_ami_with_its_user_data_verbatim`),
    /// and its types are sized as Karpenter sizes a Custom class: ENI-limited
    /// pods, the default kube-reserved memory from that count (as AL2023,
    /// unlike Bottlerocket), a 20 GiB volume when no size is written.
    /// Translated onto the simulator's us-east-1 catalog (t3.large: 3 ENIs ×
    /// 12 IPv4 addresses, 35 pods).
    mod custom_family {
        use super::*;
        use crate::config::NodePool;
        use crate::resources::MIB;

        const IMAGE: &str = "ami-0123456789abcdef0";

        fn pool(settings: &str, class: &str) -> (NodePool, NodeClass) {
            let text = format!(
                "apiVersion: nodewright.io/v1alpha1\nkind: Settings\nmetadata: {{name: default}}\nspec: {{{settings}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: []\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiFamily: Custom\n  amiSelectorTerms:\n  - id: {IMAGE}\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n{class}"
            );
            let docs = crate::config::parse_documents(&text).expect("documents");
            let set = crate::config::ConfigSet::from_documents(&docs).expect("valid");
            let class = set.node_class("default").expect("class").clone();
            assert_eq!(
                launch_family(&class),
                Ok((AmiFamily::Custom, None)),
                "a Custom class launches"
            );
            (set.node_pool("default").expect("pool").clone(), class)
        }

        fn t3_large(pool: &NodePool) -> crate::cloud::InstanceType {
            let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
            crate::provisioning::plan::instance_types(pool, &catalog, &[])
                .into_iter()
                .find(|t| t.name == "t3.large")
                .expect("t3.large listed")
        }

        /// "should set max-pods to user-defined value if specified" [custom]:
        /// 10 pods; kube-reserved memory still 11 × 35 + 255 = 640Mi (with
        /// the 100Mi eviction threshold beside it).
        #[test]
        fn should_set_max_pods_to_user_defined_value_if_specified_custom() {
            let (pool, _) = pool("", "  kubelet: {maxPods: 10}\n");
            let t = t3_large(&pool);
            assert_eq!(t.capacity.pods, 10);
            assert_eq!(t.overhead.memory_bytes, (640 + 100) * MIB);
        }

        /// "should reserve ENIs when aws.reservedENIs is set and use it in
        /// max-pods calculation" [custom]: one ENI reserved, (3 − 1) × 11 + 2
        /// = 24 pods; kube-reserved memory from the unreserved 35 (640Mi).
        #[test]
        fn should_reserve_enis_when_reserved_enis_is_set_and_use_it_in_max_pods_calculation_custom()
        {
            let (pool, _) = pool("reservedENIs: 1", "");
            let t = t3_large(&pool);
            assert_eq!(t.capacity.pods, 24);
            assert_eq!(t.overhead.memory_bytes, (640 + 100) * MIB);
        }

        /// "should default to EBS defaults when volumeSize is not defined in
        /// blockDeviceMappings for custom AMIs": a mapping with a snapshot and
        /// no size gives 20Gi of ephemeral storage, and reaches the launch
        /// template as written (one /dev/xvda, its snapshot and rate).
        #[test]
        fn should_default_to_ebs_defaults_when_volume_size_is_not_defined_in_block_device_mappings_for_custom_amis()
         {
            let (pool, class) = pool(
                "",
                "  blockDeviceMappings:\n  - deviceName: /dev/xvda\n    ebs: {snapshotID: snap-0123456789abcdef0, volumeInitializationRate: 100}\n",
            );
            assert_eq!(t3_large(&pool).capacity.ephemeral_bytes, 20 << 30);
            let devices = launch_settings(&class, AmiFamily::Custom, false)
                .expect("settings")
                .block_devices;
            assert_eq!(devices.len(), 1, "{devices:?}");
            assert_eq!(devices[0].device_name.as_deref(), Some("/dev/xvda"));
            assert_eq!(
                devices[0].snapshot_id.as_deref(),
                Some("snap-0123456789abcdef0")
            );
            assert_eq!(devices[0].volume_initialization_rate, Some(100));
        }
    }
}
