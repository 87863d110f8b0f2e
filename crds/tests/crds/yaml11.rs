//! The committed manifests mean the same to a YAML 1.1 reader (Helm and
//! kubectl read with go-yaml's YAML 1.1 rules) as to serde_yaml's YAML 1.2:
//! no enum value, default or description turns into a boolean, null,
//! number or date.
//!
//! PyYAML is the YAML 1.1 reader: the interpreter is `$FLEXINFER_PYTHON`,
//! else the workspace's `.venv`, else `python3`. Without PyYAML the test
//! says so and passes, except under `CI=true`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::manifests::{committed_dirs, repo_root};

/// Loads each file named on the command line with PyYAML and prints the
/// documents as one JSON object keyed by path; exits 3 without PyYAML.
const LOAD_WITH_PYYAML: &str = r#"
import json, sys
try:
    import yaml
except ImportError:
    sys.exit(3)
out = {}
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        out[path] = list(yaml.safe_load_all(f))
print(json.dumps(out, default=lambda v: {"not a string, number or boolean": repr(v)}))
"#;

fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("FLEXINFER_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(python);
    }
    let venv = repo_root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

#[test]
fn committed_manifests_read_the_same_under_yaml_1_1() {
    let mut files: Vec<PathBuf> = committed_dirs()
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).expect("manifest directory"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 18, "found only {files:?}");
    let python = python();
    let output = match Command::new(&python)
        .args(["-c", LOAD_WITH_PYYAML])
        .args(&files)
        .output()
    {
        Ok(output) => output,
        Err(err) => {
            assert!(!in_ci(), "cannot run {}: {err}", python.display());
            eprintln!(
                "skipped: cannot run {} ({err}); set FLEXINFER_PYTHON",
                python.display()
            );
            return;
        }
    };
    if output.status.code() == Some(3) {
        assert!(
            !in_ci(),
            "PyYAML is not importable with {}",
            python.display()
        );
        eprintln!(
            "skipped: PyYAML is not importable with {}",
            python.display()
        );
        return;
    }
    assert!(
        output.status.success(),
        "PyYAML failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let yaml_1_1: Value = serde_json::from_slice(&output.stdout).expect("JSON from PyYAML");
    let mut problems = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("manifest readable");
        let yaml_1_2: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|doc| serde::Deserialize::deserialize(doc).expect("manifest parses"))
            .collect();
        let read_1_1 = &yaml_1_1[path.to_string_lossy().as_ref()];
        differences("", &Value::from(yaml_1_2), read_1_1, &mut problems, path);
    }
    assert!(
        problems.is_empty(),
        "YAML 1.1 reads these scalars otherwise (quote them):\n{}",
        problems.join("\n")
    );
}

/// Collects the paths where the two readings differ.
fn differences(at: &str, a: &Value, b: &Value, problems: &mut Vec<String>, file: &PathBuf) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                differences(
                    &format!("{at}/{key}"),
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    problems,
                    file,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (a, b)) in a.iter().zip(b).enumerate() {
                differences(&format!("{at}/{index}"), a, b, problems, file);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a == b => {}
        _ => problems.push(format!(
            "{}{at}: YAML 1.2 {a}, YAML 1.1 {b}",
            file.display()
        )),
    }
}
