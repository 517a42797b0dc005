//! Black box, bad input (issue 8): a corpus of malformed requests against the real server, on
//! SQLite and PostgreSQL. Every one gets a 4xx with the JSON error body, nothing is stored, and
//! the server stays healthy; then names full of SQL metacharacters and unicode — valid, if
//! unusual — are stored and read back verbatim, and every table is still there.
//!
//! `ingest_api::invalid_batches_are_rejected_whole_and_store_nothing` covers the basic cases
//! (one bad field, bad gzip magic, body and gzip-bomb limits, content type); this corpus goes
//! further.

use std::time::Duration;

use fleetlens_tests::http::{get_json, ingest_ok, now_ms, segment};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, gzip, table_counts};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(malformed_corpus_is_rejected_and_nothing_stored);

fn sample(uuid: &str, ts: i64) -> Value {
    json!({"ts_ms": ts, "uuid": uuid, "gpu_index": 0, "name": "NVIDIA H100 80GB HBM3",
           "gpu_util_pct": 50.0, "sm_active_pct": 20.0, "power_w": 300.0})
}

fn batch(samples: Vec<Value>) -> Value {
    json!({"host": "bad-input-node", "samples": samples})
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// `ts` and a valid batch of 3 samples with the given change to sample 1.
fn with(field: &str, value: Value) -> Vec<u8> {
    let ts = now_ms() - 60_000;
    let mut s: Vec<Value> = (0..3).map(|i| sample("GPU-bad", ts + i * 1000)).collect();
    s[1][field] = value;
    bytes(&batch(s))
}

/// Patch a literal into the JSON text (for numbers serde_json cannot produce).
fn with_literal(field: &str, literal: &str) -> Vec<u8> {
    let text = String::from_utf8(with(field, json!("@@"))).unwrap();
    text.replacen("\"@@\"", literal, 1).into_bytes()
}

struct Case {
    what: &'static str,
    body: Vec<u8>,
    /// Content-Encoding header.
    encoding: Option<&'static str>,
}

fn case(what: &'static str, body: Vec<u8>) -> Case {
    Case { what, body, encoding: None }
}

fn corpus() -> Vec<Case> {
    let ts = now_ms() - 60_000;
    let good = bytes(&batch(vec![sample("GPU-bad", ts)]));
    let gz = gzip(&good);
    let mut cases = vec![
        // Transport: gzip that lies or breaks off.
        Case { what: "truncated gzip (half the stream)", body: gz[..gz.len() / 2].to_vec(), encoding: Some("gzip") },
        Case { what: "gzip without its trailer", body: gz[..gz.len() - 8].to_vec(), encoding: Some("gzip") },
        Case { what: "gzip magic only", body: vec![0x1f, 0x8b], encoding: Some("gzip") },
        Case { what: "plain JSON declared gzip", body: good.clone(), encoding: Some("gzip") },
        Case { what: "gzip of truncated JSON", body: gzip(&good[..good.len() - 5]), encoding: Some("gzip") },
        Case { what: "unknown content-encoding", body: good.clone(), encoding: Some("br") },
        case("empty body", vec![]),
        case("not JSON", b"host=n1&samples=1".to_vec()),
        case("invalid UTF-8", b"{\"host\": \"\xff\xfe\", \"samples\": []}".to_vec()),
        case("lone surrogate", br#"{"host": "\ud800", "samples": []}"#.to_vec()),
        case("trailing garbage", [good.clone(), b"}}".to_vec()].concat()),
        // Wrong types.
        case("host is a number", bytes(&json!({"host": 7, "samples": []}))),
        case("samples is an object", bytes(&json!({"host": "n", "samples": {"a": 1}}))),
        case("samples is a string", bytes(&json!({"host": "n", "samples": "[]"}))),
        case("samples missing", bytes(&json!({"host": "n"}))),
        case("ts_ms is a string", with("ts_ms", json!("1700000000000"))),
        case("ts_ms is fractional", with_literal("ts_ms", "1700000000000.5")),
        case("uuid is a number", with("uuid", json!(12345))),
        case("gpu_util_pct is a bool", with("gpu_util_pct", json!(true))),
        case("gpu_util_pct is an array", with("gpu_util_pct", json!([50]))),
        case("mem_used_bytes is fractional", with("mem_used_bytes", json!(1.5))),
        case("gpu_index is negative", with("gpu_index", json!(-1))),
        case("processes is a string", with("processes", json!("pid 7"))),
        case("labels is an array", bytes(&json!({"host": "n", "labels": ["team"], "samples": []}))),
        case("label value is a number", bytes(&json!({"host": "n", "labels": {"team": 1}, "samples": []}))),
        // Enormous numbers.
        case("ts_ms beyond i64", with_literal("ts_ms", "99999999999999999999999")),
        case("ts_ms 1e30", with_literal("ts_ms", "1e30")),
        case("ts_ms i64::MAX (far future)", with("ts_ms", json!(i64::MAX))),
        case("ts_ms i64::MIN", with("ts_ms", json!(i64::MIN))),
        case("power_w 1e308", with("power_w", json!(1e308))),
        case("power_w 1e999 (overflows f64)", with_literal("power_w", "1e999")),
        case("energy_j 1.7e308", with("energy_j", json!(1.7e308))),
        case("sm_clock_mhz 1e300", with("sm_clock_mhz", json!(1e300))),
        case("mem_total_bytes i64::MAX", with("mem_total_bytes", json!(i64::MAX))),
        case("gpu_index beyond u32", with("gpu_index", json!(1u64 << 40))),
        case("throttle_reasons negative", with("throttle_reasons", json!(-1))),
        case("percentage 1e10", with("sm_active_pct", json!(1e10))),
        // Names: control characters, overlong.
        case("NUL in uuid", with("uuid", json!("GPU-\u{0}-x"))),
        case("newline in host", bytes(&json!({"host": "n1\nn2", "samples": [sample("GPU-bad", ts)]}))),
        case("NUL in a label name", bytes(&json!({"host": "n", "labels": {"te\u{0}am": "x"}, "samples": []}))),
        case("escape in a label value", bytes(&json!({"host": "n", "labels": {"team": "\u{1b}[31m"}, "samples": []}))),
        case("uuid of 10,000 characters", with("uuid", json!("G".repeat(10_000)))),
        case("name of 100,000 characters", with("name", json!("é".repeat(50_000)))),
        case("host of 300 characters", bytes(&json!({"host": "h".repeat(300), "samples": []}))),
        case(
            "agent_version of 100,000 characters",
            bytes(&json!({"host": "n", "agent_version": "v".repeat(100_000), "samples": []})),
        ),
        // Huge arrays and objects.
        case(
            "2,000,000 integers as samples",
            format!("{{\"host\":\"n\",\"samples\":[{}]}}", vec!["0"; 2_000_000].join(",")).into_bytes(),
        ),
        case(
            "500,000 empty objects as samples",
            format!("{{\"host\":\"n\",\"samples\":[{}]}}", vec!["{}"; 500_000].join(",")).into_bytes(),
        ),
        case("10,000 processes on one GPU", with("processes", json!(vec![json!({"pid": 1, "used_bytes": 1}); 10_000]))),
        case(
            "5,000 host labels",
            bytes(&json!({"host": "n", "samples": [sample("GPU-bad", ts)],
                          "labels": (0..5000).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()})),
        ),
        // Deep nesting.
        case(
            "samples nested 100,000 deep",
            format!("{{\"host\":\"n\",\"samples\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
        ),
        case(
            "a label nested 100,000 deep",
            format!(
                "{{\"host\":\"n\",\"labels\":{{\"a\":{}1{}}},\"samples\":[]}}",
                "{\"a\":".repeat(100_000),
                "}".repeat(100_000)
            )
            .into_bytes(),
        ),
        case(
            "a sample field nested 10,000 deep",
            with_literal("power_w", &format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000))),
        ),
        // Duplicates.
        case("the same sample twice in one batch", bytes(&batch(vec![sample("GPU-bad", ts), sample("GPU-bad", ts)]))),
        case("two readings of one GPU at one time", {
            let mut b = sample("GPU-bad", ts);
            b["gpu_util_pct"] = json!(99.0);
            bytes(&batch(vec![sample("GPU-bad", ts), sample("GPU-other", ts), b]))
        }),
        case("duplicate keys in one object", br#"{"host":"n","host":"m","samples":[]}"#.to_vec()),
    ];
    // A batch that is fine but for its last sample, at the end of 20,000 valid ones.
    let mut many: Vec<Value> = (0..20_000).map(|i| sample(&format!("GPU-many-{}", i % 50), ts - i * 1000)).collect();
    many.push(sample("", ts));
    cases.push(case("20,000 valid samples then one without uuid", bytes(&batch(many))));
    cases
}

async fn malformed_corpus_is_rejected_and_nothing_stored(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--max-body-bytes", "32000000"]);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let before = table_counts(&db.url).await;
    assert_eq!(before.samples, 0);
    let mut report = Vec::new();
    for c in corpus() {
        let mut req = client
            .post(server.url("/api/v1/ingest"))
            .bearer_auth(ADMIN_TOKEN)
            .header("content-type", "application/json")
            .body(c.body.clone());
        if let Some(e) = c.encoding {
            req = req.header("content-encoding", e);
        }
        let resp =
            req.send().await.unwrap_or_else(|e| panic!("{}: no answer ({e}): did the server fall over?", c.what));
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!((400..500).contains(&status), "{}: expected a 4xx, got {status}: {body}", c.what);
        let err = &body["error"];
        assert!(
            err["code"].as_str().is_some_and(|s| !s.is_empty())
                && err["message"].as_str().is_some_and(|s| !s.is_empty()),
            "{}: a JSON error body: {body}",
            c.what
        );
        report.push(format!("{status} {}", c.what));
    }
    eprintln!("{} malformed requests:\n  {}", report.len(), report.join("\n  "));
    assert_eq!(table_counts(&db.url).await, before, "nothing stored");
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "server still healthy");
    let gpus: Value = get_json(&server, "/api/v1/gpus").await;
    assert_eq!(gpus["gpus"], json!([]), "no GPU registered by a rejected batch");
    let hosts: Value = get_json(&server, "/api/v1/hosts").await;
    assert!(!hosts.to_string().contains("bad-input-node"), "no host recorded by a rejected batch: {hosts}");

    // Valid but hostile names: stored as data, read back byte for byte; the schema survives.
    let ts = now_ms() - 30_000;
    let names = [
        "GPU-'; DROP TABLE samples; --",
        "GPU-\" OR 1=1 --",
        "GPU-%_\\x00-like",
        "GPU-ユニコード-🚀-ẞ",
        "GPU-\u{202e}rtl",
        "GPU-$1-?-:name",
    ];
    let host = "node-'); DELETE FROM gpus; --";
    let samples: Vec<Value> = names.iter().map(|n| sample(n, ts)).collect();
    ingest_ok(&server, json!({"host": host, "labels": {"team": "ml'; --", "rack": "r\"1"}, "samples": samples})).await;
    let gpus: Value = get_json(&server, "/api/v1/gpus").await;
    let mut got: Vec<(String, String)> = gpus["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["uuid"].as_str().unwrap().to_string(), g["host"].as_str().unwrap().to_string()))
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = names.iter().map(|n| (n.to_string(), host.to_string())).collect();
    want.sort();
    assert_eq!(got, want, "names read back verbatim");
    for n in names {
        let url = format!("{}/api/v1/gpus/{}/samples?from=0", server.base_url, segment(n));
        let v: Value = client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
        assert_eq!(v["samples"].as_array().map(Vec::len), Some(1), "{n}: {v}");
    }
    let after = table_counts(&db.url).await;
    assert_eq!((after.samples, after.gpus), (names.len() as i64, names.len() as i64), "every table intact");
}
