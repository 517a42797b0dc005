//! What the black-box tests do over HTTP again and again: call the server with the admin key,
//! poll until something holds, and serve a local receiver for the server to notify.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use serde_json::Value;

use crate::{ADMIN_TOKEN, TestServer};

/// Wall-clock now, Unix ms (the unit of every timestamp the API takes).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Percent-encode a path segment: every byte outside RFC 3986's unreserved set.
pub fn segment(s: &str) -> String {
    const UNRESERVED: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// `method path` with the admin key and an optional JSON body: the status and the body as JSON
/// (`Null` where the body is not JSON).
pub async fn call(server: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    call_at(&server.base_url, method, path, body).await
}

/// [`call`] to the server at `base_url` (which outlives a server killed and started again on
/// the same address).
pub async fn call_at(base_url: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{base_url}{path}")).bearer_auth(ADMIN_TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// `POST path` with the admin key, the body as it is and these headers (`content-type`,
/// `content-encoding`): what [`call`] cannot send (another type, an encoding, bytes that are not
/// JSON).
pub async fn post_bytes(
    server: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new().post(server.url(path)).bearer_auth(ADMIN_TOKEN).body(body);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().await.expect("request")
}

pub async fn get(server: &TestServer, path: &str) -> (u16, Value) {
    call(server, reqwest::Method::GET, path, None).await
}

pub async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    call(server, reqwest::Method::POST, path, Some(body)).await
}

pub async fn put(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    call(server, reqwest::Method::PUT, path, Some(body)).await
}

/// A GET that must answer 200: its JSON body.
pub async fn get_ok(server: &TestServer, path: &str) -> Value {
    let (status, body) = get(server, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// A GET whose body must be JSON, whatever the status.
pub async fn get_json(server: &TestServer, path: &str) -> Value {
    let resp = reqwest::Client::new().get(server.url(path)).bearer_auth(ADMIN_TOKEN).send().await.expect("request");
    resp.json().await.expect("a JSON body")
}

/// A GET's status and body as text.
pub async fn get_text(server: &TestServer, path: &str) -> (u16, String) {
    let resp = reqwest::Client::new().get(server.url(path)).bearer_auth(ADMIN_TOKEN).send().await.expect("request");
    (resp.status().as_u16(), resp.text().await.expect("a body"))
}

/// The value of one series of `GET /metrics` (`name` with its labels, as exposed); panics when
/// the series is missing.
pub async fn metric(server: &TestServer, name: &str) -> f64 {
    let (_, text) = get_text(server, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in /metrics"))
}

/// Set the price per GPU-hour of one GPU model (USD), as billing tests do first.
pub async fn set_price(server: &TestServer, gpu_name: &str, per_gpu_hour: f64) {
    let body = serde_json::json!({"currency": "USD", "source": "test", "per_gpu_hour": {gpu_name: per_gpu_hour}});
    let (status, answer) = put(server, "/api/v1/prices", body).await;
    assert_eq!(status, 200, "{answer}");
}

/// Whether `v` is a number within 1e-6 of `want`.
pub fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6)
}

/// The row of `group` in a billing report.
pub fn report_row<'a>(report: &'a Value, group: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == group)
        .unwrap_or_else(|| panic!("no row {group} in {report}"))
}

/// Poll `f` every 100 ms until it returns Some, or panic after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Serve `app` on `listener` until the test's runtime ends (or the task is aborted).
pub fn serve_on(listener: tokio::net::TcpListener, app: Router) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

/// Serve `app` on an OS-chosen port of 127.0.0.1: its address.
pub async fn serve_local(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_on(listener, app);
    addr
}

/// Requests received: path and JSON body (`Null` where the body is not JSON).
pub type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// A local HTTP receiver that answers 200 to everything and records each request's path and
/// JSON body.
#[derive(Clone)]
pub struct Recorder {
    /// `http://127.0.0.1:<port>`, no trailing slash.
    pub url: String,
    pub got: Received,
}

impl Recorder {
    pub async fn start() -> Recorder {
        async fn record(State(got): State<Received>, uri: Uri, body: Bytes) -> StatusCode {
            got.lock().unwrap().push((uri.path().to_string(), serde_json::from_slice(&body).unwrap_or(Value::Null)));
            StatusCode::OK
        }
        let got = Received::default();
        let addr = serve_local(Router::new().fallback(record).with_state(got.clone())).await;
        Recorder { url: format!("http://{addr}"), got }
    }

    /// The bodies received at `path`, in order.
    pub fn at(&self, path: &str) -> Vec<Value> {
        self.got.lock().unwrap().iter().filter(|(p, _)| p == path).map(|(_, b)| b.clone()).collect()
    }

    /// Every body received, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.got.lock().unwrap().iter().map(|(_, b)| b.clone()).collect()
    }
}

/// The alerts of rule `rule_id` (any status), polled every 200 ms until there is one or
/// `timeout` has passed (then the empty list).
pub async fn alerts_of_rule(server: &TestServer, rule_id: i64, timeout: Duration) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let (_, a) = get(server, &format!("/api/v1/alerts?status=all&rule_id={rule_id}")).await;
        let list = a["alerts"].as_array().cloned().unwrap_or_default();
        if !list.is_empty() || Instant::now() > deadline {
            return list;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `POST /api/v1/ingest` of `body` (`{"host": …, "samples": […]}`) with the admin key, which
/// must answer 200.
pub async fn ingest_ok(server: &TestServer, body: Value) {
    let (status, answer) = post(server, "/api/v1/ingest", body).await;
    assert_eq!(status, 200, "ingest: {answer}");
}

/// A POST of `body` with the admin key whose answer must be JSON, whatever the status.
pub async fn post_json(server: &TestServer, path: &str, body: Value) -> Value {
    let req = reqwest::Client::new().post(server.url(path)).bearer_auth(ADMIN_TOKEN);
    req.json(&body).send().await.expect("request").json().await.expect("a JSON body")
}

/// A POST with the admin key that must answer 201 Created: the created resource.
pub async fn create(server: &TestServer, path: &str, body: Value) -> Value {
    let (status, created) = post(server, path, body).await;
    assert_eq!(status, 201, "POST {path}: {created}");
    created
}

/// A warning rule `name` on `condition` that fires at once (`for_s` 0): the created rule.
pub async fn create_rule(server: &TestServer, name: &str, condition: &str) -> Value {
    let body = serde_json::json!({"name": name, "condition": condition, "for_s": 0, "severity": "warning"});
    create(server, "/api/v1/alert-rules", body).await
}
