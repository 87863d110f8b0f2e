//! FlexInfer gateway: an OpenAI-compatible proxy in front of model servers.
//!
//! The request path is a Pingora `ProxyHttp` implementation
//! ([`proxy::Gateway`]) that stays thin and delegates each concern to one
//! module: model extraction, auth, rate limiting, resolution, routing, body
//! rewriting and metrics. In global mode ([`global`]) the same request path
//! routes to the gateways of member clusters.

pub mod activation;
pub mod auth;
pub mod cli;
pub mod config;
pub mod errors;
pub mod extract;
pub mod global;
pub mod kube;
pub mod local;
pub mod metrics;
pub mod proxy;
pub mod ratelimit;
pub mod registry;
pub mod rewrite;
pub mod routing;
pub mod server;
