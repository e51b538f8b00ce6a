//! Writing configuration, as `nodewright config apply|diff|delete` do:
//! validate a file against what is stored, show the difference, and write
//! every change or none, each conditional on the version read (two
//! operators cannot silently overwrite each other).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::document::{config_only, merge_errors, parse_checked};
use crate::config::{
    ConfigDocument, ConfigError, ConfigItem, ConfigKind, ConfigSet, ConfigWrite, Document,
    MAX_CONFIG_WRITES,
};
use crate::model::Timestamp;
use crate::ports::{Store, StoreError};

/// What applying a file would do to one item.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Create(ConfigDocument),
    /// The stored item, and what replaces it.
    Update(ConfigItem, ConfigDocument),
    Unchanged(ConfigDocument),
}

impl Change {
    pub fn document(&self) -> &ConfigDocument {
        match self {
            Change::Create(d) | Change::Update(_, d) | Change::Unchanged(d) => d,
        }
    }

    /// The write that makes it, conditional on the version read.
    pub fn write(&self, now: Timestamp) -> Option<ConfigWrite> {
        match self {
            Change::Create(d) => Some(ConfigWrite::Put(d.to_item(1, now))),
            Change::Update(old, d) => Some(ConfigWrite::Put(d.to_item(old.version + 1, now))),
            Change::Unchanged(_) => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The file's errors, every one, each prefixed with the file's name.
    #[error("{} error(s):\n  {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Invalid(Vec<String>),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// A file that validated: its configuration documents, how many other
/// documents it held, and the warnings (each prefixed with the file's name).
#[derive(Debug, Clone)]
pub struct Validated {
    pub docs: Vec<ConfigDocument>,
    pub others: usize,
    pub warnings: Vec<String>,
}

/// Reads a file of documents (YAML or JSON) and checks it offline: every
/// document, and the set's names and references. Errors name the file.
/// Documents of other kinds (a Deployment) are not configuration: with
/// `keep_others` they are counted, not errors (what a scenario's objects hold).
pub fn validate_text(
    file: &str,
    text: &str,
    keep_others: bool,
) -> Result<(Vec<ConfigDocument>, usize), Vec<String>> {
    validate_file(file, text, keep_others).map(|v| (v.docs, v.others))
}

/// [`validate_text`] with the warnings.
pub fn validate_file(file: &str, text: &str, keep_others: bool) -> Result<Validated, Vec<String>> {
    let parsed = parse_checked(text, keep_others);
    let others = parsed
        .docs
        .iter()
        .filter(|d| matches!(d, Document::Other(_)))
        .count();
    let docs = config_only(parsed.docs);
    let mut errors = parsed.errors;
    if let Err(e) = ConfigSet::from_documents(&docs) {
        errors = merge_errors(errors, e);
    }
    if errors.is_empty() {
        Ok(Validated {
            docs,
            others,
            warnings: prefixed(file, &parsed.warnings),
        })
    } else {
        Err(prefixed(file, &errors))
    }
}

fn prefixed(file: &str, errors: &[ConfigError]) -> Vec<String> {
    errors.iter().map(|e| format!("{file}: {e}")).collect()
}

/// The changes applying `docs` would make to what `store` holds. The file is
/// validated together with the stored items it does not replace (a NodePool
/// may name a stored NodeClass), and only errors about the file's own
/// documents, or references they make, are reported.
pub async fn plan<S: Store>(store: &S, file: &str, text: &str) -> Result<Vec<Change>, WriteError> {
    let parsed = parse_checked(text, false);
    let docs = config_only(parsed.docs);
    let read_errors = parsed.errors;
    let stored = store.config_items().await?;
    let mut by_key: BTreeMap<(ConfigKind, String), ConfigItem> = stored
        .into_iter()
        .map(|i| ((i.kind, i.name.clone()), i))
        .collect();
    // Stored documents the file does not replace, for references.
    let mut merged: Vec<ConfigDocument> = by_key
        .values()
        .filter(|i| {
            !docs
                .iter()
                .any(|d| d.kind() == i.kind && d.name() == i.name)
        })
        .filter_map(|i| ConfigDocument::from_item(i).ok())
        .collect();
    merged.extend(docs.iter().cloned());
    let own: Vec<String> = docs.iter().map(ConfigDocument::item_name).collect();
    let mut mine = Vec::new();
    if let Err(e) = ConfigSet::from_documents(&merged) {
        mine = e.into_iter().filter(|e| own.contains(&e.item)).collect();
    }
    let errors = prefixed(file, &merge_errors(read_errors, mine));
    if !errors.is_empty() {
        return Err(WriteError::Invalid(errors));
    }
    let changes: Vec<Change> = docs
        .into_iter()
        .map(|d| match by_key.remove(&(d.kind(), d.name().to_owned())) {
            None => Change::Create(d),
            Some(old) if old.spec == d.spec_json() => Change::Unchanged(d),
            Some(old) => Change::Update(old, d),
        })
        .collect();
    let refused: Vec<ConfigError> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Update(old, new) => Some(update_problems(old, new)),
            _ => None,
        })
        .flatten()
        .collect();
    if !refused.is_empty() {
        return Err(WriteError::Invalid(prefixed(file, &refused)));
    }
    if changes
        .iter()
        .filter(|c| !matches!(c, Change::Unchanged(_)))
        .count()
        > MAX_CONFIG_WRITES
    {
        return Err(WriteError::Invalid(vec![format!(
            "{file}: more than {MAX_CONFIG_WRITES} changes: apply it in parts"
        )]));
    }
    Ok(changes)
}

/// What Karpenter's update rules (`oldSelf`) refuse in replacing a stored
/// NodePool: switching between static (`replicas`) and dynamic, and
/// changing the `nodeClassRef`'s group or kind.
fn update_problems(old: &ConfigItem, new: &ConfigDocument) -> Vec<ConfigError> {
    let ConfigDocument::NodePool { name, spec, .. } = new else {
        return Vec::new();
    };
    let err = |field: &str, reason: &str| ConfigError {
        item: format!("nodepool/{name}"),
        field: field.into(),
        reason: reason.into(),
    };
    let mut out = Vec::new();
    if old.spec.get("replicas").is_some() != spec.replicas.is_some() {
        out.push(err(
            "spec.replicas",
            "a NodePool cannot switch between static (replicas set) and dynamic: delete it and create it again",
        ));
    }
    let old_ref = old.spec.pointer("/template/spec/nodeClassRef");
    if let (Some(old_ref), Some(new_ref)) = (old_ref, &spec.template.spec.node_class_ref) {
        for (f, now) in [("group", &new_ref.group), ("kind", &new_ref.kind)] {
            let before = old_ref.get(f).and_then(Value::as_str);
            if before.is_some() && before != now.as_deref() {
                out.push(err(
                    &format!("spec.template.spec.nodeClassRef.{f}"),
                    &format!("nodeClassRef.{f} is immutable"),
                ));
            }
        }
    }
    out
}

/// Sets a static NodePool's `replicas` (what `nodewright config scale`
/// does): the stored item, validated with the rest, written conditional on
/// the version read. Refused for a dynamic pool (it cannot become static).
pub async fn scale<S: Store>(
    store: &S,
    name: &str,
    replicas: i64,
    now: Timestamp,
) -> Result<u64, WriteError> {
    let items = store.config_items().await?;
    let Some(item) = items
        .iter()
        .find(|i| i.kind == ConfigKind::NodePool && i.name == name)
    else {
        return Err(WriteError::Invalid(vec![format!(
            "nodepool/{name} not found"
        )]));
    };
    if item.spec.get("replicas").is_none() {
        return Err(WriteError::Invalid(vec![format!(
            "nodepool/{name}: spec.replicas: not a static NodePool (only a NodePool created with replicas can be scaled)"
        )]));
    }
    let mut spec = item.spec.clone();
    spec["replicas"] = Value::from(replicas);
    let scaled = ConfigItem {
        spec,
        version: item.version + 1,
        updated_at: now,
        ..item.clone()
    };
    let docs: Vec<ConfigDocument> = items
        .iter()
        .map(|i| {
            if i.kind == ConfigKind::NodePool && i.name == name {
                &scaled
            } else {
                i
            }
        })
        .filter_map(|i| ConfigDocument::from_item(i).ok())
        .collect();
    if let Err(e) = ConfigSet::from_documents(&docs) {
        let mine: Vec<String> = e
            .iter()
            .filter(|e| e.item == format!("nodepool/{name}"))
            .map(ToString::to_string)
            .collect();
        if !mine.is_empty() {
            return Err(WriteError::Invalid(mine));
        }
    }
    store.write_config(&[ConfigWrite::Put(scaled)]).await?;
    Ok(item.version + 1)
}

/// Writes the planned changes, all or none; `Conflict` if anything changed
/// since [`plan`] read it.
pub async fn apply<S: Store>(
    store: &S,
    changes: &[Change],
    now: Timestamp,
) -> Result<usize, StoreError> {
    let writes: Vec<ConfigWrite> = changes.iter().filter_map(|c| c.write(now)).collect();
    if !writes.is_empty() {
        store.write_config(&writes).await?;
    }
    Ok(writes.len())
}

/// Deletes one item if it is still the version read; refuses a NodeClass
/// that a stored NodePool still names (as Karpenter's finalizer would hold it).
pub async fn delete<S: Store>(store: &S, kind: ConfigKind, name: &str) -> Result<bool, WriteError> {
    let items = store.config_items().await?;
    let Some(item) = items.iter().find(|i| i.kind == kind && i.name == name) else {
        return Ok(false);
    };
    if kind == ConfigKind::NodeClass {
        let users: Vec<String> = items
            .iter()
            .filter(|i| i.kind == ConfigKind::NodePool)
            .filter(|i| {
                i.spec
                    .pointer("/template/spec/nodeClassRef/name")
                    .and_then(Value::as_str)
                    == Some(name)
            })
            .map(|i| format!("nodepool/{}", i.name))
            .collect();
        if !users.is_empty() {
            return Err(WriteError::Invalid(vec![format!(
                "nodeclass/{name} is used by {}: change or delete those first",
                users.join(", ")
            )]));
        }
    }
    store
        .write_config(&[ConfigWrite::Delete {
            kind,
            name: name.to_owned(),
            version: item.version,
        }])
        .await?;
    Ok(true)
}

/// A unified-style difference of each change, as YAML: `+` lines added,
/// `-` lines removed; nothing for unchanged items.
pub fn diff(changes: &[Change]) -> String {
    let mut out = String::new();
    for c in changes {
        let d = c.document();
        match c {
            Change::Unchanged(_) => out.push_str(&format!("  {} unchanged\n", d.item_name())),
            Change::Create(_) => {
                out.push_str(&format!("+ {} (new)\n", d.item_name()));
                for line in yaml(&d.spec_json()).lines() {
                    out.push_str(&format!("+   {line}\n"));
                }
            }
            Change::Update(old, _) => {
                out.push_str(&format!(
                    "~ {} (version {} → {})\n",
                    d.item_name(),
                    old.version,
                    old.version + 1
                ));
                let (a, b) = (yaml(&old.spec), yaml(&d.spec_json()));
                for line in line_diff(
                    &a.lines().collect::<Vec<_>>(),
                    &b.lines().collect::<Vec<_>>(),
                ) {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn yaml(v: &Value) -> String {
    serde_norway::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// Lines of `a` → `b` by longest common subsequence: `-`, `+`, or context.
fn line_diff(a: &[&str], b: &[&str]) -> Vec<String> {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(format!("    {}", a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("+   {}", b[j]));
            j += 1;
        } else {
            out.push(format!("-   {}", a[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::MemStore;

    const CLASS: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  amiSelectorTerms: [{alias: al2023@latest}]\n  role: r\n  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n";

    fn pool(name: &str, cpu: &str) -> String {
        format!(
            "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  limits: {{cpu: \"{cpu}\"}}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}\n      requirements: []\n"
        )
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn apply_diff_and_a_concurrent_conflict() {
        let store = MemStore::new();
        let now = Timestamp::UNIX_EPOCH;
        let text = format!("{CLASS}{}", pool("p", "100"));
        let changes = block_on(plan(&store, "f.yaml", &text)).expect("valid");
        assert!(changes.iter().all(|c| matches!(c, Change::Create(_))));
        assert_eq!(block_on(apply(&store, &changes, now)).expect("applied"), 2);
        // Applying again changes nothing.
        let again = block_on(plan(&store, "f.yaml", &text)).expect("valid");
        assert!(again.iter().all(|c| matches!(c, Change::Unchanged(_))));
        // A pool alone may name the stored class.
        let changes = block_on(plan(&store, "g.yaml", &pool("p", "200"))).expect("valid");
        let shown = diff(&changes);
        assert!(
            shown.contains("-     cpu: '100'") && shown.contains("+     cpu: '200'"),
            "{shown}"
        );
        // Two operators plan against version 1; the second write loses.
        let theirs = block_on(plan(&store, "h.yaml", &pool("p", "300"))).expect("valid");
        block_on(apply(&store, &changes, now)).expect("first wins");
        let lost = block_on(apply(&store, &theirs, now)).expect_err("second loses");
        assert!(
            matches!(&lost, StoreError::Conflict { item, .. } if item == "nodepool#p"),
            "{lost:?}"
        );
        let stored = block_on(store.config_items()).expect("items");
        let p = stored
            .iter()
            .find(|i| i.name == "p" && i.kind == ConfigKind::NodePool)
            .expect("pool");
        assert_eq!(
            (
                p.version,
                p.spec.pointer("/limits/cpu").and_then(Value::as_str)
            ),
            (2, Some("200"))
        );
    }

    #[test]
    fn a_partly_invalid_file_changes_nothing_and_names_every_error() {
        let store = MemStore::new();
        let text = format!(
            "{CLASS}{}{}{}",
            pool("good", "10"),
            pool("bad-limit", "8Gx"),
            "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad-op}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}\n      requirements: [{key: a, operator: Inn, values: [x]}]\n"
        );
        let Err(WriteError::Invalid(errors)) = block_on(plan(&store, "f.yaml", &text)) else {
            panic!("invalid")
        };
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors
                .iter()
                .all(|e| e.starts_with("f.yaml: nodepool/bad-")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("spec.limits") && e.contains("8Gx")),
            "{errors:?}"
        );
        assert!(errors.iter().any(|e| e.contains("Inn")), "{errors:?}");
        assert!(
            block_on(store.config_items()).expect("items").is_empty(),
            "nothing written"
        );
    }

    #[test]
    fn delete_checks_the_version_and_users() {
        let store = MemStore::new();
        let changes =
            block_on(plan(&store, "f", &format!("{CLASS}{}", pool("p", "1")))).expect("valid");
        block_on(apply(&store, &changes, Timestamp::UNIX_EPOCH)).expect("applied");
        assert!(
            matches!(block_on(delete(&store, ConfigKind::NodeClass, "c")), Err(WriteError::Invalid(e)) if e[0].contains("nodepool/p"))
        );
        assert!(block_on(delete(&store, ConfigKind::NodePool, "p")).expect("deleted"));
        assert!(!block_on(delete(&store, ConfigKind::NodePool, "p")).expect("already gone"));
        assert!(block_on(delete(&store, ConfigKind::NodeClass, "c")).expect("deleted"));
        assert_eq!(block_on(store.config_version()).expect("version"), 3);
    }
}
