//! Analytics read benchmark: a fleet of N simulated GPUs is loaded through HTTP ingest, then
//! the dashboard's reads are timed: `GET /api/v1/fleet/summary` for the last hour and a 24-h
//! per-GPU series (`GET /api/v1/gpus/{uuid}/series`), both served from rollups/credits.
//!
//! cargo run --release -p fleetlens-bench --bin analytics-bench -- --backend sqlite --gpus 10000

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use fleetlens_api::{GpuProcess, IngestBatch, Sample};
use fleetlens_bench::scratch::{ScratchDb, percentile, start_server};
use futures::StreamExt;
use sqlx::Connection;

#[derive(Parser, Debug)]
struct Args {
    /// sqlite or postgres.
    #[arg(long, default_value = "sqlite")]
    backend: String,
    #[arg(long, default_value_t = 10_000)]
    gpus: usize,
    /// Hours of history for every GPU.
    #[arg(long, default_value_t = 2)]
    hours: i64,
    /// Seconds between samples of the fleet-wide history.
    #[arg(long, default_value_t = 30)]
    interval_s: i64,
    /// GPUs that also get 24 h of 1-minute history, for the series reads.
    #[arg(long, default_value_t = 50)]
    series_gpus: usize,
    #[arg(long, default_value_t = 30)]
    repeats: usize,
    #[arg(long, default_value = "target/release/fleetlens-server")]
    server_bin: String,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_admin: String,
}

const TOKEN: &str = "fl_bench_analytics_token_0123456789";

fn sample(uuid: &str, i: usize, ts_ms: i64) -> Sample {
    // Behaviours rotate by GPU and by 10-minute period, so every state shows up.
    let phase = (i + (ts_ms / 600_000) as usize) % 5;
    let (util, smact, tensor, held) = match phase {
        0 => (0.0, 0.0, 0.0, false),
        1 => (0.0, 0.0, 0.0, true),
        2 => (100.0, 12.0, 0.0, true),
        3 => (30.0, 8.0, 2.0, true),
        _ => (100.0, 95.0, 88.0, true),
    };
    Sample {
        ts_ms,
        uuid: uuid.to_string(),
        gpu_index: Some((i % 8) as u32),
        name: Some(if i.is_multiple_of(3) { "NVIDIA A100-SXM4-80GB" } else { "NVIDIA H100 80GB HBM3" }.into()),
        gpu_util_pct: Some(util),
        mem_util_pct: Some(util / 3.0),
        mem_used_bytes: Some(if held { 40 << 30 } else { 0 }),
        mem_total_bytes: Some(80 << 30),
        power_w: Some(80.0 + util * 5.0),
        power_limit_w: Some(700.0),
        temp_c: Some(40.0 + util / 4.0),
        sm_clock_mhz: Some(1980.0),
        sm_active_pct: Some(smact),
        sm_occupancy_pct: Some(smact / 2.0),
        tensor_active_pct: Some(tensor),
        dram_active_pct: Some(smact / 3.0),
        processes: Some(if held {
            vec![GpuProcess { pid: 1000 + i as u32, used_bytes: Some(40 << 30), sm_pct: None, ..Default::default() }]
        } else {
            vec![]
        }),
        ..Default::default()
    }
}

/// gzip JSON bodies, one host (8 GPUs) × up to `per_batch` samples each.
fn bodies(gpus: std::ops::Range<usize>, start_ms: i64, end_ms: i64, step_ms: i64) -> Vec<Vec<u8>> {
    let hosts: Vec<Vec<usize>> = gpus.collect::<Vec<_>>().chunks(8).map(<[usize]>::to_vec).collect();
    let mut out = Vec::new();
    for host in hosts {
        let mut samples = Vec::new();
        let mut ts = start_ms;
        while ts < end_ms {
            for &g in &host {
                samples.push(sample(&format!("GPU-bench-{g:05}"), g, ts));
            }
            ts += step_ms;
            if samples.len() >= 2000 || ts >= end_ms {
                let batch = IngestBatch {
                    host: format!("bench-node-{:04}", host[0] / 8),
                    samples: std::mem::take(&mut samples),
                    ..Default::default()
                };
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&serde_json::to_vec(&batch).expect("json")).expect("gzip");
                out.push(e.finish().expect("gzip"));
            }
        }
    }
    out
}

async fn time_reads(client: &reqwest::Client, urls: &[String]) -> Result<(f64, f64, usize)> {
    let mut ms = Vec::new();
    let mut bytes = 0;
    for url in urls {
        let t = Instant::now();
        let resp = client.get(url).bearer_auth(TOKEN).send().await?;
        if !resp.status().is_success() {
            bail!("{url}: {}", resp.status());
        }
        bytes = resp.bytes().await?.len();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok((percentile(&ms, 0.5), percentile(&ms, 0.95), bytes))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let db = ScratchDb::create(&args.backend, &args.pg_admin, "fleetlens_abench").await?;
    let db_url = db.url.clone();
    let (server, base) = start_server(&args.server_bin, &db_url, TOKEN, &[])?;

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let t = Instant::now();
    let mut all = bodies(0..args.gpus, now - args.hours * 3_600_000, now, args.interval_s * 1000);
    all.extend(bodies(0..args.series_gpus, now - 24 * 3_600_000, now - args.hours * 3_600_000, 60_000));
    eprintln!("generated {} batches in {:.1} s", all.len(), t.elapsed().as_secs_f64());
    let client = reqwest::Client::new();
    let t = Instant::now();
    let url = format!("{base}/api/v1/ingest");
    let results: Vec<Result<()>> = futures::stream::iter(all)
        .map(|body| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let resp = client
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/json")
                    .header("content-encoding", "gzip")
                    .body(body)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    bail!("ingest: {}", resp.status());
                }
                Ok(())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    let samples =
        args.gpus as i64 * args.hours * 3600 / args.interval_s + args.series_gpus as i64 * (24 - args.hours) * 60;
    eprintln!("loaded {samples} samples in {:.1} s", t.elapsed().as_secs_f64());
    // Steady state: the server's rollup job has written the closed minutes (a fleet that has
    // been reporting for hours has only its last few minutes open), so wait for it.
    let t = Instant::now();
    let closed_before = now - 4 * 60_000;
    let pending_sql = format!("SELECT count(*) FROM rollup_pending WHERE minute_ms < {closed_before}");
    loop {
        let left: i64 = if db_url.starts_with("sqlite:") {
            let mut c = sqlx::SqliteConnection::connect(&db_url).await?;
            sqlx::query_scalar(&pending_sql).fetch_one(&mut c).await?
        } else {
            let mut c = sqlx::PgConnection::connect(&db_url).await?;
            sqlx::query_scalar(&pending_sql).fetch_one(&mut c).await?
        };
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("rollup job wrote the closed minutes in {:.1} s", t.elapsed().as_secs_f64());

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let summary_urls: Vec<String> =
        (0..args.repeats).map(|_| format!("{base}/api/v1/fleet/summary?from={}&to={now}", now - 3_600_000)).collect();
    let (s50, s95, sbytes) = time_reads(&client, &summary_urls).await?;
    // What a polling dashboard asks: the relative period, served from the short-lived cache
    // after the first computation.
    let polled: Vec<String> = (0..args.repeats).map(|_| format!("{base}/api/v1/fleet/summary?range=1h")).collect();
    let (p50, p95, _) = time_reads(&client, &polled).await?;
    let series_urls: Vec<String> = (0..args.repeats.max(args.series_gpus))
        .map(|i| {
            format!(
                "{base}/api/v1/gpus/GPU-bench-{:05}/series?from={}&to={now}",
                i % args.series_gpus.max(1),
                now - 24 * 3_600_000
            )
        })
        .collect();
    let (r50, r95, rbytes) = time_reads(&client, &series_urls).await?;
    let list_urls: Vec<String> = (0..5).map(|_| format!("{base}/api/v1/gpus")).collect();
    let (l50, _, lbytes) = time_reads(&client, &list_urls).await?;
    let week_urls: Vec<String> = (0..5).map(|_| format!("{base}/api/v1/fleet/summary")).collect();
    let (w50, _, _) = time_reads(&client, &week_urls).await?;
    println!("| backend | GPUs | read | p50 ms | p95 ms | response bytes |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {} | fleet summary, last hour (from/to: computed each time) | {s50:.1} | {s95:.1} | {sbytes} |",
        args.backend, args.gpus
    );
    println!(
        "| {} | {} | fleet summary `range=1h`, polled (cache ≤ 10 s) | {p50:.2} | {p95:.1} | {sbytes} |",
        args.backend, args.gpus
    );
    println!("| {} | {} | fleet summary, last 7 days (default) | {w50:.1} | – | – |", args.backend, args.gpus);
    println!(
        "| {} | {} | 24-h series of one GPU (1-min points) | {r50:.1} | {r95:.1} | {rbytes} |",
        args.backend, args.gpus
    );
    println!("| {} | {} | GPU list (all GPUs, current state) | {l50:.1} | – | {lbytes} |", args.backend, args.gpus);
    drop(server);
    db.remove().await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
