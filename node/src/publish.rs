//! Writing the desired labels and annotations to the agent's own Node.
//!
//! One GET per pass, then only the writes [`crate::patch::plan`] asks for:
//! nothing when the Node already matches.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::labels::{LabelKeys, NodeMetadata};
use crate::patch::{plan, FIELD_MANAGER};

/// What a publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The Node already carried the desired keys: no write.
    Unchanged,
    /// The Node was patched.
    Updated {
        /// Stale keys were removed (merge patch).
        removed: bool,
        /// Desired keys were applied (server-side apply).
        applied: bool,
    },
}

/// Publishes labels and annotations on one Node.
#[derive(Clone)]
pub struct NodePublisher {
    api: Api<Node>,
    node_name: String,
    keys: LabelKeys,
}

impl NodePublisher {
    /// A publisher for the Node `node_name`.
    pub fn new(client: Client, node_name: impl Into<String>, keys: LabelKeys) -> Self {
        NodePublisher {
            api: Api::all(client),
            node_name: node_name.into(),
            keys,
        }
    }

    /// Brings the Node to `desired`.
    pub async fn publish(&self, desired: &NodeMetadata) -> Result<Outcome, kube::Error> {
        let node = self.api.get(&self.node_name).await?;
        let Some(update) = plan(&node, desired, &self.keys) else {
            return Ok(Outcome::Unchanged);
        };
        if let Some(remove) = &update.remove {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            self.api
                .patch(&self.node_name, &params, &Patch::Merge(remove))
                .await?;
        }
        if let Some(apply) = &update.apply {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            self.api
                .patch(&self.node_name, &params, &Patch::Apply(apply))
                .await?;
        }
        Ok(Outcome::Updated {
            removed: update.remove.is_some(),
            applied: update.apply.is_some(),
        })
    }
}
