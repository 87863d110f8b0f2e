//! `flexinfer-crdgen`: writes the CustomResourceDefinition manifests of every
//! FlexInfer kind, or checks that the committed ones are current.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

/// Generate the FlexInfer CustomResourceDefinition manifests from the Rust
/// types (one YAML file per kind).
///
/// Without options the files are written to `crds/manifests/` and copied to
/// `helm/flexinfer/crds/`. Run from the repository root.
#[derive(Debug, Parser)]
#[command(name = "flexinfer-crdgen", version)]
struct Args {
    /// Directory to write the manifests to; may be repeated. Defaults to
    /// `crds/manifests` and `helm/flexinfer/crds`.
    #[arg(long = "out-dir", value_name = "DIR")]
    out_dirs: Vec<PathBuf>,

    /// Write nothing; exit with status 1 and list the files that are
    /// missing, differ or are stale when the directories are not current.
    #[arg(long)]
    check: bool,
}

const DEFAULT_OUT_DIRS: [&str; 2] = ["crds/manifests", "helm/flexinfer/crds"];

fn main() -> ExitCode {
    let args = Args::parse();
    let out_dirs: Vec<PathBuf> = if args.out_dirs.is_empty() {
        DEFAULT_OUT_DIRS.iter().map(PathBuf::from).collect()
    } else {
        args.out_dirs
    };
    let manifests = flexinfer_crds::manifests::render_all();
    let result = if args.check {
        check(&out_dirs, &manifests)
    } else {
        write(&out_dirs, &manifests).map(|()| true)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("flexinfer-crdgen: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn write(out_dirs: &[PathBuf], manifests: &[(String, String)]) -> Result<()> {
    for dir in out_dirs {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, yaml) in manifests {
            let path = dir.join(name);
            fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        }
        for stale in stale_files(dir, manifests)? {
            fs::remove_file(&stale).with_context(|| format!("removing {}", stale.display()))?;
            println!("removed stale {}", stale.display());
        }
        println!("wrote {} manifests to {}", manifests.len(), dir.display());
    }
    Ok(())
}

/// Compares the directories with the rendered manifests; prints one line per
/// problem and returns whether everything matched.
fn check(out_dirs: &[PathBuf], manifests: &[(String, String)]) -> Result<bool> {
    let mut problems = Vec::new();
    for dir in out_dirs {
        for (name, yaml) in manifests {
            let path = dir.join(name);
            match fs::read_to_string(&path) {
                Ok(current) if current == *yaml => {}
                Ok(current) => problems.push(format!(
                    "{}: differs ({})",
                    path.display(),
                    first_difference(&current, yaml)
                )),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    problems.push(format!("{}: missing", path.display()));
                }
                Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
            }
        }
        for stale in stale_files(dir, manifests)? {
            problems.push(format!("{}: stale (no kind generates it)", stale.display()));
        }
    }
    if problems.is_empty() {
        println!(
            "{} manifests are current in {} director{}",
            manifests.len(),
            out_dirs.len(),
            if out_dirs.len() == 1 { "y" } else { "ies" }
        );
        return Ok(true);
    }
    eprintln!("CRD manifests are out of date:");
    for problem in &problems {
        eprintln!("  {problem}");
    }
    eprintln!("run `cargo run -p flexinfer-crds --bin flexinfer-crdgen` from the repository root to regenerate them");
    Ok(false)
}

/// Generated-looking files (`<group>_*.yaml`) in `dir` that no kind
/// produces any more.
fn stale_files(dir: &Path, manifests: &[(String, String)]) -> Result<Vec<PathBuf>> {
    let prefix = format!("{}_", flexinfer_crds::GROUP);
    let mut stale = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(stale),
        Err(err) => return Err(err).with_context(|| format!("listing {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix)
            && name.ends_with(".yaml")
            && !manifests.iter().any(|(known, _)| *known == name)
        {
            stale.push(entry.path());
        }
    }
    stale.sort();
    Ok(stale)
}

/// "line N" of the first differing line, for the diff summary.
fn first_difference(current: &str, expected: &str) -> String {
    let mut current_lines = current.lines();
    let mut expected_lines = expected.lines();
    let mut line = 1;
    loop {
        match (current_lines.next(), expected_lines.next()) {
            (Some(a), Some(b)) if a == b => line += 1,
            (None, None) => return "trailing newline".to_owned(),
            (Some(a), Some(b)) => return format!("line {line}: has {a:?}, expected {b:?}"),
            (Some(_), None) => return format!("line {line}: extra lines at end"),
            (None, Some(_)) => return format!("line {line}: lines missing at end"),
        }
    }
}
