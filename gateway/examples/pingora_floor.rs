//! The floor of the proxy benchmark: a Pingora proxy with no logic at all
//! (one fixed upstream, Pingora's keep-alive pool, bodies passed through
//! unread). What FlexInfer spends beyond it is its own doing;
//! `benchmark/proxy/compare.py` reports the ratio.
//!
//! cargo run --release -p flexinfer-gateway --example pingora_floor -- LISTEN UPSTREAM [THREADS]

use async_trait::async_trait;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_proxy::{ProxyHttp, Session};

struct Floor {
    upstream: std::net::SocketAddr,
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
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(upstream)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: pingora_floor LISTEN UPSTREAM [THREADS]");
        std::process::exit(2);
    };
    let upstream = upstream.parse().expect("UPSTREAM is host:port");
    let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(1);
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = pingora_proxy::http_proxy_service(&server.configuration, Floor { upstream });
    proxy.add_tcp(listen);
    server.add_service(proxy);
    server.run_forever();
}
