//! `nodewright config validate|convert|apply|diff|get|delete|import` and
//! `nodewright init`: configuration as DynamoDB items, handled the way
//! `kubectl` handles Karpenter's objects. `validate` and `convert` are
//! offline; the others (feature `aws`) talk to the config table, and
//! `import --from-cluster` reads Karpenter's objects from a cluster first.
//!
//! Files are multi-document YAML or JSON (`-f FILE`, `-f -` for stdin);
//! every error is reported at once with the file, the item, the field path
//! and the reason; `apply` writes all changes or none, each conditional on
//! the version it read.

use std::io::Read;

use anyhow::Context;
use clap::{Args, Subcommand};
use nodewright::handlers::config_write;

use crate::target::Target;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a file offline: every document, names and references.
    Validate(FileArgs),
    /// Print a file's documents in their v1 form (v1beta1, v1alpha5 converted).
    Convert(FileArgs),
    /// Write a file's documents: all or nothing, refusing if someone else changed an item meanwhile.
    #[cfg(feature = "aws")]
    Apply(ApplyArgs),
    /// Show what `apply` would change.
    #[cfg(feature = "aws")]
    Diff(FileArgs),
    /// List stored items, or print one (`get nodepool default -o yaml`); `get settings` shows the defaults in force.
    #[cfg(feature = "aws")]
    Get(GetArgs),
    /// Delete one item (`delete nodepool NAME`).
    #[cfg(feature = "aws")]
    Delete(DeleteArgs),
    /// Set a static NodePool's replicas (`scale nodepool/NAME --replicas N`).
    #[cfg(feature = "aws")]
    Scale(ScaleArgs),
    /// Read Karpenter's NodePools and EC2NodeClasses (v1, v1beta1) and
    /// v1alpha5 Provisioners and AWSNodeTemplates from a cluster and write
    /// them as items, as `apply` writes a file (`--dry-run`: the difference only).
    #[cfg(feature = "aws")]
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// `nodepool/NAME` (or `NAME`): a NodePool created with `spec.replicas`.
    pool: String,
    /// How many nodes it keeps.
    #[arg(long)]
    replicas: i64,
    #[command(flatten)]
    target: Target,
}

#[cfg(feature = "aws")]
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Read from the cluster the kubeconfig points at (the only source).
    #[arg(long, required = true)]
    from_cluster: bool,
    /// The kubeconfig (default: `KUBECONFIG`, then `~/.kube/config`).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// A context of the kubeconfig other than its current one.
    #[arg(long)]
    context: Option<String>,
    /// Import only this pool (a NodePool or Provisioner name; repeat the
    /// flag for more) and the class it refers to. Default: every pool.
    #[arg(long = "nodepool", value_name = "NAME")]
    pools: Vec<String>,
    /// What nodewright does with the nodes Karpenter launched for an
    /// imported pool (recorded on the pool as the
    /// `nodewright.io/karpenter-nodes` annotation).
    #[arg(long, value_enum, default_value_t = Adopt::None)]
    adopt: Adopt,
    /// Print the difference and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the documents read (YAML) and stop: no table is read or written.
    #[arg(long)]
    print: bool,
    #[command(flatten)]
    target: Target,
}

/// `--adopt`: what happens to Karpenter's nodes of a pool handed over.
#[cfg(feature = "aws")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Adopt {
    /// Leave them to Karpenter, which keeps draining them as it would
    /// (expiry, its own consolidation); nodewright never touches them.
    None,
    /// Replace them within the pool's disruption budgets (as drift): the
    /// disruption function deletes their Nodes a few at a time, Karpenter
    /// (still installed) drains each and terminates its instance, and
    /// nodewright launches for the pods.
    Replace,
}

#[cfg(feature = "aws")]
impl Adopt {
    fn as_str(self) -> &'static str {
        match self {
            Adopt::None => nodewright::config::settings::KarpenterNodes::None.as_str(),
            Adopt::Replace => nodewright::config::settings::KarpenterNodes::Replace.as_str(),
        }
    }
}

#[derive(Debug, Args)]
pub struct FileArgs {
    /// A YAML or JSON file of documents; `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    file: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    file: FileArgs,
    /// Print the difference and write nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// nodepool, ec2nodeclass (nodeclass) or settings.
    kind: Option<String>,
    name: Option<String>,
    /// yaml or json: the items as documents; default a table.
    #[arg(short = 'o', long = "output")]
    output: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    kind: String,
    name: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    target: Target,
}

fn read(file: &str) -> anyhow::Result<(String, String)> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading stdin")?;
        return Ok(("(stdin)".to_owned(), text));
    }
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    Ok((file.to_owned(), text))
}

/// Prints each error; the summary says nothing was changed only where
/// something could have been (`apply`, `delete`), not for `validate`.
fn invalid(errors: &[String], writes: bool) -> anyhow::Error {
    for e in errors {
        eprintln!("{e}");
    }
    if writes {
        anyhow::anyhow!("{} error(s); nothing was changed", errors.len())
    } else {
        anyhow::anyhow!("{} error(s)", errors.len())
    }
}

fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

pub fn run(cmd: ConfigCommand) -> anyhow::Result<()> {
    match cmd {
        ConfigCommand::Validate(a) => {
            let (name, text) = read(&a.file)?;
            let v =
                config_write::validate_file(&name, &text, true).map_err(|e| invalid(&e, false))?;
            let (docs, others) = (v.docs, v.others);
            let others = if others > 0 {
                format!(" ({others} other document(s) are not configuration: ignored)")
            } else {
                String::new()
            };
            println!(
                "{name}: {} configuration document(s) valid{others}",
                docs.len()
            );
            warn(&v.warnings);
            Ok(())
        }
        ConfigCommand::Convert(a) => {
            let (name, text) = read(&a.file)?;
            let v =
                config_write::validate_file(&name, &text, false).map_err(|e| invalid(&e, false))?;
            warn(&v.warnings);
            let docs = v.docs;
            print!(
                "{}",
                manifests_yaml(&docs.iter().map(|d| d.to_manifest()).collect::<Vec<_>>())?
            );
            Ok(())
        }
        #[cfg(feature = "aws")]
        other => stored::run(other),
    }
}

fn manifests_yaml(docs: &[serde_json::Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(d)?);
    }
    Ok(out)
}

#[cfg(feature = "aws")]
pub fn init(args: InitArgs) -> anyhow::Result<()> {
    block_on(async {
        let store = args.target.store().await;
        store.ensure_tables().await.with_context(|| {
            format!(
                "creating the tables {}-config and {}-state",
                args.target.table_prefix, args.target.table_prefix
            )
        })?;
        println!(
            "tables {}-config and {}-state are ready",
            args.target.table_prefix, args.target.table_prefix
        );
        Ok(())
    })
}

#[cfg(feature = "aws")]
fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(f)
}

#[cfg(feature = "aws")]
mod stored {
    use super::*;
    use anyhow::bail;
    use config_write::WriteError;
    use nodewright::config::ConfigKind;
    use nodewright::config::{ConfigDocument, resolve_items};
    use nodewright::model::Timestamp;
    use nodewright::ports::Store;

    pub fn run(cmd: ConfigCommand) -> anyhow::Result<()> {
        block_on(async move {
            match cmd {
                ConfigCommand::Apply(a) => apply(&a.file, a.dry_run).await,
                ConfigCommand::Diff(a) => apply(&a, true).await,
                ConfigCommand::Get(a) => get(&a).await,
                ConfigCommand::Delete(a) => delete(&a).await,
                ConfigCommand::Scale(a) => scale(&a).await,
                ConfigCommand::Import(a) => import(&a).await,
                ConfigCommand::Validate(_) | ConfigCommand::Convert(_) => Ok(()),
            }
        })
    }

    fn write_error(e: WriteError) -> anyhow::Error {
        match e {
            WriteError::Invalid(errors) => invalid(&errors, true),
            WriteError::Store(e) => anyhow::Error::from(e),
        }
    }

    async fn apply(a: &FileArgs, dry_run: bool) -> anyhow::Result<()> {
        let (name, text) = read(&a.file)?;
        let store = a.target.store().await;
        let changes = config_write::plan(&store, &name, &text)
            .await
            .map_err(write_error)?;
        print!("{}", config_write::diff(&changes));
        if dry_run {
            return Ok(());
        }
        match config_write::apply(&store, &changes, Timestamp::now()).await {
            Ok(0) => println!("nothing to change"),
            Ok(n) => println!("{n} item(s) written"),
            Err(nodewright::ports::StoreError::Conflict { item, reason }) => {
                bail!(
                    "{item}: {reason}: nothing was changed; run `nodewright config diff -f {}` and apply again",
                    a.file
                )
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    async fn scale(a: &ScaleArgs) -> anyhow::Result<()> {
        let name = a.pool.strip_prefix("nodepool/").unwrap_or(&a.pool);
        if a.replicas < 0 {
            bail!("--replicas must not be negative, got {}", a.replicas);
        }
        let store = a.target.store().await;
        let version = config_write::scale(&store, name, a.replicas, Timestamp::now())
            .await
            .map_err(write_error)?;
        println!(
            "nodepool/{name} scaled to {} (version {version})",
            a.replicas
        );
        Ok(())
    }

    async fn import(a: &ImportArgs) -> anyhow::Result<()> {
        use nodewright::kube::import::{ImportOptions, read_from_cluster};
        use nodewright::kube::{ClientSettings, KubeCluster};
        let cluster = KubeCluster::from_kubeconfig(
            a.kubeconfig.as_deref(),
            a.context.as_deref(),
            ClientSettings::default(),
        )
        .await
        .context("connecting to the cluster")?;
        let options = ImportOptions {
            pools: a.pools.iter().cloned().collect(),
            adopt: Some(a.adopt.as_str().to_owned()),
        };
        let imported = read_from_cluster(cluster.client(), &options)
            .await
            .context("reading Karpenter's objects from the cluster")?;
        for note in &imported.notes {
            eprintln!("note: {note}");
        }
        warn(&imported.warnings);
        if imported.documents.is_empty() {
            bail!(
                "the cluster holds no NodePool, EC2NodeClass, Provisioner or AWSNodeTemplate to import"
            );
        }
        let text = imported.to_yaml()?;
        if a.print {
            print!("{text}");
            return Ok(());
        }
        let store = a.target.store().await;
        let changes = config_write::plan(&store, "(cluster)", &text)
            .await
            .map_err(write_error)?;
        print!("{}", config_write::diff(&changes));
        if a.dry_run {
            return Ok(());
        }
        match config_write::apply(&store, &changes, Timestamp::now()).await {
            Ok(0) => println!("nothing to change"),
            Ok(n) => println!("{n} item(s) written"),
            Err(nodewright::ports::StoreError::Conflict { item, reason }) => {
                bail!("{item}: {reason}: nothing was changed; run the import again")
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    async fn delete(a: &DeleteArgs) -> anyhow::Result<()> {
        let kind = ConfigKind::parse(&a.kind).with_context(|| {
            format!(
                "unknown kind {:?} (nodepool, ec2nodeclass, settings)",
                a.kind
            )
        })?;
        let store = a.target.store().await;
        if config_write::delete(&store, kind, &a.name)
            .await
            .map_err(write_error)?
        {
            println!("{}/{} deleted", kind.as_str(), a.name);
        } else {
            println!("{}/{} not found", kind.as_str(), a.name);
        }
        Ok(())
    }

    async fn get(a: &GetArgs) -> anyhow::Result<()> {
        let kind = match &a.kind {
            Some(k) => Some(ConfigKind::parse(k).with_context(|| {
                format!("unknown kind {k:?} (nodepool, ec2nodeclass, settings)")
            })?),
            None => None,
        };
        let store = a.target.store().await;
        let items = store
            .config_items()
            .await
            .with_context(|| format!("reading {}-config", a.target.table_prefix))?;
        let resolved = resolve_items(&items);
        let mut items: Vec<_> = items
            .into_iter()
            .filter(|i| kind.is_none_or(|k| k == i.kind))
            .filter(|i| a.name.as_ref().is_none_or(|n| *n == i.name))
            .collect();
        items.sort_by(|x, y| (x.kind, &x.name).cmp(&(y.kind, &y.name)));
        if kind == Some(ConfigKind::Settings) {
            // The settings in force: the stored item's, defaults filled in.
            let s = &resolved.set.settings;
            let effective = serde_json::json!({
                "batchIdleDuration": format!("{}s", s.batch_idle.as_secs_f64()),
                "batchMaxDuration": format!("{}s", s.batch_max.as_secs_f64()),
                "rebalancePolicy": s.rebalance_policy.as_str(),
                "consolidationSavingsThreshold": format!("{}%", s.consolidation_savings_threshold * 100.0),
                "interruptionQueue": s.interruption_queue,
                "preferencePolicy": s.preference_policy.as_str(),
                "minValuesPolicy": s.min_values_policy.as_str(),
                "reservedENIs": s.reserved_enis,
                "featureGates": {"spotToSpotConsolidation": s.spot_to_spot_consolidation, "nodeRepair": s.node_repair},
            });
            let doc = serde_json::json!({"apiVersion": "nodewright.io/v1alpha1", "kind": "Settings", "metadata": {"name": "default"}, "spec": effective});
            if a.output.as_deref() == Some("json") {
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                let stored = if items.is_empty() {
                    "not stored: the defaults"
                } else {
                    "stored, defaults filled in"
                };
                println!("# settings/default ({stored})");
                print!("{}", manifests_yaml(&[doc])?);
            }
            return Ok(());
        }
        let problems = |i: &nodewright::config::ConfigItem| {
            let name = format!("{}/{}", i.kind.as_str(), i.name);
            resolved
                .errors
                .iter()
                .chain(&resolved.not_ready)
                .filter(|e| e.item == name)
                .map(|e| format!("{}: {}", e.field, e.reason))
                .collect::<Vec<_>>()
        };
        match a.output.as_deref() {
            Some("yaml") | Some("json") => {
                let docs: Vec<serde_json::Value> = items
                    .iter()
                    .map(|i| match ConfigDocument::from_item(i) {
                        Ok(d) => d.to_manifest(),
                        Err(_) => serde_json::json!({"metadata": {"name": i.name}, "kind": i.kind.as_str(), "spec": i.spec}),
                    })
                    .collect();
                if a.output.as_deref() == Some("json") {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(
                            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs})
                        )?
                    );
                } else {
                    print!("{}", manifests_yaml(&docs)?);
                }
            }
            Some(other) => bail!("unknown output {other:?}: yaml or json"),
            None => {
                println!(
                    "{:<10} {:<32} {:>7}  {:<26} STATUS",
                    "KIND", "NAME", "VERSION", "UPDATED"
                );
                for i in &items {
                    let p = problems(i);
                    let status = if p.is_empty() {
                        "valid".to_owned()
                    } else {
                        format!("INVALID: {}", p.join("; "))
                    };
                    println!(
                        "{:<10} {:<32} {:>7}  {:<26} {status}",
                        i.kind.as_str(),
                        i.name,
                        i.version,
                        i.updated_at.to_string()
                    );
                }
                if items.is_empty() {
                    println!("(no items)");
                }
            }
        }
        Ok(())
    }
}
