//! Every ServiceAccount the chart renders holds exactly the Kubernetes API
//! calls its component's code makes, for every values set.
//!
//! The code keeps its calls in tables next to it
//! (`flexinfer_operator::rbac::CONTROLLER_GRANTS`,
//! `flexinfer_gateway::kube::rbac::RBAC_RULES`,
//! `flexinfer_gateway::global::GLOBAL_RBAC_RULES`,
//! `flexinfer_sched::rbac::GRANTS`, `flexinfer_node::rbac::GRANTS`). For
//! each values set, `check_chart.py --summary` reports every rendered
//! ClusterRole and Role and the settings that decide the grants (watched
//! namespaces, the component running the controllers, leader election,
//! federation, ...). Each component's effective grants, as
//! `(place, group, resource, verb)` with place `*` for a ClusterRole and the
//! namespace for a Role, must equal its tables' for those settings: a
//! missing grant and an unused one both fail. The second kube-scheduler's
//! Lease Role is Kubernetes' own scheduler's business, checked by
//! `check_chart.py`.
//!
//! Also here: docs/federation.md's member permissions are
//! `flexinfer_operator::rbac::MEMBER_GRANTS`.

use std::collections::BTreeSet;

use flexinfer_crds::rbac::{Grant, Scope, When};
use serde_json::Value;

use crate::helm_chart::run_check;
use crate::repo_root;

/// One grant: where (`*` for every namespace), group, resource, verb, and
/// whether it is restricted to named objects.
type Triple = (String, String, String, String, bool);

/// The settings of one values set (`rbac` entries of the summary).
struct Settings<'a>(&'a Value);

impl Settings<'_> {
    fn label(&self) -> &str {
        self.0["values"].as_str().unwrap()
    }

    /// The watched namespaces, `None` for all.
    fn watched(&self) -> Option<Vec<String>> {
        self.0["watched"].as_array().map(|namespaces| {
            namespaces
                .iter()
                .map(|n| n.as_str().unwrap().to_owned())
                .collect()
        })
    }

    fn features(&self, component: &str) -> Vec<String> {
        self.0["features"][component]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no features of {component}", self.label()))
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect()
    }

    /// The places a grant of `scope` goes to.
    fn places(&self, scope: Scope) -> Vec<String> {
        let all = vec!["*".to_owned()];
        match (scope, self.watched()) {
            (Scope::Cluster, _) | (Scope::Watched | Scope::Reflected, None) => all,
            (Scope::Watched, Some(namespaces)) => namespaces,
            (Scope::Reflected, Some(namespaces)) if namespaces.len() == 1 => namespaces,
            (Scope::Reflected, Some(_)) => all,
            (Scope::Own, _) => vec![self.0["release"].as_str().unwrap().to_owned()],
        }
    }
}

/// The tables of `component` for `settings`.
fn tables(component: &str, settings: &Settings) -> Vec<Grant> {
    let controllers = settings.0["controllers"] == component;
    let mut grants = match component {
        "gateway" => match settings.0["global"].as_str() {
            // In global mode: the GlobalProxy's namespace, by name; placed
            // by `expected`.
            Some(_) => Vec::new(),
            None => flexinfer_gateway::kube::rbac::grants(),
        },
        "operator" => Vec::new(),
        "sched" => flexinfer_sched::rbac::GRANTS.to_vec(),
        "agent" => flexinfer_node::rbac::GRANTS.to_vec(),
        other => panic!("{}: no table for component {other}", settings.label()),
    };
    if controllers {
        grants.extend_from_slice(flexinfer_operator::rbac::CONTROLLER_GRANTS);
    }
    let features = settings.features(component);
    grants.retain(|g| g.when == When::Always || features.contains(&format!("{:?}", g.when)));
    grants
}

fn expand(
    place: &str,
    (group, resource, verbs): flexinfer_crds::rbac::RbacRule,
    by_name: bool,
) -> Vec<Triple> {
    verbs
        .iter()
        .map(|verb| {
            (
                place.to_owned(),
                group.to_owned(),
                resource.to_owned(),
                (*verb).to_owned(),
                by_name,
            )
        })
        .collect()
}

/// What the code of `component` needs under `settings`.
fn expected(component: &str, settings: &Settings) -> BTreeSet<Triple> {
    let mut out = BTreeSet::new();
    for grant in tables(component, settings) {
        for place in settings.places(grant.scope) {
            out.extend(expand(&place, grant.rule, grant.by_name));
        }
    }
    if let (true, Some(object)) = (component == "gateway", settings.0["global"].as_str()) {
        let namespace = object.split('/').next().unwrap();
        for &rule in flexinfer_gateway::global::GLOBAL_RBAC_RULES {
            out.extend(expand(namespace, rule, true));
        }
    }
    out
}

/// What the chart grants `component` under the values set `label`.
fn granted(summary: &Value, label: &str, component: &str) -> BTreeSet<Triple> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut out = BTreeSet::new();
    for role in summary["roles"].as_array().unwrap() {
        if role["values"] != label || role["component"] != component {
            continue;
        }
        let place = match role["kind"].as_str() {
            Some("ClusterRole") => "*".to_owned(),
            _ => role["namespace"].as_str().unwrap().to_owned(),
        };
        for rule in role["rules"].as_array().unwrap() {
            let by_name = !strings(&rule["resourceNames"]).is_empty();
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        out.insert((
                            place.clone(),
                            group.clone(),
                            resource.clone(),
                            verb,
                            by_name,
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Drops grants in one namespace that a cluster-wide one of the same
/// set covers (the gateway's own per-namespace reflectors next to the
/// embedded controllers' cluster-wide ones).
fn covered(set: BTreeSet<Triple>) -> BTreeSet<Triple> {
    let everywhere: BTreeSet<_> = set
        .iter()
        .filter(|t| t.0 == "*")
        .map(|t| (t.1.clone(), t.2.clone(), t.3.clone(), t.4))
        .collect();
    set.into_iter()
        .filter(|t| {
            t.0 == "*" || !everywhere.contains(&(t.1.clone(), t.2.clone(), t.3.clone(), t.4))
        })
        .collect()
}

/// The rendered summary of every values set, rendered once for all the
/// tests of this file (they run in parallel in one process).
fn summary() -> Option<Value> {
    static SUMMARY: std::sync::OnceLock<Option<Value>> = std::sync::OnceLock::new();
    SUMMARY
        .get_or_init(|| {
            let path =
                std::env::temp_dir().join(format!("flexinfer-grants-{}.json", std::process::id()));
            run_check(&["--summary", path.to_str().unwrap()])?;
            let text = std::fs::read_to_string(&path).expect("summary written");
            let _ = std::fs::remove_file(&path);
            Some(serde_json::from_str(&text).expect("summary is JSON"))
        })
        .clone()
}

#[test]
fn every_service_account_holds_exactly_the_api_calls_of_its_component() {
    let Some(summary) = summary() else { return };
    let mut compared = Vec::new();
    for entry in summary["rbac"].as_array().expect("rbac settings") {
        let settings = Settings(entry);
        let label = settings.label();
        let components = entry["features"].as_object().unwrap();
        // Kubernetes' own scheduler and the uninstall hook's kubectl run no
        // FlexInfer code: check_chart.py checks their rules.
        for component in components
            .keys()
            .filter(|c| !matches!(c.as_str(), "scheduler" | "uninstall"))
        {
            let want = covered(expected(component, &settings));
            let have = covered(granted(&summary, label, component));
            let missing: Vec<_> = want.difference(&have).collect();
            let unused: Vec<_> = have.difference(&want).collect();
            assert!(
                missing.is_empty() && unused.is_empty(),
                "{label}: {component}'s roles differ from its code's API calls\n  \
                 missing (the code makes these calls): {missing:?}\n  \
                 unused (no code path makes these calls): {unused:?}"
            );
            compared.push(format!("{label} {component}"));
        }
    }
    // defaults: gateway, agent; values-all: gateway, operator, sched,
    // agent; values-ha: gateway, sched, agent; values-global: gateway,
    // operator.
    assert_eq!(compared.len(), 11, "{compared:?}");
}

/// Rules restricted to named objects name the right ones: the Lease of
/// leader election, the global gateway's GlobalProxy.
#[test]
fn named_grants_name_the_objects_the_code_uses() {
    let Some(summary) = summary() else { return };
    let mut leases = 0;
    for role in summary["roles"].as_array().unwrap() {
        let settings = summary["rbac"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["values"] == role["values"])
            .unwrap();
        if role["component"] == "scheduler" {
            continue;
        }
        for rule in role["rules"].as_array().unwrap() {
            let Some(names) = rule["resourceNames"].as_array() else {
                continue;
            };
            let resources = rule["resources"].as_array().unwrap();
            if resources.iter().any(|r| r == "leases") {
                assert_eq!(names, &[settings["lease"].clone()], "{}", role["values"]);
                leases += 1;
            } else if resources
                .iter()
                .any(|r| r.as_str().unwrap().starts_with("globalproxies"))
            {
                let object = settings["global"]
                    .as_str()
                    .unwrap()
                    .split('/')
                    .nth(1)
                    .unwrap();
                assert_eq!(names, &[Value::from(object)], "{}", role["values"]);
            }
        }
    }
    assert_eq!(
        leases, 4,
        "every values set runs the controllers and elects a leader (defaults and values-ha: \
         the gateway; values-all and values-global: the operator)"
    );
}

/// docs/federation.md lists, as a table under "Member", exactly
/// `MEMBER_GRANTS`: the permissions the operator uses in a member cluster.
#[test]
fn federation_member_permissions_are_the_ones_the_controllers_use() {
    let text = std::fs::read_to_string(repo_root().join("docs/federation.md")).unwrap();
    let start = text
        .find("| member resource | verbs | where |")
        .expect("docs/federation.md has the member permission table");
    let mut documented = BTreeSet::new();
    for line in text[start..].lines().skip(2).map(str::trim) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let resource = cells[0].trim_matches('`');
        let (group, resource) = resource
            .split_once('.')
            .map_or(("", resource), |(r, g)| (g, r));
        let scope = match cells[2] {
            "every namespace" => "cluster",
            "the FederatedModel's namespace" => "namespace",
            other => panic!("unknown place {other:?}"),
        };
        for verb in cells[1].split(',') {
            documented.insert((
                scope.to_owned(),
                group.to_owned(),
                resource.to_owned(),
                verb.trim().trim_matches('`').to_owned(),
            ));
        }
    }
    let code: BTreeSet<_> = flexinfer_operator::rbac::MEMBER_GRANTS
        .iter()
        .flat_map(|g| {
            let scope = if g.scope == Scope::Cluster {
                "cluster"
            } else {
                "namespace"
            };
            g.rule.2.iter().map(move |verb| {
                (
                    scope.to_owned(),
                    g.rule.0.to_owned(),
                    g.rule.1.to_owned(),
                    (*verb).to_owned(),
                )
            })
        })
        .collect();
    assert_eq!(documented, code);
}
