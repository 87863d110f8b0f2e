//! `flexinfer-conformance`: black-box checks against a FlexInfer gateway.
//!
//! `flexinfer-conformance run --gateway <url>` checks a deployed gateway;
//! `flexinfer-conformance run --local` starts simulators and a gateway on
//! loopback and checks those. Exit status: 0 when no check failed, 1 when one
//! did, 2 when the run could not start.
//!
//! `flexinfer-conformance load --gateway <url> --rate R|--concurrency C`
//! loads a gateway and reports throughput, latency, TTFT and errors.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use flexinfer_conformance::conformance::roles::{self, Role};
use flexinfer_conformance::conformance::{self, http::Target, local, report, Context, Profile};

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
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the checks of a profile and reports them.
    Run(RunArgs),
    /// Loads a gateway (or any OpenAI-compatible server) with chat
    /// completions at a fixed rate (open loop) or concurrency (closed loop)
    /// and reports throughput, latency and TTFT percentiles and errors.
    Load(LoadArgs),
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("pace").required(true).args(["rate", "concurrency"])))]
struct LoadArgs {
    /// Base URL to load (plain http), e.g. http://127.0.0.1:8080.
    #[arg(long)]
    gateway: String,
    /// Open loop: requests per second, sent on schedule whatever the answers
    /// (latency counts from when each request was due).
    #[arg(long)]
    rate: Option<f64>,
    /// Closed loop: requests in flight at all times, one per connection.
    #[arg(long)]
    concurrency: Option<usize>,
    /// How long to load.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    duration: std::time::Duration,
    /// Stream the answers (measures TTFT; a stream must end with [DONE]).
    #[arg(long)]
    stream: bool,
    /// Model to ask for (default: the first one GET /v1/models lists).
    #[arg(long)]
    model: Option<String>,
    /// API key, sent as `Authorization: Bearer <key>`.
    #[arg(long, env = "FLEXINFER_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// max_tokens of each request.
    #[arg(long, default_value_t = 16)]
    max_tokens: u32,
    /// Request path.
    #[arg(long, default_value = "/v1/chat/completions")]
    path: String,
    /// Open loop: keep-alive connections to spread the requests over.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Longest time one request may take.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    timeout: std::time::Duration,
    /// Worker threads (default: one per CPU core).
    #[arg(long)]
    threads: Option<usize>,
    /// Write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the Markdown report to this file.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Write a PNG chart of per-second p50 (blue) and p99 (red) latency.
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
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
    /// Which checks to run: quick (protocol, errors, extraction) or full
    /// (quick + streaming spacing, oversize body, routing, cold start, auth
    /// and rate limits).
    #[arg(long, value_enum, default_value_t = Profile::Quick)]
    profile: Profile,
    /// Model that plays ROLE in the full profile, as ROLE=MODEL (repeatable).
    /// Roles: session, prefix, least-loaded, stream, cold, queue, slow,
    /// limited. Unmapped roles use the model named conformance-<role> when
    /// the gateway lists it; checks without their model are skipped.
    #[arg(long = "role", value_name = "ROLE=MODEL", value_parser = roles::parse_assignment)]
    roles: Vec<(Role, String)>,
    /// The gateway's --max-body-bytes (the oversize check sends one byte more).
    #[arg(long, default_value_t = conformance::DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// The gateway's --max-queue-size (the queue-full check fills it).
    #[arg(long, default_value_t = conformance::DEFAULT_MAX_QUEUE_SIZE)]
    max_queue_size: usize,
    /// Leave out a check (its id) or a group (a prefix ending in `.`, e.g.
    /// `routing.`); reported as skipped with the reason (repeatable). For a
    /// backend known to lack a feature, e.g. embeddings.
    #[arg(long = "skip", value_name = "ID")]
    skip: Vec<String>,
    /// Start the --local stack deliberately misconfigured (negative controls).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        hide = true,
        requires = "local"
    )]
    local_break: Vec<local::Break>,
    /// Write a JSON report to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a JUnit XML report to this file.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Cli::parse().command {
        Command::Run(args) => args,
        Command::Load(args) => return load_main(args),
    };
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
        let mut options = local::LocalOptions::for_profile(args.profile);
        options.breaks.extend(args.local_break.iter().copied());
        Some(local::LocalStack::start(&options).await?)
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
    let mut ctx = Context::new(Target::parse(&gateway).context("--gateway")?);
    ctx.api_key = args.api_key.clone();
    ctx.model = model;
    ctx.sim = sim
        .as_deref()
        .map(Target::parse)
        .transpose()
        .context("--sim-url")?;
    ctx.roles = args.roles.iter().cloned().collect();
    ctx.max_body_bytes = args.max_body_bytes;
    ctx.max_queue_size = args.max_queue_size;
    ctx.skip = args.skip.clone();
    if let Some(stack) = &stack {
        if let Some(key) = stack.api_key() {
            ctx.api_key = Some(key.to_owned());
        }
        if let Some(size) = stack.max_queue_size() {
            ctx.max_queue_size = size;
        }
    }
    println!(
        "flexinfer-conformance: profile {} against {}",
        args.profile.name(),
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

fn load_main(args: LoadArgs) -> ExitCode {
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flexinfer-conformance: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(load(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flexinfer-conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs `load` and writes its reports.
async fn load(args: LoadArgs) -> Result<()> {
    use flexinfer_conformance::loadgen::{self, engine, output::LoadReport, summary::Summary};

    let target = Target::parse(&args.gateway).context("--gateway")?;
    let addr = tokio::net::lookup_host(target.authority())
        .await
        .with_context(|| format!("resolving {}", target.authority()))?
        .next()
        .with_context(|| format!("no address for {}", target.authority()))?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let mut ctx = Context::new(target.clone());
            ctx.api_key = args.api_key.clone();
            ctx.read_model_list().await;
            ctx.listed
                .first()
                .map(|m| m.id.clone())
                .context("no --model given and GET /v1/models lists none")?
        }
    };
    let mut body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the load test."}],
        "max_tokens": args.max_tokens,
    });
    if args.stream {
        body["stream"] = serde_json::json!(true);
    }
    let pace = match (args.rate, args.concurrency) {
        (Some(rate), _) => engine::Pace::Rate(rate),
        (None, Some(c)) => engine::Pace::Concurrency(c),
        (None, None) => anyhow::bail!("give --rate or --concurrency"),
    };
    let connections = match pace {
        engine::Pace::Concurrency(c) => c,
        engine::Pace::Rate(_) => args.connections,
    };
    let authorization = args
        .api_key
        .as_deref()
        .map(|key| http::HeaderValue::from_str(&format!("Bearer {key}")))
        .transpose()
        .context("--api-key")?;
    let plan = engine::LoadPlan {
        addr,
        host: http::HeaderValue::from_str(target.authority()).context("--gateway host")?,
        path: format!("{}{}", target.prefix(), args.path),
        body: bytes::Bytes::from(body.to_string()),
        authorization,
        stream: args.stream,
        pace,
        connections,
        duration: args.duration,
        timeout: args.timeout,
    };
    eprintln!(
        "flexinfer-conformance load: {} {}{} model {model}, {}, {:?}",
        if args.stream {
            "streaming"
        } else {
            "non-streaming"
        },
        target.base_url(),
        args.path,
        match pace {
            engine::Pace::Rate(r) =>
                format!("open loop at {r} req/s over {connections} connections"),
            engine::Pace::Concurrency(c) => format!("closed loop with {c} connections"),
        },
        args.duration
    );
    let output = loadgen::run_with_progress(plan).await?;
    let report = LoadReport {
        target: target.base_url(),
        path: args.path.clone(),
        model,
        mode: if args.rate.is_some() {
            "open"
        } else {
            "closed"
        },
        rate: args.rate,
        connections,
        stream: args.stream,
        max_tokens: args.max_tokens,
        duration_s: args.duration.as_secs_f64(),
        summary: Summary::of(&output),
    };
    print!("{}", report.console());
    if let Some(path) = &args.json {
        std::fs::write(path, report.json())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, report.markdown())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.png {
        loadgen::plot::write_png(&report.summary.timeline, path)?;
    }
    Ok(())
}
