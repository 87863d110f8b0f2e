//! The timing table of scale-to-zero and GPU sharing, read from the
//! constants the policies and the gateway use.

use std::time::Duration;

use clap::CommandFactory;
use flexinfer_operator::policy::{gpu_group, replicas, shared_gpu};

use crate::markdown::{code, table};

/// Shows a duration as `5m`, `2m 30s`, `10s`.
pub fn duration(value: Duration) -> String {
    humantime::format_duration(value).to_string()
}

/// The default of the gateway flag read from `env`, as clap reports it.
fn gateway_default(env: &str) -> String {
    let command = flexinfer_gateway::cli::Cli::command();
    let default = command
        .get_arguments()
        .find(|arg| arg.get_env().is_some_and(|name| name == env))
        .and_then(|arg| arg.get_default_values().first())
        .map(|value| value.to_string_lossy().into_owned());
    default.unwrap_or_else(|| panic!("the gateway has no flag read from {env}"))
}

/// The Markdown of the timing region of `docs/scaling.md`.
pub fn render() -> String {
    let row =
        |what: &str, setting: String, default: String| vec![what.to_owned(), setting, default];
    let scale_to_zero = vec![
        row(
            "Idle time before a model scales to zero",
            "`Model.spec.serverless.idleTimeout`".to_owned(),
            duration(replicas::DEFAULT_IDLE_TIMEOUT),
        ),
        row(
            "Idle time of image backends (diffusers, comfyui, vllm-omni)",
            "`Model.spec.serverless.idleTimeout`".to_owned(),
            duration(flexinfer_crds::defaults::IMAGE_IDLE_TIMEOUT),
        ),
        row(
            "Longest wait for a model to become ready after activation",
            format!(
                "`Model.spec.serverless.coldStartTimeout`, gateway {}",
                code("PROXY_COLD_START_TIMEOUT")
            ),
            gateway_default("PROXY_COLD_START_TIMEOUT"),
        ),
        row(
            "Longest time a request waits in the activation queue",
            code("PROXY_QUEUE_TIMEOUT"),
            gateway_default("PROXY_QUEUE_TIMEOUT"),
        ),
        row(
            "Requests queued per model during a cold start (503 beyond)",
            code("PROXY_MAX_QUEUE_SIZE"),
            gateway_default("PROXY_MAX_QUEUE_SIZE"),
        ),
        row(
            "`Retry-After` sent with a queue-full 503",
            "fixed".to_owned(),
            format!("{}s", flexinfer_gateway::activation::QUEUE_FULL_RETRY_AFTER),
        ),
    ];
    let shared = vec![
        row(
            "Demand must be this recent to count",
            "`sharedDemandWindow`".to_owned(),
            duration(shared_gpu::DEFAULT_DEMAND_WINDOW),
        ),
        row(
            "A new leader is protected from preemption for",
            "`Model.spec.gpu.swapCooldown`".to_owned(),
            duration(shared_gpu::DEFAULT_SWAP_COOLDOWN),
        ),
        row(
            "Queued requests needed before demand counts",
            "—".to_owned(),
            shared_gpu::DEFAULT_QUEUE_THRESHOLD.to_string(),
        ),
    ];
    let group = vec![
        row(
            "Minimum run time of the active model",
            "`minimumRunDurationSeconds`".to_owned(),
            duration(gpu_group::DEFAULT_MINIMUM_RUN_DURATION),
        ),
        row(
            "Cooldown of a model after it was preempted",
            "`cooldownAfterPreemptionSeconds`".to_owned(),
            duration(gpu_group::DEFAULT_COOLDOWN_AFTER_PREEMPTION),
        ),
        row(
            "Queue depth that makes demand count",
            "`requestQueueThreshold`".to_owned(),
            gpu_group::DEFAULT_REQUEST_QUEUE_THRESHOLD.to_string(),
        ),
        row(
            "Demand must persist this long (hysteresis)",
            "`hysteresisWindowSeconds`".to_owned(),
            duration(gpu_group::DEFAULT_HYSTERESIS_WINDOW),
        ),
        row(
            "Idle time after which the active model releases the group",
            "—".to_owned(),
            duration(gpu_group::DEFAULT_IDLE_TIMEOUT),
        ),
        row(
            "Re-check interval while a swap is blocked",
            "—".to_owned(),
            duration(gpu_group::BLOCKED_REQUEUE),
        ),
    ];
    let header = ["What", "Setting", "Default"];
    format!(
        "**Scale to zero**\n\n{}\n**GPU sharing with `Model.spec.gpu.shared` (v1alpha2)**\n\n{}\n\
         **GPU sharing with a `GPUGroup` (v1alpha1)**\n\n{}",
        table(&header, &scale_to_zero),
        table(&header, &shared),
        table(&header, &group)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_carries_the_policy_defaults() {
        let text = render();
        assert!(text.contains("| Idle time before a model scales to zero | `Model.spec.serverless.idleTimeout` | 5m |"), "{text}");
        assert!(
            text.contains("| Demand must be this recent to count | `sharedDemandWindow` | 2m |"),
            "{text}"
        );
        assert!(text.contains("| `PROXY_QUEUE_TIMEOUT` | 60s |"), "{text}");
        assert_eq!(duration(Duration::from_secs(90)), "1m 30s");
    }
}
