//! `flexinfer-gateway`: the OpenAI-compatible proxy.

use flexinfer_gateway::cli::Cli;

/// Requests allocate and free many small buffers (headers, bodies, tasks):
/// mimalloc's thread-local free lists cost less CPU per request than the
/// system allocator's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse_env();
    let _logs = flexinfer_gateway::logging::init(cli.log_format, &cli.log_level);
    match flexinfer_gateway::server::build(&cli) {
        Ok(server) => {
            tracing::info!(listen = %cli.listen, models = %server.source, "flexinfer-gateway starting");
            server.run();
        }
        Err(e) => {
            eprintln!("flexinfer-gateway: {e:#}");
            drop(_logs);
            std::process::exit(1);
        }
    }
}
