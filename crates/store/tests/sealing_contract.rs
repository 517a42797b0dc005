//! Sealing raw samples into column blocks (issue 21), on SQLite and on PostgreSQL: every read
//! of raw samples answers the same before and after, nothing is lost or duplicated, late and
//! resent samples behave as before sealing, retention removes whole blocks.

use std::sync::Arc;

use fleetlens_core::{GpuId, GpuProcess, PodAllocation, Resolution, Sample};
use fleetlens_store::{BLOCK_SPAN_MS, DEFAULT_ORG, RetentionPolicy, SEAL_LATENESS_MS, Store};
use fleetlens_tests::{Backend, TestDatabase, fixture};

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    sealing_moves_rows_into_blocks_and_reads_answer_the_same,
    sealed_keys_stay_duplicates_and_late_samples_merge,
    open_hours_stay_open_until_the_lateness_passed,
    stored_rows_of_an_older_release_are_converted,
    retention_removes_whole_blocks,
    minute_rollups_of_closed_hours_pack_and_read_the_same,
    a_late_sample_reopens_a_packed_hour,
    retention_removes_packed_minutes,
    emptied_hour_partitions_are_dropped,
    open_rows_written_before_hour_partitions_survive_the_upgrade,
    open_rows_with_a_column_per_signal_survive_the_upgrade,
);

const H: i64 = BLOCK_SPAN_MS;
/// An hour boundary.
const T0: i64 = 1_700_002_800_000;

/// A time after every test's samples: the rollup job then writes every marked minute.
const LATER: i64 = 4_000_000_000_000;

/// A sealing pass at `now` after the rollup job wrote every minute (sealing leaves the hours
/// whose minutes wait for the job).
async fn seal(store: &Arc<dyn Store>, now: i64, max_blocks: u64) -> fleetlens_store::SealReport {
    store.close_minutes(LATER, 120_000).await.unwrap();
    store.seal_closed_hours(now, max_blocks).await.unwrap()
}

/// `n` samples of one GPU every `step_ms` from `start_ms`, with jitter, processes and pod
/// allocations that change, and signals that come and go; values at their stored precision.
fn samples(uuid: &str, start_ms: i64, n: i64, step_ms: i64) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            ts_ms: start_ms + i * step_ms + (i * 7919) % 40,
            uuid: uuid.into(),
            gpu_index: Some(3),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            gpu_util_pct: Some((i % 101) as f64),
            sm_active_pct: if i % 3 == 0 { None } else { Some((i % 50) as f64 + 0.25) },
            tensor_active_pct: Some(((i * 7) % 100) as f64 + 0.01),
            // The signal of migration 0024: present in most samples, absent in some.
            tensor_hmma_active_pct: (i % 4 != 1).then_some(((i * 5) % 90) as f64 + 0.5),
            mem_used_bytes: Some(i * 1_000_003),
            mem_total_bytes: Some(85_520_809_984),
            power_w: Some(100.125 + (i % 17) as f64),
            power_limit_w: Some(700.0),
            energy_j: Some(1.0e6 + i as f64 * 110.5),
            temp_c: Some(40.0 + (i % 4) as f64),
            throttle_reasons: (i % 10 == 0).then_some(4),
            processes: match i % 5 {
                0 => None,
                1 | 2 => Some(vec![]),
                _ => Some(vec![GpuProcess { pid: 42, used_bytes: Some(1 << 30), ..Default::default() }]),
            },
            allocations: if i % 4 == 0 {
                vec![PodAllocation { namespace: "ml".into(), pod: format!("p{}", i / 400), ..Default::default() }]
            } else {
                Vec::new()
            },
            ..Default::default()
        })
        .collect()
}

/// What the raw-sample reads answer for `org`'s GPUs over everything.
async fn answers(store: &dyn Store) -> (Vec<Vec<Sample>>, Vec<fleetlens_store::ProcessList>, Vec<Option<Sample>>, u64) {
    let gpus = store.gpus(DEFAULT_ORG).await.unwrap();
    let mut raw = Vec::new();
    for g in &gpus {
        raw.push(store.samples(DEFAULT_ORG, g.id, 0, i64::MAX, 1_000_000).await.unwrap());
    }
    let mut lists = store.process_lists(DEFAULT_ORG, None, 0, i64::MAX).await.unwrap();
    // Ordered by GPU and minute; the lists inside a minute in no particular order.
    lists.sort_by_cached_key(|l| (l.gpu_id, l.minute_ms, format!("{:?} {:?}", l.processes, l.allocations)));
    let latest = gpus.into_iter().map(|g| g.latest).collect();
    (raw, lists, latest, store.sample_count().await.unwrap())
}

/// `Store::process_lists` of named GPUs: the organisation's lists of those GPUs, over sealed
/// and open hours and windows cut inside them; nothing for no GPU or another organisation.
async fn assert_gpu_lists_are_the_orgs(store: &dyn Store) {
    let sorted = |mut lists: Vec<fleetlens_store::ProcessList>| {
        lists.sort_by_cached_key(|l| (l.gpu_id, l.minute_ms, format!("{:?} {:?}", l.processes, l.allocations)));
        lists
    };
    let ids: Vec<GpuId> = store.gpus(DEFAULT_ORG).await.unwrap().iter().map(|g| g.id).collect();
    // Everything; windows cut inside sealed hours; GPU-a's last sealed hour into its open rows.
    for (from_ms, to_ms) in [(0, i64::MAX), (T0 + 1234, T0 + 2 * H + 99), (T0 + 3 * H - 90_000, T0 + 3 * H + 90_000)] {
        let all = sorted(store.process_lists(DEFAULT_ORG, None, from_ms, to_ms).await.unwrap());
        assert!(!all.is_empty(), "lists in [{from_ms}, {to_ms})");
        for id in &ids {
            let mine = sorted(store.process_lists(DEFAULT_ORG, Some(&[*id]), from_ms, to_ms).await.unwrap());
            let expected: Vec<_> = all.iter().filter(|l| l.gpu_id == *id).cloned().collect();
            assert_eq!(mine, expected, "GPU {id:?} in [{from_ms}, {to_ms})");
        }
        assert_eq!(sorted(store.process_lists(DEFAULT_ORG, Some(&ids), from_ms, to_ms).await.unwrap()), all);
        assert!(store.process_lists(DEFAULT_ORG, Some(&[]), from_ms, to_ms).await.unwrap().is_empty());
        let other = fleetlens_core::OrgId(DEFAULT_ORG.get() + 1);
        assert!(store.process_lists(other, Some(&ids), from_ms, to_ms).await.unwrap().is_empty());
    }
}

/// `Store::sample_table` holds what `Store::samples` answers (identity fields aside), for the
/// range and limit given.
async fn assert_table_is_samples(store: &dyn Store, gpu_id: GpuId, from_ms: i64, to_ms: i64, limit: u32) {
    let table = store.sample_table(DEFAULT_ORG, gpu_id, from_ms, to_ms, limit).await.unwrap();
    let samples = store.samples(DEFAULT_ORG, gpu_id, from_ms, to_ms, limit).await.unwrap();
    assert!(!samples.is_empty(), "[{from_ms}, {to_ms}) holds samples");
    let without_identity: Vec<Sample> =
        samples.into_iter().map(|s| Sample { uuid: String::new(), gpu_index: None, name: None, ..s }).collect();
    assert_eq!(table.len(), without_identity.len(), "[{from_ms}, {to_ms}) limit {limit}");
    assert_eq!(table.into_samples(), without_identity, "[{from_ms}, {to_ms}) limit {limit}");
}

/// [`assert_table_is_samples`] over whole GPUs, windows cut inside blocks, and limits.
async fn assert_tables_are_samples(store: &dyn Store, gpu_id: GpuId) {
    for (from_ms, to_ms, limit) in [
        (0, i64::MAX, 1_000_000),
        (T0 + 1234, T0 + 2 * H + 99, 1_000_000),
        (T0 + H - 5000, i64::MAX, 10),
        (T0 + 3 * H - 10_000, i64::MAX, 1_000_000),
        (T0 + 3 * H + 10_000, i64::MAX, 1_000_000),
    ] {
        assert_table_is_samples(store, gpu_id, from_ms, to_ms, limit).await;
    }
}

async fn sealing_moves_rows_into_blocks_and_reads_answer_the_same(backend: Backend) {
    let (_db, store) = open(backend).await;
    // Two GPUs over three and a half hours, one stopping earlier (its newest sample sealed).
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-a", T0 - 1000, 3 * 3600 + 1800, 1000)).await.unwrap();
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-b", T0 + 200, 5000, 1000)).await.unwrap();
    let before = answers(store.as_ref()).await;
    let rollups_before = store.org_rollups(DEFAULT_ORG, Resolution::Minute, 0, i64::MAX).await.unwrap();
    let now = T0 + 3 * H + SEAL_LATENESS_MS;
    // A small limit: the passes continue where the last stopped.
    let mut blocks = 0;
    let mut moved = 0;
    loop {
        let report = seal(&store, now, 3).await;
        blocks += report.blocks;
        moved += report.samples;
        if !report.more {
            break;
        }
    }
    // GPU-a: the second before T0 and three whole hours; its last half hour is in an hour that
    // has not closed (it stays open rows). GPU-b: two hours, its newest sample sealed.
    assert_eq!(blocks, 4 + 2);
    assert_eq!(moved, 1 + 3 * 3600 + 5000);
    assert_eq!(seal(&store, now, 100).await, Default::default(), "nothing left to seal");
    let after = answers(store.as_ref()).await;
    assert_eq!(after.0, before.0, "raw samples");
    // The newest signal went through the raw rows and the blocks: present where sent, absent
    // where not.
    let hmma: Vec<Option<f64>> = after.0[0].iter().take(8).map(|s| s.tensor_hmma_active_pct).collect();
    assert_eq!(hmma, [Some(0.5), None, Some(10.5), Some(15.5), Some(20.5), None, Some(30.5), Some(35.5)]);
    assert_eq!(after.0[0][4].tensor_hmma_active_pct, before.0[0][4].tensor_hmma_active_pct);
    assert_eq!(after.1, before.1, "process lists");
    assert_eq!(after.2, before.2, "each GPU's newest sample");
    assert_eq!(after.3, before.3, "sample count");
    assert!(after.2[1].is_some());
    // Windows cut inside blocks, and limits.
    let gpu = store.gpu(DEFAULT_ORG, "GPU-a").await.unwrap().unwrap();
    let window = store.samples(DEFAULT_ORG, gpu.id, T0 + 1234, T0 + 2 * H + 99, 1_000_000).await.unwrap();
    let expected: Vec<Sample> =
        before.0[0].iter().filter(|s| s.ts_ms >= T0 + 1234 && s.ts_ms < T0 + 2 * H + 99).cloned().collect();
    assert_eq!(window, expected);
    let first = store.samples(DEFAULT_ORG, gpu.id, T0 + H - 5000, i64::MAX, 10).await.unwrap();
    assert_eq!(first, expected.iter().filter(|s| s.ts_ms >= T0 + H - 5000).take(10).cloned().collect::<Vec<_>>());
    assert_eq!(store.rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, 0, i64::MAX).await.unwrap().len(), 5);
    assert_eq!(store.org_rollups(DEFAULT_ORG, Resolution::Minute, 0, i64::MAX).await.unwrap(), rollups_before);
    // As columns: sealed hours, then the open half hour after them.
    assert_tables_are_samples(store.as_ref(), gpu.id).await;
    assert_gpu_lists_are_the_orgs(store.as_ref()).await;
    // A late sample turns the first whole hour back into open rows, before sealed ones.
    let mut late = before.0[0][100].clone();
    late.ts_ms += 1;
    store.ingest(DEFAULT_ORG, "h1", vec![late]).await.unwrap();
    assert_tables_are_samples(store.as_ref(), gpu.id).await;
    // Another organisation's GPU: no samples, as `samples` answers.
    let other = fleetlens_core::OrgId(DEFAULT_ORG.get() + 1);
    assert!(store.sample_table(other, gpu.id, 0, i64::MAX, 10).await.unwrap().is_empty());
}

async fn sealed_keys_stay_duplicates_and_late_samples_merge(backend: Backend) {
    let (_db, store) = open(backend).await;
    let batch = samples("GPU-late", T0, 3600, 1000);
    store.ingest(DEFAULT_ORG, "h", batch.clone()).await.unwrap();
    let now = T0 + 2 * H;
    assert_eq!(seal(&store, now, 100).await.samples, 3600);
    let rollups = store.org_rollups(DEFAULT_ORG, Resolution::Minute, 0, i64::MAX).await.unwrap();
    // The whole batch again (an agent that did not get the answer): all duplicates.
    let again = store.ingest(DEFAULT_ORG, "h", batch.clone()).await.unwrap();
    assert_eq!((again.inserted, again.duplicates), (0, 3600));
    assert_eq!(store.sample_count().await.unwrap(), 3600);
    assert_eq!(store.org_rollups(DEFAULT_ORG, Resolution::Minute, 0, i64::MAX).await.unwrap(), rollups);
    // A late sample in the sealed hour (between two sealed ones), and one resent with it.
    let mut late = batch[100].clone();
    late.ts_ms += 500;
    late.gpu_util_pct = Some(77.0);
    let outcome = store.ingest(DEFAULT_ORG, "h", vec![late.clone(), batch[5].clone()]).await.unwrap();
    assert_eq!((outcome.inserted, outcome.duplicates), (1, 1));
    let gpu = store.gpu(DEFAULT_ORG, "GPU-late").await.unwrap().unwrap();
    let mut expected = batch.clone();
    expected.insert(101, late.clone());
    assert_eq!(
        store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 10_000).await.unwrap(),
        expected,
        "read merges the open row"
    );
    assert_eq!(store.sample_count().await.unwrap(), 3601);
    // The minute's rollup counts it once.
    let minute = (late.ts_ms / 60_000) * 60_000;
    let m = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, minute, minute + 1).await.unwrap();
    assert_eq!(m[0].sample_count, 61);
    // The late sample turned its hour back into open rows, and its minute waits for the
    // rollup job: no pass seals the hour before the job wrote the minute.
    assert_eq!(store.seal_closed_hours(now, 100).await.unwrap(), Default::default());
    // Then the next pass seals the hour again, with it.
    let report = seal(&store, now, 100).await;
    assert_eq!((report.blocks, report.samples), (1, 3601));
    assert_eq!(store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 10_000).await.unwrap(), expected);
    assert_eq!(store.sample_count().await.unwrap(), 3601);
}

async fn open_hours_stay_open_until_the_lateness_passed(backend: Backend) {
    let (_db, store) = open(backend).await;
    store.ingest(DEFAULT_ORG, "h", samples("GPU-open", T0, 3600, 1000)).await.unwrap();
    // The hour ended, but less than the lateness ago.
    assert_eq!(seal(&store, T0 + H + SEAL_LATENESS_MS - 1, 100).await.blocks, 0);
    assert_eq!(seal(&store, T0 + H + SEAL_LATENESS_MS, 100).await.blocks, 1);
}

/// A database written before blocks existed holds only rows: the first passes convert them.
/// The recorded H200 trace (real readings, with values finer than the stored precision) reads
/// back within that precision.
async fn stored_rows_of_an_older_release_are_converted(backend: Backend) {
    let (_db, store) = open(backend).await;
    let trace: Vec<Sample> = std::fs::read_to_string(fixture("nvml-h200-phases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    store.ingest(DEFAULT_ORG, "gpu-node-01", trace.clone()).await.unwrap();
    let gpu = store.gpu(DEFAULT_ORG, &trace[0].uuid).await.unwrap().unwrap();
    let last = trace.iter().map(|s| s.ts_ms).max().unwrap();
    let report = seal(&store, last + 2 * H, 100).await;
    assert_eq!(report.samples, trace.len() as u64);
    let back = store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 10_000).await.unwrap();
    assert_eq!(back.len(), trace.len());
    for (b, t) in back.iter().zip(&trace) {
        assert_within_precision(b, t);
    }
    assert_within_precision(
        &store.gpu(DEFAULT_ORG, &trace[0].uuid).await.unwrap().unwrap().latest.unwrap(),
        trace.last().unwrap(),
    );
}

/// Equal but for real numbers, which may differ by half their stored step (at most 0.005).
fn assert_within_precision(got: &Sample, want: &Sample) {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value) {
        use serde_json::Value::*;
        match (a, b) {
            (Number(x), Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!((x - y).abs() <= 0.005 + 1e-9 * y.abs(), "{path}: {x} vs {y}");
            }
            (Object(x), Object(y)) => {
                assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{path}");
                for (k, v) in x {
                    walk(&format!("{path}.{k}"), v, &y[k]);
                }
            }
            (Array(x), Array(y)) => {
                assert_eq!(x.len(), y.len(), "{path}");
                for (i, (v, w)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), v, w);
                }
            }
            _ => assert_eq!(a, b, "{path}"),
        }
    }
    walk("sample", &serde_json::to_value(got).unwrap(), &serde_json::to_value(want).unwrap());
}

async fn retention_removes_whole_blocks(backend: Backend) {
    let (_db, store) = open(backend).await;
    let day = 86_400_000i64;
    // Three days of 4 samples an hour, sealed; retention keeps the newest day and a half.
    store.ingest(DEFAULT_ORG, "h", samples("GPU-ret", T0, 3 * 24 * 4, 900_000)).await.unwrap();
    let end = T0 + 3 * day;
    let report = seal(&store, end + H, 10_000).await;
    assert_eq!((report.blocks, report.samples), (72, 288));
    let now = end + day / 2;
    let policy = RetentionPolicy { raw_ms: 2 * day, ..RetentionPolicy::default() };
    let removed = store.apply_retention(policy, now).await.unwrap();
    // Everything in hours ending at or before now - 2 days = T0 + 1.5 days: 36 hours.
    assert_eq!(removed.samples, 36 * 4);
    assert_eq!(store.sample_count().await.unwrap(), 36 * 4);
    let gpu = store.gpu(DEFAULT_ORG, "GPU-ret").await.unwrap().unwrap();
    let left = store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 10_000).await.unwrap();
    assert_eq!(left.len(), 36 * 4);
    assert!(left[0].ts_ms >= now - 2 * day);
    assert_eq!(store.apply_retention(policy, now).await.unwrap().samples, 0);
}

/// Every read of 1-minute rollups and minute credits of `org`: the whole organisation, each GPU
/// (rollups and chart series), and the newest minute of each GPU.
async fn minute_answers(store: &dyn Store) -> Vec<String> {
    let gpus = store.gpus(DEFAULT_ORG).await.unwrap();
    let ids: Vec<GpuId> = gpus.iter().map(|g| g.id).collect();
    let mut out = vec![
        format!("{:?}", store.org_rollups(DEFAULT_ORG, Resolution::Minute, 0, i64::MAX).await.unwrap()),
        format!("{:?}", store.org_rollups(DEFAULT_ORG, Resolution::Hour, 0, i64::MAX).await.unwrap()),
        format!("{:?}", store.latest_minutes(DEFAULT_ORG).await.unwrap()),
        format!("{:?}", store.latest_minutes_of(DEFAULT_ORG, &ids).await.unwrap()),
    ];
    let mut credits = store.credits(DEFAULT_ORG, None, Resolution::Minute, 0, i64::MAX).await.unwrap();
    credits.sort_by_key(|c| (c.gpu_id, c.bucket_ms));
    out.push(format!("{credits:?}"));
    for id in ids {
        // Windows that cut hours, as charts ask for them.
        for (from, to) in [(0, i64::MAX), (T0 + 17 * 60_000, T0 + H + 31 * 60_000)] {
            out.push(format!("{:?}", store.rollups(DEFAULT_ORG, id, Resolution::Minute, from, to).await.unwrap()));
            out.push(format!("{:?}", store.series(DEFAULT_ORG, id, Resolution::Minute, from, to).await.unwrap()));
        }
    }
    out
}

async fn minute_rollups_of_closed_hours_pack_and_read_the_same(backend: Backend) {
    let (_db, store) = open(backend).await;
    // GPU-a over three and a half hours; GPU-b stops after 83 minutes (its newest minute packed).
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-a", T0 - 1000, 3 * 3600 + 1800, 1000)).await.unwrap();
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-b", T0 + 200, 5000, 1000)).await.unwrap();
    // Credits of named GPUs while every minute is open (computed from the raw rows)…
    assert_gpu_credits_are_the_orgs(store.as_ref()).await;
    store.close_minutes(LATER, 120_000).await.unwrap();
    // …as minute rows…
    assert_gpu_credits_are_the_orgs(store.as_ref()).await;
    let before = minute_answers(store.as_ref()).await;
    let now = T0 + 3 * H + SEAL_LATENESS_MS;
    let mut packed = 0;
    loop {
        let report = seal(&store, now, 2).await;
        packed += report.minute_blocks;
        if !report.more {
            break;
        }
    }
    // GPU-a: the minute before T0 (its own hour) and three whole hours; GPU-b: two hours.
    assert_eq!(packed, 4 + 2);
    assert_eq!(seal(&store, now, 100).await, Default::default(), "nothing left to pack");
    let after = minute_answers(store.as_ref()).await;
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        assert_eq!(a, b, "answer {i} changed by packing");
    }
    assert!(before[2].contains("sample_count"), "both GPUs have a newest minute");
    // …and packed.
    assert_gpu_credits_are_the_orgs(store.as_ref()).await;
}

/// `Store::credits` of named GPUs: the organisation's credits of those GPUs, for minutes and
/// hours, whole and over windows that cut hours; nothing for no GPU or another organisation.
async fn assert_gpu_credits_are_the_orgs(store: &dyn Store) {
    let ids: Vec<GpuId> = store.gpus(DEFAULT_ORG).await.unwrap().iter().map(|g| g.id).collect();
    assert_eq!(ids.len(), 2);
    let sorted = |mut credits: Vec<fleetlens_store::BucketCredit>| {
        credits.sort_by_key(|c| (c.gpu_id, c.bucket_ms));
        credits
    };
    let other = fleetlens_core::OrgId(DEFAULT_ORG.get() + 1);
    for res in [Resolution::Minute, Resolution::Hour] {
        for (from, to) in [(0, i64::MAX), (T0 + 17 * 60_000, T0 + H + 31 * 60_000)] {
            let all = sorted(store.credits(DEFAULT_ORG, None, res, from, to).await.unwrap());
            assert!(ids.iter().all(|id| all.iter().any(|c| c.gpu_id == *id)), "{res:?} [{from}, {to}): both GPUs");
            for id in &ids {
                let mine = sorted(store.credits(DEFAULT_ORG, Some(&[*id]), res, from, to).await.unwrap());
                let expected: Vec<_> = all.iter().filter(|c| c.gpu_id == *id).cloned().collect();
                assert_eq!(mine, expected, "{res:?} [{from}, {to}) of GPU {id:?}");
            }
            assert_eq!(sorted(store.credits(DEFAULT_ORG, Some(&ids), res, from, to).await.unwrap()), all);
            assert!(store.credits(DEFAULT_ORG, Some(&[]), res, from, to).await.unwrap().is_empty());
            assert!(store.credits(other, Some(&ids), res, from, to).await.unwrap().is_empty());
        }
    }
}

async fn a_late_sample_reopens_a_packed_hour(backend: Backend) {
    let (_db, store) = open(backend).await;
    let batch = samples("GPU-late", T0, 3600, 1000);
    store.ingest(DEFAULT_ORG, "h", batch.clone()).await.unwrap();
    let now = T0 + 2 * H;
    let report = seal(&store, now, 100).await;
    assert_eq!((report.blocks, report.minute_blocks), (1, 1));
    let gpu = store.gpu(DEFAULT_ORG, "GPU-late").await.unwrap().unwrap();
    let hour_before = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, T0, T0 + H).await.unwrap();
    assert_eq!(hour_before[0].sample_count, 3600);
    let mut late = batch[100].clone();
    late.ts_ms += 500;
    late.gpu_util_pct = Some(77.0);
    store.ingest(DEFAULT_ORG, "h", vec![late.clone()]).await.unwrap();
    let minute = (late.ts_ms / 60_000) * 60_000;
    let check = |stage: &'static str| {
        let store = store.clone();
        async move {
            let m = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, minute, minute + 1).await.unwrap();
            assert_eq!(m.len(), 1, "{stage}");
            assert_eq!(m[0].sample_count, 61, "{stage}: the minute counts the late sample once");
            let all = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
            assert_eq!(all.len(), 60, "{stage}: every minute once");
            assert_eq!(all.iter().map(|b| b.sample_count).sum::<i64>(), 3601, "{stage}");
            let hour = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, T0, T0 + H).await.unwrap();
            assert_eq!(hour[0].sample_count, 3601, "{stage}: the hour counts it once");
            let series = store.series(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
            assert_eq!(series.len(), 60, "{stage}");
        }
    };
    // Read while the minute waits for the rollup job (the open minute over the packed hour) …
    check("open").await;
    // … after the job wrote it (the hour unpacked to rows) …
    store.close_minutes(LATER, 120_000).await.unwrap();
    check("closed").await;
    // … and after the hour is packed again.
    let report = seal(&store, now, 100).await;
    assert_eq!((report.blocks, report.minute_blocks), (1, 1));
    check("packed again").await;
}

async fn retention_removes_packed_minutes(backend: Backend) {
    let (_db, store) = open(backend).await;
    let day = 86_400_000i64;
    // Three days of 4 samples an hour: 72 packed hours of 4 minutes each.
    store.ingest(DEFAULT_ORG, "h", samples("GPU-ret", T0, 3 * 24 * 4, 900_000)).await.unwrap();
    let end = T0 + 3 * day;
    assert_eq!(seal(&store, end + H, 10_000).await.minute_blocks, 72);
    let now = end + day / 2;
    // Minute rollups kept two days: the 36 hours ending at or before now - 2 days go.
    let policy = RetentionPolicy { rollup_1m_ms: 2 * day, ..RetentionPolicy::default() };
    let removed = store.apply_retention(policy, now).await.unwrap();
    assert_eq!(removed.rollups_1m, 36 * 4);
    let gpu = store.gpu(DEFAULT_ORG, "GPU-ret").await.unwrap().unwrap();
    let left = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
    assert_eq!(left.len(), 36 * 4);
    assert!(left[0].bucket_ms >= now - 2 * day);
    // Hours are kept longer: all 72 are still there.
    assert_eq!(store.rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, 0, i64::MAX).await.unwrap().len(), 72);
    assert_eq!(store.apply_retention(policy, now).await.unwrap().rollups_1m, 0);
}

/// Rows of the open tables in `table` (PostgreSQL), or None when it does not exist.
async fn rows_in(pg: &sqlx::PgPool, table: &str) -> Option<i64> {
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(table).fetch_one(pg).await.unwrap();
    if !exists {
        return None;
    }
    Some(sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(pg).await.unwrap())
}

/// PostgreSQL keeps the open tables (`samples`, `sample_batches`, `rollups_1m`,
/// `rollup_pending`) in hour partitions: a pass prepares the next hours, and drops an hour's
/// partitions once the rollup job, sealing and packing emptied them; a late sample for a dropped
/// hour lands in the default partition and is sealed from there. Every answer stays the same.
/// SQLite has nothing to drop.
async fn emptied_hour_partitions_are_dropped(backend: Backend) {
    let (db, store) = open(backend).await;
    let pg = match backend {
        Backend::Postgres => Some(sqlx::PgPool::connect(&db.url).await.unwrap()),
        Backend::Sqlite => None,
    };
    let hour = T0 / H;
    let (samples_hour, minutes_hour) = (format!("samples_hour_{hour}"), format!("rollups_1m_hour_{hour}"));
    let marks_hour = format!("rollup_pending_hour_{hour}");
    let blocks_hour = format!("sample_batches_hour_{hour}");
    // A pass at T0 prepares the partitions of T0's hour and the next two.
    assert_eq!(seal(&store, T0, 100).await, Default::default());
    let batch = samples("GPU-p", T0, 3600, 1000);
    store.ingest(DEFAULT_ORG, "h", batch.clone()).await.unwrap();
    if let Some(pg) = &pg {
        assert_eq!(rows_in(pg, &marks_hour).await, Some(60), "the hour's minute marks in its partition");
        assert_eq!(rows_in(pg, "rollup_pending_default").await, Some(0));
    }
    store.close_minutes(LATER, 120_000).await.unwrap();
    if let Some(pg) = &pg {
        assert_eq!(rows_in(pg, &marks_hour).await, Some(0), "the job closed the hour's minutes");
        assert_eq!(
            rows_in(pg, &blocks_hour).await,
            Some(60),
            "the batch as a block per minute in the hour's partition"
        );
        assert_eq!(rows_in(pg, &samples_hour).await, Some(0));
        assert_eq!(rows_in(pg, &minutes_hour).await, Some(60), "the hour's minutes in its partition");
        assert_eq!(rows_in(pg, "samples_default").await, Some(0));
        for later in [hour + 1, hour + 2] {
            assert_eq!(rows_in(pg, &format!("samples_hour_{later}")).await, Some(0), "prepared ahead");
        }
    }
    let before = answers(store.as_ref()).await;
    let minutes_before = minute_answers(store.as_ref()).await;

    let now = T0 + H + SEAL_LATENESS_MS;
    let report = seal(&store, now, 100).await;
    assert_eq!((report.blocks, report.samples, report.minute_blocks), (1, 3600, 1));
    assert_eq!(report.partitions_dropped, if pg.is_some() { 4 } else { 0 });
    if let Some(pg) = &pg {
        assert_eq!(rows_in(pg, &samples_hour).await, None, "emptied and dropped");
        assert_eq!(rows_in(pg, &blocks_hour).await, None, "emptied and dropped");
        assert_eq!(rows_in(pg, &minutes_hour).await, None, "emptied and dropped");
        assert_eq!(rows_in(pg, &marks_hour).await, None, "emptied and dropped");
        assert_eq!(rows_in(pg, &format!("samples_hour_{}", hour + 3)).await, Some(0), "prepared ahead of `now`");
    }
    assert_eq!(answers(store.as_ref()).await, before);
    assert_eq!(minute_answers(store.as_ref()).await, minutes_before);
    assert_eq!(seal(&store, now, 100).await, Default::default(), "nothing else to drop");

    // A late sample for the dropped hour: the hour's rows come back (into the default
    // partition on PostgreSQL; the late sample, which meets no stored key, as a block of its
    // own there), and the next pass seals them again.
    let mut late = batch[10].clone();
    late.ts_ms += 300;
    assert_eq!(store.ingest(DEFAULT_ORG, "h", vec![late.clone()]).await.unwrap().inserted, 1);
    if let Some(pg) = &pg {
        assert_eq!(rows_in(pg, "samples_default").await, Some(3600));
        assert_eq!(rows_in(pg, "sample_batches_default").await, Some(1));
    }
    let report = seal(&store, now, 100).await;
    assert_eq!((report.blocks, report.samples, report.partitions_dropped), (1, 3601, 0));
    if let Some(pg) = &pg {
        assert_eq!(rows_in(pg, "samples_default").await, Some(0), "sealed from the default partition");
        assert_eq!(rows_in(pg, "sample_batches_default").await, Some(0));
    }
    let mut expected = batch;
    expected.insert(11, late);
    let gpu = store.gpu(DEFAULT_ORG, "GPU-p").await.unwrap().unwrap();
    assert_eq!(store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 10_000).await.unwrap(), expected);
}

/// Apply the repository's migrations up to `version` to the empty database at `url`, as the
/// release of that version did, then run `statements` (that release's rows).
async fn migrate_to(backend: Backend, url: &str, version: i64, statements: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations").join(match backend {
        Backend::Postgres => "postgres",
        Backend::Sqlite => "sqlite",
    });
    for entry in std::fs::read_dir(source).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name[..4].parse::<i64>().unwrap() <= version {
            std::fs::copy(&path, dir.path().join(name)).unwrap();
        }
    }
    let migrator = sqlx::migrate::Migrator::new(dir.path()).await.unwrap();
    match backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            migrator.run(&pool).await.unwrap();
            for sql in statements {
                sqlx::query(sql).execute(&pool).await.unwrap();
            }
        }
        Backend::Sqlite => {
            let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
            let pool = sqlx::SqlitePool::connect_with(opts.create_if_missing(true)).await.unwrap();
            migrator.run(&pool).await.unwrap();
            for sql in statements {
                sqlx::query(sql).execute(&pool).await.unwrap();
            }
        }
    }
}

/// A database of the release before migration 0026 (PostgreSQL's open tables unpartitioned),
/// with open rows, a minute row and a minute's mark in it: after the upgrade the reads answer them, and the
/// sealing job seals and packs them as before (on PostgreSQL from the default partitions).
async fn open_rows_written_before_hour_partitions_survive_the_upgrade(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut rows = vec![format!(
        "INSERT INTO gpus (org_id, uuid, host, first_seen_ms, last_seen_ms) VALUES (1, 'GPU-old', 'h', {T0}, {})",
        T0 + 119_000
    )];
    for i in 0..120i64 {
        rows.push(format!(
            "INSERT INTO samples (gpu_id, ts_ms, gpu_util_pct, sm_active_pct, power_w) VALUES (1, {}, {}, 12.5, 300.25)",
            T0 + i * 1000,
            i % 100
        ));
    }
    rows.push(format!(
        "INSERT INTO rollups_1m (gpu_id, bucket_ms, sample_count, allocated_count, processes_read_count, first_ts_ms, \
         last_ts_ms) VALUES (1, {T0}, 60, 0, 0, {T0}, {})",
        T0 + 59_000
    ));
    // The second minute waits for the rollup job (its mark; 0027 partitions the marks).
    rows.push(format!("INSERT INTO rollup_pending (gpu_id, minute_ms) VALUES (1, {})", T0 + 60_000));
    migrate_to(backend, &db.url, 25, &rows).await;

    let store = fleetlens_store::connect(&db.url).await.expect("the upgrade");
    let gpu = store.gpu(DEFAULT_ORG, "GPU-old").await.unwrap().unwrap();
    let read = store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap();
    assert_eq!(read.len(), 120);
    assert_eq!((read[7].ts_ms, read[7].gpu_util_pct, read[7].power_w), (T0 + 7000, Some(7.0), Some(300.25)));
    // The marked minute reads from its samples until the job writes it.
    let minutes = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
    assert_eq!(
        minutes.iter().map(|m| (m.bucket_ms, m.sample_count)).collect::<Vec<_>>(),
        [(T0, 60), (T0 + 60_000, 60)]
    );

    if let Backend::Postgres = backend {
        let pg = sqlx::PgPool::connect(&db.url).await.unwrap();
        assert_eq!(rows_in(&pg, "rollup_pending_default").await, Some(1), "the mark kept by the upgrade");
    }

    let report = seal(&store, T0 + H + SEAL_LATENESS_MS, 100).await;
    assert_eq!((report.blocks, report.samples, report.minute_blocks), (1, 120, 1));
    assert_eq!(store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap(), read);
    // The job wrote the marked minute (from the default partition on PostgreSQL) as it read.
    assert_eq!(store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap(), minutes);
    if let Backend::Postgres = backend {
        let pg = sqlx::PgPool::connect(&db.url).await.unwrap();
        assert_eq!(rows_in(&pg, "rollup_pending_default").await, Some(0), "the job took the mark");
    }
}

/// A database of the release before migration 0028 (a column per signal in `samples`): the
/// upgrade copies each open row's values into `vals` before 0029 drops the columns, and every
/// value reads back exactly as stored (absent stays absent, a value finer than the stored
/// precision keeps its bits, integers stay whole).
async fn open_rows_with_a_column_per_signal_survive_the_upgrade(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut rows = vec![format!(
        "INSERT INTO gpus (org_id, uuid, host, first_seen_ms, last_seen_ms) VALUES (1, 'GPU-cols', 'h', {T0}, {})",
        T0 + 9_000
    )];
    for i in 0..10i64 {
        let util = if i == 3 { "NULL".to_string() } else { format!("{}", i * 10) };
        rows.push(format!(
            "INSERT INTO samples (gpu_id, ts_ms, gpu_util_pct, sm_active_pct, power_w, mem_used_bytes, \
             throttle_reasons, tensor_hmma_active_pct, processes) \
             VALUES (1, {}, {util}, 12.3456789, 300.25, {}, -9223372036854775807, 0.5, '[{{\"pid\":{i}}}]')",
            T0 + i * 1000,
            81_000_000_000 + i,
        ));
    }
    migrate_to(backend, &db.url, 27, &rows).await;

    let store = fleetlens_store::connect(&db.url).await.expect("the upgrade");
    let gpu = store.gpu(DEFAULT_ORG, "GPU-cols").await.unwrap().unwrap();
    let read = store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap();
    assert_eq!(read.len(), 10);
    for (i, s) in read.iter().enumerate() {
        let i = i as i64;
        assert_eq!(s.ts_ms, T0 + i * 1000);
        assert_eq!(s.gpu_util_pct, (i != 3).then_some(i as f64 * 10.0));
        assert_eq!(s.sm_active_pct, Some(12.3456789));
        assert_eq!((s.power_w, s.mem_used_bytes), (Some(300.25), Some(81_000_000_000 + i)));
        assert_eq!(s.throttle_reasons, Some(0x8000_0000_0000_0001));
        assert_eq!((s.tensor_hmma_active_pct, s.temp_c, s.energy_j), (Some(0.5), None, None));
        assert_eq!(s.processes.as_ref().map(|p| p[0].pid), Some(i as u32));
    }
    // The columns are gone: the values live in `vals` only.
    let probe = "SELECT count(gpu_util_pct) FROM samples";
    let gone = match backend {
        Backend::Postgres => sqlx::query(probe).execute(&sqlx::PgPool::connect(&db.url).await.unwrap()).await.is_err(),
        Backend::Sqlite => {
            sqlx::query(probe).execute(&sqlx::SqlitePool::connect(&db.url).await.unwrap()).await.is_err()
        }
    };
    assert!(gone, "migration 0029 dropped the per-signal columns");
    // A second start finds nothing to convert and reads the same.
    drop(store);
    let store = fleetlens_store::connect(&db.url).await.expect("a second start");
    assert_eq!(store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap(), read);
    let report = seal(&store, T0 + H + SEAL_LATENESS_MS, 100).await;
    assert_eq!((report.blocks, report.samples), (1, 10));
    for (b, t) in store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap().iter().zip(&read) {
        assert_within_precision(b, t);
    }
}
