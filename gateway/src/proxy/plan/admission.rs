//! Waiting for a model: its cold start, a swap or a free slot
//! ([`crate::activation`]), with progress for held streams.

use super::*;

impl Gateway {
    /// Waits for a managed model to be ready (cold start), and marks the
    /// request active on it. The route is resolved again after a wait: the
    /// model's endpoints appeared meanwhile.
    ///
    /// A background request is served only by a Ready model and does not
    /// count as activity (no touch, no active-request guard); it waits for
    /// a slot behind every other class.
    ///
    /// A streaming request that waits is sent progress while it does
    /// (`held_progress`, [`crate::held`]).
    pub(super) async fn admit(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        resolved: Resolved,
        (requested, who): (&str, Waiter),
        held_progress: bool,
    ) -> Result<(Resolved, Option<ActiveRequest>, Option<FlowPermit>), ApiError> {
        let Some(queues) = &self.activation else {
            return Ok((resolved, None, None));
        };
        let route = &resolved.route;
        let background = who.class == Class::Background;
        let tenant = who.tenant.clone();
        let request = AdmitRequest {
            model: &route.name,
            cold_start: route.cold_start_timeout,
            capacity: self.capacity(route),
            who,
        };
        let admission = queues.admit(request);
        match self
            .hold(session, ctx, &route.name, held_progress, admission)
            .await
        {
            Ok(admitted) => {
                let active = (!background)
                    .then(|| queues.active_request(&route.name))
                    .flatten();
                if let Admission::Waited(waited) = admitted.admission {
                    self.metrics
                        .queue_wait
                        .with_label_values(&[&route.name])
                        .observe(waited.as_secs_f64());
                    if !tenant.is_empty() {
                        self.metrics
                            .tenant_queue_wait
                            .with_label_values(&[&*route.name, &tenant])
                            .observe(waited.as_secs_f64());
                    }
                    let fresh = self.registry.resolve(requested);
                    return Ok((fresh.unwrap_or(resolved), active, admitted.permit));
                }
                Ok((resolved, active, admitted.permit))
            }
            Err(e) => {
                let reason = if background && e.code == "service_unavailable" {
                    "background_not_ready"
                } else {
                    e.code
                };
                self.metrics
                    .queue_rejected
                    .with_label_values(&[&route.name, reason])
                    .inc();
                Err(e)
            }
        }
    }

    /// Requests a model serves at once: its endpoints times the requests
    /// each may take (the model's `maxConcurrency`, else the gateway's
    /// `--max-concurrency-per-endpoint`), else what its engines were seen
    /// to run at most while keeping others waiting (scraped engines of
    /// `cache-aware` models); unbounded when none of these is known.
    pub(super) fn capacity(&self, route: &ModelRoute) -> Option<usize> {
        if self.settings.cluster_failover {
            // Member gateways bound their own models' concurrency.
            return None;
        }
        match route
            .max_concurrency
            .or(self.settings.max_concurrency_per_endpoint)
        {
            Some(n) => Some(n as usize * route.endpoints.len().max(1)),
            None => route.endpoints.engine_capacity(),
        }
    }
}
