//! `kill -9` of the server while its sealing job moves raw samples into column blocks (issue 21)
//! loses and duplicates nothing: after every kill the database holds each sample exactly once
//! (as an open row or in a block), and the API answers the same raw samples as before sealing.

use std::time::Duration;

use fleetlens_tests::http::{ingest_ok, now_ms};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer};
use serde_json::{Value, json};
use sqlx::Connection;

fleetlens_tests::for_each_backend!(kill_9_during_sealing_loses_and_duplicates_nothing);

const GPUS: i64 = 24;
const HOURS: i64 = 4;
const STEP_MS: i64 = 5_000;
const H: i64 = 3_600_000;

/// Samples of GPU `g` over `HOURS` hours from `start`, values at their stored precision.
fn samples(g: i64, start: i64) -> Vec<Value> {
    (0..HOURS * H / STEP_MS)
        .map(|i| {
            json!({
                "ts_ms": start + i * STEP_MS + (i * 31 + g) % 50,
                "uuid": format!("GPU-seal-{g:03}"),
                "gpu_index": g,
                "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": (i + g) % 101,
                "sm_active_pct": if i % 4 == 0 { Value::Null } else { json!(((i * 3) % 100) as f64 + 0.5) },
                "mem_used_bytes": i * 1_048_576,
                "mem_total_bytes": 85_520_809_984i64,
                "power_w": 150.25 + (i % 9) as f64,
                "energy_j": 5.0e6 + (i * 751) as f64,
                "processes": if i % 3 == 0 { json!([]) } else { json!([{"pid": 1000 + g, "used_bytes": 1_073_741_824}]) },
            })
        })
        .collect()
}

/// Samples in the database: open rows plus those sealed in blocks.
async fn stored(db_url: &str) -> (i64, i64) {
    const SQL: &str = "SELECT (SELECT count(*) FROM open_sample_rows), (SELECT coalesce(sum(n), 0) FROM sample_blocks)";
    if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        sqlx::query_as(SQL).fetch_one(&mut c).await.unwrap()
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.unwrap();
        sqlx::query_as(SQL).fetch_one(&mut c).await.unwrap()
    }
}

/// Every GPU's raw samples as the API answers them.
async fn raw_answers(server: &TestServer, from: i64, to: i64) -> Vec<Value> {
    let client = reqwest::Client::new();
    let mut out = Vec::new();
    for g in 0..GPUS {
        let url = server.url(&format!("/api/v1/gpus/GPU-seal-{g:03}/samples?from={from}&to={to}&limit=100000"));
        let resp = client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        out.push(resp.json::<Value>().await.unwrap()["samples"].clone());
    }
    out
}

async fn kill_9_during_sealing_loses_and_duplicates_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // Hours that closed long ago (a back-fill): all of it is due for sealing.
    let start = (now_ms() / H - 24) * H;
    let end = start + HOURS * H;
    let total = GPUS * HOURS * H / STEP_MS;
    let before = {
        // No sealing in this first server's lifetime.
        let server = TestServer::spawn(&db.url, &["--seal-interval", "1h"]);
        for g in 0..GPUS {
            for chunk in samples(g, start).chunks(5_000) {
                ingest_ok(&server, json!({"host": format!("node-{}", g / 8), "samples": chunk})).await;
            }
        }
        raw_answers(&server, start, end).await
    };
    assert_eq!(stored(&db.url).await, (total, 0));
    // Servers sealing every 20 ms, killed at staggered moments into their work.
    let mut sealed_seen = Vec::new();
    for i in 0..6u64 {
        let mut server = TestServer::spawn(&db.url, &["--seal-interval", "20ms"]);
        tokio::time::sleep(Duration::from_millis(40 + i * 90)).await;
        server.kill();
        let (rows, sealed) = stored(&db.url).await;
        assert_eq!(rows + sealed, total, "kill {i}: each sample stored exactly once ({rows} open, {sealed} sealed)");
        sealed_seen.push(sealed);
    }
    assert!(sealed_seen.iter().any(|&s| s > 0), "the killed servers sealed something: {sealed_seen:?}");
    // A last server finishes the work and answers what the first did.
    let server = TestServer::spawn(&db.url, &["--seal-interval", "20ms"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while stored(&db.url).await != (0, total) {
        assert!(std::time::Instant::now() < deadline, "sealing did not finish: {:?}", stored(&db.url).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(raw_answers(&server, start, end).await, before);
}
