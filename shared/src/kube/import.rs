//! Karpenter's configuration read from a cluster, for `nodewright config
//! import --from-cluster`: the NodePools and EC2NodeClasses (v1, and
//! v1beta1 where a cluster still serves it) and the v1alpha5 Provisioners
//! and AWSNodeTemplates, each turned into the configuration document a file
//! would hold (`apiVersion`, `kind`, `metadata.name`, `spec`). The documents
//! are then validated and written exactly as `config apply` writes a file
//! (`handlers::config_write`), v1beta1 and v1alpha5 converted on the way.
//!
//! A kind the cluster does not serve (its CRD is absent, or the version is
//! no longer served) is skipped and said so. An object served in two
//! versions (Karpenter v1 serves NodePools as v1 and v1beta1) is read once,
//! in the newest version. Nothing is written to the cluster.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::{Value, json};

use crate::ports::ClusterError;

/// The annotation of an imported NodePool that says what nodewright does
/// with the nodes Karpenter launched for it: `none` (leave them to
/// Karpenter) or `replace` (replace them within the pool's budgets,
/// `disruption::handover`).
pub use crate::config::settings::KARPENTER_NODES_ANNOTATION as ADOPT_ANNOTATION;

/// One of Karpenter's kinds, at one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KarpenterKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    /// A pool (NodePool, Provisioner) rather than a class.
    pub pool: bool,
}

/// Newest first: an object served in two versions is read in the first.
pub const KINDS: [KarpenterKind; 6] = [
    KarpenterKind {
        group: "karpenter.sh",
        version: "v1",
        kind: "NodePool",
        plural: "nodepools",
        pool: true,
    },
    KarpenterKind {
        group: "karpenter.sh",
        version: "v1beta1",
        kind: "NodePool",
        plural: "nodepools",
        pool: true,
    },
    KarpenterKind {
        group: "karpenter.k8s.aws",
        version: "v1",
        kind: "EC2NodeClass",
        plural: "ec2nodeclasses",
        pool: false,
    },
    KarpenterKind {
        group: "karpenter.k8s.aws",
        version: "v1beta1",
        kind: "EC2NodeClass",
        plural: "ec2nodeclasses",
        pool: false,
    },
    KarpenterKind {
        group: "karpenter.sh",
        version: "v1alpha5",
        kind: "Provisioner",
        plural: "provisioners",
        pool: true,
    },
    KarpenterKind {
        group: "karpenter.k8s.aws",
        version: "v1alpha1",
        kind: "AWSNodeTemplate",
        plural: "awsnodetemplates",
        pool: false,
    },
];

impl KarpenterKind {
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    fn resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.to_owned(),
            version: self.version.to_owned(),
            api_version: self.api_version(),
            kind: self.kind.to_owned(),
            plural: self.plural.to_owned(),
        }
    }
}

/// What the cluster holds, as configuration documents.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    /// Pools first, then classes, each sorted by name.
    pub documents: Vec<Value>,
    /// What was not read, and why (a kind not served, an object already
    /// read in a newer version, a pool not asked for).
    pub notes: Vec<String>,
    /// What needs doing before the import is safe (a pool handed over with
    /// `replace` whose Karpenter NodePool can still launch, one whose
    /// limits at zero the imported pool carries too).
    pub warnings: Vec<String>,
}

impl Imported {
    /// The documents as one multi-document YAML stream (what `config
    /// apply -f` reads).
    pub fn to_yaml(&self) -> Result<String, serde_norway::Error> {
        let mut out = String::new();
        for d in &self.documents {
            out.push_str("---\n");
            out.push_str(&serde_norway::to_string(d)?);
        }
        Ok(out)
    }
}

/// Which pools to take, and what to say about Karpenter's nodes.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Only these pools (NodePool or Provisioner names) and the classes
    /// they refer to; empty: everything.
    pub pools: BTreeSet<String>,
    /// The value of [`ADOPT_ANNOTATION`] on every imported pool; `None`
    /// leaves the pools' annotations as they are.
    pub adopt: Option<String>,
}

/// Reads every served kind of [`KINDS`] (cluster-scoped objects) and turns
/// each object into a document. Errors other than "not served" (403, the
/// API server unreachable, …) are returned: an import that cannot see
/// everything must not write a part of it.
pub async fn read_from_cluster(
    client: &Client,
    options: &ImportOptions,
) -> Result<Imported, ClusterError> {
    let mut out = Imported::default();
    // (kind, name) → the version it was read in.
    let mut seen: BTreeMap<(&str, String), &str> = BTreeMap::new();
    let mut pools: Vec<Value> = Vec::new();
    let mut classes: Vec<(String, Value)> = Vec::new();
    for k in KINDS {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &k.resource());
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                out.notes.push(format!(
                    "{} {}: not served by this cluster",
                    k.api_version(),
                    k.kind
                ));
                continue;
            }
            Err(e) => return Err(super::errors::classify(&format!("list {}", k.plural), &e)),
        };
        for o in list.items {
            let name = o.metadata.name.clone().unwrap_or_default();
            let family = if k.pool { "pool" } else { "class" };
            if let Some(first) = seen.get(&(family, name.clone())) {
                if *first != k.version || k.kind == "Provisioner" || k.kind == "AWSNodeTemplate" {
                    out.notes.push(format!(
                        "{} {name}: already read as {first}{}",
                        k.kind,
                        if k.kind == "Provisioner" || k.kind == "AWSNodeTemplate" {
                            " (two objects of one name: the newer kind is kept)"
                        } else {
                            ""
                        }
                    ));
                }
                continue;
            }
            seen.insert((family, name.clone()), k.version);
            let mut metadata = json!({"name": name});
            let annotations: BTreeMap<String, String> = o
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(key, _)| key.starts_with("nodewright.io/"))
                .collect();
            if !annotations.is_empty() {
                metadata["annotations"] = json!(annotations);
            }
            let doc = json!({
                "apiVersion": k.api_version(),
                "kind": k.kind,
                "metadata": metadata,
                "spec": o.data.get("spec").cloned().unwrap_or_else(|| json!({})),
            });
            if k.pool {
                pools.push(doc);
            } else {
                classes.push((name, doc));
            }
        }
    }
    let wanted = |doc: &Value| {
        options.pools.is_empty()
            || doc["metadata"]["name"]
                .as_str()
                .is_some_and(|n| options.pools.contains(n))
    };
    for missing in options.pools.iter().filter(|p| {
        !pools
            .iter()
            .any(|d| d["metadata"]["name"].as_str() == Some(p.as_str()))
    }) {
        out.notes.push(format!(
            "pool {missing}: no NodePool or Provisioner of that name"
        ));
    }
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    let mut kept = Vec::new();
    for mut doc in pools {
        if !wanted(&doc) {
            out.notes.push(format!(
                "{} {}: not among the pools asked for",
                doc["kind"].as_str().unwrap_or_default(),
                doc["metadata"]["name"].as_str().unwrap_or_default()
            ));
            continue;
        }
        if let Some(class) = class_of(&doc) {
            referenced.insert(class);
        }
        if let Some(adopt) = &options.adopt {
            doc["metadata"]["annotations"][ADOPT_ANNOTATION] = json!(adopt);
        }
        out.warnings
            .extend(limit_warnings(&doc, options.adopt.as_deref()));
        kept.push(doc);
    }
    kept.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    classes.sort_by(|a, b| a.0.cmp(&b.0));
    out.documents = kept;
    out.documents.extend(
        classes
            .into_iter()
            .filter(|(name, _)| options.pools.is_empty() || referenced.contains(name))
            .map(|(_, doc)| doc),
    );
    Ok(out)
}

/// A pool's limits as Karpenter reads them: v1/v1beta1 `spec.limits`,
/// v1alpha5 `spec.limits.resources`; (resource, quantity).
fn limits_of(doc: &Value) -> Vec<(String, String)> {
    let limits = &doc["spec"]["limits"];
    let map = limits["resources"]
        .as_object()
        .or_else(|| limits.as_object());
    map.into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "resources")
        .map(|(k, v)| {
            let q = v
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            (k.clone(), q)
        })
        .collect()
}

/// Whether Karpenter can still launch for the pool `doc` (as read from
/// the cluster): none of its limits is zero. (A limit above zero may still
/// be reached by the nodes it has; only zero stops it for sure.)
pub fn karpenter_can_launch(doc: &Value) -> bool {
    !limits_of(doc)
        .iter()
        .any(|(_, q)| crate::resources::parse_milli(q).is_ok_and(|m| m == 0))
}

/// What to say about a pool's limits at import: with `--adopt replace`, a
/// Karpenter NodePool that can still launch (the two would fight over the
/// drained pods), with the command that stops it; and, whatever the
/// adoption, limits at zero, which the imported pool carries too (nodewright
/// would launch nothing for it).
pub fn limit_warnings(doc: &Value, adopt: Option<&str>) -> Vec<String> {
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or("NodePool");
    let mut out = Vec::new();
    if !karpenter_can_launch(doc) {
        out.push(format!(
            "{kind} {name}: its limits are zero (Karpenter stopped for it), and the imported pool carries them too: nodewright would launch nothing for it. Set nodewright's limits (nodewright config get nodepool {name} -o yaml, edit spec.limits, nodewright config apply -f)"
        ));
    } else if adopt == Some("replace") {
        out.push(format!(
            "{kind} {name} is handed over with --adopt replace, but Karpenter can still launch for it (no limit at zero): the pods drained from its nodes may land on new Karpenter nodes, and nodewright's handover pauses while it sees Karpenter launch. Stop Karpenter launching for it now: {}",
            crate::config::settings::stop_karpenter_command(name)
        ));
    }
    out
}

/// The class a pool document refers to: v1/v1beta1 `nodeClassRef.name`,
/// v1alpha5 `providerRef.name`.
fn class_of(doc: &Value) -> Option<String> {
    let spec = &doc["spec"];
    spec["template"]["spec"]["nodeClassRef"]["name"]
        .as_str()
        .or_else(|| spec["providerRef"]["name"].as_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replace_import_warns_while_karpenter_can_launch_and_when_limits_are_zero() {
        let pool = |limits: Value| json!({"kind": "NodePool", "metadata": {"name": "web"}, "spec": {"limits": limits}});
        let open = pool(json!({"cpu": "1000", "memory": "1000Gi"}));
        assert!(karpenter_can_launch(&open));
        assert!(karpenter_can_launch(
            &json!({"kind": "NodePool", "metadata": {"name": "web"}, "spec": {}})
        ));
        let w = limit_warnings(&open, Some("replace"));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains(
                r#"kubectl patch nodepool web --type merge -p '{"spec":{"limits":{"cpu":"0"}}}'"#
            ),
            "{w:?}"
        );
        assert!(limit_warnings(&open, Some("none")).is_empty());
        for stopped in [
            pool(json!({"cpu": "0"})),
            pool(json!({"cpu": "100", "memory": "0Gi"})),
        ] {
            assert!(!karpenter_can_launch(&stopped), "{stopped}");
            let w = limit_warnings(&stopped, Some("replace"));
            assert!(
                w.len() == 1 && w[0].contains("nodewright would launch nothing"),
                "{w:?}"
            );
        }
        // v1alpha5: spec.limits.resources.
        let provisioner = json!({"kind": "Provisioner", "metadata": {"name": "old"}, "spec": {"limits": {"resources": {"cpu": "0"}}}});
        assert!(!karpenter_can_launch(&provisioner));
    }

    #[test]
    fn a_pool_names_its_class_in_every_version() {
        let v1 = json!({"spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}});
        let alpha = json!({"spec": {"providerRef": {"name": "tmpl"}}});
        let inline = json!({"spec": {"provider": {"subnetSelector": {"a": "b"}}}});
        assert_eq!(class_of(&v1).as_deref(), Some("default"));
        assert_eq!(class_of(&alpha).as_deref(), Some("tmpl"));
        assert_eq!(class_of(&inline), None);
    }

    #[test]
    fn documents_become_one_yaml_stream() {
        let imported = Imported {
            documents: vec![
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"}, "spec": {}}),
                json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "b"}, "spec": {}}),
            ],
            notes: Vec::new(),
            warnings: Vec::new(),
        };
        let text = imported.to_yaml().expect("yaml");
        assert_eq!(text.matches("---\n").count(), 2, "{text}");
        assert!(
            text.contains("kind: NodePool") && text.contains("name: b"),
            "{text}"
        );
    }
}
