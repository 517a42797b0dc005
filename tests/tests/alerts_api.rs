//! Black box: alerting through the real server binary, with real HTTP receivers on 127.0.0.1
//! (a small axum app that records what it gets), the real agent replaying the recorded H200
//! trace, and a real Alertmanager where it is installed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use fleetlens_tests::http::{call_at, metric, now_ms, post_bytes, serve_on, wait_for};
use fleetlens_tests::{
    Backend, TestDatabase, TestServer, agent_command, fixture_lines, h100_sample, replay_fixture_once,
    validate_slack_messages,
};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    fixture_replay_fires_hollow_for_one_block_only,
    a_failing_receiver_gets_one_message_per_transition,
    a_restart_before_delivery_delivers_exactly_once,
    silences_hold_back_notifications_but_alerts_are_recorded,
    an_eight_gpu_hang_sends_one_grouped_message_per_channel,
    a_digest_channel_gets_one_digest_at_its_time_and_nothing_between,
    the_engine_judges_its_own_batches_from_memory_and_each_sample_once,
    a_pending_alert_text_follows_the_gpu_once_a_minute,
);

/// Fast retries so the tests do not wait for the production backoff.
const FAST: &[&str] = &["--alert-retry-base", "200ms", "--alert-eval-interval", "200ms"];

// ---------------------------------------------------------------------------------------------
// A recording HTTP receiver.

#[derive(Debug, Clone)]
struct Received {
    path: String,
    body: Value,
    status: u16,
    at: Instant,
    message_id: Option<String>,
}

#[derive(Default)]
struct ReceiverState {
    requests: Vec<Received>,
    /// Answer 500 to this many requests first.
    fail_first: usize,
}

#[derive(Clone)]
struct Receiver {
    url: String,
    state: Arc<Mutex<ReceiverState>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    async fn start(fail_first: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener, fail_first)
    }

    fn start_on(listener: tokio::net::TcpListener, fail_first: usize) -> Receiver {
        let addr: SocketAddr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(ReceiverState { requests: vec![], fail_first }));
        let task = serve_on(listener, Router::new().fallback(record).with_state(state.clone()));
        Receiver { url: format!("http://{addr}"), state, task: Arc::new(task) }
    }

    fn all(&self) -> Vec<Received> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Requests answered 2xx.
    fn accepted(&self) -> Vec<Received> {
        self.all().into_iter().filter(|r| r.status < 300).collect()
    }

    fn stop(&self) {
        self.task.abort();
    }
}

async fn record(
    State(state): State<Arc<Mutex<ReceiverState>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let mut s = state.lock().unwrap();
    let status = if s.requests.len() < s.fail_first { 500 } else { 200 };
    s.requests.push(Received {
        path: uri.path().to_string(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        status,
        at: Instant::now(),
        message_id: headers.get("x-fleetlens-message-id").and_then(|v| v.to_str().ok()).map(str::to_string),
    });
    StatusCode::from_u16(status).unwrap()
}

// ---------------------------------------------------------------------------------------------
// API helpers.

struct Api {
    base: String,
}

impl Api {
    fn new(server: &TestServer) -> Api {
        Api { base: server.base_url.clone() }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        call_at(&self.base, method, path, body).await
    }

    async fn get(&self, path: &str) -> Value {
        let (status, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    async fn channel(&self, name: &str, kind: &str, url: &str) -> i64 {
        let (status, c) =
            self.post("/api/v1/notification-channels", json!({"name": name, "kind": kind, "url": url})).await;
        assert_eq!(status, 201, "{c}");
        c["id"].as_i64().unwrap()
    }

    async fn rule(&self, body: Value) -> i64 {
        let (status, r) = self.post("/api/v1/alert-rules", body).await;
        assert_eq!(status, 201, "{r}");
        r["id"].as_i64().unwrap()
    }

    /// The id of the shipped rule with this key.
    async fn builtin(&self, key: &str) -> i64 {
        let rules = self.get("/api/v1/alert-rules").await;
        rules["rules"].as_array().unwrap().iter().find(|r| r["builtin"] == key).unwrap()["id"].as_i64().unwrap()
    }

    async fn alerts(&self, query: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/alerts?{query}")).await["alerts"].as_array().unwrap().clone()
    }

    async fn ingest(&self, host: &str, samples: Vec<Value>) {
        let (status, v) = self.post("/api/v1/ingest", json!({"host": host, "samples": samples})).await;
        assert_eq!(status, 200, "{v}");
    }
}

/// One synthetic H100 sample, one process holding its memory.
fn sample(uuid: &str, ts: i64, util: f64, smact: f64) -> Value {
    let mut s = h100_sample(uuid, ts, util, smact);
    s["processes"] = json!([{"pid": 7, "used_bytes": 8i64 << 30}]);
    s
}

/// `n` 1-Hz samples ending just before now: hollow (util 100, SMACT 2) for the first
/// `hollow` of them, healthy after.
fn hollow_then_healthy(uuid: &str, n: i64, hollow: i64) -> Vec<Value> {
    let start = now_ms() - (n + 1) * 1000;
    (0..n)
        .map(|i| {
            if i < hollow {
                sample(uuid, start + i * 1000, 100.0, 2.0)
            } else {
                sample(uuid, start + i * 1000, 100.0, 95.0)
            }
        })
        .collect()
}

/// The phases of the fixture with their timestamps, in order.
fn phases() -> Vec<(String, Vec<i64>)> {
    let mut phases: Vec<(String, Vec<i64>)> = Vec::new();
    for l in fixture_lines() {
        let (phase, ts) = (l["phase"].as_str().unwrap().to_string(), l["ts_ms"].as_i64().unwrap());
        match phases.last_mut() {
            Some((p, list)) if *p == phase => list.push(ts),
            _ => phases.push((phase, vec![ts])),
        }
    }
    phases
}

fn phase_range(phases: &[(String, Vec<i64>)], name: &str) -> (i64, i64) {
    let i = phases.iter().position(|(p, _)| p == name).unwrap();
    let end = phases.get(i + 1).map_or(i64::MAX, |(_, ts)| ts[0]);
    (phases[i].1[0], end)
}

// ---------------------------------------------------------------------------------------------
// Tests on both backends.

async fn fixture_replay_fires_hollow_for_one_block_only(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // The recorded trace keeps its timestamps, however old it is by now: look back far enough.
    let args = [FAST, &["--alert-lookback", "36500d", "--alert-offline-horizon", "36500d"]].concat();
    let server = TestServer::spawn(&db.url, &args);
    let api = Api::new(&server);
    let slack = Receiver::start(0).await;
    let hook = Receiver::start(0).await;
    let slack_id = api.channel("ops-slack", "slack", &format!("{}/services/T0/B0/x", slack.url)).await;
    let hook_id = api.channel("ops-hook", "webhook", &format!("{}/hook", hook.url)).await;

    // The shipped rules, edited: 3-s for-durations, no flap damping, our channels.
    let hollow = api.builtin("busy_but_hollow").await;
    let (status, r) = api
        .put(
            &format!("/api/v1/alert-rules/{hollow}"),
            json!({"for_s": 3, "keep_firing_for_s": 0, "channels": [slack_id]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["condition"], "gpu_util_pct >= 80 && sm_active_pct < 30");
    let ineff = api.builtin("inefficient").await;
    let (status, _) = api
        .put(
            &format!("/api/v1/alert-rules/{ineff}"),
            json!({"for_s": 3, "keep_firing_for_s": 0, "channels": [hook_id]}),
        )
        .await;
    assert_eq!(status, 200);
    // one_block reads as stalled, whose pending alert would hold hollow back (inhibition,
    // tested with the 8-GPU hang below), and the old trace is offline by the wall clock, which
    // holds back everything else: here the rules are judged on their own.
    for key in ["stalled", "agent_offline"] {
        let id = api.builtin(key).await;
        let (status, r) = api.put(&format!("/api/v1/alert-rules/{id}"), json!({"inhibits": []})).await;
        assert_eq!(status, 200, "{r}");
    }

    replay_fixture_once(&server, "nvml-h200-phases.jsonl");

    let phases = phases();
    let (ob_start, ob_end) = phase_range(&phases, "one_block");
    let (tb_start, tb_end) = phase_range(&phases, "tiny_batch1");

    // Hollow: one instance, fired 3 s into one_block, resolved when one_block ended.
    let hollow_alerts = wait_for("the hollow alert to resolve", Duration::from_secs(30), || async {
        let list = api.alerts(&format!("rule_id={hollow}")).await;
        list.iter().all(|a| a["status"] == "resolved").then_some(list).filter(|l| !l.is_empty())
    })
    .await;
    assert_eq!(hollow_alerts.len(), 1, "hollow fires for one_block only (not memcopy, matmul, …): {hollow_alerts:?}");
    let a = &hollow_alerts[0];
    let (active, fired, resolved) = (
        a["active_since_ms"].as_i64().unwrap(),
        a["fired_at_ms"].as_i64().unwrap(),
        a["resolved_at_ms"].as_i64().unwrap(),
    );
    assert_eq!(active, ob_start);
    assert!(fired >= ob_start + 3000 && fired < ob_start + 4100, "fired {} ms into one_block", fired - ob_start);
    assert_eq!(resolved, ob_end, "resolved at the first sample after one_block");
    assert_eq!(a["gpu"], "GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276");
    assert_eq!(a["host"], "gpu-node-01");
    assert_eq!(a["state"], "stalled", "one_block reads as stalled (power 18 % of the limit)");
    assert!(
        a["values"].as_array().unwrap().iter().any(|v| v["field"] == "sm_active_pct" && v["value"] == "0.76"),
        "{a}"
    );
    assert!(a["summary"].as_str().unwrap().contains("100 % busy"), "{}", a["summary"]);

    // General inefficiency: fires for the batch-1 phase.
    let ineff_alerts = wait_for("the inefficiency alerts to resolve", Duration::from_secs(30), || async {
        let list = api.alerts(&format!("rule_id={ineff}")).await;
        list.iter().all(|a| a["status"] == "resolved").then_some(list).filter(|l| !l.is_empty())
    })
    .await;
    let in_batch1 = ineff_alerts.iter().filter(|a| {
        let f = a["fired_at_ms"].as_i64().unwrap();
        (tb_start..tb_end).contains(&f)
    });
    assert_eq!(in_batch1.count(), 1, "{ineff_alerts:?}");
    for a in &ineff_alerts {
        let f = a["fired_at_ms"].as_i64().unwrap();
        assert!(
            (ob_start..ob_end).contains(&f) || (tb_start..tb_end).contains(&f),
            "fired outside one_block/tiny_batch1: {a}"
        );
    }

    // Slack: exactly one message per transition, with the right blocks.
    let msgs = wait_for("two Slack messages", Duration::from_secs(20), || async {
        let m = slack.accepted();
        (m.len() >= 2).then_some(m)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let msgs_after = slack.accepted();
    assert_eq!(msgs_after.len(), 2, "one message per transition: {msgs_after:?}");
    assert!(msgs.iter().all(|m| m.path == "/services/T0/B0/x"));
    let firing = &msgs[0].body;
    let resolved_msg = &msgs[1].body;
    let header = firing["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(header.contains("Busy but hollow") && header.contains("warning"), "{header}");
    assert!(resolved_msg["blocks"][0]["text"]["text"].as_str().unwrap().starts_with("✅ Resolved"));
    let text = firing.to_string();
    for needle in [
        "*GPU*",
        "GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276",
        "*Host*\\ngpu-node-01",
        "`sm_active_pct` = 0.76",
        "*Advice:* bigger batches, CUDA graphs, kernel fusion, or a smaller GPU / collocation",
        "/gpus/GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276",
        "3 s (since",
    ] {
        assert!(text.contains(needle), "firing message lacks {needle:?}: {text}");
    }
    assert!(firing["text"].as_str().unwrap().starts_with("[FIRING] Busy but hollow"));
    // Slack's pace: at most one message per second per webhook.
    assert!(msgs[1].at.duration_since(msgs[0].at) >= Duration::from_millis(900), "rate limit");
    validate_slack_messages(&msgs.iter().map(|m| m.body.clone()).collect::<Vec<_>>());

    // The generic webhook: Alertmanager v4 bodies, firing then resolved, one fingerprint each.
    let hooks = wait_for("webhook messages", Duration::from_secs(20), || async {
        let m = hook.accepted();
        (m.len() >= 2 * ineff_alerts.len()).then_some(m)
    })
    .await;
    assert_eq!(hooks.len(), 2 * ineff_alerts.len());
    for pair in hooks.chunks(2) {
        let (f, r) = (&pair[0].body, &pair[1].body);
        assert_eq!(
            (f["version"].as_str(), f["status"].as_str(), r["status"].as_str()),
            (Some("4"), Some("firing"), Some("resolved"))
        );
        assert_eq!(f["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
        assert_ne!(r["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(f["alerts"][0]["fingerprint"], r["alerts"][0]["fingerprint"]);
        assert_eq!(f["groupKey"], r["groupKey"]);
        assert_eq!(f["commonLabels"]["alertname"], "Inefficient GPU");
        assert_eq!(f["receiver"], "ops-hook");
    }

    // The delivery log, through the API.
    let log = api.get(&format!("/api/v1/notification-channels/{slack_id}/deliveries")).await;
    let outcomes: Vec<&str> =
        log["deliveries"].as_array().unwrap().iter().map(|d| d["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["delivered", "delivered"]);
    let detail = api.get(&format!("/api/v1/alerts/{}", a["id"])).await;
    let kinds: Vec<&str> = detail["messages"].as_array().unwrap().iter().map(|m| m["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["firing", "resolved"]);

    // The trace is old: back-fill, not an outage, so the shipped offline rule leaves the GPU
    // alone however long ago the trace ended (docs/ALERTING.md, "Back-fill").
    let offline = api.builtin("agent_offline").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let list = api.alerts(&format!("rule_id={offline}")).await;
    assert!(list.is_empty(), "a replayed trace does not fire Agent offline: {list:?}");
}

async fn a_failing_receiver_gets_one_message_per_transition(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rx = Receiver::start(3).await;
    let ch = api.channel("flaky", "webhook", &format!("{}/hook", rx.url)).await;
    let rule = api
        .rule(json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2, "channels": [ch]}))
        .await;
    api.ingest("node-1", hollow_then_healthy("GPU-flaky", 8, 4)).await;

    // 500, 500, 500, then 200: the firing message on its 4th attempt, then resolved once.
    let got = wait_for("both messages accepted", Duration::from_secs(30), || async {
        let a = rx.accepted();
        (a.len() >= 2).then_some(a)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = rx.all();
    assert_eq!(rx.accepted().len(), 2, "exactly one accepted message per transition: {all:?}");
    assert_eq!(all.len(), 5, "3 failures + 2 deliveries");
    assert_eq!((got[0].body["status"].as_str(), got[1].body["status"].as_str()), (Some("firing"), Some("resolved")));
    let firing_id = &all[0].message_id;
    assert!(all[..4].iter().all(|r| &r.message_id == firing_id), "the retries are the same message");
    // Backoff grows: 200 ms, 400 ms, 800 ms (±10 %).
    let gaps: Vec<u128> = all[..4].windows(2).map(|w| w[1].at.duration_since(w[0].at).as_millis()).collect();
    assert!(gaps[0] >= 150 && gaps[1] >= 330 && gaps[2] >= 680, "{gaps:?}");

    let alerts = api.alerts(&format!("rule_id={rule}")).await;
    assert_eq!(alerts.len(), 1);
    let log = api.get(&format!("/api/v1/notification-deliveries?alert_id={}", alerts[0]["id"])).await;
    let mut outcomes: Vec<(String, i64)> = log["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["outcome"].as_str().unwrap().to_string(), d["attempt"].as_i64().unwrap()))
        .collect();
    outcomes.reverse();
    let expected: Vec<(String, i64)> = [("retry", 1), ("retry", 2), ("retry", 3), ("delivered", 4), ("delivered", 1)]
        .map(|(o, a)| (o.to_string(), a))
        .to_vec();
    assert_eq!(outcomes, expected);
    assert_eq!(log["deliveries"][4]["status_code"], 500);
}

/// The engine's samples by source, from this replica's `/metrics`: (database, memory).
async fn engine_feed(server: &TestServer) -> (u64, u64) {
    let count = |source: &'static str| async move {
        metric(server, &format!("fleetlens_alert_engine_samples_total{{source=\"{source}\"}}")).await as u64
    };
    (count("database").await, count("memory").await)
}

/// The batches a replica stored are judged from memory, from a new GPU's first; a resend and a
/// late sample are judged as the database read would (not at all), a batch that fills in a
/// stored sample sends the engine to the database, nothing is judged twice, and the alert is the
/// one the database read gives.
async fn the_engine_judges_its_own_batches_from_memory_and_each_sample_once(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rule = api
        .rule(json!({"name": "hollow 3s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 3, "keep_firing_for_s": 0}))
        .await;
    // Batches are handed to the engine once it runs (here: after its first cycle).
    wait_for("the alert engine to run", Duration::from_secs(30), || async {
        let health = api.get("/healthz").await;
        (health["jobs"]["alert_engine"]["runs"].as_u64() >= Some(1)).then_some(())
    })
    .await;
    let samples = hollow_then_healthy("GPU-mem", 60, 30);
    let judged = |n: u64| {
        let server = &server;
        async move {
            wait_for("the engine to judge the batch", Duration::from_secs(30), || async move {
                let (db, mem) = engine_feed(server).await;
                (db + mem >= n).then_some((db, mem))
            })
            .await
        }
    };
    for (i, chunk) in samples.chunks(10).enumerate() {
        api.ingest("node-1", chunk.to_vec()).await;
        let n = 10 + 10 * i as u64;
        assert_eq!(judged(n).await, (0, n), "batch {} from memory", i + 1);
    }
    // A resend, and a sample older than the newest judged (stored, never judged: as the
    // database read from the cursor skips it).
    api.ingest("node-1", samples[50..].to_vec()).await;
    let late = sample("GPU-mem", samples[0]["ts_ms"].as_i64().unwrap() - 500, 100.0, 2.0);
    api.ingest("node-1", vec![late]).await;
    // A new sample after them is judged from memory: nothing before it was judged twice. It
    // lacks DRAM activity, which the next batch fills in.
    let last_ts = samples[59]["ts_ms"].as_i64().unwrap();
    let whole = sample("GPU-mem", last_ts + 1000, 100.0, 95.0);
    let mut partial = whole.clone();
    partial.as_object_mut().unwrap().remove("dram_active_pct");
    api.ingest("node-1", vec![partial]).await;
    assert_eq!(judged(61).await, (0, 61));
    // A batch that fills in a stored sample: what is stored is not what it holds, so the
    // engine reads the GPU from the database (its new sample only: the filled one is judged).
    api.ingest("node-1", vec![whole, sample("GPU-mem", last_ts + 2000, 100.0, 95.0)]).await;
    assert_eq!(judged(62).await, (1, 61));

    // Hollow for samples 0-29: one alert, active from the first sample, resolved at the 31st.
    let alerts = wait_for("the hollow alert to resolve", Duration::from_secs(30), || async {
        let list = api.alerts(&format!("rule_id={rule}")).await;
        (list.len() == 1 && list[0]["status"] == "resolved").then_some(list)
    })
    .await;
    assert_eq!(alerts[0]["active_since_ms"], samples[0]["ts_ms"]);
    assert_eq!(alerts[0]["resolved_at_ms"], samples[30]["ts_ms"]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(engine_feed(&server).await, (1, 61), "no sample judged twice");
}

async fn a_restart_before_delivery_delivers_exactly_once(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // A port for the receiver, which is down at first (connections refused).
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = reserved.local_addr().unwrap().port();
    drop(reserved);
    let url = format!("http://127.0.0.1:{port}/hook");

    let mut server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let ch = api.channel("later", "webhook", &url).await;
    let rule = api
        .rule(json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2, "channels": [ch]}))
        .await;
    // Hollow and still hollow: it fires and stays firing.
    let start = now_ms() - 6000;
    api.ingest("node-1", (0..5).map(|i| sample("GPU-r", start + i * 1000, 100.0, 2.0)).collect()).await;
    let alert = wait_for("the alert to fire", Duration::from_secs(20), || async {
        api.alerts(&format!("rule_id={rule}&status=firing")).await.into_iter().next()
    })
    .await;
    // The message is in the outbox and failing (nobody listens).
    wait_for("a failed attempt", Duration::from_secs(20), || async {
        let d = api.get(&format!("/api/v1/alerts/{}", alert["id"])).await;
        (d["messages"][0]["attempts"].as_i64().unwrap_or(0) >= 1).then_some(())
    })
    .await;

    server.kill();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let rx = Receiver::start_on(listener, 0);
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let got = wait_for("the delivery after the restart", Duration::from_secs(30), || async {
        let a = rx.accepted();
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(got[0].body["status"], "firing");
    // More samples (still hollow), and another restart: nothing is fired or sent again.
    let more = now_ms() - 1000;
    api.ingest("node-1", vec![sample("GPU-r", more, 100.0, 2.0)]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(server);
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    // A probe rule shows when this server's engine runs (after the killed one's lease ran out).
    let probe = api.rule(json!({"name": "probe", "condition": "gpu_util_pct >= 80", "for_s": 0})).await;
    wait_for("the new engine", Duration::from_secs(30), || async {
        api.ingest("node-1", vec![sample("GPU-r", now_ms() - 100, 100.0, 2.0)]).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        (!api.alerts(&format!("rule_id={probe}")).await.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rx.all().len(), 1, "delivered exactly once across two restarts");
    let alerts = api.alerts(&format!("rule_id={rule}")).await;
    assert_eq!(alerts.len(), 1, "the engine did not fire again after restarting");
    assert_eq!(alerts[0]["status"], "firing");
    rx.stop();
}

async fn silences_hold_back_notifications_but_alerts_are_recorded(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rx = Receiver::start(0).await;
    let ch = api.channel("muted", "slack", &format!("{}/slack", rx.url)).await;
    let rule = api
        .rule(json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2,
                     "severity": "critical", "channels": [ch]}))
        .await;
    // Empty matchers are refused; a silence of host node-s is accepted.
    let (status, e) = api.post("/api/v1/silences", json!({"matchers": {}, "ends_at": now_ms() + 60_000})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("matchers")));
    // A time is RFC 3339 text or whole milliseconds: a fraction does not parse, text that is no
    // time is refused naming the field.
    let host = json!({"host": "node-s"});
    let (status, e) = api.post("/api/v1/silences", json!({"matchers": host, "ends_at": 1.5e12})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("ends_at")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap_or_default().contains("whole Unix milliseconds"), "{e}");
    let (status, e) = api.post("/api/v1/silences", json!({"matchers": host, "ends_at": "soon"})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("ends_at")), "{e}");
    let ends = now_ms() + 600_000;
    let (status, s) = api
        .post(
            "/api/v1/silences",
            json!({"matchers": {"host": "node-s", "rule": "hollow 2s"}, "ends_at": ends, "comment": "maintenance"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    assert_eq!(s["active"], true);

    api.ingest("node-s", hollow_then_healthy("GPU-s1", 8, 4)).await;
    // Another host is not silenced.
    api.ingest("node-t", hollow_then_healthy("GPU-t1", 8, 4)).await;
    let list = wait_for("both alerts resolved", Duration::from_secs(20), || async {
        let l = api.alerts(&format!("rule_id={rule}&status=resolved")).await;
        (l.len() == 2).then_some(l)
    })
    .await;
    let silenced = list.iter().find(|a| a["host"] == "node-s").unwrap();
    let loud = list.iter().find(|a| a["host"] == "node-t").unwrap();
    assert_eq!((silenced["silenced"].as_bool(), silenced["silenced_by"].as_i64()), (Some(true), s["id"].as_i64()));
    assert_eq!(silenced["notified"], false);
    assert_eq!(loud["silenced"], false);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let got = rx.accepted();
    assert_eq!(got.len(), 2, "only the unsilenced alert's firing and resolved: {got:?}");
    assert!(got.iter().all(|m| m.body.to_string().contains("GPU-t1")));
    let d = api.get(&format!("/api/v1/alerts/{}", silenced["id"])).await;
    let outcomes: Vec<&str> =
        d["deliveries"].as_array().unwrap().iter().map(|x| x["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["suppressed", "suppressed"], "{d}");
    assert!(d["messages"].as_array().unwrap().is_empty());
    let silences = api.get("/api/v1/silences").await;
    assert_eq!(silences["silences"][0]["comment"], "maintenance");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silence_over_a_firing_alert_shows_on_it_until_it_ends() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rx = Receiver::start(0).await;
    let ch = api.channel("loud", "webhook", &format!("{}/hook", rx.url)).await;
    let rule = api
        .rule(json!({"name": "hollow 1s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 1,
                     "channels": [ch]}))
        .await;
    // Hollow and nothing after: the alert fires and stays firing.
    api.ingest("node-f", hollow_then_healthy("GPU-f1", 6, 6)).await;
    let fired = wait_for("the alert notified", Duration::from_secs(20), || async {
        let l = api.alerts(&format!("rule_id={rule}&status=firing")).await;
        l.into_iter().find(|a| a["notified"] == true)
    })
    .await;
    assert_eq!(fired["silenced"], false);
    let (status, s) =
        api.post("/api/v1/silences", json!({"matchers": {"host": "node-f"}, "ends_at": now_ms() + 3_000})).await;
    assert_eq!(status, 201, "{s}");
    let id = fired["id"].as_i64().unwrap();
    let silenced = wait_for("the firing alert marked silenced", Duration::from_secs(10), || async {
        let a = api.get(&format!("/api/v1/alerts/{id}")).await;
        (a["silenced"] == true).then_some(a)
    })
    .await;
    assert_eq!(silenced["silenced_by"], s["id"]);
    assert_eq!(silenced["status"], "firing");
    wait_for("the mark gone when the silence ended", Duration::from_secs(15), || async {
        let a = api.get(&format!("/api/v1/alerts/{id}")).await;
        (a["silenced"] == false && a["status"] == "firing").then_some(())
    })
    .await;
    assert_eq!(rx.accepted().len(), 1, "one firing message, nothing for the silence");
}

// ---------------------------------------------------------------------------------------------
// Tests that do not depend on the backend (SQLite).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_validation_errors_point_at_the_condition() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, &[]);
    let api = Api::new(&server);
    let (status, e) = api
        .post(
            "/api/v1/alert-rules",
            json!({"name": "typo", "condition": "gpu_util_pct >= 80 && sm_actve_pct < 30", "for_s": 60}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert_eq!(e["error"]["code"], "validation_failed");
    assert_eq!(e["error"]["field"], "condition");
    assert_eq!((e["error"]["position"].as_i64(), e["error"]["column"].as_i64()), (Some(22), Some(23)));
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("unknown field `sm_actve_pct`") && msg.contains("did you mean `sm_active_pct`"), "{msg}");
    assert!(msg.ends_with(&format!("\n{}^", " ".repeat(22))), "{msg:?}");
    for (condition, position) in
        [("gpu_util_pct >=", 15), ("state == busy", 9), ("(gpu_util_pct > 1", 0), ("gpu_util_pct = 1", 13)]
    {
        let (status, e) = api.post("/api/v1/alert-rules/check", json!({"condition": condition})).await;
        assert_eq!((status, e["error"]["position"].as_i64()), (422, Some(position)), "{condition}: {e}");
    }
    let (status, ok) = api
        .post("/api/v1/alert-rules/check", json!({"condition": "state == stalled && duration_in_state_s > 60"}))
        .await;
    assert_eq!((status, ok["fields"].clone()), (200, json!(["state", "duration_in_state_s"])));

    // Other fields are checked too; names are unique; channels must exist. A severity that is
    // none of the names does not parse: 400, naming the field and the accepted names.
    let (status, e) =
        api.post("/api/v1/alert-rules", json!({"name": "x", "condition": "true", "severity": "urgent"})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str(), e["error"]["field"].as_str()),
        (400, Some("invalid_json"), Some("severity"))
    );
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`urgent`") && message.contains("`info`, `warning`, `critical`"), "{e}");
    let (status, e) =
        api.post("/api/v1/alert-rules", json!({"name": "x", "condition": "true", "channels": [99]})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("channels")));
    let (status, e) = api.post("/api/v1/alert-rules", json!({"name": "x", "condition": "true", "bogus": 1})).await;
    assert_eq!(status, 400, "{e}");
    // A body that does not say it is JSON is refused like every other JSON body of the API.
    let body = json!({"name": "plain", "condition": "true"}).to_string();
    let plain = post_bytes(&server, "/api/v1/alert-rules", &[("content-type", "text/plain")], body).await;
    assert_eq!(plain.status().as_u16(), 415);
    let e: Value = plain.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unsupported_media_type", "{e}");
    let (status, e) =
        api.post("/api/v1/alert-rules", json!({"name": "x", "condition": "true", "inhibits": ["no such rule"]})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("inhibits")), "{e}");
    let (status, e) =
        api.post("/api/v1/alert-rules", json!({"name": "x", "condition": "true", "inhibits": ["state:busy"]})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("inhibits")), "{e}");
    let (status, e) = api
        .post(
            "/api/v1/alert-rules",
            json!({"name": "x", "condition": "true", "inhibits": ["*"], "inhibit_scope": "rack"}),
        )
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str(), e["error"]["field"].as_str()),
        (400, Some("invalid_json"), Some("inhibit_scope")),
        "{e}"
    );
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`rack`") && message.contains("`gpu`, `host`, `job`"), "{e}");
    let (status, r) = api
        .post(
            "/api/v1/alert-rules",
            json!({"name": "node down", "condition": "true", "inhibits": ["stalled", "state:idle"], "inhibit_scope": "host"}),
        )
        .await;
    assert_eq!(
        (status, r["inhibits"].clone(), r["inhibit_scope"].clone()),
        (201, json!(["stalled", "state:idle"]), json!("host"))
    );
    let (status, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/alert-rules/{}", r["id"]), None).await;
    assert_eq!(status, 204);
    let (status, e) = api
        .post(
            "/api/v1/notification-channels",
            json!({"name": "g", "kind": "slack", "url": "http://x", "group_by": ["a-b"]}),
        )
        .await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("group_by")), "{e}");
    let (status, _) = api.post("/api/v1/alert-rules", json!({"name": "Busy but hollow", "condition": "true"})).await;
    assert_eq!(status, 409, "the shipped rule has that name");
    let (status, e) =
        api.post("/api/v1/notification-channels", json!({"name": "x", "kind": "pager", "url": "http://x"})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str(), e["error"]["field"].as_str()),
        (400, Some("invalid_json"), Some("kind"))
    );
    assert!(e["error"]["message"].as_str().unwrap_or_default().contains("`slack`, `webhook`, `alertmanager`"), "{e}");
    let (status, e) =
        api.post("/api/v1/notification-channels", json!({"name": "x", "kind": "slack", "url": "ftp://x"})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("url")));

    // The shipped rules, all seven, editable and deletable (and a deleted one stays deleted).
    let rules = api.get("/api/v1/alert-rules").await;
    let keys: Vec<&str> = rules["rules"].as_array().unwrap().iter().filter_map(|r| r["builtin"].as_str()).collect();
    assert_eq!(
        keys,
        ["busy_but_hollow", "inefficient", "stalled", "idle_held", "agent_offline", "throttling", "xid_errors"]
    );
    let xid = api.builtin("xid_errors").await;
    let (status, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/alert-rules/{xid}"), None).await;
    assert_eq!(status, 204);
    assert_eq!(api.get("/api/v1/alert-rules").await["rules"].as_array().unwrap().len(), 6);
    let fields = api.get("/api/v1/alert-rules/fields").await;
    assert!(fields["fields"].as_array().unwrap().iter().any(|f| f["name"] == "efficiency" && f["type"] == "number"));

    // A read-only key reads rules but cannot write them.
    let (status, _) = reqwest::Client::new()
        .post(server.url("/api/v1/alert-rules"))
        .json(&json!({"name": "y", "condition": "true"}))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_message_and_latency_from_for_duration_to_receiver() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, &[]);
    let api = Api::new(&server);
    let rx = Receiver::start(0).await;
    let ch = api.channel("bench", "slack", &format!("{}/slack", rx.url)).await;

    // "Send test message".
    let (status, t) = api.post(&format!("/api/v1/notification-channels/{ch}/test"), json!({})).await;
    assert_eq!((status, t["delivered"].as_bool()), (200, Some(true)), "{t}");
    assert!(rx.accepted()[0].body["text"].as_str().unwrap().contains("test message"));
    validate_slack_messages(&[rx.accepted()[0].body.clone()]);
    let down = api.channel("down", "webhook", "http://127.0.0.1:9/nothing").await;
    let (status, t) = api.post(&format!("/api/v1/notification-channels/{down}/test"), json!({})).await;
    assert_eq!((status, t["delivered"].as_bool()), (202, Some(false)), "{t}");
    assert!(t["error"].as_str().unwrap().contains("error"), "{t}");

    // Live samples every 200 ms; the rule's for-duration (2 s) elapses at a known sample.
    // Latency = from the ingest of that sample to the receiver's POST (default settings).
    let rule = api
        .rule(json!({"name": "hollow live", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2, "channels": [ch]}))
        .await;
    tokio::time::sleep(Duration::from_millis(1200)).await; // the engine sees the new rule
    let first = now_ms();
    let mut latencies = Vec::new();
    for round in 0..3 {
        let uuid = format!("GPU-live-{round}");
        let before = rx.accepted().len();
        let mut crossed: Option<Instant> = None;
        let mut t0 = None;
        loop {
            let ts = now_ms();
            let t0 = *t0.get_or_insert(ts);
            api.ingest("node-live", vec![sample(&uuid, ts, 100.0, 2.0)]).await;
            if crossed.is_none() && ts - t0 >= 2000 {
                crossed = Some(Instant::now());
            }
            if rx.accepted().len() > before {
                break;
            }
            assert!(now_ms() - t0 < 15_000, "no alert within 15 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let got = rx.accepted()[before].at;
        let crossed = crossed.expect("the for-duration elapsed");
        latencies.push(got.saturating_duration_since(crossed).as_millis());
        // Healthy again, so the next round starts clean (its resolved message is in before the
        // next round counts, however busy the machine is).
        api.ingest("node-live", vec![sample(&uuid, now_ms(), 100.0, 95.0)]).await;
        wait_for("the resolved message", Duration::from_secs(15), || async {
            (rx.accepted().len() >= before + 2).then_some(())
        })
        .await;
    }
    eprintln!("alert latency, for-duration elapsed → receiver POST: {latencies:?} ms");
    assert!(latencies.iter().all(|l| *l <= 2000), "goal ≤ 2 s: {latencies:?}");
    assert!(api.alerts(&format!("rule_id={rule}")).await.len() >= 3);
    assert!(now_ms() - first < 60_000);
}

/// A pending alert's summary and values are those of the GPU while it waits out `for`, not
/// of its first sample (a pending "Offline for 0.3 s" after minutes offline): refreshed once
/// a minute of samples at most, and stored.
async fn a_pending_alert_text_follows_the_gpu_once_a_minute(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rule = api
        .rule(json!({"name": "hollow 1h", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 3600,
                     "description": "SM activity {sm_active_pct} %"}))
        .await;
    let t0 = now_ms() - 120_000;
    let smact = |i: i64| if i < 30 { 2.0 } else { 7.0 };
    let batch =
        |range: std::ops::Range<i64>| range.map(|i| sample("GPU-text", t0 + i * 1000, 100.0, smact(i))).collect();
    let judged = |n: u64| {
        let (server, api) = (&server, &api);
        async move {
            let (database, memory) = engine_feed(server).await;
            if database + memory < n {
                return None;
            }
            api.alerts(&format!("rule_id={rule}&status=pending")).await.into_iter().next()
        }
    };
    api.ingest("node-t", batch(0..45)).await;
    let pending = wait_for("45 samples judged", Duration::from_secs(20), || judged(45)).await;
    assert_eq!(pending["summary"], "SM activity 2 %", "45 s in: still the first minute's text");

    api.ingest("node-t", batch(45..70)).await;
    let refreshed = wait_for("70 samples judged", Duration::from_secs(20), || judged(70)).await;
    assert_eq!(refreshed["id"], pending["id"]);
    assert_eq!(refreshed["active_since_ms"].as_i64(), Some(t0));
    assert_eq!(refreshed["summary"], "SM activity 7 %", "a minute in, the GPU as it is");
    let smact_value = refreshed["values"].as_array().unwrap().iter().find(|v| v["field"] == "sm_active_pct").cloned();
    assert_eq!(smact_value.map(|v| v["value"].clone()), Some(json!("7")), "{refreshed}");
}

/// The engine's state is in the database: a pending alert keeps its start across a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_since_survives_a_restart() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rule = api
        .rule(json!({"name": "hollow 4s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 4}))
        .await;
    let t0 = now_ms() - 10_000;
    api.ingest("node-p", (0..3).map(|i| sample("GPU-p", t0 + i * 1000, 100.0, 2.0)).collect()).await;
    let pending = wait_for("a pending alert", Duration::from_secs(20), || async {
        api.alerts(&format!("rule_id={rule}&status=pending")).await.into_iter().next()
    })
    .await;
    assert_eq!(pending["active_since_ms"].as_i64(), Some(t0));
    server.kill();
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    api.ingest("node-p", (3..6).map(|i| sample("GPU-p", t0 + i * 1000, 100.0, 2.0)).collect()).await;
    let fired = wait_for("the alert to fire", Duration::from_secs(30), || async {
        api.alerts(&format!("rule_id={rule}&status=firing")).await.into_iter().next()
    })
    .await;
    assert_eq!((fired["id"].clone(), fired["active_since_ms"].as_i64()), (pending["id"].clone(), Some(t0)));
    assert_eq!(fired["fired_at_ms"].as_i64(), Some(t0 + 4000), "4 s after the pending start, across the restart");
}

/// Two servers on one PostgreSQL database (replicas behind a load balancer): ingest goes to
/// both, one engine evaluates (a lease), both senders claim from the one outbox, and each
/// transition reaches the receiver once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_send_each_transition_once() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::spawn(&db.url, FAST);
    let b = TestServer::spawn(&db.url, FAST);
    let (api_a, api_b) = (Api::new(&a), Api::new(&b));
    let rx = Receiver::start(0).await;
    let ch = api_a.channel("shared", "webhook", &format!("{}/hook", rx.url)).await;
    api_b
        .rule(json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2, "channels": [ch]}))
        .await;
    for i in 0..8 {
        let api = if i % 2 == 0 { &api_a } else { &api_b };
        api.ingest(&format!("node-{i}"), hollow_then_healthy(&format!("GPU-rep-{i}"), 8, 4)).await;
    }
    wait_for("16 messages", Duration::from_secs(40), || async { (rx.accepted().len() >= 16).then_some(()) }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = rx.accepted();
    assert_eq!(got.len(), 16, "8 GPUs × (firing, resolved), once each");
    let mut seen = std::collections::HashSet::new();
    for m in &got {
        let key = (
            m.body["alerts"][0]["labels"]["gpu"].as_str().unwrap().to_string(),
            m.body["status"].as_str().unwrap().to_string(),
        );
        assert!(seen.insert(key.clone()), "{key:?} twice");
    }
    let ids: std::collections::HashSet<_> = got.iter().map(|m| m.message_id.clone()).collect();
    assert_eq!(ids.len(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_alertmanager_receives_the_alert() {
    let bin = ["/usr/bin/prometheus-alertmanager", "/usr/bin/alertmanager"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else {
        panic!("Alertmanager not installed: `apt-get install -y prometheus-alertmanager` (scripts/test.sh does it)");
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(&config, "route:\n  receiver: 'null'\nreceivers:\n  - name: 'null'\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let am = std::process::Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start alertmanager");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(am);
    let version = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr))
        .unwrap_or_default();
    eprintln!("{}", version.lines().next().unwrap_or(""));
    let am_url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_for("alertmanager ready", Duration::from_secs(20), || async {
        let r = http.get(format!("{am_url}/-/ready")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;

    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let ch = api.channel("am", "alertmanager", &am_url).await;
    let rule = api
        .rule(json!({"name": "hollow am", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2,
                     "severity": "critical", "labels": {"team_route": "gpu"}, "channels": [ch]}))
        .await;
    let start = now_ms() - 6000;
    api.ingest("node-am", (0..5).map(|i| sample("GPU-am", start + i * 1000, 100.0, 2.0)).collect()).await;
    let ours = wait_for("the alert to fire", Duration::from_secs(20), || async {
        api.alerts(&format!("rule_id={rule}&status=firing")).await.into_iter().next()
    })
    .await;
    let theirs = wait_for("the alert in Alertmanager", Duration::from_secs(20), || async {
        let list: Value = http.get(format!("{am_url}/api/v2/alerts")).send().await.ok()?.json().await.ok()?;
        list.as_array()?.iter().find(|a| a["labels"]["alertname"] == "hollow am").cloned()
    })
    .await;
    assert_eq!(theirs["labels"]["gpu"], "GPU-am");
    assert_eq!(theirs["labels"]["host"], "node-am");
    assert_eq!(theirs["labels"]["severity"], "critical");
    assert_eq!(theirs["labels"]["team_route"], "gpu");
    assert_eq!(theirs["status"]["state"], "active");
    assert_eq!(theirs["fingerprint"], ours["fingerprint"], "Fleetlens computes Alertmanager's fingerprint");
    assert!(theirs["annotations"]["summary"].as_str().unwrap().contains("gpu_util_pct = 100"), "{theirs}");
    assert!(theirs["annotations"]["advice"].as_str().is_some());

    // The test message reaches Alertmanager too.
    let (status, t) = api.post(&format!("/api/v1/notification-channels/{ch}/test"), json!({})).await;
    assert_eq!((status, t["delivered"].as_bool()), (200, Some(true)), "{t}");
}

// ---------------------------------------------------------------------------------------------
// Inhibition, grouping and digests (issue 27).

/// A JSONL trace for the agent's `replay:` source: the fixture's samples of `phase` (without the
/// two that straddle the change), cycled over `seconds` 1-Hz samples of 8 GPUs of one host,
/// from `start_ms`; every GPU runs one process of user alice in Slurm job 4242.
fn eight_gpu_trace(phase: &str, start_ms: i64, seconds: i64) -> String {
    let lines: Vec<Value> = fixture_lines().into_iter().filter(|l| l["phase"] == phase).skip(2).collect();
    assert!(!lines.is_empty(), "phase {phase} in the fixture");
    let mut out = String::new();
    for t in 0..seconds {
        for g in 0..8 {
            let mut l = lines[(t as usize) % lines.len()].clone();
            l["ts_ms"] = json!(start_ms + t * 1000);
            l["host"] = json!("node-hang");
            l["gpu_index"] = json!(g);
            l["uuid"] = json!(format!("GPU-hang-{g}"));
            l["processes"] = json!([{"pid": 1000 + g, "used_bytes": 8i64 << 30, "user": "alice",
                "owner": {"user": "alice", "job_id": "4242", "job_user": "alice"}}]);
            out.push_str(&l.to_string());
            out.push('\n');
        }
    }
    out
}

async fn replay(server: &TestServer, trace: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    std::fs::write(&path, trace).unwrap();
    let spool = tempfile::tempdir().unwrap();
    let status = agent_command(server, &format!("replay:{}", path.display()), spool.path())
        .arg("--once")
        .status()
        .expect("run agent");
    assert!(status.success());
}

async fn an_eight_gpu_hang_sends_one_grouped_message_per_channel(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let slack = Receiver::start(0).await;
    let hook = Receiver::start(0).await;
    // Grouped channels wait 2 s for the rest of a group before its first message.
    let mut channels = vec![];
    for (name, kind, url) in
        [("team-slack", "slack", format!("{}/services/T/B/x", slack.url)), ("team-hook", "webhook", hook.url.clone())]
    {
        let (status, c) = api
            .post("/api/v1/notification-channels", json!({"name": name, "kind": kind, "url": url, "group_wait_s": 2}))
            .await;
        assert_eq!(status, 201, "{c}");
        assert_eq!(c["group_by"], json!(["rule", "owner", "host"]), "the default key");
        channels.push(c["id"].as_i64().unwrap());
    }
    // The shipped rules with short for-durations; the shipped inhibitions unchanged.
    let mut ids = std::collections::HashMap::new();
    for (key, for_s) in [("stalled", 6), ("busy_but_hollow", 3), ("inefficient", 3)] {
        let id = api.builtin(key).await;
        let (status, r) = api
            .put(
                &format!("/api/v1/alert-rules/{id}"),
                json!({"for_s": for_s, "keep_firing_for_s": 0, "channels": channels}),
            )
            .await;
        assert_eq!(status, 200, "{r}");
        ids.insert(key, id);
    }
    let stalled_rule = api.get(&format!("/api/v1/alert-rules/{}", ids["stalled"])).await;
    assert_eq!(stalled_rule["inhibits"], json!(["busy_but_hollow", "inefficient"]));
    assert_eq!(stalled_rule["inhibit_scope"], "gpu");

    // 8 GPUs of one job spin one block each for 20 s (a hung collective), and stay hung.
    let start = now_ms() - 21_000;
    replay(&server, &eight_gpu_trace("one_block", start, 20)).await;
    let stalled = wait_for("8 stalled alerts firing", Duration::from_secs(30), || async {
        let l = api.alerts(&format!("rule_id={}&status=firing", ids["stalled"])).await;
        (l.len() == 8).then_some(l)
    })
    .await;
    wait_for("a message on each channel", Duration::from_secs(20), || async {
        (!slack.accepted().is_empty() && !hook.accepted().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let (s_msgs, h_msgs) = (slack.accepted(), hook.accepted());
    assert_eq!(s_msgs.len(), 1, "one Slack message for the 8 GPUs: {s_msgs:?}");
    assert_eq!(h_msgs.len(), 1, "one webhook message for the 8 GPUs: {h_msgs:?}");

    // The Slack message: the rule, 8 GPUs, the owner, GPU-hours and cost per hour.
    let body = &s_msgs[0].body;
    let text = body.to_string();
    let header = body["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(header.contains("Stalled GPU") && header.contains("8 GPUs"), "{header}");
    for g in 0..8 {
        assert!(text.contains(&format!("GPU-hang-{g}")), "GPU-hang-{g} listed: {text}");
    }
    assert!(text.contains("8 GPUs on node-hang"), "{text}");
    assert!(text.contains("job 4242"), "owner: {text}");
    assert!(text.contains("GPU-hours at stake") && text.contains("USD/hour"), "{text}");
    assert!(text.contains("30.40 USD/hour"), "8 H200 at 3.80 USD/hour: {text}");
    assert!(!text.contains("Busy but hollow") && !text.contains("Inefficient"), "{text}");
    validate_slack_messages(std::slice::from_ref(body));

    // The webhook: Alertmanager's v4 body with the 8 alerts of the group.
    let w = &h_msgs[0].body;
    assert_eq!((w["version"].as_str(), w["status"].as_str()), (Some("4"), Some("firing")));
    assert_eq!(w["alerts"].as_array().unwrap().len(), 8, "{w}");
    assert_eq!(w["commonLabels"]["alertname"], "Stalled GPU (possible hung collective)");
    assert_eq!(w["commonLabels"]["owner_job"], "4242");
    assert_eq!(w["fleetlens"]["gpus"], 8);

    // Hollow and inefficient fired too, on every GPU, and are held back by the stalled alert.
    for key in ["busy_but_hollow", "inefficient"] {
        let list = api.alerts(&format!("rule_id={}&status=firing", ids[key])).await;
        assert_eq!(list.len(), 8, "{key}: {list:?}");
        for a in &list {
            let by = stalled.iter().find(|s| s["gpu"] == a["gpu"]).unwrap();
            assert_eq!((a["inhibited"].as_bool(), &a["inhibited_by"]), (Some(true), &by["id"]), "{a}");
            assert_eq!(a["notified"], false);
        }
    }
    let stalled = api.alerts(&format!("rule_id={}&status=firing", ids["stalled"])).await;
    assert!(stalled.iter().all(|a| a["notified"] == true && a["inhibited"] == false), "{stalled:?}");
    assert!(stalled.iter().all(|a| a["group"] == stalled[0]["group"]));

    // The job recovers: one resolved message per channel.
    replay(&server, &eight_gpu_trace("matmul_bf16", start + 20_000, 4)).await;
    wait_for("the resolved messages", Duration::from_secs(20), || async {
        (slack.accepted().len() >= 2 && hook.accepted().len() >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (s_msgs, h_msgs) = (slack.accepted(), hook.accepted());
    assert_eq!((s_msgs.len(), h_msgs.len()), (2, 2), "{s_msgs:?} {h_msgs:?}");
    let header = s_msgs[1].body["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(header.starts_with("✅ Resolved") && header.contains("8 GPUs"), "{header}");
    assert_eq!(h_msgs[1].body["status"], "resolved");
    assert_eq!(h_msgs[1].body["alerts"].as_array().unwrap().len(), 8);
    assert!(h_msgs[1].body["alerts"].as_array().unwrap().iter().all(|a| a["status"] == "resolved"));
    for id in ids.values() {
        assert!(api.alerts(&format!("rule_id={id}&status=open")).await.is_empty(), "all resolved");
    }
}

/// A live hollow sample of `uuid` owned by alice.
fn owned_sample(uuid: &str, ts: i64, util: f64, smact: f64) -> Value {
    let mut s = sample(uuid, ts, util, smact);
    s["processes"] = json!([{"pid": 7, "used_bytes": 8i64 << 30, "user": "alice", "owner": {"user": "alice"}}]);
    s
}

async fn a_digest_channel_gets_one_digest_at_its_time_and_nothing_between(backend: Backend) {
    const PERIOD: i64 = 8_000;
    let db = TestDatabase::new(backend).await;
    let args = [FAST, &["--alert-digest-period", "8s"]].concat();
    let server = TestServer::spawn(&db.url, &args);
    let api = Api::new(&server);
    let rx = Receiver::start(0).await;
    let (status, c) = api
        .post(
            "/api/v1/notification-channels",
            json!({"name": "weekly", "kind": "webhook", "url": format!("{}/digest", rx.url), "digest": "weekly"}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    assert_eq!((c["digest"].as_str(), c["digest_at"].as_str()), (Some("weekly"), Some("09:00")));
    let ch = c["id"].as_i64().unwrap();
    let (status, e) = api
        .post(
            "/api/v1/notification-channels",
            json!({"name": "x", "kind": "alertmanager", "url": "http://a", "digest": "daily"}),
        )
        .await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("digest")));
    let (status, e) = api.put(&format!("/api/v1/notification-channels/{ch}"), json!({"digest_at": "25:00"})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("digest_at")));
    let rule = api
        .rule(json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2, "channels": [ch]}))
        .await;

    // Start right after a digest time, so the alert falls in one period.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let next = (now_ms() / PERIOD + 1) * PERIOD;
    tokio::time::sleep(Duration::from_millis((next - now_ms() + 150) as u64)).await;
    let due = next + PERIOD;
    for _ in 0..12 {
        api.ingest("node-d", vec![owned_sample("GPU-d", now_ms(), 100.0, 2.0)]).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    api.ingest("node-d", vec![owned_sample("GPU-d", now_ms(), 100.0, 95.0)]).await;
    let fired = wait_for("the alert fired and resolved", Duration::from_secs(5), || async {
        api.alerts(&format!("rule_id={rule}&status=resolved")).await.into_iter().next()
    })
    .await;
    assert!(fired["fired_at_ms"].as_i64().unwrap() >= next);
    // Nothing in real time, nothing before the digest time.
    tokio::time::sleep(Duration::from_millis((due - now_ms() - 400).max(0) as u64)).await;
    assert!(rx.all().is_empty(), "nothing before the digest time: {:?}", rx.all());
    let got = wait_for("the digest", Duration::from_secs(10), || async {
        let a = rx.accepted();
        (!a.is_empty()).then_some(a)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(rx.all().len(), 1, "one digest: {:?}", rx.all());
    let d = &got[0].body;
    assert_eq!(d["kind"], "digest");
    assert_eq!((d["from_ms"].as_i64(), d["to_ms"].as_i64()), (Some(next), Some(due)));
    let alerts = d["alerts_fired"].as_array().unwrap();
    assert_eq!(alerts.len(), 1, "{d}");
    assert_eq!((alerts[0]["rule"].as_str(), alerts[0]["gpu"].as_str()), (Some("hollow 2s"), Some("GPU-d")));
    let top = d["top_waste_by_owner"].as_array().unwrap();
    assert_eq!(top[0]["owner"], "alice", "{d}");
    assert!(top[0]["wasted_cost"].as_f64().unwrap() > 0.0, "{d}");
}

/// Two servers on one PostgreSQL database: 8 GPUs of one host hang (hollow), ingested through
/// both replicas; the group's firing and resolved messages reach the receiver once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_send_one_grouped_message_once() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::spawn(&db.url, FAST);
    let b = TestServer::spawn(&db.url, FAST);
    let (api_a, api_b) = (Api::new(&a), Api::new(&b));
    let rx = Receiver::start(0).await;
    let (status, c) = api_a
        .post(
            "/api/v1/notification-channels",
            json!({"name": "shared", "kind": "webhook", "url": format!("{}/hook", rx.url), "group_wait_s": 2}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let ch = c["id"].as_i64().unwrap();
    api_b
        .rule(json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2, "channels": [ch]}))
        .await;
    let start = now_ms() - 10_000;
    for g in 0..8 {
        let api = if g % 2 == 0 { &api_a } else { &api_b };
        let uuid = format!("GPU-rg-{g}");
        api.ingest("node-g", (0..5).map(|i| owned_sample(&uuid, start + i * 1000, 100.0, 2.0)).collect()).await;
    }
    wait_for("the group message", Duration::from_secs(30), || async { (!rx.accepted().is_empty()).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.accepted().len(), 1, "{:?}", rx.all());
    assert_eq!(rx.accepted()[0].body["alerts"].as_array().unwrap().len(), 8);
    for g in 0..8 {
        let api = if g % 2 == 0 { &api_b } else { &api_a };
        api.ingest("node-g", vec![owned_sample(&format!("GPU-rg-{g}"), start + 6000, 100.0, 95.0)]).await;
    }
    wait_for("the resolved message", Duration::from_secs(30), || async { (rx.accepted().len() >= 2).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = rx.accepted();
    assert_eq!(got.len(), 2, "firing and resolved, once each: {got:?}");
    assert_eq!((got[0].body["status"].as_str(), got[1].body["status"].as_str()), (Some("firing"), Some("resolved")));
    let ids: std::collections::HashSet<_> = got.iter().map(|m| m.message_id.clone()).collect();
    assert_eq!(ids.len(), 2);
}
