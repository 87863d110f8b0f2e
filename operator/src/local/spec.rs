//! What the local actuator is asked to run: one [`LocalModelSpec`] per model
//! and the [`ActuatorConfig`] shared by all of them, validated once at start.

use std::collections::HashMap;
use std::time::Duration;

use crate::policy::replicas::ServerlessPolicy;
use crate::policy::shared_gpu::SharedGroupPolicy;

/// Default time a child gets to answer its health path with 200.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time between SIGTERM and SIGKILL when a child is stopped.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);
/// Default period of the idle/leader re-evaluation.
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);
/// Default interval between health probes of a loading child: it bounds how
/// long queued requests wait after the backend is actually ready, and a probe
/// is one loopback request, so it is kept short.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_millis(20);
/// Default wait before the first retry of a failed model (doubles each time).
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// Default cap of the retry backoff.
pub const DEFAULT_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// One model served by a local child process on `127.0.0.1:<port>`.
///
/// The actuator starts `command args…` with `env` added to its own
/// environment, considers it ready once `GET <health_path>` answers 2xx, and
/// stops it when the serverless policy says the model is idle or a member of
/// its shared group takes the GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalModelSpec {
    /// Model name, unique among the specs.
    pub name: String,
    /// Program to run (looked up in `PATH` when it has no slash).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to the inherited environment.
    pub env: Vec<(String, String)>,
    /// The child serves `http://127.0.0.1:<port>`.
    pub port: u16,
    /// Path probed while loading, e.g. `/health`; a 2xx answer means ready.
    pub health_path: String,
    /// The model fails when it is not healthy this long after its start.
    pub startup_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when the child is stopped.
    pub stop_grace: Duration,
    /// Scale-to-zero settings: with `min_replicas` 0 the child stops after
    /// `idle_timeout` without requests; with `min_replicas` ≥ 1 (or
    /// `enabled: false`) it starts at boot and is never stopped for idleness.
    pub serverless: ServerlessPolicy,
    /// Shared-GPU group: at most one member of a group runs at a time.
    pub shared_group: Option<String>,
    /// Priority inside the shared group; higher wins.
    pub priority: i32,
}

impl LocalModelSpec {
    /// A spec with the defaults: health path `/health`, a 60 s startup
    /// timeout, a 10 s stop grace, the default serverless policy, no group.
    pub fn new(name: impl Into<String>, command: impl Into<String>, port: u16) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            port,
            health_path: "/health".into(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            stop_grace: DEFAULT_STOP_GRACE,
            serverless: ServerlessPolicy::default(),
            shared_group: None,
            priority: 0,
        }
    }

    /// Whether the policy keeps this model running without demand
    /// (`min_replicas` ≥ 1, or serverless disabled).
    pub fn always_on(&self) -> bool {
        !self.serverless.enabled || self.serverless.min_replicas > 0
    }
}

/// Settings of the actuator as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActuatorConfig {
    /// Anti-thrashing settings applied to every shared group.
    pub group_policy: SharedGroupPolicy,
    /// Period of the idle and leader re-evaluation (idle stops happen at
    /// most this late).
    pub tick: Duration,
    /// Interval between health probes of a loading child.
    pub health_interval: Duration,
    /// Wait before retrying a model after its first consecutive failure;
    /// doubled after each further failure.
    pub retry_backoff: Duration,
    /// Upper bound of that wait.
    pub retry_backoff_max: Duration,
}

impl Default for ActuatorConfig {
    fn default() -> Self {
        Self {
            group_policy: SharedGroupPolicy::default(),
            tick: DEFAULT_TICK,
            health_interval: DEFAULT_HEALTH_INTERVAL,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            retry_backoff_max: DEFAULT_RETRY_BACKOFF_MAX,
        }
    }
}

impl ActuatorConfig {
    /// Wait before the next start after `consecutive_failures` failures in a
    /// row: `retry_backoff · 2^(n-1)`, at most `retry_backoff_max`; zero
    /// before any failure.
    pub fn retry_delay(&self, consecutive_failures: u32) -> Duration {
        let Some(doublings) = consecutive_failures.checked_sub(1) else {
            return Duration::ZERO;
        };
        let factor = 1u32.checked_shl(doublings.min(31)).unwrap_or(u32::MAX);
        self.retry_backoff
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.retry_backoff_max)
    }
}

/// Why the actuator cannot start: a bad set of specs, or no runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// A spec has an empty name.
    #[error("a local model has an empty name")]
    EmptyName,
    /// Two specs share a name.
    #[error("local model {0:?} is defined twice")]
    DuplicateName(String),
    /// A spec has no command.
    #[error("local model {0:?} has an empty command")]
    EmptyCommand(String),
    /// A spec has port 0.
    #[error("local model {0:?} has port 0; give it the fixed port its server listens on")]
    NoPort(String),
    /// Two models that may run at the same time use one port.
    #[error(
        "local models {first:?} and {second:?} both use port {port} and may run at the same time"
    )]
    PortConflict {
        /// The earlier spec.
        first: String,
        /// The later spec.
        second: String,
        /// The shared port.
        port: u16,
    },
    /// `LocalActuator::start` was called outside a Tokio runtime.
    #[error("the local actuator must be started inside a Tokio runtime")]
    NoRuntime,
}

/// Checks names, commands and ports. Members of one shared group may share a
/// port, since they never run together.
pub fn validate(specs: &[LocalModelSpec]) -> Result<(), StartError> {
    let mut names = HashMap::new();
    let mut ports: HashMap<u16, &LocalModelSpec> = HashMap::new();
    for spec in specs {
        if spec.name.is_empty() {
            return Err(StartError::EmptyName);
        }
        if names.insert(spec.name.as_str(), ()).is_some() {
            return Err(StartError::DuplicateName(spec.name.clone()));
        }
        if spec.command.trim().is_empty() {
            return Err(StartError::EmptyCommand(spec.name.clone()));
        }
        if spec.port == 0 {
            return Err(StartError::NoPort(spec.name.clone()));
        }
        match ports.get(&spec.port) {
            Some(other)
                if other.shared_group.is_none() || other.shared_group != spec.shared_group =>
            {
                return Err(StartError::PortConflict {
                    first: other.name.clone(),
                    second: spec.name.clone(),
                    port: spec.port,
                });
            }
            Some(_) => {}
            None => {
                ports.insert(spec.port, spec);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grouped(name: &str, port: u16, group: &str) -> LocalModelSpec {
        LocalModelSpec {
            shared_group: Some(group.into()),
            ..LocalModelSpec::new(name, "server", port)
        }
    }

    #[test]
    fn accepts_distinct_models_and_group_members_sharing_a_port() {
        let specs = [
            LocalModelSpec::new("a", "server", 8001),
            grouped("b", 8002, "g"),
            grouped("c", 8002, "g"),
        ];
        assert_eq!(validate(&specs), Ok(()));
    }

    #[test]
    fn rejects_bad_specs() {
        let a = LocalModelSpec::new("a", "server", 8001);
        assert_eq!(
            validate(&[a.clone(), a.clone()]),
            Err(StartError::DuplicateName("a".into()))
        );
        assert_eq!(
            validate(&[LocalModelSpec::new("", "x", 1)]),
            Err(StartError::EmptyName)
        );
        assert_eq!(
            validate(&[LocalModelSpec::new("a", " ", 1)]),
            Err(StartError::EmptyCommand("a".into()))
        );
        assert_eq!(
            validate(&[LocalModelSpec::new("a", "x", 0)]),
            Err(StartError::NoPort("a".into()))
        );
        let conflict = validate(&[a, LocalModelSpec::new("b", "server", 8001)]);
        assert!(matches!(
            conflict,
            Err(StartError::PortConflict { port: 8001, .. })
        ));
        let across_groups = validate(&[grouped("x", 9000, "g1"), grouped("y", 9000, "g2")]);
        assert!(matches!(
            across_groups,
            Err(StartError::PortConflict { .. })
        ));
    }

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        let config = ActuatorConfig::default();
        let delays: Vec<_> = (0..8).map(|n| config.retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(config.retry_delay(u32::MAX), DEFAULT_RETRY_BACKOFF_MAX);
    }

    #[test]
    fn always_on_follows_the_serverless_policy() {
        let mut spec = LocalModelSpec::new("a", "server", 1);
        assert!(!spec.always_on());
        spec.serverless.min_replicas = 1;
        assert!(spec.always_on());
        spec.serverless = ServerlessPolicy {
            enabled: false,
            ..Default::default()
        };
        assert!(spec.always_on());
    }
}
