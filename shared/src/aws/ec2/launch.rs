//! The launch path: NodeClass → subnets, security groups, AMIs, launch
//! templates → one CreateFleet → [`Launched`] or a classified error.
//!
//! Launch templates are named by a hash of their whole content
//! (`nodewright/<hash>`), so the same content is created once and reused
//! by every later launch, and a change (new AMI, new labels) gets a new name
//! instead of mutating a template in use. The user data carries the node's
//! max pods, which differs per instance type, so the options of one launch
//! are grouped by (architecture, accelerator, max pods): one template and
//! one `LaunchTemplateConfigs` entry per group.//!
//! Here: a claim's launch (reservations first, then its on-demand or spot
//! options; adopting an earlier attempt's instance) and the cache the
//! launch path shares; `network` (subnets, security groups), `cluster`
//! (the EKS facts the user data needs), `ami` (AMI resolution),
//! `templates` (launch templates: content, creation, listing, deletion),
//! `fleet` (the CreateFleet request and what its reply means), `resolved`
//! (what a NodeClass resolves to, for drift).

mod ami;
mod cluster;
mod fleet;
mod network;
mod resolved;
mod templates;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::types::Filter;
use tracing::{debug, info, warn};

use self::ami::{Accelerator, AmiKey};
use self::network::Network;
use self::templates::TemplateSpec;
use super::super::nodeclass::{launch_family, launch_settings};
use super::super::prices::PriceSource;
use super::super::userdata::{self, Bootstrap};
use super::{Ec2Cloud, NOT_TERMINATING, catalog_price, tags, to_instance};
use crate::cloud::InstanceTypeInfo;
use crate::model::{Instance, LaunchRequest, Launched, OfferingKey, PricedOffering};
use crate::ports::CloudError;
use crate::scheduling::labels;

pub use self::cluster::ClusterInfo;

#[derive(Debug, Default)]
pub(crate) struct LaunchCache {
    cluster: Option<(Instant, ClusterInfo)>,
    networks: HashMap<String, (Instant, Arc<Network>)>,
    amis: HashMap<AmiKey, (Instant, String)>,
    templates: HashSet<String>,
    resolved: HashMap<String, (Instant, crate::model::ResolvedClass)>,
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
            return Err(CloudError::invalid(
                format!("nodeclaim {}", req.claim_id),
                "no launch options",
            ));
        }
        // The class the launcher read this tick; the adapter's own map is for
        // callers that pass none (tests, tools).
        let (class_name, class) = match &req.node_class_spec {
            Some(c) => (c.name.as_str(), c),
            None => self.node_class(req.node_class.as_deref())?,
        };
        // Configuration errors first: they need no API call.
        let (family, pinned) = launch_family(class)
            .map_err(|e| CloudError::invalid(format!("nodeclass {class_name}"), e.to_string()))?;
        launch_settings(class, family, false)
            .map_err(|e| CloudError::invalid(format!("nodeclass {class_name}"), e.to_string()))?;
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
            return Err(CloudError::invalid(
                format!("nodeclaim {}", req.claim_id),
                format!("no launch option can be bought: {}", rejected.join("; ")),
            ));
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
                        rejected.push(e.to_string());
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
                .map_err(|e| {
                    CloudError::invalid(format!("nodeclass {class_name}"), e.to_string())
                })?;
                g.image = Some(image_id.clone());
                let mut settings =
                    launch_settings(class, family, cluster.service_cidr.contains(':')).map_err(
                        |e| CloudError::invalid(format!("nodeclass {class_name}"), e.to_string()),
                    )?;
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
                return Err(CloudError::invalid(
                    format!("nodeclaim {}", req.claim_id),
                    format!("no AMI for any launch option: {}", rejected.join("; ")),
                ));
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
}
