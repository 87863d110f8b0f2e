//! Request accounting and fault injection.
//!
//! Every resource request is counted by verb and resource (`models`,
//! `models/status`) before anything else happens, including requests that
//! then fail, so tests can assert "no writes" or "exactly one patch".
//! Injected faults answer the next N matching requests with a `Status` of
//! the given code instead of serving them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use crate::error::ApiError;

/// An API verb, as in RBAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, including apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 8] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
    ];

    /// Whether the verb changes state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        };
        f.write_str(s)
    }
}

#[derive(Debug)]
struct Fault {
    verb: Verb,
    resource: String,
    remaining: u32,
    code: u16,
}

/// Counters and pending faults.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    counts: Mutex<HashMap<(Verb, String), u64>>,
    faults: Mutex<Vec<Fault>>,
}

impl RequestLog {
    /// Counts a request and returns the injected failure for it, if any.
    pub fn record(&self, verb: Verb, resource: &str) -> Option<ApiError> {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((verb, resource.to_string()))
            .or_default() += 1;
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let pos = faults
            .iter()
            .position(|f| f.verb == verb && (f.resource == resource || f.resource == "*"))?;
        let fault = &mut faults[pos];
        fault.remaining -= 1;
        let err = ApiError::with_code(
            fault.code,
            format!("injected failure for {verb} {resource}"),
        );
        if fault.remaining == 0 {
            faults.remove(pos);
        }
        Some(err)
    }

    /// Requests seen for `verb` on `resource`.
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(verb, resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Write requests seen on any resource.
    pub fn total_writes(&self) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((v, _), _)| v.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// Every counter, sorted.
    pub fn snapshot(&self) -> Vec<(Verb, String, u64)> {
        let mut out: Vec<(Verb, String, u64)> = self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|((v, r), n)| (*v, r.clone(), *n))
            .collect();
        out.sort();
        out
    }

    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub fn fail_next(&self, verb: Verb, resource: &str, n: u32, code: u16) {
        if n == 0 {
            return;
        }
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Fault {
                verb,
                resource: resource.to_string(),
                remaining: n,
                code,
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_fire_n_times_and_everything_is_counted() {
        let log = RequestLog::default();
        log.fail_next(Verb::Patch, "models/status", 2, 503);
        assert_eq!(log.record(Verb::Patch, "models").map(|e| e.code), None);
        assert_eq!(
            log.record(Verb::Patch, "models/status").map(|e| e.code),
            Some(503)
        );
        let err = log.record(Verb::Patch, "models/status").unwrap();
        assert_eq!(err.reason, "ServiceUnavailable");
        assert!(log.record(Verb::Patch, "models/status").is_none());
        assert_eq!(log.count(Verb::Patch, "models/status"), 3);
        assert_eq!(log.total_writes(), 4);
        log.fail_next(Verb::Get, "*", 1, 500);
        assert_eq!(log.record(Verb::Get, "pods").map(|e| e.code), Some(500));
    }
}
