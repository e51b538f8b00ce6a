//! Launch templates: the content of one ([`TemplateSpec`], named
//! `nodewright/<hash of its content>`), the tags on what a launch creates,
//! creating the missing ones, and listing and deleting ours (by the
//! ownership tag, checked again on every answer).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{
    CapacityReservationTarget, ConnectionTrackingSpecificationRequest, Filter,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplatesMonitoringRequest, MarketType, RequestLaunchTemplateData, ResourceType, Tag,
    TagSpecification, Tenancy, VolumeType,
};
use base64::Engine as _;
use serde::Serialize;
use sha2::Digest as _;
use tracing::{info, warn};

use super::LaunchCache;
use super::network::Network;
use crate::aws::ApiError;
use crate::aws::ec2::{Ec2Cloud, tags};
use crate::aws::nodeclass::{LaunchSettings, instance_profile_name};
use crate::aws::prices::PriceSource;
use crate::config::NodeClass;
use crate::ports::CloudError;

/// Everything a launch template holds; its hash is the template's name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct TemplateSpec {
    cluster: String,
    node_class: String,
    image_id: String,
    user_data: String,
    security_groups: Vec<String>,
    instance_profile: Option<String>,
    /// Volumes, metadata options, monitoring, interfaces, placement.
    settings: LaunchSettings,
    tags: BTreeMap<String, String>,
}

impl TemplateSpec {
    pub(super) fn name(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let digest = sha2::Sha256::digest(&json);
        let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
        format!("nodewright/{hex}")
    }
}

pub(super) fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

impl<P: PriceSource> Ec2Cloud<P> {
    /// The tags on everything a launch creates (templates without a claim;
    /// instance, volumes and fleet with it): the NodeClass's own, then ours
    /// ([`tags::resource_tags`]: ownership, never Karpenter's keys).
    pub(super) fn owned_tags(
        &self,
        class_name: &str,
        class: &NodeClass,
        pool: &str,
        claim: Option<&str>,
    ) -> BTreeMap<String, String> {
        tags::resource_tags(
            &self.settings.cluster_name,
            &class.tags,
            pool,
            class_name,
            claim,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn template_spec(
        &self,
        class_name: &str,
        class: &NodeClass,
        settings: LaunchSettings,
        pool: &str,
        image_id: String,
        user_data: String,
        network: &Network,
    ) -> TemplateSpec {
        let mut t = self.owned_tags(class_name, class, pool, None);
        t.insert(tags::IMAGE.to_owned(), image_id.clone());
        TemplateSpec {
            cluster: self.settings.cluster_name.clone(),
            node_class: class_name.to_owned(),
            image_id,
            user_data,
            security_groups: network.security_groups.clone(),
            instance_profile: instance_profile_name(
                class,
                self.settings.default_instance_profile.as_deref(),
            )
            .map(str::to_owned),
            settings,
            tags: t,
        }
    }

    /// Creates the templates not known to exist; reuses the rest.
    pub(super) async fn ensure_templates(
        &self,
        cache: &mut LaunchCache,
        specs: Vec<(String, TemplateSpec)>,
    ) -> Result<(), CloudError> {
        let missing: BTreeSet<&String> = specs
            .iter()
            .map(|(n, _)| n)
            .filter(|n| !cache.templates.contains(*n))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.count();
        let existing = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name("launch-template-name")
                    .set_values(Some(missing.iter().map(|s| (*s).clone()).collect()))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| CloudError::from(ApiError::from_sdk("DescribeLaunchTemplates", e)))?;
        for t in existing.launch_templates() {
            if let Some(n) = t.launch_template_name() {
                cache.templates.insert(n.to_owned());
            }
        }
        for (name, spec) in &specs {
            if cache.templates.contains(name) {
                continue;
            }
            self.create_template(name, spec).await?;
            cache.templates.insert(name.clone());
        }
        Ok(())
    }

    /// Our launch templates: those tagged `nodewright.io/cluster=<cluster>`
    /// (the filter), checked again on the answer.
    pub(in crate::aws::ec2) async fn list_templates(
        &self,
        id: Option<&str>,
    ) -> Result<Vec<crate::model::LaunchTemplate>, CloudError> {
        let mut req = self.ec2.describe_launch_templates().filters(
            Filter::builder()
                .name(format!("tag:{}", tags::CLUSTER))
                .values(&self.settings.cluster_name)
                .build(),
        );
        if let Some(id) = id {
            req = req.launch_template_ids(id);
        } else {
            req = req.max_results(200);
        }
        let mut pages = req.into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            self.count();
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    let e = ApiError::from_sdk("DescribeLaunchTemplates", e);
                    if id.is_some()
                        && (e.is("InvalidLaunchTemplateId.NotFound")
                            || e.is("InvalidLaunchTemplateName.NotFoundException"))
                    {
                        return Ok(Vec::new());
                    }
                    return Err(e.into());
                }
            };
            for t in page.launch_templates() {
                let tag = |k: &str| {
                    t.tags()
                        .iter()
                        .find(|x| x.key() == Some(k))
                        .and_then(|x| x.value())
                        .map(str::to_owned)
                };
                let (Some(id), Some(name)) = (t.launch_template_id(), t.launch_template_name())
                else {
                    continue;
                };
                if tag(tags::CLUSTER).as_deref() != Some(self.settings.cluster_name.as_str()) {
                    warn!(launch_template = %name, "DescribeLaunchTemplates returned a template without our ownership tag; leaving it alone");
                    continue;
                }
                let Some(created_at) = t.create_time().and_then(|c| {
                    crate::model::Timestamp::new(
                        c.secs(),
                        i32::try_from(c.subsec_nanos()).unwrap_or(0),
                    )
                    .ok()
                }) else {
                    warn!(launch_template = %name, "launch template without a creation time; leaving it alone");
                    continue;
                };
                out.push(crate::model::LaunchTemplate {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    created_at,
                    node_class: tag(tags::NODECLASS),
                    pool: tag(tags::NODEPOOL),
                    image_id: tag(tags::IMAGE),
                });
            }
        }
        Ok(out)
    }

    /// Deletes one of our templates by id, after checking it still carries
    /// our ownership tag; `Ok(false)` when it is gone or not ours.
    pub(in crate::aws::ec2) async fn delete_template(
        &self,
        template: &crate::model::LaunchTemplate,
    ) -> Result<bool, CloudError> {
        let found = self.list_templates(Some(&template.id)).await?;
        if !found.iter().any(|t| t.id == template.id) {
            info!(launch_template = %template.name, id = %template.id, "not deleting a launch template that is gone or not ours");
            return Ok(false);
        }
        self.launch.lock().await.templates.remove(&template.name);
        self.count();
        match self
            .ec2
            .delete_launch_template()
            .launch_template_id(&template.id)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) => {
                let e = ApiError::from_sdk("DeleteLaunchTemplate", e);
                if e.is("InvalidLaunchTemplateId.NotFound")
                    || e.is("InvalidLaunchTemplateName.NotFoundException")
                {
                    Ok(false)
                } else {
                    Err(e.into())
                }
            }
        }
    }

    async fn create_template(&self, name: &str, spec: &TemplateSpec) -> Result<(), CloudError> {
        let data = template_data(spec);
        let tag_spec = TagSpecification::builder()
            .resource_type(ResourceType::LaunchTemplate)
            .set_tags(Some(spec.tags.iter().map(|(k, v)| tag(k, v)).collect()))
            .build();
        self.count();
        match self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(data)
            .tag_specifications(tag_spec)
            .send()
            .await
        {
            Ok(_) => {
                info!(launch_template = %name, image = %spec.image_id, "created launch template");
                Ok(())
            }
            Err(e) => {
                let e = ApiError::from_sdk("CreateLaunchTemplate", e);
                if e.is("InvalidLaunchTemplateName.AlreadyExistsException") {
                    Ok(())
                } else {
                    Err(e.into())
                }
            }
        }
    }
}

/// The launch template's data, as Karpenter's AWS provider writes it: the
/// security groups on the template, or on each interface when the class
/// lists interfaces (EC2 takes them in one place only).
fn template_data(spec: &TemplateSpec) -> RequestLaunchTemplateData {
    let s = &spec.settings;
    let m = &s.metadata;
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&spec.image_id)
        .user_data(base64::engine::general_purpose::STANDARD.encode(&spec.user_data))
        .metadata_options(
            LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
                    m.http_endpoint.as_str(),
                ))
                .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
                    m.http_protocol_ipv6.as_str(),
                ))
                .http_tokens(LaunchTemplateHttpTokensState::from(m.http_tokens.as_str()))
                .http_put_response_hop_limit(m.http_put_response_hop_limit)
                // Account defaults may turn instance tags on; ours hold `/`.
                .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Disabled)
                .build(),
        )
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(s.detailed_monitoring)
                .build(),
        );
    if s.network_interfaces.is_empty() {
        data = data.set_security_group_ids(Some(spec.security_groups.clone()));
    }
    for ni in &s.network_interfaces {
        let conntrack = ni.connection_tracking.map(|c| {
            ConnectionTrackingSpecificationRequest::builder()
                .set_tcp_established_timeout(c.tcp_established_timeout)
                .set_udp_stream_timeout(c.udp_stream_timeout)
                .set_udp_timeout(c.udp_timeout)
                .build()
        });
        data = data.network_interfaces(
            LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .network_card_index(ni.network_card_index)
                .device_index(ni.device_index)
                .set_interface_type(ni.interface_type.clone())
                .set_ipv4_prefix_count(ni.ipv4_prefix_count)
                .set_ipv6_prefix_count(ni.ipv6_prefix_count)
                .set_ipv6_address_count(ni.ipv6_address_count)
                .set_primary_ipv6(ni.primary_ipv6)
                .set_associate_public_ip_address(ni.associate_public_ip_address)
                .set_connection_tracking_specification(conntrack)
                .set_groups(Some(spec.security_groups.clone()))
                .build(),
        );
    }
    for b in &s.block_devices {
        data = data.block_device_mappings(
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .set_device_name(b.device_name.clone())
                .ebs(
                    LaunchTemplateEbsBlockDeviceRequest::builder()
                        .set_volume_size(b.volume_size_gib)
                        .set_volume_type(b.volume_type.as_deref().map(VolumeType::from))
                        .set_iops(b.iops)
                        .set_throughput(b.throughput)
                        .set_kms_key_id(b.kms_key_id.clone())
                        .set_snapshot_id(b.snapshot_id.clone())
                        .set_encrypted(b.encrypted)
                        .set_delete_on_termination(b.delete_on_termination)
                        .set_volume_initialization_rate(b.volume_initialization_rate)
                        .build(),
                )
                .build(),
        );
    }
    if s.placement_group.is_some() || s.dedicated {
        let pg = s.placement_group.as_ref();
        data = data.placement(
            LaunchTemplatePlacementRequest::builder()
                .set_group_id(pg.and_then(|p| p.id.clone()))
                .set_group_name(pg.and_then(|p| p.name.clone()))
                .set_tenancy(s.dedicated.then_some(Tenancy::Dedicated))
                .build(),
        );
    }
    if let Some(id) = &s.capacity_reservation {
        data = data.capacity_reservation_specification(
            LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_target(
                    CapacityReservationTarget::builder()
                        .capacity_reservation_id(id)
                        .build(),
                )
                .build(),
        );
        if s.capacity_block {
            data = data.instance_market_options(
                LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(MarketType::CapacityBlock)
                    .build(),
            );
        }
    }
    if let Some(profile) = &spec.instance_profile {
        data = data.iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(profile)
                .build(),
        );
    }
    data.build()
}
