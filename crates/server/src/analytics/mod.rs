//! Glue between stored data and the pure analytics of `fleetlens-core`: workload states per
//! window (from raw samples or from 1-minute rollups), the current state of a GPU, and the
//! organisation's classifier thresholds and prices.

pub mod billing;
pub mod ledger;
pub mod mfu;
pub mod owners;
pub mod summary;

use fleetlens_api::StateWindow;
use fleetlens_core::timeline::{self, GpuFacts, StateSpan};
pub use fleetlens_core::timeline::{DEFAULT_INTERVAL_MS, MINUTE_MS, interval_from_timestamps, interval_of, offline};
use fleetlens_core::{Classification, Credit, PriceTable, Resolution, RollupBucket, Sample, Thresholds, WorkloadState};
use std::collections::HashMap;
use std::sync::RwLock;

use fleetlens_store::{GpuRecord, LatestMinute, MinuteClassifier, OrgId, Store};

use crate::error::{ApiError, ApiResult};

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
        Ok(OrgClassifier { thresholds: RwLock::new(Self::read(store).await?) })
    }

    /// Re-read every organisation's stored thresholds: a PUT served by another replica reaches
    /// this one's minute credits. The rollup job calls it before each pass, so the minutes
    /// closed after a change are credited with it, whichever replica took the PUT.
    pub async fn reload(&self, store: &dyn Store) -> Result<(), fleetlens_store::StoreError> {
        let map = Self::read(store).await?;
        *self.thresholds.write().expect("thresholds lock") = map;
        Ok(())
    }

    async fn read(store: &dyn Store) -> Result<HashMap<OrgId, Thresholds>, fleetlens_store::StoreError> {
        let mut map = HashMap::new();
        for (org, json) in store.settings_by_key(THRESHOLDS_KEY).await? {
            match serde_json::from_str(&json) {
                Ok(th) => {
                    map.insert(org, th);
                }
                Err(e) => tracing::warn!(org = %org, error = %e, "stored thresholds unreadable; using defaults"),
            }
        }
        Ok(map)
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
/// The newest 1-minute rollup of `org`'s GPU (the minute of its newest sample), if stored.
pub async fn newest_minute(store: &dyn Store, org: OrgId, gpu: &GpuRecord) -> ApiResult<Option<RollupBucket>> {
    let bucket_ms = Resolution::Minute.bucket_start(gpu.last_seen_ms);
    Ok(store.rollups(org, gpu.id, Resolution::Minute, bucket_ms, bucket_ms + 1).await?.into_iter().next())
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

/// What core's state logic needs of a stored GPU.
pub fn facts(gpu: &GpuRecord) -> GpuFacts {
    GpuFacts {
        gpu_id: gpu.id,
        last_seen_ms: gpu.last_seen_ms,
        power_limit_w: gpu.power_limit_w,
        mem_total_bytes: gpu.mem_total_bytes,
    }
}

/// Whether the GPU still reports: its newest sample is younger than core's offline limit
/// (measured on its newest minute, `newest`) plus its delivery allowance.
pub fn is_reporting(
    gpu: &GpuRecord,
    newest: Option<&RollupBucket>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> bool {
    !timeline::is_silent(gpu.last_seen_ms, timeline::interval_of_bucket(newest), now_ms, th, delivery_allowance_ms)
}

/// The GPU's state now from its newest minute's stored state (cheap, for lists).
pub fn current_state_name(
    gpu: &GpuRecord,
    newest: Option<&LatestMinute>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> WorkloadState {
    let minute = newest.map(|m| (m.sample_count, m.first_ts_ms, m.last_ts_ms, m.state.as_deref()));
    timeline::current_state_stored(gpu.last_seen_ms, minute, now_ms, th, delivery_allowance_ms)
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

fn state_windows(spans: Vec<StateSpan>) -> Vec<StateWindow> {
    spans.iter().map(|s| state_window(s.from_ms, s.to_ms, &s.classification)).collect()
}

/// States of consecutive `window_ms` windows from raw samples (core's sample timeline).
pub fn states_from_samples(
    samples: &[Sample],
    from_ms: i64,
    to_ms: i64,
    window_ms: i64,
    th: &Thresholds,
) -> Vec<StateWindow> {
    state_windows(timeline::states_from_samples(samples, from_ms, to_ms, window_ms, th))
}

/// States of minute-aligned `window_ms` windows from 1-minute rollups (core's minute timeline).
pub fn states_from_minutes(
    buckets: &[RollupBucket],
    gpu: &GpuRecord,
    from_ms: i64,
    to_ms: i64,
    window_ms: i64,
    th: &Thresholds,
) -> Vec<StateWindow> {
    state_windows(timeline::states_from_minutes(buckets, &facts(gpu), from_ms, to_ms, window_ms, th))
}

/// The GPU's state now (core's `current_state`).
pub fn current_state(
    gpu: &GpuRecord,
    newest: Option<&RollupBucket>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> Classification {
    timeline::current_state(&facts(gpu), newest, now_ms, th, delivery_allowance_ms)
}
