//! Black box (issue 28): a GPU the kubelet allocated to a pod whose processes nobody can see is
//! that pod's idle-held GPU — in billing, the fleet summary's top owners, alerts and the API —
//! not "(no process)". The real agent replays a trace of two idle GPUs with no visible process
//! and asks a stand-in kubelet (a real gRPC server serving PodResources v1 on a unix socket)
//! who holds them: GPU A is pod ml/nb-alice's, GPU B nobody's. On SQLite and PostgreSQL.

use std::time::Duration;

use fleetlens_tests::http::{alerts_of_rule, close, create_rule, get, now_ms, report_row, set_price};
use fleetlens_tests::kubelet::StandInKubelet;
use fleetlens_tests::{Backend, TestDatabase, TestServer, agent_command, run_agent};
use serde_json::json;

fleetlens_tests::for_each_backend!(an_allocated_idle_gpu_is_its_pods_waste);

const H100: &str = "NVIDIA H100 80GB HBM3";
const PRICE: f64 = 4.0;
const MINUTE: i64 = 60_000;
const GPU_A: &str = "GPU-5a1d0e6f-0000-4000-8000-00000000000a";
const GPU_B: &str = "GPU-5a1d0e6f-0000-4000-8000-00000000000b";

async fn an_allocated_idle_gpu_is_its_pods_waste(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--raw-retention", "7d"]);
    set_price(&server, H100, PRICE).await;
    let rule =
        create_rule(&server, "notebook holds an idle GPU", "state == idle_held && owner_pod == \"ml/nb-alice\"").await;

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let kubelet = StandInKubelet::serve(&socket);
    kubelet.allocate("ml", "nb-alice", "notebook", "nvidia.com/gpu", &[GPU_A]);
    kubelet.allocate("ml", "sidecar-only", "proxy", "example.com/nic", &["eth1"]);

    let start = (now_ms() / MINUTE - 40) * MINUTE;
    let trace = dir.path().join("trace.jsonl");
    fleetlens_tests::write_idle_trace(&trace, start, &[GPU_A, GPU_B]);
    let mut agent = agent_command(&server, &format!("replay:{}", trace.display()), &dir.path().join("spool"));
    agent.arg("--once").arg("--kubelet-socket").arg(&socket);
    run_agent(agent).await;
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
        let pod = report_row(&r, owner);
        assert_eq!(pod["gpus"], 1, "{pod}");
        assert!(close(&pod["hours_by_state"]["idle_held"], 0.5), "{pod}");
        assert!(close(&pod["allocated_hours"], 0.5), "{pod}");
        assert!(close(&pod["cost"], 0.5 * PRICE) && close(&pod["wasted_cost"], 0.5 * PRICE), "{pod}");
        let nobody = report_row(&r, "(no process)");
        assert!(close(&nobody["hours_by_state"]["idle"], 0.5) && close(&nobody["allocated_hours"], 0.0), "{nobody}");
        assert!(r["rows"].as_array().unwrap().iter().all(|x| x["group"] != "(unknown)"), "{r}");
    }
    // Per user: a pod seen only through the kubelet has no Unix user.
    let (_, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by=user")).await;
    assert!(close(&report_row(&r, "(unknown)")["hours_by_state"]["idle_held"], 0.5), "{r}");

    // The fleet summary's "who is wasting": the pod.
    let (status, s) = get(&server, &format!("/api/v1/fleet/summary?from={from}&to={to}")).await;
    assert_eq!(status, 200, "{s}");
    let top = s["top_owners"].as_array().unwrap();
    assert_eq!(top.len(), 1, "{s}");
    assert_eq!(top[0]["owner"], "ml/nb-alice");
    assert!(close(&top[0]["idle_held_hours"], 0.5) && close(&top[0]["wasted_cost"], 0.5 * PRICE), "{}", top[0]);

    // The owner rule fired on GPU A, with the pod in its labels.
    let rule_id = rule["id"].as_i64().unwrap();
    let alerts = alerts_of_rule(&server, rule_id, Duration::from_secs(20)).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["gpu"], GPU_A, "{}", alerts[0]);
    assert_eq!(alerts[0]["labels"]["owner_pod"], "ml/nb-alice", "{}", alerts[0]);
    assert_eq!(alerts[0]["labels"]["owner_namespace"], "ml", "{}", alerts[0]);
    assert!(alerts[0]["labels"].get("owner_user").is_none(), "{}", alerts[0]);
    drop(kubelet);
}
