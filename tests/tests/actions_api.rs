//! Black box: job report cards (issue 24, docs/ACTIONS.md) through the real server and agent,
//! on SQLite and PostgreSQL. The agent replays a trace whose processes carry owners (a Slurm
//! job, a lone process, a notebook pod); the server finds the runs, ends them when their
//! processes leave the GPUs (or a client says so), computes each card once and sends the
//! wasteful ones to a real HTTP receiver (webhook) and a Slack-shaped receiver, once each.

use std::time::{Duration, Instant};

use fleetlens_tests::http::{Recorder, get, now_ms, post, post_bytes, set_price};
use fleetlens_tests::{Backend, TestDatabase, TestServer, agent_command, minutes_of, validate_slack_messages};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(report_cards_from_a_replayed_trace);

const H100: &str = "NVIDIA H100 80GB HBM3";
const PRICE: f64 = 3.0;
const MINUTE: i64 = 60_000;

/// Trace lines: `minutes` of 1-Hz samples of one GPU from `start`.
#[allow(clippy::too_many_arguments)]
fn trace(
    host: &str,
    uuid: &str,
    start: i64,
    minutes: i64,
    util: f64,
    smact: f64,
    tensor: f64,
    procs: &Value,
) -> Vec<String> {
    minutes_of(uuid, H100, start, minutes, util, smact, tensor, procs)
        .into_iter()
        .map(|mut sample| {
            sample["host"] = json!(host);
            sample["dram_active_pct"] = json!(12.0);
            sample.to_string()
        })
        .collect()
}

fn close(v: &Value, want: f64, tol: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() <= tol)
}

/// Polls `GET /job-runs/{key}` until the run has a card.
async fn ended(server: &TestServer, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, run) = get(server, &format!("/api/v1/job-runs/{}", key.replace('/', "%2F"))).await;
        if status == 200 && run["status"] == "ended" {
            return run;
        }
        assert!(Instant::now() < deadline, "run {key} did not end: {status} {run}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn report_cards_from_a_replayed_trace(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--job-end-after", "30s", "--job-scan-interval", "200ms"]);
    let receiver = Recorder::start().await;
    set_price(&server, H100, PRICE).await;
    let channel = |name: &str, kind: &str, path: &str| json!({"name": name, "kind": kind, "url": format!("{}{path}", receiver.url)});
    let (status, hook) = post(&server, "/api/v1/notification-channels", channel("cards", "webhook", "/hook")).await;
    assert_eq!(status, 201, "{hook}");
    let (status, slack) = post(&server, "/api/v1/notification-channels", channel("bob", "slack", "/slack")).await;
    assert_eq!(status, 201, "{slack}");
    // Anyone's cards to the webhook; bob's to his Slack channel. Cards below 0.1 GPU-hours or
    // 20 % wasted are not sent.
    for (owner, ch) in [(Value::Null, &hook), (json!("bob"), &slack)] {
        let (status, r) = post(
            &server,
            "/api/v1/report-routes",
            json!({"owner": owner, "channel_id": ch["id"], "min_gpu_hours": 0.1, "min_waste_pct": 20.0}),
        )
        .await;
        assert_eq!(status, 201, "{r}");
    }
    let (status, e) = post(&server, "/api/v1/report-routes", json!({"channel_id": 999_999})).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("channel_id")), "{e}");

    // Three GPUs on one host, 13 minutes, 2 h ago:
    // A: Slurm job 4242 of dave, hollow (util 61 %, SMACT 9 %) for 10 min, then gone.
    // B: alice's lone process, compute-bound for 10 min (healthy), then gone.
    // C: bob's notebook pod holds 30 GiB with no kernels all along (still there at the end).
    let start = (now_ms() / MINUTE - 120) * MINUTE;
    let slurm = json!([{"pid": 31337, "used_bytes": 38i64 << 30, "sm_pct": 9.0,
        "owner": {"user": "dave", "job_id": "4242", "job_user": "dave", "job_partition": "gpu"}}]);
    let alice = json!([{"pid": 777, "used_bytes": 70i64 << 30, "sm_pct": 90.0, "owner": {"user": "alice"}}]);
    let bob = json!([{"pid": 4040, "used_bytes": 30i64 << 30, "sm_pct": 0.0,
        "owner": {"user": "bob", "pod_uid": "0b6f2a44", "pod_name": "nb-bob", "namespace": "ml"}}]);
    let none = json!([]);
    let mut lines = Vec::new();
    lines.extend(trace("node-1", "GPU-A", start, 10, 61.0, 9.0, 0.0, &slurm));
    lines.extend(trace("node-1", "GPU-A", start + 10 * MINUTE, 3, 0.0, 0.0, 0.0, &none));
    lines.extend(trace("node-1", "GPU-B", start, 10, 98.0, 90.0, 60.0, &alice));
    lines.extend(trace("node-1", "GPU-B", start + 10 * MINUTE, 3, 0.0, 0.0, 0.0, &none));
    lines.extend(trace("node-1", "GPU-C", start, 13, 0.0, 0.0, 0.0, &bob));
    // The agent sends a trace in time order.
    lines.sort_by_key(|l| serde_json::from_str::<Value>(l).unwrap()["ts_ms"].as_i64().unwrap());
    let dir = tempfile::tempdir().unwrap();
    // Two replays: the jobs' 10 minutes, then (after the Slurm job reported its throughput,
    // which needs its GPU registered) the 3 minutes after.
    let ts = |l: &String| serde_json::from_str::<Value>(l).unwrap()["ts_ms"].as_i64().unwrap();
    let (first, second): (Vec<String>, Vec<String>) = lines.into_iter().partition(|l| ts(l) < start + 10 * MINUTE);
    let replay = |name: &str, lines: Vec<String>| {
        let path = dir.path().join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let mut agent = agent_command(&server, &format!("replay:{}", path.display()), &dir.path().join("spool"))
            .arg("--once")
            .spawn()
            .unwrap();
        let status = tokio::task::block_in_place(|| agent.wait()).unwrap();
        assert!(status.success(), "agent: {status}");
    };
    replay("first.jsonl", first);
    // The Slurm job reported its throughput: 120 TFLOP/s of bf16 over its 10 minutes.
    let (status, mfu_job) = post(
        &server,
        "/api/v1/jobs",
        json!({"name": "train-4242", "gpus": ["GPU-A"], "from": start, "to": start + 10 * MINUTE,
               "precision": "bf16", "achieved_flops_per_s": 1.2e14}),
    )
    .await;
    assert_eq!(status, 201, "{mfu_job}");
    // Still running: their GPUs have not reported without them yet.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, running) = get(&server, "/api/v1/job-runs?status=running").await;
    assert_eq!((status, running.as_array().map(Vec::len)), (200, Some(3)), "{running}");
    replay("second.jsonl", second);

    // A: the Slurm job ended when its processes left the GPU.
    let run = ended(&server, "slurm:4242").await;
    assert_eq!(run["end_reason"], "left_gpus", "{run}");
    assert_eq!(run["owner"]["user"], "dave");
    assert_eq!(run["gpus"], json!(["GPU-A"]));
    assert_eq!(run["notified_channel_id"], hook["id"], "{run}");
    let (status, card) = get(&server, "/api/v1/jobs/slurm:4242/report").await;
    assert_eq!(status, 200, "{card}");
    assert_eq!(card, run["card"]);
    assert_eq!(card["gpu_count"], 1);
    assert!(close(&card["gpu_hours"], 10.0 / 60.0, 2.0 / 3600.0), "{card}");
    assert!(close(&card["hours_by_state"]["hollow"], 10.0 / 60.0, 2.0 / 3600.0), "{card}");
    assert!(close(&card["sm_active_pct"], 9.0, 1e-6) && close(&card["gpu_util_pct"], 61.0, 1e-6), "{card}");
    assert!(close(&card["tensor_active_pct"], 0.0, 1e-9) && close(&card["dram_active_pct"], 12.0, 1e-6), "{card}");
    assert!(close(&card["efficiency"], 9.0 / 61.0 * 100.0, 1e-6), "{card}");
    assert_eq!(card["peak_mem_bytes"], json!(38i64 << 30));
    assert!(close(&card["cost"], PRICE * 10.0 / 60.0, 0.002), "{card}");
    assert!(close(&card["wasted_cost"], PRICE * 10.0 / 60.0 * 0.91, 0.002), "{card}");
    assert!(close(&card["waste_pct"], 91.0, 1e-6), "{card}");
    assert!(card["energy_kwh"].as_f64().unwrap() > 0.0);
    assert!(close(&card["mfu"], mfu_job["mfu"].as_f64().unwrap(), 1e-9), "{card} vs {mfu_job}");
    assert_eq!(card["advice"][0]["code"], "hollow", "{card}");
    let hint = card["advice"][0]["text"].as_str().unwrap();
    assert!(hint.starts_with("SM activity 9 % with util 61 %"), "{hint}");
    assert_eq!(card["shared_gpu"], false);

    // B: alice's healthy job has its card too, and no message.
    let run_b = ended(&server, "pid:node-1/777").await;
    assert_eq!(run_b["card"]["waste_pct"], 0.0, "{run_b}");
    assert_eq!(run_b["card"]["advice"], json!([]), "{run_b}");
    assert_eq!(run_b["notified_channel_id"], Value::Null);

    // C: still running (its processes never left); its report is not ready: 409.
    let (status, run_c) = get(&server, "/api/v1/job-runs/pod:ml%2Fnb-bob").await;
    assert_eq!((status, run_c["status"].as_str()), (200, Some("running")), "{run_c}");
    let (status, e) = get(&server, "/api/v1/jobs/pod:ml%2Fnb-bob/report").await;
    assert_eq!(status, 409, "{e}");
    // Bob's notebook is shut down: a client ends the run.
    let (status, e) = post(&server, "/api/v1/jobs/999999/end", json!({})).await;
    assert_eq!(status, 404, "{e}");
    let (status, accepted) = post(&server, "/api/v1/jobs/pod:ml%2Fnb-bob/end", json!({"at": "garbage"})).await;
    assert_eq!((status, accepted["error"]["field"].as_str()), (422, Some("at")), "{accepted}");
    let plain =
        post_bytes(&server, "/api/v1/jobs/pod:ml%2Fnb-bob/end", &[("content-type", "text/plain")], r#"{"at": 0}"#)
            .await;
    assert_eq!(plain.status().as_u16(), 415, "a body that is there says it is JSON");
    let (status, accepted) = post(&server, "/api/v1/jobs/pod:ml%2Fnb-bob/end", json!({})).await;
    assert_eq!(status, 202, "{accepted}");
    let run_c = ended(&server, "pod:ml/nb-bob").await;
    assert_eq!(run_c["end_reason"], "requested");
    assert!(close(&run_c["card"]["hours_by_state"]["idle_held"], 13.0 / 60.0, 2.0 / 3600.0), "{run_c}");
    assert_eq!(run_c["card"]["advice"][0]["code"], "idle_held", "{run_c}");
    assert_eq!(run_c["notified_channel_id"], slack["id"], "bob's own route wins: {run_c}");
    let (status, _) = post(&server, "/api/v1/jobs/pod:ml%2Fnb-bob/end", json!({})).await;
    assert_eq!(status, 409, "an ended run cannot end again");

    // Listing: by owner and status.
    let (status, runs) = get(&server, "/api/v1/job-runs?status=ended&owner=dave").await;
    assert_eq!(status, 200);
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    let (status, runs) = get(&server, &format!("/api/v1/job-runs?from={start}")).await;
    assert_eq!((status, runs.as_array().unwrap().len()), (200, 3), "{runs}");
    let (status, e) = get(&server, "/api/v1/job-runs?status=paused").await;
    assert_eq!(status, 422, "{e}");

    // Messages: one per wasteful job, each on its owner's channel, never repeated.
    let deadline = Instant::now() + Duration::from_secs(20);
    while receiver.at("/hook").is_empty() || receiver.at("/slack").is_empty() {
        assert!(Instant::now() < deadline, "cards not delivered: {:?}", receiver.got.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // scans keep running: nothing more comes
    let hooks = receiver.at("/hook");
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["type"], "fleetlens.job_report");
    assert_eq!(hooks[0]["run"]["key"], "slurm:4242");
    assert_eq!(hooks[0]["run"]["owner"]["user"], "dave");
    assert_eq!(hooks[0]["card"], card);
    let slacks = receiver.at("/slack");
    assert_eq!(slacks.len(), 1, "{slacks:?}");
    assert!(slacks[0]["text"].as_str().unwrap().contains("pod:ml/nb-bob"), "{}", slacks[0]);
    validate_slack_messages(&slacks);

    // Plans from these jobs: the Slurm job (p95 SM 9 %, 38 GiB) and bob's notebook (0 %,
    // 30 GiB) ran at the same time on H100s and fit one (68 GiB ≤ 80 GB less 10 %); alice's is
    // too busy. The fleet summary shows the same saving.
    let (from, to) = (start - 3_600_000, now_ms());
    let (status, plans) = get(&server, &format!("/api/v1/plans?from={from}&to={to}")).await;
    assert_eq!(status, 200, "{plans}");
    assert_eq!(plans["collocation"].as_array().unwrap().len(), 1, "{plans:#}");
    let group = &plans["collocation"][0];
    let mut jobs: Vec<&str> = group["jobs"].as_array().unwrap().iter().map(|j| j["job"].as_str().unwrap()).collect();
    jobs.sort();
    assert_eq!(jobs, ["pod:ml/nb-bob", "slurm:4242"], "{group:#}");
    assert_eq!(group["sum_peak_mem_bytes"], json!(68i64 << 30));
    assert!(close(&group["gpu_hours_saved"], 10.0 / 60.0, 2.0 / 3600.0), "{group:#}");
    let month = 10.0 / 60.0 * PRICE * 720.0 * 3_600_000.0 / (to - from) as f64;
    assert!(close(&group["saving_per_month"], month, month * 0.01), "{group:#}");
    assert_eq!(plans["right_size"], json!([]), "{plans:#}");
    let (status, summary) = get(&server, &format!("/api/v1/fleet/summary?from={from}&to={to}")).await;
    assert_eq!(status, 200, "{summary}");
    assert!(close(&summary["plan_saving_per_month"], plans["saving_per_month"].as_f64().unwrap(), 1e-9), "{summary}");
}
