//! Reading `status.conditions` lists.
//!
//! Every kind reports conditions as Kubernetes `metav1.Condition`s; these
//! helpers answer the questions the operator and gateway ask of them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// `Condition.status` value of a condition that holds.
pub const TRUE: &str = "True";
/// `Condition.status` value of a condition that does not hold.
pub const FALSE: &str = "False";
/// `Condition.status` value of a condition that cannot be determined.
pub const UNKNOWN: &str = "Unknown";

/// The condition of the given type, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|condition| condition.type_ == type_)
}

/// Whether the condition of the given type is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|condition| condition.status == TRUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: "Test".to_owned(),
            message: String::new(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn finds_conditions_by_type() {
        let conditions = [condition("Ready", TRUE), condition("Cached", FALSE)];
        assert!(is_true(&conditions, "Ready"));
        assert!(!is_true(&conditions, "Cached"));
        assert!(!is_true(&conditions, "Loaded"));
        assert_eq!(
            find(&conditions, "Cached").map(|c| c.status.as_str()),
            Some(FALSE)
        );
    }
}
