//! What every handler shares: the validated configuration and the live
//! parts built from it.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderValue;

use super::admission::Admission;
use super::config::{ConfigError, SimConfig};
use super::error::ApiError;
use super::generation::CENTURY;
use super::metrics::SimMetrics;
use super::models::ModelRegistry;
use super::prefix_cache::PrefixCache;
use super::recorder::RequestRecorder;
use super::responses::ResponseStore;

/// One server's shared state, behind an `Arc` in every handler.
#[derive(Debug)]
pub struct SimState {
    /// The configuration the server was started with.
    pub config: SimConfig,
    /// The resolved identity, ready to send as `X-Served-By`.
    pub pod_name: HeaderValue,
    /// When `/health` turns 200 and the model endpoints start answering.
    pub ready_at: Instant,
    /// Base models and LoRA adapters.
    pub models: ModelRegistry,
    /// Prometheus metrics.
    pub metrics: SimMetrics,
    /// Generation slots and KV-cache reservations.
    pub admission: Admission,
    /// The simulated prefix (KV) cache.
    pub prefix_cache: PrefixCache,
    /// The request log behind `/sim/requests`.
    pub recorder: RequestRecorder,
    /// Responses API objects kept for the follow-up routes.
    pub responses: ResponseStore,
}

/// Seconds since the Unix epoch, for `created` fields.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl SimState {
    /// Builds the state for a server identified as `pod_name`, starting its
    /// startup delay now.
    pub fn new(config: SimConfig, pod_name: &str) -> Result<Arc<Self>, ConfigError> {
        config.validate()?;
        let pod_name = HeaderValue::from_str(pod_name).map_err(|_| {
            ConfigError(format!("pod name {pod_name:?} is not a valid header value"))
        })?;
        let metrics = SimMetrics::new(
            config.default_model(),
            config.block_size,
            config.prefix_cache_blocks,
        )
        .map_err(|e| ConfigError(format!("metrics registration failed: {e}")))?;
        let admission = Admission::new(
            config.max_concurrency,
            config.kv_cache_tokens,
            metrics.running.clone(),
            metrics.waiting.clone(),
        );
        let models = ModelRegistry::new(
            config.models.clone(),
            &config.lora_modules,
            config.max_model_len,
            unix_now(),
        );
        Ok(Arc::new(Self {
            ready_at: Instant::now() + config.startup_delay.min(CENTURY),
            recorder: RequestRecorder::new(config.recorder_capacity),
            prefix_cache: PrefixCache::new(config.prefix_cache_blocks, config.block_size),
            responses: ResponseStore::default(),
            pod_name,
            models,
            metrics,
            admission,
            config,
        }))
    }

    /// Whether the startup delay is over.
    pub fn is_ready(&self) -> bool {
        Instant::now() >= self.ready_at
    }

    /// 503 while the model is still "loading".
    pub fn check_ready(&self) -> Result<(), ApiError> {
        if self.is_ready() {
            Ok(())
        } else {
            Err(ApiError::loading())
        }
    }

    /// An injected 500 for the configured fraction of requests.
    pub fn check_injected_failure(&self) -> Result<(), ApiError> {
        let rate = self.config.fail_rate;
        if rate > 0.0 && rand::random::<f64>() < rate {
            Err(ApiError::injected_failure())
        } else {
            Ok(())
        }
    }
}
