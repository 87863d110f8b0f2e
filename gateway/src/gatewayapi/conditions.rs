//! Conditions as the Gateway API writes them: one per type, with the
//! object's generation, keeping the last transition time while the status
//! stays the same (so that an unchanged condition is not a change).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition to set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Want {
    /// `Accepted`, `Programmed`, `ResolvedRefs`, ...
    pub type_: &'static str,
    /// Whether it holds.
    pub status: bool,
    /// The reason (CamelCase).
    pub reason: &'static str,
    /// For humans.
    pub message: String,
}

impl Want {
    /// A condition that holds, its reason named after its type.
    pub fn yes(type_: &'static str, reason: &'static str) -> Self {
        Want {
            type_,
            status: true,
            reason,
            message: String::new(),
        }
    }

    /// A condition that does not hold, and why.
    pub fn no(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Want {
            type_,
            status: false,
            reason,
            message: message.into(),
        }
    }
}

/// The conditions `wanted` at `generation`, keeping from `previous` the
/// transition time of each whose status did not change.
pub fn conditions(
    wanted: &[Want],
    generation: Option<i64>,
    previous: &[Condition],
) -> Vec<Condition> {
    wanted
        .iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" };
            let old = previous.iter().find(|c| c.type_ == w.type_);
            let since = match old {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => now(),
            };
            Condition {
                type_: w.type_.to_string(),
                status: status.to_string(),
                reason: w.reason.to_string(),
                message: w.message.clone(),
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect()
}

/// Whether two condition lists say the same, transition times aside.
pub fn same(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
                && x.observed_generation == y.observed_generation
        })
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_while_the_status_stays() {
        let first = conditions(&[Want::yes("Accepted", "Accepted")], Some(1), &[]);
        let mut aged = first.clone();
        aged[0].last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let again = conditions(&[Want::yes("Accepted", "Accepted")], Some(2), &aged);
        assert_eq!(again[0].last_transition_time, aged[0].last_transition_time);
        assert_eq!(again[0].observed_generation, Some(2));
        assert!(!same(&again, &aged));
        let flipped = conditions(&[Want::no("Accepted", "Invalid", "x")], Some(2), &aged);
        assert_ne!(
            flipped[0].last_transition_time,
            aged[0].last_transition_time
        );
        assert_eq!(flipped[0].status, "False");
    }
}
