//! The Python interpreter that the tests driving the official SDKs (and
//! the chart checks) run: `$FLEXINFER_PYTHON`, else the workspace's
//! `.venv/bin/python` (what `scripts/setup.sh` creates), else `python3`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The interpreter to run.
pub fn interpreter() -> PathBuf {
    if let Some(python) = std::env::var_os("FLEXINFER_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(python);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// Panics, naming `hint`, unless `python` runs and can `import module`.
pub fn require(python: &Path, module: &str, hint: &str) {
    let probe = Command::new(python)
        .args(["-c", &format!("import {module}")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python:?} ({e}); set FLEXINFER_PYTHON. {hint}"));
    assert!(
        probe.status.success(),
        "{module} is not importable with {python:?}: {}\n{hint}",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
}

/// Runs `script args…` with `python` and parses what it prints as JSON;
/// panics with the script's standard error when it fails.
pub fn run_json(python: &Path, script: &Path, args: &[&str]) -> Value {
    let output = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{} failed ({}):\n{}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{} printed no JSON ({e}): {}",
            script.display(),
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_prints_json_and_a_missing_module_is_named() {
        let python = interpreter();
        if Command::new(&python).arg("-V").output().is_err() {
            eprintln!("skipped: no Python at {python:?}");
            return;
        }
        let dir = std::env::temp_dir().join(format!("flexinfer-py-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("echo.py");
        std::fs::write(
            &script,
            "import json, sys\nprint(json.dumps(sys.argv[1:]))\n",
        )
        .unwrap();
        assert_eq!(
            run_json(&python, &script, &["a", "b"]),
            serde_json::json!(["a", "b"])
        );
        let missing = std::panic::catch_unwind(|| {
            require(&python, "no_such_module_anywhere", "install it");
        })
        .unwrap_err();
        let message = missing
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("no_such_module_anywhere"), "{message}");
        assert!(message.contains("install it"), "{message}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
