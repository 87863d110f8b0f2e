//! What the flags come to: parsing with the environment, and the settings
//! other modules take, derived from the flags.

use super::*;

impl Cli {
    /// Parses the process's arguments and environment (see
    /// [`Cli::try_parse_env_from`]), exiting with clap's message on error.
    pub fn parse_env() -> Self {
        Self::try_parse_env_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// Parses `args` and the environment, where a variable set to the empty
    /// string counts as unset: a chart renders an unset value as `""`, which
    /// must mean "the default", not a value that fails to parse.
    pub fn try_parse_env_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let command = Self::command().mut_args(|arg| {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|value| value.is_empty());
            if empty {
                arg.env(Option::<&'static str>::None)
            } else {
                arg
            }
        });
        let mut matches = command.try_get_matches_from(args)?;
        Self::from_arg_matches_mut(&mut matches)
    }

    /// This replica's identity in the leader-election Lease: `--pod-name`
    /// (`POD_NAME`), else `HOSTNAME`, else `flexinfer-gateway-<pid>`.
    pub fn identity(&self) -> String {
        self.pod_name
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("flexinfer-gateway-{}", std::process::id()))
    }

    /// Namespace the embedded controllers watch: the one watched namespace,
    /// else all (`None`); the controllers watch one namespace or all.
    pub fn controller_namespace(&self) -> Option<String> {
        match (self.all_namespaces, self.namespaces.as_slice()) {
            (true, _) => None,
            (false, []) => Some(self.pod_namespace.clone()),
            (false, [one]) => Some(one.clone()),
            (false, _) => None,
        }
    }

    /// The settings of the embedded operator's controllers
    /// (`--embedded-operator`) for the replica `identity`, with the backend
    /// catalog's `image_overrides`: the mapping flexinfer-operator uses
    /// ([`ControllerArgs::controller_settings`]), with the Lease in
    /// POD_NAMESPACE when `--leader-elect` is set and events reported as
    /// `flexinfer-gateway`. The metrics registry is left to the caller.
    pub fn controller_settings(
        &self,
        identity: &str,
        image_overrides: BTreeMap<String, String>,
    ) -> ControllerSettings {
        let leader_election = self.leader_elect.then(|| {
            LeaderElection::new(&self.pod_namespace, identity)
                .with_lease(&self.leader_election_lease)
        });
        let mut settings = self.controllers.controller_settings(
            self.controller_namespace(),
            leader_election,
            image_overrides,
        );
        settings.reporter = "flexinfer-gateway".to_owned();
        settings
    }

    /// Whether the gateway runs in global mode (`--global` or `--global-object`).
    pub fn global_mode(&self) -> bool {
        self.global.is_some() || self.global_object.is_some()
    }

    /// When endpoints are taken out of rotation.
    pub fn outlier_policy(&self) -> crate::routing::health::OutlierPolicy {
        crate::routing::health::OutlierPolicy {
            consecutive_failures: self.outlier_consecutive_failures,
            base_ejection: self.outlier_base_ejection,
            max_ejection: self.outlier_max_ejection,
        }
    }

    /// Limits of client connections.
    pub fn connection_settings(&self) -> crate::connections::ConnectionSettings {
        crate::connections::ConnectionSettings {
            header_timeout: self.client_header_timeout,
            max_header_bytes: self.max_header_bytes,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
        }
    }

    /// The label-group mode (`--label-group-routing`); unset is round-robin.
    pub fn label_group_mode(&self) -> Result<crate::label_groups::LabelGroupMode, String> {
        self.label_group_routing.as_deref().unwrap_or("").parse()
    }

    /// Bounds of routing-key derivation (`PROXY_ROUTING_*_MAX_LENGTH`); 0
    /// keeps a bound's default.
    pub fn key_limits(&self) -> crate::routing::KeyLimits {
        let or = |value: usize, default: usize| if value == 0 { default } else { value };
        let d = crate::routing::KeyLimits::DEFAULT;
        crate::routing::KeyLimits {
            explicit_key_max_len: or(self.routing_explicit_key_max_length, d.explicit_key_max_len),
            system_segment_max_len: or(
                self.routing_system_segment_max_length,
                d.system_segment_max_len,
            ),
            document_segment_max_len: or(
                self.routing_document_segment_max_length,
                d.document_segment_max_len,
            ),
            first_turn_max_len: d.first_turn_max_len,
        }
    }

    /// Upstream attempts clamped to 1..=3; 0 counts as the default, 2.
    pub fn attempts(&self) -> usize {
        match self.upstream_max_attempts {
            0 => 2,
            n => n.min(3),
        }
    }
}
