//! The data plane's view of the Gateway API: for each Gateway (known by
//! the port its traffic arrives on), the rules of the routes attached to
//! it, in Gateway API precedence, each with its weighted backends.
//!
//! Built whole by the controller ([`super::compile`]) and swapped
//! atomically; the request path only reads it.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, Method};

/// Where a matched request goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A backend served from the Gateway API's own routes (an
    /// InferencePool or a Service), by its key there.
    Backend(Arc<str>),
    /// One of FlexInfer's `Model`s, by the name clients send.
    Model(Arc<str>),
    /// A backend reference that does not resolve: the request gets 500,
    /// as the Gateway API asks.
    Unresolved,
}

/// A backend of a rule with its weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weighted {
    /// The backend.
    pub target: Target,
    /// Its share (0: none).
    pub weight: u32,
}

/// How a path is matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathRule {
    /// Equal to the path.
    Exact(String),
    /// The path's leading segments (`/a` matches `/a`, `/a/`, `/a/b`, not `/ab`).
    Prefix(String),
}

impl PathRule {
    /// Whether `path` (without its query) matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathRule::Exact(p) => path == p,
            PathRule::Prefix(p) => {
                let p = p.trim_end_matches('/');
                if p.is_empty() {
                    return true;
                }
                path.strip_prefix(p)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
        }
    }

    /// Precedence: an exact match first, then the longest prefix.
    fn rank(&self) -> (u8, usize) {
        match self {
            PathRule::Exact(p) => (1, p.len()),
            PathRule::Prefix(p) => (0, p.trim_end_matches('/').len()),
        }
    }
}

/// One match of a rule: the path, every header (exact values), the method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    /// The path.
    pub path: PathRule,
    /// Headers, lower-case names, exact values.
    pub headers: Vec<(http::HeaderName, String)>,
    /// The method, when the match names one.
    pub method: Option<Method>,
}

impl Matcher {
    fn matches(&self, method: &Method, path: &str, headers: &HeaderMap) -> bool {
        self.path.matches(path)
            && self.method.as_ref().is_none_or(|m| m == method)
            && self.headers.iter().all(|(name, value)| {
                headers
                    .get_all(name)
                    .iter()
                    .any(|v| v.as_bytes() == value.as_bytes())
            })
    }
}

/// A rule's match with everything Gateway API precedence orders it by.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The hosts it serves (exact, or `*.suffix`); any when empty.
    pub hosts: Vec<String>,
    /// The match.
    pub matcher: Matcher,
    /// The rule's backends.
    pub backends: Arc<[Weighted]>,
    /// Tie-breaks after the match itself: the route's creation time
    /// (older first), then `namespace/name`, then the rule's index.
    pub order: (String, String, usize),
    /// The route, `namespace/name`, for logs and metrics.
    pub route: Arc<str>,
}

/// What a request matched.
#[derive(Clone, Debug)]
pub struct Matched {
    /// The route, `namespace/name`.
    pub route: Arc<str>,
    /// The rule's backends.
    pub backends: Arc<[Weighted]>,
}

/// The routes of one Gateway.
#[derive(Clone, Debug, Default)]
pub struct GatewayRoutes {
    /// The Gateway, `namespace/name`.
    pub gateway: Arc<str>,
    /// Every rule match of every attached route.
    pub entries: Vec<Entry>,
}

/// Host specificity: an exact host beats a wildcard, a longer wildcard a
/// shorter one; a match without hosts comes last.
fn host_rank(pattern: Option<&str>) -> (u8, usize) {
    match pattern {
        Some(p) if p.starts_with("*.") => (1, p.len()),
        Some(p) => (2, p.len()),
        None => (0, 0),
    }
}

/// Whether `host` is served by `pattern` (`*.example.com` takes any
/// name below `example.com`, not `example.com` itself).
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

impl GatewayRoutes {
    /// The rule a request goes by, in Gateway API precedence; `None`: 404.
    pub fn find(
        &self,
        host: &str,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Option<Matched> {
        let host = host.to_ascii_lowercase();
        let mut best: Option<(&Entry, (u8, usize))> = None;
        for entry in &self.entries {
            let host_fit = if entry.hosts.is_empty() {
                Some(host_rank(None))
            } else {
                entry
                    .hosts
                    .iter()
                    .filter(|p| host_matches(p, &host))
                    .map(|p| host_rank(Some(p)))
                    .max()
            };
            let Some(fit) = host_fit else { continue };
            if !entry.matcher.matches(method, path, headers) {
                continue;
            }
            let better = match &best {
                None => true,
                Some((b, bfit)) => precedes((entry, fit), (b, *bfit)),
            };
            if better {
                best = Some((entry, fit));
            }
        }
        best.map(|(e, _)| Matched {
            route: e.route.clone(),
            backends: e.backends.clone(),
        })
    }
}

/// Whether `a` takes precedence over `b`: host, then path kind and
/// length, then method, then header count, then the route's age, name and
/// rule index.
fn precedes(a: (&Entry, (u8, usize)), b: (&Entry, (u8, usize))) -> bool {
    let key = |(e, fit): (&Entry, (u8, usize))| {
        (
            fit,
            e.matcher.path.rank(),
            e.matcher.method.is_some(),
            e.matcher.headers.len(),
        )
    };
    let (ka, kb) = (key(a), key(b));
    if ka != kb {
        return ka > kb;
    }
    a.0.order < b.0.order
}

/// Every Gateway's routes, by the data-plane port its traffic arrives on.
#[derive(Clone, Debug, Default)]
pub struct RoutingTable {
    /// Slot port → the Gateway on it.
    pub by_port: HashMap<u16, Arc<GatewayRoutes>>,
    /// Backends that cannot be served, and why (answered 503).
    pub unserved: HashMap<Arc<str>, String>,
    /// Backends whose endpoint picker is asked (InferencePools with an
    /// `endpointPickerRef`).
    pub pickers: HashMap<Arc<str>, PickerRoute>,
    /// Backends reached over cleartext HTTP/2 (`appProtocol:
    /// kubernetes.io/h2c`); HTTP/1.1 otherwise.
    pub h2c: std::collections::HashSet<Arc<str>>,
}

/// A pool's endpoint picker, as the data plane reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickerRoute {
    /// Its ready endpoints (one is asked per request).
    pub addrs: Vec<std::net::SocketAddr>,
    /// `failureMode: FailOpen`: FlexInfer's picker serves when it cannot.
    pub fail_open: bool,
    /// The pool, `namespace/name`, for metrics and messages.
    pub pool: Arc<str>,
}

impl RoutingTable {
    /// The Gateway whose traffic arrives on `port`.
    pub fn gateway(&self, port: u16) -> Option<&Arc<GatewayRoutes>> {
        self.by_port.get(&port)
    }
}

/// One backend of `backends`, by weight (`None` when every weight is 0).
pub fn pick(backends: &[Weighted], roll: u64) -> Option<&Target> {
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    if total == 0 {
        return None;
    }
    let mut at = roll % total;
    for b in backends {
        let w = u64::from(b.weight);
        if at < w {
            return Some(&b.target);
        }
        at -= w;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(hosts: &[&str], path: PathRule, headers: &[(&str, &str)], order: usize) -> Entry {
        Entry {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            matcher: Matcher {
                path,
                headers: headers
                    .iter()
                    .map(|(n, v)| {
                        (
                            http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                            v.to_string(),
                        )
                    })
                    .collect(),
                method: None,
            },
            backends: Arc::from(vec![Weighted {
                target: Target::Backend(Arc::from(format!("b{order}"))),
                weight: 1,
            }]),
            order: (String::new(), String::new(), order),
            route: Arc::from(format!("r{order}")),
        }
    }

    fn found(t: &GatewayRoutes, host: &str, path: &str, headers: &HeaderMap) -> Option<String> {
        t.find(host, &Method::GET, path, headers)
            .map(|m| m.route.to_string())
    }

    #[test]
    fn prefix_matches_whole_segments() {
        let p = PathRule::Prefix("/foo/".into());
        assert!(p.matches("/foo"));
        assert!(p.matches("/foo/bar"));
        assert!(!p.matches("/foobar"));
        assert!(PathRule::Prefix("/".into()).matches("/anything"));
        assert!(!PathRule::Exact("/foo".into()).matches("/foo/"));
    }

    #[test]
    fn precedence_host_then_exact_then_longest_prefix_then_headers() {
        let t = GatewayRoutes {
            gateway: Arc::from("ns/gw"),
            entries: vec![
                entry(&[], PathRule::Prefix("/".into()), &[], 0),
                entry(&[], PathRule::Prefix("/v1".into()), &[], 1),
                entry(&[], PathRule::Exact("/v1/chat".into()), &[], 2),
                entry(&[], PathRule::Prefix("/v1".into()), &[("x-pool", "b")], 3),
                entry(&["*.example.com"], PathRule::Prefix("/".into()), &[], 4),
                entry(&["a.example.com"], PathRule::Prefix("/".into()), &[], 5),
            ],
        };
        let none = HeaderMap::new();
        let mut with = HeaderMap::new();
        with.insert("x-pool", "b".parse().unwrap());
        assert_eq!(found(&t, "other", "/x", &none).as_deref(), Some("r0"));
        assert_eq!(
            found(&t, "other", "/v1/models", &none).as_deref(),
            Some("r1")
        );
        assert_eq!(found(&t, "other", "/v1/chat", &none).as_deref(), Some("r2"));
        assert_eq!(
            found(&t, "other", "/v1/models", &with).as_deref(),
            Some("r3")
        );
        assert_eq!(
            found(&t, "b.example.com", "/v1/chat", &none).as_deref(),
            Some("r4")
        );
        assert_eq!(
            found(&t, "A.example.com", "/v1", &none).as_deref(),
            Some("r5")
        );
        assert!(!host_matches("*.example.com", "example.com"));
    }

    #[test]
    fn no_match_is_none_and_ties_go_to_the_older_route() {
        let older = entry(&[], PathRule::Prefix("/a".into()), &[], 7);
        let mut newer = entry(&[], PathRule::Prefix("/a".into()), &[], 1);
        newer.order.0 = "2026-02-01T00:00:00Z".into();
        let mut older = older;
        older.order.0 = "2026-01-01T00:00:00Z".into();
        let t = GatewayRoutes {
            gateway: Arc::from("ns/gw"),
            entries: vec![newer, older],
        };
        assert_eq!(
            found(&t, "h", "/a/b", &HeaderMap::new()).as_deref(),
            Some("r7")
        );
        assert_eq!(found(&t, "h", "/b", &HeaderMap::new()), None);
    }

    #[test]
    fn weights_split_and_zero_weights_take_nothing() {
        let b = |n: &str, w| Weighted {
            target: Target::Backend(Arc::from(n)),
            weight: w,
        };
        let set = [b("a", 70), b("z", 0), b("c", 30)];
        let mut counts = HashMap::new();
        for roll in 0..100u64 {
            *counts.entry(pick(&set, roll).cloned()).or_insert(0) += 1;
        }
        assert_eq!(counts[&Some(Target::Backend(Arc::from("a")))], 70);
        assert_eq!(counts[&Some(Target::Backend(Arc::from("c")))], 30);
        assert_eq!(pick(&[b("z", 0)], 3), None);
    }
}
