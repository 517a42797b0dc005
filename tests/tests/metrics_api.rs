//! Black box: `GET /metrics` in the Prometheus text format, checked by `promtool`.

use std::io::Write;
use std::process::{Command, Stdio};

use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, fixture_lines};
use serde_json::json;

fleetlens_tests::for_each_backend!(metrics_pass_promtool_and_show_each_gpu);

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

async fn metrics_pass_promtool_and_show_each_gpu(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::new();
    // The trace, moved to end now: the GPU is live and ends idle (util 0, no efficiency).
    let mut lines = fixture_lines();
    let shift = now_ms() - 1000 - lines.last().unwrap()["ts_ms"].as_i64().unwrap();
    for l in &mut lines {
        l["ts_ms"] = json!(l["ts_ms"].as_i64().unwrap() + shift);
    }
    let resp = client
        .post(server.url("/api/v1/ingest"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"host": "gpu-node-01", "samples": lines}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // The host belongs to a team: every per-GPU series carries it as `team`.
    let team: serde_json::Value = client
        .post(server.url("/api/v1/teams"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "vision-research"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
