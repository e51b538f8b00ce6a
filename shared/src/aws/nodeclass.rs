//! The NodeClass settings the EC2 adapter reads — the seam between the
//! configuration model and the launch path.
//!
//! The fields keep the names of Karpenter's v1 `EC2NodeClass` spec
//! (`subnetSelectorTerms`, `amiFamily`, …) and unknown fields are ignored, so
//! the JSON of a stored `nodeclass#<name>` item deserialises straight into
//! this struct. When the validated `config::nodeclass` model lands, the
//! adapter can take that instead: only [`NodeClassSettings`] and
//! [`crate::aws::ec2::Ec2CloudSettings::node_classes`] need to change.
//!
//! Not read yet (the launch uses Karpenter's defaults): `blockDeviceMappings`
//! (root volume 20 GiB gp3, encrypted; Bottlerocket 4 GiB + 20 GiB),
//! `metadataOptions` (IMDSv2 required, hop limit 1), `associatePublicIPAddress`,
//! `detailedMonitoring`, `instanceStorePolicy`, and AMI terms by name, owner or tags.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A selector value that matches any value of the tag key.
pub const ANY_TAG_VALUE: &str = "*";

/// What a launch needs from an `EC2NodeClass`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSettings {
    /// `AL2023` (default), `AL2` or `Bottlerocket`; an `alias` AMI term wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ami_selector_terms: Vec<AmiTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_selector_terms: Vec<SelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_selector_terms: Vec<SelectorTerm>,
    /// The node role; the adapter expects an instance profile of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Extra tags for instances, volumes and launch templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// User data merged with ours (MIME parts for AL2/AL2023, TOML for Bottlerocket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<NodeClassKubelet>,
}

/// The kubelet settings of a NodeClass that reach the user data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassKubelet {
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
}

/// One subnet or security-group selector term: every field set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Security groups only: the group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tag key → value; `*` matches any value of the key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

impl std::fmt::Display for SelectorTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(id) = &self.id {
            parts.push(format!("id={id}"));
        }
        if let Some(name) = &self.name {
            parts.push(format!("name={name}"));
        }
        for (k, v) in &self.tags {
            parts.push(format!("tags[{k}]={v}"));
        }
        write!(f, "{{{}}}", parts.join(", "))
    }
}

/// One AMI selector term. Supported: `alias` (`al2023@latest`, `al2@latest`,
/// `bottlerocket@latest`, or a pinned version), `id`, `ssmParameter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AmiTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// The operating system family of the nodes; decides the AMI parameters
/// and the user-data format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AmiFamily {
    Al2023,
    Al2,
    Bottlerocket,
}

impl AmiFamily {
    /// `AL2023`, `al2023`, … as written in `amiFamily` or an alias.
    pub fn parse(s: &str) -> Option<AmiFamily> {
        match s.to_ascii_lowercase().as_str() {
            "al2023" => Some(AmiFamily::Al2023),
            "al2" => Some(AmiFamily::Al2),
            "bottlerocket" => Some(AmiFamily::Bottlerocket),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AmiFamily::Al2023 => "AL2023",
            AmiFamily::Al2 => "AL2",
            AmiFamily::Bottlerocket => "Bottlerocket",
        }
    }
}

impl NodeClassSettings {
    /// The family and the pinned version of an alias (`None` = latest).
    pub fn family(&self) -> Result<(AmiFamily, Option<String>), String> {
        if let Some(alias) = self.ami_selector_terms.iter().find_map(|t| t.alias.as_deref()) {
            let (fam, version) = alias.split_once('@').unwrap_or((alias, "latest"));
            let family = AmiFamily::parse(fam)
                .ok_or_else(|| format!("amiSelectorTerms alias {alias:?}: unknown family {fam:?} (al2023, al2, bottlerocket)"))?;
            let version = (version != "latest").then(|| version.to_owned());
            return Ok((family, version));
        }
        match self.ami_family.as_deref() {
            None => Ok((AmiFamily::Al2023, None)),
            Some(f) => AmiFamily::parse(f)
                .map(|fam| (fam, None))
                .ok_or_else(|| format!("amiFamily {f:?} is not supported (AL2023, AL2, Bottlerocket)")),
        }
    }

    /// The instance profile the launch template names.
    pub fn instance_profile_name(&self) -> Option<&str> {
        self.instance_profile.as_deref().or(self.role.as_deref())
    }
}

/// The NodeClasses among stored configuration items (`nodeclass#<name>`),
/// for [`crate::aws::Ec2CloudSettings::node_classes`]; items that do not
/// parse are returned as errors naming the item, and left out.
pub fn node_classes_from_items(
    items: &[crate::ports::ConfigItem],
) -> (BTreeMap<String, NodeClassSettings>, Vec<String>) {
    let mut classes = BTreeMap::new();
    let mut errors = Vec::new();
    for item in items.iter().filter(|i| i.kind == crate::ports::ConfigKind::NodeClass) {
        match serde_json::from_value::<NodeClassSettings>(item.spec.clone()) {
            Ok(c) => {
                classes.insert(item.name.clone(), c);
            }
            Err(e) => errors.push(format!("nodeclass/{}: spec: {e}", item.name)),
        }
    }
    (classes, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_classes_from_stored_items() {
        use crate::ports::{ConfigItem, ConfigKind, Timestamp};
        let item = |kind, name: &str, spec| ConfigItem { kind, name: name.into(), spec, version: 1, updated_at: Timestamp::UNIX_EPOCH };
        let items = [
            item(ConfigKind::NodeClass, "default", serde_json::json!({"amiFamily": "AL2", "subnetSelectorTerms": [{"id": "subnet-1"}]})),
            item(ConfigKind::NodeClass, "broken", serde_json::json!({"subnetSelectorTerms": "not a list"})),
            item(ConfigKind::NodePool, "default", serde_json::json!({})),
        ];
        let (classes, errors) = node_classes_from_items(&items);
        assert_eq!(classes.keys().collect::<Vec<_>>(), ["default"]);
        assert_eq!(classes["default"].family(), Ok((AmiFamily::Al2, None)));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("nodeclass/broken: spec:"));
    }

    #[test]
    fn reads_an_ec2nodeclass_spec() {
        let spec: NodeClassSettings = serde_json::from_value(serde_json::json!({
            "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}, {"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"tags": {"kubernetes.io/cluster/demo": "*"}}],
            "role": "KarpenterNodeRole-demo",
            "metadataOptions": {"httpTokens": "required"},
            "tags": {"team": "a"}
        }))
        .expect("parses");
        assert_eq!(spec.family(), Ok((AmiFamily::Bottlerocket, None)));
        assert_eq!(spec.subnet_selector_terms.len(), 2);
        assert_eq!(spec.instance_profile_name(), Some("KarpenterNodeRole-demo"));
        assert_eq!(spec.subnet_selector_terms[0].to_string(), "{tags[karpenter.sh/discovery]=demo}");
        let default = NodeClassSettings::default();
        assert_eq!(default.family(), Ok((AmiFamily::Al2023, None)));
        let bad = NodeClassSettings { ami_family: Some("Windows2022".into()), ..Default::default() };
        assert!(bad.family().is_err_and(|e| e.contains("Windows2022")));
        let pinned = NodeClassSettings {
            ami_selector_terms: vec![AmiTerm { alias: Some("al2@v20240807".into()), ..Default::default() }],
            ..Default::default()
        };
        assert_eq!(pinned.family(), Ok((AmiFamily::Al2, Some("v20240807".into()))));
    }
}
