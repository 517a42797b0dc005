//! Glue between stored data and the pure analytics of `fleetlens-core` (its `timeline` holds
//! the workload states per window and the current state of a GPU): what core needs of stored
//! rows, core's states as wire windows, and the organisation's classifier thresholds and prices.

pub mod billing;
pub mod ledger;
pub mod mfu;
pub mod owners;
pub mod summary;
pub mod summary_cache;

use fleetlens_api::StateWindow;
use fleetlens_core::timeline::{self, GpuFacts, StateSpan};
pub use fleetlens_core::timeline::{DEFAULT_INTERVAL_MS, MINUTE_MS, interval_from_timestamps, interval_of, offline};
use fleetlens_core::{Classification, Credit, PriceTable, Resolution, RollupBucket, Thresholds, WorkloadState};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, RwLock};

use fleetlens_store::{GpuId, GpuRecord, LatestMinute, MinuteClassifier, OrgId, Store};

use crate::delivery::HostDeliveries;
use crate::error::{ApiError, ApiResult};
use crate::time::now_ms;

pub const THRESHOLDS_KEY: &str = "thresholds";
pub const PRICES_KEY: &str = "prices";

/// The classifier the store uses to credit each minute as it is stored, with the thresholds of
/// the minute's organisation (defaults unless overridden).
///
/// Its thresholds are a copy of the stored ones, kept current on every replica: the replica that
/// takes a PUT sets them at once ([`OrgClassifier::set`]), every replica re-reads them every
/// [`THRESHOLDS_REFRESH`] (`jobs::thresholds_loop`), and the rollup job re-reads them in the
/// transaction that writes minutes, after the minutes' marks (`MinuteClassifier::settings_key`).
/// So a PUT on any replica credits every minute whose samples were stored after it, and every
/// replica's reads classify with it within [`THRESHOLDS_REFRESH`].
#[derive(Default)]
pub struct OrgClassifier {
    thresholds: RwLock<HashMap<OrgId, Thresholds>>,
    /// Organisations whose thresholds the rollup job's read changed ([`OrgClassifier::reload`]
    /// reports them too).
    unreported: Mutex<BTreeSet<OrgId>>,
}

/// How often every replica re-reads the stored thresholds: the longest a PUT served by another
/// replica goes unseen by this one's reads (one small query per replica per period).
pub const THRESHOLDS_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

impl OrgClassifier {
    /// Load every organisation's stored thresholds.
    pub async fn load(store: &dyn Store) -> Result<Self, fleetlens_store::StoreError> {
        let classifier = OrgClassifier::default();
        classifier.replace(Self::parse(store.settings_by_key(THRESHOLDS_KEY).await?));
        Ok(classifier)
    }

    /// Re-read every organisation's stored thresholds (a PUT served by another replica) and
    /// return the organisations whose thresholds changed since the last read, so that what was
    /// derived from the old ones (cached summaries) can be dropped.
    pub async fn reload(&self, store: &dyn Store) -> Result<BTreeSet<OrgId>, fleetlens_store::StoreError> {
        let mut changed = self.replace(Self::parse(store.settings_by_key(THRESHOLDS_KEY).await?));
        changed.append(&mut self.unreported.lock().expect("unreported lock"));
        Ok(changed)
    }

    /// Take `map` as every organisation's thresholds; returns the organisations it changes.
    fn replace(&self, map: HashMap<OrgId, Thresholds>) -> BTreeSet<OrgId> {
        let mut current = self.thresholds.write().expect("thresholds lock");
        let changed =
            current.keys().chain(map.keys()).filter(|org| current.get(org) != map.get(org)).copied().collect();
        *current = map;
        changed
    }

    fn parse(rows: Vec<(OrgId, String)>) -> HashMap<OrgId, Thresholds> {
        let mut map = HashMap::new();
        for (org, json) in rows {
            match serde_json::from_str(&json) {
                Ok(th) => {
                    map.insert(org, th);
                }
                Err(e) => tracing::warn!(org = %org, error = %e, "stored thresholds unreadable; using defaults"),
            }
        }
        map
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

    fn settings_key(&self) -> Option<&'static str> {
        Some(THRESHOLDS_KEY)
    }

    fn use_settings(&self, rows: Vec<(OrgId, String)>) {
        let mut changed = self.replace(Self::parse(rows));
        self.unreported.lock().expect("unreported lock").append(&mut changed);
    }
}

/// An organisation's classifier thresholds (defaults unless overridden).
/// The newest 1-minute rollup of `org`'s GPU (the minute of its newest sample), if stored.
pub async fn newest_minute(store: &dyn Store, org: OrgId, gpu: &GpuRecord) -> ApiResult<Option<RollupBucket>> {
    let bucket_ms = Resolution::Minute.bucket_start(gpu.info.last_seen_ms);
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
        last_seen_ms: gpu.info.last_seen_ms,
        power_limit_w: gpu.info.power_limit_w,
        mem_total_bytes: gpu.info.mem_total_bytes,
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
    !timeline::is_silent(gpu.info.last_seen_ms, timeline::interval_of_bucket(newest), now_ms, th, delivery_allowance_ms)
}

/// A GPU's current state from its identity and its newest stored minute (core's
/// `current_state_stored`): the GPU list, the live picture and `/metrics` all ask it this way.
pub fn current_state(
    gpu: &GpuRecord,
    newest: Option<&LatestMinute>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> WorkloadState {
    let minute = newest.map(|m| (m.sample_count, m.first_ts_ms, m.last_ts_ms, m.state.as_deref()));
    timeline::current_state_stored(gpu.info.last_seen_ms, minute, now_ms, th, delivery_allowance_ms)
}

/// Each GPU's newest stored minute, by GPU id: what [`current_state`] reads for a whole
/// organisation.
pub async fn newest_minutes(store: &dyn Store, org: OrgId) -> ApiResult<HashMap<GpuId, LatestMinute>> {
    Ok(store.latest_minutes(org).await?.into_iter().map(|m| (m.gpu_id, m)).collect())
}

/// What the current state of every GPU of an organisation is read from, read together at one
/// moment: its thresholds and each GPU's newest stored minute. The GPU list and `/metrics`
/// state every GPU this way.
pub struct CurrentStates {
    org: OrgId,
    th: Thresholds,
    newest: HashMap<GpuId, LatestMinute>,
    /// The moment the states are of (after the reads).
    pub now_ms: i64,
}

impl CurrentStates {
    /// The organisation's GPUs and what their current states are read from.
    pub async fn read(store: &dyn Store, org: OrgId) -> ApiResult<(Vec<GpuRecord>, CurrentStates)> {
        let th = thresholds(store, org).await?;
        let gpus = store.gpus(org).await?;
        let newest = newest_minutes(store, org).await?;
        Ok((gpus, CurrentStates { org, th, newest, now_ms: now_ms() }))
    }

    /// `gpu`'s current state ([`current_state`]), with its host's delivery allowance.
    pub fn of(&self, gpu: &GpuRecord, deliveries: &HostDeliveries) -> WorkloadState {
        let allowance = deliveries.allowance_ms(self.org, &gpu.info.host);
        current_state(gpu, self.newest.get(&gpu.id), self.now_ms, &self.th, allowance)
    }
}

pub fn state_window(from_ms: i64, to_ms: i64, c: &Classification) -> StateWindow {
    StateWindow {
        from_ms,
        to_ms,
        state: c.state,
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

/// Core's state spans (`timeline::states_from_samples` / `states_from_minutes`) as the wire's
/// windows.
pub fn state_windows(spans: Vec<StateSpan>) -> Vec<StateWindow> {
    spans.iter().map(|s| state_window(s.from_ms, s.to_ms, &s.classification)).collect()
}
