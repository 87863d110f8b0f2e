//! The alert rules shipped with the chart load in Prometheus and fire (and
//! stay quiet) as their unit tests expect:
//! `promtool check rules` and `promtool test rules
//! helm/tests/prometheus-rules.test.yaml`. promtool comes from the Debian
//! `prometheus` package (`scripts/setup.sh`); without it the test says so
//! and passes, except under `CI=true`.

use crate::repo_root;
use std::process::Command;

fn promtool(args: &[&str]) -> Option<String> {
    let output = match Command::new("promtool")
        .args(args)
        .current_dir(repo_root())
        .output()
    {
        Ok(output) => output,
        Err(err) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "CI=true but promtool cannot run: {err} (scripts/setup.sh installs it)"
            );
            eprintln!("skipped: promtool not available ({err}); run scripts/setup.sh");
            return None;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    Some(text)
}

#[test]
fn alert_rules_are_valid_and_pass_their_unit_tests() {
    let Some(check) = promtool(&[
        "check",
        "rules",
        "helm/flexinfer/files/prometheus-rules.yaml",
    ]) else {
        return;
    };
    assert!(check.contains("SUCCESS: 5 rules found"), "{check}");
    let test = promtool(&["test", "rules", "helm/tests/prometheus-rules.test.yaml"])
        .expect("promtool ran a moment ago");
    assert!(test.contains("SUCCESS"), "{test}");
}
