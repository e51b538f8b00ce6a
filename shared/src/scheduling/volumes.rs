//! Volume topology: where a pod's persistent volumes let it run. Pure.
//!
//! For each pod volume backed by a PersistentVolumeClaim (a
//! `persistentVolumeClaim` volume, or a generic `ephemeral` volume, whose
//! claim is named `<pod>-<volume>`):
//! - a claim bound to a PersistentVolume (`spec.volumeName`, and marked
//!   `pv.kubernetes.io/bind-completed` by the binder) allows the terms of the
//!   volume's `spec.nodeAffinity.required`, each an alternative (they are
//!   ORed); a local or hostPath volume's hostname is ignored, as Karpenter
//!   does (the pod's node will be a new one);
//! - an unbound claim whose StorageClass binds `WaitForFirstConsumer` allows
//!   the terms of the class's `allowedTopologies` (none: anywhere);
//! - the pod's volumes' alternatives are crossed and those that contradict
//!   pruned ([`alternatives`]); `SchedPod::from_pod_with_volumes` keeps one,
//!   a union when they differ on one key, or crosses them with the pod's
//!   required node-affinity terms;
//! - anything that no new node can fix is a [`VolumeError`], the reason the
//!   pod is reported unschedulable: a missing claim, volume or class, a claim
//!   or volume being deleted, a lost claim, an unbound claim without a class
//!   or whose class binds `Immediate` (the pod waits for the binding, as
//!   kube-scheduler makes it), volumes that disagree on a zone.
//!
//! Keys: the zone keys (`topology.kubernetes.io/zone`, the legacy
//! `failure-domain.beta.kubernetes.io/zone`, and the EBS CSI driver's
//! `topology.ebs.csi.aws.com/zone`, whose values are the same zone names)
//! become [`labels::ZONE`], which every offering has. Other well-known keys
//! are kept as written. `kubernetes.io/hostname In [...]` pins the volume to
//! existing nodes, which a new node never satisfies: the pod is reported
//! (Karpenter drops the hostname of local volumes and launches a node the pod
//! still cannot use). Every other key is ignored: such labels (a CSI driver's
//! own topology keys) are set by the driver on the node after it boots, so
//! the solver cannot plan for them, and the zone key beside them already
//! carries the constraint.
//!
//! The claims a pod's volumes need are looked up in a [`VolumeIndex`], built
//! from the cluster's PVCs, PVs and StorageClasses; the handler lists them
//! only when a pod to solve has such a volume ([`uses_claims`]).
//!
//! Attach limits: a node's CSINode says, per CSI driver, how many volumes
//! of that driver the node can attach (`drivers[].allocatable.count`); the
//! kubelet refuses a pod past it, and kube-scheduler does not place one
//! there. [`attachments`] names a pod's volumes per driver (the claim,
//! `namespace/name`, so pods sharing a claim count it once): a bound
//! claim's driver is its volume's CSI driver (an in-tree EBS volume is the
//! EBS CSI driver's, as the migration makes it), an unbound one's its
//! class's provisioner (in-tree names translated). A claim that does not
//! exist yet, has no class, or a volume of no CSI driver (NFS) counts for
//! nothing, as in Karpenter. Only nodes that exist have a CSINode: a new
//! node has no limit until its driver registers.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use super::labels;
use super::requirements::{Operator, Requirement, Requirements};

/// The EBS CSI driver's zone key, in volumes it provisioned and on its nodes.
pub const EBS_CSI_ZONE: &str = "topology.ebs.csi.aws.com/zone";
/// What the volume binder writes on a claim once its binding is complete.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Marks the StorageClass a claim without a class name gets.
const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// Why a pod's volumes keep it off every new node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    #[error("persistentvolumeclaim {claim} not found")]
    ClaimNotFound { claim: String },
    #[error("persistentvolumeclaim {claim} is being deleted")]
    ClaimDeleting { claim: String },
    #[error("persistentvolumeclaim {claim} is Lost (its persistentvolume {volume} is gone)")]
    ClaimLost { claim: String, volume: String },
    #[error(
        "persistentvolumeclaim {claim} is bound to persistentvolume {volume}, which does not exist"
    )]
    VolumeNotFound { claim: String, volume: String },
    #[error("persistentvolume {volume} of persistentvolumeclaim {claim} is being deleted")]
    VolumeDeleting { claim: String, volume: String },
    #[error(
        "persistentvolumeclaim {claim} is unbound and names no storageclass (and none is the default)"
    )]
    NoStorageClass { claim: String },
    #[error("storageclass {class} of persistentvolumeclaim {claim} not found")]
    ClassNotFound { claim: String, class: String },
    #[error(
        "persistentvolumeclaim {claim} is not bound yet and storageclass {class} binds Immediate: the pod waits for the binding"
    )]
    AwaitingBinding { claim: String, class: String },
    #[error(
        "persistentvolumeclaim {claim} names persistentvolume {volume} but its binding is not complete (no pv.kubernetes.io/bind-completed): the pod waits for it"
    )]
    BindingIncomplete { claim: String, volume: String },
    #[error(
        "{source_} pins persistentvolumeclaim {claim} to node(s) {nodes}; a new node cannot hold it"
    )]
    PinnedToNodes {
        claim: String,
        source_: String,
        nodes: String,
    },
    #[error("{source_} of persistentvolumeclaim {claim}: {reason}")]
    Invalid {
        claim: String,
        source_: String,
        reason: String,
    },
    #[error("the pod's volumes disagree on {key}: {first} and {second}")]
    Conflict {
        key: String,
        first: String,
        second: String,
    },
}

/// The cluster's PVCs (by namespace and name), PVs and StorageClasses (by
/// name), and the nodes' volume attach limits (from their CSINodes).
#[derive(Debug, Clone, Default)]
pub struct VolumeIndex {
    claims: HashMap<(String, String), PersistentVolumeClaim>,
    volumes: HashMap<String, PersistentVolume>,
    classes: HashMap<String, StorageClass>,
    /// Per node, per CSI driver: the most volumes it attaches.
    limits: HashMap<String, VolumeLimits>,
}

/// Per CSI driver, the most volumes of it one node attaches.
pub type VolumeLimits = std::collections::BTreeMap<String, u32>;

/// One volume a pod attaches: the CSI driver, and the claim
/// (`namespace/name`) that names the volume.
pub type Attachment = (String, String);

impl VolumeIndex {
    pub fn new(
        claims: Vec<PersistentVolumeClaim>,
        volumes: Vec<PersistentVolume>,
        classes: Vec<StorageClass>,
    ) -> Self {
        VolumeIndex {
            claims: claims
                .into_iter()
                .map(|c| {
                    let ns = c
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".to_owned());
                    ((ns, c.metadata.name.clone().unwrap_or_default()), c)
                })
                .collect(),
            volumes: volumes
                .into_iter()
                .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
                .collect(),
            classes: classes
                .into_iter()
                .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
                .collect(),
            limits: HashMap::new(),
        }
    }

    /// The attach limits of these CSINodes (each named after its node); a
    /// driver without `allocatable.count` has no limit.
    pub fn with_csi_nodes(mut self, nodes: Vec<CSINode>) -> Self {
        for n in nodes {
            let limits: VolumeLimits = n
                .spec
                .drivers
                .iter()
                .filter_map(|d| {
                    let count = d.allocatable.as_ref()?.count?;
                    Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
                })
                .collect();
            if !limits.is_empty() {
                self.limits
                    .insert(n.metadata.name.clone().unwrap_or_default(), limits);
            }
        }
        self
    }

    /// The attach limits of node `node` (none known: empty, no limit).
    pub fn limits_of(&self, node: &str) -> VolumeLimits {
        self.limits.get(node).cloned().unwrap_or_default()
    }

    /// The class a claim without a class name is given: the newest default
    /// (as the admission plugin picks), by name among equals.
    pub fn default_class(&self) -> Option<&str> {
        self.classes
            .iter()
            .filter(|(_, c)| {
                let ann = c.metadata.annotations.as_ref();
                DEFAULT_CLASS_ANNOTATIONS
                    .iter()
                    .any(|a| ann.and_then(|m| m.get(*a)).is_some_and(|v| v == "true"))
            })
            .max_by(|(an, a), (bn, b)| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
                    .then_with(|| bn.cmp(an))
            })
            .map(|(n, _)| n.as_str())
    }
}

/// One volume of a pod that needs a claim: its name, the claim's, and for an
/// ephemeral volume the template the claim is (or will be) made from.
struct ClaimRef<'p> {
    volume: &'p str,
    claim: String,
    template: Option<&'p PersistentVolumeClaimSpec>,
}

fn claim_refs(pod: &Pod) -> impl Iterator<Item = ClaimRef<'_>> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(move |v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                return Some(ClaimRef {
                    volume: &v.name,
                    claim: pvc.claim_name.clone(),
                    template: None,
                });
            }
            let template = v.ephemeral.as_ref()?.volume_claim_template.as_ref()?;
            Some(ClaimRef {
                volume: &v.name,
                claim: format!("{pod_name}-{}", v.name),
                template: Some(&template.spec),
            })
        })
}

/// The claims (names, in the pod's namespace) the pod's volumes use: its
/// `persistentVolumeClaim` volumes' and its ephemeral volumes'
/// (`<pod>-<volume>`).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    claim_refs(pod).map(|r| r.claim).collect()
}

/// True when some volume of the pod is backed by a PersistentVolumeClaim.
pub fn uses_claims(pod: &Pod) -> bool {
    claim_refs(pod).next().is_some()
}

/// The CSI driver that serves an in-tree volume plugin since the CSI
/// migration (the provisioner names StorageClasses use).
fn migrated_driver(provisioner: &str) -> Option<&'static str> {
    Some(match provisioner {
        "kubernetes.io/aws-ebs" => "ebs.csi.aws.com",
        "kubernetes.io/gce-pd" => "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk" => "disk.csi.azure.com",
        "kubernetes.io/azure-file" => "file.csi.azure.com",
        "kubernetes.io/cinder" => "cinder.csi.openstack.org",
        "kubernetes.io/vsphere-volume" => "csi.vsphere.vmware.com",
        "kubernetes.io/portworx-volume" => "pxd.portworx.com",
        _ => return None,
    })
}

/// The volumes the pod attaches, per CSI driver (see the module's
/// documentation), sorted, each claim once. Never fails: a volume whose
/// driver cannot be told counts for nothing.
pub fn attachments(pod: &Pod, index: &VolumeIndex) -> Vec<Attachment> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out: Vec<Attachment> = claim_refs(pod)
        .filter_map(|r| {
            let claim = index.claims.get(&(namespace.to_owned(), r.claim.clone()))?;
            let spec = claim.spec.as_ref()?;
            let driver = match spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                Some(v) => {
                    let pv = index.volumes.get(v)?.spec.as_ref()?;
                    match (&pv.csi, &pv.aws_elastic_block_store) {
                        (Some(csi), _) => csi.driver.clone(),
                        (None, Some(_)) => "ebs.csi.aws.com".to_owned(),
                        (None, None) => return None,
                    }
                }
                None => {
                    let class = match spec.storage_class_name.as_deref() {
                        Some("") => return None,
                        Some(c) => c,
                        // The API server gives a claim without a class the
                        // default one as it is created.
                        None => index.default_class()?,
                    };
                    let sc = index.classes.get(class)?;
                    migrated_driver(&sc.provisioner)
                        .map(str::to_owned)
                        .unwrap_or_else(|| sc.provisioner.clone())
                }
            };
            Some((driver, format!("{namespace}/{}", r.claim)))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The persistent volumes a pod uses that a CSI driver attaches to its
/// node: (driver, volume name) for each claim bound to a volume of a CSI
/// driver (an in-tree EBS volume is the EBS CSI driver's).
pub fn attached_volumes(pod: &Pod, index: &VolumeIndex) -> Vec<(String, String)> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    claim_refs(pod)
        .filter_map(|r| {
            let claim = index.claims.get(&(namespace.to_owned(), r.claim))?;
            let name = claim.spec.as_ref()?.volume_name.as_deref()?;
            let pv = index.volumes.get(name)?.spec.as_ref()?;
            let driver = match (&pv.csi, &pv.aws_elastic_block_store) {
                (Some(csi), _) => csi.driver.clone(),
                (None, Some(_)) => "ebs.csi.aws.com".to_owned(),
                (None, None) => return None,
            };
            Some((driver, name.to_owned()))
        })
        .collect()
}

/// True when a node whose pods already attach `used` (sorted) can also
/// attach `wanted` within `limits`: per driver, the claims of both, each
/// once, are at most its limit. A driver without a limit takes any number.
pub fn within_limits(limits: &VolumeLimits, used: &[Attachment], wanted: &[Attachment]) -> bool {
    if limits.is_empty() || wanted.is_empty() {
        return true;
    }
    limits.iter().all(|(driver, &limit)| {
        let new = wanted
            .iter()
            .filter(|a| &a.0 == driver && used.binary_search(a).is_err())
            .count();
        if new == 0 {
            return true;
        }
        let have = used.iter().filter(|a| &a.0 == driver).count();
        have + new <= limit as usize
    })
}

/// The node requirements a pod's volumes add (empty for a pod without
/// claims), or why no new node can hold it, with the volume's name. When
/// the volumes allow several alternatives (ORed node-affinity terms or
/// allowed topologies), the first one: [`alternatives`] has them all.
pub fn requirements(pod: &Pod, index: &VolumeIndex) -> Result<Requirements, (String, VolumeError)> {
    alternatives(pod, index).map(|mut alts| alts.swap_remove(0))
}

/// Every set of node requirements that would let the pod's volumes attach
/// (never empty; one empty set for a pod without claims), in the order the
/// terms are written: each volume's terms (a bound volume's node-affinity
/// terms, an unbound claim's class's allowed topologies) are alternatives,
/// crossed with the other volumes' and pruned where they contradict, as
/// Karpenter does. A volume none of whose terms a new node can meet, or
/// volumes that contradict in every combination, are the error.
pub fn alternatives(
    pod: &Pod,
    index: &VolumeIndex,
) -> Result<Vec<Requirements>, (String, VolumeError)> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = vec![Requirements::new()];
    // Which claim set each key first, to name both sides of a conflict.
    let mut first: HashMap<String, String> = HashMap::new();
    for r in claim_refs(pod) {
        let name = format!("{namespace}/{}", r.claim);
        let terms = claim_requirements(
            &name,
            index.claims.get(&(namespace.to_owned(), r.claim.clone())),
            r.template,
            index,
        )
        .map_err(|e| (r.volume.to_owned(), e))?;
        let mut merged = Vec::new();
        let mut conflict = None;
        for existing in &out {
            for term in &terms {
                match merge(existing, term) {
                    Ok(m) => merged.push(m),
                    Err(key) => {
                        conflict.get_or_insert_with(|| (key, existing.clone(), term.clone()));
                    }
                }
            }
        }
        if merged.is_empty() {
            let (key, existing, term) = conflict.unwrap_or_default();
            let earlier = first.get(&key).cloned().unwrap_or_default();
            let describe =
                |r: &Requirements| r.get(&key).map(|q| q.describe(&key)).unwrap_or_default();
            let e = VolumeError::Conflict {
                key: key.clone(),
                first: format!(
                    "persistentvolumeclaim {earlier} needs {}",
                    describe(&existing)
                ),
                second: format!("persistentvolumeclaim {name} needs {}", describe(&term)),
            };
            return Err((r.volume.to_owned(), e));
        }
        for term in &terms {
            for key in term.keys() {
                first.entry(key.to_owned()).or_insert_with(|| name.clone());
            }
        }
        out = merged;
    }
    Ok(out)
}

/// Both sets of requirements at once, or the first key they disagree on.
fn merge(a: &Requirements, b: &Requirements) -> Result<Requirements, String> {
    for (key, req) in b.iter() {
        if let Some(existing) = a.get(key) {
            let disjoint = !existing.allows_absence()
                && !req.allows_absence()
                && existing.intersection(req).is_empty();
            if disjoint {
                return Err(key.to_owned());
            }
        }
    }
    let mut out = a.clone();
    out.add_all(b);
    Ok(out)
}

/// Whether an unbound claim of the pod waits for its first consumer: the
/// claim (by namespace/name) whose volume kube-scheduler must pick (it
/// writes `volume.kubernetes.io/selected-node` as it binds the pod), so
/// the pod is not bound directly. `None` when every claim is bound or
/// binds otherwise.
pub fn awaits_first_consumer(pod: &Pod, index: &VolumeIndex) -> Option<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    claim_refs(pod).find_map(|r| {
        let name = format!("{namespace}/{}", r.claim);
        let claim = index.claims.get(&(namespace.to_owned(), r.claim.clone()));
        let bound = claim
            .and_then(|c| c.spec.as_ref())
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty());
        if bound {
            return None;
        }
        let class = match claim {
            Some(c) => c.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
            None => r.template.and_then(|t| t.storage_class_name.clone()),
        };
        let class = match class {
            Some(c) if !c.is_empty() => Some(c),
            Some(_) => None,
            None => index.default_class().map(str::to_owned),
        };
        let waits = class
            .and_then(|c| index.classes.get(&c))
            .is_some_and(|sc| sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"));
        // A claim not created yet (an ephemeral volume's) waits for its
        // controller either way: kube-scheduler handles it.
        (waits || claim.is_none()).then_some(name)
    })
}

fn claim_requirements(
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
    template: Option<&PersistentVolumeClaimSpec>,
    index: &VolumeIndex,
) -> Result<Vec<Requirements>, VolumeError> {
    let claim_err = || name.to_owned();
    let Some(claim) = claim else {
        // An ephemeral volume's claim is created by a controller right after
        // the pod; until then its template says what it will be.
        // No class name gets the default class; an empty one means none.
        return match template.map(|spec| spec.storage_class_name.as_deref()) {
            Some(None) => unbound(name, index.default_class(), index),
            Some(Some(class)) => unbound(name, Some(class).filter(|c| !c.is_empty()), index),
            None => Err(VolumeError::ClaimNotFound { claim: claim_err() }),
        };
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(VolumeError::ClaimDeleting { claim: claim_err() });
    }
    let spec = claim.spec.clone().unwrap_or_default();
    let volume_name = spec.volume_name.as_deref().filter(|v| !v.is_empty());
    if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        return Err(VolumeError::ClaimLost {
            claim: claim_err(),
            volume: volume_name.unwrap_or_default().to_owned(),
        });
    }
    match volume_name {
        // kube-scheduler takes a claim that names a volume as bound only once
        // the binder marked it so.
        Some(v)
            if !claim
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(BIND_COMPLETED)) =>
        {
            Err(VolumeError::BindingIncomplete {
                claim: claim_err(),
                volume: v.to_owned(),
            })
        }
        Some(v) => bound(name, v, index),
        None => unbound(
            name,
            spec.storage_class_name.as_deref().filter(|c| !c.is_empty()),
            index,
        ),
    }
}

/// A bound claim: one alternative per required node selector term of its
/// volume (none: anywhere). A local or hostPath volume's hostname
/// expressions are dropped (the node the pod gets is a new one, as
/// Karpenter does); a term that pins any other volume to a host is left
/// out, and when every term is, that is the error.
fn bound(claim: &str, volume: &str, index: &VolumeIndex) -> Result<Vec<Requirements>, VolumeError> {
    let ids = || (claim.to_owned(), volume.to_owned());
    let Some(pv) = index.volumes.get(volume) else {
        let (claim, volume) = ids();
        return Err(VolumeError::VolumeNotFound { claim, volume });
    };
    if pv.metadata.deletion_timestamp.is_some() {
        let (claim, volume) = ids();
        return Err(VolumeError::VolumeDeleting { claim, volume });
    }
    let spec = pv.spec.as_ref();
    let node_local = spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some());
    let terms = spec
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    let source = format!("persistentvolume {volume}");
    alternatives_of(
        terms.iter().map(|t| {
            t.match_expressions
                .iter()
                .flatten()
                .filter(|e| !(node_local && labels::normalize(&e.key) == labels::HOSTNAME))
                .map(|e| (&e.key, e.operator.as_str(), e.values.as_deref()))
                .collect::<Vec<_>>()
        }),
        claim,
        &source,
    )
}

/// One alternative per term; a term a new node can never meet is left out
/// unless every term is (then its error).
fn alternatives_of<'a>(
    terms: impl Iterator<Item = Vec<(&'a String, &'a str, Option<&'a [String]>)>>,
    claim: &str,
    source: &str,
) -> Result<Vec<Requirements>, VolumeError> {
    let mut out = Vec::new();
    let mut first_error = None;
    for exprs in terms {
        match topology(claim, source, exprs.into_iter()) {
            Ok(r) => out.push(r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (out.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        (true, None) => Ok(vec![Requirements::new()]),
        (false, _) => Ok(out),
    }
}

/// An unbound claim: one alternative per allowed topology term of its
/// class (none: anywhere), when the class waits for the first consumer.
fn unbound(
    claim: &str,
    class: Option<&str>,
    index: &VolumeIndex,
) -> Result<Vec<Requirements>, VolumeError> {
    let Some(class) = class else {
        return Err(VolumeError::NoStorageClass {
            claim: claim.to_owned(),
        });
    };
    let Some(sc) = index.classes.get(class) else {
        return Err(VolumeError::ClassNotFound {
            claim: claim.to_owned(),
            class: class.to_owned(),
        });
    };
    // The API server defaults an unset binding mode to Immediate.
    if sc.volume_binding_mode.as_deref().unwrap_or("Immediate") != "WaitForFirstConsumer" {
        return Err(VolumeError::AwaitingBinding {
            claim: claim.to_owned(),
            class: class.to_owned(),
        });
    }
    let source = format!("storageclass {class}");
    alternatives_of(
        sc.allowed_topologies.iter().flatten().map(|t| {
            t.match_label_expressions
                .iter()
                .flatten()
                .map(|e| (&e.key, "In", Some(e.values.as_slice())))
                .collect::<Vec<_>>()
        }),
        claim,
        &source,
    )
}

/// Node selector expressions to requirements on the keys the solver knows
/// (see the module's documentation for the mapping).
fn topology<'a>(
    claim: &str,
    source: &str,
    exprs: impl Iterator<Item = (&'a String, &'a str, Option<&'a [String]>)>,
) -> Result<Requirements, VolumeError> {
    let invalid = |reason: String| VolumeError::Invalid {
        claim: claim.to_owned(),
        source_: source.to_owned(),
        reason,
    };
    let mut out = Requirements::new();
    for (key, operator, values) in exprs {
        let values = values.unwrap_or(&[]);
        let key = match labels::normalize(key) {
            EBS_CSI_ZONE => labels::ZONE,
            k => k,
        };
        let op = Operator::parse(operator).map_err(|e| invalid(e.to_string()))?;
        if key == labels::HOSTNAME {
            if op == Operator::In {
                return Err(VolumeError::PinnedToNodes {
                    claim: claim.to_owned(),
                    source_: source.to_owned(),
                    nodes: values.join(", "),
                });
            }
            continue; // NotIn, Exists…: a new node's name is none of these.
        }
        if !labels::is_well_known(key) {
            continue;
        }
        let req = Requirement::new(key, op, values).map_err(|e| invalid(e.to_string()))?;
        out.add(key, req);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("object json")
    }

    fn pod(volumes: Value) -> Pod {
        from(
            json!({"metadata": {"name": "web-0", "namespace": "shop"}, "spec": {"containers": [], "volumes": volumes}}),
        )
    }

    /// A claim; one that names a volume is bound (the binder marked it).
    fn claim(name: &str, spec: Value) -> PersistentVolumeClaim {
        let annotations = if spec.get("volumeName").is_some() {
            json!({"pv.kubernetes.io/bind-completed": "yes"})
        } else {
            json!({})
        };
        from(
            json!({"metadata": {"name": name, "namespace": "shop", "annotations": annotations}, "spec": spec}),
        )
    }

    fn zonal_volume(name: &str, key: &str, zones: &[&str]) -> PersistentVolume {
        from(
            json!({"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": "In", "values": zones}]}
            ]}}}}),
        )
    }

    fn class(name: &str, mode: &str, zones: &[&str]) -> StorageClass {
        let mut sc = json!({"metadata": {"name": name}, "provisioner": "ebs.csi.aws.com", "volumeBindingMode": mode});
        if !zones.is_empty() {
            sc["allowedTopologies"] =
                json!([{"matchLabelExpressions": [{"key": EBS_CSI_ZONE, "values": zones}]}]);
        }
        from(sc)
    }

    fn claim_volume(claim: &str) -> Value {
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
    }

    fn zones(r: &Requirements) -> Vec<String> {
        r.get(labels::ZONE)
            .and_then(|z| z.finite_values())
            .map(|v| v.iter().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_bound_claim_takes_its_volumes_zone() {
        let index = VolumeIndex::new(
            vec![claim(
                "data",
                json!({"volumeName": "pv-1", "storageClassName": "gp3"}),
            )],
            vec![zonal_volume("pv-1", labels::ZONE, &["ap-south-1b"])],
            Vec::new(),
        );
        let r = requirements(&pod(claim_volume("data")), &index).expect("fits somewhere");
        assert_eq!(zones(&r), ["ap-south-1b"]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn zone_keys_of_the_ebs_driver_and_the_legacy_label_become_the_zone() {
        for key in [EBS_CSI_ZONE, "failure-domain.beta.kubernetes.io/zone"] {
            let index = VolumeIndex::new(
                vec![claim("data", json!({"volumeName": "pv-1"}))],
                vec![zonal_volume("pv-1", key, &["us-east-1c"])],
                Vec::new(),
            );
            let r = requirements(&pod(claim_volume("data")), &index).expect("fits somewhere");
            assert_eq!(zones(&r), ["us-east-1c"], "{key}");
            assert_eq!(r.keys().collect::<Vec<_>>(), [labels::ZONE], "{key}");
        }
    }

    #[test]
    fn keys_only_the_driver_sets_are_ignored_and_only_the_first_term_counts() {
        let pv: PersistentVolume = from(
            json!({"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": EBS_CSI_ZONE, "operator": "In", "values": ["us-east-1a"]},
                    {"key": "topology.example.csi/rack", "operator": "In", "values": ["r1"]}
                ]},
                {"matchExpressions": [{"key": EBS_CSI_ZONE, "operator": "In", "values": ["us-east-1b"]}]}
            ]}}}}),
        );
        let index = VolumeIndex::new(
            vec![claim("data", json!({"volumeName": "pv-1"}))],
            vec![pv],
            Vec::new(),
        );
        let r = requirements(&pod(claim_volume("data")), &index).expect("fits somewhere");
        assert_eq!(r.keys().collect::<Vec<_>>(), [labels::ZONE]);
        assert_eq!(zones(&r), ["us-east-1a"]);
    }

    #[test]
    fn a_volume_without_node_affinity_adds_nothing() {
        let pv: PersistentVolume = from(json!({"metadata": {"name": "pv-1"}, "spec": {}}));
        let index = VolumeIndex::new(
            vec![claim("data", json!({"volumeName": "pv-1"}))],
            vec![pv],
            Vec::new(),
        );
        assert!(
            requirements(&pod(claim_volume("data")), &index)
                .expect("anywhere")
                .is_empty()
        );
    }

    #[test]
    fn an_unbound_claim_waiting_for_its_consumer_takes_the_allowed_topologies() {
        let index = VolumeIndex::new(
            vec![claim("data", json!({"storageClassName": "gp3"}))],
            Vec::new(),
            vec![class(
                "gp3",
                "WaitForFirstConsumer",
                &["us-east-1a", "us-east-1b"],
            )],
        );
        let r = requirements(&pod(claim_volume("data")), &index).expect("fits somewhere");
        assert_eq!(zones(&r), ["us-east-1a", "us-east-1b"]);
        // No allowed topologies: anywhere.
        let index = VolumeIndex::new(
            vec![claim("data", json!({"storageClassName": "gp3"}))],
            Vec::new(),
            vec![class("gp3", "WaitForFirstConsumer", &[])],
        );
        assert!(
            requirements(&pod(claim_volume("data")), &index)
                .expect("anywhere")
                .is_empty()
        );
    }

    #[test]
    fn an_unbound_claim_of_an_immediate_class_waits_for_its_binding() {
        let index = VolumeIndex::new(
            vec![claim("data", json!({"storageClassName": "gp2"}))],
            Vec::new(),
            vec![class("gp2", "Immediate", &[])],
        );
        let (volume, e) = requirements(&pod(claim_volume("data")), &index).expect_err("waits");
        assert_eq!(volume, "data");
        assert!(matches!(e, VolumeError::AwaitingBinding { .. }), "{e}");
    }

    #[test]
    fn a_missing_claim_is_a_reason_naming_it() {
        let (volume, e) = requirements(&pod(claim_volume("data")), &VolumeIndex::default())
            .expect_err("no claim");
        assert_eq!(volume, "data");
        assert_eq!(e.to_string(), "persistentvolumeclaim shop/data not found");
    }

    #[test]
    fn a_missing_storage_class_is_a_reason_naming_it() {
        let index = VolumeIndex::new(
            vec![claim("data", json!({"storageClassName": "fast"}))],
            Vec::new(),
            Vec::new(),
        );
        let (_, e) = requirements(&pod(claim_volume("data")), &index).expect_err("no class");
        assert_eq!(
            e.to_string(),
            "storageclass fast of persistentvolumeclaim shop/data not found"
        );
        // Unbound with no class at all.
        let index = VolumeIndex::new(vec![claim("data", json!({}))], Vec::new(), Vec::new());
        let (_, e) = requirements(&pod(claim_volume("data")), &index).expect_err("no class");
        assert!(matches!(e, VolumeError::NoStorageClass { .. }), "{e}");
    }

    #[test]
    fn a_bound_claim_whose_volume_is_gone_is_a_reason() {
        let index = VolumeIndex::new(
            vec![claim("data", json!({"volumeName": "pv-9"}))],
            Vec::new(),
            Vec::new(),
        );
        let (_, e) = requirements(&pod(claim_volume("data")), &index).expect_err("no volume");
        assert_eq!(
            e.to_string(),
            "persistentvolumeclaim shop/data is bound to persistentvolume pv-9, which does not exist"
        );
    }

    #[test]
    fn an_ephemeral_volume_uses_the_claim_named_after_pod_and_volume() {
        let volumes = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}}]);
        let index = VolumeIndex::new(
            vec![claim("web-0-scratch", json!({"volumeName": "pv-e"}))],
            vec![zonal_volume("pv-e", EBS_CSI_ZONE, &["us-east-1b"])],
            vec![class("gp3", "WaitForFirstConsumer", &["us-east-1a"])],
        );
        assert!(uses_claims(&pod(volumes.clone())));
        let r = requirements(&pod(volumes.clone()), &index).expect("fits somewhere");
        assert_eq!(
            zones(&r),
            ["us-east-1b"],
            "the bound claim's volume, not the class"
        );
        // Before the controller creates the claim, its template's class speaks.
        let index = VolumeIndex::new(
            Vec::new(),
            Vec::new(),
            vec![class("gp3", "WaitForFirstConsumer", &["us-east-1a"])],
        );
        let r = requirements(&pod(volumes), &index).expect("fits somewhere");
        assert_eq!(zones(&r), ["us-east-1a"]);
    }

    #[test]
    fn a_template_without_a_class_gets_the_default_class() {
        let volumes =
            json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
        let mut default = class("standard", "WaitForFirstConsumer", &["us-east-1c"]);
        default.metadata.annotations = Some(
            [(
                "storageclass.kubernetes.io/is-default-class".to_owned(),
                "true".to_owned(),
            )]
            .into(),
        );
        let index = VolumeIndex::new(
            Vec::new(),
            Vec::new(),
            vec![
                class("other", "WaitForFirstConsumer", &["us-east-1a"]),
                default,
            ],
        );
        assert_eq!(
            zones(&requirements(&pod(volumes), &index).expect("fits")),
            ["us-east-1c"]
        );
    }

    #[test]
    fn volumes_in_two_zones_conflict_with_both_named() {
        let volumes = json!([
            {"name": "a", "persistentVolumeClaim": {"claimName": "data-a"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "data-b"}}
        ]);
        let index = VolumeIndex::new(
            vec![
                claim("data-a", json!({"volumeName": "pv-a"})),
                claim("data-b", json!({"volumeName": "pv-b"})),
            ],
            vec![
                zonal_volume("pv-a", labels::ZONE, &["us-east-1a"]),
                zonal_volume("pv-b", EBS_CSI_ZONE, &["us-east-1b"]),
            ],
            Vec::new(),
        );
        let (volume, e) = requirements(&pod(volumes), &index).expect_err("two zones");
        assert_eq!(volume, "b");
        let msg = e.to_string();
        assert!(
            msg.contains("shop/data-a")
                && msg.contains("shop/data-b")
                && msg.contains("us-east-1b"),
            "{msg}"
        );
    }

    #[test]
    fn a_volume_pinned_to_a_node_is_a_reason() {
        let index = VolumeIndex::new(
            vec![claim("data", json!({"volumeName": "local-1"}))],
            vec![zonal_volume("local-1", labels::HOSTNAME, &["ip-10-0-0-1"])],
            Vec::new(),
        );
        let (_, e) = requirements(&pod(claim_volume("data")), &index).expect_err("pinned");
        assert!(e.to_string().contains("to node(s) ip-10-0-0-1"), "{e}");
    }

    #[test]
    fn deleting_and_lost_claims_are_reasons() {
        let mut deleting = claim("data", json!({"volumeName": "pv-1"}));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let index = VolumeIndex::new(
            vec![deleting],
            vec![zonal_volume("pv-1", labels::ZONE, &["a"])],
            Vec::new(),
        );
        assert!(matches!(
            requirements(&pod(claim_volume("data")), &index),
            Err((_, VolumeError::ClaimDeleting { .. }))
        ));
        let mut lost = claim("data", json!({"volumeName": "pv-1"}));
        lost.status = Some(from(json!({"phase": "Lost"})));
        let index = VolumeIndex::new(vec![lost], Vec::new(), Vec::new());
        assert!(matches!(
            requirements(&pod(claim_volume("data")), &index),
            Err((_, VolumeError::ClaimLost { .. }))
        ));
    }

    #[test]
    fn a_pod_without_claims_is_unchanged() {
        let p = pod(
            json!([{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}]),
        );
        assert!(!uses_claims(&p));
        assert!(
            requirements(&p, &VolumeIndex::default())
                .expect("no volumes")
                .is_empty()
        );
        let sp = crate::scheduling::SchedPod::from_pod_with_volumes(&p, &VolumeIndex::default())
            .expect("pod");
        let plain = crate::scheduling::SchedPod::from_pod(&p).expect("pod");
        let r = crate::scheduling::pod::Relaxation::default();
        assert_eq!(sp.constraints(&r), plain.constraints(&r));
        assert_eq!(sp.constraints(&r).spread_scope, None);
    }

    #[test]
    fn the_scheduling_view_carries_the_zone_but_spreads_count_every_zone() {
        let mut p = pod(claim_volume("data"));
        p.spec.as_mut().expect("spec").node_selector =
            Some([("kubernetes.io/arch".to_owned(), "arm64".to_owned())].into());
        let index = VolumeIndex::new(
            vec![claim("data", json!({"volumeName": "pv-1"}))],
            vec![zonal_volume("pv-1", labels::ZONE, &["ap-south-1b"])],
            Vec::new(),
        );
        let sp = crate::scheduling::SchedPod::from_pod_with_volumes(&p, &index).expect("pod");
        let c = sp.constraints(&crate::scheduling::pod::Relaxation::default());
        assert!(
            c.node.allows(labels::ZONE, Some("ap-south-1b"))
                && !c.node.allows(labels::ZONE, Some("ap-south-1a"))
        );
        let scope = c.spread_scope.expect("a scope without the volume");
        assert!(
            scope.allows(labels::ZONE, Some("ap-south-1a"))
                && !scope.allows(labels::ARCH, Some("amd64"))
        );
        // A missing claim is a pod error naming the pod and the volume.
        let e = crate::scheduling::SchedPod::from_pod_with_volumes(&p, &VolumeIndex::default())
            .expect_err("no claim");
        assert_eq!(
            e.to_string(),
            "pod shop/web-0: volume data: persistentvolumeclaim shop/data not found"
        );
    }

    fn csi_node(name: &str, drivers: Value) -> CSINode {
        from(json!({"metadata": {"name": name}, "spec": {"drivers": drivers}}))
    }

    /// Karpenter's `pkg/scheduling/volumeusage`: a claim counts once per
    /// driver, bound claims by their volume's driver (an in-tree EBS volume
    /// is the EBS CSI driver's), unbound ones by their class's provisioner
    /// (in-tree names translated, no class name: the default class); NFS
    /// and claims not created yet count for nothing.
    #[test]
    fn attachments_name_each_claim_once_under_its_csi_driver() {
        let mut intree: StorageClass = class("in-tree", "WaitForFirstConsumer", &[]);
        intree.provisioner = "kubernetes.io/aws-ebs".to_owned();
        let mut other = class("other", "WaitForFirstConsumer", &[]);
        other.provisioner = "other.csi".to_owned();
        other.metadata.annotations =
            Some([(DEFAULT_CLASS_ANNOTATIONS[0].to_owned(), "true".to_owned())].into());
        let index = VolumeIndex::new(
            vec![
                claim("csi", json!({"volumeName": "pv-csi"})),
                claim("ebs", json!({"volumeName": "pv-ebs"})),
                claim("nfs", json!({"volumeName": "pv-nfs"})),
                claim("wait", json!({"storageClassName": "in-tree"})),
                claim("default", json!({})),
                claim("none", json!({"storageClassName": ""})),
            ],
            vec![
                from(
                    json!({"metadata": {"name": "pv-csi"}, "spec": {"csi": {"driver": "fake.csi", "volumeHandle": "h"}}}),
                ),
                from(
                    json!({"metadata": {"name": "pv-ebs"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}}}),
                ),
                from(
                    json!({"metadata": {"name": "pv-nfs"}, "spec": {"nfs": {"server": "s", "path": "/p"}}}),
                ),
            ],
            vec![intree, other],
        );
        let volumes: Vec<Value> = [
            "csi", "ebs", "nfs", "wait", "default", "none", "csi", "missing",
        ]
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
        let mut volumes = Value::Array(volumes);
        volumes.as_array_mut().expect("array").push(json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "other"}}}}));
        let got = attachments(&pod(volumes), &index);
        let want: Vec<Attachment> = [
            ("ebs.csi.aws.com", "shop/ebs"),
            ("ebs.csi.aws.com", "shop/wait"),
            ("fake.csi", "shop/csi"),
            ("other.csi", "shop/default"),
        ]
        .iter()
        .map(|(d, c)| ((*d).to_owned(), (*c).to_owned()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_node_takes_volumes_up_to_its_csinode_count_per_driver() {
        let index = VolumeIndex::default().with_csi_nodes(vec![csi_node(
            "n",
            json!([
                {"name": "fake.csi", "nodeID": "i", "allocatable": {"count": 2}},
                {"name": "unlimited.csi", "nodeID": "i"}
            ]),
        )]);
        let limits = index.limits_of("n");
        assert_eq!(limits, VolumeLimits::from([("fake.csi".to_owned(), 2)]));
        assert!(index.limits_of("other").is_empty(), "no CSINode: no limit");
        let a = |d: &str, c: &str| (d.to_owned(), c.to_owned());
        let used = vec![a("fake.csi", "ns/a")];
        assert!(within_limits(&limits, &used, &[a("fake.csi", "ns/b")]));
        assert!(!within_limits(
            &limits,
            &used,
            &[a("fake.csi", "ns/b"), a("fake.csi", "ns/c")]
        ));
        // A claim already attached there counts once.
        let full = vec![a("fake.csi", "ns/a"), a("fake.csi", "ns/b")];
        assert!(within_limits(&limits, &full, &[a("fake.csi", "ns/a")]));
        assert!(!within_limits(&limits, &full, &[a("fake.csi", "ns/c")]));
        // Drivers without a limit take any number.
        assert!(within_limits(&limits, &full, &[a("unlimited.csi", "ns/x")]));
    }
}
