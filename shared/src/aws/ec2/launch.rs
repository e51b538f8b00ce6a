//! The launch path: NodeClass → subnets, security groups, AMIs, launch
//! templates → one CreateFleet → [`Launched`] or a classified error.
//!
//! Launch templates are named by a hash of their whole content
//! (`nodewright/<hash>`), so the same content is created once and reused
//! by every later launch, and a change (new AMI, new labels) gets a new name
//! instead of mutating a template in use. The user data carries the node's
//! max pods, which differs per instance type, so the options of one launch
//! are grouped by (architecture, accelerator, max pods): one template and
//! one `LaunchTemplateConfigs` entry per group.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::types::{
    CapacityReservationTarget, ConnectionTrackingSpecificationRequest, DefaultTargetCapacityType,
    Filter, FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType,
    InstanceLifecycle, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplatesMonitoringRequest, MarketType, OnDemandOptionsRequest,
    RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag,
    TagSpecification, TargetCapacitySpecificationRequest, Tenancy, VolumeType,
};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use tracing::{debug, info, warn};

use super::super::ApiError;
use super::super::nodeclass::{
    LaunchSettings, family_runs_kubernetes, instance_profile_name, launch_family, launch_settings,
};
use super::super::prices::PriceSource;
use super::super::userdata::{self, Bootstrap};
use super::{Ec2Cloud, NOT_TERMINATING, catalog_price, tags, to_instance};
use crate::cloud::InstanceTypeInfo;
use crate::config::nodeclass::{ANY_TAG_VALUE, AmiSelector, SelectorTerm};
use crate::config::{AmiFamily, NodeClass};
use crate::model::{
    Instance, InstanceState, LaunchRequest, Launched, OfferingKey, PricedOffering, Timestamp,
};
use crate::ports::CloudError;
use crate::scheduling::labels;

/// Fleet error codes that mean "no capacity for this offering now".
pub const INSUFFICIENT_CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "ReservationCapacityExceeded",
];

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

/// Subnets and security groups of one NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Network {
    /// Zone → the subnet with the most free addresses there.
    pub subnets: BTreeMap<String, String>,
    pub security_groups: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Accelerator {
    None,
    Nvidia,
    Neuron,
}

impl Accelerator {
    fn of(info: &InstanceTypeInfo) -> Accelerator {
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
struct AmiKey {
    class: String,
    family: AmiFamily,
    version: Option<String>,
    k8s: String,
    arch: String,
    accelerator: Accelerator,
}

#[derive(Debug, Default)]
pub(crate) struct LaunchCache {
    cluster: Option<(Instant, ClusterInfo)>,
    networks: HashMap<String, (Instant, Arc<Network>)>,
    amis: HashMap<AmiKey, (Instant, String)>,
    templates: HashSet<String>,
    resolved: HashMap<String, (Instant, crate::model::ResolvedClass)>,
}

/// Everything a launch template holds; its hash is the template's name.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct TemplateSpec {
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
    fn name(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let digest = sha2::Sha256::digest(&json);
        let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
        format!("nodewright/{hex}")
    }
}

/// One group of options sharing a launch template.
#[derive(Debug)]
struct Group<'r> {
    arch: String,
    accelerator: Accelerator,
    max_pods: i64,
    /// `kubeReserved` and `systemReserved` values its kubelet expressions
    /// gave (empty without expressions).
    reserved: (BTreeMap<String, String>, BTreeMap<String, String>),
    options: Vec<&'r PricedOffering>,
    template: Option<String>,
    /// The AMI of the group's template.
    image: Option<String>,
}

/// CreateFleet's ClientToken is at most 64 ASCII characters.
pub fn fleet_client_token(token: &str) -> String {
    if token.len() <= 64 && token.is_ascii() {
        return token.to_owned();
    }
    let digest = sha2::Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().take(24).map(|b| format!("{b:02x}")).collect();
    format!("nodewright-{hex}")
}

/// The SSM parameter that names the AMI of a family, version, arch and
/// accelerator; none for the families the launch path does not support.
pub fn ami_parameter(
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

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

impl<P: PriceSource> Ec2Cloud<P> {
    /// A claim's launch: into a capacity reservation when a `reserved`
    /// option has a target with room (cheapest first, each its own
    /// CreateFleet on a template that targets the reservation); when every
    /// reservation tried is full (`ReservationCapacityExceeded`, reported
    /// as unavailable), on the claim's on-demand or spot options.
    pub(super) async fn launch_claim(&self, req: &LaunchRequest) -> Result<Launched, CloudError> {
        let mut reserved: Vec<&PricedOffering> = req
            .options
            .iter()
            .filter(|o| o.capacity_type == labels::CAPACITY_TYPE_RESERVED)
            .collect();
        if reserved.is_empty() {
            return self.launch_with(req, None).await;
        }
        reserved.sort_by(|a, b| a.price.total_cmp(&b.price));
        let mut full = Vec::new();
        for o in reserved {
            let key = OfferingKey {
                capacity_type: o.capacity_type.clone(),
                instance_type: o.instance_type.clone(),
                zone: o.zone.clone(),
            };
            let Some(target) = req
                .reservations
                .iter()
                .find(|r| crate::provisioning::reservations::may_target(o, r) && r.available > 0)
            else {
                full.push(key);
                continue;
            };
            let mut one = req.clone();
            // A CreateFleet of its own: a failed one is not replayed for the fallback.
            one.client_token = format!("{}-{}", req.client_token, target.id);
            one.options = vec![PricedOffering {
                capacity_type: labels::CAPACITY_TYPE_ON_DEMAND.to_owned(),
                ..o.clone()
            }];
            match self.launch_with(&one, Some(target)).await {
                Ok(mut launched) => {
                    let i = &mut launched.instance;
                    i.capacity_type = labels::CAPACITY_TYPE_RESERVED.to_owned();
                    i.capacity_reservation_id = Some(target.id.clone());
                    i.capacity_reservation_type = Some(target.reservation_type);
                    i.capacity_reservation_interruptible = target.interruptible;
                    i.price = o.price;
                    launched.unavailable = full;
                    return Ok(launched);
                }
                Err(CloudError::InsufficientCapacity { message, .. }) => {
                    warn!(nodeclaim = %req.claim_id, capacity_reservation_id = %target.id, %message, "the capacity reservation is full");
                    full.push(key);
                }
                Err(e) => return Err(e),
            }
        }
        let mut rest = req.clone();
        rest.options
            .retain(|o| o.capacity_type != labels::CAPACITY_TYPE_RESERVED);
        if rest.options.is_empty() {
            return Err(CloudError::InsufficientCapacity {
                offerings: full,
                message: "ReservationCapacityExceeded: no capacity reservation the nodeclaim may use has room".to_owned(),
            });
        }
        match self.launch_with(&rest, None).await {
            Ok(mut launched) => {
                launched.unavailable.extend(full);
                Ok(launched)
            }
            Err(CloudError::InsufficientCapacity {
                mut offerings,
                message,
            }) => {
                offerings.extend(full);
                Err(CloudError::InsufficientCapacity { offerings, message })
            }
            Err(e) => Err(e),
        }
    }

    /// One launch of `req`'s options (none reserved), into `reservation`
    /// when given (then its options are the on-demand ones of that type and zone).
    async fn launch_with(
        &self,
        req: &LaunchRequest,
        reservation: Option<&crate::cloud::CapacityReservation>,
    ) -> Result<Launched, CloudError> {
        let started = Instant::now();
        if req.options.is_empty() {
            return Err(CloudError::Invalid(format!(
                "nodeclaim {}: no launch options",
                req.claim_id
            )));
        }
        // The class the launcher read this tick; the adapter's own map is for
        // callers that pass none (tests, tools).
        let (class_name, class) = match &req.node_class_spec {
            Some(c) => (c.name.as_str(), c),
            None => self.node_class(req.node_class.as_deref())?,
        };
        // Configuration errors first: they need no API call.
        let (family, pinned) = launch_family(class)
            .map_err(|e| CloudError::Invalid(format!("nodeclass {class_name}: {e}")))?;
        launch_settings(class, family, false)
            .map_err(|e| CloudError::Invalid(format!("nodeclass {class_name}: {e}")))?;
        if let Some(instance) = self.adopt(req).await? {
            info!(nodeclaim = %req.claim_id, instance = %instance.id, "adopted the instance an earlier launch of this nodeclaim made");
            return Ok(Launched {
                instance,
                unavailable: Vec::new(),
            });
        }
        let network = {
            let mut cache = self.launch.lock().await;
            self.network(&mut cache, class_name, class).await?
        };
        let catalog = self.refresh_catalog().await?;
        let infos: HashMap<&str, &InstanceTypeInfo> = catalog
            .instance_types
            .iter()
            .map(|i| (i.name.as_str(), i))
            .collect();
        let offered: HashSet<(&str, &str, &str)> = catalog
            .offerings
            .iter()
            .map(|o| {
                (
                    o.capacity_type.as_str(),
                    o.instance_type.as_str(),
                    o.zone.as_str(),
                )
            })
            .collect();
        // Every option must be a type of the region, offered in its zone as
        // its capacity type, in a zone the NodeClass has a subnet in.
        let mut rejected = Vec::new();
        let mut valid: Vec<(&PricedOffering, &InstanceTypeInfo)> = Vec::new();
        for o in &req.options {
            let Some(info) = infos.get(o.instance_type.as_str()) else {
                rejected.push(format!(
                    "{} is not an instance type offered in {}",
                    o.instance_type, self.region
                ));
                continue;
            };
            if !offered.contains(&(
                o.capacity_type.as_str(),
                o.instance_type.as_str(),
                o.zone.as_str(),
            )) {
                rejected.push(format!(
                    "{} is not offered as {} in zone {}",
                    o.instance_type, o.capacity_type, o.zone
                ));
                continue;
            }
            if !network.subnets.contains_key(&o.zone) {
                rejected.push(format!(
                    "nodeclass {class_name} has no subnet in zone {}",
                    o.zone
                ));
                continue;
            }
            valid.push((o, info));
        }
        if valid.is_empty() {
            return Err(CloudError::Invalid(format!(
                "nodeclaim {}: no launch option can be bought: {}",
                req.claim_id,
                rejected.join("; ")
            )));
        }
        // Spot when any (valid) spot option is present, as Karpenter does.
        let capacity_type = if valid
            .iter()
            .any(|(o, _)| o.capacity_type == labels::CAPACITY_TYPE_SPOT)
        {
            labels::CAPACITY_TYPE_SPOT
        } else {
            labels::CAPACITY_TYPE_ON_DEMAND
        };
        let chosen: Vec<(&PricedOffering, &InstanceTypeInfo)> = valid
            .into_iter()
            .filter(|(o, _)| o.capacity_type == capacity_type)
            .collect();

        // Cluster, AMIs and templates: under the launch cache's lock, so
        // concurrent launches share one lookup.
        let (network, groups) = {
            let mut cache = self.launch.lock().await;
            let cluster = self.cluster(&mut cache).await?;
            let k8s = self
                .settings
                .kubernetes_version
                .clone()
                .unwrap_or_else(|| cluster.version.clone());

            let mut groups: Vec<Group<'_>> = Vec::new();
            for (o, info) in &chosen {
                let arch = info.arch.clone();
                let acc = Accelerator::of(info);
                // The kubelet expressions resolved for this type: its user
                // data carries the values the plan reserved.
                let resolved = match info.resolve_kubelet(&req.kubelet) {
                    Ok(r) => r,
                    Err(e) => {
                        rejected.push(e);
                        continue;
                    }
                };
                let max_pods = info.max_pods(&resolved.config);
                let reserved = (resolved.kube_reserved, resolved.system_reserved);
                match groups.iter_mut().find(|g| {
                    g.arch == arch
                        && g.accelerator == acc
                        && g.max_pods == max_pods
                        && g.reserved == reserved
                }) {
                    Some(g) => g.options.push(o),
                    None => groups.push(Group {
                        arch,
                        accelerator: acc,
                        max_pods,
                        reserved,
                        options: vec![o],
                        template: None,
                        image: None,
                    }),
                }
            }

            let mut node_labels = req.labels.clone();
            node_labels.insert(labels::CAPACITY_TYPE.to_owned(), capacity_type.to_owned());
            if let Some(r) = reservation {
                node_labels.insert(
                    labels::CAPACITY_TYPE.to_owned(),
                    labels::CAPACITY_TYPE_RESERVED.to_owned(),
                );
                node_labels.insert(labels::CAPACITY_RESERVATION_ID.to_owned(), r.id.clone());
                node_labels.insert(
                    labels::CAPACITY_RESERVATION_TYPE.to_owned(),
                    r.reservation_type.as_str().to_owned(),
                );
                node_labels.insert(
                    labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
                    r.interruptible.to_string(),
                );
            }
            let mut specs: Vec<(String, TemplateSpec)> = Vec::new();
            for g in &mut groups {
                let key = AmiKey {
                    class: class_name.to_owned(),
                    family,
                    version: pinned.clone(),
                    k8s: k8s.clone(),
                    arch: g.arch.clone(),
                    accelerator: g.accelerator,
                };
                let image_id = match self.ami(&mut cache, &key, class).await {
                    Ok(id) => id,
                    Err(e) if !e.is_retryable() => {
                        let why = e.to_string();
                        let types: Vec<&str> =
                            g.options.iter().map(|o| o.instance_type.as_str()).collect();
                        rejected.push(format!("{} ({}): {why}", types.join(", "), g.arch));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let mut kubelet = std::borrow::Cow::Borrowed(&class.kubelet);
                if !g.reserved.0.is_empty() || !g.reserved.1.is_empty() {
                    let k = kubelet.to_mut();
                    k.kube_reserved.extend(g.reserved.0.clone());
                    k.system_reserved.extend(g.reserved.1.clone());
                }
                let user_data = userdata::render(
                    family,
                    &Bootstrap {
                        cluster_name: &self.settings.cluster_name,
                        endpoint: &cluster.endpoint,
                        ca_base64: &cluster.ca_base64,
                        service_cidr: &cluster.service_cidr,
                        cluster_dns: class.kubelet.cluster_dns.as_slice(),
                        kubelet: &kubelet,
                        raid0: class.instance_store_policy.as_deref() == Some("RAID0"),
                        max_pods: g.max_pods,
                        labels: &node_labels,
                        taints: &req.taints,
                        user_data: class.user_data.as_deref(),
                    },
                )
                .map_err(|e| CloudError::Invalid(format!("nodeclass {class_name}: {e}")))?;
                g.image = Some(image_id.clone());
                let mut settings =
                    launch_settings(class, family, cluster.service_cidr.contains(':'))
                        .map_err(|e| CloudError::Invalid(format!("nodeclass {class_name}: {e}")))?;
                // The claim's tenancy (`provisioning::plan::tenancy`).
                settings.dedicated = req.labels.get(labels::INSTANCE_TENANCY).map(String::as_str)
                    == Some(labels::TENANCY_DEDICATED);
                settings.capacity_reservation = reservation.map(|r| r.id.clone());
                settings.capacity_block = reservation.is_some_and(|r| {
                    r.reservation_type == crate::cloud::ReservationType::CapacityBlock
                });
                let spec = self.template_spec(
                    class_name, class, settings, &req.pool, image_id, user_data, &network,
                );
                let name = spec.name();
                g.template = Some(name.clone());
                specs.push((name, spec));
            }
            groups.retain(|g| g.template.is_some());
            if groups.is_empty() {
                return Err(CloudError::Invalid(format!(
                    "nodeclaim {}: no AMI for any launch option: {}",
                    req.claim_id,
                    rejected.join("; ")
                )));
            }
            self.ensure_templates(&mut cache, specs).await?;
            (network, groups)
        };
        if !rejected.is_empty() {
            warn!(nodeclaim = %req.claim_id, skipped = %rejected.join("; "), "launching without some options");
        }
        let resource_tags = self.owned_tags(class_name, class, &req.pool, Some(&req.claim_id));
        let result = self
            .create_fleet(
                req,
                capacity_type,
                reservation.is_some_and(|r| {
                    r.reservation_type == crate::cloud::ReservationType::CapacityBlock
                }),
                &groups,
                &network,
                resource_tags,
            )
            .await;
        if let Err(e) = &result
            && e.to_string().contains("InvalidLaunchTemplate")
        {
            // A template this process knew was deleted since (clean-up in
            // another invocation): forget the group's templates so the
            // retry creates them again.
            let mut cache = self.launch.lock().await;
            for g in &groups {
                if let Some(name) = &g.template {
                    cache.templates.remove(name);
                }
            }
            warn!(nodeclaim = %req.claim_id, error = %e, "a launch template is gone; it is created again on the next attempt");
        }
        debug!(nodeclaim = %req.claim_id, elapsed_ms = started.elapsed().as_millis() as u64, "launch finished");
        result
    }

    /// A live instance already tagged with this claim (an earlier attempt's).
    async fn adopt(&self, req: &LaunchRequest) -> Result<Option<Instance>, CloudError> {
        let found = self
            .describe_ours(
                vec![
                    Filter::builder()
                        .name(format!("tag:{}", tags::NODECLAIM))
                        .values(&req.claim_id)
                        .build(),
                ],
                NOT_TERMINATING,
            )
            .await?;
        let catalog = self.cached_catalog().await;
        let price = |ct: &str, ty: &str, zone: &str| {
            req.options
                .iter()
                .find(|o| o.capacity_type == ct && o.instance_type == ty && o.zone == zone)
                .map(|o| o.price)
                .or_else(|| catalog_price(catalog.as_deref(), ct, ty, zone))
        };
        let mut instances: Vec<Instance> =
            found.iter().filter_map(|i| to_instance(i, price)).collect();
        instances.sort_by(|a, b| {
            a.launched_at
                .cmp(&b.launched_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        if instances.len() > 1 {
            warn!(nodeclaim = %req.claim_id, instances = instances.len(), "more than one instance carries this nodeclaim; adopting the oldest");
        }
        Ok(instances.into_iter().next())
    }

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

    async fn subnets(
        &self,
        class_name: &str,
        terms: &[SelectorTerm],
    ) -> Result<BTreeMap<String, String>, CloudError> {
        if terms.is_empty() {
            return Err(CloudError::Invalid(format!(
                "nodeclass {class_name}: subnetSelectorTerms is empty"
            )));
        }
        // zone → (free addresses, subnet id)
        let mut best: BTreeMap<String, (i32, String)> = BTreeMap::new();
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
                for s in page.subnets() {
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
            }
        }
        if best.is_empty() {
            return Err(CloudError::Invalid(format!(
                "nodeclass {class_name}: subnetSelectorTerms {} match no subnet",
                terms_text(terms)
            )));
        }
        Ok(best.into_iter().map(|(zone, (_, id))| (zone, id)).collect())
    }

    async fn security_groups(
        &self,
        class_name: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<String>, CloudError> {
        if terms.is_empty() {
            return Err(CloudError::Invalid(format!(
                "nodeclass {class_name}: securityGroupSelectorTerms is empty"
            )));
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
            return Err(CloudError::Invalid(format!(
                "nodeclass {class_name}: securityGroupSelectorTerms {} match no security group",
                terms_text(terms)
            )));
        }
        Ok(ids.into_iter().collect())
    }

    async fn cluster(&self, cache: &mut LaunchCache) -> Result<ClusterInfo, CloudError> {
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
                    return Err(CloudError::Invalid(format!(
                        "EKS cluster {name:?} does not exist in {}",
                        self.region
                    )));
                }
                return Err(e.into());
            }
        };
        let c = out.cluster().ok_or_else(|| {
            CloudError::Invalid(format!("DescribeCluster {name}: no cluster in the reply"))
        })?;
        let endpoint = c.endpoint().filter(|e| !e.is_empty()).ok_or_else(|| {
            CloudError::Transient(format!(
                "EKS cluster {name} has no endpoint yet (status {:?})",
                c.status()
            ))
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

    async fn ami(
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
            return Err(CloudError::Invalid(
                "amiSelectorTerms by name or tags are not supported yet; use alias, id or ssmParameter".into(),
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
            family_runs_kubernetes(family, &key.k8s).map_err(CloudError::Invalid)?;
            let path = ami_parameter(
                family,
                key.version.as_deref(),
                &key.k8s,
                &key.arch,
                key.accelerator,
            )
            .ok_or_else(|| {
                CloudError::Invalid(format!(
                    "no EKS-optimized AMI parameter for amiFamily {} on {}",
                    family, key.arch
                ))
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
                    CloudError::Invalid(format!(
                        "amiSelectorTerms {candidates:?} have no {want} image"
                    ))
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
                .ok_or_else(|| CloudError::Invalid(format!("SSM parameter {name} has no value"))),
            Err(e) => {
                let e = ApiError::from_sdk("GetParameter", e);
                if e.is("ParameterNotFound") {
                    Err(CloudError::Invalid(format!(
                        "SSM parameter {name} does not exist"
                    )))
                } else {
                    Err(e.into())
                }
            }
        }
    }

    /// The tags on everything a launch creates (templates without a claim;
    /// instance, volumes and fleet with it): the NodeClass's own, then ours
    /// ([`tags::resource_tags`]: ownership, never Karpenter's keys).
    fn owned_tags(
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
    fn template_spec(
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
    async fn ensure_templates(
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
    pub(super) async fn list_templates(
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
    pub(super) async fn delete_template(
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

    async fn create_fleet(
        &self,
        req: &LaunchRequest,
        capacity_type: &str,
        capacity_block: bool,
        groups: &[Group<'_>],
        network: &Network,
        resource_tags: BTreeMap<String, String>,
    ) -> Result<Launched, CloudError> {
        let spot = capacity_type == labels::CAPACITY_TYPE_SPOT;
        let configs: Vec<FleetLaunchTemplateConfigRequest> = groups
            .iter()
            .filter_map(|g| {
                let name = g.template.as_deref()?;
                let overrides = g
                    .options
                    .iter()
                    .filter_map(|o| {
                        let subnet = network.subnets.get(&o.zone)?;
                        Some(
                            FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(aws_sdk_ec2::types::InstanceType::from(
                                    o.instance_type.as_str(),
                                ))
                                .subnet_id(subnet)
                                .build(),
                        )
                    })
                    .collect();
                Some(
                    FleetLaunchTemplateConfigRequest::builder()
                        .launch_template_specification(
                            FleetLaunchTemplateSpecificationRequest::builder()
                                .launch_template_name(name)
                                .version("$Latest")
                                .build(),
                        )
                        .set_overrides(Some(overrides))
                        .build(),
                )
            })
            .collect();
        let tag_specs = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .map(|rt| {
            TagSpecification::builder()
                .resource_type(rt)
                .set_tags(Some(resource_tags.iter().map(|(k, v)| tag(k, v)).collect()))
                .build()
        });
        let mut call = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(fleet_client_token(&req.client_token))
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(if spot {
                        DefaultTargetCapacityType::Spot
                    } else if capacity_block {
                        DefaultTargetCapacityType::CapacityBlock
                    } else {
                        DefaultTargetCapacityType::OnDemand
                    })
                    .build(),
            )
            .set_launch_template_configs(Some(configs))
            .set_tag_specifications(Some(tag_specs.to_vec()));
        call = if spot {
            call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
        } else {
            call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
        };
        let all_keys = || -> Vec<OfferingKey> {
            groups
                .iter()
                .flat_map(|g| g.options.iter())
                .map(|o| OfferingKey {
                    capacity_type: capacity_type.to_owned(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                })
                .collect()
        };
        self.count();
        let out = match call.send().await {
            Ok(out) => out,
            Err(e) => {
                let e = ApiError::from_sdk("CreateFleet", e);
                if e.code
                    .as_deref()
                    .is_some_and(|c| INSUFFICIENT_CAPACITY_CODES.contains(&c))
                {
                    return Err(CloudError::InsufficientCapacity {
                        offerings: all_keys(),
                        message: e.to_string(),
                    });
                }
                return Err(e.into());
            }
        };
        let mut launched = fleet_outcome(&out, req, capacity_type, &all_keys(), &network.subnets)?;
        // What it booted with, for drift: the group's AMI, the zone's subnet, the class's groups.
        let i = &mut launched.instance;
        i.image_id = groups
            .iter()
            .find(|g| g.options.iter().any(|o| o.instance_type == i.instance_type))
            .and_then(|g| g.image.clone());
        i.subnet_id = network.subnets.get(&i.zone).cloned();
        i.security_group_ids.clone_from(&network.security_groups);
        Ok(launched)
    }

    /// See `Cloud::resolved_class` on `Ec2Cloud`.
    pub(super) async fn resolve_class(
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

    /// Every subnet the terms match (not only the roomiest per zone, as a launch picks).
    async fn matching_subnets(
        &self,
        class_name: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<String>, CloudError> {
        let mut ids = BTreeSet::new();
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
                ids.extend(
                    page.subnets()
                        .iter()
                        .filter_map(|s| s.subnet_id().map(str::to_owned)),
                );
            }
        }
        debug!(nodeclass = %class_name, subnets = ids.len(), "resolved the class's subnets");
        Ok(ids.into_iter().collect())
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

/// What a CreateFleet reply means: the launched instance with the offerings
/// that ran out on the way, or why nothing launched. `all_keys` are the
/// offerings the fleet was asked for; `subnets` maps zone → subnet id.
pub(crate) fn fleet_outcome(
    out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    req: &LaunchRequest,
    capacity_type: &str,
    all_keys: &[OfferingKey],
    subnets: &BTreeMap<String, String>,
) -> Result<Launched, CloudError> {
    let zone_of_subnet: HashMap<&str, &str> = subnets
        .iter()
        .map(|(z, s)| (s.as_str(), z.as_str()))
        .collect();
    let zone_of =
        |ov: Option<&aws_sdk_ec2::types::FleetLaunchTemplateOverrides>| -> Option<String> {
            let ov = ov?;
            ov.availability_zone().map(str::to_owned).or_else(|| {
                ov.subnet_id()
                    .and_then(|s| zone_of_subnet.get(s))
                    .map(|z| (*z).to_owned())
            })
        };
    let lifecycle = |l: Option<&InstanceLifecycle>| match l {
        Some(InstanceLifecycle::Spot) => labels::CAPACITY_TYPE_SPOT,
        Some(InstanceLifecycle::OnDemand) => labels::CAPACITY_TYPE_ON_DEMAND,
        _ => capacity_type,
    };

    let mut unavailable = Vec::new();
    let mut ice_messages = Vec::new();
    let mut other_errors = Vec::new();
    for err in out.errors() {
        let code = err.error_code().unwrap_or("Unknown");
        let message = err.error_message().unwrap_or_default();
        let ov = err
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        if INSUFFICIENT_CAPACITY_CODES.contains(&code) {
            ice_messages.push(format!("{code}: {message}"));
            if let (Some(ty), Some(zone)) = (ov.and_then(|o| o.instance_type()), zone_of(ov)) {
                let key = OfferingKey {
                    capacity_type: lifecycle(err.lifecycle()).to_owned(),
                    instance_type: ty.as_str().to_owned(),
                    zone,
                };
                if !unavailable.contains(&key) {
                    unavailable.push(key);
                }
            }
            // A subnet out of addresses takes its zone out for every type
            // and capacity type (Karpenter marks the subnet; the launch uses
            // one subnet per zone).
            if code == "InsufficientFreeAddressesInSubnet"
                && let Some(zone) = zone_of(ov)
            {
                let key = OfferingKey::zone(&zone);
                if !unavailable.contains(&key) {
                    unavailable.push(key);
                }
            }
        } else {
            other_errors.push((code.to_owned(), message.to_owned()));
        }
    }

    let launched = out.instances().iter().find_map(|i| {
        let id = i.instance_ids().first()?;
        let ov = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let ty = i
            .instance_type()
            .or_else(|| ov.and_then(|o| o.instance_type()))
            .map(|t| t.as_str().to_owned())?;
        Some((id.clone(), ty, zone_of(ov), lifecycle(i.lifecycle())))
    });
    if let Some((id, instance_type, zone, ct)) = launched {
        let zone = zone
            .or_else(|| {
                all_keys
                    .iter()
                    .find(|k| k.instance_type == instance_type)
                    .map(|k| k.zone.clone())
            })
            .unwrap_or_default();
        let price = req
            .options
            .iter()
            .find(|o| o.capacity_type == ct && o.instance_type == instance_type && o.zone == zone)
            .map_or(0.0, |o| o.price);
        let instance = Instance {
            provider_id: format!("aws:///{zone}/{id}"),
            id,
            instance_type,
            zone,
            capacity_type: ct.to_owned(),
            state: InstanceState::Pending,
            launched_at: Timestamp::now(),
            claim_id: Some(req.claim_id.clone()),
            pool: Some(req.pool.clone()),
            node_class: req.node_class.clone(),
            price,
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            capacity_reservation_id: None,
            capacity_reservation_type: None,
            capacity_reservation_interruptible: false,
        };
        return Ok(Launched {
            instance,
            unavailable,
        });
    }
    if !ice_messages.is_empty() || other_errors.is_empty() {
        let message = if ice_messages.is_empty() {
            "UnfulfillableCapacity: CreateFleet launched no instance and reported no error"
                .to_owned()
        } else {
            ice_messages.join("; ")
        };
        let offerings = if unavailable.is_empty() {
            all_keys.to_vec()
        } else {
            unavailable
        };
        return Err(CloudError::InsufficientCapacity { offerings, message });
    }
    let text = other_errors
        .iter()
        .map(|(c, m)| format!("{c}: {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    // A transient code anywhere makes the whole launch worth retrying;
    // otherwise the first error says what is wrong.
    let kind = other_errors
        .iter()
        .map(|(c, _)| super::super::classify(Some(c.as_str()), None))
        .find(|k| k.is_transient())
        .or_else(|| {
            other_errors
                .first()
                .map(|(c, _)| super::super::classify(Some(c.as_str()), None))
        })
        .unwrap_or(crate::ports::FailureKind::InvalidRequest);
    // The code named is the first error's; the message lists them all.
    Err(CloudError::Service(
        crate::ports::ServiceError::of_call(kind, "CreateFleet", None, &text)
            .with_code(other_errors.first().map(|(c, _)| c.clone())),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
    use aws_sdk_ec2::types::{
        CreateFleetError, CreateFleetInstance, FleetLaunchTemplateOverrides,
        InstanceType as Ec2Type, LaunchTemplateAndOverridesResponse,
    };

    fn overrides(ty: &str, subnet: &str) -> LaunchTemplateAndOverridesResponse {
        LaunchTemplateAndOverridesResponse::builder()
            .overrides(
                FleetLaunchTemplateOverrides::builder()
                    .instance_type(Ec2Type::from(ty))
                    .subnet_id(subnet)
                    .build(),
            )
            .build()
    }

    fn fleet_error(code: &str, ty: &str, subnet: &str) -> CreateFleetError {
        CreateFleetError::builder()
            .error_code(code)
            .error_message(format!("{code} for {ty}"))
            .lifecycle(InstanceLifecycle::Spot)
            .launch_template_and_overrides(overrides(ty, subnet))
            .build()
    }

    fn key(ty: &str, zone: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: "spot".into(),
            instance_type: ty.into(),
            zone: zone.into(),
        }
    }

    fn fixture() -> (LaunchRequest, Vec<OfferingKey>, BTreeMap<String, String>) {
        let req = LaunchRequest {
            claim_id: "default-abcde".into(),
            client_token: "nodewright-default-abcde".into(),
            pool: "default".into(),
            node_class: None,
            node_class_spec: None,
            options: vec![
                PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: "m5.large".into(),
                    zone: "za".into(),
                    capacity_type: "spot".into(),
                    price: 0.03,
                },
                PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: "m5.large".into(),
                    zone: "zb".into(),
                    capacity_type: "spot".into(),
                    price: 0.031,
                },
                PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: "c5.large".into(),
                    zone: "za".into(),
                    capacity_type: "spot".into(),
                    price: 0.032,
                },
            ],
            labels: BTreeMap::new(),
            taints: vec![],
            kubelet: Default::default(),
            reservations: Vec::new(),
        };
        let keys = vec![
            key("m5.large", "za"),
            key("m5.large", "zb"),
            key("c5.large", "za"),
        ];
        let subnets = [
            ("za".to_owned(), "subnet-a".to_owned()),
            ("zb".to_owned(), "subnet-b".to_owned()),
        ]
        .into();
        (req, keys, subnets)
    }

    #[test]
    fn a_launch_reports_the_offerings_that_ran_out_on_the_way() {
        let (req, keys, subnets) = fixture();
        let out = CreateFleetOutput::builder()
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .instances(
                CreateFleetInstance::builder()
                    .instance_ids("i-0abc")
                    .instance_type(Ec2Type::from("m5.large"))
                    .lifecycle(InstanceLifecycle::Spot)
                    .launch_template_and_overrides(overrides("m5.large", "subnet-b"))
                    .build(),
            )
            .build();
        let l = fleet_outcome(&out, &req, "spot", &keys, &subnets).expect("launched");
        assert_eq!(l.instance.id, "i-0abc");
        assert_eq!(
            (
                l.instance.zone.as_str(),
                l.instance.capacity_type.as_str(),
                l.instance.price
            ),
            ("zb", "spot", 0.031)
        );
        assert_eq!(l.instance.provider_id, "aws:///zb/i-0abc");
        assert_eq!(l.unavailable, vec![key("m5.large", "za")], "deduplicated");
    }

    #[test]
    fn nothing_launched_is_insufficient_capacity_or_an_error() {
        let (req, keys, subnets) = fixture();
        // Every capacity error names its offering.
        let out = CreateFleetOutput::builder()
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .errors(fleet_error(
                "MaxSpotInstanceCountExceeded",
                "c5.large",
                "subnet-a",
            ))
            .build();
        match fleet_outcome(&out, &req, "spot", &keys, &subnets) {
            Err(CloudError::InsufficientCapacity { offerings, message }) => {
                assert_eq!(
                    offerings,
                    vec![key("m5.large", "za"), key("c5.large", "za")]
                );
                assert!(message.contains("MaxSpotInstanceCountExceeded"));
            }
            other => panic!("{other:?}"),
        }
        // An empty reply is UnfulfillableCapacity for everything asked.
        match fleet_outcome(
            &CreateFleetOutput::builder().build(),
            &req,
            "spot",
            &keys,
            &subnets,
        ) {
            Err(CloudError::InsufficientCapacity { offerings, message }) => {
                assert_eq!(offerings, keys);
                assert!(message.starts_with("UnfulfillableCapacity"));
            }
            other => panic!("{other:?}"),
        }
        // Other errors: retryable or not by their code.
        let out = CreateFleetOutput::builder()
            .errors(fleet_error(
                "InvalidLaunchTemplateName.NotFoundException",
                "m5.large",
                "subnet-a",
            ))
            .build();
        match fleet_outcome(&out, &req, "spot", &keys, &subnets) {
            Err(e @ CloudError::Service(_)) => {
                assert_eq!(e.failure_kind(), Some(crate::ports::FailureKind::NotFound));
                assert!(!e.is_retryable());
                assert!(e.to_string().contains("InvalidLaunchTemplateName"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let out = CreateFleetOutput::builder()
            .errors(fleet_error("RequestLimitExceeded", "m5.large", "subnet-a"))
            .build();
        let e = fleet_outcome(&out, &req, "spot", &keys, &subnets).expect_err("throttled");
        assert_eq!(e.failure_kind(), Some(crate::ports::FailureKind::Throttled));
        assert!(e.is_retryable());
        let out = CreateFleetOutput::builder()
            .errors(fleet_error("UnauthorizedOperation", "m5.large", "subnet-a"))
            .build();
        let e = fleet_outcome(&out, &req, "spot", &keys, &subnets).expect_err("denied");
        assert_eq!(
            e.failure_kind(),
            Some(crate::ports::FailureKind::AccessDenied)
        );
    }

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

    #[test]
    fn client_tokens_fit_fleet_limits() {
        assert_eq!(
            fleet_client_token("nodewright-default-abcde"),
            "nodewright-default-abcde"
        );
        let long = format!("nodewright-{}-abcde", "p".repeat(63));
        let t = fleet_client_token(&long);
        assert!(t.len() <= 64);
        assert_eq!(t, fleet_client_token(&long), "stable");
        assert_ne!(t, fleet_client_token(&format!("{long}x")));
    }

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
