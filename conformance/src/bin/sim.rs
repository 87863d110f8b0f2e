//! `flexinfer-sim`: the simulated OpenAI-compatible model server.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use flexinfer_conformance::sim::cli::{LogFormat, SimArgs, SimCommand};
use flexinfer_conformance::sim::{selftest, serve, LISTENING_PREFIX};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = SimArgs::parse();
    init_logging(args.serve.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("flexinfer-sim: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match &args.command {
            Some(SimCommand::Selftest(selftest_args)) => {
                let report = selftest::run(selftest_args).await?;
                println!("{}", selftest::summary(selftest_args, &report));
                Ok(())
            }
            None => run_server(&args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flexinfer-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_server(args: &SimArgs) -> anyhow::Result<()> {
    let config = args.serve.config();
    config.validate()?;
    let listener = TcpListener::bind((args.serve.host.as_str(), args.serve.port))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {}:{}: {e}",
                args.serve.host,
                args.serve.port
            )
        })?;
    let addr = listener.local_addr()?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{LISTENING_PREFIX}http://{addr}")?;
        stdout.flush()?;
    }
    tracing::info!(%addr, models = ?config.models, "serving");
    serve(config, listener, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Pretty => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
