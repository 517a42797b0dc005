//! Black box: data-quality flags (issue 20, part 5). Readings that cannot be true are accepted,
//! flagged, dropped before anything averages them, counted in `/metrics` per flag, and listed
//! on the GPU detail. On SQLite and PostgreSQL.

use fleetlens_tests::http::{get_ok, get_text, ingest_ok, now_ms};
use fleetlens_tests::{Backend, TestDatabase, TestServer};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(impossible_readings_are_flagged_counted_and_kept_out_of_means);

/// `fleetlens_data_quality_flagged_samples_total{flag="…"}` from the exposition.
fn flagged(metrics: &str, flag: &str) -> f64 {
    let prefix = format!("fleetlens_data_quality_flagged_samples_total{{flag=\"{flag}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no counter for {flag}:\n{metrics}"))
        .trim()
        .parse()
        .unwrap()
}

fn flag_count(detail: &Value, flag: &str) -> Option<i64> {
    detail["data_quality"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["flag"] == flag)
        .map(|f| f["samples"].as_i64().unwrap())
}

async fn impossible_readings_are_flagged_counted_and_kept_out_of_means(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    // Two whole minutes, ten minutes ago.
    let start = (now_ms() - 600_000).div_euclid(60_000) * 60_000;
    // GPU-mig: busy, SM activity 40 %, but 5 readings of 130 % (as some MIG setups report),
    // the energy counter stepping back once, and 3 readings of a 0 MHz clock while busy.
    let mig: Vec<Value> = (0..120)
        .map(|i| {
            let energy = if i == 30 { 10.0 } else { 50_000.0 + i as f64 * 300.0 };
            json!({
                "ts_ms": start + i * 1000, "uuid": "GPU-mig", "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": 100.0, "gr_engine_active_pct": 60.0,
                "sm_active_pct": if i % 20 == 7 && i < 100 { 130.0 } else { 40.0 },
                "energy_j": energy, "power_w": 300.0, "power_limit_w": 700.0,
                "sm_clock_mhz": if (50..53).contains(&i) { 0.0 } else { 1980.0 },
                "mem_used_bytes": 1_000_000_000_i64, "processes": [{"pid": 7}],
            })
        })
        .collect();
    // GPU-stale: kernels run (util 100) while the graphics engine and every profiling counter
    // read 0 for 3 minutes: from the 2-minute mark the zeros are flagged and dropped.
    let stale: Vec<Value> = (0..180)
        .map(|i| {
            json!({
                "ts_ms": start + i * 1000, "uuid": "GPU-stale", "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": 100.0, "gr_engine_active_pct": 0.0, "sm_active_pct": 0.0,
                "tensor_active_pct": 0.0, "power_w": 400.0, "power_limit_w": 700.0,
                "mem_used_bytes": 1_000_000_000_i64, "processes": [{"pid": 8}],
            })
        })
        .collect();
    for samples in [mig, stale] {
        ingest_ok(&server, json!({"host": "dq", "samples": samples})).await;
    }

    // /metrics: one counter per flag kind, no per-GPU label.
    let (status, m) = get_text(&server, "/metrics").await;
    assert_eq!(status, 200, "/metrics");
    assert_eq!(flagged(&m, "activity_over_100"), 5.0);
    assert_eq!(flagged(&m, "energy_counter_backwards"), 1.0);
    assert_eq!(flagged(&m, "clock_zero_while_busy"), 3.0);
    assert_eq!(flagged(&m, "util_without_gr_engine"), 60.0, "180 s − the first 120 s");

    // The GPU detail lists them.
    let d = get_ok(&server, "/api/v1/gpus/GPU-mig").await;
    assert_eq!(flag_count(&d, "activity_over_100"), Some(5), "{d}");
    assert_eq!(flag_count(&d, "energy_counter_backwards"), Some(1), "{d}");
    assert_eq!(flag_count(&d, "clock_zero_while_busy"), Some(3), "{d}");
    assert_eq!(flag_count(&d, "util_without_gr_engine"), None, "{d}");
    let d = get_ok(&server, "/api/v1/gpus/GPU-stale").await;
    assert_eq!(flag_count(&d, "util_without_gr_engine"), Some(60), "{d}");
    assert!(d["data_quality"][0]["rule"].as_str().unwrap().contains("graphics"), "{d}");

    // Means exclude them: SM activity is 40 % in both minutes (with the 130 % readings it would
    // be 47.5 %); the flagged readings are stored as absent.
    let series =
        get_ok(&server, &format!("/api/v1/gpus/GPU-mig/series?resolution=1m&from={start}&to={}", start + 120_000))
            .await;
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{series}");
    for p in points {
        assert!((p["sm_active_pct"].as_f64().unwrap() - 40.0).abs() < 1e-9, "{p}");
    }
    let samples = get_ok(&server, &format!("/api/v1/gpus/GPU-mig/samples?from={start}&to={}", start + 120_000)).await;
    let s = samples["samples"].as_array().unwrap();
    assert_eq!(s[7]["sm_active_pct"], Value::Null, "{}", s[7]);
    assert_eq!(s[30]["energy_j"], Value::Null, "{}", s[30]);
    assert_eq!(s[50]["sm_clock_mhz"], Value::Null, "{}", s[50]);
    assert_eq!(s[8]["sm_active_pct"], 40.0);
    // GPU-stale's third minute has no SM activity left: absent, not 0, so its state is not
    // read from zeros that were not true.
    let series =
        get_ok(&server, &format!("/api/v1/gpus/GPU-stale/series?resolution=1m&from={start}&to={}", start + 180_000))
            .await;
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), 3, "{series}");
    assert_eq!(points[0]["sm_active_pct"], 0.0, "before the 2-minute mark the zeros stand: {series}");
    assert_eq!(points[2]["sm_active_pct"], Value::Null, "{series}");
    assert_eq!(points[2]["gpu_util_pct"], 100.0, "{series}");
}
