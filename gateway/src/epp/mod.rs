//! The endpoint-picker protocol of the Gateway API Inference Extension:
//! for an InferencePool with an `endpointPickerRef`, each request is put
//! to the pool's picker (Envoy's ext_proc over gRPC with TLS, full-duplex
//! streamed body) and goes to the endpoint it picks
//! ([`crate::gatewayapi`], `docs/gateway-api.md`).
//!
//! - [`wire`]: the messages, to and from the gateway's types;
//! - [`exchange`]: one request's exchange;
//! - [`tls`]: the connection's TLS.
//!
//! A picker never stalls the gateway: each has a bound on the requests in
//! flight through it and a timeout, its connection is its own, and a
//! request waits only on its own pool's picker.

pub mod exchange;
pub mod tls;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tonic::transport::{Channel, Endpoint};

pub use exchange::{Pick, PickError, PickRequest, ResponsePhase};
pub use wire::Mutation;

/// How pickers are asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PickerSettings {
    /// Longest wait for a pick (and for the answer to the response head).
    pub timeout: Duration,
    /// Requests in flight through one picker; more are failed over at once
    /// (the pool's failure mode).
    pub max_in_flight: usize,
    /// Longest wait for a connection to a picker.
    pub connect_timeout: Duration,
}

impl Default for PickerSettings {
    fn default() -> Self {
        PickerSettings {
            timeout: Duration::from_secs(10),
            max_in_flight: 1024,
            connect_timeout: Duration::from_secs(1),
        }
    }
}

/// A connection to one picker (HTTP/2, connected on first use and again
/// after a failure).
pub struct PickerClient {
    addr: SocketAddr,
    channel: Channel,
    slots: Arc<Semaphore>,
    max_in_flight: usize,
    timeout: Duration,
}

impl PickerClient {
    fn new(addr: SocketAddr, settings: PickerSettings) -> Self {
        let config = tls::client_config();
        let connector = tower::service_fn(move |uri: http::Uri| {
            let config = config.clone();
            async move {
                let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
                let port = uri.port_u16().unwrap_or(443);
                let tcp = tokio::net::TcpStream::connect((host, port)).await?;
                tcp.set_nodelay(true)?;
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(std::io::Error::other)?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        });
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("a socket address is a valid URI")
            .connect_timeout(settings.connect_timeout)
            .tcp_nodelay(true)
            .connect_with_connector_lazy(connector);
        PickerClient {
            addr,
            channel,
            slots: Arc::new(Semaphore::new(settings.max_in_flight)),
            max_in_flight: settings.max_in_flight,
            timeout: settings.timeout,
        }
    }

    /// The picker's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The connections to every picker in use, by address.
pub struct Pickers {
    settings: PickerSettings,
    clients: Mutex<HashMap<SocketAddr, Arc<PickerClient>>>,
}

impl Pickers {
    /// No connection yet.
    pub fn new(settings: PickerSettings) -> Self {
        Pickers {
            settings,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The client of the picker at `addr`, made on first use.
    pub fn client(&self, addr: SocketAddr) -> Arc<PickerClient> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients
            .entry(addr)
            .or_insert_with(|| Arc::new(PickerClient::new(addr, self.settings)))
            .clone()
    }

    /// Drops the clients of pickers no pool names any more.
    pub fn retain(&self, in_use: &HashSet<SocketAddr>) {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|addr, _| in_use.contains(addr));
    }
}
