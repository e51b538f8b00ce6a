//! The cluster facts a node's user data needs (endpoint, CA, service CIDR,
//! Kubernetes version): from the settings when given, else from
//! `eks:DescribeCluster`, cached for [`Refresh::images`](crate::aws::ec2::Refresh::images).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::LaunchCache;
use crate::aws::ApiError;
use crate::aws::ec2::Ec2Cloud;
use crate::aws::prices::PriceSource;
use crate::ports::CloudError;

/// The cluster facts the user data needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub endpoint: String,
    /// Base64 of the CA bundle, as EKS returns it.
    pub ca_base64: String,
    pub service_cidr: String,
    /// Kubernetes `major.minor`.
    pub version: String,
}

impl<P: PriceSource> Ec2Cloud<P> {
    pub(super) async fn cluster(&self, cache: &mut LaunchCache) -> Result<ClusterInfo, CloudError> {
        if let Some(c) = &self.settings.cluster {
            return Ok(c.clone());
        }
        if let Some((at, c)) = &cache.cluster
            && at.elapsed() < self.settings.refresh.images
        {
            return Ok(c.clone());
        }
        self.count();
        let name = &self.settings.cluster_name;
        let out = match self.eks.describe_cluster().name(name).send().await {
            Ok(out) => out,
            Err(e) => {
                let e = ApiError::from_sdk("DescribeCluster", e);
                if e.is("ResourceNotFoundException") {
                    return Err(CloudError::invalid(
                        format!("EKS cluster {name:?}"),
                        format!("does not exist in {}", self.region),
                    ));
                }
                return Err(e.into());
            }
        };
        let c = out.cluster().ok_or_else(|| {
            CloudError::invalid(format!("DescribeCluster {name}"), "no cluster in the reply")
        })?;
        let endpoint = c.endpoint().filter(|e| !e.is_empty()).ok_or_else(|| {
            CloudError::transient(
                format!("DescribeCluster {name}"),
                format!("the cluster has no endpoint yet (status {:?})", c.status()),
            )
        })?;
        let net = c.kubernetes_network_config();
        let service_cidr = net
            .and_then(|n| n.service_ipv4_cidr().or(n.service_ipv6_cidr()))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                warn!(cluster = %name, "the cluster reports no service CIDR; assuming 10.100.0.0/16");
                "10.100.0.0/16".to_owned()
            });
        let info = ClusterInfo {
            endpoint: endpoint.to_owned(),
            ca_base64: c
                .certificate_authority()
                .and_then(|a| a.data())
                .unwrap_or_default()
                .to_owned(),
            service_cidr,
            version: c.version().unwrap_or_default().to_owned(),
        };
        cache.cluster = Some((Instant::now(), info.clone()));
        Ok(info)
    }
}
