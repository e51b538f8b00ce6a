//! AMI resolution: the SSM public parameter of an EKS-optimized image
//! (family × Kubernetes version × architecture × accelerator, or a pinned
//! version), or the class's own `id` / `ssmParameter` terms checked with
//! DescribeImages for the architecture; cached per [`AmiKey`].

use std::time::Instant;

use super::LaunchCache;
use crate::aws::ApiError;
use crate::aws::ec2::Ec2Cloud;
use crate::aws::nodeclass::family_runs_kubernetes;
use crate::aws::prices::PriceSource;
use crate::cloud::InstanceTypeInfo;
use crate::config::nodeclass::AmiSelector;
use crate::config::{AmiFamily, NodeClass};
use crate::ports::CloudError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Accelerator {
    None,
    Nvidia,
    Neuron,
}

impl Accelerator {
    pub(super) fn of(info: &InstanceTypeInfo) -> Accelerator {
        if info.gpu_count == 0 {
            return Accelerator::None;
        }
        match info.gpu_manufacturer.as_deref() {
            Some("NVIDIA") => Accelerator::Nvidia,
            Some("AWS") => Accelerator::Neuron,
            _ => Accelerator::None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct AmiKey {
    pub(super) class: String,
    pub(super) family: AmiFamily,
    pub(super) version: Option<String>,
    pub(super) k8s: String,
    pub(super) arch: String,
    pub(super) accelerator: Accelerator,
}

/// The SSM parameter that names the AMI of a family, version, arch and
/// accelerator; none for the families the launch path does not support.
pub(super) fn ami_parameter(
    family: AmiFamily,
    pinned: Option<&str>,
    k8s: &str,
    arch: &str,
    acc: Accelerator,
) -> Option<String> {
    let ec2_arch = if arch == "arm64" { "arm64" } else { "x86_64" };
    let path = match family {
        AmiFamily::AL2023 => {
            let variant = match acc {
                Accelerator::None => "standard",
                Accelerator::Nvidia => "nvidia",
                Accelerator::Neuron => "neuron",
            };
            let base = format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{ec2_arch}/{variant}"
            );
            match pinned {
                None => format!("{base}/recommended/image_id"),
                Some(v) => {
                    format!("{base}/amazon-eks-node-al2023-{ec2_arch}-{variant}-{k8s}-{v}/image_id")
                }
            }
        }
        AmiFamily::AL2 => {
            let (suffix, name) = match (ec2_arch, acc) {
                ("arm64", _) => ("amazon-linux-2-arm64", "arm64-node"),
                (_, Accelerator::None) => ("amazon-linux-2", "node"),
                _ => ("amazon-linux-2-gpu", "gpu-node"),
            };
            let base = format!("/aws/service/eks/optimized-ami/{k8s}/{suffix}");
            match pinned {
                None => format!("{base}/recommended/image_id"),
                Some(v) => format!("{base}/amazon-eks-{name}-{k8s}-{v}/image_id"),
            }
        }
        AmiFamily::Bottlerocket => {
            let flavour = if acc == Accelerator::Nvidia {
                format!("aws-k8s-{k8s}-nvidia")
            } else {
                format!("aws-k8s-{k8s}")
            };
            let version = pinned.map_or_else(
                || "latest".to_owned(),
                |v| v.trim_start_matches('v').to_owned(),
            );
            format!("/aws/service/bottlerocket/{flavour}/{ec2_arch}/{version}/image_id")
        }
        // Windows Server Core, amd64 only, one image per Kubernetes version.
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            let version = family.windows_version()?;
            if ec2_arch != "x86_64" {
                return None;
            }
            format!(
                "/aws/service/ami-windows-latest/Windows_Server-{version}-English-Core-EKS_Optimized-{k8s}/image_id"
            )
        }
        AmiFamily::Custom => return None,
    };
    Some(path)
}

impl<P: PriceSource> Ec2Cloud<P> {
    pub(super) async fn ami(
        &self,
        cache: &mut LaunchCache,
        key: &AmiKey,
        class: &NodeClass,
    ) -> Result<String, CloudError> {
        if let Some((at, id)) = cache.amis.get(key)
            && at.elapsed() < self.settings.refresh.images
        {
            return Ok(id.clone());
        }
        let terms = &class.ami_selector_terms;
        if terms.iter().any(|t| matches!(t, AmiSelector::Query { .. })) {
            return Err(CloudError::invalid(
                "amiSelectorTerms",
                "by name or tags are not supported yet; use alias, id or ssmParameter",
            ));
        }
        let explicit: Vec<&str> = terms
            .iter()
            .filter_map(|t| match t {
                AmiSelector::Id(id) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        let ssm_terms: Vec<&str> = terms
            .iter()
            .filter_map(|t| match t {
                AmiSelector::SsmParameter(p) => Some(p.as_str()),
                _ => None,
            })
            .collect();
        let id = if explicit.is_empty() && ssm_terms.is_empty() {
            // Custom with an alias: the alias's EKS AMI, with the class's
            // own user data.
            let family = match key.family {
                AmiFamily::Custom => terms
                    .iter()
                    .find_map(|t| match t {
                        AmiSelector::Alias { family, .. } => Some(*family),
                        _ => None,
                    })
                    .unwrap_or(AmiFamily::Custom),
                f => f,
            };
            family_runs_kubernetes(family, &key.k8s)
                .map_err(|e| CloudError::invalid(e.field, e.reason))?;
            let path = ami_parameter(
                family,
                key.version.as_deref(),
                &key.k8s,
                &key.arch,
                key.accelerator,
            )
            .ok_or_else(|| {
                CloudError::invalid(
                    format!("amiFamily {family}"),
                    format!("no EKS-optimized AMI parameter on {}", key.arch),
                )
            })?;
            self.ssm_value(&path).await.map_err(|e| {
                if e.is_retryable() {
                    e
                } else {
                    e.context(&format!(
                        "no {} AMI for Kubernetes {} on {}",
                        key.family.as_str(),
                        key.k8s,
                        key.arch
                    ))
                }
            })?
        } else {
            let mut candidates: Vec<String> = explicit.iter().map(|s| (*s).to_owned()).collect();
            for p in ssm_terms {
                candidates.push(self.ssm_value(p).await?);
            }
            self.count();
            let images = self
                .ec2
                .describe_images()
                .set_image_ids(Some(candidates.clone()))
                .send()
                .await
                .map_err(|e| CloudError::from(ApiError::from_sdk("DescribeImages", e)))?;
            let want = if key.arch == "arm64" {
                "arm64"
            } else {
                "x86_64"
            };
            images
                .images()
                .iter()
                .find(|i| i.architecture().map(|a| a.as_str()) == Some(want))
                .and_then(|i| i.image_id())
                .map(str::to_owned)
                .ok_or_else(|| {
                    CloudError::invalid(
                        format!("amiSelectorTerms {candidates:?}"),
                        format!("no {want} image"),
                    )
                })?
        };
        cache.amis.insert(key.clone(), (Instant::now(), id.clone()));
        Ok(id)
    }

    async fn ssm_value(&self, name: &str) -> Result<String, CloudError> {
        self.count();
        match self.ssm.get_parameter().name(name).send().await {
            Ok(out) => out
                .parameter()
                .and_then(|p| p.value())
                .map(str::to_owned)
                .ok_or_else(|| CloudError::invalid(format!("SSM parameter {name}"), "no value")),
            Err(e) => {
                let e = ApiError::from_sdk("GetParameter", e);
                if e.is("ParameterNotFound") {
                    Err(CloudError::invalid(
                        format!("SSM parameter {name}"),
                        "does not exist",
                    ))
                } else {
                    Err(e.into())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ami_parameters_per_family() {
        assert_eq!(
            ami_parameter(AmiFamily::AL2023, None, "1.32", "arm64", Accelerator::None).as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/recommended/image_id"
            )
        );
        assert_eq!(
            ami_parameter(
                AmiFamily::AL2023,
                None,
                "1.32",
                "amd64",
                Accelerator::Nvidia
            )
            .as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
            )
        );
        assert_eq!(
            ami_parameter(AmiFamily::AL2, None, "1.29", "amd64", Accelerator::Nvidia).as_deref(),
            Some("/aws/service/eks/optimized-ami/1.29/amazon-linux-2-gpu/recommended/image_id")
        );
        assert_eq!(
            ami_parameter(
                AmiFamily::AL2,
                Some("v20240807"),
                "1.29",
                "arm64",
                Accelerator::None
            )
            .as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/amazon-eks-arm64-node-1.29-v20240807/image_id"
            )
        );
        assert_eq!(
            ami_parameter(
                AmiFamily::Bottlerocket,
                None,
                "1.34",
                "amd64",
                Accelerator::Nvidia
            )
            .as_deref(),
            Some("/aws/service/bottlerocket/aws-k8s-1.34-nvidia/x86_64/latest/image_id")
        );
        assert_eq!(
            ami_parameter(
                AmiFamily::Bottlerocket,
                Some("v1.20.3"),
                "1.30",
                "arm64",
                Accelerator::None
            )
            .as_deref(),
            Some("/aws/service/bottlerocket/aws-k8s-1.30/arm64/1.20.3/image_id")
        );
        // Windows: Server Core, the same image whatever the accelerator;
        // none on arm64.
        for (family, version) in [
            (AmiFamily::Windows2019, "2019"),
            (AmiFamily::Windows2022, "2022"),
            (AmiFamily::Windows2025, "2025"),
        ] {
            for acc in [Accelerator::None, Accelerator::Nvidia] {
                assert_eq!(
                    ami_parameter(family, None, "1.35", "amd64", acc),
                    Some(format!(
                        "/aws/service/ami-windows-latest/Windows_Server-{version}-English-Core-EKS_Optimized-1.35/image_id"
                    ))
                );
            }
            assert_eq!(
                ami_parameter(family, None, "1.35", "arm64", Accelerator::None),
                None
            );
        }
    }
}
