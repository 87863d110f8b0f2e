//! FlexInfer gateway: an OpenAI-compatible proxy in front of model servers.
//!
//! The request path is a Pingora `ProxyHttp` implementation
//! ([`proxy::Gateway`]) that stays thin and delegates each concern to one
//! module: model extraction, auth, rate limiting, resolution, routing, body
//! rewriting and metrics. Where models come from is the [`modes`]' business:
//! the model file with local processes, the Kubernetes cluster, or, in
//! global mode ([`global`]), the gateways of member clusters; the request
//! path is the same in all three. `gateway/README.md` maps the folder.

pub mod activation;
pub mod allocator;
pub mod auth;
pub mod cli;
pub mod config;
pub mod connections;
pub mod epp;
pub mod errors;
pub mod extract;
pub mod file_reloader;
pub mod flow;
pub mod gatewayapi;
pub mod global;
pub mod health_checks;
pub mod held;
pub mod http_get;
pub mod kube;
pub mod label_groups;
pub mod listeners;
pub mod load_scraper;
pub mod local;
pub mod logging;
pub mod metrics;
pub mod modes;
pub mod paths;
pub mod peers;
pub mod proxy;
pub mod ratelimit;
pub mod registry;
pub mod resume;
pub mod rewrite;
pub mod routing;
pub mod runtime_thread;
pub mod server;
pub mod shutdown;
pub mod tenants;
pub mod tokens;
pub mod validation;
