//! Black box: owner accounting (issue 9) on a constructed multi-owner scenario with known
//! answers, on SQLite and PostgreSQL — billing rows per user, namespace, pod, Slurm job and
//! label, the fleet summary's top owners, owner fields in alert rules and labels, and the
//! errors for bad groupings and periods beyond the raw retention.

use fleetlens_tests::http::{alerts_of_rule, close, create_rule, get, now_ms, post, report_row, set_price};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, minutes_of};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(owners_on_a_known_scenario);

const H100: &str = "NVIDIA H100 80GB HBM3";
const PRICE: f64 = 3.0;
const MINUTE: i64 = 60_000;

async fn owners_on_a_known_scenario(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // Owner reports read raw samples: the production retention decides how far back they go.
    let server = TestServer::spawn(&db.url, &["--raw-retention", "7d"]);
    set_price(&server, H100, PRICE).await;
    // An alert rule on an owner field, before the samples arrive.
    let rule = create_rule(&server, "ml notebook idle", "state == idle_held && owner_namespace == \"ml\"").await;
    // A silence on the owner's namespace (the alert is recorded, marked silenced).
    let (status, silence) = post(
        &server,
        "/api/v1/silences",
        json!({"matchers": {"owner_namespace": "ml"}, "ends_at": now_ms() + 3_600_000, "comment": "alice is on leave"}),
    )
    .await;
    assert!(status == 200 || status == 201, "{silence}");

    let start = (now_ms() / MINUTE - 80) * MINUTE;
    let alice_pod = json!([{"pid": 4242, "used_bytes": 40i64 << 30, "sm_pct": 0.0,
        "owner": {"user": "alice", "container_id": "containerd://2c4e", "pod_uid": "0b6f2a44-9c1d-4e5f-8a7b-6c5d4e3f2a1b",
                  "pod_name": "nb-alice", "namespace": "ml", "job_id": null, "job_user": null, "job_partition": null,
                  "labels": {}}}]);
    let bob_job = json!([{"pid": 5151, "used_bytes": 60i64 << 30, "sm_pct": 95.0,
        "owner": {"user": "bob", "job_id": "48213", "job_user": "bob", "job_partition": "gpu",
                  "labels": {"EXPERIMENT_ID": "exp-42"}}}]);
    // GPU C: alice's and carol's processes share it 3:1 by SM %.
    let shared = json!([
        {"pid": 11, "used_bytes": 10i64 << 30, "sm_pct": 30.0, "owner": {"user": "alice"}},
        {"pid": 12, "used_bytes": 10i64 << 30, "sm_pct": 10.0, "owner": {"user": "carol"}},
    ]);
    // A: alice's pod holds 40 GB with no kernels for 30 min (idle_held).
    let a = minutes_of("GPU-A", H100, start, 30, 0.0, 0.0, 0.0, &alice_pod);
    // B: bob's Slurm job, compute-bound for 30 min.
    let b = minutes_of("GPU-B", H100, start, 30, 100.0, 95.0, 90.0, &bob_job);
    // C: 30 min hollow (util 60, SMACT 10: waste 90 %), shared; then 10 min idle with nobody.
    let mut c = minutes_of("GPU-C", H100, start, 30, 60.0, 10.0, 0.0, &shared);
    c.extend(minutes_of("GPU-C", H100, start + 30 * MINUTE, 10, 0.0, 0.0, 0.0, &json!([])));
    for (host, samples) in [("node-a", a), ("node-b", b), ("node-c", c)] {
        for chunk in samples.chunks(600) {
            let (status, body) = post(&server, "/api/v1/ingest", json!({"host": host, "samples": chunk})).await;
            assert_eq!(status, 200, "{body}");
        }
    }
    let (from, to) = (start, start + 40 * MINUTE);

    // The owner object is stored and read back as sent; absent fields are null.
    let (status, samples) = get(&server, &format!("/api/v1/gpus/GPU-A/samples?from={from}&to={to}&limit=1")).await;
    assert_eq!(status, 200, "{samples}");
    let owner = &samples["samples"][0]["processes"][0]["owner"];
    assert_eq!(owner["namespace"], "ml", "{samples}");
    assert_eq!(owner["pod_name"], "nb-alice");
    assert_eq!(owner["job_id"], Value::Null);

    // Per user: alice 0.5 h idle_held on A + 0.75 × 0.5 h hollow on C.
    let (status, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=user")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["group_by"], "user");
    assert!(r["note"].as_str().is_some_and(|n| n.contains("raw samples")), "{r}");
    let alice = report_row(&r, "alice");
    assert_eq!(alice["gpus"], 2);
    assert!(close(&alice["gpu_hours"], 0.875), "{alice}");
    assert!(close(&alice["hours_by_state"]["idle_held"], 0.5), "{alice}");
    assert!(close(&alice["hours_by_state"]["hollow"], 0.375), "{alice}");
    assert!(close(&alice["cost"], 0.875 * PRICE), "{alice}");
    assert!(close(&alice["wasted_cost"], 0.5 * PRICE + 0.375 * 0.9 * PRICE), "{alice}");
    let bob = report_row(&r, "bob");
    assert!(close(&bob["gpu_hours"], 0.5) && close(&bob["hours_by_state"]["compute_bound"], 0.5), "{bob}");
    assert!(close(&bob["cost"], 1.5) && close(&bob["wasted_cost"], 0.0), "{bob}");
    let carol = report_row(&r, "carol");
    assert!(close(&carol["gpu_hours"], 0.125) && close(&carol["wasted_cost"], 0.125 * 0.9 * PRICE), "{carol}");
    let nobody = report_row(&r, "(no process)");
    assert!(close(&nobody["hours_by_state"]["idle"], 1.0 / 6.0) && close(&nobody["cost"], 0.5), "{nobody}");
    let total: f64 = r["rows"].as_array().unwrap().iter().map(|x| x["gpu_hours"].as_f64().unwrap()).sum();
    assert!((total - (0.5 + 0.5 + 0.5 + 1.0 / 6.0)).abs() < 1e-6, "rows add up to the sampled GPU time: {total}");

    // Per namespace, pod, job, label.
    let (_, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=namespace")).await;
    assert!(close(&report_row(&r, "ml")["hours_by_state"]["idle_held"], 0.5), "{r}");
    assert!(close(&report_row(&r, "(unknown)")["gpu_hours"], 1.0), "bob's job and GPU C have no namespace: {r}");
    let (_, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=pod")).await;
    assert!(close(&report_row(&r, "ml/nb-alice")["wasted_cost"], 1.5), "{r}");
    let (_, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=job")).await;
    let job = report_row(&r, "48213");
    assert!(close(&job["gpu_hours"], 0.5) && close(&job["cost"], 1.5) && job["gpus"] == 1, "{job}");
    let (status, r) =
        get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=label:EXPERIMENT_ID")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["group_by"], "label:EXPERIMENT_ID");
    assert!(close(&report_row(&r, "exp-42")["hours_by_state"]["compute_bound"], 0.5), "{r}");

    // CSV.
    let resp = reqwest::Client::new()
        .get(server.url(&format!("/api/v1/reports/billing?from={from}&to={to}&group_by=user&format=csv")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    let csv = resp.text().await.unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(header[2], "user");
    let cost_col = header.iter().position(|h| *h == "cost").unwrap();
    let alice_line: Vec<&str> =
        csv.lines().find(|l| l.split(',').nth(2) == Some("alice")).unwrap().split(',').collect();
    assert_eq!(alice_line[cost_col], "2.625000", "{csv}");

    // The fleet summary's top owners, by wasted cost: alice, then carol (bob wasted nothing;
    // time with no process is nobody's).
    let (status, s) = get(&server, &format!("/api/v1/fleet/summary?from={from}&to={to}")).await;
    assert_eq!(status, 200, "{s}");
    let top = s["top_owners"].as_array().unwrap();
    let names: Vec<&str> = top.iter().map(|o| o["owner"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "carol"], "{s}");
    assert!(close(&top[0]["wasted_cost"], 1.5 + 0.375 * 0.9 * PRICE), "{}", top[0]);
    assert!(close(&top[0]["idle_held_hours"], 0.5) && close(&top[0]["hollow_hours"], 0.375), "{}", top[0]);
    assert_eq!(s["top_owners_from_ms"], from);

    // Bad groupings and periods: 4xx JSON.
    for (query, field) in [
        ("group_by=label:", "group_by"),
        ("group_by=label:%20", "group_by"),
        ("group_by=planet", "group_by"),
        (&*format!("group_by=user&from={}", now_ms() - 8 * 86_400_000), "from"),
        (&*format!("group_by=job&to={}", now_ms() - 8 * 86_400_000), "to"),
    ] {
        let (status, e) = get(&server, &format!("/api/v1/reports/billing?{query}")).await;
        assert_eq!(status, 422, "{query}: {e}");
        assert_eq!(e["error"]["field"], field, "{query}: {e}");
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Team/host/GPU/model reports still reach back beyond the raw retention.
    let (status, _) =
        get(&server, &format!("/api/v1/reports/billing?group_by=host&from={}", now_ms() - 8 * 86_400_000)).await;
    assert_eq!(status, 200);

    // The owner rule fired on GPU A only, with the owner in its labels.
    let rule_id = rule["id"].as_i64().unwrap();
    let alerts = alerts_of_rule(&server, rule_id, std::time::Duration::from_secs(20)).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["gpu"], "GPU-A", "{}", alerts[0]);
    assert_eq!(alerts[0]["labels"]["owner_namespace"], "ml", "{}", alerts[0]);
    assert_eq!(alerts[0]["labels"]["owner_user"], "alice");
    assert_eq!(alerts[0]["labels"]["owner_pod"], "ml/nb-alice");
    assert_eq!(alerts[0]["silenced"], true, "{}", alerts[0]);
    assert_eq!(alerts[0]["silenced_by"], silence["id"]);
}
