//! Stored items: a DynamoDB item (its v1 spec as JSON) read back into a
//! document, and a document written as an item.

use super::*;

/// What a stored NodePool spec may leave out that a file must write.
pub(super) fn stored_pool_defaults(spec: &mut Value) {
    let Some(t) = spec
        .as_object_mut()
        .map(|o| o.entry("template").or_insert_with(|| serde_json::json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let Some(ts) = t
        .entry("spec")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
    else {
        return;
    };
    ts.entry("requirements")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(r) = ts.get_mut("nodeClassRef").and_then(Value::as_object_mut) {
        r.entry("group")
            .or_insert_with(|| Value::from(NODE_CLASS_GROUP));
        r.entry("kind")
            .or_insert_with(|| Value::from(NODE_CLASS_KIND));
    }
}

impl ConfigDocument {
    /// A stored item (its v1 spec as JSON) read back; the first problem
    /// (see [`ConfigDocument::from_item_all`]).
    pub fn from_item(item: &ConfigItem) -> Result<ConfigDocument, ConfigError> {
        Self::from_item_all(item).map_err(|mut e| e.swap_remove(0))
    }

    /// A stored item read back, checked against its kind's schema: every
    /// problem with its field path. Stored specs leave out empty lists
    /// (`requirements: []`), and items written before the reference's
    /// `group` and `kind` were required lack them: both are filled in.
    pub fn from_item_all(item: &ConfigItem) -> Result<ConfigDocument, Vec<ConfigError>> {
        let name = item.name.clone();
        if let Some(reason) = item.unreadable_reason() {
            return Err(vec![ConfigError {
                item: format!("{}/{name}", item.kind.as_str()),
                field: "body".to_owned(),
                reason: format!(
                    "the stored item cannot be read ({reason}); apply it again or delete it"
                ),
            }]);
        }
        let label = format!("{}/{name}", item.kind.as_str());
        let mut spec = item.spec.clone();
        let kind = match item.kind {
            ConfigKind::NodePool => {
                stored_pool_defaults(&mut spec);
                &NODEPOOL_SPEC
            }
            ConfigKind::NodeClass => &NODECLASS_SPEC,
            ConfigKind::Settings => &SETTINGS_SPEC,
            ConfigKind::NodeOverlay => &NODEOVERLAY_SPEC,
            ConfigKind::CapacityBuffer => &CAPACITYBUFFER_SPEC,
        };
        let problems = schema::check(&mut spec, kind, "spec");
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|(field, reason)| ConfigError {
                    item: label.clone(),
                    field,
                    reason,
                })
                .collect());
        }
        let one = |e| vec![e];
        Ok(match item.kind {
            ConfigKind::NodePool => ConfigDocument::NodePool {
                spec: typed(&spec, &label, locate_nodepool).map_err(one)?,
                annotations: item.annotations.clone(),
                name,
                source_api_version: NODEPOOL_V1.to_owned(),
            },
            ConfigKind::NodeClass => ConfigDocument::NodeClass {
                spec: typed(&spec, &label, locate_nodeclass).map_err(one)?,
                name,
            },
            ConfigKind::Settings => ConfigDocument::Settings {
                spec: typed(&spec, &label, locate_settings).map_err(one)?,
                name,
            },
            ConfigKind::NodeOverlay => ConfigDocument::NodeOverlay {
                spec: typed(&spec, &label, leaf_probe).map_err(one)?,
                name,
            },
            ConfigKind::CapacityBuffer => ConfigDocument::CapacityBuffer {
                spec: typed(&spec, &label, leaf_probe).map_err(one)?,
                name,
            },
        })
    }

    pub fn kind(&self) -> ConfigKind {
        match self {
            ConfigDocument::NodePool { .. } => ConfigKind::NodePool,
            ConfigDocument::NodeClass { .. } => ConfigKind::NodeClass,
            ConfigDocument::Settings { .. } => ConfigKind::Settings,
            ConfigDocument::NodeOverlay { .. } => ConfigKind::NodeOverlay,
            ConfigDocument::CapacityBuffer { .. } => ConfigKind::CapacityBuffer,
        }
    }

    /// The spec as stored (v1, JSON).
    pub fn spec_json(&self) -> Value {
        let v = match self {
            ConfigDocument::NodePool { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::NodeClass { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::Settings { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::NodeOverlay { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::CapacityBuffer { spec, .. } => serde_json::to_value(spec),
        };
        // These specs are plain maps and strings: serializing cannot fail.
        v.unwrap_or_default()
    }

    /// The item to store, at `version`.
    pub fn to_item(&self, version: u64, now: jiff::Timestamp) -> ConfigItem {
        let annotations = match self {
            ConfigDocument::NodePool { annotations, .. } => annotations.clone(),
            _ => BTreeMap::new(),
        };
        ConfigItem {
            kind: self.kind(),
            name: self.name().to_owned(),
            spec: self.spec_json(),
            annotations,
            version,
            updated_at: now,
        }
    }

    /// The v1 YAML document a user can keep (`config get`, `config convert`).
    pub fn to_manifest(&self) -> Value {
        let (api_version, kind) = match self {
            ConfigDocument::NodePool { .. } => (NODEPOOL_V1, "NodePool"),
            ConfigDocument::NodeClass { .. } => (EC2NODECLASS_V1, "EC2NodeClass"),
            ConfigDocument::Settings { .. } => (SETTINGS_V1ALPHA1, "Settings"),
            ConfigDocument::NodeOverlay { .. } => (NODEOVERLAY_V1ALPHA1, "NodeOverlay"),
            ConfigDocument::CapacityBuffer { .. } => (CAPACITYBUFFER_V1BETA1, "CapacityBuffer"),
        };
        serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": self.name()}, "spec": self.spec_json()})
    }
}

/// Stored items → what is valid and what is not: the same validation the
/// CLI applies before writing, so the functions, the CLI and the simulator
/// agree. An item that does not read is an error and left out.
pub fn resolve_items(items: &[ConfigItem]) -> Resolved {
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for item in items {
        match ConfigDocument::from_item_all(item) {
            Ok(d) => docs.push(d),
            Err(e) => errors.extend(e),
        }
    }
    let mut r = ConfigSet::resolve(&docs);
    // A pool naming a class whose item does not read: not ready, not missing.
    let unreadable: BTreeSet<String> = errors
        .iter()
        .filter_map(|e: &ConfigError| e.item.strip_prefix("nodeclass/").map(str::to_owned))
        .collect();
    for e in std::mem::take(&mut r.errors) {
        let class_unreadable = e.field == "spec.template.spec.nodeClassRef.name"
            && unreadable
                .iter()
                .any(|c| e.reason.starts_with(&format!("EC2NodeClass {c:?} ")));
        if class_unreadable {
            let reason = e.reason.replacen("does not exist", "is invalid", 1);
            r.not_ready.push(ConfigError { reason, ..e });
        } else {
            r.errors.push(e);
        }
    }
    errors.extend(r.errors);
    // Each item's errors together, items in order (stable: fields keep theirs).
    errors.sort_by(|a, b| a.item.cmp(&b.item));
    r.errors = errors;
    r
}
