//! `flexinfer-conformance`: black-box checks against a FlexInfer gateway.
//!
//! `flexinfer-conformance run --gateway <url>` checks a deployed gateway;
//! `flexinfer-conformance run --local` starts a simulator and a gateway on
//! loopback and checks those. Exit status: 0 when no check failed, 1 when one
//! did, 2 when the run could not start.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use flexinfer_conformance::conformance::{self, http::Target, local, report, Context, Profile};

/// Conformance checks for a FlexInfer gateway.
#[derive(Debug, Parser)]
#[command(
    name = "flexinfer-conformance",
    version,
    about,
    long_about = "Conformance checks for a FlexInfer gateway: OpenAI API shapes, SSE framing, \
error answers and model extraction, each reported with a stable id as pass, fail or skip. \
Exits 0 when no check failed, 1 when one did, 2 when the run could not start."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the checks of a profile and reports them.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Base URL of the gateway to check (plain http), e.g. http://flexinfer-gateway.flexinfer-system.svc.
    #[arg(long, required_unless_present = "local", conflicts_with = "local")]
    gateway: Option<String>,
    /// Start a flexinfer-sim and a flexinfer-gateway on loopback and check those
    /// (binaries next to this one, or FLEXINFER_SIM_BIN / FLEXINFER_GATEWAY_BIN).
    #[arg(long)]
    local: bool,
    /// API key, sent as `Authorization: Bearer <key>`.
    #[arg(long, env = "FLEXINFER_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Model to check with (default: the first one GET /v1/models lists).
    #[arg(long)]
    model: Option<String>,
    /// Base URL of the flexinfer-sim serving --model, when it is one; lets
    /// checks read its request recorder (implied by --local).
    #[arg(long, conflicts_with = "local")]
    sim_url: Option<String>,
    /// Which checks to run.
    #[arg(long, value_enum, default_value_t = Profile::Quick)]
    profile: Profile,
    /// Write a JSON report to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a JUnit XML report to this file.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

fn main() -> ExitCode {
    let Command::Run(args) = Cli::parse().command;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flexinfer-conformance: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("flexinfer-conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the checks; `Ok(true)` when none failed.
async fn run(args: RunArgs) -> Result<bool> {
    let stack = if args.local {
        Some(local::LocalStack::start().await?)
    } else {
        None
    };
    let (gateway, sim, model) = match &stack {
        Some(stack) => (
            stack.gateway_url().to_owned(),
            Some(stack.sim_url()),
            Some(
                args.model
                    .clone()
                    .unwrap_or_else(|| local::MODEL.to_owned()),
            ),
        ),
        None => (
            args.gateway.clone().unwrap_or_default(),
            args.sim_url.clone(),
            args.model.clone(),
        ),
    };
    let ctx = Context {
        gateway: Target::parse(&gateway).context("--gateway")?,
        api_key: args.api_key.clone(),
        model,
        sim: sim
            .as_deref()
            .map(Target::parse)
            .transpose()
            .context("--sim-url")?,
    };
    println!(
        "flexinfer-conformance: profile {} against {}",
        format!("{:?}", args.profile).to_lowercase(),
        ctx.gateway.base_url()
    );
    let result = conformance::run(ctx, args.profile, |check| {
        println!("{}", report::console_line(check));
    })
    .await;
    if let Some(stack) = stack {
        stack.stop();
    }
    println!("{}", result.summary_line());
    if let Some(path) = &args.json {
        std::fs::write(path, report::json(&result))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report::junit(&result))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(!result.failed())
}
