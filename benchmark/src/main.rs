//! `flexinfer-bench`: see `--help` and the crate README.

use flexinfer_service::LogStyle;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use flexinfer_bench::cli::{Cli, Command, LoadArgs, LogFormat, RoutingArgs, TpsArgs};
use flexinfer_bench::client::Client;
use flexinfer_bench::load::{self, LevelSpec, Stop};
use flexinfer_bench::plot;
use flexinfer_bench::publish::{self, Destination};
use flexinfer_bench::report::{LevelReport, LoadReport, LOAD_SCHEMA};
use flexinfer_bench::routing::local::{self as routing_local, Binaries, SimSettings};
use flexinfer_bench::routing::workload::ConversationSpec;
use flexinfer_bench::routing::{self, LocalSpec, RoutingSpec};
use flexinfer_bench::target::Target;
use flexinfer_bench::tps::{self, TpsSpec};
use flexinfer_bench::workload::Workload;

/// Requests prepared per level at most (they are reused round-robin).
const MAX_PREPARED: u64 = 4096;

/// Connect timeout of every connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let threads = match &cli.command {
        Command::Load(args) => args.threads,
        Command::Tps(_) => Some(1),
        Command::Routing(args) => args.threads,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads.filter(|n| *n > 0) {
        builder.worker_threads(n);
    }
    let result = builder
        .enable_all()
        .build()
        .context("cannot start the runtime")
        .and_then(|runtime| {
            runtime.block_on(async {
                match &cli.command {
                    Command::Load(args) => run_load(args).await,
                    Command::Tps(args) => run_tps(args).await,
                    Command::Routing(args) => run_routing(args).await,
                }
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!(
                "flexinfer-bench: error: {}",
                format!("{err:#}").replace('\n', " ")
            );
            ExitCode::FAILURE
        }
    }
}

async fn run_load(args: &LoadArgs) -> Result<()> {
    let Some(url) = args.endpoint.url.as_deref() else {
        bail!("--url (BENCHMARK_URL) must be set");
    };
    if args.concurrency.contains(&0) {
        bail!("--concurrency levels must be at least 1");
    }
    let target = Target::parse(url)?;
    let client = Arc::new(Client::new(
        target.clone(),
        args.endpoint.api_key.as_deref(),
        None,
        CONNECT_TIMEOUT,
    )?);
    let workload = Workload {
        api: args.endpoint.api,
        model: args.endpoint.model.clone(),
        prompt_tokens: args.prompt_tokens,
        max_tokens: args.max_tokens,
        stream: !args.no_stream,
        ignore_eos: args.ignore_eos,
    };
    let stop = match (args.requests, args.duration) {
        (_, Some(d)) if d.is_zero() => bail!("--duration must be positive"),
        (_, Some(d)) => Stop::Duration(d),
        (Some(0), None) => bail!("--requests must be at least 1"),
        (Some(n), None) => Stop::Requests(n),
        (None, None) => Stop::Requests(100),
    };
    let prepared_count = match stop {
        Stop::Requests(n) => n.min(MAX_PREPARED),
        Stop::Duration(_) => MAX_PREPARED,
    };
    let requests = Arc::new(workload.prepare(prepared_count as usize, args.seed));
    let path: Arc<str> = Arc::from(target.path(args.endpoint.api));
    let mut levels = Vec::new();
    for &concurrency in &args.concurrency {
        let spec = LevelSpec {
            concurrency,
            stop,
            timeout: args.endpoint.timeout,
            stream: workload.stream,
        };
        if args.warmup > 0 {
            let warm = LevelSpec {
                stop: Stop::Requests(args.warmup),
                ..spec
            };
            load::run_level(client.clone(), path.clone(), requests.clone(), warm).await;
        }
        tracing::info!(concurrency, "running level");
        let result = load::run_level(client.clone(), path.clone(), requests.clone(), spec).await;
        levels.push(LevelReport::from_result(result));
    }
    let report = LoadReport {
        schema: LOAD_SCHEMA,
        url: target.to_string(),
        api: args.endpoint.api,
        model: args.endpoint.model.clone(),
        stream: workload.stream,
        prompt_tokens: args.prompt_tokens.to_string(),
        max_tokens: args.max_tokens.to_string(),
        levels,
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &args.plot {
        plot::write_png(&report, path)?;
        tracing::info!(path = %path.display(), "chart written");
    }
    if report.levels.iter().all(|l| l.succeeded == 0) {
        let mut totals = std::collections::BTreeMap::<&str, u64>::new();
        for (class, n) in report.levels.iter().flat_map(|l| &l.errors) {
            *totals.entry(class).or_default() += n;
        }
        let errors: Vec<String> = totals.iter().map(|(k, v)| format!("{k}={v}")).collect();
        bail!("no request succeeded ({})", errors.join(" "));
    }
    Ok(())
}

async fn run_tps(args: &TpsArgs) -> Result<()> {
    let target = Target::parse(&args.url())?;
    let backend = tps::canonical_backend(&args.backend);
    let client = Client::new(
        target,
        args.endpoint.api_key.as_deref(),
        Some(args.workload_class.as_str()),
        CONNECT_TIMEOUT,
    )?;
    let spec = TpsSpec {
        backend: backend.clone(),
        model: args.endpoint.model.clone(),
        api: args.endpoint.api,
        max_tokens: args.max_tokens.max(2),
        iterations: args.iterations.max(1),
        warmup: args.warmup_iterations,
        min_duration: args.min_duration,
        timeout: args.endpoint.timeout,
        ready_timeout: args.ready_timeout,
        prompt: args.prompt.clone(),
    };
    // Fail on missing publish settings before spending minutes measuring.
    let namespace = match (&args.namespace, args.publish) {
        (Some(ns), _) if !ns.is_empty() => Some(ns.clone()),
        (_, true) => bail!("POD_NAMESPACE environment variable not set (or pass --namespace)"),
        _ => None,
    };
    if args.publish
        && args.configmap.is_none()
        && args.node.is_none()
        && args.device_class.is_none()
    {
        bail!("--publish needs --configmap and/or a device class (--node / NODE_NAME or --device-class)");
    }
    let kube_client = if args.publish {
        Some(
            kube::Client::try_default()
                .await
                .context("cannot reach the Kubernetes API")?,
        )
    } else {
        None
    };

    tps::wait_ready(&client, &backend, spec.ready_timeout).await?;
    let result = tps::run(&client, &spec).await?;

    let device_class = match (&args.device_class, &args.node, &kube_client) {
        (Some(class), _, _) => Some(class.clone()),
        (None, Some(node), Some(kube)) => {
            Some(publish::node_device_class(kube.clone(), node).await?)
        }
        _ => None,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        println!(
            "flexinfer-bench tps: model={} backend={} tokens/s={:.2} (median of {} samples of {} tokens, TTFT median {})",
            result.model,
            result.backend,
            result.tokens_per_second,
            result.samples.len(),
            result.max_tokens,
            result.ttft_ms.map_or("n/a".to_owned(), |t| format!("{t:.1} ms")),
        );
    }
    let destination = Destination {
        namespace: namespace.unwrap_or_default(),
        deployment_config_map: args.configmap.clone(),
        global_config_map: args.global_configmap.clone(),
        device_class,
    };
    match kube_client {
        Some(kube) => {
            publish::publish(kube, &destination, &result, spec.min_duration).await?;
            tracing::info!(namespace = %destination.namespace, "results published");
        }
        None => print_unpublished(&destination, &result, spec.min_duration),
    }
    Ok(())
}

/// Model served by the pods of `routing --local` unless --model is given.
const LOCAL_MODEL: &str = "routing-model";

async fn run_routing(args: &RoutingArgs) -> Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let stop = match (args.requests, args.duration) {
        (_, Some(d)) if d.is_zero() => bail!("--duration must be positive"),
        (_, Some(d)) => Stop::Duration(d),
        (Some(0), None) => bail!("--requests must be at least 1"),
        (Some(n), None) => Stop::Requests(n),
        (None, None) => Stop::Requests(400),
    };
    if args.tenants == 0 {
        bail!("--tenants must be at least 1");
    }
    let model = match (&args.model, args.local) {
        (Some(m), _) if !m.is_empty() => m.clone(),
        (_, true) => LOCAL_MODEL.to_owned(),
        _ => bail!("--model (MODEL_NAME) must be set"),
    };
    let local = if args.local {
        if args.pods == 0 {
            bail!("--pods must be at least 1");
        }
        if args.strategies.is_empty() {
            bail!("--strategies must name at least one strategy");
        }
        for (name, v) in [
            (
                "--prefill-tokens-per-second",
                args.prefill_tokens_per_second,
            ),
            ("--tokens-per-second", args.tokens_per_second),
        ] {
            if !v.is_finite() || v < 0.0 {
                bail!("{name} must be a non-negative number");
            }
        }
        let sim = routing_local::find_binary(
            args.sim_bin.as_deref(),
            "flexinfer-sim",
            "flexinfer-conformance --bin flexinfer-sim",
        )?;
        let gateway = if args
            .strategies
            .iter()
            .any(|s| s.gateway_routing().is_some())
        {
            Some(routing_local::find_binary(
                args.gateway_bin.as_deref(),
                "flexinfer-gateway",
                "flexinfer-gateway",
            )?)
        } else {
            None
        };
        Some(LocalSpec {
            pods: args.pods,
            strategies: args.strategies.clone(),
            replicas: args.replicas as usize,
            sharing: !args.no_sharing,
            sim: SimSettings {
                model: model.clone(),
                block_size: args.block_size,
                prefix_cache_blocks: args.prefix_cache_blocks.unwrap_or_else(|| {
                    routing_local::default_prefix_cache_blocks(args.system_tokens, args.block_size)
                }),
                prefill_tokens_per_second: args.prefill_tokens_per_second,
                ttft_ms: args.ttft.as_secs_f64() * 1000.0,
                tokens_per_second: args.tokens_per_second,
                max_num_seqs: args.max_num_seqs,
            },
            binaries: Binaries { sim, gateway },
            sglang_python: args.sglang_python.clone(),
            peer_command: args
                .peer_command
                .as_deref()
                .map(routing::peer::PeerCommand::template)
                .transpose()?,
            fault: match args.kill_replica_at {
                Some(_) if args.replicas < 2 => {
                    bail!("--kill-replica-at needs --replicas 2 or more")
                }
                Some(kill_at) => Some(routing::fault::FaultSpec {
                    kill_at,
                    restart_after: args.restart_after,
                }),
                None => None,
            },
        })
    } else {
        None
    };
    let spec = RoutingSpec {
        url: if args.local { None } else { args.url.clone() },
        api_key: args.api_key.clone(),
        model,
        label: args.label.clone(),
        pod_metrics: args.pod_metrics.clone(),
        conversations: ConversationSpec {
            kind: args.workload,
            tenants: args.tenants,
            system_tokens: args.system_tokens,
            user_tokens: args.user_tokens,
            turns: args.turns,
        },
        concurrency: args.concurrency,
        stop,
        max_tokens: args.max_tokens,
        seed: args.seed,
        timeout: args.timeout,
        client_retries: args.client_retries,
        local,
    };
    // An interrupt drops the run, and with it every process it started.
    let report = tokio::select! {
        report = routing::run(&spec) => report?,
        signal = interrupted() => bail!("interrupted by {signal}"),
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &args.plot {
        routing::plot::write_png(&report, path)?;
        tracing::info!(path = %path.display(), "chart written");
    }
    if !report.all_ran() {
        let failed: Vec<&str> = report
            .strategies
            .iter()
            .filter(|s| s.error.is_some() || s.succeeded == 0)
            .map(|s| s.strategy.as_str())
            .collect();
        bail!("no successful request for {}", failed.join(", "));
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM with the signal's name.
async fn interrupted() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "SIGINT"
}

fn print_unpublished(destination: &Destination, result: &tps::TpsResult, min_duration: Duration) {
    if let Some(name) = &destination.deployment_config_map {
        let data = publish::deployment_data(result, min_duration);
        eprintln!(
            "not published (no --publish): ConfigMap {name}: {}",
            serde_json::json!(data)
        );
    }
    if let Some(class) = &destination.device_class {
        let data = publish::global_data(result, class);
        eprintln!(
            "not published (no --publish): ConfigMap {}: {}",
            destination.global_config_map,
            serde_json::json!(data)
        );
    }
}

fn init_logging(format: LogFormat) {
    let style = match format {
        LogFormat::Pretty => LogStyle::Compact,
        LogFormat::Json => LogStyle::Json,
    };
    flexinfer_service::init_logging(style, "warn");
}
