//! Black box: a GPU's state *now* (the GPU list, the GPU detail, its state timeline and
//! `/metrics`) against the wall clock. Agents sample every second but send every few seconds (`--flush-interval`, 5 s by
//! default), so the newest stored sample of a healthy GPU is up to a flush interval old: that is
//! not "no sample for 3 intervals", and the GPU must not read `offline` between two deliveries.

use fleetlens_tests::http::{ingest_ok, now_ms};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(a_gpu_between_two_deliveries_is_not_offline);

/// The recorded trace's last `n` samples (1 s apart), as sent by `host` for a GPU of its own,
/// the newest `age_ms` old.
fn recent(host: &str, n: usize, age_ms: i64) -> Vec<Value> {
    let all = fixture_lines();
    let mut lines = all[all.len() - n..].to_vec();
    let shift = now_ms() - age_ms - lines.last().unwrap()["ts_ms"].as_i64().unwrap();
    for l in &mut lines {
        l["ts_ms"] = json!(l["ts_ms"].as_i64().unwrap() + shift);
        l["host"] = json!(host);
        l["uuid"] = json!(format!("GPU-{host}"));
    }
    lines
}

async fn a_gpu_between_two_deliveries_is_not_offline(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();
    // `live`: an agent at the default cadence, its last batch (5 samples) sent 5 s ago, the next
    // one due now. `gone`: an agent whose last batch is 60 s old, far beyond any cadence.
    for (host, age_ms) in [("live", 5_000), ("gone", 60_000)] {
        ingest_ok(&server, json!({"host": host, "samples": recent(host, 5, age_ms)})).await;
    }
    let get = |path: &str| {
        let req = client.get(server.url(path)).bearer_auth(ADMIN_TOKEN);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };

    let list = get("/api/v1/gpus").await;
    let state_of = |uuid: &str| {
        let gpu = list["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == uuid).unwrap();
        gpu["state"].as_str().unwrap().to_string()
    };
    // The trace ends idle (no process, util 0).
    assert_eq!(state_of("GPU-live"), "idle", "{list}");
    assert_eq!(state_of("GPU-gone"), "offline", "{list}");

    let live = get("/api/v1/gpus/GPU-live").await;
    assert_eq!(live["state"], "idle", "{live}");
    assert_eq!(live["current"]["state"], "idle", "{live}");
    let gone = get("/api/v1/gpus/GPU-gone").await;
    assert_eq!(gone["current"]["state"], "offline", "{gone}");
    assert!(gone["current"]["reason"].as_str().unwrap().starts_with("no sample for"), "{gone}");

    // The state timeline ends at the newest sample while the GPU reports (the time since is not
    // known yet), and runs on to now once it has gone silent; from raw samples (2-s windows) and
    // from minute rollups (60-s windows) alike.
    for window_s in [2, 60] {
        let live = get(&format!("/api/v1/gpus/GPU-live/states?window_s={window_s}")).await;
        let windows = live.as_array().unwrap();
        assert!(!windows.is_empty(), "{live}");
        assert!(windows.iter().all(|w| w["state"] != "offline"), "window_s={window_s}: {live}");
        let last = windows.last().unwrap();
        assert_eq!(last["state"], "idle", "window_s={window_s}: {live}");
        assert!(last["to_ms"].as_i64().unwrap() < now_ms() - 4_000, "ends at the newest sample: {last}");
        let gone = get(&format!("/api/v1/gpus/GPU-gone/states?window_s={window_s}")).await;
        let last = gone.as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["state"], "offline", "window_s={window_s}: {gone}");
        assert!(last["to_ms"].as_i64().unwrap() > now_ms() - 5_000, "runs on to now: {last}");
    }

    let text = client.get(server.url("/metrics")).bearer_auth(ADMIN_TOKEN).send().await.unwrap().text().await.unwrap();
    let state_line = |uuid: &str| {
        text.lines()
            .find(|l| l.starts_with("fleetlens_gpu_state{") && l.contains(uuid) && l.ends_with(" 1.0"))
            .map(str::to_string)
            .unwrap_or_default()
    };
    assert!(state_line("GPU-live").contains("state=\"idle\""), "{}", state_line("GPU-live"));
    assert!(state_line("GPU-gone").contains("state=\"offline\""), "{}", state_line("GPU-gone"));
}
