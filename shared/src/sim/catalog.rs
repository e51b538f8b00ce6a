//! The simulator's catalog: real instance facts and zones per region
//! (shipped in `shared/data/sim-catalog.json`), real us-east-1 on-demand
//! prices, other regions' on-demand prices scaled by a documented factor,
//! and simulated spot prices.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cloud::InstanceTypeInfo;
use crate::model::{CloudCatalog, PricedOffering};
use crate::scheduling::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};

const DATA: &str = include_str!("../../data/sim-catalog.json");

/// On-demand price of a region relative to us-east-1. An approximation for
/// regions other than us-east-1 (whose prices are the published ones):
/// the simulator needs plausible, consistent prices, not an invoice.
pub const PRICE_FACTORS: [(&str, f64); 4] = [
    ("us-east-1", 1.0),
    ("us-west-2", 1.0),
    ("eu-west-1", 1.1),
    ("ap-south-1", 1.05),
];

#[derive(Debug, Deserialize)]
struct Data {
    instance_types: Vec<Entry>,
    regions: BTreeMap<String, Region>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(flatten)]
    info: InstanceTypeInfo,
    on_demand_usd_per_hour: f64,
    usage_classes: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Region {
    /// Instance type → the letters of the zones that offer it.
    offerings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("region {region} is not in the simulator's catalog (known: {known})")]
pub struct UnknownRegion {
    pub region: String,
    pub known: String,
}

/// The regions the simulator knows.
pub fn regions() -> Vec<String> {
    serde_json::from_str::<Data>(DATA)
        .map(|d| d.regions.into_keys().collect())
        .unwrap_or_default()
}

/// The catalog of one region.
pub fn catalog(region: &str) -> Result<CloudCatalog, UnknownRegion> {
    let data: Data = serde_json::from_str(DATA).map_err(|e| UnknownRegion {
        region: region.to_owned(),
        known: e.to_string(),
    })?;
    let Some(r) = data.regions.get(region) else {
        return Err(UnknownRegion {
            region: region.to_owned(),
            known: data.regions.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    let factor = PRICE_FACTORS
        .iter()
        .find(|(n, _)| *n == region)
        .map_or(1.1, |(_, f)| *f);
    let mut out = CloudCatalog {
        region: region.to_owned(),
        ..Default::default()
    };
    // Simulated zone ids (a real account maps names to ids its own way):
    // the region's short name and the zone's letter in order, `use1-az1`.
    let short = zone_id_prefix(region);
    for zones in r.offerings.values() {
        for letter in zones.chars() {
            let n = u32::from(letter).saturating_sub(u32::from('a')) + 1;
            out.zone_ids
                .entry(format!("{region}{letter}"))
                .or_insert_with(|| format!("{short}-az{n}"));
        }
    }
    for e in data.instance_types {
        let Some(zones) = r.offerings.get(&e.info.name) else {
            continue;
        };
        let on_demand = round4(e.on_demand_usd_per_hour * factor);
        for letter in zones.chars() {
            let zone = format!("{region}{letter}");
            if e.usage_classes.iter().any(|u| u == CAPACITY_TYPE_ON_DEMAND) {
                out.offerings.push(priced(
                    &e.info.name,
                    &zone,
                    CAPACITY_TYPE_ON_DEMAND,
                    on_demand,
                ));
            }
            if e.usage_classes.iter().any(|u| u == CAPACITY_TYPE_SPOT) {
                out.offerings.push(priced(
                    &e.info.name,
                    &zone,
                    CAPACITY_TYPE_SPOT,
                    spot_price(on_demand, &e.info.name, &zone),
                ));
            }
        }
        out.instance_types.push(e.info);
    }
    Ok(out)
}

/// `us-east-1` → `use1`, `ap-south-1` → `aps1`: the prefix of AWS's zone ids.
fn zone_id_prefix(region: &str) -> String {
    let mut parts = region.split('-');
    let area = parts.next().unwrap_or_default();
    let direction: String = parts.next().unwrap_or_default().chars().take(1).collect();
    let number = parts.next().unwrap_or_default();
    format!("{area}{direction}{number}")
}

fn priced(instance_type: &str, zone: &str, capacity_type: &str, price: f64) -> PricedOffering {
    PricedOffering {
        reservation_ids: Vec::new(),
        instance_type: instance_type.to_owned(),
        zone: zone.to_owned(),
        capacity_type: capacity_type.to_owned(),
        price,
    }
}

/// A simulated spot price: 30–45 % of on-demand, fixed per type and zone
/// (so zones differ, as they do).
pub fn spot_price(on_demand: f64, instance_type: &str, zone: &str) -> f64 {
    let h = fnv1a(format!("{instance_type}/{zone}").as_bytes());
    let share = 0.30 + 0.15 * ((h % 1000) as f64 / 1000.0);
    round4(on_demand * share)
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// FNV-1a: a stable hash (std's changes between releases), so what is
/// derived from names is the same on every build.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ap_south_1_sells_r6gd_xlarge_in_1a() {
        let c = catalog("ap-south-1").expect("known region");
        assert!(
            c.instance_types
                .iter()
                .any(|i| i.name == "r6gd.xlarge" && i.arch == "arm64")
        );
        let od = c
            .offerings
            .iter()
            .find(|o| {
                o.instance_type == "r6gd.xlarge"
                    && o.zone == "ap-south-1a"
                    && o.capacity_type == "on-demand"
            })
            .expect("offered");
        assert!((od.price - round4(0.2304 * 1.05)).abs() < 1e-9);
        for family in [
            "m5.", "c5.", "r5.", "c6g.", "m6g.", "r6g.", "c7g.", "m7i.", "t3.", "g5.",
        ] {
            assert!(
                c.instance_types.iter().any(|i| i.name.starts_with(family)),
                "{family} missing"
            );
        }
    }

    #[test]
    fn spot_is_cheaper_and_varies_by_zone() {
        let c = catalog("us-east-1").expect("known region");
        let spot: Vec<f64> = c
            .offerings
            .iter()
            .filter(|o| o.instance_type == "m5.large" && o.capacity_type == "spot")
            .map(|o| o.price)
            .collect();
        assert!(spot.len() >= 3 && spot.iter().all(|p| *p < 0.096 * 0.46));
        assert!(spot.iter().any(|p| *p != spot[0]));
    }

    #[test]
    fn unknown_region_names_the_known_ones() {
        let e = catalog("mars-1").expect_err("unknown");
        assert!(e.known.contains("ap-south-1"), "{e}");
    }
}
