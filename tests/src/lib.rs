//! Helpers for Fleetlens tests: fresh databases on both backends, and the real server and
//! agent binaries spawned as child processes on 127.0.0.1.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sqlx::Connection;

pub mod accounts;
pub mod http;
pub mod kube_api;
pub mod kubelet;

/// Where the tests find PostgreSQL (trust auth). Override with `FLEETLENS_TEST_PG`.
pub fn pg_admin_url() -> String {
    std::env::var("FLEETLENS_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The two storage backends every storage test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database, removed when dropped.
pub struct TestDatabase {
    pub url: String,
    pg_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestDatabase {
    pub async fn new(backend: Backend) -> TestDatabase {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = format!("sqlite://{}", dir.path().join("fleetlens.db").display());
                TestDatabase { url, pg_name: None, _dir: Some(dir) }
            }
            Backend::Postgres => {
                let name = format!(
                    "fleetlens_test_{}_{}_{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed),
                    rand_suffix()
                );
                let mut conn = sqlx::PgConnection::connect(&pg_admin_url())
                    .await
                    .expect("PostgreSQL must run on 127.0.0.1:5432 (user postgres): see README");
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create database");
                let base = pg_admin_url();
                let url = format!("{}/{name}", base.rsplit_once('/').expect("url has a path").0);
                TestDatabase { url, pg_name: Some(name), _dir: None }
            }
        }
    }

    /// Path of the SQLite file, for tests that inspect it.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        self.url.strip_prefix("sqlite://").map(PathBuf::from)
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos() as u64).unwrap_or(0)
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some(name) = self.pg_name.take() else { return };
        // Drop runs outside async context; a short-lived runtime on its own thread does the
        // DROP so no test leaves databases behind.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&pg_admin_url()).await {
                    let _ =
                        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await;
                }
            });
        })
        .join();
    }
}

/// Path of a workspace binary built next to the test executable (`cargo build` builds them
/// before the tests run: see `.ci/run`).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(path.exists(), "{} not built: run `cargo build --bins` first", path.display());
    path
}

/// Path of a file under the repository's tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

/// The admin API key every test server is started with.
pub const ADMIN_TOKEN: &str = "fl_test_admin_token_0123456789abcdef";

/// A `fleetlens-server` child process on 127.0.0.1, killed when dropped.
pub struct TestServer {
    pub base_url: String,
    pub child: Child,
    pub db_url: String,
}

impl TestServer {
    /// Start the server on an OS-chosen port and wait until it is ready.
    pub fn spawn(db_url: &str, extra_args: &[&str]) -> TestServer {
        Self::spawn_on(db_url, "127.0.0.1:0", extra_args)
    }

    pub fn spawn_on(db_url: &str, listen: &str, extra_args: &[&str]) -> TestServer {
        Self::spawn_with(db_url, listen, extra_args, true, &[])
    }

    /// Like [`TestServer::spawn`], without the allowance of 127.0.0.0/8 for notifications: the
    /// server refuses internal addresses as a production install does by default.
    pub fn spawn_without_webhook_allowance(db_url: &str, extra_args: &[&str]) -> TestServer {
        Self::spawn_with(db_url, "127.0.0.1:0", extra_args, false, &[])
    }

    /// [`TestServer::spawn_on`] with environment changes: `(name, Some(value))` sets a
    /// variable, `(name, None)` removes it (e.g. `FLEETLENS_ADMIN_TOKEN`).
    pub fn spawn_env(db_url: &str, listen: &str, extra_args: &[&str], env: &[(&str, Option<&str>)]) -> TestServer {
        Self::spawn_with(db_url, listen, extra_args, true, env)
    }

    fn spawn_with(
        db_url: &str,
        listen: &str,
        extra_args: &[&str],
        allow_local_webhooks: bool,
        env: &[(&str, Option<&str>)],
    ) -> TestServer {
        let mut cmd = Command::new(bin_path("fleetlens-server"));
        // Test receivers listen on 127.0.0.1, which a server refuses to notify unless allowed
        // (a `--webhook-allow-cidrs` in `extra_args` takes precedence over this variable).
        cmd.env_remove("FLEETLENS_WEBHOOK_ALLOW_CIDRS");
        if allow_local_webhooks {
            cmd.env("FLEETLENS_WEBHOOK_ALLOW_CIDRS", "127.0.0.0/8");
        }
        cmd.args(["--listen", listen, "--database-url", db_url]);
        if !extra_args.contains(&"--static-dir") {
            cmd.args(["--static-dir", "/nonexistent-static"]);
        }
        cmd.args(extra_args)
            .env("FLEETLENS_ADMIN_TOKEN", ADMIN_TOKEN)
            // The recorded fixtures keep their timestamps: raw retention must not age them out
            // while the suite runs (a test of retention passes its own --raw-retention).
            .env("FLEETLENS_RAW_RETENTION", "36500d")
            // The rollup job looks for closed minutes every second (tests wait for it).
            .env("FLEETLENS_ROLLUP_INTERVAL", "1s")
            .env("RUST_LOG", std::env::var("TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() });
        for (name, value) in env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        let mut child = cmd.spawn().expect("spawn fleetlens-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !sent && let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                    let _ = tx.send(url.trim_end_matches('/').to_string());
                    sent = true;
                }
            }
        });
        let base_url = rx.recv_timeout(Duration::from_secs(60)).expect("server printed its URL");
        let server = TestServer { base_url, child, db_url: db_url.to_string() };
        server.wait_ready(Duration::from_secs(30));
        server
    }

    fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let url = format!("{}/readyz", self.base_url);
        while Instant::now() < deadline {
            if probe::http_get_ok(&url).unwrap_or(false) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server at {} not ready within {timeout:?}", self.base_url);
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// kill -9: no shutdown hooks run.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

mod probe {
    //! A tiny blocking readiness probe over std TCP, so spawning needs no async runtime.
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    pub fn http_get_ok(url: &str) -> std::io::Result<bool> {
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
        let mut s = TcpStream::connect(host)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
        let mut buf = String::new();
        s.read_to_string(&mut buf)?;
        Ok(buf.starts_with("HTTP/1.1 200"))
    }
}

/// A `fleetlens-agent` command with the server and admin key filled in.
pub fn agent_command(server: &TestServer, source: &str, spool_dir: &Path) -> Command {
    let mut cmd = Command::new(bin_path("fleetlens-agent"));
    cmd.args(["--server", &server.base_url, "--api-key", ADMIN_TOKEN, "--source", source])
        .arg("--spool-dir")
        .arg(spool_dir)
        .env("RUST_LOG", std::env::var("TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .stderr(if std::env::var_os("TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() });
    cmd
}

/// Run an agent command to its end (it must exit 0), off the async runtime.
pub async fn run_agent(mut agent: Command) {
    let status = tokio::task::spawn_blocking(move || agent.status().unwrap()).await.unwrap();
    assert!(status.success(), "agent failed: {status}");
}

/// Write a replay trace: 30 minutes at 1 Hz from `start` of idle H100s of host `k8s-node-1`
/// (one per uuid, in index order), no process visible on any.
pub fn write_idle_trace(path: &Path, start: i64, uuids: &[&str]) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..30 * 60 {
        for (index, uuid) in uuids.iter().enumerate() {
            let line = serde_json::json!({
                "ts_ms": start + i * 1000, "host": "k8s-node-1", "uuid": uuid, "gpu_index": index,
                "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": 0.0, "sm_active_pct": 0.0, "sm_occupancy_pct": 0.0, "tensor_active_pct": 0.0,
                "dram_active_pct": 0.0, "mem_used_bytes": 0, "mem_total_bytes": 85899345920i64,
                "power_w": 70.0, "power_limit_w": 700.0, "processes": [],
            });
            writeln!(f, "{line}").unwrap();
        }
    }
    f.flush().unwrap();
}

/// Replay the recorded trace `fixture_name` (under tests/fixtures) into `server` with the real
/// agent and `--once`: it must exit 0, every sample acknowledged.
pub fn replay_fixture_once(server: &TestServer, fixture_name: &str) {
    let spool = tempfile::tempdir().expect("spool dir");
    let trace = fixture(fixture_name);
    let status = agent_command(server, &format!("replay:{}", trace.display()), spool.path())
        .arg("--once")
        .status()
        .expect("run agent");
    assert!(status.success(), "agent --once: {status}");
}

/// Define each named `async fn name(backend: Backend)` test once per backend, as
/// `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! for_each_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name($crate::Backend::Sqlite).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name($crate::Backend::Postgres).await })*
        }
    };
}

/// Row counts of the data tables, read straight from the database, to prove that a rejected
/// request changed nothing. The rollup counts are the GPU-minutes and GPU-hours that have a
/// rollup, written (`rollups_1m`, `rollups_1h`) or still open (marked in `rollup_pending`, with
/// samples): the same whether or not the server's rollup job has written them yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableCounts {
    pub samples: i64,
    pub gpus: i64,
    pub rollups_1m: i64,
    pub rollups_1h: i64,
}

pub async fn table_counts(db_url: &str) -> TableCounts {
    const OPEN: &str = "SELECT p.gpu_id, p.minute_ms FROM rollup_pending p WHERE EXISTS (SELECT 1 FROM open_sample_rows s \
                        WHERE s.gpu_id = p.gpu_id AND s.ts_ms >= p.minute_ms AND s.ts_ms < p.minute_ms + 60000)";
    let sql = format!(
        "SELECT (SELECT count(*) FROM open_sample_rows), (SELECT count(*) FROM gpus), \
         (SELECT count(*) FROM (SELECT gpu_id, bucket_ms FROM rollups_1m UNION {OPEN}) m), \
         (SELECT count(*) FROM (SELECT gpu_id, bucket_ms FROM rollups_1h UNION \
            SELECT o.gpu_id, o.minute_ms - o.minute_ms % 3600000 FROM ({OPEN}) o) h)"
    );
    let (samples, gpus, rollups_1m, rollups_1h): (i64, i64, i64, i64) = if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.expect("open sqlite");
        sqlx::query_as(&sql).fetch_one(&mut c).await.expect("count")
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.expect("open postgres");
        sqlx::query_as(&sql).fetch_one(&mut c).await.expect("count")
    };
    TableCounts { samples, gpus, rollups_1m, rollups_1h }
}

/// How the stored rollups account for the raw samples (rollups are written once per minute by
/// the server's rollup job; the minutes it has not written yet are marked in `rollup_pending`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollupAccounting {
    /// Samples counted: by their written minute row, or, in a minute not written yet, one each.
    pub counted: i64,
    /// Written minutes whose sample count differs from their raw samples.
    pub wrong_minutes: i64,
    /// Hours whose sample count differs from the sum of their written minutes.
    pub wrong_hours: i64,
    /// Minutes not written yet.
    pub open_minutes: i64,
}

pub async fn rollup_accounting(db_url: &str) -> RollupAccounting {
    const OPEN: &str =
        "EXISTS (SELECT 1 FROM rollup_pending p WHERE p.gpu_id = r.gpu_id AND p.minute_ms = r.bucket_ms)";
    let sql = format!(
        "SELECT CAST((SELECT coalesce(sum(r.sample_count), 0) FROM rollups_1m r WHERE NOT {OPEN}) AS BIGINT) \
         + (SELECT count(*) FROM open_sample_rows s WHERE EXISTS (SELECT 1 FROM rollup_pending p \
            WHERE p.gpu_id = s.gpu_id AND p.minute_ms = s.ts_ms - s.ts_ms % 60000)), \
         (SELECT count(*) FROM rollups_1m r JOIN (SELECT gpu_id, ts_ms - ts_ms % 60000 AS b, count(*) AS c FROM open_sample_rows \
            GROUP BY gpu_id, ts_ms - ts_ms % 60000) x ON x.gpu_id = r.gpu_id AND x.b = r.bucket_ms \
            WHERE r.sample_count <> x.c AND NOT {OPEN}), \
         (SELECT count(*) FROM rollups_1h h WHERE h.sample_count <> (SELECT sum(r.sample_count) FROM rollups_1m r \
            WHERE r.gpu_id = h.gpu_id AND r.bucket_ms >= h.bucket_ms AND r.bucket_ms < h.bucket_ms + 3600000)), \
         (SELECT count(*) FROM rollup_pending)"
    );
    let (counted, wrong_minutes, wrong_hours, open_minutes): (i64, i64, i64, i64) = if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.expect("open sqlite");
        sqlx::query_as(&sql).fetch_one(&mut c).await.expect("accounting")
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.expect("open postgres");
        sqlx::query_as(&sql).fetch_one(&mut c).await.expect("accounting")
    };
    RollupAccounting { counted, wrong_minutes, wrong_hours, open_minutes }
}

/// Wait until the server's rollup job has written every marked minute that started before
/// `before_ms` (the minutes that closed: see `FLEETLENS_ROLLUP_LATENESS`).
pub async fn wait_rollups_written(db_url: &str, before_ms: i64, timeout: std::time::Duration) {
    let sql = "SELECT count(*) FROM rollup_pending WHERE minute_ms < $1";
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left: i64 = if db_url.starts_with("sqlite:") {
            let mut c = sqlx::SqliteConnection::connect(db_url).await.expect("open sqlite");
            sqlx::query_scalar(&sql.replace("$1", "?")).bind(before_ms).fetch_one(&mut c).await.expect("pending")
        } else {
            let mut c = sqlx::PgConnection::connect(db_url).await.expect("open postgres");
            sqlx::query_scalar(sql).bind(before_ms).fetch_one(&mut c).await.expect("pending")
        };
        if left == 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the rollup job left {left} closed minutes unwritten");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The recorded H200 trace, one JSON object per line.
pub fn fixture_lines() -> Vec<serde_json::Value> {
    std::fs::read_to_string(fixture("nvml-h200-phases.jsonl"))
        .expect("fixture")
        .lines()
        .map(|l| serde_json::from_str(l).expect("fixture line"))
        .collect()
}

/// One synthetic H100 sample at `ts` with these utilisation and SM activity, no process list.
pub fn h100_sample(uuid: &str, ts: i64, util: f64, smact: f64) -> serde_json::Value {
    serde_json::json!({
        "ts_ms": ts, "uuid": uuid, "gpu_index": 0, "name": "NVIDIA H100 80GB HBM3",
        "gpu_util_pct": util, "sm_active_pct": smact, "sm_occupancy_pct": smact / 2.0,
        "tensor_active_pct": 0.0, "dram_active_pct": 5.0, "mem_used_bytes": 8i64 << 30,
        "mem_total_bytes": 85899345920i64, "power_w": 400.0, "power_limit_w": 700.0,
    })
}

/// `n` 1-Hz hollow samples (util 100 %, SM activity 2 %, one process holding 8 GiB) of an H100,
/// the last one `age_ms` + 1 s before now.
pub fn hollow_samples(uuid: &str, n: i64, age_ms: i64) -> Vec<serde_json::Value> {
    let start = http::now_ms() - age_ms - n * 1000;
    (0..n)
        .map(|i| {
            serde_json::json!({
                "ts_ms": start + i * 1000, "uuid": uuid, "gpu_index": 0, "name": "NVIDIA H100 80GB HBM3",
                "gpu_util_pct": 100.0, "sm_active_pct": 2.0, "mem_used_bytes": 8i64 << 30,
                "mem_total_bytes": 85899345920i64, "power_w": 400.0, "power_limit_w": 700.0,
                "processes": [{"pid": 7, "used_bytes": 8i64 << 30}],
            })
        })
        .collect()
}

/// `minutes` of 1-Hz samples of one GPU (model `name`) from `start`, all alike: these
/// utilisation, SM and tensor activity, and the processes `procs` (a JSON array); 40 GiB of
/// memory is in use while any process holds it.
// Each argument is one column of the scenario tables the tests read like.
#[allow(clippy::too_many_arguments)]
pub fn minutes_of(
    uuid: &str,
    name: &str,
    start: i64,
    minutes: i64,
    util: f64,
    smact: f64,
    tensor: f64,
    procs: &serde_json::Value,
) -> Vec<serde_json::Value> {
    let held = procs.as_array().is_some_and(|p| !p.is_empty());
    (0..minutes * 60)
        .map(|i| {
            serde_json::json!({
                "ts_ms": start + i * 1000, "uuid": uuid, "gpu_index": 0, "name": name,
                "gpu_util_pct": util, "sm_active_pct": smact, "sm_occupancy_pct": smact / 2.0,
                "tensor_active_pct": tensor, "dram_active_pct": 10.0,
                "mem_used_bytes": if held { 40i64 << 30 } else { 0 }, "mem_total_bytes": 85899345920i64,
                "power_w": 100.0 + util * 5.0, "power_limit_w": 700.0,
                "processes": procs,
            })
        })
        .collect()
}

/// The process list of [`minutes_of`] for a GPU one process (pid 7) holds 40 GiB of.
pub fn one_process() -> serde_json::Value {
    serde_json::json!([{"pid": 7, "used_bytes": 40i64 << 30}])
}

/// The recorded H200 trace moved in time so that its last sample is at `end_ms`.
pub fn fixture_lines_ending_at(end_ms: i64) -> Vec<serde_json::Value> {
    let mut lines = fixture_lines();
    let shift = end_ms - lines.last().unwrap()["ts_ms"].as_i64().unwrap();
    for l in &mut lines {
        l["ts_ms"] = serde_json::json!(l["ts_ms"].as_i64().unwrap() + shift);
    }
    lines
}

/// Check a Prometheus text exposition with `promtool check metrics` (it must pass).
pub fn promtool_check(text: &str) {
    use std::io::Write;
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

/// gzip `bytes`.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

/// Check Slack messages with the official SDK's Block Kit models (PyPI `slack_sdk`): every
/// block parses, round-trips and passes the SDK's limit checks.
pub fn validate_slack_messages(messages: &[serde_json::Value]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("messages.jsonl");
    std::fs::write(&path, messages.iter().map(|m| m.to_string() + "\n").collect::<String>()).unwrap();
    let script = r#"
import json, sys
from slack_sdk.models.blocks import Block
n = 0
for line in open(sys.argv[1]):
    msg = json.loads(line)
    assert isinstance(msg.get("text"), str) and msg["text"], "text fallback"
    assert len(msg["text"]) <= 3000
    raw = msg["blocks"]
    assert 0 < len(raw) <= 50, "block count"
    blocks = Block.parse_all(raw)
    for b, r in zip(blocks, raw):
        assert b is not None, f"unknown block {r}"
        b.validate_json()
        assert b.to_dict() == r, f"round trip: {b.to_dict()} != {r}"
    n += 1
print(f"slack_sdk: {n} messages valid")
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .expect("python3 (with `pip install slack_sdk`) is needed for the Slack payload check");
    assert!(
        out.status.success(),
        "slack_sdk validation failed (is slack_sdk installed? scripts/test.sh installs it):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
