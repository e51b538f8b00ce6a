//! `nodewright catalog`: the instance types a NodePool allows in a region,
//! with their capacity, what EKS leaves allocatable, and the price of each
//! zone's spot and on-demand offering — read through the same `Ec2Cloud`
//! the functions use, so what it prints is what the provisioner sees.
//!
//! The NodePool comes from a file (`-f`, a Karpenter `NodePool` manifest
//! or a bare spec), from the config table (`--nodepool NAME`), or is an
//! open pool (every type).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use nodewright::aws::prices::PriceOrigin;
use nodewright::aws::{ClientOptions, DynamoStore, DynamoTables, Ec2Cloud, Ec2CloudSettings};
use nodewright::config::{NodePool, NodePoolSpec};
use nodewright::ports::{Cloud, Store};
use nodewright::provisioning::plan;
use nodewright::resources::{MIB, format_cpu};
use nodewright::scheduling::labels;
use serde_json::json;

#[derive(Args)]
pub struct CatalogArgs {
    /// Read the NodePool of this name from the config table.
    #[arg(long, conflicts_with = "file")]
    nodepool: Option<String>,
    /// Read the NodePool from a YAML or JSON file (a NodePool manifest or its spec).
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    #[command(flatten)]
    target: crate::target::Target,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CatalogArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

/// A NodePool from a manifest or a bare spec.
fn pool_from_file(path: &PathBuf) -> anyhow::Result<NodePool> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: serde_json::Value = serde_norway::from_str(&text)
        .with_context(|| format!("{}: not YAML or JSON", path.display()))?;
    let (name, spec) = match doc.get("spec") {
        Some(spec) if doc.get("kind").is_some() || doc.get("metadata").is_some() => {
            if let Some(kind) = doc.get("kind").and_then(|k| k.as_str())
                && kind != "NodePool"
            {
                bail!("{}: kind {kind:?} is not a NodePool", path.display());
            }
            let name = doc
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or("default")
                .to_owned();
            (name, spec.clone())
        }
        _ => (
            path.file_stem().map_or_else(
                || "default".to_owned(),
                |s| s.to_string_lossy().into_owned(),
            ),
            doc,
        ),
    };
    let spec: NodePoolSpec = serde_json::from_value(spec)
        .with_context(|| format!("{}: nodepool/{name}: spec", path.display()))?;
    Ok(NodePool::from_spec(&name, &spec)?)
}

/// The stored NodePool as the functions read it (its NodeClass's kubelet merged in).
async fn pool_from_store(
    config: &aws_config::SdkConfig,
    tables: DynamoTables,
    name: &str,
) -> anyhow::Result<NodePool> {
    let table = tables.config.clone();
    let store = DynamoStore::new(config, tables);
    let items = store
        .config_items()
        .await
        .with_context(|| format!("reading the config table {table}"))?;
    let resolved = nodewright::config::resolve_items(&items);
    if let Some(pool) = resolved.set.node_pools.into_iter().find(|p| p.name == name) {
        return Ok(pool);
    }
    let item = format!("nodepool/{name}");
    if let Some(e) = resolved
        .errors
        .iter()
        .chain(&resolved.not_ready)
        .find(|e| e.item == item)
    {
        bail!("{e}");
    }
    bail!("no nodepool {name:?} in the config table {table}")
}

/// One row of the output.
struct Row {
    name: String,
    vcpu: u32,
    memory_mib: u64,
    alloc_cpu: i64,
    alloc_memory: i64,
    max_pods: i64,
    arch: String,
    /// zone → (spot, on-demand)
    zones: BTreeMap<String, (Option<f64>, Option<f64>)>,
    cheapest: f64,
}

async fn run_async(args: CatalogArgs) -> anyhow::Result<()> {
    let options = ClientOptions {
        region: args.target.region.clone(),
        ..ClientOptions::default()
    };
    let config = nodewright::aws::sdk_config(&options).await;
    let pool = match (&args.nodepool, &args.file) {
        (Some(name), _) => pool_from_store(&config, args.target.tables(), name).await?,
        (None, Some(path)) => pool_from_file(path)?,
        (None, None) => NodePool::open("all"),
    };
    let cluster = args.target.cluster_name.clone().unwrap_or_default();
    let cloud = Ec2Cloud::new(&config, Ec2CloudSettings::new(cluster))?;
    let catalog = cloud
        .catalog()
        .await
        .context("reading the instance-type catalog")?;
    let origin = cloud.price_origin().await;

    let infos: BTreeMap<&str, &nodewright::cloud::InstanceTypeInfo> = catalog
        .instance_types
        .iter()
        .map(|i| (i.name.as_str(), i))
        .collect();
    if let Some(e) = plan::kubelet_resolution_error(&pool, &catalog) {
        bail!("{e}");
    }
    let mut rows = Vec::new();
    for it in plan::instance_types(&pool, &catalog, &[]) {
        let Some(info) = infos.get(it.name.as_str()) else {
            continue;
        };
        let mut zones: BTreeMap<String, (Option<f64>, Option<f64>)> = BTreeMap::new();
        for o in it
            .offerings
            .iter()
            .filter(|o| o.allowed_by(&pool.requirements))
        {
            let e = zones.entry(o.zone.clone()).or_default();
            let slot = if o.capacity_type == labels::CAPACITY_TYPE_SPOT {
                &mut e.0
            } else {
                &mut e.1
            };
            *slot = Some(slot.map_or(o.price, |p: f64| p.min(o.price)));
        }
        let Some(cheapest) = zones
            .values()
            .flat_map(|(s, d)| [*s, *d])
            .flatten()
            .min_by(f64::total_cmp)
        else {
            continue;
        };
        let alloc = it.allocatable();
        rows.push(Row {
            name: it.name.clone(),
            vcpu: info.vcpu,
            memory_mib: info.memory_mib,
            alloc_cpu: alloc.cpu_millis,
            alloc_memory: alloc.memory_bytes,
            max_pods: info
                .resolve_kubelet(&pool.kubelet)
                .map_or(0, |r| info.max_pods(&r.config)),
            arch: info.arch.clone(),
            zones,
            cheapest,
        });
    }
    rows.sort_by(|a, b| {
        a.cheapest
            .total_cmp(&b.cheapest)
            .then_with(|| a.name.cmp(&b.name))
    });
    let price_source = match &origin {
        Some(PriceOrigin::PricingApi) => "Pricing API".to_owned(),
        Some(PriceOrigin::StaticTable { table_region, .. }) => {
            format!("static table ({table_region})")
        }
        Some(PriceOrigin::Seeded) => "seeded".to_owned(),
        None => "unknown".to_owned(),
    };

    if args.json {
        let types: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "vcpu": r.vcpu,
                    "memory_mib": r.memory_mib,
                    "allocatable": {"cpu_millis": r.alloc_cpu, "memory_bytes": r.alloc_memory, "pods": r.max_pods},
                    "max_pods": r.max_pods,
                    "arch": r.arch,
                    "zones": r.zones.iter().map(|(z, (s, d))| (z.clone(), json!({"spot": s, "on_demand": d}))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect();
        let out = json!({
            "region": catalog.region,
            "nodepool": pool.name,
            "on_demand_prices": price_source,
            "instance_types": types,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    let zones: BTreeSet<&String> = rows.iter().flat_map(|r| r.zones.keys()).collect();
    println!(
        "{} instance type(s) allowed by nodepool {} in {} (on-demand prices: {price_source}; USD/hour, spot/on-demand per zone)",
        rows.len(),
        pool.name,
        catalog.region
    );
    let mut header = format!(
        "{:<22} {:>5} {:>9} {:>10} {:>10} {:>5} {:<6}",
        "TYPE", "VCPU", "MEMORY", "ALLOC CPU", "ALLOC MEM", "PODS", "ARCH"
    );
    for z in &zones {
        header.push_str(&format!("  {z:>21}"));
    }
    println!("{header}");
    let price = |p: Option<f64>| match p {
        None => "-".to_owned(),
        Some(p) if p < 0.01 => format!("{p:.5}"),
        Some(p) => format!("{p:.4}"),
    };
    for r in &rows {
        let mut line = format!(
            "{:<22} {:>5} {:>9} {:>10} {:>10} {:>5} {:<6}",
            r.name,
            r.vcpu,
            format!("{:.1}Gi", r.memory_mib as f64 / 1024.0),
            format_cpu(r.alloc_cpu),
            format!("{:.1}Gi", r.alloc_memory as f64 / (1024.0 * MIB as f64)),
            r.max_pods,
            r.arch
        );
        for z in &zones {
            let cell = match r.zones.get(*z) {
                Some((s, d)) => format!("{}/{}", price(*s), price(*d)),
                None => "-".to_owned(),
            };
            line.push_str(&format!("  {cell:>21}"));
        }
        println!("{line}");
    }
    Ok(())
}
