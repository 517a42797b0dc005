//! Black box, range parameters at their extremes (issue 19, item 8), on SQLite and PostgreSQL.
//! `GET /gpus/{uuid}/series?from=-1&to=9223372036854775807` overflowed `to - from` past the
//! size check. Every endpoint that takes a time range (or a time in a body) now refuses a time
//! outside 1970-01-01 … 9999-12-31 with a 422 that names the parameter; the widest valid range
//! is answered (or refused as too many points, naming `resolution`); counts (`limit`,
//! `window_s`) beyond their bounds or beyond 64 bits are refused too; and the server stays up.

use fleetlens_tests::http::now_ms;
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(extreme_ranges_get_422_naming_the_parameter);

const I64_MAX: &str = "9223372036854775807";
const I64_MIN: &str = "-9223372036854775808";
const UUID: &str = "GPU-range-0";

/// Out-of-range combinations of `from` and `to`, and the parameters that may be named.
fn time_cases() -> Vec<(String, &'static [&'static str])> {
    const FROM_TO: &[&str] = &["from", "to"];
    vec![
        (format!("from=-1&to={I64_MAX}"), FROM_TO),
        (format!("from={I64_MIN}&to={I64_MAX}"), FROM_TO),
        (format!("from=0&to={I64_MAX}"), &["to"]),
        (format!("from={I64_MIN}&to=0"), &["from"]),
        (format!("to={I64_MIN}"), &["to"]),
        (format!("from={I64_MIN}"), &["from"]),
        ("from=-1".to_string(), &["from"]),
        ("from=99999999999999999999999".to_string(), &["from"]),
        ("to=-99999999999999999999999".to_string(), &["to"]),
        ("to=253402300800000".to_string(), &["to"]),
        ("from=0000-01-01T00:00:00Z".to_string(), &["from"]),
        ("from=-3600001&to=-1".to_string(), FROM_TO),
    ]
}

async fn get(server: &TestServer, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(server.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: no answer ({e})"));
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text})))
}

async fn post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: no answer ({e})"));
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text})))
}

fn assert_422(what: &str, status: u16, body: &Value, fields: &[&str]) {
    let text = body.to_string();
    let body: String = text.chars().take(400).collect();
    assert_eq!(status, 422, "{what}: {body}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "validation_failed", "{what}: {body}");
    let field = body["error"]["field"].as_str().unwrap_or_default();
    assert!(fields.contains(&field), "{what}: field {field:?}, want one of {fields:?}: {body}");
}

async fn extreme_ranges_get_422_naming_the_parameter(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let now = now_ms();
    let samples: Vec<Value> = (0..30)
        .map(|i| {
            json!({"ts_ms": now - 120_000 + i * 2_000, "uuid": UUID, "name": "NVIDIA H100 80GB HBM3",
                   "gpu_util_pct": 90.0, "sm_active_pct": 40.0, "power_w": 400.0,
                   "processes": [{"pid": 7, "owner": {"user": "alice"}}]})
        })
        .collect();
    let (status, body) = post(&server, "/api/v1/ingest", json!({"host": "range-node", "samples": samples})).await;
    assert_eq!(status, 200, "{body}");
    let job = json!({"name": "train", "gpus": [UUID], "from": now - 60_000, "to": now, "precision": "bf16",
                     "achieved_flops_per_s": 1e14});
    let (status, body) = post(&server, "/api/v1/jobs", job.clone()).await;
    assert_eq!(status, 201, "{body}");

    let endpoints = [
        format!("/api/v1/gpus/{UUID}/samples"),
        format!("/api/v1/gpus/{UUID}/series"),
        format!("/api/v1/gpus/{UUID}/series?resolution=1m"),
        format!("/api/v1/gpus/{UUID}/states"),
        format!("/api/v1/gpus/{UUID}/states?window_s=7"),
        "/api/v1/fleet/summary".to_string(),
        "/api/v1/events".to_string(),
        "/api/v1/jobs".to_string(),
        "/api/v1/reports/billing".to_string(),
        "/api/v1/reports/billing?group_by=user".to_string(),
        "/api/v1/reports/billing?format=csv".to_string(),
    ];
    for endpoint in &endpoints {
        let sep = if endpoint.contains('?') { '&' } else { '?' };
        for (query, fields) in time_cases() {
            let path = format!("{endpoint}{sep}{query}");
            let (status, body) = get(&server, &path).await;
            assert_422(&path, status, &body, fields);
        }
        // The widest valid range: answered, or refused for its size at `resolution`.
        let path = format!("{endpoint}{sep}from=0&to=253402300799999");
        let (status, body) = get(&server, &path).await;
        if endpoint.contains("/series") {
            assert_422(&path, status, &body, &["resolution"]);
        } else {
            assert_eq!(status, 200, "{path}: {body}");
        }
    }

    // Not a whole number: unreadable, 400 naming the parameter (docs/API.md, "Errors").
    for endpoint in [
        format!("/api/v1/gpus/{UUID}/samples?limit=1e3"),
        "/api/v1/events?limit=1e3".to_string(),
        format!("/api/v1/gpus/{UUID}/states?window_s=1e3"),
    ] {
        let (status, body) = get(&server, &endpoint).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("bad_request")), "{endpoint}: {body}");
        assert!(matches!(body["error"]["field"].as_str(), Some("limit" | "window_s")), "{endpoint}: {body}");
    }
    // Counts beyond their bounds, or beyond 64 bits.
    for huge in ["0", "-1", "4294967296", I64_MAX, "18446744073709551616", "1e3"] {
        if huge == "1e3" {
            // Only the alerts endpoints below: the others answered 400 above.
            for endpoint in ["/api/v1/alerts", "/api/v1/notification-deliveries"] {
                let path = format!("{endpoint}?limit={huge}");
                let (status, body) = get(&server, &path).await;
                assert!((400..500).contains(&status) && body["error"]["code"].is_string(), "{path}: {status} {body}");
            }
            continue;
        }
        for endpoint in [format!("/api/v1/gpus/{UUID}/samples?limit={huge}"), format!("/api/v1/events?limit={huge}")] {
            let (status, body) = get(&server, &endpoint).await;
            assert_422(&endpoint, status, &body, &["limit"]);
        }
        let path = format!("/api/v1/gpus/{UUID}/states?window_s={huge}");
        let (status, body) = get(&server, &path).await;
        assert_422(&path, status, &body, &["window_s"]);
        for endpoint in ["/api/v1/alerts", "/api/v1/notification-deliveries"] {
            let path = format!("{endpoint}?limit={huge}");
            let (status, body) = get(&server, &path).await;
            assert!((400..500).contains(&status) && body["error"]["code"].is_string(), "{path}: {status} {body}");
        }
    }

    // Times in bodies: a job's period, a silence's start and end.
    let extremes =
        [json!(-1), json!(i64::MAX), json!(i64::MIN), json!(I64_MAX), json!("-1"), json!(253_402_300_800_000i64)];
    for bad in &extremes {
        for field in ["from", "to"] {
            let mut body = job.clone();
            body[field] = bad.clone();
            let (status, answer) = post(&server, "/api/v1/jobs", body).await;
            assert_422(&format!("job {field} = {bad}"), status, &answer, &[field]);
        }
        let silence = json!({"matchers": {"host": "range-node"}, "ends_at": bad});
        let (status, answer) = post(&server, "/api/v1/silences", silence).await;
        assert_422(&format!("silence ends_at = {bad}"), status, &answer, &["ends_at"]);
        let silence = json!({"matchers": {"host": "range-node"}, "starts_at": bad, "ends_at": now + 60_000});
        let (status, answer) = post(&server, "/api/v1/silences", silence).await;
        assert_422(&format!("silence starts_at = {bad}"), status, &answer, &["starts_at"]);
    }

    // Still up, still answering.
    let (status, body) = get(&server, &format!("/api/v1/gpus/{UUID}/samples?from=0")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["samples"].as_array().unwrap().len(), 30);
}
