//! A small real ingest server for the agent's tests: axum on 127.0.0.1:0, speaking the
//! `/api/v1/ingest` contract (bearer key, zstd protobuf or gzip JSON body, idempotent per uuid
//! and ts_ms),
//! with a script of failures to answer first.

#![allow(dead_code)]

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use fleetlens_api::{ErrorBody, ErrorDetail, INGEST_PATH, IngestBatch, IngestResponse};
use tokio::net::TcpListener;

pub const API_KEY: &str = "test-key";

pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nvml-h200-phases.jsonl")
}

type RejectFn = dyn Fn(&IngestBatch) -> bool + Send + Sync;

pub struct ServerState {
    /// Statuses answered (without storing anything) to the next requests, in order.
    pub script: Mutex<VecDeque<StatusCode>>,
    /// Batches that make this return true are answered 422.
    pub reject: Option<Box<RejectFn>>,
    pub requests: AtomicUsize,
    /// Accepted batches, in the order they were committed.
    pub accepted: Mutex<Vec<IngestBatch>>,
    pub stored: Mutex<HashSet<(String, i64)>>,
    pub duplicates: AtomicUsize,
    /// `content-type content-encoding` of every request, in arrival order.
    pub formats: Mutex<Vec<String>>,
    /// Answer protobuf bodies with 415, as a server older than the protobuf intake does.
    pub json_only: bool,
}

impl ServerState {
    pub fn new(script: impl IntoIterator<Item = StatusCode>) -> Self {
        Self {
            script: Mutex::new(script.into_iter().collect()),
            reject: None,
            requests: AtomicUsize::new(0),
            accepted: Mutex::new(Vec::new()),
            stored: Mutex::new(HashSet::new()),
            duplicates: AtomicUsize::new(0),
            formats: Mutex::new(Vec::new()),
            json_only: false,
        }
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Every accepted sample as (host, uuid, ts_ms), in commit order.
    pub fn accepted_samples(&self) -> Vec<(String, String, i64)> {
        let acc = self.accepted.lock().unwrap();
        acc.iter().flat_map(|b| b.samples.iter().map(|s| (b.host.clone(), s.uuid.clone(), s.ts_ms))).collect()
    }

    pub fn stored_count(&self) -> usize {
        self.stored.lock().unwrap().len()
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.into(),
            message: message.into(),
            sample_index: None,
            field: None,
            column: None,
        },
    };
    (status, Json(body)).into_response()
}

async fn ingest(State(st): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    st.requests.fetch_add(1, Ordering::SeqCst);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if header("authorization") != format!("Bearer {API_KEY}") {
        return error(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong API key");
    }
    st.formats.lock().unwrap().push(format!("{} {}", header("content-type"), header("content-encoding")));
    if st.json_only && header("content-type") != "application/json" {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "send application/json");
    }
    let batch: IngestBatch =
        match fleetlens_agent::wire::decode_body(&header("content-type"), &header("content-encoding"), &body) {
            Ok(b) => b,
            Err(e) => return error(StatusCode::BAD_REQUEST, "bad_body", &e),
        };
    let scripted = st.script.lock().unwrap().pop_front();
    if let Some(status) = scripted {
        return error(status, "scripted", "scripted failure");
    }
    if st.reject.as_ref().is_some_and(|f| f(&batch)) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_sample", "scripted rejection");
    }
    let mut inserted = 0;
    {
        let mut stored = st.stored.lock().unwrap();
        for s in &batch.samples {
            if stored.insert((s.uuid.clone(), s.ts_ms)) {
                inserted += 1;
            } else {
                st.duplicates.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    let received = batch.samples.len() as u64;
    st.accepted.lock().unwrap().push(batch);
    Json(IngestResponse { received, inserted, merged: 0, duplicates: received - inserted }).into_response()
}

pub struct TestServer {
    pub url: String,
    pub state: Arc<ServerState>,
}

/// Serves on `listener` (so a test can hold a port before the server answers).
pub fn serve_on(listener: TcpListener, state: ServerState) -> TestServer {
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(state);
    let app = axum::Router::new().route(INGEST_PATH, axum::routing::post(ingest)).with_state(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    TestServer { url, state }
}

/// Polls `cond` until it holds (or fails the test after 10 s): fixed sleeps are flaky on a
/// loaded CI machine.
pub async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

pub async fn start(state: ServerState) -> TestServer {
    serve_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), state)
}

/// The agent binary with `args`, the environment kept from changing the flags' defaults
/// (`RUST_LOG=info`, no stdin, output captured, killed when dropped).
pub fn agent_command<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetlens-agent"));
    c.args(args);
    for name in [
        "FLEETLENS_SERVER",
        "FLEETLENS_API_KEY",
        "FLEETLENS_SOURCE",
        "FLEETLENS_SPOOL_DIR",
        "FLEETLENS_HOST",
        "FLEETLENS_INTERVAL",
        "FLEETLENS_SPOOL_MAX_BYTES",
        "FLEETLENS_BATCH_MAX",
        "FLEETLENS_LOG_FORMAT",
    ] {
        c.env_remove(name);
    }
    c.env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    c
}

/// Runs `cmd` to its end, which must come within `timeout`.
pub async fn finish(mut cmd: tokio::process::Command, timeout: std::time::Duration) -> std::process::Output {
    tokio::time::timeout(timeout, cmd.output()).await.expect("agent finished in time").unwrap()
}
