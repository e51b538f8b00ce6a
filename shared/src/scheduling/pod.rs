//! The scheduling view of a pod: effective requests and every constraint
//! that decides where it may run, read once from the Kubernetes object.
//!
//! Preferences (preferred node affinity, preferred pod (anti-)affinity,
//! ScheduleAnyway spreads, PreferNoSchedule taints) start out as hard
//! constraints; [`Relaxation`] drops them one at a time in Karpenter's order
//! when the pod cannot be placed, and [`SchedPod::constraints`] gives the
//! constraints that hold at a given relaxation.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeSelectorTerm, Pod, PodAffinityTerm, PodSpec, ResourceRequirements,
};

use super::labels;
use super::requirements::{Requirement, RequirementError, Requirements};
use super::selector::LabelSelector;
use super::shared_list::SharedList;
use super::taints::Toleration;
use super::volumes::{self, VolumeError, VolumeIndex};
use crate::resources::{self, QuantityError, Resources};

/// `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod that cannot be read into a scheduling view.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    #[error("pod {pod}: {field}: {source}")]
    Quantity {
        pod: String,
        field: String,
        source: QuantityError,
    },
    #[error("pod {pod}: {field}: {source}")]
    Requirement {
        pod: String,
        field: String,
        source: RequirementError,
    },
    #[error("pod {pod}: {field}: {reason}")]
    Invalid {
        pod: String,
        field: String,
        reason: String,
    },
    /// A volume no new node can hold (a missing claim or class, …). Boxed:
    /// the rare case should not make every `Result<SchedPod, _>` larger.
    #[error("pod {pod}: volume {volume}: {source}")]
    Volume {
        pod: String,
        volume: String,
        source: Box<VolumeError>,
    },
}

/// A topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Spread {
    pub key: String,
    pub max_skew: u32,
    /// `DoNotSchedule` (true) or `ScheduleAnyway` (false, a preference).
    pub hard: bool,
    pub selector: LabelSelector,
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy`: with `Honor` (the default, true) only domains
    /// the pod's nodeSelector and required node affinity allow count for
    /// the skew; with `Ignore` every domain does.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy`: with `Honor` only domains of nodes whose taints
    /// the pod tolerates count, and pods count only on such nodes; with
    /// `Ignore` (the default, false) every node does.
    pub honor_node_taints: bool,
}

/// A pod affinity or anti-affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    pub anti: bool,
    pub key: String,
    pub selector: LabelSelector,
    /// Namespaces whose pods count; the pod's own when the term names none
    /// and has no namespace selector.
    pub namespaces: Namespaces,
    /// `None` for required terms, the weight for preferred ones.
    pub weight: Option<i32>,
}

/// The namespaces whose pods an affinity term counts: the ones it names and
/// the ones its `namespaceSelector` selects. Namespaces are known by their
/// `kubernetes.io/metadata.name` label only, so an empty selector selects
/// every namespace and one on that label its namespaces; a selector on
/// other namespace labels selects none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Namespaces {
    /// Sorted.
    pub names: Vec<String>,
    pub selector: Option<LabelSelector>,
}

/// The label Kubernetes gives every namespace, its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

impl Namespaces {
    /// Just `namespace`.
    pub fn only(namespace: &str) -> Self {
        Namespaces {
            names: vec![namespace.to_owned()],
            selector: None,
        }
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.names.iter().any(|n| n == namespace)
            || self.selector.as_ref().is_some_and(|s| {
                s.is_empty()
                    || s.matches(&BTreeMap::from([(
                        NAMESPACE_NAME_LABEL.to_owned(),
                        namespace.to_owned(),
                    )]))
            })
    }
}

/// A host port a container binds on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub port: i32,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

/// Everything the packer needs to know about one pod.
#[derive(Debug, Clone)]
pub struct SchedPod {
    pub pod: PodRef,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// Creation time in milliseconds since the epoch (0 if unknown).
    pub created_millis: i64,
    /// Effective requests (max of init containers vs sum of containers, plus
    /// overhead), with `pods = 1`.
    pub requests: Resources,
    pub node_selector: Requirements,
    /// Required node affinity: any one of these terms (OR). Empty = none.
    /// This and the two below come from the pod's `affinity`: pods read
    /// one after another with the same affinity share them (`PodReader`).
    pub required_terms: SharedList<Requirements>,
    /// Preferred node affinity terms with their weights.
    pub preferred_terms: SharedList<(i32, Requirements)>,
    pub tolerations: Vec<Toleration>,
    pub spreads: Vec<Spread>,
    pub affinity: SharedList<AffinityTerm>,
    pub host_ports: Vec<HostPort>,
    /// Owned by a DaemonSet.
    pub daemon: bool,
    /// What the pod's persistent volumes require of its node (a zone); see
    /// [`SchedPod::from_pod_with_volumes`]. Never relaxed.
    pub volume: Requirements,
    /// The volumes it attaches, per CSI driver (`volumes::attachments`),
    /// held to the attach limits of existing nodes; empty unless read
    /// with the volumes.
    pub attachments: Vec<volumes::Attachment>,
}

/// How far a pod's preferences have been relaxed. Each step drops one more
/// preference, in Karpenter's order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Relaxation {
    /// Index of the required node affinity term in use.
    pub term: u8,
    pub dropped_pod_affinity: u8,
    pub dropped_pod_anti_affinity: u8,
    pub dropped_node_preferences: u8,
    pub dropped_soft_spreads: bool,
    pub tolerate_prefer_no_schedule: bool,
}

/// The constraints of a pod at one relaxation: all of them are hard.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Constraints {
    /// nodeSelector ∩ one required term ∩ the kept preferred node terms ∩
    /// the volumes' requirements.
    pub node: Requirements,
    /// When the volumes add requirements: `node` without them. Topology
    /// spreads count their domains over this, as kube-scheduler does (its
    /// nodeAffinityPolicy looks at the pod's affinity, not its volumes).
    pub spread_scope: Option<Requirements>,
    pub spreads: Vec<Spread>,
    pub affinity: Vec<AffinityTerm>,
    pub tolerations: Vec<Toleration>,
    pub ignore_prefer_no_schedule: bool,
}

/// Reads the pods of a listing one after another, as
/// [`SchedPod::from_pod`] reads each, errors included. A listing gives a
/// workload's pods one after another, each with the same `affinity`: the
/// reader converts it once and gives every pod after it in the same
/// namespace with an equal `affinity` the same lists (`SharedList`)
/// instead of converting it again (its node terms, label selectors and
/// namespaces are most of a pod's reading).
#[derive(Debug, Default)]
pub struct PodReader {
    last: Option<AffinityMemo>,
}

/// The last `affinity` converted, in its pod's namespace (a pod affinity
/// term without namespaces counts the pod's own), and what it gave.
#[derive(Debug)]
struct AffinityMemo {
    namespace: String,
    source: Affinity,
    converted: ConvertedAffinity,
}

/// What a pod's `affinity` gives.
#[derive(Debug, Clone, Default)]
struct ConvertedAffinity {
    required_terms: SharedList<Requirements>,
    preferred_terms: SharedList<(i32, Requirements)>,
    affinity: SharedList<AffinityTerm>,
}

impl PodReader {
    pub fn new() -> Self {
        PodReader::default()
    }

    /// [`SchedPod::from_pod`].
    pub fn read(&mut self, p: &Pod) -> Result<SchedPod, PodError> {
        SchedPod::read(p, Some(&mut self.last))
    }

    /// [`SchedPod::from_pod_with_volumes`].
    pub fn read_with_volumes(
        &mut self,
        p: &Pod,
        index: &VolumeIndex,
    ) -> Result<SchedPod, PodError> {
        let sp = self.read(p)?;
        sp.with_volumes(p, index)
    }
}

impl SchedPod {
    /// Reads a pod. Malformed quantities, operators or selectors are errors
    /// that name the pod and the field. (Many pods: [`PodReader`].)
    pub fn from_pod(p: &Pod) -> Result<SchedPod, PodError> {
        SchedPod::read(p, None)
    }

    /// Reads a pod, reusing the conversion of the last `affinity` in
    /// `memo` when this pod's is the same (and remembering this one's).
    fn read(p: &Pod, memo: Option<&mut Option<AffinityMemo>>) -> Result<SchedPod, PodError> {
        let namespace = p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = p.metadata.name.clone().unwrap_or_default();
        // Read in place: the spec is borrowed, not copied, and the error's
        // names (the pod's, a field's) are formatted only when there is an
        // error. Reading thousands of pods at once, these were most of the
        // reading's time.
        let no_spec;
        let spec = match &p.spec {
            Some(spec) => spec,
            None => {
                no_spec = PodSpec::default();
                &no_spec
            }
        };
        let pod_name = || format!("{namespace}/{name}");
        let req_err = |field: String, source| PodError::Requirement {
            pod: pod_name(),
            field,
            source,
        };
        let invalid = |field: &str, reason: String| PodError::Invalid {
            pod: pod_name(),
            field: field.to_owned(),
            reason,
        };

        // Without an affinity there is nothing to convert; with the same one
        // as the last pod's, in the same namespace, its conversion is reused.
        let source = spec.affinity.as_ref();
        let reused = match (source, memo.as_deref()) {
            (None, _) => Some(ConvertedAffinity::default()),
            (Some(a), Some(Some(m))) if m.namespace == namespace && m.source == *a => {
                Some(m.converted.clone())
            }
            _ => None,
        };

        let requests = effective_requests(
            &spec.containers,
            spec.init_containers.as_deref().unwrap_or(&[]),
            spec.overhead.as_ref(),
            spec.resources.as_ref(),
        )
        .map_err(|(field, source)| PodError::Quantity {
            pod: pod_name(),
            field,
            source,
        })?;

        let node_selector = Requirements::from_labels(spec.node_selector.iter().flatten());
        let node_affinity = source
            .filter(|_| reused.is_none())
            .and_then(|a| a.node_affinity.as_ref());
        let mut required_terms = Vec::new();
        if let Some(sel) = node_affinity.and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        }) {
            for (i, term) in sel.node_selector_terms.iter().enumerate() {
                required_terms.push(term_requirements(term).map_err(|e| {
                    req_err(
                        format!("spec.affinity.nodeAffinity.required.nodeSelectorTerms[{i}]"),
                        e,
                    )
                })?);
            }
        }
        let mut preferred_terms = Vec::new();
        for (i, p) in node_affinity
            .and_then(|n| {
                n.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .enumerate()
        {
            let reqs = term_requirements(&p.preference)
                .map_err(|e| req_err(format!("spec.affinity.nodeAffinity.preferred[{i}]"), e))?;
            preferred_terms.push((p.weight, reqs));
        }

        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .map(Toleration::from_k8s)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|r| invalid("spec.tolerations", r))?;

        let labels = p.metadata.labels.clone().unwrap_or_default();
        let mut spreads = Vec::new();
        for (i, c) in spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .enumerate()
        {
            let field = || format!("spec.topologySpreadConstraints[{i}]");
            let hard = match c.when_unsatisfiable.as_str() {
                "DoNotSchedule" => true,
                "ScheduleAnyway" => false,
                other => {
                    return Err(invalid(
                        &field(),
                        format!("unknown whenUnsatisfiable {other:?}"),
                    ));
                }
            };
            let honor_node_affinity = match c.node_affinity_policy.as_deref() {
                None | Some("Honor") => true,
                Some("Ignore") => false,
                Some(other) => {
                    return Err(invalid(
                        &field(),
                        format!("unknown nodeAffinityPolicy {other:?}"),
                    ));
                }
            };
            let honor_node_taints = match c.node_taints_policy.as_deref() {
                None | Some("Ignore") => false,
                Some("Honor") => true,
                Some(other) => {
                    return Err(invalid(
                        &field(),
                        format!("unknown nodeTaintsPolicy {other:?}"),
                    ));
                }
            };
            if c.max_skew < 1 {
                return Err(invalid(
                    &field(),
                    format!("maxSkew must be at least 1, got {}", c.max_skew),
                ));
            }
            let mut selector_src = c.label_selector.clone().unwrap_or_default();
            // matchLabelKeys: the pod's own values of these keys join the selector.
            for k in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(k) {
                    selector_src
                        .match_labels
                        .get_or_insert_with(BTreeMap::new)
                        .insert(k.clone(), v.clone());
                }
            }
            let selector = if c.label_selector.is_none() && c.match_label_keys.is_none() {
                // No selector selects nothing: the constraint cannot be skewed by anyone.
                LabelSelector::from_labels(&BTreeMap::from([(
                    String::from("\u{0}none"),
                    String::new(),
                )]))
            } else {
                LabelSelector::from_k8s(&selector_src).map_err(|e| req_err(field(), e))?
            };
            spreads.push(Spread {
                key: labels::normalize(&c.topology_key).to_owned(),
                max_skew: c.max_skew as u32,
                hard,
                selector,
                min_domains: c.min_domains.filter(|m| *m > 0).map(|m| m as u32),
                honor_node_affinity,
                honor_node_taints,
            });
        }

        let mut affinity = Vec::new();
        let aff = source.filter(|_| reused.is_none());
        let mut push_terms = |anti: bool,
                              required: Option<&Vec<PodAffinityTerm>>,
                              preferred: Vec<(i32, &PodAffinityTerm)>,
                              field: &str|
         -> Result<(), PodError> {
            let all = required
                .into_iter()
                .flatten()
                .map(|t| (None, t))
                .chain(preferred.into_iter().map(|(w, t)| (Some(w), t)));
            for (i, (weight, t)) in all.enumerate() {
                let f = || format!("{field}[{i}]");
                let selector = match &t.label_selector {
                    Some(s) => LabelSelector::from_k8s(s).map_err(|e| req_err(f(), e))?,
                    None => continue, // a term without a selector matches no pods
                };
                let ns_selector = t
                    .namespace_selector
                    .as_ref()
                    .map(LabelSelector::from_k8s)
                    .transpose()
                    .map_err(|e| req_err(format!("{}.namespaceSelector", f()), e))?;
                let mut names = t.namespaces.clone().unwrap_or_default();
                if names.is_empty() && ns_selector.is_none() {
                    names.push(namespace.clone());
                }
                names.sort();
                names.dedup();
                let namespaces = Namespaces {
                    names,
                    selector: ns_selector,
                };
                affinity.push(AffinityTerm {
                    anti,
                    key: labels::normalize(&t.topology_key).to_owned(),
                    selector,
                    namespaces,
                    weight,
                });
            }
            Ok(())
        };
        if let Some(pa) = aff.and_then(|a| a.pod_affinity.as_ref()) {
            let pref = pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|w| (w.weight, &w.pod_affinity_term))
                .collect();
            push_terms(
                false,
                pa.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                pref,
                "spec.affinity.podAffinity",
            )?;
        }
        if let Some(pa) = aff.and_then(|a| a.pod_anti_affinity.as_ref()) {
            let pref = pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|w| (w.weight, &w.pod_affinity_term))
                .collect();
            push_terms(
                true,
                pa.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                pref,
                "spec.affinity.podAntiAffinity",
            )?;
        }

        let mut host_ports = Vec::new();
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            for port in c.ports.iter().flatten() {
                if let Some(hp) = port.host_port.filter(|p| *p > 0) {
                    let protocol = match port.protocol.as_deref() {
                        None | Some("TCP") => Protocol::Tcp,
                        Some("UDP") => Protocol::Udp,
                        Some("SCTP") => Protocol::Sctp,
                        Some(other) => {
                            return Err(invalid(
                                "spec.containers[].ports[].protocol",
                                format!("unknown protocol {other:?}"),
                            ));
                        }
                    };
                    host_ports.push(HostPort { port: hp, protocol });
                }
            }
        }
        host_ports.sort();
        host_ports.dedup();

        let daemon = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet");
        let ConvertedAffinity {
            required_terms,
            preferred_terms,
            affinity,
        } = match reused {
            Some(converted) => converted,
            None => {
                let converted = ConvertedAffinity {
                    required_terms: required_terms.into(),
                    preferred_terms: preferred_terms.into(),
                    affinity: affinity.into(),
                };
                if let (Some(memo), Some(source)) = (memo, source) {
                    *memo = Some(AffinityMemo {
                        namespace: namespace.clone(),
                        source: source.clone(),
                        converted: converted.clone(),
                    });
                }
                converted
            }
        };
        Ok(SchedPod {
            pod: PodRef { namespace, name },
            uid: p.metadata.uid.clone().unwrap_or_default(),
            labels,
            created_millis: p
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0),
            requests,
            node_selector,
            required_terms,
            preferred_terms,
            tolerations,
            spreads,
            affinity,
            host_ports,
            daemon,
            volume: Requirements::new(),
            attachments: Vec::new(),
        })
    }

    /// [`SchedPod::from_pod`], plus the requirements of the pod's
    /// PVC-backed volumes looked up in `index`; a volume no new node can
    /// hold is an error naming it.
    pub fn from_pod_with_volumes(p: &Pod, index: &VolumeIndex) -> Result<SchedPod, PodError> {
        SchedPod::from_pod(p)?.with_volumes(p, index)
    }

    /// This pod (read from `p`) with its volumes' requirements and
    /// attachments looked up in `index`.
    fn with_volumes(self, p: &Pod, index: &VolumeIndex) -> Result<SchedPod, PodError> {
        let mut sp = self;
        let alternatives =
            volumes::alternatives(p, index).map_err(|(volume, source)| PodError::Volume {
                pod: sp.pod.to_string(),
                volume,
                source: Box::new(source),
            })?;
        sp.set_volume_alternatives(alternatives);
        sp.attachments = volumes::attachments(p, index);
        Ok(sp)
    }

    /// Takes the volumes' alternatives (never empty): one is the volume's
    /// requirements; several that differ on one key only are that key's
    /// union; otherwise what they share is the volume's, and the rest are
    /// crossed with the required node-affinity terms (ORed, tried in order
    /// as relaxation does), so each alternative is one way to place the pod.
    fn set_volume_alternatives(&mut self, mut alternatives: Vec<Requirements>) {
        if alternatives.len() <= 1 {
            self.volume = alternatives.pop().unwrap_or_default();
            return;
        }
        let first = alternatives[0].clone();
        let same_keys = alternatives.iter().all(|a| a.keys().eq(first.keys()));
        let differing: Vec<&str> = first
            .keys()
            .filter(|k| alternatives.iter().any(|a| a.get(k) != first.get(k)))
            .collect();
        if same_keys && differing.len() == 1 {
            let key = differing[0];
            let mut values = std::collections::BTreeSet::new();
            let finite = alternatives.iter().all(|a| {
                a.get(key)
                    .and_then(Requirement::finite_values)
                    .is_some_and(|v| {
                        values.extend(v.iter().cloned());
                        true
                    })
            });
            if finite {
                let mut volume = first.clone();
                volume.remove(key);
                volume.add(key, Requirement::any_of(values));
                self.volume = volume;
                return;
            }
        }
        let mut common = Requirements::new();
        for (key, req) in first.iter() {
            if alternatives.iter().all(|a| a.get(key) == Some(req)) {
                common.add(key, req.clone());
            }
        }
        let rest: Vec<Requirements> = alternatives
            .into_iter()
            .map(|mut a| {
                for key in common.keys() {
                    a.remove(key);
                }
                a
            })
            .collect();
        let terms = if self.required_terms.is_empty() {
            vec![Requirements::new()]
        } else {
            std::mem::take(&mut self.required_terms).to_vec()
        };
        let mut crossed = Vec::new();
        for t in &terms {
            for a in &rest {
                let joined = t.intersection(a);
                if joined.iter().all(|(_, r)| !r.is_empty()) {
                    crossed.push(joined);
                }
            }
        }
        if crossed.is_empty() {
            crossed.push(terms[0].intersection(&rest[0]));
        }
        self.required_terms = crossed.into();
        self.volume = common;
    }

    /// The constraints that hold at relaxation `r`.
    pub fn constraints(&self, r: &Relaxation) -> Constraints {
        // What a spread counts its domains over: the pod's nodeSelector and
        // required affinity only, as kube-scheduler's nodeAffinityPolicy
        // Honor does (preferences and volumes narrow the node, not the domains).
        let mut scope = self.node_selector.clone();
        if let Some(term) = self.required_terms.get(usize::from(r.term)) {
            scope.add_all(term);
        }
        let mut node = scope.clone();
        // As Karpenter: the heaviest preferred term still kept applies alone
        // (the terms are alternatives, each worth its weight); relaxing drops
        // it and the next heaviest applies.
        if let Some((_, reqs)) = by_weight(&self.preferred_terms, |(w, _)| *w)
            .into_iter()
            .nth(usize::from(r.dropped_node_preferences))
        {
            node.add_all(reqs);
        }
        node.add_all(&self.volume);
        let spread_scope = (node != scope).then_some(scope);
        let spreads = self
            .spreads
            .iter()
            .filter(|s| s.hard || !r.dropped_soft_spreads)
            .cloned()
            .collect();
        let mut affinity: Vec<AffinityTerm> = self
            .affinity
            .iter()
            .filter(|t| t.weight.is_none())
            .cloned()
            .collect();
        let pref = |anti: bool| {
            self.affinity
                .iter()
                .filter(move |t| t.anti == anti && t.weight.is_some())
                .collect::<Vec<_>>()
        };
        let kept = |terms: Vec<&AffinityTerm>, dropped: u8| {
            by_weight(&terms, |t| t.weight.unwrap_or(0))
                .into_iter()
                .skip(usize::from(dropped))
                .map(|t| (*t).clone())
                .collect::<Vec<_>>()
        };
        affinity.extend(kept(pref(false), r.dropped_pod_affinity));
        affinity.extend(kept(pref(true), r.dropped_pod_anti_affinity));
        Constraints {
            node,
            spread_scope,
            spreads,
            affinity,
            tolerations: self.tolerations.clone(),
            ignore_prefer_no_schedule: r.tolerate_prefer_no_schedule,
        }
    }

    /// The relaxation that drops every preference at once (required terms
    /// and PreferNoSchedule taints stay as they are).
    pub fn without_preferences(&self) -> Relaxation {
        let count = |anti: bool| {
            self.affinity
                .iter()
                .filter(|t| t.anti == anti && t.weight.is_some())
                .count() as u8
        };
        Relaxation {
            dropped_pod_affinity: count(false),
            dropped_pod_anti_affinity: count(true),
            dropped_node_preferences: self.preferred_terms.len() as u8,
            dropped_soft_spreads: self.spreads.iter().any(|s| !s.hard),
            ..Relaxation::default()
        }
    }

    /// The next relaxation, or `None` when nothing is left to relax:
    /// further required terms, then the heaviest preferred pod affinity,
    /// pod anti-affinity, node affinity, then ScheduleAnyway spreads, then
    /// PreferNoSchedule taints.
    pub fn relax(&self, r: &Relaxation) -> Option<Relaxation> {
        let mut n = *r;
        let count = |anti: bool| {
            self.affinity
                .iter()
                .filter(|t| t.anti == anti && t.weight.is_some())
                .count()
        };
        if usize::from(r.term) + 1 < self.required_terms.len() {
            n.term += 1;
        } else if usize::from(r.dropped_pod_affinity) < count(false) {
            n.dropped_pod_affinity += 1;
        } else if usize::from(r.dropped_pod_anti_affinity) < count(true) {
            n.dropped_pod_anti_affinity += 1;
        } else if usize::from(r.dropped_node_preferences) < self.preferred_terms.len() {
            n.dropped_node_preferences += 1;
        } else if !r.dropped_soft_spreads && self.spreads.iter().any(|s| !s.hard) {
            n.dropped_soft_spreads = true;
        } else if !r.tolerate_prefer_no_schedule {
            n.tolerate_prefer_no_schedule = true;
        } else {
            return None;
        }
        Some(n)
    }
}

/// Items sorted heaviest first, keeping the written order among equals.
fn by_weight<T>(items: &[T], weight: impl Fn(&T) -> i32) -> Vec<&T> {
    let mut v: Vec<&T> = items.iter().collect();
    v.sort_by_key(|t| std::cmp::Reverse(weight(t)));
    v
}

fn term_requirements(term: &NodeSelectorTerm) -> Result<Requirements, RequirementError> {
    Requirements::from_node_selector(term.match_expressions.as_deref().unwrap_or(&[]))
}

type QuantityFieldError = (String, QuantityError);

/// A container's requests; `field` names it, called only on an error.
fn container_requests(
    c: &Container,
    field: impl Fn() -> String,
) -> Result<Resources, QuantityFieldError> {
    let mut r = Resources::default();
    if let Some(res) = &c.resources {
        // A limit without a request is the request (Kubernetes defaulting).
        for (name, q) in res.limits.iter().flatten() {
            r.set(name, &q.0)
                .map_err(|e| (format!("{}.resources.limits.{name}", field()), e))?;
        }
        for (name, q) in res.requests.iter().flatten() {
            r.set(name, &q.0)
                .map_err(|e| (format!("{}.resources.requests.{name}", field()), e))?;
        }
    }
    Ok(r)
}

/// max(sum of containers + sidecars, each init container + the sidecars
/// started before it) + pod overhead, with `pods = 1`. Pod-level resources
/// (`spec.resources`, CPU, memory and huge pages) replace the containers'
/// figure for what they name; a pod-level limit without a request is the
/// request when no container requests that resource (Kubernetes defaulting).
fn effective_requests(
    containers: &[Container],
    init: &[Container],
    overhead: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    pod_level: Option<&ResourceRequirements>,
) -> Result<Resources, QuantityFieldError> {
    let mut sum = Resources::default();
    for (i, c) in containers.iter().enumerate() {
        sum.add(&container_requests(c, || format!("spec.containers[{i}]"))?);
    }
    let mut sidecars = Resources::default();
    let mut init_max = Resources::default();
    for (i, c) in init.iter().enumerate() {
        let r = container_requests(c, || format!("spec.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_max.max_each(&sidecars);
        } else {
            let mut with_sidecars = r;
            with_sidecars.add(&sidecars);
            init_max.max_each(&with_sidecars);
        }
    }
    sum.add(&sidecars);
    sum.max_each(&init_max);
    if let Some(res) = pod_level {
        let supported = |name: &str| {
            name == resources::CPU || name == resources::MEMORY || name.starts_with("hugepages-")
        };
        let requested = res.requests.iter().flatten();
        let limited = res.limits.iter().flatten().filter(|(name, _)| {
            !res.requests.as_ref().is_some_and(|r| r.contains_key(*name)) && sum.get(name) == 0
        });
        let limited: Vec<_> = limited.collect();
        for (kind, (name, q)) in requested
            .map(|e| ("requests", e))
            .chain(limited.into_iter().map(|e| ("limits", e)))
        {
            if supported(name) {
                sum.set(name, &q.0)
                    .map_err(|e| (format!("spec.resources.{kind}.{name}"), e))?;
            }
        }
    }
    if let Some(o) = overhead {
        sum.add(&Resources::from_list(o).map_err(|e| ("spec.overhead".to_owned(), e))?);
    }
    sum.pods = 1;
    Ok(sum)
}

/// True when a pod needs new capacity, exactly as Karpenter decides: the
/// scheduler marked it Unschedulable, it has no node and no nomination, and
/// it is not a DaemonSet's or a static (mirror) pod.
pub fn is_provisionable(p: &Pod) -> bool {
    let unschedulable = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    let no_node = p
        .spec
        .as_ref()
        .is_none_or(|s| s.node_name.as_deref().unwrap_or("").is_empty());
    let not_nominated = p
        .status
        .as_ref()
        .is_none_or(|s| s.nominated_node_name.as_deref().unwrap_or("").is_empty());
    let owned_by_daemon_or_node = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" || o.kind == "Node");
    unschedulable && no_node && not_nominated && !owned_by_daemon_or_node
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::MIB;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod json")
    }

    #[test]
    fn effective_requests_take_init_max_and_overhead() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}},
                    {"name": "b", "resources": {"limits": {"cpu": "250m", "memory": "128Mi"}}}
                ],
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}
                ],
                "overhead": {"cpu": "100m"}
            }
        }));
        let sp = SchedPod::from_pod(&p).expect("valid");
        assert_eq!(sp.requests.cpu_millis, 2100);
        assert_eq!(sp.requests.memory_bytes, 384 * MIB);
        assert_eq!(sp.requests.pods, 1);
        assert_eq!(sp.pod.to_string(), "ns/a");
    }

    #[test]
    fn pod_level_resources_replace_the_containers_figure() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}],
                "resources": {"requests": {"cpu": "1950m"}, "limits": {"cpu": "2", "memory": "2Gi"}},
                "overhead": {"cpu": "50m"}
            }
        }));
        let sp = SchedPod::from_pod(&p).expect("valid");
        assert_eq!(
            sp.requests.cpu_millis, 2000,
            "pod-level request plus overhead"
        );
        assert_eq!(
            sp.requests.memory_bytes,
            1024 * MIB,
            "a pod-level limit does not replace a container's request"
        );
        assert_eq!(sp.requests.extended("nvidia.com/gpu"), 1);

        let p = pod(serde_json::json!({
            "metadata": {"name": "b"},
            "spec": {
                "containers": [{"name": "a"}],
                "resources": {"limits": {"cpu": "3", "memory": "2Gi"}}
            }
        }));
        let sp = SchedPod::from_pod(&p).expect("valid");
        assert_eq!(sp.requests.cpu_millis, 3000, "a lone limit is the request");
        assert_eq!(sp.requests.memory_bytes, 2048 * MIB);

        let p = pod(serde_json::json!({
            "metadata": {"name": "c"},
            "spec": {"containers": [{"name": "a"}], "resources": {"requests": {"cpu": "lots"}}}
        }));
        let err = SchedPod::from_pod(&p).expect_err("malformed");
        assert!(
            err.to_string().contains("spec.resources.requests.cpu"),
            "{err}"
        );
    }

    #[test]
    fn affinity_terms_count_the_namespaces_named_or_selected() {
        let term = |extra: serde_json::Value| {
            let mut t = serde_json::json!({
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "db"}}
            });
            t.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            let p = pod(serde_json::json!({
                "metadata": {"name": "a", "namespace": "web"},
                "spec": {
                    "containers": [{"name": "a"}],
                    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [t]}}
                }
            }));
            let sp = SchedPod::from_pod(&p).expect("valid");
            sp.constraints(&Relaxation::default()).affinity[0]
                .namespaces
                .clone()
        };
        let own = term(serde_json::json!({}));
        assert!(own.contains("web") && !own.contains("db"), "{own:?}");
        let named = term(serde_json::json!({"namespaces": ["db"]}));
        assert!(named.contains("db") && !named.contains("web"), "{named:?}");
        let every = term(serde_json::json!({"namespaceSelector": {}}));
        assert!(
            every.contains("web") && every.contains("anything"),
            "{every:?}"
        );
        let by_name = term(serde_json::json!({
            "namespaces": ["cache"],
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["db"]}
            ]}
        }));
        assert!(
            by_name.contains("db") && by_name.contains("cache") && !by_name.contains("web"),
            "{by_name:?}"
        );
        let by_label =
            term(serde_json::json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}));
        assert!(
            !by_label.contains("web"),
            "other namespace labels are not known"
        );
    }

    #[test]
    fn sidecars_add_to_the_sum() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                    {"name": "migrate", "resources": {"requests": {"cpu": "1"}}}
                ]
            }
        }));
        assert_eq!(
            SchedPod::from_pod(&p).expect("valid").requests.cpu_millis,
            1200
        );
    }

    #[test]
    fn a_reader_reads_as_from_pod_and_shares_an_affinity_read_again() {
        let affinity = |zone: &str| {
            serde_json::json!({
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}
                        ]}}
                    ]
                },
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}}}}
                ]}
            })
        };
        let at = |name: &str, namespace: &str, affinity: serde_json::Value, tolerations| {
            pod(serde_json::json!({
                "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                         "affinity": affinity, "tolerations": tolerations}
            }))
        };
        let none = serde_json::json!([]);
        let pods = [
            at("a", "ns", affinity("z1"), none.clone()),
            at("b", "ns", affinity("z1"), none.clone()),
            // The same affinity in another namespace: its term counts that one.
            at("c", "other", affinity("z1"), none.clone()),
            at("d", "other", affinity("z2"), none.clone()),
            // A pod that does not read: the same error, the next pod unharmed.
            at(
                "e",
                "other",
                affinity("z2"),
                serde_json::json!([{"operator": "Sometimes"}]),
            ),
            at("f", "other", affinity("z2"), none.clone()),
            at("g", "other", serde_json::Value::Null, none),
        ];
        let mut reader = PodReader::new();
        let read: Vec<_> = pods.iter().map(|p| reader.read(p)).collect();
        for (p, r) in pods.iter().zip(&read) {
            assert_eq!(
                format!("{r:?}"),
                format!("{:?}", SchedPod::from_pod(p)),
                "{:?}",
                p.metadata.name
            );
        }
        let ok = |i: usize| read[i].as_ref().expect("reads");
        assert!(read[4].is_err());
        let shared = |i: usize, j: usize| {
            let (a, b) = (ok(i), ok(j));
            a.affinity.shares_with(&b.affinity)
                && a.required_terms.shares_with(&b.required_terms)
                && a.preferred_terms.shares_with(&b.preferred_terms)
        };
        assert!(shared(0, 1));
        assert!(!shared(1, 2));
        assert_eq!(ok(2).affinity[0].namespaces.names, ["other"]);
        assert!(!shared(2, 3));
        assert!(shared(3, 5));
        assert!(ok(6).affinity.is_empty() && ok(6).preferred_terms.is_empty());
        assert_eq!(ok(0).affinity.len(), 1);
        assert_eq!(ok(0).required_terms.len(), 1);
        assert_eq!(ok(0).preferred_terms.len(), 1);
    }

    #[test]
    fn malformed_pods_are_errors_naming_the_field() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}
        }));
        let e = SchedPod::from_pod(&p).expect_err("bad quantity");
        assert!(
            e.to_string().contains(
                "ns/bad: spec.containers[0].resources.requests.cpu: malformed quantity \"lots\""
            ),
            "{e}"
        );

        let p = pod(serde_json::json!({
            "metadata": {"name": "bad"},
            "spec": {"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}]}}}}
        }));
        let e = SchedPod::from_pod(&p).expect_err("bad operator");
        assert!(e.to_string().contains("unknown operator \"Near\""), "{e}");
        assert!(
            e.to_string()
                .contains("default/bad: spec.affinity.nodeAffinity.required.nodeSelectorTerms[0]:"),
            "{e}"
        );

        // The names are formatted only on an error: each names its field
        // and index as the pod states it.
        let cases = [
            (
                serde_json::json!({"initContainers": [
                    {"name": "i"},
                    {"name": "j", "resources": {"limits": {"memory": "much"}}}
                ]}),
                "ns/bad: spec.initContainers[1].resources.limits.memory:",
            ),
            (
                serde_json::json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": []}},
                    {"weight": 2, "preference": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}
                ]}}}),
                "ns/bad: spec.affinity.nodeAffinity.preferred[1]:",
            ),
            (
                serde_json::json!({"topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "Sometimes"}
                ]}),
                "ns/bad: spec.topologySpreadConstraints[1]: unknown whenUnsatisfiable",
            ),
            (
                serde_json::json!({"topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}
                ]}),
                "ns/bad: spec.topologySpreadConstraints[0]:",
            ),
            (
                serde_json::json!({"affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "k", "labelSelector": {"matchLabels": {"app": "x"}}}
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "k",
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}}
                ]}}}),
                "ns/bad: spec.affinity.podAntiAffinity[1]:",
            ),
            (
                serde_json::json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "k", "labelSelector": {"matchLabels": {"app": "x"}},
                     "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Near"}]}}
                ]}}}),
                "ns/bad: spec.affinity.podAffinity[0].namespaceSelector:",
            ),
        ];
        for (extra, want) in cases {
            let mut spec = serde_json::json!({"containers": []});
            for (k, v) in extra.as_object().expect("an object") {
                spec[k] = v.clone();
            }
            let p = pod(serde_json::json!({
                "metadata": {"name": "bad", "namespace": "ns"},
                "spec": spec,
            }));
            let e = SchedPod::from_pod(&p).expect_err(want);
            assert!(e.to_string().contains(want), "{e} should name {want}");
        }
    }

    #[test]
    fn relaxation_order() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "labels": {"app": "x"}},
            "spec": {
                "containers": [],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
                            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}
                        ]},
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}}
                        ]
                    },
                    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}},
                        {"weight": 50, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "x"}}}}
                    ]}
                },
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "x"}}}
                ]
            }
        }));
        let sp = SchedPod::from_pod(&p).expect("valid");
        let mut r = Relaxation::default();
        let c = sp.constraints(&r);
        assert!(
            c.node.allows(labels::ZONE, Some("a"))
                && c.node.allows(labels::ARCH, Some("arm64"))
                && !c.node.allows(labels::ARCH, Some("amd64"))
        );
        assert_eq!((c.affinity.len(), c.spreads.len()), (2, 1));
        let mut steps = Vec::new();
        while let Some(n) = sp.relax(&r) {
            r = n;
            let c = sp.constraints(&r);
            steps.push((
                c.node.allows(labels::ZONE, Some("b")),
                c.affinity.iter().map(|t| t.key.clone()).collect::<Vec<_>>(),
                c.node.allows(labels::ARCH, Some("amd64")),
                c.spreads.len(),
                c.ignore_prefer_no_schedule,
            ));
        }
        assert_eq!(
            steps,
            vec![
                (
                    true,
                    vec![labels::ZONE.to_owned(), labels::HOSTNAME.to_owned()],
                    false,
                    1,
                    false
                ), // second OR term
                (true, vec![labels::HOSTNAME.to_owned()], false, 1, false), // heaviest anti-affinity (weight 50) dropped
                (true, vec![], false, 1, false),
                (true, vec![], true, 1, false), // preferred node affinity dropped
                (true, vec![], true, 0, false), // ScheduleAnyway spreads dropped
                (true, vec![], true, 0, true),  // PreferNoSchedule tolerated
            ]
        );
    }

    #[test]
    fn spreads_read_their_node_affinity_policy() {
        let spread = |policy: Option<&str>| {
            let mut c = serde_json::json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "x"}}});
            if let Some(p) = policy {
                c["nodeAffinityPolicy"] = serde_json::json!(p);
            }
            SchedPod::from_pod(&pod(serde_json::json!({
                "metadata": {"name": "a"},
                "spec": {"containers": [{"name": "a"}], "topologySpreadConstraints": [c]}
            })))
        };
        let honor = |p: Option<&str>| {
            spread(p)
                .expect("valid")
                .constraints(&Relaxation::default())
                .spreads[0]
                .honor_node_affinity
        };
        assert!(honor(None) && honor(Some("Honor")) && !honor(Some("Ignore")));
        let err = spread(Some("Sometimes")).expect_err("unknown policy");
        assert!(err.to_string().contains("nodeAffinityPolicy"), "{err}");
    }

    #[test]
    fn provisionable_pods() {
        let unsched = serde_json::json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        assert!(is_provisionable(&pod(
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": []}, "status": unsched})
        )));
        assert!(!is_provisionable(&pod(
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": [], "nodeName": "n"}, "status": unsched})
        )));
        assert!(!is_provisionable(&pod(
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": []}, "status": {"nominatedNodeName": "n", "conditions": unsched["conditions"]}})
        )));
        assert!(!is_provisionable(&pod(
            serde_json::json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}, "spec": {"containers": []}, "status": unsched})
        )));
        assert!(!is_provisionable(&pod(
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": []}})
        )));
    }
}
