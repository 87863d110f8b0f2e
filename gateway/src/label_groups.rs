//! Service-label groups: one name (a service label) claimed by several
//! models, each request going to one member.
//!
//! Groups are built with the route table ([`crate::registry::RouteTable`]),
//! members sorted by name and their readiness fixed at that moment; the
//! request path only picks. Ready members are preferred, chosen by the
//! gateway's [`LabelGroupMode`]; with none Ready the alphabetically first
//! member is picked (and cold-started by the activation queue).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::registry::Resolved;

/// How a label group picks among its Ready members
/// (`FLEXINFER_PROXY_LABEL_GROUP_ROUTING`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LabelGroupMode {
    /// Each member in turn (`""` or `round-robin`, the default).
    #[default]
    RoundRobin,
    /// The member with the fewest requests in flight.
    LeastLoaded,
    /// Hash of the prefix key, else round-robin.
    PrefixOrRr,
    /// Hash of the session key, else round-robin.
    SessionOrRr,
    /// Hash of the prefix key, else of the session key, else round-robin.
    PrefixSessionOrRr,
}

/// The values [`LabelGroupMode`] accepts, in the validation message.
const MODES: &str =
    "\"\", round-robin, least-loaded, prefix-or-rr, session-or-rr, prefix-session-or-rr";

impl LabelGroupMode {
    /// The mode's name (the `strategy` metrics label).
    pub const fn as_str(self) -> &'static str {
        match self {
            LabelGroupMode::RoundRobin => "round-robin",
            LabelGroupMode::LeastLoaded => "least-loaded",
            LabelGroupMode::PrefixOrRr => "prefix-or-rr",
            LabelGroupMode::SessionOrRr => "session-or-rr",
            LabelGroupMode::PrefixSessionOrRr => "prefix-session-or-rr",
        }
    }

    /// Whether the mode hashes the prefix key.
    pub const fn uses_prefix(self) -> bool {
        matches!(
            self,
            LabelGroupMode::PrefixOrRr | LabelGroupMode::PrefixSessionOrRr
        )
    }

    /// Whether the mode hashes the session key.
    pub const fn uses_session(self) -> bool {
        matches!(
            self,
            LabelGroupMode::SessionOrRr | LabelGroupMode::PrefixSessionOrRr
        )
    }
}

impl FromStr for LabelGroupMode {
    type Err = String;

    /// Exact, case-sensitive names; `""` is round-robin.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" | "round-robin" => Ok(LabelGroupMode::RoundRobin),
            "least-loaded" => Ok(LabelGroupMode::LeastLoaded),
            "prefix-or-rr" => Ok(LabelGroupMode::PrefixOrRr),
            "session-or-rr" => Ok(LabelGroupMode::SessionOrRr),
            "prefix-session-or-rr" => Ok(LabelGroupMode::PrefixSessionOrRr),
            other => Err(format!(
                "FLEXINFER_PROXY_LABEL_GROUP_ROUTING must be one of {MODES} (got {other:?})"
            )),
        }
    }
}

/// Why a member was picked (the `outcome` metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Round-robin over the Ready members.
    DefaultRr,
    /// The least-loaded Ready member.
    LeastLoaded,
    /// The only Ready member.
    FallbackSingle,
    /// No member Ready: the first one, to be cold-started.
    FallbackNoReady,
    /// A hashing mode without its key: round-robin.
    FallbackNoKey,
    /// Hash of the prefix key.
    HashedPrefix,
    /// Hash of the session key.
    HashedSession,
}

impl Outcome {
    /// The metrics label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::DefaultRr => "default_rr",
            Outcome::LeastLoaded => "least_loaded",
            Outcome::FallbackSingle => "fallback_single",
            Outcome::FallbackNoReady => "fallback_no_ready",
            Outcome::FallbackNoKey => "fallback_no_key",
            Outcome::HashedPrefix => "hashed_prefix",
            Outcome::HashedSession => "hashed_session",
        }
    }
}

/// A label group as a mode's route builder describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelGroupSpec {
    /// The service label clients send as the model.
    pub label: String,
    /// Canonical names of the claimants, with whether each is Ready.
    pub members: Vec<(String, bool)>,
}

/// The routing keys of a request, as far as the mode needs them.
#[derive(Debug, Default, Clone, Copy)]
pub struct GroupKeys<'a> {
    /// The prefix key (without a session fallback).
    pub prefix: Option<&'a str>,
    /// The session key.
    pub session: Option<&'a str>,
}

struct Member {
    resolved: Resolved,
    /// Requests the group sent here that are still in flight.
    picked: Arc<AtomicUsize>,
}

/// A label claimed by two or more models.
pub struct LabelGroup {
    label: String,
    /// Sorted by canonical name.
    members: Vec<Member>,
    /// Indices of the Ready members, in member order.
    ready: Vec<usize>,
    /// Round-robin position, kept across route rebuilds.
    next: Arc<AtomicUsize>,
}

impl std::fmt::Debug for LabelGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .members
            .iter()
            .map(|m| &*m.resolved.route.name)
            .collect();
        f.debug_struct("LabelGroup")
            .field("label", &self.label)
            .field("members", &names)
            .field("ready", &self.ready)
            .finish()
    }
}

/// One pick: the member's route, why, and the member's in-flight count
/// for as long as the ticket lives.
pub struct GroupPick {
    /// The member's route.
    pub resolved: Resolved,
    /// Why it was picked.
    pub outcome: Outcome,
    /// Held for the request's lifetime (least-loaded counts it).
    pub ticket: GroupTicket,
}

/// Counts a request on the member it was sent to until dropped.
pub struct GroupTicket(Arc<AtomicUsize>);

impl Drop for GroupTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl LabelGroup {
    /// Builds the group of `spec`; `route` finds a member's route by its
    /// canonical name (members without one are left out). Counters are
    /// carried over from `previous`, the group of the same label in the
    /// table being replaced. `None` when fewer than two members remain.
    pub fn build(
        spec: &LabelGroupSpec,
        route: impl Fn(&str) -> Option<Resolved>,
        previous: Option<&LabelGroup>,
    ) -> Option<Self> {
        let mut members: Vec<(Member, bool)> = Vec::with_capacity(spec.members.len());
        for (name, ready) in &spec.members {
            if members
                .iter()
                .any(|(m, _)| *m.resolved.route.name == **name)
            {
                continue;
            }
            let Some(resolved) = route(name) else {
                continue;
            };
            let picked = previous
                .and_then(|p| p.members.iter().find(|m| *m.resolved.route.name == **name))
                .map_or_else(|| Arc::new(AtomicUsize::new(0)), |m| m.picked.clone());
            members.push((Member { resolved, picked }, *ready));
        }
        if members.len() < 2 {
            return None;
        }
        members.sort_by(|(a, _), (b, _)| a.resolved.route.name.cmp(&b.resolved.route.name));
        let ready = (0..members.len()).filter(|&i| members[i].1).collect();
        Some(Self {
            label: spec.label.clone(),
            members: members.into_iter().map(|(m, _)| m).collect(),
            ready,
            next: previous.map_or_else(|| Arc::new(AtomicUsize::new(0)), |p| p.next.clone()),
        })
    }

    /// The label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Canonical names of the members, sorted.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| &*m.resolved.route.name)
    }

    /// Whether a pick under `mode` would hash a key (two or more Ready
    /// members and a hashing mode): only then are keys worth deriving.
    pub fn wants_keys(&self, mode: LabelGroupMode) -> bool {
        self.ready.len() > 1 && (mode.uses_prefix() || mode.uses_session())
    }

    /// Picks the member a request goes to.
    pub fn pick(&self, mode: LabelGroupMode, keys: GroupKeys<'_>) -> GroupPick {
        let (index, outcome) = self.choose(mode, keys);
        let member = &self.members[index];
        member.picked.fetch_add(1, Ordering::Relaxed);
        GroupPick {
            resolved: member.resolved.clone(),
            outcome,
            ticket: GroupTicket(member.picked.clone()),
        }
    }

    fn choose(&self, mode: LabelGroupMode, keys: GroupKeys<'_>) -> (usize, Outcome) {
        match self.ready.as_slice() {
            [] => return (0, Outcome::FallbackNoReady),
            [only] => return (*only, Outcome::FallbackSingle),
            _ => {}
        }
        let hashed = |key: &str, outcome| (self.ready[hash_index(key, self.ready.len())], outcome);
        match mode {
            LabelGroupMode::RoundRobin => (self.round_robin(), Outcome::DefaultRr),
            LabelGroupMode::LeastLoaded => (self.least_loaded(), Outcome::LeastLoaded),
            _ => {
                let prefix = keys.prefix.filter(|_| mode.uses_prefix());
                let session = keys.session.filter(|_| mode.uses_session());
                match (prefix, session) {
                    (Some(k), _) => hashed(k, Outcome::HashedPrefix),
                    (None, Some(k)) => hashed(k, Outcome::HashedSession),
                    (None, None) => (self.round_robin(), Outcome::FallbackNoKey),
                }
            }
        }
    }

    fn round_robin(&self) -> usize {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.ready[n % self.ready.len()]
    }

    /// The Ready member with the least load, the first such on a tie. A
    /// member's load is the larger of the requests the group sent it that
    /// are still open and the requests its endpoints are serving (which
    /// includes requests that named it directly).
    fn least_loaded(&self) -> usize {
        let load = |i: usize| {
            let m = &self.members[i];
            m.picked
                .load(Ordering::Relaxed)
                .max(m.resolved.route.endpoints.total_in_flight())
        };
        let mut best = self.ready[0];
        let mut best_load = load(best);
        for &i in &self.ready[1..] {
            let l = load(i);
            if l < best_load {
                (best, best_load) = (i, l);
            }
        }
        best
    }
}

/// SHA-256 of `key`, its first 8 bytes as a big-endian integer, modulo `n`.
fn hash_index(key: &str, n: usize) -> usize {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % n as u64) as usize
}

/// The groups of a route table, by label.
pub type LabelGroups = HashMap<String, Arc<LabelGroup>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelTable;
    use crate::ratelimit::LimitSettings;
    use crate::registry::ModelRegistry;
    use crate::registry::RouteStore;

    fn store() -> RouteStore {
        let table = ModelTable::from_yaml(
            "models:\n- name: a\n  endpoints: ['127.0.0.1:1']\n- name: b\n  endpoints: ['127.0.0.1:2']\n- name: c\n  endpoints: ['127.0.0.1:3']\n",
        )
        .unwrap();
        RouteStore::from_table(&table, LimitSettings::default())
    }

    fn group(store: &RouteStore, members: &[(&str, bool)]) -> LabelGroup {
        let spec = LabelGroupSpec {
            label: "chat".into(),
            members: members.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
        };
        LabelGroup::build(&spec, |n| store.resolve(n), None).unwrap()
    }

    fn picks(g: &LabelGroup, mode: LabelGroupMode, keys: GroupKeys<'_>, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| g.pick(mode, keys).resolved.route.name.to_string())
            .collect()
    }

    #[test]
    fn modes_parse_exactly() {
        assert_eq!("".parse(), Ok(LabelGroupMode::RoundRobin));
        assert_eq!("round-robin".parse(), Ok(LabelGroupMode::RoundRobin));
        assert_eq!(
            "prefix-session-or-rr".parse(),
            Ok(LabelGroupMode::PrefixSessionOrRr)
        );
        for bad in ["PREFIX-OR-RR", "rr", "true"] {
            let e = bad.parse::<LabelGroupMode>().unwrap_err();
            assert!(
                e.starts_with("FLEXINFER_PROXY_LABEL_GROUP_ROUTING must be one of"),
                "{e}"
            );
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn round_robin_alternates_over_ready_members_sorted() {
        let s = store();
        let g = group(&s, &[("b", true), ("a", true), ("c", false)]);
        assert_eq!(g.members().collect::<Vec<_>>(), ["a", "b", "c"]);
        let p = g.pick(LabelGroupMode::RoundRobin, GroupKeys::default());
        assert_eq!(p.outcome, Outcome::DefaultRr);
        let got = picks(&g, LabelGroupMode::RoundRobin, GroupKeys::default(), 4);
        assert_eq!(got, ["b", "a", "b", "a"]);
    }

    #[test]
    fn one_ready_member_or_none() {
        let s = store();
        let g = group(&s, &[("a", false), ("b", true)]);
        let p = g.pick(LabelGroupMode::LeastLoaded, GroupKeys::default());
        assert_eq!(
            (&*p.resolved.route.name, p.outcome),
            ("b", Outcome::FallbackSingle)
        );
        let g = group(&s, &[("c", false), ("b", false)]);
        let p = g.pick(LabelGroupMode::RoundRobin, GroupKeys::default());
        assert_eq!(
            (&*p.resolved.route.name, p.outcome),
            ("b", Outcome::FallbackNoReady)
        );
    }

    #[test]
    fn least_loaded_spreads_open_requests() {
        let s = store();
        let g = group(&s, &[("a", true), ("b", true)]);
        let first = g.pick(LabelGroupMode::LeastLoaded, GroupKeys::default());
        let second = g.pick(LabelGroupMode::LeastLoaded, GroupKeys::default());
        assert_eq!(first.outcome, Outcome::LeastLoaded);
        assert_eq!(&*first.resolved.route.name, "a");
        assert_eq!(&*second.resolved.route.name, "b");
        let third = g.pick(LabelGroupMode::LeastLoaded, GroupKeys::default());
        let fourth = g.pick(LabelGroupMode::LeastLoaded, GroupKeys::default());
        assert_eq!(
            [&*third.resolved.route.name, &*fourth.resolved.route.name],
            ["a", "b"]
        );
        drop((first, third));
        let next = g.pick(LabelGroupMode::LeastLoaded, GroupKeys::default());
        assert_eq!(&*next.resolved.route.name, "a");
    }

    #[test]
    fn hashed_modes_are_sticky_and_fall_back_to_round_robin() {
        let s = store();
        let g = group(&s, &[("a", true), ("b", true), ("c", true)]);
        let keys = GroupKeys {
            prefix: Some("sys:1234"),
            session: Some("conversation-9"),
        };
        let prefix = picks(&g, LabelGroupMode::PrefixOrRr, keys, 5);
        assert!(prefix.iter().all(|m| *m == prefix[0]), "{prefix:?}");
        let expected = ["a", "b", "c"][hash_index("sys:1234", 3)];
        assert_eq!(prefix[0], expected);
        let p = g.pick(LabelGroupMode::PrefixSessionOrRr, keys);
        assert_eq!(p.outcome, Outcome::HashedPrefix);
        let p = g.pick(LabelGroupMode::SessionOrRr, keys);
        assert_eq!(p.outcome, Outcome::HashedSession);
        assert_eq!(
            &*p.resolved.route.name,
            ["a", "b", "c"][hash_index("conversation-9", 3)]
        );
        let session_only = GroupKeys {
            prefix: None,
            session: Some("conversation-9"),
        };
        assert_eq!(
            g.pick(LabelGroupMode::PrefixOrRr, session_only).outcome,
            Outcome::FallbackNoKey
        );
        assert_eq!(
            g.pick(LabelGroupMode::PrefixSessionOrRr, session_only)
                .outcome,
            Outcome::HashedSession
        );
        assert!(g.wants_keys(LabelGroupMode::SessionOrRr));
        assert!(!g.wants_keys(LabelGroupMode::RoundRobin));
    }

    #[test]
    fn counters_survive_a_rebuild_and_small_groups_are_dropped() {
        let s = store();
        let g = group(&s, &[("a", true), ("b", true)]);
        let _held = g.pick(LabelGroupMode::RoundRobin, GroupKeys::default());
        let spec = LabelGroupSpec {
            label: "chat".into(),
            members: vec![("a".into(), true), ("b".into(), true)],
        };
        let again = LabelGroup::build(&spec, |n| s.resolve(n), Some(&g)).unwrap();
        assert_eq!(
            &*again
                .pick(LabelGroupMode::RoundRobin, GroupKeys::default())
                .resolved
                .route
                .name,
            "b"
        );
        assert_eq!(again.members[0].picked.load(Ordering::Relaxed), 1);
        let lone = LabelGroupSpec {
            label: "chat".into(),
            members: vec![("a".into(), true), ("gone".into(), true)],
        };
        assert!(LabelGroup::build(&lone, |n| s.resolve(n), None).is_none());
    }
}
