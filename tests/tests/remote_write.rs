//! Black box: `POST /api/v1/write`, Prometheus remote write of dcgm-exporter series.
//!
//! The proof with real parts: a real Prometheus (Debian's `prometheus`) scrapes recorded
//! dcgm-exporter expositions (tests/fixtures/dcgm, rotated so values change) served on
//! 127.0.0.1 and remote-writes them to the server with an `ingest` key; the GPUs then appear
//! in `GET /api/v1/gpus` with states, efficiency and owners. Bounded: Prometheus is killed
//! after at most [`DEADLINE`].

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fleetlens_api::remote_write::{TimeSeries, WriteRequest};
use fleetlens_tests::http::{get_json, metric, post_json};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture};
use prost::Message;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const DEADLINE: Duration = Duration::from_secs(120);
const GPU0: &str = "GPU-5d1c2b7e-8a3f-4c61-9e0d-2f7a6b1c9d3e";
const GPU1: &str = "GPU-a0e4f3d2-61b7-4f58-8c29-7d3e5b1a0c64";
const MIG_PARENT: &str = "GPU-7c3e91a4-2b5d-4f0e-a8c6-1d9b3e5f7a20";

/// Serves each path's expositions in turn, one per scrape.
async fn exporter() -> String {
    let read = |names: &[&str]| -> Arc<Vec<String>> {
        Arc::new(names.iter().map(|n| std::fs::read_to_string(fixture(&format!("dcgm/{n}"))).unwrap()).collect())
    };
    let h100 = read(&["h100x2-1.prom", "h100x2-2.prom", "h100x2-3.prom"]);
    let a100 = read(&["a100-mig-1.prom", "a100-mig-2.prom"]);
    let rotate = |files: Arc<Vec<String>>| {
        let n = Arc::new(AtomicUsize::new(0));
        move || {
            let (files, n) = (files.clone(), n.clone());
            async move { files[n.fetch_add(1, Ordering::Relaxed) % files.len()].clone() }
        }
    };
    let app = axum::Router::new()
        .route("/h100/metrics", axum::routing::get(rotate(h100)))
        .route("/a100/metrics", axum::routing::get(rotate(a100)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// A Prometheus child, killed when dropped, and its directory (configuration and TSDB).
struct Prometheus {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus that scrapes the stand-in dcgm-exporter and remote-writes to `server`
/// with an ingest key of its own, `max_samples_per_send` points per request.
async fn prometheus_writing_to(server: &TestServer, max_samples_per_send: usize) -> Prometheus {
    let key = ingest_key(server).await;
    let exporter = exporter().await;
    let dir = tempfile::tempdir().unwrap();
    let child = start_prometheus(dir.path(), &exporter, &server.url("/api/v1/write"), &key, max_samples_per_send);
    Prometheus { child, _dir: dir }
}

/// `max_samples_per_send`: series points per remote-write request (one H100 scrape has 68
/// `DCGM_FI_*` series: below that, Prometheus splits scrapes over requests).
fn start_prometheus(
    dir: &std::path::Path,
    exporter: &str,
    write_url: &str,
    key: &str,
    max_samples_per_send: usize,
) -> Child {
    let config = format!(
        r#"global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dcgm-h100
    metrics_path: /h100/metrics
    static_configs: [{{targets: ["{exporter}"]}}]
  - job_name: dcgm-a100
    metrics_path: /a100/metrics
    static_configs: [{{targets: ["{exporter}"]}}]
remote_write:
  - url: {write_url}
    authorization:
      credentials: {key}
    write_relabel_configs:
      - source_labels: [__name__]
        regex: DCGM_FI_.*
        action: keep
    queue_config:
      max_shards: 1
      max_samples_per_send: {max_samples_per_send}
      batch_send_deadline: 1s
"#
    );
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    Command::new("prometheus")
        .arg(format!("--config.file={}", path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .args(["--web.listen-address=127.0.0.1:0", "--log.level=warn"])
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() })
        .spawn()
        .expect("prometheus (Debian package prometheus; scripts/test.sh installs it)")
}

async fn ingest_key(server: &TestServer) -> String {
    let created: Value =
        post_json(server, "/api/v1/api-keys", json!({"name": "prometheus", "scopes": ["ingest"]})).await;
    created["key"].as_str().expect("key").to_string()
}

async fn gpus(server: &TestServer) -> Vec<Value> {
    let body: Value = get_json(server, "/api/v1/gpus").await;
    body["gpus"].as_array().cloned().unwrap_or_default()
}

fn find<'a>(gpus: &'a [Value], uuid: &str) -> Option<&'a Value> {
    gpus.iter().find(|g| g["uuid"] == uuid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_remote_writes_dcgm_exporter_series() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::spawn(&db.url, &[]);
    let _prometheus = prometheus_writing_to(&server, 10_000).await;

    // Until both H100s have a state and GPU 0 its efficiency, and each GPU has seen the
    // rotated expositions (3 distinct SM activities on GPU 0).
    let start = Instant::now();
    let (list, smact) = loop {
        let list = gpus(&server).await;
        let ready = find(&list, GPU0).is_some_and(|g| !g["state"].is_null() && !g["efficiency"].is_null())
            && find(&list, GPU1).is_some_and(|g| !g["state"].is_null());
        let samples: Value = get_json(&server, &format!("/api/v1/gpus/{GPU0}/samples?from=0")).await;
        let mut smact: Vec<String> = samples["samples"]
            .as_array()
            .map(|s| s.iter().map(|s| s["sm_active_pct"].to_string()).collect())
            .unwrap_or_default();
        smact.sort();
        smact.dedup();
        if ready && smact.len() >= 3 {
            break (list, smact);
        }
        assert!(start.elapsed() < DEADLINE, "GPUs not ready within {DEADLINE:?}: {list:#?} SM activity {smact:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(smact, ["92.1875", "95.3125", "96.875"], "the three rotated expositions, ratios as %");

    let g0 = find(&list, GPU0).unwrap();
    assert_eq!(g0["host"], "gpu-node-07", "the Hostname label");
    assert_eq!(g0["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(g0["gpu_index"], 0);
    assert_eq!(g0["state"], "compute_bound", "busy SMs and tensor cores: {g0:#}");
    let eff = g0["efficiency"].as_f64().unwrap();
    assert!((92.0..=97.0).contains(&eff), "SMACT / util: {eff}");
    // Owners: the pod from dcgm-exporter's Kubernetes mapping, the Slurm job from its HPC
    // job mapping.
    let owner = &g0["latest"]["processes"][0]["owner"];
    assert_eq!(
        (owner["pod_name"].as_str(), owner["namespace"].as_str()),
        (Some("llama3-ft-7f9c6d5b8-x2kqp"), Some("ml-research"))
    );
    let g1 = find(&list, GPU1).unwrap();
    assert_eq!(g1["latest"]["processes"][0]["owner"]["job_id"], "48213");
    assert_eq!(g1["latest"]["gpu_util_pct"], 0.0);
    assert!(g1["efficiency"].is_null(), "util 0: efficiency undefined");
    assert_eq!(g1["state"], "idle_held", "held by a job, doing nothing: {g1:#}");
    // A partial sample keeps what was not sent absent: dcgm-exporter sends no INT pipe.
    assert!(g0["latest"]["int_active_pct"].is_null());
    // MIG instances are GPUs of their own.
    let mig = find(&list, &format!("{MIG_PARENT}/gi2")).expect("MIG instance 2");
    assert_eq!(mig["name"], "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
    assert_eq!(mig["latest"]["processes"][0]["owner"]["pod_name"], "triton-0");

    // Series that are not fields Fleetlens reads are counted.
    let unknown = metric(&server, "fleetlens_remote_write_series_ignored_total{reason=\"unknown\"}").await;
    assert!(unknown > 0.0, "DCGM_FI_DEV_ENC_UTIL & co. are not read: {unknown}");
}

/// The fields each H100 sample of the recorded expositions has, once all of its scrape's
/// series arrived. Not `mem_total_bytes`: it is the sum of three series (`FB_USED`, `FB_FREE`,
/// `FB_RESERVED`) and only a request holding the first two gives it (docs/API.md).
const H100_FIELDS: [&str; 10] = [
    "gpu_util_pct",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "power_w",
    "temp_c",
    "energy_j",
    "sm_clock_mhz",
    "mem_used_bytes",
];

/// A real Prometheus with `max_samples_per_send: 5` cuts every scrape's 68 series of the two
/// H100s into ~14 requests: the partial samples of each GPU and timestamp merge into one with
/// every field, and GPU 1's XID 79, repeated in every scrape, is one event.
async fn a_scrape_split_over_requests_arrives_whole(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let _prometheus = prometheus_writing_to(&server, 5).await;

    // Until each H100 has 5 samples whose every field arrived (the newest scrape's requests may
    // still be on their way, so the count is of complete ones).
    let start = Instant::now();
    let complete = |s: &Value| H100_FIELDS.iter().all(|f| !s[*f].is_null());
    let (g0, g1) = loop {
        let g0 = get_json(&server, &format!("/api/v1/gpus/{GPU0}/samples?from=0")).await;
        let g1 = get_json(&server, &format!("/api/v1/gpus/{GPU1}/samples?from=0")).await;
        let done = |g: &Value| g["samples"].as_array().map_or(0, |s| s.iter().filter(|s| complete(s)).count());
        if done(&g0) >= 5 && done(&g1) >= 5 {
            break (g0, g1);
        }
        assert!(start.elapsed() < DEADLINE, "samples not complete within {DEADLINE:?}: {g0:#}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for g in [&g0, &g1] {
        let samples = g["samples"].as_array().unwrap();
        // Every sample but the newest two (whose scrape may still be arriving) has every field.
        for s in &samples[..samples.len() - 2] {
            assert!(complete(s), "a split scrape lost fields: {s:#}");
            assert!(s["int_active_pct"].is_null(), "not sent, still absent: {s:#}");
            assert!(!s["processes"][0]["owner"].is_null(), "owners: {s:#}");
        }
    }
    assert!(metric(&server, "fleetlens_ingest_samples_merged_total").await >= 10.0);
    let list = gpus(&server).await;
    let g0 = find(&list, GPU0).unwrap();
    assert_eq!(g0["state"], "compute_bound", "{g0:#}");
    assert!(!g0["efficiency"].is_null(), "{g0:#}");

    // XID 79 in every scrape of GPU 1: one event. GPU 0's XID is 0: none.
    let events = get_json(&server, "/api/v1/events?from=0&kind=xid").await;
    let events = events["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!((events[0]["gpu"].as_str(), events[0]["xid"].as_i64()), (Some(GPU1), Some(79)), "{events:#?}");
}

fn series(name: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> TimeSeries {
    TimeSeries::new(name, labels, points)
}

fn snappy(req: &WriteRequest) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(&req.encode_to_vec()).unwrap()
}

async fn post(server: &TestServer, key: &str, body: Vec<u8>, encoding: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(server.url("/api/v1/write"))
        .bearer_auth(key)
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", encoding)
        .header("x-prometheus-remote-write-version", "0.1.0")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fleetlens_tests::for_each_backend!(
    remote_write_is_idempotent_bounded_and_answers_4xx_json,
    a_scrape_split_over_requests_arrives_whole,
    xid_changes_become_events_once_across_restarts,
);

async fn remote_write_is_idempotent_bounded_and_answers_4xx_json(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-samples-per-batch", "50"]);
    let key = ingest_key(&server).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let gpu = [("UUID", "GPU-rw-1"), ("Hostname", "rw-node"), ("gpu", "0"), ("modelName", "NVIDIA H100 80GB HBM3")];
    let req = WriteRequest {
        timeseries: vec![
            series("DCGM_FI_DEV_GPU_UTIL", &gpu, &[(now - 2000, 100.0), (now - 1000, 100.0)]),
            series("DCGM_FI_PROF_SM_ACTIVE", &gpu, &[(now - 2000, 0.5)]),
            series("up", &[("instance", "x:9400")], &[(now - 2000, 1.0)]),
        ],
    };
    let (status, body) = post(&server, &key, snappy(&req), "snappy").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"received": 2, "inserted": 2, "merged": 0, "duplicates": 0, "series_unknown": 1, "series_unkeyed": 0})
    );
    // Prometheus resends after a timeout: stored once.
    let (status, body) = post(&server, &key, snappy(&req), "snappy").await;
    assert_eq!(
        (status, &body["inserted"], &body["merged"], &body["duplicates"]),
        (200, &json!(0), &json!(0), &json!(2)),
        "{body}"
    );
    // The rest of the first timestamp's scrape, in a request of its own: it fills the stored
    // sample (SM activity), keeps the stored utilisation (100, not 7) and adds no sample.
    let rest = WriteRequest {
        timeseries: vec![
            series("DCGM_FI_DEV_GPU_UTIL", &gpu, &[(now - 2000, 7.0)]),
            series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &gpu, &[(now - 2000, 0.25)]),
        ],
    };
    let (status, body) = post(&server, &key, snappy(&rest), "snappy").await;
    assert_eq!(
        (status, &body["inserted"], &body["merged"], &body["duplicates"]),
        (200, &json!(0), &json!(1), &json!(0)),
        "{body}"
    );
    let (_, body) = post(&server, &key, snappy(&rest), "snappy").await;
    assert_eq!((&body["merged"], &body["duplicates"]), (&json!(0), &json!(1)), "a resent fill-in adds nothing: {body}");
    let samples = get_json(&server, "/api/v1/gpus/GPU-rw-1/samples?from=0").await;
    let first = &samples["samples"][0];
    assert_eq!(
        (&first["gpu_util_pct"], &first["sm_active_pct"], &first["tensor_active_pct"]),
        (&json!(100.0), &json!(50.0), &json!(25.0)),
        "{samples:#}"
    );
    assert_eq!(samples["samples"].as_array().unwrap().len(), 2);
    let list = gpus(&server).await;
    let g = find(&list, "GPU-rw-1").expect("the GPU");
    assert_eq!(g["host"], "rw-node");
    // The newest sample had kernel utilization only: SM activity stays absent, not 0.
    assert_eq!(g["latest"]["gpu_util_pct"], 100.0);
    assert!(g["latest"]["sm_active_pct"].is_null(), "{g:#}");

    // Refusals are 4xx with a JSON error (Prometheus drops a 4xx request instead of retrying).
    let error_code = |b: &Value| b["error"]["code"].as_str().map(str::to_string);
    let (status, body) = post(&server, &key, b"not snappy".to_vec(), "snappy").await;
    assert_eq!(status, 400, "{body}");
    assert!(error_code(&body).is_some());
    let (status, body) = post(&server, &key, req.encode_to_vec(), "identity").await;
    assert_eq!(status, 415, "{body}");
    let junk = snap::raw::Encoder::new().compress_vec(b"\x0a\xff\xff\xff\x0f").unwrap();
    assert_eq!(post(&server, &key, junk, "snappy").await.0, 400);
    // More GPU samples than --max-samples-per-batch: 413, nothing stored.
    let many = WriteRequest {
        timeseries: (0..51)
            .map(|i| {
                series(
                    "DCGM_FI_DEV_GPU_UTIL",
                    &[("UUID", format!("GPU-many-{i}").as_str()), ("Hostname", "m")],
                    &[(now, 1.0)],
                )
            })
            .collect(),
    };
    let (status, body) = post(&server, &key, snappy(&many), "snappy").await;
    assert_eq!(status, 413, "{body}");
    assert!(find(&gpus(&server).await, "GPU-many-0").is_none());
    // A sample the ingest validation refuses (a percentage over 100 is clamped by the mapping;
    // a timestamp far in the future is not): 422, nothing stored.
    let future = WriteRequest {
        timeseries: vec![series("DCGM_FI_DEV_GPU_UTIL", &[("UUID", "GPU-future")], &[(now + 86_400_000 * 30, 1.0)])],
    };
    let (status, body) = post(&server, &key, snappy(&future), "snappy").await;
    assert_eq!(status, 422, "{body}");
    // A read-only key may not write; no key at all is 401.
    let read_key: Value = post_json(&server, "/api/v1/api-keys", json!({"name": "reader", "scopes": ["read"]})).await;
    assert_eq!(post(&server, read_key["key"].as_str().unwrap(), snappy(&req), "snappy").await.0, 403);
    assert_eq!(post(&server, "flk_nope", snappy(&req), "snappy").await.0, 401);
}

/// `DCGM_FI_DEV_XID_ERRORS` (the last XID, repeated in every scrape) becomes an `xid` event when
/// it turns to a new non-zero value, compared with the events stored: resends, repeats and a
/// server restart add none.
async fn xid_changes_become_events_once_across_restarts(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut server = TestServer::spawn(&db.url, &[]);
    let key = ingest_key(&server).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let gpu = [("UUID", "GPU-xid"), ("Hostname", "xid-node"), ("gpu", "0")];
    let scrapes = |points: &[(i64, f64)]| WriteRequest {
        timeseries: vec![
            series("DCGM_FI_DEV_GPU_UTIL", &gpu, &points.iter().map(|&(t, _)| (t, 50.0)).collect::<Vec<_>>()),
            series("DCGM_FI_DEV_XID_ERRORS", &gpu, points),
        ],
    };
    let xids = |server: &TestServer| {
        let url = server.url("/api/v1/events?from=0&kind=xid&gpu=GPU-xid");
        async move {
            let body: Value =
                reqwest::Client::new().get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
            body["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e["ts_ms"].as_i64().unwrap() - now, e["xid"].as_i64().unwrap()))
                .collect::<Vec<_>>()
        }
    };
    let t = |s: i64| now - 60_000 + s * 1000;
    let first = scrapes(&[(t(0), 0.0), (t(1), 43.0), (t(2), 43.0)]);
    assert_eq!(post(&server, &key, snappy(&first), "snappy").await.0, 200);
    assert_eq!(xids(&server).await, [(t(1) - now, 43)], "0 is no XID; 43 once");
    // Resent, and the value repeated by later scrapes: nothing new.
    assert_eq!(post(&server, &key, snappy(&first), "snappy").await.0, 200);
    assert_eq!(post(&server, &key, snappy(&scrapes(&[(t(3), 43.0)])), "snappy").await.0, 200);
    assert_eq!(xids(&server).await.len(), 1);

    // A restart: the comparison is with the database.
    server.kill();
    let server = TestServer::spawn(&db.url, &[]);
    assert_eq!(post(&server, &key, snappy(&scrapes(&[(t(4), 43.0)])), "snappy").await.0, 200);
    assert_eq!(xids(&server).await.len(), 1, "43 is still the last XID");
    let later = scrapes(&[(t(5), 48.0), (t(6), 0.0), (t(7), 48.0)]);
    assert_eq!(post(&server, &key, snappy(&later), "snappy").await.0, 200);
    assert_eq!(xids(&server).await, [(t(5) - now, 48), (t(1) - now, 43)], "newest first");
}
