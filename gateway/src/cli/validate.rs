//! Checks of the flags against each other, before anything starts.

use super::Cli;

impl Cli {
    /// Checks values that clap cannot, collecting every problem.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.max_queue_size == 0 {
            problems.push("PROXY_MAX_QUEUE_SIZE must be > 0 (got 0)".to_string());
        }
        if self.queue_timeout.is_zero() {
            problems.push("PROXY_QUEUE_TIMEOUT must be > 0".to_string());
        }
        if self.cold_start_timeout.is_zero() {
            problems.push("PROXY_COLD_START_TIMEOUT must be > 0".to_string());
        }
        if self.backoff_enabled && self.backoff_max_retries == 0 {
            problems
                .push("PROXY_BACKOFF_MAX_RETRIES must be > 0 when backoff is enabled".to_string());
        }
        if self.backoff_enabled && self.backoff_initial_wait > self.backoff_max_wait {
            problems.push(format!(
                "PROXY_BACKOFF_INITIAL_WAIT ({}) must be <= PROXY_BACKOFF_MAX_WAIT ({})",
                humantime::format_duration(self.backoff_initial_wait),
                humantime::format_duration(self.backoff_max_wait)
            ));
        }
        if self.rate_limit_enabled {
            if self.rate_limit_per_model <= 0.0 {
                problems.push(
                    "PROXY_RATE_LIMIT_PER_MODEL must be > 0 when rate limiting is enabled"
                        .to_string(),
                );
            }
            if self.rate_limit_burst == 0 {
                problems.push(
                    "PROXY_RATE_LIMIT_BURST must be > 0 when rate limiting is enabled".to_string(),
                );
            }
        }
        if self.auth_enabled && self.auth_token.trim().is_empty() && self.auth_token_file.is_none()
        {
            problems.push(
                "PROXY_AUTH_TOKEN (or PROXY_AUTH_TOKEN_FILE) must be set when PROXY_AUTH_ENABLED=true"
                    .to_string(),
            );
        }
        match (self.kubernetes, &self.config, self.global_mode()) {
            (false, None, false) => problems.push(
                "--config (FLEXINFER_CONFIG) is required unless --kubernetes (FLEXINFER_KUBERNETES) \
                 or --global (FLEXINFER_GLOBAL) is set"
                    .to_string(),
            ),
            (true, Some(_), _) => problems.push(
                "--config and --kubernetes exclude each other: models come from the file or from the cluster"
                    .to_string(),
            ),
            (true, _, true) | (_, Some(_), true) => problems.push(
                "--global excludes --config and --kubernetes: a global gateway routes to member \
                 clusters' gateways, which serve the models"
                    .to_string(),
            ),
            _ => {}
        }
        if self.global.is_some() && self.global_object.is_some() {
            problems.push(
                "--global and --global-object exclude each other: the GlobalProxy comes from a file \
                 or from the cluster"
                    .to_string(),
            );
        }
        if let Some(reference) = &self.global_object {
            if let Err(e) = crate::global::GlobalObject::parse(reference, None) {
                problems.push(e);
            }
        }
        if self.global_mode() {
            if self.global_probe_interval.is_zero() {
                problems.push("FLEXINFER_GLOBAL_PROBE_INTERVAL must be > 0".to_string());
            }
            if self.global_probe_timeout.is_zero() {
                problems.push("FLEXINFER_GLOBAL_PROBE_TIMEOUT must be > 0".to_string());
            }
        }
        if self.all_namespaces && !self.namespaces.is_empty() {
            problems.push("--namespaces and --all-namespaces exclude each other".to_string());
        }
        if self.embedded_operator && !self.kubernetes {
            problems.push(
                "--embedded-operator applies to Kubernetes mode (--kubernetes); with --config the \
                 local operator always runs"
                    .to_string(),
            );
        }
        let operator_flags = self.controllers.changed_flags();
        if !self.embedded_operator && !operator_flags.is_empty() {
            let (verb, need) = match operator_flags.len() {
                1 => ("configures", "needs"),
                _ => ("configure", "need"),
            };
            problems.push(format!(
                "{} {verb} the embedded operator's controllers and {need} --embedded-operator \
                 (FLEXINFER_EMBEDDED_OPERATOR)",
                operator_flags.join(", ")
            ));
        }
        if self.outlier_base_ejection.is_zero()
            || self.outlier_max_ejection < self.outlier_base_ejection
        {
            problems.push(
                "FLEXINFER_PROXY_OUTLIER_BASE_EJECTION must be > 0 and at most FLEXINFER_PROXY_OUTLIER_MAX_EJECTION"
                    .to_string(),
            );
        }
        if self.health_check_interval.is_zero() || self.health_check_timeout.is_zero() {
            problems.push(
                "FLEXINFER_PROXY_HEALTH_CHECK_INTERVAL and FLEXINFER_PROXY_HEALTH_CHECK_TIMEOUT must be > 0"
                    .to_string(),
            );
        }
        if self.client_header_timeout.is_zero() {
            problems.push("PROXY_CLIENT_HEADER_TIMEOUT must be > 0".to_string());
        }
        if self.max_header_bytes < 1024 {
            problems.push(format!(
                "PROXY_MAX_HEADER_BYTES must be at least 1024 (got {})",
                self.max_header_bytes
            ));
        }
        if self.max_body_bytes == 0 {
            problems.push("PROXY_MAX_BODY_BYTES must be > 0".to_string());
        }
        if let Err(e) = self.label_group_mode() {
            problems.push(e);
        }
        if self.gateway_api.enabled && !self.kubernetes {
            problems.push(
                "FLEXINFER_GATEWAY_API (--gateway-api) needs Kubernetes mode (--kubernetes)"
                    .to_string(),
            );
        }
        if let Err(e) = self.gateway_api.selector() {
            problems.push(e);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}
