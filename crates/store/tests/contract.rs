//! The store contract: every test here runs against SQLite and against PostgreSQL.

use fleetlens_core::{Credit, GpuId, GpuProcess, QualityFlags, Resolution, RollupAccumulator, Sample, Thresholds};
use fleetlens_store::{
    DEFAULT_ORG, IngestRules, NewApiKey, OrgId, RetentionPolicy, SampleBatch, Scope, StoreError, hash_api_key,
};
use fleetlens_tests::{Backend, TestDatabase, fixture};

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    fixture_round_trips_with_absent_values,
    ingest_is_idempotent,
    rollups_match_a_recomputation_from_raw,
    latest_sample_and_identity_follow_event_time,
    api_keys_are_found_by_hash_only,
    retention_deletes_only_what_is_old,
    concurrent_batches_are_each_stored_once,
    organisations_do_not_see_each_other,
    gpu_reads_by_id_stay_in_their_organisation,
    credits_follow_the_minutes_as_samples_arrive,
    hour_credit_split_partitions_the_period,
    whole_days_give_the_sums_of_their_hours,
    the_feed_reads_many_gpus_at_once,
    maintenance_clears_the_garbage_of_in_place_updates,
    ingest_rules_refuse_whole_batches_and_admins_move_gpus,
    concurrent_batches_never_pass_a_quota_together,
    rollups_written_once_equal_the_per_sample_reference,
    each_committed_batch_numbers_its_gpus_once,
    open_samples_are_blocks_until_a_batch_meets_them,
    retention_cuts_through_an_open_block,
);

/// A time after every test's samples: the rollup job then writes every marked minute.
const LATER: i64 = 4_000_000_000_000;

fn trace() -> Vec<Sample> {
    std::fs::read_to_string(fixture("nvml-h200-phases.jsonl"))
        .expect("fixture")
        .lines()
        .map(|l| serde_json::from_str(l).expect("fixture line"))
        .collect()
}

fn synthetic(uuid: &str, start_ms: i64, n: i64, step_ms: i64) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            ts_ms: start_ms + i * step_ms,
            uuid: uuid.into(),
            gpu_index: Some(0),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            gpu_util_pct: Some((i % 101) as f64),
            sm_active_pct: if i % 3 == 0 { None } else { Some((i % 50) as f64 + 0.25) },
            tensor_active_pct: Some(((i * 7) % 100) as f64),
            mem_used_bytes: Some(i * 1_000_000),
            power_w: Some(100.0 + i as f64),
            processes: Some(if i % 2 == 0 {
                vec![]
            } else {
                vec![GpuProcess { pid: 42, used_bytes: Some(1 << 30), sm_pct: None, ..Default::default() }]
            }),
            ..Default::default()
        })
        .collect()
}

async fn fixture_round_trips_with_absent_values(backend: Backend) {
    let (_db, store) = open(backend).await;
    let samples = trace();
    let outcome = store.ingest(DEFAULT_ORG, "gpu-node-01", samples.clone()).await.unwrap();
    assert_eq!((outcome.inserted, outcome.duplicates), (84, 0));
    let gpu = store.gpu(DEFAULT_ORG, &samples[0].uuid).await.unwrap().expect("gpu registered");
    assert_eq!(gpu.info.host, "gpu-node-01");
    assert_eq!(gpu.info.name.as_deref(), Some("NVIDIA H200"));
    let back = store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 10_000).await.unwrap();
    assert_eq!(back, samples, "every field round-trips, None stays None");
    assert!(back.iter().all(|s| s.fp64_active_pct.is_none()));
    assert!(back.iter().any(|s| s.is_allocated()));
    assert_eq!(store.sample_count().await.unwrap(), 84);
}

async fn ingest_is_idempotent(backend: Backend) {
    let (_db, store) = open(backend).await;
    let batch = synthetic("GPU-idem", 1_700_000_000_000, 500, 1000);
    store.ingest(DEFAULT_ORG, "h", batch.clone()).await.unwrap();
    let gpu = store.gpu(DEFAULT_ORG, "GPU-idem").await.unwrap().unwrap();
    let rollups = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
    // The same batch again, and a batch overlapping half of it plus a sample twice.
    let again = store.ingest(DEFAULT_ORG, "h", batch.clone()).await.unwrap();
    assert_eq!((again.inserted, again.duplicates), (0, 500));
    let mut overlap = synthetic("GPU-idem", 1_700_000_250_000, 500, 1000);
    overlap.push(overlap[499].clone());
    let o = store.ingest(DEFAULT_ORG, "h", overlap).await.unwrap();
    // Of the 250 overlapping samples, the 83 whose stored sample lacks SM activity (the stored
    // one's index is a multiple of 3, the resent one's is not) fill it in (merge-on-insert);
    // the rest and the repeated sample are duplicates.
    assert_eq!((o.inserted, o.merged, o.duplicates), (250, 83, 168));
    assert_eq!(store.sample_count().await.unwrap(), 750);
    let after = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, 1_700_000_250_000 - 60_000).await.unwrap();
    assert_eq!(after[..], rollups[..after.len()], "rollups of the resent range are unchanged");
}

async fn rollups_match_a_recomputation_from_raw(backend: Backend) {
    let (_db, store) = open(backend).await;
    let all = synthetic("GPU-roll", 1_700_000_000_500, 7_300, 1000);
    // Arrive in uneven batches, out of order.
    let mut chunks: Vec<Vec<Sample>> = all.chunks(777).map(<[Sample]>::to_vec).collect();
    chunks.reverse();
    for c in chunks {
        store.ingest(DEFAULT_ORG, "h", c).await.unwrap();
    }
    let gpu = store.gpu(DEFAULT_ORG, "GPU-roll").await.unwrap().unwrap();
    for res in Resolution::ALL {
        let mut expected = RollupAccumulator::new(res);
        // 1-s samples: each is 1 s of sampled time, in whatever order the batches came.
        all.iter().for_each(|s| expected.add(gpu.id, s, 1000, QualityFlags::NONE));
        let expected = expected.into_buckets();
        let stored = store.rollups(DEFAULT_ORG, gpu.id, res, 0, i64::MAX).await.unwrap();
        assert_eq!(stored.len(), expected.len(), "{res:?} bucket count");
        for (s, e) in stored.iter().zip(&expected) {
            assert_eq!(
                (s.bucket_ms, s.sample_count, s.allocated_count),
                (e.bucket_ms, e.sample_count, e.allocated_count)
            );
            assert_eq!((s.first_ts_ms, s.last_ts_ms), (e.first_ts_ms, e.last_ts_ms));
            assert_eq!((s.sampled_ms, s.quality), (e.sampled_ms, e.quality), "{res:?} sampled time and flags");
            for (a, b) in s.signals.iter().zip(&e.signals) {
                assert_eq!((a.count, a.min, a.max), (b.count, b.min, b.max));
                assert!((a.sum - b.sum).abs() < 1e-6 * b.sum.abs().max(1.0), "{res:?} sum {} vs {}", a.sum, b.sum);
            }
        }
    }
    // A sub-range query returns just its buckets.
    let hour =
        store.rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, 1_700_002_800_000, 1_700_006_400_000).await.unwrap();
    assert_eq!(hour.len(), 1);
}

async fn latest_sample_and_identity_follow_event_time(backend: Backend) {
    let (_db, store) = open(backend).await;
    let new = synthetic("GPU-late", 2_000_000, 10, 1000);
    store.ingest(DEFAULT_ORG, "new-host", new.clone()).await.unwrap();
    // A back-filled, older batch from the GPU's previous host.
    store.ingest(DEFAULT_ORG, "old-host", synthetic("GPU-late", 1_000_000, 10, 1000)).await.unwrap();
    let gpu = store.gpu(DEFAULT_ORG, "GPU-late").await.unwrap().unwrap();
    assert_eq!(gpu.info.host, "new-host");
    assert_eq!((gpu.info.first_seen_ms, gpu.info.last_seen_ms), (1_000_000, 2_009_000));
    assert_eq!(gpu.latest.as_ref(), Some(&new[9]));
    let list = store.gpus(DEFAULT_ORG).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].latest.as_ref().map(|s| s.ts_ms), Some(2_009_000));
    // The identity alone is the same record without the newest sample, in its organisation only.
    let identity = store.gpu_identity(DEFAULT_ORG, "GPU-late").await.unwrap().unwrap();
    assert_eq!(identity, fleetlens_store::GpuRecord { latest: None, ..gpu.clone() });
    assert!(store.gpu_identity(DEFAULT_ORG, "GPU-none").await.unwrap().is_none());
    let other = store.create_org("other", 0).await.unwrap();
    assert!(store.gpu_identity(other, "GPU-late").await.unwrap().is_none());
    // Sample windows are half-open and limited.
    let page = store.samples(DEFAULT_ORG, gpu.id, 1_005_000, 2_002_000, 100).await.unwrap();
    assert_eq!(page.len(), 5 + 2);
    let limited = store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 3).await.unwrap();
    assert_eq!(limited.iter().map(|s| s.ts_ms).collect::<Vec<_>>(), [1_000_000, 1_001_000, 1_002_000]);
}

async fn api_keys_are_found_by_hash_only(backend: Backend) {
    let (_db, store) = open(backend).await;
    let hash = hash_api_key("secret-1");
    let key = NewApiKey {
        org_id: DEFAULT_ORG,
        name: "agent",
        prefix: "fl_secr",
        key_hash: &hash,
        scopes: &[Scope::Ingest],
        created_ms: 5,
    };
    let stored = store.ensure_api_key(key.clone()).await.unwrap();
    let again = store.ensure_api_key(key).await.unwrap();
    assert_eq!(stored, again, "ensure is idempotent");
    let found = store.api_key_by_hash(&hash).await.unwrap().unwrap();
    assert!(found.allows(Scope::Ingest) && !found.allows(Scope::Read));
    assert!(store.api_key_by_hash(&hash_api_key("secret-2")).await.unwrap().is_none());
    assert!(store.api_key_by_hash("secret-1").await.unwrap().is_none(), "the secret itself is not stored");
}

async fn retention_deletes_only_what_is_old(backend: Backend) {
    let (_db, store) = open(backend).await;
    let day = 86_400_000i64;
    // Minute-aligned, so each 120-s run of samples fills exactly 2 minute buckets.
    let now = 1_700_000_040_000i64;
    let old = synthetic("GPU-ret", now - 10 * day, 120, 1000);
    let recent = synthetic("GPU-ret", now - day, 120, 1000);
    store.ingest(DEFAULT_ORG, "h", old).await.unwrap();
    store.ingest(DEFAULT_ORG, "h", recent.clone()).await.unwrap();
    let report = store.apply_retention(RetentionPolicy::default(), now).await.unwrap();
    assert_eq!((report.samples, report.rollups_1m, report.rollups_1h), (120, 0, 0));
    let gpu = store.gpu(DEFAULT_ORG, "GPU-ret").await.unwrap().unwrap();
    assert_eq!(store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap(), recent);
    // Rollups outlive raw samples, then go by their own policy.
    assert!(!store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, now - 9 * day).await.unwrap().is_empty());
    let short = RetentionPolicy { raw_ms: 7 * day, rollup_1m_ms: 5 * day, rollup_1h_ms: 400 * day };
    let report = store.apply_retention(short, now).await.unwrap();
    assert_eq!((report.samples, report.rollups_1m, report.rollups_1h), (0, 2, 0));
    assert_eq!(store.rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, 0, i64::MAX).await.unwrap().len(), 2);
}

async fn concurrent_batches_are_each_stored_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let mut tasks = Vec::new();
    for g in 0..16 {
        for part in 0..4 {
            let store = store.clone();
            // Each batch is sent twice, concurrently, to exercise idempotency under contention.
            for _ in 0..2 {
                let store = store.clone();
                let batch = synthetic(&format!("GPU-c{g}"), 1_700_000_000_000 + part * 250_000, 250, 1000);
                tasks.push(tokio::spawn(async move { store.ingest(DEFAULT_ORG, "h", batch).await.unwrap() }));
            }
        }
    }
    let mut inserted = 0;
    for t in tasks {
        inserted += t.await.unwrap().inserted;
    }
    assert_eq!(inserted, 16 * 4 * 250);
    assert_eq!(store.sample_count().await.unwrap(), 16 * 4 * 250);
    let gpu = store.gpu(DEFAULT_ORG, "GPU-c3").await.unwrap().unwrap();
    let total: i64 = store
        .rollups(DEFAULT_ORG, gpu.id, Resolution::Hour, 0, i64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|b| b.sample_count)
        .sum();
    assert_eq!(total, 1000, "no double-counted rollups");
}

async fn organisations_do_not_see_each_other(backend: Backend) {
    let (_db, store) = open(backend).await;
    let other = store.create_org("other", 0).await.unwrap();
    store.ingest(DEFAULT_ORG, "h", synthetic("GPU-a", 1_000, 5, 1000)).await.unwrap();
    store.ingest(other, "h", synthetic("GPU-a", 1_000, 5, 1000)).await.unwrap();
    store.ingest(other, "h", synthetic("GPU-b", 1_000, 5, 1000)).await.unwrap();
    assert_eq!(store.gpus(DEFAULT_ORG).await.unwrap().len(), 1);
    assert_eq!(store.gpus(other).await.unwrap().len(), 2);
    assert!(store.gpu(DEFAULT_ORG, "GPU-b").await.unwrap().is_none());
    let a1 = store.gpu(DEFAULT_ORG, "GPU-a").await.unwrap().unwrap();
    let a2 = store.gpu(other, "GPU-a").await.unwrap().unwrap();
    assert_ne!(a1.id, a2.id, "the same uuid in two organisations is two GPUs");
    assert_eq!(store.sample_count().await.unwrap(), 15);
}

/// Samples, rollups and chart series are read by GPU id: an id of another organisation's GPU
/// reads as a GPU without data, whether its minutes are open, closed or its hours sealed.
async fn gpu_reads_by_id_stay_in_their_organisation(backend: Backend) {
    let (_db, store) = open(backend).await;
    let other = store.create_org("other", 0).await.unwrap();
    let t0 = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000;
    store.ingest(DEFAULT_ORG, "h", synthetic("GPU-mine", t0, 7200, 1000)).await.unwrap();
    store.ingest(other, "h", synthetic("GPU-theirs", t0, 7200, 1000)).await.unwrap();
    let mine = store.gpu(DEFAULT_ORG, "GPU-mine").await.unwrap().unwrap().id;
    let theirs = store.gpu(other, "GPU-theirs").await.unwrap().unwrap().id;
    let reads = |org, gpu| {
        let store = store.clone();
        async move {
            (
                store.samples(org, gpu, 0, i64::MAX, 100_000).await.unwrap().len(),
                store.rollups(org, gpu, Resolution::Minute, 0, i64::MAX).await.unwrap().len(),
                store.rollups(org, gpu, Resolution::Hour, 0, i64::MAX).await.unwrap().len(),
                store.series(org, gpu, Resolution::Minute, 0, i64::MAX).await.unwrap().len(),
                store.series(org, gpu, Resolution::Hour, 0, i64::MAX).await.unwrap().len(),
            )
        }
    };
    let check = |stage: &'static str| {
        let reads = &reads;
        async move {
            // Each organisation reads its own GPU in full …
            assert_eq!(reads(DEFAULT_ORG, mine).await, (7200, 120, 2, 120, 2), "{stage}: own GPU");
            assert_eq!(reads(other, theirs).await, (7200, 120, 2, 120, 2), "{stage}: own GPU");
            // … and nothing of the other's, by its id.
            assert_eq!(reads(DEFAULT_ORG, theirs).await, (0, 0, 0, 0, 0), "{stage}: other org's GPU");
            assert_eq!(reads(other, mine).await, (0, 0, 0, 0, 0), "{stage}: other org's GPU");
        }
    };
    check("open minutes").await;
    assert!(store.close_minutes(LATER, 120_000).await.unwrap() > 0);
    check("closed minutes").await;
    while store.seal_closed_hours(LATER, 100).await.unwrap().more {}
    check("sealed hours").await;
}

async fn credits_follow_the_minutes_as_samples_arrive(backend: Backend) {
    let (_db, store) = open(backend).await;
    // 2.5 hours of samples whose behaviour changes every 7 minutes, arriving in shuffled
    // batches, so minutes are classified, then re-classified as their other samples arrive.
    let start = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000;
    let all: Vec<Sample> = (0..9000)
        .map(|i| {
            let busy = (i / 420) % 2 == 1;
            Sample {
                ts_ms: start + i * 1000,
                uuid: "GPU-credit".into(),
                name: Some("NVIDIA H100 80GB HBM3".into()),
                power_limit_w: Some(700.0),
                gpu_util_pct: Some(if busy { 100.0 } else { 0.0 }),
                sm_active_pct: Some(if busy { 20.0 + (i % 7) as f64 } else { 0.0 }),
                sm_occupancy_pct: Some(10.0),
                tensor_active_pct: Some(0.0),
                dram_active_pct: Some(5.0),
                power_w: Some(if busy { 300.0 } else { 90.0 }),
                mem_used_bytes: Some(10 << 30),
                processes: Some(vec![GpuProcess { pid: 3, used_bytes: Some(10 << 30), ..Default::default() }]),
                ..Default::default()
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..all.len() / 100).collect();
    // A fixed permutation: stride through the batches.
    order.sort_by_key(|i| (i * 37) % 90);
    for i in order {
        store.ingest(DEFAULT_ORG, "h", all[i * 100..(i + 1) * 100].to_vec()).await.unwrap();
    }
    let gpu = store.gpu(DEFAULT_ORG, "GPU-credit").await.unwrap().unwrap();
    let mut expected = RollupAccumulator::new(Resolution::Minute);
    all.iter().for_each(|s| expected.add(gpu.id, s, 1000, QualityFlags::NONE));
    let minutes = store.credits(DEFAULT_ORG, None, Resolution::Minute, 0, i64::MAX).await.unwrap();
    let th = Thresholds::default();
    let mut hours: std::collections::BTreeMap<i64, Credit> = Default::default();
    let expected = expected.into_buckets();
    assert_eq!(minutes.len(), expected.len());
    for b in &expected {
        let stored = minutes.iter().find(|m| m.bucket_ms == b.bucket_ms).expect("minute credit");
        let (want, _) = Credit::of_minute(b, Some(700.0), None, &th);
        let diff = stored.credit.minus(&want).to_cells().iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(diff < 1e-6, "minute {} credit differs by {diff}", b.bucket_ms);
        hours.entry(Resolution::Hour.bucket_start(b.bucket_ms)).or_default().add_scaled(&want, 1.0);
    }
    let stored_hours = store.credits(DEFAULT_ORG, None, Resolution::Hour, 0, i64::MAX).await.unwrap();
    assert_eq!(stored_hours.len(), 3);
    for h in stored_hours {
        let diff = h.credit.minus(&hours[&h.bucket_ms]).to_cells().iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(diff < 1e-6, "hour {} credit differs from the sum of its minutes by {diff}", h.bucket_ms);
        assert!((h.credit.covered_s() - 3600.0).abs() < 1e-6 || h.bucket_ms == start + 2 * 3_600_000);
    }
}

/// `org_hour_credit_split` (billing): the hours that weigh 1 are summed per GPU, every other
/// hour of the period comes back on its own, and together they are exactly the period's hours.
async fn hour_credit_split_partitions_the_period(backend: Backend) {
    const H: i64 = 3_600_000;
    const M: i64 = 60_000;
    let (_db, store) = open(backend).await;
    let t0 = 1_790_000_000_000i64.div_euclid(H) * H;
    // a: starts 17 min into hour 0, runs past the period; b: hours 0–4 exactly;
    // c: starts and ends inside the whole hours (hour 2 + 5 min to hour 3 + 30 min).
    for (uuid, start, minutes) in [("GPU-a", t0 + 17 * M, 400), ("GPU-b", t0, 300), ("GPU-c", t0 + 2 * H + 5 * M, 85)] {
        for chunk in synthetic(uuid, start, minutes, M).chunks(100) {
            store.ingest(DEFAULT_ORG, "h", chunk.to_vec()).await.unwrap();
        }
    }
    // The period: hour 0 + 30 min to hour 5 + 40 min; whole hours 1–4.
    let (from, end) = (t0 + 30 * M, t0 + 5 * H + 40 * M);
    let split = store.org_hour_credit_split(DEFAULT_ORG, from, end, t0 + H, t0 + 5 * H).await.unwrap();
    let all = store.credits(DEFAULT_ORG, None, Resolution::Hour, t0, end).await.unwrap();
    let id = |uuid: &str| {
        let store = store.clone();
        let uuid = uuid.to_string();
        async move { store.gpu(DEFAULT_ORG, &uuid).await.unwrap().unwrap().id }
    };
    let (a, b, c) = (id("GPU-a").await, id("GPU-b").await, id("GPU-c").await);
    let hours_of = |rows: &[fleetlens_store::BucketCredit], gpu: GpuId| {
        let mut v: Vec<i64> = rows.iter().filter(|r| r.gpu_id == gpu).map(|r| (r.bucket_ms - t0) / H).collect();
        v.sort();
        v
    };
    assert_eq!(hours_of(&split.partial, a), [0, 5], "a: the period's partial edges");
    assert_eq!(hours_of(&split.partial, b), [0], "b: the period's first hour only (its last minute ends hour 4)");
    assert_eq!(hours_of(&split.partial, c), [2, 3], "c: its own first and last hours");
    let whole = |gpu: GpuId| split.whole.iter().find(|w| w.gpu_id == gpu).map(|w| w.credit.covered_s());
    assert_eq!(whole(a), Some(4.0 * 3600.0));
    assert_eq!(whole(b), Some(4.0 * 3600.0));
    assert_eq!(whole(c), None);
    for gpu in [a, b, c] {
        let mut total = Credit::default();
        all.iter().filter(|r| r.gpu_id == gpu).for_each(|r| total.add_scaled(&r.credit, 1.0));
        let mut parts = Credit::default();
        split
            .whole
            .iter()
            .chain(&split.partial)
            .filter(|r| r.gpu_id == gpu)
            .for_each(|r| parts.add_scaled(&r.credit, 1.0));
        let diff = total.minus(&parts).to_cells().iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(diff < 1e-6, "GPU {gpu}: whole + partial differ from the period's hours by {diff}");
    }
    // A period without a whole hour: everything is partial.
    let split = store.org_hour_credit_split(DEFAULT_ORG, t0 + 10 * M, t0 + 50 * M, t0 + H, t0).await.unwrap();
    assert!(split.whole.is_empty());
    assert_eq!(split.partial.len(), 2, "hour 0 of a and b");
    // The same split once the rollup job has written the minutes (read from stored rows alone).
    let open_split = store.org_hour_credit_split(DEFAULT_ORG, from, end, t0 + H, t0 + 5 * H).await.unwrap();
    assert!(store.close_minutes(LATER, 120_000).await.unwrap() > 0);
    let stored_split = store.org_hour_credit_split(DEFAULT_ORG, from, end, t0 + H, t0 + 5 * H).await.unwrap();
    assert_same_credits(&open_split.whole, &stored_split.whole, "whole");
    assert_same_credits(&open_split.partial, &stored_split.partial, "partial");
}

fn assert_same_credits(a: &[fleetlens_store::BucketCredit], b: &[fleetlens_store::BucketCredit], label: &str) {
    let key = |r: &fleetlens_store::BucketCredit| (r.gpu_id, r.bucket_ms);
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_by_key(key);
    b.sort_by_key(key);
    assert_eq!(a.iter().map(key).collect::<Vec<_>>(), b.iter().map(key).collect::<Vec<_>>(), "{label}: rows");
    for (x, y) in a.iter().zip(&b) {
        let diff = x.credit.minus(&y.credit).to_cells().iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(diff < 1e-6, "{label}: GPU {} bucket {} differs by {diff}", x.gpu_id, x.bucket_ms);
    }
}

/// `org_hour_credit_split` over several days: the whole days come from the day credits
/// (`credits_1d`, kept in step by ingest and retention), and the sums per GPU are the same as
/// summing its whole hours, with partial days at both ends of the period, GPUs that start and
/// end inside it, and after retention cut a day in two.
async fn whole_days_give_the_sums_of_their_hours(backend: Backend) {
    const H: i64 = 3_600_000;
    const M: i64 = 60_000;
    const D: i64 = 86_400_000;
    let (_db, store) = open(backend).await;
    let day0 = 1_790_000_000_000i64.div_euclid(D) * D;
    // a: from day 0 + 2 h 17 min past the period's end; b: from day 0 + 10 h 5 min to
    // day 3 + 2 h 30 min; c: inside day 1 only. One sample a minute, in batches of 500.
    let gpus = [
        ("GPU-a", day0 + 2 * H + 17 * M, (3 * 24 + 6) * 60 - 137),
        ("GPU-b", day0 + 10 * H + 5 * M, (2 * 24 + 16) * 60 + 25),
        ("GPU-c", day0 + D + 3 * H, 200),
    ];
    for (uuid, start, minutes) in gpus {
        for chunk in synthetic(uuid, start, minutes, M).chunks(500) {
            store.ingest(DEFAULT_ORG, "h", chunk.to_vec()).await.unwrap();
        }
    }
    // The period: day 0 + 7 h 13 min to day 3 + 5 h 20 min; whole hours day 0 + 8 h to day 3 + 5 h,
    // whole days 1 and 2.
    let (from, end) = (day0 + 7 * H + 13 * M, day0 + 3 * D + 5 * H + 20 * M);
    let (first_whole, last_whole) = (day0 + 8 * H, day0 + 3 * D + 5 * H);
    let check = |label: &'static str| {
        let store = store.clone();
        async move {
            let split = store.org_hour_credit_split(DEFAULT_ORG, from, end, first_whole, last_whole).await.unwrap();
            let hours = store.credits(DEFAULT_ORG, None, Resolution::Hour, 0, i64::MAX).await.unwrap();
            let mut whole_gpus = 0;
            for (uuid, _, _) in gpus {
                let g = store.gpu(DEFAULT_ORG, uuid).await.unwrap().unwrap();
                let credited_to = (g.info.last_seen_ms / M + 1) * M;
                let mut want = Credit::default();
                let mut n = 0;
                for h in hours.iter().filter(|h| {
                    h.gpu_id == g.id
                        && h.bucket_ms >= first_whole
                        && h.bucket_ms < last_whole
                        && h.bucket_ms >= g.info.first_seen_ms
                        && h.bucket_ms + H <= credited_to
                }) {
                    want.add_scaled(&h.credit, 1.0);
                    n += 1;
                }
                let got = split.whole.iter().find(|w| w.gpu_id == g.id);
                if n == 0 {
                    assert!(got.is_none(), "{label} {uuid}: no whole hours, no whole row");
                    continue;
                }
                whole_gpus += 1;
                let got = got.unwrap_or_else(|| panic!("{label} {uuid}: a whole row"));
                assert!(want.covered_s() > 0.0, "{label} {uuid}: the hours have credit");
                let diff = want.minus(&got.credit).to_cells().iter().map(|v| v.abs()).fold(0.0, f64::max);
                assert!(diff < 1e-6, "{label} {uuid}: whole sums differ from the hours' by {diff}");
            }
            whole_gpus
        }
    };
    assert_eq!(check("ingested").await, 3, "c: whole hours, no whole day");
    // The rollup job writes the minutes, their hours and their days: the same sums.
    assert!(store.close_minutes(LATER, 120_000).await.unwrap() > 0);
    assert_eq!(check("written").await, 3);
    // Retention cuts day 1 (of a's and b's whole days) at 6 h 17 min: the day's credits are
    // those of its remaining hours.
    let cutoff = day0 + D + 6 * H + 17 * M;
    let keep = RetentionPolicy { raw_ms: D, rollup_1m_ms: D, rollup_1h_ms: D };
    let report = store.apply_retention(keep, cutoff + D).await.unwrap();
    assert!(report.rollups_1h > 0);
    assert_eq!(check("after retention").await, 2, "c's hours are gone");
    // And ingest after retention still adds to the (rebuilt) day.
    let late = synthetic("GPU-b", day0 + D + 12 * H + 30 * M + 1_000, 30, M);
    store.ingest(DEFAULT_ORG, "h", late).await.unwrap();
    assert_eq!(check("late samples").await, 2);
}

async fn the_feed_reads_many_gpus_at_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let t0 = 1_700_000_000_000;
    let mut ids = Vec::new();
    for g in 0..3 {
        let uuid = format!("GPU-feed-{g}");
        store.ingest(DEFAULT_ORG, "h", synthetic(&uuid, t0, 10, 1000)).await.unwrap();
        ids.push(store.gpu(DEFAULT_ORG, &uuid).await.unwrap().unwrap().id);
    }
    // GPU 0 from its 4th sample, GPU 2 from its 9th; GPU 1 not asked for.
    let got = store.samples_since(&[(ids[0], t0 + 3000), (ids[2], t0 + 8000)], 100).await.unwrap();
    let want: Vec<(GpuId, Sample)> = synthetic("GPU-feed-0", t0, 10, 1000)[3..]
        .iter()
        .map(|s| (ids[0], s.clone()))
        .chain(synthetic("GPU-feed-2", t0, 10, 1000)[8..].iter().map(|s| (ids[2], s.clone())))
        .collect();
    assert_eq!(got, want, "every field, in GPU then time order");
    // The limit cuts across GPUs; a GPU beyond its newest sample gives nothing.
    let cut = store.samples_since(&[(ids[0], t0 + 3000), (ids[2], t0)], 5).await.unwrap();
    assert_eq!(
        cut.iter().map(|(g, s)| (*g, s.ts_ms)).collect::<Vec<_>>(),
        (3..8).map(|i| (ids[0], t0 + i * 1000)).collect::<Vec<_>>()
    );
    assert!(store.samples_since(&[(ids[1], t0 + 10_000)], 100).await.unwrap().is_empty());
    // More GPUs than one query takes.
    let many: Vec<(GpuId, i64)> = (0..4500).map(|i| (ids[i % 3], t0 + 9000)).collect();
    assert_eq!(store.samples_since(&many, 10_000).await.unwrap().len(), 4500);
}

async fn maintenance_clears_the_garbage_of_in_place_updates(backend: Backend) {
    let (db, store) = open(backend).await;
    // Ten batches into the same minutes mark them; the rollup job writes them and removes the
    // marks (the garbage left now), then a late batch reopens them and they are written again
    // (an update of each minute row).
    let now = 1_700_000_040_000i64;
    for gpu in 0..20 {
        let samples = synthetic(&format!("GPU-m{gpu}"), now, 60, 1000);
        for batch in samples[..54].chunks(6) {
            store.ingest(DEFAULT_ORG, "h", batch.to_vec()).await.unwrap();
        }
        store.close_minutes(LATER, 120_000).await.unwrap();
        store.ingest(DEFAULT_ORG, "h", samples[54..].to_vec()).await.unwrap();
        store.close_minutes(LATER, 120_000).await.unwrap();
    }
    let gpu = store.gpu(DEFAULT_ORG, "GPU-m3").await.unwrap().unwrap();
    let before = store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
    let autovacuum_off = match backend {
        Backend::Sqlite => false,
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            let setting: String =
                sqlx::query_scalar("SELECT current_setting('autovacuum')").fetch_one(&pool).await.unwrap();
            setting == "off"
        }
    };
    if !autovacuum_off {
        // SQLite, or PostgreSQL whose autovacuum does the work: nothing to do.
        assert_eq!(
            store.maintain().await.unwrap(),
            fleetlens_store::MaintenanceReport { autovacuum: true, vacuumed: vec![] }
        );
        return;
    }
    // The ingest connections report their row counts to the statistics within a second or so.
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    // The marks are partitioned by hour (migration 0027): these minutes, long before any hour
    // the store prepared, are in the default partition, which the job vacuums by its name.
    let dead = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'rollup_pending_default'";
    let mut report = None;
    for _ in 0..50 {
        if sqlx::query_scalar::<_, i64>(dead).fetch_one(&pool).await.unwrap() > 0 {
            report = Some(store.maintain().await.unwrap());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let report = report.expect("the removed marks left dead rows");
    assert!(!report.autovacuum);
    // The minute rows are written once (and once more when late samples reopen them): 20
    // dead versions for 20 rows stay below autovacuum's threshold; the marks are the garbage.
    assert!(report.vacuumed.iter().any(|t| t == "rollup_pending_default"), "the marks vacuumed: {report:?}");
    assert_eq!(sqlx::query_scalar::<_, i64>(dead).fetch_one(&pool).await.unwrap(), 0, "no dead rows left");
    let analysed: bool = sqlx::query_scalar(
        "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'rollup_pending_default'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(analysed, "statistics refreshed");
    assert_eq!(
        store.rollups(DEFAULT_ORG, gpu.id, Resolution::Minute, 0, i64::MAX).await.unwrap(),
        before,
        "data unchanged"
    );
}

/// Quotas and the GPU-host rule of `ingest_with`: a refused batch stores nothing (not even the
/// samples of GPUs that fit); GPUs of an organisation over its quota keep reporting; a GPU moves
/// only by `move_gpu` or, with `move_after_ms`, once its old host has been silent that long.
/// `gpus.ingest_seq` (what the alert engine judges from memory by): a GPU's first batch is
/// number 0, with or without the registration ahead of it (quotas); each committed batch that
/// writes the GPU adds one, a resend too (it says which of its samples it inserted: none); a
/// refused batch adds nothing; the outcome names the samples inserted by their index.
async fn each_committed_batch_numbers_its_gpus_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let now = 1_800_000_000_000;
    let rules = IngestRules { max_gpus: 3, max_hosts: 5, move_after_ms: None, now_ms: now };
    let t = now - 600_000;
    let seq_of = |uuid: &'static str| {
        let store = store.clone();
        async move {
            let gpus = store.alert_gpus().await.unwrap();
            gpus.iter().find(|g| g.info.uuid == uuid).map(|g| (g.id, g.ingest_seq)).unwrap()
        }
    };
    let mut both = synthetic("S1", t, 3, 1000);
    both.extend(synthetic("S2", t, 2, 1000));
    let first = store
        .ingest_with(SampleBatch { rules: Some(rules), ..SampleBatch::new(DEFAULT_ORG, "n1", both.clone()) })
        .await
        .unwrap();
    let (s1, s2) = (seq_of("S1").await, seq_of("S2").await);
    assert_eq!((s1.1, s2.1), (0, 0), "a new GPU's first batch is number 0, registration or not");
    let written: Vec<(GpuId, i64, Vec<u32>, bool)> =
        first.written.iter().map(|w| (w.gpu_id, w.ingest_seq, w.inserted.clone(), w.filled)).collect();
    assert_eq!(written, vec![(s1.0, 0, vec![0, 1, 2], false), (s2.0, 0, vec![3, 4], false)]);

    // A resend is a committed batch that inserted nothing.
    let again = store.ingest(DEFAULT_ORG, "n1", both.clone()).await.unwrap();
    assert_eq!(again.duplicates, 5);
    assert!(again.written.iter().all(|w| w.ingest_seq == 1 && w.inserted.is_empty()), "{:?}", again.written);
    // One new sample of S1 beside an old one: S1 only.
    let mixed = vec![both[0].clone(), synthetic("S1", t + 3000, 1, 1000).remove(0)];
    let out = store.ingest(DEFAULT_ORG, "n1", mixed).await.unwrap();
    assert_eq!(
        out.written.iter().map(|w| (w.gpu_id, w.ingest_seq, w.inserted.clone())).collect::<Vec<_>>(),
        vec![(s1.0, 2, vec![1])]
    );
    assert_eq!(seq_of("S2").await.1, 1);
    // A refused batch (a GPU over the quota) numbers nothing.
    let mut over = synthetic("S1", t + 4000, 1, 1000);
    over.extend(synthetic("S3", t, 1, 1000));
    over.extend(synthetic("S4", t, 1, 1000));
    let err = store.ingest_with(SampleBatch { rules: Some(rules), ..SampleBatch::new(DEFAULT_ORG, "n1", over) }).await;
    assert!(matches!(err, Err(StoreError::QuotaExceeded { .. })), "{err:?}");
    assert_eq!(seq_of("S1").await.1, 2);
    // A sample that fills in a stored one (a field it lacked) is reported as such.
    let mut partial = synthetic("S5", t, 1, 1000);
    partial[0].tensor_active_pct = None;
    store.ingest(DEFAULT_ORG, "n1", partial.clone()).await.unwrap();
    let fill = store.ingest(DEFAULT_ORG, "n1", synthetic("S5", t, 1, 1000)).await.unwrap();
    assert_eq!(fill.merged, 1);
    assert_eq!(
        fill.written.iter().map(|w| (w.ingest_seq, w.inserted.len(), w.filled)).collect::<Vec<_>>(),
        vec![(1, 0, true)]
    );
}

async fn ingest_rules_refuse_whole_batches_and_admins_move_gpus(backend: Backend) {
    let (_db, store) = open(backend).await;
    let now = 1_800_000_000_000;
    let rules = IngestRules { max_gpus: 3, max_hosts: 2, move_after_ms: None, now_ms: now };
    let batch =
        |uuids: &[&str], ts: i64| -> Vec<Sample> { uuids.iter().flat_map(|u| synthetic(u, ts, 5, 1000)).collect() };
    let t = now - 600_000;
    store
        .ingest_with(SampleBatch { rules: Some(rules), ..SampleBatch::new(DEFAULT_ORG, "n1", batch(&["G1", "G2"], t)) })
        .await
        .unwrap();
    let count = store.sample_count().await.unwrap();

    let err = store
        .ingest_with(SampleBatch {
            rules: Some(rules),
            ..SampleBatch::new(DEFAULT_ORG, "n1", batch(&["G1", "G3", "G4"], t + 10_000))
        })
        .await;
    assert!(matches!(err, Err(StoreError::QuotaExceeded { quota: "GPUs", limit: 3, would_be: 4 })), "{err:?}");
    store
        .ingest_with(SampleBatch { rules: Some(rules), ..SampleBatch::new(DEFAULT_ORG, "n2", batch(&["G3"], t)) })
        .await
        .unwrap();
    let err = store
        .ingest_with(SampleBatch {
            rules: Some(rules),
            ..SampleBatch::new(DEFAULT_ORG, "n3", batch(&["G1"], t + 10_000))
        })
        .await;
    assert!(matches!(err, Err(StoreError::GpuOnOtherHost { .. })), "a GPU of n1: {err:?}");
    let roomy = IngestRules { max_gpus: 10, ..rules };
    let err = store
        .ingest_with(SampleBatch { rules: Some(roomy), ..SampleBatch::new(DEFAULT_ORG, "n3", batch(&["G5"], t)) })
        .await;
    assert!(matches!(err, Err(StoreError::QuotaExceeded { quota: "hosts", limit: 2, would_be: 3 })), "{err:?}");
    assert_eq!(store.sample_count().await.unwrap(), count + 5, "only the batch of n2 was stored");
    assert_eq!(store.gpus(DEFAULT_ORG).await.unwrap().len(), 3);
    // At the quota, known GPUs keep reporting.
    store
        .ingest_with(SampleBatch {
            rules: Some(rules),
            ..SampleBatch::new(DEFAULT_ORG, "n1", batch(&["G1", "G2"], t + 10_000))
        })
        .await
        .unwrap();

    // Another host, newer samples: refused, the GPU's host unchanged.
    let err = store
        .ingest_with(SampleBatch {
            rules: Some(rules),
            ..SampleBatch::new(DEFAULT_ORG, "n2", batch(&["G1"], t + 20_000))
        })
        .await;
    match err {
        Err(StoreError::GpuOnOtherHost { uuid, owner, host }) => {
            assert_eq!((uuid, owner, host), ("G1".into(), "n1".into(), "n2".into()))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.gpu(DEFAULT_ORG, "G1").await.unwrap().unwrap().info.host, "n1");
    // The admin's move.
    assert!(store.move_gpu(DEFAULT_ORG, "G1", "n2").await.unwrap());
    assert!(!store.move_gpu(DEFAULT_ORG, "G-none", "n2").await.unwrap());
    assert!(!store.move_gpu(OrgId(DEFAULT_ORG.get() + 1), "G1", "n1").await.unwrap(), "another organisation's GPU");
    store
        .ingest_with(SampleBatch {
            rules: Some(rules),
            ..SampleBatch::new(DEFAULT_ORG, "n2", batch(&["G1"], t + 20_000))
        })
        .await
        .unwrap();
    assert_eq!(store.gpu(DEFAULT_ORG, "G1").await.unwrap().unwrap().info.host, "n2");
    assert!(
        store
            .ingest_with(SampleBatch {
                rules: Some(rules),
                ..SampleBatch::new(DEFAULT_ORG, "n1", batch(&["G1"], t + 30_000))
            })
            .await
            .is_err()
    );

    // The silence rule: G2's newest sample is 9 minutes old at `now`.
    let moving = IngestRules { move_after_ms: Some(300_000), ..rules };
    store
        .ingest_with(SampleBatch {
            rules: Some(moving),
            ..SampleBatch::new(DEFAULT_ORG, "n2", batch(&["G2"], now - 1000))
        })
        .await
        .unwrap();
    assert_eq!(store.gpu(DEFAULT_ORG, "G2").await.unwrap().unwrap().info.host, "n2");
    let err = store
        .ingest_with(SampleBatch { rules: Some(moving), ..SampleBatch::new(DEFAULT_ORG, "n1", batch(&["G2"], now)) })
        .await;
    assert!(matches!(err, Err(StoreError::GpuOnOtherHost { .. })), "G2 is live on n2: {err:?}");

    // Without rules (tools, tests), nothing is checked.
    store.ingest(DEFAULT_ORG, "n9", batch(&["G7", "G8"], t)).await.unwrap();
    assert_eq!(store.gpus(DEFAULT_ORG).await.unwrap().len(), 5);
}

/// Many batches that each register new GPUs on a new host, all at once: the organisation ends
/// at exactly its quotas, every refused batch stored nothing and every accepted one all of its
/// samples (PostgreSQL checks the quotas at the end of each batch's transaction, under a
/// per-organisation lock; SQLite has one writer).
async fn concurrent_batches_never_pass_a_quota_together(backend: Backend) {
    let (_db, store) = open(backend).await;
    let now = 1_800_000_000_000;
    let rules = IngestRules { max_gpus: 10, max_hosts: 100, move_after_ms: None, now_ms: now };
    let hosts_rules = IngestRules { max_gpus: 1000, max_hosts: 8, ..rules };
    let mut tasks = Vec::new();
    for h in 0..12 {
        let store = store.clone();
        // Two new GPUs per host: at most five hosts fit under ten GPUs.
        let batch: Vec<Sample> =
            (0..2).flat_map(|g| synthetic(&format!("GPU-q{h}-{g}"), now - 600_000, 20, 1000)).collect();
        tasks.push(tokio::spawn(async move {
            store
                .ingest_with(SampleBatch {
                    rules: Some(rules),
                    ..SampleBatch::new(DEFAULT_ORG, format!("q{h}"), batch)
                })
                .await
        }));
    }
    let (mut accepted, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(outcome) => {
                assert_eq!(outcome.inserted, 40);
                accepted += 1;
            }
            Err(StoreError::QuotaExceeded { quota: "GPUs", limit: 10, .. }) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!((accepted, refused), (5, 7));
    assert_eq!(store.gpus(DEFAULT_ORG).await.unwrap().len(), 10);
    assert_eq!(store.sample_count().await.unwrap(), 5 * 40, "refused batches stored nothing");

    // The host quota, in another organisation: 8 hosts, 20 batches of one new host each.
    let org = store.create_org("hosts", 0).await.unwrap();
    let mut tasks = Vec::new();
    for h in 0..20 {
        let store = store.clone();
        let batch = synthetic(&format!("GPU-h{h}"), now - 600_000, 5, 1000);
        tasks.push(tokio::spawn(async move {
            store
                .ingest_with(SampleBatch { rules: Some(hosts_rules), ..SampleBatch::new(org, format!("h{h}"), batch) })
                .await
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => accepted += 1,
            Err(StoreError::QuotaExceeded { quota: "hosts", limit: 8, .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(accepted, 8);
    assert_eq!(store.gpus(org).await.unwrap().len(), 8);
}

/// What the rollup job writes (and what reads add for the minutes not written yet) equals the
/// rollups and credits of the same samples merged one by one in time order (what ingest used to
/// write), computed by core's pure functions: with batches out of order, late samples that
/// reopen written minutes, data-quality flags, and a sample resent.
async fn rollups_written_once_equal_the_per_sample_reference(backend: Backend) {
    use fleetlens_core::QualityFlag;
    const M: i64 = 60_000;
    let (db, store) = open(backend).await;
    let t0 = 1_790_000_000_000i64.div_euclid(3_600_000) * 3_600_000 + 17 * M;
    // Two GPUs, 100 minutes at 2 s; every 97th sample arrives late, every 41st is flagged.
    let mut all: Vec<(Sample, QualityFlags)> = Vec::new();
    for uuid in ["GPU-w1", "GPU-w2"] {
        for s in synthetic(uuid, t0, 3000, 2000) {
            let mut f = QualityFlags::NONE;
            if (s.ts_ms / 2000) % 41 == 0 {
                f.insert(QualityFlag::EnergyCounterBackwards);
            }
            all.push((s, f));
        }
    }
    let late = |s: &Sample| (s.ts_ms / 2000) % 97 == 5;
    let (on_time, late_ones): (Vec<_>, Vec<_>) = all.iter().cloned().partition(|(s, _)| !late(s));
    let mut batches: Vec<Vec<(Sample, QualityFlags)>> = on_time.chunks(150).map(<[_]>::to_vec).collect();
    batches.sort_by_key(|b| (b[0].0.ts_ms / 1000 * 37) % 101);
    let send = |batch: Vec<(Sample, QualityFlags)>| {
        let store = store.clone();
        async move {
            let (samples, flags): (Vec<Sample>, Vec<QualityFlags>) = batch.into_iter().unzip();
            store.ingest_with(SampleBatch { flags, ..SampleBatch::new(DEFAULT_ORG, "h", samples) }).await.unwrap();
        }
    };
    for b in batches {
        send(b).await;
    }
    let ids: Vec<GpuId> = {
        let mut v = Vec::new();
        for uuid in ["GPU-w1", "GPU-w2"] {
            v.push(store.gpu(DEFAULT_ORG, uuid).await.unwrap().unwrap().id);
        }
        v
    };
    let check = |arrived: Vec<(Sample, QualityFlags)>, label: &'static str| {
        let store = store.clone();
        let ids = ids.clone();
        async move {
            let (minutes, hours, minute_credits, hour_credits) = reference(&arrived, &ids);
            for (i, gpu) in ids.iter().enumerate() {
                let got_m = store.rollups(DEFAULT_ORG, *gpu, Resolution::Minute, 0, i64::MAX).await.unwrap();
                let want_m: Vec<_> = minutes.iter().filter(|b| b.gpu_id == *gpu).cloned().collect();
                assert_same_buckets(&got_m, &want_m, label, "minutes");
                let got_h = store.rollups(DEFAULT_ORG, *gpu, Resolution::Hour, 0, i64::MAX).await.unwrap();
                let want_h: Vec<_> = hours.iter().filter(|b| b.gpu_id == *gpu).cloned().collect();
                assert_same_buckets(&got_h, &want_h, label, "hours");
                let series = store.series(DEFAULT_ORG, *gpu, Resolution::Minute, 0, i64::MAX).await.unwrap();
                assert_eq!(series.len(), want_m.len(), "{label}: series points of GPU {i}");
                assert!(series.iter().all(|p| p.state.is_some()), "{label}: every minute has its state");
            }
            let got = store.credits(DEFAULT_ORG, None, Resolution::Minute, 0, i64::MAX).await.unwrap();
            assert_same_credits(&got, &minute_credits, &format!("{label}: minute credits"));
            let got = store.credits(DEFAULT_ORG, None, Resolution::Hour, 0, i64::MAX).await.unwrap();
            assert_same_credits(&got, &hour_credits, &format!("{label}: hour credits"));
        }
    };
    check(on_time.clone(), "open").await;
    assert!(pending(&db, backend).await > 0);
    // The job writes every minute once: the stored rows alone give the same answers.
    let written = store.close_minutes(LATER, 120_000).await.unwrap();
    assert_eq!(written as usize, 2 * 100, "each GPU-minute written once");
    assert_eq!(pending(&db, backend).await, 0, "no mark left");
    check(on_time.clone(), "written").await;
    // Nothing more to write, and a resent batch marks nothing.
    assert_eq!(store.close_minutes(LATER, 120_000).await.unwrap(), 0);
    send(on_time[..150].to_vec()).await;
    assert_eq!(pending(&db, backend).await, 0, "a resent batch adds no sample and no mark");
    // Late samples reopen their minutes: reads include them at once, the job writes them again.
    for b in late_ones.chunks(20) {
        send(b.to_vec()).await;
    }
    check(all.clone(), "reopened").await;
    store.close_minutes(LATER, 120_000).await.unwrap();
    assert_eq!(pending(&db, backend).await, 0);
    check(all.clone(), "rewritten").await;
    // A job that has not reached the lateness bound writes nothing yet.
    let newest = all.iter().map(|(s, _)| s.ts_ms).max().unwrap();
    send(vec![(synthetic("GPU-w1", newest + 2000, 1, 2000).remove(0), QualityFlags::NONE)]).await;
    assert_eq!(store.close_minutes(newest + 2000 + 60_000, 120_000).await.unwrap(), 0, "within the lateness bound");
    assert!(store.close_minutes(newest + 2000 + 200_000, 120_000).await.unwrap() > 0);
}

/// PostgreSQL keeps a batch that meets nothing stored as per-batch blocks (one row of
/// `sample_batches` per GPU and minute) and turns the blocks a later batch meets back into rows;
/// SQLite keeps rows. Either way every read answers the same, and each key is stored once.
async fn open_samples_are_blocks_until_a_batch_meets_them(backend: Backend) {
    let (db, store) = open(backend).await;
    let hour = 3_600_000i64;
    let start = 1_700_000_000_000i64 / hour * hour + hour - 120_000;
    // GPU a: 240 s (4 minutes) across an hour boundary; GPU b: 60 s.
    let a = synthetic("GPU-blk-a", start, 240, 1000);
    let b = synthetic("GPU-blk-b", start, 60, 1000);
    let first = store.ingest(DEFAULT_ORG, "h", [a[..200].to_vec(), b.clone()].concat()).await.unwrap();
    assert_eq!((first.inserted, first.duplicates), (260, 0));
    // The rest of a, after it (40 s of its 4th minute): meets nothing, so a block too.
    store.ingest(DEFAULT_ORG, "h", a[200..].to_vec()).await.unwrap();
    let shape = |sql: &'static str| {
        let url = db.url.clone();
        async move {
            match backend {
                Backend::Sqlite => {
                    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
                    sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap()
                }
                Backend::Postgres => {
                    let pool = sqlx::PgPool::connect(&url).await.unwrap();
                    sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap()
                }
            }
        }
    };
    let rows = "SELECT count(*) FROM samples";
    let blocks = "SELECT count(*) FROM sample_batches";
    match backend {
        Backend::Postgres => {
            assert_eq!((shape(rows).await, shape(blocks).await), (0, 6), "a: 4 minutes + 1, b: 1");
        }
        Backend::Sqlite => assert_eq!(shape(rows).await, 300),
    }
    assert_eq!(shape("SELECT count(*) FROM open_sample_rows").await, 300);
    // A minute of a resent, over its first two blocks: those become rows, the resend duplicates.
    let again = store.ingest(DEFAULT_ORG, "h", a[10..70].to_vec()).await.unwrap();
    assert_eq!((again.inserted, again.merged, again.duplicates), (0, 0, 60));
    if backend == Backend::Postgres {
        assert_eq!((shape(rows).await, shape(blocks).await), (120, 4), "the blocks met, and only they, as rows");
    }
    assert_eq!(store.sample_count().await.unwrap(), 300);
    let gpu_a = store.gpu(DEFAULT_ORG, "GPU-blk-a").await.unwrap().unwrap();
    assert_eq!(gpu_a.latest.as_ref().map(|s| s.ts_ms), Some(a[239].ts_ms), "newest sample from a block");
    assert_eq!(store.samples(DEFAULT_ORG, gpu_a.id, 0, i64::MAX, 10_000).await.unwrap(), a);
    assert_eq!(store.samples(DEFAULT_ORG, gpu_a.id, a[100].ts_ms, a[150].ts_ms, 10).await.unwrap(), a[100..110]);
    // Every minute rolled up from rows and blocks alike.
    store.close_minutes(LATER, 0).await.unwrap();
    let minutes = store.rollups(DEFAULT_ORG, gpu_a.id, Resolution::Minute, 0, i64::MAX).await.unwrap();
    assert_eq!(minutes.iter().map(|m| m.sample_count).collect::<Vec<_>>(), vec![60; 4]);
    // Sealing takes rows and blocks of the closed hour together.
    store.seal_closed_hours(LATER, 1000).await.unwrap();
    if backend == Backend::Postgres {
        assert_eq!((shape(rows).await, shape(blocks).await), (0, 0));
    }
    assert_eq!(store.sample_count().await.unwrap(), 300);
    assert_eq!(store.samples(DEFAULT_ORG, gpu_a.id, 0, i64::MAX, 10_000).await.unwrap(), a);
}

/// A raw-retention cutoff in the middle of a batch (on PostgreSQL, inside a block): exactly the
/// samples before it go, of every GPU (another GPU's batch lies wholly before it, a third's
/// wholly after).
async fn retention_cuts_through_an_open_block(backend: Backend) {
    let (_db, store) = open(backend).await;
    let day = 86_400_000i64;
    let start = 1_700_000_040_000i64;
    let batch = synthetic("GPU-cut", start, 120, 1000);
    let older = synthetic("GPU-old", start - 600_000, 60, 1000);
    let newer = synthetic("GPU-new", start + 60_000, 40, 1000);
    for b in [&batch, &older, &newer] {
        store.ingest(DEFAULT_ORG, "h", b.clone()).await.unwrap();
    }
    let policy = RetentionPolicy { raw_ms: 7 * day, ..RetentionPolicy::default() };
    let report = store.apply_retention(policy, start + 30_000 + 7 * day).await.unwrap();
    assert_eq!(report.samples, 30 + 60);
    for (uuid, left) in [("GPU-cut", &batch[30..]), ("GPU-old", &older[..0]), ("GPU-new", &newer[..])] {
        let gpu = store.gpu(DEFAULT_ORG, uuid).await.unwrap().unwrap();
        assert_eq!(store.samples(DEFAULT_ORG, gpu.id, 0, i64::MAX, 1000).await.unwrap(), left, "{uuid}");
    }
    assert_eq!(store.sample_count().await.unwrap(), 90 + 40);
}

/// Marks left in `rollup_pending`.
async fn pending(db: &TestDatabase, backend: Backend) -> i64 {
    let sql = "SELECT count(*) FROM rollup_pending";
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap()
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap()
        }
    }
}

/// The rollups and credits of `arrived` (GPU i has uuid GPU-w{i+1} and id `ids[i]`) as ingest
/// used to write them: each GPU's samples merged one by one in time order, each counting the
/// time since the previous one (`sampled_ms_since_previous`), each minute credited from its
/// rollup, each hour the sum of its minutes.
#[allow(clippy::type_complexity)]
fn reference(
    arrived: &[(Sample, QualityFlags)],
    ids: &[GpuId],
) -> (
    Vec<fleetlens_core::RollupBucket>,
    Vec<fleetlens_core::RollupBucket>,
    Vec<fleetlens_store::BucketCredit>,
    Vec<fleetlens_store::BucketCredit>,
) {
    let (mut minutes, mut hours) =
        (RollupAccumulator::new(Resolution::Minute), RollupAccumulator::new(Resolution::Hour));
    for (i, gpu) in ids.iter().enumerate() {
        let uuid = format!("GPU-w{}", i + 1);
        let mut mine: Vec<&(Sample, QualityFlags)> = arrived.iter().filter(|(s, _)| s.uuid == uuid).collect();
        mine.sort_by_key(|(s, _)| s.ts_ms);
        mine.dedup_by_key(|(s, _)| s.ts_ms);
        let ts: Vec<i64> = mine.iter().map(|(s, _)| s.ts_ms).collect();
        let sampled =
            fleetlens_core::sampled_ms_since_previous(&[], &ts, Thresholds::default().offline_missing_intervals);
        for ((s, f), ms) in mine.into_iter().zip(sampled) {
            minutes.add(*gpu, s, ms, *f);
            hours.add(*gpu, s, ms, *f);
        }
    }
    let minutes = minutes.into_buckets();
    let th = Thresholds::default();
    let mut minute_credits = Vec::new();
    let mut hour_credits: std::collections::BTreeMap<(GpuId, i64), Credit> = Default::default();
    for b in &minutes {
        let (c, _) = Credit::of_minute(b, None, None, &th);
        minute_credits.push(fleetlens_store::BucketCredit { gpu_id: b.gpu_id, bucket_ms: b.bucket_ms, credit: c });
        hour_credits.entry((b.gpu_id, Resolution::Hour.bucket_start(b.bucket_ms))).or_default().add_scaled(&c, 1.0);
    }
    let hour_credits = hour_credits
        .into_iter()
        .map(|((gpu_id, bucket_ms), credit)| fleetlens_store::BucketCredit { gpu_id, bucket_ms, credit })
        .collect();
    (minutes, hours.into_buckets(), minute_credits, hour_credits)
}

fn assert_same_buckets(
    got: &[fleetlens_core::RollupBucket],
    want: &[fleetlens_core::RollupBucket],
    label: &str,
    what: &str,
) {
    assert_eq!(
        got.iter().map(|b| b.bucket_ms).collect::<Vec<_>>(),
        want.iter().map(|b| b.bucket_ms).collect::<Vec<_>>(),
        "{label}: {what} buckets"
    );
    for (s, e) in got.iter().zip(want) {
        let at = format!("{label}: {what} {}", s.bucket_ms);
        assert_eq!(
            (s.sample_count, s.allocated_count, s.processes_read_count),
            (e.sample_count, e.allocated_count, e.processes_read_count),
            "{at}"
        );
        assert_eq!(
            (s.first_ts_ms, s.last_ts_ms, s.sampled_ms, s.quality),
            (e.first_ts_ms, e.last_ts_ms, e.sampled_ms, e.quality),
            "{at}"
        );
        for (a, b) in s.signals.iter().zip(&e.signals) {
            assert_eq!((a.count, a.min, a.max), (b.count, b.min, b.max), "{at}");
            assert!((a.sum - b.sum).abs() < 1e-6 * b.sum.abs().max(1.0), "{at}: sum {} vs {}", a.sum, b.sum);
        }
    }
}
