//! Black box: the real server on 127.0.0.1:0, on SQLite and PostgreSQL, through HTTP.
//! Every invalid ingest request gets a clear 4xx and leaves the database unchanged.

use fleetlens_tests::http::{get, get_json, now_ms, post_bytes};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines, gzip, table_counts};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    fixture_ingest_is_idempotent_and_reads_back,
    invalid_batches_are_rejected_whole_and_store_nothing,
    auth_is_required_and_scoped,
    the_hmma_tensor_pipe_is_stored_and_read_back,
    samples_read_as_columns_are_the_rows,
);

async fn post_ingest(server: &TestServer, body: Vec<u8>, gzipped: bool, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().post(server.url("/api/v1/ingest")).header("content-type", "application/json");
    if gzipped {
        req = req.header("content-encoding", "gzip");
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.body(if gzipped { gzip(&body) } else { body }).send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// (what, body, expected status, expected sample index, expected field)
type Case<'a> = (&'a str, Vec<u8>, u16, Option<usize>, Option<&'a str>);

async fn start(backend: Backend) -> (TestDatabase, TestServer) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-body-bytes", "1000000"]);
    (db, server)
}

async fn fixture_ingest_is_idempotent_and_reads_back(backend: Backend) {
    let (db, server) = start(backend).await;
    let batch = json!({"host": "gpu-node-01", "samples": fixture_lines()});
    let body = serde_json::to_vec(&batch).unwrap();
    let (status, first) = post_ingest(&server, body.clone(), true, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first, json!({"received": 84, "inserted": 84, "merged": 0, "duplicates": 0}));
    let (_, again) = post_ingest(&server, body, false, Some(ADMIN_TOKEN)).await;
    assert_eq!(
        again,
        json!({"received": 84, "inserted": 0, "merged": 0, "duplicates": 84}),
        "an exact resend: duplicates, nothing merged"
    );
    assert_eq!(table_counts(&db.url).await.samples, 84);

    let gpus: Value = get_json(&server, "/api/v1/gpus").await;
    let gpu = &gpus["gpus"][0];
    assert_eq!(gpu["host"], "gpu-node-01");
    assert_eq!(gpu["latest"]["ts_ms"], fixture_lines()[83]["ts_ms"]);
    // The trace ends idle: kernel utilization 0, so efficiency is undefined, not 0.
    assert_eq!(gpu["efficiency"], Value::Null);
}

/// The signal of migration 0024 goes in with a batch and comes back from the samples and the
/// GPU's latest sample; a sample without it reads it as null, never 0.
async fn the_hmma_tensor_pipe_is_stored_and_read_back(backend: Backend) {
    let (_db, server) = start(backend).await;
    let lines = fixture_lines();
    let mut samples: Vec<Value> = lines[..3].to_vec();
    samples[0]["tensor_hmma_active_pct"] = json!(61.25);
    samples[1].as_object_mut().unwrap().remove("tensor_hmma_active_pct");
    samples[2]["tensor_hmma_active_pct"] = json!(0.0);
    let body = serde_json::to_vec(&json!({"host": "gpu-node-01", "samples": samples})).unwrap();
    let (status, answer) = post_ingest(&server, body, true, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{answer}");
    let uuid = samples[0]["uuid"].as_str().unwrap();
    let from = samples.iter().map(|s| s["ts_ms"].as_i64().unwrap()).min().unwrap();
    let back: Value =
        get_json(&server, &format!("/api/v1/gpus/{uuid}/samples?from={from}&to={}", from + 3_600_000)).await;
    let got: Vec<Value> =
        back["samples"].as_array().unwrap().iter().map(|s| s["tensor_hmma_active_pct"].clone()).collect();
    assert_eq!(got, [json!(61.25), Value::Null, json!(0.0)]);
    let gpus: Value = get_json(&server, "/api/v1/gpus").await;
    assert_eq!(gpus["gpus"][0]["latest"]["tensor_hmma_active_pct"], json!(0.0));
}

async fn invalid_batches_are_rejected_whole_and_store_nothing(backend: Backend) {
    let (db, server) = start(backend).await;
    let lines = fixture_lines();
    let (status, _) = post_ingest(
        &server,
        serde_json::to_vec(&json!({"host": "n1", "samples": lines[..20]})).unwrap(),
        true,
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 200);
    let before = table_counts(&db.url).await;

    // Ten valid new samples, then one bad one at index 10: the whole batch must go.
    let with_bad = |field: &str, value: Value| -> Vec<u8> {
        let mut samples: Vec<Value> = lines[20..31].to_vec();
        samples[10][field] = value;
        serde_json::to_vec(&json!({"host": "n1", "samples": samples})).unwrap()
    };
    let mut missing_uuid: Vec<Value> = lines[20..31].to_vec();
    missing_uuid[10].as_object_mut().unwrap().remove("uuid");
    let future = now_ms() + 10 * 60 * 1000;
    let cases: Vec<Case> = vec![
        (
            "non-finite number",
            with_bad("gpu_util_pct", json!(null)).replace_null("1e999"),
            400,
            Some(10),
            Some("gpu_util_pct"),
        ),
        ("percentage over 100", with_bad("gpu_util_pct", json!(100.5)), 422, Some(10), Some("gpu_util_pct")),
        // Profiling-counter activity above 100 is a reading (flagged, crates/core/src/quality.rs)
        // up to a ceiling; beyond it, bad input.
        ("activity over its ceiling", with_bad("sm_active_pct", json!(1000.5)), 422, Some(10), Some("sm_active_pct")),
        ("negative percentage", with_bad("dram_active_pct", json!(-1)), 422, Some(10), Some("dram_active_pct")),
        ("negative bytes", with_bad("mem_used_bytes", json!(-4096)), 422, Some(10), Some("mem_used_bytes")),
        (
            "newest signal below 0",
            with_bad("tensor_hmma_active_pct", json!(-0.5)),
            422,
            Some(10),
            Some("tensor_hmma_active_pct"),
        ),
        ("timestamp in the future", with_bad("ts_ms", json!(future)), 422, Some(10), Some("ts_ms")),
        (
            "missing uuid",
            serde_json::to_vec(&json!({"host": "n1", "samples": missing_uuid})).unwrap(),
            422,
            Some(10),
            Some("uuid"),
        ),
        ("wrong type", with_bad("power_w", json!("hot")), 400, Some(10), Some("power_w")),
        (
            "missing host",
            serde_json::to_vec(&json!({"host": " ", "samples": lines[20..22]})).unwrap(),
            422,
            None,
            Some("host"),
        ),
        ("truncated JSON", b"{\"host\": \"n1\", \"samples\": [{\"ts_ms\": 1".to_vec(), 400, None, None),
        ("not an object", b"[1, 2, 3]".to_vec(), 400, None, None),
    ];
    for (what, body, want_status, want_index, want_field) in cases {
        for gzipped in [false, true] {
            let (status, err) = post_ingest(&server, body.clone(), gzipped, Some(ADMIN_TOKEN)).await;
            assert_eq!(status, want_status, "{what} (gzip {gzipped}): {err}");
            let detail = &err["error"];
            assert!(
                detail["code"].is_string() && detail["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {err}"
            );
            if let Some(i) = want_index {
                assert_eq!(detail["sample_index"], json!(i), "{what}: {err}");
            }
            if let Some(f) = want_field {
                assert_eq!(detail["field"], json!(f), "{what}: {err}");
                assert!(detail["message"].as_str().unwrap().contains(f), "{what}: message names the field: {err}");
            }
            assert_eq!(table_counts(&db.url).await, before, "{what}: nothing stored");
        }
    }

    // Transport-level rejections.
    let gzipped_json = [("content-type", "application/json"), ("content-encoding", "gzip")];
    let corrupt_gzip = post_bytes(&server, "/api/v1/ingest", &gzipped_json, b"\x1f\x8b\x08\x00garbage".to_vec()).await;
    assert_eq!(corrupt_gzip.status().as_u16(), 400);
    let huge = vec![b' '; 1_500_000];
    let (status, err) = post_ingest(&server, huge, false, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 413, "{err}");
    // A gzip bomb: small on the wire, over the decoded limit once inflated.
    let bomb = post_bytes(&server, "/api/v1/ingest", &gzipped_json, gzip(&vec![b' '; 200 * 1024 * 1024])).await;
    assert_eq!(bomb.status().as_u16(), 413);
    let wrong_type = post_bytes(&server, "/api/v1/ingest", &[("content-type", "text/plain")], "hello").await;
    assert_eq!(wrong_type.status().as_u16(), 415);
    assert_eq!(table_counts(&db.url).await, before, "nothing stored");
    let health = reqwest::get(server.url("/readyz")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200, "server still healthy");
    let database = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(health.json::<Value>().await.unwrap(), json!({"status": "ready", "database": database}));
}

async fn auth_is_required_and_scoped(backend: Backend) {
    let (db, server) = start(backend).await;
    let body = serde_json::to_vec(&json!({"host": "n1", "samples": fixture_lines()[..5]})).unwrap();
    let (status, err) = post_ingest(&server, body.clone(), false, None).await;
    assert_eq!((status, err["error"]["code"].as_str()), (401, Some("unauthenticated")));
    let (status, _) = post_ingest(&server, body.clone(), false, Some("fl_not_a_key")).await;
    assert_eq!(status, 401);
    let gpus = reqwest::get(server.url("/api/v1/gpus")).await.unwrap();
    assert_eq!(gpus.status().as_u16(), 401);
    assert_eq!(table_counts(&db.url).await.samples, 0);
    let missing = reqwest::Client::new()
        .get(server.url("/api/v1/gpus/GPU-none/samples?from=0"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let bad_time = reqwest::Client::new()
        .get(server.url("/api/v1/gpus/GPU-none/samples?from=last-tuesday"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    // A time that cannot be read at all is unparseable input: 400, naming the parameter.
    assert_eq!(bad_time.status().as_u16(), 400);
    let err: serde_json::Value = bad_time.json().await.unwrap();
    assert_eq!(err["error"]["field"], "from");
}

/// JSON cannot carry 1e999 as a value we can build; patch it into the encoded text.
trait ReplaceNull {
    fn replace_null(self, with: &str) -> Vec<u8>;
}

impl ReplaceNull for Vec<u8> {
    fn replace_null(self, with: &str) -> Vec<u8> {
        let text = String::from_utf8(self).unwrap();
        text.replacen("\"gpu_util_pct\":null", &format!("\"gpu_util_pct\":{with}"), 1).into_bytes()
    }
}

/// `format=columns` answers the samples of the rows, transposed: entry i of each signal's array
/// is sample i's field (null where the row has none), and the process and allocation lists
/// the samples refer to are theirs. A format it does not know is a 422 naming `format`.
async fn samples_read_as_columns_are_the_rows(backend: Backend) {
    let (_db, server) = start(backend).await;
    let mut samples: Vec<Value> = fixture_lines();
    for (i, s) in samples.iter_mut().enumerate() {
        if i % 3 == 0 {
            s["allocations"] = json!([{"namespace": "ml", "pod": format!("train-{}", i / 30)}]);
        }
    }
    let body = serde_json::to_vec(&json!({"host": "gpu-node-01", "samples": samples})).unwrap();
    let (status, answer) = post_ingest(&server, body, true, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{answer}");
    let uuid = samples[0]["uuid"].as_str().unwrap();
    let from = samples.iter().map(|s| s["ts_ms"].as_i64().unwrap()).min().unwrap();
    let path = format!("/api/v1/gpus/{uuid}/samples?from={from}&to={}&limit=80", from + 3_600_000);
    let rows: Value = get_json(&server, &path).await;
    let columns: Value = get_json(&server, &format!("{path}&format=columns")).await;
    let rows_list = rows["samples"].as_array().unwrap();
    assert_eq!(rows_list.len(), 80);
    for key in ["uuid", "from_ms", "to_ms", "truncated"] {
        assert_eq!(columns[key], rows[key], "{key}");
    }
    assert_eq!(columns["truncated"], true);
    let times: Vec<Value> = rows_list.iter().map(|s| s["ts_ms"].clone()).collect();
    assert_eq!(columns["ts_ms"].as_array().unwrap(), &times);
    let signals = columns["signals"].as_object().unwrap();
    assert!(signals.len() >= 20, "every signal: {:?}", signals.keys());
    let mut present = 0;
    for (name, values) in signals {
        let values = values.as_array().unwrap();
        assert_eq!(values.len(), 80, "{name}");
        for (i, row) in rows_list.iter().enumerate() {
            let want = row.get(name).cloned().unwrap_or(Value::Null);
            assert_eq!(values[i], want, "{name} of sample {i}");
            present += usize::from(!want.is_null());
        }
    }
    assert!(present > 80 * 10, "the fixture's readings are there: {present}");
    // The processes: the typed reading puts each sample's list back together; the fixture has
    // samples with processes and samples without.
    let typed: fleetlens_api::gpus::SampleColumns = serde_json::from_value(columns.clone()).unwrap();
    let lists = typed.processes.lists(&typed.process_count);
    assert!(typed.processes.process.len() > 10, "{:?}", typed.processes);
    let allocation_lists = columns["allocation_lists"].as_array().unwrap();
    assert!(allocation_lists.len() >= 3, "{allocation_lists:?}");
    for (i, row) in rows_list.iter().enumerate() {
        let processes = serde_json::to_value(&lists[i]).unwrap();
        assert_eq!(processes, row.get("processes").cloned().unwrap_or(Value::Null), "processes of sample {i}");
        let allocations = &allocation_lists[columns["allocations"][i].as_u64().unwrap() as usize];
        assert_eq!(allocations, &row.get("allocations").cloned().unwrap_or(json!([])), "allocations of sample {i}");
    }
    let (status, err) = get(&server, &format!("{path}&format=csv")).await;
    assert_eq!((status, err["error"]["field"].as_str()), (422, Some("format")), "{err}");
}
