//! The account with neighbours on the real adapters: EC2 on the moto
//! emulator (`Ec2Cloud` over HTTP), the state in DynamoDB on the emulator,
//! the real kube-apiserver. The same world as the simulator's
//! `ownership::neighbours_are_never_touched`: a managed node group's
//! instances (cluster tag `owned`, their Nodes registered), a Karpenter's
//! (its ownership tags and NodeClaim names, `karpenter.sh/nodepool` on their
//! Nodes) and another cluster's nodewright instances. Provisioning, spot
//! interruption warnings and EC2 state changes for every neighbour (through
//! the interruption function's queue path and the state-change function),
//! a lost state table, a state table restored from an older backup, and
//! consolidation run through the real handlers; nothing of theirs is
//! terminated, cordoned, tainted, evicted, deleted or adopted, and ours are
//! adopted — none terminated — after the loss and after the restore.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{InstanceType, ResourceType};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use nodewright::handlers::interruption::MessageOutcome;
use nodewright::handlers::state_change::{self, StateChangeOutcome};
use nodewright::model::{SignedDuration, Timestamp};
use nodewright::ports::{Cloud, Store};
use nodewright::resources::Resources;
use nodewright::sim::scenario;
use nodewright::sim::{ClusterDriver, SimCluster};
use nodewright_tests::aws::{delete_raw_item, dynamo_store, put_raw_item, unique};
use nodewright_tests::real::{self, REGION};
use nodewright_tests::sim::scenario_file;

struct Neighbour {
    id: String,
    node: Option<String>,
}

/// An instance someone else launched in the fixture's first subnet, with
/// `tags`, and (with `labels`) its Node registered and Ready.
async fn neighbour(
    sim: &real::RealSim,
    f: &nodewright_tests::aws::Ec2Fixture,
    image: &str,
    tags: &[(&str, &str)],
    labels: Option<&[(&str, &str)]>,
) -> Neighbour {
    let subnet = f.best_subnet.get(&f.zones[0]).expect("subnet").clone();
    let out = f
        .ec2()
        .run_instances()
        .image_id(image)
        .instance_type(InstanceType::M5Xlarge)
        .min_count(1)
        .max_count(1)
        .subnet_id(subnet)
        .tag_specifications(nodewright_tests::aws::tags(ResourceType::Instance, tags))
        .send()
        .await
        .expect("RunInstances");
    let id = out.instances()[0].instance_id().expect("id").to_owned();
    let node = match labels {
        None => None,
        Some(labels) => {
            let name = format!("neighbour-{id}");
            let mut l: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            l.insert("kubernetes.io/hostname".into(), name.clone());
            l.insert("topology.kubernetes.io/zone".into(), f.zones[0].clone());
            l.insert(
                "node.kubernetes.io/instance-type".into(),
                "m5.xlarge".into(),
            );
            l.insert("kubernetes.io/os".into(), "linux".into());
            l.insert("kubernetes.io/arch".into(), "amd64".into());
            let node = SimCluster::ready_node(
                &name,
                l,
                Vec::new(),
                &format!("aws:///{}/{id}", f.zones[0]),
                &Resources::new(4000, 16 << 30, 58),
                &Resources::new(3900, 15 << 30, 58),
                Timestamp::now(),
            );
            let api: Api<Node> = Api::all(sim.cluster.admin().clone());
            let created = api
                .create(&PostParams::default(), &node)
                .await
                .expect("Node created");
            let mut with_status = created.clone();
            with_status.status = node.status.clone();
            api.replace_status(&name, &PostParams::default(), &with_status)
                .await
                .expect("Node status");
            Some(name)
        }
    };
    Neighbour { id, node }
}

fn spot_warning(instance: &str) -> String {
    serde_json::json!({
        "version": "0", "id": unique("evt"), "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": Timestamp::now().to_string(), "region": REGION,
        "resources": [format!("arn:aws:ec2:{REGION}:123456789012:instance/{instance}")],
        "detail": {"instance-id": instance, "instance-action": "terminate"}
    })
    .to_string()
}

/// EC2's Instance State-change Notification for `instance`, as EventBridge
/// sends it.
fn state_change_event(instance: &str, state: &str) -> serde_json::Value {
    serde_json::json!({
        "version": "0", "id": unique("evt"), "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2",
        "account": "123456789012", "time": Timestamp::now().to_string(), "region": REGION,
        "resources": [format!("arn:aws:ec2:{REGION}:123456789012:instance/{instance}")],
        "detail": {"instance-id": instance, "state": state}
    })
}

/// The pods bound to `node` that are not being deleted: (namespace/name, uid).
async fn pods_on(sim: &real::RealSim, node: &str) -> BTreeSet<(String, String)> {
    sim.cluster
        .all_pods()
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p.metadata.namespace.unwrap_or_default(),
                    p.metadata.name.unwrap_or_default()
                ),
                p.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}

async fn our_instances(sim: &real::RealSim) -> BTreeSet<String> {
    sim.cloud
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .filter(|i| !i.state.is_gone_or_going())
        .map(|i| i.id)
        .collect()
}

async fn claimed(sim: &real::RealSim) -> BTreeSet<String> {
    sim.store
        .claims()
        .await
        .expect("claims")
        .iter()
        .filter_map(|c| c.instance_id().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbours_are_never_touched_on_ec2_dynamodb_and_the_api_server() {
    let store = dynamo_store(REGION).await;
    let (mut sim, f) = Box::pin(real::run_scenario(
        store,
        &scenario_file("daemonset-overhead.yaml"),
    ))
    .await;
    let ours = our_instances(&sim).await;
    assert!(!ours.is_empty());
    let image = sim.store.claims().await.expect("claims")[0]
        .stamp
        .image_id
        .clone()
        .expect("launched with an AMI");
    // A backup of the state table's claims, restored later when it is older
    // than the instances running.
    let backup = sim.store.claims().await.expect("claims");

    let cluster_tag = format!("kubernetes.io/cluster/{}", f.cluster);
    let other = unique("other");
    let ng = [
        (cluster_tag.as_str(), "owned"),
        ("eks:nodegroup-name", "system"),
        ("eks:cluster-name", f.cluster.as_str()),
    ];
    let ng_labels = [
        ("eks.amazonaws.com/nodegroup", "system"),
        ("eks.amazonaws.com/capacityType", "ON_DEMAND"),
    ];
    let karpenter = [
        (cluster_tag.as_str(), "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", f.cluster.as_str()),
        ("karpenter.sh/nodeclaim", "default-k8rp1"),
    ];
    let karpenter_labels = [
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("karpenter.sh/registered", "true"),
        ("karpenter.sh/initialized", "true"),
    ];
    let other_cluster_tag = format!("kubernetes.io/cluster/{other}");
    let elsewhere = [
        (other_cluster_tag.as_str(), "owned"),
        ("nodewright.io/cluster", other.as_str()),
        ("nodewright.io/nodepool", "default"),
        ("nodewright.io/nodeclass", "default"),
        ("nodewright.io/nodeclaim", "default-0th3r"),
    ];
    let neighbours = [
        neighbour(&sim, &f, &image, &ng, Some(&ng_labels)).await,
        neighbour(&sim, &f, &image, &karpenter, Some(&karpenter_labels)).await,
        neighbour(&sim, &f, &image, &elsewhere, None).await,
    ];
    for n in &neighbours {
        assert!(
            !our_instances(&sim).await.contains(&n.id),
            "{} listed as ours",
            n.id
        );
    }

    // Provisioning: more pods than room.
    let mut more = scenario_file("daemonset-overhead.yaml");
    more.objects[3]["spec"]["replicas"] = serde_json::json!(10);
    scenario::load(&mut sim, &more).await.expect("scaled up");
    f.store_node_class(&sim.store).await;
    sim.run_for(SignedDuration::from_mins(5)).await;

    // Spot warnings and EC2 state changes for every neighbour (the managed
    // node group's, the Karpenter's, the other cluster's), through the
    // interruption function's queue path and the state-change function:
    // none is ours, so each message is deleted (not handed back) as not
    // ours, and nothing is done — no command, no taint, no eviction, no
    // termination, no claim.
    let pods_before: Vec<_> = {
        let mut v = Vec::new();
        for n in &neighbours {
            if let Some(name) = &n.node {
                v.push((name.clone(), pods_on(&sim, name).await));
            }
        }
        v
    };
    let seen = sim.interruptions.len();
    let mut messages = Vec::new();
    for (k, n) in neighbours.iter().enumerate() {
        messages.push((format!("spot-{k}"), spot_warning(&n.id)));
        for state in ["stopping", "shutting-down"] {
            messages.push((
                format!("{state}-{k}"),
                state_change_event(&n.id, state).to_string(),
            ));
        }
    }
    let failed = sim.deliver_interruptions(&messages).await;
    assert!(failed.is_empty(), "handed back for a retry: {failed:?}");
    let outcomes = &sim.interruptions[seen..];
    assert_eq!(outcomes.len(), messages.len(), "{outcomes:?}");
    for o in outcomes {
        assert!(
            matches!(o, MessageOutcome::Ignored(why) if why.contains("not one of ours")),
            "a neighbour's event must be deleted as not ours: {o:?}"
        );
    }
    for n in &neighbours {
        for state in ["stopping", "shutting-down", "stopped", "terminated"] {
            let outcome = state_change::handle(&sim.ports(), &state_change_event(&n.id, state))
                .await
                .expect("a neighbour's state change is no failure");
            assert_eq!(outcome, StateChangeOutcome::Ignored, "{} {state}", n.id);
        }
    }
    sim.run_for(SignedDuration::from_secs(30)).await;
    let commands = sim.store.commands().await.expect("commands");
    for n in &neighbours {
        assert!(
            !commands
                .iter()
                .any(|c| c.spec.instance_id.as_deref() == Some(n.id.as_str())
                    || (n.node.is_some() && c.spec.node == n.node)),
            "a removal of {}: {commands:?}",
            n.id
        );
    }
    for (name, before) in &pods_before {
        let after = pods_on(&sim, name).await;
        assert!(
            before.is_subset(&after),
            "pods evicted from {name}: {before:?} → {after:?}"
        );
    }
    assert!(
        claimed(&sim)
            .await
            .iter()
            .all(|i| neighbours.iter().all(|n| &n.id != i)),
        "a neighbour claimed"
    );

    // The state table loses every claim: ours are adopted, theirs are not.
    let before = our_instances(&sim).await;
    for c in sim.store.claims().await.expect("claims") {
        delete_raw_item(&sim.store, REGION, &format!("claim#{}", c.id)).await;
    }
    assert!(sim.store.claims().await.expect("claims").is_empty());
    sim.run_for(SignedDuration::from_mins(6)).await;
    let adopted = claimed(&sim).await;
    assert!(
        before.iter().all(|i| adopted.contains(i)),
        "every instance of ours has its claim again: {before:?} → {adopted:?}"
    );

    // The state table restored from the backup taken before the scale-up:
    // the claims of the first nodes come back, the later nodes have none.
    // Those are adopted again from their tags and Nodes; none of ours is
    // terminated, none of theirs adopted.
    let before = our_instances(&sim).await;
    assert!(before.len() > backup.len(), "scaled up since the backup");
    for c in sim.store.claims().await.expect("claims") {
        delete_raw_item(&sim.store, REGION, &format!("claim#{}", c.id)).await;
    }
    for c in &backup {
        let body = serde_json::to_string(c).expect("claim body");
        put_raw_item(
            &sim.store,
            REGION,
            &format!("claim#{}", c.id),
            &body,
            c.version,
        )
        .await;
    }
    let restored: BTreeSet<String> = sim
        .store
        .claims()
        .await
        .expect("claims")
        .iter()
        .map(|c| c.id.clone())
        .collect();
    assert_eq!(restored, backup.iter().map(|c| c.id.clone()).collect());
    sim.run_for(SignedDuration::from_mins(3)).await;
    let live = our_instances(&sim).await;
    assert!(
        before.is_subset(&live),
        "an instance of ours was terminated after the restore: {before:?} → {live:?}"
    );
    let readopted = claimed(&sim).await;
    assert!(
        live.is_subset(&readopted),
        "every instance of ours has a claim after the restore: {live:?} → {readopted:?}"
    );
    for n in &neighbours {
        assert!(
            !readopted.contains(&n.id),
            "{} adopted after the restore",
            n.id
        );
    }

    // Consolidation: fewer pods; our nodes may go, theirs stay.
    let mut fewer = scenario_file("daemonset-overhead.yaml");
    fewer.objects[3]["spec"]["replicas"] = serde_json::json!(2);
    scenario::load(&mut sim, &fewer).await.expect("scaled down");
    f.store_node_class(&sim.store).await;
    sim.run_for(SignedDuration::from_mins(15)).await;

    let described: Vec<aws_sdk_ec2::types::Instance> = f
        .ec2()
        .describe_instances()
        .set_instance_ids(Some(neighbours.iter().map(|n| n.id.clone()).collect()))
        .send()
        .await
        .expect("DescribeInstances")
        .reservations()
        .iter()
        .flat_map(|r| r.instances().iter().cloned())
        .collect();
    for n in &neighbours {
        let i = described
            .iter()
            .find(|i| i.instance_id() == Some(n.id.as_str()))
            .unwrap_or_else(|| panic!("{} gone", n.id));
        assert_eq!(
            i.state().and_then(|s| s.name()).map(|s| s.as_str()),
            Some("running"),
            "{} not running",
            n.id
        );
    }
    let nodes = sim.cluster.all_nodes().await;
    for n in &neighbours {
        let Some(name) = &n.node else { continue };
        let node = nodes
            .iter()
            .find(|x| x.metadata.name.as_ref() == Some(name))
            .unwrap_or_else(|| panic!("Node {name} of {} deleted", n.id));
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(spec.unschedulable, None, "{name} cordoned");
        // The played node lifecycle controller may taint a Node whose
        // kubelet is silent (`node.kubernetes.io/not-ready`); no taint of
        // ours (Karpenter's keys we write, or our own) is ever on it.
        let ours: Vec<_> = spec
            .taints
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
            .collect();
        assert!(ours.is_empty(), "{name} tainted: {ours:?}");
        assert!(node.metadata.deletion_timestamp.is_none(), "{name}");
    }
    let claimed = claimed(&sim).await;
    for n in &neighbours {
        assert!(
            !claimed.contains(&n.id) && !adopted.contains(&n.id),
            "{} adopted",
            n.id
        );
    }
}
