//! Where instance prices come from.
//!
//! [`PriceSource`] is the seam: [`AwsPrices`] asks the Pricing API for
//! on-demand prices (falling back to the shipped static table when the API
//! fails or returns nothing) and EC2's spot price history for spot prices;
//! [`SeededPrices`] returns fixed prices (tests, the emulator, the
//! simulator). Prices are USD per hour.
//!
//! The static table is `shared/data/on-demand-prices-us-east-1.csv`, compiled
//! in. It holds us-east-1 only; for any other region the us-east-1 price of
//! a type is used as an estimate (other regions are typically 0-30 % dearer,
//! so relative order — what the packer needs — mostly holds), and the catalog
//! says so in the log. A type absent from every source gets no on-demand
//! offering, as in Karpenter.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_pricing::types::{Filter, FilterType};
use tracing::{debug, warn};

use super::{ApiError, ClientOptions};
use crate::ports::CloudError;

/// Instance type → USD per hour.
pub type OnDemandPrices = HashMap<String, f64>;
/// (instance type, zone) → USD per hour.
pub type SpotPrices = HashMap<(String, String), f64>;

/// Where the on-demand prices of a catalog came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriceOrigin {
    PricingApi,
    /// The shipped table of `table_region` (the Pricing API failed: `reason`).
    StaticTable {
        table_region: String,
        reason: String,
    },
    Seeded,
}

/// On-demand prices and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct OnDemand {
    pub prices: OnDemandPrices,
    pub origin: PriceOrigin,
}

/// A source of prices for one region.
pub trait PriceSource: Send + Sync {
    fn on_demand(&self, region: &str) -> impl Future<Output = Result<OnDemand, CloudError>> + Send;
    fn spot(&self, region: &str) -> impl Future<Output = Result<SpotPrices, CloudError>> + Send;
}

// ------------------------------------------------------------------ static

const US_EAST_1_CSV: &str = include_str!("../../data/on-demand-prices-us-east-1.csv");

/// The on-demand price tables shipped with the crate.
#[derive(Debug, Clone)]
pub struct StaticPrices {
    /// region → type → price.
    tables: HashMap<String, OnDemandPrices>,
}

impl StaticPrices {
    /// The compiled-in tables.
    pub fn embedded() -> StaticPrices {
        let mut tables: HashMap<String, OnDemandPrices> = HashMap::new();
        for line in US_EAST_1_CSV.lines().skip(1) {
            let mut cols = line.split(',');
            let (Some(region), Some(ty), Some(price)) = (cols.next(), cols.next(), cols.next())
            else {
                continue;
            };
            if let Ok(p) = price.trim().parse::<f64>() {
                tables
                    .entry(region.trim().to_owned())
                    .or_default()
                    .insert(ty.trim().to_owned(), p);
            }
        }
        StaticPrices { tables }
    }

    /// The table for `region`, or the us-east-1 one as an estimate; with the
    /// region the table is really for.
    pub fn for_region(&self, region: &str) -> (String, OnDemandPrices) {
        match self.tables.get(region) {
            Some(t) => (region.to_owned(), t.clone()),
            None => (
                "us-east-1".to_owned(),
                self.tables.get("us-east-1").cloned().unwrap_or_default(),
            ),
        }
    }
}

// ---------------------------------------------------------------- seeded

/// Fixed prices, for tests and emulators (moto has no Pricing API and fakes
/// every spot price as 0.00001).
#[derive(Debug, Clone, Default)]
pub struct SeededPrices {
    pub on_demand: OnDemandPrices,
    pub spot: SpotPrices,
}

impl PriceSource for SeededPrices {
    async fn on_demand(&self, _region: &str) -> Result<OnDemand, CloudError> {
        Ok(OnDemand {
            prices: self.on_demand.clone(),
            origin: PriceOrigin::Seeded,
        })
    }

    async fn spot(&self, _region: &str) -> Result<SpotPrices, CloudError> {
        Ok(self.spot.clone())
    }
}

// -------------------------------------------------------------------- AWS

/// The Pricing API (with the static fallback) and EC2 spot price history.
#[derive(Debug, Clone)]
pub struct AwsPrices {
    pricing: aws_sdk_pricing::Client,
    ec2: aws_sdk_ec2::Client,
    /// Parsed on first use: only a failing Pricing API needs it.
    fallback: &'static LazyLock<StaticPrices>,
    /// Pricing API attempts sent, retries included (see [`AttemptCounter`]).
    pricing_attempts: Arc<AtomicU64>,
}

/// Counts the attempts a client sends, retries included: how a test proves
/// the retry budget is bounded by counting, not by timing.
#[derive(Debug)]
struct AttemptCounter(Arc<AtomicU64>);

impl aws_sdk_pricing::config::Intercept for AttemptCounter {
    fn name(&self) -> &'static str {
        "AttemptCounter"
    }

    fn read_before_attempt(
        &self,
        _context: &aws_sdk_pricing::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &aws_sdk_pricing::config::RuntimeComponents,
        _cfg: &mut aws_sdk_pricing::config::ConfigBag,
    ) -> Result<(), aws_sdk_pricing::error::BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The Pricing API has endpoints in a few regions only; the nearest one
/// serves every region's prices.
pub fn pricing_endpoint_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("eu-")
        || region.starts_with("me-")
        || region.starts_with("af-")
        || region.starts_with("il-")
    {
        "eu-central-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else {
        "us-east-1"
    }
}

impl AwsPrices {
    /// Clients from a shared config; the Pricing client gets its endpoint
    /// region and at most two attempts (a failing Pricing API has a fallback,
    /// so there is no point in waiting through the full retry budget).
    pub fn new(config: &aws_config::SdkConfig, region: &str) -> AwsPrices {
        static EMBEDDED: LazyLock<StaticPrices> = LazyLock::new(StaticPrices::embedded);
        let options = ClientOptions {
            max_attempts: 2,
            operation_timeout: Duration::from_secs(60),
            ..ClientOptions::default()
        };
        let pricing_attempts = Arc::new(AtomicU64::new(0));
        let pricing_conf = aws_sdk_pricing::config::Builder::from(config)
            .region(aws_config::Region::new(pricing_endpoint_region(region)))
            .retry_config(options.retry_config())
            .timeout_config(options.timeout_config())
            .interceptor(AttemptCounter(Arc::clone(&pricing_attempts)))
            .build();
        AwsPrices {
            pricing: aws_sdk_pricing::Client::from_conf(pricing_conf),
            ec2: aws_sdk_ec2::Client::new(config),
            fallback: &EMBEDDED,
            pricing_attempts,
        }
    }

    /// Pricing API attempts sent so far, retries included.
    pub fn pricing_attempts(&self) -> u64 {
        self.pricing_attempts.load(Ordering::Relaxed)
    }

    async fn pricing_api(&self, region: &str) -> Result<OnDemandPrices, ApiError> {
        let term = |field: &str, value: &str| {
            Filter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .map_err(|e| ApiError::invalid_request("GetProducts", e.to_string()))
        };
        let mut req = self
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .format_version("aws_v1");
        for (field, value) in [
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("capacitystatus", "Used"),
            ("preInstalledSw", "NA"),
            ("regionCode", region),
        ] {
            req = req.filters(term(field, value)?);
        }
        let mut pages = req.into_paginator().send();
        let mut prices = OnDemandPrices::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| ApiError::from_sdk("GetProducts", e))?;
            for doc in page.price_list() {
                if let Some((ty, price)) = parse_price_document(doc) {
                    // Several SKUs can match (license models): keep the cheapest.
                    prices
                        .entry(ty)
                        .and_modify(|p: &mut f64| *p = p.min(price))
                        .or_insert(price);
                }
            }
        }
        Ok(prices)
    }
}

/// One Pricing API product document → (instance type, on-demand USD/hour).
pub fn parse_price_document(doc: &str) -> Option<(String, f64)> {
    let v: serde_json::Value = serde_json::from_str(doc).ok()?;
    let ty = v
        .pointer("/product/attributes/instanceType")?
        .as_str()?
        .to_owned();
    let terms = v.pointer("/terms/OnDemand")?.as_object()?;
    let price = terms
        .values()
        .filter_map(|t| t.get("priceDimensions")?.as_object())
        .flat_map(|dims| dims.values())
        .filter_map(|d| {
            d.pointer("/pricePerUnit/USD")?
                .as_str()?
                .parse::<f64>()
                .ok()
        })
        .find(|p| *p > 0.0)?;
    Some((ty, price))
}

impl PriceSource for AwsPrices {
    async fn on_demand(&self, region: &str) -> Result<OnDemand, CloudError> {
        let reason = match self.pricing_api(region).await {
            Ok(prices) if !prices.is_empty() => {
                debug!(
                    region,
                    types = prices.len(),
                    "on-demand prices from the Pricing API"
                );
                return Ok(OnDemand {
                    prices,
                    origin: PriceOrigin::PricingApi,
                });
            }
            Ok(_) => "the Pricing API returned no prices".to_owned(),
            Err(e) => e.to_string(),
        };
        let (table_region, prices) = self.fallback.for_region(region);
        warn!(region, %reason, table = %table_region, types = prices.len(), "Pricing API unavailable; using the static on-demand price table");
        Ok(OnDemand {
            prices,
            origin: PriceOrigin::StaticTable {
                table_region,
                reason,
            },
        })
    }

    async fn spot(&self, _region: &str) -> Result<SpotPrices, CloudError> {
        // StartTime = now returns the price in effect now for every type × zone.
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .start_time(DateTime::from(SystemTime::now()))
            .into_paginator()
            .send();
        let mut latest: HashMap<(String, String), (i64, f64)> = HashMap::new();
        while let Some(page) = pages.next().await {
            let page = page
                .map_err(|e| CloudError::from(ApiError::from_sdk("DescribeSpotPriceHistory", e)))?;
            for sp in page.spot_price_history() {
                let (Some(ty), Some(zone), Some(price)) =
                    (sp.instance_type(), sp.availability_zone(), sp.spot_price())
                else {
                    continue;
                };
                let Ok(price) = price.parse::<f64>() else {
                    continue;
                };
                let at = sp.timestamp().map_or(0, |t| t.secs());
                let key = (ty.as_str().to_owned(), zone.to_owned());
                match latest.get(&key) {
                    Some((seen, _)) if *seen >= at => {}
                    _ => {
                        latest.insert(key, (at, price));
                    }
                }
            }
        }
        Ok(latest.into_iter().map(|(k, (_, p))| (k, p)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table_is_embedded() {
        let s = StaticPrices::embedded();
        let (region, t) = s.for_region("us-east-1");
        assert_eq!(region, "us-east-1");
        assert_eq!(t.get("m5.large"), Some(&0.096));
        assert!(t.len() > 1000);
        let (region, t) = s.for_region("ap-south-1");
        assert_eq!(
            region, "us-east-1",
            "other regions fall back to the us-east-1 table"
        );
        assert!(t.contains_key("r6gd.xlarge"));
    }

    #[test]
    fn pricing_endpoints() {
        assert_eq!(pricing_endpoint_region("ap-south-1"), "ap-south-1");
        assert_eq!(pricing_endpoint_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_endpoint_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_endpoint_region("us-west-2"), "us-east-1");
    }

    #[test]
    fn parses_a_product_document() {
        let doc = r#"{"product":{"productFamily":"Compute Instance","attributes":{"instanceType":"m5.large","regionCode":"us-east-1"}},
            "terms":{"OnDemand":{"X.JRTCKXETXF":{"priceDimensions":{"X.JRTCKXETXF.6YS6EN2CT7":{"unit":"Hrs","pricePerUnit":{"USD":"0.0960000000"}}}}}}}"#;
        assert_eq!(parse_price_document(doc), Some(("m5.large".into(), 0.096)));
        assert_eq!(parse_price_document("{}"), None);
    }
}
