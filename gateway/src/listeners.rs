//! The addresses the gateway listens on, claimed before the server starts.
//!
//! Pingora binds its listeners inside each service's own thread: a listener
//! that cannot be bound is retried for half a minute, then only that
//! service stops and the process runs on without it. So the gateway binds
//! every address itself first and refuses to start when one fails, naming
//! the address, what it serves and why. The sockets are held until just
//! before Pingora binds the same addresses (with `SO_REUSEADDR`, as Pingora
//! does), so that two listeners of the gateway cannot share an address.
//! Should an address still be lost in the moment between the two, the
//! panic Pingora raises for it ends the process
//! ([`exit_when_a_listener_fails`]).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// Pingora's panic message for a listener it could not bind.
const PINGORA_LISTENER_PANIC: &str = "Failed to build listeners";

/// One address to listen on and what it serves (`proxy`, `metrics`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// `host:port`, as given on the command line.
    pub addr: String,
    /// What the listener serves, for messages.
    pub role: &'static str,
}

impl Planned {
    /// The listener of `role` on `addr`.
    pub fn new(addr: impl Into<String>, role: &'static str) -> Self {
        Self {
            addr: addr.into(),
            role,
        }
    }
}

/// An address that cannot be listened on.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({role}): {cause}")]
pub struct ListenError {
    /// The address as given.
    pub addr: String,
    /// What it was to serve.
    pub role: &'static str,
    /// Why not.
    pub cause: String,
}

/// Sockets bound on every planned address, held until this is dropped.
#[derive(Debug)]
pub struct Reserved {
    sockets: Vec<TcpListener>,
}

impl Reserved {
    /// The addresses actually bound (a port 0 resolved), in plan order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }
}

/// Binds every planned address, or names the first that cannot be bound.
/// A name is resolved as Pingora resolves it: its first address.
pub fn reserve(planned: &[Planned]) -> Result<Reserved, ListenError> {
    let mut bound: Vec<(SocketAddr, &Planned)> = Vec::with_capacity(planned.len());
    let mut sockets = Vec::with_capacity(planned.len());
    for listener in planned {
        let error = |cause: String| ListenError {
            addr: listener.addr.clone(),
            role: listener.role,
            cause,
        };
        let addr = resolve(&listener.addr).map_err(error)?;
        if let Some((_, other)) = bound.iter().find(|(a, _)| *a == addr && a.port() != 0) {
            return Err(error(format!("it is also the {} address", other.role)));
        }
        let socket = TcpListener::bind(addr).map_err(|e| error(e.to_string()))?;
        bound.push((addr, listener));
        sockets.push(socket);
    }
    Ok(Reserved { sockets })
}

/// The first address `addr` names.
fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("not a valid address: {e}"))?
        .next()
        .ok_or_else(|| "the name resolves to no address".to_string())
}

/// Ends the process (status 1) when Pingora fails to bind a listener,
/// instead of letting it run on without that listener; every other panic
/// goes to the hook installed before.
pub fn exit_when_a_listener_fails() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with(PINGORA_LISTENER_PANIC) {
            eprintln!("flexinfer-gateway: cannot listen: {message}");
            std::process::exit(1);
        }
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_address_is_named_with_its_role_and_cause() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let plan = [
            Planned::new("127.0.0.1:0", "proxy"),
            Planned::new(&addr, "metrics"),
        ];
        let e = reserve(&plan).unwrap_err();
        assert_eq!((e.addr.as_str(), e.role), (addr.as_str(), "metrics"));
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("cannot listen on {addr} (metrics): ")),
            "{text}"
        );
        assert!(text.contains("in use"), "{text}");
    }

    #[test]
    fn free_addresses_are_held_until_dropped() {
        let reserved = reserve(&[
            Planned::new("127.0.0.1:0", "proxy"),
            Planned::new("localhost:0", "metrics"),
        ])
        .unwrap();
        let addrs = reserved.local_addrs();
        assert_eq!(addrs.len(), 2);
        assert!(TcpListener::bind(addrs[0]).is_err(), "held while reserved");
        drop(reserved);
        assert!(TcpListener::bind(addrs[0]).is_ok(), "free once dropped");
    }

    #[test]
    fn one_address_for_two_listeners_and_bad_addresses_are_refused() {
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap().to_string();
        drop(free);
        let e = reserve(&[
            Planned::new(&addr, "proxy"),
            Planned::new(&addr, "routing peers"),
        ])
        .unwrap_err();
        assert_eq!(e.role, "routing peers");
        assert!(e.cause.contains("also the proxy address"), "{e}");
        let e = reserve(&[Planned::new("no-port-here", "proxy")]).unwrap_err();
        assert!(e.to_string().contains("not a valid address"), "{e}");
    }
}
