//! The generated documentation under `docs/` matches the code.
//!
//! Fails with the first differing line of each stale file; run
//! `FLEXINFER_BLESS=1 cargo test -p flexinfer-docs --test docs drift` to
//! regenerate them.

use crate::repo_root;
use std::fs;

fn first_difference(current: &str, expected: &str) -> String {
    for (index, (a, b)) in current.lines().zip(expected.lines()).enumerate() {
        if a != b {
            return format!("line {}:\n  has      {a:?}\n  expected {b:?}", index + 1);
        }
    }
    format!(
        "{} lines, expected {} lines",
        current.lines().count(),
        expected.lines().count()
    )
}

#[test]
fn generated_docs_are_current() {
    let root = repo_root();
    let bless = std::env::var("FLEXINFER_BLESS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for output in flexinfer_docs::outputs() {
        let path = root.join(output.path());
        let current = fs::read_to_string(&path).ok();
        let expected = output
            .expected(current.as_deref())
            .unwrap_or_else(|e| panic!("{e}"));
        if current.as_deref() == Some(expected.as_str()) {
            continue;
        }
        if bless {
            fs::write(&path, &expected).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            eprintln!("regenerated {}", output.path());
        } else {
            stale.push(format!(
                "{}: {}",
                output.path(),
                current.as_deref().map_or_else(
                    || "missing".to_owned(),
                    |current| first_difference(current, &expected)
                )
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "generated docs are out of date (FLEXINFER_BLESS=1 cargo test -p flexinfer-docs --test docs drift regenerates them):\n{}",
        stale.join("\n")
    );
}

/// Every documented environment variable and flag of the gateway appears
/// in the reference, so a renamed flag cannot slip through unnoticed.
#[test]
fn configuration_lists_every_gateway_env_var() {
    use clap::CommandFactory;
    let text = flexinfer_docs::outputs::configuration();
    let command = flexinfer_gateway::cli::Cli::command();
    let mut checked = 0;
    for arg in command.get_arguments() {
        if let Some(env) = arg.get_env() {
            let env = env.to_string_lossy();
            assert!(text.contains(&format!("`{env}`")), "{env} missing");
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} env vars found");
}
