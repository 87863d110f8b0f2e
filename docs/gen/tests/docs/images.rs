//! `docker/Dockerfile`, `docker/docker-bake.hcl` and the chart agree with
//! the workspace: the build compiles the packages that own the binaries it
//! copies, every binary has a runtime target whose entrypoint is that
//! binary, bake builds every target, and every image the chart references
//! by default is one of them. (The images themselves need a Docker daemon
//! and are not built here.)

use crate::repo_root;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Binary name -> package name, for every binary of the workspace.
fn workspace_bins() -> BTreeMap<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata JSON");
    let mut bins = BTreeMap::new();
    for package in metadata["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "bin")
            {
                bins.insert(
                    target["name"].as_str().unwrap().to_owned(),
                    package["name"].as_str().unwrap().to_owned(),
                );
            }
        }
    }
    bins
}

/// `FROM <base> AS <target>` stages after the build stage, with the
/// ENTRYPOINT of each.
fn runtime_targets(dockerfile: &str) -> BTreeMap<String, String> {
    let mut targets = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"FROM") {
            current = words
                .iter()
                .position(|w| w.eq_ignore_ascii_case("AS"))
                .and_then(|i| words.get(i + 1))
                .map(|name| name.to_string());
        } else if words.first() == Some(&"ENTRYPOINT") {
            let entry: Vec<String> = serde_json::from_str(line["ENTRYPOINT".len()..].trim())
                .unwrap_or_else(|e| panic!("ENTRYPOINT must be exec form: {line}: {e}"));
            let target = current.clone().expect("ENTRYPOINT inside a stage");
            targets.insert(target, entry[0].clone());
        }
    }
    targets
}

#[test]
fn every_binary_has_an_image_target_built_from_its_package() {
    let dockerfile = read("docker/Dockerfile");
    let bins = workspace_bins();
    let targets = runtime_targets(&dockerfile);
    let shipped: BTreeSet<String> = bins
        .keys()
        .filter(|bin| *bin != "flexinfer-crdgen") // a development tool
        .cloned()
        .collect();
    for bin in &shipped {
        let entry = targets
            .get(bin)
            .unwrap_or_else(|| panic!("docker/Dockerfile has no target {bin}"));
        assert_eq!(
            entry,
            &format!("/usr/local/bin/{bin}"),
            "entrypoint of {bin}"
        );
        assert!(
            dockerfile.contains(&format!("-p {}", bins[bin])),
            "the build stage does not compile package {} (binary {bin})",
            bins[bin]
        );
        assert!(
            dockerfile.contains(&format!("/out/{bin}")),
            "no target copies {bin} out of the build stage"
        );
    }
    let loop_line = dockerfile
        .lines()
        .skip_while(|l| !l.contains("for bin in"))
        .take(2)
        .collect::<String>();
    for bin in &shipped {
        assert!(
            loop_line.contains(bin.as_str()),
            "build stage does not copy {bin}: {loop_line}"
        );
    }
    // cmake for Pingora's zlib-ng, and --locked builds.
    assert!(dockerfile.contains("cmake"));
    assert!(dockerfile.contains("cargo build --locked"));
    // Non-root runtime.
    assert!(dockerfile.matches("USER 65532:65532").count() >= 2);
}

#[test]
fn bake_builds_every_target_and_the_chart_uses_them() {
    let bake = read("docker/docker-bake.hcl");
    let targets = runtime_targets(&read("docker/Dockerfile"));
    for target in targets.keys() {
        assert!(
            bake.contains(&format!("target \"{target}\"")),
            "docker-bake.hcl has no target {target}"
        );
        assert!(
            bake.contains(&format!("\"${{REGISTRY}}/{target}:${{TAG}}\"")),
            "docker-bake.hcl does not tag {target}"
        );
    }
    // The chart's default images: "<registry>/<name>" for each component,
    // and the flash loader's in the controllers' environment (_helpers.tpl).
    let templates = [
        "gateway-deployment.yaml",
        "operator-deployment.yaml",
        "scheduler-extender.yaml",
        "agent-daemonset.yaml",
        "_helpers.tpl",
    ];
    let mut referenced = 0;
    for template in templates {
        let text = without_comments(&read(&format!("helm/flexinfer/templates/{template}")));
        for name in text.split("\"name\" \"").skip(1) {
            let name = name.split('"').next().unwrap();
            if name.starts_with("flexinfer-") && text.contains("flexinfer.image") {
                assert!(
                    targets.contains_key(name),
                    "{template} uses image {name}, which no Dockerfile target builds"
                );
                referenced += 1;
            }
        }
    }
    // One image per component, plus the flash loader the controllers inject.
    assert_eq!(
        referenced, 5,
        "images referenced by the component templates"
    );
    // The default tag is the chart's appVersion, which bake's default TAG matches.
    let chart = read("helm/flexinfer/Chart.yaml");
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .expect("appVersion");
    assert!(
        bake.contains(&format!("default = \"{app_version}\"")),
        "bake TAG default != appVersion {app_version}"
    );
}

/// Rust target triples of the platforms `docker/docker-bake.hcl` builds by
/// default (`PLATFORMS`, e.g. `linux/amd64,linux/arm64`).
fn image_platforms() -> Vec<&'static str> {
    let bake = read("docker/docker-bake.hcl");
    let default = bake
        .split("variable \"PLATFORMS\"")
        .nth(1)
        .and_then(|rest| rest.split("default").nth(1))
        .and_then(|rest| rest.split('"').nth(1))
        .expect("PLATFORMS default in docker/docker-bake.hcl");
    default
        .split(',')
        .map(|platform| match platform.trim() {
            "linux/amd64" => "x86_64-unknown-linux-gnu",
            "linux/arm64" => "aarch64-unknown-linux-gnu",
            other => panic!("docker-bake.hcl builds for {other}: add its Rust target here"),
        })
        .collect()
}

/// The build stage's Rust is at least the newest `rust-version` of any
/// locked package the image compiles, so `cargo build --locked` cannot
/// refuse a dependency.
#[test]
fn build_stage_rust_is_new_enough_for_every_locked_package() {
    let dockerfile = read("docker/Dockerfile");
    let version = |text: &str| -> (u64, u64) {
        let mut parts = text
            .trim()
            .split('.')
            .map(|p| p.parse::<u64>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    let rust = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .map(version)
        .expect("ARG RUST_VERSION in docker/Dockerfile");
    // Only the packages compiled for the image's platforms matter (a
    // Windows-only crate is never built there), and only those are in the
    // cargo cache of a machine that built the workspace: asking for every
    // platform's packages offline fails on a fresh machine.
    let mut args = vec!["metadata", "--format-version", "1", "--offline"];
    let platforms = image_platforms();
    for triple in &platforms {
        args.extend(["--filter-platform", triple]);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata JSON");
    let (newest, package) = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            Some((
                version(p["rust_version"].as_str()?),
                p["name"].as_str()?.to_owned(),
            ))
        })
        .max()
        .expect("some package declares a rust-version");
    assert!(
        rust >= newest,
        "docker/Dockerfile builds with Rust {rust:?} but {package} needs {newest:?}"
    );
}

/// A template without its `{{/* ... */}}` comments (whose usage examples
/// name images too).
fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{/*") {
        out.push_str(&rest[..start]);
        rest = rest[start..]
            .find("*/}}")
            .map_or("", |end| &rest[start + end + 4..]);
    }
    out.push_str(rest);
    out
}
