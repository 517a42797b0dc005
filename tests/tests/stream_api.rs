//! Black box: `GET /api/v1/stream` (docs/API.md, "Live stream") read by a real HTTP client.
//!
//! - Reading needs the `read` scope (401 / 403 JSON otherwise), with a key or a session.
//! - The first event is a `snapshot`; a GPU's state change, a new alert and a resolved one
//!   arrive as `gpu_state`, `alert` and `summary` events with growing ids.
//! - An organisation sees only its own events.
//! - A client that falls more than `--stream-buffer-events` behind gets a `resync` (the whole
//!   picture), not the events it missed; caps on open streams answer 429 JSON.
//! - PostgreSQL: an agent's batch stored by one replica reaches a stream open on another.

use std::time::{Duration, Instant};

use fleetlens_tests::http::get_json;
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, hollow_samples};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    stream_needs_read_access,
    state_changes_and_alerts_arrive,
    organisations_see_only_their_own_events,
    a_client_behind_the_ring_gets_a_resync,
    open_streams_are_capped,
);

const ADMIN_EMAIL: &str = "admin@stream.example";
const ADMIN_PASSWORD: &str = "stream-admin-password-1";

/// How a request authenticates.
#[derive(Clone)]
enum Auth {
    None,
    Key(String),
    /// The session cookie (`name=value`).
    Cookie(String),
}

impl Auth {
    fn admin() -> Self {
        Auth::Key(ADMIN_TOKEN.into())
    }

    fn apply(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => req,
            Auth::Key(k) => req.bearer_auth(k),
            Auth::Cookie(c) => req.header("cookie", c),
        }
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
struct Event {
    name: String,
    id: Option<u64>,
    retry: Option<u64>,
    data: Value,
}

/// A stream being read, event by event, through reqwest's body chunks.
struct Stream {
    resp: reqwest::Response,
    buf: String,
}

impl Stream {
    /// The next event, or `None` when none came within `timeout` (or the stream ended).
    async fn next(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut e = Event { name: "message".into(), id: None, retry: None, data: Value::Null };
                let mut data = String::new();
                for line in block.lines() {
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "" => {} // a comment (keep-alive)
                        "event" => e.name = value.to_string(),
                        "id" => e.id = Some(value.parse().expect("numeric id")),
                        "retry" => e.retry = Some(value.parse().expect("numeric retry")),
                        "data" => data.push_str(value),
                        other => panic!("unknown SSE field {other:?} in {block:?}"),
                    }
                }
                if data.is_empty() {
                    continue;
                }
                e.data = serde_json::from_str(&data).unwrap_or_else(|err| panic!("data is not JSON ({err}): {data}"));
                return Some(e);
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk()).await.ok()?.expect("stream read")?;
            self.buf.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// Events until one matches `want` (returned last), failing after `timeout`.
    async fn until(&mut self, timeout: Duration, what: &str, want: impl Fn(&Event) -> bool) -> Vec<Event> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = self.next(left).await.unwrap_or_else(|| panic!("no {what} within {timeout:?}; saw {seen:#?}"));
            let done = want(&e);
            seen.push(e);
            if done {
                return seen;
            }
        }
    }
}

async fn open(server: &TestServer, auth: &Auth, query: &str) -> reqwest::Response {
    let req = reqwest::Client::new().get(server.url(&format!("/api/v1/stream{query}")));
    auth.apply(req).send().await.expect("request")
}

/// A stream that opened (200, `text/event-stream`), with its first event, the snapshot.
async fn stream(server: &TestServer, auth: &Auth) -> (Stream, Event) {
    let resp = open(server, auth, "").await;
    assert_eq!(resp.status().as_u16(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut s = Stream { resp, buf: String::new() };
    let first = s.next(Duration::from_secs(20)).await.expect("a snapshot");
    assert_eq!(first.name, "snapshot", "{first:?}");
    assert_eq!(first.retry, Some(2000), "the first event sets the reconnect delay");
    assert_eq!(first.id, first.data["seq"].as_u64(), "{first:?}");
    (s, first)
}

async fn post(server: &TestServer, auth: &Auth, path: &str, body: Value) -> (u16, Value) {
    let resp = auth.apply(reqwest::Client::new().post(server.url(path)).json(&body)).send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn ingest(server: &TestServer, auth: &Auth, host: &str, samples: Vec<Value>) {
    let (status, body) = post(server, auth, "/api/v1/ingest", json!({"host": host, "samples": samples})).await;
    assert_eq!(status, 200, "{body}");
}

/// A key of the default organisation with these scopes.
async fn key(server: &TestServer, name: &str, scopes: &[&str]) -> Auth {
    let (status, body) =
        post(server, &Auth::admin(), "/api/v1/api-keys", json!({"name": name, "scopes": scopes})).await;
    assert_eq!(status, 201, "{body}");
    Auth::Key(body["key"].as_str().unwrap().to_string())
}

fn is_state_of(uuid: &'static str, state: &'static str) -> impl Fn(&Event) -> bool {
    move |e| e.name == "gpu_state" && e.data["uuid"] == uuid && e.data["state"] == state
}

/// `uuid` is hollow: in a `gpu_state` event, or in a `resync` (the shipped alert rules add
/// events of their own, so a small ring may overflow again).
fn shows_hollow(uuid: &'static str) -> impl Fn(&Event) -> bool {
    move |e| {
        is_state_of(uuid, "hollow")(e)
            || (e.name == "resync" && snapshot_gpu(e, uuid).is_some_and(|g| g["state"] == "hollow"))
    }
}

fn snapshot_gpu<'a>(snapshot: &'a Event, uuid: &str) -> Option<&'a Value> {
    snapshot.data["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == uuid)
}

async fn stream_needs_read_access(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--admin-email", ADMIN_EMAIL, "--admin-password", ADMIN_PASSWORD]);
    for (auth, status, code) in [
        (Auth::None, 401, "unauthenticated"),
        (Auth::Key("flk_not_a_key".into()), 401, "unauthenticated"),
        (Auth::Cookie("__Host-fleetlens_session=forged".into()), 401, "unauthenticated"),
    ] {
        let resp = open(&server, &auth, "").await;
        assert_eq!(resp.status().as_u16(), status);
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
    }
    let ingest_only = key(&server, "agent", &["ingest"]).await;
    let resp = open(&server, &ingest_only, "").await;
    assert_eq!(resp.status().as_u16(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden", "{body}");

    // A read key streams; so does a dashboard session (its cookie, no CSRF token on a GET).
    ingest(&server, &Auth::admin(), "node-1", hollow_samples("GPU-r1", 5, 0)).await;
    let reader = key(&server, "dashboard", &["read"]).await;
    let (_s, snapshot) = stream(&server, &reader).await;
    assert_eq!(snapshot_gpu(&snapshot, "GPU-r1").expect("the GPU")["host"], "node-1");
    assert_eq!(snapshot.data["summary"]["gpu_count"], 1);
    let (status, login) = {
        let resp = reqwest::Client::new()
            .post(server.url("/api/v1/auth/login"))
            .json(&json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string()))
    };
    assert_eq!(status, 200);
    let cookie = login.expect("set-cookie").split(';').next().unwrap().to_string();
    let (_s2, snapshot) = stream(&server, &Auth::Cookie(cookie)).await;
    assert!(snapshot_gpu(&snapshot, "GPU-r1").is_some());

    // `once`: the snapshot, then the end of the body.
    let resp = open(&server, &reader, "?once=true").await;
    assert_eq!(resp.status().as_u16(), 200);
    let text = tokio::time::timeout(Duration::from_secs(20), resp.text()).await.expect("ends").unwrap();
    assert!(text.contains("event: snapshot"), "{text}");
    assert_eq!(text.matches("event:").count(), 1, "{text}");
}

async fn state_changes_and_alerts_arrive(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--alert-eval-interval", "200ms"]);
    let admin = Auth::admin();
    // A GPU that reported two minutes ago: offline now.
    ingest(&server, &admin, "node-1", hollow_samples("GPU-s1", 5, 120_000)).await;
    let (mut s, snapshot) = stream(&server, &admin).await;
    assert_eq!(snapshot_gpu(&snapshot, "GPU-s1").unwrap()["state"], "offline", "{snapshot:?}");
    assert_eq!(snapshot.data["summary"]["by_state"]["offline"], 1);
    // The shipped rules may already hold the old readings pending (the engine runs every 200 ms,
    // racing the stream's open); none has fired.
    let alerts = snapshot.data["alerts"].as_array().expect("alerts");
    assert!(alerts.iter().all(|a| a["status"] == "pending"), "{alerts:?}");

    // It reports again (hollow: util 100, SMACT 2): offline → hollow.
    ingest(&server, &admin, "node-1", hollow_samples("GPU-s1", 3, 0)).await;
    let seen = s.until(Duration::from_secs(10), "gpu_state hollow", is_state_of("GPU-s1", "hollow")).await;
    let change = &seen.last().unwrap().data;
    assert_eq!(change["previous"], "offline", "{change}");
    assert_eq!(change["host"], "node-1");
    assert!(change["at_ms"].as_i64().unwrap() >= change["last_seen_ms"].as_i64().unwrap());
    let seen = s.until(Duration::from_secs(10), "summary", |e| e.name == "summary").await;
    let summary = &seen.last().unwrap().data;
    assert_eq!((summary["by_state"]["hollow"].as_u64(), summary["reporting"].as_u64()), (Some(1), Some(1)));

    // A new GPU: `previous` is null.
    ingest(&server, &admin, "node-2", hollow_samples("GPU-s2", 3, 0)).await;
    let seen = s.until(Duration::from_secs(10), "the new GPU", is_state_of("GPU-s2", "hollow")).await;
    assert_eq!(seen.last().unwrap().data["previous"], Value::Null);

    // A rule that every reading matches fires: an `alert` event as GET /alerts shows it.
    let (status, rule) = post(
        &server,
        &admin,
        "/api/v1/alert-rules",
        json!({"name": "Any reading", "condition": "gpu_util_pct >= 0", "severity": "info"}),
    )
    .await;
    assert_eq!(status, 201, "{rule}");
    let rule_id = rule["id"].as_i64().unwrap();
    ingest(&server, &admin, "node-1", hollow_samples("GPU-s1", 2, 0)).await;
    let seen = s
        .until(Duration::from_secs(20), "a firing alert", |e| {
            e.name == "alert" && e.data["alert"]["rule_id"] == rule_id && e.data["alert"]["status"] == "firing"
        })
        .await;
    let alert = seen.last().unwrap().data["alert"].clone();
    assert!(["new", "firing"].contains(&seen.last().unwrap().data["change"].as_str().unwrap()));
    let listed: Value = get_json(&server, &format!("/api/v1/alerts/{}", alert["id"])).await;
    for field in ["id", "rule_name", "severity", "gpu", "host", "summary", "fired_at_ms", "fingerprint"] {
        assert_eq!(alert[field], listed[field], "{field}: {alert} vs {listed}");
    }
    let seen = s
        .until(Duration::from_secs(10), "alerts_firing in summary", |e| {
            e.name == "summary" && e.data["alerts_firing"].as_u64() >= Some(1)
        })
        .await;
    assert!(!seen.is_empty());

    // The rule is deleted: its alerts resolve (found by the stream's recheck at the latest).
    let resp = reqwest::Client::new()
        .delete(server.url(&format!("/api/v1/alert-rules/{rule_id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let seen = s
        .until(Duration::from_secs(20), "a resolved alert", |e| {
            e.name == "alert" && e.data["change"] == "resolved" && e.data["alert"]["id"] == alert["id"]
        })
        .await;
    let resolved = &seen.last().unwrap().data["alert"];
    assert_eq!(resolved["status"], "resolved");
    assert_eq!(resolved["rule_deleted"], true);

    // Ids only grow.
    let ids: Vec<u64> = seen.iter().filter_map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

async fn organisations_see_only_their_own_events(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let a = Auth::admin();
    ingest(&server, &a, "a-host", hollow_samples("GPU-a1", 3, 0)).await;
    let (status, b) = post(
        &server,
        &a,
        "/api/v1/orgs",
        json!({"name": "org-b", "admin_email": "bob@b.example", "admin_password": "b-password-123"}),
    )
    .await;
    assert_eq!(status, 201, "{b}");
    let resp = reqwest::Client::new()
        .post(server.url("/api/v1/auth/login"))
        .json(&json!({"email": "bob@b.example", "password": "b-password-123"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let csrf = resp.json::<Value>().await.unwrap()["csrf_token"].as_str().unwrap().to_string();
    let made = reqwest::Client::new()
        .post(server.url("/api/v1/api-keys"))
        .header("cookie", &cookie)
        .header("x-csrf-token", csrf)
        .json(&json!({"name": "b-agent", "scopes": ["ingest", "read"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status().as_u16(), 201);
    let b_key = Auth::Key(made.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string());

    let (mut b_stream, b_snapshot) = stream(&server, &Auth::Cookie(cookie)).await;
    assert_eq!(b_snapshot.data["gpus"], json!([]), "B sees none of A's GPUs");
    assert_eq!(b_snapshot.data["summary"]["gpu_count"], 0);
    let (mut a_stream, _) = stream(&server, &a).await;

    // A's new GPU reaches A's stream, not B's.
    ingest(&server, &a, "a-host", hollow_samples("GPU-a2", 3, 0)).await;
    a_stream.until(Duration::from_secs(10), "A's new GPU", is_state_of("GPU-a2", "hollow")).await;
    // B's own GPU reaches B; nothing of A came before it.
    ingest(&server, &b_key, "b-host", hollow_samples("GPU-b1", 3, 0)).await;
    let seen = b_stream.until(Duration::from_secs(10), "B's GPU", is_state_of("GPU-b1", "hollow")).await;
    let text = format!("{seen:?}");
    assert!(!text.contains("GPU-a") && !text.contains("a-host"), "A's data on B's stream: {text}");
    // And nothing of B on A's.
    let more = a_stream.next(Duration::from_secs(2)).await;
    assert!(!format!("{more:?}").contains("GPU-b1"), "{more:?}");
}

async fn a_client_behind_the_ring_gets_a_resync(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--stream-buffer-events", "4"]);
    let admin = Auth::admin();
    let (mut s, snapshot) = stream(&server, &admin).await;
    let first_seq = snapshot.data["seq"].as_u64().unwrap();
    // 12 new GPUs in one batch: one reading, 12 `gpu_state` events and a `summary`, more than
    // the ring holds before this client can read them.
    let batch: Vec<Value> = (0..12).flat_map(|i| hollow_samples(&format!("GPU-burst-{i:02}"), 2, 0)).collect();
    ingest(&server, &admin, "burst-host", batch).await;
    let e = s.next(Duration::from_secs(10)).await.expect("an event");
    assert_eq!(e.name, "resync", "{e:?}");
    assert_eq!(e.data["gpus"].as_array().unwrap().len(), 12, "the whole picture: {e:?}");
    assert_eq!(e.data["summary"]["gpu_count"], 12);
    let resync_seq = e.data["seq"].as_u64().unwrap();
    assert!(resync_seq > first_seq + 4, "{first_seq} → {resync_seq}");
    assert_eq!(e.id, Some(resync_seq));
    // What it skipped is not sent after it: every later event is newer.
    ingest(&server, &admin, "late-host", hollow_samples("GPU-late", 2, 0)).await;
    let seen = s.until(Duration::from_secs(10), "the late GPU", shows_hollow("GPU-late")).await;
    assert!(seen.iter().all(|e| e.id.unwrap() > resync_seq), "{seen:?}");

    // A client that does not read at all holds nobody back: the other stream gets its events.
    let (_stalled, _) = stream(&server, &admin).await;
    for round in 0..3 {
        let uuid: &'static str = Box::leak(format!("GPU-round-{round}").into_boxed_str());
        ingest(&server, &admin, "round-host", hollow_samples(uuid, 2, 0)).await;
        s.until(Duration::from_secs(10), "a round's GPU", shows_hollow(uuid)).await;
    }
}

async fn open_streams_are_capped(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-streams-per-key", "2", "--max-streams-per-org", "3"]);
    let admin = Auth::admin();
    let (first, _) = stream(&server, &admin).await;
    let (_second, _) = stream(&server, &admin).await;
    let refused = open(&server, &admin, "").await;
    assert_eq!(refused.status().as_u16(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-streams-per-key"), "{body}");

    // Another key of the organisation: one more, then the organisation's cap.
    let other = key(&server, "dashboard", &["read"]).await;
    let (_third, _) = stream(&server, &other).await;
    let refused = open(&server, &other, "").await;
    assert_eq!(refused.status().as_u16(), 429);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-streams-per-org"), "{body}");

    // A closed stream gives its place back.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = open(&server, &admin, "?once=true").await;
        if resp.status().as_u16() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the closed stream's place never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Two replicas on one PostgreSQL database: a batch stored by replica A reaches the stream open
/// on replica B through `NOTIFY`, not B's recheck (set to a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_on_one_replica_reaches_a_stream_on_another() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::spawn(&db.url, &["--stream-recheck", "60s"]);
    let b = TestServer::spawn(&db.url, &["--stream-recheck", "60s"]);
    let admin = Auth::admin();
    let (mut on_b, _) = stream(&b, &admin).await;
    for i in 0..3 {
        let uuid: &'static str = Box::leak(format!("GPU-x{i}").into_boxed_str());
        let sent = Instant::now();
        ingest(&a, &admin, "node-a", hollow_samples(uuid, 2, 0)).await;
        on_b.until(Duration::from_secs(10), "the batch stored on A", is_state_of(uuid, "hollow")).await;
        let took = sent.elapsed();
        assert!(took < Duration::from_secs(10), "{took:?}");
        eprintln!("replica A → stream on B: {took:?}");
    }
}
