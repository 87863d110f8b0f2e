//! Charging a tenant's budgets for a request ([`crate::tenants`]), waiting
//! for the fleet's next exchange windows when this replica took its share.

use super::*;

/// Longest a request waits for the fleet's next exchange windows when this
/// replica took its share of the current one ([`crate::tenants::fleet`]).
const FLEET_WINDOW_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the body is `{}` (nothing can be inserted before a comma).
fn is_empty_object(view: &JsonView<'_>) -> bool {
    matches!(
        view.model_slot,
        Some(crate::rewrite::ModelSlot::Absent { empty: true, .. })
    )
}

impl Gateway {
    /// Takes the request and its estimated tokens from the tenant's
    /// budgets for this model. A generation request that sets no output
    /// limit is charged the default one, lowered to what the budget holds,
    /// and that limit is returned to be set in the body: the engine then
    /// generates no more than was charged.
    pub(super) async fn charge_tenant(
        &self,
        tenant: Arc<Tenant>,
        resolved: &Resolved,
        json: Option<&JsonView<'_>>,
        clamp: Option<&Clamp>,
        generation: bool,
    ) -> Result<(Box<Metering>, Option<u64>), ApiError> {
        let model = &resolved.route.name;
        if !tenant.has_limits(model) {
            // Nothing to charge: the prompt is not even looked at.
            return Ok((Box::new(Metering::new(tenant, None, 0)), None));
        }
        let prompt = json.map_or(0, metering::prompt_tokens);
        let sequences = json.and_then(|v| v.sequences).unwrap_or(1).max(1);
        let unlimited = json.is_some_and(|v| v.output_limit.is_none() && !is_empty_object(v));
        let default_limit = (generation && unlimited && clamp.is_none())
            .then(|| tenant.output_room(model, prompt))
            .flatten()
            .map(|room| {
                (room / sequences)
                    .min(self.settings.tenant_default_max_tokens)
                    .max(1)
            });
        let output = match clamp {
            Some(c) => c.to,
            None => json
                .and_then(|v| v.output_limit.as_ref())
                .map(|l| l.value)
                .or(default_limit)
                .unwrap_or(0),
        };
        let estimate = Estimate {
            prompt,
            output: output.saturating_mul(sequences),
        };
        let charge = self.admit_tenant(&tenant, model, estimate).await;
        let charge = charge.inspect_err(|e| {
            let scope = if e.message.contains(" tokens") {
                "tenant_tokens"
            } else {
                "tenant_requests"
            };
            self.metrics
                .rate_limited
                .with_label_values(&[model, scope])
                .inc();
        })?;
        Ok((
            Box::new(Metering::new(tenant, Some(charge), prompt)),
            default_limit,
        ))
    }

    /// Charges the tenant's budgets. A charge refused only because this
    /// replica took its share of the fleet's exchange window waits for
    /// the next windows (up to [`FLEET_WINDOW_WAIT`]) rather than failing:
    /// the tenant has budget left.
    pub(super) async fn admit_tenant(
        &self,
        tenant: &Tenant,
        model: &str,
        estimate: Estimate,
    ) -> Result<TokenCharge, ApiError> {
        let window = self
            .tenants
            .as_ref()
            .map_or(FLEET_WINDOW_WAIT, |t| t.fleet().window());
        let deadline = std::time::Instant::now() + FLEET_WINDOW_WAIT;
        loop {
            match tenant.admit(model, estimate) {
                Err(mut e) if e.code == crate::tenants::NEXT_WINDOW => {
                    if std::time::Instant::now() + window > deadline {
                        e.code = "rate_limit_exceeded";
                        return Err(e);
                    }
                    tokio::time::sleep(window).await;
                }
                other => return other,
            }
        }
    }
}
