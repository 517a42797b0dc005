//! Black box: what the server's notifications may reach and what they give away (issue 19):
//! internal addresses refused at connect time unless `--webhook-allow-cidrs` allows them,
//! redirects not followed, answers never echoed nor read whole, webhook URLs (secrets) never in
//! an error; Slack messages that agents' names cannot format, link or ping with; and silences
//! that say who made them from the caller, not the body. Real HTTP receivers on 127.0.0.1 and
//! the real server binary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use fleetlens_tests::http::{now_ms, serve_local, wait_for};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, bin_path, validate_slack_messages};
use futures::StreamExt;
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    internal_addresses_are_refused_at_delivery_unless_allowed,
    redirects_are_not_followed,
    answers_are_never_echoed_nor_read_whole,
    webhook_urls_never_appear_in_errors,
    slack_messages_neutralise_what_agents_report,
    a_silence_is_made_by_its_caller,
    errors_stored_before_the_upgrade_lose_urls_and_answers,
);

/// Fast retries and evaluation, so the tests do not wait for production timings.
const FAST: &[&str] = &["--alert-retry-base", "200ms", "--alert-eval-interval", "200ms"];

// ---------------------------------------------------------------------------------------------
// A receiver that records what it gets and answers as told.

#[derive(Clone)]
enum Answer {
    Ok,
    Status(u16, String),
    /// 303 See Other to this URL.
    Redirect(String),
    /// 200 with a streamed body of this many bytes (counting what the server made it produce).
    Huge(usize),
}

struct ReceiverState {
    answer: Answer,
    requests: Mutex<Vec<(String, Value)>>,
    /// Bytes of the body produced so far (a streamed body is produced as the client reads).
    produced: AtomicUsize,
}

struct Receiver {
    url: String,
    port: u16,
    state: Arc<ReceiverState>,
}

impl Receiver {
    async fn start(answer: Answer) -> Receiver {
        let state = Arc::new(ReceiverState { answer, requests: Mutex::default(), produced: AtomicUsize::new(0) });
        let port = serve_local(Router::new().fallback(respond).with_state(state.clone())).await.port();
        Receiver { url: format!("http://127.0.0.1:{port}"), port, state }
    }

    fn requests(&self) -> Vec<(String, Value)> {
        self.state.requests.lock().unwrap().clone()
    }
}

const CHUNK: usize = 64 * 1024;

async fn respond(State(rx): State<Arc<ReceiverState>>, uri: Uri, body: Bytes) -> Response {
    rx.requests.lock().unwrap().push((uri.path().to_string(), serde_json::from_slice(&body).unwrap_or(Value::Null)));
    match &rx.answer {
        Answer::Ok => StatusCode::OK.into_response(),
        Answer::Status(code, text) => (StatusCode::from_u16(*code).unwrap(), text.clone()).into_response(),
        Answer::Redirect(to) => (StatusCode::SEE_OTHER, [(header::LOCATION, to.clone())]).into_response(),
        Answer::Huge(bytes) => {
            let counter = rx.clone();
            let chunks = futures::stream::iter(0..bytes / CHUNK).map(move |_| {
                counter.produced.fetch_add(CHUNK, Ordering::SeqCst);
                Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; CHUNK]))
            });
            Response::new(Body::from_stream(chunks))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// API helpers.

struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    fn new(server: &TestServer) -> Api {
        Api { base: server.base_url.clone(), client: reqwest::Client::new() }
    }

    /// Status, body as JSON, body as text.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value, String) {
        let mut req = self.client.request(method, format!("{}{path}", self.base)).bearer_auth(ADMIN_TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null), text)
    }

    async fn get(&self, path: &str) -> (Value, String) {
        let (status, v, text) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {text}");
        (v, text)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value, String) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn channel(&self, name: &str, kind: &str, url: &str) -> i64 {
        let (status, c, _) =
            self.post("/api/v1/notification-channels", json!({"name": name, "kind": kind, "url": url})).await;
        assert_eq!(status, 201, "{c}");
        c["id"].as_i64().unwrap()
    }

    /// `POST /notification-channels/{id}/test`: status and answer.
    async fn test_channel(&self, id: i64) -> (u16, Value, String) {
        self.post(&format!("/api/v1/notification-channels/{id}/test"), json!({})).await
    }
}

/// Hollow samples (util 100 %, SMs 2 %) at 1 Hz ending just before now.
fn hollow_samples(uuid: &str, n: i64, gpu_name: &str, owner: &str) -> Vec<Value> {
    let start = now_ms() - (n + 1) * 1000;
    (0..n)
        .map(|i| {
            json!({
                "ts_ms": start + i * 1000, "uuid": uuid, "gpu_index": 0, "name": gpu_name,
                "gpu_util_pct": 100.0, "sm_active_pct": 2.0, "mem_used_bytes": 8i64 << 30,
                "mem_total_bytes": 85899345920i64, "power_w": 400.0, "power_limit_w": 700.0,
                "processes": [{"pid": 7, "used_bytes": 8i64 << 30, "owner": {"user": owner}}],
            })
        })
        .collect()
}

/// A free port on 127.0.0.1 where nobody listens (connections are refused).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------------
// Tests on both backends.

/// Item 1: an org admin points channels at the server's own machine, by every spelling of its
/// address, and at cloud metadata; without the operator's allow-list each test message is
/// refused (permanently, with a clear error) and nothing reaches the receiver. With
/// `--webhook-allow-cidrs 127.0.0.0/8` the same channel delivers.
async fn internal_addresses_are_refused_at_delivery_unless_allowed(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn_without_webhook_allowance(&db.url, FAST);
    let api = Api::new(&server);
    let rx = Receiver::start(Answer::Ok).await;
    let port = rx.port;
    let targets = [
        ("literal", "webhook", format!("http://127.0.0.1:{port}/hook"), "127.0.0.1 (loopback"),
        ("by-name", "slack", format!("http://localhost:{port}/services/x"), "loopback"),
        ("mapped", "alertmanager", format!("http://[::ffff:127.0.0.1]:{port}"), "loopback"),
        ("decimal", "webhook", format!("http://2130706433:{port}/hook"), "127.0.0.1 (loopback"),
        ("ipv6", "webhook", format!("http://[::1]:{port}/hook"), "::1 (loopback"),
        ("metadata", "webhook", "http://169.254.169.254/latest/meta-data/".to_string(), "169.254.169.254 (link-local"),
        ("private", "webhook", "http://10.11.12.13/hook".to_string(), "10.11.12.13 (private"),
    ];
    let mut ids = Vec::new();
    for (name, kind, url, why) in &targets {
        // Saving the channel is not the check (DNS can change after it): sending is.
        let id = api.channel(name, kind, url).await;
        ids.push(id);
        let (status, t, _) = api.test_channel(id).await;
        assert_eq!(
            (status, t["delivered"].as_bool(), t["status"].as_str()),
            (202, Some(false), Some("failed")),
            "{name}: {t}"
        );
        assert_eq!(t["attempts"], 1, "refused once, never retried: {t}");
        let error = t["error"].as_str().unwrap();
        assert!(error.contains("refused") && error.contains("--webhook-allow-cidrs"), "{name}: {error}");
        assert!(error.contains(why), "{name}: {error} should say {why:?}");
        let (log, _) = api.get(&format!("/api/v1/notification-channels/{id}/deliveries")).await;
        let outcomes: Vec<&str> =
            log["deliveries"].as_array().unwrap().iter().map(|d| d["outcome"].as_str().unwrap()).collect();
        assert_eq!(outcomes, ["failed"], "{name}: {log}");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(rx.requests(), vec![], "nothing reached the receiver");
    drop(server);

    // The operator allows loopback (the flag, this time): the same channel delivers.
    let server =
        TestServer::spawn_without_webhook_allowance(&db.url, &["--webhook-allow-cidrs", "10.0.0.0/8,127.0.0.0/8"]);
    let api = Api::new(&server);
    let (status, t, _) = api.test_channel(ids[0]).await;
    assert_eq!((status, t["delivered"].as_bool()), (200, Some(true)), "{t}");
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(rx.requests()[0].0, "/hook");
}

/// Item 1: a receiver answering 303 to another address is not followed (a 3xx is a failed
/// delivery that says so); the redirect's target gets nothing.
async fn redirects_are_not_followed(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let inner = Receiver::start(Answer::Ok).await;
    let redirector = Receiver::start(Answer::Redirect(format!("{}/stolen", inner.url))).await;
    let id = api.channel("redirecting", "webhook", &format!("{}/hook", redirector.url)).await;
    let (status, t, _) = api.test_channel(id).await;
    assert_eq!((status, t["delivered"].as_bool(), t["status"].as_str()), (202, Some(false), Some("failed")), "{t}");
    assert_eq!(t["status_code"], 303);
    let error = t["error"].as_str().unwrap();
    assert!(error.contains("303") && error.contains("redirects are not followed"), "{error}");
    assert!(!error.contains("stolen"), "the Location is not echoed: {error}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(redirector.requests().len(), 1, "a 3xx is not retried");
    assert_eq!(inner.requests(), vec![], "the redirect's target got nothing");
}

/// Item 1: what a receiver answers is never echoed into the API's answers or the delivery log,
/// and a huge answer is not read whole.
async fn answers_are_never_echoed_nor_read_whole(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let secret = "INTERNAL-ANSWER-d41d8cd98f00b204";
    let talker = Receiver::start(Answer::Status(
        405,
        format!("{{\"error\": \"{secret}\", \"pad\": \"{}\"}}", "y".repeat(100_000)),
    ))
    .await;
    let id = api.channel("talker", "webhook", &format!("{}/hook", talker.url)).await;
    let (status, t, text) = api.test_channel(id).await;
    assert_eq!((status, t["status_code"].as_i64()), (202, Some(405)), "{t}");
    assert_eq!(t["error"], "HTTP 405 Method Not Allowed", "{t}");
    assert!(!text.contains(secret), "{text}");
    let (_, log) = api.get(&format!("/api/v1/notification-channels/{id}/deliveries")).await;
    assert!(log.contains("HTTP 405") && !log.contains(secret), "{log}");
    let (_, log) = api.get("/api/v1/notification-deliveries").await;
    assert!(!log.contains(secret), "{log}");

    // 64 MiB of answer: the sender reads a few KiB and hangs up. (Socket buffers let the
    // receiver write some MiB more before it notices.)
    const HUGE: usize = 64 << 20;
    let huge = Receiver::start(Answer::Huge(HUGE)).await;
    let id = api.channel("huge", "webhook", &format!("{}/hook", huge.url)).await;
    let (status, t, _) = api.test_channel(id).await;
    assert_eq!((status, t["delivered"].as_bool()), (200, Some(true)), "{t}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let produced = huge.state.produced.load(Ordering::SeqCst);
    assert!(produced < HUGE / 2, "the server read {produced} bytes of a {HUGE}-byte answer");
}

/// Item 4: webhook URLs are secrets (Slack's carry the credential in the path): failed
/// deliveries to a URL with a token in its path and query, by a test message and by a real
/// alert, leave errors in the test answer, the outbox and the delivery log that never name it.
async fn webhook_urls_never_appear_in_errors(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let token = "T0K3N-s3cr3t-8c1f2e";
    let port = closed_port();
    let hook_url = format!("http://127.0.0.1:{port}/hooks/{token}?sig={token}");
    let slack_url = format!("http://localhost:{port}/services/T0/B0/{token}");
    // A channel sends its messages in order: the test messages (retried) get channels of
    // their own, so they do not hold the alert's back.
    let hook = api.channel("secret-hook", "webhook", &hook_url).await;
    let slack = api.channel("secret-slack", "slack", &slack_url).await;
    let hook_test = api.channel("secret-hook-test", "webhook", &hook_url).await;
    let slack_test = api.channel("secret-slack-test", "slack", &slack_url).await;

    for id in [hook_test, slack_test] {
        let (status, t, text) = api.test_channel(id).await;
        assert_eq!((status, t["delivered"].as_bool()), (202, Some(false)), "{t}");
        let error = t["error"].as_str().unwrap();
        assert!(error.contains("error sending request"), "a useful error remains: {error}");
        assert!(!text.contains(token), "{text}");
    }

    // A real alert to both channels: its messages fail and are retried.
    let (status, r, _) = api
        .post(
            "/api/v1/alert-rules",
            json!({"name": "hollow 2s", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2,
                   "channels": [hook, slack]}),
        )
        .await;
    assert_eq!(status, 201, "{r}");
    let (status, v, _) = api
        .post(
            "/api/v1/ingest",
            json!({"host": "node-1", "samples": hollow_samples("GPU-s", 6, "NVIDIA H100", "alice")}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let alert = wait_for("both firing messages tried twice", Duration::from_secs(30), || async {
        let (list, _) = api.get(&format!("/api/v1/alerts?rule_id={}", r["id"])).await;
        let a = list["alerts"].as_array()?.first()?.clone();
        let (detail, _) = api.get(&format!("/api/v1/alerts/{}", a["id"])).await;
        let msgs = detail["messages"].as_array()?;
        (msgs.len() == 2 && msgs.iter().all(|m| m["attempts"].as_i64() >= Some(2))).then_some(a)
    })
    .await;
    let (detail, text) = api.get(&format!("/api/v1/alerts/{}", alert["id"])).await;
    assert!(detail["messages"].as_array().unwrap().iter().all(|m| m["last_error"].as_str().is_some()), "{detail}");
    assert!(!text.contains(token), "alert detail (outbox and deliveries): {text}");
    for path in [
        "/api/v1/notification-deliveries?limit=1000".to_string(),
        format!("/api/v1/notification-deliveries?alert_id={}", alert["id"]),
        format!("/api/v1/notification-channels/{hook}/deliveries"),
        format!("/api/v1/notification-channels/{slack}/deliveries"),
    ] {
        let (log, text) = api.get(&path).await;
        assert!(log["deliveries"].as_array().unwrap().iter().any(|d| d["error"].as_str().is_some()), "{path}: {log}");
        assert!(!text.contains(token), "{path}: {text}");
    }
}

/// Item 11: a hostile host name (and GPU model, team, owner) in an alert delivered to a real
/// Slack-webhook receiver: mentions and links show as text, formatting is neutralised, and the
/// message is still valid Block Kit (slack_sdk).
async fn slack_messages_neutralise_what_agents_report(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let rx = Receiver::start(Answer::Ok).await;
    let ch = api.channel("slack", "slack", &format!("{}/services/T0/B0/x", rx.url)).await;
    let (status, r, _) = api
        .post(
            "/api/v1/alert-rules",
            json!({"name": "hollow esc", "condition": "gpu_util_pct >= 80 && sm_active_pct < 30", "for_s": 2,
                   "description": "GPU on {host} of {team} run by {owner_user} is hollow", "channels": [ch]}),
        )
        .await;
    assert_eq!(status, 201, "{r}");
    let host = "<!channel> *x* <http://evil|click>";
    let labels = json!({"team": "_ml_ <!here>"});
    let mut samples = hollow_samples("GPU-esc", 6, "`H100` ~fast~", "*root* @everyone");
    // The host's labels are stored beside the batch, not in it: a first, healthy sample brings
    // them, and the engine reads the team from them when the hollow ones come.
    let mut healthy = samples[0].clone();
    healthy["ts_ms"] = json!(healthy["ts_ms"].as_i64().unwrap() - 1000);
    healthy["sm_active_pct"] = json!(95.0);
    let (status, v, _) =
        api.post("/api/v1/ingest", json!({"host": host, "labels": labels, "samples": [healthy]})).await;
    assert_eq!(status, 200, "{v}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    samples.iter_mut().for_each(|s| s["ts_ms"] = json!(s["ts_ms"].as_i64().unwrap() + 1000));
    let (status, v, _) = api.post("/api/v1/ingest", json!({"host": host, "labels": labels, "samples": samples})).await;
    assert_eq!(status, 200, "{v}");
    let got = wait_for("the Slack message", Duration::from_secs(30), || async {
        rx.requests().into_iter().find(|(path, _)| path == "/services/T0/B0/x")
    })
    .await;
    let msg = got.1;
    let text = msg.to_string();
    for raw in ["<!channel>", "<!here>", "<http", "*x*", "_ml_", "`H100`", "~fast~", "*root*", "@everyone"] {
        assert!(!text.contains(raw), "{raw:?} reaches Slack as mrkdwn: {text}");
    }
    let fields = msg["blocks"][2]["fields"].as_array().unwrap();
    let field = |title: &str| {
        fields
            .iter()
            .filter_map(|f| f["text"].as_str())
            .find(|t| t.starts_with(&format!("*{title}*\n")))
            .unwrap_or_else(|| panic!("no {title} field: {text}"))
            .to_string()
    };
    assert_eq!(field("Host"), "*Host*\n&lt;!channel&gt; ∗x∗ &lt;http://evil|click&gt;");
    assert_eq!(field("Team"), "*Team*\nˍmlˍ &lt;!here&gt;");
    assert!(field("GPU").starts_with("*GPU*\nˋH100ˋ ∼fast∼"), "{}", field("GPU"));
    assert_eq!(field("Owner"), "*Owner*\nuser ∗root∗ @\u{2060}everyone");
    let summary = msg["blocks"][1]["text"]["text"].as_str().unwrap();
    assert_eq!(
        summary,
        "GPU on &lt;!channel&gt; ∗x∗ &lt;http://evil|click&gt; of ˍmlˍ &lt;!here&gt; run by ∗root∗ @\u{2060}everyone is hollow"
    );
    assert!(msg["text"].as_str().unwrap().contains("on &lt;!channel&gt; ∗x∗"), "{}", msg["text"]);
    validate_slack_messages(&[msg]);
}

/// Item 11: `created_by` of a silence is the caller (the user's email, or `key:` and the API
/// key's name); a body that claims it is refused and stores nothing.
async fn a_silence_is_made_by_its_caller(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (email, password) = ("owner@silence.example", "silence-admin-password-1");
    let server = TestServer::spawn(&db.url, &["--admin-email", email, "--admin-password", password]);
    let api = Api::new(&server);
    let ends = now_ms() + 3_600_000;

    let (status, e, _) = api
        .post("/api/v1/silences", json!({"matchers": {"host": "n1"}, "ends_at": ends, "created_by": "ceo@example.com"}))
        .await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("created_by")), "{e}");
    let (list, _) = api.get("/api/v1/silences").await;
    assert_eq!(list["silences"], json!([]), "nothing stored");

    let (status, s, _) = api.post("/api/v1/silences", json!({"matchers": {"host": "n1"}, "ends_at": ends})).await;
    assert_eq!(status, 201, "{s}");
    let by_key = s["created_by"].as_str().unwrap();
    assert!(by_key.starts_with("key:") && by_key.len() > 4, "{s}");

    // A dashboard user: the session's email.
    let http = reqwest::Client::new();
    let login = http
        .post(server.url("/api/v1/auth/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 200);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let csrf = login.json::<Value>().await.unwrap()["csrf_token"].as_str().unwrap().to_string();
    let resp = http
        .post(server.url("/api/v1/silences"))
        .header("cookie", &cookie)
        .header("x-csrf-token", &csrf)
        .json(&json!({"matchers": {"team": "ml"}, "ends_at": ends}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(resp.json::<Value>().await.unwrap()["created_by"], email);
    let (list, _) = api.get("/api/v1/silences").await;
    let mut by: Vec<&str> =
        list["silences"].as_array().unwrap().iter().map(|s| s["created_by"].as_str().unwrap()).collect();
    by.sort();
    assert_eq!(by, [by_key, email]);
}

/// Item 4, for data written by earlier versions: their errors named the URL and echoed answers;
/// migration 0013 cleans them (run again here on rows written the old way).
async fn errors_stored_before_the_upgrade_lose_urls_and_answers(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let token = "OLD-T0K3N-5e6f";
    let rx = Receiver::start(Answer::Status(405, "nope".into())).await;
    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let id = api.channel("old", "webhook", &format!("{}/hooks/{token}", rx.url)).await;
    let (status, t, _) = api.test_channel(id).await;
    assert_eq!((status, t["status"].as_str()), (202, Some("failed")), "{t}");
    drop(server);
    // What the previous version wrote.
    let old_connect = format!("error sending request for url ({}/hooks/{token}): client error (Connect)", rx.url);
    let old_answer = format!("HTTP 405: {{\"error\": \"{token}\"}}");
    sql(&db.url, &format!("UPDATE alert_outbox SET last_error = '{old_connect}'")).await;
    sql(&db.url, &format!("UPDATE alert_deliveries SET error = '{old_answer}'")).await;
    sql(&db.url, "DELETE FROM _sqlx_migrations WHERE version = 13").await;

    let server = TestServer::spawn(&db.url, FAST);
    let api = Api::new(&server);
    let (log, text) = api.get(&format!("/api/v1/notification-channels/{id}/deliveries")).await;
    assert_eq!(log["deliveries"][0]["error"], "HTTP 405", "{log}");
    assert!(!text.contains(token), "{text}");
    let outbox = sql_text(&db.url, "SELECT last_error FROM alert_outbox").await;
    assert_eq!(outbox, "error sending request (text removed: it named the channel's URL)");
}

async fn sql(db_url: &str, statement: &str) {
    use sqlx::Connection;
    if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        sqlx::query(statement).execute(&mut c).await.unwrap();
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.unwrap();
        sqlx::query(statement).execute(&mut c).await.unwrap();
    }
}

async fn sql_text(db_url: &str, query: &str) -> String {
    use sqlx::Connection;
    if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        sqlx::query_scalar(query).fetch_one(&mut c).await.unwrap()
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.unwrap();
        sqlx::query_scalar(query).fetch_one(&mut c).await.unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Not backend-dependent.

/// A bad `--webhook-allow-cidrs` (flag or environment) stops the server at start, saying which
/// entry and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_allow_list_stops_the_server_at_start() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let run = |flag: Option<&str>, env: Option<&str>| {
        let mut cmd = std::process::Command::new(bin_path("fleetlens-server"));
        cmd.args(["--listen", "127.0.0.1:0", "--database-url", &db.url])
            .env_remove("FLEETLENS_WEBHOOK_ALLOW_CIDRS")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(f) = flag {
            cmd.args(["--webhook-allow-cidrs", f]);
        }
        if let Some(e) = env {
            cmd.env("FLEETLENS_WEBHOOK_ALLOW_CIDRS", e);
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server started with a bad allow-list ({flag:?} / {env:?})");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    };
    for (flag, env, bad) in [
        (Some("10.0.0.0/33"), None, "10.0.0.0/33"),
        (Some("10.0.0.0/8,intranet"), None, "intranet"),
        (None, Some("127.0.0.0/8, 192.168.0.0/16,fd00::/129"), "fd00::/129"),
    ] {
        let (status, stderr) = run(flag, env);
        assert!(!status.success());
        assert!(
            stderr.contains("--webhook-allow-cidrs") && stderr.contains(bad) && stderr.contains("not a CIDR"),
            "{stderr}"
        );
    }
}
