//! Scenario files: Karpenter-style objects (NodePools, NodeClasses, or the
//! older Provisioner forms), workloads (Deployments, DaemonSets, PDBs,
//! Pods), timed actions and expectations — so every scenario is also a test.
//!
//! ```yaml
//! name: walkthrough-1
//! region: ap-south-1
//! objects: [ {apiVersion: karpenter.sh/v1alpha5, kind: Provisioner, ...}, {kind: Deployment, ...} ]
//! actions:
//!   - at: 0s
//!     scale: {deployment: inflate, replicas: 3}
//! run: 3m
//! expect:
//!   nodes: 1
//!   pods: {bound: 3, pending: 0}
//!   nodesWith: [{labels: {node.kubernetes.io/instance-type: r6gd.xlarge}, count: 1, pods: 3}]
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cloud::SimCloud;
use super::controllers::node_of;
use super::driver::ClusterDriver;
use super::placement;
use super::pools::{self, PoolDepths};
use super::simulation::Simulation;
use crate::config::{self, ConfigDocument, ConfigError, ConfigItem};
use crate::model::{OfferingKey, SignedDuration, Timestamp};
use crate::ports::{Cloud, Store};
use crate::resources;
use crate::scheduling::labels::CAPACITY_TYPE_SPOT;

/// The built-in scenario: the first source walkthrough.
pub const WALKTHROUGH_1: &str = include_str!("../scenarios/walkthrough-1.yaml");

/// Every scenario shipped with the simulator: (name, text).
pub const BUILT_IN: [(&str, &str); 2] = [
    ("walkthrough-1", WALKTHROUGH_1),
    (
        "walkthrough-3",
        include_str!("../scenarios/walkthrough-3.yaml"),
    ),
];

mod actions;
mod checks;
mod load;
mod parse;
mod spec;
#[cfg(test)]
mod tests;

pub use actions::*;
pub use checks::*;
pub use load::*;
pub use parse::*;
pub use spec::*;
