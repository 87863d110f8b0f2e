//! `flexinfer-sim`: the simulated OpenAI-compatible model server.

use flexinfer_service::{shutdown_signal, LogStyle};
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use flexinfer_conformance::sim::cli::{LogFormat, SimArgs, SimCommand};
use flexinfer_conformance::sim::{selftest, serve, LISTENING_PREFIX};
use tokio::net::TcpListener;

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

fn init_logging(format: LogFormat) {
    let style = match format {
        LogFormat::Pretty => LogStyle::Full,
        LogFormat::Json => LogStyle::Json,
    };
    flexinfer_service::init_logging(style, "info");
}
