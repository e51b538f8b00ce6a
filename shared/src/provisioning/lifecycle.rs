//! What happens to a claim after the decision: registration of its Node,
//! the registration timeout, and garbage collection in both directions
//! (instances without a claim — adopted or terminated —, claims without an
//! instance). Pure.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::model::claim::{
    BINDING_TAINT_KEY, CLAIM_LABEL, Claim, ClaimInstance, LaunchStamp, NODES, Phase,
    is_registration_taint, reservation_of,
};
use crate::model::{
    CloudCatalog, Instance, LaunchTemplate, PodKey, PricedOffering, SignedDuration, Timestamp,
    Usage,
};

/// Karpenter's registration TTL.
pub const REGISTRATION_TIMEOUT: SignedDuration = SignedDuration::from_mins(15);
/// An instance tagged as ours with no claim is left alone this long, in case
/// its claim write is not visible yet (then adopted, or terminated when it
/// has no Node past [`REGISTRATION_TIMEOUT`]).
pub const ORPHAN_GRACE: SignedDuration = SignedDuration::from_mins(2);
/// A claim recorded but not launched is launched again after this long: its
/// own invocation normally records the launch well within it.
pub const RESUME_LAUNCH_AFTER: SignedDuration = SignedDuration::from_secs(30);
/// A claim whose instance the cloud no longer lists is kept this long after
/// launch (DescribeInstances is eventually consistent).
pub const MISSING_INSTANCE_GRACE: SignedDuration = SignedDuration::from_mins(1);
/// The binding taint stays this long after nodewright bound pods to a new
/// node: kube-scheduler learns of those bindings from its pod watch and of
/// the lifted taint from its node watch, in no guaranteed order, and would
/// count a node whose taint it saw lifted first as empty (the API server
/// checks no capacity on a binding).
pub const BINDING_SETTLE: SignedDuration = SignedDuration::from_secs(10);

#[derive(Debug, Clone, PartialEq)]
pub enum LifecycleAction {
    /// The claim was written but its launch not recorded: launch (idempotently) again.
    Launch { claim: Claim },
    /// The claim's Node registered: lift our taint, bind the still-pending
    /// pods. `lift_taint`: the node carries one of our registration taints
    /// (unregistered, or binding left by an invocation that stopped).
    Register {
        claim: Claim,
        node: String,
        lift_taint: bool,
        bind: Vec<PodKey>,
    },
    /// A registered claim's node still carries the binding taint,
    /// `BINDING_SETTLE` after it registered (the registration that bound
    /// pods leaves it on for that long; or an invocation stopped between
    /// putting it on and lifting it, or the claim was recovered after state
    /// loss): lift it, or kube-scheduler never uses the node.
    LiftBindingTaint { claim: Claim, node: String },
    /// No Node within the timeout: terminate the instance and drop the claim.
    RegistrationTimedOut { claim: Claim },
    /// The instance is gone: drop the claim (and its Node, if any).
    InstanceGone { claim: Claim },
    /// An instance of ours that no claim knows, without a Node past the
    /// registration timeout: terminate it.
    Orphan { instance: Instance },
    /// An instance of ours that no claim knows, registered or still
    /// booting (or any, while the claim set reads empty): write the claim
    /// recovered from its tags and Node.
    Adopt {
        instance: Instance,
        node: Option<String>,
        claim: Box<Claim>,
    },
}

fn provider_id(n: &Node) -> Option<&str> {
    n.spec.as_ref()?.provider_id.as_deref()
}

/// The labels and annotations a registered node of the claim must carry
/// beyond what its kubelet set: the claim's labels (NodePool template
/// labels, its requirements' values, the NodePool's name), every fact of
/// its instance type that is a label (family, CPU, GPU, …, as Karpenter
/// labels its nodes), the zone id, and the template's annotations.
pub fn node_metadata(
    claim: &Claim,
    catalog: &crate::model::CloudCatalog,
    pool: Option<&crate::config::NodePool>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = BTreeMap::new();
    // Claims recorded before tenancy was chosen launched on shared hardware.
    labels.insert(
        crate::scheduling::labels::INSTANCE_TENANCY.to_owned(),
        crate::scheduling::labels::TENANCY_DEFAULT.to_owned(),
    );
    if let Some(instance) = &claim.instance {
        if let Some(info) = catalog
            .instance_types
            .iter()
            .find(|t| t.name == instance.instance_type)
        {
            labels.extend(info.requirements_for(&claim.kubelet).single_valued_labels());
        }
        if let Some(id) = catalog.zone_ids.get(&instance.zone) {
            labels.insert(crate::scheduling::labels::ZONE_ID.to_owned(), id.clone());
        }
        // What was bought, as the cloud says (a reserved option that found
        // its reservation full fell back to on-demand or spot).
        if !instance.capacity_type.is_empty() {
            labels.insert(
                crate::scheduling::labels::CAPACITY_TYPE.to_owned(),
                instance.capacity_type.clone(),
            );
        }
        if let (Some(id), Some(kind)) = (
            &instance.capacity_reservation_id,
            instance.capacity_reservation_type,
        ) {
            use crate::scheduling::labels as l;
            labels.insert(l::CAPACITY_RESERVATION_ID.to_owned(), id.clone());
            labels.insert(
                l::CAPACITY_RESERVATION_TYPE.to_owned(),
                kind.as_str().to_owned(),
            );
            labels.insert(
                l::CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
                instance.capacity_reservation_interruptible.to_string(),
            );
        }
    }
    labels.extend(claim.labels.clone());
    let mut annotations = pool
        .map(|p| p.template_annotations.clone())
        .unwrap_or_default();
    let relaxed = crate::model::claim::MIN_VALUES_RELAXED_ANNOTATION;
    if let Some(v) = claim.annotations.get(relaxed) {
        annotations.insert(relaxed.to_owned(), v.clone());
    }
    (labels, annotations)
}

/// Registration and launch retries, from claims, nodes and pending pods.
pub fn registration(
    claims: &[Claim],
    nodes: &[Node],
    pending: &[Pod],
    now: Timestamp,
) -> Vec<LifecycleAction> {
    let nodes_by_provider: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((provider_id(n)?, n)))
        .collect();
    let pending_uids: HashSet<&str> = pending
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let mut actions = Vec::new();
    for c in claims {
        match c.phase() {
            Phase::Pending => {
                if now.duration_since(c.created_at) >= RESUME_LAUNCH_AFTER {
                    actions.push(LifecycleAction::Launch { claim: c.clone() });
                }
            }
            Phase::Launched => {
                let Some(instance) = &c.instance else {
                    continue;
                };
                if let Some(node) = nodes_by_provider.get(instance.provider_id.as_str()) {
                    let lift_taint = has_taint(node, is_registration_taint);
                    let bind = c
                        .pods
                        .iter()
                        .filter(|k| pending_uids.contains(k.uid.as_str()))
                        .cloned()
                        .collect();
                    actions.push(LifecycleAction::Register {
                        claim: c.clone(),
                        node: node.metadata.name.clone().unwrap_or_default(),
                        lift_taint,
                        bind,
                    });
                } else if now.duration_since(instance.launched_at) >= REGISTRATION_TIMEOUT {
                    actions.push(LifecycleAction::RegistrationTimedOut { claim: c.clone() });
                }
            }
            Phase::Registered => {
                let Some(instance) = &c.instance else {
                    continue;
                };
                let settled = c
                    .registered_at
                    .is_none_or(|at| now.duration_since(at) >= BINDING_SETTLE);
                if let Some(node) = nodes_by_provider.get(instance.provider_id.as_str())
                    && settled
                    && has_taint(node, |k| k == BINDING_TAINT_KEY)
                {
                    actions.push(LifecycleAction::LiftBindingTaint {
                        claim: c.clone(),
                        node: node.metadata.name.clone().unwrap_or_default(),
                    });
                }
            }
        }
    }
    actions
}

fn has_taint(node: &Node, key: impl Fn(&str) -> bool) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| key(&t.key)))
}

/// Why garbage collection may not act at all this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcBlock {
    /// State items (claims, commands) that could not be read: the claim set
    /// may be missing the very claim of an instance.
    Unreadable(usize),
}

/// What one garbage-collection pass decided: the actions, and every
/// instance of ours without a claim that it leaves alone, with why (the
/// handler logs each).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Garbage {
    pub actions: Vec<LifecycleAction>,
    pub left_alone: Vec<LeftAlone>,
}

/// An instance (or a claim) garbage collection did not act on, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftAlone {
    /// The instance id (or, for a claim kept, the claim id).
    pub subject: String,
    pub reason: String,
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Garbage collection against the cloud's list of our instances (those
/// with our ownership tag: nothing else is ever listed) and the cluster's
/// Nodes. It fails closed:
/// - while `blocked` (unreadable state items) it does nothing;
/// - an instance without a claim whose Node is registered is **adopted**
///   (a claim recovered from its tags and Node), never terminated: it runs
///   pods, and an unneeded one is then removed by disruption, drained;
/// - so is one without a Node launched less than the registration timeout
///   ago (it may still register), and, while the claim set reads empty (a
///   lost, new or misnamed state table), every one: nothing is terminated
///   on an empty claim set;
/// - only an instance without a claim, without a Node, past the
///   registration timeout, with claims readable and present, is terminated;
/// - a claim whose instance is no longer listed is released only when its
///   Node is gone or not Ready (a Ready kubelet says the instance is alive,
///   as Karpenter's garbage collection checks).
///
/// Every instance without a claim that it does not act on is in
/// `left_alone` with the reason.
pub fn collect_garbage(
    claims: &[Claim],
    instances: &[Instance],
    nodes: &[Node],
    blocked: Option<GcBlock>,
    now: Timestamp,
) -> Garbage {
    let mut out = Garbage::default();
    if let Some(GcBlock::Unreadable(n)) = blocked {
        for i in instances.iter().filter(|i| !i.state.is_gone_or_going()) {
            out.left_alone.push(LeftAlone {
                subject: i.id.clone(),
                reason: format!(
                    "{n} state item(s) cannot be read: garbage collection waits until they are fixed or removed"
                ),
            });
        }
        return out;
    }
    let claimed: HashMap<&str, &Claim> = claims.iter().map(|c| (c.id.as_str(), c)).collect();
    let claimed_instances: HashSet<&str> = claims.iter().filter_map(|c| c.instance_id()).collect();
    let nodes_by_provider: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((provider_id(n)?, n)))
        .collect();
    let live: HashSet<&str> = instances
        .iter()
        .filter(|i| !i.state.is_gone_or_going())
        .map(|i| i.id.as_str())
        .collect();
    let state_empty = claims.is_empty();
    for i in instances {
        if i.state.is_gone_or_going() || claimed_instances.contains(i.id.as_str()) {
            continue;
        }
        let age = now.duration_since(i.launched_at);
        let node = nodes_by_provider.get(i.provider_id.as_str()).copied();
        let mut leave = |reason: String| {
            out.left_alone.push(LeftAlone {
                subject: i.id.clone(),
                reason,
            })
        };
        if age < ORPHAN_GRACE {
            leave(format!(
                "launched {}s ago: its claim may not be visible yet",
                age.as_secs()
            ));
            continue;
        }
        // A claim that launched but did not record its instance yet still owns it.
        if let Some(c) = i.claim_id.as_deref().and_then(|id| claimed.get(id)) {
            match c.instance_id() {
                None => leave(format!(
                    "its nodeclaim {} has not recorded the launch yet",
                    c.id
                )),
                Some(other) => leave(format!(
                    "tagged with nodeclaim {}, which holds instance {other}: a second launch of one claim{}",
                    c.id,
                    if node.is_some() {
                        "; its Node is registered, so it is not terminated"
                    } else {
                        ""
                    }
                )),
            }
            if c.instance_id().is_some() && node.is_none() && age >= REGISTRATION_TIMEOUT {
                out.left_alone.pop();
                out.actions.push(LifecycleAction::Orphan {
                    instance: i.clone(),
                });
            }
            continue;
        }
        let adopt = node.is_some() || age < REGISTRATION_TIMEOUT || state_empty;
        if adopt {
            match adopted_claim(i, node, now) {
                Ok(claim) => out.actions.push(LifecycleAction::Adopt {
                    instance: i.clone(),
                    node: node.and_then(|n| n.metadata.name.clone()),
                    claim: Box::new(claim),
                }),
                Err(why) => leave(why),
            }
        } else {
            out.actions.push(LifecycleAction::Orphan {
                instance: i.clone(),
            });
        }
    }
    for c in claims {
        let Some(inst) = &c.instance else { continue };
        if live.contains(inst.id.as_str())
            || now.duration_since(inst.launched_at) < MISSING_INSTANCE_GRACE
        {
            continue;
        }
        let ready_node = nodes_by_provider
            .get(inst.provider_id.as_str())
            .filter(|n| node_ready(n));
        if let Some(n) = ready_node {
            out.left_alone.push(LeftAlone {
                subject: c.id.clone(),
                reason: format!(
                    "instance {} is not listed as ours, but its Node {} is Ready: the claim is kept",
                    inst.id,
                    n.metadata.name.as_deref().unwrap_or_default()
                ),
            });
            continue;
        }
        out.actions
            .push(LifecycleAction::InstanceGone { claim: c.clone() });
    }
    out
}

/// A launch template of ours is never deleted younger than this: a launch
/// that resolved it a moment ago may still be calling CreateFleet with it.
pub const LAUNCH_TEMPLATE_GRACE: SignedDuration = SignedDuration::from_mins(10);

/// What one launch-template clean-up pass decided: the templates to
/// delete with why, and every one kept with why (the handler logs both).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateGarbage {
    pub delete: Vec<(LaunchTemplate, String)>,
    pub kept: Vec<LeftAlone>,
}

/// Which of our launch templates (those listed with our ownership tag:
/// nothing else is ever listed) no longer serve anything. `current` maps
/// each configured NodeClass to the AMIs it resolves to now (empty when
/// that is not known). A template is deleted only when all hold:
/// - no state item is unreadable (`blocked`: a claim we cannot read may be
///   launching with it);
/// - it is older than [`LAUNCH_TEMPLATE_GRACE`];
/// - no claim of its NodeClass is launching (not yet holding an instance:
///   its launch, or its retry, may use any template of the class);
/// - no live claim of its NodeClass runs on its AMI;
/// - it is not a current template of its NodeClass: the class is no
///   longer configured, or its AMI is not among those the class resolves
///   to now (a class whose AMIs are not known keeps all its templates).
///
/// Karpenter's provider deletes a template a minute after its last use
/// and all of an EC2NodeClass's when the class goes
/// (`pkg/providers/launchtemplate/launchtemplate.go`); this keeps the
/// same effect without a process-local cache, from the claims and what
/// the classes resolve to.
pub fn unused_launch_templates(
    templates: &[LaunchTemplate],
    claims: &[Claim],
    current: &BTreeMap<String, Vec<String>>,
    blocked: Option<GcBlock>,
    now: Timestamp,
) -> TemplateGarbage {
    let mut out = TemplateGarbage::default();
    let keep = |out: &mut TemplateGarbage, t: &LaunchTemplate, reason: String| {
        out.kept.push(LeftAlone {
            subject: t.name.clone(),
            reason,
        })
    };
    for t in templates {
        if let Some(GcBlock::Unreadable(n)) = blocked {
            keep(
                &mut out,
                t,
                format!("{n} state item(s) cannot be read: template clean-up waits"),
            );
            continue;
        }
        let age = now.duration_since(t.created_at);
        if age < LAUNCH_TEMPLATE_GRACE {
            keep(
                &mut out,
                t,
                format!("created {}s ago: a launch may be using it", age.as_secs()),
            );
            continue;
        }
        let class = t.node_class.as_deref();
        let of_class = |c: &Claim| {
            c.node_class.is_none() || class.is_none() || c.node_class.as_deref() == class
        };
        if let Some(c) = claims.iter().find(|c| of_class(c) && c.instance.is_none()) {
            keep(
                &mut out,
                t,
                format!("nodeclaim {} of its NodeClass is launching", c.id),
            );
            continue;
        }
        if let Some(c) = claims
            .iter()
            .find(|c| of_class(c) && t.image_id.is_some() && c.stamp.image_id == t.image_id)
        {
            keep(&mut out, t, format!("nodeclaim {} runs on its image", c.id));
            continue;
        }
        let Some(class) = class else {
            keep(&mut out, t, "it names no NodeClass".to_owned());
            continue;
        };
        let reason = match current.get(class) {
            None => format!("NodeClass {class} is no longer configured"),
            Some(images) if images.is_empty() => {
                keep(
                    &mut out,
                    t,
                    format!("the AMIs NodeClass {class} resolves to are not known"),
                );
                continue;
            }
            Some(images) => match t.image_id.as_deref() {
                Some(image) if images.iter().any(|i| i == image) => {
                    keep(
                        &mut out,
                        t,
                        format!("a current template of NodeClass {class}"),
                    );
                    continue;
                }
                Some(image) => format!(
                    "NodeClass {class} no longer resolves to {image} (now {})",
                    images.join(", ")
                ),
                None => format!(
                    "it does not say its AMI, so it is not one NodeClass {class} launches with now"
                ),
            },
        };
        out.delete
            .push((t.clone(), format!("{reason}; no nodeclaim uses it")));
    }
    out
}

/// What an adopted instance counts against its pool: its type's capacity
/// (with the default kubelet) and one node; one node alone when the catalog
/// does not know the type.
pub fn adopted_reservation(catalog: &CloudCatalog, instance_type: &str) -> Usage {
    match catalog
        .instance_types
        .iter()
        .find(|t| t.name == instance_type)
    {
        Some(info) => reservation_of(&info.capacity(&Default::default())),
        None => [(NODES.to_owned(), 1)].into(),
    }
}

/// The claim an instance of ours without one gets back: its id, pool and
/// NodeClass from the instance's tags (else the Node's labels), the
/// instance recorded, registered when its Node is. Its reservation is left
/// empty here; the handler fills it from the catalog. An instance without
/// a Node gets the registration timeout from now, so a node that boots
/// late is not cut short by the adoption. Errs with why when the instance
/// names no NodePool.
pub fn adopted_claim(
    instance: &Instance,
    node: Option<&Node>,
    now: Timestamp,
) -> Result<Claim, String> {
    let label = |k: &str| {
        node.and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(k))
            .cloned()
    };
    let pool = instance
        .pool
        .clone()
        .or_else(|| label(crate::scheduling::labels::NODEPOOL))
        .ok_or_else(|| {
            "no nodepool tag on the instance nor label on a Node: not adopted".to_owned()
        })?;
    let id = instance
        .claim_id
        .clone()
        .or_else(|| label(CLAIM_LABEL))
        .unwrap_or_else(|| format!("{pool}-{}", instance.id));
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(crate::scheduling::labels::NODEPOOL.to_owned(), pool.clone());
    let mut recorded = ClaimInstance::from(instance);
    if node.is_none() {
        recorded.launched_at = now;
    }
    Ok(Claim {
        id,
        pool,
        node_class: instance.node_class.clone(),
        version: 1,
        created_at: now,
        options: vec![PricedOffering {
            reservation_ids: Vec::new(),
            instance_type: instance.instance_type.clone(),
            zone: instance.zone.clone(),
            capacity_type: instance.capacity_type.clone(),
            price: instance.price,
        }],
        labels,
        annotations: Default::default(),
        taints: Vec::new(),
        kubelet: Default::default(),
        pods: Vec::new(),
        requests: Default::default(),
        reservation: Default::default(),
        launch_attempts: 1,
        running_at: (instance.state == crate::model::InstanceState::Running).then_some(now),
        instance: Some(recorded),
        node_name: node.and_then(|n| n.metadata.name.clone()),
        registered_at: node.map(|_| now),
        stamp: LaunchStamp {
            image_id: instance.image_id.clone(),
            subnet_id: instance.subnet_id.clone(),
            security_group_ids: instance.security_group_ids.clone(),
            ..LaunchStamp::default()
        },
        disruption: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::InstanceState;

    fn t(mins: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1000) + SignedDuration::from_mins(mins)
    }

    fn instance(id: &str, claim: Option<&str>, launched: Timestamp) -> Instance {
        Instance {
            id: id.to_owned(),
            instance_type: "m5.large".to_owned(),
            zone: "us-east-1a".to_owned(),
            capacity_type: "on-demand".to_owned(),
            state: InstanceState::Running,
            launched_at: launched,
            claim_id: claim.map(str::to_owned),
            pool: Some("default".to_owned()),
            node_class: Some("default".to_owned()),
            provider_id: format!("aws:///us-east-1a/{id}"),
            price: 0.096,
            image_id: Some("ami-1".to_owned()),
            subnet_id: None,
            security_group_ids: Vec::new(),
            capacity_reservation_id: None,
            capacity_reservation_type: None,
            capacity_reservation_interruptible: false,
        }
    }

    fn node(name: &str, i: &Instance, ready: bool) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": i.provider_id},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("node")
    }

    /// A registered claim holding `i`.
    fn claim_of(i: &Instance, node: &str) -> Claim {
        let mut c = adopted_claim(i, None, i.launched_at).expect("claim");
        c.node_name = Some(node.to_owned());
        c
    }

    #[test]
    fn a_binding_taint_left_on_a_node_is_lifted_whether_or_not_its_claim_registered() {
        let i = instance("i-1", Some("c"), t(0));
        let mut tainted = node("n1", &i, true);
        tainted.spec.get_or_insert_with(Default::default).taints =
            Some(vec![k8s_openapi::api::core::v1::Taint {
                key: BINDING_TAINT_KEY.to_owned(),
                effect: "NoSchedule".to_owned(),
                ..Default::default()
            }]);
        // Stopped before the claim said registered: registered again, the
        // taint lifted.
        let mut launched = claim_of(&i, "n1");
        launched.node_name = None;
        assert_eq!(launched.phase(), Phase::Launched);
        let actions = registration(&[launched], std::slice::from_ref(&tainted), &[], t(1));
        assert!(
            matches!(&actions[..], [LifecycleAction::Register { lift_taint: true, bind, .. }] if bind.is_empty()),
            "{actions:?}"
        );
        // A registered claim (recovered after state loss) whose node kept it.
        let registered = claim_of(&i, "n1");
        let actions = registration(
            std::slice::from_ref(&registered),
            std::slice::from_ref(&tainted),
            &[],
            t(1),
        );
        assert!(
            matches!(&actions[..], [LifecycleAction::LiftBindingTaint { node, .. }] if node == "n1"),
            "{actions:?}"
        );
        // Just registered (its registration bound pods and left the taint
        // on): kept until kube-scheduler has had time to see the bindings.
        let mut just = registered.clone();
        just.registered_at = Some(t(1));
        assert!(
            registration(
                std::slice::from_ref(&just),
                std::slice::from_ref(&tainted),
                &[],
                t(1) + BINDING_SETTLE - SignedDuration::from_secs(1)
            )
            .is_empty()
        );
        let actions = registration(
            std::slice::from_ref(&just),
            std::slice::from_ref(&tainted),
            &[],
            t(1) + BINDING_SETTLE,
        );
        assert!(
            matches!(&actions[..], [LifecycleAction::LiftBindingTaint { .. }]),
            "{actions:?}"
        );
        // Without it, a registered claim asks for nothing.
        assert!(registration(&[registered], &[node("n1", &i, true)], &[], t(1)).is_empty());
    }

    fn adopted(g: &Garbage) -> Vec<(&str, Option<&str>, &str)> {
        g.actions
            .iter()
            .filter_map(|a| match a {
                LifecycleAction::Adopt {
                    instance,
                    node,
                    claim,
                } => Some((instance.id.as_str(), node.as_deref(), claim.id.as_str())),
                _ => None,
            })
            .collect()
    }

    fn terminated(g: &Garbage) -> Vec<&str> {
        g.actions
            .iter()
            .filter_map(|a| match a {
                LifecycleAction::Orphan { instance } => Some(instance.id.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_empty_claim_set_adopts_every_instance_and_terminates_none() {
        let ready = instance("i-ready", Some("default-aaaaa"), t(0));
        let booting = instance("i-booting", Some("default-bbbbb"), t(55));
        let silent = instance("i-silent", Some("default-ccccc"), t(-120));
        let nodes = [node("n-ready", &ready, true)];
        let g = collect_garbage(&[], &[ready, booting, silent], &nodes, None, t(60));
        assert!(terminated(&g).is_empty(), "{g:?}");
        assert_eq!(
            adopted(&g),
            [
                ("i-ready", Some("n-ready"), "default-aaaaa"),
                ("i-booting", None, "default-bbbbb"),
                ("i-silent", None, "default-ccccc"),
            ]
        );
        // The registered one comes back registered; the others get the
        // registration timeout from the adoption, not from their launch.
        let LifecycleAction::Adopt { claim, .. } = &g.actions[0] else {
            panic!()
        };
        assert_eq!(claim.phase(), Phase::Registered);
        assert_eq!(claim.pool, "default");
        assert_eq!(claim.node_class.as_deref(), Some("default"));
        let LifecycleAction::Adopt { claim, .. } = &g.actions[2] else {
            panic!()
        };
        assert_eq!(claim.phase(), Phase::Launched);
        assert_eq!(claim.instance.as_ref().map(|i| i.launched_at), Some(t(60)));
        assert!(
            registration(&[(**claim).clone()], &[], &[], t(70)).is_empty(),
            "no timeout right after the adoption"
        );
    }

    #[test]
    fn unreadable_state_items_stop_garbage_collection() {
        let other = instance("i-known", Some("default-known"), t(0));
        let claims = [claim_of(&other, "n-known")];
        let orphan = instance("i-orphan", None, t(-600));
        let mut gone = claims[0].clone();
        gone.id = "default-gone".into();
        gone.instance.as_mut().expect("instance").id = "i-gone".into();
        let g = collect_garbage(
            &[claims[0].clone(), gone],
            &[other, orphan],
            &[],
            Some(GcBlock::Unreadable(1)),
            t(60),
        );
        assert!(g.actions.is_empty(), "{g:?}");
        assert!(
            g.left_alone
                .iter()
                .any(|l| l.subject == "i-orphan" && l.reason.contains("cannot be read")),
            "{g:?}"
        );
    }

    #[test]
    fn an_instance_without_a_claim_whose_node_is_registered_is_adopted_not_terminated() {
        // The claim set is not empty (restored from an older copy): the
        // newer instance, registered and Ready — or not Ready — comes back.
        let known = instance("i-known", Some("default-known"), t(0));
        let newer = instance("i-newer", Some("default-newer"), t(10));
        let sick = instance("i-sick", None, t(10));
        let nodes = [node("n-newer", &newer, true), node("n-sick", &sick, false)];
        let g = collect_garbage(
            &[claim_of(&known, "n-known")],
            &[known, newer, sick],
            &nodes,
            None,
            t(300),
        );
        assert!(terminated(&g).is_empty(), "{g:?}");
        assert_eq!(
            adopted(&g),
            [
                ("i-newer", Some("n-newer"), "default-newer"),
                // No claim tag: the claim id is made from the pool and the instance.
                ("i-sick", Some("n-sick"), "default-i-sick"),
            ]
        );
    }

    #[test]
    fn only_an_unclaimed_instance_without_a_node_past_the_registration_timeout_is_terminated() {
        let known = instance("i-known", Some("default-known"), t(0));
        let young = instance("i-young", None, t(59));
        let booting = instance("i-booting", None, t(50));
        let dead = instance("i-dead", None, t(40));
        let g = collect_garbage(
            &[claim_of(&known, "n-known")],
            &[known, young, booting, dead],
            &[],
            None,
            t(60),
        );
        assert_eq!(terminated(&g), ["i-dead"]);
        assert_eq!(adopted(&g), [("i-booting", None, "default-i-booting")]);
        assert_eq!(g.left_alone.len(), 1, "{g:?}");
        assert_eq!(g.left_alone[0].subject, "i-young");
        assert!(g.left_alone[0].reason.contains("may not be visible yet"));
    }

    #[test]
    fn a_second_instance_of_a_claim_is_left_alone_until_it_cannot_register() {
        let first = instance("i-first", Some("default-twice"), t(0));
        let claims = [claim_of(&first, "n-first")];
        let second = instance("i-second", Some("default-twice"), t(10));
        let g = collect_garbage(&claims, &[first.clone(), second.clone()], &[], None, t(20));
        assert!(g.actions.is_empty(), "{g:?}");
        assert!(g.left_alone[0].reason.contains("second launch"));
        let g = collect_garbage(&claims, &[first.clone(), second.clone()], &[], None, t(30));
        assert_eq!(terminated(&g), ["i-second"]);
        // With its Node registered it is never terminated here.
        let nodes = [node("n-second", &second, true)];
        let g = collect_garbage(&claims, &[first, second], &nodes, None, t(30));
        assert!(g.actions.is_empty(), "{g:?}");
    }

    #[test]
    fn a_claim_whose_instance_is_not_listed_is_kept_while_its_node_is_ready() {
        let i = instance("i-vanished", Some("default-v"), t(0));
        let claims = [claim_of(&i, "n-v")];
        let g = collect_garbage(&claims, &[], &[node("n-v", &i, true)], None, t(60));
        assert!(g.actions.is_empty(), "{g:?}");
        assert!(g.left_alone[0].reason.contains("is Ready"));
        let g = collect_garbage(&claims, &[], &[node("n-v", &i, false)], None, t(60));
        assert!(matches!(
            g.actions.as_slice(),
            [LifecycleAction::InstanceGone { .. }]
        ));
        let g = collect_garbage(&claims, &[], &[], None, t(60));
        assert!(matches!(
            g.actions.as_slice(),
            [LifecycleAction::InstanceGone { .. }]
        ));
    }

    fn template(
        name: &str,
        class: Option<&str>,
        image: Option<&str>,
        created: Timestamp,
    ) -> LaunchTemplate {
        LaunchTemplate {
            id: format!("lt-{name}"),
            name: name.to_owned(),
            created_at: created,
            node_class: class.map(str::to_owned),
            pool: Some("default".to_owned()),
            image_id: image.map(str::to_owned),
        }
    }

    fn deleted(g: &TemplateGarbage) -> Vec<&str> {
        g.delete.iter().map(|(t, _)| t.name.as_str()).collect()
    }

    #[test]
    fn launch_templates_are_deleted_only_when_nothing_uses_them() {
        let running = claim_of(&instance("i-1", Some("default-aaaaa"), t(0)), "n-1");
        assert_eq!(running.stamp.image_id.as_deref(), Some("ami-1"));
        let templates = [
            template("young", Some("default"), Some("ami-0"), t(55)),
            template("in-use", Some("default"), Some("ami-1"), t(0)),
            template("current", Some("default"), Some("ami-2"), t(0)),
            template("old", Some("default"), Some("ami-0"), t(0)),
            template("class-gone", Some("gone"), Some("ami-2"), t(0)),
            template("no-image-tag", Some("default"), None, t(0)),
            template("unresolved", Some("unknown"), Some("ami-0"), t(0)),
        ];
        let current: BTreeMap<String, Vec<String>> = [
            ("default".to_owned(), vec!["ami-2".to_owned()]),
            ("unknown".to_owned(), Vec::new()),
        ]
        .into();
        let g = unused_launch_templates(
            &templates,
            std::slice::from_ref(&running),
            &current,
            None,
            t(60),
        );
        assert_eq!(deleted(&g), ["old", "class-gone", "no-image-tag"], "{g:?}");
        let why = |name: &str| {
            g.kept
                .iter()
                .find(|k| k.subject == name)
                .map(|k| k.reason.clone())
                .unwrap_or_default()
        };
        assert!(why("young").contains("ago"), "{}", why("young"));
        assert!(why("in-use").contains("default-aaaaa"), "{}", why("in-use"));
        assert!(why("current").contains("current"), "{}", why("current"));
        assert!(
            why("unresolved").contains("not known"),
            "{}",
            why("unresolved")
        );
        assert!(
            g.delete[1].1.contains("no longer configured"),
            "{:?}",
            g.delete[1]
        );

        // A claim of the class still launching keeps every template of it.
        let mut launching = running.clone();
        launching.id = "default-bbbbb".to_owned();
        launching.instance = None;
        let g = unused_launch_templates(
            &templates,
            &[running.clone(), launching],
            &current,
            None,
            t(60),
        );
        assert_eq!(deleted(&g), ["class-gone"], "{g:?}");

        // While a state item cannot be read, nothing is deleted.
        let g = unused_launch_templates(
            &templates,
            &[running],
            &current,
            Some(GcBlock::Unreadable(1)),
            t(60),
        );
        assert!(g.delete.is_empty(), "{g:?}");
        assert_eq!(g.kept.len(), templates.len());
    }
}
