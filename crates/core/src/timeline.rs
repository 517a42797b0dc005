//! A GPU's workload state over time, at the three granularities the server serves: windows of
//! raw samples, windows of stored 1-minute rollups, and "now" from its newest minute. Also the
//! one offline rule (METRICS.md: "no sample for `offline_missing_intervals` intervals") that
//! the classifier, the dashboards and the alert engine share.

use crate::classify::{Classification, KeyValues, classify, classify_window};
use crate::ids::GpuId;
use crate::rollup::RollupBucket;
use crate::sample::Sample;
use crate::state::WorkloadState;
use crate::thresholds::Thresholds;

pub const MINUTE_MS: i64 = 60_000;
/// Sample interval assumed when the data cannot tell (the agent's default), and the floor of
/// the interval the offline rule counts in: a GPU sampled faster than once a second is still
/// given whole seconds of silence before it is called offline (clock jitter and batching).
pub const DEFAULT_INTERVAL_MS: i64 = 1_000;

/// What the state logic needs to know about a GPU besides its samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuFacts {
    pub gpu_id: GpuId,
    /// Time of its newest stored sample.
    pub last_seen_ms: i64,
    pub power_limit_w: Option<f64>,
    pub mem_total_bytes: Option<i64>,
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

/// The interval of a stored minute (the default when there is none).
pub fn interval_of_bucket(bucket: Option<&RollupBucket>) -> i64 {
    bucket.map_or(DEFAULT_INTERVAL_MS, |b| interval_of(b.sample_count, b.first_ts_ms, b.last_ts_ms))
}

/// The offline rule: a silence of at least this long is an outage, not a missed sample.
/// `offline_missing_intervals` (at least 1) intervals, each at least [`DEFAULT_INTERVAL_MS`];
/// an unknown interval (zero or negative) counts as the default.
pub fn offline_limit_ms(interval_ms: i64, th: &Thresholds) -> i64 {
    interval_ms.max(DEFAULT_INTERVAL_MS).saturating_mul(i64::from(th.offline_missing_intervals.max(1)))
}

/// True when a GPU last heard from at `last_seen_ms` is offline at `now_ms`: silent for the
/// offline limit beyond the `delivery_allowance_ms` its agent's batching explains.
pub fn is_silent(
    last_seen_ms: i64,
    interval_ms: i64,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> bool {
    now_ms - last_seen_ms >= offline_limit_ms(interval_ms, th).saturating_add(delivery_allowance_ms.max(0))
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

/// One window of a state timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSpan {
    pub from_ms: i64,
    pub to_ms: i64,
    pub classification: Classification,
}

/// States of consecutive `window_ms` windows over `[from_ms, to_ms)` from raw samples (sorted
/// by time), starting at `from_ms`.
pub fn states_from_samples(
    samples: &[Sample],
    from_ms: i64,
    to_ms: i64,
    window_ms: i64,
    th: &Thresholds,
) -> Vec<StateSpan> {
    let ts: Vec<i64> = samples.iter().map(|s| s.ts_ms).collect();
    let interval = interval_from_timestamps(&ts);
    let window_ms = window_ms.max(1);
    let mut out = Vec::new();
    let mut start = from_ms;
    while start < to_ms {
        let end = (start + window_ms).min(to_ms);
        // The window's samples plus one neighbour on each side: all classify_window looks at.
        let lo = ts.partition_point(|t| *t < start).saturating_sub(1);
        let hi = (ts.partition_point(|t| *t < end) + 1).min(samples.len());
        let classification = classify_window(&samples[lo..hi], start, end, interval, th);
        out.push(StateSpan { from_ms: start, to_ms: end, classification });
        start = end;
    }
    out
}

/// States of `window_ms` windows (a multiple of a minute) from one GPU's 1-minute rollups
/// (sorted by minute), aligned to the minute. Windows with no bucket are offline.
pub fn states_from_minutes(
    buckets: &[RollupBucket],
    gpu: &GpuFacts,
    from_ms: i64,
    to_ms: i64,
    window_ms: i64,
    th: &Thresholds,
) -> Vec<StateSpan> {
    let window_ms = window_ms.max(MINUTE_MS);
    let mut out = Vec::new();
    let mut start = from_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
    let mut i = 0;
    while start < to_ms {
        let end = start + window_ms;
        let mut merged = RollupBucket { gpu_id: gpu.gpu_id, bucket_ms: start, ..Default::default() };
        while i < buckets.len() && buckets[i].bucket_ms < end {
            if buckets[i].bucket_ms >= start {
                merged.merge(&buckets[i]);
            }
            i += 1;
        }
        let classification = if merged.sample_count > 0 {
            classify(&merged.window_aggregate(gpu.power_limit_w, gpu.mem_total_bytes), th)
        } else {
            offline(format!("no sample from this GPU in the {} s window", window_ms / 1000))
        };
        out.push(StateSpan { from_ms: start, to_ms: end.min(to_ms), classification });
        start = end;
    }
    out
}

/// The GPU's state now: its newest minute classified, or offline when it is silent.
pub fn current_state(
    gpu: &GpuFacts,
    newest: Option<&RollupBucket>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> Classification {
    let interval = interval_of_bucket(newest);
    match newest {
        Some(b) if !is_silent(gpu.last_seen_ms, interval, now_ms, th, delivery_allowance_ms) => {
            classify(&b.window_aggregate(gpu.power_limit_w, gpu.mem_total_bytes), th)
        }
        _ => offline(format!(
            "no sample for {:.0} s (expected every {:.1} s)",
            (now_ms - gpu.last_seen_ms) as f64 / 1000.0,
            interval as f64 / 1000.0
        )),
    }
}

/// The GPU's state now from the state stored with its newest minute (cheap, for lists):
/// `stored_state` when it is still reporting, else offline. `newest` is the minute's
/// `(sample_count, first_ts_ms, last_ts_ms, stored state name)`.
pub fn current_state_stored(
    last_seen_ms: i64,
    newest: Option<(i64, i64, i64, Option<&str>)>,
    now_ms: i64,
    th: &Thresholds,
    delivery_allowance_ms: i64,
) -> WorkloadState {
    match newest {
        Some((count, first, last, state))
            if !is_silent(last_seen_ms, interval_of(count, first, last), now_ms, th, delivery_allowance_ms) =>
        {
            state.and_then(WorkloadState::parse).unwrap_or(WorkloadState::Offline)
        }
        _ => WorkloadState::Offline,
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
