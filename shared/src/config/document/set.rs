//! The validated set: documents (or stored items) resolved together, pools
//! against their NodeClasses, every error kept.

use super::*;

/// Every NodePool, NodeClass and the Settings of a configuration, validated together.
#[derive(Debug, Clone, Default)]
pub struct ConfigSet {
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<NodeClass>,
    pub settings: Settings,
    /// Every valid NodeOverlay (each pool also holds them, `NodePool::overlays`).
    pub node_overlays: Vec<NodeOverlay>,
    pub capacity_buffers: Vec<CapacityBuffer>,
}

/// What [`ConfigSet::resolve`] makes of documents that may not all be valid.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The valid part: pools whose NodeClass is valid, valid classes, the
    /// settings (defaults when absent or invalid).
    pub set: ConfigSet,
    /// Each invalid document's error, and each reference to a class that
    /// does not exist.
    pub errors: Vec<ConfigError>,
    /// Pools left out because their NodeClass is itself invalid (its error is
    /// in `errors`): Karpenter's "NodeClass not ready".
    pub not_ready: Vec<ConfigError>,
}

impl ConfigSet {
    /// Validates every document and the references between them; all errors
    /// are returned, not only the first. Each NodePool must name an existing
    /// NodeClass; its kubelet settings become the class's with the pool's
    /// own (a v1beta1 compatibility field) on top.
    pub fn from_documents(docs: &[ConfigDocument]) -> Result<ConfigSet, Vec<ConfigError>> {
        let r = ConfigSet::resolve(docs);
        if r.errors.is_empty() {
            Ok(r.set)
        } else {
            Err(r.errors)
        }
    }

    /// The lenient form the functions use on stored items: whatever is
    /// valid, and what is not. The one place NodePools meet their NodeClass.
    pub fn resolve(docs: &[ConfigDocument]) -> Resolved {
        let mut r = Resolved::default();
        let duplicate = |item: String| ConfigError {
            item,
            field: "metadata.name".into(),
            reason: "defined more than once".into(),
        };
        let mut class_names = BTreeSet::new();
        let mut overlay_names = BTreeSet::new();
        let mut buffer_names = BTreeSet::new();
        let mut settings_seen = false;
        for doc in docs {
            match doc {
                ConfigDocument::NodeClass { name, spec } => {
                    if !class_names.insert(name.as_str()) {
                        r.errors.push(duplicate(format!("nodeclass/{name}")));
                        continue;
                    }
                    match NodeClass::from_spec_all(name, spec) {
                        Ok(c) => r.set.node_classes.push(c),
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::Settings { name, spec } => {
                    if std::mem::replace(&mut settings_seen, true) {
                        r.errors.push(duplicate(format!("settings/{name}")));
                        continue;
                    }
                    match Settings::from_spec(spec) {
                        Ok(s) => r.set.settings = s,
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::NodeOverlay { name, spec } => {
                    if !overlay_names.insert(name.as_str()) {
                        r.errors.push(duplicate(format!("nodeoverlay/{name}")));
                        continue;
                    }
                    match NodeOverlay::from_spec_all(name, spec) {
                        Ok(o) => r.set.node_overlays.push(o),
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::CapacityBuffer { name, spec } => {
                    if !buffer_names.insert(name.as_str()) {
                        r.errors.push(duplicate(format!("capacitybuffer/{name}")));
                        continue;
                    }
                    match CapacityBuffer::from_spec_all(name, spec) {
                        Ok(b) => r.set.capacity_buffers.push(b),
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::NodePool { .. } => {}
            }
        }
        // Kubelet expressions need the Settings gate (Karpenter's
        // NodeClassCEL): without it the class is refused, every such field
        // named, rather than launched with defaults the user did not ask for.
        if !r.set.settings.node_class_cel {
            let classes = std::mem::take(&mut r.set.node_classes);
            for c in classes {
                let fields = c.kubelet.expression_fields("spec.kubelet");
                if fields.is_empty() {
                    r.set.node_classes.push(c);
                    continue;
                }
                r.errors.extend(fields.into_iter().map(|field| ConfigError {
                    item: format!("nodeclass/{}", c.name),
                    field,
                    reason: "an expression, and the settings' featureGates.nodeClassCEL is off (Karpenter's KubeletExpressionsDisabled): set it to true, or write a value".into(),
                }));
            }
        }
        let overlays: std::sync::Arc<[NodeOverlay]> = r.set.node_overlays.clone().into();
        let mut pool_names = BTreeSet::new();
        for doc in docs {
            let ConfigDocument::NodePool {
                name,
                spec,
                annotations,
                ..
            } = doc
            else {
                continue;
            };
            if !pool_names.insert(name.as_str()) {
                r.errors.push(duplicate(format!("nodepool/{name}")));
                continue;
            }
            // An annotation we act on is validated as its Settings field is:
            // a value we cannot read is refused, never taken for the default.
            let bad_annotation = annotations
                .get(REBALANCE_ANNOTATION)
                .filter(|v| RebalancePolicy::parse(v).is_none())
                .map(|v| ConfigError {
                    item: format!("nodepool/{name}"),
                    field: format!("metadata.annotations[{REBALANCE_ANNOTATION}]"),
                    reason: format!("unknown policy {v:?}: expected Ignore, Cordon or Replace"),
                })
                .or_else(|| {
                    annotations
                        .get(KARPENTER_NODES_ANNOTATION)
                        .filter(|v| KarpenterNodes::parse(v).is_none())
                        .map(|v| ConfigError {
                            item: format!("nodepool/{name}"),
                            field: format!("metadata.annotations[{KARPENTER_NODES_ANNOTATION}]"),
                            reason: format!("unknown value {v:?}: expected none or replace"),
                        })
                });
            let mut pool = match NodePool::from_spec_all(name, spec) {
                Ok(mut p) if bad_annotation.is_none() => {
                    p.annotations.clone_from(annotations);
                    p.overlays = overlays.clone();
                    p
                }
                Ok(_) => {
                    r.errors.extend(bad_annotation);
                    continue;
                }
                Err(e) => {
                    r.errors.extend(bad_annotation);
                    r.errors.extend(e);
                    continue;
                }
            };
            let err = |field: &str, reason: String| ConfigError {
                item: format!("nodepool/{name}"),
                field: field.into(),
                reason,
            };
            match pool.node_class.as_deref() {
                None => r.errors.push(err("spec.template.spec.nodeClassRef", "required: the EC2NodeClass nodes launch with".into())),
                Some(class) if !class_names.contains(class) => r.errors.push(err(
                    "spec.template.spec.nodeClassRef.name",
                    format!("EC2NodeClass {class:?} does not exist: no nodes are launched for this NodePool"),
                )),
                Some(class) => match r.set.node_classes.iter().find(|c| c.name == class) {
                    Some(c) => {
                        pool.launch_kubelet = pool.launch_kubelet.merged_over(&c.kubelet);
                        let own = pool.launch_kubelet.expression_fields("spec.template.spec.kubelet");
                        if !r.set.settings.node_class_cel && !own.is_empty() {
                            r.errors.extend(own.into_iter().map(|field| err(&field, "an expression, and the settings' featureGates.nodeClassCEL is off (Karpenter's KubeletExpressionsDisabled): set it to true, or write a value".into())));
                            continue;
                        }
                        pool.kubelet = pool.launch_kubelet.to_kubelet_config();
                        pool.kubelet.bottlerocket =
                            c.ami_family == crate::config::nodeclass::AmiFamily::Bottlerocket;
                        pool.kubelet.windows_build =
                            c.ami_family.windows_build().map(str::to_owned);
                        pool.kubelet.efa_only_enis = c
                            .network_interfaces
                            .iter()
                            .filter(|ni| {
                                ni.network_card_index == 0 && ni.interface_type == "efa-only"
                            })
                            .count() as u32;
                        pool.kubelet.reserved_enis = r.set.settings.reserved_enis;
                        pool.kubelet.ephemeral_storage =
                            Some(crate::config::nodeclass::ephemeral_storage(c));
                        pool.resolved_class = Some(std::sync::Arc::new(c.clone()));
                        r.set.node_pools.push(pool);
                    }
                    None => r.not_ready.push(err(
                        "spec.template.spec.nodeClassRef.name",
                        format!("EC2NodeClass {class:?} is invalid: no nodes are launched for this NodePool"),
                    )),
                },
            }
        }
        r
    }

    /// Reads and validates a stream of configuration documents; every
    /// error at once (a document that does not read, and the set's own).
    pub fn parse(text: &str) -> Result<ConfigSet, Vec<ConfigError>> {
        let (docs, errors) = parse_config_all(text);
        match ConfigSet::from_documents(&docs) {
            Ok(set) if errors.is_empty() => Ok(set),
            Ok(_) => Err(errors),
            Err(e) => Err(merge_errors(errors, e)),
        }
    }

    pub fn node_pool(&self, name: &str) -> Option<&NodePool> {
        self.node_pools.iter().find(|p| p.name == name)
    }

    pub fn node_class(&self, name: &str) -> Option<&NodeClass> {
        self.node_classes.iter().find(|c| c.name == name)
    }

    /// The NodeClass a NodePool launches with.
    pub fn node_class_of(&self, pool: &NodePool) -> Option<&NodeClass> {
        pool.node_class.as_deref().and_then(|n| self.node_class(n))
    }
}
