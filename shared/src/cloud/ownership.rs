//! Which cloud resources are ours: the tags every instance, volume, fleet
//! and launch template we create carries, and the one test every listing,
//! garbage collection, termination and IAM condition applies. Pure.
//!
//! **Ownership is `nodewright.io/cluster=<cluster>` and nothing else.** An
//! EKS account holds instances of managed node groups (which carry
//! `kubernetes.io/cluster/<cluster>=owned` too), of a Karpenter installed
//! beside us (during every migration), and of other clusters; none of them
//! carries our key with our cluster's name, so none is listed, collected or
//! terminated.
//!
//! **We never wear Karpenter's ownership set.** Karpenter's instance
//! listing (aws provider `pkg/providers/instance/instance.go`, `List`)
//! selects instances with a `karpenter.sh/nodepool` tag key, a
//! `karpenter.k8s.aws/ec2nodeclass` tag key and
//! `eks:eks-cluster-name=<cluster>`; its garbage collector terminates every
//! one of those without a NodeClaim. Its launch-template provider
//! (`pkg/providers/launchtemplate/launchtemplate.go`) loads every template
//! tagged `eks:eks-cluster-name=<cluster>` into its cache and deletes them
//! as they expire, and deletes those also tagged
//! `karpenter.k8s.aws/ec2nodeclass=<name>` when that EC2NodeClass goes. So
//! none of [`KARPENTER_OWNERSHIP_KEYS`] is ever on anything we create
//! ([`resource_tags`] drops them even when a NodeClass's own tags name
//! them), and Karpenter's garbage collector never sees our instances, nor
//! ours its.

use std::collections::BTreeMap;

/// `nodewright.io/cluster`: the ownership tag, valued with the cluster's name.
pub const CLUSTER: &str = "nodewright.io/cluster";
/// `nodewright.io/nodepool`: the NodePool an instance was launched for.
pub const NODEPOOL: &str = "nodewright.io/nodepool";
/// `nodewright.io/nodeclaim`: the claim an instance was launched for (how a
/// retried launch finds the instance an earlier attempt made, and how an
/// instance is adopted when its claim is lost).
pub const NODECLAIM: &str = "nodewright.io/nodeclaim";
/// `nodewright.io/nodeclass`: the NodeClass an instance or template is of.
pub const NODECLASS: &str = "nodewright.io/nodeclass";
/// `nodewright.io/image`: the AMI a launch template boots, so template
/// clean-up can tell one its NodeClass no longer resolves to.
pub const IMAGE: &str = "nodewright.io/image";
/// `Name`: the claim id, what the EC2 console shows.
pub const NAME: &str = "Name";
/// `kubernetes.io/cluster/<cluster>` valued `owned`: cluster membership the
/// AWS cloud provider and load balancer controller read. Managed node
/// groups carry it too, so it is **not** ownership.
pub fn kubernetes_cluster(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}
/// The value of [`kubernetes_cluster`].
pub const OWNED: &str = "owned";

/// The tag keys Karpenter's instance listing and launch-template cleanup
/// select on (with `karpenter.sh/nodeclaim`, which it writes beside them):
/// never on anything we create.
pub const KARPENTER_OWNERSHIP_KEYS: [&str; 4] = [
    "karpenter.sh/nodepool",
    "karpenter.k8s.aws/ec2nodeclass",
    "eks:eks-cluster-name",
    "karpenter.sh/nodeclaim",
];

/// The tags on what one launch creates (instance, volumes, fleet and its
/// launch templates): the NodeClass's own tags, then ours (ours win), never
/// a key of [`KARPENTER_OWNERSHIP_KEYS`]. `claim` is `None` for launch
/// templates, which serve many claims.
pub fn resource_tags(
    cluster: &str,
    class_tags: &BTreeMap<String, String>,
    pool: &str,
    class: &str,
    claim: Option<&str>,
) -> BTreeMap<String, String> {
    let mut t: BTreeMap<String, String> = class_tags
        .iter()
        .filter(|(k, _)| !KARPENTER_OWNERSHIP_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    t.insert(kubernetes_cluster(cluster), OWNED.to_owned());
    t.insert(CLUSTER.to_owned(), cluster.to_owned());
    t.insert(NODEPOOL.to_owned(), pool.to_owned());
    t.insert(NODECLASS.to_owned(), class.to_owned());
    if let Some(claim) = claim {
        t.insert(NODECLAIM.to_owned(), claim.to_owned());
        t.insert(NAME.to_owned(), claim.to_owned());
    }
    t
}

/// Whether a resource with these tags is ours (this cluster's nodewright):
/// `nodewright.io/cluster` equals the cluster's name.
pub fn is_ours(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tags.get(CLUSTER).is_some_and(|v| v == cluster)
}

/// Whether Karpenter's instance listing for `cluster` would select an
/// instance with these tags (both tag keys present and the EKS cluster name
/// equal): what its garbage collector terminates when no NodeClaim has it.
pub fn karpenter_lists(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tags.contains_key("karpenter.sh/nodepool")
        && tags.contains_key("karpenter.k8s.aws/ec2nodeclass")
        && tags
            .get("eks:eks-cluster-name")
            .is_some_and(|v| v == cluster)
}

/// Whether Karpenter's launch-template cache for `cluster` would load (and
/// later delete) a template with these tags.
pub fn karpenter_loads_template(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tags.get("eks:eks-cluster-name")
        .is_some_and(|v| v == cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn our_tags_are_ours_and_never_karpenters() {
        // A NodeClass copied from a Karpenter install may carry any tag; the
        // validation refuses Karpenter's keys, and the launch drops them anyway.
        let class = map(&[
            ("team", "a"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", "prod"),
            (CLUSTER, "someone-else"),
        ]);
        let t = resource_tags("prod", &class, "default", "default", Some("default-abcde"));
        assert!(is_ours(&t, "prod"));
        assert!(!is_ours(&t, "staging"));
        assert!(!karpenter_lists(&t, "prod"));
        assert!(!karpenter_loads_template(&t, "prod"));
        for k in KARPENTER_OWNERSHIP_KEYS {
            assert!(!t.contains_key(k), "{k} must not be written");
        }
        assert_eq!(t.get("team").map(String::as_str), Some("a"));
        assert_eq!(t.get(NODECLAIM).map(String::as_str), Some("default-abcde"));
        assert_eq!(
            t.get("kubernetes.io/cluster/prod").map(String::as_str),
            Some("owned")
        );
        let template = resource_tags("prod", &class, "default", "default", None);
        assert!(!template.contains_key(NODECLAIM) && !template.contains_key(NAME));
        assert!(is_ours(&template, "prod"));
    }

    #[test]
    fn neighbours_are_not_ours() {
        // A managed node group's instance: the cluster tag `owned`, EKS's own tags.
        let node_group = map(&[
            ("kubernetes.io/cluster/prod", "owned"),
            ("eks:cluster-name", "prod"),
            ("eks:nodegroup-name", "system"),
        ]);
        // Karpenter's: exactly its listing set.
        let karpenter = map(&[
            ("kubernetes.io/cluster/prod", "owned"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", "prod"),
            ("karpenter.sh/nodeclaim", "default-x1y2z"),
        ]);
        // Our own instances of another cluster.
        let other = resource_tags("staging", &BTreeMap::new(), "default", "default", Some("c"));
        for t in [&node_group, &karpenter, &other] {
            assert!(!is_ours(t, "prod"), "{t:?}");
        }
        assert!(karpenter_lists(&karpenter, "prod"));
    }
}
