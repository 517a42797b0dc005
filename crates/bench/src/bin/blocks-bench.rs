//! Raw samples at rest (issue 21): the codec comparison and the bytes per GPU-sample.
//!
//! 1. Codecs: the hours of the simulated fleet (`data.rs`, with ±25 ms of timestamp jitter per
//!    sample) and the recorded H100/H200 traces, each GPU-hour encoded (a) as the store seals it
//!    (pco per column, `fleetlens_store::encode_block`) and (b) as zlib level 9 over the same
//!    columns at the same stored precision, delta-encoded (timestamps delta-of-delta), zigzag
//!    varints: the "zstd over deltas" family, with the codec already in the workspace.
//! 2. At rest: `--gpus` GPUs × one hour ingested through the store (in process), sealed, then
//!    the database measured: SQLite after a checkpoint and VACUUM (the file), PostgreSQL after
//!    VACUUM (`pg_database_size` and per table).
//!
//! cargo build --release -p fleetlens-bench --bin blocks-bench
//! target/release/blocks-bench --gpus 1000 --backend all

#[allow(dead_code)]
#[path = "../data.rs"]
mod data;

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use fleetlens_core::Sample;
use sqlx::Connection;

#[derive(Parser, Debug)]
struct Args {
    /// sqlite, postgres, all, or none (the codec comparison only).
    #[arg(long, default_value = "all")]
    backend: String,
    #[arg(long, default_value_t = 1000)]
    gpus: usize,
    /// GPUs of the simulated fleet in the codec comparison.
    #[arg(long, default_value_t = 200)]
    codec_gpus: usize,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_admin: String,
    /// The server binary that answers `GET /gpus/{uuid}/samples` over the sealed database
    /// (skipped when it does not exist). Repeat the flag to compare builds on the same
    /// database: each is started in turn and read the same way.
    #[arg(long, default_value = "target/release/fleetlens-server")]
    server_bin: Vec<String>,
    /// Which parts run: `at-rest` (bytes and reads of `--gpus` GPUs × 1 h), `series` (24-h
    /// series over rows and packed hours), `vm` (VictoriaMetrics' bytes), comma-separated.
    #[arg(long, default_value = "at-rest,series,vm")]
    phases: String,
    /// GPUs with 24 hours of 1-Hz samples for the 24-h series reads (minute rows, then packed).
    #[arg(long, default_value_t = 20)]
    series_gpus: usize,
    /// Instead of everything else: a day of sealed blocks of this many GPUs (24 realistic
    /// one-hour blocks each) in PostgreSQL, then the retention pass that drops the day.
    #[arg(long)]
    drop_day_gpus: Option<usize>,
    /// VictoriaMetrics single-node binary fed the same samples (`--backend all` or `vm`).
    #[arg(long, default_value = "/usr/bin/victoria-metrics")]
    vm_bin: std::path::PathBuf,
    /// The samples of the `at-rest` and `vm` phases: the simulated fleet, or the recorded
    /// H100 and H200 traces (tests/fixtures) tiled over every GPU, each GPU shifted along them.
    #[arg(long, value_enum, default_value = "simulated")]
    data: Fleet,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Fleet {
    Simulated,
    Traces,
}

/// The recorded traces one after the other, with an energy counter that keeps counting where
/// a trace starts again (a GPU's counter never goes back).
struct Tiles {
    samples: Vec<Sample>,
    /// The energy counted from the first sample to each, J.
    energy_j: Vec<f64>,
    /// The energy of one pass over all of them, J.
    cycle_j: f64,
}

impl Tiles {
    fn load() -> Result<Self> {
        let samples: Vec<Sample> = recorded_traces()?.into_iter().flatten().collect();
        let mut energy_j = Vec::with_capacity(samples.len());
        let (mut total, mut steps, mut last) = (0.0, 0usize, None::<f64>);
        for s in &samples {
            if let (Some(e), Some(l)) = (s.energy_j, last)
                && e >= l
            {
                total += e - l;
                steps += 1;
            }
            last = s.energy_j.or(last);
            energy_j.push(total);
        }
        // The join from the last sample to the first counts as a mean step.
        let step = total / steps.max(1) as f64;
        Ok(Tiles { cycle_j: total + step, energy_j, samples })
    }

    /// Sample `t` of GPU `g`: the recording at `g`'s own offset along the tiles, at the plan's
    /// time of `t` plus the recording's own offset within its second.
    fn sample(&self, plan: &data::Plan, g: usize, t: usize) -> Sample {
        let identity = data::sample(plan, g, t);
        let i = g * 131 + t;
        let (pass, k) = (i / self.samples.len(), i % self.samples.len());
        let recorded = &self.samples[k];
        let energy = 5.0e6 + pass as f64 * self.cycle_j + self.energy_j[k];
        Sample {
            ts_ms: identity.ts_ms + recorded.ts_ms.rem_euclid(1000),
            uuid: identity.uuid,
            gpu_index: identity.gpu_index,
            energy_j: recorded.energy_j.map(|_| (energy * 1000.0).round() / 1000.0),
            ..recorded.clone()
        }
    }
}

/// Where the samples of the `at-rest` and `vm` phases come from ([`Fleet`]).
struct Source(Option<Tiles>);

impl Source {
    fn of(fleet: Fleet) -> Result<Self> {
        Ok(Source(match fleet {
            Fleet::Simulated => None,
            Fleet::Traces => Some(Tiles::load()?),
        }))
    }

    fn sample(&self, plan: &data::Plan, g: usize, t: usize) -> Sample {
        match &self.0 {
            None => jittered(plan, g, t),
            Some(tiles) => tiles.sample(plan, g, t),
        }
    }
}

const H: i64 = 3_600_000;

/// Sample `t` of GPU `g` of the simulated fleet, its time moved by up to ±25 ms.
fn jittered(plan: &data::Plan, g: usize, t: usize) -> Sample {
    let mut s = data::sample(plan, g, t);
    s.ts_ms += (g as i64 * 7_919 + t as i64 * 104_729) % 51 - 25;
    s
}

/// The simulated fleet's hour of GPU `g`, with per-sample jitter of up to ±25 ms.
fn simulated_hour(plan: &data::Plan, g: usize) -> Vec<Sample> {
    (0..plan.samples_per_gpu).map(|t| jittered(plan, g, t)).collect()
}

fn recorded_traces() -> Result<Vec<Vec<Sample>>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut out = Vec::new();
    for name in ["nvml-h100-truth.jsonl", "nvml-h200-phases.jsonl"] {
        let text = std::fs::read_to_string(root.join(name)).with_context(|| name.to_string())?;
        let mut v: Vec<Sample> = text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
        v.sort_by_key(|s| s.ts_ms);
        v.dedup_by_key(|s| s.ts_ms);
        out.push(v);
    }
    Ok(out)
}

/// The stored-precision scale of each real column (as docs/METRICS.md lists); 1 = exact.
fn columns(s: &Sample) -> [(Option<f64>, f64); 23] {
    [
        (s.gpu_util_pct, 100.0),
        (s.mem_util_pct, 100.0),
        (s.mem_used_bytes.map(|v| v as f64), 1.0),
        (s.mem_total_bytes.map(|v| v as f64), 1.0),
        (s.power_w, 1000.0),
        (s.power_limit_w, 1000.0),
        (s.energy_j, 1000.0),
        (s.temp_c, 100.0),
        (s.sm_clock_mhz, 10.0),
        (s.throttle_reasons.map(|v| v as f64), 1.0),
        (s.sm_active_pct, 100.0),
        (s.gr_engine_active_pct, 100.0),
        (s.sm_occupancy_pct, 100.0),
        (s.tensor_active_pct, 100.0),
        (s.dram_active_pct, 100.0),
        (s.fp16_active_pct, 100.0),
        (s.fp32_active_pct, 100.0),
        (s.fp64_active_pct, 100.0),
        (s.int_active_pct, 100.0),
        (s.pcie_tx_mib_s, 1000.0),
        (s.pcie_rx_mib_s, 1000.0),
        (s.nvlink_tx_mib_s, 1000.0),
        (s.nvlink_rx_mib_s, 1000.0),
    ]
}

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// zlib (level 9) over delta-encoded columns at the stored precision; the process lists and
/// allocations as dictionary indices, the dictionary's JSON included.
fn zlib_deltas(samples: &[Sample]) -> usize {
    let mut raw = Vec::new();
    let (mut prev_ts, mut prev_delta) = (0i64, 0i64);
    for s in samples {
        let d = s.ts_ms - prev_ts;
        varint(&mut raw, d - prev_delta);
        prev_delta = d;
        prev_ts = s.ts_ms;
    }
    for col in 0..23 {
        let mut prev = 0i64;
        for s in samples {
            let (v, scale) = columns(s)[col];
            match v {
                None => raw.push(0),
                Some(v) => {
                    raw.push(1);
                    let q = (v * scale).round() as i64;
                    varint(&mut raw, q - prev);
                    prev = q;
                }
            }
        }
    }
    let mut dict: Vec<String> = Vec::new();
    for s in samples {
        for text in [
            s.processes.as_ref().map(|p| serde_json::to_string(p).unwrap()),
            (!s.allocations.is_empty()).then(|| serde_json::to_string(&s.allocations).unwrap()),
        ] {
            let id = match text {
                None => 0,
                Some(t) => match dict.iter().position(|d| *d == t) {
                    Some(i) => i + 1,
                    None => {
                        dict.push(t);
                        dict.len()
                    }
                },
            };
            varint(&mut raw, id as i64);
        }
    }
    for d in &dict {
        raw.extend_from_slice(d.as_bytes());
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&raw).unwrap();
    z.finish().unwrap().len()
}

/// Split `samples` into GPU-hours aligned to the hour.
fn hours(samples: &[Sample]) -> Vec<&[Sample]> {
    samples.chunk_by(|a, b| a.ts_ms.div_euclid(H) == b.ts_ms.div_euclid(H)).collect()
}

fn codec_row(what: &str, blocks: &[&[Sample]]) {
    let n: usize = blocks.iter().map(|b| b.len()).sum();
    let t = Instant::now();
    let pco: usize = blocks.iter().map(|b| fleetlens_store::encode_block(b).len()).sum();
    let pco_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for b in blocks {
        let back = fleetlens_store::decode_block(&fleetlens_store::encode_block(b)).unwrap();
        assert_eq!(back.len(), b.len());
    }
    let roundtrip_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let zlib: usize = blocks.iter().map(|b| zlib_deltas(b)).sum();
    let zlib_s = t.elapsed().as_secs_f64();
    // The share of the process lists and pod allocations: the same blocks without them.
    let bare: usize = blocks
        .iter()
        .map(|b| {
            let bare: Vec<Sample> =
                b.iter().map(|s| Sample { processes: None, allocations: Vec::new(), ..s.clone() }).collect();
            fleetlens_store::encode_block(&bare).len()
        })
        .sum();
    println!(
        "| {what} | {} | {n} | {:.2} B/sample (encode {:.0} ns/sample, encode+decode {:.0} ns/sample) | {:.2} B/sample | {:.2} B/sample (encode {:.0} ns/sample) |",
        blocks.len(),
        pco as f64 / n as f64,
        pco_s * 1e9 / n as f64,
        roundtrip_s * 1e9 / n as f64,
        (pco - bare) as f64 / n as f64,
        zlib as f64 / n as f64,
        zlib_s * 1e9 / n as f64,
    );
}

async fn at_rest(args: &Args, backend: &str, plan: &data::Plan, source: &Source) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (url, pg_name) = scratch(args, backend, dir.path(), "fleetlens_blocks_bench").await?;
    let store = fleetlens_store::connect(&url).await?;
    // A running server's sealing job has prepared the hour partitions of the open tables
    // (PostgreSQL) before the hour's samples come: a pass a minute before the first sample.
    store.seal_closed_hours(plan.first_ts_ms() - 60_000, 1000).await?;
    let t = Instant::now();
    let total = (plan.gpus * plan.samples_per_gpu) as u64;
    // Each host's hour in 60-s batches, as agents would send them (8 GPUs × 60 samples).
    for start in (0..plan.samples_per_gpu).step_by(60) {
        let mut tasks = Vec::new();
        for host in 0..plan.hosts() {
            let mut batch = Vec::new();
            for g in host * data::GPUS_PER_HOST..((host + 1) * data::GPUS_PER_HOST).min(plan.gpus) {
                for t in start..(start + 60).min(plan.samples_per_gpu) {
                    batch.push(source.sample(plan, g, t));
                }
            }
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store.ingest(fleetlens_store::DEFAULT_ORG, &data::host_name(host), batch).await
            }));
            if tasks.len() == 16 {
                for task in tasks.drain(..) {
                    task.await??;
                }
            }
        }
        for task in tasks {
            task.await??;
        }
    }
    let ingest_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let now = plan.last_ts_ms() + 2 * H;
    // The rollup job writes the minutes (sealing and packing wait for it), as on a server.
    store.close_minutes(now, 120_000).await?;
    let mut sealed = fleetlens_store::SealReport::default();
    loop {
        let r = store.seal_closed_hours(now, 1000).await?;
        sealed.blocks += r.blocks;
        sealed.samples += r.samples;
        sealed.minute_blocks += r.minute_blocks;
        if !r.more {
            break;
        }
    }
    let seal_s = t.elapsed().as_secs_f64();
    assert_eq!(store.sample_count().await?, total);
    // One GPU's sealed hour as `GET /gpus/{uuid}/samples` reads it (in process, no HTTP).
    let gpus = store.gpu_identities(fleetlens_store::DEFAULT_ORG).await?;
    // And what the server does with it for `format=columns`: the columns built, then JSON.
    let (mut times, mut built, mut as_table, mut serialized, mut bytes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0);
    // The route's GPU lookup first: with the newest sample (which decodes the newest sealed
    // block) and by identity alone (what the history routes use).
    let (mut with_latest, mut identity) = (Vec::new(), Vec::new());
    for g in gpus.iter().cycle().take(50) {
        let t = Instant::now();
        let full = store.gpu(fleetlens_store::DEFAULT_ORG, &g.info.uuid).await?.expect("stored GPU");
        with_latest.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let bare = store.gpu_identity(fleetlens_store::DEFAULT_ORG, &g.info.uuid).await?.expect("stored GPU");
        identity.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(full.latest.is_some() && bare.latest.is_none() && full.id == bare.id);
    }
    for (i, g) in gpus.iter().cycle().take(50).enumerate() {
        let t = Instant::now();
        let got = store
            .samples(fleetlens_store::DEFAULT_ORG, g.id, plan.first_ts_ms(), plan.first_ts_ms() + H, 10_000)
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(got.len(), plan.samples_per_gpu, "read {i}");
        let t = Instant::now();
        let columns = fleetlens_api::gpus::SampleColumns::new(g.info.uuid.clone(), 0, 0, false, &got);
        built.push(t.elapsed().as_secs_f64() * 1e3);
        // What the route does for `format=columns`: the block decoded straight into columns.
        let t = Instant::now();
        let table = store
            .sample_table(fleetlens_store::DEFAULT_ORG, g.id, plan.first_ts_ms(), plan.first_ts_ms() + H, 10_000)
            .await?;
        as_table.push(t.elapsed().as_secs_f64() * 1e3);
        let direct = fleetlens_api::gpus::SampleColumns::from_table(g.info.uuid.clone(), 0, 0, false, table);
        assert_eq!(direct.ts_ms, columns.ts_ms, "read {i}");
        assert_eq!(direct.signals, columns.signals, "read {i}");
        let t = Instant::now();
        bytes = serde_json::to_vec(&direct)?.len();
        serialized.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for t in [&mut times, &mut built, &mut as_table, &mut serialized, &mut with_latest, &mut identity] {
        t.sort_by(f64::total_cmp);
    }
    println!(
        "{backend}: the GPU looked up by uuid: Store::gpu (with its newest sample) p50 {:.2} ms, \
         Store::gpu_identity p50 {:.2} ms (50 lookups each)",
        with_latest[25], identity[25]
    );
    println!(
        "{backend}: one sealed GPU-hour through Store::samples: p50 {:.1} ms, max {:.1} ms (50 reads); \
         its columns built p50 {:.1} ms; straight into columns (Store::sample_table, what format=columns \
         reads) p50 {:.1} ms, max {:.1} ms; as JSON p50 {:.1} ms ({bytes} B)",
        times[25], times[49], built[25], as_table[25], as_table[49], serialized[25]
    );
    drop(store);
    http_reads(args, backend, &url, plan, &gpus).await?;
    println!(
        "{backend}: {total} samples ingested in {ingest_s:.1} s (in process), {} blocks / {} samples sealed and {} hours of minutes packed in {seal_s:.1} s",
        sealed.blocks, sealed.samples, sealed.minute_blocks
    );
    let per = |bytes: i64| bytes as f64 / total as f64;
    if backend == "sqlite" {
        let mut c = sqlx::SqliteConnection::connect(&url).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut c).await?;
        sqlx::query("VACUUM").execute(&mut c).await?;
        let payload: i64 =
            sqlx::query_scalar("SELECT sum(length(payload)) FROM sample_blocks").fetch_one(&mut c).await?;
        let minutes: i64 =
            sqlx::query_scalar("SELECT coalesce(sum(length(payload)), 0) FROM rollup_blocks").fetch_one(&mut c).await?;
        let minute_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM rollups_1m").fetch_one(&mut c).await?;
        println!(
            "sqlite: packed minute rollups {:.2} B/sample ({minutes} B), minute rows left {minute_rows}",
            per(minutes)
        );
        let pages: i64 = sqlx::query_scalar("PRAGMA page_count").fetch_one(&mut c).await?;
        let page: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&mut c).await?;
        c.close().await?;
        let file = std::fs::metadata(dir.path().join("bench.db"))?.len() as i64;
        let wal = std::fs::metadata(dir.path().join("bench.db-wal")).map(|m| m.len() as i64).unwrap_or(0);
        println!(
            "sqlite: block payloads {:.2} B/sample; EVERYTHING COUNTED (whole database file) {:.2} B/sample ({} B, {} pages of {page}; WAL {wal} B)",
            per(payload),
            per(file + wal),
            file,
            pages
        );
    } else {
        let mut c = sqlx::PgConnection::connect(&url).await?;
        sqlx::query("VACUUM ANALYZE").execute(&mut c).await?;
        sqlx::query("CHECKPOINT").execute(&mut c).await?;
        let payload: i64 =
            sqlx::query_scalar("SELECT sum(length(payload))::int8 FROM sample_blocks").fetch_one(&mut c).await?;
        let blocks: i64 = sqlx::query_scalar(
            "SELECT sum(pg_total_relation_size(relid))::int8 FROM pg_partition_tree('sample_blocks')",
        )
        .fetch_one(&mut c)
        .await?;
        // The open tables are partitioned by hour: every partition, the default one included.
        let partitioned = |table: &str| {
            format!("SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::int8 FROM pg_partition_tree('{table}')")
        };
        let samples_open: i64 = sqlx::query_scalar::<_, i64>(&partitioned("samples")).fetch_one(&mut c).await?
            + sqlx::query_scalar::<_, i64>(&partitioned("sample_batches")).fetch_one(&mut c).await?;
        let minutes_open: i64 = sqlx::query_scalar(&partitioned("rollups_1m")).fetch_one(&mut c).await?;
        let open = samples_open + minutes_open;
        let marks: i64 = sqlx::query_scalar(&partitioned("rollup_pending")).fetch_one(&mut c).await?;
        let minutes: i64 =
            sqlx::query_scalar("SELECT pg_total_relation_size('rollup_blocks')").fetch_one(&mut c).await?;
        let minute_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM rollups_1m").fetch_one(&mut c).await?;
        println!(
            "postgres: packed minute rollups with TOAST and indexes {:.2} B/sample, minute rows left {minute_rows}",
            per(minutes)
        );
        let tables: Vec<(String, i64)> = sqlx::query_as(
            "SELECT relname::text, pg_total_relation_size(relid) FROM pg_stat_user_tables ORDER BY 2 DESC LIMIT 8",
        )
        .fetch_all(&mut c)
        .await?;
        let db: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&mut c).await?;
        let empty: i64 = sqlx::query_scalar("SELECT pg_database_size('template1')").fetch_one(&mut c).await?;
        c.close().await?;
        println!(
            "postgres: block payloads {:.2} B/sample; sample_blocks with TOAST and index {:.2} B/sample; open tables (samples, sample_batches, rollups_1m: every partition) {:.2} B/sample; rollup marks (rollup_pending: every partition) {:.2} B/sample; EVERYTHING COUNTED (database minus an empty one) {:.2} B/sample",
            per(payload),
            per(blocks),
            per(open),
            per(marks),
            per(db - empty)
        );
        for (name, bytes) in tables {
            println!("  {name}: {bytes} B ({:.2} B/sample)", per(bytes));
        }
        // The open tables' indexes keep their high-water mark after the rows moved into
        // blocks: free pages that the next hour's rows reuse (VACUUM does not return them to
        // the file system). Rebuilt, they hold what is live.
        let mut c = sqlx::PgConnection::connect(&url).await?;
        for table in ["samples", "sample_batches", "rollups_1m", "rollup_pending", "sample_flags"] {
            sqlx::query(&format!("REINDEX TABLE {table}")).execute(&mut c).await?;
        }
        sqlx::query("VACUUM").execute(&mut c).await?;
        sqlx::query("CHECKPOINT").execute(&mut c).await?;
        let db: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&mut c).await?;
        c.close().await?;
        println!(
            "postgres: EVERYTHING COUNTED, the open tables' free index pages returned (REINDEX) {:.2} B/sample",
            per(db - empty)
        );
        let mut admin = sqlx::PgConnection::connect(&args.pg_admin).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", pg_name.unwrap())).execute(&mut admin).await?;
    }
    Ok(())
}

/// A scratch database of `backend`: its URL, and on PostgreSQL the name to drop.
async fn scratch(args: &Args, backend: &str, dir: &std::path::Path, prefix: &str) -> Result<(String, Option<String>)> {
    if backend == "sqlite" {
        return Ok((format!("sqlite://{}", dir.join("bench.db").display()), None));
    }
    let name = format!("{prefix}_{}", std::process::id());
    let mut c = sqlx::PgConnection::connect(&args.pg_admin).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}")).execute(&mut c).await?;
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut c).await?;
    Ok((format!("{}/{name}", args.pg_admin.rsplit_once('/').context("pg url")?.0), Some(name)))
}

/// A GPU's 24-h series at 1-minute points (`Store::series`, as `GET /gpus/{uuid}/series`
/// reads it) over minute rows, then over the same minutes packed into hour blocks, in one run:
/// `--series-gpus` GPUs × 24 h of 1-Hz samples, 5 reads of each GPU per side.
async fn day_series(args: &Args, backend: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (url, pg_name) = scratch(args, backend, dir.path(), "fleetlens_series_bench").await?;
    let store = fleetlens_store::connect(&url).await?;
    let base = (1_795_000_000_000 / H) * H;
    let plan = data::Plan { gpus: args.series_gpus, samples_per_gpu: 24 * 3600, ts_per_batch: 60, base_ts_ms: base };
    for g in 0..plan.gpus {
        for first in (0..plan.samples_per_gpu).step_by(3600) {
            let batch: Vec<Sample> = (first..first + 3600).map(|t| jittered(&plan, g, t)).collect();
            store.ingest(fleetlens_store::DEFAULT_ORG, &data::host_name(g / data::GPUS_PER_HOST), batch).await?;
        }
    }
    let now = base + 26 * H;
    store.close_minutes(now, 120_000).await?;
    let gpus = store.gpu_identities(fleetlens_store::DEFAULT_ORG).await?;
    let read_all = || async {
        let mut times = Vec::new();
        for _ in 0..5 {
            for g in &gpus {
                let t = Instant::now();
                let rows = store
                    .series(fleetlens_store::DEFAULT_ORG, g.id, fleetlens_core::Resolution::Minute, base, base + 24 * H)
                    .await?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
                anyhow::ensure!(rows.len() == 24 * 60 || rows.len() == 24 * 60 + 1, "{} points", rows.len());
            }
        }
        times.sort_by(f64::total_cmp);
        Ok::<_, anyhow::Error>(times)
    };
    let rows = read_all().await?;
    while store.seal_closed_hours(now, 1000).await?.more {}
    let packed = read_all().await?;
    let p = |t: &[f64], q| fleetlens_bench::scratch::percentile(t, q);
    println!(
        "{backend}: a GPU's 24-h series at 1-min points (Store::series, {} reads): minute rows p50 {:.1} ms / p95 {:.1} ms; packed hours p50 {:.1} ms / p95 {:.1} ms",
        rows.len(),
        p(&rows, 0.5),
        p(&rows, 0.95),
        p(&packed, 0.5),
        p(&packed, 0.95)
    );
    drop(store);
    if let Some(name) = pg_name {
        let mut admin = sqlx::PgConnection::connect(&args.pg_admin).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
    }
    Ok(())
}

/// Retention on PostgreSQL of one day of `gpus` GPUs' sealed blocks: the day's partition is
/// filled with 24 blocks per GPU, each a real encoded hour of the simulated fleet (3,600
/// samples with jitter), then `Store::apply_retention` runs with the day past the raw
/// retention. No GPU rows are registered, so the pass does nothing but drop the day.
async fn drop_day(args: &Args, gpus: usize) -> Result<()> {
    const DAY: i64 = 86_400_000;
    let dir = tempfile::tempdir()?;
    let (url, name) = scratch(args, "postgres", dir.path(), "fleetlens_drop_day_bench").await?;
    let name = name.context("a PostgreSQL database")?;
    let mut admin = sqlx::PgConnection::connect(&args.pg_admin).await?;
    let store = fleetlens_store::connect(&url).await?;
    let day_start = (1_795_000_000_000 / DAY) * DAY;
    let plan = data::Plan { gpus: 1, samples_per_gpu: 3600, ts_per_batch: 60, base_ts_ms: day_start };
    let hour: Vec<Sample> = (0..3600).map(|t| jittered(&plan, 0, t)).collect();
    let payload = fleetlens_store::encode_block(&hour);
    let mut c = sqlx::PgConnection::connect(&url).await?;
    let day = day_start / DAY;
    sqlx::query(&format!(
        "CREATE TABLE sample_blocks_day_{day} PARTITION OF sample_blocks FOR VALUES FROM ({day_start}) TO ({})",
        day_start + DAY
    ))
    .execute(&mut c)
    .await?;
    let t = Instant::now();
    // A hundred GPUs a statement: each a short transaction.
    for first in (1..=gpus as i64).step_by(100) {
        sqlx::query(
            "INSERT INTO sample_blocks (gpu_id, start_ms, end_ms, n, payload) \
             SELECT g, $1 + h * 3600000, $1 + (h + 1) * 3600000, 3600, $2 \
             FROM generate_series($3::int8, $4::int8) g CROSS JOIN generate_series(0, 23) h",
        )
        .bind(day_start)
        .bind(&payload)
        .bind(first)
        .bind((first + 99).min(gpus as i64))
        .execute(&mut c)
        .await?;
    }
    let fill_s = t.elapsed().as_secs_f64();
    sqlx::query("VACUUM ANALYZE").execute(&mut c).await?;
    sqlx::query("CHECKPOINT").execute(&mut c).await?;
    let bytes: i64 = sqlx::query_scalar(&format!("SELECT pg_total_relation_size('sample_blocks_day_{day}')"))
        .fetch_one(&mut c)
        .await?;
    let policy = fleetlens_store::RetentionPolicy { raw_ms: 7 * DAY, ..Default::default() };
    let t = Instant::now();
    let report = store.apply_retention(policy, day_start + 8 * DAY).await?;
    let drop_s = t.elapsed().as_secs_f64();
    let expected = (gpus * 24 * 3600) as u64;
    anyhow::ensure!(report.samples == expected, "dropped {} samples, expected {expected}", report.samples);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM sample_blocks").fetch_one(&mut c).await?;
    anyhow::ensure!(left == 0, "{left} blocks left");
    println!(
        "postgres: one day of {gpus} GPUs ({} blocks of {} B, {:.1} GB with TOAST and index; filled in {fill_s:.0} s) \
         dropped by the retention pass in {:.3} s ({} samples)",
        gpus * 24,
        payload.len(),
        bytes as f64 / 1e9,
        drop_s,
        report.samples
    );
    drop(store);
    c.close().await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
    Ok(())
}

/// One sealed GPU-hour through `GET /api/v1/gpus/{uuid}/samples` of a release server on the
/// database just measured, as the dashboard asks for it: 50 reads, each of a different GPU
/// (the whole answer received and parsed), as rows and as columns (`format=columns`), without
/// and with gzip.
async fn http_reads(
    args: &Args,
    backend: &str,
    url: &str,
    plan: &data::Plan,
    gpus: &[fleetlens_store::GpuRecord],
) -> Result<()> {
    for server_bin in &args.server_bin {
        if !std::path::Path::new(server_bin).exists() {
            println!("{backend}: {server_bin} not built: HTTP reads skipped");
            continue;
        }
        // Named in each line when builds are compared.
        let label = if args.server_bin.len() > 1 { format!("{backend} ({server_bin})") } else { backend.to_string() };
        http_reads_of(server_bin, &label, url, plan, gpus).await?;
    }
    Ok(())
}

/// [`http_reads`] through one server binary.
async fn http_reads_of(
    server_bin: &str,
    backend: &str,
    url: &str,
    plan: &data::Plan,
    gpus: &[fleetlens_store::GpuRecord],
) -> Result<()> {
    const TOKEN: &str = "fl_bench_blocks_token_0123456789abcdef";
    let (_server, base) = fleetlens_bench::scratch::start_server(server_bin, url, TOKEN, &[])?;
    for (format, gzip) in [("rows", false), ("rows", true), ("columns", false), ("columns", true)] {
        let client = reqwest::Client::new();
        let mut times = Vec::new();
        let mut received = Vec::new();
        let mut bytes = 0;
        for (i, g) in gpus.iter().cycle().take(51).enumerate() {
            let t = Instant::now();
            let answer = client
                .get(format!("{base}/api/v1/gpus/{}/samples", g.info.uuid))
                .query(&[
                    ("from", plan.first_ts_ms().to_string()),
                    ("to", (plan.first_ts_ms() + H).to_string()),
                    ("format", format.to_owned()),
                ])
                .bearer_auth(TOKEN)
                .header("accept-encoding", if gzip { "gzip" } else { "identity" })
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await?;
            let last_byte_ms = t.elapsed().as_secs_f64() * 1e3;
            let json = if gzip {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&answer[..]), &mut out)?;
                out
            } else {
                answer.to_vec()
            };
            let n = if format == "rows" {
                serde_json::from_slice::<fleetlens_api::SampleList>(&json)?.samples.len()
            } else {
                serde_json::from_slice::<fleetlens_api::gpus::SampleColumns>(&json)?.ts_ms.len()
            };
            anyhow::ensure!(n == plan.samples_per_gpu, "read {i}: {n} samples");
            // The first read warms the server's connection pool.
            if i > 0 {
                times.push(t.elapsed().as_secs_f64() * 1e3);
                received.push(last_byte_ms);
                bytes = answer.len();
            }
        }
        times.sort_by(f64::total_cmp);
        received.sort_by(f64::total_cmp);
        println!(
            "{backend}: one sealed GPU-hour through GET /gpus/{{uuid}}/samples?format={format}{}: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms parsed; last byte received p50 {:.1} ms (50 reads, {bytes} B sent each)",
            if gzip { " with gzip" } else { "" },
            fleetlens_bench::scratch::percentile(&times, 0.5),
            fleetlens_bench::scratch::percentile(&times, 0.95),
            times[times.len() - 1],
            fleetlens_bench::scratch::percentile(&received, 0.5)
        );
    }
    Ok(())
}

/// The same jittered samples (the 22 fields of `data::VM_FIELDS`, labelled by GPU and host)
/// imported into VictoriaMetrics, flushed and merged: the bytes of its data directory.
async fn victoria_metrics(args: &Args, plan: &data::Plan, source: &Source) -> Result<()> {
    use fleetlens_bench::child::{ChildGuard, free_port, wait_http_ok};
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let child = std::process::Command::new(&args.vm_bin)
        .arg(format!("-storageDataPath={}", dir.path().display()))
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg("-loggerLevel=ERROR")
        .arg("-retentionPeriod=100y")
        .stdout(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("spawn {} (apt-get install victoria-metrics)", args.vm_bin.display()))?;
    let mut vm = ChildGuard { child, what: "victoria-metrics".into() };
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_http_ok(&client, &mut vm, &format!("{base}/health"), std::time::Duration::from_secs(60)).await?;
    let mut points = 0u64;
    for first in (0..plan.gpus).step_by(data::GPUS_PER_HOST) {
        let mut body = Vec::new();
        for g in first..(first + data::GPUS_PER_HOST).min(plan.gpus) {
            let samples: Vec<Sample> = (0..plan.samples_per_gpu).map(|t| source.sample(plan, g, t)).collect();
            for (field, get) in data::VM_FIELDS {
                let (ts, values): (Vec<i64>, Vec<f64>) =
                    samples.iter().filter_map(|s| get(s).map(|v| (s.ts_ms, v))).unzip();
                if ts.is_empty() {
                    continue;
                }
                points += ts.len() as u64;
                let line = serde_json::json!({
                    "metric": {"__name__": format!("fleetlens_{field}"), "gpu": data::gpu_uuid(g), "host": data::host_name(g / data::GPUS_PER_HOST)},
                    "values": values,
                    "timestamps": ts,
                });
                serde_json::to_writer(&mut body, &line)?;
                body.push(b'\n');
            }
        }
        let answer = client.post(format!("{base}/api/v1/import")).body(body).send().await?;
        anyhow::ensure!(answer.status().is_success(), "import answered {}", answer.status());
    }
    client.get(format!("{base}/internal/force_flush")).send().await?.error_for_status()?;
    client.get(format!("{base}/internal/force_merge")).send().await?.error_for_status()?;
    // Merges run in the background: wait until the directory stops changing.
    let mut last = 0;
    for _ in 0..120 {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let now = dir_bytes(dir.path());
        if now == last {
            break;
        }
        last = now;
    }
    vm.kill();
    let total = (plan.gpus * plan.samples_per_gpu) as f64;
    let data_bytes = dir_bytes(&dir.path().join("data"));
    let index_bytes = dir_bytes(&dir.path().join("indexdb"));
    println!(
        "victoria-metrics: {} GPU-samples ({points} datapoints), data {:.2} B/GPU-sample, indexdb {:.2}, whole directory {:.2} B/GPU-sample",
        total,
        data_bytes as f64 / total,
        index_bytes as f64 / total,
        last as f64 / total
    );
    Ok(())
}

/// Bytes of the files below `path`.
fn dir_bytes(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(gpus) = args.drop_day_gpus {
        return drop_day(&args, gpus).await;
    }
    // Hour-aligned: one block per GPU.
    let base = (1_795_000_000_000 / H) * H + 30_000;
    let codec_plan = data::Plan { gpus: args.codec_gpus, samples_per_gpu: 3560, ts_per_batch: 60, base_ts_ms: base };
    println!(
        "| data | GPU-hours | samples | pco blocks (as sealed) | of which process lists and allocations | zlib-9 over deltas |"
    );
    println!("|---|---|---|---|---|---|");
    let sim: Vec<Vec<Sample>> = (0..codec_plan.gpus).map(|g| simulated_hour(&codec_plan, g)).collect();
    codec_row("simulated fleet, jitter ±25 ms", &sim.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let traces = recorded_traces()?;
    let blocks: Vec<&[Sample]> = traces.iter().flat_map(|t| hours(t)).collect();
    codec_row("recorded H100 + H200 traces", &blocks);
    let plan = data::Plan { gpus: args.gpus, samples_per_gpu: 3560, ts_per_batch: 60, base_ts_ms: base };
    let source = Source::of(args.data)?;
    for backend in ["sqlite", "postgres"] {
        if args.backend == backend || args.backend == "all" {
            if args.phases.contains("at-rest") {
                at_rest(&args, backend, &plan, &source).await?;
            }
            if args.phases.contains("series") {
                day_series(&args, backend).await?;
            }
        }
    }
    if (args.backend == "vm" || args.backend == "all") && args.phases.contains("vm") {
        victoria_metrics(&args, &plan, &source).await?;
    }
    Ok(())
}
