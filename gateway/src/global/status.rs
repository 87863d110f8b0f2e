//! The GlobalProxy's `status` as the global gateway writes it: what the
//! monitor sees (the active cluster, healthy and configured member
//! gateways) and two conditions, `Ready` (at least one member gateway is
//! healthy) and `Accepted` (the object's latest spec validated; a refused
//! version leaves the previous clusters in force, and says why here). A
//! condition's `lastTransitionTime` moves only when its status flips.

use std::collections::HashMap;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::watch::ProxyStatus;

/// What became of the latest spec version the watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecVerdict {
    /// `metadata.generation` of that version.
    pub generation: Option<i64>,
    /// Why it was refused; `None` when it is in force.
    pub refused: Option<String>,
}

/// Builds the status patches, remembering when each condition last flipped.
#[derive(Debug, Default)]
pub struct StatusDocument {
    transitions: HashMap<&'static str, (bool, String)>,
}

impl StatusDocument {
    /// The merge patch of `status` for what is known now; `now` is used
    /// for conditions that appear or flip.
    pub fn patch(
        &mut self,
        seen: Option<&ProxyStatus>,
        verdict: Option<&SpecVerdict>,
        now: SystemTime,
    ) -> Value {
        let now = humantime::format_rfc3339_seconds(now).to_string();
        let mut status = serde_json::Map::new();
        let mut conditions = Vec::new();
        if let Some(seen) = seen {
            status.insert("activeCluster".into(), json!(seen.active_cluster));
            status.insert("healthyClusters".into(), json!(seen.healthy_clusters));
            status.insert("totalClusters".into(), json!(seen.total_clusters));
            let ready = seen.healthy_clusters > 0;
            let (reason, message) = if ready {
                (
                    "ClustersHealthy",
                    format!(
                        "{} of {} cluster gateways healthy",
                        seen.healthy_clusters, seen.total_clusters
                    ),
                )
            } else {
                (
                    "NoHealthyCluster",
                    format!("none of {} cluster gateways healthy", seen.total_clusters),
                )
            };
            conditions.push(self.condition("Ready", ready, reason, &message, None, &now));
        }
        if let Some(verdict) = verdict {
            let (accepted, reason, message) = match &verdict.refused {
                None => (
                    true,
                    "Valid",
                    "the clusters of this version are in force".to_owned(),
                ),
                Some(why) => (
                    false,
                    "InvalidSpec",
                    format!("{why}; the previous clusters stay in force"),
                ),
            };
            conditions.push(self.condition(
                "Accepted",
                accepted,
                reason,
                &message,
                verdict.generation,
                &now,
            ));
            if let Some(generation) = verdict.generation {
                status.insert("observedGeneration".into(), json!(generation));
            }
        }
        if !conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        json!({ "status": status })
    }

    fn condition(
        &mut self,
        kind: &'static str,
        ok: bool,
        reason: &str,
        message: &str,
        generation: Option<i64>,
        now: &str,
    ) -> Value {
        let since = match self.transitions.get(kind) {
            Some((was, since)) if *was == ok => since.clone(),
            _ => {
                self.transitions.insert(kind, (ok, now.to_owned()));
                now.to_owned()
            }
        };
        let mut condition = json!({
            "type": kind,
            "status": if ok { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        });
        if let Some(generation) = generation {
            condition["observedGeneration"] = json!(generation);
        }
        condition
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn seen(healthy: i32) -> ProxyStatus {
        ProxyStatus {
            active_cluster: Some("east".into()),
            healthy_clusters: healthy,
            total_clusters: 2,
        }
    }

    fn condition<'a>(patch: &'a Value, kind: &str) -> &'a Value {
        patch["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .unwrap_or_else(|| panic!("no {kind} condition in {patch}"))
    }

    #[test]
    fn conditions_flip_with_what_is_seen_and_keep_their_transition_time() {
        let mut doc = StatusDocument::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let valid = SpecVerdict {
            generation: Some(1),
            refused: None,
        };
        let first = doc.patch(Some(&seen(2)), Some(&valid), t0);
        assert_eq!(first["status"]["healthyClusters"], 2);
        assert_eq!(first["status"]["observedGeneration"], 1);
        let ready = condition(&first, "Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["message"], "2 of 2 cluster gateways healthy");
        let since = ready["lastTransitionTime"].clone();
        assert_eq!(condition(&first, "Accepted")["status"], "True");

        // Fewer healthy, still ready: the transition time stays.
        let later = doc.patch(Some(&seen(1)), Some(&valid), t0 + Duration::from_secs(60));
        assert_eq!(condition(&later, "Ready")["lastTransitionTime"], since);

        // None healthy: it flips, with a new time.
        let down = doc.patch(Some(&seen(0)), Some(&valid), t0 + Duration::from_secs(120));
        let ready = condition(&down, "Ready");
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("NoHealthyCluster"))
        );
        assert_ne!(ready["lastTransitionTime"], since);

        // A refused version: Accepted turns false and says why.
        let refused = SpecVerdict {
            generation: Some(2),
            refused: Some("failoverOrder names unknown cluster nowhere".into()),
        };
        let patch = doc.patch(
            Some(&seen(0)),
            Some(&refused),
            t0 + Duration::from_secs(180),
        );
        let accepted = condition(&patch, "Accepted");
        assert_eq!(accepted["status"], "False");
        assert_eq!(accepted["reason"], "InvalidSpec");
        assert_eq!(accepted["observedGeneration"], 2);
        assert!(accepted["message"].as_str().unwrap().contains("nowhere"));
    }

    #[test]
    fn nothing_known_writes_no_conditions() {
        let patch = StatusDocument::default().patch(None, None, SystemTime::now());
        assert_eq!(patch, json!({"status": {}}));
    }
}
