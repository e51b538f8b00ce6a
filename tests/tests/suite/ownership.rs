//! Ownership on the in-memory adapters: what garbage collection does when
//! the state table is lost or restored from an older copy (our instances
//! are adopted from their tags and Nodes, never terminated), and while a
//! state item cannot be read (nothing is terminated until it is fixed).

use std::collections::BTreeSet;

use nodewright::cloud::ownership;
use nodewright::model::{InstanceState, SignedDuration, Step};
use nodewright::ports::{Cloud, Store};
use nodewright::sim::SimSettings;
use nodewright::sim::cloud::SIM_CLUSTER;
use nodewright::sim::scenario;
use nodewright_tests::sim::{in_memory, scenario_file};

/// The daemonset-overhead scenario: six pods on on-demand m5 nodes.
async fn settled() -> nodewright_tests::sim::MemSim {
    let s = scenario_file("daemonset-overhead.yaml");
    let mut sim = in_memory(&s.region, SimSettings::default());
    scenario::load(&mut sim, &s).await.expect("loads");
    scenario::run(&mut sim, &s).await.expect("runs");
    assert!(scenario::check(&sim, &s.expect).await.is_empty());
    sim.run_for(SignedDuration::from_mins(3)).await;
    sim
}

async fn live_ids(sim: &nodewright_tests::sim::MemSim) -> BTreeSet<String> {
    sim.cloud
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .filter(|i| !i.state.is_gone_or_going())
        .map(|i| i.id)
        .collect()
}

#[tokio::test]
async fn a_lost_state_table_is_adopted_not_terminated() {
    let mut sim = settled().await;
    let before = live_ids(&sim).await;
    assert!(!before.is_empty());
    let claims_before: BTreeSet<String> = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .map(|c| c.id)
        .collect();

    sim.store.inner().lose_state();
    sim.run_for(SignedDuration::from_mins(30)).await;

    let after = live_ids(&sim).await;
    assert_eq!(after, before, "every instance of ours lives on");
    let terminated: Vec<_> = sim
        .sim_cloud
        .as_ref()
        .expect("sim cloud")
        .all_instances()
        .into_iter()
        .filter(|i| i.instance.state == InstanceState::Terminated)
        .map(|i| i.instance.id)
        .collect();
    assert!(terminated.is_empty(), "terminated: {terminated:?}");
    let claims = sim.store.claims().await.expect("claims");
    let adopted: BTreeSet<String> = claims.iter().map(|c| c.id.clone()).collect();
    assert_eq!(adopted, claims_before, "each claim recovered under its id");
    for c in &claims {
        assert!(c.node_name.is_some(), "{} registered again", c.id);
        assert!(
            c.instance.as_ref().is_some_and(|i| before.contains(&i.id)),
            "{c:?}"
        );
    }
    // The pods stayed where they were: nothing pending, nothing launched.
    assert_eq!(sim.pending().await, 0);
    assert_eq!(
        sim.sim_cloud.as_ref().expect("sim cloud").launches(),
        before.len()
    );
    // The pools count them again.
    let usage = sim.store.pool_usage().await.expect("usage");
    assert_eq!(
        usage.get("default").and_then(|u| u.get("nodes")).copied(),
        Some(before.len() as i64)
    );
}

#[tokio::test]
async fn a_state_table_restored_from_an_older_copy_adopts_the_newer_instances() {
    let mut sim = settled().await;
    let backup = sim.store.inner().backup();
    let old = live_ids(&sim).await;
    // More pods: more nodes after the backup.
    let mut scale = scenario_file("daemonset-overhead.yaml");
    scale.objects[3]["spec"]["replicas"] = serde_json::json!(12);
    scenario::load(&mut sim, &scale).await.expect("scaled");
    sim.run_for(SignedDuration::from_mins(5)).await;
    let grown = live_ids(&sim).await;
    assert!(grown.len() > old.len(), "{old:?} → {grown:?}");

    sim.store.inner().restore(&backup);
    sim.run_for(SignedDuration::from_mins(30)).await;

    assert_eq!(live_ids(&sim).await, grown, "the newer instances live on");
    let claimed: BTreeSet<String> = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .filter_map(|c| c.instance.map(|i| i.id))
        .collect();
    assert_eq!(claimed, grown, "one claim per instance again");
    assert_eq!(sim.pending().await, 0);
}

fn terminated(sim: &nodewright_tests::sim::MemSim) -> Vec<String> {
    sim.sim_cloud
        .as_ref()
        .expect("sim cloud")
        .all_instances()
        .into_iter()
        .filter(|i| i.instance.state.is_gone_or_going())
        .map(|i| i.instance.id)
        .collect()
}

/// An instance of ours without a claim, without a Node, past the
/// registration timeout, is terminated by garbage collection, but not while
/// a claim item cannot be read: the unreadable claim may be its very own.
/// Once the item is deleted, collection resumes.
#[tokio::test]
async fn garbage_collection_waits_while_a_claim_cannot_be_read() {
    let mut sim = settled().await;
    let tags = ownership::resource_tags(
        SIM_CLUSTER,
        &Default::default(),
        "default",
        "default",
        Some("default-lost1"),
    );
    let stray = sim.sim_cloud.as_ref().expect("sim cloud").add_neighbour(
        "m5.large",
        "us-east-1a",
        "on-demand",
        tags,
    );
    assert!(
        sim.cloud
            .instances()
            .await
            .expect("instances")
            .iter()
            .any(|i| i.id == stray.id),
        "listed as ours"
    );
    sim.store
        .inner()
        .put_raw(
            "claim#default-lost1",
            "{\"id\": \"default-lost1\", \"pool\": ",
            1,
        )
        .expect("written by hand");

    sim.run_for(SignedDuration::from_mins(30)).await;
    assert_eq!(terminated(&sim), Vec::<String>::new(), "nothing terminated");

    sim.store
        .inner()
        .delete_raw("claim#default-lost1")
        .expect("deleted by hand");
    sim.run_for(SignedDuration::from_mins(5)).await;
    assert_eq!(terminated(&sim), vec![stray.id], "collected once readable");
}

/// A removal reaches its termination step but does not terminate the
/// instance while a removal command cannot be read; it waits, drained, and
/// finishes once the item is deleted.
#[tokio::test]
async fn terminations_wait_while_a_command_cannot_be_read() {
    let mut sim = settled().await;
    let before = live_ids(&sim).await;
    sim.store
        .inner()
        .put_raw("command#default-ghost", "[]", 1)
        .expect("written by hand");
    // No pods: every node is empty and consolidated away.
    let mut idle = scenario_file("daemonset-overhead.yaml");
    idle.objects[3]["spec"]["replicas"] = serde_json::json!(0);
    scenario::load(&mut sim, &idle)
        .await
        .expect("scaled to zero");
    sim.run_for(SignedDuration::from_mins(30)).await;

    assert_eq!(terminated(&sim), Vec::<String>::new(), "nothing terminated");
    assert_eq!(live_ids(&sim).await, before);
    let commands = sim.store.commands().await.expect("commands");
    assert!(
        commands.iter().any(|c| c.step == Step::Terminate),
        "a removal waits at its termination: {commands:?}"
    );

    sim.store
        .inner()
        .delete_raw("command#default-ghost")
        .expect("deleted by hand");
    sim.run_for(SignedDuration::from_mins(30)).await;
    assert!(
        live_ids(&sim).await.is_empty(),
        "removed once readable: {:?}",
        live_ids(&sim).await
    );
    assert_eq!(sim.store.commands().await.expect("commands"), vec![]);
}

/// A configuration item that cannot be read is reported invalid (its item,
/// `body`, why) beside the valid ones, which stay in force: the pods of the
/// valid pool still get nodes.
#[tokio::test]
async fn an_unreadable_config_item_is_reported_beside_the_valid_ones() {
    let mut sim = settled().await;
    sim.store
        .inner()
        .put_raw("nodepool#broken", "{\"kind\": ", 2)
        .expect("written by hand");
    let config = nodewright::handlers::config::load(&sim.store)
        .await
        .expect("the configuration still loads");
    assert_eq!(
        config
            .pools
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["default"]
    );
    let invalid: Vec<(&str, &str)> = config
        .invalid
        .iter()
        .map(|e| (e.item.as_str(), e.field.as_str()))
        .collect();
    assert_eq!(invalid, [("nodepool/broken", "body")]);
    assert!(
        config.invalid[0]
            .reason
            .contains("item nodepool#broken: unreadable body"),
        "{}",
        config.invalid[0]
    );

    let mut more = scenario_file("daemonset-overhead.yaml");
    more.objects[3]["spec"]["replicas"] = serde_json::json!(9);
    scenario::load(&mut sim, &more).await.expect("scaled");
    sim.run_for(SignedDuration::from_mins(5)).await;
    assert_eq!(sim.pending().await, 0, "the valid pool still provisions");
}

/// Someone else's instance in the account, and its Node when it has one.
struct Neighbour {
    id: String,
    node: Option<String>,
}

/// Adds a neighbour instance with `tags` and, when `labels` is given, its
/// registered, Ready Node with those labels.
fn neighbour(
    sim: &nodewright_tests::sim::MemSim,
    capacity_type: &str,
    tags: &[(&str, &str)],
    labels: Option<&[(&str, &str)]>,
) -> Neighbour {
    use nodewright::resources::Resources;
    let cloud = sim.sim_cloud.as_ref().expect("sim cloud");
    let tags = tags
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let i = cloud.add_neighbour("m5.xlarge", "us-east-1b", capacity_type, tags);
    let node = labels.map(|labels| {
        let name = format!("neighbour-{}", i.id);
        let mut l: std::collections::BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        l.insert("kubernetes.io/hostname".into(), name.clone());
        l.insert("topology.kubernetes.io/zone".into(), i.zone.clone());
        l.insert(
            "node.kubernetes.io/instance-type".into(),
            i.instance_type.clone(),
        );
        l.insert("kubernetes.io/os".into(), "linux".into());
        l.insert("kubernetes.io/arch".into(), "amd64".into());
        let capacity = Resources::new(4000, 16 << 30, 58);
        let allocatable = Resources::new(3900, 15 << 30, 58);
        sim.cluster
            .add_node(nodewright::sim::SimCluster::ready_node(
                &name,
                l,
                Vec::new(),
                &i.provider_id,
                &capacity,
                &allocatable,
                sim.now(),
            ));
        name
    });
    Neighbour { id: i.id, node }
}

/// An account with neighbours: a managed node group's instances and Nodes
/// (`kubernetes.io/cluster/<name>=owned`, as nodewright's own instances
/// also carry it), a Karpenter's (its ownership tags and its NodePool
/// label, named like ours), and another cluster's nodewright. Provisioning,
/// consolidation, a spot interruption and a scheduled change of
/// neighbours, and a state table lost then restored from a backup run for
/// hours: nothing of theirs is terminated, tainted, cordoned or deleted,
/// and our own instances are adopted.
#[tokio::test]
async fn neighbours_are_never_touched() {
    let mut sim = settled().await;
    let cluster_tag = ownership::kubernetes_cluster(SIM_CLUSTER);
    let ng = [
        (cluster_tag.as_str(), "owned"),
        ("eks:nodegroup-name", "system"),
        ("eks:cluster-name", SIM_CLUSTER),
    ];
    let ng_labels = [
        ("eks.amazonaws.com/nodegroup", "system"),
        ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
    ];
    let karpenter = [
        (cluster_tag.as_str(), "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", SIM_CLUSTER),
        ("karpenter.sh/nodeclaim", "default-k8rp1"),
    ];
    let karpenter_labels = [
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/capacity-type", "spot"),
        ("karpenter.sh/registered", "true"),
        ("karpenter.sh/initialized", "true"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
    ];
    let other = [
        ("kubernetes.io/cluster/other", "owned"),
        ("nodewright.io/cluster", "other"),
        ("nodewright.io/nodepool", "default"),
        ("nodewright.io/nodeclass", "default"),
        ("nodewright.io/nodeclaim", "default-0th3r"),
    ];
    let neighbours = [
        neighbour(&sim, "on-demand", &ng, Some(&ng_labels)),
        neighbour(&sim, "on-demand", &ng, Some(&ng_labels)),
        neighbour(&sim, "spot", &karpenter, Some(&karpenter_labels)),
        neighbour(&sim, "spot", &karpenter, Some(&karpenter_labels)),
        neighbour(&sim, "on-demand", &other, None),
        neighbour(&sim, "spot", &other, None),
    ];
    let cloud = sim.sim_cloud.clone().expect("sim cloud");
    let ours = live_ids(&sim).await;
    for n in &neighbours {
        assert!(!ours.contains(&n.id), "{} listed as ours", n.id);
    }
    let backup = sim.store.inner().backup();

    // Provisioning: more pods than room (some may land on neighbour Nodes).
    let mut more = scenario_file("daemonset-overhead.yaml");
    more.objects[3]["spec"]["replicas"] = serde_json::json!(14);
    scenario::load(&mut sim, &more).await.expect("scaled up");
    sim.run_for(SignedDuration::from_mins(10)).await;
    assert_eq!(sim.pending().await, 0);

    // Interruptions of neighbours: a Karpenter spot instance and another
    // cluster's, and maintenance of a node group instance.
    assert!(cloud.interrupt_spot(&neighbours[3].id));
    assert!(cloud.interrupt_spot(&neighbours[5].id));
    cloud.schedule_change(
        std::slice::from_ref(&neighbours[1].id),
        sim.now() + SignedDuration::from_mins(60),
    );
    sim.run_for(SignedDuration::from_mins(20)).await;

    // The state table lost, then restored from the old backup.
    sim.store.inner().lose_state();
    sim.run_for(SignedDuration::from_mins(20)).await;
    sim.store.inner().restore(&backup);
    sim.run_for(SignedDuration::from_mins(20)).await;
    let adopted = claimed_instances(&sim).await;
    let live = live_ids(&sim).await;
    assert!(live.len() > ours.len(), "{ours:?} → {live:?}");
    assert_eq!(adopted, live, "each of our instances has its claim again");

    // Consolidation: fewer pods, our nodes go, theirs stay.
    let mut fewer = scenario_file("daemonset-overhead.yaml");
    fewer.objects[3]["spec"]["replicas"] = serde_json::json!(2);
    scenario::load(&mut sim, &fewer).await.expect("scaled down");
    sim.run_for(SignedDuration::from_hours(2)).await;
    assert_eq!(sim.pending().await, 0);

    assert_eq!(
        cloud.foreign_terminations(),
        Vec::<String>::new(),
        "terminate never named a neighbour"
    );
    let interrupted = [&neighbours[3].id, &neighbours[5].id, &neighbours[1].id];
    for n in cloud.neighbours() {
        if !interrupted.contains(&&n.instance.id) {
            assert_eq!(
                n.instance.state,
                InstanceState::Running,
                "{}",
                n.instance.id
            );
        }
    }
    let nodes = sim.cluster.all_nodes();
    for n in &neighbours {
        let Some(name) = &n.node else { continue };
        let node = nodes
            .iter()
            .find(|x| x.metadata.name.as_ref() == Some(name))
            .unwrap_or_else(|| panic!("Node {name} of {} deleted", n.id));
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(spec.unschedulable, None, "{name} cordoned");
        assert_eq!(spec.taints, None, "{name} tainted");
        assert!(node.metadata.deletion_timestamp.is_none(), "{name}");
    }
    // Ours: one claim per live instance; the neighbours none, ever.
    let claimed = claimed_instances(&sim).await;
    assert_eq!(claimed, live_ids(&sim).await);
    for n in &neighbours {
        assert!(
            !claimed.contains(&n.id) && !adopted.contains(&n.id),
            "{} adopted",
            n.id
        );
    }
}

async fn claimed_instances(sim: &nodewright_tests::sim::MemSim) -> BTreeSet<String> {
    sim.store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .filter_map(|c| c.instance.map(|i| i.id))
        .collect()
}

/// A node that never registers is terminated at the registration timeout,
/// but not while a state item cannot be read; once it is deleted, it is.
#[tokio::test]
async fn the_registration_timeout_waits_while_a_command_cannot_be_read() {
    let mut sim = settled().await;
    for size in [
        "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
        "metal",
    ] {
        sim.never_register.insert(format!("m5.{size}"));
    }
    sim.store
        .inner()
        .put_raw("command#default-ghost", "{}", 1)
        .expect("written by hand");
    let before = live_ids(&sim).await;
    let mut more = scenario_file("daemonset-overhead.yaml");
    more.objects[3]["spec"]["replicas"] = serde_json::json!(24);
    scenario::load(&mut sim, &more).await.expect("scaled up");
    sim.run_for(SignedDuration::from_mins(20)).await;

    let live = live_ids(&sim).await;
    assert!(live.len() > before.len(), "launched: {before:?} → {live:?}");
    assert_eq!(terminated(&sim), Vec::<String>::new(), "nothing terminated");

    sim.store
        .inner()
        .delete_raw("command#default-ghost")
        .expect("deleted by hand");
    sim.run_for(SignedDuration::from_mins(2)).await;
    let gone: BTreeSet<String> = terminated(&sim).into_iter().collect();
    let unregistered: BTreeSet<String> = live.difference(&before).cloned().collect();
    assert!(
        !gone.is_empty() && gone.is_subset(&unregistered),
        "the timed-out instances go once readable: {gone:?} of {unregistered:?}"
    );
}

/// Our launch templates' names, and their AMIs.
fn our_templates(sim: &nodewright_tests::sim::MemSim) -> Vec<(String, Option<String>)> {
    let cloud = sim.sim_cloud.as_ref().expect("sim cloud");
    cloud
        .all_templates()
        .into_iter()
        .filter(|t| ownership::is_ours(&t.tags, SIM_CLUSTER))
        .map(|t| (t.template.name, t.template.image_id))
        .collect()
}

/// Launch templates we made and nothing uses any more are deleted: after
/// the cluster moves to a new Kubernetes version (every NodeClass resolves
/// to a new AMI) and drift has replaced the nodes, the old AMI's templates
/// go; the current ones stay, and so do a node group's, a Karpenter's and
/// another cluster's templates, which are never even named in a delete.
/// While nodes still run on the old AMI its templates are kept.
#[tokio::test]
async fn launch_templates_nothing_uses_are_deleted() {
    let mut sim = settled().await;
    let cloud = sim.sim_cloud.clone().expect("sim cloud");
    let cluster_tag = ownership::kubernetes_cluster(SIM_CLUSTER);
    let theirs: [(&str, Vec<(&str, &str)>); 3] = [
        (
            "eks-system-nodegroup",
            vec![(cluster_tag.as_str(), "owned")],
        ),
        (
            "karpenter.k8s.aws/123",
            vec![
                ("eks:eks-cluster-name", SIM_CLUSTER),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ],
        ),
        (
            "nodewright/other",
            vec![
                (ownership::CLUSTER, "other"),
                (ownership::NODECLASS, "default"),
            ],
        ),
    ];
    for (name, tags) in &theirs {
        cloud.add_neighbour_template(
            name,
            tags.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
    }
    let old_image = cloud.image_id();
    let before = our_templates(&sim);
    assert!(!before.is_empty());
    assert!(before.iter().all(|(_, i)| i.as_deref() == Some(&old_image)));

    // Long past the grace age, nodes still on the old AMI: kept.
    sim.run_for(SignedDuration::from_mins(30)).await;
    assert_eq!(our_templates(&sim), before, "in use: kept");

    cloud.set_kubernetes_version("1.31");
    let new_image = cloud.image_id();
    assert_ne!(new_image, old_image);
    sim.run_for(SignedDuration::from_hours(2)).await;
    assert_eq!(sim.pending().await, 0);
    let claims = sim.store.claims().await.expect("claims");
    assert!(
        claims
            .iter()
            .all(|c| c.stamp.image_id.as_deref() == Some(new_image.as_str())),
        "drift replaced every node"
    );

    let after = our_templates(&sim);
    assert!(!after.is_empty(), "the current templates stay");
    assert!(
        after
            .iter()
            .all(|(_, i)| i.as_deref() == Some(new_image.as_str())),
        "the old AMI's templates are deleted: {after:?}"
    );
    let all: BTreeSet<String> = cloud
        .all_templates()
        .into_iter()
        .map(|t| t.template.name)
        .collect();
    for (name, _) in &theirs {
        assert!(all.contains(*name), "{name} is not ours: still there");
    }
    assert_eq!(
        cloud.foreign_template_deletes(),
        Vec::<String>::new(),
        "a delete never named a neighbour's template"
    );
}
