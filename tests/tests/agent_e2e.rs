//! Black box: the real agent pushing to the real server, on SQLite and PostgreSQL.

use std::io::Write;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use fleetlens_tests::http::get_json;
use fleetlens_tests::{Backend, TestDatabase, TestServer, agent_command, fixture, fixture_lines, table_counts};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    replayed_trace_reads_back_exactly,
    server_killed_and_restarted_while_agent_sends,
    agent_killed_and_restarted_keeps_its_spool,
);

fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("agent did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn samples_of(server: &TestServer, uuid: &str) -> Vec<Value> {
    let resp: Value =
        get_json(server, &format!("/api/v1/gpus/{uuid}/samples?from=0&to=4102444800000&limit=100000")).await;
    assert_eq!(resp["truncated"], json!(false));
    resp["samples"].as_array().expect("samples").clone()
}

/// Equal as JSON, where numbers compare by value (the trace writes `0`, the API `0.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.iter().all(|(k, v)| same(v, y.get(k).unwrap_or(&Value::Null)))
                && y.iter().all(|(k, v)| same(v, x.get(k).unwrap_or(&Value::Null)))
        }
        _ => a == b,
    }
}

async fn replayed_trace_reads_back_exactly(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let spool = tempfile::tempdir().unwrap();
    let trace = fixture("nvml-h200-phases.jsonl");
    let mut agent = agent_command(&server, &format!("replay:{}", trace.display()), spool.path())
        .arg("--once")
        .spawn()
        .expect("spawn agent");
    let status = wait_exit(&mut agent, Duration::from_secs(60));
    assert!(status.success(), "agent --once exits 0 after every sample is acknowledged: {status}");

    let expected = fixture_lines();
    let uuid = expected[0]["uuid"].as_str().unwrap();
    let got = samples_of(&server, uuid).await;
    assert_eq!(got.len(), 84);
    for (want, got) in expected.iter().zip(&got) {
        for (field, value) in want.as_object().unwrap() {
            if field == "phase" || field == "host" {
                continue; // the label is not something an agent knows; host is per GPU
            }
            assert!(
                same(value, &got[field]),
                "ts {} field {field}: trace {value} vs API {}",
                want["ts_ms"],
                got[field]
            );
        }
        assert_eq!(got["fp64_active_pct"], Value::Null, "not measured in the trace: null, not 0");
    }
    let gpus: Value = get_json(&server, "/api/v1/gpus").await;
    assert_eq!(gpus["gpus"][0]["host"], "gpu-node-01");
}

/// A trace of `gpus` × `per_gpu` samples at 1 s, ending now, written to a file.
fn write_trace(dir: &std::path::Path, gpus: usize, per_gpu: usize) -> std::path::PathBuf {
    let template = &fixture_lines()[40];
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let start = now - per_gpu as i64 * 1000;
    let path = dir.join("trace.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for t in 0..per_gpu {
        for g in 0..gpus {
            let mut line = template.clone();
            line["ts_ms"] = json!(start + t as i64 * 1000);
            line["uuid"] = json!(format!("GPU-e2e-{g:04}"));
            line["gpu_index"] = json!(g);
            line["host"] = json!("e2e-node");
            line["gpu_util_pct"] = json!((t * 7 + g) % 101);
            writeln!(f, "{line}").unwrap();
        }
    }
    path
}

async fn assert_exactly_once(db: &TestDatabase, total: i64) {
    let counts = table_counts(&db.url).await;
    assert_eq!(counts.samples, total, "every sample stored");
    // Rollups count each stored sample once: no duplicates slipped in through retries, and
    // the rollup job (running every second, killed with the server) wrote each minute whole.
    let acc = fleetlens_tests::rollup_accounting(&db.url).await;
    assert_eq!(acc.counted, total, "rollups count every sample exactly once: {acc:?}");
    assert_eq!((acc.wrong_minutes, acc.wrong_hours), (0, 0), "{acc:?}");
}

/// A server on a fresh database, the address it listens on (to start it again there), and a
/// trace of `gpus` × `per_gpu` samples in a temporary directory.
struct Restartable {
    db: TestDatabase,
    server: TestServer,
    listen: String,
    dir: tempfile::TempDir,
    trace: std::path::PathBuf,
}

async fn restartable(backend: Backend, gpus: usize, per_gpu: usize) -> Restartable {
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let listen = server.base_url.trim_start_matches("http://").to_string();
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), gpus, per_gpu);
    Restartable { db, server, listen, dir, trace }
}

async fn server_killed_and_restarted_while_agent_sends(backend: Backend) {
    let (gpus, per_gpu) = (8, 300);
    let Restartable { db, mut server, listen, dir, trace } = restartable(backend, gpus, per_gpu).await;
    // 300 s of trace at 60× takes 5 s: the server is killed twice along the way.
    let mut agent = agent_command(&server, &format!("replay:{}", trace.display()), &dir.path().join("spool"))
        .args(["--once", "--speed", "60", "--batch-max", "40"])
        .spawn()
        .expect("spawn agent");
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.kill();
        tokio::time::sleep(Duration::from_millis(700)).await;
        server = TestServer::spawn_on(&db.url, &listen, &[]);
    }
    let status = wait_exit(&mut agent, Duration::from_secs(120));
    assert!(status.success(), "{status}");
    assert_exactly_once(&db, (gpus * per_gpu) as i64).await;
}

async fn agent_killed_and_restarted_keeps_its_spool(backend: Backend) {
    let (gpus, per_gpu) = (4, 200);
    let Restartable { db, mut server, listen, dir, trace } = restartable(backend, gpus, per_gpu).await;
    let spool = dir.path().join("spool");
    // The server is down: the agent reads the whole trace into its spool, then dies (kill -9).
    server.kill();
    let mut agent = agent_command(&server, &format!("replay:{}", trace.display()), &spool)
        .args(["--once", "--batch-max", "25"])
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let _ = agent.kill();
    let _ = agent.wait();
    let spooled = std::fs::read_dir(&spool).map(|d| d.count()).unwrap_or(0);
    assert!(spooled > 0, "batches wait in the spool while the server is down");
    assert_eq!(table_counts(&db.url).await.samples, 0);

    // Server back; a new agent on the same spool replays a one-sample trace: everything the
    // dead agent spooled must arrive too, exactly once.
    let server = TestServer::spawn_on(&db.url, &listen, &[]);
    let one = dir.path().join("one.jsonl");
    let mut line = fixture_lines()[0].clone();
    line["uuid"] = json!("GPU-after-restart");
    std::fs::write(&one, format!("{line}\n")).unwrap();
    let mut agent = agent_command(&server, &format!("replay:{}", one.display()), &spool).arg("--once").spawn().unwrap();
    let status = wait_exit(&mut agent, Duration::from_secs(120));
    assert!(status.success(), "{status}");
    assert_exactly_once(&db, (gpus * per_gpu) as i64 + 1).await;
}
