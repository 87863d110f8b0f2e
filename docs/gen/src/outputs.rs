//! Every generated document and where it goes.

use clap::CommandFactory;

use crate::{cli_ref, crd_ref, region, timing};

/// One generated piece of documentation.
#[derive(Debug, Clone)]
pub enum Output {
    /// A whole file, relative to the repository root.
    File {
        /// Path from the repository root.
        path: &'static str,
        /// Its full content.
        content: String,
    },
    /// A generated region inside a hand-written file.
    Region {
        /// Path from the repository root.
        path: &'static str,
        /// Region name (see [`region`]).
        name: &'static str,
        /// The region's body.
        content: String,
    },
}

impl Output {
    /// Path from the repository root.
    pub fn path(&self) -> &'static str {
        match self {
            Output::File { path, .. } | Output::Region { path, .. } => path,
        }
    }

    /// What the file should contain, given its current content (needed
    /// for regions, whose surroundings are kept).
    pub fn expected(&self, current: Option<&str>) -> Result<String, String> {
        match self {
            Output::File { content, .. } => Ok(content.clone()),
            Output::Region {
                path,
                name,
                content,
            } => {
                let current = current.ok_or_else(|| format!("{path} does not exist"))?;
                region::splice(current, name, content).map_err(|e| format!("{path}: {e}"))
            }
        }
    }
}

/// The configuration reference: the command line of every binary the
/// images ship, each defined in its crate's library.
pub fn configuration() -> String {
    let commands = [
        flexinfer_gateway::cli::Cli::command(),
        flexinfer_operator::cli::Cli::command(),
        flexinfer_sched::cli::Cli::command(),
        flexinfer_node::cli::Cli::command(),
        flexinfer_flashload::cli::Cli::command(),
        flexinfer_bench::cli::Cli::command(),
        flexinfer_conformance::sim::cli::SimArgs::command(),
        flexinfer_conformance::cli::Cli::command(),
    ];
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from each binary's command-line definition; do not edit by hand \
         (`FLEXINFER_BLESS=1 cargo test -p flexinfer-docs` regenerates it, and the test fails \
         when it is out of date). Every flag that lists an environment variable can be set \
         either way; the flag wins. Booleans shown with `true` or `false` take an explicit \
         value (`--flag true`, or the environment variable), so that they can be set from a \
         container's environment. Durations accept `humantime` forms: `500ms`, `30s`, `5m`, \
         `1h 30m`.\n\n\
         The Helm chart's values are documented in `helm/flexinfer/values.yaml`.\n\n",
    );
    out.push_str("| Binary | Image target | Role |\n|---|---|---|\n");
    for (binary, role) in [
        (
            "flexinfer-gateway",
            "OpenAI-compatible proxy, activator and (embedded) operator",
        ),
        (
            "flexinfer-operator",
            "standalone operator: the Kubernetes controllers outside the gateway",
        ),
        ("flexinfer-sched", "kube-scheduler extender"),
        ("flexinfer-agent", "node agent (DaemonSet)"),
        ("flexinfer-flashload", "model preload init container"),
        ("flexinfer-bench", "benchmark job"),
        (
            "flexinfer-sim",
            "simulated model server for tests and demos",
        ),
        (
            "flexinfer-conformance",
            "conformance checks and load generator for a gateway",
        ),
    ] {
        let anchor = binary.replace(' ', "-");
        out.push_str(&format!(
            "| [`{binary}`](#{anchor}) | `{binary}` | {role} |\n"
        ));
    }
    out.push('\n');
    for command in commands {
        out.push_str(&cli_ref::render(command));
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Every generated output.
pub fn outputs() -> Vec<Output> {
    let mut crds = crd_ref::render_all();
    while crds.ends_with("\n\n") {
        crds.pop();
    }
    vec![
        Output::File {
            path: "docs/configuration.md",
            content: configuration(),
        },
        Output::File {
            path: "docs/crds.md",
            content: crds,
        },
        Output::Region {
            path: "docs/scaling.md",
            name: "timing",
            content: timing::render(),
        },
    ]
}
