//! The fleet utilization funnel (METRICS.md): allocation → kernel → SM → tensor → MFU, each a
//! fraction of the GPU-seconds paid for. A `Funnel` holds sums, so funnels of GPUs add up to
//! hosts, teams, models and the fleet.
//!
//! Absent signals: a level is computed over the paid seconds its signal covers, and says how
//! much of the paid time that is (`coverage`). A GPU that cannot measure SMACT adds its paid
//! time to the funnel but nothing to the SM level's covered time, so it neither counts as 0 %
//! SM activity nor disappears: coverage < 1 shows it. Offline time of a GPU that reports a
//! signal is covered (as zero use), because METRICS.md counts offline time as paid.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use crate::datasheet::{GpuModel, Precision};
use crate::sample::Sample;
use crate::thresholds::Thresholds;
use crate::window::sample_durations_ms;

crate::named_enum! {
    /// The funnel's levels, widest first: each is a share of the one before.
    pub enum FunnelLevelName("funnel level") {
        /// A process holds the GPU.
        Allocation = "allocation",
        /// A kernel runs (`gpu_util_pct`).
        Kernel = "kernel",
        /// SMs are busy (`sm_active_pct`).
        Sm = "sm",
        /// Tensor cores are busy (`tensor_active_pct`).
        Tensor = "tensor",
        /// Model FLOPs utilization.
        Mfu = "mfu",
    }
}

/// One level of the funnel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// Utilization over the paid time the signal covers, 0–1; `None` when it covers none.
    pub fraction: Option<f64>,
    /// Share of the paid time the signal covers, 0–1 (1 where every GPU measures it);
    /// `None` when nothing was paid.
    pub coverage: Option<f64>,
}

/// Per-GPU input with whole-period sums, for callers that have them from rollups.
/// `None` = the GPU never measured that signal.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuUsage {
    pub paid_s: f64,
    /// GPU-seconds with at least one application process.
    pub allocated_s: Option<f64>,
    /// Σ kernel util % × dt, %·s.
    pub util_pct_s: Option<f64>,
    /// Σ SMACT % × dt, %·s.
    pub sm_active_pct_s: Option<f64>,
    /// Σ tensor activity % × dt, %·s.
    pub tensor_active_pct_s: Option<f64>,
}

/// Sums of the funnel; see the module doc for "covered".
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Funnel {
    pub paid_s: f64,
    pub allocated_s: f64,
    pub allocation_covered_s: f64,
    pub util_pct_s: f64,
    pub util_covered_s: f64,
    pub sm_active_pct_s: f64,
    pub sm_covered_s: f64,
    pub tensor_active_pct_s: f64,
    pub tensor_covered_s: f64,
    /// FLOPs jobs reported doing (achieved FLOP/s × seconds).
    pub achieved_flop: f64,
    /// Dense-peak FLOPs over the same seconds on the same GPUs and precisions.
    pub peak_flop: f64,
    /// Seconds for which a job reported its FLOPs.
    pub mfu_covered_s: f64,
}

fn level(sum: f64, covered_s: f64, paid_s: f64) -> Level {
    Level { fraction: (covered_s > 0.0).then(|| sum / covered_s), coverage: (paid_s > 0.0).then(|| covered_s / paid_s) }
}

impl Funnel {
    /// One GPU from whole-period sums.
    pub fn gpu(u: &GpuUsage) -> Funnel {
        let covered = |v: Option<f64>| if v.is_some() { u.paid_s } else { 0.0 };
        Funnel {
            paid_s: u.paid_s,
            allocated_s: u.allocated_s.unwrap_or(0.0),
            allocation_covered_s: covered(u.allocated_s),
            util_pct_s: u.util_pct_s.unwrap_or(0.0),
            util_covered_s: covered(u.util_pct_s),
            sm_active_pct_s: u.sm_active_pct_s.unwrap_or(0.0),
            sm_covered_s: covered(u.sm_active_pct_s),
            tensor_active_pct_s: u.tensor_active_pct_s.unwrap_or(0.0),
            tensor_covered_s: covered(u.tensor_active_pct_s),
            ..Funnel::default()
        }
    }

    /// One GPU from its samples over a period it was paid for `paid_s` seconds (from its
    /// first sample or the period start until retirement or the period end, offline time
    /// included). Each sample stands for the time until the next one
    /// ([`sample_durations_ms`]). Paid time not covered by samples (offline) is split among
    /// the signals in the proportion each was measured while samples came in; a GPU with no
    /// samples at all counts its whole paid time as covered and unused.
    pub fn from_samples(samples: &[Sample], paid_s: f64, expected_interval_ms: i64, th: &Thresholds) -> Funnel {
        let mut sorted: Vec<&Sample> = samples.iter().collect();
        sorted.sort_by_key(|s| s.ts_ms);
        let ts: Vec<i64> = sorted.iter().map(|s| s.ts_ms).collect();
        let durations = sample_durations_ms(&ts, expected_interval_ms, th);
        // [allocation, util, SMACT, tensor]: (Σ value × dt, measured seconds)
        let mut acc = [(0.0, 0.0); 4];
        let mut sampled_s = 0.0;
        for (s, dur_ms) in sorted.iter().zip(durations) {
            let dt = dur_ms as f64 / 1000.0;
            sampled_s += dt;
            let allocated = s.holders_known().then(|| if s.is_allocated() { 1.0 } else { 0.0 });
            let values = [allocated, s.gpu_util_pct, s.sm_active_pct, s.tensor_active_pct];
            for ((sum, measured), v) in acc.iter_mut().zip(values) {
                if let Some(v) = v {
                    *sum += v * dt;
                    *measured += dt;
                }
            }
        }
        let covered = |measured: f64| {
            if sampled_s > 0.0 { paid_s * measured / sampled_s } else { paid_s }
        };
        Funnel {
            paid_s,
            allocated_s: acc[0].0,
            allocation_covered_s: covered(acc[0].1),
            util_pct_s: acc[1].0,
            util_covered_s: covered(acc[1].1),
            sm_active_pct_s: acc[2].0,
            sm_covered_s: covered(acc[2].1),
            tensor_active_pct_s: acc[3].0,
            tensor_covered_s: covered(acc[3].1),
            ..Funnel::default()
        }
    }

    /// Add a job's reported model FLOPs on this GPU: `achieved_flops_per_s` sustained for
    /// `seconds` at `precision`. Returns false (and adds nothing) when the datasheet has no
    /// dense peak for that model and precision.
    pub fn add_job_flops(
        &mut self,
        achieved_flops_per_s: f64,
        seconds: f64,
        model: GpuModel,
        precision: Precision,
    ) -> bool {
        let Some(peak) = model.spec().peak_flops(precision) else {
            return false;
        };
        self.achieved_flop += achieved_flops_per_s * seconds;
        self.peak_flop += peak * seconds;
        self.mfu_covered_s += seconds;
        true
    }

    /// GPU-seconds with a process ÷ paid (over the time the process list was readable).
    pub fn allocation(&self) -> Level {
        level(self.allocated_s, self.allocation_covered_s, self.paid_s)
    }

    /// Σ kernel util × dt ÷ paid.
    pub fn kernel(&self) -> Level {
        level(self.util_pct_s / 100.0, self.util_covered_s, self.paid_s)
    }

    /// Σ SMACT × dt ÷ paid.
    pub fn sm(&self) -> Level {
        level(self.sm_active_pct_s / 100.0, self.sm_covered_s, self.paid_s)
    }

    /// Σ tensor activity × dt ÷ paid.
    pub fn tensor(&self) -> Level {
        level(self.tensor_active_pct_s / 100.0, self.tensor_covered_s, self.paid_s)
    }

    /// MFU over the jobs that reported FLOPs: Σ achieved FLOPs ÷ Σ dense-peak FLOPs.
    pub fn mfu(&self) -> Level {
        Level {
            fraction: (self.peak_flop > 0.0).then(|| self.achieved_flop / self.peak_flop),
            coverage: (self.paid_s > 0.0).then(|| self.mfu_covered_s / self.paid_s),
        }
    }

    /// The level of that name.
    pub fn level(&self, name: FunnelLevelName) -> Level {
        match name {
            FunnelLevelName::Allocation => self.allocation(),
            FunnelLevelName::Kernel => self.kernel(),
            FunnelLevelName::Sm => self.sm(),
            FunnelLevelName::Tensor => self.tensor(),
            FunnelLevelName::Mfu => self.mfu(),
        }
    }

    /// Every level, widest first.
    pub fn levels(&self) -> [(FunnelLevelName, Level); 5] {
        FunnelLevelName::ALL.map(|name| (name, self.level(name)))
    }

    pub fn paid_gpu_hours(&self) -> f64 {
        self.paid_s / 3600.0
    }

    pub fn allocated_gpu_hours(&self) -> f64 {
        self.allocated_s / 3600.0
    }
}

impl AddAssign for Funnel {
    fn add_assign(&mut self, o: Funnel) {
        self.paid_s += o.paid_s;
        self.allocated_s += o.allocated_s;
        self.allocation_covered_s += o.allocation_covered_s;
        self.util_pct_s += o.util_pct_s;
        self.util_covered_s += o.util_covered_s;
        self.sm_active_pct_s += o.sm_active_pct_s;
        self.sm_covered_s += o.sm_covered_s;
        self.tensor_active_pct_s += o.tensor_active_pct_s;
        self.tensor_covered_s += o.tensor_covered_s;
        self.achieved_flop += o.achieved_flop;
        self.peak_flop += o.peak_flop;
        self.mfu_covered_s += o.mfu_covered_s;
    }
}

impl Add for Funnel {
    type Output = Funnel;
    fn add(mut self, o: Funnel) -> Funnel {
        self += o;
        self
    }
}

impl std::iter::Sum for Funnel {
    fn sum<I: Iterator<Item = Funnel>>(iter: I) -> Self {
        iter.fold(Funnel::default(), Add::add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::GpuProcess;

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("value");
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    const H: f64 = 3600.0;

    #[test]
    fn levels_of_one_gpu() {
        // 10 h paid, 8 h allocated, util 60 % over 10 h, SMACT 20 %, tensor 5 %.
        let f = Funnel::gpu(&GpuUsage {
            paid_s: 10.0 * H,
            allocated_s: Some(8.0 * H),
            util_pct_s: Some(60.0 * 10.0 * H),
            sm_active_pct_s: Some(20.0 * 10.0 * H),
            tensor_active_pct_s: Some(5.0 * 10.0 * H),
        });
        close(f.allocation().fraction, 0.8);
        close(f.kernel().fraction, 0.6);
        close(f.sm().fraction, 0.2);
        close(f.tensor().fraction, 0.05);
        close(f.sm().coverage, 1.0);
        assert_eq!(f.mfu().fraction, None);
        assert!((f.paid_gpu_hours() - 10.0).abs() < 1e-12);
        assert!((f.allocated_gpu_hours() - 8.0).abs() < 1e-12);
    }

    #[test]
    fn funnels_sum_and_missing_smact_is_coverage_not_zero() {
        // GPU A (H100): 10 h paid, SM 50 % all the time. GPU B (V100, no SMACT): 10 h paid.
        let a = Funnel::gpu(&GpuUsage {
            paid_s: 10.0 * H,
            allocated_s: Some(10.0 * H),
            util_pct_s: Some(100.0 * 10.0 * H),
            sm_active_pct_s: Some(50.0 * 10.0 * H),
            tensor_active_pct_s: Some(0.0),
        });
        let b = Funnel::gpu(&GpuUsage {
            paid_s: 10.0 * H,
            allocated_s: Some(5.0 * H),
            util_pct_s: Some(80.0 * 10.0 * H),
            sm_active_pct_s: None,
            tensor_active_pct_s: None,
        });
        let fleet: Funnel = [a, b].into_iter().sum();
        close(fleet.allocation().fraction, 0.75);
        close(fleet.kernel().fraction, 0.9);
        close(fleet.sm().fraction, 0.5); // not 0.25: B's missing SMACT is not a zero
        close(fleet.sm().coverage, 0.5);
        close(fleet.tensor().coverage, 0.5);
        assert!((fleet.paid_gpu_hours() - 20.0).abs() < 1e-12);
        assert_eq!(a + b, fleet);
        assert_eq!(Funnel::default().sm(), Level { fraction: None, coverage: None });
    }

    #[test]
    fn mfu_against_dense_peak() {
        let mut f = Funnel::gpu(&GpuUsage { paid_s: 2.0 * H, ..Default::default() });
        // 1 h at 494.75 TFLOP/s bf16 on an H100 SXM (dense peak 989.5) → 50 %.
        assert!(f.add_job_flops(494.75e12, H, GpuModel::H100Sxm, Precision::Bf16));
        assert!(!f.add_job_flops(1e12, H, GpuModel::A100_80, Precision::Fp8));
        close(f.mfu().fraction, 0.5);
        close(f.mfu().coverage, 0.5);
        // Second GPU: A100 at 25 % of 312 TFLOP/s for 1 h → fleet MFU = Σ achieved / Σ peak.
        let mut g = Funnel::default();
        g.add_job_flops(78e12, H, GpuModel::A100_80, Precision::Bf16);
        let both = f + g;
        close(both.mfu().fraction, (494.75 + 78.0) / (989.5 + 312.0));
    }

    #[test]
    fn from_samples_counts_offline_as_paid() {
        let th = Thresholds::default();
        let proc_ = || Some(vec![GpuProcess { pid: 1, ..Default::default() }]);
        let s = |ts: i64, util: f64, sm: Option<f64>, procs| Sample {
            ts_ms: ts,
            gpu_util_pct: Some(util),
            sm_active_pct: sm,
            processes: procs,
            ..Default::default()
        };
        // 4 samples at 1 s: busy with a process for 2 s, then empty for 2 s. Paid 8 s
        // (4 s of it offline).
        let v = vec![
            s(0, 100.0, Some(40.0), proc_()),
            s(1000, 100.0, Some(40.0), proc_()),
            s(2000, 0.0, Some(0.0), Some(vec![])),
            s(3000, 0.0, Some(0.0), Some(vec![])),
        ];
        let f = Funnel::from_samples(&v, 8.0, 1000, &th);
        close(f.allocation().fraction, 2.0 / 8.0);
        close(f.kernel().fraction, 200.0 / 100.0 / 8.0);
        close(f.sm().fraction, 80.0 / 100.0 / 8.0);
        close(f.sm().coverage, 1.0);
        assert_eq!(f.tensor().fraction, None);
        close(f.tensor().coverage, 0.0);
        // SMACT measured on half the samples → covers half the paid time.
        let mut half = v.clone();
        half[2].sm_active_pct = None;
        half[3].sm_active_pct = None;
        let f = Funnel::from_samples(&half, 8.0, 1000, &th);
        close(f.sm().coverage, 0.5);
        close(f.sm().fraction, 80.0 / 100.0 / 4.0);
        // No samples at all: paid, covered, unused.
        let none = Funnel::from_samples(&[], 3600.0, 1000, &th);
        close(none.kernel().fraction, 0.0);
        close(none.allocation().coverage, 1.0);
    }
}
