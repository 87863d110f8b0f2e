//! The `flexinfer-conformance` command line: `run` (the checks of
//! [`crate::conformance`] against a gateway or the `--local` stack) and
//! `load` (the load generator of [`crate::loadgen`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::conformance::roles::{self, Role};
use crate::conformance::{self, local, Profile};
use crate::loadgen::engine::Pace;

/// Conformance checks for a FlexInfer gateway.
#[derive(Debug, Parser)]
#[command(
    name = "flexinfer-conformance",
    version,
    about,
    long_about = "Conformance checks for a FlexInfer gateway: OpenAI API shapes, SSE framing \
and chunk spacing, error answers, model extraction, routing strategies, cold start, auth and \
rate limits, each reported with a stable id as pass, fail or skip (`run`), and a load \
generator (`load`). `run` exits 0 when no check failed, 1 when one did, 2 when the run could \
not start."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs the checks of a profile and reports them.
    Run(RunArgs),
    /// Loads a gateway (or any OpenAI-compatible server) with chat
    /// completions at a fixed rate (open loop) or concurrency (closed loop)
    /// and reports throughput, latency and TTFT percentiles and errors.
    Load(LoadArgs),
}

/// Flags of `load`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("pace").required(true).args(["rate", "concurrency"])))]
pub struct LoadArgs {
    /// Base URL to load (plain http), e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub gateway: String,
    /// Open loop: requests per second, sent on schedule whatever the answers
    /// (latency counts from when each request was due).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Closed loop: requests in flight at all times, one per connection.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// How long to load.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Stream the answers (measures TTFT; a stream must end with [DONE]).
    #[arg(long)]
    pub stream: bool,
    /// Model to ask for (default: the first one GET /v1/models lists).
    #[arg(long)]
    pub model: Option<String>,
    /// API key, sent as `Authorization: Bearer <key>`.
    #[arg(long, env = "FLEXINFER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// max_tokens of each request.
    #[arg(long, default_value_t = 16)]
    pub max_tokens: u32,
    /// Request path.
    #[arg(long, default_value = "/v1/chat/completions")]
    pub path: String,
    /// Open loop: keep-alive connections to spread the requests over.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Longest time one request may take.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub timeout: Duration,
    /// Worker threads (default: one per CPU core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the Markdown report to this file.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write a PNG chart of per-second p50 (blue) and p99 (red) latency.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

/// Flags of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Base URL of the gateway to check (plain http), e.g. http://flexinfer-gateway.flexinfer-system.svc.
    #[arg(long, required_unless_present = "local", conflicts_with = "local")]
    pub gateway: Option<String>,
    /// Start a flexinfer-sim and a flexinfer-gateway on loopback and check those
    /// (binaries next to this one, or FLEXINFER_SIM_BIN / FLEXINFER_GATEWAY_BIN).
    #[arg(long)]
    pub local: bool,
    /// API key, sent as `Authorization: Bearer <key>`.
    #[arg(long, env = "FLEXINFER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Model to check with (default: the first one GET /v1/models lists).
    #[arg(long)]
    pub model: Option<String>,
    /// Base URL of the flexinfer-sim serving --model, when it is one; lets
    /// checks read its request recorder (implied by --local).
    #[arg(long, conflicts_with = "local")]
    pub sim_url: Option<String>,
    /// Which checks to run: quick (protocol, errors, extraction) or full
    /// (quick + streaming spacing, oversize body, routing, cold start, auth
    /// and rate limits).
    #[arg(long, value_enum, default_value_t = Profile::Quick)]
    pub profile: Profile,
    /// Model that plays ROLE in the full profile, as ROLE=MODEL (repeatable).
    /// Roles: session, prefix, least-loaded, stream, cold, queue, slow,
    /// limited. Unmapped roles use the model named conformance-<role> when
    /// the gateway lists it; checks without their model are skipped.
    #[arg(long = "role", value_name = "ROLE=MODEL", value_parser = roles::parse_assignment)]
    pub roles: Vec<(Role, String)>,
    /// The gateway's --max-body-bytes (the oversize check sends one byte more).
    #[arg(long, default_value_t = conformance::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// The gateway's --max-queue-size (the queue-full check fills it).
    #[arg(long, default_value_t = conformance::DEFAULT_MAX_QUEUE_SIZE)]
    pub max_queue_size: usize,
    /// Leave out a check (its id) or a group (a prefix ending in `.`, e.g.
    /// `routing.`); reported as skipped with the reason (repeatable). For a
    /// backend known to lack a feature, e.g. embeddings.
    #[arg(long = "skip", value_name = "ID")]
    pub skip: Vec<String>,
    /// Start the --local stack deliberately misconfigured (negative controls).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        hide = true,
        requires = "local"
    )]
    pub local_break: Vec<local::Break>,
    /// Write a JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

impl LoadArgs {
    /// How requests are paced: `--rate` (open loop) wins over
    /// `--concurrency` (closed loop); `None` when neither is given.
    pub fn pace(&self) -> Option<Pace> {
        match (self.rate, self.concurrency) {
            (Some(rate), _) => Some(Pace::Rate(rate)),
            (None, Some(c)) => Some(Pace::Concurrency(c)),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_needs_a_gateway_or_local() {
        assert!(Cli::try_parse_from(["flexinfer-conformance", "run"]).is_err());
        assert!(Cli::try_parse_from([
            "flexinfer-conformance",
            "run",
            "--local",
            "--gateway=http://127.0.0.1:8080"
        ])
        .is_err());
        let cli = Cli::try_parse_from(["flexinfer-conformance", "run", "--local"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run: {cli:?}")
        };
        assert!(args.local);
        assert_eq!(args.profile, Profile::Quick);
        assert_eq!(args.max_body_bytes, conformance::DEFAULT_MAX_BODY_BYTES);
        assert_eq!(args.max_queue_size, conformance::DEFAULT_MAX_QUEUE_SIZE);
    }

    #[test]
    fn load_needs_a_pace() {
        let base = [
            "flexinfer-conformance",
            "load",
            "--gateway=http://127.0.0.1:8080",
        ];
        assert!(Cli::try_parse_from(base).is_err());
        let load = |extra: &[&str]| {
            let argv = base.iter().chain(extra).copied();
            match Cli::try_parse_from(argv).unwrap().command {
                Command::Load(args) => args,
                other => panic!("not load: {other:?}"),
            }
        };
        let open = load(&["--rate=50"]);
        assert_eq!(open.pace(), Some(Pace::Rate(50.0)));
        assert_eq!(open.duration, Duration::from_secs(10));
        assert_eq!(open.connections, 64);
        assert_eq!(
            load(&["--concurrency=8"]).pace(),
            Some(Pace::Concurrency(8))
        );
    }
}
