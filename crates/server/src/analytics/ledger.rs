//! One GPU's accounts over a period, added up from stored credits (see
//! `fleetlens_core::Credit`): time per workload state, the funnel sums, energy, and what the
//! advice needs (SMACT of each bucket's working time, from the bucket's credit).

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
    /// Mean SMACT of the working time of each bucket that has some (for the p95 of the
    /// right-size hint: idle, held, hung and offline time say nothing of the GPU work needs).
    pub working_sm_active_by_bucket: Vec<f64>,
}

/// The GPU's paid span inside `[from_ms, to_ms)`: from its first sample (registration) until
/// `now_ms`, so that a GPU that stops reporting is paid, and offline, until it is retired.
/// A GPU that never reported live (only back-filled: a replayed trace) is paid only over the
/// span it reported, to the end of its newest sample's minute. `None` when it was not yet
/// registered.
pub fn paid_span(gpu: &GpuRecord, from_ms: i64, to_ms: i64, now_ms: i64) -> Option<(i64, i64)> {
    let start = from_ms.max(gpu.info.first_seen_ms);
    let reported_to =
        if gpu.last_live_ms > 0 { now_ms } else { (gpu.info.last_seen_ms.div_euclid(60_000) + 1) * 60_000 };
    let end = to_ms.min(now_ms).min(reported_to);
    (end > start).then_some((start, end))
}

/// Milliseconds of `[bucket_ms, bucket_ms + len_ms)` inside `[start_ms, end_ms)`.
pub fn overlap_ms(bucket_ms: i64, len_ms: i64, start_ms: i64, end_ms: i64) -> i64 {
    ((bucket_ms + len_ms).min(end_ms) - bucket_ms.max(start_ms)).max(0)
}

/// The share of a bucket's credit that falls in `[from_ms, end_ms)`.
///
/// A bucket's credit is the sampled time of its samples (`RollupBucket::sampled_ms`,
/// `sampled_s` here), taken as spread evenly over the part of the bucket between the GPU's
/// first sample and its newest sample's own interval (the sampled time the bucket holds beyond
/// the time between its samples, for the bucket of the newest sample): a bucket inside the
/// period weighs 1 whatever its sampled time, and one that the period's edge cuts weighs the
/// share of that part inside the period. Time before the GPU's first sample and after its
/// newest sample's interval is never credited, so a period reaching past them adds offline
/// time, not state time.
pub fn credit_share(gpu: &GpuRecord, bucket_ms: i64, len_ms: i64, from_ms: i64, end_ms: i64, sampled_s: f64) -> f64 {
    let between = overlap_ms(bucket_ms, len_ms, gpu.info.first_seen_ms, gpu.info.last_seen_ms + 1);
    let holds_newest = (bucket_ms..bucket_ms + len_ms).contains(&gpu.info.last_seen_ms);
    let tail_ms = if holds_newest {
        ((sampled_s * 1000.0).round() as i64 - between).clamp(0, bucket_ms + len_ms - gpu.info.last_seen_ms - 1)
    } else {
        0
    };
    let (credited_from, credited_to) = (gpu.info.first_seen_ms, gpu.info.last_seen_ms + 1 + tail_ms);
    let credited = overlap_ms(bucket_ms, len_ms, credited_from, credited_to);
    if credited == 0 {
        return 0.0;
    }
    let inside = overlap_ms(bucket_ms, len_ms, from_ms.max(credited_from), end_ms.min(credited_to));
    (inside as f64 / credited as f64).min(1.0)
}

/// Add up weighted credits over a paid span of `paid_s` seconds; paid time that no credit
/// covers is offline (paid for, and unused).
///
/// Sampled time can exceed the paid span by up to one sampling interval (a GPU's first sample
/// counts one interval, which began before it; a period can end between two samples): then
/// every credit is scaled down to the paid span, so the states never add up to more than what
/// was paid.
pub fn ledger<'a>(paid_s: f64, credits: impl IntoIterator<Item = (&'a Credit, f64)>) -> GpuLedger {
    let mut total = Credit::default();
    let mut l = GpuLedger { paid_s, ..Default::default() };
    for (c, weight) in credits {
        if weight <= 0.0 {
            continue;
        }
        total.add_scaled(c, weight);
        if let Some(sm) = c.working_sm_active_pct() {
            l.working_sm_active_by_bucket.push(sm);
        }
    }
    let covered = total.covered_s();
    if covered > paid_s && covered > 0.0 {
        let mut scaled = Credit::default();
        scaled.add_scaled(&total, paid_s.max(0.0) / covered);
        total = scaled;
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
    use fleetlens_core::GpuInfo;

    #[test]
    fn overlap_is_the_shared_time() {
        assert_eq!(overlap_ms(0, 60_000, 30_000, 90_000), 30_000);
        assert_eq!(overlap_ms(0, 60_000, 60_000, 90_000), 0);
        assert_eq!(overlap_ms(0, 3_600_000, -5, 10_000_000), 3_600_000);
    }

    #[test]
    fn sampled_time_past_the_paid_span_is_scaled_to_it() {
        let mut c = Credit::default();
        c.state_s[1] = 84.55; // idle
        c.energy_j[1] = 8455.0;
        let l = ledger(84.544, [(&c, 1.0)]);
        assert!((l.state_time.seconds[&WorkloadState::Idle] - 84.544).abs() < 1e-9);
        assert!(!l.state_time.seconds.contains_key(&WorkloadState::Offline));
        assert!(l.energy_j < 8455.0);
    }

    #[test]
    fn a_bucket_weighs_the_share_of_the_gpus_sampled_span_in_the_period() {
        let gpu = GpuRecord {
            id: fleetlens_store::GpuId(1),
            info: GpuInfo { uuid: "GPU-1".into(), first_seen_ms: 43_641, last_seen_ms: 127_185, ..GpuInfo::default() },
            last_live_ms: 127_185,
            latest: None,
        };
        // The first and last minutes, partly sampled, weigh 1 in any period holding the samples.
        assert_eq!(credit_share(&gpu, 0, 60_000, 0, 10_000_000, 17.4), 1.0);
        assert_eq!(credit_share(&gpu, 120_000, 60_000, 0, 10_000_000, 8.2), 1.0);
        // A period ending past the newest sample's interval: all of it; that interval (the 1 s the
        // minute holds beyond its samples' span) is where a period can still cut it.
        assert_eq!(credit_share(&gpu, 120_000, 60_000, 0, 128_200, 8.186), 1.0);
        let w = credit_share(&gpu, 120_000, 60_000, 0, 127_686, 8.186);
        assert!((w - 7_686.0 / 8_186.0).abs() < 1e-12, "{w}");
        // A period from 51.82 s: half of the first minute's sampled part (43.641 s → 60 s).
        let w = credit_share(&gpu, 0, 60_000, 51_820, 10_000_000, 17.4);
        assert!((w - (60_000.0 - 51_820.0) / (60_000.0 - 43_641.0)).abs() < 1e-12);
        assert_eq!(credit_share(&gpu, 180_000, 60_000, 0, 10_000_000, 0.0), 0.0);
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
