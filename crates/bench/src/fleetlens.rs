//! One run against `fleetlens-server` on a fresh SQLite file or PostgreSQL database.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fleetlens_agent::wire::WireFormat;
use fleetlens_api::{INGEST_PATH, IngestResponse};
use reqwest::StatusCode;
use sqlx::Connection;

use crate::child::{ChildGuard, wait_for_url, wait_http_ok};
use crate::data::Body;
use crate::procstat::{self, MachineCpu};
use crate::send::{Request, Target, send_all};
use crate::{Measured, Raw, Settings};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// How the samples reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// `POST /api/v1/ingest`, bodies as an agent with this `--wire-format` sends them.
    Agent(WireFormat),
    /// `POST /api/v1/write`: Prometheus remote write of dcgm-exporter series (snappy protobuf).
    RemoteWrite,
}

impl Db {
    pub fn label(self, intake: Intake) -> &'static str {
        match (intake, self) {
            (Intake::Agent(WireFormat::Protobuf), Db::Sqlite) => "fleetlens-sqlite",
            (Intake::Agent(WireFormat::Protobuf), Db::Postgres) => "fleetlens-postgres",
            (Intake::Agent(WireFormat::Json), Db::Sqlite) => "fleetlens-sqlite-json",
            (Intake::Agent(WireFormat::Json), Db::Postgres) => "fleetlens-postgres-json",
            (Intake::RemoteWrite, Db::Sqlite) => "fleetlens-remote-write-sqlite",
            (Intake::RemoteWrite, Db::Postgres) => "fleetlens-remote-write-postgres",
        }
    }
}

/// A fresh database for one run; `cleanup` removes it.
struct BenchDb {
    url: String,
    pg: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl BenchDb {
    async fn create(db: Db, pg_admin_url: &str) -> Result<BenchDb> {
        match db {
            Db::Sqlite => {
                let dir = tempfile::Builder::new().prefix("fleetlens-bench-").tempdir()?;
                let url = format!("sqlite://{}", dir.path().join("fleetlens.db").display());
                Ok(BenchDb { url, pg: None, _dir: Some(dir) })
            }
            Db::Postgres => {
                let name = format!("fleetlens_bench_{}", std::process::id());
                let mut conn = sqlx::PgConnection::connect(pg_admin_url)
                    .await
                    .with_context(|| format!("connect to PostgreSQL at {pg_admin_url}"))?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await?;
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.context("create database")?;
                let base = pg_admin_url.rsplit_once('/').map(|(b, _)| b).unwrap_or(pg_admin_url);
                Ok(BenchDb { url: format!("{base}/{name}"), pg: Some((pg_admin_url.to_string(), name)), _dir: None })
            }
        }
    }

    async fn count_samples(&self) -> Result<i64> {
        let sql = "SELECT count(*) FROM open_sample_rows";
        Ok(if self.pg.is_some() {
            let mut c = sqlx::PgConnection::connect(&self.url).await?;
            sqlx::query_scalar(sql).fetch_one(&mut c).await?
        } else {
            let mut c = sqlx::SqliteConnection::connect(&self.url).await?;
            sqlx::query_scalar(sql).fetch_one(&mut c).await?
        })
    }

    async fn cleanup(self) {
        if let Some((admin, name)) = &self.pg {
            let dropped = async {
                let mut conn = sqlx::PgConnection::connect(admin).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await?;
                Ok::<_, anyhow::Error>(())
            }
            .await;
            if let Err(e) = dropped {
                eprintln!("warning: could not drop database {name}: {e:#}");
            }
        }
    }
}

/// Where the alert engine found the samples it judged so far (`/metrics`), printed: from
/// memory (batches this server stored) or read back from the database.
async fn engine_feed(client: &reqwest::Client, base: &str, token: &str, label: &str) {
    let text = match client.get(format!("{base}/metrics")).bearer_auth(token).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => return eprintln!("[{label}] /metrics: {e}"),
    };
    let count = |source: &str| {
        let series = format!("fleetlens_alert_engine_samples_total{{source=\"{source}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(series.as_str())).unwrap_or("?").trim().to_string()
    };
    eprintln!(
        "[{label}] alert engine so far: {} samples judged from memory, {} read back from the database",
        count("memory"),
        count("database")
    );
}

pub async fn run(db: Db, intake: Intake, settings: &Settings, bodies: &[Body]) -> Result<Measured> {
    let bench_db = BenchDb::create(db, &settings.pg_admin_url).await?;
    let result = run_on(db, intake, &bench_db, settings, bodies).await;
    bench_db.cleanup().await;
    result
}

async fn run_on(db: Db, intake: Intake, bench_db: &BenchDb, settings: &Settings, bodies: &[Body]) -> Result<Measured> {
    let label = db.label(intake);
    let token = format!("fl_bench_admin_token_{:016x}", (u64::from(std::process::id()) * 0x9e37_79b9) ^ 0x5eed_f00d);
    let static_dir = Path::new("/nonexistent-fleetlens-bench-static");
    let mut cmd = Command::new(&settings.server_bin);
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--database-url")
        .arg(&bench_db.url)
        .arg("--static-dir")
        .arg(static_dir)
        .env("FLEETLENS_ADMIN_TOKEN", &token)
        .env("RUST_LOG", std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().with_context(|| format!("spawn {}", settings.server_bin.display()))?;
    let stdout = child.stdout.take().context("server stdout")?;
    let mut server = ChildGuard { child, what: format!("fleetlens-server ({})", label) };
    let base = wait_for_url(&mut server, stdout, Duration::from_secs(60))?;
    let client = crate::http_client(settings.concurrency)?;
    wait_http_ok(&client, &mut server, &format!("{base}/readyz"), Duration::from_secs(30)).await?;
    eprintln!("[{}] server pid {} at {base}, database {}", label, server.pid(), bench_db.url);

    let requests: Vec<Request> = bodies.iter().map(|b| Request { body: b.wire.clone(), samples: b.samples }).collect();
    let (path, content_type, content_encoding) = match intake {
        Intake::Agent(format) => (INGEST_PATH, format.content_type(), format.content_encoding()),
        Intake::RemoteWrite => ("/api/v1/write", "application/x-protobuf", "snappy"),
    };
    let target = Target {
        url: format!("{base}{path}"),
        bearer: Some(&token),
        content_type,
        content_encoding,
        success: StatusCode::OK,
    };

    let load = procstat::load_average();
    let pid = server.pid();
    let cpu0 = procstat::cpu_seconds(pid)?;
    let threads0 = procstat::thread_ticks(pid);
    let pg0 = (db == Db::Postgres).then(|| procstat::ticks_by_comm("postgres"));
    let me0 = procstat::cpu_seconds(std::process::id())?;
    let machine0 = MachineCpu::now();

    let sent = send_all(&client, &target, requests, settings.concurrency).await?;

    let machine1 = MachineCpu::now();
    let me1 = procstat::cpu_seconds(std::process::id())?;
    let pg1 = (db == Db::Postgres).then(|| procstat::ticks_by_comm("postgres"));
    let cpu1 = procstat::cpu_seconds(pid)?;
    let threads1 = procstat::thread_ticks(pid);
    let peak_rss = procstat::peak_rss_bytes(pid)?;

    let expected = bodies.iter().map(|b| b.samples as u64).sum::<u64>();
    let (mut received, mut inserted) = (0u64, 0u64);
    for (i, answer) in &sent.answers {
        let r: IngestResponse = serde_json::from_slice(answer).with_context(|| format!("answer to request {i}"))?;
        if r.received != bodies[*i].samples as u64 {
            bail!("request {i}: server received {} samples, sent {}", r.received, bodies[*i].samples);
        }
        received += r.received;
        inserted += r.inserted;
    }
    if inserted != expected {
        bail!(
            "server reports {inserted} samples inserted of {received} received; expected {expected} on a fresh database"
        );
    }

    engine_feed(&client, &base, &token, label).await;
    // kill -9 before counting: what the 200s promised must survive a crash.
    server.kill();
    let stored = bench_db.count_samples().await.context("count samples")?;
    if stored as u64 != expected {
        bail!("durability check failed: samples table holds {stored} rows, expected {expected}");
    }
    eprintln!("[{}] verified: {stored} rows in samples after kill -9", label);

    Ok(Measured::new(
        Raw {
            label,
            wall: sent.wall,
            wall_to_last_ack: sent.wall,
            server_cpu_s: cpu1 - cpu0,
            db_cpu_s: pg0.zip(pg1).map(|(a, b)| procstat::cpu_seconds_between(&a, &b)),
            client_cpu_s: me1 - me0,
            machine_busy_pct: machine1.busy_pct_since(&machine0),
            server_threads: procstat::thread_seconds_between(&threads0, &threads1),
            peak_rss_bytes: peak_rss,
            load_before: load,
            verified: stored as u64,
            verify_method: "SELECT count(*) FROM open_sample_rows (sqlx, after kill -9 of the server)".into(),
        },
        bodies,
        &sent,
    ))
}
