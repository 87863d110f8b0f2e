//! The Helm chart renders, validates and agrees with the binaries.
//!
//! `helm/tests/check_chart.py` renders `helm/flexinfer/` offline with
//! `helm-python-sdk` for the default values and for the values files under
//! `helm/tests/`, validates every object (Kubernetes OpenAPI schemas through
//! `kubernetes-validate`, custom resources through our CRD schemas) and
//! checks the chart's promises (see the script). These tests run it with the
//! interpreter in `FLEXINFER_PYTHON` (`scripts/test.sh` exports it; the
//! packages come from `scripts/setup.sh`), then compare every flag and
//! environment variable the chart gives a FlexInfer container with that
//! binary's command line, and parse them with it.
//!
//! Without the Python packages the tests say so and pass, except under
//! `CI=true`, where missing packages fail them.

use crate::repo_root;
use flexinfer_conformance::python::interpreter;
use std::collections::BTreeMap;
use std::process::Command;

use clap::CommandFactory;
use serde_json::Value;

/// Exit status of the script when a Python package is missing.
const MISSING_PACKAGES: i32 = 3;

/// Variables read outside the command line: by the NVIDIA container
/// runtime, and the log filter.
const EXTERNAL_ENV: &[&str] = &[
    "RUST_LOG",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
];

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Runs the chart check with `args`; `None` when the Python packages are
/// missing outside CI (the test then passes, saying why).
pub(crate) fn run_check(args: &[&str]) -> Option<String> {
    let python = interpreter();
    let script = repo_root().join("helm/tests/check_chart.py");
    let output = match Command::new(&python).arg(&script).args(args).output() {
        Ok(output) => output,
        Err(err) => {
            let message = format!("cannot run {}: {err}", python.display());
            assert!(!in_ci(), "{message} (CI=true: run scripts/setup.sh)");
            eprintln!("skipped: {message}; run scripts/setup.sh and set FLEXINFER_PYTHON");
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(MISSING_PACKAGES) {
        assert!(
            !in_ci(),
            "CI=true but the chart check cannot run: {stderr} (scripts/setup.sh installs helm-python-sdk, kubernetes-validate, jsonschema)"
        );
        eprintln!("skipped: {stderr}");
        return None;
    }
    assert!(
        output.status.success(),
        "chart check failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    Some(stdout)
}

#[test]
fn chart_renders_and_every_object_validates() {
    let Some(stdout) = run_check(&[]) else { return };
    assert!(stdout.contains("chart OK"), "{stdout}");
}

#[test]
fn rendered_rbac_is_least_privilege_per_component() {
    let Some(stdout) = run_check(&["--only", "rbac"]) else {
        return;
    };
    assert!(stdout.contains("RBAC OK"), "{stdout}");
}

/// The command line of a binary the chart runs.
fn command_of(binary: &str) -> Option<clap::Command> {
    match binary {
        "flexinfer-gateway" => Some(flexinfer_gateway::cli::Cli::command()),
        "flexinfer-operator" => Some(flexinfer_operator::cli::Cli::command()),
        "flexinfer-sched" => Some(flexinfer_sched::cli::Cli::command()),
        "flexinfer-agent" => Some(flexinfer_node::cli::Cli::command()),
        _ => None,
    }
}

/// Whether a rendered container runs the operator's controllers: the
/// operator, or the gateway with `--embedded-operator`.
fn runs_controllers(binary: &str, container: &Value) -> bool {
    binary == "flexinfer-operator"
        || (binary == "flexinfer-gateway"
            && container["args"]
                .as_array()
                .is_some_and(|args| args.iter().any(|a| a == "--embedded-operator")))
}

/// Names of the environment variables the chart's templates set
/// themselves; any other variable of a container comes from a values map
/// (`gateway.env`, `operator.env`, ...).
fn template_env() -> Vec<String> {
    [
        "operator-deployment.yaml",
        "gateway-deployment.yaml",
        "_helpers.tpl",
    ]
    .iter()
    .flat_map(|file| {
        std::fs::read_to_string(repo_root().join("helm/flexinfer/templates").join(file))
            .unwrap()
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- name: ").map(str::to_owned))
            .filter(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .collect::<Vec<_>>()
    })
    .collect()
}

/// The argument vector equivalent to a container's args and environment:
/// each variable becomes the flag that reads it. Variables read outside the
/// command line are left out: [`EXTERNAL_ENV`], and, in a container running
/// the controllers, `operator.env` variables no flag reads (`EXTRA` in
/// `values-all.yaml`; in practice the backend catalog's image overrides
/// such as `DEFAULT_VLLM_IMAGE`, which the controllers read from the
/// environment).
fn argv(command: &clap::Command, binary: &str, container: &Value) -> Vec<String> {
    let mut argv = vec![binary.to_owned()];
    argv.extend(
        container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap_or_default().to_owned()),
    );
    let env: BTreeMap<String, Value> = serde_json::from_value(container["env"].clone()).unwrap();
    let controllers = runs_controllers(binary, container);
    let chart_env = template_env();
    for (name, value) in env {
        if EXTERNAL_ENV.contains(&name.as_str()) {
            continue;
        }
        let arg = command
            .get_arguments()
            .find(|arg| arg.get_env().is_some_and(|e| e == name.as_str()));
        let Some(arg) = arg else {
            if controllers && !chart_env.contains(&name) {
                continue;
            }
            panic!(
                "{}: the chart sets {name} for {binary}, which no flag of {binary} reads",
                container["workload"]
            );
        };
        let long = arg.get_long().expect("env flags have a long name");
        // Secrets and downward-API values are filled in by the kubelet.
        let value = value.as_str().unwrap_or("placeholder").to_owned();
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            // A switch read from the environment: its value says whether
            // it is on (clap's boolish values).
            let on = matches!(
                value.to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "y" | "on"
            );
            let off = matches!(
                value.to_ascii_lowercase().as_str(),
                "false" | "0" | "no" | "n" | "off" | ""
            );
            assert!(on || off, "{name}={value:?} is not a boolean");
            if on {
                argv.push(format!("--{long}"));
            }
        } else {
            argv.push(format!("--{long}={value}"));
        }
    }
    argv
}

#[test]
fn chart_flags_and_env_are_understood_by_the_binaries() {
    let summary = std::env::temp_dir().join(format!("flexinfer-chart-{}.json", std::process::id()));
    let Some(_) = run_check(&["--summary", summary.to_str().unwrap()]) else {
        return;
    };
    let text = std::fs::read_to_string(&summary).expect("summary written");
    let _ = std::fs::remove_file(&summary);
    let summary: Value = serde_json::from_str(&text).expect("summary is JSON");
    let mut checked = 0;
    for container in summary["containers"].as_array().expect("containers") {
        let binary = container["binary"].as_str().unwrap();
        let Some(command) = command_of(binary) else {
            continue;
        };
        let argv = argv(&command, binary, container);
        let parsed = command.clone().try_get_matches_from(&argv);
        assert!(
            parsed.is_ok(),
            "{} {}: {binary} rejects the chart's settings {argv:?}: {}",
            container["values"],
            container["workload"],
            parsed.unwrap_err()
        );
        if binary == "flexinfer-gateway" {
            use clap::Parser;
            let cli = flexinfer_gateway::cli::Cli::try_parse_from(&argv).unwrap();
            if let Err(problems) = cli.validate() {
                panic!(
                    "{} {}: the gateway refuses the chart's settings: {problems}",
                    container["values"], container["workload"]
                );
            }
        }
        checked += 1;
    }
    // Defaults: gateway + agent; all options: gateway, operator, sched,
    // agent; HA: three; global: gateway, operator.
    assert!(checked >= 11, "only {checked} containers checked");
}

/// The controllers' settings from the chart are the ones the values ask
/// for, wherever the controllers run: the rendered flags and environment of
/// the operator, or of the gateway with `--embedded-operator`, are parsed by
/// that binary's command line and turned into `ControllerSettings` by its own
/// mapping, with the backend catalog's image overrides taken from the
/// container's environment. Compared with what `check_chart.py` expects of
/// each values set: the FlexInfer scheduler for model pods when
/// `scheduler.enabled`, the flash-loader image, the quantizer image when
/// set, the image overrides of `operator.env`, leader election with the
/// chart's Lease whatever the replica count, and federation with
/// its failure threshold.
#[test]
fn chart_controller_settings_are_read_by_the_binary_that_runs_them() {
    use clap::Parser;
    let summary = std::env::temp_dir().join(format!("flexinfer-op-{}.json", std::process::id()));
    let Some(_) = run_check(&["--summary", summary.to_str().unwrap()]) else {
        return;
    };
    let text = std::fs::read_to_string(&summary).expect("summary written");
    let _ = std::fs::remove_file(&summary);
    let summary: Value = serde_json::from_str(&text).expect("summary is JSON");
    let expected: Vec<&Value> = summary["controllers"]
        .as_array()
        .expect("controllers")
        .iter()
        .collect();
    let mut checked = Vec::new();
    for container in summary["containers"].as_array().expect("containers") {
        let binary = container["binary"].as_str().unwrap();
        if !runs_controllers(binary, container) {
            continue;
        }
        let context = format!("{} {}", container["values"], container["workload"]);
        let env = &container["env"];
        let image_overrides = flexinfer_operator::settings::image_overrides_from(|name| {
            env[name].as_str().map(str::to_owned)
        });
        let command = command_of(binary).unwrap();
        let argv = argv(&command, binary, container);
        let refused = |e: clap::Error| format!("{context}: {binary} rejects {argv:?}: {e}");
        let (settings, lease_flag) = if binary == "flexinfer-operator" {
            let cli = flexinfer_operator::cli::Cli::try_parse_from(&argv)
                .unwrap_or_else(|e| panic!("{}", refused(e)));
            let settings = cli.controller_settings("replica-0", image_overrides);
            (settings, "--leader-election-id")
        } else {
            let cli = flexinfer_gateway::cli::Cli::try_parse_from(&argv)
                .unwrap_or_else(|e| panic!("{}", refused(e)));
            if let Err(problems) = cli.validate() {
                panic!("{context}: the gateway refuses the chart's settings: {problems}");
            }
            let settings = cli.controller_settings("replica-0", image_overrides);
            (settings, "--leader-election-lease")
        };
        let want = expected
            .iter()
            .find(|c| c["values"] == container["values"])
            .unwrap_or_else(|| panic!("{context}: no expectation for these values"));
        assert_eq!(
            want["workload"], container["workload"],
            "{context}: another workload should run the controllers"
        );
        let build = &settings.build;
        assert_eq!(
            build.scheduler_name.as_deref(),
            want["scheduler_name"].as_str(),
            "{context}: schedulerName of model pods"
        );
        assert_eq!(
            Some(build.flash_loader_image.as_str()),
            want["flashload_image"].as_str(),
            "{context}: flash-loader image"
        );
        assert_eq!(
            build.quantizer_image,
            want["quantizer_image"]
                .as_str()
                .unwrap_or(flexinfer_operator::desired::DEFAULT_QUANTIZER_IMAGE),
            "{context}: quantizer image"
        );
        let overrides: BTreeMap<String, String> =
            serde_json::from_value(want["image_overrides"].clone()).unwrap();
        assert_eq!(
            build.image_overrides, overrides,
            "{context}: image overrides"
        );
        let lease = settings
            .leader_election
            .as_ref()
            .map(|le| le.lease_name.as_str());
        assert_eq!(
            lease,
            (want["leader_elect"] == true).then(|| want["lease"].as_str().unwrap()),
            "{context}: leader election"
        );
        if let Some(lease) = lease {
            assert!(
                argv.contains(&format!("{lease_flag}={lease}")),
                "{context}: Lease {lease} is not the chart's ({argv:?})"
            );
        }
        let threshold = env["FLEXINFER_CLUSTER_FAILURE_THRESHOLD"]
            .as_str()
            .map(|v| v.parse::<u32>().expect("an integer threshold"));
        assert_eq!(
            settings.federation.map(|f| f.failure_threshold),
            threshold,
            "{context}: federation and its failure threshold"
        );
        checked.push(container["values"].as_str().unwrap().to_owned());
    }
    let mut wanted: Vec<String> = expected
        .iter()
        .map(|c| c["values"].as_str().unwrap().to_owned())
        .collect();
    checked.sort();
    wanted.sort();
    assert_eq!(
        checked, wanted,
        "one container runs the controllers per values set (defaults and values-ha: the \
         gateway; values-all and values-global: the operator)"
    );
}

/// The operator may read exactly the CRDs it checks for at start-up: those
/// of the controllers, the ModelCatalog controller's and, with federation,
/// the federation controllers'.
#[test]
fn operator_role_can_read_the_crds_it_checks() {
    let summary = std::env::temp_dir().join(format!("flexinfer-crds-{}.json", std::process::id()));
    let Some(_) = run_check(&["--summary", summary.to_str().unwrap()]) else {
        return;
    };
    let text = std::fs::read_to_string(&summary).expect("summary written");
    let _ = std::fs::remove_file(&summary);
    let summary: Value = serde_json::from_str(&text).expect("summary is JSON");
    let mut compared = 0;
    for role in summary["roles"].as_array().expect("roles") {
        let controllers = role["component"] == "operator"
            || (role["component"] == "gateway" && role["embeddedOperator"] == true);
        if role["kind"] != "ClusterRole" || !controllers {
            continue;
        }
        let mut wanted: std::collections::BTreeSet<String> =
            flexinfer_operator::controllers::REQUIRED_CRDS
                .iter()
                .map(|name| name.to_string())
                .collect();
        wanted.insert(flexinfer_operator::controllers::model_catalog::CRD.to_string());
        if role["federation"] == true {
            wanted.extend(
                flexinfer_operator::controllers::federation::REQUIRED_CRDS
                    .iter()
                    .map(|name| name.to_string()),
            );
        }
        let names: std::collections::BTreeSet<String> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|rule| {
                rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "customresourcedefinitions")
            })
            .flat_map(|rule| {
                rule["resourceNames"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|name| name.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, wanted, "{} {}", role["values"], role["component"]);
        compared += 1;
    }
    assert_eq!(
        compared, 4,
        "defaults, values-all (operator), values-ha (embedded), values-global (operator)"
    );
}
