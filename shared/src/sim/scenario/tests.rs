use super::*;

/// Found by the `scenario` fuzz target: a 120-digit `at:` made the
/// duration conversion panic instead of refusing the file.
#[test]
fn durations_parse_and_absurd_ones_are_refused() {
    assert_eq!(
        parse_duration("1h30m").expect("parses"),
        SignedDuration::from_mins(90)
    );
    assert_eq!(
        parse_duration("1.5s").expect("parses"),
        SignedDuration::from_millis(1500)
    );
    assert_eq!(
        parse_duration("250ms").expect("parses"),
        SignedDuration::from_millis(250)
    );
    let huge = format!("{}m", "8".repeat(120));
    assert!(
        parse_duration(&huge)
            .expect_err("too long")
            .to_string()
            .contains("longer than a century")
    );
    assert!(
        parse_duration("101y").is_err()
            && parse_duration("").is_err()
            && parse_duration("5").is_err()
    );
}

#[test]
fn a_scenario_with_invalid_objects_is_refused_naming_every_error() {
    let text = r#"
name: mistakes
run: 1m
objects:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: c}
    spec: {role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: op}
    spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c},
           requirements: [{key: karpenter.sh/capacity-type, operator: Inn, values: [spot]}]}}}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: limit}
    spec: {limits: {memory: 8Gx}, template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}}}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: noref}
    spec: {template: {spec: {requirements: []}}}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: inflate}
    spec:
      replicas: 1
      selector: {matchLabels: {app: inflate}}
      template:
        metadata: {labels: {app: inflate}}
        spec: {containers: [{name: c, image: pause, resources: {requests: {cpu: 1x}}}]}
"#;
    let s = parse(text).expect("parses");
    let Err(ScenarioError::Invalid(errors)) = validate(&s) else {
        panic!("must be refused")
    };
    assert_eq!(errors.len(), 5, "{errors:#?}");
    let all = errors.join("\n");
    for want in [
        "nodeclass/c: spec.amiSelectorTerms",
        "nodepool/op",
        "Inn",
        "nodepool/limit: spec.limits",
        "8Gx",
        "nodepool/noref: spec.template.spec.nodeClassRef",
        "deployment/inflate: spec.template.spec.containers[0].resources.requests.cpu",
    ] {
        assert!(all.contains(want), "{want} in:\n{all}");
    }
    assert!(split_objects(&s.objects, Timestamp::UNIX_EPOCH).is_err());
}

/// The source walkthroughs' YAML, as users pasted it.
const WALKTHROUGH_YAML: [(&str, &str); 4] = [
    (
        "01",
        include_str!("../../../../tests/fixtures/walkthrough-yaml/01-provisioner-v1alpha5.yaml"),
    ),
    (
        "02",
        include_str!(
            "../../../../tests/fixtures/walkthrough-yaml/02-provisioner-v1alpha5-expiry.yaml"
        ),
    ),
    (
        "03",
        include_str!(
            "../../../../tests/fixtures/walkthrough-yaml/03-provisioner-v1alpha5-instanceprofile.yaml"
        ),
    ),
    (
        "04",
        include_str!(
            "../../../../tests/fixtures/walkthrough-yaml/04-nodeclass-nodepool-v1beta1.yaml"
        ),
    ),
];
const WORKLOAD_YAML: &str =
    include_str!("../../../../tests/fixtures/walkthrough-yaml/05-workload-inflate.yaml");

fn values(text: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(text)
        .map(|d| serde_json::Value::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn every_walkthrough_document_validates_and_drives_a_scenario() {
    for (name, text) in WALKTHROUGH_YAML {
        // 03 is a Provisioner of Karpenter v0.5's days without subnet
        // and security group selectors: they default to the cluster's
        // discovery tag, as that version did (and a warning says so).
        let text = text.to_owned();
        let set = config::ConfigSet::parse(&text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        if name == "03" {
            let class = set
                .node_class("default")
                .expect("the inline provider's class");
            assert_eq!(
                class.subnet_selector_terms,
                [config::nodeclass::SelectorTerm::ClusterTag]
            );
            assert_eq!(
                class.security_group_selector_terms,
                [config::nodeclass::SelectorTerm::ClusterTag]
            );
            let warned = config::document::parse_checked(&text, false).warnings;
            assert_eq!(
                warned.iter().map(|w| w.field.as_str()).collect::<Vec<_>>(),
                [
                    "spec.provider.subnetSelector",
                    "spec.provider.securityGroupSelector"
                ]
            );
        }
        let mut objects = values(&text);
        // policy/v1beta1 PodDisruptionBudgets are gone since Kubernetes
        // 1.25 (the API server refuses them as the simulator does): v1.
        objects.extend(values(
            &WORKLOAD_YAML.replace("policy/v1beta1", "policy/v1"),
        ));
        let scenario = Scenario {
            name: format!("walkthrough-yaml-{name}"),
            description: String::new(),
            region: "ap-south-1".into(),
            objects,
            actions: vec![Action {
                at: "0s".into(),
                what: ActionKind::Scale {
                    deployment: "inflate".into(),
                    replicas: 3,
                    namespace: "default".into(),
                },
            }],
            run: "3m".into(),
            simulator: Pace::default(),
            spot_pools: SpotPoolsSpec::default(),
            capacity_reservations: Vec::new(),
            expect: Expect {
                pods: Some(PodCounts {
                    bound: Some(3),
                    pending: Some(0),
                }),
                ..Default::default()
            },
        };
        validate(&scenario).unwrap_or_else(|e| panic!("{name}: {e}"));
        let failures = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(async {
                let clock = super::super::SimClock::default();
                let cloud = SimCloud::new(
                    super::super::catalog::catalog("ap-south-1").expect("region"),
                    clock.clone(),
                );
                let mut sim = Simulation::new(
                    clock,
                    cloud.clone(),
                    Some(cloud),
                    super::super::MemStore::new(),
                    Default::default(),
                );
                load(&mut sim, &scenario).await.expect("loads");
                run(&mut sim, &scenario).await.expect("runs");
                check(&sim, &scenario.expect).await
            });
        assert!(failures.is_empty(), "{name}: {failures:?}");
    }
}

fn run_in_memory(scenario: &Scenario) -> (SimCloud, Vec<String>) {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(async {
            let clock = super::super::SimClock::default();
            let cloud = SimCloud::new(
                super::super::catalog::catalog(&scenario.region).expect("region"),
                clock.clone(),
            );
            let mut sim = Simulation::new(
                clock,
                cloud.clone(),
                Some(cloud.clone()),
                super::super::MemStore::new(),
                Default::default(),
            );
            load(&mut sim, scenario).await.expect("loads");
            run(&mut sim, scenario).await.expect("runs");
            (cloud, check(&sim, &scenario.expect).await)
        })
}

/// `tests/scenarios/spot-pools.yaml`: pools of depth 2 spread six spot
/// nodes over at least three pools, none holding more than 2.
#[test]
fn shallow_spot_pools_spread_a_scenario_fleet() {
    let s = parse(include_str!("../../../../tests/scenarios/spot-pools.yaml")).expect("parses");
    assert_eq!(s.spot_pools.depth, Some(2));
    let (cloud, failures) = run_in_memory(&s);
    assert!(failures.is_empty(), "{failures:?}");
    let mut per_pool: BTreeMap<(String, String), usize> = BTreeMap::new();
    for i in cloud
        .all_instances()
        .iter()
        .filter(|i| !i.instance.state.is_gone_or_going())
    {
        assert_eq!(i.instance.capacity_type, CAPACITY_TYPE_SPOT);
        *per_pool
            .entry((i.instance.instance_type.clone(), i.instance.zone.clone()))
            .or_default() += 1;
    }
    assert_eq!(per_pool.values().sum::<usize>(), 6, "{per_pool:?}");
    assert!(
        per_pool.len() >= 3 && per_pool.values().all(|n| *n <= 2),
        "{per_pool:?}"
    );
}

#[test]
fn invalid_spot_pool_depths_are_refused_naming_the_field() {
    let text = r#"
name: pools
run: 1m
objects: []
spotPools:
  depth: 0
  offerings:
    - {instanceType: m5.large, zone: us-east-1a, depth: 2000000}
    - {instanceType: m5.large, zone: us-east-1a, depth: 1}
    - {instanceType: m5.large, zone: eu-west-1a, depth: 1}
"#;
    let s = parse(text).expect("parses");
    let Err(ScenarioError::Invalid(errors)) = validate(&s) else {
        panic!("must be refused")
    };
    let all = errors.join("\n");
    assert_eq!(errors.len(), 4, "{all}");
    for want in [
        "spotPools.depth: 0 is not a depth",
        "spotPools.offerings[0].depth: 2000000 is deeper than the most allowed",
        "spotPools.offerings[1]: m5.large in us-east-1a is already given at spotPools.offerings[0]",
        "spotPools.offerings[2]: m5.large is not offered as spot in eu-west-1a",
    ] {
        assert!(all.contains(want), "{want} in:\n{all}");
    }
    assert!(
        parse("name: p\nrun: 1m\nobjects: []\nspotPools: {depth: -1}\n")
            .expect_err("not a depth")
            .to_string()
            .contains("spotPools")
    );
    assert!(
        parse("name: p\nrun: 1m\nobjects: []\nspotPools: {deep: 3}\n").is_err(),
        "unknown fields are refused"
    );
    let ok = parse("name: p\nrun: 1m\nobjects: []\nspotPools: {depth: 3, seed: 9, offerings: [{instanceType: m5.large, zone: us-east-1a, depth: 1}]}\n").expect("parses");
    validate(&ok).expect("valid");
    let depths = ok.spot_pools.depths().expect("depths");
    assert_eq!(
        (
            depths.seed,
            depths.all,
            depths.offerings.values().copied().collect::<Vec<_>>()
        ),
        (9, Some(3), vec![1])
    );
    assert!(
        SpotPoolsSpec::default().depths().is_none(),
        "nothing set: the cloud keeps its depths"
    );
}

/// Actions are read strictly: one verb each, known keys only, and none
/// timed after the run ends (it would silently never happen).
#[test]
fn malformed_actions_are_refused_saying_what_is_wrong() {
    let scenario = |actions: &str| format!("name: a\nrun: 5m\nobjects: []\nactions:\n{actions}");
    let no_verb = parse(&scenario("  - {at: 1m}\n")).expect_err("no verb");
    assert!(
        no_verb.to_string().contains("action at 1m has no verb"),
        "{no_verb}"
    );
    let unknown = parse(&scenario(
        "  - {at: 1m, scale: {deployment: d, replicas: 1}, node: x}\n",
    ))
    .expect_err("unknown key");
    assert!(
        unknown.to_string().contains("unknown key(s) [\"node\"]"),
        "{unknown}"
    );
    let two =
        parse(&scenario("  - {at: 1m, plan: {}, expect: {nodes: 1}}\n")).expect_err("two verbs");
    assert!(two.to_string().contains("has 2 verbs"), "{two}");
    let bad_body = parse(&scenario(
        "  - {at: 1m, scale: {deployment: d, replicaz: 1}}\n",
    ))
    .expect_err("unknown field in the verb");
    assert!(
        bad_body.to_string().contains("action at 1m: scale"),
        "{bad_body}"
    );
    let late = parse(&scenario(
        "  - {at: 6m, plan: {}}\n  - {at: 5m, plan: {}}\n",
    ))
    .expect("parses");
    let Err(ScenarioError::Invalid(errors)) = validate(&late) else {
        panic!("an action after the run is refused")
    };
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("actions[0].at: 6m is after the end of the run (5m)"),
        "{errors:?}"
    );
    let window = parse(
        "name: a\nrun: 5m\nobjects: []\nexpect: {maxPendingSeconds: {seconds: 9, from: soon}}\n",
    )
    .expect("parses");
    let Err(ScenarioError::Invalid(errors)) = validate(&window) else {
        panic!("a window that is not a duration is refused")
    };
    assert!(
        errors[0].starts_with("expect.maxPendingSeconds.from"),
        "{errors:?}"
    );
    let ok = parse(&scenario(
        "  - {at: 5m, expect: {maxPendingSeconds: {seconds: 9, from: 1m, until: 2m}}}\n",
    ))
    .expect("parses");
    validate(&ok).expect("valid");
}

#[test]
fn the_built_in_scenarios_validate() {
    for (name, text) in BUILT_IN {
        let s = parse(text).expect(name);
        validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
