//! What cache-aware routing scores a request by: its prompt's blocks, a
//! session the client named, the LoRA adapter asked for.

use std::sync::Arc;

use http::HeaderMap;

use crate::extract::JsonView;
use crate::registry::{MatchKind, Resolved};
#[cfg(doc)]
use crate::routing::Strategy;
use crate::routing::{self, CacheAwareRequest, PromptBlocks, RoutingInputs};

/// What [`Strategy::CacheAware`] scores a request by.
pub(super) struct PromptRouting {
    pub(super) blocks: PromptBlocks,
    /// A session the client named (header or body), never one derived
    /// from the messages.
    pub(super) session: Option<String>,
    /// The LoRA adapter asked for.
    pub(super) adapter: Option<Arc<str>>,
}

impl PromptRouting {
    pub(super) fn of(
        headers: &HeaderMap,
        json: Option<&JsonView<'_>>,
        resolved: &Resolved,
        salt: Option<&str>,
    ) -> Self {
        let inputs = json.map_or_else(RoutingInputs::default, |v| RoutingInputs {
            session_id: v.session_id.as_deref(),
            messages: v.messages,
            prompt: v.prompt,
            ..RoutingInputs::default()
        });
        // Without the messages, only a session the client named counts.
        let named = RoutingInputs {
            session_id: inputs.session_id,
            ..RoutingInputs::default()
        };
        let session = routing::session_key(headers, &named).map(|(key, _)| key);
        let block_size = resolved.route.options.cache_aware.block_size;
        let blocks = if session.is_some() {
            PromptBlocks::default()
        } else {
            PromptBlocks::of_salted_request(&inputs, block_size, salt)
        };
        let adapter = (resolved.kind == MatchKind::Lora).then(|| resolved.upstream_model.clone());
        Self {
            blocks,
            session,
            adapter,
        }
    }

    /// The borrowed view the endpoint set scores.
    pub(super) fn request(&self) -> CacheAwareRequest<'_> {
        CacheAwareRequest {
            blocks: self.blocks.hashes(),
            session: self.session.as_deref(),
            adapter: self.adapter.as_deref(),
        }
    }
}
