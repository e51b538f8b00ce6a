//! `nodewright config import --from-cluster` end to end: the binary reads
//! Karpenter's objects from a real kube-apiserver (with CRDs of our own for
//! Karpenter's kinds, `tests/fixtures/karpenter-crds.yaml`) and writes them
//! to the config table on the moto emulator, as `config apply` would.
//!
//! The server is one of the test's own (`KubeEnv::private`): the test
//! moves the CRDs from a Karpenter 0.3x cluster (NodePools and
//! EC2NodeClasses served as v1beta1 only, beside v1alpha5 Provisioners and
//! AWSNodeTemplates) to a Karpenter v1 cluster, which every other test on a
//! shared server would see.

#![allow(clippy::expect_used)] // test code: a failed expectation is a failed test

use std::process::Command;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use nodewright::aws::{DynamoStore, DynamoTables};
use nodewright::config::{ConfigKind, resolve_items};
use nodewright::ports::Store;
use nodewright_tests::aws::{moto, sdk_config, unique};
use nodewright_tests::kube_harness::{KubeEnv, repo_root};
use serde_json::{Value, json};

fn nodewright(prefix: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .env("NODEWRIGHT_TABLE_PREFIX", prefix)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", &moto().endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("KUBECONFIG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("runs the nodewright binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The fixture's CRDs; `v1beta1_only` makes NodePools and EC2NodeClasses
/// what Karpenter 0.3x served: v1beta1 alone, stored as such.
fn crds(v1beta1_only: bool) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/karpenter-crds.yaml"))
        .expect("the CRD fixture");
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let mut crd: Value = serde::Deserialize::deserialize(doc).expect("CRD YAML");
        let two_versions = crd["spec"]["versions"]
            .as_array()
            .is_some_and(|v| v.len() == 2);
        if v1beta1_only && two_versions {
            let beta = crd["spec"]["versions"]
                .as_array()
                .and_then(|vs| vs.iter().find(|v| v["name"] == "v1beta1"))
                .cloned()
                .expect("a v1beta1 version");
            let mut beta = beta;
            beta["storage"] = json!(true);
            crd["spec"]["versions"] = json!([beta]);
        }
        out.push(crd);
    }
    out
}

async fn install(client: &kube::Client, crds: &[Value]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("name");
        api.patch(
            name,
            &PatchParams::apply("nodewright-tests").force(),
            &Patch::Apply(crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
    }
    // Served once Established (polled every 100 ms, at most 300 times).
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("name");
        for attempt in 1.. {
            let got = api.get(name).await.expect("get CRD");
            let established = got
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            assert!(attempt < 300, "{name} not established");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn uninstall(client: &kube::Client, crds: &[Value]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("name");
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("name");
        let mut attempts = 0;
        while api.get_opt(name).await.expect("get CRD").is_some() {
            attempts += 1;
            assert!(attempts < 300, "{name} not deleted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The resource name of a Karpenter kind, as its CRD declares it
/// (`EC2NodeClass` → `ec2nodeclasses`).
fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// Creates a Karpenter object (cluster-scoped) as the admin, retrying for
/// a few seconds while its version is not yet served.
async fn create(client: &kube::Client, object: Value) {
    let (group, version) = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("group/version");
    let kind = object["kind"].as_str().expect("kind");
    let resource = ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_owned(),
        plural: plural(kind),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let name = object["metadata"]["name"].as_str().expect("name");
    let mut attempts = 0;
    loop {
        attempts += 1;
        match api
            .patch(
                name,
                &PatchParams::apply("karpenter").force(),
                &Patch::Apply(&object),
            )
            .await
        {
            Ok(_) => return,
            Err(e) if attempts < 100 => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create {kind} {name}: {e}"),
        }
    }
}

async fn store(prefix: &str) -> DynamoStore {
    let store = DynamoStore::new(
        &sdk_config("us-east-1").await,
        DynamoTables::with_prefix(prefix),
    );
    store.ensure_tables().await.expect("tables");
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_reads_what_karpenter_serves_and_writes_it_as_apply_would() {
    let env = KubeEnv::private();
    let admin = env.admin_client();
    let kubeconfig = env.admin_kubeconfig.to_string_lossy().into_owned();
    let prefix = unique("nw-import");
    let store = store(&prefix).await;

    // A cluster running Karpenter 0.3x: v1beta1 NodePools and classes,
    // v1alpha5 Provisioners and AWSNodeTemplates.
    let old = crds(true);
    install(&admin, &old).await;
    create(&admin, json!({"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": "legacy", "annotations": {"karpenter.sh/nodepool-hash": "123"}}, "spec": {
        "template": {"spec": {"nodeClassRef": {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "beta"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}},
        "disruption": {"consolidationPolicy": "WhenUnderutilized", "expireAfter": "720h"},
        "limits": {"cpu": "100"}}})).await;
    create(&admin, json!({"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "metadata": {"name": "beta"}, "spec": {
        "amiFamily": "AL2023", "role": "KarpenterNodeRole-demo",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}})).await;
    create(&admin, json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "old"}, "spec": {
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        "providerRef": {"name": "tmpl"}, "ttlSecondsAfterEmpty": 30}})).await;
    create(&admin, json!({"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "tmpl"}, "spec": {
        "subnetSelector": {"karpenter.sh/discovery": "demo"},
        "securityGroupSelector": {"karpenter.sh/discovery": "demo"}}})).await;
    create(&admin, json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "kept"}, "spec": {
        "providerRef": {"name": "tmpl"}}})).await;

    // --dry-run shows the difference and writes nothing.
    let pools = ["--nodepool", "legacy", "--nodepool", "old"];
    let mut args = vec![
        "config",
        "import",
        "--from-cluster",
        "--kubeconfig",
        &kubeconfig,
        "--dry-run",
    ];
    args.extend(pools);
    let (ok, out, err) = nodewright(&prefix, &args);
    assert!(ok, "{out}\n{err}");
    for item in [
        "nodepool/legacy",
        "nodepool/old",
        "nodeclass/beta",
        "nodeclass/tmpl",
    ] {
        assert!(out.contains(item), "{item} in the diff:\n{out}");
    }
    assert!(
        !out.contains("kept"),
        "a pool not asked for stays Karpenter's:\n{out}"
    );
    assert!(err.contains("kept: not among the pools asked for"), "{err}");
    assert!(
        err.contains("karpenter.sh/v1 NodePool: not served"),
        "{err}"
    );
    assert!(store.config_items().await.expect("items").is_empty());

    // The import writes the four items, converted to v1, valid.
    args.retain(|a| *a != "--dry-run");
    let (ok, out, err) = nodewright(&prefix, &args);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("4 item(s) written"), "{out}");
    let items = store.config_items().await.expect("items");
    let resolved = resolve_items(&items);
    assert!(resolved.errors.is_empty(), "{:#?}", resolved.errors);
    let mut names: Vec<String> = resolved
        .set
        .node_pools
        .iter()
        .map(|p| p.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["legacy", "old"]);
    for p in &resolved.set.node_pools {
        assert_eq!(
            p.annotations
                .get("nodewright.io/karpenter-nodes")
                .map(String::as_str),
            Some("none"),
            "{p:?}"
        );
        assert!(
            !p.annotations.contains_key("karpenter.sh/nodepool-hash"),
            "Karpenter's own annotations stay behind"
        );
    }
    assert_eq!(
        items
            .iter()
            .filter(|i| i.kind == ConfigKind::NodeClass)
            .count(),
        2
    );
    // Again: nothing to change.
    let (ok, out, err) = nodewright(&prefix, &args);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("nothing to change"), "{out}");

    // Karpenter v1: NodePools and EC2NodeClasses served as v1 (and v1beta1).
    let list = |kind: &str, version: &str| {
        let admin = admin.clone();
        let (group, plural) = match kind {
            "NodePool" => ("karpenter.sh", "nodepools"),
            _ => ("karpenter.k8s.aws", "ec2nodeclasses"),
        };
        let resource = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: format!("{group}/{version}"),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
        };
        async move {
            let api: Api<DynamicObject> = Api::all_with(admin, &resource);
            api.list(&ListParams::default())
                .await
                .map(|l| l.items.len())
        }
    };
    let two_crds: Vec<Value> = old
        .iter()
        .filter(|c| {
            matches!(
                c["metadata"]["name"].as_str(),
                Some("nodepools.karpenter.sh" | "ec2nodeclasses.karpenter.k8s.aws")
            )
        })
        .cloned()
        .collect();
    // (Without Karpenter's conversion webhook the v1beta1 objects would
    // read back as v1 unconverted: they go first, as a webhook would have
    // rewritten them.)
    uninstall(&admin, &two_crds).await;
    install(&admin, &crds(false)).await;
    // The re-created CRD's storage answers 429 "(re)initializing" for a moment.
    let mut attempts = 0;
    let served = loop {
        attempts += 1;
        match list("NodePool", "v1").await {
            Ok(n) => break n,
            Err(e) => {
                assert!(attempts < 150, "v1 NodePools not served: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(served, 0, "the v1beta1 objects went with their CRD");
    create(&admin, json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general", "annotations": {"nodewright.io/rebalance-policy": "Cordon"}}, "spec": {
        "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]}},
        "limits": {"cpu": "1000"}}})).await;
    create(&admin, json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole-demo",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}})).await;
    let (ok, out, err) = nodewright(
        &prefix,
        &[
            "config",
            "import",
            "--from-cluster",
            "--kubeconfig",
            &kubeconfig,
            "--nodepool",
            "general",
            "--adopt",
            "replace",
        ],
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("2 item(s) written"), "{out}");
    // Served as v1 and v1beta1, read once.
    assert!(
        err.contains("NodePool general: already read as v1"),
        "{err}"
    );
    // Karpenter's `general` (limits cpu 1000) can still launch: the
    // handover warns with the command that stops it.
    assert!(
        err.contains(
            r#"warning: NodePool general is handed over with --adopt replace, but Karpenter can still launch for it"#
        ) && err.contains(
            r#"kubectl patch nodepool general --type merge -p '{"spec":{"limits":{"cpu":"0"}}}'"#
        ),
        "{err}"
    );
    let resolved = resolve_items(&store.config_items().await.expect("items"));
    assert!(resolved.errors.is_empty(), "{:#?}", resolved.errors);
    let general = resolved
        .set
        .node_pools
        .iter()
        .find(|p| p.name == "general")
        .expect("imported");
    assert_eq!(
        general
            .annotations
            .get("nodewright.io/rebalance-policy")
            .map(String::as_str),
        Some("Cordon"),
        "nodewright's own annotations come along"
    );
    // `--adopt replace`: the disruption function hands Karpenter's nodes of
    // the pool over (`disruption::handover`).
    assert_eq!(
        general
            .annotations
            .get("nodewright.io/karpenter-nodes")
            .map(String::as_str),
        Some("replace")
    );

    // Without the right to list Karpenter's objects the import fails whole.
    let function = env.function_kubeconfig.to_string_lossy().into_owned();
    let (ok, out, err) = nodewright(
        &prefix,
        &[
            "config",
            "import",
            "--from-cluster",
            "--kubeconfig",
            &function,
        ],
    );
    assert!(!ok, "{out}");
    assert!(
        err.contains("forbidden") || err.contains("Forbidden"),
        "{err}"
    );
    assert_eq!(store.config_items().await.expect("items").len(), 6);
}
