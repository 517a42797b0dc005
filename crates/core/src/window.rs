//! Aggregation of one GPU's samples over one evaluation window, and how long each sample
//! stands for. Means are taken over the samples that measured a signal: a signal no sample
//! measured stays `None`, never 0.

use serde::{Deserialize, Serialize};

use crate::sample::Sample;
use crate::thresholds::Thresholds;

/// How many samples of the window measured each signal. A mean in [`WindowAggregate`] is
/// `None` exactly when its count is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SignalCounts {
    pub gpu_util: u32,
    pub sm_active: u32,
    pub sm_occupancy: u32,
    pub tensor_active: u32,
    pub dram_active: u32,
    pub fp16_active: u32,
    pub fp32_active: u32,
    pub fp64_active: u32,
    pub power: u32,
    pub power_limit: u32,
    pub mem_used: u32,
    /// Samples whose process list could be read (`processes` is `Some`).
    pub processes: u32,
}

/// One GPU over one window (any width).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WindowAggregate {
    pub sample_count: u32,
    pub first_ts_ms: Option<i64>,
    pub last_ts_ms: Option<i64>,
    /// Mean kernel utilization, %.
    pub gpu_util_pct: Option<f64>,
    /// Mean SM activity (SMACT), %.
    pub sm_active_pct: Option<f64>,
    /// Mean SM occupancy (SMOCC), %.
    pub sm_occupancy_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_active_pct: Option<f64>,
    pub fp16_active_pct: Option<f64>,
    pub fp32_active_pct: Option<f64>,
    pub fp64_active_pct: Option<f64>,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    /// Peak framebuffer use in the window.
    pub mem_used_max_bytes: Option<i64>,
    pub mem_total_bytes: Option<i64>,
    /// Samples with at least one process on the GPU (of those whose list was read).
    pub samples_with_process: u32,
    pub counts: SignalCounts,
}

#[derive(Default, Clone, Copy)]
struct Mean {
    sum: f64,
    n: u32,
}

impl Mean {
    fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.sum += v;
            self.n += 1;
        }
    }
    fn get(self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

/// The signals a window averages, by signal-table name; the aggregate's fields read their slot
/// by name.
const WINDOW_MEANS: [&str; 10] = [
    "gpu_util_pct",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "fp16_active_pct",
    "fp32_active_pct",
    "fp64_active_pct",
    "power_w",
    "power_limit_w",
];

const WINDOW_MEAN_GETTERS: [fn(&Sample) -> Option<f64>; WINDOW_MEANS.len()] = crate::signal::getters(WINDOW_MEANS);

const fn mean_slot(name: &str) -> usize {
    crate::signal::position(WINDOW_MEANS, name)
}

impl WindowAggregate {
    /// Aggregate the given samples. The caller picks which samples belong to the window;
    /// [`samples_in`] does it by timestamp.
    pub fn from_samples<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Self {
        let mut m = [Mean::default(); WINDOW_MEANS.len()];
        let mut agg = WindowAggregate::default();
        for s in samples {
            agg.sample_count += 1;
            agg.first_ts_ms = Some(agg.first_ts_ms.map_or(s.ts_ms, |t| t.min(s.ts_ms)));
            agg.last_ts_ms = Some(agg.last_ts_ms.map_or(s.ts_ms, |t| t.max(s.ts_ms)));
            let values = WINDOW_MEAN_GETTERS.map(|get| get(s));
            for (acc, v) in m.iter_mut().zip(values) {
                acc.add(v);
            }
            if let Some(used) = s.mem_used_bytes {
                agg.counts.mem_used += 1;
                agg.mem_used_max_bytes = Some(agg.mem_used_max_bytes.map_or(used, |u| u.max(used)));
            }
            if s.mem_total_bytes.is_some() {
                agg.mem_total_bytes = s.mem_total_bytes;
            }
            if s.holders_known() {
                agg.counts.processes += 1;
                agg.samples_with_process += u32::from(s.is_allocated());
            }
        }
        agg.gpu_util_pct = m[const { mean_slot("gpu_util_pct") }].get();
        agg.sm_active_pct = m[const { mean_slot("sm_active_pct") }].get();
        agg.sm_occupancy_pct = m[const { mean_slot("sm_occupancy_pct") }].get();
        agg.tensor_active_pct = m[const { mean_slot("tensor_active_pct") }].get();
        agg.dram_active_pct = m[const { mean_slot("dram_active_pct") }].get();
        agg.fp16_active_pct = m[const { mean_slot("fp16_active_pct") }].get();
        agg.fp32_active_pct = m[const { mean_slot("fp32_active_pct") }].get();
        agg.fp64_active_pct = m[const { mean_slot("fp64_active_pct") }].get();
        agg.power_w = m[const { mean_slot("power_w") }].get();
        agg.power_limit_w = m[const { mean_slot("power_limit_w") }].get();
        let count = |i: usize| m[i].n;
        let c = &mut agg.counts;
        c.gpu_util = count(const { mean_slot("gpu_util_pct") });
        c.sm_active = count(const { mean_slot("sm_active_pct") });
        c.sm_occupancy = count(const { mean_slot("sm_occupancy_pct") });
        c.tensor_active = count(const { mean_slot("tensor_active_pct") });
        c.dram_active = count(const { mean_slot("dram_active_pct") });
        c.fp16_active = count(const { mean_slot("fp16_active_pct") });
        c.fp32_active = count(const { mean_slot("fp32_active_pct") });
        c.fp64_active = count(const { mean_slot("fp64_active_pct") });
        c.power = count(const { mean_slot("power_w") });
        c.power_limit = count(const { mean_slot("power_limit_w") });
        agg
    }

    /// Was any process on the GPU during the window? `None` when no sample could read the
    /// process list, so "nobody" and "unknown" stay apart.
    pub fn any_process(&self) -> Option<bool> {
        (self.counts.processes > 0).then_some(self.samples_with_process > 0)
    }

    /// Share of the samples (with a readable process list) that had a process, 0–1.
    pub fn process_fraction(&self) -> Option<f64> {
        (self.counts.processes > 0).then(|| f64::from(self.samples_with_process) / f64::from(self.counts.processes))
    }

    /// Mean power as % of the mean power limit.
    pub fn power_pct_of_limit(&self) -> Option<f64> {
        match (self.power_w, self.power_limit_w) {
            (Some(p), Some(l)) if l > 0.0 => Some(p / l * 100.0),
            _ => None,
        }
    }

    /// The busiest FP pipe (fp16, fp32, fp64) among those measured.
    pub fn max_fp_pipe_pct(&self) -> Option<f64> {
        [self.fp16_active_pct, self.fp32_active_pct, self.fp64_active_pct].into_iter().flatten().reduce(f64::max)
    }

    /// Efficiency of the window: mean SMACT / mean kernel util × 100, capped at 100; `None`
    /// when util is 0 or either is absent.
    pub fn efficiency(&self) -> Option<f64> {
        crate::efficiency(self.sm_active_pct, self.gpu_util_pct)
    }
}

/// The samples with `start_ms <= ts_ms < end_ms` (windows are half-open so that adjacent
/// windows never share a sample).
pub fn samples_in(samples: &[Sample], start_ms: i64, end_ms: i64) -> impl Iterator<Item = &Sample> {
    samples.iter().filter(move |s| s.ts_ms >= start_ms && s.ts_ms < end_ms)
}

/// How long each sample stands for, ms, given timestamps in ascending order: the time to the
/// next sample, unless that gap reaches the offline rule (`offline_missing_intervals`
/// intervals), in which case the sample stands for one interval and the rest of the gap is
/// offline time. The last sample stands for one interval. Used for Σ signal × dt (funnel)
/// and power × dt (energy).
pub fn sample_durations_ms(ts_ms: &[i64], expected_interval_ms: i64, th: &Thresholds) -> Vec<i64> {
    let interval = expected_interval_ms.max(1);
    let offline_gap = interval.saturating_mul(i64::from(th.offline_missing_intervals));
    ts_ms
        .iter()
        .enumerate()
        .map(|(i, &t)| match ts_ms.get(i + 1) {
            Some(&next) if next - t < offline_gap => (next - t).max(0),
            _ => interval,
        })
        .collect()
}

/// Sampling interval assumed when the timestamps cannot tell (the agent's default).
pub const DEFAULT_SAMPLE_INTERVAL_MS: i64 = 1_000;

/// The sampled time that each new sample of one GPU adds, ms (docs/METRICS.md, "Sampled
/// time"): the time since the GPU's previous sample (the interval its readings average over),
/// unless that gap reaches the offline rule (`offline_missing_intervals` intervals) or there is
/// no previous sample; then one interval. `before` holds the GPU's stored timestamps just before
/// the batch, ascending (a few are enough); `batch` the batch's distinct timestamps, ascending.
/// The interval is the median gap of them all ([`DEFAULT_SAMPLE_INTERVAL_MS`] without one).
///
/// Over a run of samples this adds up to what [`sample_durations_ms`] gives (each sample
/// standing for the time to the next, the last for one interval): the same gaps, the one
/// interval booked at the run's first sample instead of its last.
pub fn sampled_ms_since_previous(before: &[i64], batch: &[i64], offline_missing_intervals: u32) -> Vec<i64> {
    let all: Vec<i64> = before.iter().chain(batch).copied().collect();
    let mut gaps: Vec<i64> = all.windows(2).map(|w| w[1] - w[0]).filter(|g| *g > 0).collect();
    let interval = if gaps.is_empty() {
        DEFAULT_SAMPLE_INTERVAL_MS
    } else {
        let mid = gaps.len() / 2;
        *gaps.select_nth_unstable(mid).1
    };
    let offline_gap = interval.saturating_mul(i64::from(offline_missing_intervals.max(1)));
    batch
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let prev = if i == 0 { before.last().copied() } else { Some(batch[i - 1]) };
            match prev {
                Some(p) if t > p && t - p < offline_gap => t - p,
                _ => interval,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::GpuProcess;
    use crate::sample::blank_sample as s;

    #[test]
    fn means_skip_absent_values() {
        let a = Sample { gpu_util_pct: Some(100.0), sm_active_pct: None, power_w: Some(100.0), ..s(0) };
        let b = Sample { gpu_util_pct: Some(50.0), sm_active_pct: Some(10.0), power_w: Some(300.0), ..s(1000) };
        let agg = WindowAggregate::from_samples([&a, &b]);
        assert_eq!(agg.sample_count, 2);
        assert_eq!(agg.gpu_util_pct, Some(75.0));
        assert_eq!(agg.sm_active_pct, Some(10.0));
        assert_eq!((agg.counts.sm_active, agg.counts.gpu_util), (1, 2));
        assert_eq!(agg.tensor_active_pct, None);
        assert_eq!(agg.counts.tensor_active, 0);
        assert_eq!(agg.power_w, Some(200.0));
        assert_eq!(agg.power_pct_of_limit(), None);
        assert_eq!((agg.first_ts_ms, agg.last_ts_ms), (Some(0), Some(1000)));
    }

    #[test]
    fn processes_and_memory() {
        let p = GpuProcess { pid: 1, used_bytes: Some(10), ..Default::default() };
        let a = Sample { processes: Some(vec![p]), mem_used_bytes: Some(5), ..s(0) };
        let b = Sample { processes: Some(vec![]), mem_used_bytes: Some(9), ..s(1) };
        let c = Sample { processes: None, ..s(2) };
        let agg = WindowAggregate::from_samples([&a, &b, &c]);
        assert_eq!(agg.any_process(), Some(true));
        assert_eq!(agg.process_fraction(), Some(0.5));
        assert_eq!(agg.mem_used_max_bytes, Some(9));
        let unknown = WindowAggregate::from_samples([&c]);
        assert_eq!((unknown.any_process(), unknown.process_fraction()), (None, None));
        let nobody = WindowAggregate::from_samples([&b]);
        assert_eq!(nobody.any_process(), Some(false));
    }

    #[test]
    fn efficiency_and_fp_pipes() {
        let a = Sample {
            gpu_util_pct: Some(80.0),
            sm_active_pct: Some(20.0),
            fp32_active_pct: Some(30.0),
            fp16_active_pct: Some(60.0),
            power_w: Some(210.0),
            power_limit_w: Some(700.0),
            ..s(0)
        };
        let agg = WindowAggregate::from_samples([&a]);
        assert_eq!(agg.efficiency(), Some(25.0));
        assert_eq!(agg.max_fp_pipe_pct(), Some(60.0));
        assert!((agg.power_pct_of_limit().unwrap() - 30.0).abs() < 1e-9);
        let zero = Sample { gpu_util_pct: Some(0.0), sm_active_pct: Some(0.0), ..s(0) };
        assert_eq!(WindowAggregate::from_samples([&zero]).efficiency(), None);
        assert_eq!(WindowAggregate::from_samples([]).efficiency(), None);
    }

    #[test]
    fn samples_in_is_half_open() {
        let v = vec![s(0), s(1000), s(2000)];
        assert_eq!(samples_in(&v, 0, 2000).count(), 2);
        assert_eq!(samples_in(&v, 2000, 4000).count(), 1);
    }

    #[test]
    fn durations_stop_at_the_offline_rule() {
        let th = Thresholds::default();
        // 1 s interval: a 2.5 s gap is a missed sample, a 3 s gap is offline.
        let d = sample_durations_ms(&[0, 1000, 3500, 6500, 7500], 1000, &th);
        assert_eq!(d, vec![1000, 2500, 1000, 1000, 1000]);
        assert!(sample_durations_ms(&[], 1000, &th).is_empty());
    }

    #[test]
    fn sampled_time_is_the_time_since_the_previous_sample_up_to_the_offline_rule() {
        // A GPU's first batch: the first sample one interval, then the gaps.
        assert_eq!(sampled_ms_since_previous(&[], &[0, 1000, 2010, 3000], 3), vec![1000, 1000, 1010, 990]);
        // The next batch continues from the stored samples; a 2.5 s gap is a missed sample,
        // a 5 s gap is offline after one interval.
        assert_eq!(sampled_ms_since_previous(&[1000, 2000, 3000], &[5500, 10_500, 11_500], 3), vec![2500, 1000, 1000]);
        // One sample after an outage: the interval comes from the stored neighbours.
        assert_eq!(sampled_ms_since_previous(&[0, 1000, 2000, 3000], &[600_000], 3), vec![1000]);
        assert_eq!(sampled_ms_since_previous(&[], &[42], 3), vec![DEFAULT_SAMPLE_INTERVAL_MS]);
        // Summed over a run it equals the forward durations of sample_durations_ms.
        let ts = [0, 1000, 2000, 9000, 10_000, 11_500];
        let forward: i64 = sample_durations_ms(&ts, 1000, &Thresholds::default()).iter().sum();
        let backward: i64 = sampled_ms_since_previous(&[], &ts, 3).iter().sum();
        assert_eq!(forward, backward);
    }
}
