//! `latest_minutes_of`: the newest minutes of some GPUs only (the live feed re-reads the GPUs
//! that moved), on SQLite and on PostgreSQL: the same rows as `latest_minutes` for those GPUs,
//! whether the minutes are still open or written by the rollup job.

use fleetlens_core::{GpuId, Sample};
use fleetlens_store::{DEFAULT_ORG, LatestMinute, Store};
use fleetlens_tests::Backend;

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    latest_minutes_of_answers_as_latest_minutes_for_the_gpus_named,
    latest_minutes_of_follows_a_gpu_into_its_next_minute,
);

/// A minute boundary.
const T0: i64 = 1_700_002_800_000;
/// A time after every test's samples: the rollup job then writes every marked minute.
const LATER: i64 = 4_000_000_000_000;

/// `n` samples of one GPU every second from `start_ms`, busy or idle.
fn samples(uuid: &str, start_ms: i64, n: i64, util: f64) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            ts_ms: start_ms + i * 1000,
            uuid: uuid.into(),
            gpu_util_pct: Some(util),
            mem_used_bytes: Some(1 << 30),
            mem_total_bytes: Some(80 << 30),
            power_w: Some(300.0),
            power_limit_w: Some(700.0),
            ..Default::default()
        })
        .collect()
}

async fn gpu_id(store: &dyn Store, uuid: &str) -> GpuId {
    store.gpu(DEFAULT_ORG, uuid).await.unwrap().unwrap().id
}

/// `latest_minutes` of the GPUs in `ids`, by GPU id.
async fn expected(store: &dyn Store, ids: &[GpuId]) -> Vec<LatestMinute> {
    let mut rows: Vec<LatestMinute> =
        store.latest_minutes(DEFAULT_ORG).await.unwrap().into_iter().filter(|m| ids.contains(&m.gpu_id)).collect();
    rows.sort_by_key(|m| m.gpu_id);
    rows
}

async fn of(store: &dyn Store, ids: &[GpuId]) -> Vec<LatestMinute> {
    let mut rows = store.latest_minutes_of(DEFAULT_ORG, ids).await.unwrap();
    rows.sort_by_key(|m| m.gpu_id);
    rows
}

async fn latest_minutes_of_answers_as_latest_minutes_for_the_gpus_named(backend: Backend) {
    let (_db, store) = open(backend).await;
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-a", T0, 150, 90.0)).await.unwrap();
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-b", T0 + 500, 90, 0.0)).await.unwrap();
    store.ingest(DEFAULT_ORG, "h2", samples("GPU-c", T0 + 200, 30, 50.0)).await.unwrap();
    let (a, b, c) = (gpu_id(&*store, "GPU-a").await, gpu_id(&*store, "GPU-b").await, gpu_id(&*store, "GPU-c").await);
    // Unknown ids (another organisation's, none at all) are left out.
    let named = [a, c, GpuId(999_999)];
    for written in [false, true] {
        if written {
            store.close_minutes(LATER, 120_000).await.unwrap();
        }
        let rows = of(&*store, &named).await;
        assert_eq!(rows.iter().map(|m| m.gpu_id).collect::<Vec<_>>(), vec![a, c], "written: {written}");
        assert_eq!(rows, expected(&*store, &named).await, "written: {written}");
        // GPU-a's newest sample is T0 + 149 s: its newest minute starts at T0 + 120 s.
        assert_eq!(rows[0].bucket_ms, T0 + 120_000);
        assert_eq!(rows[0].sample_count, 30);
        assert!(rows[0].state.is_some());
        assert_eq!(of(&*store, &[b]).await, expected(&*store, &[b]).await);
        assert_eq!(of(&*store, &[]).await, Vec::<LatestMinute>::new());
    }
}

async fn latest_minutes_of_follows_a_gpu_into_its_next_minute(backend: Backend) {
    let (_db, store) = open(backend).await;
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-a", T0, 60, 90.0)).await.unwrap();
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-b", T0, 60, 90.0)).await.unwrap();
    store.close_minutes(LATER, 120_000).await.unwrap();
    let a = gpu_id(&*store, "GPU-a").await;
    let before = of(&*store, &[a]).await;
    assert_eq!(before[0].bucket_ms, T0);
    // A batch starts GPU-a's next minute, idle now: an open minute until the job writes it.
    store.ingest(DEFAULT_ORG, "h1", samples("GPU-a", T0 + 60_000, 10, 0.0)).await.unwrap();
    let after = of(&*store, &[a]).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].bucket_ms, T0 + 60_000);
    assert_eq!(after[0].sample_count, 10);
    assert_ne!(after[0].state, before[0].state, "busy, then idle");
    assert_eq!(after, expected(&*store, &[a]).await);
}
