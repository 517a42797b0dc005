//! Black box (issue 28, parts 2 and 3): a GPU the kubelet allocated to a JobSet's pod, with no
//! process visible, is that pod's owner's, its namespace team's and its training job's
//! idle-held GPU — in billing per team, user and job, in an alert's owner labels, in the job
//! runs and the job's report card. The real agent replays a trace of two idle GPUs, asks a
//! stand-in kubelet (a real gRPC server on a unix socket) who holds them, and reads the pods'
//! metadata from the recorded Kubernetes API server (`fleetlens_tests::kube_api`: a real HTTP
//! server answering list and watch). On SQLite and PostgreSQL.

use std::path::Path;
use std::time::{Duration, Instant};

use fleetlens_tests::http::{alerts_of_rule, close, create_rule, get, now_ms, post, report_row, set_price};
use fleetlens_tests::kube_api::RecordedApiServer;
use fleetlens_tests::kubelet::StandInKubelet;
use fleetlens_tests::{Backend, TestDatabase, TestServer, agent_command, run_agent};
use serde_json::json;

fleetlens_tests::for_each_backend!(a_jobsets_idle_gpu_is_its_teams_users_and_jobs_waste);

const H100: &str = "NVIDIA H100 80GB HBM3";
const PRICE: f64 = 4.0;
const MINUTE: i64 = 60_000;
const GPU_A: &str = "GPU-5a1d0e6f-0000-4000-8000-0000000000a1";
const GPU_B: &str = "GPU-5a1d0e6f-0000-4000-8000-0000000000b1";
const POD: &str = "llm-pretrain-workers-0-0-x8k2p";

async fn a_jobsets_idle_gpu_is_its_teams_users_and_jobs_waste(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(
        &db.url,
        &["--raw-retention", "7d", "--job-end-after", "30s", "--job-scan-interval", "200ms"],
    );
    set_price(&server, H100, PRICE).await;
    let rule =
        create_rule(&server, "research holds an idle GPU", "state == idle_held && owner_team == \"research\"").await;

    let api = RecordedApiServer::start().await;
    api.apply_fixture(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kube-api/cluster.json"));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let kubelet = StandInKubelet::serve(&socket);
    kubelet.allocate("ml", POD, "trainer", "nvidia.com/gpu", &[GPU_A]);

    let start = (now_ms() / MINUTE - 40) * MINUTE;
    let trace = dir.path().join("trace.jsonl");
    fleetlens_tests::write_idle_trace(&trace, start, &[GPU_A, GPU_B]);
    let mut agent = agent_command(&server, &format!("replay:{}", trace.display()), &dir.path().join("spool"));
    agent.arg("--once").arg("--kubelet-socket").arg(&socket);
    agent.args(["--kube-metadata", &api.url, "--kube-node", "k8s-node-1"]);
    run_agent(agent).await;
    let (from, to) = (start, start + 30 * MINUTE);

    // The stored samples carry the pod's metadata with its allocation.
    let (status, gpus) = get(&server, "/api/v1/gpus").await;
    assert_eq!(status, 200, "{gpus}");
    let a = gpus["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == GPU_A).unwrap().clone();
    assert_eq!(
        a["latest"]["allocations"],
        json!([{"namespace": "ml", "pod": POD, "container": "trainer", "resource": "nvidia.com/gpu", "device_id": GPU_A,
                "team": "research", "pod_user": "bob", "job_kind": "JobSet", "job_name": "llm-pretrain"}]),
        "{a}"
    );

    // Billing per namespace team, user, holder and job: 0.5 h idle-held, all wasted; GPU B's
    // idle time is nobody's.
    for (key, owner) in [("namespace_team", "research"), ("user", "bob"), ("holder", "bob"), ("job", "ml/llm-pretrain")]
    {
        let (status, r) = get(&server, &format!("/api/v1/reports/billing?from={from}&to={to}&group_by={key}")).await;
        assert_eq!(status, 200, "{r}");
        let o = report_row(&r, owner);
        assert_eq!(o["gpus"], 1, "{key}: {o}");
        assert!(close(&o["hours_by_state"]["idle_held"], 0.5), "{key}: {o}");
        assert!(close(&o["cost"], 0.5 * PRICE) && close(&o["wasted_cost"], 0.5 * PRICE), "{key}: {o}");
        assert!(close(&report_row(&r, "(no process)")["hours_by_state"]["idle"], 0.5), "{key}: {r}");
        assert!(r["rows"].as_array().unwrap().iter().all(|x| x["group"] != "(unknown)"), "{key}: {r}");
    }
    // The fleet summary's "who is wasting" names the pod's owner.
    let (_, s) = get(&server, &format!("/api/v1/fleet/summary?from={from}&to={to}")).await;
    assert_eq!(s["top_owners"][0]["owner"], "bob", "{s}");

    // The team rule fired on GPU A, with the owner labels.
    let rule_id = rule["id"].as_i64().unwrap();
    let alerts = alerts_of_rule(&server, rule_id, Duration::from_secs(20)).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let labels = &alerts[0]["labels"];
    assert_eq!(alerts[0]["gpu"], GPU_A, "{}", alerts[0]);
    assert_eq!(labels["owner_team"], "research", "{labels}");
    assert_eq!(labels["owner_user"], "bob", "{labels}");
    assert_eq!(labels["owner_job"], "ml/llm-pretrain", "{labels}");
    assert_eq!(labels["owner_pod"], format!("ml/{POD}"), "{labels}");

    // The training job is a run of its own key, with the job's kind; ended, its card shows the
    // idle-held half hour.
    let key = "jobset:ml%2Fllm-pretrain";
    let deadline = Instant::now() + Duration::from_secs(20);
    let run = loop {
        let (status, run) = get(&server, &format!("/api/v1/job-runs/{key}")).await;
        if status == 200 || Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(run["key"], "jobset:ml/llm-pretrain", "{run}");
    assert_eq!(run["owner"]["job_kind"], "JobSet", "{run}");
    assert_eq!(run["owner"]["user"], "bob", "{run}");
    assert_eq!(run["owner"]["team"], "research", "{run}");
    let (status, accepted) = post(&server, &format!("/api/v1/jobs/{key}/end"), json!({"at": to})).await;
    assert!(status == 200 || status == 202, "{status} {accepted}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let ended = loop {
        let (status, run) = get(&server, &format!("/api/v1/job-runs/{key}")).await;
        if status == 200 && run["status"] == "ended" {
            break run;
        }
        assert!(Instant::now() < deadline, "the run did not end: {status} {run}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let card = &ended["card"];
    assert_eq!(card["gpu_count"], 1, "{card}");
    assert!((card["hours_by_state"]["idle_held"].as_f64().unwrap() - 0.5).abs() < 0.02, "{card}");
    let advice: Vec<&str> = card["advice"].as_array().unwrap().iter().map(|a| a["code"].as_str().unwrap()).collect();
    assert!(advice.contains(&"idle_held"), "{card}");
    drop(kubelet);
}
