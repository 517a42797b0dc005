//! App-wide reactive state: who is logged in, the time range, and the 5-second poll tick that
//! every page's resources track so that data refreshes without a reload.

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use leptos::prelude::*;

use leptos::task::spawn_local;

use crate::api::{self, ApiError, ApiResult};
use crate::wire::Me;

/// How often live data is fetched again.
pub const POLL: Duration = Duration::from_secs(5);
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
        };
        Effect::new(move || local_set(RANGE_STORAGE, ctx.range.get().label()));
        // A session cookie (or a stored key) from an earlier visit: ask who it is.
        spawn_local(async move {
            if let Ok(me) = api::me().await {
                ctx.me.set(Some(me));
            }
            ctx.checked.set(true);
        });
        set_interval(
            move || {
                if ctx.live.get_untracked() && !page_hidden() {
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

/// A value fetched from the API: fetched once created, again whenever `fetch` reads a signal that
/// changes and on [`Fetched::refetch`]. The last answer stays while the next is in flight (pages
/// do not blank on every poll). A fetch that a newer one overtakes, or whose page is left, is
/// dropped at its next step: its code after an `.await` (which may touch the page's signals,
/// gone by then) never runs.
///
/// Leptos' `LocalResource` does this on top of its async-derived and suspense machinery, which
/// the dashboard does not otherwise use: this is about 15 KB (gzipped) less wasm per data page.
/// The answer is kept type-erased (`Rc<dyn Any>`), so that the signal holding it is one type for
/// every answer type: Leptos' signal code is generic over the value, and one signal type per
/// answer type cost each page about 1 KB of wasm per type. `T` only types the accessors.
pub struct Fetched<T: 'static> {
    value: AnswerSignal,
    version: RwSignal<u64>,
    ty: PhantomData<fn() -> T>,
}

impl<T> Clone for Fetched<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Fetched<T> {}

impl<T: 'static> Fetched<T> {
    pub fn new<Fut>(fetch: impl Fn() -> Fut + 'static) -> Self
    where
        Fut: Future<Output = T> + 'static,
    {
        // Only this boxing is compiled per answer type; the effect and the task are not.
        let (value, version) = fetch_erased(Box::new(move || {
            let fut = fetch();
            Box::pin(async move { Rc::new(fut.await) as Rc<dyn Any> })
        }));
        Fetched { value, version, ty: PhantomData }
    }

    /// Fetches again now (after a change made through the API).
    pub fn refetch(&self) {
        self.version.update(|v| *v += 1);
    }

    /// The last answer (None before the first), tracked.
    pub fn with<R>(&self, f: impl FnOnce(Option<&T>) -> R) -> R {
        self.value.with(|v| f(v.as_deref().and_then(<dyn Any>::downcast_ref::<T>)))
    }

    pub fn get(&self) -> Option<T>
    where
        T: Clone,
    {
        self.with(|v| v.cloned())
    }
}

type ErasedFetch = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Rc<dyn Any>>>>>;
/// The last answer of a fetch, of whatever type.
type AnswerSignal = RwSignal<Option<Rc<dyn Any>>, LocalStorage>;

/// The machinery of [`Fetched::new`], for a fetch of any answer type.
fn fetch_erased(fetch: ErasedFetch) -> (AnswerSignal, RwSignal<u64>) {
    let value = RwSignal::new_local(None);
    let version = RwSignal::new(0u64);
    // The fetch that may still store its answer; u64::MAX once the owner is gone.
    let current = Arc::new(AtomicU64::new(0));
    on_cleanup({
        let current = Arc::clone(&current);
        move || current.store(u64::MAX, Ordering::Relaxed)
    });
    Effect::new(move || {
        version.track();
        let mut fut = fetch();
        let this = current.load(Ordering::Relaxed).wrapping_add(1);
        if this == u64::MAX {
            return;
        }
        current.store(this, Ordering::Relaxed);
        let current = Arc::clone(&current);
        spawn_local(async move {
            let live = || current.load(Ordering::Relaxed) == this;
            let out =
                std::future::poll_fn(|cx| if live() { fut.as_mut().poll(cx).map(Some) } else { Poll::Ready(None) });
            if let Some(out) = out.await
                && live()
            {
                value.set(Some(out));
            }
        });
    });
    (value, version)
}

/// Whether a fetch of an API value has answered, and how, whatever the value's type: what
/// [`PollStatus`](crate::components::status::PollStatus) shows (one copy of it for all types).
#[derive(Clone, Copy)]
pub struct Outcome {
    value: AnswerSignal,
    error: fn(&dyn Any) -> Option<ApiError>,
}

impl Outcome {
    /// None before the first answer, then the error of the last answer (None for a success).
    /// Tracked.
    pub fn get(&self) -> Option<Option<ApiError>> {
        self.value.with(|v| v.as_deref().map(self.error))
    }
}

impl<T: 'static> From<Fetched<ApiResult<T>>> for Outcome {
    fn from(res: Fetched<ApiResult<T>>) -> Outcome {
        Outcome {
            value: res.value,
            error: |v| v.downcast_ref::<ApiResult<T>>().and_then(|r| r.as_ref().err().cloned()),
        }
    }
}

/// An API value that is fetched again on every poll tick (and whenever `fetch` reads a signal
/// that changes, such as the range).
pub fn polled<T, Fut>(fetch: impl Fn() -> Fut + 'static) -> Fetched<ApiResult<T>>
where
    T: 'static,
    Fut: Future<Output = ApiResult<T>> + 'static,
{
    let ctx = use_app();
    Fetched::new(move || {
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

/// A value of any type behind one memo type (see [`Latest`]), compared by the value's own
/// `PartialEq`, so that an answer equal to the last one changes nothing on the page.
#[derive(Clone)]
struct AnyValue {
    /// An `Option<T>`, always `Some`: [`Latest::with`] lends it out as `&Option<T>`.
    value: Arc<dyn Any + Send + Sync>,
    same: fn(&dyn Any, &dyn Any) -> bool,
}

impl PartialEq for AnyValue {
    fn eq(&self, other: &Self) -> bool {
        (self.same)(&*self.value, &*other.value)
    }
}

fn same_value<T: PartialEq + 'static>(a: &dyn Any, b: &dyn Any) -> bool {
    a.downcast_ref::<Option<T>>() == b.downcast_ref::<Option<T>>()
}

/// The newest successful value of a polled resource: kept while a later poll fails or is in
/// flight, so the page shows the last good data under an error banner instead of blanking.
///
/// A memo of one type for every `T` (the value is type-erased, as in [`Fetched`]): Leptos'
/// memo code is generic over the value, and a memo type per answer type cost each page about
/// 1 KB of wasm per type.
pub struct Latest<T> {
    memo: Memo<Option<AnyValue>>,
    ty: PhantomData<fn() -> T>,
}

impl<T> Clone for Latest<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Latest<T> {}

impl<T: 'static> Latest<T> {
    /// The value (None before the first successful answer), tracked.
    pub fn with<R>(&self, f: impl FnOnce(&Option<T>) -> R) -> R {
        self.memo.with(|v| Self::lend(v, f))
    }

    pub fn with_untracked<R>(&self, f: impl FnOnce(&Option<T>) -> R) -> R {
        self.memo.with_untracked(|v| Self::lend(v, f))
    }

    pub fn get(&self) -> Option<T>
    where
        T: Clone,
    {
        self.with(Clone::clone)
    }

    pub fn get_untracked(&self) -> Option<T>
    where
        T: Clone,
    {
        self.with_untracked(Clone::clone)
    }

    fn lend<R>(v: &Option<AnyValue>, f: impl FnOnce(&Option<T>) -> R) -> R {
        match v.as_ref().and_then(|v| v.value.downcast_ref::<Option<T>>()) {
            Some(v) => f(v),
            None => f(&None),
        }
    }
}

impl<T: Clone + PartialEq + Send + Sync + 'static> Latest<T> {
    /// A value computed from other signals: a memo of it, type-erased like the rest.
    pub fn derive(f: impl Fn() -> Option<T> + Send + Sync + 'static) -> Self {
        let memo = Memo::new(move |_| f().map(|v| AnyValue { value: Arc::new(Some(v)), same: same_value::<T> }));
        Latest { memo, ty: PhantomData }
    }
}

pub fn latest_ok<T>(res: Fetched<ApiResult<T>>) -> Latest<T>
where
    T: Clone + PartialEq + Send + Sync + 'static,
{
    let memo = Memo::new(move |prev: Option<&Option<AnyValue>>| {
        res.with(|r| match r {
            Some(Ok(v)) => Some(AnyValue { value: Arc::new(Some(v.clone())), same: same_value::<T> }),
            _ => prev.cloned().flatten(),
        })
    });
    Latest { memo, ty: PhantomData }
}
