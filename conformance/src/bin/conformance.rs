//! `flexinfer-conformance`: black-box checks against a FlexInfer gateway.
//!
//! `flexinfer-conformance run --gateway <url>` checks a deployed gateway;
//! `flexinfer-conformance run --local` starts simulators and a gateway on
//! loopback and checks those. Exit status: 0 when no check failed, 1 when one
//! did, 2 when the run could not start.
//!
//! `flexinfer-conformance load --gateway <url> --rate R|--concurrency C`
//! loads a gateway and reports throughput, latency, TTFT and errors.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use flexinfer_conformance::cli::{Cli, Command, LoadArgs, RunArgs};
use flexinfer_conformance::conformance::{self, http::Target, local, report, Context};

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
    let pace = args.pace().context("give --rate or --concurrency")?;
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
