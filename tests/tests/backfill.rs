//! Black box, back-fill (issue 26): the recorded H200 trace keeps its timestamps (days ago), as
//! `fleetlens-agent --source replay:` without `--rebase-ts` sends it. The GPU is paid only over
//! the span it reported (no "offline" hours from the end of the trace until now), the shipped
//! "Agent offline" rule does not fire on it, and the other rules evaluate its samples like live
//! ones (docs/ALERTING.md, "Back-fill"). On SQLite and PostgreSQL.

use std::time::{Duration, Instant};

use fleetlens_tests::http::{ingest_ok, post_json};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(a_replayed_old_trace_is_back_fill);

async fn get(client: &reqwest::Client, server: &TestServer, path: &str) -> Value {
    let resp = client.get(server.url(path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    resp.json().await.unwrap()
}

async fn a_replayed_old_trace_is_back_fill(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();
    let lines = fixture_lines();
    let uuid = lines[0]["uuid"].as_str().unwrap().to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let last_ts = lines.iter().map(|l| l["ts_ms"].as_i64().unwrap()).max().unwrap();
    assert!(now - last_ts > 48 * 3_600_000, "the trace was recorded days ago (it is the back-fill here)");

    // A rule the trace's `one_block` phase matches (nvidia-smi 100 %, SM activity 0.8 %).
    let rule: Value = post_json(
        &server,
        "/api/v1/alert-rules",
        json!({"name": "Hollow", "condition": "gpu_util_pct >= 80 && sm_active_pct < 5", "severity": "warning"}),
    )
    .await;
    let rule_id = rule["id"].as_i64().expect("rule created");
    ingest_ok(&server, json!({"host": "replayed", "samples": lines})).await;

    // The rule evaluates the back-filled samples (the engine used to look back 24 h from now).
    let deadline = Instant::now() + Duration::from_secs(20);
    let alert = loop {
        let alerts = get(&client, &server, &format!("/api/v1/alerts?rule_id={rule_id}")).await;
        if let Some(a) = alerts["alerts"].as_array().and_then(|a| a.first()).cloned() {
            break a;
        }
        assert!(Instant::now() < deadline, "the rule never evaluated the back-filled trace");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(alert["gpu"], uuid.as_str());
    let since = alert["active_since_ms"].as_i64().unwrap();
    assert!(since <= last_ts, "the alert is on the trace's time, not now: {alert}");

    // Several engine cycles later, no "Agent offline" on the replayed GPU.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = get(&client, &server, &format!("/api/v1/alerts?gpu={uuid}")).await;
    let offline: Vec<&Value> =
        all["alerts"].as_array().unwrap().iter().filter(|a| a["rule_name"] == "Agent offline").collect();
    assert!(offline.is_empty(), "a replayed trace is not an outage: {offline:?}");

    // Paid only over the ~84 s it reported (to the end of its last minute), not until now.
    let report = get(&client, &server, "/api/v1/reports/billing?from=0&group_by=gpu").await;
    let row = report["rows"].as_array().unwrap().iter().find(|r| r["group"] == uuid.as_str()).expect("the GPU's row");
    let hours = row["gpu_hours"].as_f64().unwrap();
    assert!(hours > 0.0 && hours <= 3.0 / 60.0, "paid over the trace's span only: {hours} h ({row})");
    let offline_h = row["hours_by_state"]["offline"].as_f64().unwrap_or(0.0);
    assert!(offline_h < 1.0 / 60.0, "no offline hours after the trace: {offline_h} h");
    let summary = get(&client, &server, "/api/v1/fleet/summary?from=0").await;
    let offline_h = summary["hours_by_state"]["offline"].as_f64().unwrap_or(0.0);
    assert!(offline_h < 1.0 / 60.0, "the fleet summary has no offline hours either: {offline_h} h");
}
