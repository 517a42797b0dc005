//! `ingest-bench`: GPU-samples per second that `fleetlens-server` stores durably through its
//! HTTP ingest API (SQLite and PostgreSQL backends), beside VictoriaMetrics fed the same samples.
//!
//! Per backend: pre-build and gzip every request body, start the server on a fresh database,
//! send all batches with a fixed number in flight, verify the stored count, and report
//! throughput, server CPU, peak RSS, latency and bytes on the wire. See `scripts/bench-ingest.sh`.

mod data;
mod fleetlens;
mod procstat;
mod send;
mod vm;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use fleetlens_agent::wire::WireFormat;
use fleetlens_bench::child;
use serde::Serialize;

use crate::data::{Body, GPUS_PER_HOST, INTERVAL_MS, Plan, VM_FIELDS};
use crate::fleetlens::{Db, Intake};
use crate::send::{Sent, percentile_ms};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// The agent's zstd protobuf batches into SQLite.
    Sqlite,
    /// The same into PostgreSQL.
    Postgres,
    /// Gzip JSON batches (the agent's `--wire-format json`) into SQLite.
    SqliteJson,
    /// The same into PostgreSQL.
    PostgresJson,
    /// `POST /api/v1/write` (Prometheus remote write of dcgm-exporter series) on SQLite.
    RemoteWriteSqlite,
    /// The same on PostgreSQL.
    RemoteWritePostgres,
    VictoriaMetrics,
    All,
}

impl BackendArg {
    /// The database and intake of a Fleetlens backend (none for VictoriaMetrics).
    fn fleetlens(self) -> Option<(Db, Intake)> {
        match self {
            BackendArg::Sqlite => Some((Db::Sqlite, Intake::Agent(WireFormat::Protobuf))),
            BackendArg::Postgres => Some((Db::Postgres, Intake::Agent(WireFormat::Protobuf))),
            BackendArg::SqliteJson => Some((Db::Sqlite, Intake::Agent(WireFormat::Json))),
            BackendArg::PostgresJson => Some((Db::Postgres, Intake::Agent(WireFormat::Json))),
            BackendArg::RemoteWriteSqlite => Some((Db::Sqlite, Intake::RemoteWrite)),
            BackendArg::RemoteWritePostgres => Some((Db::Postgres, Intake::RemoteWrite)),
            BackendArg::VictoriaMetrics | BackendArg::All => None,
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "ingest-bench",
    about = "HTTP ingest throughput of fleetlens-server (SQLite, PostgreSQL) beside VictoriaMetrics"
)]
struct Args {
    /// Which backend(s) to run.
    #[arg(long, value_enum, default_value = "all")]
    backend: BackendArg,
    /// GPUs in the simulated fleet (8 per host).
    #[arg(long, default_value_t = 1000)]
    gpus: usize,
    /// Samples per GPU (one per second).
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Samples per request: one host, 8 GPUs × batch/8 timestamps.
    #[arg(long, default_value_t = 2000)]
    batch: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// The fleetlens-server binary (a release build).
    #[arg(long, default_value = "target/release/fleetlens-server")]
    server_bin: PathBuf,
    /// The VictoriaMetrics single-node binary (default: `victoria-metrics` in PATH, else /usr/bin/victoria-metrics).
    #[arg(long)]
    vm_bin: Option<PathBuf>,
    /// PostgreSQL maintenance database; the bench creates and drops `fleetlens_bench_<pid>` next to it.
    #[arg(long, env = "FLEETLENS_BENCH_PG", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What the runners need from the command line.
pub struct Settings {
    pub concurrency: usize,
    pub server_bin: PathBuf,
    pub vm_bin: PathBuf,
    pub pg_admin_url: String,
}

/// Raw measurements of one run, turned into figures by `Measured::new`.
pub struct Raw {
    pub label: &'static str,
    /// Timed window: first request to last success (VictoriaMetrics: to the end of force_flush).
    pub wall: Duration,
    /// First request to last success, without any flush.
    pub wall_to_last_ack: Duration,
    pub server_cpu_s: f64,
    /// PostgreSQL processes' CPU during the window (PostgreSQL backend only).
    pub db_cpu_s: Option<f64>,
    pub client_cpu_s: f64,
    pub machine_busy_pct: f64,
    /// Server CPU seconds by thread name, busiest first.
    pub server_threads: Vec<(String, f64)>,
    pub peak_rss_bytes: u64,
    pub load_before: String,
    /// GPU-samples found stored.
    pub verified: u64,
    pub verify_method: String,
}

/// The figures of one backend.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub backend: String,
    pub requests: usize,
    pub gpu_samples: u64,
    /// Stored values: Fleetlens one row per GPU-sample; VictoriaMetrics 22 datapoints per GPU-sample.
    pub datapoints: u64,
    pub wall_s: f64,
    pub wall_to_last_ack_s: f64,
    pub gpu_samples_per_s: f64,
    pub datapoints_per_s: f64,
    pub server_cpu_s: f64,
    /// Server CPU seconds by thread name during the window, busiest first.
    pub server_cpu_s_by_thread: Vec<(String, f64)>,
    /// Server CPU over the wall time, % of one core.
    pub server_cpu_pct_of_core: f64,
    pub db_cpu_s: Option<f64>,
    /// (server + database) CPU per GPU-sample, microseconds.
    pub cpu_us_per_sample: f64,
    pub client_cpu_s: f64,
    /// Whole machine busy during the window, % of all cores (includes anything else running).
    pub machine_busy_pct: f64,
    pub peak_rss_mib: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_max_ms: f64,
    /// Compressed request body bytes per GPU-sample (gzip; remote write: snappy; HTTP headers
    /// not counted).
    pub wire_bytes_per_sample: f64,
    /// Uncompressed body bytes per GPU-sample (JSON; remote write: protobuf).
    pub decoded_bytes_per_sample: f64,
    pub verified_gpu_samples: u64,
    pub verify_method: String,
    pub load_before: String,
}

impl Measured {
    pub fn new(raw: Raw, bodies: &[Body], sent: &Sent) -> Measured {
        let gpu_samples: u64 = bodies.iter().map(|b| b.samples as u64).sum();
        let datapoints: u64 = bodies.iter().map(|b| b.datapoints as u64).sum();
        let wire: u64 = bodies.iter().map(|b| b.wire.len() as u64).sum();
        let decoded: u64 = bodies.iter().map(|b| b.decoded_len as u64).sum();
        let wall = raw.wall.as_secs_f64().max(1e-9);
        let per = |x: u64| x as f64 / gpu_samples.max(1) as f64;
        Measured {
            backend: raw.label.into(),
            requests: bodies.len(),
            gpu_samples,
            datapoints,
            wall_s: wall,
            wall_to_last_ack_s: raw.wall_to_last_ack.as_secs_f64(),
            gpu_samples_per_s: gpu_samples as f64 / wall,
            datapoints_per_s: datapoints as f64 / wall,
            server_cpu_s: raw.server_cpu_s,
            server_cpu_s_by_thread: raw.server_threads,
            server_cpu_pct_of_core: 100.0 * raw.server_cpu_s / wall,
            db_cpu_s: raw.db_cpu_s,
            cpu_us_per_sample: 1e6 * (raw.server_cpu_s + raw.db_cpu_s.unwrap_or(0.0)) / gpu_samples.max(1) as f64,
            client_cpu_s: raw.client_cpu_s,
            machine_busy_pct: raw.machine_busy_pct,
            peak_rss_mib: raw.peak_rss_bytes as f64 / (1024.0 * 1024.0),
            latency_p50_ms: percentile_ms(&sent.latencies, 50.0),
            latency_p99_ms: percentile_ms(&sent.latencies, 99.0),
            latency_max_ms: percentile_ms(&sent.latencies, 100.0),
            wire_bytes_per_sample: per(wire),
            decoded_bytes_per_sample: per(decoded),
            verified_gpu_samples: raw.verified,
            verify_method: raw.verify_method,
            load_before: raw.load_before,
        }
    }
}

/// Fleetlens backend against VictoriaMetrics.
#[derive(Debug, Clone, Serialize)]
struct Ratio {
    backend: String,
    /// GPU-samples/s, Fleetlens / VictoriaMetrics.
    throughput: f64,
    /// CPU µs per GPU-sample (server, plus PostgreSQL), Fleetlens / VictoriaMetrics.
    cpu_per_sample: f64,
    /// Peak RSS, Fleetlens / VictoriaMetrics.
    peak_rss: f64,
    /// Wire bytes per GPU-sample, Fleetlens / VictoriaMetrics.
    wire_bytes: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    command: String,
    gpus: usize,
    samples_per_gpu: usize,
    batch: usize,
    timestamps_per_request: usize,
    concurrency: usize,
    interval_ms: i64,
    vm_series_per_gpu: usize,
    cores: usize,
    load_at_start: String,
    results: Vec<Measured>,
    ratios_vs_victoria_metrics: Vec<Ratio>,
    failures: Vec<String>,
}

pub fn http_client(concurrency: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(concurrency.max(1))
        .timeout(Duration::from_secs(600))
        .build()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    match real_main().await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("ingest-bench: {e:#}");
            std::process::exit(2);
        }
    }
}

/// Ok(false): some backend failed (reported), the others' figures were printed.
async fn real_main() -> Result<bool> {
    let args = Args::parse();
    if args.gpus == 0 || args.samples == 0 || args.batch == 0 || args.concurrency == 0 {
        bail!("--gpus, --samples, --batch and --concurrency must be positive");
    }
    let backends: Vec<BackendArg> = match args.backend {
        BackendArg::All => vec![
            BackendArg::Sqlite,
            BackendArg::Postgres,
            BackendArg::SqliteJson,
            BackendArg::PostgresJson,
            BackendArg::RemoteWriteSqlite,
            BackendArg::RemoteWritePostgres,
            BackendArg::VictoriaMetrics,
        ],
        b => vec![b],
    };
    let settings = Settings {
        concurrency: args.concurrency,
        server_bin: args.server_bin.clone(),
        vm_bin: args.vm_bin.clone().unwrap_or_else(vm::default_bin),
        pg_admin_url: args.pg_url.clone(),
    };
    let runs_fleetlens = backends.iter().any(|b| *b != BackendArg::VictoriaMetrics);
    if runs_fleetlens && !settings.server_bin.is_file() {
        bail!(
            "{} not found: build it with `cargo build --release -p fleetlens-server` or pass --server-bin",
            settings.server_bin.display()
        );
    }
    if backends.contains(&BackendArg::VictoriaMetrics) && !settings.vm_bin.is_file() {
        bail!("{} not found: `apt-get install -y victoria-metrics` or pass --vm-bin", settings.vm_bin.display());
    }

    // Samples end an hour ago: inside every retention, never "in the future", and older than
    // VictoriaMetrics' query latency offset.
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let span_ms = args.samples as i64 * INTERVAL_MS;
    let base_ts_ms = (now_ms - 3_600_000 - span_ms) / 60_000 * 60_000;
    let plan = Plan {
        gpus: args.gpus,
        samples_per_gpu: args.samples,
        ts_per_batch: (args.batch / GPUS_PER_HOST).max(1),
        base_ts_ms,
    };
    let load_at_start = procstat::load_average();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    eprintln!("$ {command}");
    eprintln!(
        "plan: {} GPUs on {} hosts × {} samples = {} GPU-samples; {} requests of ≤{} samples ({} GPUs × {} timestamps), {} in flight; {} cores, load {}",
        plan.gpus,
        plan.hosts(),
        plan.samples_per_gpu,
        plan.total_samples(),
        plan.batches().len(),
        GPUS_PER_HOST.min(plan.gpus) * plan.ts_per_batch.min(plan.samples_per_gpu),
        GPUS_PER_HOST.min(plan.gpus),
        plan.ts_per_batch.min(plan.samples_per_gpu),
        args.concurrency,
        procstat::cores(),
        load_at_start
    );

    let t = Instant::now();
    let runs = |intake: Intake| backends.iter().any(|b| b.fleetlens().is_some_and(|(_, i)| i == intake));
    let agent_bodies = |format: WireFormat| {
        if runs(Intake::Agent(format)) { data::fleetlens_bodies(&plan, format) } else { Vec::new() }
    };
    let (fl_bodies, json_bodies) = (agent_bodies(WireFormat::Protobuf), agent_bodies(WireFormat::Json));
    let rw_bodies = if runs(Intake::RemoteWrite) { data::remote_write_bodies(&plan)? } else { Vec::new() };
    let vm_bodies = if backends.contains(&BackendArg::VictoriaMetrics) { data::vm_bodies(&plan)? } else { Vec::new() };
    eprintln!("request bodies built and gzipped in {:.1} s (not timed)", t.elapsed().as_secs_f64());

    let mut results = Vec::new();
    let mut failures = Vec::new();
    for b in &backends {
        let (outcome, label) = match b.fleetlens() {
            Some((db, intake)) => {
                let bodies = match intake {
                    Intake::Agent(WireFormat::Protobuf) => &fl_bodies,
                    Intake::Agent(WireFormat::Json) => &json_bodies,
                    Intake::RemoteWrite => &rw_bodies,
                };
                (fleetlens::run(db, intake, &settings, bodies).await, db.label(intake))
            }
            None => (vm::run(&settings, &plan, &vm_bodies).await, vm::LABEL),
        };
        match outcome {
            Ok(m) => {
                eprintln!("[{label}] {:.0} GPU-samples/s in {:.2} s", m.gpu_samples_per_s, m.wall_s);
                results.push(m);
            }
            Err(e) => {
                eprintln!("[{label}] FAILED: {e:#}");
                failures.push(format!("{label}: {e:#}"));
            }
        }
    }

    let ratios = ratios(&results);
    let report = Report {
        command,
        gpus: plan.gpus,
        samples_per_gpu: plan.samples_per_gpu,
        batch: args.batch,
        timestamps_per_request: plan.ts_per_batch.min(plan.samples_per_gpu),
        concurrency: args.concurrency,
        interval_ms: INTERVAL_MS,
        vm_series_per_gpu: VM_FIELDS.len(),
        cores: procstat::cores(),
        load_at_start,
        results,
        ratios_vs_victoria_metrics: ratios,
        failures,
    };
    print!("{}", markdown(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("figures written to {}", path.display());
    }
    Ok(report.failures.is_empty())
}

fn ratios(results: &[Measured]) -> Vec<Ratio> {
    let Some(vm) = results.iter().find(|m| m.backend == vm::LABEL) else { return Vec::new() };
    results
        .iter()
        .filter(|m| m.backend != vm::LABEL)
        .map(|m| Ratio {
            backend: m.backend.clone(),
            throughput: m.gpu_samples_per_s / vm.gpu_samples_per_s,
            cpu_per_sample: m.cpu_us_per_sample / vm.cpu_us_per_sample,
            peak_rss: m.peak_rss_mib / vm.peak_rss_mib,
            wire_bytes: m.wire_bytes_per_sample / vm.wire_bytes_per_sample,
        })
        .collect()
}

fn markdown(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "\n## Ingest benchmark\n");
    let _ = writeln!(
        s,
        "{} GPUs × {} samples = {} GPU-samples per backend; requests of one host (8 GPUs × {} timestamps), {} in flight; {} cores, load at start {}.\n",
        r.gpus,
        r.samples_per_gpu,
        r.gpus * r.samples_per_gpu,
        r.timestamps_per_request,
        r.concurrency,
        r.cores,
        r.load_at_start
    );
    let _ = writeln!(
        s,
        "| backend | GPU-samples/s | datapoints/s | wall s | p50 ms | p99 ms | server CPU s | server CPU % of 1 core | DB CPU s | CPU µs/sample | peak RSS MiB | wire B/sample | decoded B/sample | machine busy % | load before | verified |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|");
    for m in &r.results {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} | {} | {:.2} | {:.0} | {:.1} | {:.0} | {:.0} | {} | {} |",
            m.backend,
            m.gpu_samples_per_s,
            m.datapoints_per_s,
            m.wall_s,
            m.latency_p50_ms,
            m.latency_p99_ms,
            m.server_cpu_s,
            m.server_cpu_pct_of_core,
            m.db_cpu_s.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into()),
            m.cpu_us_per_sample,
            m.peak_rss_mib,
            m.wire_bytes_per_sample,
            m.decoded_bytes_per_sample,
            m.machine_busy_pct,
            m.load_before,
            m.verified_gpu_samples
        );
    }
    if !r.ratios_vs_victoria_metrics.is_empty() {
        let _ = writeln!(s, "\n| Fleetlens / VictoriaMetrics | throughput | CPU per sample | peak RSS | wire bytes |");
        let _ = writeln!(s, "|---|--:|--:|--:|--:|");
        for x in &r.ratios_vs_victoria_metrics {
            let _ = writeln!(
                s,
                "| {} | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
                x.backend, x.throughput, x.cpu_per_sample, x.peak_rss, x.wire_bytes
            );
        }
    }
    let _ = writeln!(s);
    for m in &r.results {
        let target = match m.backend.as_str() {
            "fleetlens-sqlite" => Some(100_000.0),
            "fleetlens-postgres" => Some(150_000.0),
            _ => None,
        };
        if let Some(t) = target {
            let verdict = if m.gpu_samples_per_s >= t { "met" } else { "NOT met" };
            let _ = writeln!(
                s,
                "- {}: {:.0} GPU-samples/s against the goal of {:.0}: {verdict}.",
                m.backend, m.gpu_samples_per_s, t
            );
        }
    }
    let _ = writeln!(
        s,
        "- Fleetlens: wall time = first request to last 200 (each 200 means committed); verified by {}.",
        r.results
            .iter()
            .find(|m| m.backend != vm::LABEL)
            .map(|m| m.verify_method.as_str())
            .unwrap_or("SELECT count(*) FROM open_sample_rows")
    );
    if let Some(vm) = r.results.iter().find(|m| m.backend == vm::LABEL) {
        let _ = writeln!(
            s,
            "- VictoriaMetrics: {} series per GPU (all numeric fields but fp64 and the identity; no process list); wall time includes /internal/force_flush (last 204 at {:.2} s); verified by {}.",
            r.vm_series_per_gpu, vm.wall_to_last_ack_s, vm.verify_method
        );
    }
    for m in &r.results {
        let threads: Vec<String> = m
            .server_cpu_s_by_thread
            .iter()
            .map(|(name, secs)| format!("{name} {secs:.2} s ({:.0}% of a core)", 100.0 * secs / m.wall_s))
            .collect();
        let _ = writeln!(s, "- {} server threads: {}.", m.backend, threads.join(", "));
    }
    let _ = writeln!(
        s,
        "- CPU µs/sample = (server + PostgreSQL processes) CPU / GPU-samples; machine busy % covers all cores and everything running, the bench client included."
    );
    for f in &r.failures {
        let _ = writeln!(s, "- FAILED {f}");
    }
    s
}
