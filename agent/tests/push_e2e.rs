//! The pusher and spool against a real HTTP server on 127.0.0.1 (no mocked client).

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::{API_KEY, ServerState, TestServer, fixture};
use fleetlens_agent::collector::{self, CollectorConfig};
use fleetlens_agent::pusher::{Backoff, Mode, PushSummary, Pusher, PusherConfig};
use fleetlens_agent::source::SourceOptions;
use fleetlens_agent::source::replay::{ReplaySource, read_trace};
use fleetlens_agent::spool::{SharedSpool, Spool};
use fleetlens_agent::wire::WireFormat;
use tokio::sync::{Notify, watch};

const FAST: Backoff = Backoff { initial: Duration::from_millis(5), max: Duration::from_millis(40), factor: 2.0 };

fn pusher(url: &str, key: Option<&str>) -> Pusher {
    Pusher::new(PusherConfig {
        server: url.to_string(),
        api_key: key.map(str::to_string),
        timeout: Duration::from_millis(500),
        backoff: FAST,
    })
    .unwrap()
}

/// Spools the fixture in batches of `batch_max` (84 samples → ceil(84 / batch_max) files).
async fn spool_fixture(dir: &Path, batch_max: usize) -> SharedSpool {
    let spool = SharedSpool::new(Spool::open(dir, 1 << 30).unwrap());
    let opts =
        SourceOptions { interval: Duration::from_secs(1), host: None, seed: 1, speed: None, ..Default::default() };
    let src = Box::new(ReplaySource::open(&fixture(), &opts).unwrap());
    let cfg = CollectorConfig {
        batch_max,
        flush_every: Duration::from_secs(3600),
        reading_interval: Duration::ZERO,
        once: true,
        labels: BTreeMap::new(),
        flush_on_state_change: false,
        wire_format: WireFormat::default(),
    };
    let (_tx, rx) = watch::channel(false);
    collector::run(src, spool.clone(), Arc::new(Notify::new()), cfg, rx).await.unwrap();
    spool
}

async fn drain(p: &Pusher, spool: &SharedSpool) -> PushSummary {
    let (_tx, rx) = watch::channel(Mode::Drain);
    tokio::time::timeout(Duration::from_secs(10), p.run(spool.clone(), Arc::new(Notify::new()), rx))
        .await
        .expect("drained in time")
        .unwrap()
}

/// Every fixture sample was stored exactly once after dedup by (uuid, ts_ms), and first
/// commits went oldest first. A resend after a lost answer may commit a batch twice; the
/// server's idempotency makes that harmless, so duplicates are checked by the callers that
/// expect none.
fn assert_all_arrived_in_order(server: &TestServer) {
    let want: Vec<(String, i64)> =
        read_trace(&fixture(), None).unwrap().into_iter().map(|r| (r.sample.uuid, r.sample.ts_ms)).collect();
    let got = server.state.accepted_samples();
    assert_eq!(server.state.stored_count(), 84);
    let mut seen = HashSet::new();
    let first_commits: Vec<(String, i64)> =
        got.iter().map(|(_, u, t)| (u.clone(), *t)).filter(|k| seen.insert(k.clone())).collect();
    assert_eq!(first_commits.len(), 84);
    assert!(first_commits == want, "commits must follow the trace, oldest first");
    assert!(got.iter().all(|(h, _, _)| h == "gpu-node-01"));
}

fn duplicates(server: &TestServer) -> usize {
    server.state.duplicates.load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test]
async fn retries_503_then_delivers_everything_once_in_order() {
    let server = common::start(ServerState::new([StatusCode::SERVICE_UNAVAILABLE; 3])).await;
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_fixture(dir.path(), 10).await;
    assert_eq!(spool.peek(|s| s.len()), 9);

    let sum = drain(&pusher(&server.url, Some(API_KEY)), &spool).await;
    assert!(sum.drained);
    assert_eq!((sum.batches_sent, sum.samples_sent, sum.batches_rejected), (9, 84, 0));
    assert_eq!(server.state.requests(), 3 + 9);
    assert_all_arrived_in_order(&server);
    assert_eq!(duplicates(&server), 0, "a 503 stores nothing, so nothing arrives twice");
    assert!(spool.peek(|s| s.is_empty()));
}

/// An agent upgraded before its server: the server answers its protobuf batches with 415, and
/// the pusher sends them (and every later one) as gzip JSON instead; nothing is lost or dropped.
#[tokio::test]
async fn a_server_without_the_protobuf_intake_gets_json() {
    let mut state = ServerState::new([]);
    state.json_only = true;
    let server = common::start(state).await;
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_fixture(dir.path(), 10).await;
    assert!(spool.peek(|s| s.entries().iter().all(|e| e.format == WireFormat::Protobuf)));

    let sum = drain(&pusher(&server.url, Some(API_KEY)), &spool).await;
    assert_eq!((sum.batches_sent, sum.samples_sent, sum.batches_rejected), (9, 84, 0));
    assert_all_arrived_in_order(&server);
    let formats = server.state.formats.lock().unwrap().clone();
    assert_eq!(formats.len(), 10, "one protobuf attempt, then nine JSON batches: {formats:?}");
    assert_eq!(formats[0], "application/x-protobuf zstd");
    assert!(formats[1..].iter().all(|f| f == "application/json gzip"), "{formats:?}");
    assert!(spool.peek(|s| s.is_empty()));
}

#[tokio::test]
async fn outage_then_restart_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // First run: the server is down (every request is a 502); the agent is stopped.
    {
        let down = common::start(ServerState::new([StatusCode::BAD_GATEWAY; 1000])).await;
        let spool = spool_fixture(dir.path(), 25).await;
        let (tx, rx) = watch::channel(Mode::Follow);
        let p = pusher(&down.url, Some(API_KEY));
        let run = tokio::spawn({
            let spool = spool.clone();
            async move { p.run(spool, Arc::new(Notify::new()), rx).await }
        });
        common::wait_until("it retried", || down.state.requests() >= 3).await;
        tx.send(Mode::Stop).unwrap();
        let sum = run.await.unwrap().unwrap();
        assert_eq!(sum.batches_sent, 0);
        assert_eq!(spool.peek(|s| s.samples()), 84);
    }
    // Second run: a fresh process opens the same spool; the server is back.
    let server = common::start(ServerState::new([])).await;
    let spool = SharedSpool::new(Spool::open(dir.path(), 1 << 30).unwrap());
    assert_eq!(spool.peek(|s| s.len()), 4);
    let sum = drain(&pusher(&server.url, Some(API_KEY)), &spool).await;
    assert_eq!(sum.samples_sent, 84);
    assert_all_arrived_in_order(&server);
    assert_eq!(duplicates(&server), 0);
}

#[tokio::test]
async fn unreachable_server_times_out_and_recovers() {
    // A bound port whose connections are never accepted: requests time out.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_fixture(dir.path(), 84).await;
    let p = Pusher::new(PusherConfig {
        server: url,
        api_key: Some(API_KEY.into()),
        timeout: Duration::from_millis(150),
        backoff: FAST,
    })
    .unwrap();
    let (_tx, rx) = watch::channel(Mode::Drain);
    let run = tokio::spawn({
        let spool = spool.clone();
        async move { p.run(spool, Arc::new(Notify::new()), rx).await }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(spool.peek(|s| s.len()), 1, "nothing is lost while the server hangs");
    let server = common::serve_on(listener, ServerState::new([]));
    let sum = tokio::time::timeout(Duration::from_secs(10), run).await.unwrap().unwrap().unwrap();
    assert!(sum.drained);
    assert_eq!(sum.batches_sent, 1);
    // The timed-out requests were still queued on the socket, and the server committed them
    // once it came up: the agent could not know, resent, and dedup keeps one copy of each.
    assert_all_arrived_in_order(&server);
    assert_eq!(server.state.accepted_samples().len(), 84 + duplicates(&server));
}

#[tokio::test]
async fn rejected_batch_is_kept_aside_and_the_rest_arrives() {
    let bad_ts = read_trace(&fixture(), None).unwrap()[25].sample.ts_ms;
    let mut state = ServerState::new([]);
    state.reject = Some(Box::new(move |b| b.samples.iter().any(|s| s.ts_ms == bad_ts)));
    let server = common::start(state).await;
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_fixture(dir.path(), 10).await;

    let sum = drain(&pusher(&server.url, Some(API_KEY)), &spool).await;
    assert_eq!((sum.batches_rejected, sum.samples_rejected), (1, 10));
    assert_eq!((sum.batches_sent, sum.samples_sent), (8, 74));
    assert_eq!(server.state.requests(), 9, "a rejected batch is not retried");
    assert_eq!(server.state.stored_count(), 74);
    let rejected = dir.path().join("rejected");
    let mut names: Vec<String> =
        std::fs::read_dir(&rejected).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["00000000000000000003-10.pb.zst", "00000000000000000003.error.txt"]);
    let why = std::fs::read_to_string(rejected.join(&names[1])).unwrap();
    assert!(why.contains("422") && why.contains("invalid_sample"), "{why}");
    assert!(spool.peek(|s| s.is_empty()));
}

#[tokio::test]
async fn auth_errors_keep_data_and_retry() {
    let server = common::start(ServerState::new([])).await;
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_fixture(dir.path(), 50).await;
    // A wrong key: 401 over and over, nothing dropped, nothing rejected.
    let (tx, rx) = watch::channel(Mode::Drain);
    let p = pusher(&server.url, Some("wrong"));
    let run = tokio::spawn({
        let spool = spool.clone();
        async move { p.run(spool, Arc::new(Notify::new()), rx).await }
    });
    common::wait_until("it retried", || server.state.requests() >= 3).await;
    tx.send(Mode::Stop).unwrap();
    let sum = run.await.unwrap().unwrap();
    assert!(!sum.drained);
    assert_eq!((sum.batches_sent, sum.batches_rejected), (0, 0));
    assert_eq!(spool.peek(|s| s.samples()), 84);
    // The key is fixed (and the server briefly answers 403): everything goes through.
    server.state.script.lock().unwrap().push_back(StatusCode::FORBIDDEN);
    let sum = drain(&pusher(&server.url, Some(API_KEY)), &spool).await;
    assert_eq!(sum.samples_sent, 84);
    assert_all_arrived_in_order(&server);
}

#[tokio::test]
async fn follows_the_collector_live() {
    // Collector and pusher at the same time, as in the binary: the pusher wakes on new batches.
    let server = common::start(ServerState::new([StatusCode::INTERNAL_SERVER_ERROR; 2])).await;
    let dir = tempfile::tempdir().unwrap();
    let spool = SharedSpool::new(Spool::open(dir.path(), 1 << 30).unwrap());
    let wake = Arc::new(Notify::new());
    let (mode_tx, mode_rx) = watch::channel(Mode::Follow);
    let p = pusher(&server.url, Some(API_KEY));
    let push = tokio::spawn({
        let (spool, wake) = (spool.clone(), wake.clone());
        async move { p.run(spool, wake, mode_rx).await }
    });
    let opts = SourceOptions {
        interval: Duration::from_secs(1),
        host: Some("replayed".into()),
        seed: 1,
        speed: Some(200.0),
        rebase_ts: false,
        ..Default::default()
    };
    let src = Box::new(ReplaySource::open(&fixture(), &opts).unwrap());
    let cfg = CollectorConfig {
        batch_max: 5000,
        flush_every: Duration::from_millis(50),
        reading_interval: Duration::ZERO,
        once: false,
        labels: BTreeMap::from([("team".into(), "ml".into())]),
        flush_on_state_change: false,
        wire_format: WireFormat::default(),
    };
    let (_stop_tx, stop_rx) = watch::channel(false);
    let collected = collector::run(src, spool.clone(), wake, cfg, stop_rx).await.unwrap();
    assert!(collected.finished && collected.batches > 1, "{collected:?}");
    mode_tx.send(Mode::Drain).unwrap();
    let sum = tokio::time::timeout(Duration::from_secs(10), push).await.unwrap().unwrap().unwrap();
    assert_eq!(sum.samples_sent, 84);
    let acc = server.state.accepted.lock().unwrap();
    assert!(acc.iter().all(|b| b.host == "replayed" && b.labels["team"] == "ml"));
    let ts: Vec<i64> = acc.iter().flat_map(|b| b.samples.iter().map(|s| s.ts_ms)).collect();
    assert_eq!(ts.len(), 84);
    assert!(ts.windows(2).all(|w| w[0] < w[1]));
}
