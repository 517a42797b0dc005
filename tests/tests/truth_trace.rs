//! Black box: the truth runs on an H100 and an H200 (agent/tests/device/truth.sh, docs/AGENT.md
//! "The truth suite"), each replayed by the real agent into the real server on SQLite and
//! PostgreSQL. Every labelled phase must get the state a truthful monitor gives it; the sawtooth
//! phases — where NVML's instantaneous utilization aliased to "busy" and made the GPU look hollow
//! — must read `starved`, and the shipped "Busy but hollow" rule must fire on the spinning kernel
//! and never on the sawtooth.

use std::time::{Duration, Instant};

use fleetlens_tests::http::{get, put};
use fleetlens_tests::{Backend, TestDatabase, TestServer, fixture, replay_fixture_once};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(h100_truth_run_phases_and_alerts, h200_truth_run_phases_and_alerts);

async fn h100_truth_run_phases_and_alerts(backend: Backend) {
    truth_run_phases_and_alerts(backend, "nvml-h100-truth.jsonl").await
}

async fn h200_truth_run_phases_and_alerts(backend: Backend) {
    truth_run_phases_and_alerts(backend, "nvml-h200-truth.jsonl").await
}

/// The first samples of a phase straddle the change (the truth suite skips the same 6 s).
const SETTLE_MS: i64 = 6_000;
const SAWTOOTH: [&str; 3] = ["saw_0.5s", "saw_1s", "saw_2s"];

/// The states a truthful monitor may give each phase (agent/tests/device/truth_check.py).
fn expected(phase: &str) -> &'static [&'static str] {
    match phase {
        "idle" => &["idle"],
        "held_30gb" => &["idle_held"],
        "spin_2_blocks" => &["stalled"],
        "matmul_bf16" => &["compute_bound"],
        "d2d_copy" => &["memory_bound"],
        "mlp_batch1" => &["hollow", "starved"],
        "saw_0.5s" | "saw_1s" | "saw_2s" | "resnet_starved" => &["starved"],
        "resnet_fed" => &["active", "compute_bound", "memory_bound", "low_occupancy"],
        other => panic!("phase {other} is not one of the truth suite's"),
    }
}

fn trace_lines(trace: &str) -> Vec<Value> {
    std::fs::read_to_string(fixture(trace))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The labelled phases in order: name, first and last sample time.
fn phases(lines: &[Value]) -> Vec<(String, i64, i64)> {
    let mut out: Vec<(String, i64, i64)> = Vec::new();
    for l in lines {
        let (phase, ts) = (l["phase"].as_str().unwrap(), l["ts_ms"].as_i64().unwrap());
        if phase == "before" || phase.starts_with("after_") {
            continue;
        }
        match out.last_mut() {
            Some((p, _, last)) if p == phase => *last = ts,
            _ => out.push((phase.to_string(), ts, ts)),
        }
    }
    out
}

async fn truth_run_phases_and_alerts(backend: Backend, trace: &str) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    // The shipped rules wait minutes (`for`); the phases last 40 s: as in the truth suite, the
    // hollow rule fires after 10 s of its condition.
    let (status, rules) = get(&server, "/api/v1/alert-rules").await;
    assert_eq!(status, 200, "{rules}");
    let hollow = rules["rules"].as_array().unwrap().iter().find(|r| r["builtin"] == "busy_but_hollow").unwrap()["id"]
        .as_i64()
        .unwrap();
    let (status, r) =
        put(&server, &format!("/api/v1/alert-rules/{hollow}"), json!({"for_s": 10, "keep_firing_for_s": 0})).await;
    assert_eq!(status, 200, "{r}");

    replay_fixture_once(&server, trace);

    let lines = trace_lines(trace);
    let uuid = lines[0]["uuid"].as_str().unwrap();
    let phases = phases(&lines);
    let names: Vec<&str> = phases.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(
        names,
        [
            "idle",
            "held_30gb",
            "spin_2_blocks",
            "matmul_bf16",
            "d2d_copy",
            "mlp_batch1",
            "saw_0.5s",
            "saw_1s",
            "saw_2s",
            "resnet_starved",
            "resnet_fed"
        ]
    );
    for (phase, first, last) in &phases {
        let from = first + SETTLE_MS;
        let window_s = (last + 1 - from) / 1000;
        assert!(window_s >= 20, "{phase}: {window_s} s of settled samples");
        let to = from + window_s * 1000;
        let (status, windows) =
            get(&server, &format!("/api/v1/gpus/{uuid}/states?from={from}&to={to}&window_s={window_s}")).await;
        assert_eq!(status, 200, "{windows}");
        let w = &windows.as_array().unwrap()[0];
        let state = w["state"].as_str().unwrap();
        assert!(expected(phase).contains(&state), "{phase}: {state} ({})", w["reason"]);
        if SAWTOOTH.contains(&phase.as_str()) {
            // Starved, not hollow: the interval-mean utilization is the sawtooth's busy share,
            // well under the hollow rule's 50 %, and SM activity is there (work arrives).
            let util = w["gpu_util_pct"].as_f64().unwrap();
            let sm = w["sm_active_pct"].as_f64().unwrap();
            assert!(util > 5.0 && util < 50.0, "{phase}: util {util}");
            assert!(sm > 0.1 && sm < util, "{phase}: SM activity {sm}");
        }
    }

    // The hollow rule fires on the spinning kernel (so the engine has read the trace that far)
    // and, once every sample has been evaluated, never on the sawtooth.
    let phase_of = |ts: i64| phases.iter().find(|(_, a, b)| (*a..=*b).contains(&ts)).map(|(p, _, _)| p.as_str());
    let last_phase_end = phases.last().unwrap().2;
    let deadline = Instant::now() + Duration::from_secs(60);
    let alerts = loop {
        let (status, list) = get(&server, &format!("/api/v1/alerts?status=all&rule_id={hollow}")).await;
        assert_eq!(status, 200, "{list}");
        let (_, gpu) = get(&server, &format!("/api/v1/gpus/{uuid}")).await;
        let done = gpu["last_seen_ms"].as_i64().is_some_and(|t| t >= last_phase_end);
        let alerts = list["alerts"].as_array().unwrap().clone();
        if done && alerts.iter().any(|a| a["status"] == "resolved") {
            // The engine steps through a GPU's samples in time order after each ingest; give
            // it a moment past the newest, then read the final list.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let (_, list) = get(&server, &format!("/api/v1/alerts?status=all&rule_id={hollow}")).await;
            break list["alerts"].as_array().unwrap().clone();
        }
        assert!(Instant::now() < deadline, "the hollow alert did not fire and resolve: {alerts:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let fired: Vec<Option<&str>> = alerts.iter().filter_map(|a| a["fired_at_ms"].as_i64()).map(phase_of).collect();
    assert!(fired.contains(&Some("spin_2_blocks")), "{alerts:?}");
    for p in &fired {
        assert!(!p.is_some_and(|p| SAWTOOTH.contains(&p)), "Busy but hollow fired on the sawtooth: {alerts:?}");
    }
}
