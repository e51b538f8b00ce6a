use super::*;
use crate::config::disruption::{BudgetNodes, ConsolidationPolicy};
use crate::config::nodeclass::{AmiFamily, AmiSelector, NodeIdentity, SelectorTerm};
use crate::scheduling::labels;
use jiff::SignedDuration;

const V1ALPHA5: &str = include_str!("../testdata/walkthrough-v1alpha5.yaml");
const V1BETA1: &str = include_str!("../testdata/walkthrough-v1beta1.yaml");
const V1: &str = include_str!("../testdata/v1.yaml");

fn one_error(text: &str) -> ConfigError {
    match ConfigSet::parse(text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(mut errors) => {
            assert_eq!(errors.len(), 1, "{errors:?}");
            errors.remove(0)
        }
    }
}

#[test]
fn walkthrough_v1alpha5_provisioners() {
    // The second Provisioner has no subnet or security group selectors:
    // Karpenter v0.5 discovered them by the cluster's tag, and so do we,
    // with a warning naming each field.
    let parsed = parse_checked(V1ALPHA5, false);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    let warned: Vec<(&str, &str)> = parsed
        .warnings
        .iter()
        .map(|w| (w.item.as_str(), w.field.as_str()))
        .collect();
    assert_eq!(
        warned,
        [
            ("provisioner/t101", "spec.provider.subnetSelector"),
            ("provisioner/t101", "spec.provider.securityGroupSelector")
        ]
    );
    assert!(
        parsed.warnings[0]
            .reason
            .contains("kubernetes.io/cluster/<cluster name>")
    );

    // The first converts (to a NodeClass and a NodePool) and validates.
    let first = V1ALPHA5.split("\n---\n").next().expect("first document");
    let docs = parse_documents(first).expect("default converts");
    assert_eq!(docs.len(), 2, "an inline provider yields a NodeClass too");
    assert!(matches!(&docs[0], ConfigDocument::NodeClass { name, .. } if name == "default"));
    assert!(
        matches!(&docs[1], ConfigDocument::NodePool { source_api_version, .. } if source_api_version == PROVISIONER_V1ALPHA5)
    );
    let set = ConfigSet::from_documents(&docs).expect("valid");
    let pool = set.node_pool("default").expect("pool");
    assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
    assert_eq!(
        pool.disruption.consolidate_after,
        Some(SignedDuration::from_secs(30))
    );
    assert_eq!(pool.expire_after, Some(SignedDuration::from_secs(1800)));
    assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
    assert!(
        pool.requirements
            .allows(labels::CAPACITY_TYPE, Some("spot"))
    );
    assert!(
        pool.requirements
            .allows(labels::CAPACITY_TYPE, Some("on-demand"))
    );
    assert!(pool.requirements.allows(labels::ARCH, Some("arm64")));
    let class = set.node_class_of(pool).expect("class");
    let any: BTreeMap<String, String> = [(
        "kubernetes.io/cluster/karpenter-demo".to_string(),
        "*".to_string(),
    )]
    .into();
    assert_eq!(
        class.subnet_selector_terms,
        vec![SelectorTerm::Tags(any.clone())]
    );
    assert_eq!(
        class.security_group_selector_terms,
        vec![SelectorTerm::Tags(any)]
    );
    assert_eq!(class.ami_family, AmiFamily::AL2);
    // The walkthrough relied on the aws.defaultInstanceProfile setting.
    assert_eq!(class.identity, NodeIdentity::DefaultInstanceProfile);
}

#[test]
fn walkthrough_t101_with_selectors_validates() {
    let t101 = V1ALPHA5.split("\n---\n").nth(1).expect("second document").replace(
            "    instanceProfile:",
            "    subnetSelector:\n      karpenter.sh/discovery: t101\n    securityGroupSelector:\n      karpenter.sh/discovery: t101\n    instanceProfile:",
        );
    let set = ConfigSet::parse(&t101).expect("valid");
    let pool = set.node_pool("t101").expect("pool");
    assert_eq!(pool.expire_after, Some(SignedDuration::from_hours(720)));
    assert_eq!(pool.disruption.consolidate_after, None);
    assert_eq!(
        set.node_class("t101").map(|c| c.identity.clone()),
        Some(NodeIdentity::InstanceProfile(
            "KarpenterNodeInstanceProfile-t101-karpenter".into()
        ))
    );
}

#[test]
fn walkthrough_v1beta1() {
    let docs = parse_documents(V1BETA1).expect("parses");
    assert_eq!(docs.len(), 2);
    let set = ConfigSet::from_documents(&docs).expect("valid");
    let class = set.node_class("default").expect("class");
    assert_eq!(class.ami_family, AmiFamily::AL2);
    assert_eq!(
        class.ami_selector_terms,
        vec![AmiSelector::Alias {
            family: AmiFamily::AL2,
            version: "latest".into()
        }]
    );
    assert_eq!(
        class.identity,
        NodeIdentity::Role("karpenter-t101-karpenter".into())
    );
    assert_eq!(
        class.tags.get("karpenter.sh/discovery").map(String::as_str),
        Some("t101-karpenter")
    );
    let pool = set.node_pool("default").expect("pool");
    assert_eq!(pool.node_class.as_deref(), Some("default"));
    assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
    assert_eq!(
        pool.disruption.consolidate_after,
        Some(SignedDuration::from_secs(30))
    );
    assert_eq!(pool.expire_after, Some(SignedDuration::from_hours(720)));
    assert_eq!(pool.disruption.budgets.len(), 1);
    assert_eq!(pool.disruption.budgets[0].nodes, BudgetNodes::Percent(10));
    assert!(
        pool.requirements
            .allows(labels::INSTANCE_GENERATION, Some("3"))
    );
    assert!(
        !pool
            .requirements
            .allows(labels::INSTANCE_GENERATION, Some("2"))
    );
    assert!(pool.requirements.allows(labels::INSTANCE_CPU, Some("16")));
    assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
}

#[test]
fn v1_documents_and_others_in_one_stream() {
    let docs = parse_stream(V1).expect("parses");
    let others: Vec<&Value> = docs
        .iter()
        .filter_map(|d| {
            if let Document::Other(v) = d {
                Some(v)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0]["kind"], "Deployment");
    let config: Vec<ConfigDocument> = docs
        .into_iter()
        .filter_map(|d| {
            if let Document::Config(c) = d {
                Some(c)
            } else {
                None
            }
        })
        .collect();
    let set = ConfigSet::from_documents(&config).expect("valid");
    let pool = set.node_pool("general").expect("pool");
    assert_eq!(
        pool.kubelet.max_pods,
        Some(58),
        "the class's maxPods reaches the allocatable math"
    );
    assert_eq!(
        pool.launch_kubelet.pods_per_core,
        Some(4),
        "the pool's own setting wins"
    );
    assert_eq!(
        pool.termination_grace_period,
        Some(SignedDuration::from_hours(24))
    );
    assert_eq!(pool.expire_after, None);
    assert_eq!(pool.disruption.budgets.len(), 2);
    assert!(set.node_class("al2023").is_some());
    // Without keeping others, the Deployment is an error naming its position.
    let e = parse_documents(V1).expect_err("Deployment");
    assert_eq!(e.item, "document[3]");
    assert_eq!(e.field, "kind");
    assert!(e.reason.contains("apps/v1/Deployment"), "{}", e.reason);
}

#[test]
fn json_and_lists() {
    let json = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
             "spec": {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "role": "r",
                      "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}},
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
             "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}, "requirements": []}}}}
        ]}"#;
    let set = ConfigSet::parse(json).expect("valid");
    assert_eq!(set.node_pools.len(), 1);
    assert_eq!(set.node_classes[0].ami_family, AmiFamily::Bottlerocket);
}

#[test]
fn from_value_reads_one_object() {
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(V1ALPHA5)
        .map(|d| Value::deserialize(d).expect("yaml"))
        .collect();
    let converted = from_value(&docs[0], 0).expect("converts");
    assert_eq!(
        converted
            .iter()
            .map(ConfigDocument::name)
            .collect::<Vec<_>>(),
        vec!["default", "default"]
    );
    // What a store keeps (the v1 spec as JSON) reads back to the same spec.
    for doc in &converted {
        match doc {
            ConfigDocument::NodePool { spec, .. } => {
                let back: NodePoolSpec =
                    serde_json::from_value(serde_json::to_value(spec).expect("json"))
                        .expect("reads back");
                assert_eq!(&back, spec);
            }
            ConfigDocument::NodeClass { spec, .. } => {
                let back: EC2NodeClassSpec =
                    serde_json::from_value(serde_json::to_value(spec).expect("json"))
                        .expect("reads back");
                assert_eq!(&back, spec);
                assert!(NodeClass::from_spec("default", &back).is_ok());
            }
            other => panic!("only a NodePool and a NodeClass in a Provisioner, got {other:?}"),
        }
        // And through the stored item, the one way the functions read it.
        let back = ConfigDocument::from_item(&doc.to_item(3, jiff::Timestamp::UNIX_EPOCH))
            .expect("item reads back");
        assert_eq!(back.spec_json(), doc.spec_json());
    }
    // t101's provider names no subnets or security groups: the cluster's tag.
    let t101 = from_value(&docs[1], 1).expect("t101 converts");
    assert!(matches!(&t101[0], ConfigDocument::NodeClass { spec, .. } if spec.cluster_discovery));
    let e =
        from_value(&serde_json::json!({"apiVersion": "v1", "kind": "Pod"}), 4).expect_err("a pod");
    assert_eq!((e.item.as_str(), e.field.as_str()), ("document[4]", "kind"));
}

#[test]
fn empty_documents_are_skipped() {
    assert_eq!(parse_documents("").expect("empty"), vec![]);
    assert_eq!(
        parse_documents("---\n---\n# just a comment\n").expect("empty"),
        vec![]
    );
}

#[test]
fn document_errors_name_the_position() {
    let cases = [
        (
            "---\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: x}\n",
            "document[1]",
            "kind",
            "karpenter.sh/v1/NodeClaim",
        ),
        (
            "apiVersion: karpenter.sh/v2\nkind: NodePool\nmetadata: {name: x}\n",
            "document[0]",
            "kind",
            "unsupported apiVersion/kind",
        ),
        (
            "kind: NodePool\nmetadata: {name: x}\n",
            "document[0]",
            "apiVersion",
            "required",
        ),
        (
            "apiVersion: karpenter.sh/v1\nkind: NodePool\n",
            "document[0]",
            "metadata.name",
            "required",
        ),
        (
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: Default}\n",
            "document[0]",
            "metadata.name",
            "not a valid name",
        ),
        (
            "- a\n- b\n",
            "document[0]",
            "(document)",
            "expected an object",
        ),
        (
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {limits: [1}\n",
            "document[0]",
            "line 4 column",
            "",
        ),
    ];
    for (text, item, field, reason) in cases {
        let e = parse_documents(text).expect_err(text);
        assert_eq!(e.item, item, "{text}");
        assert!(e.field.starts_with(field), "{text}: {}", e.field);
        assert!(e.reason.contains(reason), "{text}: {}", e.reason);
    }
    // A Karpenter kind of an unknown version is refused even when keeping others.
    let e = parse_stream("apiVersion: karpenter.sh/v1beta2\nkind: NodePool\nmetadata: {name: x}\n")
        .expect_err("v1beta2");
    assert_eq!(e.field, "kind");
}

#[test]
fn spec_errors_name_the_narrowest_field() {
    let pool = |spec: &str| {
        format!("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n{spec}")
    };
    let cases = [
            (pool("  template:\n    spec:\n      requirements:\n        - {key: a, operator: In, values: [x]}\n        - {key: b, operator: In, value: [x]}\n"), "nodepool/p", "spec.template.spec.requirements[1].value", "unknown field \"value\" (did you mean \"values\"?)"),
            (pool("  disruption:\n    expireAfter: 720h\n"), "nodepool/p", "spec.disruption.expireAfter", "unknown field \"expireAfter\""),
            (pool("  disruption:\n    budgets:\n      - nodes: 10%\n        reason: [Empty]\n"), "nodepool/p", "spec.disruption.budgets[0].reason", "did you mean \"reasons\""),
            (pool("  weight: heavy\n"), "nodepool/p", "spec.weight", "expected a 32-bit integer, got \"heavy\""),
            (pool("  template:\n    spec:\n      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: c}\n"), "nodepool/p", "spec.template.spec.nodeClassRef.apiVersion", "unknown field \"apiVersion\""),
            ("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  subnetSelectorTerms:\n    - tags: {a: b}\n    - tag: {a: b}\n".to_owned(), "nodeclass/c", "spec.subnetSelectorTerms[1].tag", "did you mean \"tags\""),
            ("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  provider:\n    subnetSelectors: {a: b}\n".to_owned(), "provisioner/p", "spec.provider", "unknown field `subnetSelectors`"),
        ];
    for (text, item, field, reason) in cases {
        let e = parse_documents(&text).expect_err(&text);
        assert_eq!((e.item.as_str(), e.field.as_str()), (item, field), "{text}");
        assert!(e.reason.contains(reason), "{text}: {}", e.reason);
    }
}

#[test]
fn invalid_items_in_a_set() {
    let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  amiSelectorTerms: [{alias: al2023@latest}]\n  role: r\n  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n";
    let pool = |name: &str, tmpl: &str| {
        let reqs = if tmpl.contains("requirements") {
            ""
        } else {
            "      requirements: []\n"
        };
        format!(
            "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n{reqs}{tmpl}"
        )
    };
    let ref_c = "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}\n";
    let cases = [
        (
            format!(
                "{class}{}",
                pool(
                    "p",
                    "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}\n"
                )
            ),
            "nodepool/p",
            "spec.template.spec.nodeClassRef.name",
            "does not exist",
        ),
        (
            format!("{class}{}", pool("p", "      requirements: []\n")),
            "nodepool/p",
            "spec.template.spec.nodeClassRef",
            "required",
        ),
        (
            format!("{class}{}{}", pool("p", ref_c), pool("p", ref_c)),
            "nodepool/p",
            "metadata.name",
            "more than once",
        ),
        (
            format!("{class}---\n{class}{}", pool("p", ref_c)),
            "nodeclass/c",
            "metadata.name",
            "more than once",
        ),
        (
            format!(
                "{class}{}",
                pool(
                    "p",
                    &format!(
                        "{ref_c}      requirements:\n        - {{key: a, operator: In, values: [x]}}\n        - {{key: b, operator: Within, values: [x]}}\n"
                    )
                )
            ),
            "nodepool/p",
            "spec.template.spec.requirements[1].operator",
            "unknown operator",
        ),
        (
            format!(
                "{class}{}",
                pool("p", &format!("{ref_c}      expireAfter: 30d\n"))
            ),
            "nodepool/p",
            "spec.template.spec.expireAfter",
            "expected a duration",
        ),
        (
            format!(
                "{class}{}",
                pool(
                    "p",
                    &format!("{ref_c}      terminationGracePeriod: Never\n")
                )
            ),
            "nodepool/p",
            "spec.template.spec.terminationGracePeriod",
            "expected a duration",
        ),
        (
            format!(
                "{class}{}",
                pool(
                    "p",
                    "      nodeClassRef: {group: karpenter.k8s.aws, kind: AWSNodeTemplate, name: c}\n"
                )
            ),
            "nodepool/p",
            "spec.template.spec.nodeClassRef.kind",
            "unsupported kind",
        ),
        (
            class.replace("role: r", "role: r\n  instanceProfile: p") + &pool("p", ref_c),
            "nodeclass/c",
            "spec.instanceProfile",
            "not both",
        ),
    ];
    for (text, item, field, reason) in cases {
        let e = one_error(&text);
        assert_eq!((e.item.as_str(), e.field.as_str()), (item, field), "{text}");
        assert!(e.reason.contains(reason), "{text}: {}", e.reason);
    }
}

#[test]
fn all_errors_are_collected() {
    let text = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec: {weight: 500, template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: b}\nspec: {template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}}}}\n";
    let errors = ConfigSet::parse(text).expect_err("five errors");
    let got: Vec<(&str, &str)> = errors
        .iter()
        .map(|e| (e.item.as_str(), e.field.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("nodeclass/c", "spec.amiSelectorTerms"),
            ("nodeclass/c", "spec.subnetSelectorTerms"),
            ("nodeclass/c", "spec.securityGroupSelectorTerms"),
            ("nodepool/a", "spec.weight"),
            ("nodepool/b", "spec.template.spec.nodeClassRef.name"),
        ]
    );
}

/// The NodePool's rebalance-policy annotation is read like the Settings
/// field: `replace` (lower case) is refused naming the field, not taken
/// for the default `Ignore`.
#[test]
fn an_unreadable_rebalance_policy_annotation_is_refused_naming_it() {
    let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}\n---\n";
    let pool = |value: &str| {
        format!(
            "{class}apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p, annotations: {{nodewright.io/rebalance-policy: {value}}}}}\nspec: {{template: {{spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}, requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]}}}}}}\n"
        )
    };
    let e = one_error(&pool("replace"));
    assert_eq!(
        (e.item.as_str(), e.field.as_str()),
        (
            "nodepool/p",
            "metadata.annotations[nodewright.io/rebalance-policy]"
        )
    );
    assert!(e.reason.contains("\"replace\""), "{e}");
    for ok in ["Ignore", "Cordon", "Replace"] {
        let set = ConfigSet::parse(&pool(ok)).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        assert_eq!(set.node_pools[0].annotations[REBALANCE_ANNOTATION], ok);
    }
}

/// What nodewright does with Karpenter's nodes of a pool handed over
/// (`config import --adopt`): `none` or `replace`; anything else (a
/// typo would otherwise leave them alone silently) is refused naming it.
#[test]
fn an_unreadable_karpenter_nodes_annotation_is_refused_naming_it() {
    let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}\n---\n";
    let pool = |value: &str| {
        format!(
            "{class}apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p, annotations: {{nodewright.io/karpenter-nodes: {value}}}}}\nspec: {{template: {{spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}, requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]}}}}}}\n"
        )
    };
    let e = one_error(&pool("Replace"));
    assert_eq!(
        (e.item.as_str(), e.field.as_str()),
        (
            "nodepool/p",
            "metadata.annotations[nodewright.io/karpenter-nodes]"
        )
    );
    assert!(e.reason.contains("\"Replace\""), "{e}");
    for ok in ["none", "replace"] {
        let set = ConfigSet::parse(&pool(ok)).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        assert_eq!(
            crate::disruption::handover::karpenter_nodes(&set.node_pools[0]).as_str(),
            ok
        );
    }
}

mod never_panics {
    //! Random YAML/JSON into the importer and the validator: errors, never a panic.
    use super::*;
    use proptest::prelude::*;

    /// JSON values shaped like configuration: the keys the schema uses, and
    /// values of every type at every place.
    fn value() -> impl Strategy<Value = Value> {
        let keys = prop::sample::select(vec![
            "apiVersion",
            "kind",
            "metadata",
            "name",
            "spec",
            "template",
            "requirements",
            "key",
            "operator",
            "values",
            "minValues",
            "limits",
            "cpu",
            "memory",
            "disruption",
            "budgets",
            "nodes",
            "schedule",
            "duration",
            "consolidateAfter",
            "consolidationPolicy",
            "expireAfter",
            "nodeClassRef",
            "kubelet",
            "maxPods",
            "systemReserved",
            "evictionHard",
            "amiSelectorTerms",
            "alias",
            "subnetSelectorTerms",
            "tags",
            "id",
            "securityGroupSelectorTerms",
            "role",
            "provider",
            "subnetSelector",
            "ttlSecondsAfterEmpty",
            "weight",
            "taints",
            "effect",
            "items",
            "batchIdleDuration",
            "rebalancePolicy",
            "featureGates",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            prop::sample::select(vec![
                "karpenter.sh/v1",
                "karpenter.k8s.aws/v1",
                "karpenter.sh/v1beta1",
                "karpenter.sh/v1alpha5",
                "karpenter.k8s.aws/v1alpha1",
                "karpenter.k8s.aws/v1beta1",
                "nodewright.io/v1alpha1",
                "NodePool",
                "EC2NodeClass",
                "Provisioner",
                "AWSNodeTemplate",
                "Settings",
                "List",
                "In",
                "NotIn",
                "Gt",
                "Lt",
                "Exists",
                "1x",
                "8Gx",
                "-1",
                "100%",
                "0 0 * * *",
                "@daily",
                "10m",
                "Never",
                "default",
                "al2023@latest",
                "",
                "kubernetes.io/arch",
                "karpenter.sh/nodepool",
                "WhenEmpty",
                "*",
            ])
            .prop_map(Value::from),
            "[a-z0-9./%@* -]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(keys.clone(), inner, 0..6).prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    fn exercise(text: &str) {
        let (docs, _) = parse_all(text, true);
        let config: Vec<ConfigDocument> = docs
            .into_iter()
            .filter_map(|d| {
                if let Document::Config(c) = d {
                    Some(c)
                } else {
                    None
                }
            })
            .collect();
        let _ = ConfigSet::from_documents(&config);
        let items: Vec<ConfigItem> = config
            .iter()
            .map(|d| d.to_item(1, jiff::Timestamp::UNIX_EPOCH))
            .collect();
        let _ = resolve_items(&items);
        let _ = ConfigSet::parse(text);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn structured_documents(v in value()) {
            exercise(&v.to_string());
            exercise(&serde_norway::to_string(&v).unwrap_or_default());
        }

        #[test]
        fn arbitrary_text(text in "\\PC{0,200}") {
            exercise(&text);
        }

        #[test]
        fn stored_items_with_any_spec(spec in value(), kind in 0..3u8) {
            let kind = [ConfigKind::NodePool, ConfigKind::NodeClass, ConfigKind::Settings][kind as usize];
            let item = ConfigItem { kind, name: "x".into(), spec, annotations: BTreeMap::new(), version: 1, updated_at: jiff::Timestamp::UNIX_EPOCH };
            let r = resolve_items(&[item]);
            // Whatever it is, it is valid or reported, never both, never lost.
            prop_assert!(r.errors.len() + r.set.node_pools.len() + r.set.node_classes.len() + r.not_ready.len() >= usize::from(kind != ConfigKind::Settings));
        }

        #[test]
        fn near_valid_nodepools(reqs in prop::collection::vec(value(), 0..4), limits in value(), disruption in value()) {
            let doc = serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
                "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"},
                "requirements": reqs}}, "limits": limits, "disruption": disruption}});
            exercise(&doc.to_string());
        }
    }
}

/// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
/// Context "Undecodable Kubelet Configuration": a kubelet block that cannot
/// be read (clusterDNS a bare string, not a list) is refused, so no
/// instance type is ever computed from defaults the user never set (the
/// pool is left out, its NodeClass's error says why), and correcting it is
/// enough: nothing about the refusal is remembered.
mod undecodable_kubelet {
    use super::*;

    fn docs(kubelet: &str) -> Result<Resolved, ConfigError> {
        let text = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms:\n  - alias: al2023@latest\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  kubelet:\n    {kubelet}\n"
        );
        parse_documents(&text).map(|d| ConfigSet::resolve(&d))
    }

    #[test]
    fn an_unreadable_kubelet_block_is_refused_not_defaulted() {
        match docs("clusterDNS: 10.0.0.10") {
            Err(e) => assert!(e.field.contains("clusterDNS"), "{e:?}"),
            Ok(r) => {
                assert!(
                    r.set.node_pool("default").is_none(),
                    "no pool is resolved on a kubelet block that cannot be read"
                );
                assert!(
                    r.errors.iter().any(|e| e.field.contains("clusterDNS")),
                    "{:?}",
                    r.errors
                );
            }
        }
        // Corrected, the same documents resolve: the pool is back.
        let r = docs("clusterDNS: [10.0.0.10]").expect("parses");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let pool = r.set.node_pool("default").expect("pool");
        assert_eq!(
            pool.launch_kubelet.cluster_dns,
            vec!["10.0.0.10".to_owned()]
        );
    }
}

/// Karpenter's RESERVED_ENIS as the `Settings` item's `reservedENIs`: it
/// reaches every pool's allocatable math; a negative count is refused.
mod reserved_enis {
    use super::*;

    fn resolve(settings: &str) -> Resolved {
        let text = format!(
            "apiVersion: nodewright.io/v1alpha1\nkind: Settings\nmetadata: {{name: default}}\nspec: {settings}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms:\n  - alias: al2023@latest\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n"
        );
        ConfigSet::resolve(&parse_documents(&text).expect("documents"))
    }

    #[test]
    fn reserved_enis_reach_the_pools_and_a_negative_count_is_refused() {
        let r = resolve("{reservedENIs: 1}");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.set.settings.reserved_enis, 1);
        assert_eq!(
            r.set
                .node_pool("default")
                .expect("pool")
                .kubelet
                .reserved_enis,
            1
        );
        let r = resolve("{}");
        assert_eq!(
            r.set
                .node_pool("default")
                .expect("pool")
                .kubelet
                .reserved_enis,
            0
        );
        let r = resolve("{reservedENIs: -1}");
        assert!(
            r.errors.iter().any(|e| e.field == "spec.reservedENIs"),
            "{:?}",
            r.errors
        );
    }
}
