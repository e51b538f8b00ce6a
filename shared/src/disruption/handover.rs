//! Handing a pool over from Karpenter (`nodewright config import --adopt
//! replace`): the nodes Karpenter launched for a pool that nodewright now
//! serves are replaced a few at a time, within the pool's disruption
//! budgets for `Drifted`, as drift replaces nodewright's own: replacement
//! first.
//!
//! For each node whose turn it is, the decision simulates its
//! reschedulable pods onto the room there is (the pool's other Karpenter
//! nodes left out: their room goes too) plus new claims — the simulation
//! drift and consolidation use — and emits a command (method `handover`)
//! that the drain-and-terminate machine carries out as a handover
//! (`RemovalSpec::handover`): launch the replacements, wait until they are
//! registered and initialized, then delete the **Node**. Karpenter's
//! termination finalizer (`karpenter.sh/termination`, on every Node
//! Karpenter manages) makes Karpenter taint it, drain it through the
//! Eviction API (honouring PodDisruptionBudgets), terminate its instance
//! and only then let the Node go — what `kubectl delete node` does on a
//! Karpenter cluster. The evicted pods find the replacements' room. If a
//! replacement cannot be launched or does not initialize in time, the
//! command is rolled back and nothing is deleted; the next decision tries
//! again. nodewright never drains nor terminates what it did not launch; a
//! Node without the finalizer is left alone (deleting it would drain
//! nothing).
//!
//! A node of the pool counts against the budget from the moment its
//! handover starts until the Node is gone, so a removal Karpenter does not
//! finish (it is not running) holds the next ones: never all at once.
//!
//! **Karpenter still launching.** If Karpenter's NodePool can still launch
//! (its limits were not set to zero, it was not deleted), the evicted pods
//! may land on new Karpenter nodes and the two controllers fight. The
//! cluster port does not read Karpenter's NodePools; what the decision sees
//! is a Karpenter node of the pool created after nodewright's first node
//! of it: while the newest such node is younger than [`KARPENTER_QUIET`],
//! the handover pauses and says why (with the command that stops
//! Karpenter). `nodewright config import --adopt replace` and `config
//! validate` warn from the NodePool itself.
//!
//! No I/O, no clock: `now` is the time.

use k8s_openapi::api::core::v1::Node;

use super::context::{Context, Proposal};
use super::decision::Reason;
use super::snapshot::claim_of;
use crate::config::settings::{KARPENTER_NODES_ANNOTATION, KarpenterNodes, stop_karpenter_command};
use crate::config::{DisruptionReason, NodePool};
use crate::model::{Claim, DISRUPTED_TAINT_KEY, SignedDuration, Timestamp};
use crate::scheduling::labels;

/// The finalizer Karpenter puts on the Nodes it manages: deleting such a
/// Node makes Karpenter drain it and terminate its instance first.
pub const KARPENTER_TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// The method name of a handover command (`Command::method`).
pub const METHOD: &str = "handover";

/// How long the handover of a pool pauses after Karpenter launched a node
/// for it while nodewright serves it (see the module's doc).
pub const KARPENTER_QUIET: SignedDuration = SignedDuration::from_mins(10);

/// The id of the removal command of a Karpenter node's handover (there is
/// no claim of ours; one command per node all the same).
pub fn command_id(node: &str) -> String {
    format!("handover-{node}")
}

/// What the handover of one pool is doing, for the handler, the log,
/// `nodewright plan` and `nodewright status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Handover {
    pub pool: String,
    /// Nodes whose handover starts with this decision (their replacements
    /// launch first), oldest first.
    pub start: Vec<String>,
    /// Nodes being handed over already (replacements launching, or
    /// deleted and draining).
    pub in_progress: Vec<String>,
    /// Karpenter's nodes of the pool still there (all of the above included).
    pub remaining: usize,
    /// The next node to go (the oldest not yet started), if any.
    pub next: Option<String>,
    /// Why no (more) node starts now, worded for the user.
    pub waiting: Option<String>,
}

/// What a pool says about Karpenter's nodes (`none` when unset).
pub fn karpenter_nodes(pool: &NodePool) -> KarpenterNodes {
    pool.annotations
        .get(KARPENTER_NODES_ANNOTATION)
        .and_then(|v| KarpenterNodes::parse(v))
        .unwrap_or_default()
}

/// Whether `node` is one Karpenter launched for `pool`: labelled with the
/// pool, no claim of ours, Karpenter's termination finalizer on it.
pub fn is_karpenters(node: &Node, pool: &str, claims: &[Claim]) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .is_some_and(|p| p == pool);
    labelled && claim_of(node, claims).is_none() && has_finalizer(node)
}

fn has_finalizer(node: &Node) -> bool {
    node.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == KARPENTER_TERMINATION_FINALIZER)
}

/// Karpenter's own disruption at work: its taint on the node.
fn tainted_by_karpenter(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

/// Why the handover of `pool` pauses because Karpenter still launches for
/// it: the newest of its Karpenter nodes (`theirs`: name, created) was
/// created after nodewright's first node of the pool (`ours_since`) and
/// less than [`KARPENTER_QUIET`] ago.
pub fn karpenter_launching(
    pool: &str,
    theirs: &[(&str, Timestamp)],
    ours_since: Option<Timestamp>,
    now: Timestamp,
) -> Option<String> {
    let since = ours_since?;
    let (name, created) = theirs
        .iter()
        .filter(|(_, c)| *c > since)
        .max_by_key(|(_, c)| *c)?;
    let age = now.duration_since(*created);
    (age < KARPENTER_QUIET).then(|| {
        format!(
            "Karpenter still launches for NodePool {pool} (node {name}, {}s old, came after nodewright's first node of the pool): the handover pauses until Karpenter has launched nothing for {} minutes; stop it with {}",
            age.as_secs(),
            KARPENTER_QUIET.as_secs() / 60,
            stop_karpenter_command(pool)
        )
    })
}

/// For every pool annotated `replace`, which of Karpenter's nodes of it to
/// hand over now, as commands added to the decision (their replacements
/// placed in its simulation). Runs after the methods: a pool one of them
/// starts a removal in this decision waits for the next (its budget is
/// being spent). The budget counts the pool's nodes of both (nodewright's
/// registered ones and Karpenter's); those going (Karpenter's deleted,
/// tainted or being handed over, nodewright's removals in flight) count
/// against it.
pub fn run(cx: &mut Context<'_, '_>) -> Vec<Handover> {
    let s = cx.s;
    let busy: std::collections::BTreeSet<String> = cx
        .commands
        .iter()
        .flat_map(|c| c.targets.iter().map(|t| t.pool.clone()))
        .collect();
    let mut out = Vec::new();
    for pool in s.pools {
        if karpenter_nodes(pool) != KarpenterNodes::Replace {
            continue;
        }
        let mut theirs: Vec<usize> = (0..cx.facts.len())
            .filter(|i| is_karpenters(cx.facts[*i].node, &pool.name, s.claims))
            .collect();
        if theirs.is_empty() {
            continue;
        }
        theirs.sort_by(|a, b| {
            let (fa, fb) = (&cx.facts[*a], &cx.facts[*b]);
            (fa.created_at, &fa.name).cmp(&(fb.created_at, &fb.name))
        });
        let ours: Vec<usize> = (0..cx.facts.len())
            .filter(|i| {
                cx.facts[*i]
                    .claim
                    .is_some_and(|c| c.pool == pool.name && c.node_name.is_some())
            })
            .collect();
        let going = |i: usize| cx.facts[i].disrupting.is_some();
        let in_progress: Vec<String> = theirs
            .iter()
            .filter(|i| going(**i))
            .map(|i| cx.facts[*i].name.clone())
            .collect();
        let total = ours.len() + theirs.len();
        let gone = ours.iter().filter(|i| going(**i)).count() + in_progress.len();
        let allowed = pool
            .disruption
            .allowed_disruptions(DisruptionReason::Drifted, total, s.now);
        let mut room = allowed.saturating_sub(gone);
        let stamps: Vec<(&str, Timestamp)> = theirs
            .iter()
            .map(|i| (cx.facts[*i].name.as_str(), node_created(&cx.facts[*i])))
            .collect();
        let ours_since = ours.iter().map(|i| cx.facts[*i].created_at).min();
        let launching = karpenter_launching(&pool.name, &stamps, ours_since, s.now);
        let candidates: Vec<usize> = theirs
            .iter()
            .copied()
            .filter(|i| !going(*i) && !tainted_by_karpenter(cx.facts[*i].node))
            .collect();
        let mut start = Vec::new();
        let mut waiting: Option<String> = None;
        let mut next = None;
        for i in candidates.iter().copied() {
            let name = cx.facts[i].name.clone();
            if let Some(why) = &launching {
                waiting.get_or_insert_with(|| why.clone());
                next.get_or_insert(name);
                break;
            }
            if busy.contains(&pool.name) {
                waiting.get_or_insert_with(|| {
                    format!(
                        "a removal of NodePool {} started in this decision spends its budget",
                        pool.name
                    )
                });
                next.get_or_insert(name);
                break;
            }
            if room == 0 {
                waiting.get_or_insert_with(|| {
                    format!(
                        "budget for Drifted in NodePool {} ({allowed} of {total} nodes, {gone} going)",
                        pool.name
                    )
                });
                next.get_or_insert(name);
                break;
            }
            if let Some(why) = cx.blocked(i) {
                let why = format!("{name}: {why}");
                cx.note(i, format!("handover from Karpenter waits: {why}"));
                waiting.get_or_insert(why);
                continue;
            }
            // Its pods on the room there is without any of the pool's
            // Karpenter nodes (their room goes too) plus new claims.
            let others: Vec<usize> = theirs.clone();
            let pods = cx.facts[i].reschedulable.clone();
            let outcome = match cx.simulate_pods(&others, &pods) {
                Ok(o) => o,
                Err(e) => {
                    waiting.get_or_insert_with(|| format!("{name}: {e}"));
                    next.get_or_insert(name);
                    break;
                }
            };
            if let Some((pod, why)) = outcome.unschedulable.first() {
                let why = format!(
                    "{name}: pod {pod} (and {} more) would have nowhere to go: {why}",
                    outcome.unschedulable.len() - 1
                );
                cx.note(i, format!("handover from Karpenter waits: {why}"));
                waiting.get_or_insert(why);
                next.get_or_insert(name);
                break;
            }
            let launches = outcome.claims.len();
            let index = cx.commit(Proposal {
                reason: Reason::Drifted,
                method: METHOD,
                targets: vec![i],
                replacements: outcome.claims.clone(),
                outcome: Some(outcome),
                replacement_price: None,
                savings: 0.0,
                summary: format!(
                    "handed over from Karpenter (NodePool {} is annotated {KARPENTER_NODES_ANNOTATION}=replace): {launches} replacement(s) first, then the Node is deleted for Karpenter to drain",
                    pool.name
                ),
            });
            let command = &mut cx.commands[index];
            command.id = command_id(&name);
            // Karpenter drains it (its own grace period); nothing to
            // re-validate: nothing is removed before the replacements are up.
            command.validate_at = None;
            command.deadline = None;
            for t in &mut command.targets {
                t.claim_id = command_id(&t.node);
                t.pool = pool.name.clone();
                t.instance_id = None;
            }
            start.push(name);
            room -= 1;
        }
        if next.is_none() {
            next = candidates
                .iter()
                .map(|i| cx.facts[*i].name.clone())
                .find(|n| !start.contains(n));
        }
        out.push(Handover {
            pool: pool.name.clone(),
            start,
            in_progress,
            remaining: theirs.len(),
            next,
            waiting,
        });
    }
    out
}

/// When the Node was created (the facts' `created_at` is the claim's,
/// which a Karpenter node has not).
fn node_created(f: &super::snapshot::NodeFacts<'_>) -> Timestamp {
    f.node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(f.created_at, |t| t.0)
}

/// What `nodewright status` shows of the handovers, from what it reads
/// (Nodes, claims, removal commands, the configuration) without deciding:
/// per pool annotated `replace`, Karpenter's nodes left, those being
/// handed over and where each is, the next one and why it waits (the
/// budget, a replacement pending, Karpenter still launching). The
/// decision ([`run`]) is what acts; this only reads.
pub fn status(
    pools: &[NodePool],
    nodes: &[Node],
    claims: &[Claim],
    commands: &[crate::model::Command],
    now: Timestamp,
) -> Vec<Handover> {
    use crate::model::Step;
    let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
    let mut out = Vec::new();
    for pool in pools {
        if karpenter_nodes(pool) != KarpenterNodes::Replace {
            continue;
        }
        let mut theirs: Vec<&Node> = nodes
            .iter()
            .filter(|n| is_karpenters(n, &pool.name, claims))
            .collect();
        if theirs.is_empty() {
            continue;
        }
        let created = |n: &Node| n.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
        theirs.sort_by_key(|n| (created(n), name(n)));
        let ours: Vec<&Node> = nodes
            .iter()
            .filter(|n| {
                claim_of(n, claims).is_some_and(|c| c.pool == pool.name && c.node_name.is_some())
            })
            .collect();
        let command_of = |n: &Node| {
            let node = name(n);
            commands
                .iter()
                .find(|c| c.spec.node.as_deref() == Some(node.as_str()))
        };
        let mut in_progress = Vec::new();
        let mut pending_replacement = None;
        for n in &theirs {
            let words = match command_of(n) {
                Some(c) if c.step <= Step::AwaitReplacement => {
                    let up = claims
                        .iter()
                        .filter(|k| c.replacements.contains(&k.id) && k.node_name.is_some())
                        .count();
                    let w = format!(
                        "replacements launching, {up} of {} registered",
                        c.replacements.len()
                    );
                    pending_replacement.get_or_insert_with(|| format!("{}: {w}", name(n)));
                    w
                }
                Some(_) if n.metadata.deletion_timestamp.is_none() => "deleting".to_owned(),
                _ if n.metadata.deletion_timestamp.is_some() => {
                    "deleted; Karpenter draining it".to_owned()
                }
                _ if tainted_by_karpenter(n) => "Karpenter's own disruption".to_owned(),
                _ => continue,
            };
            in_progress.push(format!("{} ({words})", name(n)));
        }
        let total = ours.len() + theirs.len();
        let gone = in_progress.len()
            + ours
                .iter()
                .filter(|n| {
                    n.metadata.deletion_timestamp.is_some()
                        || commands.iter().any(|c| c.spec.node == n.metadata.name)
                })
                .count();
        let allowed = pool
            .disruption
            .allowed_disruptions(DisruptionReason::Drifted, total, now);
        let stamps: Vec<(&str, Timestamp)> = theirs
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), created(n)))
            .collect();
        let ours_since = ours
            .iter()
            .filter_map(|n| claim_of(n, claims).map(|c| c.created_at))
            .min();
        let next = theirs
            .iter()
            .find(|n| {
                command_of(n).is_none()
                    && n.metadata.deletion_timestamp.is_none()
                    && !tainted_by_karpenter(n)
            })
            .map(|n| name(n));
        let waiting = if next.is_none() {
            pending_replacement
        } else if let Some(why) = karpenter_launching(&pool.name, &stamps, ours_since, now) {
            Some(why)
        } else if gone >= allowed {
            let budget = format!(
                "budget for Drifted in NodePool {} ({allowed} of {total} nodes, {gone} going)",
                pool.name
            );
            Some(match pending_replacement {
                Some(r) => format!("{budget}; replacement pending for {r}"),
                None => budget,
            })
        } else {
            None
        };
        out.push(Handover {
            pool: pool.name.clone(),
            start: Vec::new(),
            in_progress,
            remaining: theirs.len(),
            next,
            waiting,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_000_000 + s).expect("time")
    }

    #[test]
    fn karpenter_launching_after_nodewright_pauses_the_handover_for_a_while() {
        let theirs = [("k-old", at(0)), ("k-new", at(600))];
        // No node of nodewright's yet: nothing tells Karpenter still launches.
        assert_eq!(karpenter_launching("web", &theirs, None, at(660)), None);
        // nodewright's first node came before k-new: Karpenter launched since.
        let why = karpenter_launching("web", &theirs, Some(at(300)), at(660)).expect("paused");
        assert!(why.contains("k-new"), "{why}");
        assert!(
            why.contains(
                r#"kubectl patch nodepool web --type merge -p '{"spec":{"limits":{"cpu":"0"}}}'"#
            ),
            "{why}"
        );
        // Quiet for KARPENTER_QUIET: the handover goes on.
        assert_eq!(
            karpenter_launching("web", &theirs, Some(at(300)), at(600) + KARPENTER_QUIET),
            None
        );
        // Karpenter's nodes all older than nodewright's: nothing to wait for.
        assert_eq!(
            karpenter_launching("web", &theirs, Some(at(900)), at(960)),
            None
        );
    }

    fn karpenter_node(name: &str, created: i64) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "labels": {labels::NODEPOOL: "web"},
                "finalizers": [KARPENTER_TERMINATION_FINALIZER],
                "creationTimestamp": at(created).to_string(),
            },
            "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")}
        }))
        .expect("node")
    }

    fn web(budget: &str) -> NodePool {
        let spec: crate::config::NodePoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }},
            "disruption": {"budgets": [{"nodes": budget}]}
        }))
        .expect("spec");
        let mut p = NodePool::from_spec("web", &spec).expect("pool");
        p.annotations
            .insert(KARPENTER_NODES_ANNOTATION.into(), "replace".into());
        p
    }

    #[test]
    fn status_shows_what_is_left_what_is_going_the_next_and_why_it_waits() {
        use crate::model::{Command, RemovalReason, RemovalSpec, Step};
        let nodes = [
            karpenter_node("k1", 0),
            karpenter_node("k2", 10),
            karpenter_node("k3", 20),
        ];
        let mut command = Command::new(
            RemovalSpec {
                claim_id: command_id("k1"),
                pool: "web".into(),
                node: Some("k1".into()),
                instance_id: None,
                reason: RemovalReason::Drifted,
                replace: true,
                deadline: None,
                avoid: vec![],
                event_at: None,
                handover: true,
            },
            at(30),
        );
        command.step = Step::AwaitReplacement;
        command.replacements = vec!["web-abcde".into()];
        let h = status(
            &[web("1")],
            &nodes,
            &[],
            std::slice::from_ref(&command),
            at(40),
        );
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].remaining, 3);
        assert_eq!(
            h[0].in_progress,
            vec!["k1 (replacements launching, 0 of 1 registered)".to_owned()]
        );
        assert_eq!(h[0].next.as_deref(), Some("k2"));
        let why = h[0].waiting.clone().expect("waits");
        assert!(
            why.contains("budget for Drifted") && why.contains("replacement pending for k1"),
            "{why}"
        );
        // Nothing in flight and room in the budget: nothing to wait for.
        let h = status(&[web("100%")], &nodes, &[], &[], at(40));
        assert_eq!(
            (h[0].next.as_deref(), h[0].waiting.as_deref()),
            (Some("k1"), None)
        );
    }
}
