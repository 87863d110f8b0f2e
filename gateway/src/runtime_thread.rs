//! A tokio runtime on a thread of its own: the embedded operator's child
//! processes and the Kubernetes watches run there, supervised apart from
//! Pingora's runtimes, and are stopped after the proxy.

use std::future::Future;
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

/// Sends the value a [`RuntimeThread`] reports once it has started (or why
/// it could not).
pub type Ready<T> = mpsc::Sender<anyhow::Result<T>>;

/// A runtime thread running one future until told to stop.
pub struct RuntimeThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RuntimeThread {
    /// Starts `body` on a new thread named `name` with `workers` runtime
    /// threads, and waits for the value it sends on its [`Ready`]. The body
    /// gets a receiver that fires when [`RuntimeThread::stop`] is called;
    /// it should return soon after.
    pub fn start<T, F, Fut>(name: &str, workers: usize, body: F) -> anyhow::Result<(Self, T)>
    where
        T: Send + 'static,
        F: FnOnce(Ready<T>, oneshot::Receiver<()>) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread_name = name.to_string();
        let thread = std::thread::Builder::new()
            .name(thread_name.clone())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(workers)
                    .thread_name(thread_name.clone())
                    .enable_all()
                    .build();
                match runtime {
                    Ok(rt) => rt.block_on(body(ready_tx, stop_rx)),
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow::anyhow!("{thread_name} runtime: {e}")));
                    }
                }
            })?;
        let value = ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the {name} thread exited during start-up"))??;
        let handle = Self {
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        Ok((handle, value))
    }

    /// Tells the body to stop and waits for the thread to end.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RuntimeThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_its_value_and_stops_when_told() {
        let (done_tx, done_rx) = mpsc::channel();
        let (thread, value) = RuntimeThread::start("test-runtime", 1, |ready, stop| async move {
            let _ = ready.send(Ok(7));
            let _ = stop.await;
            let _ = done_tx.send(());
        })
        .unwrap();
        assert_eq!(value, 7);
        assert!(done_rx.try_recv().is_err(), "still running");
        thread.stop();
        assert!(
            done_rx.try_recv().is_ok(),
            "the body finished before stop returned"
        );
    }

    #[test]
    fn a_start_error_is_returned() {
        let result = RuntimeThread::start::<(), _, _>("test-runtime", 1, |ready, _| async move {
            let _ = ready.send(Err(anyhow::anyhow!("no luck")));
        });
        let err = result.err().expect("start fails");
        assert!(err.to_string().contains("no luck"), "{err}");
    }
}
