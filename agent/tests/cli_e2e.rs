//! The `fleetlens-agent` binary, spawned for real against a test ingest server.

mod common;

use std::collections::HashSet;
use std::process::Output;
use std::time::Duration;

use axum::http::StatusCode;
use common::{API_KEY, ServerState, agent_command as agent, fixture};
use tokio::process::Command;

/// The arguments of a `--once` run from `source` to the server at `url`, spooling in `spool`,
/// then `extra`.
fn once<'a>(url: &'a str, source: &'a str, spool: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--server", url, "--api-key", API_KEY, "--source", source, "--once", "--spool-dir", spool];
    args.extend_from_slice(extra);
    args
}

/// A `--once` run from `source` to the server at `url` with `extra` arguments, spooling in a
/// fresh directory: its output, and the directory.
async fn run_once(url: &str, source: &str, extra: &[&str]) -> (Output, tempfile::TempDir) {
    let spool = tempfile::tempdir().unwrap();
    let o = output(agent(once(url, source, spool.path().to_str().unwrap(), extra))).await;
    (o, spool)
}

async fn output(cmd: Command) -> Output {
    common::finish(cmd, Duration::from_secs(20)).await
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn replay_once_backfills_the_trace_through_503s() {
    let server = common::start(ServerState::new([StatusCode::SERVICE_UNAVAILABLE; 2])).await;
    let src = format!("replay:{}", fixture().display());
    let (o, spool) = run_once(&server.url, &src, &["--batch-max", "20", "--retry-max-delay", "100ms"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let got = server.state.accepted_samples();
    let unique: HashSet<(String, i64)> = got.iter().map(|(_, u, t)| (u.clone(), *t)).collect();
    assert_eq!(unique.len(), 84);
    assert!(got.iter().all(|(h, _, _)| h == "gpu-node-01"));
    assert_eq!(server.state.requests(), 2 + 5);
    // Recorded timestamps are kept (back-fill), in order.
    let ts: Vec<i64> = got.iter().map(|(_, _, t)| *t).collect();
    assert_eq!(ts[0], 1795311343641);
    assert!(ts.windows(2).all(|w| w[0] < w[1]));
    // Exit 0 means the spool is empty.
    let left: Vec<_> = std::fs::read_dir(spool.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["rejected"]);
}

#[tokio::test]
async fn host_flag_overrides_the_trace_and_json_logs() {
    let server = common::start(ServerState::new([])).await;
    let src = format!("replay:{}", fixture().display());
    let (o, _spool) = run_once(&server.url, &src, &["--host", "other-node", "--log-format", "json"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(server.state.accepted_samples().iter().all(|(h, _, _)| h == "other-node"));
    let err = stderr(&o);
    let last = err.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON log lines");
    assert_eq!(v["level"], "INFO");
}

#[tokio::test]
async fn simulate_once_sends_one_interval() {
    let server = common::start(ServerState::new([])).await;
    let (o, _spool) = run_once(&server.url, "simulate:10", &["--seed", "3"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let acc = server.state.accepted.lock().unwrap();
    let hosts: Vec<&str> = acc.iter().map(|b| b.host.as_str()).collect();
    assert_eq!(hosts, ["sim-node-00", "sim-node-01"]);
    assert_eq!(acc.iter().map(|b| b.samples.len()).sum::<usize>(), 10);
    assert!(acc[0].samples[0].uuid.starts_with("GPU-"));
}

#[tokio::test]
async fn stopped_agent_keeps_its_spool_for_the_next_start() {
    // The server is down for the first run; SIGTERM stops the agent with data spooled. That run
    // writes gzip JSON (as an agent before the protobuf intake did), the next one protobuf.
    let down = common::start(ServerState::new([StatusCode::SERVICE_UNAVAILABLE; 10_000])).await;
    let spool = tempfile::tempdir().unwrap();
    let dir = spool.path().to_str().unwrap();
    let src = format!("replay:{}", fixture().display());
    // Batches by size and interval only: the test counts them.
    let extra = ["--batch-max", "30", "--retry-max-delay", "50ms", "--flush-on-state-change", "false"];
    let first: Vec<&str> = extra.iter().copied().chain(["--wire-format", "json"]).collect();
    let mut child = agent(once(&down.url, &src, dir, &first)).spawn().unwrap();
    common::wait_until("the agent retried", || down.state.requests() >= 3).await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "graceful stop exits 0");
    let spooled = std::fs::read_dir(spool.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json.gz"));
    assert_eq!(spooled.count(), 3);
    assert!(down.state.formats.lock().unwrap().iter().all(|f| f == "application/json gzip"));

    // Next start, server up, default format: the spooled batches go first, as they were
    // written, then the replay's own (the same samples again, which the server deduplicates).
    let server = common::start(ServerState::new([])).await;
    let o = output(agent(once(&server.url, &src, dir, &extra))).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("left by an earlier run"));
    assert_eq!(server.state.stored_count(), 84);
    assert_eq!(server.state.duplicates.load(std::sync::atomic::Ordering::SeqCst), 84);
    let formats = server.state.formats.lock().unwrap().clone();
    assert_eq!(formats[..3], ["application/json gzip"; 3]);
    assert!(formats.len() > 3 && formats[3..].iter().all(|f| f == "application/x-protobuf zstd"), "{formats:?}");
}

#[tokio::test]
async fn rejected_batch_fails_the_once_run() {
    let mut state = ServerState::new([]);
    state.reject = Some(Box::new(|_| true));
    let server = common::start(state).await;
    let src = format!("replay:{}", fixture().display());
    // Batches by size and interval only: the test counts them.
    let (o, spool) = run_once(&server.url, &src, &["--flush-on-state-change", "false"]).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("rejected"), "{}", stderr(&o));
    assert_eq!(server.state.requests(), 1, "never retried");
    assert_eq!(std::fs::read_dir(spool.path().join("rejected")).unwrap().count(), 2);
}

#[tokio::test]
async fn configuration_errors_exit_non_zero_with_a_message() {
    let spool = tempfile::tempdir().unwrap();
    let dir = spool.path().to_str().unwrap();
    let bad_trace = spool.path().join("bad.jsonl");
    std::fs::write(&bad_trace, "{\"ts_ms\":1,\"host\":\"h\",\"uuid\":\"GPU-1\"}\nnot json\n").unwrap();
    let bad = format!("replay:{}", bad_trace.display());
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--source", "nvml", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"],
            "cannot load the NVIDIA management library /nonexistent/libnvidia-ml.so.1",
        ),
        (vec!["--source", "dcgm:ftp://127.0.0.1:9400/metrics"], "http:// or https://"),
        (vec!["--source", "replay:/nonexistent/trace.jsonl"], "/nonexistent/trace.jsonl"),
        (vec!["--source", &bad], "line 2"),
        (vec!["--source", "simulate:0"], "simulate:N"),
        (vec!["--interval", "soon"], "--interval"),
        (vec!["--log-format", "xml"], "--log-format"),
    ];
    // On a machine without the NVIDIA driver (CI, this project's dev machines), the default
    // source says so and exits, instead of reporting nothing or zeros.
    if !std::path::Path::new("/proc/driver/nvidia").exists() {
        cases.push((vec!["--source", "nvml"], "is the NVIDIA driver installed"));
        cases.push((vec![], "libnvidia-ml.so.1"));
    }
    for (args, want) in cases {
        let mut all = vec!["--spool-dir", dir, "--once"];
        all.extend(&args);
        let o = output(agent(&all)).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}
