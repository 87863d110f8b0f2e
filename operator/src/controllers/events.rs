//! Kubernetes Events through kube's `Recorder`. Publishing never fails a
//! reconcile: a lost event is logged.
//!
//! The API server refuses an Event whose note is over 1 KiB, and some notes
//! join an unbounded list (every failed catalog entry, every LoRA adapter's
//! error); [`bounded_note`] cuts them to fit rather than lose the event.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

/// Publishes Events for any object.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
}

impl EventPublisher {
    /// A publisher reporting as `controller`.
    pub fn new(client: Client, controller: &str) -> EventPublisher {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        EventPublisher {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A Normal event.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, note: String) {
        self.publish(regarding, EventType::Normal, reason, note)
            .await;
    }

    /// A Warning event.
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, note: String) {
        self.publish(regarding, EventType::Warning, reason, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(bounded_note(note)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %e, reason, "failed to publish event");
        }
    }
}

/// The API server's limit on an Event's `note` (events.k8s.io/v1), in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// `note` cut to [`MAX_NOTE_BYTES`] at a character boundary, ending in `…`
/// when cut.
pub fn bounded_note(note: String) -> String {
    crate::text::cut(note, MAX_NOTE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_within_the_limit_are_kept_whole() {
        let exact = "a".repeat(MAX_NOTE_BYTES);
        assert_eq!(bounded_note(exact.clone()), exact);
        assert_eq!(bounded_note(String::new()), "");
    }

    #[test]
    fn long_notes_are_cut_to_the_limit_with_an_ellipsis() {
        let long = "a".repeat(MAX_NOTE_BYTES + 1);
        let cut = bounded_note(long);
        assert_eq!(cut.len(), MAX_NOTE_BYTES);
        assert!(cut.ends_with("a…"));
    }

    #[test]
    fn multi_byte_notes_are_cut_on_a_character_boundary() {
        // Every offset of a 4-byte character against the limit.
        for prefix in 0..4 {
            let note = format!("{}{}", "a".repeat(prefix), "🦀".repeat(MAX_NOTE_BYTES));
            let cut = bounded_note(note.clone());
            assert!(cut.len() <= MAX_NOTE_BYTES, "{prefix}: {} bytes", cut.len());
            assert!(note.starts_with(cut.strip_suffix('…').expect("ellipsis")));
        }
    }
}
