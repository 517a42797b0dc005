//! `GET /api/v1/stream`: the organisation's live events as server-sent events (docs/API.md,
//! "Live stream"; the events come from [`crate::live`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use fleetlens_api::live::{EVENT_RESYNC, EVENT_SNAPSHOT, StreamQuery};
use fleetlens_store::Scope;
use futures::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Caller;
use crate::error::ApiResult;
use crate::live::{Picture, Subscription};
use crate::state::AppState;

/// A dropped browser reconnects after this long (the SSE `retry:` field).
const RECONNECT_AFTER: Duration = Duration::from_secs(2);
/// A comment line after this long without an event keeps proxies from closing the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// A stream ends after this long and the client reconnects (`EventSource` does so itself):
/// the caller's key or session is checked again then, so a revoked one stops within this time.
pub const MAX_STREAM_AGE: Duration = Duration::from_secs(30 * 60);

/// The organisation's live events: `snapshot` first, then `gpu_state`, `alert`, `summary`
/// (and `resync` for a client that fell behind), each with an `id`. See docs/API.md,
/// "Live stream".
/// One server-sent event as a client reads it (the OpenAPI schema of each event of the stream;
/// `data` is the JSON text of the event's body).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // documentation only: the events are written by axum's `Event`
pub struct SseEventDoc {
    /// `snapshot`, `resync`, `gpu_state`, `alert` or `summary`.
    event: Option<String>,
    /// The event's JSON body, as text.
    data: Option<String>,
    /// The event's sequence number in the organisation's feed.
    id: Option<String>,
    /// The reconnection delay in milliseconds (on the first event).
    retry: Option<u64>,
}

#[utoipa::path(get, path = "/stream", tag = "live", params(StreamQuery), responses(
    (status = 200, content_type = "text/event-stream", body = SseEventDoc,
     description = "Server-sent events; each `data` is one of StreamSnapshot (`snapshot`, `resync`), GpuStateChange (`gpu_state`), AlertChange (`alert`), LiveSummary (`summary`)"),
    crate::openapi::StreamErrors))]
pub async fn stream(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<StreamQuery>,
) -> ApiResult<([(&'static str, &'static str); 1], Sse<impl Stream<Item = Result<Event, Infallible>>>)> {
    caller.require(Scope::Read)?;
    let subscription = state.live.subscribe(&caller)?;
    let first = subscription.feed.picture().await?;
    let once = q.once.unwrap_or(false);
    let deadline = tokio::time::Instant::now() + MAX_STREAM_AGE;
    let start = Reader { subscription, last_seq: first.seq, first: Some(first), once, deadline };
    let events = futures::stream::unfold(start, |mut reader| async move {
        let event = reader.next().await?;
        Some((Ok(event), reader))
    });
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"));
    // nginx and the like pass the events on as they come rather than buffering the response.
    Ok(([("x-accel-buffering", "no")], sse))
}

/// One client's position in its organisation's feed.
struct Reader {
    subscription: Subscription,
    /// The newest event the client has (directly or in a snapshot).
    last_seq: u64,
    /// The snapshot still to send.
    first: Option<Arc<Picture>>,
    once: bool,
    deadline: tokio::time::Instant,
}

impl Reader {
    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        if let Some(picture) = self.first.take() {
            return Some(snapshot(Event::default().retry(RECONNECT_AFTER), EVENT_SNAPSHOT, &picture));
        }
        if self.once {
            return None;
        }
        loop {
            let received = tokio::select! {
                r = self.subscription.events.recv() => r,
                () = tokio::time::sleep_until(self.deadline) => return None,
            };
            match received {
                // Already in the snapshot this client holds.
                Ok(e) if e.seq <= self.last_seq => continue,
                Ok(e) => {
                    self.last_seq = e.seq;
                    return Some(Event::default().event(e.name).id(e.seq.to_string()).data(&e.data));
                }
                // Fell more than the ring behind: the events in between are gone; the whole
                // picture replaces them.
                Err(RecvError::Lagged(_)) => {
                    let picture = self.subscription.feed.picture().await.ok()?;
                    self.last_seq = picture.seq;
                    return Some(snapshot(Event::default(), EVENT_RESYNC, &picture));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// `event` (empty, or with a `retry:` first) as a snapshot of `picture`.
fn snapshot(event: Event, name: &str, picture: &Picture) -> Event {
    event.event(name).id(picture.seq.to_string()).data(&*picture.snapshot_json())
}
