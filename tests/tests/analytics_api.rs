//! Black box: workload states and the fleet summary through the real HTTP path, on SQLite and
//! PostgreSQL. The classifier claim rests on the recorded H200 trace, replayed by the real agent.

use fleetlens_tests::http::{get, ingest_ok, now_ms, post};
use fleetlens_tests::{
    ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines, minutes_of, one_process, replay_fixture_once,
};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    every_fixture_phase_gets_its_state,
    fleet_summary_on_a_known_scenario,
    four_gpus_for_one_hour_with_mfu_and_energy,
    gpus_without_sm_activity_say_so,
    live_gpus_are_never_credited_beyond_their_paid_time,
);

/// The state each phase must give (tests/fixtures/README.md).
fn expected(phase: &str) -> &'static [&'static str] {
    match phase {
        "idle" | "done" => &["idle"],
        "alloc_idle" | "idle_end" => &["idle_held"],
        "one_block" => &["hollow", "stalled"],
        "one_warp_per_sm" => &["low_occupancy"],
        "full_occupancy_spin" => &["active"],
        "memcopy" => &["memory_bound"],
        "matmul_bf16" => &["compute_bound"],
        "sawtooth" => &["starved"],
        "tiny_batch1" => &["hollow"],
        other => panic!("phase {other} not in the README table"),
    }
}

async fn every_fixture_phase_gets_its_state(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    replay_fixture_once(&server, "nvml-h200-phases.jsonl");

    let lines = fixture_lines();
    let uuid = lines[0]["uuid"].as_str().unwrap();
    // Phases in order, with their sample timestamps.
    let mut phases: Vec<(String, Vec<i64>)> = Vec::new();
    for l in &lines {
        let (phase, ts) = (l["phase"].as_str().unwrap(), l["ts_ms"].as_i64().unwrap());
        match phases.last_mut() {
            Some((p, list)) if p == phase => list.push(ts),
            _ => phases.push((phase.to_string(), vec![ts])),
        }
    }
    let mut checked = 0;
    for (i, (phase, ts)) in phases.iter().enumerate() {
        // Skip the first two samples of a phase: they straddle the change.
        if ts.len() < 4 {
            continue;
        }
        let from = ts[2];
        let phase_end = phases.get(i + 1).map_or(ts[ts.len() - 1] + 1, |(_, next)| next[0]);
        let (status, windows) =
            get(&server, &format!("/api/v1/gpus/{uuid}/states?from={from}&to={phase_end}&window_s=2")).await;
        assert_eq!(status, 200, "{windows}");
        let windows = windows.as_array().unwrap();
        let whole: Vec<&Value> =
            windows.iter().filter(|w| w["to_ms"].as_i64().unwrap() - w["from_ms"].as_i64().unwrap() == 2000).collect();
        assert!(!whole.is_empty(), "{phase}: at least one whole 2-s window");
        for w in whole {
            let state = w["state"].as_str().unwrap();
            assert!(expected(phase).contains(&state), "{phase}: window {} got {state} ({})", w["from_ms"], w["reason"]);
            assert!(w["reason"].as_str().is_some_and(|r| !r.is_empty()));
            // The efficiency score is SMACT ÷ kernel utilization × 100, capped at 100.
            match (w["gpu_util_pct"].as_f64(), w["sm_active_pct"].as_f64()) {
                (Some(u), Some(sm)) if u > 0.0 => {
                    let want = (sm / u * 100.0).min(100.0);
                    assert!((w["efficiency"].as_f64().unwrap() - want).abs() < 1e-9, "{phase}: {w}");
                }
                _ => assert_eq!(w["efficiency"], Value::Null, "{phase}: undefined without kernel utilization"),
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "checked {checked} windows");

    // The GPU list carries the current state: the trace is in the past, so the GPU is offline now.
    let (_, gpus) = get(&server, "/api/v1/gpus").await;
    assert_eq!(gpus["gpus"][0]["state"], "offline");
    // Bad window sizes are refused with a clear error.
    let (status, err) = get(&server, &format!("/api/v1/gpus/{uuid}/states?from=0&window_s=0")).await;
    assert_eq!((status, err["error"]["field"].as_str()), (422, Some("window_s")));
}

async fn fleet_summary_on_a_known_scenario(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();
    let start = (now_ms() / 60_000 - 40) * 60_000;
    let minute = 60_000;
    // GPU A (H100, $3/h set below): 10 min idle_held, then 10 min compute_bound.
    let mut a = minutes_of("GPU-A", "NVIDIA H100 80GB HBM3", start, 10, 0.0, 0.0, 0.0, &one_process());
    a.extend(minutes_of("GPU-A", "NVIDIA H100 80GB HBM3", start + 10 * minute, 10, 100.0, 95.0, 90.0, &one_process()));
    // GPU B (a model with no price): 10 min idle, then silent (offline).
    let b = minutes_of("GPU-B", "Acme X1", start, 10, 0.0, 0.0, 0.0, &json!([]));
    for (host, samples) in [("node-a", a), ("node-b", b)] {
        ingest_ok(&server, json!({"host": host, "samples": samples})).await;
    }
    let put = client
        .put(server.url("/api/v1/prices"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"currency": "USD", "source": "our contract", "per_gpu_hour": {"NVIDIA H100 80GB HBM3": 3.0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
    let bad = client
        .put(server.url("/api/v1/prices"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"currency": "USD", "source": "x", "per_gpu_hour": {"NVIDIA H100 80GB HBM3": -1.0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422);

    let to = start + 20 * minute;
    let (status, s) = get(&server, &format!("/api/v1/fleet/summary?from={start}&to={to}")).await;
    assert_eq!(status, 200, "{s}");
    let close = |v: &Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-6;
    assert_eq!(s["gpu_count"], 2);
    assert!(close(&s["paid_gpu_hours"], 40.0 / 60.0), "{}", s["paid_gpu_hours"]);
    assert!(close(&s["hours_by_state"]["idle_held"], 10.0 / 60.0));
    assert!(close(&s["hours_by_state"]["compute_bound"], 10.0 / 60.0));
    assert!(close(&s["hours_by_state"]["idle"], 10.0 / 60.0));
    assert!(close(&s["hours_by_state"]["offline"], 10.0 / 60.0));
    // Money: only A is priced: 20 min at $3/h, half of it idle_held (all wasted).
    assert!(close(&s["cost"], 1.0), "{}", s["cost"]);
    assert!(close(&s["wasted_cost"], 0.5), "{}", s["wasted_cost"]);
    assert!(close(&s["wasted_cost_by_state"]["idle_held"], 0.5));
    assert!(close(&s["unpriced_gpu_hours"], 20.0 / 60.0));
    assert_eq!(s["unpriced_models"], json!(["Acme X1"]));
    // Funnel: allocation 20 of 40 GPU-minutes; kernel 100 % × 10 of 40; SM 95 % × 10 of 40.
    let level = |name: &str| s["funnel"].as_array().unwrap().iter().find(|l| l["level"] == name).unwrap().clone();
    assert!(close(&level("allocation")["fraction"], 0.5));
    assert!(close(&level("kernel")["fraction"], 0.25));
    assert!(close(&level("sm")["fraction"], 0.95 * 0.25));
    assert!(close(&level("tensor")["fraction"], 0.90 * 0.25));
    assert!(close(&level("allocation")["gap_cost"], 0.5));
    assert_eq!(level("mfu")["fraction"], Value::Null, "no job reported FLOPs");
    // The worst GPU first, with the advice for its main waste.
    assert_eq!(s["top_wasters"][0]["uuid"], "GPU-A");
    assert_eq!(s["top_wasters"][0]["main_waste_state"], "idle_held");
    assert!(s["top_wasters"][0]["advice"].as_str().unwrap().contains("owner"));
    // Projected monthly waste: A's last 7 days = 10 min idle_held + offline since start + 20 min.
    let now = now_ms();
    let wasted_h = (10.0 * 60_000.0 + (now - to) as f64) / 3_600_000.0;
    let projected = s["projected_monthly_waste"].as_f64().unwrap();
    assert!((projected - 3.0 * wasted_h * 30.0 / 7.0).abs() < 0.05, "{projected}");
    // ... computed from A's priced time in those 7 days: its 20 min and the offline time since.
    let basis_h = (20.0 * 60_000.0 + (now - to) as f64) / 3_600_000.0;
    let from_h = s["projected_from_gpu_hours"].as_f64().unwrap();
    assert!((from_h - basis_h).abs() < 0.01, "{from_h} GPU-hours, want {basis_h}");
}

/// One hour at 10-s intervals of one behaviour on one H100.
fn hour_of(uuid: &str, start: i64, util: f64, smact: f64, tensor: f64, process: bool, power: f64) -> Vec<Value> {
    (0..360)
        .map(|i| {
            json!({
                "ts_ms": start + i * 10_000, "uuid": uuid, "gpu_index": 0, "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": util, "sm_active_pct": smact, "sm_occupancy_pct": 40.0,
                "tensor_active_pct": tensor, "dram_active_pct": 20.0,
                "mem_used_bytes": if process { 20i64 << 30 } else { 0 }, "mem_total_bytes": 85899345920i64,
                "power_w": power, "power_limit_w": 700.0,
                "processes": if process { json!([{"pid": 9, "used_bytes": 20i64 << 30}]) } else { json!([]) },
            })
        })
        .collect()
}

/// The scenario: four H100s for one hour — idle, idle-held, hollow at 20 % SMACT,
/// compute-bound — at $3/GPU-hour.
async fn four_gpus_for_one_hour_with_mfu_and_energy(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let start = (now_ms() / 3_600_000 - 2) * 3_600_000;
    let gpus = [
        ("GPU-idle", hour_of("GPU-idle", start, 0.0, 0.0, 0.0, false, 80.0)),
        ("GPU-held", hour_of("GPU-held", start, 0.0, 0.0, 0.0, true, 90.0)),
        ("GPU-hollow", hour_of("GPU-hollow", start, 100.0, 20.0, 0.0, true, 250.0)),
        ("GPU-compute", hour_of("GPU-compute", start, 100.0, 95.0, 90.0, true, 650.0)),
    ];
    for (uuid, samples) in gpus {
        let (status, body) =
            post(&server, "/api/v1/ingest", json!({"host": format!("host-{uuid}"), "samples": samples})).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = post(&server, "/api/v1/prices", json!({})).await;
    assert_eq!(status, 405, "prices are replaced with PUT");
    let put = reqwest::Client::new()
        .put(server.url("/api/v1/prices"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"currency": "USD", "source": "contract", "per_gpu_hour": {"NVIDIA H100 80GB HBM3": 3.0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
    // The compute-bound GPU's job reports 400 TFLOP/s of bf16 for the whole hour.
    let end = start + 3_600_000;
    let (status, job) = post(
        &server,
        "/api/v1/jobs",
        json!({"name": "llm-train", "gpus": ["GPU-compute"], "from": start, "to": end, "precision": "bf16",
               "tokens_per_s": 4000.0, "flops_per_token": 1.0e11}),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let mfu = job["mfu"].as_f64().expect("H100 has a bf16 dense peak");
    assert!(mfu > 0.3 && mfu < 0.5, "400 TFLOP/s of a ~989 TFLOP/s dense peak: {mfu}");
    let (status, err) = post(&server, "/api/v1/jobs", json!({"name": "x", "gpus": ["GPU-nope"], "from": start, "to": end, "precision": "bf16", "achieved_flops_per_s": 1.0})).await;
    assert_eq!((status, err["error"]["field"].as_str()), (422, Some("gpus")));
    // A precision that is none does not parse (400, as every typed body's bad name): the answer
    // names the field and the precisions there are.
    let (status, err) = post(&server, "/api/v1/jobs", json!({"name": "x", "gpus": ["GPU-compute"], "from": start, "to": end, "precision": "fp9", "achieved_flops_per_s": 1.0})).await;
    assert_eq!(
        (status, err["error"]["code"].as_str(), err["error"]["field"].as_str()),
        (400, Some("invalid_json"), Some("precision")),
        "{err}"
    );
    assert!(
        err["error"]["message"].as_str().unwrap().contains("`fp64`, `fp32`, `tf32`, `bf16`, `fp16`, `fp8`, `fp4`"),
        "{err}"
    );
    // fp16 keeps its name and is measured against the bf16 peak; a name in capitals is the name.
    // In the hour after the summary's period, so that the funnel below sees the first job alone.
    let after = |precision: &str| {
        json!({"name": format!("{precision}-train"), "gpus": ["GPU-compute"], "from": end, "to": end + 3_600_000,
               "precision": precision, "achieved_flops_per_s": 4.0e14})
    };
    let (status, fp16) = post(&server, "/api/v1/jobs", after("fp16")).await;
    assert_eq!((status, fp16["precision"].as_str(), fp16["mfu"].as_f64()), (201, Some("fp16"), Some(mfu)), "{fp16}");
    let (status, upper) = post(&server, "/api/v1/jobs", after(" BF16")).await;
    assert_eq!((status, upper["precision"].as_str(), upper["mfu"].as_f64()), (201, Some("bf16"), Some(mfu)), "{upper}");
    let (status, listed) = get(&server, &format!("/api/v1/jobs?from={end}&to={}", end + 3_600_000)).await;
    assert_eq!(status, 200, "{listed}");
    let read_back: Vec<(&str, Option<f64>)> =
        listed.as_array().unwrap().iter().map(|j| (j["precision"].as_str().unwrap(), j["mfu"].as_f64())).collect();
    assert_eq!(read_back, [("fp16", Some(mfu)), ("bf16", Some(mfu))]);

    let (status, s) = get(&server, &format!("/api/v1/fleet/summary?from={start}&to={end}")).await;
    assert_eq!(status, 200, "{s}");
    let close = |v: &Value, want: f64| (v.as_f64().unwrap_or(f64::NAN) - want).abs() < 1e-6;
    assert!(close(&s["paid_gpu_hours"], 4.0));
    let level = |name: &str| s["funnel"].as_array().unwrap().iter().find(|l| l["level"] == name).unwrap().clone();
    assert!(close(&level("allocation")["fraction"], 0.75), "{}", level("allocation"));
    assert!(close(&level("kernel")["fraction"], 0.5));
    assert!(close(&level("sm")["fraction"], (20.0 + 95.0) / 400.0));
    assert!(close(&level("tensor")["fraction"], 90.0 / 400.0));
    assert!(close(&level("mfu")["fraction"], mfu), "{}", level("mfu"));
    assert!(close(&level("mfu")["coverage"], 0.25));
    for state in ["idle", "idle_held", "hollow", "compute_bound"] {
        assert!(close(&s["hours_by_state"][state], 1.0), "{state}: {}", s["hours_by_state"]);
    }
    // METRICS.md: $3 × (1 h idle + 1 h idle_held) + $3 × 1 h hollow × (1 − 20/100) = $8.40 of $12.
    assert!(close(&s["cost"], 12.0));
    assert!(close(&s["wasted_cost"], 8.4), "{}", s["wasted_cost"]);
    assert!(close(&s["wasted_cost_by_state"]["hollow"], 2.4));
    assert_eq!(s["top_wasters"].as_array().unwrap().len(), 3, "the compute-bound GPU wastes nothing");
    // Energy: power × time where there is no energy counter; split by state; per GPU by filter.
    assert!(close(&s["energy_kwh"], (80.0 + 90.0 + 250.0 + 650.0) / 1000.0), "{}", s["energy_kwh"]);
    assert!(close(&s["energy_kwh_by_state"]["idle_held"], 0.09));
    let (_, one) = get(&server, &format!("/api/v1/fleet/summary?from={start}&to={end}&gpu=GPU-held")).await;
    assert_eq!(one["gpu_count"], 1);
    assert!(close(&one["energy_kwh"], 0.09));
    assert!(close(&one["wasted_cost"], 3.0));

    // A relative period: everything above lies in the last 24 h; bad ranges are refused.
    let (status, day) = get(&server, "/api/v1/fleet/summary?range=24h").await;
    assert_eq!(status, 200, "{day}");
    assert!(close(&day["hours_by_state"]["hollow"], 1.0));
    let (status, err) = get(&server, "/api/v1/fleet/summary?range=5m").await;
    assert_eq!((status, err["error"]["field"].as_str()), (422, Some("range")));
    let (status, _) = get(&server, &format!("/api/v1/fleet/summary?range=1h&from={start}")).await;
    assert_eq!(status, 422);
    // Changing prices invalidates cached summaries at once.
    let put = reqwest::Client::new()
        .put(server.url("/api/v1/prices"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"currency": "USD", "source": "contract",
                      "per_gpu_hour": {"NVIDIA H100 80GB HBM3": 6.0, "l4": 0.5}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
    let (_, day) = get(&server, "/api/v1/fleet/summary?range=24h").await;
    assert!(close(&day["wasted_cost_by_state"]["hollow"], 4.8), "{}", day["wasted_cost_by_state"]);

    // Right-size: the hollow GPU's work (SM activity 20 %, 20 GiB) fits an L4 (24 GB less 10 %),
    // now the cheapest model that does; the idle and the held GPU did no work to size (their
    // advice is to release them), whatever their SM activity of 0 would fit.
    let right_size = |uuid: &str| {
        let w = day["top_wasters"].as_array().unwrap().iter().find(|w| w["uuid"] == uuid).cloned();
        w.unwrap_or_else(|| panic!("{uuid} wastes: {}", day["top_wasters"]))["right_size"].clone()
    };
    let hollow = right_size("GPU-hollow");
    assert_eq!(hollow["suggested_model"], "l4", "{hollow}");
    assert!(close(&hollow["p95_sm_active_pct"], 20.0) && close(&hollow["saving_per_month"], 5.5 * 720.0), "{hollow}");
    assert_eq!((right_size("GPU-idle"), right_size("GPU-held")), (Value::Null, Value::Null));

    // Billing: per model, per host, as CSV, and pro-rated at a partial hour.
    let (status, bill) = get(&server, &format!("/api/v1/reports/billing?from={start}&to={end}&group_by=model")).await;
    assert_eq!(status, 200, "{bill}");
    let row = &bill["rows"][0];
    assert_eq!((bill["rows"].as_array().unwrap().len(), row["gpus"].as_i64()), (1, Some(4)));
    assert!(close(&row["gpu_hours"], 4.0) && close(&row["allocated_hours"], 3.0));
    assert!(close(&row["hours_by_state"]["idle"], 1.0) && close(&row["hours_by_state"]["stalled"], 0.0));
    assert!(close(&row["cost"], 24.0) && close(&row["wasted_cost"], 16.8), "{row}");
    assert!(close(&row["price_per_gpu_hour"], 6.0));
    assert!(close(&row["mean_gpu_util_pct"], 50.0));
    let (_, by_host) = get(&server, &format!("/api/v1/reports/billing?from={start}&to={end}&group_by=host")).await;
    assert_eq!(by_host["rows"].as_array().unwrap().len(), 4);
    let half = start + 1_800_000;
    let (_, prorated) = get(&server, &format!("/api/v1/reports/billing?from={half}&to={end}&group_by=model")).await;
    assert!(close(&prorated["rows"][0]["gpu_hours"], 2.0), "{prorated}");
    assert!(close(&prorated["rows"][0]["hours_by_state"]["hollow"], 0.5));
    let csv = reqwest::Client::new()
        .get(server.url(&format!("/api/v1/reports/billing?from={start}&to={end}&group_by=gpu&format=csv")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(csv.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    let text = csv.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("period_from,period_to,gpu,gpus,gpu_hours"));
    let cost_col = lines[0].split(',').position(|c| c == "cost").unwrap();
    let total: f64 = lines[1..].iter().map(|l| l.split(',').nth(cost_col).unwrap().parse::<f64>().unwrap()).sum();
    assert!((total - 24.0).abs() < 1e-6);
    assert!(lines[1].split(',').next().unwrap().ends_with('Z'), "RFC 3339 UTC times");
    let (status, err) = get(&server, "/api/v1/reports/billing?group_by=planet").await;
    assert_eq!((status, err["error"]["field"].as_str()), (422, Some("group_by")));

    // Chart series from rollups: 60 one-minute points with their state, or one hourly point.
    let (status, series) = get(&server, &format!("/api/v1/gpus/GPU-hollow/series?from={start}&to={end}")).await;
    assert_eq!(status, 200, "{series}");
    assert_eq!(series["resolution"], "1m");
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), 60);
    assert!(
        points
            .iter()
            .all(|p| p["state"] == "hollow" && close(&p["sm_active_pct"], 20.0) && close(&p["gpu_util_pct"], 100.0))
    );
    let (_, hourly) =
        get(&server, &format!("/api/v1/gpus/GPU-hollow/series?from={start}&to={end}&resolution=1h")).await;
    assert_eq!(hourly["points"].as_array().unwrap().len(), 1);
    assert_eq!(hourly["points"][0]["sample_count"], 360);
    let (status, _) =
        get(&server, &format!("/api/v1/gpus/GPU-hollow/series?from={start}&to={end}&resolution=5s")).await;
    assert_eq!(status, 422);
}

async fn gpus_without_sm_activity_say_so(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let start = (now_ms() / 60_000 - 5) * 60_000;
    // A V100 without DCGM: no SM activity, occupancy or tensor counters at all.
    let strip = |mut v: Vec<Value>| {
        for s in &mut v {
            let o = s.as_object_mut().unwrap();
            for f in ["sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct"] {
                o.remove(f);
            }
            o.insert("name".into(), json!("Tesla V100-SXM2-32GB"));
        }
        v
    };
    let mut samples = strip(minutes_of("GPU-v100", "x", start, 1, 70.0, 0.0, 0.0, &one_process()));
    samples.extend(strip(minutes_of("GPU-v100", "x", start + 60_000, 1, 0.0, 0.0, 0.0, &json!([]))));
    samples.extend(strip(minutes_of("GPU-v100", "x", start + 120_000, 1, 0.0, 0.0, 0.0, &one_process())));
    let (status, body) = post(&server, "/api/v1/ingest", json!({"host": "old-node", "samples": samples})).await;
    assert_eq!(status, 200, "{body}");
    let (_, windows) =
        get(&server, &format!("/api/v1/gpus/GPU-v100/states?from={start}&to={}&window_s=60", start + 180_000)).await;
    let states: Vec<&str> = windows.as_array().unwrap().iter().map(|w| w["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["active", "idle", "idle_held"], "{windows}");
    assert!(windows[0]["note"].as_str().unwrap().contains("no SM activity on this GPU"), "{}", windows[0]);
    assert_eq!(windows[0]["sm_active_pct"], Value::Null, "absent, never 0");
    assert_eq!(windows[0]["efficiency"], Value::Null);
}

/// GPUs that appeared in the middle of a minute and are still reporting (the minute in progress
/// is stored as a whole minute): every summary and billing figure stays within the paid time.
async fn live_gpus_are_never_credited_beyond_their_paid_time(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();
    // 150 s of samples ending now, starting 30.5 s into a minute: 4 stored minutes for 150 s.
    let now = now_ms();
    let start = now - 150_000;
    let busy: Vec<Value> =
        minutes_of("GPU-live-busy", "NVIDIA H100 80GB HBM3", start, 3, 100.0, 40.0, 30.0, &one_process())
            .into_iter()
            .take(150)
            .collect();
    let held: Vec<Value> =
        minutes_of("GPU-live-held", "NVIDIA H100 80GB HBM3", start, 3, 0.0, 0.0, 0.0, &one_process())
            .into_iter()
            .take(150)
            .collect();
    for samples in [busy, held] {
        ingest_ok(&server, json!({"host": "live", "samples": samples})).await;
    }
    let team = client
        .post(server.url("/api/v1/teams"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "research"}))
        .send()
        .await
        .unwrap();
    assert_eq!(team.status().as_u16(), 201, "create team");
    let team_id = team.json::<Value>().await.unwrap()["id"].clone();
    let assign = client
        .put(server.url("/api/v1/hosts/live/team"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"team_id": team_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(assign.status().as_u16(), 200, "assign host");

    let (status, s) = get(&server, "/api/v1/fleet/summary?range=1h").await;
    assert_eq!(status, 200, "{s}");
    let paid = s["paid_gpu_hours"].as_f64().unwrap();
    // Paid from each GPU's first sample until the request: 2 × (150 s + the request's delay).
    assert!((2.0 * 150.0 / 3600.0..2.0 * 160.0 / 3600.0).contains(&paid), "paid {paid}");
    let by_state: f64 = s["hours_by_state"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    assert!((by_state - paid).abs() < 1e-9, "hours by state {by_state} must add up to paid {paid}");
    for level in s["funnel"].as_array().unwrap() {
        if let Some(f) = level["fraction"].as_f64() {
            assert!((0.0..=1.0 + 1e-9).contains(&f), "{} fraction {f} outside 0..1: {s}", level["level"]);
        }
    }
    let level = |name: &str| s["funnel"].as_array().unwrap().iter().find(|l| l["level"] == name).unwrap().clone();
    // Half the GPUs run kernels the whole time they were seen (less the request's delay).
    let kernel = level("kernel")["fraction"].as_f64().unwrap();
    assert!(kernel > 0.45 && kernel <= 0.5 + 1e-9, "kernel {kernel}");
    for w in s["top_wasters"].as_array().unwrap() {
        let (wasted, paid) = (w["wasted_hours"].as_f64().unwrap(), w["paid_gpu_hours"].as_f64().unwrap());
        assert!(wasted <= paid + 1e-9, "{} wasted {wasted} h of {paid} paid", w["uuid"]);
    }

    // Billing (pro-rated hours) by team: both GPUs under the host's team, means within 0–100 %.
    let (status, b) = get(&server, &format!("/api/v1/reports/billing?from={}&group_by=team", now - 3_600_000)).await;
    assert_eq!(status, 200, "{b}");
    let rows = b["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{b}");
    assert_eq!(rows[0]["group"], "research", "{b}");
    assert_eq!(rows[0]["gpus"], 2, "{b}");
    for field in ["mean_gpu_util_pct", "mean_sm_active_pct", "mean_tensor_active_pct"] {
        let v = rows[0][field].as_f64().unwrap();
        assert!((0.0..=100.0 + 1e-9).contains(&v), "{field} {v}");
    }
    let util = rows[0]["mean_gpu_util_pct"].as_f64().unwrap();
    assert!(util > 45.0, "busy GPU at 100 %, held GPU at 0 %: {util}");
}

/// Every dashboard polls `range=` summaries, computed at most every 10 s: once one has expired,
/// the next poll gets it at once, as it was, while one task computes the new one (at 10,000
/// GPUs that takes seconds: docs/BENCHMARKS.md), which the polls after it get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_range_summary_is_served_while_it_is_computed_again() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, &[]);
    let start = now_ms() - 5 * 60_000;
    let gpu = |uuid: &str| minutes_of(uuid, "NVIDIA H100 80GB HBM3", start, 2, 0.0, 0.0, 0.0, &json!([]));
    ingest_ok(&server, json!({"host": "node-a", "samples": gpu("GPU-first")})).await;
    let summary = || async {
        let (status, s) = get(&server, "/api/v1/fleet/summary?range=1h").await;
        assert_eq!(status, 200, "{s}");
        s
    };
    let first = summary().await;
    assert_eq!(first["gpu_count"], 1);
    ingest_ok(&server, json!({"host": "node-b", "samples": gpu("GPU-second")})).await;
    assert_eq!(summary().await, first, "fresh for 10 s");
    tokio::time::sleep(std::time::Duration::from_millis(10_500)).await;
    assert_eq!(summary().await, first, "expired: served as it was while it is computed again");
    let mut next = first.clone();
    for _ in 0..100 {
        next = summary().await;
        if next["gpu_count"] == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(next["gpu_count"], 2, "the next polls get the new summary: {next}");
    assert!(next["to_ms"].as_i64() > first["to_ms"].as_i64());
}
