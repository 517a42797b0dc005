//! Black box: idle-reclaim policies (issue 24, docs/ACTIONS.md) through the real server and
//! two real agents, on SQLite and PostgreSQL. The test starts real processes that hold real
//! host memory (stand-ins for GPU memory holders); the agents replay live traces that list
//! them on GPUs, idle-held. An `agent_kill` policy has the opted-in agent SIGTERM the process
//! whose owner matches, refuses the one listed under another user, and leaves the host whose
//! agent did not opt in alone; a `webhook` policy sends its notice and action to a real HTTP
//! receiver, and a snoozed reclaim waits. Every step is logged with the money held.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fleetlens_tests::http::{Recorder, call, set_price};
use fleetlens_tests::{Backend, TestDatabase, TestServer, agent_command};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(reclaim_policies_act_on_real_processes);

const H100: &str = "NVIDIA H100 80GB HBM3";

/// A process that holds 64 MiB of real memory until it is killed.
fn holder() -> Child {
    Command::new("python3")
        .args(["-c", "import time\nx = b'x' * (64 << 20)\ntime.sleep(600)"])
        .spawn()
        .expect("python3")
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A 1-Hz idle-held trace of one GPU listing `pid` as `user`'s, `seconds` long.
fn trace(host: &str, uuid: &str, pid: u32, user: &str, seconds: i64) -> Vec<String> {
    (0..seconds)
        .map(|i| {
            json!({"host": host, "ts_ms": 1_000_000 + i * 1000, "uuid": uuid, "gpu_index": 0, "name": H100,
                   "gpu_util_pct": 0.0, "sm_active_pct": 0.0, "sm_occupancy_pct": 0.0, "tensor_active_pct": 0.0,
                   "dram_active_pct": 0.0, "mem_used_bytes": 20i64 << 30, "mem_total_bytes": 85899345920i64,
                   "power_w": 70.0, "power_limit_w": 700.0,
                   "processes": [{"pid": pid, "used_bytes": 20i64 << 30, "sm_pct": 0.0,
                                  "owner": {"user": user, "namespace": "ml", "pod_name": format!("nb-{pid}"),
                                            "pod_uid": format!("uid-{pid}")}}]})
            .to_string()
        })
        .collect()
}

fn sorted(mut lines: Vec<String>) -> String {
    lines.sort_by_key(|l| serde_json::from_str::<Value>(l).unwrap()["ts_ms"].as_i64().unwrap());
    lines.join("\n") + "\n"
}

/// The reclaims, polled until `done` holds.
async fn wait_for(server: &TestServer, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, list) = call(server, reqwest::Method::GET, "/api/v1/reclaims", None).await;
        assert_eq!(status, 200, "{list}");
        let list = list.as_array().unwrap().clone();
        if done(&list) {
            return list;
        }
        assert!(Instant::now() < deadline, "{what}: {list:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn steps(r: &Value) -> Vec<String> {
    r["log"].as_array().unwrap().iter().map(|l| l["step"].as_str().unwrap().to_string()).collect()
}

/// The first reclaim of a GPU by a policy (the list is newest first).
fn find<'a>(list: &'a [Value], policy: i64, gpu: &str) -> Option<&'a Value> {
    list.iter().rev().find(|r| r["policy_id"] == policy && r["gpu"] == gpu)
}

async fn reclaim_policies_act_on_real_processes(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &["--job-scan-interval", "200ms"]);
    let receiver = Recorder::start().await;
    set_price(&server, H100, 3.6).await;
    let (status, hook) = call(
        &server,
        reqwest::Method::POST,
        "/api/v1/notification-channels",
        Some(json!({"name": "automation", "kind": "webhook", "url": format!("{}/reclaim", receiver.url)})),
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let policy = |body: Value| {
        let server = &server;
        async move {
            let (status, p) = call(server, reqwest::Method::POST, "/api/v1/reclaim-policies", Some(body)).await;
            (status, p)
        }
    };
    // Bad policies: 422 naming the field.
    for (body, field) in [
        (json!({"name": "x", "state": "offline", "for_s": 5, "grace_s": 5, "action": "agent_kill"}), "state"),
        (json!({"name": "x", "state": "idle_held", "for_s": 0, "grace_s": 5, "action": "agent_kill"}), "for_s"),
        (
            json!({"name": "x", "state": "idle_held", "for_s": 5, "grace_s": 5, "action": "webhook"}),
            "action_channel_id",
        ),
    ] {
        let (status, e) = policy(body).await;
        assert_eq!((status, e["error"]["field"].as_str()), (422, Some(field)), "{e}");
    }
    // A state or an action that is none of the names does not parse: 400, naming the field.
    for (body, field) in [
        (json!({"name": "x", "state": "busy", "for_s": 5, "grace_s": 5, "action": "agent_kill"}), "state"),
        (json!({"name": "x", "state": "idle_held", "for_s": 5, "grace_s": 5, "action": "reboot"}), "action"),
    ] {
        let (status, e) = policy(body).await;
        assert_eq!(
            (status, e["error"]["code"].as_str(), e["error"]["field"].as_str()),
            (400, Some("invalid_json"), Some(field)),
            "{e}"
        );
    }
    let (status, kill) = policy(json!({"name": "kill idle notebooks", "state": "idle_held", "for_s": 3,
        "grace_s": 3, "action": "agent_kill", "notice_channel_id": hook["id"]}))
    .await;
    assert_eq!(status, 201, "{kill}");
    let (status, webhook) = policy(json!({"name": "tell automation", "state": "idle_held", "for_s": 3,
        "grace_s": 8, "action": "webhook", "action_channel_id": hook["id"]}))
    .await;
    assert_eq!(status, 201, "{webhook}");
    let (kill_id, hook_id) = (kill["id"].as_i64().unwrap(), webhook["id"].as_i64().unwrap());

    // Three real processes: mine on kill-node, one listed as mallory's on kill-node, mine on a
    // host whose agent did not opt in.
    let me = whoami();
    let (mut mine, mut listed_as_mallory, mut other_host) = (holder(), holder(), holder());
    let dir = tempfile::tempdir().unwrap();
    let kill_trace = dir.path().join("kill-node.jsonl");
    std::fs::write(
        &kill_trace,
        sorted(
            [
                trace("kill-node", "GPU-K1", mine.id(), &me, 90),
                trace("kill-node", "GPU-K2", listed_as_mallory.id(), "mallory", 90),
            ]
            .concat(),
        ),
    )
    .unwrap();
    let other_trace = dir.path().join("other-node.jsonl");
    std::fs::write(&other_trace, sorted(trace("other-node", "GPU-W", other_host.id(), &me, 90))).unwrap();
    let mut opted_in = agent_command(&server, &format!("replay:{}", kill_trace.display()), &dir.path().join("s1"))
        .args(["--rebase-ts", "--allow-reclaim-kill", "--reclaim-poll-interval", "1s"])
        .spawn()
        .unwrap();
    let mut not_opted_in = agent_command(&server, &format!("replay:{}", other_trace.display()), &dir.path().join("s2"))
        .arg("--rebase-ts")
        .spawn()
        .unwrap();

    // The webhook policy's reclaim of GPU-W is snoozed as soon as it is noticed.
    let list = wait_for(&server, "webhook notice on GPU-W", |l| find(l, hook_id, "GPU-W").is_some()).await;
    let w = find(&list, hook_id, "GPU-W").unwrap();
    let (status, snoozed) = call(
        &server,
        reqwest::Method::POST,
        &format!("/api/v1/reclaims/{}/snooze", w["id"]),
        Some(json!({"for_s": 600})),
    )
    .await;
    assert_eq!(status, 200, "{snoozed}");
    assert!(snoozed["snoozed_until_ms"].as_i64().is_some());
    let (status, e) = call(
        &server,
        reqwest::Method::POST,
        &format!("/api/v1/reclaims/{}/snooze", w["id"]),
        Some(json!({"for_s": 1})),
    )
    .await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("for_s")), "{e}");

    // The kill policy: mine is killed, mallory's refused, the other host's queued only.
    let list = wait_for(&server, "kill results", |l| {
        let done = |gpu: &str, step: &str| find(l, kill_id, gpu).is_some_and(|r| steps(r).iter().any(|s| s == step));
        done("GPU-K1", "killed") && done("GPU-K2", "kill_refused") && done("GPU-W", "kill_queued")
    })
    .await;
    let k1 = find(&list, kill_id, "GPU-K1").unwrap();
    assert_eq!(steps(k1), ["notice", "kill_queued", "killed"], "{k1:#}");
    assert_eq!(k1["pid"], json!(mine.id()));
    assert_eq!(k1["owner"]["user"], me.as_str());
    assert_eq!(k1["status"], "acted");
    let log = k1["log"].as_array().unwrap();
    assert_eq!(log[2]["actor"], "agent:kill-node");
    // Dollars held at the notice: $3.60/h × at least 3 s held.
    assert!(log[0]["dollars_held"].as_f64().unwrap() >= 3.6 * 3.0 / 3600.0 - 1e-9, "{k1:#}");
    assert!(log[1]["dollars_held"].as_f64().unwrap() >= log[0]["dollars_held"].as_f64().unwrap(), "{k1:#}");
    let k2 = find(&list, kill_id, "GPU-K2").unwrap();
    assert_eq!(steps(k2), ["notice", "kill_queued", "kill_refused"], "{k2:#}");
    let why = k2["log"][2]["detail"].as_str().unwrap();
    assert!(why.contains("not mallory"), "{why}");
    let w = find(&list, kill_id, "GPU-W").unwrap();
    assert_eq!(steps(w), ["notice", "kill_queued"], "{w:#}");

    // The real processes: mine ended by SIGTERM; the others still run.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = mine.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the reclaimed process is still running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.signal(), Some(15), "{status:?}");
    assert!(listed_as_mallory.try_wait().unwrap().is_none(), "a process of another owner was killed");
    assert!(other_host.try_wait().unwrap().is_none(), "a process on a host that did not opt in was killed");

    // The webhook policy: actions for K1 and K2 reached the receiver with their targets; W
    // (snoozed) has none.
    let list = wait_for(&server, "webhook actions", |l| {
        ["GPU-K1", "GPU-K2"].iter().all(|g| find(l, hook_id, g).is_some_and(|r| r["status"] == "acted"))
    })
    .await;
    let w = find(&list, hook_id, "GPU-W").unwrap();
    assert_eq!(steps(w), ["notice", "snooze"], "{w:#}");
    assert_eq!(w["status"], "noticed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = receiver.bodies();
    let actions: Vec<&Value> = received.iter().filter(|m| m["type"] == "fleetlens.reclaim_action").collect();
    let mut targets: Vec<(String, i64)> = actions
        .iter()
        .map(|m| (m["gpu"].as_str().unwrap().to_string(), m["target"]["pid"].as_i64().unwrap()))
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [("GPU-K1".to_string(), i64::from(mine.id())), ("GPU-K2".to_string(), i64::from(listed_as_mallory.id()))],
        "{received:#?}"
    );
    let a = actions[0];
    assert_eq!(a["policy"]["name"], "tell automation");
    assert_eq!(a["target"]["pod"].as_str().map(|p| p.starts_with("ml/nb-")), Some(true), "{a}");
    assert!(a["dollars_held"].as_f64().unwrap() > 0.0);
    let notices: Vec<&Value> = received.iter().filter(|m| m["type"] == "fleetlens.reclaim_notice").collect();
    // The kill policy's notices (to the channel it names); the webhook policy has no notice
    // channel and nobody has a report route, so its notices went nowhere (logged only).
    assert_eq!(notices.len(), 3, "{received:#?}");
    assert!(notices.iter().all(|n| !n["snooze_url"].as_str().unwrap().contains("__RECLAIM_ID__")), "{notices:#?}");

    // A closed reclaim cannot be snoozed.
    let (status, _) = call(
        &server,
        reqwest::Method::POST,
        &format!("/api/v1/reclaims/{}/snooze", k1["id"]),
        Some(json!({"for_s": 600})),
    )
    .await;
    assert_eq!(status, 409);

    // Dry run over the past hour: each GPU's idle-held minutes would have been acted on once.
    let (status, dry) =
        call(&server, reqwest::Method::GET, &format!("/api/v1/reclaim-policies/{kill_id}/dry-run"), None).await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["actions"], 3, "{dry:#}");
    assert!(dry["freed_cost"].as_f64().unwrap() > 0.0, "{dry}");
    assert!(dry["summary"].as_str().unwrap().starts_with("3 actions, "), "{dry}");

    for c in [&mut opted_in, &mut not_opted_in, &mut listed_as_mallory, &mut other_host] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
