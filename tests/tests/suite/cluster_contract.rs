//! The `Cluster` contract: one test body per operation a drain uses, run on
//! the in-memory `SimCluster` and on `KubeCluster` against a real
//! kube-apiserver (as the restricted `nodewright` identity with
//! `infra/rbac/clusterrole.yaml`). Whatever the simulator says about
//! taints, cordons, evictions, deletions, nodes, events and the workloads
//! CapacityBuffers name, the server says too — so drain tests on the simulator see what a cluster would do.
//!
//! `contract!` (the harness, `tests/src/contract.rs`) turns each generic
//! body into a `sim` and a `kube` test; the fixtures
//! (`tests/src/contract/cluster.rs`) create the objects and play the
//! kubelets and the disruption controller. The server is found through
//! `NODEWRIGHT_KUBE_ENV` (see `tests/src/kube_harness.rs`).

use k8s_openapi::api::core::v1::Pod;
use nodewright::config::buffer::ScalableKind;
use nodewright::model::PodKey;
use nodewright::ports::{BindOutcome, Cluster, ClusterError, ClusterEvent, EvictOutcome};
use nodewright::scheduling::taints::{Effect, Taint};
use nodewright_tests::contract::cluster::{
    ContractCluster, NewPod, Phase, csi_node_object, volume_attachment_object,
};

nodewright_tests::contract! {
    [sim => nodewright_tests::contract::cluster::sim,
     kube => nodewright_tests::contract::cluster::kube]
    taints_are_added_once_and_removed_by_key,
    cordon_marks_the_node_unschedulable,
    labelling_a_node_sets_the_keys_given_and_keeps_the_others,
    unlabelling_a_node_removes_the_keys_given_and_keeps_the_others,
    pods_on_a_node_are_its_unfinished_ones,
    an_allowed_eviction_leaves_the_pod_terminating_until_the_kubelet_confirms,
    an_exhausted_budget_blocks_with_its_name,
    a_budget_is_spent_by_evictions_and_restored_by_its_controller,
    evicting_a_missing_or_replaced_pod_is_gone,
    pods_that_are_not_running_ignore_their_budget,
    two_budgets_over_one_pod_block,
    a_new_budget_blocks_until_its_controller_has_seen_it,
    deleting_a_pod_is_graceful_unless_told_otherwise,
    deleting_a_replaced_pod_deletes_nothing,
    nodes_are_deleted_once,
    events_are_recorded_and_read_back,
    a_nodes_volume_attachments_are_its_own,
    csi_nodes_carry_their_drivers_attach_limits,
    a_buffers_workload_is_read_with_its_template_and_replicas,
    binding_reports_bound_already_bound_and_gone,
    bound_pods_leave_the_pending_list_and_finished_ones_are_in_neither,
}

const BUDGET_REFUSES: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

fn taints_of(node: &k8s_openapi::api::core::v1::Node) -> Vec<(String, String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value.unwrap_or_default(), t.effect))
        .collect()
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// `(currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed)` and the disrupted pods' names.
async fn budget<F: ContractCluster>(f: &F, name: &str) -> ((i32, i32, i32, i32), Vec<String>) {
    let pdb = f.pdb(name).await.expect("the budget");
    let st = pdb.status.unwrap_or_default();
    let disrupted = st.disrupted_pods.unwrap_or_default().into_keys().collect();
    (
        (
            st.current_healthy,
            st.desired_healthy,
            st.expected_pods,
            st.disruptions_allowed,
        ),
        disrupted,
    )
}

async fn running_pods<F: ContractCluster>(f: &F, app: &str, node: &str, n: usize) -> Vec<PodKey> {
    let mut keys = Vec::new();
    for i in 0..n {
        keys.push(
            f.create_pod(NewPod::running(&format!("{app}-{i}"), app, node))
                .await,
        );
    }
    keys
}

// ------------------------------------------------------------ nodes

async fn taints_are_added_once_and_removed_by_key<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let disrupted = Taint::new("karpenter.sh/disrupted", "", Effect::NoSchedule);
    f.port().add_taint(&node, &disrupted).await.expect("taint");
    f.port()
        .add_taint(&node, &disrupted)
        .await
        .expect("taint again");
    let other = Taint::new("example.com/x", "y", Effect::NoExecute);
    f.port()
        .add_taint(&node, &other)
        .await
        .expect("another taint");
    let n = f.node(&node).await.expect("node");
    assert_eq!(
        taints_of(&n),
        [
            (
                "karpenter.sh/disrupted".to_owned(),
                String::new(),
                "NoSchedule".to_owned()
            ),
            (
                "example.com/x".to_owned(),
                "y".to_owned(),
                "NoExecute".to_owned()
            )
        ],
        "added twice = once"
    );

    f.port()
        .remove_taint(&node, "karpenter.sh/disrupted")
        .await
        .expect("untaint");
    f.port()
        .remove_taint(&node, "karpenter.sh/disrupted")
        .await
        .expect("untaint again");
    f.port()
        .remove_taint(&node, "never.there/key")
        .await
        .expect("a key the node never had");
    assert_eq!(
        taints_of(&f.node(&node).await.expect("node")),
        [(
            "example.com/x".to_owned(),
            "y".to_owned(),
            "NoExecute".to_owned()
        )]
    );

    let missing = format!("{}-missing", f.namespace());
    for e in [
        f.port()
            .add_taint(&missing, &disrupted)
            .await
            .expect_err("add on a missing node"),
        f.port()
            .remove_taint(&missing, "karpenter.sh/disrupted")
            .await
            .expect_err("remove on a missing node"),
    ] {
        assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
        assert!(
            e.op().contains(&format!("node/{missing}")),
            "names the node: {e}"
        );
    }
}

async fn cordon_marks_the_node_unschedulable<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    assert_ne!(
        f.node(&node)
            .await
            .and_then(|n| n.spec)
            .and_then(|s| s.unschedulable),
        Some(true)
    );
    f.port().cordon(&node).await.expect("cordon");
    f.port().cordon(&node).await.expect("cordon again");
    assert_eq!(
        f.node(&node)
            .await
            .and_then(|n| n.spec)
            .and_then(|s| s.unschedulable),
        Some(true)
    );
    let e = f
        .port()
        .cordon(&format!("{}-missing", f.namespace()))
        .await
        .expect_err("missing node");
    assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
    assert!(
        e.op().contains(&format!("node/{}-missing", f.namespace())),
        "names the node: {e}"
    );
}

async fn labelling_a_node_sets_the_keys_given_and_keeps_the_others<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let before = f
        .node(&node)
        .await
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default();
    let labels = std::collections::BTreeMap::from([
        (
            "karpenter.k8s.aws/instance-family".to_owned(),
            "m5".to_owned(),
        ),
        ("team".to_owned(), "a".to_owned()),
    ]);
    let annotations = std::collections::BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_owned(),
        "true".to_owned(),
    )]);
    f.port()
        .label_node(&node, &labels, &annotations)
        .await
        .expect("label");
    let again = std::collections::BTreeMap::from([("team".to_owned(), "b".to_owned())]);
    f.port()
        .label_node(&node, &again, &Default::default())
        .await
        .expect("relabel");
    let n = f.node(&node).await.expect("node");
    let got = n.metadata.labels.unwrap_or_default();
    for (k, v) in &before {
        assert_eq!(got.get(k), Some(v), "{k} kept");
    }
    assert_eq!(
        got.get("karpenter.k8s.aws/instance-family")
            .map(String::as_str),
        Some("m5")
    );
    assert_eq!(got.get("team").map(String::as_str), Some("b"), "replaced");
    assert_eq!(
        n.metadata
            .annotations
            .unwrap_or_default()
            .get("karpenter.sh/do-not-disrupt")
            .map(String::as_str),
        Some("true"),
        "kept when the next call sets none"
    );
    let e = f
        .port()
        .label_node(&format!("{}-missing", f.namespace()), &labels, &annotations)
        .await
        .expect_err("missing node");
    assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
    assert!(
        e.op().contains(&format!("node/{}-missing", f.namespace())),
        "names the node: {e}"
    );
}

async fn unlabelling_a_node_removes_the_keys_given_and_keeps_the_others<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let labels = std::collections::BTreeMap::from([
        (
            "karpenter.k8s.aws/capacity-reservation-id".to_owned(),
            "cr-0000000000000000a".to_owned(),
        ),
        ("team".to_owned(), "a".to_owned()),
    ]);
    f.port()
        .label_node(&node, &labels, &Default::default())
        .await
        .expect("label");
    f.port()
        .unlabel_node(
            &node,
            &[
                "karpenter.k8s.aws/capacity-reservation-id",
                "karpenter.k8s.aws/capacity-reservation-type",
            ],
        )
        .await
        .expect("unlabel, one key absent");
    let got = f
        .node(&node)
        .await
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default();
    assert!(
        !got.contains_key("karpenter.k8s.aws/capacity-reservation-id"),
        "{got:?}"
    );
    assert_eq!(got.get("team").map(String::as_str), Some("a"), "kept");
    let e = f
        .port()
        .unlabel_node(&format!("{}-missing", f.namespace()), &["team"])
        .await
        .expect_err("missing node");
    assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
    assert!(
        e.op().contains(&format!("node/{}-missing", f.namespace())),
        "names the node: {e}"
    );
}

async fn nodes_are_deleted_once<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    assert_eq!(f.port().delete_node(&node).await, Ok(true));
    assert!(f.node(&node).await.is_none());
    assert_eq!(f.port().delete_node(&node).await, Ok(false), "already gone");
    assert_eq!(
        f.port()
            .delete_node(&format!("{}-never", f.namespace()))
            .await,
        Ok(false)
    );
}

// ------------------------------------------------------------ pods on a node

async fn pods_on_a_node_are_its_unfinished_ones<F: ContractCluster>(f: &F) {
    let n1 = f.create_node("n1").await;
    let n2 = f.create_node("n2").await;
    f.create_pod(NewPod::running("a", "web", &n1)).await;
    f.create_pod(NewPod::running("b", "web", &n1)).await;
    f.create_pod(NewPod {
        phase: Phase::Succeeded,
        ..NewPod::running("done", "job", &n1)
    })
    .await;
    f.create_pod(NewPod::running("elsewhere", "web", &n2)).await;
    f.create_pod(NewPod::pending("unbound", "web")).await;
    let leaving = f.create_pod(NewPod::running("leaving", "web", &n1)).await;
    f.port()
        .delete_pod(&leaving, Some(60))
        .await
        .expect("delete");

    let mut names: Vec<String> = f
        .port()
        .pods_on_node(&n1)
        .await
        .expect("list")
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a", "b", "leaving"],
        "bound to n1 and not finished (a terminating pod is still there)"
    );
    assert!(
        f.port()
            .pods_on_node(&format!("{}-none", f.namespace()))
            .await
            .expect("list")
            .is_empty()
    );
}

// ------------------------------------------------------------ binding

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// A first binding binds; a second one (the scheduler was first, or our own
/// retry) is `AlreadyBound` and moves nothing; a missing pod, or another
/// pod under the same name (the uid precondition), is `Gone`.
async fn binding_reports_bound_already_bound_and_gone<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let other = f.create_node("other").await;
    let p = f.create_pod(NewPod::pending("web-1", "web")).await;
    assert_eq!(f.port().bind(&p, &node).await, Ok(BindOutcome::Bound));
    let bound = f.pod("web-1").await.expect("pod");
    assert_eq!(node_of(&bound), Some(node.as_str()));

    assert_eq!(
        f.port().bind(&p, &other).await,
        Ok(BindOutcome::AlreadyBound)
    );
    let still = f.pod("web-1").await.expect("pod");
    assert_eq!(node_of(&still), Some(node.as_str()), "not moved");

    let missing = PodKey {
        namespace: f.namespace().to_owned(),
        name: "nobody".into(),
        uid: String::new(),
    };
    assert_eq!(f.port().bind(&missing, &node).await, Ok(BindOutcome::Gone));

    let q = f.create_pod(NewPod::pending("web-2", "web")).await;
    let stale = PodKey {
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..q.clone()
    };
    assert_eq!(f.port().bind(&stale, &node).await, Ok(BindOutcome::Gone));
    assert_eq!(
        node_of(&f.pod("web-2").await.expect("pod")),
        None,
        "the stale binding bound nothing"
    );
    assert_eq!(f.port().bind(&q, &node).await, Ok(BindOutcome::Bound));
}

/// `pending_pods` lists the unbound pods, `scheduled_pods` the bound ones
/// not finished: a bind moves a pod from one to the other, and a finished
/// pod is in neither.
async fn bound_pods_leave_the_pending_list_and_finished_ones_are_in_neither<F: ContractCluster>(
    f: &F,
) {
    let node = f.create_node("n").await;
    let mut keys = Vec::new();
    for i in 0..3 {
        keys.push(
            f.create_pod(NewPod::pending(&format!("p-{i}"), "web"))
                .await,
        );
    }
    f.create_pod(NewPod {
        phase: Phase::Succeeded,
        ..NewPod::running("done", "job", &node)
    })
    .await;
    let names = |pods: Vec<Pod>| {
        let mut names: Vec<String> = pods
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(f.namespace()))
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(f.port().pending_pods().await.expect("pending")),
        ["p-0", "p-1", "p-2"]
    );
    assert!(names(f.port().scheduled_pods().await.expect("scheduled")).is_empty());

    assert_eq!(f.port().bind(&keys[0], &node).await, Ok(BindOutcome::Bound));
    assert_eq!(
        names(f.port().pending_pods().await.expect("pending")),
        ["p-1", "p-2"]
    );
    assert_eq!(
        names(f.port().scheduled_pods().await.expect("scheduled")),
        ["p-0"],
        "bound, and the finished pod is not listed"
    );
}

// ------------------------------------------------------------ eviction

async fn an_allowed_eviction_leaves_the_pod_terminating_until_the_kubelet_confirms<
    F: ContractCluster,
>(
    f: &F,
) {
    let node = f.create_node("n").await;
    let pod = f
        .create_pod(NewPod {
            grace: Some(20),
            ..NewPod::running("web-0", "web", &node)
        })
        .await;
    // No budget covers it.
    assert_eq!(f.port().evict(&pod).await, Ok(EvictOutcome::Evicted));
    let p = f.pod("web-0").await.expect("still there: terminating");
    assert!(is_terminating(&p));
    assert_eq!(
        p.metadata.deletion_grace_period_seconds,
        Some(20),
        "the pod's own grace period"
    );
    let target = p
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget");
    assert_eq!(
        target.map(|c| (c.status, c.reason)),
        Some(("True".into(), Some("EvictionByEvictionAPI".into())))
    );
    assert_eq!(
        f.port().pods_on_node(&node).await.expect("list").len(),
        1,
        "a drain still sees it"
    );

    // Evicting a terminating pod again is accepted (no budget is consulted).
    assert_eq!(f.port().evict(&pod).await, Ok(EvictOutcome::Evicted));

    // The kubelet confirms only once the grace period is over.
    f.reconcile().await;
    assert!(f.pod("web-0").await.is_some(), "within its grace period");
    f.advance(21).await;
    f.reconcile().await;
    assert!(
        f.pod("web-0").await.is_none(),
        "gone once the kubelet confirmed"
    );
    assert_eq!(f.port().evict(&pod).await, Ok(EvictOutcome::Gone));
}

async fn an_exhausted_budget_blocks_with_its_name<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let pods = running_pods(f, "web", &node, 2).await;
    f.create_pdb("web", "web", 2).await;
    f.reconcile().await;
    assert_eq!(budget(f, "web").await, ((2, 2, 2, 0), vec![]));

    let out = f.port().evict(&pods[0]).await.expect("evict");
    assert_eq!(
        out,
        EvictOutcome::Blocked(format!(
            "{BUDGET_REFUSES} The disruption budget web needs 2 healthy pods and has 2 currently"
        ))
    );
    assert!(
        !is_terminating(&f.pod("web-0").await.expect("pod")),
        "untouched"
    );
    assert_eq!(
        budget(f, "web").await,
        ((2, 2, 2, 0), vec![]),
        "and the budget too"
    );
}

async fn a_budget_is_spent_by_evictions_and_restored_by_its_controller<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let pods = running_pods(f, "web", &node, 3).await;
    f.create_pdb("web", "web", 2).await;
    f.reconcile().await;
    assert_eq!(budget(f, "web").await, ((3, 2, 3, 1), vec![]));

    assert_eq!(f.port().evict(&pods[0]).await, Ok(EvictOutcome::Evicted));
    // The eviction spent the budget and named the pod (before the controller ran again).
    assert_eq!(
        budget(f, "web").await,
        ((3, 2, 3, 0), vec!["web-0".to_owned()])
    );
    let out = f.port().evict(&pods[1]).await.expect("evict");
    assert!(
        matches!(&out, EvictOutcome::Blocked(m) if m.contains("disruption budget web")),
        "{out:?}"
    );

    // The controller: the terminating pod is not healthy, and no longer "disrupted".
    f.reconcile().await;
    assert_eq!(budget(f, "web").await, ((2, 2, 3, 0), vec![]));
    // The kubelet confirms; a replacement comes up Ready: the budget allows one again.
    f.advance(31).await;
    f.reconcile().await;
    assert!(f.pod("web-0").await.is_none());
    f.create_pod(NewPod::running("web-3", "web", &node)).await;
    f.reconcile().await;
    assert_eq!(budget(f, "web").await, ((3, 2, 3, 1), vec![]));
    let observed = f
        .pdb("web")
        .await
        .and_then(|p| p.status)
        .and_then(|s| s.observed_generation);
    assert_eq!(observed, Some(1));
}

async fn evicting_a_missing_or_replaced_pod_is_gone<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let missing = PodKey {
        namespace: f.namespace().to_owned(),
        name: "nobody".into(),
        uid: String::new(),
    };
    assert_eq!(
        f.port().evict(&missing).await,
        Ok(EvictOutcome::Gone),
        "404"
    );

    // Another pod now has the name (the key's uid is not its uid): 409.
    let lone = f.create_pod(NewPod::running("lone", "lone", &node)).await;
    let stale = PodKey {
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..lone.clone()
    };
    assert_eq!(f.port().evict(&stale).await, Ok(EvictOutcome::Gone));
    assert!(
        !is_terminating(&f.pod("lone").await.expect("pod")),
        "the other pod is untouched"
    );

    // Under a budget that allows it, the server consults (and spends) the
    // budget before the uid precondition fails; the controller returns the
    // disruption two minutes later, as the pod never went.
    let pods = running_pods(f, "web", &node, 2).await;
    f.create_pdb("web", "web", 1).await;
    f.reconcile().await;
    let stale = PodKey {
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..pods[0].clone()
    };
    assert_eq!(f.port().evict(&stale).await, Ok(EvictOutcome::Gone));
    assert!(!is_terminating(&f.pod("web-0").await.expect("pod")));
    f.reconcile().await;
    assert_eq!(
        budget(f, "web").await,
        ((1, 1, 2, 0), vec!["web-0".to_owned()])
    );
    f.advance(121).await;
    f.reconcile().await;
    assert_eq!(budget(f, "web").await, ((2, 1, 2, 1), vec![]));
}

async fn pods_that_are_not_running_ignore_their_budget<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    running_pods(f, "web", &node, 1).await;
    let pending = f.create_pod(NewPod::pending("web-pending", "web")).await;
    let done = f
        .create_pod(NewPod {
            phase: Phase::Succeeded,
            ..NewPod::running("web-done", "web", &node)
        })
        .await;
    f.create_pdb("web", "web", 1).await;
    f.reconcile().await;
    assert_eq!(
        budget(f, "web").await.0,
        (1, 1, 3, 0),
        "nothing may be disrupted"
    );

    // Pending and finished pods are evicted without a budget check, and
    // (unbound or finished) removed at once.
    assert_eq!(f.port().evict(&pending).await, Ok(EvictOutcome::Evicted));
    assert!(f.pod("web-pending").await.is_none());
    assert_eq!(f.port().evict(&done).await, Ok(EvictOutcome::Evicted));
    assert!(f.pod("web-done").await.is_none());
    assert_eq!(budget(f, "web").await.0.3, 0, "no disruption spent");
}

async fn two_budgets_over_one_pod_block<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let pods = running_pods(f, "web", &node, 3).await;
    f.create_pdb("web", "web", 1).await;
    f.create_pdb("web-too", "web", 1).await;
    f.reconcile().await;
    assert_eq!(budget(f, "web").await.0.3, 2);
    assert_eq!(
        f.port().evict(&pods[0]).await,
        Ok(EvictOutcome::Blocked(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into()
        ))
    );
    assert!(!is_terminating(&f.pod("web-0").await.expect("pod")));
}

async fn a_new_budget_blocks_until_its_controller_has_seen_it<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let pods = running_pods(f, "web", &node, 3).await;
    f.create_pdb("web", "web", 1).await;
    // No status yet (observedGeneration behind the generation): refused, whatever the numbers.
    assert_eq!(
        f.port().evict(&pods[0]).await,
        Ok(EvictOutcome::Blocked(format!(
            "{BUDGET_REFUSES} The disruption budget web is still being processed by the server."
        )))
    );
    f.reconcile().await;
    assert_eq!(f.port().evict(&pods[0]).await, Ok(EvictOutcome::Evicted));
}

// ------------------------------------------------------------ delete

async fn deleting_a_pod_is_graceful_unless_told_otherwise<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let a = f.create_pod(NewPod::running("a", "web", &node)).await;
    let b = f.create_pod(NewPod::running("b", "web", &node)).await;
    let c = f
        .create_pod(NewPod {
            grace: Some(10),
            ..NewPod::running("c", "web", &node)
        })
        .await;
    let unbound = f.create_pod(NewPod::pending("unbound", "web")).await;

    // An explicit grace period.
    f.port().delete_pod(&a, Some(5)).await.expect("delete");
    let p = f.pod("a").await.expect("terminating");
    assert!(is_terminating(&p));
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(5));
    // The pod's own (10 s), and none given at all: the default 30 s.
    f.port().delete_pod(&c, None).await.expect("delete");
    assert_eq!(
        f.pod("c")
            .await
            .and_then(|p| p.metadata.deletion_grace_period_seconds),
        Some(10)
    );
    // A second deletion may shorten the grace period, never lengthen it.
    f.port()
        .delete_pod(&c, Some(60))
        .await
        .expect("delete again");
    assert_eq!(
        f.pod("c")
            .await
            .and_then(|p| p.metadata.deletion_grace_period_seconds),
        Some(10)
    );

    // Grace 0, or a pod no kubelet runs: gone at once.
    f.port().delete_pod(&b, Some(0)).await.expect("delete now");
    assert!(f.pod("b").await.is_none());
    f.port()
        .delete_pod(&unbound, Some(30))
        .await
        .expect("delete unbound");
    assert!(f.pod("unbound").await.is_none());

    f.advance(6).await;
    f.reconcile().await;
    assert!(f.pod("a").await.is_none(), "5 s are over");
    assert!(f.pod("c").await.is_some(), "10 s are not");
    f.advance(5).await;
    f.reconcile().await;
    assert!(f.pod("c").await.is_none());

    // Gone already: nothing to do.
    f.port()
        .delete_pod(&a, None)
        .await
        .expect("delete a missing pod");
}

async fn deleting_a_replaced_pod_deletes_nothing<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let p = f.create_pod(NewPod::running("web", "web", &node)).await;
    let stale = PodKey {
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..p
    };
    f.port()
        .delete_pod(&stale, Some(0))
        .await
        .expect("a precondition failure is not an error");
    assert!(!is_terminating(
        &f.pod("web").await.expect("the pod under that name stays")
    ));
}

// ------------------------------------------------------------ events

async fn events_are_recorded_and_read_back<F: ContractCluster>(f: &F) {
    let node = f.create_node("n").await;
    let p = f.create_pod(NewPod::running("web-0", "web", &node)).await;
    let evicted = ClusterEvent {
        kind: "Pod".into(),
        namespace: Some(p.namespace.clone()),
        name: p.name.clone(),
        type_: "Normal".into(),
        reason: "Evicted".into(),
        message: "Evicted pod: SpotInterrupted".into(),
    };
    let blocked = ClusterEvent {
        type_: "Warning".into(),
        reason: "FailedDraining".into(),
        message:
            "Failed to drain node, 1 pods are waiting to be evicted: pdb web prevents pod evictions"
                .into(),
        ..evicted.clone()
    };
    f.port().record_event(&evicted).await.expect("record");
    f.port().record_event(&blocked).await.expect("record");
    f.port()
        .record_event(&blocked)
        .await
        .expect("record a repeat");
    assert_eq!(
        f.events().await,
        [evicted, blocked.clone(), blocked],
        "each repeat counted"
    );
}

// ------------------------------------------------------------ storage

/// `volume_attachments(node)` lists the VolumeAttachments of that node
/// only (what a drained node's instance waits for).
async fn a_nodes_volume_attachments_are_its_own<F: ContractCluster>(f: &F) {
    let a = f.create_node("a").await;
    let b = f.create_node("b").await;
    let ns = f.namespace().to_owned();
    f.create_storage_object(volume_attachment_object(&format!("{ns}-va-a"), &a, "pv-a"))
        .await;
    f.create_storage_object(volume_attachment_object(&format!("{ns}-va-b"), &b, "pv-b"))
        .await;
    let on_a = f.port().volume_attachments(&a).await.expect("list");
    let names: Vec<String> = on_a
        .iter()
        .filter_map(|v| v.metadata.name.clone())
        .collect();
    assert_eq!(names, [format!("{ns}-va-a")]);
    assert_eq!(
        on_a[0].spec.source.persistent_volume_name.as_deref(),
        Some("pv-a")
    );
    let none = f
        .port()
        .volume_attachments(&format!("{ns}-gone"))
        .await
        .expect("list");
    assert!(none.is_empty(), "a node without attachments has none");
}

/// `csi_nodes()` reads each node's CSINode with its drivers' counts (the
/// attach limits the packer and the binding hold pods to).
async fn csi_nodes_carry_their_drivers_attach_limits<F: ContractCluster>(f: &F) {
    let a = f.create_node("a").await;
    f.create_storage_object(csi_node_object(&a, "ebs.csi.aws.com", 25))
        .await;
    let all = f.port().csi_nodes().await.expect("list");
    let mine = all
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(a.as_str()))
        .expect("the node's CSINode");
    let index =
        nodewright::scheduling::volumes::VolumeIndex::default().with_csi_nodes(vec![mine.clone()]);
    assert_eq!(
        index.limits_of(&a),
        std::collections::BTreeMap::from([("ebs.csi.aws.com".to_owned(), 25)])
    );
}

// ------------------------------------------------------------ workloads

/// `scalable_workload` reads the pod template and the replicas of the
/// workload a CapacityBuffer's `scalableRef` names, follows a scale, reads
/// an unset `spec.replicas` as 1 (Karpenter's suite_test.go It("should
/// default to 1 replica when workload has nil Spec.Replicas")), and says
/// `None`, not an error, for an object that is not there.
async fn a_buffers_workload_is_read_with_its_template_and_replicas<F: ContractCluster>(f: &F) {
    let ns = f.namespace().to_owned();
    f.create_deployment("web", Some(4), "250m").await;
    f.create_deployment("unset", None, "1").await;
    let w = f
        .port()
        .scalable_workload(ScalableKind::Deployment, &ns, "web")
        .await
        .expect("read")
        .expect("the Deployment is there");
    assert_eq!(w.replicas, 4);
    let labels = w
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    let requests = w
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].resources.as_ref())
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("250m"));

    f.scale_deployment("web", 7).await;
    let scaled = f
        .port()
        .scalable_workload(ScalableKind::Deployment, &ns, "web")
        .await
        .expect("read")
        .expect("still there");
    assert_eq!(scaled.replicas, 7, "the scale is seen");

    let unset = f
        .port()
        .scalable_workload(ScalableKind::Deployment, &ns, "unset")
        .await
        .expect("read")
        .expect("the Deployment is there");
    assert_eq!(unset.replicas, 1);

    for (kind, name) in [
        (ScalableKind::Deployment, "nothing"),
        (ScalableKind::StatefulSet, "web"),
        (ScalableKind::ReplicaSet, "web"),
    ] {
        assert_eq!(
            f.port().scalable_workload(kind, &ns, name).await,
            Ok(None),
            "{kind:?} {name}: not there"
        );
    }
}
