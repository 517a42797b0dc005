//! Black box: `POST /api/v1/ingest` with a protobuf body (`fleetlens.ingest.v1.IngestBatch`,
//! the agent's default), on SQLite and PostgreSQL. It stores exactly what the same batch as
//! JSON stores, and bad bodies get the same clear 4xx, leaving the database unchanged.

use fleetlens_api::{IngestBatch, Sample, ingest_protobuf as pb};
use fleetlens_tests::http::get_json;
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines, gzip, table_counts};
use prost::Message;
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    a_protobuf_batch_stores_what_its_json_stores,
    bad_protobuf_bodies_get_clear_errors_and_store_nothing,
);

fn fixture_batch() -> IngestBatch {
    serde_json::from_value(json!({"host": "gpu-node-01", "labels": {"team": "ml"}, "samples": fixture_lines()}))
        .expect("the fixture as a batch")
}

async fn post(server: &TestServer, body: Vec<u8>, content_type: &str, encoding: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(server.url("/api/v1/ingest"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", content_type)
        .body(body);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(bytes, 3).unwrap()
}

/// Everything the API says of the fixture's GPU: its samples, its summary and the fleet's.
async fn what_is_stored(server: &TestServer) -> Value {
    let lines = fixture_lines();
    let uuid = lines[0]["uuid"].as_str().unwrap();
    let from = lines.iter().map(|l| l["ts_ms"].as_i64().unwrap()).min().unwrap();
    let to = lines.iter().map(|l| l["ts_ms"].as_i64().unwrap()).max().unwrap() + 1;
    let samples: Value = get_json(server, &format!("/api/v1/gpus/{uuid}/samples?from={from}&to={to}")).await;
    let mut gpus: Value = get_json(server, "/api/v1/gpus").await;
    // When the server first saw the GPU is its own clock, not the batch's.
    for g in gpus["gpus"].as_array_mut().unwrap() {
        g.as_object_mut().unwrap().retain(|k, _| !k.ends_with("seen_ms") && k != "registered_at");
    }
    json!({"samples": samples, "gpus": gpus})
}

async fn a_protobuf_batch_stores_what_its_json_stores(backend: Backend) {
    let json_db = TestDatabase::new(backend).await;
    let json_server = TestServer::spawn(&json_db.url, &[]);
    let proto_db = TestDatabase::new(backend).await;
    let proto_server = TestServer::spawn(&proto_db.url, &[]);

    let batch = fixture_batch();
    let (status, answer) =
        post(&json_server, gzip(&serde_json::to_vec(&batch).unwrap()), "application/json", Some("gzip")).await;
    assert_eq!(status, 200, "{answer}");
    let proto = pb::IngestBatch::from(batch.clone()).encode_to_vec();
    let (status, answer) = post(&proto_server, zstd(&proto), "application/x-protobuf", Some("zstd")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({"received": 84, "inserted": 84, "merged": 0, "duplicates": 0}));
    assert_eq!(what_is_stored(&proto_server).await, what_is_stored(&json_server).await);
    assert_eq!(table_counts(&proto_db.url).await.samples, 84);

    // Resent plain and gzip (and with the registered media type's other name): duplicates.
    for (body, ct, enc) in
        [(proto.clone(), "application/x-protobuf", None), (gzip(&proto), "application/protobuf", Some("gzip"))]
    {
        let (status, again) = post(&proto_server, body, ct, enc).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again, json!({"received": 84, "inserted": 0, "merged": 0, "duplicates": 84}));
    }
    assert_eq!(table_counts(&proto_db.url).await.samples, 84);
}

/// (what, body, content-encoding, status, field named)
type Case<'a> = (&'a str, Vec<u8>, Option<&'a str>, u16, Option<&'a str>);

async fn bad_protobuf_bodies_get_clear_errors_and_store_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-samples-per-batch", "50"]);
    let lines = fixture_lines();
    let good: IngestBatch = serde_json::from_value(json!({"host": "n1", "samples": lines[..10]})).expect("a batch");
    let (status, answer) =
        post(&server, pb::IngestBatch::from(good.clone()).encode_to_vec(), "application/x-protobuf", None).await;
    assert_eq!(status, 200, "{answer}");
    let before = table_counts(&db.url).await;

    let with = |edit: &dyn Fn(&mut pb::IngestBatch)| {
        let mut b = pb::IngestBatch::from(IngestBatch {
            samples: serde_json::from_value(json!(lines[20..31])).unwrap(),
            ..good.clone()
        });
        edit(&mut b);
        b.encode_to_vec()
    };
    let many: Vec<Sample> = serde_json::from_value(json!(lines[..51])).unwrap();
    // 64 MiB of zeros in ~2 KB of zstd: past `--max-decoded-bytes` once inflated.
    let bomb = zstd(&vec![0u8; 64 << 20]);
    let cases: Vec<Case> = vec![
        ("not protobuf", b"\xff\xff\xff\xff".to_vec(), None, 400, None),
        ("truncated", with(&|_| {})[..40].to_vec(), None, 400, None),
        ("percentage over 100", with(&|b| b.samples[10].gpu_util_pct = Some(100.5)), None, 422, Some("gpu_util_pct")),
        (
            "negative bytes",
            with(&|b| b.samples[10].mem_used_bytes = Some(-4096)),
            Some("zstd"),
            422,
            Some("mem_used_bytes"),
        ),
        ("missing uuid", with(&|b| b.samples[10].uuid.clear()), None, 422, Some("uuid")),
        ("blank host", with(&|b| b.host = " ".into()), None, 422, Some("host")),
        (
            "event of no kind",
            with(&|b| b.events.push(pb::GpuEvent { ts_ms: 1, uuid: "GPU-1".into(), ..Default::default() })),
            None,
            422,
            Some("events[0].kind"),
        ),
        (
            "more samples than --max-samples-per-batch",
            pb::IngestBatch::from(IngestBatch { samples: many, ..good.clone() }).encode_to_vec(),
            None,
            413,
            None,
        ),
        ("zstd bomb", bomb, Some("zstd"), 413, None),
        ("corrupt zstd", b"\x28\xb5\x2f\xfd garbage".to_vec(), Some("zstd"), 400, None),
    ];
    for (what, body, encoding, want, field) in cases {
        // zstd-encoded unless the case is about the compression itself.
        let body = if encoding == Some("zstd") && !what.contains("zstd") { zstd(&body) } else { body };
        let (status, err) = post(&server, body, "application/x-protobuf", encoding).await;
        assert_eq!(status, want, "{what}: {err}");
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what}: a message: {err}");
        if let Some(f) = field {
            assert_eq!(err["error"]["field"], json!(f), "{what}: {err}");
        }
        assert_eq!(table_counts(&db.url).await, before, "{what}: nothing stored");
    }
    let (status, err) = post(&server, b"x".to_vec(), "text/plain", None).await;
    assert_eq!(status, 415, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("application/x-protobuf"), "{err}");
    let (status, err) = post(&server, b"x".to_vec(), "application/x-protobuf", Some("br")).await;
    assert_eq!(status, 415, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains("zstd"), "{err}");
}
