//! Keeping credits (crates/core/src/credit.rs) in step with the rollups, on both backends: after
//! a transaction merges new samples into minute rollups, each changed minute is classified
//! again; where its credit changed, the minute row is updated and the difference is added to
//! its hour.

use std::collections::{BTreeMap, HashMap};

use fleetlens_core::{Credit, Resolution, RollupBucket, Thresholds, WorkloadState};

use crate::OrgId;

/// Classifies a minute for an organisation (its thresholds) and returns the minute's credit.
pub trait MinuteClassifier: Send + Sync + 'static {
    fn credit(
        &self,
        org: OrgId,
        bucket: &RollupBucket,
        power_limit_w: Option<f64>,
        mem_total_bytes: Option<i64>,
    ) -> (Credit, WorkloadState);
}

/// METRICS.md's default thresholds for every organisation.
pub struct DefaultClassifier;

impl MinuteClassifier for DefaultClassifier {
    fn credit(
        &self,
        _org: OrgId,
        b: &RollupBucket,
        power_limit_w: Option<f64>,
        mem: Option<i64>,
    ) -> (Credit, WorkloadState) {
        let (credit, c) = Credit::of_minute(b, power_limit_w, mem, &Thresholds::default());
        (credit, c.state)
    }
}

/// What the classifier needs to know of a GPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuMeta {
    pub org: OrgId,
    pub power_limit_w: Option<f64>,
    pub mem_total_bytes: Option<i64>,
}

/// A minute whose credit changed.
pub(crate) struct MinuteUpdate {
    pub gpu_id: i64,
    pub bucket_ms: i64,
    pub state: WorkloadState,
    pub credit: Credit,
}

/// From merged minute rows with their stored credits: the minutes to update and the credit
/// change of each (GPU, hour).
pub(crate) fn recredit(
    merged: &[(RollupBucket, Credit)],
    meta: &HashMap<i64, GpuMeta>,
    classifier: &dyn MinuteClassifier,
) -> (Vec<MinuteUpdate>, BTreeMap<(i64, i64), Credit>) {
    let mut updates = Vec::new();
    let mut hours: BTreeMap<(i64, i64), Credit> = BTreeMap::new();
    for (bucket, old) in merged {
        let Some(m) = meta.get(&bucket.gpu_id) else { continue };
        let (new, state) = classifier.credit(m.org, bucket, m.power_limit_w, m.mem_total_bytes);
        if new == *old {
            continue;
        }
        let hour = Resolution::Hour.bucket_start(bucket.bucket_ms);
        hours.entry((bucket.gpu_id, hour)).or_default().add_scaled(&new.minus(old), 1.0);
        updates.push(MinuteUpdate { gpu_id: bucket.gpu_id, bucket_ms: bucket.bucket_ms, state, credit: new });
    }
    (updates, hours)
}

/// The hours' credit changes summed per (GPU, UTC day start): what ingest adds to `credits_1d`
/// in the transaction that adds `hours` to the hour rows.
pub(crate) fn day_credits(hours: &BTreeMap<(i64, i64), Credit>) -> BTreeMap<(i64, i64), Credit> {
    let mut days: BTreeMap<(i64, i64), Credit> = BTreeMap::new();
    for (&(gpu_id, hour_ms), credit) in hours {
        days.entry((gpu_id, hour_ms.div_euclid(crate::DAY_MS) * crate::DAY_MS)).or_default().add_scaled(credit, 1.0);
    }
    days
}

/// How many of a GPU's stored timestamps before a batch are read to continue its sampled time
/// (`fleetlens_core::sampled_ms_since_previous`): the previous sample, and enough neighbours
/// that one sample arriving after an outage still finds the GPU's interval.
pub(crate) const PREVIOUS_TIMESTAMPS: i64 = 4;

/// The sampled time of each `(gpu_id, ts_ms)` of a batch (`keys`, any order, repeats allowed),
/// given each GPU's stored timestamps just before the batch (`before`, ascending). With the
/// default offline rule: the store does not know an organisation's thresholds.
pub(crate) fn sampled_ms_by_key(
    keys: impl IntoIterator<Item = (i64, i64)>,
    before: &HashMap<i64, Vec<i64>>,
) -> HashMap<(i64, i64), i64> {
    let mut by_gpu: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (gpu_id, ts) in keys {
        by_gpu.entry(gpu_id).or_default().push(ts);
    }
    let missing = Thresholds::default().offline_missing_intervals;
    let mut out = HashMap::new();
    for (gpu_id, mut ts) in by_gpu {
        ts.sort_unstable();
        ts.dedup();
        let prior: &[i64] = before.get(&gpu_id).map(Vec::as_slice).unwrap_or_default();
        // Stored samples at or after the batch's first (a back-fill into known time) do not
        // precede it.
        let cut = prior.partition_point(|t| *t < ts[0]);
        let ms = fleetlens_core::sampled_ms_since_previous(&prior[..cut], &ts, missing);
        out.extend(ts.into_iter().zip(ms).map(|(t, d)| ((gpu_id, t), d)));
    }
    out
}
