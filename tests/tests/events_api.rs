//! Black box: GPU events (XID errors, a GPU lost and back) through ingest, on SQLite and
//! PostgreSQL: stored once however often a batch is sent, listed and filtered by the API,
//! refused whole when malformed, and the shipped "XID errors" rule fires on them.

use std::time::Duration;

use fleetlens_tests::http::{get, now_ms, post};
use fleetlens_tests::{Backend, TestDatabase, TestServer, table_counts};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(events_are_stored_once_listed_and_alerted_on, malformed_events_reject_the_batch);

fn sample(uuid: &str, ts_ms: i64) -> Value {
    json!({"ts_ms": ts_ms, "uuid": uuid, "gpu_index": 0, "name": "NVIDIA H200", "gpu_util_pct": 90.0,
           "sm_active_pct": 80.0, "mem_used_bytes": 1_000_000, "mem_total_bytes": 150_000_000_000_i64})
}

async fn events_are_stored_once_listed_and_alerted_on(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--alert-eval-interval", "200ms"]);
    let t = now_ms() - 5_000;
    let batch = json!({
        "host": "node-x",
        "samples": [sample("GPU-x1", t), sample("GPU-x1", t + 1000), sample("GPU-x2", t)],
        "events": [
            {"ts_ms": t + 1000, "uuid": "GPU-x1", "kind": "xid", "xid": 79},
            {"ts_ms": t + 1000, "uuid": "GPU-x2", "kind": "gpu_lost", "message": "NVML: GPU is lost"},
        ],
    });
    // Sent twice (an agent retrying after a lost answer): stored once.
    for _ in 0..2 {
        let (status, body) = post(&server, "/api/v1/ingest", batch.clone()).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, list) = get(&server, "/api/v1/events").await;
    assert_eq!(status, 200, "{list}");
    let events = list["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{list}");
    let xid = events.iter().find(|e| e["kind"] == "xid").unwrap();
    assert_eq!(
        (xid["gpu"].as_str(), xid["host"].as_str(), xid["xid"].as_i64()),
        (Some("GPU-x1"), Some("node-x"), Some(79))
    );
    assert_eq!(xid["ts_ms"], t + 1000);
    assert!(xid["time"].as_str().unwrap().ends_with('Z'));
    let lost = events.iter().find(|e| e["kind"] == "gpu_lost").unwrap();
    assert_eq!((lost["xid"].clone(), lost["message"].as_str()), (Value::Null, Some("NVML: GPU is lost")));

    // Filters.
    let (_, only_xid) = get(&server, "/api/v1/events?kind=xid").await;
    assert_eq!(only_xid["events"].as_array().unwrap().len(), 1);
    let (_, only_x2) = get(&server, "/api/v1/events?gpu=GPU-x2").await;
    assert_eq!(only_x2["events"][0]["kind"], "gpu_lost");
    let (_, none) = get(&server, &format!("/api/v1/events?to={}", t)).await;
    assert_eq!(none["events"].as_array().unwrap().len(), 0);
    let (status, e) = get(&server, "/api/v1/events?kind=reboot").await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("kind")));
    let (status, e) = get(&server, "/api/v1/events?limit=0").await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("limit")));

    // A host whose GPUs all stopped answering sends events and no samples.
    let (status, body) = post(
        &server,
        "/api/v1/ingest",
        json!({"host": "node-x", "samples": [], "events": [{"ts_ms": t + 2000, "uuid": "GPU-x1", "kind": "gpu_lost"}]}),
    )
    .await;
    assert_eq!((status, body["received"].as_i64()), (200, Some(0)), "{body}");
    let (_, list) = get(&server, "/api/v1/events?gpu=GPU-x1").await;
    let kinds: Vec<&str> = list["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["gpu_lost", "xid"], "newest first");

    // The shipped "XID errors" rule fires on the GPU with the XID, and only there.
    let (_, rules) = get(&server, "/api/v1/alert-rules").await;
    let rule = rules["rules"].as_array().unwrap().iter().find(|r| r["builtin"] == "xid_errors").unwrap()["id"].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let alerts = loop {
        let (_, a) = get(&server, &format!("/api/v1/alerts?rule_id={rule}&status=firing")).await;
        let list = a["alerts"].as_array().cloned().unwrap_or_default();
        if !list.is_empty() {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "the XID rule never fired: {a}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["gpu"], "GPU-x1");
    assert!(alerts[0]["summary"].as_str().unwrap().contains("1 XID error"), "{}", alerts[0]["summary"]);
}

async fn malformed_events_reject_the_batch(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let t = now_ms();
    let before = table_counts(&db.url).await;
    let cases = [
        (json!({"ts_ms": t, "uuid": "GPU-y", "kind": "reboot"}), 400, "events[0].kind"),
        (json!({"ts_ms": t, "uuid": "GPU-y", "kind": "gpu_lost", "xid": 13}), 422, "events[0].xid"),
        (json!({"ts_ms": t + 3_600_000, "uuid": "GPU-y", "kind": "xid"}), 422, "events[0].ts_ms"),
        (json!({"ts_ms": t, "uuid": "", "kind": "xid"}), 422, "events[0].uuid"),
        (json!({"ts_ms": t, "uuid": "GPU-y", "kind": "xid", "message": "x".repeat(2000)}), 422, "events[0].message"),
    ];
    for (event, want_status, want_field) in cases {
        let batch = json!({"host": "node-y", "samples": [sample("GPU-y", t)], "events": [event]});
        let (status, e) = post(&server, "/api/v1/ingest", batch.clone()).await;
        assert_eq!(status, want_status, "{want_field}: {e}");
        let field = e["error"]["field"].as_str().or(e["error"]["path"].as_str()).unwrap_or_default();
        assert!(field.starts_with(want_field), "{want_field}: {e}");
    }
    assert_eq!(table_counts(&db.url).await, before, "nothing stored");
    let (_, list) = get(&server, "/api/v1/events").await;
    assert_eq!(list["events"].as_array().unwrap().len(), 0);
}
