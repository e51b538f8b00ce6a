//! Reading one object of a stream: its kind and version, its name, every
//! field checked against the kind's schema, converted to the v1 form.

use super::*;

/// The top-level fields of a Kubernetes object.
pub(super) const TOP_LEVEL: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

pub(super) fn read_object(
    value: &Value,
    at: &str,
    keep_others: bool,
    dups: &[String],
    out: &mut Parsed,
) {
    let doc_err = |field: &str, reason: String| ConfigError {
        item: at.to_owned(),
        field: field.to_owned(),
        reason,
    };
    let Some(obj) = value.as_object() else {
        out.errors.push(doc_err(
            "(document)",
            format!(
                "expected an object with apiVersion and kind, got {}",
                kind_of(value)
            ),
        ));
        return;
    };
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version.is_empty() {
        out.errors.push(doc_err("apiVersion", "required".into()));
        return;
    }
    if kind.is_empty() {
        out.errors.push(doc_err("kind", "required".into()));
        return;
    }
    if kind.ends_with("List")
        && let Some(items) = obj.get("items").and_then(Value::as_array)
    {
        for (j, item) in items.iter().enumerate() {
            let prefix = format!("items[{j}].");
            let item_dups: Vec<String> = dups
                .iter()
                .filter_map(|d| d.strip_prefix(&prefix).map(str::to_owned))
                .collect();
            read_object(
                item,
                &format!("{at}.items[{j}]"),
                keep_others,
                &item_dups,
                out,
            );
        }
        return;
    }
    let karpenter_kind = matches!(
        kind,
        "NodePool"
            | "EC2NodeClass"
            | "Provisioner"
            | "AWSNodeTemplate"
            | "Settings"
            | "NodeOverlay"
            | "CapacityBuffer"
    ) && matches!(
        api_version.split('/').next(),
        Some("karpenter.sh" | "karpenter.k8s.aws" | "nodewright.io" | "autoscaling.x-k8s.io")
    );
    if (api_version, kind) == ("v1", "PodTemplate") {
        let meta = obj.get("metadata");
        let field = |f: &str| {
            meta.and_then(|m| m.get(f))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let key = (
            field("namespace").unwrap_or_else(|| "default".into()),
            field("name").unwrap_or_default(),
        );
        out.pod_templates
            .insert(key, obj.get("template").cloned().unwrap_or(Value::Null));
        if keep_others {
            out.docs.push(Document::Other(value.clone()));
        }
        return;
    }
    let known = matches!(
        (api_version, kind),
        (NODEPOOL_V1 | NODEPOOL_V1BETA1, "NodePool")
            | (PROVISIONER_V1ALPHA5, "Provisioner")
            | (EC2NODECLASS_V1 | EC2NODECLASS_V1BETA1, "EC2NodeClass")
            | (AWSNODETEMPLATE_V1ALPHA1, "AWSNodeTemplate")
            | (SETTINGS_V1ALPHA1, "Settings")
            | (NODEOVERLAY_V1ALPHA1, "NodeOverlay")
            | (CAPACITYBUFFER_V1BETA1, "CapacityBuffer")
    );
    if !known {
        if keep_others && !karpenter_kind {
            out.docs.push(Document::Other(value.clone()));
            return;
        }
        out.errors.push(doc_err(
            "kind",
            format!("unsupported apiVersion/kind {api_version}/{kind} (supported: {SUPPORTED})"),
        ));
        return;
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Err(r) = check_name(name, kind == "NodePool" || kind == "Provisioner") {
        out.errors.push(doc_err("metadata.name", r));
        return;
    }
    let item = format!("{}/{name}", item_kind(kind));
    let problem = |field: String, reason: String| ConfigError {
        item: item.clone(),
        field,
        reason,
    };
    for d in dups {
        out.errors.push(problem(
            d.clone(),
            "duplicate key: written more than once in the same object".into(),
        ));
    }
    for k in obj.keys().filter(|k| !TOP_LEVEL.contains(&k.as_str())) {
        out.errors.push(problem(
            k.clone(),
            format!("unknown field {k:?} (apiVersion, kind, metadata, spec)"),
        ));
    }
    let empty = Value::Object(serde_json::Map::new());
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => &empty,
        Some(s) => s,
    };
    let name = name.to_owned();
    let annotations: BTreeMap<String, String> = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    if matches!(kind, "NodePool" | "Provisioner")
        && annotations
            .get(KARPENTER_NODES_ANNOTATION)
            .and_then(|v| KarpenterNodes::parse(v))
            == Some(KarpenterNodes::Replace)
    {
        out.warnings.push(ConfigError {
            item: item.clone(),
            field: format!("metadata.annotations[{KARPENTER_NODES_ANNOTATION}]"),
            reason: format!(
                "Karpenter's nodes of this pool are replaced by nodewright's (handover): Karpenter's NodePool {name} must launch nothing any more, or the pods drained from its nodes may land on new Karpenter nodes (the handover pauses while it sees Karpenter launch); stop it with {}",
                crate::config::settings::stop_karpenter_command(&name)
            ),
        });
    }
    let result: Result<(), ConfigError> = (|| {
        match (api_version, kind) {
            (NODEPOOL_V1, _) => {
                let spec =
                    checked::<NodePoolSpec>(spec, &item, &NODEPOOL_SPEC, locate_nodepool, out);
                if let Some(spec) = spec {
                    out.warnings.extend(NodePool::warnings(&name, &spec));
                    out.docs.push(Document::Config(ConfigDocument::NodePool {
                        name,
                        spec,
                        annotations: annotations.clone(),
                        source_api_version: api_version.into(),
                    }));
                }
            }
            (NODEPOOL_V1BETA1, _) => {
                let old = typed(spec, &item, locate_v1beta1_nodepool)?;
                let spec = convert::v1beta1_nodepool_to_v1(&name, &old)?;
                out.warnings.extend(NodePool::warnings(&name, &spec));
                out.docs.push(Document::Config(ConfigDocument::NodePool {
                    name,
                    spec,
                    annotations: annotations.clone(),
                    source_api_version: api_version.into(),
                }));
            }
            (PROVISIONER_V1ALPHA5, _) => {
                let old = typed(spec, &item, locate_provisioner)?;
                let converted = convert::provisioner_to_v1(&name, &old)?;
                for (field, reason) in converted.warnings {
                    out.warnings.push(problem(field, reason));
                }
                if let Some(class) = converted.node_class {
                    out.docs.push(Document::Config(ConfigDocument::NodeClass {
                        name: name.clone(),
                        spec: class,
                    }));
                }
                out.warnings
                    .extend(NodePool::warnings(&name, &converted.node_pool));
                out.docs.push(Document::Config(ConfigDocument::NodePool {
                    name,
                    spec: converted.node_pool,
                    annotations,
                    source_api_version: api_version.into(),
                }));
            }
            (SETTINGS_V1ALPHA1, _) => {
                if name != SETTINGS_NAME {
                    return Err(doc_err(
                        "metadata.name",
                        format!("{name:?}: the one Settings item is named {SETTINGS_NAME:?}"),
                    ));
                }
                let spec =
                    checked::<SettingsSpec>(spec, &item, &SETTINGS_SPEC, locate_settings, out);
                if let Some(spec) = spec {
                    out.docs
                        .push(Document::Config(ConfigDocument::Settings { name, spec }));
                }
            }
            (EC2NODECLASS_V1, _) => {
                let spec = checked::<EC2NodeClassSpec>(
                    spec,
                    &item,
                    &NODECLASS_SPEC,
                    locate_nodeclass,
                    out,
                );
                if let Some(spec) = spec {
                    out.warnings.extend(NodeClass::warnings(&name, &spec));
                    out.docs
                        .push(Document::Config(ConfigDocument::NodeClass { name, spec }));
                }
            }
            (NODEOVERLAY_V1ALPHA1, _) => {
                let spec =
                    checked::<NodeOverlaySpec>(spec, &item, &NODEOVERLAY_SPEC, leaf_probe, out);
                if let Some(spec) = spec {
                    out.docs
                        .push(Document::Config(ConfigDocument::NodeOverlay { name, spec }));
                }
            }
            (CAPACITYBUFFER_V1BETA1, _) => {
                let spec = checked::<CapacityBufferSpec>(
                    spec,
                    &item,
                    &CAPACITYBUFFER_SPEC,
                    leaf_probe,
                    out,
                );
                if let Some(mut spec) = spec {
                    out.warnings
                        .extend(crate::config::buffer::warnings(&name, &spec));
                    spec.namespace = Some(
                        obj.get("metadata")
                            .and_then(|m| m.get("namespace"))
                            .and_then(Value::as_str)
                            .unwrap_or("default")
                            .to_owned(),
                    );
                    out.docs
                        .push(Document::Config(ConfigDocument::CapacityBuffer {
                            name,
                            spec,
                        }));
                }
            }
            (EC2NODECLASS_V1BETA1, _) => {
                let old = typed(spec, &item, locate_nodeclass)?;
                let spec = convert::v1beta1_nodeclass_to_v1(&name, &old)?;
                out.docs
                    .push(Document::Config(ConfigDocument::NodeClass { name, spec }));
            }
            _ => {
                let old = typed(spec, &item, locate_provider)?;
                let spec = convert::aws_node_template_to_v1(&name, &old)?;
                out.docs
                    .push(Document::Config(ConfigDocument::NodeClass { name, spec }));
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        out.errors.push(e);
    }
}

/// Reads a spec after checking its shape: every problem the schema finds
/// becomes an error of `item`, what did not fit is taken out, and the rest
/// is read (`None` only when that still fails, which its error says).
pub(super) fn checked<T: DeserializeOwned>(
    spec: &Value,
    item: &str,
    kind: &Kind,
    locate: Probe,
    out: &mut Parsed,
) -> Option<T> {
    let mut cleaned = spec.clone();
    for (field, reason) in schema::check(&mut cleaned, kind, "spec") {
        out.errors.push(ConfigError {
            item: item.to_owned(),
            field,
            reason,
        });
    }
    match typed(&cleaned, item, locate) {
        Ok(t) => Some(t),
        Err(e) => {
            out.errors.push(e);
            None
        }
    }
}

pub(super) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A DNS-1123 subdomain, as Kubernetes names are; a NodePool's name is also
/// a label value (`karpenter.sh/nodepool`), so at most 63 characters.
pub(super) fn check_name(name: &str, label_value: bool) -> Result<(), String> {
    if name.is_empty() {
        return Err("required".into());
    }
    let max = if label_value { 63 } else { 253 };
    if name.len() > max {
        return Err(format!("{name:?} is longer than {max} characters"));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum);
    if !ok {
        return Err(format!(
            "{name:?} is not a valid name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}
