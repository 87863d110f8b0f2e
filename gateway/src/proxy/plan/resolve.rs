//! The route a requested name resolves to: a model, alias or adapter, or
//! the member of the label group it names, within its rate limit.

use super::*;

impl Gateway {
    /// The route of the requested name (a model, alias, adapter, or a
    /// member of the label group it names), within its model's rate limit.
    pub(super) fn resolve(
        &self,
        requested: &str,
        headers: &HeaderMap,
        json: Option<&JsonView<'_>>,
        ctx: &mut RequestCtx,
    ) -> Result<(Resolved, Option<GroupTicket>), ApiError> {
        let (resolved, ticket) = match self.registry.resolve(requested) {
            Some(resolved) => (resolved, None),
            None => {
                let group = self
                    .registry
                    .label_group(requested)
                    .ok_or_else(|| ApiError::model_not_found(requested))?;
                let (resolved, ticket) = self.pick_member(&group, headers, json);
                (resolved, Some(ticket))
            }
        };
        if ctx
            .tenant
            .as_ref()
            .is_some_and(|t| !t.allows(&resolved.route.name))
        {
            // Not found, as a model that does not exist: names do not leak.
            return Err(ApiError::model_not_found(requested));
        }
        ctx.model = Some(resolved.route.name.clone());
        if let Some(limiter) = &resolved.route.limiter {
            if let Err(wait) = limiter.check() {
                self.metrics
                    .rate_limited
                    .with_label_values(&[&resolved.route.name, "per_model"])
                    .inc();
                return Err(ApiError::rate_limited(wait));
            }
        }
        Ok((resolved, ticket))
    }

    /// The member of `group` a request goes to, under the gateway's
    /// label-group mode; the routing keys are derived only when the mode
    /// hashes one.
    pub(super) fn pick_member(
        &self,
        group: &LabelGroup,
        headers: &HeaderMap,
        json: Option<&JsonView<'_>>,
    ) -> (Resolved, GroupTicket) {
        let mode = self.settings.label_group_mode;
        let (mut prefix, mut session) = (None, None);
        if group.wants_keys(mode) {
            let document = json
                .and_then(|v| v.documents)
                .and_then(routing::document_text);
            let inputs = json.map_or_else(RoutingInputs::default, |v| RoutingInputs {
                session_id: v.session_id.as_deref(),
                cache_key: v.cache_key.as_deref(),
                prefix: v.prefix.as_deref(),
                messages: v.messages,
                prompt: v.prompt,
                document_context: v.document_context.as_deref().or(document.as_deref()),
            });
            if mode.uses_prefix() {
                prefix =
                    routing::prefix_key_with_limits(headers, &inputs, &self.settings.key_limits)
                        .filter(|(_, source)| *source != KeySource::SessionFallback)
                        .map(|(key, _)| key);
            }
            if mode.uses_session() && prefix.is_none() {
                session = routing::session_key(headers, &inputs).map(|(key, _)| key);
            }
        }
        let keys = GroupKeys {
            prefix: prefix.as_deref(),
            session: session.as_deref(),
        };
        let pick = group.pick(mode, keys);
        let strategy = mode.as_str();
        self.metrics
            .label_group_decisions
            .with_label_values(&[group.label(), strategy, pick.outcome.as_str()])
            .inc();
        self.metrics
            .label_group_hits
            .with_label_values(&[group.label(), strategy, &pick.resolved.route.name])
            .inc();
        (pick.resolved, pick.ticket)
    }
}
