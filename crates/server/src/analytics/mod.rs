//! Glue between stored data and the pure analytics of `fleetlens-core`: workload states per
//! window (from raw samples or from 1-minute rollups), the current state of a GPU, and the
//! organisation's classifier thresholds and prices.

pub mod billing;
pub mod ledger;
pub mod owners;
pub mod summary;

use fleetlens_api::StateWindow;
use fleetlens_core::{
    Classification, Credit, KeyValues, PriceTable, Resolution, RollupBucket, Sample, Thresholds, WorkloadState,
    classify, classify_window,
};
use std::collections::HashMap;
use std::sync::RwLock;

use fleetlens_store::{GpuRecord, LatestMinute, MinuteClassifier, OrgId, Store};

use crate::error::{ApiError, ApiResult};

pub const MINUTE_MS: i64 = 60_000;
/// Sample interval assumed when the data cannot tell (the agent's default).
pub const DEFAULT_INTERVAL_MS: i64 = 1_000;
pub const THRESHOLDS_KEY: &str = "thresholds";
pub const PRICES_KEY: &str = "prices";

/// The classifier the store uses to credit each minute as it is stored, with the thresholds of
/// the minute's organisation (defaults unless overridden). Thresholds changed through the API
/// apply to the minutes stored from then on.
#[derive(Default)]
pub struct OrgClassifier {
    thresholds: RwLock<HashMap<OrgId, Thresholds>>,
}

impl OrgClassifier {
    /// Load every organisation's stored thresholds.
    pub async fn load(store: &dyn Store) -> Result<Self, fleetlens_store::StoreError> {
        let mut map = HashMap::new();
        for (org, json) in store.settings_by_key(THRESHOLDS_KEY).await? {
            match serde_json::from_str(&json) {
                Ok(th) => {
                    map.insert(org, th);
                }
                Err(e) => tracing::warn!(org, error = %e, "stored thresholds unreadable; using defaults"),
            }
        }
        Ok(OrgClassifier { thresholds: RwLock::new(map) })
    }

    pub fn set(&self, org: OrgId, th: Thresholds) {
        self.thresholds.write().expect("thresholds lock").insert(org, th);
    }
}

impl MinuteClassifier for OrgClassifier {
    fn credit(
        &self,
        org: OrgId,
        bucket: &RollupBucket,
        power_limit_w: Option<f64>,
        mem_total_bytes: Option<i64>,
    ) -> (Credit, WorkloadState) {
        let guard = self.thresholds.read().expect("thresholds lock");
        let default = Thresholds::default();
        let th = guard.get(&org).unwrap_or(&default);
        let (credit, c) = Credit::of_minute(bucket, power_limit_w, mem_total_bytes, th);
        (credit, c.state)
    }
}

/// An organisation's classifier thresholds (defaults unless overridden).
/// The GPU's newest 1-minute rollup (the minute of its newest sample), if stored.
pub async fn newest_minute(store: &dyn Store, gpu: &GpuRecord) -> ApiResult<Option<RollupBucket>> {
    let bucket_ms = Resolution::Minute.bucket_start(gpu.last_seen_ms);
    Ok(store.rollups(gpu.id, Resolution::Minute, bucket_ms, bucket_ms + 1).await?.into_iter().next())
}

pub async fn thresholds(store: &dyn Store, org: OrgId) -> ApiResult<Thresholds> {
    match store.setting(org, THRESHOLDS_KEY).await? {
        Some(json) => serde_json::from_str(&json)
            .map_err(|e| ApiError::BadRequest(format!("stored thresholds are unreadable ({e}); PUT them again"))),
        None => Ok(Thresholds::default()),
    }
}

/// The organisation's price overrides, if any.
pub async fn price_overrides(store: &dyn Store, org: OrgId) -> ApiResult<Option<PriceTable>> {
    match store.setting(org, PRICES_KEY).await? {
        Some(json) => Ok(Some(
            serde_json::from_str(&json)
                .map_err(|e| ApiError::BadRequest(format!("stored prices are unreadable ({e}); PUT them again")))?,
        )),
        None => Ok(None),
    }
}

/// Shipped list prices with the organisation's overrides on top.
pub async fn prices(store: &dyn Store, org: OrgId) -> ApiResult<PriceTable> {
    let defaults = PriceTable::default();
    Ok(match price_overrides(store, org).await? {
        Some(o) => defaults.with_overrides(&o),
        None => defaults,
    })
}

/// Median gap between consecutive timestamps; the agent's interval as the data shows it.
pub fn interval_from_timestamps(ts: &[i64]) -> i64 {
    let mut gaps: Vec<i64> = ts.windows(2).map(|w| w[1] - w[0]).filter(|g| *g > 0).collect();
    if gaps.is_empty() {
        return DEFAULT_INTERVAL_MS;
    }
    let mid = gaps.len() / 2;
    *gaps.select_nth_unstable(mid).1
}

/// Mean sample interval of a bucket with `count` samples between `first_ms` and `last_ms`.
pub fn interval_of(count: i64, first_ms: i64, last_ms: i64) -> i64 {
    if count >= 2 && last_ms > first_ms { (last_ms - first_ms) / (count - 1) } else { DEFAULT_INTERVAL_MS }
}

/// True when the GPU has been silent for `offline_missing_intervals` intervals by the wall clock,
/// beyond the `delivery_allowance_ms` that its agent's batching explains (crate::delivery).
fn is_silent(gpu: &GpuRecord, interval_ms: i64, now_ms: i64, th: &Thresholds, delivery_allowance_ms: i64) -> bool {
    now_ms - gpu.last_seen_ms
        >= interval_ms.max(1) * i64::from(th.offline_missing_intervals) + delivery_allowance_ms.max(0)
}

/// Whether the GPU still reports: its newest sample is younger than `offline_missing_intervals`
/// sampling intervals (measured on its newest minute, `newest`) plus its delivery allowance.
pub fn is_reporting(
    gpu: &GpuRecord,
    newest: Option<&RollupBucket>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> bool {
    let interval = newest.map_or(DEFAULT_INTERVAL_MS, |b| interval_of(b.sample_count, b.first_ts_ms, b.last_ts_ms));
    !is_silent(gpu, interval, now_ms, th, delivery_allowance_ms)
}

/// The GPU's state now from its newest minute's stored state (cheap, for lists).
pub fn current_state_name(
    gpu: &GpuRecord,
    newest: Option<&LatestMinute>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> WorkloadState {
    match newest {
        Some(m)
            if !is_silent(
                gpu,
                interval_of(m.sample_count, m.first_ts_ms, m.last_ts_ms),
                now_ms,
                th,
                delivery_allowance_ms,
            ) =>
        {
            m.state.as_deref().and_then(WorkloadState::parse).unwrap_or(WorkloadState::Offline)
        }
        _ => WorkloadState::Offline,
    }
}

pub fn state_window(from_ms: i64, to_ms: i64, c: &Classification) -> StateWindow {
    StateWindow {
        from_ms,
        to_ms,
        state: c.state.as_str().to_string(),
        efficiency: c.efficiency_pct,
        sample_count: c.values.sample_count,
        gpu_util_pct: c.values.gpu_util_pct,
        sm_active_pct: c.values.sm_active_pct,
        tensor_active_pct: c.values.tensor_active_pct,
        dram_active_pct: c.values.dram_active_pct,
        reason: c.reason.clone(),
        note: c.note.clone(),
        advice: c.state.advice().to_string(),
    }
}

/// States of consecutive `window_ms` windows over `[from_ms, to_ms)` from raw samples (sorted
/// by time), starting at `from_ms`.
pub fn states_from_samples(
    samples: &[Sample],
    from_ms: i64,
    to_ms: i64,
    window_ms: i64,
    th: &Thresholds,
) -> Vec<StateWindow> {
    let ts: Vec<i64> = samples.iter().map(|s| s.ts_ms).collect();
    let interval = interval_from_timestamps(&ts);
    let mut out = Vec::new();
    let mut start = from_ms;
    while start < to_ms {
        let end = (start + window_ms).min(to_ms);
        // The window's samples plus one neighbour on each side: all classify_window looks at.
        let lo = ts.partition_point(|t| *t < start).saturating_sub(1);
        let hi = (ts.partition_point(|t| *t < end) + 1).min(samples.len());
        let c = classify_window(&samples[lo..hi], start, end, interval, th);
        out.push(state_window(start, end, &c));
        start = end;
    }
    out
}

/// The classification of a window no sample reached.
pub fn offline(reason: String) -> Classification {
    Classification {
        state: WorkloadState::Offline,
        efficiency_pct: None,
        reason,
        note: None,
        values: KeyValues::default(),
    }
}

/// States of `window_ms` windows (a multiple of a minute) from 1-minute rollups of one GPU,
/// aligned to the minute. Windows with no bucket are offline.
pub fn states_from_minutes(
    buckets: &[RollupBucket],
    gpu: &GpuRecord,
    from_ms: i64,
    to_ms: i64,
    window_ms: i64,
    th: &Thresholds,
) -> Vec<StateWindow> {
    let mut out = Vec::new();
    let mut start = from_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
    let mut i = 0;
    while start < to_ms {
        let end = start + window_ms;
        let mut merged = RollupBucket { gpu_id: gpu.id, bucket_ms: start, ..Default::default() };
        while i < buckets.len() && buckets[i].bucket_ms < end {
            if buckets[i].bucket_ms >= start {
                merged.merge(&buckets[i]);
            }
            i += 1;
        }
        let c = if merged.sample_count > 0 {
            classify(&merged.window_aggregate(gpu.power_limit_w, gpu.mem_total_bytes), th)
        } else {
            offline(format!("no sample from this GPU in the {} s window", window_ms / 1000))
        };
        out.push(state_window(start, end.min(to_ms), &c));
        start = end;
    }
    out
}

/// The GPU's state now: its newest minute, or offline when it has been silent for
/// `offline_missing_intervals` intervals by the wall clock, beyond its delivery allowance.
pub fn current_state(
    gpu: &GpuRecord,
    newest: Option<&RollupBucket>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> Classification {
    let interval = newest.map_or(DEFAULT_INTERVAL_MS, |b| interval_of(b.sample_count, b.first_ts_ms, b.last_ts_ms));
    let silent_ms = now_ms - gpu.last_seen_ms;
    match newest {
        Some(b) if !is_silent(gpu, interval, now_ms, th, delivery_allowance_ms) => {
            classify(&b.window_aggregate(gpu.power_limit_w, gpu.mem_total_bytes), th)
        }
        _ => offline(format!(
            "no sample for {:.0} s (expected every {:.1} s)",
            silent_ms as f64 / 1000.0,
            interval as f64 / 1000.0
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_the_median_gap() {
        assert_eq!(interval_from_timestamps(&[0, 1000, 2000, 3000, 60_000]), 1000);
        assert_eq!(interval_from_timestamps(&[5]), DEFAULT_INTERVAL_MS);
    }
}
