//! Launch templates of ours nothing uses any more, deleted (best effort).

use super::*;

impl<P: PortSet> Provisioner<P> {
    /// Deletes the launch templates of ours nothing uses any more
    /// (`lifecycle::unused_launch_templates`), logging each delete and
    /// each template kept with why. Best effort: a failure is logged and
    /// the next pass tries again; it never stops the tick.
    pub(super) async fn collect_launch_templates(
        &self,
        config: &LoadedConfig,
        claims: &[Claim],
        blocked: Option<lifecycle::GcBlock>,
        now: Timestamp,
    ) {
        let cloud = self.ports.cloud();
        let templates = match cloud.launch_templates().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list our launch templates; clean-up waits for the next pass");
                return;
            }
        };
        if templates.is_empty() {
            return;
        }
        let mut current: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for class in &config.node_classes {
            let images = match cloud.resolved_class(class).await {
                Ok(r) => r.image_ids,
                Err(e) => {
                    tracing::warn!(nodeclass = %class.name, error = %e, "cannot resolve the NodeClass's AMIs; its launch templates are kept");
                    Vec::new()
                }
            };
            current.insert(class.name.clone(), images);
        }
        // A class set aside as invalid may come back: its templates are kept.
        for e in &config.invalid {
            if let Some(name) = e.item.strip_prefix("nodeclass/") {
                current.entry(name.to_owned()).or_default();
            }
        }
        let garbage =
            lifecycle::unused_launch_templates(&templates, claims, &current, blocked, now);
        for kept in &garbage.kept {
            debug!(launch_template = %kept.subject, reason = %kept.reason, "launch template kept");
        }
        for (t, why) in &garbage.delete {
            match cloud.delete_launch_template(t).await {
                Ok(true) => {
                    info!(launch_template = %t.name, id = %t.id, reason = %why, "deleted a launch template of ours nothing uses")
                }
                Ok(false) => {
                    debug!(launch_template = %t.name, "launch template already gone")
                }
                Err(e) => {
                    tracing::warn!(launch_template = %t.name, error = %e, "cannot delete the launch template; the next pass tries again")
                }
            }
        }
    }
}
