//! Live-stream benchmark (`GET /api/v1/stream`, docs/API.md "Live stream"): what open
//! dashboards cost the server, and how soon a state change at the agent reaches them.
//!
//! One release server on a fresh database; the real agent binary feeds it:
//! - `--gpus` simulated GPUs (`--source simulate:N`, 1 s readings, `--flush-interval` 5 s by
//!   default), the load every phase runs under;
//! - a latency trace: 8 GPUs of one host replayed at 1× (`--source replay:`, which flushes about
//!   every second), idle in even minutes and busy in odd ones, so each GPU's state flips at
//!   every minute boundary. A flip's latency is the time from the boundary (the first sample
//!   in the new state, read by the agent then) to the `gpu_state` event at a stream client:
//!   the agent's flush, ingest, the change signal, the feed's reading and the SSE write.
//!
//! Phases of `--window-s` each: no stream open (baseline), then `--streams` streams open (a few
//! of them never read: stalled clients), then `--many-streams` for the memory per stream. Server
//! CPU is read from /proc; RSS is the server's resident set at the end of each phase.
//!
//! cargo run --release -p fleetlens-bench --bin stream-bench -- --backend postgres --gpus 2000

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Parser;
use fleetlens_api::Sample;
use fleetlens_bench::child::ChildGuard;
use fleetlens_bench::scratch::{ScratchDb, percentile, start_server};

#[derive(Parser, Debug)]
struct Args {
    /// sqlite or postgres.
    #[arg(long, default_value = "postgres")]
    backend: String,
    /// Simulated GPUs fed by one agent.
    #[arg(long, default_value_t = 2000)]
    gpus: u32,
    /// The simulating agent's `--flush-interval`.
    #[arg(long, default_value = "5s")]
    sim_flush: String,
    /// Streams of the dashboard phase.
    #[arg(long, default_value_t = 50)]
    streams: usize,
    /// Of those, streams that never read (stalled clients).
    #[arg(long, default_value_t = 5)]
    stalled: usize,
    /// Streams of the memory phase.
    #[arg(long, default_value_t = 500)]
    many_streams: usize,
    /// Seconds each phase is measured over.
    #[arg(long, default_value_t = 60)]
    window_s: u64,
    #[arg(long, default_value = "target/release/fleetlens-server")]
    server_bin: String,
    #[arg(long, default_value = "target/release/fleetlens-agent")]
    agent_bin: String,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_admin: String,
}

const TOKEN: &str = "fl_bench_stream_token_0123456789abcdef";
const LATENCY_HOST: &str = "latency-node";
const LATENCY_GPUS: u32 = 8;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// utime + stime of `pid`, seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest: Vec<&str> = text[text.rfind(')').context("stat")? + 1..].split_whitespace().collect();
    let ticks: u64 = rest[11].parse::<u64>()? + rest[12].parse::<u64>()?;
    Ok(ticks as f64 / 100.0)
}

/// Resident set of `pid`, bytes.
fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("VmRSS value")?.parse::<u64>()? * 1024)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The latency trace: `minutes` whole minutes from the next minute boundary back to `start_ms`.
fn write_trace(path: &std::path::Path, start_ms: i64, minutes: i64) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let end = (start_ms / 60_000 + 1 + minutes) * 60_000;
    let mut ts = start_ms;
    while ts < end {
        let busy = (ts / 60_000) % 2 == 1;
        for g in 0..LATENCY_GPUS {
            let s = Sample {
                ts_ms: ts,
                uuid: format!("GPU-latency-{g}"),
                gpu_index: Some(g),
                name: Some("NVIDIA H100 80GB HBM3".into()),
                gpu_util_pct: Some(if busy { 100.0 } else { 0.0 }),
                sm_active_pct: Some(if busy { 95.0 } else { 0.0 }),
                sm_occupancy_pct: Some(if busy { 60.0 } else { 0.0 }),
                tensor_active_pct: Some(if busy { 80.0 } else { 0.0 }),
                dram_active_pct: Some(if busy { 30.0 } else { 0.0 }),
                mem_used_bytes: Some(if busy { 40 << 30 } else { 0 }),
                mem_total_bytes: Some(80 << 30),
                power_w: Some(if busy { 650.0 } else { 70.0 }),
                power_limit_w: Some(700.0),
                processes: Some(if busy {
                    vec![fleetlens_api::GpuProcess { pid: 4242, used_bytes: Some(40 << 30), ..Default::default() }]
                } else {
                    vec![]
                }),
                ..Default::default()
            };
            let mut line = serde_json::to_value(&s)?;
            line["host"] = LATENCY_HOST.into();
            writeln!(out, "{line}")?;
        }
        ts += 1000;
    }
    Ok(())
}

/// What the stream clients saw.
#[derive(Default)]
struct Seen {
    events: AtomicU64,
    bytes: AtomicU64,
    resyncs: AtomicU64,
    /// (uuid, state, receive time) of the latency host's `gpu_state` events.
    flips: Mutex<Vec<(String, String, i64)>>,
}

/// Open a stream (200 or an error).
async fn open(client: &reqwest::Client, base: &str) -> Result<reqwest::Response> {
    let resp = client.get(format!("{base}/api/v1/stream")).bearer_auth(TOKEN).send().await?;
    if !resp.status().is_success() {
        bail!("stream: {} {}", resp.status(), resp.text().await.unwrap_or_default());
    }
    Ok(resp)
}

/// Read a stream to its end, counting events (and recording the latency host's flips).
async fn consume(mut resp: reqwest::Response, seen: Arc<Seen>, record_flips: bool) {
    let mut buf = String::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let at = now_ms();
        seen.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("");
            if name.is_empty() {
                continue;
            }
            seen.events.fetch_add(1, Ordering::Relaxed);
            if name == "resync" {
                seen.resyncs.fetch_add(1, Ordering::Relaxed);
            }
            if record_flips && block.contains(LATENCY_HOST) {
                let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("{}");
                let v: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
                // A change comes as `gpu_state`, or inside a `resync` when the fleet's changes of
                // one reading overflowed the ring (a minute boundary flips many GPUs at once).
                let gpus = match name {
                    "gpu_state" => vec![v],
                    "resync" => v["gpus"].as_array().cloned().unwrap_or_default(),
                    _ => vec![],
                };
                let mut flips = seen.flips.lock().unwrap();
                for g in gpus.iter().filter(|g| g["host"] == LATENCY_HOST) {
                    let (uuid, state) = (g["uuid"].as_str().unwrap_or(""), g["state"].as_str().unwrap_or(""));
                    flips.push((uuid.to_string(), state.to_string(), at));
                }
            }
        }
    }
}

/// Server CPU (cores) and RSS over a window.
async fn measure(pid: u32, window: Duration) -> Result<(f64, u64)> {
    let c0 = cpu_seconds(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let cores = (cpu_seconds(pid)? - c0) / t0.elapsed().as_secs_f64();
    Ok((cores, rss_bytes(pid)?))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let db = ScratchDb::create(&args.backend, &args.pg_admin, "fleetlens_sbench").await?;
    let result = run(&args, &db.url, db.dir()).await;
    db.remove().await?;
    result
}

async fn run(args: &Args, db_url: &str, dir: &std::path::Path) -> Result<()> {
    let cap = (args.many_streams + args.streams + 10).to_string();
    let caps = ["--max-streams-per-key", &cap, "--max-streams-per-org", &cap];
    let (server, base) = start_server(&args.server_bin, db_url, TOKEN, &caps)?;
    let pid = server.pid();
    let agent = |source: &str, extra: &[&str], spool: &str| -> Result<ChildGuard> {
        let spool = dir.join(spool);
        let child = Command::new(&args.agent_bin)
            .args(["--server", &base, "--api-key", TOKEN, "--source", source])
            .arg("--spool-dir")
            .arg(&spool)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("spawn {}", args.agent_bin))?;
        Ok(ChildGuard { child, what: args.agent_bin.clone() })
    };
    let _sim = agent(
        &format!("simulate:{}", args.gpus),
        &["--interval", "1s", "--flush-interval", &args.sim_flush],
        "spool-sim",
    )?;
    // The latency trace runs through every phase (and a little beyond).
    let phases_s = args.window_s * 4 + 90;
    let trace = dir.join("latency.jsonl");
    let trace_start = now_ms() / 1000 * 1000;
    write_trace(&trace, trace_start, phases_s.div_ceil(60) as i64 + 1)?;
    let _replay = agent(&format!("replay:{}", trace.display()), &["--speed", "1"], "spool-replay")?;
    let client = reqwest::Client::new();
    eprintln!("server pid {pid} at {base}; agents started; warming up 30 s");
    tokio::time::sleep(Duration::from_secs(30)).await;

    let (none_cpu, none_rss) = measure(pid, Duration::from_secs(args.window_s)).await?;
    eprintln!("no stream: server {:.1} % of a core, RSS {:.1} MiB", none_cpu * 100.0, mib(none_rss));

    // The latency client: open from here on.
    let seen_latency = Arc::new(Seen::default());
    tokio::spawn(consume(open(&client, &base).await?, seen_latency.clone(), true));
    let latency_from = now_ms();

    let (idle_cpu, idle_rss) = measure(pid, Duration::from_secs(args.window_s)).await?;
    eprintln!("1 stream: server {:.1} % of a core, RSS {:.1} MiB", idle_cpu * 100.0, mib(idle_rss));

    let seen = Arc::new(Seen::default());
    let mut stalled = Vec::new();
    for i in 0..args.streams {
        let resp = open(&client, &base).await?;
        if i < args.stalled {
            stalled.push(resp);
        } else {
            tokio::spawn(consume(resp, seen.clone(), false));
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let events0 = seen.events.load(Ordering::Relaxed);
    let (dash_cpu, dash_rss) = measure(pid, Duration::from_secs(args.window_s)).await?;
    let events = seen.events.load(Ordering::Relaxed) - events0;
    let readers = (args.streams - args.stalled) as f64;
    eprintln!(
        "{} streams ({} stalled): server {:.1} % of a core, RSS {:.1} MiB, {:.1} events/s per stream",
        args.streams + 1,
        args.stalled,
        dash_cpu * 100.0,
        mib(dash_rss),
        events as f64 / readers / args.window_s as f64
    );

    let before_many = rss_bytes(pid)?;
    let mut many = Vec::new();
    for _ in 0..args.many_streams {
        let resp = open(&client, &base).await?;
        many.push(tokio::spawn(consume(resp, seen.clone(), false)));
    }
    let (many_cpu, many_rss) = measure(pid, Duration::from_secs(args.window_s)).await?;
    let per_stream = (many_rss as f64 - before_many as f64) / args.many_streams as f64;
    eprintln!(
        "{} streams: server {:.1} % of a core, RSS {:.1} MiB ({:.1} KiB per added stream)",
        args.streams + args.many_streams + 1,
        many_cpu * 100.0,
        mib(many_rss),
        per_stream / 1024.0
    );
    drop(stalled);
    for task in many {
        task.abort();
    }

    let mut latencies = Vec::new();
    let flips = seen_latency.flips.lock().unwrap().clone();
    let first_boundary = (trace_start / 60_000 + 1) * 60_000;
    let mut boundary = first_boundary.max((latency_from / 60_000 + 1) * 60_000);
    while boundary < now_ms() - 10_000 {
        let want = if (boundary / 60_000) % 2 == 1 { "busy" } else { "idle" };
        for g in 0..LATENCY_GPUS {
            let uuid = format!("GPU-latency-{g}");
            let arrived = flips
                .iter()
                .filter(|(u, state, at)| *u == uuid && *at >= boundary && (state == "idle") == (want == "idle"))
                .map(|(_, _, at)| *at)
                .min();
            match arrived {
                Some(at) if at - boundary < 60_000 => latencies.push((at - boundary) as f64 / 1000.0),
                _ => eprintln!("no flip of {uuid} after {boundary}"),
            }
        }
        boundary += 60_000;
    }
    if latencies.is_empty() {
        bail!("no state change reached the stream");
    }
    latencies.sort_by(f64::total_cmp);
    println!("| backend | GPUs | streams | server CPU | server RSS | note |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {} | 0 | {:.1} % of a core | {:.1} MiB | baseline: ingest of the simulated fleet, no stream |",
        args.backend,
        args.gpus + LATENCY_GPUS,
        none_cpu * 100.0,
        mib(none_rss)
    );
    println!(
        "| {} | {} | 1 | {:.1} % of a core | {:.1} MiB | one stream: the organisation's feed reads and diffs |",
        args.backend,
        args.gpus + LATENCY_GPUS,
        idle_cpu * 100.0,
        mib(idle_rss)
    );
    println!(
        "| {} | {} | {} ({} stalled) | {:.1} % of a core | {:.1} MiB | {:.1} events/s per reading stream, {} resyncs |",
        args.backend,
        args.gpus + LATENCY_GPUS,
        args.streams + 1,
        args.stalled,
        dash_cpu * 100.0,
        mib(dash_rss),
        events as f64 / readers / args.window_s as f64,
        seen.resyncs.load(Ordering::Relaxed)
    );
    println!(
        "| {} | {} | {} | {:.1} % of a core | {:.1} MiB | {:.1} KiB of RSS per added stream |",
        args.backend,
        args.gpus + LATENCY_GPUS,
        args.streams + args.many_streams + 1,
        many_cpu * 100.0,
        mib(many_rss),
        per_stream / 1024.0
    );
    println!(
        "state change at the agent → `gpu_state` at a stream: p50 {:.2} s, p95 {:.2} s, max {:.2} s over {} flips",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.95),
        latencies.last().unwrap(),
        latencies.len()
    );
    drop(server);
    Ok(())
}
