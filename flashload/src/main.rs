//! `flexinfer-flashload`: parallel, verified preload of model files from a
//! volume into tmpfs. See `--help` and the crate README.

use flexinfer_service::LogStyle;
use std::process::ExitCode;

use clap::Parser;
use flexinfer_flashload::cleanup::{self, Removal};
use flexinfer_flashload::cli::{Cli, Command, LogFormat};
use flexinfer_flashload::oci_pull;
use flexinfer_flashload::preload;
use flexinfer_flashload::signal;
use flexinfer_flashload::space::Statvfs;

fn main() -> ExitCode {
    signal::install();
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(&cli) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            let reason = format!("{err:#}").replace('\n', " ");
            eprintln!("flexinfer-flashload: error: {reason}");
            let code = signal::received().map_or(1, signal::exit_status);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<String> {
    if let Some(Command::Pull(args)) = &cli.command {
        return oci_pull::run(args);
    }
    if cli.cleanup {
        let Some(dst) = cli.dst.as_deref() else {
            anyhow::bail!("--cleanup needs --dst (FLASH_DST)");
        };
        let what = match cleanup::remove_preload(dst)? {
            Removal::Absent => "nothing to remove",
            Removal::Emptied => "emptied (mount point kept)",
            Removal::Removed => "removed",
        };
        return Ok(format!("flashload: cleanup of {}: {what}", dst.display()));
    }
    let options = cli.options()?;
    if let Some(out) = &cli.emit_manifest {
        let summary = preload::emit_manifest(&options, out)?;
        let preload::Outcome::Skipped { files, bytes } = summary.outcome else {
            unreachable!("emit_manifest copies nothing");
        };
        return Ok(format!(
            "flashload: manifest of {} files, {bytes} bytes written to {} in {:.3} s",
            files,
            out.display(),
            summary.elapsed.as_secs_f64()
        ));
    }
    let summary = preload::run(&options, &Statvfs)?;
    Ok(summary.line(&options.dst))
}

fn init_logging(format: LogFormat) {
    let style = match format {
        LogFormat::Pretty => LogStyle::Compact,
        LogFormat::Json => LogStyle::Json,
    };
    flexinfer_service::init_logging(style, "info");
}
