//! The read-only JSON routes behind the API key: `GET /v1/models`,
//! `GET /v1/models/{id}` (the SDKs' `models.retrieve`) and
//! `GET /admin/models`.

use bytes::Bytes;
use pingora_error::Result;
use pingora_proxy::Session;
use serde_json::{json, Value};

use super::context::RequestCtx;
use super::respond::{reject, respond};
use super::Gateway;
use crate::errors::ApiError;

impl Gateway {
    /// Answers a listing route; `None` for other paths.
    pub(super) async fn serve_listing(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Option<bool>> {
        let path = session.req_header().uri.path();
        let listing = match path {
            "/v1/models" => Ok(self.model_list(ctx)),
            "/admin/models" => self.admin_report(ctx),
            "/admin/tenants" => self.tenant_report(session),
            _ => match path.strip_prefix("/v1/models/") {
                Some(id) if !id.is_empty() => self.model_entry(id, ctx),
                _ => return Ok(None),
            },
        };
        if session.req_header().method != http::Method::GET {
            let method = session.req_header().method.to_string();
            let err = ApiError::method_not_allowed(&method);
            return reject(session, ctx, err).await.map(Some);
        }
        let listing = match listing {
            Ok(listing) => listing,
            Err(err) => return reject(session, ctx, err).await.map(Some),
        };
        let body = serde_json::to_vec(&listing).unwrap_or_default();
        respond(
            session,
            ctx,
            200,
            "application/json",
            Bytes::from(body),
            &[],
        )
        .await?;
        Ok(Some(true))
    }

    /// The OpenAI model list, with each model's phase as an extension
    /// field: the models the caller's tenant may use.
    fn model_list(&self, ctx: &RequestCtx) -> Value {
        let lifecycle = self.activation.as_ref().and_then(|q| q.lifecycle());
        let data: Vec<Value> = self
            .registry
            .list()
            .into_iter()
            .filter(|m| {
                let model = m.parent.as_deref().unwrap_or(&m.root);
                ctx.tenant.as_ref().is_none_or(|t| t.allows(model))
            })
            .map(|m| {
                let model = m.parent.as_deref().unwrap_or(&m.root);
                let phase = match m.phase {
                    Some(phase) => phase.to_string(),
                    None => lifecycle
                        .and_then(|l| l.phase(model))
                        .unwrap_or_else(|| "Ready".to_string()),
                };
                json!({
                    "id": m.id,
                    "object": "model",
                    "created": 0,
                    "owned_by": "flexinfer",
                    "root": m.root,
                    "parent": m.parent,
                    "status": {"phase": phase},
                })
            })
            .collect();
        json!({"object": "list", "data": data})
    }

    /// One model of the list by its id (percent-decoded, so `org%2Fm` and
    /// `org/m` both name `org/m`); 404 `model_not_found` for names the list
    /// does not show.
    fn model_entry(&self, raw_id: &str, ctx: &RequestCtx) -> Result<Value, ApiError> {
        let id = crate::extract::percent_decode(raw_id)?;
        let mut list = self.model_list(ctx);
        let entries = list["data"].as_array_mut().map(std::mem::take);
        entries
            .into_iter()
            .flatten()
            .find(|entry| entry["id"] == *id)
            .ok_or_else(|| ApiError::model_not_found(&id))
    }

    /// `/admin/tenants`: each tenant's limits and what is left of them;
    /// an admin key is required (tenants must not see each other).
    fn tenant_report(&self, session: &Session) -> Result<Value, ApiError> {
        if !self.is_admin(session.req_header()) {
            return Err(ApiError::admin_key_required("/admin/tenants"));
        }
        let mut report = match &self.tenants {
            Some(tenants) => tenants.report(),
            None => json!({"tenants": []}),
        };
        if let Some(queues) = &self.activation {
            report["queues"] = queues.report();
        }
        Ok(report)
    }

    /// Phase, queue depth, activity and swap history of models run on
    /// demand. It names every model: with an API-key file, tenants (who
    /// see only their own models) need an admin key for it.
    fn admin_report(&self, ctx: &RequestCtx) -> Result<Value, ApiError> {
        if self.scoped_tenant(ctx).is_some() {
            return Err(ApiError::admin_key_required("/admin/models"));
        }
        Ok(match self.activation.as_ref().and_then(|q| q.lifecycle()) {
            Some(l) => l.report(),
            None => json!({"models": [], "groups": []}),
        })
    }
}
