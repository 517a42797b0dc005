//! Black box: the rollup job (issue 21, part 3) writes each closed minute once, and `kill -9`
//! of the server at any point of it loses and doubles nothing, on SQLite and PostgreSQL. The
//! answers read from the written rollups equal those read before any was written (when every
//! minute was still open and computed from the raw samples).

use std::time::Duration;

use fleetlens_tests::http::{get_ok, ingest_ok, now_ms};
use fleetlens_tests::{Backend, TestDatabase, TestServer, rollup_accounting, wait_rollups_written};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(killed_while_writing_rollups_loses_and_doubles_nothing);

const GPUS: i64 = 24;
const MINUTES: i64 = 36;

/// One GPU's samples of one minute at 1 Hz (a busy half of the GPUs, an idle half).
fn minute(start: i64, m: i64, g: i64) -> Vec<Value> {
    (0..60)
        .map(|s| {
            let busy = g % 2 == 0 && (m / 5) % 2 == 0;
            json!({
                "ts_ms": start + m * 60_000 + s * 1000, "uuid": format!("GPU-rj-{g:02}"), "gpu_index": g % 8,
                "name": "NVIDIA H100 80GB HBM3", "power_limit_w": 700.0, "mem_total_bytes": 85_899_345_920i64,
                "gpu_util_pct": if busy { 100.0 } else { 0.0 }, "sm_active_pct": if busy { 30.0 + (s % 7) as f64 } else { 0.0 },
                "tensor_active_pct": 0.0, "dram_active_pct": 4.0, "power_w": if busy { 380.0 } else { 70.0 },
                "energy_j": 1_000_000.0 + (m * 60 + s) as f64 * if busy { 380.0 } else { 70.0 },
                "mem_used_bytes": if busy { 40i64 << 30 } else { 0 },
                "processes": if busy { json!([{"pid": 7, "used_bytes": 40i64 << 30}]) } else { json!([]) }
            })
        })
        .collect()
}

async fn post(server: &TestServer, samples: Vec<Value>) {
    ingest_ok(server, json!({"host": "rj-node", "samples": samples})).await;
}

/// The answers that read rollups and credits: billing per GPU (hour and day credits), the
/// fleet summary over the data, and two GPUs' series at both resolutions.
async fn answers(server: &TestServer, start: i64, end: i64) -> Vec<Value> {
    let mut out = vec![
        get_ok(server, &format!("/api/v1/reports/billing?from={start}&to={end}&group_by=gpu")).await,
        get_ok(server, &format!("/api/v1/fleet/summary?from={start}&to={end}")).await,
    ];
    for uuid in ["GPU-rj-00", "GPU-rj-01"] {
        for res in ["1m", "1h"] {
            out.push(
                get_ok(server, &format!("/api/v1/gpus/{uuid}/series?from={start}&to={end}&resolution={res}")).await,
            );
        }
    }
    out
}

/// Equal up to float rounding (sums of the same numbers added in another order).
fn close(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1.0), "{at}: {x} vs {y}");
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: length");
            x.iter().zip(y).enumerate().for_each(|(i, (a, b))| close(a, b, &format!("{at}[{i}]")));
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{at}: keys");
            // What depends on the time of the read itself: the last week's waste and paid time
            // end now (the GPUs, silent since the data, are paid and offline up to now).
            let read_time = ["projected_monthly_waste", "projected_from_gpu_hours"];
            for (k, v) in x.iter().filter(|(k, _)| !read_time.contains(&k.as_str())) {
                close(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

async fn killed_while_writing_rollups_loses_and_doubles_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // 36 minutes that ended 10 to 46 minutes ago: closed, so each run of the job has work.
    let start = (now_ms() / 60_000 - 10 - MINUTES) * 60_000;
    let end = start + MINUTES * 60_000;
    // First the whole data through a server whose job does not run for an hour: every minute
    // stays open and the answers come from the raw samples alone.
    let reference = {
        let server = TestServer::spawn(&db.url, &["--rollup-interval", "1h"]);
        for m in 0..MINUTES {
            post(&server, (0..GPUS).flat_map(|g| minute(start, m, g)).collect()).await;
        }
        let acc = rollup_accounting(&db.url).await;
        assert_eq!((acc.counted, acc.open_minutes > 0), (GPUS * MINUTES * 60, true), "{acc:?}");
        answers(&server, start, end).await
    };
    // Then servers whose job runs every second, each killed (-9) at a different point of its
    // first runs, while a batch of late samples (resent and new) reopens written minutes.
    for (round, delay_ms) in [900u64, 1050, 1200, 1350, 1500, 1700].into_iter().enumerate() {
        let mut server = TestServer::spawn(&db.url, &[]);
        let late: Vec<Value> = (0..GPUS).flat_map(|g| minute(start, (round as i64 * 5) % MINUTES, g)).collect();
        post(&server, late).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        server.kill();
        let acc = rollup_accounting(&db.url).await;
        assert_eq!(acc.counted, GPUS * MINUTES * 60, "round {round}: every sample counted once: {acc:?}");
        assert_eq!((acc.wrong_minutes, acc.wrong_hours), (0, 0), "round {round}: {acc:?}");
    }
    // A last server writes whatever the kills left, and answers as before.
    let server = TestServer::spawn(&db.url, &[]);
    wait_rollups_written(&db.url, end, Duration::from_secs(60)).await;
    let acc = rollup_accounting(&db.url).await;
    assert_eq!(
        (acc.counted, acc.wrong_minutes, acc.wrong_hours),
        (GPUS * MINUTES * 60, 0, 0),
        "written once, whole: {acc:?}"
    );
    let written = answers(&server, start, end).await;
    for (i, (a, b)) in reference.iter().zip(&written).enumerate() {
        close(a, b, &format!("answer {i}"));
    }
}
