//! App-wide reactive state: who is logged in, the time range, the live stream, and the poll tick
//! every page's resources track so that data refreshes without a reload.

use std::future::Future;
use std::time::Duration;

use leptos::prelude::*;

use leptos::task::spawn_local;

use crate::api::{self, ApiError, ApiResult};
use crate::live::Live;
use fleetlens_api::accounts::MeView as Me;

/// How often live data is fetched again.
pub const POLL: Duration = Duration::from_secs(5);
/// While the live stream is open (state changes and alerts pushed as they happen), the metrics
/// on the pages are fetched again every this many [`POLL`] periods.
const POLLS_PER_TICK_STREAMING: u64 = 3;
const RANGE_STORAGE: &str = "fleetlens.range";

/// The time range picker's choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Range {
    Hour,
    Day,
    Week,
    Month,
}

impl Range {
    pub const ALL: [Range; 4] = [Range::Hour, Range::Day, Range::Week, Range::Month];

    pub fn label(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::Day => "24h",
            Range::Week => "7d",
            Range::Month => "30d",
        }
    }

    pub fn long_label(self) -> &'static str {
        match self {
            Range::Hour => "last hour",
            Range::Day => "last 24 hours",
            Range::Week => "last 7 days",
            Range::Month => "last 30 days",
        }
    }

    pub fn ms(self) -> i64 {
        const H: i64 = 3_600_000;
        match self {
            Range::Hour => H,
            Range::Day => 24 * H,
            Range::Week => 7 * 24 * H,
            Range::Month => 30 * 24 * H,
        }
    }

    pub fn parse(s: &str) -> Option<Range> {
        Range::ALL.into_iter().find(|r| r.label() == s)
    }

    /// `[now − range, now]` in Unix ms.
    pub fn window(self) -> (i64, i64) {
        let to = now_ms() + 1;
        (to - self.ms(), to)
    }
}

/// Shared by every page (provided once by the app).
#[derive(Clone, Copy)]
pub struct AppCtx {
    /// Who is logged in (`GET /api/v1/auth/me`); `None` means logged out.
    pub me: RwSignal<Option<Me>>,
    /// False until the first `GET /api/v1/auth/me` has answered.
    pub checked: RwSignal<bool>,
    pub range: RwSignal<Range>,
    /// Incremented every [`POLL`] while live updates are on.
    pub tick: RwSignal<u64>,
    /// Live updates on/off (Settings and the header's pause button).
    pub live: RwSignal<bool>,
    /// When the last successful answer arrived (Unix ms).
    pub updated_ms: RwSignal<Option<i64>>,
    /// The server's live stream and what it told.
    pub stream: Live,
}

impl AppCtx {
    pub fn new() -> AppCtx {
        let range = local_get(RANGE_STORAGE).and_then(|s| Range::parse(&s)).unwrap_or(Range::Hour);
        let ctx = AppCtx {
            me: RwSignal::new(None),
            checked: RwSignal::new(false),
            range: RwSignal::new(range),
            tick: RwSignal::new(0),
            live: RwSignal::new(true),
            updated_ms: RwSignal::new(None),
            stream: Live::new(),
        };
        // A stream while logged in with a session (`EventSource` cannot send an API key) and
        // live updates are on.
        ctx.stream.follow(move || ctx.me.with(Option::is_some) && ctx.live.get() && api::stored_key().is_none());
        Effect::new(move || local_set(RANGE_STORAGE, ctx.range.get().label()));
        // A session cookie (or a stored key) from an earlier visit: ask who it is.
        spawn_local(async move {
            if let Ok(me) = api::me().await {
                ctx.me.set(Some(me));
            }
            ctx.checked.set(true);
        });
        let polls = std::cell::Cell::new(0u64);
        set_interval(
            move || {
                polls.set(polls.get() + 1);
                let streaming = ctx.stream.connected.get_untracked();
                let due = !streaming || polls.get().is_multiple_of(POLLS_PER_TICK_STREAMING);
                if due && ctx.live.get_untracked() && !page_hidden() {
                    ctx.tick.update(|t| *t += 1);
                }
            },
            POLL,
        );
        ctx
    }

    /// Ends the session on the server, then here.
    pub async fn log_out(self) {
        let _ = api::logout().await;
        self.me.set(None);
    }

    /// The caller may change settings, rules, channels and silences.
    pub fn is_admin(self) -> bool {
        self.me.with(|m| m.as_ref().is_some_and(Me::is_admin))
    }
}

pub fn use_app() -> AppCtx {
    expect_context::<AppCtx>()
}

pub fn now_ms() -> i64 {
    js_sys::Date::now() as i64
}

fn page_hidden() -> bool {
    document().hidden()
}

pub fn local_get(key: &str) -> Option<String> {
    window().local_storage().ok()??.get_item(key).ok()?
}

pub fn local_set(key: &str, value: &str) {
    if let Ok(Some(s)) = window().local_storage() {
        let _ = s.set_item(key, value);
    }
}

/// The newest successful value of a polled resource (None before the first): kept while a later
/// poll fails or is in flight, so the page shows the last good data under an error banner
/// instead of blanking, and an answer equal to the last one changes nothing on the page.
pub type Latest<T> = Memo<Option<T>>;

/// An API value that is fetched again on every poll tick (and whenever `fetch` reads a signal
/// that changes, such as the range). The resource keeps its last answer while the next one is
/// in flight.
pub fn polled<T, Fut>(fetch: impl Fn() -> Fut + 'static) -> LocalResource<ApiResult<T>>
where
    T: 'static,
    Fut: Future<Output = ApiResult<T>> + 'static,
{
    let ctx = use_app();
    LocalResource::new(move || {
        ctx.tick.track();
        let fut = fetch();
        async move {
            let out = fut.await;
            match &out {
                Ok(_) => ctx.updated_ms.set(Some(now_ms())),
                // The session ended (expired, logged out elsewhere, user disabled): log in again.
                Err(e) if e.is_unauthorized() => ctx.me.set(None),
                Err(_) => {}
            }
            out
        }
    })
}

/// An API value read once (not on the poll tick), for the choices of a form (channels, teams):
/// the default (empty) until it answers, and if it fails.
pub fn read_once<T, Fut>(fetch: impl Fn() -> Fut + 'static) -> Memo<T>
where
    T: Clone + Default + PartialEq + Send + Sync + 'static,
    Fut: Future<Output = ApiResult<T>> + 'static,
{
    let res = LocalResource::new(fetch);
    Memo::new(move |_| res.with(|r| r.as_ref().and_then(|r| r.as_ref().ok().cloned())).unwrap_or_default())
}

/// The newest successful answer of `res` (see [`Latest`]).
pub fn latest_ok<T>(res: LocalResource<ApiResult<T>>) -> Latest<T>
where
    T: Clone + PartialEq + Send + Sync + 'static,
{
    Memo::new(move |prev: Option<&Option<T>>| match res.get() {
        Some(Ok(v)) => Some(v),
        _ => prev.cloned().flatten(),
    })
}

/// Whether a fetch of an API value has answered, and how, whatever the value's type: what
/// [`PollStatus`](crate::components::status::PollStatus) shows.
#[derive(Clone, Copy)]
pub struct Outcome(Signal<Option<Result<(), ApiError>>>);

impl Outcome {
    /// None before the first answer, then the last answer's error (Ok for a success). Tracked.
    pub fn get(&self) -> Option<Result<(), ApiError>> {
        self.0.get()
    }
}

impl<T: 'static> From<LocalResource<ApiResult<T>>> for Outcome {
    fn from(res: LocalResource<ApiResult<T>>) -> Outcome {
        Outcome(Signal::derive(move || res.with(|r| r.as_ref().map(|r| r.as_ref().map(|_| ()).map_err(Clone::clone)))))
    }
}
