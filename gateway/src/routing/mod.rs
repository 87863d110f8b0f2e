//! Routing: which ready pod serves a request.
//!
//! Pure decision code, with no I/O, so every rule is unit-tested here and
//! the proxy's `upstream_peer` phase stays a few lines:
//!
//! 1. The model's [`Strategy`] and [`RoutingOptions`] come from its config,
//!    validated when the config is loaded.
//! 2. [`routing_key`] derives the request's key ([`session_key`] or
//!    [`prefix_key`]) from headers and the [`RoutingInputs`] that model
//!    extraction already borrowed from the body; [`KeySource`] labels it for
//!    metrics.
//!    [`Strategy::CacheAware`] instead hashes the prompt into
//!    [`PromptBlocks`] and [`EndpointSet::pick_cache_aware`] scores every
//!    pod by the prefix it holds ([`prefix_index`]) and its load
//!    ([`backend_load`]; see [`cache_aware`]).
//! 3. [`EndpointSet::pick`] picks the pod (ketama ring for keys,
//!    round-robin or least-loaded otherwise), skipping pods already tried
//!    and pods out of rotation ([`health`]: passive ejection after failures,
//!    active checks), and counts the request as in flight until its
//!    [`InFlight`] guard drops; the guard records the attempt's outcome.
//!
//! An [`EndpointSet`] is immutable and rebuilt only when the ready endpoints
//! change, keeping the in-flight counts of pods that stay.

#![warn(missing_docs)]

pub mod backend_load;
mod blocks;
pub mod cache_aware;
mod endpoints;
pub mod health;
mod in_flight;
mod keys;
mod messages;
pub mod pick_share;
pub mod prefix_index;
mod strategy;
mod text;
mod upstream;

pub use blocks::{salt_seed, PromptBlocks, BYTES_PER_TOKEN, DEFAULT_BLOCK_SIZE, MAX_PROMPT_BLOCKS};
pub use cache_aware::{
    CacheAwareOptions, CacheAwareRequest, Decision, CACHE_AWARE_BOUNDED_LOAD_FACTOR,
};

pub use endpoints::{EndpointSet, InFlight, Upstream, MAX_ENDPOINTS, VIRTUAL_NODES_PER_ENDPOINT};
pub use keys::{
    document_text, prefix_key, prefix_key_with_limits, session_key, KeyLimits, KeySource,
    RoutingInputs, CACHE_KEY_HEADER, CONVERSATION_ID_HEADER, DEFAULT_DOCUMENT_SEGMENT_MAX_LEN,
    DEFAULT_EXPLICIT_KEY_MAX_LEN, DEFAULT_FIRST_TURN_MAX_LEN, DEFAULT_SYSTEM_SEGMENT_MAX_LEN,
    MAX_SYSTEM_SEGMENTS, SESSION_HASH_MESSAGES, SESSION_HASH_MESSAGE_BYTES, SESSION_ID_HEADER,
};
pub use strategy::{ParseStrategyError, RoutingOptions, Strategy, DEFAULT_BOUNDED_LOAD_FACTOR};

use http::HeaderMap;

/// The routing key a strategy uses, if any: the session key for
/// session-affinity, the prefix key for prefix, and nothing (without reading
/// the body) for the others. `None` means "no affinity", which
/// [`EndpointSet::select`] balances by load; report it as [`KeySource::None`].
pub fn routing_key(
    strategy: Strategy,
    headers: &HeaderMap,
    body: &RoutingInputs<'_>,
    limits: &KeyLimits,
) -> Option<(String, KeySource)> {
    match strategy {
        Strategy::SessionAffinity => session_key(headers, body),
        Strategy::Prefix => prefix_key_with_limits(headers, body, limits),
        Strategy::Default
        | Strategy::LeastLoaded
        | Strategy::CacheAware
        | Strategy::Failover
        | Strategy::Weighted => None,
    }
}
