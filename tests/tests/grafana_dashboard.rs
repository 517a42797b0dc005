//! deploy/grafana/fleetlens.json against real parts: a real Prometheus (Debian's) scrapes a
//! running server's `/metrics` (a recorded H200 trace ingested, its host in a team, and a busy H100), and every
//! PromQL expression of the dashboard, run with `promtool query instant` against that
//! Prometheus, returns data. (Its schema is checked by scripts/lint-deploy.sh.) Bounded: the
//! Prometheus child is killed after at most [`DEADLINE`].

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleetlens_tests::http::{ingest_ok, now_ms};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines_ending_at};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(90);

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every `expr` of the dashboard's panels, with Grafana's `$__rate_interval` given a value
/// (Grafana computes it from the scrape interval: at least 4 of them).
fn dashboard_queries() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/fleetlens.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().expect("every target is a PromQL expression");
            out.push((p["title"].as_str().unwrap().to_string(), expr.replace("$__rate_interval", "30s")));
        }
    }
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `promtool query instant`'s result: the series or scalar returned.
fn query(prometheus: &str, expr: &str) -> Result<Value, String> {
    let out = Command::new("promtool")
        .args(["query", "instant", "-o", "json", prometheus, expr])
        .output()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    if !out.status.success() {
        return Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, &[]);
    // The recorded H200 trace, moved to end now: busy and idle phases, so there is waste.
    let lines = fixture_lines_ending_at(now_ms() - 1000);
    ingest_ok(&server, json!({"host": "gpu-node-01", "labels": {"team": "vision"}, "samples": lines})).await;
    // The trace ends idle (no efficiency: util 0): a second host has a GPU busy now.
    let now = now_ms();
    let busy: Vec<Value> = (1..=5)
        .map(|i| {
            json!({"ts_ms": now - i * 1000, "uuid": "GPU-busy-0", "gpu_index": 0, "name": "NVIDIA H100 80GB HBM3",
                   "gpu_util_pct": 100, "sm_active_pct": 60, "tensor_active_pct": 30, "mem_used_bytes": 40u64 << 30,
                   "mem_total_bytes": 80u64 << 30, "power_w": 500, "processes": [{"pid": 7}]})
        })
        .collect();
    ingest_ok(&server, json!({"host": "gpu-node-02", "samples": busy})).await;

    let dir = tempfile::tempdir().unwrap();
    let target = server.base_url.trim_start_matches("http://").to_string();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: fleetlens\n    \
         authorization:\n      credentials: {ADMIN_TOKEN}\n    static_configs: [{{targets: [\"{target}\"]}}]\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let _prometheus = Prometheus(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .expect("prometheus (Debian package prometheus; scripts/test.sh installs it)"),
    );
    let prometheus = format!("http://127.0.0.1:{port}");

    let queries = dashboard_queries();
    assert!(queries.len() >= 8, "{queries:?}");
    let start = Instant::now();
    let mut pending = queries.clone();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (title, expr) in pending {
            match query(&prometheus, &expr) {
                Ok(v) if v.as_array().is_some_and(|a| !a.is_empty()) => {}
                other => still.push((title, expr, other)),
            }
        }
        if still.is_empty() {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "queries without data after {DEADLINE:?}: {still:#?}");
        pending = still.into_iter().map(|(t, e, _)| (t, e)).collect();
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    // The numbers behind the panels are the server's: the H200 of the trace wasted money and
    // its team labels it.
    let wasted = query(&prometheus, "sum by (team) (fleetlens_gpu_wasted_cost_last_hour)").unwrap();
    assert_eq!(wasted[0]["metric"]["team"], "vision", "{wasted}");
    let cost: f64 = wasted[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(cost > 0.0, "{wasted}");
}
