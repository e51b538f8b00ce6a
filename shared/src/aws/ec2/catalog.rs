//! The region's catalog: DescribeInstanceTypes + DescribeInstanceTypeOfferings
//! turned into [`InstanceTypeInfo`]s, then joined with prices into a
//! [`CloudCatalog`]. The joining is pure and unit-tested.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{
    ArchitectureType, EbsOptimizedSupport, EphemeralNvmeSupport, Filter,
    InstanceTypeInfo as Ec2TypeInfo, LocationType, NitroEnclavesSupport, UsageClassType,
    VirtualizationType,
};

use super::super::ApiError;
use super::super::prices::{OnDemandPrices, SpotPrices};
use crate::cloud::InstanceTypeInfo;
use crate::model::{CloudCatalog, PricedOffering};
use crate::scheduling::labels;

/// One instance type as EC2 describes it, with how it may be bought and where.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeFacts {
    pub info: InstanceTypeInfo,
    pub on_demand: bool,
    pub spot: bool,
    /// Zones of the region that offer it, sorted.
    pub zones: Vec<String>,
}

/// EC2's description of a type → our facts; `None` for types we cannot run
/// (not HVM, not x86_64/arm64, e.g. Mac instances).
pub fn facts_of(t: &Ec2TypeInfo) -> Option<(InstanceTypeInfo, bool, bool)> {
    let name = t.instance_type()?.as_str().to_owned();
    if !t
        .supported_virtualization_types()
        .contains(&VirtualizationType::Hvm)
    {
        return None;
    }
    let archs = t.processor_info()?.supported_architectures();
    let arch = if archs.contains(&ArchitectureType::X8664) {
        "amd64"
    } else if archs.contains(&ArchitectureType::Arm64) {
        "arm64"
    } else {
        return None;
    };
    let vcpu = u32::try_from(t.v_cpu_info()?.default_v_cpus()?).ok()?;
    let memory_mib = u64::try_from(t.memory_info()?.size_in_mib()?).ok()?;
    let (mut gpu_count, mut gpu_name, mut gpu_manufacturer) = (0u32, None, None);
    let mut gpu_memory_mib = None;
    if let Some(g) = t.gpu_info().and_then(|g| g.gpus().first()) {
        gpu_memory_mib = g
            .memory_info()
            .and_then(|m| m.size_in_mib())
            .map(|m| m.max(0) as u64);
        gpu_count = t
            .gpu_info()
            .map_or(0, |gi| {
                gi.gpus().iter().filter_map(|d| d.count()).sum::<i32>()
            })
            .max(0) as u32;
        gpu_name = g.name().map(str::to_owned);
        gpu_manufacturer = g.manufacturer().map(str::to_owned);
    } else if let Some(n) = t.neuron_info().and_then(|n| n.neuron_devices().first()) {
        gpu_count = t
            .neuron_info()
            .map_or(0, |ni| {
                ni.neuron_devices()
                    .iter()
                    .filter_map(|d| d.count())
                    .sum::<i32>()
            })
            .max(0) as u32;
        gpu_name = n.name().map(str::to_owned);
        gpu_manufacturer = Some("AWS".to_owned());
    } else if let Some(a) = t
        .inference_accelerator_info()
        .and_then(|i| i.accelerators().first())
    {
        gpu_count = t
            .inference_accelerator_info()
            .map_or(0, |ii| {
                ii.accelerators()
                    .iter()
                    .filter_map(|d| d.count())
                    .sum::<i32>()
            })
            .max(0) as u32;
        gpu_name = a.name().map(str::to_owned);
        gpu_manufacturer = Some(a.manufacturer().unwrap_or("AWS").to_owned());
    }
    let local_nvme_gb = t
        .instance_storage_info()
        .filter(|s| {
            s.nvme_support()
                .is_some_and(|n| *n != EphemeralNvmeSupport::Unsupported)
        })
        .and_then(|s| s.total_size_in_gb())
        .map_or(0, |g| g.max(0) as u64);
    let net = t.network_info();
    // The VPC CNI uses the default network card only, so its ENIs bound the pods.
    let max_enis = net
        .and_then(|n| {
            let default = n.default_network_card_index().unwrap_or(0);
            n.network_cards()
                .iter()
                .find(|c| c.network_card_index() == Some(default))
                .and_then(|c| c.maximum_network_interfaces())
        })
        .or_else(|| net.and_then(|n| n.maximum_network_interfaces()))
        .map_or(0, |e| e.max(0) as u32);
    let ipv4_per_eni = net
        .and_then(|n| n.ipv4_addresses_per_interface())
        .map_or(0, |i| i.max(0) as u32);
    let bandwidth: f64 = net.map_or(0.0, |n| {
        n.network_cards()
            .iter()
            .filter_map(|c| c.baseline_bandwidth_in_gbps())
            .sum()
    });
    let info = InstanceTypeInfo {
        name,
        vcpu,
        memory_mib,
        arch: arch.to_owned(),
        hypervisor: t.hypervisor().map(|h| h.as_str().to_owned()),
        bare_metal: t.bare_metal().unwrap_or(false),
        gpu_count,
        gpu_name,
        gpu_manufacturer,
        local_nvme_gb,
        max_enis,
        ipv4_per_eni,
        network_bandwidth_mbps: (bandwidth > 0.0).then(|| (bandwidth * 1000.0).round() as u64),
        cpu_manufacturer: t
            .processor_info()
            .and_then(|p| p.manufacturer())
            .map(str::to_owned),
        sustained_clock_mhz: t
            .processor_info()
            .and_then(|p| p.sustained_clock_speed_in_ghz())
            .map(|g| (g * 1000.0).round() as u32),
        ebs_bandwidth_mbps: t
            .ebs_info()
            .filter(|e| e.ebs_optimized_support() == Some(&EbsOptimizedSupport::Default))
            .and_then(|e| e.ebs_optimized_info())
            .and_then(|o| o.maximum_bandwidth_in_mbps())
            .map(|b| b.max(0) as u64),
        gpu_memory_mib,
        encryption_in_transit: net.and_then(|n| n.encryption_in_transit_supported()),
        neuron_cores: t
            .neuron_info()
            .and_then(|n| n.neuron_devices().first())
            .map_or(0, |d| {
                let cores = d.core_info().and_then(|c| c.count()).unwrap_or(0);
                (d.count().unwrap_or(0) * cores).max(0) as u32
            }),
        efa_interfaces: net
            .and_then(|n| n.efa_info())
            .and_then(|e| e.maximum_efa_interfaces())
            .map_or(0, |e| e.max(0) as u32),
        nitro_enclaves: t
            .nitro_enclaves_support()
            .map(|n| *n == NitroEnclavesSupport::Supported),
    };
    let classes = t.supported_usage_classes();
    Some((
        info,
        classes.contains(&UsageClassType::OnDemand),
        classes.contains(&UsageClassType::Spot),
    ))
}

/// Lists the region's HVM x86_64/arm64 instance types and the zones that offer each.
pub(crate) async fn fetch_types(
    ec2: &aws_sdk_ec2::Client,
    calls: &std::sync::atomic::AtomicU64,
) -> Result<Vec<TypeFacts>, ApiError> {
    use std::sync::atomic::Ordering::Relaxed;
    let types = async {
        let mut pages = ec2
            .describe_instance_types()
            .filters(
                Filter::builder()
                    .name("supported-virtualization-type")
                    .values("hvm")
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("processor-info.supported-architecture")
                    .values("x86_64")
                    .values("arm64")
                    .build(),
            )
            .max_results(100)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            calls.fetch_add(1, Relaxed);
            let page = page.map_err(|e| ApiError::from_sdk("DescribeInstanceTypes", e))?;
            out.extend(page.instance_types().iter().filter_map(facts_of));
        }
        Ok::<_, ApiError>(out)
    };
    let offerings = async {
        let mut pages = ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .max_results(1000)
            .into_paginator()
            .send();
        let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        while let Some(page) = pages.next().await {
            calls.fetch_add(1, Relaxed);
            let page = page.map_err(|e| ApiError::from_sdk("DescribeInstanceTypeOfferings", e))?;
            for o in page.instance_type_offerings() {
                if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                    zones
                        .entry(t.as_str().to_owned())
                        .or_default()
                        .insert(zone.to_owned());
                }
            }
        }
        Ok::<_, ApiError>(zones)
    };
    let (types, mut zones) = futures_util::future::try_join(types, offerings).await?;
    let mut facts: Vec<TypeFacts> = types
        .into_iter()
        .filter_map(|(info, on_demand, spot)| {
            let zones: Vec<String> = zones.remove(&info.name)?.into_iter().collect();
            Some(TypeFacts {
                info,
                on_demand,
                spot,
                zones,
            })
        })
        .collect();
    facts.sort_by(|a, b| a.info.name.cmp(&b.info.name));
    Ok(facts)
}

/// Joins types, zones and prices. A type's offering exists where the zone
/// offers it, its usage classes allow the capacity type and a price is known;
/// types left without any offering are not in the catalog.
pub fn assemble(
    region: &str,
    types: &[TypeFacts],
    on_demand: &OnDemandPrices,
    spot: &SpotPrices,
) -> CloudCatalog {
    let mut catalog = CloudCatalog {
        region: region.to_owned(),
        ..CloudCatalog::default()
    };
    for t in types {
        let before = catalog.offerings.len();
        for zone in &t.zones {
            if t.on_demand
                && let Some(price) = on_demand.get(&t.info.name)
            {
                catalog.offerings.push(PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: t.info.name.clone(),
                    zone: zone.clone(),
                    capacity_type: labels::CAPACITY_TYPE_ON_DEMAND.to_owned(),
                    price: *price,
                });
            }
            if t.spot
                && let Some(price) = spot.get(&(t.info.name.clone(), zone.clone()))
            {
                catalog.offerings.push(PricedOffering {
                    reservation_ids: Vec::new(),
                    instance_type: t.info.name.clone(),
                    zone: zone.clone(),
                    capacity_type: labels::CAPACITY_TYPE_SPOT.to_owned(),
                    price: *price,
                });
            }
        }
        if catalog.offerings.len() > before {
            catalog.instance_types.push(t.info.clone());
        }
    }
    catalog
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        GpuDeviceInfo, GpuInfo, InstanceStorageInfo, InstanceType as Ec2Type, MemoryInfo,
        NetworkCardInfo, NetworkInfo, ProcessorInfo, VCpuInfo,
    };

    fn ec2_type(
        name: &str,
        arch: ArchitectureType,
        vcpu: i32,
        mib: i64,
    ) -> aws_sdk_ec2::types::builders::InstanceTypeInfoBuilder {
        Ec2TypeInfo::builder()
            .instance_type(Ec2Type::from(name))
            .supported_virtualization_types(VirtualizationType::Hvm)
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(arch)
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(vcpu).build())
            .memory_info(MemoryInfo::builder().size_in_mib(mib).build())
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
    }

    #[test]
    fn reads_ec2_facts() {
        let t = ec2_type("p4d.24xlarge", ArchitectureType::X8664, 96, 1_179_648)
            .hypervisor(aws_sdk_ec2::types::InstanceTypeHypervisor::Nitro)
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .count(8)
                            .name("A100")
                            .manufacturer("NVIDIA")
                            .build(),
                    )
                    .build(),
            )
            .instance_storage_info(
                InstanceStorageInfo::builder()
                    .total_size_in_gb(8000)
                    .nvme_support(EphemeralNvmeSupport::Required)
                    .build(),
            )
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(60)
                    .ipv4_addresses_per_interface(50)
                    .default_network_card_index(0)
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(15)
                            .baseline_bandwidth_in_gbps(100.0)
                            .build(),
                    )
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(1)
                            .maximum_network_interfaces(15)
                            .baseline_bandwidth_in_gbps(100.0)
                            .build(),
                    )
                    .build(),
            )
            .build();
        let (info, od, spot) = facts_of(&t).expect("runnable");
        assert!(od && spot);
        assert_eq!(info.arch, "amd64");
        assert_eq!(info.gpu_count, 8);
        assert_eq!(info.gpu_manufacturer.as_deref(), Some("NVIDIA"));
        assert_eq!(info.local_nvme_gb, 8000);
        assert_eq!(
            info.max_enis, 15,
            "the default card's ENIs, as the VPC CNI uses"
        );
        assert_eq!(info.max_pods(&Default::default()), 737);
        assert_eq!(info.network_bandwidth_mbps, Some(200_000));
        assert_eq!(info.hypervisor.as_deref(), Some("nitro"));
        let mac = ec2_type("mac1.metal", ArchitectureType::X8664Mac, 12, 32768).build();
        assert!(facts_of(&mac).is_none());
        let arm = ec2_type("r6gd.xlarge", ArchitectureType::Arm64, 4, 32768).build();
        assert_eq!(facts_of(&arm).map(|f| f.0.arch), Some("arm64".to_owned()));
    }

    #[test]
    fn assembles_priced_offerings_only() {
        let info = |name: &str| InstanceTypeInfo {
            name: name.into(),
            vcpu: 2,
            memory_mib: 8192,
            arch: "amd64".into(),
            hypervisor: None,
            bare_metal: false,
            gpu_count: 0,
            gpu_name: None,
            gpu_manufacturer: None,
            local_nvme_gb: 0,
            max_enis: 3,
            ipv4_per_eni: 10,
            network_bandwidth_mbps: None,
            ..Default::default()
        };
        let types = vec![
            TypeFacts {
                info: info("m5.large"),
                on_demand: true,
                spot: true,
                zones: vec!["z-a".into(), "z-b".into()],
            },
            TypeFacts {
                info: info("odonly.large"),
                on_demand: true,
                spot: false,
                zones: vec!["z-a".into()],
            },
            TypeFacts {
                info: info("unpriced.large"),
                on_demand: true,
                spot: true,
                zones: vec!["z-a".into()],
            },
        ];
        let od: OnDemandPrices = [
            ("m5.large".to_owned(), 0.096),
            ("odonly.large".to_owned(), 0.5),
        ]
        .into();
        let spot: SpotPrices = [
            (("m5.large".to_owned(), "z-a".to_owned()), 0.03),
            (("odonly.large".to_owned(), "z-a".to_owned()), 0.1),
        ]
        .into();
        let c = assemble("r", &types, &od, &spot);
        let names: Vec<&str> = c.instance_types.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["m5.large", "odonly.large"]);
        let keys: Vec<String> = c
            .offerings
            .iter()
            .map(|o| format!("{}:{}:{}", o.capacity_type, o.instance_type, o.zone))
            .collect();
        assert_eq!(
            keys,
            [
                "on-demand:m5.large:z-a",
                "spot:m5.large:z-a",
                "on-demand:m5.large:z-b",
                "on-demand:odonly.large:z-a"
            ]
        );
    }
}
