//! Typed reading with field paths: a spec deserialized, and on failure the
//! path of the first field that does not read (the probes per kind).

use super::*;

/// `(field, reason)` of the narrowest part of a value that fails to read.
pub(super) type Probe = fn(&Value, &str) -> Option<(String, String)>;

pub(super) fn typed<T: DeserializeOwned>(
    spec: &Value,
    item: &str,
    locate: Probe,
) -> Result<T, ConfigError> {
    serde_json::from_value(spec.clone()).map_err(|e| {
        let (field, reason) =
            locate(spec, "spec").unwrap_or_else(|| ("spec".into(), e.to_string()));
        ConfigError {
            item: item.to_owned(),
            field,
            reason,
        }
    })
}

/// No narrowing: the schema already named what does not fit.
pub(super) fn leaf_probe(_: &Value, _: &str) -> Option<(String, String)> {
    None
}

pub(super) fn leaf<T: DeserializeOwned>(v: &Value, path: &str) -> Option<(String, String)> {
    serde_json::from_value::<T>(v.clone())
        .err()
        .map(|e| (path.to_owned(), e.to_string()))
}

pub(super) fn each<T: DeserializeOwned>(v: &Value, path: &str) -> Option<(String, String)> {
    if let Some(items) = v.as_array()
        && let Some(e) = items
            .iter()
            .enumerate()
            .find_map(|(i, x)| leaf::<T>(x, &format!("{path}[{i}]")))
    {
        return Some(e);
    }
    leaf::<Vec<T>>(v, path)
}

/// The failing child, or the object itself (unknown or missing fields).
pub(super) fn object<T: DeserializeOwned>(
    v: &Value,
    path: &str,
    children: &[(&str, Probe)],
) -> Option<(String, String)> {
    let whole = leaf::<T>(v, path)?;
    if let Some(obj) = v.as_object() {
        for (key, probe) in children {
            if let Some(child) = obj.get(*key)
                && let Some(e) = probe(child, &format!("{path}.{key}"))
            {
                return Some(e);
            }
        }
    }
    Some(whole)
}

pub(super) fn locate_nodepool(v: &Value, p: &str) -> Option<(String, String)> {
    fn template(v: &Value, p: &str) -> Option<(String, String)> {
        object::<NodeClaimTemplate>(
            v,
            p,
            &[
                ("metadata", leaf::<TemplateMetadata>),
                ("spec", template_spec),
            ],
        )
    }
    fn template_spec(v: &Value, p: &str) -> Option<(String, String)> {
        object::<NodeClaimTemplateSpec>(
            v,
            p,
            &[
                ("requirements", each::<RequirementSpec>),
                ("taints", each::<TaintSpec>),
                ("startupTaints", each::<TaintSpec>),
                ("nodeClassRef", leaf::<NodeClassRef>),
                ("expireAfter", leaf::<String>),
                ("terminationGracePeriod", leaf::<String>),
                ("kubelet", leaf::<KubeletSpec>),
            ],
        )
    }
    fn disruption(v: &Value, p: &str) -> Option<(String, String)> {
        object::<DisruptionSpec>(
            v,
            p,
            &[
                ("consolidationPolicy", leaf::<String>),
                ("consolidateAfter", leaf::<String>),
                ("budgets", each::<BudgetSpec>),
            ],
        )
    }
    object::<NodePoolSpec>(
        v,
        p,
        &[
            ("template", template),
            ("disruption", disruption),
            ("limits", leaf::<BTreeMap<String, Value>>),
            ("weight", leaf::<i32>),
        ],
    )
}

pub(super) fn locate_v1beta1_nodepool(v: &Value, p: &str) -> Option<(String, String)> {
    fn template(v: &Value, p: &str) -> Option<(String, String)> {
        object::<V1beta1Template>(
            v,
            p,
            &[
                ("metadata", leaf::<TemplateMetadata>),
                ("spec", template_spec),
            ],
        )
    }
    fn template_spec(v: &Value, p: &str) -> Option<(String, String)> {
        object::<V1beta1TemplateSpec>(
            v,
            p,
            &[
                ("requirements", each::<RequirementSpec>),
                ("taints", each::<TaintSpec>),
                ("startupTaints", each::<TaintSpec>),
                ("nodeClassRef", leaf::<LegacyRef>),
            ],
        )
    }
    fn disruption(v: &Value, p: &str) -> Option<(String, String)> {
        object::<V1beta1Disruption>(v, p, &[("budgets", each::<BudgetSpec>)])
    }
    object::<V1beta1NodePoolSpec>(
        v,
        p,
        &[
            ("template", template),
            ("disruption", disruption),
            ("limits", leaf::<BTreeMap<String, Value>>),
            ("weight", leaf::<i32>),
        ],
    )
}

pub(super) fn locate_provider(v: &Value, p: &str) -> Option<(String, String)> {
    object::<AwsProviderSpec>(v, p, &[])
}

pub(super) fn locate_provisioner(v: &Value, p: &str) -> Option<(String, String)> {
    object::<ProvisionerSpec>(
        v,
        p,
        &[
            ("requirements", each::<RequirementSpec>),
            ("taints", each::<TaintSpec>),
            ("startupTaints", each::<TaintSpec>),
            ("limits", leaf::<ProvisionerLimits>),
            ("weight", leaf::<i32>),
            ("provider", locate_provider),
            ("providerRef", leaf::<LegacyRef>),
            ("ttlSecondsAfterEmpty", leaf::<i64>),
            ("ttlSecondsUntilExpired", leaf::<i64>),
            ("consolidation", leaf::<ProvisionerConsolidation>),
        ],
    )
}

pub(super) fn locate_settings(v: &Value, p: &str) -> Option<(String, String)> {
    object::<SettingsSpec>(v, p, &[("featureGates", leaf::<FeatureGatesSpec>)])
}

pub(super) fn locate_nodeclass(v: &Value, p: &str) -> Option<(String, String)> {
    object::<EC2NodeClassSpec>(
        v,
        p,
        &[
            ("amiSelectorTerms", each::<AmiSelectorTermSpec>),
            ("subnetSelectorTerms", each::<SubnetSelectorTermSpec>),
            (
                "securityGroupSelectorTerms",
                each::<SecurityGroupSelectorTermSpec>,
            ),
            ("kubelet", leaf::<KubeletSpec>),
            ("amiFamily", leaf::<String>),
            ("role", leaf::<String>),
            ("instanceProfile", leaf::<String>),
            ("userData", leaf::<String>),
            ("associatePublicIPAddress", leaf::<bool>),
            ("detailedMonitoring", leaf::<bool>),
        ],
    )
}
