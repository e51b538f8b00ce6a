//! Subnets and security groups: a NodeClass's selector terms as Describe*
//! filters (tag value `*` = the key exists), the roomiest subnet per zone
//! for a launch, every matching subnet for drift, and an `Invalid` error
//! naming the terms when nothing matches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::types::Filter;
use tracing::debug;

use super::LaunchCache;
use crate::aws::ApiError;
use crate::aws::ec2::Ec2Cloud;
use crate::aws::prices::PriceSource;
use crate::config::NodeClass;
use crate::config::nodeclass::{ANY_TAG_VALUE, SelectorTerm};
use crate::ports::CloudError;

/// Subnets and security groups of one NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Network {
    /// Zone → the subnet with the most free addresses there.
    pub subnets: BTreeMap<String, String>,
    pub security_groups: Vec<String>,
}

/// The Describe* filters that select what a term matches in `cluster`.
fn selector_filters(term: &SelectorTerm, id_filter: &str, cluster: &str) -> Vec<Filter> {
    match term {
        SelectorTerm::ClusterTag => {
            selector_filters(&term.for_cluster(cluster), id_filter, cluster)
        }
        SelectorTerm::Id(id) => vec![Filter::builder().name(id_filter).values(id).build()],
        SelectorTerm::Name(name) => vec![Filter::builder().name("group-name").values(name).build()],
        SelectorTerm::Tags(tags) => tags
            .iter()
            .map(|(k, v)| {
                if v == ANY_TAG_VALUE {
                    Filter::builder().name("tag-key").values(k).build()
                } else {
                    Filter::builder().name(format!("tag:{k}")).values(v).build()
                }
            })
            .collect(),
    }
}

fn terms_text(terms: &[SelectorTerm]) -> String {
    terms
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

impl<P: PriceSource> Ec2Cloud<P> {
    pub(super) async fn network(
        &self,
        cache: &mut LaunchCache,
        class_name: &str,
        class: &NodeClass,
    ) -> Result<Arc<Network>, CloudError> {
        if let Some((at, n)) = cache.networks.get(class_name)
            && at.elapsed() < self.settings.refresh.network
        {
            return Ok(n.clone());
        }
        let subnets = self
            .subnets(class_name, &class.subnet_selector_terms)
            .await?;
        let security_groups = self
            .security_groups(class_name, &class.security_group_selector_terms)
            .await?;
        let network = Arc::new(Network {
            subnets,
            security_groups,
        });
        cache
            .networks
            .insert(class_name.to_owned(), (Instant::now(), network.clone()));
        Ok(network)
    }

    pub(super) async fn subnets(
        &self,
        class_name: &str,
        terms: &[SelectorTerm],
    ) -> Result<BTreeMap<String, String>, CloudError> {
        if terms.is_empty() {
            return Err(CloudError::invalid(
                format!("nodeclass {class_name}"),
                "subnetSelectorTerms is empty",
            ));
        }
        // zone → (free addresses, subnet id)
        let mut best: BTreeMap<String, (i32, String)> = BTreeMap::new();
        for s in self.describe_subnets(terms).await? {
            let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                continue;
            };
            let free = s.available_ip_address_count().unwrap_or(0);
            let better = best
                .get(zone)
                .is_none_or(|(f, cur)| free > *f || (free == *f && id < cur.as_str()));
            if better {
                best.insert(zone.to_owned(), (free, id.to_owned()));
            }
        }
        if best.is_empty() {
            return Err(CloudError::invalid(
                format!("nodeclass {class_name}"),
                format!("subnetSelectorTerms {} match no subnet", terms_text(terms)),
            ));
        }
        Ok(best.into_iter().map(|(zone, (_, id))| (zone, id)).collect())
    }

    pub(super) async fn security_groups(
        &self,
        class_name: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<String>, CloudError> {
        if terms.is_empty() {
            return Err(CloudError::invalid(
                format!("nodeclass {class_name}"),
                "securityGroupSelectorTerms is empty",
            ));
        }
        let mut ids = BTreeSet::new();
        for term in terms {
            let mut pages = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(selector_filters(
                    term,
                    "group-id",
                    &self.settings.cluster_name,
                )))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                self.count();
                let page = page.map_err(|e| {
                    CloudError::from(ApiError::from_sdk("DescribeSecurityGroups", e))
                })?;
                ids.extend(
                    page.security_groups()
                        .iter()
                        .filter_map(|g| g.group_id().map(str::to_owned)),
                );
            }
        }
        if ids.is_empty() {
            return Err(CloudError::invalid(
                format!("nodeclass {class_name}"),
                format!(
                    "securityGroupSelectorTerms {} match no security group",
                    terms_text(terms)
                ),
            ));
        }
        Ok(ids.into_iter().collect())
    }

    /// Every subnet the terms match (not only the roomiest per zone, as a launch picks).
    pub(super) async fn matching_subnets(
        &self,
        class_name: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<String>, CloudError> {
        let ids: BTreeSet<String> = self
            .describe_subnets(terms)
            .await?
            .iter()
            .filter_map(|s| s.subnet_id().map(str::to_owned))
            .collect();
        debug!(nodeclass = %class_name, subnets = ids.len(), "resolved the class's subnets");
        Ok(ids.into_iter().collect())
    }
    /// Every subnet any of `terms` selects, one paginated DescribeSubnets
    /// per term (a subnet two terms select comes twice).
    async fn describe_subnets(
        &self,
        terms: &[SelectorTerm],
    ) -> Result<Vec<aws_sdk_ec2::types::Subnet>, CloudError> {
        let mut subnets = Vec::new();
        for term in terms {
            let mut pages = self
                .ec2
                .describe_subnets()
                .set_filters(Some(selector_filters(
                    term,
                    "subnet-id",
                    &self.settings.cluster_name,
                )))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                self.count();
                let page =
                    page.map_err(|e| CloudError::from(ApiError::from_sdk("DescribeSubnets", e)))?;
                subnets.extend(page.subnets().iter().cloned());
            }
        }
        Ok(subnets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_terms_become_filters() {
        let names = |term: &SelectorTerm| -> Vec<String> {
            selector_filters(term, "group-id", "demo")
                .iter()
                .filter_map(|f| f.name().map(str::to_owned))
                .collect()
        };
        let tags = SelectorTerm::Tags(
            [
                ("a".to_owned(), "*".to_owned()),
                ("b".to_owned(), "x".to_owned()),
            ]
            .into(),
        );
        assert_eq!(names(&tags), ["tag-key", "tag:b"]);
        assert_eq!(names(&SelectorTerm::Name("nodes".into())), ["group-name"]);
        assert_eq!(names(&SelectorTerm::Id("sg-1".into())), ["group-id"]);
    }
}
