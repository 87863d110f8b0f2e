//! The proxy of the benchmark's floor: a Pingora proxy with no logic at all
//! (one fixed upstream, Pingora's keep-alive pool, bodies passed through
//! unread), shared by the floor examples.

use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_proxy::{ProxyHttp, Session};

/// Upstream timeouts, as the gateway's settings name them
/// (`--upstream-connect-timeout`, `--upstream-read-timeout`, which also
/// bounds writes, `--upstream-keepalive-timeout`).
pub struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
    pub keepalive: Duration,
}

struct Floor {
    upstream: std::net::SocketAddr,
    timeouts: Option<Timeouts>,
}

#[async_trait]
impl ProxyHttp for Floor {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut (),
    ) -> pingora_error::Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream, false, String::new());
        if let Some(t) = &self.timeouts {
            peer.options.connection_timeout = Some(t.connect);
            peer.options.read_timeout = Some(t.read);
            peer.options.write_timeout = Some(t.read);
            peer.options.idle_timeout = Some(t.keepalive);
        }
        Ok(Box::new(peer))
    }
}

/// Serves `LISTEN UPSTREAM [THREADS]` from the command line until killed,
/// with `timeouts` on the upstream (Pingora's defaults without).
pub fn run(name: &str, timeouts: Option<Timeouts>) {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(upstream)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: {name} LISTEN UPSTREAM [THREADS]");
        std::process::exit(2);
    };
    let Ok(upstream) = upstream.parse() else {
        eprintln!("{name}: UPSTREAM is host:port, not {upstream:?}");
        std::process::exit(2);
    };
    let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1);
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy =
        pingora_proxy::http_proxy_service(&server.configuration, Floor { upstream, timeouts });
    proxy.add_tcp(listen);
    server.add_service(proxy);
    server.run_forever();
}
