//! Models with a job: the routing, streaming, cold-start and rate-limit
//! checks each need a model configured a particular way. A deployment names
//! them with well-known names (`conformance-session`, ...) or the user maps
//! them with `--role ROLE=MODEL`; a check whose model is absent is skipped.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// A job a model does for the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `routing: session-affinity` over two or more pods.
    Session,
    /// `routing: prefix` over two or more pods.
    Prefix,
    /// `routing: least-loaded` over two or more pods.
    LeastLoaded,
    /// A model that streams tokens at a steady pace (e.g. 20 tokens/s).
    Stream,
    /// An idle scale-to-zero model whose cold start fits the gateway's wait bound.
    Cold,
    /// An idle scale-to-zero model that loads for a few seconds, used to fill the queue.
    Queue,
    /// An idle scale-to-zero model that loads for longer than the wait bound.
    Slow,
    /// A model with a small `rateLimit` (a burst of at most 20).
    Limited,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 8] = [
        Role::Session,
        Role::Prefix,
        Role::LeastLoaded,
        Role::Stream,
        Role::Cold,
        Role::Queue,
        Role::Slow,
        Role::Limited,
    ];

    /// The name used on the command line.
    pub fn key(self) -> &'static str {
        match self {
            Role::Session => "session",
            Role::Prefix => "prefix",
            Role::LeastLoaded => "least-loaded",
            Role::Stream => "stream",
            Role::Cold => "cold",
            Role::Queue => "queue",
            Role::Slow => "slow",
            Role::Limited => "limited",
        }
    }

    /// The model name used when the user maps none: `conformance-<key>`.
    pub fn well_known(self) -> &'static str {
        match self {
            Role::Session => "conformance-session",
            Role::Prefix => "conformance-prefix",
            Role::LeastLoaded => "conformance-least-loaded",
            Role::Stream => "conformance-stream",
            Role::Cold => "conformance-cold",
            Role::Queue => "conformance-queue",
            Role::Slow => "conformance-slow",
            Role::Limited => "conformance-limited",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Role::ALL.into_iter().find(|r| r.key() == s).ok_or_else(|| {
            let keys: Vec<_> = Role::ALL.iter().map(|r| r.key()).collect();
            format!("unknown role {s:?}; roles: {}", keys.join(", "))
        })
    }
}

/// `ROLE=MODEL`, as `--role` takes it.
pub fn parse_assignment(value: &str) -> Result<(Role, String), String> {
    let (role, model) = value
        .split_once('=')
        .ok_or_else(|| format!("expected ROLE=MODEL, got {value:?}"))?;
    if model.is_empty() {
        return Err(format!("no model in {value:?}"));
    }
    Ok((role.parse()?, model.to_owned()))
}

/// The models the user mapped to roles.
pub type RoleMap = BTreeMap<Role, String>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_assignments() {
        assert_eq!(
            parse_assignment("least-loaded=ll").unwrap(),
            (Role::LeastLoaded, "ll".to_owned())
        );
        assert!(parse_assignment("nope=x")
            .unwrap_err()
            .contains("roles: session"));
        assert!(parse_assignment("session").is_err());
        assert!(parse_assignment("session=").is_err());
        for role in Role::ALL {
            assert_eq!(role.key().parse::<Role>().unwrap(), role);
            assert_eq!(role.well_known(), format!("conformance-{}", role.key()));
        }
    }
}
