//! Building `status.conditions` so that an unchanged condition keeps its
//! `lastTransitionTime` (and therefore serializes identically).

use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub use crate::policy::{from_time, to_time};

/// Parses an RFC 3339 timestamp.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    s.trim()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

/// Sorts conditions by type, the order [`Conditions::into_vec`] produces,
/// so that a stored list (in whatever order the server merged it) compares
/// equal to a freshly assembled one.
pub fn sort_conditions(conditions: &mut [Condition]) {
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// Conditions being assembled against the previous ones.
#[derive(Debug, Clone)]
pub struct Conditions {
    previous: Vec<Condition>,
    current: Vec<Condition>,
    now: SystemTime,
    generation: Option<i64>,
}

impl Conditions {
    /// Starts from the object's previous conditions.
    pub fn new(previous: &[Condition], now: SystemTime, generation: Option<i64>) -> Conditions {
        Conditions {
            previous: previous.to_vec(),
            current: previous.to_vec(),
            now,
            generation,
        }
    }

    /// Sets condition `type_`; the transition time moves only when the
    /// status changes.
    pub fn set(&mut self, type_: &str, status: bool, reason: &str, message: impl Into<String>) {
        let status = if status { "True" } else { "False" };
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| to_time(self.now));
        let cond = Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.into(),
            last_transition_time,
            observed_generation: self.generation,
        };
        match self.current.iter_mut().find(|c| c.type_ == type_) {
            Some(slot) => *slot = cond,
            None => self.current.push(cond),
        }
    }

    /// Removes condition `type_`.
    pub fn remove(&mut self, type_: &str) {
        self.current.retain(|c| c.type_ != type_);
    }

    /// The assembled conditions, sorted by type.
    pub fn into_vec(mut self) -> Vec<Condition> {
        self.current.sort_by(|a, b| a.type_.cmp(&b.type_));
        self.current
    }
}
