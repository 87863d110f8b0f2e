//! Reloads a configuration file (the model file, the API-key file) when its
//! modification time changes or on SIGHUP; a file that fails to load leaves
//! what was loaded before in force.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use prometheus::IntCounterVec;

/// Loads a file again; returns how many entries it holds.
pub type Reload = Box<dyn Fn() -> anyhow::Result<usize> + Send + Sync>;

/// A background service watching one file.
pub struct FileReloader {
    /// What the file is, for logs ("model file").
    pub what: &'static str,
    /// The file.
    pub path: PathBuf,
    /// How often its modification time is checked.
    pub interval: Duration,
    /// Loads it again.
    pub reload: Reload,
    /// Reloads by result (`success`, `error`).
    pub reloads: IntCounterVec,
}

impl FileReloader {
    fn modified(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }

    fn reload(&self, why: &str) {
        let what = self.what;
        match (self.reload)() {
            Ok(n) => {
                self.reloads.with_label_values(&["success"]).inc();
                tracing::info!(entries = n, trigger = why, "{what} reloaded");
            }
            Err(e) => {
                self.reloads.with_label_values(&["error"]).inc();
                tracing::error!(error = %e, trigger = why, "{what} reload failed; keeping what was loaded before");
            }
        }
    }
}

#[async_trait]
impl BackgroundService for FileReloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).ok();
        let mut last = self.modified();
        let mut tick = tokio::time::interval(self.interval.max(Duration::from_millis(100)));
        loop {
            let hup_recv = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = hup_recv => self.reload("SIGHUP"),
                _ = tick.tick() => {
                    let now = self.modified();
                    if now != last {
                        last = now;
                        self.reload("file change");
                    }
                }
            }
        }
    }
}
