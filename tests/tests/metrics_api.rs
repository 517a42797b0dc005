//! Black box: `GET /metrics` in the Prometheus text format, checked by `promtool`.

use fleetlens_tests::http::{ingest_ok, now_ms, post_json};
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines_ending_at, promtool_check};
use serde_json::json;

fleetlens_tests::for_each_backend!(metrics_pass_promtool_and_show_each_gpu);

async fn metrics_pass_promtool_and_show_each_gpu(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();
    // The trace, moved to end now: the GPU is live and ends idle (util 0, no efficiency).
    let lines = fixture_lines_ending_at(now_ms() - 1000);
    ingest_ok(&server, json!({"host": "gpu-node-01", "samples": lines})).await;
    // The host belongs to a team: every per-GPU series carries it as `team`.
    let team: serde_json::Value = post_json(&server, "/api/v1/teams", json!({"name": "vision-research"})).await;
    let resp = client
        .put(server.url("/api/v1/hosts/gpu-node-01/team"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"team_id": team["id"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);

    assert_eq!(client.get(server.url("/metrics")).send().await.unwrap().status().as_u16(), 401);
    let resp = client.get(server.url("/metrics")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = resp.text().await.unwrap();
    let uuid = lines[0]["uuid"].as_str().unwrap();
    let series = |name: &str| text.lines().filter(|l| l.starts_with(name) && l.contains(uuid)).count();
    assert_eq!(series("fleetlens_gpu_util_pct{"), 1);
    assert_eq!(series("fleetlens_gpu_sm_active_pct{"), 1);
    assert_eq!(series("fleetlens_gpu_efficiency_pct{"), 0, "util is 0: efficiency is absent, not 0");
    let one_hot: Vec<&str> =
        text.lines().filter(|l| l.starts_with("fleetlens_gpu_state{") && l.ends_with(" 1.0")).collect();
    assert_eq!(one_hot.len(), 1, "{one_hot:?}");
    // The GPU reported a moment ago: its newest minute decides, and it is not offline.
    assert!(!one_hot[0].contains("state=\"offline\""), "{}", one_hot[0]);
    // Labels uuid, host, team, model on every per-GPU series.
    let labels = format!("uuid=\"{uuid}\",host=\"gpu-node-01\",team=\"vision-research\",model=\"NVIDIA H200\"");
    for name in ["fleetlens_gpu_util_pct{", "fleetlens_gpu_power_watts{", "fleetlens_gpu_state{"] {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(name) && l.contains(uuid)).collect();
        assert!(!lines.is_empty() && lines.iter().all(|l| l.contains(&labels)), "{name}: {lines:?}");
    }
    assert!(text.contains("fleetlens_fleet_funnel_ratio{level=\"allocation\"}"));
    assert!(text.contains("fleetlens_ingest_samples_inserted_total 84"));
    assert!(text.contains("fleetlens_ingest_samples_merged_total 0"), "whole samples: nothing to merge");

    promtool_check(&text);
}
