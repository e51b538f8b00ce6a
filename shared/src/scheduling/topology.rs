//! Topology: spread constraints and pod (anti-)affinity, counted per domain.
//!
//! Every distinct constraint (kind, topology key, selector, namespaces) is a
//! *group* that counts, per domain, the pods its selector matches. A domain
//! is a value of the topology key (a zone, a capacity type) or, for
//! `kubernetes.io/hostname`, one node or planned claim (a *host*).
//!
//! Checking a pod against a candidate host yields either a rejection or the
//! extra requirements the pod adds there — a spread pins an undecided claim
//! to the zone with the fewest matching pods, an affinity to a zone that has
//! its peers. Anti-affinity is symmetric: a pod may not land where a pod
//! whose anti-affinity selects it already is ("inverse" groups).
//!
//! As in Karpenter, the minimum count for hostname spreads is 0 (a new node
//! can always be made), and a pod whose domain is still undecided when it is
//! recorded is not counted for spreads (anti-affinity owners are counted in
//! every domain they might land in, to stay safe).

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::labels;
use super::pod::{AffinityTerm, Constraints, Namespaces, Spread};
use super::requirements::{Requirement, Requirements};
use super::selector::LabelSelector;
use super::taints::{Taint, Toleration, first_untolerated};

pub type GroupId = u32;
/// A node or a planned claim, numbered densely.
pub type HostId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Spread {
        max_skew: u32,
        min_domains: Option<u32>,
        honor_node_affinity: bool,
        honor_node_taints: bool,
    },
    Affinity,
    AntiAffinity,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub kind: Kind,
    pub key: String,
    pub selector: LabelSelector,
    /// Namespaces whose pods count.
    pub namespaces: Namespaces,
    /// A spread that honours node taints: its owners' tolerations. A pod
    /// counts only on a node whose taints they tolerate, and only such
    /// nodes' domains count (kube-scheduler's `nodeTaintsPolicy: Honor`).
    pub tolerations: Option<Vec<Toleration>>,
}

impl GroupKey {
    pub fn spread(s: &Spread, namespace: &str, tolerations: &[Toleration]) -> Self {
        GroupKey {
            kind: Kind::Spread {
                max_skew: s.max_skew,
                min_domains: s.min_domains,
                honor_node_affinity: s.honor_node_affinity,
                honor_node_taints: s.honor_node_taints,
            },
            key: s.key.clone(),
            selector: s.selector.clone(),
            namespaces: Namespaces::only(namespace),
            tolerations: s.honor_node_taints.then(|| {
                let mut t = tolerations.to_vec();
                t.sort();
                t.dedup();
                t
            }),
        }
    }

    pub fn affinity(t: &AffinityTerm) -> Self {
        GroupKey {
            kind: if t.anti {
                Kind::AntiAffinity
            } else {
                Kind::Affinity
            },
            key: t.key.clone(),
            selector: t.selector.clone(),
            namespaces: t.namespaces.clone(),
            tolerations: None,
        }
    }

    fn describe(&self) -> String {
        match self.kind {
            Kind::Spread { max_skew, .. } => {
                format!("topology spread on {} (maxSkew {max_skew})", self.key)
            }
            Kind::Affinity => format!("pod affinity on {}", self.key),
            Kind::AntiAffinity => format!("pod anti-affinity on {}", self.key),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Counts {
    by_value: FxHashMap<String, u32>,
    by_host: Vec<u32>,
    total: u32,
}

impl Counts {
    fn value(&self, v: &str) -> u32 {
        self.by_value.get(v).copied().unwrap_or(0)
    }
    fn host(&self, h: HostId) -> u32 {
        self.by_host.get(h as usize).copied().unwrap_or(0)
    }
    fn add_host(&mut self, h: HostId) {
        let i = h as usize;
        if self.by_host.len() <= i {
            self.by_host.resize(i + 1, 0);
        }
        self.by_host[i] += 1;
    }
}

#[derive(Debug, Clone)]
struct Group {
    key: GroupKey,
    hostname: bool,
    /// Every value of the key a node can have (empty for hostname and unknown keys).
    domains: Vec<String>,
    /// Pods the selector matches.
    matched: Counts,
    /// Pods that carry this (anti-affinity) constraint.
    owners: Counts,
}

/// The groups one pod (at one relaxation) takes part in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodTopology {
    /// Constraints the pod carries, with whether its own labels match the selector.
    owned: Vec<(GroupId, bool)>,
    /// Groups whose selector matches the pod (it counts there).
    matched: Vec<GroupId>,
    /// Anti-affinity groups whose selector matches the pod: their owners repel it.
    inverse: Vec<GroupId>,
    /// The owned anti-affinity groups of *required* terms: only these make
    /// the pod an owner that repels others. A preferred term binds the pod
    /// itself while it is kept, never the pods after it (as in Karpenter,
    /// which tracks no inverse preferences: a later pod relaxing its own
    /// copy of the term must be free of it).
    repels: Vec<GroupId>,
}

impl PodTopology {
    pub fn is_empty(&self) -> bool {
        self.owned.is_empty() && self.matched.is_empty() && self.inverse.is_empty()
    }
}

/// Where a pod might go: an existing node (labels decided) or a claim (requirements).
#[derive(Debug, Clone, Copy)]
pub enum Candidate<'a> {
    Node {
        host: HostId,
        labels: &'a BTreeMap<String, String>,
    },
    Claim {
        host: HostId,
        requirements: &'a Requirements,
    },
}

impl Candidate<'_> {
    fn host(&self) -> HostId {
        match self {
            Candidate::Node { host, .. } | Candidate::Claim { host, .. } => *host,
        }
    }
}

/// Why the topology refuses a pod on a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyReject {
    pub group: GroupId,
    /// The pod is repelled by another pod's anti-affinity (not its own constraint).
    pub inverse: bool,
    /// True when the refusal can never turn into an admission for the same
    /// candidate (host-level counts only grow).
    pub permanent: bool,
}

/// Where nodes with a domain value come from: a NodePool's new nodes or
/// one existing node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DomainSource {
    /// An existing node's labels; `None` for a NodePool, whose domains are
    /// filtered by taints only (as Karpenter's domain groups).
    pub node_labels: Option<BTreeMap<String, String>>,
    pub taints: Vec<Taint>,
}

/// Which sources offer each domain value, for spreads that count only the
/// domains of nodes the pod could use (`nodeAffinityPolicy` and
/// `nodeTaintsPolicy` set to `Honor`).
#[derive(Debug, Clone, Default)]
pub struct DomainSources {
    pub sources: Vec<DomainSource>,
    /// Key → value → the sources offering it. A value offered by an
    /// untainted NodePool is open to every pod and lists none; a value
    /// without an entry is open too.
    pub by_value: FxHashMap<String, FxHashMap<String, Vec<u32>>>,
}

impl DomainSources {
    /// Records that `source` offers `key=value`; `open` sources (untainted
    /// NodePools) make the value open to every pod.
    pub fn offer(&mut self, key: &str, value: &str, source: Option<u32>) {
        // The key is copied only the first time it is offered.
        if !self.by_value.contains_key(key) {
            self.by_value.insert(key.to_owned(), FxHashMap::default());
        }
        let Some(values) = self.by_value.get_mut(key) else {
            return;
        };
        match (values.get_mut(value), source) {
            // Already open: nothing narrows it.
            (Some(list), _) if list.is_empty() => {}
            (Some(list), Some(s)) => list.push(s),
            (Some(list), None) => list.clear(),
            (None, s) => {
                values.insert(value.to_owned(), s.into_iter().collect());
            }
        }
    }

    pub fn add(&mut self, source: DomainSource) -> u32 {
        self.sources.push(source);
        (self.sources.len() - 1) as u32
    }

    /// True when an untainted NodePool offers `key=value`.
    pub fn open_by_pool(&self, key: &str, value: &str) -> bool {
        self.by_value
            .get(key)
            .and_then(|m| m.get(value))
            .is_some_and(Vec::is_empty)
    }

    /// Whether some node with `key=value` counts for a spread of a pod
    /// whose node requirements are `scope` (when honouring node affinity)
    /// and whose tolerations are `tolerations` (when honouring taints).
    fn counts(
        &self,
        key: &str,
        value: &str,
        scope: Option<&Requirements>,
        tolerations: Option<&[Toleration]>,
    ) -> bool {
        let Some(list) = self.by_value.get(key).and_then(|m| m.get(value)) else {
            return true;
        };
        list.is_empty()
            || list.iter().any(|&s| {
                let s = &self.sources[s as usize];
                let affinity = match (scope, &s.node_labels) {
                    (Some(scope), Some(labels)) => scope.satisfied_by(labels),
                    _ => true,
                };
                affinity
                    && tolerations.is_none_or(|t| first_untolerated(&s.taints, t, true).is_none())
            })
    }
}

#[derive(Debug, Clone, Default)]
pub struct Topology {
    groups: Vec<Group>,
    index: FxHashMap<GroupKey, GroupId>,
    /// Topology key → every value a new or existing node can have.
    universe: FxHashMap<String, Vec<String>>,
    /// Where each value comes from (shared by the solves of one batch).
    sources: Arc<DomainSources>,
    /// Groups by a label every pod their selector matches carries, and the
    /// groups without one: a pod is checked against those only.
    by_label: FxHashMap<String, FxHashMap<String, Vec<GroupId>>>,
    unindexed: Vec<GroupId>,
}

impl Topology {
    /// `universe`: for each topology key, the values nodes can take (zones
    /// and capacity types from the offerings, labels of existing nodes).
    pub fn new(universe: FxHashMap<String, Vec<String>>) -> Self {
        Topology {
            universe,
            ..Default::default()
        }
    }

    /// With the sources of each value, for spreads that honour node
    /// affinity or taints (without, every value counts for every pod).
    pub fn with_sources(mut self, sources: DomainSources) -> Self {
        self.sources = Arc::new(sources);
        self
    }

    /// Registers every constraint a pod may ever carry (before relaxation).
    /// All groups must be registered before [`Topology::pod_topology`] is asked.
    pub fn register(
        &mut self,
        spreads: &[Spread],
        affinity: &[AffinityTerm],
        namespace: &str,
        tolerations: &[Toleration],
    ) {
        for s in spreads {
            self.group_id(GroupKey::spread(s, namespace, tolerations));
        }
        for t in affinity {
            self.group_id(GroupKey::affinity(t));
        }
    }

    fn group_id(&mut self, key: GroupKey) -> GroupId {
        if let Some(id) = self.index.get(&key) {
            return *id;
        }
        let id = self.groups.len() as GroupId;
        let hostname = key.key == labels::HOSTNAME;
        let domains = if hostname {
            Vec::new()
        } else {
            self.universe.get(&key.key).cloned().unwrap_or_default()
        };
        self.groups.push(Group {
            domains,
            hostname,
            key: key.clone(),
            matched: Counts::default(),
            owners: Counts::default(),
        });
        match key.selector.required_label() {
            Some((k, v)) => self
                .by_label
                .entry(k.to_owned())
                .or_default()
                .entry(v.to_owned())
                .or_default()
                .push(id),
            None => self.unindexed.push(id),
        }
        self.index.insert(key, id);
        id
    }

    pub fn has_groups(&self) -> bool {
        !self.groups.is_empty()
    }

    /// The groups a pod with these constraints and labels takes part in.
    pub fn pod_topology(
        &mut self,
        c: &Constraints,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> PodTopology {
        if self.groups.is_empty() {
            return PodTopology::default();
        }
        let mut owned = Vec::with_capacity(c.spreads.len() + c.affinity.len());
        let mut repels = Vec::new();
        for s in &c.spreads {
            let key = GroupKey::spread(s, namespace, &c.tolerations);
            let self_match = key.selector.matches(labels);
            owned.push((self.group_id(key), self_match));
        }
        for t in &c.affinity {
            let key = GroupKey::affinity(t);
            let self_match = key.selector.matches(labels) && key.namespaces.contains(namespace);
            let id = self.group_id(key);
            owned.push((id, self_match));
            if t.anti && t.weight.is_none() {
                repels.push(id);
            }
        }
        let (matched, inverse) = self.matching(namespace, labels);
        PodTopology {
            owned,
            matched,
            inverse,
            repels,
        }
    }

    fn matching(
        &self,
        namespace: &str,
        pod_labels: &BTreeMap<String, String>,
    ) -> (Vec<GroupId>, Vec<GroupId>) {
        let mut candidates: Vec<GroupId> = self.unindexed.clone();
        for (k, v) in pod_labels {
            if let Some(ids) = self.by_label.get(k).and_then(|values| values.get(v)) {
                candidates.extend_from_slice(ids);
            }
        }
        // Each group sits in one bucket and a pod has one value per key, so
        // no group comes twice; sorted, groups are matched in id order.
        candidates.sort_unstable();
        let mut matched = Vec::new();
        let mut inverse = Vec::new();
        for id in candidates {
            let g = &self.groups[id as usize];
            if g.key.namespaces.contains(namespace) && g.key.selector.matches(pod_labels) {
                matched.push(id);
                if g.key.kind == Kind::AntiAffinity {
                    inverse.push(id);
                }
            }
        }
        (matched, inverse)
    }

    /// The domain values of group `g`'s key that the candidate may still
    /// take, given the pod's node requirements and what earlier constraints
    /// of this pod narrowed.
    fn options<'g, 'x>(
        g: &'g Group,
        cand: Candidate<'x>,
        pod_node: &'x Requirements,
        extra: &'x Requirements,
    ) -> impl Iterator<Item = &'g str> + use<'g, 'x> {
        let key = g.key.key.as_str();
        g.domains.iter().map(String::as_str).filter(move |v| {
            let here = match cand {
                Candidate::Node { labels, .. } => labels.get(key).is_some_and(|l| l == v),
                Candidate::Claim { requirements, .. } => requirements.allows(key, Some(v)),
            };
            here && pod_node.allows(key, Some(v)) && extra.allows(key, Some(v))
        })
    }

    /// Checks a pod with constraints `c` against a candidate. On success
    /// returns the requirements the pod adds there (empty when it adds none).
    pub fn admit(
        &self,
        pt: &PodTopology,
        c: &Constraints,
        cand: Candidate<'_>,
    ) -> Result<Requirements, TopologyReject> {
        let pod_node = &c.node;
        // The domains a spread counts: the pod's own affinity, not its volumes'.
        let scope = c.spread_scope.as_ref().unwrap_or(pod_node);
        let host = cand.host();
        // Host-level refusals first: they are permanent, and a caller that
        // learns so skips this host for good instead of asking again.
        if let Some(r) = self.host_refusal(pt, host) {
            return Err(r);
        }
        let mut extra = Requirements::new();
        for &(gid, self_match) in &pt.owned {
            let g = &self.groups[gid as usize];
            if !g.hostname && g.domains.is_empty() && g.key.kind == Kind::AntiAffinity {
                // No node can have the key, so no peer shares a domain with
                // this pod. A spread or an affinity on such a key cannot hold.
                continue;
            }
            let reject = |permanent: bool| TopologyReject {
                group: gid,
                inverse: false,
                permanent,
            };
            match (g.key.kind, g.hostname) {
                (Kind::Spread { max_skew, .. }, true) => {
                    if g.matched.host(host) + 1 > max_skew {
                        return Err(reject(true));
                    }
                }
                (
                    Kind::Spread {
                        max_skew,
                        min_domains,
                        honor_node_affinity,
                        honor_node_taints,
                    },
                    false,
                ) => {
                    let mut eligible = 0u32;
                    let mut min = u32::MAX;
                    let affinity_scope = honor_node_affinity.then_some(scope);
                    let tolerations = honor_node_taints.then_some(c.tolerations.as_slice());
                    for v in g.domains.iter().filter(|v| {
                        (!honor_node_affinity || scope.allows(&g.key.key, Some(v)))
                            && self
                                .sources
                                .counts(&g.key.key, v, affinity_scope, tolerations)
                    }) {
                        eligible += 1;
                        min = min.min(g.matched.value(v));
                    }
                    if eligible == 0 || min_domains.is_some_and(|m| eligible < m) {
                        min = 0;
                    }
                    let best = Self::options(g, cand, pod_node, &extra)
                        .filter(|v| {
                            scope.allows(&g.key.key, Some(v)) && g.matched.value(v) < min + max_skew
                        })
                        .min_by(|a, b| {
                            g.matched
                                .value(a)
                                .cmp(&g.matched.value(b))
                                .then_with(|| a.cmp(b))
                        });
                    match best {
                        Some(v) => extra.add(&g.key.key, Requirement::single(v)),
                        None => return Err(reject(false)),
                    }
                }
                (Kind::Affinity, true) => {
                    let ok = g.matched.host(host) > 0 || (g.matched.total == 0 && self_match);
                    if !ok {
                        return Err(reject(false));
                    }
                }
                (Kind::Affinity, false) => {
                    let with_peers = Self::options(g, cand, pod_node, &extra)
                        .filter(|v| g.matched.value(v) > 0)
                        .max_by(|a, b| {
                            g.matched
                                .value(a)
                                .cmp(&g.matched.value(b))
                                .then_with(|| b.cmp(a))
                        });
                    // A pod that selects itself may start a domain when no
                    // peer is in a domain it may use (none at all, or only
                    // where its own node requirements forbid), as Karpenter.
                    let peers_reachable = g.matched.total > 0
                        && g.domains.iter().any(|v| {
                            g.matched.value(v) > 0 && pod_node.allows(&g.key.key, Some(v))
                        });
                    let chosen = match with_peers {
                        Some(v) => Some(v),
                        None if self_match && !peers_reachable => {
                            Self::options(g, cand, pod_node, &extra).next()
                        }
                        None => None,
                    };
                    match chosen {
                        Some(v) => extra.add(&g.key.key, Requirement::single(v)),
                        None => return Err(reject(false)),
                    }
                }
                (Kind::AntiAffinity, true) => {
                    if g.matched.host(host) > 0 {
                        return Err(reject(true));
                    }
                }
                (Kind::AntiAffinity, false) => {
                    let options: Vec<&str> = Self::options(g, cand, pod_node, &extra).collect();
                    narrow(&mut extra, &g.key.key, options, |v| g.matched.value(v) == 0)
                        .map_err(|()| reject(false))?;
                }
            }
        }
        for &gid in &pt.inverse {
            let g = &self.groups[gid as usize];
            if g.owners.total == 0 {
                continue;
            }
            let reject = |permanent: bool| TopologyReject {
                group: gid,
                inverse: true,
                permanent,
            };
            if g.hostname {
                if g.owners.host(host) > 0 {
                    return Err(reject(true));
                }
            } else {
                let options: Vec<&str> = Self::options(g, cand, pod_node, &extra).collect();
                narrow(&mut extra, &g.key.key, options, |v| g.owners.value(v) == 0)
                    .map_err(|()| reject(false))?;
            }
        }
        Ok(extra)
    }

    /// The first host-level constraint (hostname spread or anti-affinity,
    /// the pod's own or another's) that refuses `host`: such counts only
    /// grow, so the refusal is permanent.
    fn host_refusal(&self, pt: &PodTopology, host: HostId) -> Option<TopologyReject> {
        let own = pt.owned.iter().find_map(|&(gid, _)| {
            let g = &self.groups[gid as usize];
            let full = match g.key.kind {
                _ if !g.hostname => false,
                Kind::Spread { max_skew, .. } => g.matched.host(host) + 1 > max_skew,
                Kind::AntiAffinity => g.matched.host(host) > 0,
                Kind::Affinity => false,
            };
            full.then_some(TopologyReject {
                group: gid,
                inverse: false,
                permanent: true,
            })
        });
        own.or_else(|| {
            pt.inverse.iter().find_map(|&gid| {
                let g = &self.groups[gid as usize];
                (g.hostname && g.owners.host(host) > 0).then_some(TopologyReject {
                    group: gid,
                    inverse: true,
                    permanent: true,
                })
            })
        })
    }

    /// Counts a placed pod. `cand` carries the final requirements of the claim
    /// (or the node's labels); `taints` are the node's (or its NodePool's).
    pub fn record(&mut self, pt: &PodTopology, cand: Candidate<'_>, taints: &[Taint]) {
        let host = cand.host();
        let domains = |key: &str, universe: &FxHashMap<String, Vec<String>>| -> Vec<String> {
            match cand {
                Candidate::Node { labels, .. } => labels.get(key).cloned().into_iter().collect(),
                Candidate::Claim { requirements, .. } => universe
                    .get(key)
                    .into_iter()
                    .flatten()
                    .filter(|v| requirements.allows(key, Some(v)))
                    .cloned()
                    .collect(),
            }
        };
        for &gid in &pt.matched {
            let g = &self.groups[gid as usize];
            if let Some(tolerations) = &g.key.tolerations
                && first_untolerated(taints, tolerations, true).is_some()
            {
                // A spread honouring taints counts no pod on a node its
                // owners do not tolerate.
                continue;
            }
            let (hostname, anti) = (g.hostname, g.key.kind == Kind::AntiAffinity);
            let values = if hostname {
                Vec::new()
            } else {
                domains(&g.key.key, &self.universe)
            };
            let g = &mut self.groups[gid as usize];
            g.matched.total += 1;
            if hostname {
                g.matched.add_host(host);
            } else if values.len() == 1 || anti {
                for v in values {
                    *g.matched.by_value.entry(v).or_insert(0) += 1;
                }
            }
        }
        for &gid in &pt.repels {
            let g = &self.groups[gid as usize];
            let values = if g.hostname {
                Vec::new()
            } else {
                domains(&g.key.key, &self.universe)
            };
            let g = &mut self.groups[gid as usize];
            g.owners.total += 1;
            if g.hostname {
                g.owners.add_host(host);
            } else {
                for v in values {
                    *g.owners.by_value.entry(v).or_insert(0) += 1;
                }
            }
        }
    }

    /// Words for a refusal: which constraint, and whose.
    pub fn describe(&self, r: &TopologyReject) -> String {
        let what = self.groups[r.group as usize].key.describe();
        if r.inverse {
            format!("{what} of another pod")
        } else {
            what
        }
    }

    /// Every non-hostname key some group counts on.
    pub fn domain_keys_all(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .groups
            .iter()
            .filter(|g| !g.hostname)
            .map(|g| g.key.key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// True when no constraint of the pod is host-level: then two claims with
    /// the same requirements on the topology keys get the same answer.
    pub fn domain_only(&self, pt: &PodTopology) -> bool {
        pt.owned
            .iter()
            .map(|(g, _)| *g)
            .chain(pt.inverse.iter().copied())
            .all(|g| !self.groups[g as usize].hostname)
    }

    /// True when every constraint of the pod is host-level, so a refusal on
    /// one host stays a refusal (used to skip hosts for similar pods).
    pub fn host_level_only(&self, pt: &PodTopology) -> bool {
        pt.owned
            .iter()
            .all(|(g, _)| self.groups[*g as usize].hostname)
            && pt.inverse.iter().all(|g| self.groups[*g as usize].hostname)
    }
}

/// Keeps the options that pass `keep`; adds `key In [kept]` when that narrows.
fn narrow(
    extra: &mut Requirements,
    key: &str,
    options: Vec<&str>,
    keep: impl Fn(&str) -> bool,
) -> Result<(), ()> {
    let total = options.len();
    let kept: Vec<&str> = options.into_iter().filter(|v| keep(v)).collect();
    if kept.is_empty() {
        return Err(());
    }
    if kept.len() < total {
        extra.add(key, Requirement::any_of(kept));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constraints(spreads: Vec<Spread>, affinity: Vec<AffinityTerm>) -> Constraints {
        Constraints {
            node: Requirements::new(),
            spread_scope: None,
            spreads,
            affinity,
            tolerations: Vec::new(),
            ignore_prefer_no_schedule: false,
        }
    }

    fn app() -> BTreeMap<String, String> {
        BTreeMap::from([("app".to_owned(), "web".to_owned())])
    }

    /// Admits a pod with constraints `c` on a new claim without requirements.
    fn admit_on_claim(universe: &[(&str, &[&str])], c: &Constraints) -> bool {
        let mut t = Topology::new(
            universe
                .iter()
                .map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect()))
                .collect(),
        );
        t.register(&c.spreads, &c.affinity, "default", &[]);
        let pt = t.pod_topology(c, "default", &app());
        let requirements = Requirements::new();
        t.admit(
            &pt,
            c,
            Candidate::Claim {
                host: 0,
                requirements: &requirements,
            },
        )
        .is_ok()
    }

    #[test]
    fn a_key_no_node_can_have_holds_only_anti_affinity() {
        let spread = Spread {
            key: "unknown".to_owned(),
            max_skew: 1,
            hard: true,
            selector: LabelSelector::from_labels(&app()),
            min_domains: None,
            honor_node_affinity: true,
            honor_node_taints: false,
        };
        let term = |anti: bool| AffinityTerm {
            anti,
            key: "unknown".to_owned(),
            selector: LabelSelector::from_labels(&app()),
            namespaces: Namespaces::only("default"),
            weight: None,
        };
        let universe: &[(&str, &[&str])] = &[(labels::ZONE, &["a", "b"])];
        assert!(!admit_on_claim(
            universe,
            &constraints(vec![spread.clone()], vec![])
        ));
        assert!(!admit_on_claim(
            universe,
            &constraints(vec![], vec![term(false)])
        ));
        assert!(admit_on_claim(
            universe,
            &constraints(vec![], vec![term(true)])
        ));
        let known = Spread {
            key: labels::ZONE.to_owned(),
            ..spread
        };
        assert!(admit_on_claim(universe, &constraints(vec![known], vec![])));
    }

    /// A value offered only by sources a pod cannot use does not count for
    /// its spreads that honour node affinity or taints; one an untainted
    /// NodePool offers counts for every pod.
    #[test]
    fn honoured_spreads_count_only_domains_of_usable_sources() {
        use super::super::taints::Effect;
        let mut sources = DomainSources::default();
        let tainted = sources.add(DomainSource {
            node_labels: None,
            taints: vec![Taint::new("k", "v", Effect::NoSchedule)],
        });
        let node = sources.add(DomainSource {
            node_labels: Some(BTreeMap::from([("sel".to_owned(), "no".to_owned())])),
            taints: Vec::new(),
        });
        sources.offer("d", "pool", None);
        sources.offer("d", "tainted", Some(tainted));
        sources.offer("d", "node", Some(node));
        let mut scope = Requirements::new();
        scope.add("sel", Requirement::single("yes"));
        let tolerate = [Toleration {
            key: "k".to_owned(),
            exists: true,
            value: String::new(),
            effect: None,
        }];
        let counts = |v: &str, scope: Option<&Requirements>, t: Option<&[Toleration]>| {
            sources.counts("d", v, scope, t)
        };
        assert!(counts("pool", Some(&scope), Some(&[])));
        assert!(counts("tainted", Some(&scope), None), "taints ignored");
        assert!(!counts("tainted", None, Some(&[])), "taint not tolerated");
        assert!(counts("tainted", None, Some(&tolerate)));
        assert!(
            !counts("node", Some(&scope), None),
            "the node's labels miss the selector"
        );
        assert!(counts("node", None, Some(&[])), "node affinity ignored");
        assert!(
            counts("unknown", Some(&scope), Some(&[])),
            "no source known: open"
        );
    }

    #[test]
    fn node_affinity_policy_ignore_counts_domains_the_pod_cannot_use() {
        let spread = |honor_node_affinity: bool| Spread {
            key: labels::ZONE.to_owned(),
            max_skew: 1,
            hard: true,
            selector: LabelSelector::from_labels(&app()),
            min_domains: None,
            honor_node_affinity,
            honor_node_taints: false,
        };
        let zone_a = BTreeMap::from([(labels::ZONE.to_owned(), "a".to_owned())]);
        let admits_second_in_a = |honor: bool| {
            let mut t = Topology::new(
                [(
                    labels::ZONE.to_owned(),
                    vec!["a".to_owned(), "b".to_owned()],
                )]
                .into_iter()
                .collect(),
            );
            let mut c = constraints(vec![spread(honor)], vec![]);
            c.node.add(labels::ZONE, Requirement::single("a"));
            t.register(&c.spreads, &c.affinity, "default", &[]);
            let pt = t.pod_topology(&c, "default", &app());
            let first = Candidate::Node {
                host: 0,
                labels: &zone_a,
            };
            t.admit(&pt, &c, first).expect("the first pod fits");
            t.record(&pt, first, &[]);
            let second = Candidate::Node {
                host: 1,
                labels: &zone_a,
            };
            t.admit(&pt, &c, second).is_ok()
        };
        assert!(admits_second_in_a(true), "honouring, only zone a counts");
        assert!(
            !admits_second_in_a(false),
            "ignoring, empty zone b holds the skew"
        );
    }
}
