//! The health probe of one member gateway: `GET /v1/models`, which proves
//! the gateway answers and tells which models it serves and how warm each
//! is (`status.phase`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pingora_core::connectors::http::Connector;
use serde::Deserialize;

use super::config::MemberCluster;
use super::policy::Warmth;
use crate::http_get::{get, GetError};

/// Largest model list read from a member, in bytes.
const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;

/// What one successful probe learnt.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    /// The address the gateway answered on.
    pub addr: SocketAddr,
    /// Time from resolving the name to the last byte of the list.
    pub latency: Duration,
    /// Listed models and their warmth.
    pub models: Vec<(String, Warmth)>,
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The host name did not resolve.
    #[error("cannot resolve {0}")]
    Resolve(String),
    /// No answer within the probe timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connecting, writing or reading failed.
    #[error("{0}")]
    Http(String),
    /// The gateway answered with another status than 200.
    #[error("GET /v1/models answered {0}")]
    Status(u16),
    /// The answer is not an OpenAI model list.
    #[error("unreadable model list: {0}")]
    Body(String),
}

#[derive(Deserialize)]
struct ModelList {
    #[serde(default)]
    data: Option<Vec<ListedModel>>,
}

#[derive(Deserialize)]
struct ListedModel {
    id: String,
    #[serde(default)]
    status: Option<ListedStatus>,
}

#[derive(Deserialize)]
struct ListedStatus {
    #[serde(default)]
    phase: Option<String>,
}

/// Parses a member's `GET /v1/models` answer; `"data": null` (an empty
/// list in some servers) is no model.
pub fn parse_model_list(body: &[u8]) -> Result<Vec<(String, Warmth)>, ProbeError> {
    let list: ModelList =
        serde_json::from_slice(body).map_err(|e| ProbeError::Body(e.to_string()))?;
    Ok(list
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let phase = m.status.and_then(|s| s.phase);
            (m.id, Warmth::from_phase(phase.as_deref()))
        })
        .collect())
}

/// Probes `cluster` once, within `timeout` in all (resolution included).
/// Each probe uses a fresh connection, so a probe never reuses a
/// connection the member closed and always measures a real connect.
pub async fn probe(
    connector: &Connector,
    cluster: &MemberCluster,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<Probed, ProbeError> {
    let start = Instant::now();
    match tokio::time::timeout(
        timeout,
        exchange(connector, cluster, authorization, timeout),
    )
    .await
    {
        Ok(Ok((addr, models))) => Ok(Probed {
            addr,
            latency: start.elapsed(),
            models,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ProbeError::Timeout(timeout)),
    }
}

async fn exchange(
    connector: &Connector,
    cluster: &MemberCluster,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<(SocketAddr, Vec<(String, Warmth)>), ProbeError> {
    let addr = tokio::net::lookup_host(cluster.authority.as_str())
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| ProbeError::Resolve(cluster.authority.clone()))?;
    let answer = get(
        connector,
        addr,
        &cluster.host,
        "/v1/models",
        authorization,
        timeout,
        MAX_LIST_BYTES,
    )
    .await;
    let (status, body) = answer.map_err(|e| match e {
        GetError::Http(e) => ProbeError::Http(e),
        GetError::TooLarge(n) => ProbeError::Body(format!("model list larger than {n} bytes")),
    })?;
    if status != 200 {
        return Err(ProbeError::Status(status));
    }
    Ok((addr, parse_model_list(&body)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flexinfer_and_plain_openai_lists() {
        let body = br#"{"object":"list","data":[
            {"id":"a","object":"model","status":{"phase":"Ready"}},
            {"id":"b","status":{"phase":"Idle"}},
            {"id":"c","status":{"phase":"Loading"}},
            {"id":"d","object":"model","owned_by":"vllm"}]}"#;
        assert_eq!(
            parse_model_list(body).unwrap(),
            [
                ("a".to_string(), Warmth::Ready),
                ("b".to_string(), Warmth::Cold),
                ("c".to_string(), Warmth::Warming),
                ("d".to_string(), Warmth::Ready),
            ]
        );
        assert!(parse_model_list(br#"{"object":"list","data":null}"#)
            .unwrap()
            .is_empty());
        assert!(parse_model_list(b"<html>").is_err());
    }
}
