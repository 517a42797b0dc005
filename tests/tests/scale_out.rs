//! Black box: several `fleetlens-server` replicas on one PostgreSQL database (issue 8).
//!
//! - Each background job (alert engine, retention) is led by exactly one replica at a time
//!   (a PostgreSQL advisory lock), and another replica takes over after `kill -9` of the leader.
//! - Every alert transition reaches a real local HTTP receiver exactly once, before and after
//!   the takeover.
//! - Both replicas ingesting the same GPU, concurrently, with overlapping batches: each sample
//!   is stored and counted in the rollups exactly once.
//!
//! See also `alerts_api::two_replicas_send_each_transition_once` (both senders on one outbox).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use fleetlens_tests::http::{call, now_ms, serve_local, wait_for};
use fleetlens_tests::{Backend, TestDatabase, TestServer, h100_sample};
use serde_json::{Value, json};
use sqlx::Connection;

const FAST: &[&str] = &["--alert-retry-base", "200ms", "--alert-eval-interval", "200ms", "--retention-interval", "1s"];

/// (message id, body) of every POST the receiver answered 200.
type Log = Arc<Mutex<Vec<(Option<String>, Value)>>>;

async fn receiver() -> (String, Log) {
    async fn record(State(log): State<Log>, headers: HeaderMap, body: Bytes) -> StatusCode {
        let id = headers.get("x-fleetlens-message-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        log.lock().unwrap().push((id, serde_json::from_slice(&body).unwrap_or(Value::Null)));
        StatusCode::OK
    }
    let log: Log = Arc::default();
    let addr = serve_local(Router::new().fallback(record).with_state(log.clone())).await;
    (format!("http://{addr}/hook"), log)
}

/// This replica's job leadership from `GET /healthz`: job → (leader, runs).
async fn jobs(server: &TestServer) -> HashMap<String, (bool, u64)> {
    let v: Value = reqwest::get(server.url("/healthz")).await.unwrap().json().await.unwrap();
    assert_eq!(v["status"], "ok", "{v}");
    v["jobs"]
        .as_object()
        .map(|o| {
            o.iter().map(|(k, s)| (k.clone(), (s["leader"].as_bool().unwrap(), s["runs"].as_u64().unwrap()))).collect()
        })
        .unwrap_or_default()
}

/// Which of `servers` leads `job`; panics unless exactly one does (checked `checks` times).
async fn sole_leader(servers: &[&TestServer], job: &str) -> usize {
    let leader = wait_for(&format!("one leader of {job}"), Duration::from_secs(20), || async {
        let mut leaders = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            if jobs(s).await.get(job).is_some_and(|j| j.0) {
                leaders.push(i);
            }
        }
        (leaders.len() == 1).then(|| leaders[0])
    })
    .await;
    // And it stays that way: never two leaders.
    for _ in 0..10 {
        let mut n = 0;
        for s in servers {
            n += usize::from(jobs(s).await.get(job).is_some_and(|j| j.0));
        }
        assert_eq!(n, 1, "exactly one replica leads {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    leader
}

/// 8 samples ending just before now: hollow for 4 (fires a 2 s rule), healthy after (resolves).
fn hollow_then_healthy(uuid: &str) -> Vec<Value> {
    let start = now_ms() - 9000;
    (0..8).map(|i| h100_sample(uuid, start + i * 1000, 100.0, if i < 4 { 2.0 } else { 95.0 })).collect()
}

async fn ingest(server: &TestServer, host: &str, samples: Vec<Value>) {
    let (status, v) =
        call(server, reqwest::Method::POST, "/api/v1/ingest", Some(json!({"host": host, "samples": samples}))).await;
    assert_eq!(status, 200, "{v}");
}

/// (gpu, status) of every delivered message; panics on a duplicate.
fn transitions(log: &Log) -> HashSet<(String, String)> {
    let mut seen = HashSet::new();
    let mut ids = HashSet::new();
    for (id, body) in log.lock().unwrap().iter() {
        let key = (
            body["alerts"][0]["labels"]["gpu"].as_str().unwrap_or("?").to_string(),
            body["status"].as_str().unwrap_or("?").to_string(),
        );
        assert!(seen.insert(key.clone()), "{key:?} delivered twice");
        assert!(ids.insert(id.clone()), "message {id:?} delivered twice");
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_per_job_one_message_per_transition_and_takeover_after_kill_9() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::spawn(&db.url, FAST);
    let b = TestServer::spawn(&db.url, FAST);
    let (url, log) = receiver().await;

    // Exactly one leader per job; the retention job runs there and only there.
    let engine_leader = sole_leader(&[&a, &b], "alert_engine").await;
    let retention_leader = sole_leader(&[&a, &b], "retention").await;
    let servers = [&a, &b];
    wait_for("retention runs on its leader", Duration::from_secs(20), || async {
        (jobs(servers[retention_leader]).await["retention"].1 >= 2).then_some(())
    })
    .await;
    assert_eq!(jobs(servers[1 - retention_leader]).await["retention"].1, 0, "the standby never runs retention");
    assert_eq!(jobs(servers[1 - engine_leader]).await["alert_engine"].1, 0, "the standby never evaluates");

    let (status, ch) = call(
        &a,
        reqwest::Method::POST,
        "/api/v1/notification-channels",
        Some(json!({"name": "hook", "kind": "webhook", "url": url})),
    )
    .await;
    assert_eq!(status, 201, "{ch}");
    let rule = json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30",
                      "for_s": 2, "channels": [ch["id"]]});
    let (status, r) = call(&b, reqwest::Method::POST, "/api/v1/alert-rules", Some(rule)).await;
    assert_eq!(status, 201, "{r}");

    // Ingest through both replicas (a load balancer would spread it so).
    for i in 0..6 {
        ingest(servers[i % 2], &format!("node-{i}"), hollow_then_healthy(&format!("GPU-so-{i}"))).await;
    }
    wait_for("12 messages", Duration::from_secs(40), || async { (log.lock().unwrap().len() >= 12).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(transitions(&log).len(), 12, "6 GPUs × (firing, resolved), each once");

    // kill -9 the engine's leader: the other replica takes over.
    let (mut dead, survivor) = if engine_leader == 0 { (a, b) } else { (b, a) };
    let killed_at = Instant::now();
    dead.kill();
    let runs_before = jobs(&survivor).await["alert_engine"].1;
    wait_for("the survivor to lead the engine", Duration::from_secs(15), || async {
        jobs(&survivor).await["alert_engine"].0.then_some(())
    })
    .await;
    let took_over = killed_at.elapsed();
    // Both jobs end up on the survivor.
    wait_for("the survivor to lead retention", Duration::from_secs(15), || async {
        jobs(&survivor).await["retention"].0.then_some(())
    })
    .await;
    // New data after the takeover alerts exactly once; nothing from before is sent again.
    for i in 6..9 {
        ingest(&survivor, &format!("node-{i}"), hollow_then_healthy(&format!("GPU-so-{i}"))).await;
    }
    wait_for("18 messages", Duration::from_secs(40), || async { (log.lock().unwrap().len() >= 18).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(transitions(&log).len(), 18, "9 GPUs × 2 transitions, each once, across the takeover");
    assert!(jobs(&survivor).await["alert_engine"].1 > runs_before, "the survivor evaluates now");
    eprintln!("takeover of the alert engine after kill -9: {took_over:?}");

    // A restarted replica joins as a standby: still one leader, still no duplicates.
    let rejoined = TestServer::spawn(&db.url, FAST);
    assert_eq!(sole_leader(&[&survivor, &rejoined], "alert_engine").await, 0, "the lock stays where it is");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(transitions(&log).len(), 18);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_replicas_ingesting_one_gpu_count_each_sample_once() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::spawn(&db.url, &[]);
    let b = TestServer::spawn(&db.url, &[]);
    // 3 minutes of 1 Hz data for one GPU (plus a second one), sent as 36 overlapping batches
    // of 20 samples (each sample in two batches), half to each replica, 12 at a time.
    let start = (now_ms() / 60_000 - 10) * 60_000;
    let n = 180i64;
    let all: Vec<Value> = (0..n)
        .flat_map(|i| {
            [
                h100_sample("GPU-shared", start + i * 1000, (i % 100) as f64, 50.0),
                h100_sample("GPU-other", start + i * 1000, 1.0, 1.0),
            ]
        })
        .collect();
    let mut batches = Vec::new();
    for k in 0..36usize {
        let from = (k * 10) % all.len();
        let batch: Vec<Value> = all.iter().cycle().skip(from).take(20).cloned().collect();
        batches.push(batch);
    }
    let (a, b) = (Arc::new(a), Arc::new(b));
    let mut set = tokio::task::JoinSet::new();
    for (k, batch) in batches.into_iter().enumerate() {
        let server = if k % 2 == 0 { a.clone() } else { b.clone() };
        set.spawn(async move { ingest(&server, "node-shared", batch).await });
        if set.len() >= 12 {
            set.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    // The minutes are 7-10 minutes old: the rollup job (on whichever replica leads it) writes
    // them within a run or two.
    fleetlens_tests::wait_rollups_written(&db.url, i64::MAX, Duration::from_secs(30)).await;
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
    let samples = count("SELECT count(*) FROM open_sample_rows").fetch_one(&mut conn).await.unwrap();
    assert_eq!(samples, 2 * n, "each (gpu, ts) stored once");
    let m: i64 = count("SELECT sum(sample_count)::int8 FROM rollups_1m").fetch_one(&mut conn).await.unwrap();
    let h: i64 = count("SELECT sum(sample_count)::int8 FROM rollups_1h").fetch_one(&mut conn).await.unwrap();
    assert_eq!((m, h), (2 * n, 2 * n), "rollups count each sample once");
    // Per minute, the rollup equals the samples sent (each once).
    let mut sent: HashMap<(String, i64), (i64, f64)> = HashMap::new();
    for s in &all {
        let ts = s["ts_ms"].as_i64().unwrap();
        let minute = sent.entry((s["uuid"].as_str().unwrap().to_string(), ts - ts % 60_000)).or_default();
        *minute = (minute.0 + 1, minute.1 + s["gpu_util_pct"].as_f64().unwrap());
    }
    let stored: Vec<(String, i64, i64, f64)> = sqlx::query_as(
        "SELECT g.uuid, r.bucket_ms, r.sample_count, r.gpu_util_pct_sum FROM rollups_1m r JOIN gpus g ON g.id = r.gpu_id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(stored.len(), sent.len());
    for (uuid, minute, count, sum) in stored {
        let (want_count, want_sum) = sent[&(uuid.clone(), minute)];
        assert_eq!(count, want_count, "{uuid} {minute}");
        assert!((sum - want_sum).abs() < 1e-6, "every minute rollup matches its samples: {uuid} {minute}");
    }
    let minutes: i64 = count("SELECT count(*) FROM rollups_1m").fetch_one(&mut conn).await.unwrap();
    assert_eq!(minutes, 2 * 3, "3 minutes × 2 GPUs");
    // Credits (seconds per state, energy, …) once: every hour holds exactly the sum of its
    // minutes, and a GPU's state seconds never exceed the time it reported.
    let cols: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = 'rollups_1h' \
         AND column_name LIKE 'c\\_%' ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(cols.len() > 10, "credit columns: {cols:?}");
    for c in &cols {
        let sql = format!(
            "SELECT abs(coalesce((SELECT sum({c}) FROM rollups_1h), 0) - coalesce((SELECT sum({c}) FROM rollups_1m), 0))::float8"
        );
        let diff: f64 = sqlx::query_scalar(&sql).fetch_one(&mut conn).await.unwrap();
        assert!(diff < 1e-6, "{c}: hours differ from the sum of their minutes by {diff}");
    }
    let state_s: Vec<String> = cols.iter().filter(|c| c.starts_with("c_s_")).cloned().collect();
    let sql = format!("SELECT coalesce(sum({}), 0)::float8 FROM rollups_1h", state_s.join(" + "));
    let seconds: f64 = sqlx::query_scalar(&sql).fetch_one(&mut conn).await.unwrap();
    assert!(seconds <= (2 * n) as f64 + 2.0, "state seconds not doubled: {seconds} for {} samples", 2 * n);
    assert!(seconds > 0.0);
}

/// Issue 22: classifier thresholds PUT on the replica that does not lead the rollup job reach
/// the minute credits the leader writes (it re-reads them before each rollup pass), and the
/// leader's own reads: its GPU timelines at once (they read the stored thresholds), its fleet
/// summary (cached before the PUT, with a minute not written yet) within the 1 s docs/API.md
/// gives (every replica re-reads the thresholds every second).
#[tokio::test(flavor = "multi_thread")]
async fn thresholds_put_on_one_replica_classify_the_minutes_the_other_writes() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::spawn(&db.url, FAST);
    let b = TestServer::spawn(&db.url, FAST);
    let servers = [&a, &b];
    let leader = sole_leader(&servers, "rollups").await;
    let other = servers[1 - leader];
    let leader_server = servers[leader];
    // Kernel util 60 with SMACT 10: hollow by default (SMACT / util < 0.3), active with a
    // hollow ratio of 0.1.
    let minute_state = |uuid: &'static str| {
        let url = db.url.clone();
        async move {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT r.state FROM rollups_1m r JOIN gpus g ON g.id = r.gpu_id WHERE g.uuid = $1",
            )
            .bind(uuid)
            .fetch_all(&mut conn)
            .await
            .unwrap()
        }
    };
    // The two minutes, fixed once: read again later, a minute boundary passed in between would
    // name other minutes than the samples'.
    let this_minute = now_ms() / 60_000 * 60_000;
    let (before_minute, after_minute) = (this_minute - 6 * 60_000, this_minute - 5 * 60_000);
    let before: Vec<Value> = (0..30).map(|i| h100_sample("GPU-before", before_minute + i * 1000, 60.0, 10.0)).collect();
    ingest(other, "node-th", before).await;
    fleetlens_tests::wait_rollups_written(&db.url, i64::MAX, Duration::from_secs(30)).await;
    assert_eq!(minute_state("GPU-before").await, vec![Some("hollow".to_string())]);
    // Cached on the leader from now on (`range=` summaries are kept 10 s).
    let hours = summary_hours(leader_server).await;
    assert!(hours["hollow"] > 0.0 && hours.get("active").copied().unwrap_or(0.0) == 0.0, "{hours:?}");

    let (status, v) = call(
        other,
        reqwest::Method::PUT,
        "/api/v1/settings/thresholds",
        Some(json!({"hollow_max_sm_util_ratio": 0.1})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let put_at = Instant::now();
    let after: Vec<Value> = (0..30).map(|i| h100_sample("GPU-after", after_minute + i * 1000, 60.0, 10.0)).collect();
    ingest(other, "node-th", after).await;
    // The leader's summary: its cached copy is dropped and the minute not written yet is
    // classified with the new thresholds, within the documented second (plus the requests).
    let active = wait_for("the leader's summary with the new thresholds", Duration::from_secs(5), || async {
        let hours = summary_hours(leader_server).await;
        (hours.get("active").copied().unwrap_or(0.0) > 0.0).then_some(put_at.elapsed())
    })
    .await;
    assert!(active < Duration::from_millis(2500), "seen {active:?} after the PUT");
    // The leader's timeline of the minute written before the PUT: classified with the new
    // thresholds on read (its stored credit stays what it was written with).
    let (status, v) = call(
        leader_server,
        reqwest::Method::GET,
        &format!("/api/v1/gpus/GPU-before/states?from={}&to={}&window_s=60", before_minute, after_minute),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v[0]["state"], "active", "{v}");
    fleetlens_tests::wait_rollups_written(&db.url, i64::MAX, Duration::from_secs(30)).await;
    assert_eq!(
        minute_state("GPU-after").await,
        vec![Some("active".to_string())],
        "the PUT on the other replica applies"
    );
}

/// Hours per workload state of the last hour's fleet summary `server` serves.
async fn summary_hours(server: &TestServer) -> HashMap<String, f64> {
    let (status, v) = call(server, reqwest::Method::GET, "/api/v1/fleet/summary?range=1h", None).await;
    assert_eq!(status, 200, "{v}");
    serde_json::from_value(v["hours_by_state"].clone()).unwrap()
}
