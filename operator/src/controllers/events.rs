//! Kubernetes Events through kube's `Recorder`. Publishing never fails a
//! reconcile: a lost event is logged.

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
            note: Some(note),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %e, reason, "failed to publish event");
        }
    }
}
