//! How the EC2 adapter reads a validated [`NodeClass`]: the NodeClasses among
//! stored configuration items, the AMI family and pinned version a launch
//! uses, and the instance profile its launch template names.
//!
//! The model and its validation live in [`crate::config::nodeclass`]; this
//! module only adds what is particular to the launch path.
//!
//! Not read yet (the launch uses Karpenter's defaults): `blockDeviceMappings`
//! (root volume 20 GiB gp3, encrypted; Bottlerocket 4 GiB + 20 GiB),
//! `metadataOptions` (IMDSv2 required, hop limit 1), `associatePublicIPAddress`,
//! `detailedMonitoring`, `instanceStorePolicy`, `context`, kubelet settings
//! other than `clusterDNS`, and AMI terms by name, owner or tags. The
//! Windows and Custom families are rejected at launch.

use std::collections::BTreeMap;

#[cfg(test)]
use crate::config::nodeclass::EC2NodeClassSpec;
use crate::config::nodeclass::{AmiSelector, NodeIdentity};
use crate::config::{AmiFamily, ConfigError, NodeClass};
use crate::ports::{ConfigItem, ConfigKind};

/// The families the launch path can bootstrap.
pub const LAUNCH_FAMILIES: [AmiFamily; 3] =
    [AmiFamily::AL2023, AmiFamily::AL2, AmiFamily::Bottlerocket];

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
pub fn launch_family(class: &NodeClass) -> Result<(AmiFamily, Option<String>), String> {
    let family = class.ami_family;
    if !LAUNCH_FAMILIES.contains(&family) {
        let supported: Vec<&str> = LAUNCH_FAMILIES.iter().map(|f| f.as_str()).collect();
        return Err(format!(
            "amiFamily {family} is not supported by the launch path yet ({})",
            supported.join(", ")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::Timestamp;

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
        assert!(launch_family(&c).is_err_and(|e| e.contains("Windows2022")));
        let c = class(
            serde_json::json!({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-1"}]}),
        );
        assert!(launch_family(&c).is_err_and(|e| e.contains("Custom")));
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
}
