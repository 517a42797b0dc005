//! Live push: the events of `GET /api/v1/stream` (docs/API.md, "Live stream").
//!
//! Per organisation with at least one open stream, this replica keeps a [`Feed`]: a task that
//! reads the organisation's live picture (GPU states as `GET /gpus`, open alerts as
//! `GET /alerts?status=open`, the counts of both), compares it with the picture before
//! ([`fleetlens_core::live`]) and puts the differences, serialised once, in a bounded
//! broadcast ring that every stream of the organisation reads at its own pace. The cost is per
//! organisation and change, not per stream: 50 dashboards of one organisation cost one reading.
//! A reading re-reads the newest minute only of the GPUs whose newest sample moved since the
//! reading before (`SampleStore::latest_minutes_of`), and every GPU's once per
//! [`picture::FULL_READING_EVERY_MS`]; silence is judged every reading from the clock.
//!
//! A feed reads when told that something changed — a change signal of the store
//! ([`fleetlens_store::changes`]: PostgreSQL `NOTIFY` from whichever replica stored the batch or
//! wrote the alert, in-process on SQLite) — at most every [`MIN_READ_GAP`], and otherwise every
//! `--stream-recheck` (GPUs turn offline by silence, with no signal). A feed ends once its last
//! stream has closed.

mod picture;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetlens_store::accounts::{ApiKeyId, UserId};
use fleetlens_store::{Change, OrgId, Store};
use tokio::sync::{Notify, broadcast, watch};

use crate::auth::{Caller, Principal};
use crate::delivery::HostDeliveries;
use crate::error::ApiError;

pub use picture::{LiveEvent, Picture};

/// Two readings of one organisation are at least this far apart: a burst of batches (an agent
/// per host, every few seconds) costs a reading per gap, not per batch.
pub const MIN_READ_GAP: Duration = Duration::from_millis(250);

/// How long a client waits for an organisation's first reading before the stream is refused.
const FIRST_READING_TIMEOUT: Duration = Duration::from_secs(15);

/// Live-stream settings (flags with environment fallbacks).
#[derive(Debug, Clone, clap::Args)]
pub struct StreamConfig {
    /// Open live streams (`GET /api/v1/stream`) per organisation on this replica; more get 429.
    #[arg(long, env = "FLEETLENS_MAX_STREAMS_PER_ORG", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_org: u32,

    /// Open live streams per API key, or per user for dashboard sessions, on this replica; more
    /// get 429.
    #[arg(long, env = "FLEETLENS_MAX_STREAMS_PER_KEY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_key: u32,

    /// Events an organisation's streams may fall behind by: a stream further behind skips them
    /// and gets one `resync` (the whole picture) instead. The server holds at most this many
    /// events per organisation, however slow its clients are.
    #[arg(long, env = "FLEETLENS_STREAM_BUFFER_EVENTS", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub stream_buffer_events: u32,

    /// Without a change signal, an organisation with open streams is read again this often (a
    /// GPU that falls silent turns offline by the clock, not by a batch).
    #[arg(long, env = "FLEETLENS_STREAM_RECHECK", default_value = "5s", value_parser = humantime::parse_duration)]
    pub stream_recheck: Duration,
}

/// One organisation's feed on this replica.
pub struct Feed {
    org: OrgId,
    events: broadcast::Sender<Arc<LiveEvent>>,
    /// The newest picture; `None` until the first reading.
    picture: watch::Sender<Option<Arc<Picture>>>,
    wake: Notify,
}

/// Who an open stream counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    Key(ApiKeyId),
    User(UserId),
}

#[derive(Default)]
struct Open {
    per_org: HashMap<OrgId, u32>,
    per_caller: HashMap<Who, u32>,
}

/// The feeds and open streams of this replica.
pub struct Hub {
    config: StreamConfig,
    store: Arc<dyn Store>,
    deliveries: Arc<HostDeliveries>,
    feeds: Mutex<HashMap<OrgId, Arc<Feed>>>,
    open: Mutex<Open>,
}

/// An open stream's place: its feed, its position in the feed's ring, and its count against
/// the caps (given back when dropped, i.e. when the client goes away).
pub struct Subscription {
    pub feed: Arc<Feed>,
    pub events: broadcast::Receiver<Arc<LiveEvent>>,
    _slot: Slot,
}

struct Slot {
    hub: Arc<Hub>,
    org: OrgId,
    who: Who,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.hub.open.lock().unwrap_or_else(|e| e.into_inner());
        let Open { per_org, per_caller } = &mut *open;
        release(per_org, self.org);
        release(per_caller, self.who);
        crate::metrics::record_streams(-1);
    }
}

/// One fewer open stream of `key`; the entry goes with its last one.
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: K) {
    if let Some(n) = counts.get_mut(&key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(&key);
        }
    }
}

impl Feed {
    /// The newest picture, waiting for the first reading if there is none yet.
    pub async fn picture(&self) -> Result<Arc<Picture>, ApiError> {
        let mut rx = self.picture.subscribe();
        let first = tokio::time::timeout(FIRST_READING_TIMEOUT, rx.wait_for(Option::is_some)).await;
        match first {
            Ok(Ok(p)) => Ok(p.clone().expect("waited for Some")),
            // 503: the database did not answer the first reading in time.
            _ => Err(ApiError::Store(fleetlens_store::StoreError::Invalid("no live picture yet".into()))),
        }
    }
}

impl Hub {
    pub fn new(config: StreamConfig, store: Arc<dyn Store>, deliveries: Arc<HostDeliveries>) -> Arc<Self> {
        Arc::new(Self { config, store, deliveries, feeds: Mutex::default(), open: Mutex::default() })
    }

    /// Open a stream for `caller`: 429 past a cap, else its organisation's feed (started if
    /// this is its first stream here) and a fresh position in it.
    pub fn subscribe(self: &Arc<Self>, caller: &Caller) -> Result<Subscription, ApiError> {
        let org = caller.org;
        let who = match &caller.principal {
            Principal::Session { user, .. } => Who::User(user.id),
            Principal::ApiKey { .. } => Who::Key(caller.key.id),
        };
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let (for_org, for_caller) =
                (open.per_org.get(&org).copied().unwrap_or(0), open.per_caller.get(&who).copied().unwrap_or(0));
            if for_org >= self.config.max_streams_per_org {
                return Err(too_many(format!(
                    "this organisation already has {for_org} live streams open on this server (--max-streams-per-org): close one or retry later"
                )));
            }
            if for_caller >= self.config.max_streams_per_key {
                let whose = if matches!(who, Who::User(_)) { "this user" } else { "this API key" };
                return Err(too_many(format!(
                    "{whose} already has {for_caller} live streams open on this server (--max-streams-per-key): close one or retry later"
                )));
            }
            *open.per_org.entry(org).or_default() += 1;
            *open.per_caller.entry(who).or_default() += 1;
        }
        crate::metrics::record_streams(1);
        let slot = Slot { hub: self.clone(), org, who };
        // Subscribed under the map's lock, so a feed that is ending (no receiver left, checked
        // under the same lock) is never handed out.
        let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        let feed = feeds
            .entry(org)
            .or_insert_with(|| {
                let feed = Arc::new(Feed {
                    org,
                    events: broadcast::channel(self.config.stream_buffer_events as usize).0,
                    picture: watch::channel(None).0,
                    wake: Notify::new(),
                });
                tokio::spawn(run_feed(self.clone(), feed.clone()));
                feed
            })
            .clone();
        let events = feed.events.subscribe();
        Ok(Subscription { feed, events, _slot: slot })
    }

    /// Something of `org` changed: its feed (if any) reads again soon.
    pub fn wake(&self, org: OrgId) {
        if let Some(feed) = self.feeds.lock().unwrap_or_else(|e| e.into_inner()).get(&org) {
            feed.wake.notify_one();
        }
    }

    fn wake_all(&self) {
        for feed in self.feeds.lock().unwrap_or_else(|e| e.into_inner()).values() {
            feed.wake.notify_one();
        }
    }

    /// Organisations with a feed on this replica now (for tests and metrics).
    pub fn feeds(&self) -> usize {
        self.feeds.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Hear the change signals of every replica for as long as the server runs. A listener that
    /// fails is opened again after a second; what was signalled meanwhile is caught by waking
    /// every feed.
    pub async fn listen(self: Arc<Self>) {
        loop {
            match self.store.listen_changes().await {
                Ok(mut listener) => {
                    // Signals may have been missed while no listener was open.
                    self.wake_all();
                    loop {
                        match listener.recv().await {
                            Ok(Change::Org(org)) => self.wake(org),
                            Ok(Change::Unknown) => self.wake_all(),
                            Err(e) => {
                                tracing::warn!(error = %e, "live streams: the change listener failed; reopening");
                                break;
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "live streams: cannot listen for changes; retrying"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn too_many(message: String) -> ApiError {
    ApiError::InFlight { message, retry_after_s: 5 }
}

/// A feed's task: read, compare, publish; wait for a signal or the recheck; end with the last
/// stream.
async fn run_feed(hub: Arc<Hub>, feed: Arc<Feed>) {
    let mut previous: Option<Arc<Picture>> = None;
    let mut failing = false;
    loop {
        {
            let mut feeds = hub.feeds.lock().unwrap_or_else(|e| e.into_inner());
            if feed.events.receiver_count() == 0 {
                feeds.remove(&feed.org);
                return;
            }
        }
        match picture::read(hub.store.as_ref(), &hub.deliveries, feed.org, previous.as_deref()).await {
            Ok((next, events)) => {
                failing = false;
                let next = Arc::new(next);
                // The picture first: a stream that reads it skips the events it already holds.
                feed.picture.send_replace(Some(next.clone()));
                for event in events {
                    // No receiver: every stream closed meanwhile; the check above ends the feed.
                    let _ = feed.events.send(Arc::new(event));
                }
                previous = Some(next);
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(org = %feed.org, error = %e, "live streams: cannot read the organisation's picture");
                }
                failing = true;
            }
        }
        tokio::time::sleep(MIN_READ_GAP).await;
        tokio::select! {
            () = feed.wake.notified() => {}
            () = tokio::time::sleep(hub.config.stream_recheck) => {}
        }
    }
}
