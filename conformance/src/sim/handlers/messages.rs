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
use crate::sim::tools::{ToolCall, Tools};

/// A message, streamed or whole; every error in Anthropic's shape.
pub async fn create(
    State(state): State<Arc<SimState>>,
    body: Bytes,
) -> Result<Response, AnthropicError> {
    state.check_ready()?;
    let request: MessagesRequest = parse_json(&body)?;
    let model = state.models.resolve(request.model.as_deref())?;
    let prompt = request.prompt()?;
    let tools = Tools::from_messages(request.tools.as_ref(), request.tool_choice.as_ref())?;
    let fields = SamplingFields {
        stream: request.stream,
        max_tokens: capped_length(request.max_tokens, &state.config),
        ..SamplingFields::default()
    };
    let plan = Plan::new(&state.config, model, &[prompt], &fields, "messages")?;
    let seed = plan.tool_seed(None);
    let call = tools
        .pick(request.user_turn())
        .map(|tool| ToolCall::new(tool, &tools, seed));
    let plan = plan.with_tool_call(call);
    Ok(generate(state, plan, MessagesRender::new()).await?)
}
