//! Black box (issue 28): a GPU the kubelet allocated to a pod whose processes nobody can see is
//! that pod's idle-held GPU — in billing, the fleet summary's top owners, alerts and the API —
//! not "(no process)". The real agent replays a trace of two idle GPUs with no visible process
//! and asks a stand-in kubelet (a real gRPC server serving PodResources v1 on a unix socket)
//! who holds them: GPU A is pod ml/nb-alice's, GPU B nobody's. On SQLite and PostgreSQL.

use std::io::Write;
use std::time::{Duration, Instant};

use fleetlens_tests::kubelet::StandInKubelet;
use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer, agent_command};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(an_allocated_idle_gpu_is_its_pods_waste);

const H100: &str = "NVIDIA H100 80GB HBM3";
const PRICE: f64 = 4.0;
const MINUTE: i64 = 60_000;
const GPU_A: &str = "GPU-5a1d0e6f-0000-4000-8000-00000000000a";
const GPU_B: &str = "GPU-5a1d0e6f-0000-4000-8000-00000000000b";

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

async fn get(server: &TestServer, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new().get(server.url(path)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

async fn send(server: &TestServer, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .request(method, server.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6)
}

fn row<'a>(report: &'a Value, group: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == group)
        .unwrap_or_else(|| panic!("no row {group} in {report}"))
}

/// 30 minutes at 1 Hz of two idle H100s of one node, no process visible on either.
fn write_trace(path: &std::path::Path, start: i64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..30 * 60 {
        for (index, uuid) in [GPU_A, GPU_B].iter().enumerate() {
            let line = json!({
                "ts_ms": start + i * 1000, "host": "k8s-node-1", "uuid": uuid, "gpu_index": index, "name": H100,
                "gpu_util_pct": 0.0, "sm_active_pct": 0.0, "sm_occupancy_pct": 0.0, "tensor_active_pct": 0.0,
                "dram_active_pct": 0.0, "mem_used_bytes": 0, "mem_total_bytes": 85899345920i64,
                "power_w": 70.0, "power_limit_w": 700.0, "processes": [],
            });
            writeln!(f, "{line}").unwrap();
        }
    }
    f.flush().unwrap();
}

async fn an_allocated_idle_gpu_is_its_pods_waste(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--raw-retention", "7d"]);
    let (status, _) = send(
        &server,
        reqwest::Method::PUT,
        "/api/v1/prices",
        json!({"currency": "USD", "source": "test", "per_gpu_hour": {H100: PRICE}}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, rule) = send(
        &server,
        reqwest::Method::POST,
        "/api/v1/alert-rules",
        json!({"name": "notebook holds an idle GPU", "condition": "state == idle_held && owner_pod == \"ml/nb-alice\"",
               "for_s": 0, "severity": "warning"}),
    )
    .await;
    assert_eq!(status, 201, "{rule}");

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let kubelet = StandInKubelet::serve(&socket);
    kubelet.allocate("ml", "nb-alice", "notebook", "nvidia.com/gpu", &[GPU_A]);
    kubelet.allocate("ml", "sidecar-only", "proxy", "example.com/nic", &["eth1"]);

    let start = (now_ms() / MINUTE - 40) * MINUTE;
    let trace = dir.path().join("trace.jsonl");
    write_trace(&trace, start);
    let mut agent = agent_command(&server, &format!("replay:{}", trace.display()), &dir.path().join("spool"));
    agent.arg("--once").arg("--kubelet-socket").arg(&socket);
    let status = tokio::task::spawn_blocking(move || agent.status().unwrap()).await.unwrap();
    assert!(status.success(), "agent failed: {status}");
    let (from, to) = (start, start + 30 * MINUTE);

    // The API: the stored samples carry the allocation; GPU A is idle-held, B idle.
    let (status, gpus) = get(&server, "/api/v1/gpus").await;
    assert_eq!(status, 200, "{gpus}");
    let gpu = |uuid: &str| gpus["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == uuid).unwrap().clone();
    let a = gpu(GPU_A);
    assert_eq!(
        a["latest"]["allocations"],
        json!([{"namespace": "ml", "pod": "nb-alice", "container": "notebook",
        "resource": "nvidia.com/gpu", "device_id": GPU_A}]),
        "{a}"
    );
    assert_eq!(a["latest"]["processes"], json!([]));
    let b = gpu(GPU_B);
    assert!(b["latest"].get("allocations").is_none(), "{b}");
    for (uuid, want) in [(GPU_A, "idle_held"), (GPU_B, "idle")] {
        let (status, windows) =
            get(&server, &format!("/api/v1/gpus/{uuid}/states?from={start}&to={}", start + 30 * MINUTE)).await;
        assert_eq!(status, 200, "{windows}");
        let states: Vec<&str> = windows.as_array().unwrap().iter().map(|w| w["state"].as_str().unwrap()).collect();
        assert!(!states.is_empty() && states.iter().all(|s| *s == want), "{uuid}: {states:?}");
    }

    // Billing per pod and per namespace: the pod pays for 0.5 h of idle-held GPU, all wasted;
    // GPU B's idle time is nobody's.
    for (key, owner) in [("pod", "ml/nb-alice"), ("namespace", "ml"), ("holder", "ml/nb-alice")] {
        let (status, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by={key}")).await;
        assert_eq!(status, 200, "{r}");
        let pod = row(&r, owner);
        assert_eq!(pod["gpus"], 1, "{pod}");
        assert!(close(&pod["hours_by_state"]["idle_held"], 0.5), "{pod}");
        assert!(close(&pod["allocated_hours"], 0.5), "{pod}");
        assert!(close(&pod["cost"], 0.5 * PRICE) && close(&pod["wasted_cost"], 0.5 * PRICE), "{pod}");
        let nobody = row(&r, "(no process)");
        assert!(close(&nobody["hours_by_state"]["idle"], 0.5) && close(&nobody["allocated_hours"], 0.0), "{nobody}");
        assert!(r["rows"].as_array().unwrap().iter().all(|x| x["group"] != "(unknown)"), "{r}");
    }
    // Per user: a pod seen only through the kubelet has no Unix user.
    let (_, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=user")).await;
    assert!(close(&row(&r, "(unknown)")["hours_by_state"]["idle_held"], 0.5), "{r}");

    // The fleet summary's "who is wasting": the pod.
    let (status, s) = get(&server, &format!("/api/v1/fleet/summary?from={from}&to={to}")).await;
    assert_eq!(status, 200, "{s}");
    let top = s["top_owners"].as_array().unwrap();
    assert_eq!(top.len(), 1, "{s}");
    assert_eq!(top[0]["owner"], "ml/nb-alice");
    assert!(close(&top[0]["idle_held_hours"], 0.5) && close(&top[0]["wasted_cost"], 0.5 * PRICE), "{}", top[0]);

    // The owner rule fired on GPU A, with the pod in its labels.
    let rule_id = rule["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let alerts = loop {
        let (_, a) = get(&server, &format!("/api/v1/alerts?status=all&rule_id={rule_id}")).await;
        let list = a["alerts"].as_array().cloned().unwrap_or_default();
        if !list.is_empty() || Instant::now() > deadline {
            break list;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["gpu"], GPU_A, "{}", alerts[0]);
    assert_eq!(alerts[0]["labels"]["owner_pod"], "ml/nb-alice", "{}", alerts[0]);
    assert_eq!(alerts[0]["labels"]["owner_namespace"], "ml", "{}", alerts[0]);
    assert!(alerts[0]["labels"].get("owner_user").is_none(), "{}", alerts[0]);
    drop(kubelet);
}
