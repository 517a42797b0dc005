//! One GPU's accounts over a period, added up from stored credits (see
//! `fleetlens_core::Credit`): time per workload state, the funnel sums, energy, and what the
//! advice needs (SMACT per bucket, from the bucket's credit).

use std::collections::BTreeMap;

use fleetlens_core::{Credit, GpuUsage, StateTime, WorkloadState};
use fleetlens_store::GpuRecord;

#[derive(Debug, Clone, Default)]
pub struct GpuLedger {
    pub paid_s: f64,
    pub state_time: StateTime,
    pub usage: GpuUsage,
    pub energy_j: f64,
    pub energy_j_by_state: BTreeMap<WorkloadState, f64>,
    /// Mean SMACT of each bucket with data (for p95-based advice).
    pub sm_active_by_bucket: Vec<f64>,
}

/// The GPU's paid span inside `[from_ms, to_ms)`: from its first sample (registration) until
/// `now_ms`, so that a GPU that stops reporting is paid, and offline, until it is retired.
/// A GPU that never reported live (only back-filled: a replayed trace) is paid only over the
/// span it reported, to the end of its newest sample's minute. `None` when it was not yet
/// registered.
pub fn paid_span(gpu: &GpuRecord, from_ms: i64, to_ms: i64, now_ms: i64) -> Option<(i64, i64)> {
    let start = from_ms.max(gpu.first_seen_ms);
    let reported_to = if gpu.last_live_ms > 0 { now_ms } else { (gpu.last_seen_ms.div_euclid(60_000) + 1) * 60_000 };
    let end = to_ms.min(now_ms).min(reported_to);
    (end > start).then_some((start, end))
}

/// Milliseconds of `[bucket_ms, bucket_ms + len_ms)` inside `[start_ms, end_ms)`.
pub fn overlap_ms(bucket_ms: i64, len_ms: i64, start_ms: i64, end_ms: i64) -> i64 {
    ((bucket_ms + len_ms).min(end_ms) - bucket_ms.max(start_ms)).max(0)
}

/// Add up weighted credits over a paid span of `paid_s` seconds; paid time that no credit
/// covers is offline (paid for, and unused).
pub fn ledger<'a>(paid_s: f64, credits: impl IntoIterator<Item = (&'a Credit, f64)>) -> GpuLedger {
    let mut total = Credit::default();
    let mut l = GpuLedger { paid_s, ..Default::default() };
    for (c, weight) in credits {
        if weight <= 0.0 {
            continue;
        }
        total.add_scaled(c, weight);
        if c.sm_covered_s > 0.0 {
            l.sm_active_by_bucket.push(c.sm_pct_s / c.sm_covered_s);
        }
    }
    for state in WorkloadState::ALL {
        let (secs, wasted, energy) = (total.seconds(state), total.wasted(state), total.energy(state));
        if secs > 0.0 {
            l.state_time.seconds.insert(state, secs);
        }
        if wasted > 0.0 {
            l.state_time.wasted_seconds.insert(state, wasted);
        }
        if energy > 0.0 {
            l.energy_j_by_state.insert(state, energy);
        }
        l.energy_j += energy;
    }
    let offline_s = paid_s - total.covered_s();
    // Credits of whole buckets can overshoot a span by rounding; below a millisecond is noise.
    if offline_s > 1e-3 {
        l.state_time.add(WorkloadState::Offline, offline_s, None);
    }
    l.usage = total.usage(paid_s);
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_the_shared_time() {
        assert_eq!(overlap_ms(0, 60_000, 30_000, 90_000), 30_000);
        assert_eq!(overlap_ms(0, 60_000, 60_000, 90_000), 0);
        assert_eq!(overlap_ms(0, 3_600_000, -5, 10_000_000), 3_600_000);
    }

    #[test]
    fn uncovered_paid_time_is_offline() {
        let mut c = Credit::default();
        c.state_s[2] = 60.0; // idle_held
        c.wasted_s[2] = 60.0;
        c.energy_j[2] = 6000.0;
        let l = ledger(180.0, [(&c, 1.0), (&c, 0.5)]);
        assert_eq!(l.state_time.seconds[&WorkloadState::IdleHeld], 90.0);
        assert_eq!(l.state_time.seconds[&WorkloadState::Offline], 90.0);
        assert_eq!(l.energy_j, 9000.0);
        assert_eq!(l.usage.util_pct_s, None, "no kernel utilization measured: absent, not 0");
    }
}
