//! After planning: the request is counted and sent down the path its body
//! needs: Pingora's upstream phases, or a subrequest for bodies beyond the
//! retry buffer.

use pingora_error::Result;
use pingora_proxy::Session;

use super::context::RequestCtx;
use super::plan::ForwardPlan;
use super::respond::reject;
use super::Gateway;

impl Gateway {
    /// `Ok(false)` hands the request to the upstream phases; `Ok(true)`
    /// means it was answered here.
    pub(super) async fn dispatch(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        plan: Box<ForwardPlan>,
    ) -> Result<bool> {
        let route = &plan.resolved.route;
        let meters = self.metrics.route(route);
        let gauge = meters.active.clone();
        gauge.inc();
        ctx.model_gauge = Some(gauge);
        let own_strategy = plan.strategy == route.strategy;
        meters.routed(
            &self.metrics,
            &route.name,
            (plan.strategy, own_strategy),
            plan.key_source,
        );
        let held = plan.hold_for_usage && !route.endpoints.is_empty();
        if plan.body.is_some() && (held || session.as_ref().retry_buffer_truncated()) {
            // A subrequest cannot be sent again from here: such a stream is
            // not resumed (it is cut, as without stream failover).
            let mut plan = plan;
            plan.resume = None;
            return self.forward_buffered(session, ctx, plan).await;
        }
        if route.endpoints.is_empty() {
            // Answered here, the client connection stays open.
            let err = self.no_endpoint(&route.name);
            return reject(session, ctx, err).await;
        }
        ctx.plan = Some(plan);
        Ok(false)
    }
}
