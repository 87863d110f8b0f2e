//! Global mode: the gateways of member clusters, from a GlobalProxy file
//! or object, probed in the background (see [`crate::global`]).

use super::{Mode, Upstreams};
use crate::cli::Cli;
use crate::global::{GlobalMode, GlobalObject, ProbeSettings};
use crate::metrics::Metrics;
use crate::ratelimit::LimitSettings;
use pingora_core::services::background::background_service;

/// Loads the GlobalProxy (file or object) and its cluster monitor.
pub fn start(cli: &Cli, metrics: &Metrics, limits: LimitSettings) -> anyhow::Result<Mode> {
    let probes = probe_settings(cli);
    let (global, source) = match (&cli.global, &cli.global_object) {
        (Some(path), _) => (
            GlobalMode::load(path, probes, limits, metrics)?,
            format!("global: {}", path.display()),
        ),
        (None, Some(reference)) => {
            let object = GlobalObject::parse(reference, cli.kubeconfig.clone())
                .map_err(|e| anyhow::anyhow!(e))?;
            (
                GlobalMode::from_object(object, probes, limits, metrics),
                format!("global: GlobalProxy {reference}"),
            )
        }
        (None, None) => anyhow::bail!("global mode needs --global or --global-object"),
    };
    let authorization = cli
        .global_member_token
        .as_ref()
        .map(|token| {
            http::HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
                anyhow::anyhow!("FLEXINFER_GLOBAL_MEMBER_TOKEN is not a valid header value")
            })
        })
        .transpose()?;
    tracing::info!(
        clusters = global.clusters().len(),
        "global mode: routing to member clusters' gateways"
    );
    let registry = global.registry();
    Ok(Mode {
        source,
        routes: registry.clone(),
        lifecycle: None,
        failures: Some(registry),
        upstreams: Upstreams::MemberGateways { authorization },
        services: vec![Box::new(background_service(
            "global cluster monitor",
            global.into_monitor(),
        ))],
        shutdown: None,
        step_down: None,
        gateway_api: None,
    })
}

/// How member gateways are probed.
fn probe_settings(cli: &Cli) -> ProbeSettings {
    ProbeSettings {
        interval: cli.global_probe_interval,
        timeout: cli.global_probe_timeout,
        authorization: cli
            .global_member_token
            .as_ref()
            .map(|t| format!("Bearer {}", t.trim())),
    }
}
