//! The shape of the API-call tables each component keeps next to its code
//! (`flexinfer_operator::rbac`, `flexinfer_gateway::kube::rbac`,
//! `flexinfer_sched::rbac`, `flexinfer_node::rbac`): which verbs on which
//! resources, where, and under which chart setting. The Helm chart must
//! grant exactly the union of a component's tables for the settings it
//! renders; `docs/gen/tests/docs/helm_chart.rs` compares them.

/// One RBAC rule: API group (empty for the core group), resource (with
/// `/status` or `/finalizers` for a subresource) and verbs.
pub type RbacRule = (&'static str, &'static str, &'static [&'static str]);

/// Where a rule is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A cluster-scoped resource (Nodes, CRDs, Namespaces): a ClusterRole.
    Cluster,
    /// Objects in the watched namespaces: a Role in each of them, or the
    /// ClusterRole when every namespace is watched.
    Watched,
    /// The list and watch of a reflector that covers one namespace or all
    /// (the controllers and the scheduler extender): a Role in the watched
    /// namespace when exactly one is watched, the ClusterRole otherwise.
    Reflected,
    /// The component's own namespace (the release namespace): a Role there.
    Own,
}

/// The chart setting under which a rule is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Whenever the component runs.
    Always,
    /// Leader election (more than one replica of the controllers).
    LeaderElection,
    /// The federation controllers (`operator.federation.enabled`).
    Federation,
    /// A feature that reads Secrets (`catalog.registryCredentials` or
    /// federation).
    ReadsSecrets,
    /// The scheduler extender's Node cache (`scheduler.extender.nodeCache`).
    NodeCache,
    /// The scheduler extender's tenant fair share.
    FairShare,
    /// The node agent's KV-cache usage (`agent.kvCache`).
    KvCache,
}

/// One entry of an API-call table: a rule, where it is granted, when it is
/// needed and whether the chart restricts it to named objects
/// (`resourceNames`: the CRDs checked at start-up, the Lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The verbs on a resource.
    pub rule: RbacRule,
    /// Where it is granted.
    pub scope: Scope,
    /// Under which setting.
    pub when: When,
    /// Restricted to named objects.
    pub by_name: bool,
}

impl Grant {
    /// A rule needed whenever the component runs, on any object.
    pub const fn new(scope: Scope, rule: RbacRule) -> Grant {
        Grant {
            rule,
            scope,
            when: When::Always,
            by_name: false,
        }
    }

    /// The same rule, needed only under `when`.
    pub const fn when(self, when: When) -> Grant {
        Grant { when, ..self }
    }

    /// The same rule, restricted to named objects.
    pub const fn by_name(self) -> Grant {
        Grant {
            by_name: true,
            ..self
        }
    }
}

/// Problems of a table: a resource listed twice in one scope and setting,
/// a rule without verbs or with a repeated verb. Empty when the table is
/// well formed.
pub fn problems(table: &[Grant]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, g) in table.iter().enumerate() {
        let (group, resource, verbs) = g.rule;
        if table[i + 1..].iter().any(|o| {
            (o.rule.0, o.rule.1, o.scope, o.when, o.by_name)
                == (group, resource, g.scope, g.when, g.by_name)
        }) {
            out.push(format!("{group}/{resource} listed twice"));
        }
        if verbs.is_empty() {
            out.push(format!("{group}/{resource} has no verbs"));
        }
        let mut sorted = verbs.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != verbs.len() {
            out.push(format!("{group}/{resource} repeats a verb"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_names_repeated_resources_and_verbs() {
        let ok = [
            Grant::new(Scope::Watched, ("", "pods", &["list"])),
            Grant::new(Scope::Cluster, ("", "nodes", &["list"])),
            Grant::new(Scope::Watched, ("", "pods", &["delete"])).when(When::Federation),
        ];
        assert!(problems(&ok).is_empty());
        let bad = [
            Grant::new(Scope::Watched, ("", "pods", &["list", "list"])),
            Grant::new(Scope::Watched, ("", "pods", &["get"])),
            Grant::new(Scope::Cluster, ("", "nodes", &[])),
        ];
        assert_eq!(
            problems(&bad),
            [
                "/pods listed twice",
                "/pods repeats a verb",
                "/nodes has no verbs"
            ]
        );
    }
}
