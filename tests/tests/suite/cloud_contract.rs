//! The `Cloud` contract: one test body per behaviour, run on the simulated
//! EC2 (`SimCloud`) and on `Ec2Cloud` against the moto emulator (a VPC and
//! cluster of its own per test), so the simulator's cloud answers as EC2's
//! does: launch templates, client-token idempotency, insufficient-capacity
//! offerings, listing and terminating only our instances, and what a
//! NodeClass resolves to.
//!
//! `contract!` (the harness, `tests/src/contract.rs`) turns each generic
//! body into a `sim` and an `ec2` test; the fixtures are in
//! `tests/src/contract/cloud.rs`:
//! `cargo test -p nodewright-tests --test suite cloud_contract::` runs both.
//! What only EC2 has (the catalog from the emulator's data, CreateFleet's
//! request and tags, user data, bad input) is in `aws_cloud.rs`.

use std::collections::BTreeMap;

use nodewright::cloud::ownership;
use nodewright::model::OfferingKey;
use nodewright::ports::{Cloud, CloudError};
use nodewright_tests::aws::unique;
use nodewright_tests::contract::cloud::ContractCloud;

nodewright_tests::contract! {
    [sim => nodewright_tests::contract::cloud::sim,
     ec2 => nodewright_tests::contract::cloud::ec2]
    launch_templates_are_listed_and_deleted_only_when_ours,
    a_deleted_template_is_made_again_by_the_next_launch,
    a_retried_launch_adopts_the_first_instance,
    offerings_out_of_capacity_are_named_and_the_launch_takes_the_next,
    instances_are_listed_and_terminated_only_when_ours,
    the_class_resolves_to_what_an_instance_booted_until_the_ami_moves,
}

// ---------------------------------------------------------------- templates

/// A launch makes a template tagged as ours, naming its NodeClass, pool
/// and AMI; the listing shows ours and never a node group's, a Karpenter's
/// or another cluster's; a delete removes ours and refuses theirs.
async fn launch_templates_are_listed_and_deleted_only_when_ours<W: ContractCloud>(w: &W) {
    let cluster = w.cluster();
    let launched = w.port().launch(&w.m5_large("lt")).await.expect("launch");
    let other_cluster = unique("other");
    let node_group = unique("eks-nodegroup");
    let karpenter = unique("karpenter.k8s.aws");
    let elsewhere = unique("nodewright-other");
    let foreign = [
        w.add_foreign_template(
            &node_group,
            &[(&ownership::kubernetes_cluster(&cluster), ownership::OWNED)],
        )
        .await,
        w.add_foreign_template(
            &karpenter,
            &[
                ("eks:eks-cluster-name", &cluster),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ],
        )
        .await,
        w.add_foreign_template(
            &elsewhere,
            &[
                (ownership::CLUSTER, &other_cluster),
                (ownership::NODECLASS, "default"),
            ],
        )
        .await,
    ];

    let ours = w.port().launch_templates().await.expect("list");
    assert_eq!(ours.len(), 1, "one template for one launch: {ours:?}");
    let t = &ours[0];
    assert!(t.node_class.is_some(), "names its NodeClass: {t:?}");
    assert_eq!(t.pool.as_deref(), Some("lt"));
    assert_eq!(t.image_id, launched.instance.image_id, "names its AMI");
    for f in &foreign {
        assert!(
            !ours.iter().any(|o| o.name == f.name),
            "{} is not ours",
            f.name
        );
    }

    for f in &foreign {
        assert!(
            !w.port().delete_launch_template(f).await.expect("delete"),
            "{} is not ours: not deleted",
            f.name
        );
        assert!(
            w.template_exists(&f.name).await,
            "{} is still there",
            f.name
        );
    }
    assert!(w.port().delete_launch_template(t).await.expect("delete"));
    assert!(!w.template_exists(&t.name).await);
    assert!(w.port().launch_templates().await.expect("list").is_empty());
    assert!(
        !w.port()
            .delete_launch_template(t)
            .await
            .expect("delete again"),
        "deleting again is no error"
    );
}

/// A template deleted under a warm adapter (another invocation's
/// clean-up) is made again by the next launch that needs it.
async fn a_deleted_template_is_made_again_by_the_next_launch<W: ContractCloud>(w: &W) {
    w.port().launch(&w.m5_large("again")).await.expect("launch");
    let first = w.port().launch_templates().await.expect("list");
    assert_eq!(first.len(), 1);
    assert!(
        w.port()
            .delete_launch_template(&first[0])
            .await
            .expect("delete")
    );
    let second = w
        .port()
        .launch(&w.m5_large("again"))
        .await
        .expect("the next launch makes its template again");
    let listed = w.port().launch_templates().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, first[0].name, "same content, same name");
    assert_ne!(listed[0].id, first[0].id, "a new template");
    assert_eq!(listed[0].image_id, second.instance.image_id);
}

// ---------------------------------------------------------------- launches

/// A launch is idempotent per client token: a second invocation (fresh
/// caches) retrying the same claim gets the instance the first launched,
/// and the account holds one instance for the claim.
async fn a_retried_launch_adopts_the_first_instance<W: ContractCloud>(w: &W) {
    let [_, zone] = w.zones();
    let req = w.request("retry", vec![w.offering("c5.large", &zone, "on-demand")]);
    let first = w.port().launch(&req).await.expect("first launch");
    let second = w
        .another_invocation()
        .launch(&req)
        .await
        .expect("retried launch");
    assert_eq!(first.instance.id, second.instance.id);
    assert_eq!(second.instance.zone, zone);
    assert_eq!(second.instance.instance_type, "c5.large");
    assert_eq!(second.instance.price, first.instance.price);
    assert_eq!(
        w.launched_for_claim(&req.claim_id).await,
        1,
        "no second instance"
    );
    // Another claim (another token) is another instance.
    let other = w.request("retry", vec![w.offering("c5.large", &zone, "on-demand")]);
    let third = w.port().launch(&other).await.expect("another claim");
    assert_ne!(third.instance.id, first.instance.id);
}

/// An offering out of capacity is named in `unavailable` while the launch
/// takes the next option; when every option is out, the launch fails with
/// `InsufficientCapacity` naming them all, and nothing is launched.
async fn offerings_out_of_capacity_are_named_and_the_launch_takes_the_next<W: ContractCloud>(
    w: &W,
) {
    let [za, zb] = w.zones();
    let key = |zone: &str| OfferingKey {
        capacity_type: "spot".into(),
        instance_type: "m5.large".into(),
        zone: zone.into(),
    };
    let options = || {
        vec![
            w.offering("m5.large", &za, "spot"),
            w.offering("m5.large", &zb, "spot"),
        ]
    };
    w.remove_capacity(key(&za));
    let launched = w
        .port()
        .launch(&w.request("ice", options()))
        .await
        .expect("falls through to the second zone");
    assert_eq!(launched.instance.zone, zb);
    assert_eq!(launched.instance.capacity_type, "spot");
    assert_eq!(launched.unavailable, vec![key(&za)]);

    w.remove_capacity(key(&zb));
    let req = w.request("ice", options());
    match w.port().launch(&req).await {
        Err(CloudError::InsufficientCapacity { offerings, .. }) => {
            let mut offerings = offerings;
            offerings.sort();
            assert_eq!(offerings, vec![key(&za), key(&zb)]);
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    assert_eq!(
        w.launched_for_claim(&req.claim_id).await,
        0,
        "nothing launched"
    );
}

/// The listing holds our instances and never another cluster's in the same
/// account; terminating ours, an unknown id and theirs ends only ours, and
/// doing it again is no error.
async fn instances_are_listed_and_terminated_only_when_ours<W: ContractCloud>(w: &W) {
    let [za, zb] = w.zones();
    let launch = |zone: &str| w.request("gc", vec![w.offering("m5.large", zone, "on-demand")]);
    let mine = w.port().launch(&launch(&za)).await.expect("launch");
    let mine2 = w.port().launch(&launch(&zb)).await.expect("launch");
    let theirs = w.add_foreign_instance(&za).await;
    let listed: Vec<String> = w
        .port()
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&mine.instance.id) && listed.contains(&mine2.instance.id));
    assert!(!listed.contains(&theirs), "not ours: not listed");

    let ids = vec![
        mine.instance.id.clone(),
        "i-0123456789abcdef0".to_owned(),
        theirs.clone(),
    ];
    w.port().terminate(&ids).await.expect("terminate");
    w.port()
        .terminate(&ids)
        .await
        .expect("terminating again is fine");
    // Ours is gone or going (EC2 on the emulator ends it at once; the
    // simulator lists it shutting down until its clock moves on).
    let listed = w.port().instances().await.expect("instances");
    let live: Vec<&str> = listed
        .iter()
        .filter(|i| !i.state.is_gone_or_going())
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(live, [mine2.instance.id.as_str()], "{listed:?}");
    assert!(listed.iter().all(|i| i.id != theirs), "{listed:?}");
    assert!(!w.is_running(&mine.instance.id).await, "ours is terminated");
    assert!(w.is_running(&theirs).await, "not ours: left alone");
}

// ---------------------------------------------------------------- drift

/// An instance reports the AMI (and on EC2 the subnet and security groups)
/// it booted with; the NodeClass resolves to a set that contains them;
/// after the cluster moves to a newer Kubernetes version (another
/// EKS-optimized AMI) the same class no longer resolves to that AMI, and
/// the drift check says so.
async fn the_class_resolves_to_what_an_instance_booted_until_the_ami_moves<W: ContractCloud>(
    w: &W,
) {
    let req = w.m5_large("drift");
    let launched = w.port().launch(&req).await.expect("launch").instance;
    let image = launched.image_id.clone().expect("the AMI it booted");
    // What the adapter lists later says the same.
    let listed = w
        .port()
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|i| i.id == launched.id)
        .expect("listed");
    assert_eq!(
        (&listed.image_id, &listed.subnet_id),
        (&launched.image_id, &launched.subnet_id)
    );
    // (The emulator lists no groups for an instance its fleet launched from a template; EC2 does.)
    assert!(
        listed.security_group_ids.is_empty()
            || listed.security_group_ids == launched.security_group_ids
    );

    let class = w.node_class();
    let now = w.port().resolved_class(&class).await.expect("resolves");
    assert!(now.image_ids.contains(&image), "{now:?}");
    if w.resolves_network() {
        assert!(
            now.image_ids.len() >= 2,
            "amd64 and arm64 at least: {now:?}"
        );
        let subnet = launched.subnet_id.as_ref().expect("subnet");
        assert!(now.subnet_ids.contains(subnet), "{now:?}");
        assert!(!launched.security_group_ids.is_empty());
        assert_eq!(now.security_group_ids, launched.security_group_ids);
    } else {
        assert!(
            now.subnet_ids.is_empty() && now.security_group_ids.is_empty(),
            "not resolved, so not compared: {now:?}"
        );
    }

    let moved = w
        .after_upgrade()
        .await
        .resolved_class(&class)
        .await
        .expect("resolves");
    assert!(
        !moved.image_ids.is_empty() && !moved.image_ids.contains(&image),
        "{moved:?}"
    );

    let mut claim = nodewright_tests::claim_record(
        &req.claim_id,
        "drift",
        launched.launched_at,
        Default::default(),
    );
    claim.node_class = None;
    claim.stamp.image_id.clone_from(&launched.image_id);
    claim.stamp.subnet_id.clone_from(&launched.subnet_id);
    claim
        .stamp
        .security_group_ids
        .clone_from(&launched.security_group_ids);
    let pool = nodewright::config::NodePool::open("drift");
    let labels = BTreeMap::new();
    assert_eq!(
        nodewright::disruption::drift::drifted(&claim, &pool, Some(&class), Some(&now), &labels),
        None
    );
    let why =
        nodewright::disruption::drift::drifted(&claim, &pool, Some(&class), Some(&moved), &labels)
            .expect("drifted");
    assert!(why.contains("AMI") && why.contains(&image), "{why}");
}
