//! Scenario expectations about where pods landed: per set of pods (by
//! name or labels) whether they are bound, what their nodes' labels are,
//! how many nodes hold them; how pods spread over a topology key; and what
//! every launch offered EC2. What a translated scheduling test asserts
//! ("the pod is scheduled on a node with zone X", "these two pods share a
//! node", "the skew is 1, 1, 2", "every instance type offered is arm64").
//!
//! ```yaml
//! expect:
//!   placements:
//!     - pods: {names: [web]}
//!       scheduled: true
//!       nodeLabels: {topology.kubernetes.io/zone: us-east-1b}
//!     - pods: {labels: {app: db}}
//!       count: 3
//!       nodes: 3
//!   spread:
//!     - {pods: {labels: {app: db}}, key: topology.kubernetes.io/zone, counts: [1, 1, 1]}
//!     - {pods: {labels: {app: db}}, key: kubernetes.io/hostname, atMost: 3}
//!   launchOptions:
//!     labels: {kubernetes.io/arch: arm64}
//! ```

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};

use super::controllers::{is_finished, node_of};
use crate::model::{CloudCatalog, LaunchRequest};
use crate::scheduling::labels;

/// Which pods an expectation is about: those named (any of `names`) and
/// carrying every label of `labels`, in `namespace` when given. DaemonSet
/// pods are never matched.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodMatch {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub namespace: Option<String>,
}

impl PodMatch {
    fn matches(&self, p: &Pod) -> bool {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let pod_labels = p.metadata.labels.clone().unwrap_or_default();
        let daemon = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet");
        !daemon
            && (self.names.is_empty() || self.names.iter().any(|n| n == name))
            && self
                .labels
                .iter()
                .all(|(k, v)| pod_labels.get(k) == Some(v))
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| p.metadata.namespace.as_ref() == Some(ns))
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.names.is_empty() {
            parts.push(format!("named {}", self.names.join(", ")));
        }
        if !self.labels.is_empty() {
            parts.push(format!("labelled {:?}", self.labels));
        }
        if let Some(ns) = &self.namespace {
            parts.push(format!("in {ns}"));
        }
        if parts.is_empty() {
            "every pod".to_owned()
        } else {
            format!("pods {}", parts.join(" "))
        }
    }
}

/// Where a set of pods is: every field is optional and all must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    pub pods: PodMatch,
    /// How many pods match (finished ones left out).
    pub count: Option<usize>,
    /// Every matched pod is bound to a node (true) or none is (false).
    pub scheduled: Option<bool>,
    /// Each matched pod's node carries these labels with these values.
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// Each matched pod's node carries the key with one of the values.
    #[serde(default)]
    pub node_labels_in: BTreeMap<String, Vec<String>>,
    /// Each matched pod's node does not carry the key with this value
    /// (another value or no label at all).
    #[serde(default)]
    pub node_labels_not: BTreeMap<String, String>,
    /// Each matched pod's node has no label with this key.
    #[serde(default)]
    pub node_labels_absent: Vec<String>,
    /// Each matched pod's node has a label with this key (any value).
    #[serde(default)]
    pub node_labels_present: Vec<String>,
    /// Each matched pod's node carries these annotations with these values.
    #[serde(default)]
    pub node_annotations: BTreeMap<String, String>,
    /// Each matched pod's node carries the key with an integer value
    /// greater than this one.
    #[serde(default)]
    pub node_labels_gt: BTreeMap<String, i64>,
    /// … with an integer value less than this one.
    #[serde(default)]
    pub node_labels_lt: BTreeMap<String, i64>,
    /// Each matched pod's node carries these taints (key, value, effect).
    #[serde(default)]
    pub node_taints: Vec<TaintSpec>,
    /// Each matched pod's node carries exactly this many taints.
    pub node_taint_count: Option<usize>,
    /// The bound matched pods sit on exactly this many distinct nodes
    /// (1: all together; `count`: each alone).
    pub nodes: Option<usize>,
}

/// A taint a node must carry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
}

/// How bound pods spread over the values of a node label.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpreadExpect {
    pub pods: PodMatch,
    /// The node label whose values are the domains (`kubernetes.io/hostname`: per node).
    pub key: String,
    /// Bound matched pods per domain that holds any, in any order
    /// (Karpenter's `ExpectSkew(...).To(ConsistOf(...))`).
    pub counts: Option<Vec<usize>>,
    /// No domain holds more than this many bound matched pods.
    pub at_most: Option<usize>,
}

/// What every launch request offered EC2 (every option of every launch
/// over the run): the option's instance type labels (from the catalog),
/// its zone and capacity type.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaunchOptionsExpect {
    /// Every option carries these labels with these values.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Every option carries the key with one of the values.
    #[serde(default)]
    pub labels_in: BTreeMap<String, Vec<String>>,
    /// No option carries the key with this value.
    #[serde(default)]
    pub labels_not: BTreeMap<String, String>,
    /// Every option is one of these instance types.
    #[serde(default)]
    pub instance_types: Vec<String>,
    /// No option is one of these instance types.
    #[serde(default)]
    pub not_instance_types: Vec<String>,
    /// At least one option of some launch is each of these instance types.
    #[serde(default)]
    pub includes: Vec<String>,
    /// Every launch's cheapest option costs what the cheapest catalog
    /// offering with these labels (one of the values per key) costs:
    /// nothing cheaper that would do was left out.
    pub cheapest_among: Option<BTreeMap<String, Vec<String>>>,
    /// Every launch offers at least this many distinct values of the key.
    #[serde(default)]
    pub min_distinct: BTreeMap<String, usize>,
    /// Every launch offers at most this many distinct values of the key.
    #[serde(default)]
    pub max_distinct: BTreeMap<String, usize>,
    /// Every option's instance type is among this many cheapest types of
    /// the catalog, ranked by their cheapest offering (with the
    /// `cheapestAmong` labels, when given; types priced as the last one
    /// count too).
    pub among_cheapest_types: Option<usize>,
}

/// Checks `placements` and `spread` against the cluster as it is.
pub fn check_pods(
    placements: &[Placement],
    spreads: &[SpreadExpect],
    nodes: &[Node],
    pods: &[Pod],
) -> Vec<String> {
    let node_taints: BTreeMap<&str, Vec<(String, String, String)>> = nodes
        .iter()
        .map(|n| {
            let taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .map(|t| {
                    (
                        t.key.clone(),
                        t.value.clone().unwrap_or_default(),
                        t.effect.clone(),
                    )
                })
                .collect();
            (n.metadata.name.as_deref().unwrap_or_default(), taints)
        })
        .collect();
    let node_annotations: BTreeMap<&str, BTreeMap<String, String>> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.as_deref().unwrap_or_default(),
                n.metadata.annotations.clone().unwrap_or_default(),
            )
        })
        .collect();
    let node_labels: BTreeMap<&str, BTreeMap<String, String>> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.as_deref().unwrap_or_default(),
                n.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect();
    let live: Vec<&Pod> = pods.iter().filter(|p| !is_finished(p)).collect();
    let mut failures = Vec::new();
    for (i, pl) in placements.iter().enumerate() {
        let at = format!("placements[{i}] ({})", pl.pods.describe());
        let matched: Vec<&Pod> = live
            .iter()
            .copied()
            .filter(|p| pl.pods.matches(p))
            .collect();
        if let Some(want) = pl.count
            && matched.len() != want
        {
            failures.push(format!(
                "{at}: expected {want} pod(s), found {}",
                matched.len()
            ));
        }
        if matched.is_empty() && pl.count != Some(0) {
            failures.push(format!("{at}: no pod matches"));
            continue;
        }
        let mut on_nodes = BTreeSet::new();
        for p in &matched {
            let name = format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or("default"),
                p.metadata.name.as_deref().unwrap_or_default()
            );
            let node = node_of(p);
            match (pl.scheduled, node) {
                (Some(true), None) => failures.push(format!("{at}: {name} is not scheduled")),
                (Some(false), Some(n)) => {
                    failures.push(format!(
                        "{at}: {name} is scheduled on {n}, expected pending"
                    ));
                }
                _ => {}
            }
            let Some(node) = node else {
                let asks_node = !pl.node_labels.is_empty()
                    || !pl.node_labels_in.is_empty()
                    || !pl.node_labels_not.is_empty()
                    || !pl.node_labels_absent.is_empty()
                    || !pl.node_labels_present.is_empty()
                    || !pl.node_annotations.is_empty()
                    || !pl.node_labels_gt.is_empty()
                    || !pl.node_labels_lt.is_empty();
                if asks_node && pl.scheduled != Some(true) {
                    failures.push(format!(
                        "{at}: {name} is not scheduled (its node's labels are asked)"
                    ));
                }
                continue;
            };
            on_nodes.insert(node.to_owned());
            let Some(labels) = node_labels.get(node) else {
                failures.push(format!(
                    "{at}: {name} is bound to {node}, which does not exist"
                ));
                continue;
            };
            failures.extend(label_failures(
                &format!("{at}: {name} on node {node}"),
                labels,
                &pl.node_labels,
                &pl.node_labels_in,
                &pl.node_labels_not,
                &pl.node_labels_absent,
            ));
            for k in &pl.node_labels_present {
                if !labels.contains_key(k) {
                    failures.push(format!("{at}: {name} on node {node}: expected a label {k}"));
                }
            }
            let annotations = node_annotations.get(node).cloned().unwrap_or_default();
            for (k, v) in &pl.node_annotations {
                if annotations.get(k) != Some(v) {
                    failures.push(format!(
                        "{at}: {name} on node {node}: expected annotation {k}={v}, found {:?}",
                        annotations.get(k)
                    ));
                }
            }
            let taints = node_taints.get(node).cloned().unwrap_or_default();
            for t in &pl.node_taints {
                let want = (t.key.clone(), t.value.clone(), t.effect.clone());
                if !taints.contains(&want) {
                    failures.push(format!(
                        "{at}: {name} on node {node}: expected taint {}={}:{}, found {taints:?}",
                        t.key, t.value, t.effect
                    ));
                }
            }
            if let Some(want) = pl.node_taint_count
                && taints.len() != want
            {
                failures.push(format!(
                    "{at}: {name} on node {node}: expected {want} taint(s), found {taints:?}"
                ));
            }
            for (k, bound, greater) in pl
                .node_labels_gt
                .iter()
                .map(|(k, b)| (k, *b, true))
                .chain(pl.node_labels_lt.iter().map(|(k, b)| (k, *b, false)))
            {
                let value = labels.get(k).and_then(|v| v.parse::<i64>().ok());
                let ok = value.is_some_and(|v| if greater { v > bound } else { v < bound });
                if !ok {
                    let rel = if greater { ">" } else { "<" };
                    failures.push(format!(
                        "{at}: {name} on node {node}: expected {k} {rel} {bound}, found {:?}",
                        labels.get(k)
                    ));
                }
            }
        }
        if let Some(want) = pl.nodes
            && on_nodes.len() != want
        {
            failures.push(format!(
                "{at}: expected the bound pods on {want} node(s), found {} ({})",
                on_nodes.len(),
                on_nodes.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for (i, s) in spreads.iter().enumerate() {
        let mut per_domain: BTreeMap<String, usize> = BTreeMap::new();
        for p in live.iter().filter(|p| s.pods.matches(p)) {
            let Some(node) = node_of(p) else { continue };
            let domain = if s.key == labels::HOSTNAME {
                Some(node.to_owned())
            } else {
                node_labels.get(node).and_then(|l| l.get(&s.key)).cloned()
            };
            if let Some(d) = domain {
                *per_domain.entry(d).or_default() += 1;
            }
        }
        let mut got: Vec<usize> = per_domain.values().copied().collect();
        got.sort_unstable();
        if let Some(counts) = &s.counts {
            let mut want = counts.clone();
            want.sort_unstable();
            if got != want {
                failures.push(format!(
                    "spread[{i}] ({} over {}): expected counts {want:?}, found {got:?} ({per_domain:?})",
                    s.pods.describe(),
                    s.key
                ));
            }
        }
        if let Some(max) = s.at_most
            && got.last().is_some_and(|most| *most > max)
        {
            failures.push(format!(
                "spread[{i}] ({} over {}): expected at most {max} per domain, found {per_domain:?}",
                s.pods.describe(),
                s.key
            ));
        }
    }
    failures
}

/// Every failed label condition on one node (or launch option), prefixed by `at`.
fn label_failures(
    at: &str,
    labels: &BTreeMap<String, String>,
    equal: &BTreeMap<String, String>,
    any_of: &BTreeMap<String, Vec<String>>,
    not: &BTreeMap<String, String>,
    absent: &[String],
) -> Vec<String> {
    let mut failures = Vec::new();
    for (k, v) in equal {
        if labels.get(k) != Some(v) {
            failures.push(format!("{at}: expected {k}={v}, found {:?}", labels.get(k)));
        }
    }
    for (k, vs) in any_of {
        if !labels.get(k).is_some_and(|l| vs.contains(l)) {
            failures.push(format!(
                "{at}: expected {k} in {vs:?}, found {:?}",
                labels.get(k)
            ));
        }
    }
    for (k, v) in not {
        if labels.get(k) == Some(v) {
            failures.push(format!("{at}: expected {k} other than {v}"));
        }
    }
    for k in absent {
        if let Some(v) = labels.get(k) {
            failures.push(format!("{at}: expected no label {k}, found {k}={v}"));
        }
    }
    failures
}

/// Checks `launchOptions` against every launch request made.
pub fn check_launches(
    expect: &LaunchOptionsExpect,
    requests: &[LaunchRequest],
    catalog: &CloudCatalog,
) -> Vec<String> {
    let mut failures = Vec::new();
    if requests.is_empty() {
        return vec!["launchOptions: no launch was requested".to_owned()];
    }
    let labels_of = |instance_type: &str, zone: &str, capacity_type: &str| {
        let info = catalog
            .instance_types
            .iter()
            .find(|t| t.name == instance_type)?;
        let mut l = info.requirements().single_valued_labels();
        for (k, v) in [
            (labels::INSTANCE_TYPE, instance_type),
            (labels::ZONE, zone),
            (labels::CAPACITY_TYPE, capacity_type),
        ] {
            l.insert(k.to_owned(), v.to_owned());
        }
        Some(l)
    };
    let cheapest = expect.cheapest_among.as_ref().map(|among| {
        catalog
            .offerings
            .iter()
            .filter(|o| {
                labels_of(&o.instance_type, &o.zone, &o.capacity_type).is_some_and(|l| {
                    among
                        .iter()
                        .all(|(k, vs)| l.get(k).is_some_and(|v| vs.contains(v)))
                })
            })
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    });
    let among = |l: &BTreeMap<String, String>| {
        expect.cheapest_among.as_ref().is_none_or(|among| {
            among
                .iter()
                .all(|(k, vs)| l.get(k).is_some_and(|v| vs.contains(v)))
        })
    };
    let cheapest_types: Option<BTreeSet<&str>> = expect.among_cheapest_types.map(|n| {
        let mut floor: BTreeMap<&str, f64> = BTreeMap::new();
        for o in &catalog.offerings {
            if labels_of(&o.instance_type, &o.zone, &o.capacity_type).is_some_and(|l| among(&l)) {
                let f = floor
                    .entry(o.instance_type.as_str())
                    .or_insert(f64::INFINITY);
                *f = f.min(o.price);
            }
        }
        let mut ranked: Vec<(f64, &str)> = floor.into_iter().map(|(t, p)| (p, t)).collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
        let last = ranked
            .get(n.saturating_sub(1))
            .map_or(f64::INFINITY, |r| r.0);
        ranked
            .iter()
            .take_while(|(p, _)| *p <= last)
            .map(|(_, t)| *t)
            .collect()
    });
    let mut offered = BTreeSet::new();
    for r in requests {
        if let Some(want) = cheapest {
            let got = r
                .options
                .iter()
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min);
            if (got - want).abs() > 1e-9 {
                failures.push(format!(
                    "launchOptions: claim {}'s cheapest option costs {got}, the cheapest offering that would do {want}",
                    r.claim_id
                ));
            }
        }
        for (key, want) in &expect.min_distinct {
            let distinct: BTreeSet<String> = r
                .options
                .iter()
                .filter_map(|o| labels_of(&o.instance_type, &o.zone, &o.capacity_type))
                .filter_map(|l| l.get(key).cloned())
                .collect();
            if distinct.len() < *want {
                failures.push(format!(
                    "launchOptions: claim {} offers {} distinct {key} ({distinct:?}), fewer than {want}",
                    r.claim_id,
                    distinct.len()
                ));
            }
        }
        for (key, most) in &expect.max_distinct {
            let distinct: BTreeSet<String> = r
                .options
                .iter()
                .filter_map(|o| labels_of(&o.instance_type, &o.zone, &o.capacity_type))
                .filter_map(|l| l.get(key).cloned())
                .collect();
            if distinct.len() > *most {
                failures.push(format!(
                    "launchOptions: claim {} offers {} distinct {key}, more than {most}",
                    r.claim_id,
                    distinct.len()
                ));
            }
        }
        for o in &r.options {
            offered.insert(o.instance_type.clone());
            if let (Some(cheapest), Some(n)) = (&cheapest_types, expect.among_cheapest_types)
                && !cheapest.contains(o.instance_type.as_str())
            {
                failures.push(format!(
                    "launchOptions: claim {} offers {}, not among the {n} cheapest types",
                    r.claim_id, o.instance_type
                ));
            }
            let Some(info) = catalog
                .instance_types
                .iter()
                .find(|t| t.name == o.instance_type)
            else {
                failures.push(format!(
                    "launchOptions: {} offered by claim {} is not in the catalog",
                    o.instance_type, r.claim_id
                ));
                continue;
            };
            let mut option_labels = info.requirements_for(&r.kubelet).single_valued_labels();
            for (k, v) in [
                (labels::INSTANCE_TYPE, &o.instance_type),
                (labels::ZONE, &o.zone),
                (labels::CAPACITY_TYPE, &o.capacity_type),
            ] {
                option_labels.insert(k.to_owned(), v.clone());
            }
            let at = format!(
                "launchOptions: claim {} option {} {} {}",
                r.claim_id, o.instance_type, o.zone, o.capacity_type
            );
            failures.extend(label_failures(
                &at,
                &option_labels,
                &expect.labels,
                &expect.labels_in,
                &expect.labels_not,
                &[],
            ));
            if !expect.instance_types.is_empty()
                && !expect.instance_types.contains(&o.instance_type)
            {
                failures.push(format!("{at}: not one of {:?}", expect.instance_types));
            }
            if expect.not_instance_types.contains(&o.instance_type) {
                failures.push(format!("{at}: must not be offered"));
            }
        }
    }
    for t in &expect.includes {
        if !offered.contains(t) {
            failures.push(format!(
                "launchOptions: {t} was never offered (offered: {offered:?})"
            ));
        }
    }
    failures
}
