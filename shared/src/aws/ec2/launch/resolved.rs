//! What a NodeClass resolves to now (its AMIs for every architecture and
//! accelerator, every subnet and security group its terms match), for
//! drift; cached for [`Refresh::network`](crate::aws::ec2::Refresh::network).

use std::collections::BTreeSet;
use std::time::Instant;

use super::ami::{Accelerator, AmiKey};
use crate::aws::ec2::Ec2Cloud;
use crate::aws::nodeclass::launch_family;
use crate::aws::prices::PriceSource;
use crate::config::NodeClass;
use crate::ports::CloudError;

impl<P: PriceSource> Ec2Cloud<P> {
    /// See `Cloud::resolved_class` on `Ec2Cloud`.
    pub(in crate::aws::ec2) async fn resolve_class(
        &self,
        class: &NodeClass,
    ) -> Result<crate::model::ResolvedClass, CloudError> {
        let mut cache = self.launch.lock().await;
        if let Some((at, r)) = cache.resolved.get(&class.name)
            && at.elapsed() < self.settings.refresh.network
        {
            return Ok(r.clone());
        }
        let mut image_ids = BTreeSet::new();
        if let Ok((family, pinned)) = launch_family(class) {
            let cluster = self.cluster(&mut cache).await?;
            let k8s = self
                .settings
                .kubernetes_version
                .clone()
                .unwrap_or_else(|| cluster.version.clone());
            for arch in ["amd64", "arm64"] {
                for accelerator in [Accelerator::None, Accelerator::Nvidia, Accelerator::Neuron] {
                    let key = AmiKey {
                        class: class.name.clone(),
                        family,
                        version: pinned.clone(),
                        k8s: k8s.clone(),
                        arch: arch.to_owned(),
                        accelerator,
                    };
                    match self.ami(&mut cache, &key, class).await {
                        Ok(id) => {
                            image_ids.insert(id);
                        }
                        // No such image for this architecture or accelerator (or terms we cannot resolve).
                        Err(e) if !e.is_retryable() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        let subnet_ids = self
            .matching_subnets(&class.name, &class.subnet_selector_terms)
            .await?;
        let security_group_ids = self
            .security_groups(&class.name, &class.security_group_selector_terms)
            .await?;
        let resolved = crate::model::ResolvedClass {
            image_ids: image_ids.into_iter().collect(),
            subnet_ids,
            security_group_ids,
        };
        cache
            .resolved
            .insert(class.name.clone(), (Instant::now(), resolved.clone()));
        Ok(resolved)
    }
}
