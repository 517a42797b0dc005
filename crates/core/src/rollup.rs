//! Rollups: per GPU and time bucket, count / sum / min / max of the main signals. A minute is
//! rolled up from its raw samples once it has closed ([`minute_from_samples`], written by the
//! store's rollup job); buckets merge associatively, so an hour is the merge of its minutes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::GpuId;
use crate::quality::{QualityFlag, QualityFlags};
use crate::sample::Sample;
use crate::signal::Precision;
use crate::window::{SignalCounts, WindowAggregate};

/// Number of data-quality flag kinds counted per bucket.
pub const QUALITY_COUNTS: usize = QualityFlag::ALL.len();

/// Rollup bucket widths: `1m` and `1h` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Resolution {
    #[serde(rename = "1m")]
    Minute,
    #[serde(rename = "1h")]
    Hour,
}

impl Resolution {
    pub const ALL: [Resolution; 2] = [Resolution::Minute, Resolution::Hour];

    pub fn bucket_ms(self) -> i64 {
        match self {
            Resolution::Minute => 60_000,
            Resolution::Hour => 3_600_000,
        }
    }

    /// Start of the bucket holding `ts_ms` (floor, also for negative times).
    pub fn bucket_start(self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.bucket_ms()) * self.bucket_ms()
    }
}

/// The signals kept in rollups, by METRICS.md name, in storage column order.
pub const ROLLUP_SIGNALS: [&str; 12] = [
    "gpu_util_pct",
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "mem_used_bytes",
    "power_w",
    "temp_c",
    "fp16_active_pct",
    "fp32_active_pct",
    "fp64_active_pct",
    // min/max of the monotonic counter bound the energy used inside the bucket.
    "energy_j",
];

/// The accessors of [`ROLLUP_SIGNALS`], from the signal table.
const ROLLUP_GETTERS: [fn(&Sample) -> Option<f64>; ROLLUP_SIGNALS.len()] = crate::signal::getters(ROLLUP_SIGNALS);

/// What [`ROLLUP_SIGNALS`] keep at rest; a closed minute's statistics are kept at it.
const ROLLUP_PRECISION: [Precision; ROLLUP_SIGNALS.len()] = crate::signal::precisions(ROLLUP_SIGNALS);

fn signal_values(s: &Sample) -> [Option<f64>; ROLLUP_SIGNALS.len()] {
    ROLLUP_GETTERS.map(|get| get(s))
}

/// count / sum / min / max over the samples that reported a signal. Absent values are not
/// counted, so `mean()` is the mean over what was measured, and None when nothing was.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct SignalStats {
    pub count: i64,
    pub sum: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl SignalStats {
    pub fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.count += 1;
            self.sum += v;
            self.min = Some(self.min.map_or(v, |m| m.min(v)));
            self.max = Some(self.max.map_or(v, |m| m.max(v)));
        }
    }

    pub fn merge(&mut self, o: &SignalStats) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = opt_fold(self.min, o.min, f64::min);
        self.max = opt_fold(self.max, o.max, f64::max);
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

fn opt_fold(a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// One rollup row: a GPU's samples in one bucket.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RollupBucket {
    pub gpu_id: GpuId,
    pub bucket_ms: i64,
    pub sample_count: i64,
    /// Samples with at least one application process on the GPU.
    pub allocated_count: i64,
    /// Samples whose process list could be read (so "nobody" and "unknown" stay apart).
    pub processes_read_count: i64,
    pub first_ts_ms: i64,
    pub last_ts_ms: i64,
    /// Sampled time of the bucket's samples, ms: each counts the time since its GPU's previous
    /// sample, up to the offline rule (`crate::window::sampled_ms_since_previous`).
    pub sampled_ms: i64,
    /// Samples with each data-quality flag, indexed like [`QualityFlag::ALL`].
    pub quality: [i64; QUALITY_COUNTS],
    /// Stats per signal, in `ROLLUP_SIGNALS` order.
    pub signals: [SignalStats; 12],
}

impl RollupBucket {
    fn add(&mut self, s: &Sample, sampled_ms: i64, flags: QualityFlags) {
        self.sampled_ms += sampled_ms;
        for f in flags.iter() {
            self.quality[f.index()] += 1;
        }
        if self.sample_count == 0 {
            self.first_ts_ms = s.ts_ms;
            self.last_ts_ms = s.ts_ms;
        }
        self.sample_count += 1;
        self.allocated_count += i64::from(s.is_allocated());
        self.processes_read_count += i64::from(s.holders_known());
        self.first_ts_ms = self.first_ts_ms.min(s.ts_ms);
        self.last_ts_ms = self.last_ts_ms.max(s.ts_ms);
        for (stats, v) in self.signals.iter_mut().zip(signal_values(s)) {
            stats.add(v);
        }
    }

    /// This rollup (an hour, say) with one of its parts replaced: `old` (what it holds of the
    /// part, possibly nothing) by `new`, a superset of `old`'s samples (samples are never taken
    /// out of a minute before its retention). Counts and sums take the difference; minimum,
    /// maximum and the time span take `new`'s, which already covers `old`'s.
    pub fn replace_part(&mut self, old: Option<&RollupBucket>, new: &RollupBucket) {
        if let Some(old) = old.filter(|o| o.sample_count > 0) {
            self.sample_count -= old.sample_count;
            self.sampled_ms -= old.sampled_ms;
            self.allocated_count -= old.allocated_count;
            self.processes_read_count -= old.processes_read_count;
            for (a, b) in self.quality.iter_mut().zip(old.quality) {
                *a -= b;
            }
            for (a, b) in self.signals.iter_mut().zip(old.signals.iter()) {
                a.count -= b.count;
                a.sum -= b.sum;
            }
            // The samples left are all counted again through `new`.
            if self.sample_count == 0 {
                let keep = RollupBucket { gpu_id: self.gpu_id, bucket_ms: self.bucket_ms, ..Default::default() };
                *self = keep;
            }
        }
        self.merge(new);
    }

    /// Merge another delta of the same GPU and bucket into this one.
    pub fn merge(&mut self, o: &RollupBucket) {
        if o.sample_count == 0 {
            return;
        }
        if self.sample_count == 0 {
            self.first_ts_ms = o.first_ts_ms;
            self.last_ts_ms = o.last_ts_ms;
        }
        self.sample_count += o.sample_count;
        self.sampled_ms += o.sampled_ms;
        for (a, b) in self.quality.iter_mut().zip(o.quality) {
            *a += b;
        }
        self.allocated_count += o.allocated_count;
        self.processes_read_count += o.processes_read_count;
        self.first_ts_ms = self.first_ts_ms.min(o.first_ts_ms);
        self.last_ts_ms = self.last_ts_ms.max(o.last_ts_ms);
        for (a, b) in self.signals.iter_mut().zip(o.signals.iter()) {
            a.merge(b);
        }
    }

    /// This bucket with each signal's sum, minimum and maximum at the signal's stored precision
    /// (docs/METRICS.md, "Stored precision"): what a closed minute keeps, so that its row and
    /// its hour packed as integer columns hold the same numbers.
    pub fn at_stored_precision(mut self) -> Self {
        for (stats, precision) in self.signals.iter_mut().zip(ROLLUP_PRECISION) {
            stats.sum = precision.round(stats.sum);
            stats.min = stats.min.map(|v| precision.round(v));
            stats.max = stats.max.map(|v| precision.round(v));
        }
        self
    }

    pub fn signal(&self, name: &str) -> Option<&SignalStats> {
        ROLLUP_SIGNALS.iter().position(|n| *n == name).map(|i| &self.signals[i])
    }

    fn mean(&self, name: &str) -> Option<f64> {
        self.signal(name).and_then(SignalStats::mean)
    }

    fn count(&self, name: &str) -> u32 {
        self.signal(name).map_or(0, |s| u32::try_from(s.count).unwrap_or(u32::MAX))
    }

    /// The window aggregate of this bucket's samples, for the classifier. The power limit and
    /// memory size are the GPU's (they are not per-sample signals in rollups).
    pub fn window_aggregate(&self, power_limit_w: Option<f64>, mem_total_bytes: Option<i64>) -> WindowAggregate {
        let to_u32 = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        WindowAggregate {
            sample_count: to_u32(self.sample_count),
            first_ts_ms: (self.sample_count > 0).then_some(self.first_ts_ms),
            last_ts_ms: (self.sample_count > 0).then_some(self.last_ts_ms),
            gpu_util_pct: self.mean("gpu_util_pct"),
            sm_active_pct: self.mean("sm_active_pct"),
            sm_occupancy_pct: self.mean("sm_occupancy_pct"),
            tensor_active_pct: self.mean("tensor_active_pct"),
            dram_active_pct: self.mean("dram_active_pct"),
            fp16_active_pct: self.mean("fp16_active_pct"),
            fp32_active_pct: self.mean("fp32_active_pct"),
            fp64_active_pct: self.mean("fp64_active_pct"),
            power_w: self.mean("power_w"),
            power_limit_w,
            mem_used_max_bytes: self.signal("mem_used_bytes").and_then(|s| s.max).map(|b| b as i64),
            mem_total_bytes,
            samples_with_process: to_u32(self.allocated_count),
            counts: SignalCounts {
                gpu_util: self.count("gpu_util_pct"),
                sm_active: self.count("sm_active_pct"),
                sm_occupancy: self.count("sm_occupancy_pct"),
                tensor_active: self.count("tensor_active_pct"),
                dram_active: self.count("dram_active_pct"),
                fp16_active: self.count("fp16_active_pct"),
                fp32_active: self.count("fp32_active_pct"),
                fp64_active: self.count("fp64_active_pct"),
                power: self.count("power_w"),
                power_limit: if power_limit_w.is_some() { to_u32(self.sample_count) } else { 0 },
                mem_used: self.count("mem_used_bytes"),
                processes: to_u32(self.processes_read_count),
            },
        }
    }
}

/// Collects the rollup deltas of newly stored samples, one entry per (GPU, bucket).
#[derive(Debug)]
pub struct RollupAccumulator {
    buckets: BTreeMap<(GpuId, i64), RollupBucket>,
    resolution: Resolution,
}

impl RollupAccumulator {
    pub fn new(resolution: Resolution) -> Self {
        Self { buckets: BTreeMap::new(), resolution }
    }

    /// Adds a sample that stands for `sampled_ms` of sampled time (see
    /// [`RollupBucket::sampled_ms`]) and had the data-quality `flags` (its flagged fields
    /// already dropped).
    pub fn add(&mut self, gpu_id: GpuId, s: &Sample, sampled_ms: i64, flags: QualityFlags) {
        let bucket_ms = self.resolution.bucket_start(s.ts_ms);
        self.buckets
            .entry((gpu_id, bucket_ms))
            .or_insert_with(|| RollupBucket { gpu_id, bucket_ms, ..Default::default() })
            .add(s, sampled_ms, flags);
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    pub fn into_buckets(self) -> Vec<RollupBucket> {
        self.buckets.into_values().collect()
    }
}

/// One minute of one GPU rolled up from scratch from its raw samples: what the rollup job
/// writes once the minute closes (and again if late samples reopen it). `samples` are the
/// minute's samples with their data-quality flags, in any order (a repeated timestamp counts
/// once); `before` the GPU's stored timestamps just before the minute, ascending (its sampled
/// time continues from them, as ingest's does: `crate::window::sampled_ms_since_previous`).
/// Equal to merging the per-batch deltas of the same samples when they arrived in time order,
/// with its statistics at the stored precision ([`RollupBucket::at_stored_precision`]).
pub fn minute_from_samples(
    gpu_id: GpuId,
    minute_ms: i64,
    before: &[i64],
    samples: &mut [(Sample, QualityFlags)],
    offline_missing_intervals: u32,
) -> RollupBucket {
    samples.sort_by_key(|(s, _)| s.ts_ms);
    let mut acc = RollupBucket { gpu_id, bucket_ms: minute_ms, ..Default::default() };
    let mut ts: Vec<i64> = samples.iter().map(|(s, _)| s.ts_ms).collect();
    ts.dedup();
    let cut = before.partition_point(|t| ts.first().is_some_and(|first| t < first));
    let sampled = crate::window::sampled_ms_since_previous(&before[..cut], &ts, offline_missing_intervals);
    let mut last = None;
    let mut i = 0;
    for (s, flags) in samples.iter() {
        if last == Some(s.ts_ms) {
            continue;
        }
        last = Some(s.ts_ms);
        acc.add(s, sampled[i], *flags);
        i += 1;
    }
    acc.at_stored_precision()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts_ms: i64, util: Option<f64>, smact: Option<f64>) -> Sample {
        Sample { ts_ms, uuid: "GPU-1".into(), gpu_util_pct: util, sm_active_pct: smact, ..Default::default() }
    }

    #[test]
    fn buckets_floor_to_the_minute_and_hour() {
        assert_eq!(Resolution::Minute.bucket_start(125_000), 120_000);
        assert_eq!(Resolution::Hour.bucket_start(3_600_000 * 5 + 1), 3_600_000 * 5);
        assert_eq!(Resolution::Minute.bucket_start(-1), -60_000);
    }

    #[test]
    fn absent_values_are_not_counted_as_zero() {
        let mut acc = RollupAccumulator::new(Resolution::Minute);
        acc.add(GpuId(1), &sample(1_000, Some(100.0), None), 1000, QualityFlags::NONE);
        acc.add(GpuId(1), &sample(2_000, Some(50.0), Some(10.0)), 1000, QualityFlags::NONE);
        let b = &acc.into_buckets()[0];
        assert_eq!(b.sample_count, 2);
        assert_eq!(b.signal("gpu_util_pct").unwrap().mean(), Some(75.0));
        let smact = b.signal("sm_active_pct").unwrap();
        assert_eq!((smact.count, smact.mean(), smact.min), (1, Some(10.0), Some(10.0)));
        assert_eq!(b.signal("tensor_active_pct").unwrap().mean(), None);
    }

    #[test]
    fn a_bucket_aggregates_like_its_samples() {
        let samples: Vec<Sample> = (0..30)
            .map(|i| Sample {
                processes: Some(if i % 3 == 0 {
                    vec![]
                } else {
                    vec![crate::GpuProcess { pid: 1, ..Default::default() }]
                }),
                mem_used_bytes: Some(i * 1000),
                power_w: Some(100.0 + i as f64),
                ..sample(i * 1000, Some(i as f64), if i % 2 == 0 { Some(3.0) } else { None })
            })
            .collect();
        let mut acc = RollupAccumulator::new(Resolution::Minute);
        samples.iter().for_each(|s| acc.add(GpuId(1), s, 1000, QualityFlags::NONE));
        let from_bucket = acc.into_buckets()[0].window_aggregate(None, None);
        let from_samples = WindowAggregate::from_samples(&samples);
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() < 1e-9,
            (a, b) => a == b,
        };
        assert!(close(from_bucket.gpu_util_pct, from_samples.gpu_util_pct));
        assert!(close(from_bucket.sm_active_pct, from_samples.sm_active_pct));
        assert!(close(from_bucket.power_w, from_samples.power_w));
        assert_eq!(from_bucket.mem_used_max_bytes, from_samples.mem_used_max_bytes);
        assert_eq!(from_bucket.samples_with_process, from_samples.samples_with_process);
        assert_eq!(from_bucket.counts, from_samples.counts);
        assert_eq!(from_bucket.tensor_active_pct, None);
    }

    #[test]
    fn merging_deltas_equals_one_pass() {
        let flags = |s: &Sample| {
            let mut f = QualityFlags::NONE;
            if s.ts_ms % 3000 == 0 {
                f.insert(QualityFlag::EnergyCounterBackwards);
            }
            f
        };
        let samples: Vec<Sample> = (0..10).map(|i| sample(i * 1000, Some(i as f64 * 10.0), Some(i as f64))).collect();
        let mut whole = RollupAccumulator::new(Resolution::Minute);
        samples.iter().for_each(|s| whole.add(GpuId(7), s, 1000, flags(s)));
        let (mut a, mut b) = (RollupAccumulator::new(Resolution::Minute), RollupAccumulator::new(Resolution::Minute));
        samples[..4].iter().for_each(|s| a.add(GpuId(7), s, 1000, flags(s)));
        samples[4..].iter().for_each(|s| b.add(GpuId(7), s, 1000, flags(s)));
        let mut merged = b.into_buckets().remove(0);
        merged.merge(&a.into_buckets()[0]);
        let whole = whole.into_buckets().remove(0);
        assert_eq!((whole.sampled_ms, whole.quality[QualityFlag::EnergyCounterBackwards.index()]), (10_000, 4));
        assert_eq!(merged, whole);
    }

    #[test]
    fn a_minute_rolled_up_from_scratch_equals_the_per_batch_deltas() {
        // 3 minutes at 1 Hz with a 10-s hole, some flags, some absent values, in batches of 7.
        let samples: Vec<(Sample, QualityFlags)> = (0..180)
            .filter(|i| !(70..80).contains(i))
            .map(|i| {
                let mut f = QualityFlags::NONE;
                if i % 17 == 0 {
                    f.insert(QualityFlag::ActivityOver100);
                }
                let s = Sample {
                    power_w: Some(100.0 + (i % 13) as f64),
                    processes: (i % 5 != 0).then(Vec::new),
                    ..sample(1_000_000 + i * 1000, Some((i % 100) as f64), (i % 3 != 0).then_some(i as f64 / 3.0))
                };
                (s, f)
            })
            .collect();
        let ts: Vec<i64> = samples.iter().map(|(s, _)| s.ts_ms).collect();
        let mut per_batch = RollupAccumulator::new(Resolution::Minute);
        for (i, chunk) in samples.chunks(7).enumerate() {
            let before = &ts[..i * 7];
            let batch: Vec<i64> = chunk.iter().map(|(s, _)| s.ts_ms).collect();
            let before = &before[before.len().saturating_sub(4)..];
            let ms = crate::window::sampled_ms_since_previous(before, &batch, 3);
            for ((s, f), ms) in chunk.iter().zip(ms) {
                per_batch.add(GpuId(3), s, ms, *f);
            }
        }
        let mut rounded = 0;
        for want in per_batch.into_buckets() {
            let minute = want.bucket_ms;
            let prior: Vec<i64> = ts.iter().copied().filter(|t| *t < minute).collect();
            let prior = &prior[prior.len().saturating_sub(4)..];
            // Out of order, with a repeat: the minute is the same.
            let mut mine: Vec<(Sample, QualityFlags)> =
                samples.iter().filter(|(s, _)| Resolution::Minute.bucket_start(s.ts_ms) == minute).cloned().collect();
            mine.reverse();
            mine.push(mine[3].clone());
            let got = minute_from_samples(GpuId(3), minute, prior, &mut mine, 3);
            assert_eq!(got, want.clone().at_stored_precision(), "minute {minute}");
            // The thirds of this trace are not at 0.01: the minute's statistics are rounded.
            let (kept, exact) = (&got.signals[1], &want.signals[1]);
            assert!((kept.sum - exact.sum).abs() <= 0.005, "minute {minute}");
            rounded += usize::from(kept.min != exact.min || kept.sum != exact.sum);
        }
        assert!(rounded > 0, "some statistic was not at 0.01");
    }

    #[test]
    fn replacing_a_minute_inside_its_hour_equals_rolling_the_hour_up_again() {
        let minute = |from: i64, n: i64| {
            let mut acc = RollupAccumulator::new(Resolution::Minute);
            (0..n).for_each(|i| {
                acc.add(
                    GpuId(1),
                    &sample(from + i * 1000, Some((from / 1000 + i) as f64), None),
                    1000,
                    QualityFlags::NONE,
                )
            });
            acc.into_buckets().remove(0)
        };
        let (a, b_old, b_new) = (minute(0, 60), minute(60_000, 20), minute(60_000, 50));
        let mut hour = a.clone();
        hour.merge(&b_old);
        hour.replace_part(Some(&b_old), &b_new);
        let mut want = a.clone();
        want.merge(&b_new);
        assert_eq!(hour, want);
        let mut fresh = a.clone();
        fresh.replace_part(None, &b_new);
        assert_eq!(fresh, want);
    }
}
