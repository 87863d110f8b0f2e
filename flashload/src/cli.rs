//! The command line. Every flag has an environment variable; the `FLASH_*`
//! names and defaults are those the operator sets on the init container.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use crate::checksum::Algorithm;
use crate::copy::Method;
use crate::preload::Options;
use crate::progress::ProgressMode;
use crate::scan::{ScanOptions, Variant};
use crate::units::parse_bytes;

/// Default `--buffer-kb`.
pub const DEFAULT_BUFFER_KB: usize = 4096;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Parallel, verified preload of model files from a volume into tmpfs.
#[derive(Debug, Parser)]
#[command(
    name = "flexinfer-flashload",
    version,
    about,
    long_about = LONG_ABOUT
)]
pub struct Cli {
    /// Another mode than the preload (`pull` an OCI artifact).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Source directory (the model volume).
    #[arg(long, env = "FLASH_SRC", value_name = "DIR")]
    pub src: Option<PathBuf>,

    /// Destination directory in tmpfs; created when missing.
    #[arg(long, env = "FLASH_DST", value_name = "DIR")]
    pub dst: Option<PathBuf>,

    /// Files and ranges copied at once [default: number of CPUs available].
    #[arg(short, long, env = "FLASH_CONCURRENCY", value_name = "N")]
    pub jobs: Option<usize>,

    /// Size of each worker's page-aligned copy buffer, in KiB (4..=262144).
    #[arg(long, env = "FLASH_BUFFER_KB", default_value_t = DEFAULT_BUFFER_KB, value_name = "KIB")]
    pub buffer_kb: usize,

    /// Files larger than this are split into ranges of this size copied in
    /// parallel; also the checksum chunk size (e.g. 64Mi).
    #[arg(long, env = "FLASH_CHUNK_SIZE", default_value = "64Mi", value_parser = parse_bytes, value_name = "SIZE")]
    pub chunk_size: u64,

    /// Verify chunk checksums: each chunk is hashed as it is read from the
    /// source and again from the copy (sizes are always verified).
    #[arg(long, env = "FLASH_VERIFY", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub verify: bool,

    /// Checksum algorithm for --verify and --emit-manifest.
    #[arg(long, env = "FLASH_CHECKSUM", value_enum, default_value_t = Algorithm::Xxh3)]
    pub checksum: Algorithm,

    /// Expected manifest (from --emit-manifest): the source must match its
    /// files, sizes and checksums. Implies --verify.
    #[arg(long, env = "FLASH_MANIFEST", value_name = "FILE")]
    pub manifest: Option<PathBuf>,

    /// Hash the source and write its manifest to FILE (`-` for stdout)
    /// instead of copying.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cleanup", "manifest"])]
    pub emit_manifest: Option<PathBuf>,

    /// Comma-separated path or file-name prefixes to skip, added to `.cache/` and `.git/`.
    #[arg(
        long,
        env = "FLASH_EXCLUDE",
        value_delimiter = ',',
        value_name = "PREFIX"
    )]
    pub exclude: Vec<String>,

    /// Keep only this weight variant: `fp16` drops X.safetensors when X.fp16.safetensors exists.
    #[arg(long, env = "FLASH_VARIANT", value_enum)]
    pub variant: Option<Variant>,

    /// The most the preload may occupy (e.g. the tmpfs size limit, 8Gi);
    /// refused before copying when the source is larger.
    #[arg(long, env = "FLASH_MAX_BYTES", value_parser = parse_bytes, value_name = "SIZE")]
    pub max_bytes: Option<u64>,

    /// fsync every file, directory and the marker (pointless on tmpfs; for disk destinations).
    #[arg(long, env = "FLASH_FSYNC", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub fsync: bool,

    /// How contents are copied (auto: sendfile, or pread/pwrite when verifying).
    #[arg(long, env = "FLASH_METHOD", value_enum, default_value_t = Method::Auto)]
    pub method: Method,

    /// Cap on copy throughput in bytes per second (e.g. 500M), to spare a shared volume.
    #[arg(long, env = "FLASH_RATE_LIMIT", value_parser = parse_bytes, value_name = "BYTES_PER_SEC")]
    pub rate_limit: Option<u64>,

    /// Remove the preload at --dst (marker first) and exit; used by the tmpfs cleanup Job.
    #[arg(long, conflicts_with_all = ["src", "manifest"])]
    pub cleanup: bool,

    /// Progress display: a bar on a terminal, log lines otherwise.
    #[arg(long, env = "FLASH_PROGRESS", value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,

    /// Interval between progress log lines.
    #[arg(long, env = "FLASH_LOG_INTERVAL", value_parser = humantime::parse_duration, default_value = "5s")]
    pub log_interval: Duration,

    /// Log format (logs go to stderr; filter with RUST_LOG).
    #[arg(long, env = "FLASH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
}

const LONG_ABOUT: &str = "Init container that copies model files from a volume into tmpfs \
(/dev/shm) before the model server starts: files in parallel and large files in parallel \
ranges, with sizes always verified and chunk checksums on request. A .flashload-complete \
marker holding the manifest lets a restarted pod skip an identical, complete copy and redo a \
partial one. Refuses before copying when the destination lacks room, removes a partial copy \
on failure, and exits non-zero with a one-line reason.\n\n\
Modes: copy (--src, --dst), --cleanup (--dst), --emit-manifest FILE (--src), \
pull oci://registry/repository:tag --dest DIR.";

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pull a model artifact from an OCI registry into a directory.
    Pull(PullArgs),
}

/// `pull`: every layer of an OCI artifact into `--dest`, named by its
/// `org.opencontainers.image.title`, verified against its SHA-256 and
/// resumed from a `.partial` file when one is there.
#[derive(Debug, Args)]
#[command(long_about = PULL_LONG_ABOUT)]
pub struct PullArgs {
    /// Artifact: oci://registry[:port]/repository[:tag] or …@sha256:<hex> (tag defaults to latest).
    #[arg(value_name = "REFERENCE")]
    pub reference: String,

    /// Directory the files are written to; created when missing.
    #[arg(long, env = "FLASH_OCI_DEST", value_name = "DIR")]
    pub dest: PathBuf,

    /// Layers fetched at once, each on its own connection.
    #[arg(long, env = "FLASH_OCI_JOBS", default_value_t = crate::artifact::DEFAULT_JOBS, value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: u16,

    /// Name of the environment variable holding the registry username.
    #[arg(
        long,
        value_name = "VAR",
        requires = "password_env",
        conflicts_with = "docker_config"
    )]
    pub username_env: Option<String>,

    /// Name of the environment variable holding the password or token.
    #[arg(long, value_name = "VAR", requires = "username_env")]
    pub password_env: Option<String>,

    /// Docker config with the registry's credentials (config.json, or a
    /// mounted kubernetes.io/dockerconfigjson Secret's .dockerconfigjson).
    #[arg(long, env = "FLASH_OCI_DOCKER_CONFIG", value_name = "FILE")]
    pub docker_config: Option<PathBuf>,

    /// Registry flavour for credential handling [default: from the host: ghcr.io, *.dkr.ecr.*.amazonaws.com, else generic].
    #[arg(long, env = "FLASH_OCI_REGISTRY_KIND", value_enum)]
    pub registry_kind: Option<RegistryKindArg>,

    /// ECR API endpoint for GetAuthorizationToken [default: https://api.ecr.<region>.amazonaws.com/].
    #[arg(long, env = "FLASH_ECR_ENDPOINT", value_name = "URL")]
    pub ecr_endpoint: Option<String>,

    /// ECR region when the registry host does not name it.
    #[arg(long, env = "AWS_REGION", value_name = "REGION")]
    pub ecr_region: Option<String>,

    /// Use plain HTTP instead of HTTPS (the default for loopback registries only).
    #[arg(long, env = "FLASH_OCI_PLAIN_HTTP", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub plain_http: bool,

    /// Progress display: a bar on a terminal, log lines otherwise.
    #[arg(long, env = "FLASH_PROGRESS", value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,

    /// Interval between progress log lines.
    #[arg(long, env = "FLASH_LOG_INTERVAL", value_parser = humantime::parse_duration, default_value = "5s")]
    pub log_interval: Duration,
}

/// `--registry-kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RegistryKindArg {
    /// Any OCI distribution registry.
    Generic,
    /// Harbor (robot account name and secret).
    Harbor,
    /// GitHub Container Registry (any username and a personal access token).
    Ghcr,
    /// Amazon ECR (user AWS and a login password, or the raw base64 authorization token).
    Ecr,
}

const PULL_LONG_ABOUT: &str = "Pull a model artifact (as `oras push` writes one: one layer per \
file, named by its org.opencontainers.image.title annotation) from an OCI registry into --dest. \
The tag is resolved to a manifest digest; every layer is streamed into <name>.partial, checked \
against its descriptor's size and SHA-256 and renamed into place. A .partial file left by an \
interrupted pull is resumed with a Range request. A second pull of the same digest does \
nothing. Credentials come from two environment variables or a Docker config and are never \
logged; for ECR without them, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
AWS_SESSION_TOKEN) are exchanged for a registry token (GetAuthorizationToken). Exits non-zero with a one-line reason (digest mismatch, refused credentials, ...).";

impl Cli {
    /// The validated options of a copy or `--emit-manifest` run.
    pub fn options(&self) -> Result<Options> {
        let src = self.src.clone().unwrap_or_default();
        if src.as_os_str().is_empty() {
            bail!("--src (FLASH_SRC) must be set");
        }
        let dst = self.dst.clone().unwrap_or_default();
        if dst.as_os_str().is_empty() && self.emit_manifest.is_none() {
            bail!("--dst (FLASH_DST) must be set");
        }
        let jobs = match self.jobs {
            Some(0) => bail!("--jobs (FLASH_CONCURRENCY) must be at least 1"),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if !(4..=262_144).contains(&self.buffer_kb) {
            bail!(
                "--buffer-kb (FLASH_BUFFER_KB) must be between 4 and 262144, got {}",
                self.buffer_kb
            );
        }
        if self.chunk_size < 4096 {
            bail!("--chunk-size must be at least 4096 bytes");
        }
        if self.log_interval.is_zero() {
            bail!("--log-interval must be positive");
        }
        Ok(Options {
            src,
            dst,
            jobs,
            buffer_bytes: self.buffer_kb * 1024,
            chunk_bytes: self.chunk_size,
            verify: self.verify || self.manifest.is_some(),
            algorithm: self.checksum,
            manifest: self.manifest.clone(),
            scan: ScanOptions::with_excludes(&self.exclude, self.variant),
            max_bytes: self.max_bytes,
            fsync: self.fsync,
            method: self.method,
            rate_limit: self.rate_limit,
            progress: self.progress,
            log_interval: self.log_interval,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::DEFAULT_CHUNK_BYTES;

    fn parse(args: &[&str]) -> Result<Options> {
        let mut argv = vec!["flexinfer-flashload"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)?.options()
    }

    #[test]
    fn defaults_follow_the_operator() {
        let o = parse(&["--src", "/src", "--dst", "/models"]).unwrap();
        assert_eq!(o.buffer_bytes, 4096 * 1024);
        assert_eq!(o.chunk_bytes, DEFAULT_CHUNK_BYTES);
        assert!(o.jobs >= 1);
        assert!(!o.verify);
        assert_eq!(o.scan.excludes, [".cache/", ".git/"]);
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let err = parse(&["--src", "/s", "--dst", "/d", "--jobs", "0"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--jobs (FLASH_CONCURRENCY) must be at least 1"
        );
        assert!(parse(&["--src", "/s", "--dst", "/d", "--buffer-kb", "1"]).is_err());
        assert!(parse(&["--src", "/s", "--dst", "/d", "--max-bytes", "lots"]).is_err());
        assert!(parse(&["--dst", "/d"]).is_err());
        assert!(parse(&["--src", "/s"]).is_err());
    }

    #[test]
    fn flags_map_onto_options() {
        let o = parse(&[
            "--src",
            "/s",
            "--dst",
            "/d",
            "--verify",
            "--checksum",
            "sha256",
            "--exclude",
            "a/,b",
            "--variant",
            "fp16",
            "--max-bytes",
            "1Gi",
            "--chunk-size",
            "8Mi",
        ])
        .unwrap();
        assert!(o.verify);
        assert_eq!(o.algorithm, Algorithm::Sha256);
        assert_eq!(o.scan.excludes, [".cache/", ".git/", "a/", "b"]);
        assert_eq!(o.scan.variant, Some(Variant::Fp16));
        assert_eq!(o.max_bytes, Some(1 << 30));
        assert_eq!(o.chunk_bytes, 8 << 20);
        let o = parse(&["--src", "/s", "--dst", "/d", "--manifest", "/m.json"]).unwrap();
        assert!(o.verify, "--manifest implies --verify");
    }
}
