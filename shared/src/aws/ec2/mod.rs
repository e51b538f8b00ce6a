//! [`Ec2Cloud`]: EC2 (with SSM for AMIs, EKS for the cluster's endpoint and
//! version, and a [`PriceSource`] for prices) as the handlers'
//! [`Cloud`].
//!
//! **Caching.** Instance types and zone offerings are refreshed every
//! [`Refresh::types`] (5 min), prices every [`Refresh::prices`] (12 h;
//! 15 min while on the static fallback), subnets and security groups every
//! minute, the cluster and AMIs every 5 min. A warm `catalog()` makes no API
//! call. A failed refresh keeps serving the previous data (with a warning)
//! when there is any. Caches are per process: losing them costs API calls,
//! never correctness.
//!
//! **Idempotent launches.** CreateFleet gets the claim's client token, and
//! before calling it the adapter looks for a live instance tagged with the
//! claim id and adopts it — so a retried launch returns the instance the
//! first attempt made even where ClientToken is not honoured (the emulator).
//!
//! **Only what we own.** `instances()`, `terminate()` and the launch's
//! adoption only see instances tagged `nodewright.io/cluster=<name>`
//! ([`tags::CLUSTER`]); the cluster's `kubernetes.io/cluster/<name>=owned`
//! tag is membership (managed node groups carry it too), never ownership.

pub mod catalog;
mod health;
mod launch;
mod reservations;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType};
use tracing::{debug, info, warn};

use self::catalog::TypeFacts;
use super::ApiError;
use super::prices::{AwsPrices, OnDemand, PriceOrigin, PriceSource, SpotPrices};
use crate::config::NodeClass;
use crate::model::{CloudCatalog, Instance, InstanceState, LaunchRequest, Launched, Timestamp};
use crate::ports::{Cloud, CloudError};
use crate::scheduling::labels;

pub use launch::ClusterInfo;

/// Tag keys the adapter writes and filters on (see [`crate::cloud::ownership`]).
pub use crate::cloud::ownership as tags;

/// How long cached facts are trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refresh {
    /// Instance types and zone offerings.
    pub types: Duration,
    /// On-demand and spot prices.
    pub prices: Duration,
    /// How soon to ask the Pricing API again while on the static table.
    pub price_retry: Duration,
    /// Subnets (free IPs change) and security groups.
    pub network: Duration,
    /// The cluster (endpoint, version) and the AMIs resolved for it.
    pub images: Duration,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh {
            types: Duration::from_secs(5 * 60),
            prices: Duration::from_secs(12 * 3600),
            price_retry: Duration::from_secs(15 * 60),
            network: Duration::from_secs(60),
            images: Duration::from_secs(5 * 60),
        }
    }
}

/// What the adapter is told at construction.
#[derive(Debug, Clone)]
pub struct Ec2CloudSettings {
    pub cluster_name: String,
    /// NodeClass name → the validated NodeClass. A request without a
    /// NodeClass uses `default`.
    pub node_classes: BTreeMap<String, NodeClass>,
    /// The instance profile for NodeClasses with `defaultInstanceProfile`
    /// (neither `role` nor `instanceProfile`); none: their launch templates
    /// name no instance profile.
    pub default_instance_profile: Option<String>,
    pub refresh: Refresh,
    /// Cluster facts to use instead of asking `eks:DescribeCluster`.
    pub cluster: Option<ClusterInfo>,
    /// Kubernetes version for AMI lookups instead of the cluster's.
    pub kubernetes_version: Option<String>,
}

impl Ec2CloudSettings {
    pub fn new(cluster_name: impl Into<String>) -> Ec2CloudSettings {
        Ec2CloudSettings {
            cluster_name: cluster_name.into(),
            node_classes: BTreeMap::new(),
            default_instance_profile: None,
            refresh: Refresh::default(),
            cluster: None,
            kubernetes_version: None,
        }
    }

    /// Adds (or replaces) a NodeClass under its name.
    pub fn with_node_class(mut self, class: NodeClass) -> Self {
        self.node_classes.insert(class.name.clone(), class);
        self
    }
}

#[derive(Debug, Default)]
struct CatalogCache {
    types: Option<(Instant, Arc<Vec<TypeFacts>>)>,
    on_demand: Option<(Instant, OnDemand)>,
    spot: Option<(Instant, Arc<SpotPrices>)>,
    built: Option<Arc<CloudCatalog>>,
}

/// EC2 as a [`Cloud`].
#[derive(Debug)]
pub struct Ec2Cloud<P = AwsPrices> {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    eks: aws_sdk_eks::Client,
    region: String,
    prices: P,
    settings: Ec2CloudSettings,
    catalog: tokio::sync::Mutex<CatalogCache>,
    launch: tokio::sync::Mutex<launch::LaunchCache>,
    calls: AtomicU64,
}

impl Ec2Cloud<AwsPrices> {
    /// An adapter with prices from the Pricing API (static fallback) and spot history.
    pub fn new(
        config: &aws_config::SdkConfig,
        settings: Ec2CloudSettings,
    ) -> Result<Ec2Cloud<AwsPrices>, CloudError> {
        let region = region_of(config)?;
        let prices = AwsPrices::new(config, &region);
        Ec2Cloud::with_prices(config, settings, prices)
    }
}

fn region_of(config: &aws_config::SdkConfig) -> Result<String, CloudError> {
    config
        .region()
        .map(|r| r.as_ref().to_owned())
        .ok_or_else(|| {
            CloudError::invalid(
                "AWS region",
                "none configured (set AWS_REGION or pass a region)",
            )
        })
}

impl<P: PriceSource> Ec2Cloud<P> {
    pub fn with_prices(
        config: &aws_config::SdkConfig,
        settings: Ec2CloudSettings,
        prices: P,
    ) -> Result<Ec2Cloud<P>, CloudError> {
        Ok(Ec2Cloud {
            ec2: aws_sdk_ec2::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            eks: aws_sdk_eks::Client::new(config),
            region: region_of(config)?,
            prices,
            settings,
            catalog: tokio::sync::Mutex::new(CatalogCache::default()),
            launch: tokio::sync::Mutex::new(launch::LaunchCache::default()),
            calls: AtomicU64::new(0),
        })
    }

    pub fn settings(&self) -> &Ec2CloudSettings {
        &self.settings
    }

    /// EC2/SSM/EKS requests made so far (pages count one each; price-source
    /// calls are not counted).
    pub fn api_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Where the cached on-demand prices came from.
    pub async fn price_origin(&self) -> Option<PriceOrigin> {
        self.catalog
            .lock()
            .await
            .on_demand
            .as_ref()
            .map(|(_, p)| p.origin.clone())
    }

    /// The catalog as cached, without refreshing it.
    pub async fn cached_catalog(&self) -> Option<Arc<CloudCatalog>> {
        self.catalog.lock().await.built.clone()
    }

    async fn refresh_catalog(&self) -> Result<Arc<CloudCatalog>, CloudError> {
        let mut cache = self.catalog.lock().await;
        let refresh = self.settings.refresh;
        let stale = |at: &Option<Instant>, every: Duration| at.is_none_or(|t| t.elapsed() >= every);
        let mut changed = false;

        if stale(&cache.types.as_ref().map(|t| t.0), refresh.types) {
            match catalog::fetch_types(&self.ec2, &self.calls).await {
                Ok(types) => {
                    debug!(region = %self.region, types = types.len(), "instance types refreshed");
                    cache.types = Some((Instant::now(), Arc::new(types)));
                    changed = true;
                }
                Err(e) => match cache.types.as_mut() {
                    Some((at, _)) => {
                        warn!(error = %e, "could not refresh instance types; keeping the cached ones");
                        *at = Instant::now();
                    }
                    None => return Err(e.into()),
                },
            }
        }

        let od_every = match cache.on_demand.as_ref().map(|p| &p.1.origin) {
            Some(PriceOrigin::StaticTable { .. }) => refresh.price_retry.min(refresh.prices),
            _ => refresh.prices,
        };
        if stale(&cache.on_demand.as_ref().map(|p| p.0), od_every) {
            match self.prices.on_demand(&self.region).await {
                Ok(p) => {
                    cache.on_demand = Some((Instant::now(), p));
                    changed = true;
                }
                Err(e) => match cache.on_demand.as_mut() {
                    Some((at, _)) => {
                        warn!(error = %e, "could not refresh on-demand prices; keeping the cached ones");
                        *at = Instant::now();
                    }
                    None => return Err(e),
                },
            }
        }

        if stale(&cache.spot.as_ref().map(|p| p.0), refresh.prices) {
            match self.prices.spot(&self.region).await {
                Ok(p) => {
                    cache.spot = Some((Instant::now(), Arc::new(p)));
                    changed = true;
                }
                Err(e) => match cache.spot.as_mut() {
                    Some((at, _)) => {
                        warn!(error = %e, "could not refresh spot prices; keeping the cached ones");
                        *at = Instant::now();
                    }
                    None => return Err(e),
                },
            }
        }

        if changed || cache.built.is_none() {
            let (Some((_, types)), Some((_, od)), Some((_, spot))) =
                (&cache.types, &cache.on_demand, &cache.spot)
            else {
                return Err(CloudError::transient("catalog", "incomplete"));
            };
            let built = catalog::assemble(&self.region, types, &od.prices, spot);
            info!(
                region = %self.region,
                instance_types = built.instance_types.len(),
                offerings = built.offerings.len(),
                on_demand_prices = ?od.origin,
                "catalog refreshed"
            );
            cache.built = Some(Arc::new(built));
        }
        cache
            .built
            .clone()
            .ok_or_else(|| CloudError::transient("catalog", "unavailable"))
    }

    fn node_class(&self, name: Option<&str>) -> Result<(&str, &NodeClass), CloudError> {
        let name = name.unwrap_or("default");
        self.settings
            .node_classes
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
            .ok_or_else(|| CloudError::invalid(format!("nodeclass {name:?}"), "not defined"))
    }

    /// Our live instances matching extra filters: those tagged
    /// `nodewright.io/cluster=<cluster>`, by the request's filter and again
    /// here on the tags returned (an instance the filter let through without
    /// our tag is logged and dropped, never acted on).
    async fn describe_ours(
        &self,
        extra: Vec<Filter>,
        states: &[&str],
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, CloudError> {
        let mut req = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", tags::CLUSTER))
                    .values(&self.settings.cluster_name)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(states.iter().map(|s| (*s).to_owned()).collect()))
                    .build(),
            );
        for f in extra {
            req = req.filters(f);
        }
        let mut pages = req.max_results(1000).into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            self.count();
            let page =
                page.map_err(|e| CloudError::from(ApiError::from_sdk("DescribeInstances", e)))?;
            for r in page.reservations() {
                for i in r.instances() {
                    if is_ours(i, &self.settings.cluster_name) {
                        out.push(i.clone());
                    } else {
                        warn!(instance = ?i.instance_id(), "DescribeInstances returned an instance without our ownership tag; leaving it alone");
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Whether an EC2 instance carries `nodewright.io/cluster=<cluster>`.
fn is_ours(i: &aws_sdk_ec2::types::Instance, cluster: &str) -> bool {
    i.tags()
        .iter()
        .any(|t| t.key() == Some(tags::CLUSTER) && t.value() == Some(cluster))
}

/// States of an instance that still exists (or is on its way out).
const LIVE_STATES: &[&str] = &["pending", "running", "stopping", "stopped", "shutting-down"];
/// Live and not already on its way out: what may be adopted or terminated.
const NOT_TERMINATING: &[&str] = &["pending", "running", "stopping", "stopped"];

/// Our view of an EC2 instance; the price comes from `price_of(ct, type, zone)`.
fn to_instance(
    i: &aws_sdk_ec2::types::Instance,
    price_of: impl Fn(&str, &str, &str) -> Option<f64>,
) -> Option<Instance> {
    let id = i.instance_id()?.to_owned();
    let instance_type = i.instance_type()?.as_str().to_owned();
    let zone = i
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or_default()
        .to_owned();
    let reservation = i.capacity_reservation_id().map(str::to_owned);
    // The instance's lifecycle says which kind of reservation it runs in
    // (as Karpenter reads it): `capacity-block`, or
    // `interruptible-capacity-reservation` for an interruptible one.
    let lifecycle = i.instance_lifecycle();
    let reservation_type = reservation.as_ref().map(|_| {
        if lifecycle == Some(&InstanceLifecycleType::CapacityBlock) {
            crate::cloud::ReservationType::CapacityBlock
        } else {
            crate::cloud::ReservationType::Default
        }
    });
    let interruptible = reservation.is_some()
        && lifecycle == Some(&InstanceLifecycleType::InterruptibleCapacityReservation);
    let capacity_type = if i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
        labels::CAPACITY_TYPE_SPOT
    } else if reservation.is_some() {
        labels::CAPACITY_TYPE_RESERVED
    } else {
        labels::CAPACITY_TYPE_ON_DEMAND
    };
    let state = i
        .state()
        .and_then(|s| s.name())
        .and_then(|n| InstanceState::parse(n.as_str()))
        .unwrap_or(InstanceState::Pending);
    let launched_at = i
        .launch_time()
        .and_then(|t| Timestamp::new(t.secs(), i32::try_from(t.subsec_nanos()).unwrap_or(0)).ok())
        .unwrap_or_else(Timestamp::now);
    let tag = |k: &str| {
        i.tags()
            .iter()
            .find(|t| t.key() == Some(k))
            .and_then(|t| t.value())
            .map(str::to_owned)
    };
    Some(Instance {
        provider_id: format!("aws:///{zone}/{id}"),
        price: price_of(capacity_type, &instance_type, &zone).unwrap_or(0.0),
        id,
        instance_type,
        zone,
        capacity_type: capacity_type.to_owned(),
        state,
        launched_at,
        claim_id: tag(tags::NODECLAIM),
        pool: tag(tags::NODEPOOL),
        node_class: tag(tags::NODECLASS),
        image_id: i.image_id().map(str::to_owned),
        subnet_id: i.subnet_id().map(str::to_owned),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect(),
        capacity_reservation_id: reservation,
        capacity_reservation_type: reservation_type,
        capacity_reservation_interruptible: interruptible,
    })
}

fn catalog_price(catalog: Option<&CloudCatalog>, ct: &str, ty: &str, zone: &str) -> Option<f64> {
    catalog?
        .offerings
        .iter()
        .find(|o| o.capacity_type == ct && o.instance_type == ty && o.zone == zone)
        .map(|o| o.price)
}

impl<P: PriceSource> Cloud for Ec2Cloud<P> {
    async fn catalog(&self) -> Result<Arc<CloudCatalog>, CloudError> {
        self.refresh_catalog().await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        self.launch_claim(request).await
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        if instance_ids.is_empty() {
            return Ok(());
        }
        let mut ours = Vec::new();
        for chunk in instance_ids.chunks(200) {
            let found = self
                .describe_ours(
                    vec![
                        Filter::builder()
                            .name("instance-id")
                            .set_values(Some(chunk.to_vec()))
                            .build(),
                    ],
                    NOT_TERMINATING,
                )
                .await?;
            ours.extend(
                found
                    .iter()
                    .filter_map(|i| i.instance_id().map(str::to_owned)),
            );
        }
        let skipped: Vec<&String> = instance_ids
            .iter()
            .filter(|id| !ours.contains(id))
            .collect();
        if !skipped.is_empty() {
            debug!(
                ?skipped,
                "not terminating instances that are gone or not ours"
            );
        }
        for chunk in ours.chunks(500) {
            self.count();
            match self
                .ec2
                .terminate_instances()
                .set_instance_ids(Some(chunk.to_vec()))
                .send()
                .await
            {
                Ok(_) => info!(instances = ?chunk, "terminated instance(s)"),
                Err(e) => {
                    let e = ApiError::from_sdk("TerminateInstances", e);
                    if !e.is("InvalidInstanceID.NotFound") {
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(())
    }

    /// The AMIs the class's selectors name now for every architecture and
    /// accelerator, every subnet and security group they match (cached for
    /// the network refresh interval). A family the launch path does not
    /// support, or AMI terms it cannot resolve, give no image ids (not
    /// compared).
    async fn resolved_class(
        &self,
        class: &NodeClass,
    ) -> Result<crate::model::ResolvedClass, CloudError> {
        self.resolve_class(class).await
    }

    async fn launch_templates(&self) -> Result<Vec<crate::model::LaunchTemplate>, CloudError> {
        self.list_templates(None).await
    }

    async fn delete_launch_template(
        &self,
        template: &crate::model::LaunchTemplate,
    ) -> Result<bool, CloudError> {
        self.delete_template(template).await
    }

    async fn capacity_reservations(
        &self,
    ) -> Result<Vec<crate::cloud::CapacityReservation>, CloudError> {
        self.list_capacity_reservations().await
    }

    async fn instance_health(&self) -> Result<Vec<crate::model::InstanceHealth>, CloudError> {
        self.list_instance_health().await
    }

    /// Prices come from the cached catalog (0 when this process has not loaded it yet).
    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        let catalog = self.cached_catalog().await;
        let found = self.describe_ours(Vec::new(), LIVE_STATES).await?;
        Ok(found
            .iter()
            .filter_map(|i| {
                to_instance(i, |ct, ty, z| catalog_price(catalog.as_deref(), ct, ty, z))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{Instance as Ec2Instance, InstanceStateName, Placement};

    use super::*;
    use crate::cloud::ReservationType;

    fn ec2_instance(reservation: Option<&str>, lifecycle: Option<&str>) -> Ec2Instance {
        Ec2Instance::builder()
            .instance_id("i-0123456789abcdef0")
            .instance_type(aws_sdk_ec2::types::InstanceType::from("p5.48xlarge"))
            .placement(Placement::builder().availability_zone("us-east-1a").build())
            .state(
                aws_sdk_ec2::types::InstanceState::builder()
                    .name(InstanceStateName::Running)
                    .build(),
            )
            .set_capacity_reservation_id(reservation.map(str::to_owned))
            .set_instance_lifecycle(lifecycle.map(InstanceLifecycleType::from))
            .build()
    }

    /// An instance adopted after a state loss is known only from
    /// DescribeInstances: its lifecycle says the reservation's kind, as
    /// Karpenter's `NewInstance` reads it (aws/karpenter-provider-aws
    /// pkg/providers/instance/types.go), so a capacity-block node is still
    /// drained before its block ends.
    #[test]
    fn an_instance_says_its_reservation_kind_through_its_lifecycle() {
        let of = |r, l| to_instance(&ec2_instance(r, l), |_, _, _| None).expect("instance");
        let block = of(Some("cr-0000000000000000a"), Some("capacity-block"));
        assert_eq!(block.capacity_type, labels::CAPACITY_TYPE_RESERVED);
        assert_eq!(
            block.capacity_reservation_type,
            Some(ReservationType::CapacityBlock)
        );
        assert!(!block.capacity_reservation_interruptible);
        let odcr = of(Some("cr-0000000000000000b"), None);
        assert_eq!(
            odcr.capacity_reservation_type,
            Some(ReservationType::Default)
        );
        assert!(!odcr.capacity_reservation_interruptible);
        let interruptible = of(
            Some("cr-0000000000000000c"),
            Some("interruptible-capacity-reservation"),
        );
        assert_eq!(interruptible.capacity_type, labels::CAPACITY_TYPE_RESERVED);
        assert_eq!(
            interruptible.capacity_reservation_type,
            Some(ReservationType::Default)
        );
        assert!(interruptible.capacity_reservation_interruptible);
        let plain = of(None, None);
        assert_eq!(plain.capacity_type, labels::CAPACITY_TYPE_ON_DEMAND);
        assert_eq!(plain.capacity_reservation_type, None);
        let spot = of(None, Some("spot"));
        assert_eq!(spot.capacity_type, labels::CAPACITY_TYPE_SPOT);
    }
}
