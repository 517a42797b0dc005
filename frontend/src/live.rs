//! Live push: the organisation's server-sent events (`GET /api/v1/stream`, docs/API.md "Live
//! stream"), applied to what the pages show. GPU state changes are laid over the last GPU list
//! in place (cards keep focus, scroll and open sections); alert and fleet-count events make the
//! pages that show them fetch again at once. While no stream is open (a server without it, an
//! API key, which `EventSource` cannot send, a dropped connection) the pages poll as before.

use std::cell::RefCell;
use std::collections::HashMap;

use fleetlens_api::live::{GpuStateChange, LiveSummary, StreamGpu, StreamSnapshot};
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{EventSource, MessageEvent};

use crate::ctx::now_ms;

const STREAM: &str = "/api/v1/stream";
/// The fleet page's period figures are re-read at most this often on `summary` events (the
/// server caches them as long: docs/API.md).
const SUMMARY_REFRESH_MS: i64 = 10_000;
/// After the server refused or ended the stream for good, how long until it is tried again.
const REOPEN_AFTER_MS: u64 = 30_000;

/// What the stream has told, for the pages to show (provided once by the app).
#[derive(Clone, Copy)]
pub struct Live {
    /// A stream is open and has sent its snapshot: state changes and alerts arrive as they happen.
    pub connected: RwSignal<bool>,
    /// The newest state of each GPU the stream told of (by UUID).
    pub gpus: RwSignal<HashMap<String, StreamGpu>>,
    /// The newest live counts.
    pub summary: RwSignal<Option<LiveSummary>>,
    /// Incremented on every alert event: the alert lists fetch again.
    pub alerts_changed: RwSignal<u64>,
    /// Incremented when a GPU new to the page's list appeared: the list fetches again.
    pub gpus_added: RwSignal<u64>,
    /// Incremented on `summary` events, at most every [`SUMMARY_REFRESH_MS`]: the fleet figures
    /// fetch again.
    pub summary_changed: RwSignal<u64>,
}

thread_local! {
    /// The open stream and its handlers (closed when dropped).
    static OPEN: RefCell<Option<Stream>> = const { RefCell::new(None) };
}

struct Stream {
    source: EventSource,
    _handlers: Vec<Closure<dyn FnMut(MessageEvent)>>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.source.close();
    }
}

impl Live {
    pub fn new() -> Live {
        Live {
            connected: RwSignal::new(false),
            gpus: RwSignal::new(HashMap::new()),
            summary: RwSignal::new(None),
            alerts_changed: RwSignal::new(0),
            gpus_added: RwSignal::new(0),
            summary_changed: RwSignal::new(0),
        }
    }

    /// Keeps a stream open while `wanted` is true (logged in with a session, live updates on).
    pub fn follow(self, wanted: impl Fn() -> bool + Send + Sync + 'static) {
        let attempt = RwSignal::new(0u64);
        Effect::new(move || {
            attempt.track();
            if wanted() {
                self.open(attempt);
            } else {
                self.close();
            }
        });
    }

    fn close(self) {
        OPEN.with(|o| o.borrow_mut().take());
        self.connected.set(false);
    }

    /// Opens the stream when the server has one: a `?once=true` reading first, so that a server
    /// without it (404) or refusing this caller costs one request, not an `EventSource` error
    /// on every page. `attempt` is bumped to try again later.
    fn open(self, attempt: RwSignal<u64>) {
        if OPEN.with(|o| o.borrow().is_some()) {
            return;
        }
        spawn_local(async move {
            let probe = gloo_net::http::Request::get(&format!("{STREAM}?once=true")).send().await;
            if !probe.as_ref().is_ok_and(|r| r.ok()) {
                // No stream here (yet): the pages poll; ask again later.
                set_timeout(move || attempt.try_update(|a| *a += 1).unwrap_or(()), retry_delay());
                return;
            }
            let Ok(source) = EventSource::new(STREAM) else { return };
            let mut handlers = Vec::new();
            let mut on = |name: &str, f: Box<dyn FnMut(MessageEvent)>| {
                let handler = Closure::wrap(f);
                let _ = source.add_event_listener_with_callback(name, handler.as_ref().unchecked_ref());
                handlers.push(handler);
            };
            on("snapshot", Box::new(move |e| self.on_snapshot(&e)));
            on("resync", Box::new(move |e| self.on_snapshot(&e)));
            on("gpu_state", Box::new(move |e| self.on_gpu_state(&e)));
            on("alert", Box::new(move |_| self.alerts_changed.update(|n| *n += 1)));
            on("summary", Box::new(move |e| self.on_summary(&e)));
            // A dropped connection: the browser reconnects by itself (the server asks for 2 s)
            // and the pages poll until the next snapshot. One the server refused or ended for
            // good (CLOSED) is opened again later.
            let source_for_error = source.clone();
            on(
                "error",
                Box::new(move |_| {
                    self.connected.set(false);
                    if source_for_error.ready_state() == EventSource::CLOSED {
                        OPEN.with(|o| o.borrow_mut().take());
                        set_timeout(move || attempt.try_update(|a| *a += 1).unwrap_or(()), retry_delay());
                    }
                }),
            );
            OPEN.with(|o| *o.borrow_mut() = Some(Stream { source, _handlers: handlers }));
        });
    }

    fn on_snapshot(self, e: &MessageEvent) {
        let Some(snap) = data::<StreamSnapshot>(e) else { return };
        let known = self.gpus.with_untracked(HashMap::len);
        let gpus: HashMap<String, StreamGpu> = snap.gpus.into_iter().map(|g| (g.uuid.clone(), g)).collect();
        // After a gap (a reconnect, a resync) GPUs may have come: the list fetches again.
        if known > 0 && gpus.keys().any(|u| self.gpus.with_untracked(|k| !k.contains_key(u))) {
            self.gpus_added.update(|n| *n += 1);
        }
        self.gpus.set(gpus);
        self.summary.set(Some(snap.summary));
        self.alerts_changed.update(|n| *n += 1);
        self.connected.set(true);
    }

    fn on_gpu_state(self, e: &MessageEvent) {
        let Some(ev) = data::<GpuStateChange>(e) else { return };
        let new = ev.previous.is_none() && self.gpus.with_untracked(|g| !g.contains_key(&ev.uuid));
        self.gpus.update(|g| {
            let gpu =
                StreamGpu { uuid: ev.uuid.clone(), host: ev.host, state: ev.state, last_seen_ms: ev.last_seen_ms };
            g.insert(ev.uuid, gpu);
        });
        if new {
            self.gpus_added.update(|n| *n += 1);
        }
    }

    fn on_summary(self, e: &MessageEvent) {
        let Some(s) = data::<LiveSummary>(e) else { return };
        let last = self.summary.with_untracked(|s| s.as_ref().map(|s| s.at_ms));
        self.summary.set(Some(s));
        let since = SUMMARY_LAST.with(|t| now_ms() - *t.borrow());
        if last.is_some() && since >= SUMMARY_REFRESH_MS {
            SUMMARY_LAST.with(|t| *t.borrow_mut() = now_ms());
            self.summary_changed.update(|n| *n += 1);
        }
    }
}

thread_local! {
    /// When the fleet figures were last asked to refresh by a `summary` event.
    static SUMMARY_LAST: RefCell<i64> = const { RefCell::new(0) };
}

fn retry_delay() -> std::time::Duration {
    std::time::Duration::from_millis(REOPEN_AFTER_MS)
}

/// The event's JSON `data`, read as `T` (None for an event this dashboard cannot read: the next
/// snapshot or poll corrects it).
fn data<T: serde::de::DeserializeOwned>(e: &MessageEvent) -> Option<T> {
    serde_json::from_str(&e.data().as_string()?).ok()
}

#[cfg(test)]
mod tests {
    use fleetlens_api::live::{GpuStateChange, LiveSummary, StreamSnapshot};
    use fleetlens_core::WorkloadState;

    /// The examples of docs/API.md "Live stream" read as the dashboard reads them (the API
    /// crate's types).
    #[test]
    fn stream_events_of_the_api_docs_are_read() {
        let snap: StreamSnapshot = serde_json::from_str(
            r#"{"seq":41,"at_ms":1764165600000,"gpus":[{"uuid":"GPU-0001","host":"node-1","state":"idle_held","last_seen_ms":1764165598000}],"alerts":[],"summary":{"at_ms":1764165600000,"gpu_count":1,"reporting":1,"by_state":{"offline":0,"idle_held":1},"alerts_pending":0,"alerts_firing":0}}"#,
        )
        .unwrap();
        assert_eq!(snap.gpus[0].state, WorkloadState::IdleHeld);
        assert_eq!(snap.summary.by_state["idle_held"], 1);
        let ev: GpuStateChange = serde_json::from_str(
            r#"{"uuid":"GPU-0001","host":"node-1","previous":"idle_held","state":"active","last_seen_ms":1764165604000,"at_ms":1764165605120}"#,
        )
        .unwrap();
        assert_eq!((ev.previous, ev.state), (Some(WorkloadState::IdleHeld), WorkloadState::Active));
        let new: GpuStateChange = serde_json::from_str(
            r#"{"uuid":"GPU-2","host":"n","previous":null,"state":"idle","last_seen_ms":1,"at_ms":2}"#,
        )
        .unwrap();
        assert!(new.previous.is_none());
        let s: LiveSummary = serde_json::from_str(
            r#"{"at_ms":1,"gpu_count":3,"reporting":2,"by_state":{"offline":1},"alerts_pending":0,"alerts_firing":1}"#,
        )
        .unwrap();
        assert_eq!((s.gpu_count, s.reporting, s.alerts_firing), (3, 2, 1));
    }
}
