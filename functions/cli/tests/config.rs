//! `nodewright init` and `nodewright config …` end to end: the binary
//! against the moto emulator's DynamoDB, and the functions' reader seeing
//! what it wrote.
#![allow(clippy::expect_used)] // test code: a failed expectation is a failed test

use std::process::Command;

use nodewright::aws::{DynamoStore, DynamoTables};
use nodewright::config::ConfigKind;
use nodewright::handlers::config::ConfigReader;
use nodewright::handlers::config_write;
use nodewright::model::Timestamp;
use nodewright::ports::{Store, StoreError};
use nodewright_tests::aws::{moto, sdk_config, unique};

fn nodewright(prefix: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodewright"));
    cmd.args(args)
        .env("NODEWRIGHT_TABLE_PREFIX", prefix)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", &moto().endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("RUST_BACKTRACE");
    let out = match stdin {
        None => cmd.output().expect("runs the nodewright binary"),
        Some(text) => {
            use std::io::Write;
            let mut child = cmd
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawns");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("writes");
            child.wait_with_output().expect("waits")
        }
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CLASS: &str = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  role: KarpenterNodeRole-demo
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  kubelet: {maxPods: 20}
";

fn pool(cpu: &str) -> String {
    format!(
        "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: general}}\nspec:\n  limits: {{cpu: \"{cpu}\"}}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}}]\n"
    )
}

async fn store(prefix: &str) -> DynamoStore {
    DynamoStore::new(
        &sdk_config("us-east-1").await,
        DynamoTables::with_prefix(prefix),
    )
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writes the file");
    path.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_apply_get_diff_delete_and_a_conflict() {
    let prefix = unique("nwcfg");
    let dir = std::env::temp_dir().join(&prefix);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = prefix.clone();
    let run = move |args: Vec<String>, stdin: Option<String>| {
        let p = p.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nodewright(&p, &args, stdin.as_deref())
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();

    let (ok, out, err) = run(args(&["init"]), None).await.expect("ran");
    assert!(
        ok && out.contains(&format!("{prefix}-config")),
        "{out}{err}"
    );

    // apply from stdin: both items created, version counter moved once.
    let (ok, out, err) = run(
        args(&["config", "apply", "-f", "-"]),
        Some(format!("{CLASS}{}", pool("100"))),
    )
    .await
    .expect("ran");
    assert!(ok, "{err}");
    assert!(
        out.contains("+ nodeclass/default (new)")
            && out.contains("+ nodepool/general (new)")
            && out.contains("2 item(s) written"),
        "{out}"
    );
    let s = store(&prefix).await;
    assert_eq!(s.config_version().await.expect("version"), 1);

    // get: a table, and one item as YAML.
    let (ok, out, _) = run(args(&["config", "get"]), None).await.expect("ran");
    assert!(ok);
    assert!(
        out.lines().any(|l| l.starts_with("nodepool")
            && l.contains("general")
            && l.contains(" 1 ")
            && l.ends_with("valid")),
        "{out}"
    );
    let (ok, out, _) = run(
        args(&["config", "get", "nodepool", "general", "-o", "yaml"]),
        None,
    )
    .await
    .expect("ran");
    assert!(
        ok && out.contains("kind: NodePool") && out.contains("cpu: '100'"),
        "{out}"
    );
    let (ok, out, _) = run(args(&["config", "get", "settings"]), None)
        .await
        .expect("ran");
    assert!(
        ok && out.contains("not stored: the defaults") && out.contains("batchIdleDuration: 1s"),
        "{out}"
    );

    // diff and a dry run change nothing.
    let changed = write(&dir, "changed.yaml", &pool("200"));
    let (ok, out, _) = run(args(&["config", "diff", "-f", &changed]), None)
        .await
        .expect("ran");
    assert!(
        ok && out.contains("~ nodepool/general (version 1 → 2)")
            && out.contains("+     cpu: '200'"),
        "{out}"
    );
    let (ok, _, _) = run(
        args(&["config", "apply", "--dry-run", "-f", &changed]),
        None,
    )
    .await
    .expect("ran");
    assert!(ok);
    assert_eq!(
        s.config_version().await.expect("version"),
        1,
        "a dry run writes nothing"
    );

    // Two operators: one plans, the other applies first; the first loses.
    let theirs = config_write::plan(&s, "theirs.yaml", &pool("300"))
        .await
        .expect("valid");
    let (ok, _, err) = run(args(&["config", "apply", "-f", &changed]), None)
        .await
        .expect("ran");
    assert!(ok, "{err}");
    let lost = config_write::apply(&s, &theirs, Timestamp::now())
        .await
        .expect_err("conflict");
    assert!(
        matches!(&lost, StoreError::Conflict { item, .. } if item == "nodepool#general"),
        "{lost:?}"
    );
    let general = s
        .config_items()
        .await
        .expect("items")
        .into_iter()
        .find(|i| i.name == "general")
        .expect("pool");
    assert_eq!(
        (general.version, general.spec["limits"]["cpu"].as_str()),
        (2, Some("200"))
    );

    // A partly invalid file (five mistakes) changes nothing and names each.
    let bad = write(
        &dir,
        "bad.yaml",
        &format!(
            "{}---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: op}}\nspec: {{template: {{spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}, requirements: [{{key: a, operator: Inn, values: [x]}}]}}}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: limit}}\nspec: {{limits: {{cpu: 8Gx}}, template: {{spec: {{requirements: [], nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}}}}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: noref}}\nspec: {{template: {{spec: {{requirements: []}}}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: missing}}\nspec: {{template: {{spec: {{requirements: [], nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: nope}}}}}}}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: broken}}\nspec: {{role: r, subnetSelectorTerms: [{{tags: {{a: b}}}}], securityGroupSelectorTerms: [{{tags: {{a: b}}}}]}}\n",
            pool("400")
        ),
    );
    let (ok, _, err) = run(args(&["config", "apply", "-f", &bad]), None)
        .await
        .expect("ran");
    assert!(!ok);
    assert!(err.contains("5 error(s); nothing was changed"), "{err}");
    for want in [
        "nodepool/op",
        "Inn",
        "nodepool/limit: spec.limits",
        "nodepool/noref: spec.template.spec.nodeClassRef",
        "nodepool/missing",
        "nodeclass/broken",
    ] {
        assert!(err.contains(want), "{want} in {err}");
    }
    assert_eq!(
        s.config_version().await.expect("version"),
        2,
        "nothing written"
    );
    // Offline, the stored class is unknown: its references are errors too.
    let (ok, _, err) = run(args(&["config", "validate", "-f", &bad]), None)
        .await
        .expect("ran");
    assert!(
        !ok && err.contains("nodeclass/broken") && err.contains("Inn"),
        "{err}"
    );

    // delete: a class in use is refused; the pool, then the class, go.
    let (ok, _, err) = run(args(&["config", "delete", "ec2nodeclass", "default"]), None)
        .await
        .expect("ran");
    assert!(!ok && err.contains("nodepool/general"), "{err}");
    let (ok, out, _) = run(args(&["config", "delete", "nodepool", "general"]), None)
        .await
        .expect("ran");
    assert!(ok && out.contains("nodepool/general deleted"), "{out}");
    let (ok, out, _) = run(args(&["config", "delete", "ec2nodeclass", "default"]), None)
        .await
        .expect("ran");
    assert!(ok && out.contains("nodeclass/default deleted"), "{out}");
    assert!(s.config_items().await.expect("items").is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

/// A change applied while the functions run reaches their next read: the
/// reader sees the counter move and picks up the new NodeClass, whose
/// kubelet reaches the pool and the class a launch carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_change_reaches_the_next_tick() {
    let prefix = unique("nwlive");
    let s = store(&prefix).await;
    s.ensure_tables().await.expect("tables");
    let reader = ConfigReader::new();
    let t0 = Timestamp::now();
    let p = prefix.clone();
    let apply = move |text: String| {
        let p = p.clone();
        tokio::task::spawn_blocking(move || {
            nodewright(&p, &["config", "apply", "-f", "-"], Some(&text))
        })
    };
    let (ok, _, err) = apply(format!("{CLASS}{}", pool("100"))).await.expect("ran");
    assert!(ok, "{err}");
    let first = reader.read(&s, t0).await.expect("read");
    assert_eq!(
        first.pool("general").and_then(|p| p.kubelet.max_pods),
        Some(20)
    );
    let again = reader.read(&s, t0).await.expect("read");
    assert!(std::sync::Arc::ptr_eq(&first, &again), "no change: no scan");

    let (ok, _, err) = apply(CLASS.replace("maxPods: 20", "maxPods: 7"))
        .await
        .expect("ran");
    assert!(ok, "{err}");
    let next = reader.read(&s, t0).await.expect("read");
    let pool = next.pool("general").expect("pool");
    assert_eq!(
        pool.kubelet.max_pods,
        Some(7),
        "the class's new maxPods reaches the allocatable math"
    );
    assert_eq!(
        pool.class_named(Some("default"))
            .and_then(|c| c.kubelet.max_pods.clone()),
        Some(7.into()),
        "and what a launch carries"
    );
    assert_eq!(next.version, 2);
    assert!(next.invalid.is_empty());
    assert_eq!(
        s.config_items()
            .await
            .expect("items")
            .iter()
            .filter(|i| i.kind == ConfigKind::NodeClass)
            .count(),
        1
    );
}
