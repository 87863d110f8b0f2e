//! `GET /debug/config` on the admin listener: the settings in force, as
//! JSON with the original gateway's key names where it has the setting,
//! every secret redacted.

use std::time::Duration;

use serde_json::{json, Value};

use super::Cli;

/// What a set secret reads as (the original's marker); an unset one is `""`.
pub const REDACTED: &str = "***redacted***";

fn secret(value: Option<&str>) -> &'static str {
    match value {
        Some(v) if !v.trim().is_empty() => REDACTED,
        _ => "",
    }
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn path(p: Option<&std::path::PathBuf>) -> Value {
    p.map_or(Value::Null, |p| Value::String(p.display().to_string()))
}

impl Cli {
    /// The effective settings; secrets (API keys, admin keys, the member
    /// gateways' key, the replicas' shared secret) appear only as
    /// [`REDACTED`].
    pub fn debug_config(&self) -> Value {
        let mode = if self.global_mode() {
            "global"
        } else if self.kubernetes {
            "kubernetes"
        } else {
            "file"
        };
        let keys = self.key_limits();
        let mut first = json!({
            "mode": mode,
            "config": path(self.config.as_ref()),
            "global": path(self.global.as_ref()),
            "globalObject": self.global_object,
            "globalProbeInterval": duration(self.global_probe_interval),
            "globalProbeTimeout": duration(self.global_probe_timeout),
            "globalMemberToken": secret(self.global_member_token.as_deref()),
            "namespace": self.pod_namespace,
            "namespaces": self.namespaces,
            "allNamespaces": self.all_namespaces,
            "embeddedOperator": self.embedded_operator,
            "leaderElect": self.leader_elect,
            "kubeResync": duration(self.kube_resync),
            "touchInterval": duration(self.touch_interval),
            "listen": self.listen,
            "metricsListen": self.metrics_listen,
            "threads": self.threads,
            "maxBodyBytes": self.max_body_bytes,
            "clientHeaderTimeout": duration(self.client_header_timeout),
            "maxHeaderBytes": self.max_header_bytes,
            "maxConnections": self.max_connections,
            "maxConnectionsPerClient": self.max_connections_per_client,
            "maxQueueSize": self.max_queue_size,
            "queueTimeout": duration(self.queue_timeout),
            "coldStartTimeout": duration(self.cold_start_timeout),
            "maxConcurrencyPerEndpoint": self.max_concurrency_per_endpoint,
            "routingEnabled": self.routing_enabled,
            "routingExplicitKeyMaxLength": keys.explicit_key_max_len,
            "routingSystemSegmentMaxLength": keys.system_segment_max_len,
            "routingDocumentSegmentMaxLength": keys.document_segment_max_len,
            "labelGroupRouting": self.label_group_routing.as_deref().filter(|m| !m.is_empty()).unwrap_or("round-robin"),
            "routeDebugHeader": self.route_debug_header,
            "loadScrapeInterval": duration(self.load_scrape_interval),
            "loadScrapeTimeout": duration(self.load_scrape_timeout),
            "validateRequests": self.validate_requests,
            "usageHeaders": self.usage_headers,
            "tenantCacheSalt": self.tenant_cache_salt,
            "backoffEnabled": self.backoff_enabled,
            "backoffMaxRetries": self.backoff_max_retries,
            "backoffInitialWait": duration(self.backoff_initial_wait),
            "backoffMaxWait": duration(self.backoff_max_wait),
        });
        let second = json!({
            "rateLimitEnabled": self.rate_limit_enabled,
            "rateLimitPerModel": self.rate_limit_per_model,
            "rateLimitBurst": self.rate_limit_burst,
            "rateLimitGlobal": self.rate_limit_global,
            "rateLimitGlobalBurst": self.rate_limit_global_burst,
            "authEnabled": self.auth_enabled,
            "authToken": secret(Some(&self.auth_token)),
            "authTokenFile": path(self.auth_token_file.as_ref()),
            "apiKeyFile": path(self.api_key_file.as_ref()),
            "adminAuthToken": secret(Some(&self.admin_auth_token)),
            "upstreamMaxAttempts": self.attempts(),
            "upstreamConnectTimeout": duration(self.upstream_connect_timeout),
            "upstreamReadTimeout": duration(self.upstream_read_timeout),
            "upstreamKeepaliveTimeout": duration(self.upstream_keepalive_timeout),
            "outlierConsecutiveFailures": self.outlier_consecutive_failures,
            "outlierBaseEjection": duration(self.outlier_base_ejection),
            "outlierMaxEjection": duration(self.outlier_max_ejection),
            "healthCheckInterval": duration(self.health_check_interval),
            "healthCheckTimeout": duration(self.health_check_timeout),
            "maxTokensClampEnabled": self.max_tokens_clamp_enabled,
            "maxTokensClampPromptReserve": match self.max_tokens_clamp_prompt_reserve_tokens {
                0 => 512,
                n => n,
            },
            "admissionEnabled": self.admission_enabled,
            "admissionSafetyMarginPercent": self.admission_safety_margin_percent.clamp(0, 50),
            "admissionDefaultMaxTokens": self.admission_default_max_tokens,
            "tenantDefaultMaxTokens": self.tenant_default_max_tokens,
            "shutdownDrainDelay": self.shutdown_drain_delay.map(duration),
            "gracefulShutdownTimeout": duration(self.graceful_shutdown_timeout),
            "reloadInterval": duration(self.reload_interval),
            "logFormat": match self.log_format {
                super::LogFormat::Pretty => "pretty",
                super::LogFormat::Json => "json",
            },
            "logLevel": self.log_level,
            "routingPeers": self.routing_peers,
            "routingPeerListen": self.routing_peer_listen,
            "routingPeerSecret": secret(self.routing_peer_secret.as_deref()),
            "routingPeerSecretFile": path(self.routing_peer_secret_file.as_ref()),
            "routingPeerSecretName": self.routing_peer_secret_name,
            "routingPeerSecretKey": self.routing_peer_secret_key,
            "routingPeerSecretGenerate": self.routing_peer_secret_generate,
            "routingPeerSecretGrace": duration(self.routing_peer_secret_grace),
            "routingPeerFlushInterval": duration(self.routing_peer_flush_interval),
            "routingPeerTimeout": duration(self.routing_peer_timeout),
            "routingPeerRefresh": duration(self.routing_peer_refresh),
        });
        if let (Value::Object(all), Value::Object(rest)) = (&mut first, second) {
            all.extend(rest);
            all.insert(
                "heldStreamProgressInterval".into(),
                duration(self.held_stream_progress_interval).into(),
            );
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    /// Every flag whose value the help hides (the secrets) is given a
    /// value of its own; none of them may show in the dump.
    #[test]
    fn no_secret_appears_in_the_dump() {
        let secrets: Vec<(String, String)> = Cli::command()
            .get_arguments()
            .filter(|a| a.is_hide_env_values_set())
            .filter_map(|a| a.get_long())
            .map(|long| (long.to_owned(), format!("s3cret-{long}-value")))
            .collect();
        assert!(secrets.len() >= 3, "{secrets:?}");
        let mut args = vec!["x".to_owned(), "--global".to_owned(), "g.yaml".to_owned()];
        for (long, value) in &secrets {
            args.push(format!("--{long}={value}"));
        }
        let text = Cli::parse_from(args).debug_config().to_string();
        for (long, value) in &secrets {
            assert!(!text.contains(value), "--{long} leaked: {text}");
        }
        let dump: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(dump["authToken"], REDACTED);
        assert_eq!(dump["adminAuthToken"], REDACTED);
        assert_eq!(dump["globalMemberToken"], REDACTED);
        assert_eq!(dump["routingPeerSecret"], REDACTED);
        let plain = Cli::parse_from(["x", "--config", "m.yaml"]).debug_config();
        assert_eq!(plain["authToken"], "");
        assert_eq!(plain["labelGroupRouting"], "round-robin");
        assert_eq!(plain["queueTimeout"], "1m");
        assert_eq!(plain["validateRequests"], false);
    }
}
