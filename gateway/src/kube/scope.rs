//! Which namespaces the gateway watches, and how names from several
//! namespaces share one name space of model names.
//!
//! The *home* namespace is `POD_NAMESPACE` (or the first of `--namespaces`).
//! Its models are served under their plain names; a model of another
//! namespace is served under its qualified name `namespace/name`, and also
//! under its plain name when no model of a namespace earlier in the
//! precedence order claims it (see [`Scope::rank`]).

use std::cmp::Ordering;

/// The namespaces watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// These namespaces, in precedence order (the first is home).
    Namespaces(Vec<String>),
    /// Every namespace; `home` comes first, then the others by name.
    All {
        /// The gateway's own namespace.
        home: String,
    },
}

impl Scope {
    /// The scope given by the command line: `--all-namespaces`, else
    /// `--namespaces a,b`, else `POD_NAMESPACE` alone.
    pub fn from_flags(pod_namespace: &str, namespaces: &[String], all: bool) -> Self {
        let home = match pod_namespace.trim() {
            "" => "default".to_string(),
            ns => ns.to_string(),
        };
        if all {
            return Scope::All { home };
        }
        let mut list: Vec<String> = Vec::new();
        for ns in namespaces
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
        {
            if !list.iter().any(|n| n == ns) {
                list.push(ns.to_string());
            }
        }
        if list.is_empty() {
            list.push(home);
        }
        Scope::Namespaces(list)
    }

    /// The namespace whose models keep their plain names.
    pub fn home(&self) -> &str {
        match self {
            Scope::Namespaces(list) => list.first().map_or("default", String::as_str),
            Scope::All { home } => home,
        }
    }

    /// Whether objects of `namespace` are served.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::Namespaces(list) => list.iter().any(|n| n == namespace),
            Scope::All { .. } => true,
        }
    }

    /// The watched namespaces, or `None` for all of them.
    pub fn namespaces(&self) -> Option<&[String]> {
        match self {
            Scope::Namespaces(list) => Some(list),
            Scope::All { .. } => None,
        }
    }

    /// Precedence of `namespace` when two namespaces claim one name: lower
    /// wins. Home first, then the `--namespaces` order (or, watching all
    /// namespaces, alphabetical order).
    pub fn rank<'a>(&'a self, namespace: &'a str) -> (usize, &'a str) {
        match self {
            Scope::Namespaces(list) => (
                list.iter()
                    .position(|n| n == namespace)
                    .unwrap_or(list.len()),
                "",
            ),
            Scope::All { home } if home == namespace => (0, ""),
            Scope::All { .. } => (1, namespace),
        }
    }

    /// Orders two namespaces by precedence.
    pub fn compare(&self, a: &str, b: &str) -> Ordering {
        self.rank(a).cmp(&self.rank(b))
    }

    /// The name a model is served under: plain in the home namespace,
    /// `namespace/name` elsewhere.
    pub fn canonical(&self, namespace: &str, name: &str) -> String {
        if namespace == self.home() {
            name.to_string()
        } else {
            qualified(namespace, name)
        }
    }
}

/// `namespace/name`.
pub fn qualified(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_pick_the_scope() {
        let s = Scope::from_flags("ml", &[], false);
        assert_eq!(s, Scope::Namespaces(vec!["ml".into()]));
        assert_eq!(s.home(), "ml");
        let s = Scope::from_flags("ml", &["b".into(), "a".into(), "b".into()], false);
        assert_eq!(s, Scope::Namespaces(vec!["b".into(), "a".into()]));
        assert_eq!(s.home(), "b");
        assert!(s.contains("a") && !s.contains("ml"));
        let s = Scope::from_flags("", &["x".into()], true);
        assert_eq!(s.home(), "default");
        assert!(s.contains("anything"));
    }

    #[test]
    fn precedence_puts_home_first() {
        let s = Scope::from_flags("", &["b".into(), "a".into()], false);
        assert_eq!(s.compare("b", "a"), Ordering::Less);
        let s = Scope::All { home: "m".into() };
        assert_eq!(s.compare("m", "a"), Ordering::Less);
        assert_eq!(s.compare("a", "b"), Ordering::Less);
        assert_eq!(s.canonical("m", "x"), "x");
        assert_eq!(s.canonical("a", "x"), "a/x");
    }
}
