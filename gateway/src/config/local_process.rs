//! A model file entry with `command`: the local process the gateway runs for
//! it, as the embedded operator's [`LocalModelSpec`].

use std::time::Duration;

use flexinfer_operator::local::spec::DEFAULT_STOP_GRACE;
use flexinfer_operator::local::LocalModelSpec;
use flexinfer_operator::policy::replicas::ServerlessPolicy;

use super::{duration, ConfigError, ModelSpec};

/// Replaces every `${NAME}` in `value` with `lookup(NAME)`; `$` without a
/// brace is kept as it is. Returns the first unset name as the error.
pub(super) fn expand_env(
    value: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(&lookup(name).ok_or_else(|| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The process a model with a `command` runs as, and its cold-start bound.
pub(super) fn local_process(
    spec: &ModelSpec,
) -> Result<(Option<LocalModelSpec>, Option<Duration>), ConfigError> {
    let name = &spec.name;
    let Some(command) = spec.command.clone() else {
        if spec.port.is_some()
            || !spec.args.is_empty()
            || spec.serverless.is_some()
            || spec.gpu.is_some()
        {
            return Err(ConfigError::Invalid(format!(
                "model '{name}': port, args, serverless and gpu apply only to models with a command"
            )));
        }
        return Ok((None, None));
    };
    if !spec.endpoints.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "model '{name}': give either a command or endpoints, not both"
        )));
    }
    let port = spec.port.filter(|p| *p > 0).ok_or_else(|| {
        ConfigError::Invalid(format!(
            "model '{name}': a model with a command needs a port"
        ))
    })?;
    let health_path = spec.health.clone().unwrap_or_else(|| "/health".to_string());
    if !health_path.starts_with('/') {
        return Err(ConfigError::Invalid(format!(
            "model '{name}': health must be a path starting with '/'"
        )));
    }
    let serverless = spec.serverless.clone().unwrap_or_default();
    let min_replicas = serverless.min_replicas.unwrap_or(0);
    if min_replicas > 1 {
        return Err(ConfigError::Invalid(format!(
            "model '{name}': serverless.minReplicas can be 0 or 1 for a local process"
        )));
    }
    let gpu = spec.gpu.clone().unwrap_or_default();
    let expand = |field: &str, value: &str| {
        expand_env(value, |var| std::env::var(var).ok()).map_err(|var| {
            ConfigError::Invalid(format!(
                "model '{name}': {field} uses ${{{var}}}, which is not set in the environment"
            ))
        })
    };
    let args = spec
        .args
        .iter()
        .map(|a| expand("args", a))
        .collect::<Result<_, _>>()?;
    let env = spec
        .env
        .iter()
        .map(|(k, v)| Ok((k.clone(), expand("env", v)?)))
        .collect::<Result<_, ConfigError>>()?;
    let cold_start_timeout = duration(
        "serverless.coldStartTimeout",
        serverless.cold_start_timeout.as_deref(),
    )?;
    let process = LocalModelSpec {
        name: name.clone(),
        command: expand("command", &command)?,
        args,
        env,
        port,
        health_path,
        startup_timeout: duration("startupTimeout", spec.startup_timeout.as_deref())?
            .unwrap_or(Duration::from_secs(600)),
        stop_grace: DEFAULT_STOP_GRACE,
        serverless: ServerlessPolicy {
            enabled: serverless.enabled.unwrap_or(true),
            idle_timeout: duration("serverless.idleTimeout", serverless.idle_timeout.as_deref())?
                .unwrap_or(Duration::from_secs(300)),
            min_replicas,
            active_replicas: 1,
        },
        shared_group: gpu.shared.filter(|g| !g.trim().is_empty()),
        priority: gpu.priority.unwrap_or(0),
    };
    Ok((Some(process), cold_start_timeout))
}
