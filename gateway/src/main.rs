//! `flexinfer-gateway`: the OpenAI-compatible proxy.

use clap::Parser;
use flexinfer_gateway::cli::{Cli, LogFormat};

/// Requests allocate and free many small buffers (headers, bodies, tasks):
/// mimalloc's thread-local free lists cost less CPU per request than the
/// system allocator's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    init_logging(&cli);
    match flexinfer_gateway::server::build(&cli) {
        Ok(server) => {
            let source = match (&cli.config, &cli.global, &cli.global_object) {
                (Some(path), _, _) => path.display().to_string(),
                (None, Some(path), _) => format!("global: {}", path.display()),
                (None, None, Some(object)) => format!("global: GlobalProxy {object}"),
                (None, None, None) => "kubernetes".to_string(),
            };
            tracing::info!(listen = %cli.listen, models = %source, "flexinfer-gateway starting");
            server.run();
        }
        Err(e) => {
            eprintln!("flexinfer-gateway: {e:#}");
            std::process::exit(1);
        }
    }
}

fn init_logging(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cli.log_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Pretty => builder.init(),
    }
}
