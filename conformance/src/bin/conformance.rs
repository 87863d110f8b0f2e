//! `flexinfer-conformance`: the suite users run against a deployed gateway.
//! The checks themselves are not available yet.

use std::process::ExitCode;

use clap::Parser;

/// Conformance and load checks for a deployed FlexInfer gateway.
#[derive(Debug, Parser)]
#[command(
    name = "flexinfer-conformance",
    version,
    about,
    long_about = "Conformance and load checks for a deployed FlexInfer gateway. It will run protocol \
(OpenAI API shapes, SSE streaming), routing (model extraction, strategies), cold-start \
(scale-from-zero activation and queueing), auth (Bearer tokens, rate limits) and load checks \
against the gateway at --gateway-url.\n\nNot available yet: the checks are still being built; \
running it exits with an error."
)]
struct ConformanceArgs {
    /// Base URL of the gateway to check, e.g. http://flexinfer-gateway.flexinfer-system.svc.
    #[arg(long, env = "FLEXINFER_GATEWAY_URL")]
    gateway_url: Option<String>,
}

fn main() -> ExitCode {
    let _args = ConformanceArgs::parse();
    eprintln!(
        "flexinfer-conformance: not available yet; the protocol, routing, cold-start, auth and load \
         checks are still being built"
    );
    ExitCode::FAILURE
}
