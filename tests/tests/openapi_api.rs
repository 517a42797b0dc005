//! Black box: `GET /api/openapi.json` is an OpenAPI 3 document of every route the server has.
//!
//! Both directions are checked: every documented operation is served by the router (a request
//! to it never reaches the "no such API endpoint" fallback nor gets 405), and the router serves
//! nothing undocumented (routes are only added through utoipa-axum's `routes!`, which takes
//! path and method from the handler's documentation; `app::tests::every_route_is_documented`
//! guards that in the server crate). The endpoints INTERFACE.md promises must be listed.

use std::collections::BTreeSet;

use fleetlens_tests::{Backend, TestDatabase, TestServer};
use serde_json::Value;

fleetlens_tests::for_each_backend!(openapi_document_lists_every_route);

/// INTERFACE.md's public surface: these operations must be in the document.
const PROMISED: &[(&str, &str)] = &[
    ("post", "/api/v1/ingest"),
    ("get", "/api/v1/gpus"),
    ("get", "/api/v1/gpus/{uuid}/samples"),
    ("get", "/api/v1/gpus/{uuid}/states"),
    ("get", "/api/v1/fleet/summary"),
    ("get", "/api/v1/alert-rules"),
    ("post", "/api/v1/alert-rules"),
    ("get", "/api/v1/alert-rules/{id}"),
    ("put", "/api/v1/alert-rules/{id}"),
    ("delete", "/api/v1/alert-rules/{id}"),
    ("get", "/api/v1/notification-channels"),
    ("post", "/api/v1/notification-channels"),
    ("get", "/api/v1/alerts"),
    ("post", "/api/v1/silences"),
    ("get", "/api/v1/reports/billing"),
    ("get", "/api/openapi.json"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/readyz"),
];

const METHODS: &[&str] = &["get", "put", "post", "delete", "patch"];

async fn openapi_document_lists_every_route(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();

    // Served without credentials: the document holds no data.
    let resp = client.get(server.url("/api/openapi.json")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let doc: Value = resp.json().await.unwrap();
    let version = doc["openapi"].as_str().expect("an `openapi` version field");
    assert!(version.starts_with("3."), "OpenAPI 3.x, got {version}");
    assert!(doc["info"]["title"].is_string());

    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().unwrap() {
            if METHODS.contains(&method.as_str()) {
                documented.insert((method.clone(), path.clone()));
                assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}: no responses");
            }
        }
    }
    for (method, path) in PROMISED {
        assert!(documented.contains(&(method.to_string(), path.to_string())), "{method} {path} is not documented");
    }
    assert!(documented.len() >= 55, "only {} operations documented", documented.len());

    // Security: a bearer API key and a session cookie; every operation but the open ones
    // requires one of them.
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["api_key"]["type"], "http");
    assert_eq!(schemes["api_key"]["scheme"], "bearer");
    assert_eq!(schemes["session"]["type"], "apiKey");
    assert_eq!(schemes["session"]["in"], "cookie");
    let open: BTreeSet<&str> =
        ["/healthz", "/readyz", "/api/openapi.json", "/api/v1/auth/login", "/api/v1/auth/logout"].into();
    let global = doc["security"].as_array().cloned().unwrap_or_default();
    for (method, path) in &documented {
        let op = &doc["paths"][path][method];
        let security = op.get("security").and_then(Value::as_array).cloned().unwrap_or_else(|| global.clone());
        let anonymous = security.is_empty() || security.iter().any(|r| r.as_object().is_some_and(|o| o.is_empty()));
        assert_eq!(anonymous, open.contains(path.as_str()), "{method} {path}: security {security:?}");
        // Query and path parameters are described.
        for segment in path.split('/').filter(|s| s.starts_with('{')) {
            let name = segment.trim_matches(|c| c == '{' || c == '}');
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            assert!(
                params.iter().any(|p| p["name"] == name && p["in"] == "path"),
                "{method} {path}: path parameter {name} is not described"
            );
        }
    }
    let billing = &doc["paths"]["/api/v1/reports/billing"]["get"];
    let names: BTreeSet<&str> =
        billing["parameters"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["format", "from", "group_by", "to"].into());
    assert!(billing["responses"]["200"]["content"]["text/csv"].is_object());
    let schemas = doc["components"]["schemas"].as_object().expect("component schemas");
    for name in ["ErrorBody", "Sample", "IngestBatch", "BillingReport", "FleetSummary", "GpuList", "StateWindow"] {
        assert!(schemas.contains_key(name), "schema {name} missing");
    }
    // Names on the wire are string enums of their names: a job's precision, readiness.
    let job = &schemas["JobReport"]["properties"]["precision"];
    assert_eq!(job["$ref"], "#/components/schemas/Precision", "{job}");
    for (schema, names) in [
        ("Precision", &["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4"][..]),
        ("ReadyStatus", &["ready", "unavailable"]),
        ("StoreBackend", &["sqlite", "postgres"]),
    ] {
        assert_eq!(schemas[schema]["enum"], serde_json::json!(names), "{schema}: {}", schemas[schema]);
    }

    // Every documented operation is routed: without credentials it is refused (or served),
    // never the API's "no such endpoint" 404 or a 405.
    for (method, path) in &documented {
        let concrete: String =
            path.split('/').map(|s| if s.starts_with('{') { "1" } else { s }).collect::<Vec<_>>().join("/");
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let resp = client.request(m, server.url(&concrete)).send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert_ne!(status, 405, "{method} {path}: not routed ({body})");
        assert!(!body.contains("no such API endpoint"), "{method} {path}: not routed ({status} {body})");
    }

    // An undocumented path is not served: JSON 404 from the API fallback, and a wrong method
    // is a JSON 405, not plain text.
    let resp = client.get(server.url("/api/v1/no-such-thing")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    let resp = client.patch(server.url("/api/v1/gpus")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    // A path id that is not a number: a JSON 400 (axum's rejection, rewritten).
    let resp = client
        .get(server.url("/api/v1/alert-rules/abc"))
        .bearer_auth(fleetlens_tests::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "bad_request");
}
