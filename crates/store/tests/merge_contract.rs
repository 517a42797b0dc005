//! The store contract of merge-on-insert (`fleetlens_core::fill`), on SQLite and PostgreSQL: a
//! sample whose (GPU, timestamp) is stored already fills the fields the stored one lacks, and
//! the raw rows, minute and hour rollups and credits end exactly as in a store that got every
//! sample whole; a sample with nothing to add stays a duplicate.

use fleetlens_core::{GpuProcess, Resolution, RollupBucket, Sample};
use fleetlens_store::{BucketCredit, DEFAULT_ORG, IngestOutcome, Store};
use fleetlens_tests::Backend;

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    partial_samples_end_as_if_they_had_arrived_whole,
    concurrent_fill_ins_of_one_row_each_count_once,
);

const H: i64 = 3_600_000;
const UUID: &str = "GPU-merge";

/// 40 minutes of 1-s samples across an hour boundary whose behaviour changes every 5 minutes
/// (so minutes classify differently), with some fields absent now and then.
fn whole_samples() -> Vec<Sample> {
    let start = 1_700_000_000_000 - 1_700_000_000_000 % H + H - 20 * 60_000;
    (0..2400)
        .map(|i| {
            let busy = (i / 300) % 2 == 1;
            Sample {
                ts_ms: start + i * 1000,
                uuid: UUID.into(),
                gpu_index: Some(0),
                name: Some("NVIDIA H100 80GB HBM3".into()),
                power_limit_w: Some(700.0),
                mem_total_bytes: Some(80 << 30),
                gpu_util_pct: Some(if busy { 100.0 } else { 0.0 }),
                sm_active_pct: if i % 7 == 0 { None } else { Some(if busy { 30.0 + (i % 5) as f64 } else { 0.0 }) },
                sm_occupancy_pct: Some(12.5),
                tensor_active_pct: Some(if busy { 8.0 } else { 0.0 }),
                dram_active_pct: Some(4.0),
                power_w: Some(if busy { 350.0 } else { 80.0 }),
                temp_c: Some(50.0 + (i % 3) as f64),
                energy_j: Some(1_000_000.0 + i as f64 * 200.0),
                mem_used_bytes: Some(if busy { 20 << 30 } else { 0 }),
                processes: (i % 11 != 0).then(|| {
                    if busy {
                        vec![GpuProcess { pid: 9, used_bytes: Some(20 << 30), ..Default::default() }]
                    } else {
                        vec![]
                    }
                }),
                ..Default::default()
            }
        })
        .collect()
}

/// What the first request of a split scrape carries: identity, utilisation, memory, power
/// and the owners (dcgm-exporter's labels ride on every series).
fn first_part(s: &Sample) -> Sample {
    Sample {
        ts_ms: s.ts_ms,
        uuid: s.uuid.clone(),
        gpu_index: s.gpu_index,
        name: s.name.clone(),
        power_limit_w: s.power_limit_w,
        mem_total_bytes: s.mem_total_bytes,
        gpu_util_pct: s.gpu_util_pct,
        mem_used_bytes: s.mem_used_bytes,
        power_w: s.power_w,
        processes: s.processes.clone(),
        ..Default::default()
    }
}

/// The rest: the profiling fields, temperature and energy (and utilisation again, which the
/// stored part has: the stored value stays).
fn second_part(s: &Sample) -> Sample {
    Sample {
        power_limit_w: None,
        mem_total_bytes: None,
        mem_used_bytes: None,
        power_w: None,
        processes: None,
        gpu_util_pct: s.gpu_util_pct.map(|v| 100.0 - v),
        ..s.clone()
    }
}

async fn ingest_in_batches(store: &dyn Store, samples: &[Sample]) -> IngestOutcome {
    let mut total = IngestOutcome::default();
    for batch in samples.chunks(300) {
        let o = store.ingest(DEFAULT_ORG, "merge-node", batch.to_vec()).await.unwrap();
        total.inserted += o.inserted;
        total.merged += o.merged;
        total.duplicates += o.duplicates;
    }
    total
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn assert_same_rollups(got: &[RollupBucket], want: &[RollupBucket], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: bucket count");
    for (g, w) in got.iter().zip(want) {
        let at = format!("{what} bucket {}", w.bucket_ms);
        assert_eq!(
            (g.bucket_ms, g.sample_count, g.allocated_count, g.processes_read_count),
            (w.bucket_ms, w.sample_count, w.allocated_count, w.processes_read_count),
            "{at}"
        );
        assert_eq!(
            (g.first_ts_ms, g.last_ts_ms, g.sampled_ms, g.quality),
            (w.first_ts_ms, w.last_ts_ms, w.sampled_ms, w.quality),
            "{at}"
        );
        for (i, (a, b)) in g.signals.iter().zip(&w.signals).enumerate() {
            assert_eq!((a.count, a.min, a.max), (b.count, b.min, b.max), "{at} signal {i}");
            assert!(close(a.sum, b.sum), "{at} signal {i}: sum {} vs {}", a.sum, b.sum);
        }
    }
}

fn assert_same_credits(got: &[BucketCredit], want: &[BucketCredit], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: credit rows");
    // In key order: `credits` promises no order (PostgreSQL returns rows as they lie, and
    // rows updated in place move).
    let sorted = |rows: &[BucketCredit]| {
        let mut rows = rows.to_vec();
        rows.sort_by_key(|r| (r.gpu_id, r.bucket_ms));
        rows
    };
    let (got, want) = (sorted(got), sorted(want));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.bucket_ms, w.bucket_ms, "{what}");
        for (a, b) in g.credit.to_cells().iter().zip(w.credit.to_cells()) {
            assert!(close(*a, b), "{what} {}: credit {:?} vs {:?}", w.bucket_ms, g.credit, w.credit);
        }
    }
}

/// The raw samples, rollups and credits of `got` equal those of `want`.
async fn assert_same_store(got: &dyn Store, want: &dyn Store) {
    let (g, w) =
        (got.gpu(DEFAULT_ORG, UUID).await.unwrap().unwrap(), want.gpu(DEFAULT_ORG, UUID).await.unwrap().unwrap());
    assert_eq!(
        got.samples(DEFAULT_ORG, g.id, 0, i64::MAX, 100_000).await.unwrap(),
        want.samples(DEFAULT_ORG, w.id, 0, i64::MAX, 100_000).await.unwrap()
    );
    assert_eq!(
        (g.latest, g.info.first_seen_ms, g.info.last_seen_ms),
        (w.latest, w.info.first_seen_ms, w.info.last_seen_ms)
    );
    for res in Resolution::ALL {
        let what = format!("{res:?}");
        assert_same_rollups(
            &got.rollups(DEFAULT_ORG, g.id, res, 0, i64::MAX).await.unwrap(),
            &want.rollups(DEFAULT_ORG, w.id, res, 0, i64::MAX).await.unwrap(),
            &what,
        );
        assert_same_credits(
            &got.credits(DEFAULT_ORG, None, res, 0, i64::MAX).await.unwrap(),
            &want.credits(DEFAULT_ORG, None, res, 0, i64::MAX).await.unwrap(),
            &what,
        );
    }
    // The day credits (`credits_1d`), as billing reads them: a period of whole hours and days.
    let (from, end) = (1_699_920_000_000, 1_700_092_800_000);
    let gs = got.org_hour_credit_split(DEFAULT_ORG, from, end, from, end - H).await.unwrap();
    let ws = want.org_hour_credit_split(DEFAULT_ORG, from, end, from, end - H).await.unwrap();
    assert_same_credits(&gs.whole, &ws.whole, "whole hours and days");
    assert_same_credits(&gs.partial, &ws.partial, "partial hours");
}

async fn partial_samples_end_as_if_they_had_arrived_whole(backend: Backend) {
    let whole = whole_samples();
    let (_db_whole, at_once) = open(backend).await;
    let o = ingest_in_batches(at_once.as_ref(), &whole).await;
    assert_eq!((o.inserted, o.merged, o.duplicates), (2400, 0, 0));

    let (_db, split) = open(backend).await;
    // The first requests: the first part of every sample but the last 300, and every tenth
    // sample already whole (its second part then has nothing to add).
    let firsts: Vec<Sample> =
        whole[..2100].iter().enumerate().map(|(i, s)| if i % 10 == 0 { s.clone() } else { first_part(s) }).collect();
    let o = ingest_in_batches(split.as_ref(), &firsts).await;
    assert_eq!((o.inserted, o.merged, o.duplicates), (2100, 0, 0));
    // The second requests: the second parts, then the last 300 samples arrive whole, in the
    // same batches as fill-ins of the samples before them.
    let seconds: Vec<Sample> = whole[..2100].iter().map(second_part).chain(whole[2100..].iter().cloned()).collect();
    let o = ingest_in_batches(split.as_ref(), &seconds).await;
    assert_eq!((o.inserted, o.merged, o.duplicates), (300, 2100 - 210, 210), "every tenth was stored whole");
    assert_same_store(split.as_ref(), at_once.as_ref()).await;

    // Resent (Prometheus retries, an agent's spool): nothing changes, every sample a duplicate.
    let o = ingest_in_batches(split.as_ref(), &seconds).await;
    assert_eq!((o.inserted, o.merged, o.duplicates), (0, 0, 2400));
    let o = ingest_in_batches(split.as_ref(), &firsts).await;
    assert_eq!((o.inserted, o.merged, o.duplicates), (0, 0, 2100));
    assert_same_store(split.as_ref(), at_once.as_ref()).await;
    assert_eq!(split.sample_count().await.unwrap(), 2400);
}

/// Two batches filling different fields of the same stored rows at once: each field lands
/// once, in the row and in the rollups (PostgreSQL locks the rows it fills; SQLite's one
/// writer runs the batches one after the other).
async fn concurrent_fill_ins_of_one_row_each_count_once(backend: Backend) {
    let whole: Vec<Sample> = whole_samples().into_iter().take(600).collect();
    let (_db_whole, at_once) = open(backend).await;
    ingest_in_batches(at_once.as_ref(), &whole).await;

    let (_db, split) = open(backend).await;
    ingest_in_batches(split.as_ref(), &whole.iter().map(first_part).collect::<Vec<_>>()).await;
    let profiling: Vec<Sample> =
        whole.iter().map(|s| Sample { temp_c: None, energy_j: None, ..second_part(s) }).collect();
    let sensors: Vec<Sample> = whole
        .iter()
        .map(|s| Sample {
            temp_c: s.temp_c,
            energy_j: s.energy_j,
            // The same utilisation as stored, so both batches overlap in a field.
            gpu_util_pct: s.gpu_util_pct,
            ..first_part(s)
        })
        .map(|s| Sample { power_w: None, mem_used_bytes: None, processes: None, ..s })
        .collect();
    let (a, b) = tokio::join!(
        split.ingest(DEFAULT_ORG, "merge-node", profiling.clone()),
        split.ingest(DEFAULT_ORG, "merge-node", sensors.clone())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.inserted, a.merged, b.inserted, b.merged), (0, 600, 0, 600), "{a:?} {b:?}");
    assert_same_store(split.as_ref(), at_once.as_ref()).await;
}
