//! `POST /v1/messages` (Anthropic's Messages API).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;

use super::completions::generate;
use crate::sim::generation::Plan;
use crate::sim::messages::{AnthropicError, MessagesRender, MessagesRequest};
use crate::sim::protocol::{parse_json, SamplingFields};
use crate::sim::responses::capped_length;
use crate::sim::state::SimState;

/// A message, streamed or whole; every error in Anthropic's shape.
pub async fn create(
    State(state): State<Arc<SimState>>,
    body: Bytes,
) -> Result<Response, AnthropicError> {
    state.check_ready()?;
    let request: MessagesRequest = parse_json(&body)?;
    let model = state.models.resolve(request.model.as_deref())?;
    let prompt = request.prompt()?;
    let fields = SamplingFields {
        stream: request.stream,
        max_tokens: capped_length(request.max_tokens, &state.config),
        ..SamplingFields::default()
    };
    let plan = Plan::new(&state.config, model, &[prompt], &fields, "messages")?;
    Ok(generate(state, plan, MessagesRender::new()).await?)
}
