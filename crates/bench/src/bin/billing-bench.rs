//! Billing report benchmark (issue 6: "10,000 GPUs × 30 days in < 1 s").
//!
//! The server is started once to create the schema, stopped, and the database is filled
//! directly with what 30 days of ingest would have left: N GPUs (in hosts of 8, a quarter of
//! the hosts assigned to each of 4 teams) and one hour-credit rollup row per GPU per hour (the
//! hour's seconds spread over the workload states by GPU and hour, energy, utilization sums),
//! and the day credits (`credits_1d`) summed from those hours the way migration 0007 backfills
//! them (ingest keeps them in step).
//! Then the server is started again and the real endpoint is timed over HTTP:
//! `GET /api/v1/reports/billing?from=&to=&group_by=…&format=json|csv`, a 30-day period that
//! ends now (both edges are partial hours, pro-rated).
//!
//! cargo build --release -p fleetlens-server -p fleetlens-bench
//! target/release/billing-bench --backend sqlite --gpus 10000 --days 30

use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use fleetlens_bench::child::ChildGuard;
use fleetlens_bench::scratch::{ScratchDb, percentile, start_server};
use fleetlens_core::WorkloadState;
use sqlx::Connection;

#[derive(Parser, Debug)]
struct Args {
    /// sqlite or postgres.
    #[arg(long, default_value = "sqlite")]
    backend: String,
    #[arg(long, default_value_t = 10_000)]
    gpus: i64,
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// Timed requests per report variant.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    #[arg(long, default_value = "target/release/fleetlens-server")]
    server_bin: String,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_admin: String,
    /// Keep the filled database (SQLite: its directory; PostgreSQL: the database) for profiling.
    #[arg(long)]
    keep: bool,
}

const TOKEN: &str = "fl_bench_billing_token_0123456789";
const HOUR_MS: i64 = 3_600_000;

/// The server on `db_url`, killed when dropped, and its base URL.
fn start(bin: &str, db_url: &str) -> Result<(ChildGuard, String)> {
    start_server(bin, db_url, TOKEN, &[])
}

/// The credit columns of an hour row, as SQL expressions of `g` (GPU id) and `h` (hour index):
/// each GPU spends the hour in one state that rotates with the hour, so every state has time.
fn credit_exprs() -> Vec<(String, String)> {
    let states = WorkloadState::ALL;
    let n = states.len();
    let mut cols = Vec::new();
    let waste = |s: &str| match s {
        "idle" | "idle_held" | "stalled" | "offline" => "1.0",
        "hollow" | "starved" => "0.5",
        "low_occupancy" => "0.25",
        _ => "0.0",
    };
    for (i, s) in states.iter().enumerate() {
        let s = s.as_str();
        let on = format!("CASE WHEN (g + h) % {n} = {i} THEN 1.0 ELSE 0.0 END");
        cols.push((format!("c_s_{s}"), format!("3600.0 * {on}")));
        cols.push((format!("c_w_{s}"), format!("3600.0 * {} * {on}", waste(s))));
        cols.push((format!("c_e_{s}"), format!("(100.0 + (g % 7) * 80.0) * 3600.0 * {on}")));
    }
    cols.push(("c_allocated_s".into(), "CASE WHEN (g + h) % 5 = 0 THEN 0.0 ELSE 3600.0 END".into()));
    cols.push(("c_allocation_covered_s".into(), "3600.0".into()));
    cols.push(("c_util_pct_s".into(), "((g * 7 + h * 13) % 101) * 3600.0".into()));
    cols.push(("c_util_covered_s".into(), "3600.0".into()));
    cols.push(("c_sm_pct_s".into(), "((g * 3 + h * 5) % 61) * 3600.0".into()));
    cols.push(("c_sm_covered_s".into(), "3600.0".into()));
    cols.push(("c_tensor_pct_s".into(), "((g + h) % 31) * 3600.0".into()));
    cols.push(("c_tensor_covered_s".into(), "CASE WHEN g % 4 = 0 THEN 0.0 ELSE 3600.0 END".into()));
    cols
}

async fn fill(args: &Args, db_url: &str, first_hour_ms: i64, hours: i64, now: i64) -> Result<()> {
    let first_seen = first_hour_ms + 17 * 60_000 + 123;
    let models = "CASE WHEN g % 3 = 0 THEN 'NVIDIA A100-SXM4-80GB' ELSE 'NVIDIA H100 80GB HBM3' END";
    let (cols, exprs): (Vec<String>, Vec<String>) = credit_exprs().into_iter().unzip();
    let pg = args.backend == "postgres";
    let (gpu_seq, hour_seq) = if pg {
        (
            format!("SELECT generate_series(1, {}) AS g", args.gpus),
            format!("SELECT generate_series(0, {}) AS h", hours - 1),
        )
    } else {
        (
            format!(
                "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {}) SELECT g FROM s",
                args.gpus
            ),
            format!(
                "WITH RECURSIVE s(h) AS (SELECT 0 UNION ALL SELECT h + 1 FROM s WHERE h < {}) SELECT h FROM s",
                hours - 1
            ),
        )
    };
    let teams = "INSERT INTO teams (org_id, name, created_ms) VALUES (1, 'team-a', 0), (1, 'team-b', 0), \
                 (1, 'team-c', 0), (1, 'team-d', 0)";
    let gpus = format!(
        "INSERT INTO gpus (id, org_id, uuid, host, gpu_index, name, mem_total_bytes, power_limit_w, first_seen_ms, \
         last_seen_ms, team_id, team_source) \
         SELECT g, 1, 'GPU-bench-' || g, 'bench-node-' || ((g - 1) / 8), (g - 1) % 8, {models}, 85899345920, 700.0, \
         {first_seen}, {last_seen}, (SELECT id FROM teams WHERE name = 'team-' || chr_team), 'admin' FROM \
         (SELECT g, CASE ((g - 1) / 8) % 4 WHEN 0 THEN 'a' WHEN 1 THEN 'b' WHEN 2 THEN 'c' ELSE 'd' END AS chr_team \
          FROM ({gpu_seq}) gs) x",
        last_seen = now - 20_000,
    );
    let rollups = format!(
        "INSERT INTO rollups_1h (gpu_id, bucket_ms, sample_count, allocated_count, processes_read_count, \
         first_ts_ms, last_ts_ms, {}) \
         SELECT g, {first_hour_ms} + CAST(h AS BIGINT) * {HOUR_MS}, 360, 300, 360, {first_hour_ms} + CAST(h AS BIGINT) * {HOUR_MS}, \
         {first_hour_ms} + CAST(h AS BIGINT) * {HOUR_MS} + 3590000, {} FROM ({gpu_seq}) gs CROSS JOIN ({hour_seq}) hs",
        cols.join(", "),
        exprs.join(", "),
    );
    // The day credits: the sums of each GPU's hours per UTC day (migration 0007's backfill).
    let credit_cols = fleetlens_core::Credit::column_names();
    let days = format!(
        "INSERT INTO credits_1d (gpu_id, day_ms, {}) SELECT gpu_id, (bucket_ms / 86400000) * 86400000, {} \
         FROM rollups_1h GROUP BY gpu_id, (bucket_ms / 86400000) * 86400000",
        credit_cols.join(", "),
        credit_cols.iter().map(|c| format!("SUM({c})")).collect::<Vec<_>>().join(", "),
    );
    let t = Instant::now();
    if pg {
        let mut c = sqlx::PgConnection::connect(db_url).await?;
        for sql in [teams, &gpus, &rollups, &days] {
            sqlx::query(sql).execute(&mut c).await.with_context(|| sql.chars().take(200).collect::<String>())?;
        }
        sqlx::query("ANALYZE").execute(&mut c).await?;
    } else {
        let mut c = sqlx::SqliteConnection::connect(db_url).await?;
        sqlx::query("PRAGMA journal_mode=WAL").execute(&mut c).await?;
        sqlx::query("PRAGMA synchronous=OFF").execute(&mut c).await?;
        for sql in [teams, &gpus, &rollups, &days] {
            sqlx::query(sql).execute(&mut c).await.with_context(|| sql.chars().take(200).collect::<String>())?;
        }
        sqlx::query("ANALYZE").execute(&mut c).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut c).await?;
    }
    eprintln!(
        "filled {} GPUs × {hours} hour-credit rows = {} rows (and their day credits) in {:.1} s",
        args.gpus,
        args.gpus * hours,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let db = ScratchDb::create(&args.backend, &args.pg_admin, "fleetlens_bbench").await?;
    let result = run(&args, &db.url).await;
    if args.keep {
        eprintln!("kept the database: {}", db.url);
        db.keep();
        return result;
    }
    db.remove().await?;
    result
}

async fn run(args: &Args, db_url: &str) -> Result<()> {
    // First start: migrations create the schema.
    drop(start(&args.server_bin, db_url)?);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let hours = args.days * 24 + 1;
    let first_hour_ms = (now - args.days * 86_400_000).div_euclid(HOUR_MS) * HOUR_MS;
    fill(args, db_url, first_hour_ms, hours, now).await?;

    let server = start(&args.server_bin, db_url)?;
    let base = &server.1;
    let client = reqwest::Client::new();
    let from = now - args.days * 86_400_000;
    println!("| backend | GPUs × days | group_by | format | p50 ms | max ms | rows | response bytes |");
    println!("|---|---|---|---|--:|--:|--:|--:|");
    for (group_by, format) in [("gpu", "json"), ("team", "json"), ("host", "csv"), ("model", "json"), ("gpu", "csv")] {
        let url = format!("{base}/api/v1/reports/billing?from={from}&to={now}&group_by={group_by}&format={format}");
        let mut ms = Vec::new();
        let (mut rows, mut bytes) = (0, 0);
        for _ in 0..args.repeats {
            let t = Instant::now();
            let resp = client.get(&url).bearer_auth(TOKEN).send().await?;
            if !resp.status().is_success() {
                bail!("{url}: {} {}", resp.status(), resp.text().await.unwrap_or_default());
            }
            let body = resp.bytes().await?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            bytes = body.len();
            rows = if format == "csv" {
                body.iter().filter(|b| **b == b'\n').count().saturating_sub(1)
            } else {
                let v: serde_json::Value = serde_json::from_slice(&body)?;
                v["rows"].as_array().map_or(0, Vec::len)
            };
        }
        // Sanity: the report covers every GPU for the period (paid hours ≈ GPUs × days × 24).
        if group_by == "model" && format == "json" {
            let v: serde_json::Value = client.get(&url).bearer_auth(TOKEN).send().await?.json().await?;
            let hours: f64 = v["rows"].as_array().context("rows")?.iter().filter_map(|r| r["gpu_hours"].as_f64()).sum();
            let expected = args.gpus as f64 * args.days as f64 * 24.0;
            eprintln!("GPU-hours in the report: {hours:.1} (period × GPUs: {expected:.1})");
            if (hours - expected).abs() > expected * 0.01 {
                bail!("the report's GPU-hours {hours} are not the fleet's {expected}");
            }
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "| {} | {} × {} | {group_by} | {format} | {:.0} | {:.0} | {rows} | {bytes} |",
            args.backend,
            args.gpus,
            args.days,
            percentile(&ms, 0.5),
            ms[ms.len() - 1],
        );
    }
    drop(server);
    Ok(())
}
