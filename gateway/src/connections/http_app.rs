//! The gateway's own small HTTP listeners (admin and metrics, the peers'
//! port) behind the same connection guards as the proxy port: the header
//! deadline (408) and size limit (431), and the connection caps.

use async_trait::async_trait;
use http::Response;
use pingora_core::apps::http_app::{HttpServer, ServeHttp};
use pingora_core::protocols::http::ServerSession;

use super::{ConnectionSettings, GuardedApp};
use crate::metrics::Metrics;

/// A [`ServeHttp`] application that tells its guarded connection when a
/// request header was read and when the request ended, as the proxy's
/// phases do.
pub struct Tracked<S>(S);

#[async_trait]
impl<S> ServeHttp for Tracked<S>
where
    S: ServeHttp + Send + Sync,
{
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        super::header_received();
        let answer = self.0.response(session).await;
        if !session.is_body_done() {
            // A body the application did not read is not drained through
            // the header guard: the connection closes after the answer,
            // lingeringly, since the client may still be sending it.
            session.set_keepalive(None);
            super::linger_on_close();
        }
        super::request_ended();
        answer
    }
}

/// `app` served behind the connection guards of `settings`. Its
/// connections are not counted in the proxy's client-connection gauge;
/// refusals and header aborts are counted with the proxy's.
pub fn guarded_http<S>(
    app: S,
    settings: ConnectionSettings,
    metrics: Metrics,
) -> GuardedApp<HttpServer<Tracked<S>>>
where
    S: ServeHttp + Send + Sync + 'static,
{
    GuardedApp::new(HttpServer::new_app(Tracked(app)), settings, metrics).uncounted()
}
