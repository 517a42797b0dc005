//! Credits: what one minute of one GPU adds to the accounts — seconds, wasted seconds and
//! energy per workload state, and the funnel sums. A minute's credit is computed from its
//! rollup when the rollup job writes the minute and stored with it; an hour's credit is the sum
//! of its minutes' credits (a minute not written yet adds its credit, or its change, on read:
//! [`Credit::minus`]). Reports then add credits instead of re-classifying raw data.

use serde::{Deserialize, Serialize};

use crate::classify::{Classification, classify};
use crate::funnel::GpuUsage;
use crate::rollup::RollupBucket;
use crate::state::WorkloadState;
use crate::thresholds::Thresholds;

const STATES: usize = WorkloadState::ALL.len();
/// Number of stored numbers in a credit (see [`Credit::column_names`]).
pub const CREDIT_COLUMNS: usize = 3 * STATES + 8;

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Credit {
    /// Seconds per state, indexed like [`WorkloadState::ALL`].
    pub state_s: [f64; STATES],
    /// Wasted seconds per state (seconds × the state's waste fraction).
    pub wasted_s: [f64; STATES],
    /// Energy per state, joules.
    pub energy_j: [f64; STATES],
    pub allocated_s: f64,
    pub allocation_covered_s: f64,
    /// Σ kernel util % × s, and the seconds it covers.
    pub util_pct_s: f64,
    pub util_covered_s: f64,
    pub sm_pct_s: f64,
    pub sm_covered_s: f64,
    pub tensor_pct_s: f64,
    pub tensor_covered_s: f64,
}

fn index(state: WorkloadState) -> usize {
    WorkloadState::ALL.iter().position(|s| *s == state).expect("every state is in ALL")
}

/// Energy of a bucket of `dur_s` seconds: from the counter where it moved inside the bucket
/// (scaled from the sampled span to the whole bucket), else mean power × time.
pub fn bucket_energy_j(b: &RollupBucket, dur_s: f64) -> f64 {
    let span_s = (b.last_ts_ms - b.first_ts_ms) as f64 / 1000.0;
    if let Some(e) = b.signal("energy_j")
        && let (Some(lo), Some(hi)) = (e.min, e.max)
        && e.count >= 2
        && span_s > 0.0
        && hi >= lo
    {
        return (hi - lo) / span_s * dur_s;
    }
    b.signal("power_w").and_then(|p| p.mean()).map_or(0.0, |w| w * dur_s)
}

impl Credit {
    /// The credit of one 1-minute rollup, and its classification. The minute counts for its
    /// sampled time (`RollupBucket::sampled_ms`), not for 60 s: time no sample covered is
    /// offline, whatever report it ends up in. The whole minute goes to the one state that its
    /// means classify as (docs/METRICS.md, "Sampled time and billing").
    pub fn of_minute(
        b: &RollupBucket,
        power_limit_w: Option<f64>,
        mem_total_bytes: Option<i64>,
        th: &Thresholds,
    ) -> (Credit, Classification) {
        let dur_s = b.sampled_ms.max(0) as f64 / 1000.0;
        let agg = b.window_aggregate(power_limit_w, mem_total_bytes);
        let c = classify(&agg, th);
        let mut credit = Credit::default();
        if b.sample_count == 0 {
            return (credit, c);
        }
        let i = index(c.state);
        credit.state_s[i] = dur_s;
        credit.wasted_s[i] = dur_s * c.state.waste_fraction(agg.sm_active_pct);
        credit.energy_j[i] = bucket_energy_j(b, dur_s);
        if b.processes_read_count > 0 {
            credit.allocated_s = dur_s * b.allocated_count as f64 / b.processes_read_count as f64;
            credit.allocation_covered_s = dur_s;
        }
        for (mean, sum, covered) in [
            (agg.gpu_util_pct, &mut credit.util_pct_s, &mut credit.util_covered_s),
            (agg.sm_active_pct, &mut credit.sm_pct_s, &mut credit.sm_covered_s),
            (agg.tensor_active_pct, &mut credit.tensor_pct_s, &mut credit.tensor_covered_s),
        ] {
            if let Some(m) = mean {
                *sum = m * dur_s;
                *covered = dur_s;
            }
        }
        (credit, c)
    }

    /// The stored numbers, in [`Credit::column_names`] order.
    pub fn to_cells(&self) -> [f64; CREDIT_COLUMNS] {
        let mut out = [0.0; CREDIT_COLUMNS];
        out[..STATES].copy_from_slice(&self.state_s);
        out[STATES..2 * STATES].copy_from_slice(&self.wasted_s);
        out[2 * STATES..3 * STATES].copy_from_slice(&self.energy_j);
        out[3 * STATES..].copy_from_slice(&[
            self.allocated_s,
            self.allocation_covered_s,
            self.util_pct_s,
            self.util_covered_s,
            self.sm_pct_s,
            self.sm_covered_s,
            self.tensor_pct_s,
            self.tensor_covered_s,
        ]);
        out
    }

    pub fn from_cells(cells: &[f64]) -> Credit {
        assert_eq!(cells.len(), CREDIT_COLUMNS, "credit cells");
        let mut c = Credit::default();
        c.state_s.copy_from_slice(&cells[..STATES]);
        c.wasted_s.copy_from_slice(&cells[STATES..2 * STATES]);
        c.energy_j.copy_from_slice(&cells[2 * STATES..3 * STATES]);
        let t = &cells[3 * STATES..];
        (c.allocated_s, c.allocation_covered_s, c.util_pct_s, c.util_covered_s) = (t[0], t[1], t[2], t[3]);
        (c.sm_pct_s, c.sm_covered_s, c.tensor_pct_s, c.tensor_covered_s) = (t[4], t[5], t[6], t[7]);
        c
    }

    /// Column names, e.g. `c_s_idle`, `c_w_idle`, `c_e_idle`, …, `c_util_pct_s`.
    pub fn column_names() -> Vec<String> {
        let mut cols = Vec::with_capacity(CREDIT_COLUMNS);
        for prefix in ["c_s_", "c_w_", "c_e_"] {
            cols.extend(WorkloadState::ALL.iter().map(|s| format!("{prefix}{}", s.as_str())));
        }
        for name in [
            "allocated_s",
            "allocation_covered_s",
            "util_pct_s",
            "util_covered_s",
            "sm_pct_s",
            "sm_covered_s",
            "tensor_pct_s",
            "tensor_covered_s",
        ] {
            cols.push(format!("c_{name}"));
        }
        cols
    }

    /// self += other × weight (weight < 1 pro-rates a bucket that is partly in a period).
    pub fn add_scaled(&mut self, o: &Credit, weight: f64) {
        let mut a = self.to_cells();
        for (x, y) in a.iter_mut().zip(o.to_cells()) {
            *x += y * weight;
        }
        *self = Credit::from_cells(&a);
    }

    /// The change from `old` to `self`, to add to the enclosing hour.
    pub fn minus(&self, old: &Credit) -> Credit {
        let mut d = *self;
        d.add_scaled(old, -1.0);
        d
    }

    pub fn is_zero(&self) -> bool {
        self.to_cells().iter().all(|v| *v == 0.0)
    }

    pub fn seconds(&self, state: WorkloadState) -> f64 {
        self.state_s[index(state)]
    }

    pub fn wasted(&self, state: WorkloadState) -> f64 {
        self.wasted_s[index(state)]
    }

    pub fn energy(&self, state: WorkloadState) -> f64 {
        self.energy_j[index(state)]
    }

    /// Seconds with data (every state but offline).
    pub fn covered_s(&self) -> f64 {
        self.state_s.iter().sum()
    }

    /// Mean SM activity over the time a workload ran ([`WorkloadState::is_working`]), as the
    /// right-size hint reads a GPU. The other states' SM activity (none, or a hung kernel's few
    /// SMs) stays in the sum, which can only raise the mean: never a hint that the work itself
    /// does not support. `None` without working time or without SM activity.
    pub fn working_sm_active_pct(&self) -> Option<f64> {
        let working_s: f64 = WorkloadState::ALL.iter().filter(|s| s.is_working()).map(|s| self.seconds(*s)).sum();
        let covered_s = working_s.min(self.sm_covered_s);
        (covered_s > 0.0).then(|| (self.sm_pct_s / covered_s).min(100.0))
    }

    /// The funnel input of a GPU paid for `paid_s` seconds with this credit.
    pub fn usage(&self, paid_s: f64) -> GpuUsage {
        let measured = |sum: f64, covered: f64| (covered > 0.0).then_some(sum);
        GpuUsage {
            paid_s,
            allocated_s: measured(self.allocated_s, self.allocation_covered_s),
            util_pct_s: measured(self.util_pct_s, self.util_covered_s),
            sm_active_pct_s: measured(self.sm_pct_s, self.sm_covered_s),
            tensor_active_pct_s: measured(self.tensor_pct_s, self.tensor_covered_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::QualityFlags;
    use crate::rollup::{Resolution, RollupAccumulator};
    use crate::sample::{GpuProcess, Sample};

    fn minute(util: f64, smact: f64) -> RollupBucket {
        let mut acc = RollupAccumulator::new(Resolution::Minute);
        for i in 0..60 {
            acc.add(
                crate::ids::GpuId(1),
                &Sample {
                    ts_ms: i * 1000,
                    uuid: "GPU-1".into(),
                    gpu_util_pct: Some(util),
                    sm_active_pct: Some(smact),
                    sm_occupancy_pct: Some(30.0),
                    tensor_active_pct: Some(0.0),
                    dram_active_pct: Some(5.0),
                    power_w: Some(200.0),
                    mem_used_bytes: Some(1 << 30),
                    processes: Some(vec![GpuProcess { pid: 1, ..Default::default() }]),
                    ..Default::default()
                },
                1000,
                QualityFlags::NONE,
            );
        }
        acc.into_buckets().remove(0)
    }

    #[test]
    fn a_hollow_minute_credits_its_waste_and_funnel_sums() {
        let (c, class) = Credit::of_minute(&minute(100.0, 20.0), Some(700.0), None, &Thresholds::default());
        assert_eq!(class.state, WorkloadState::Hollow);
        assert_eq!(c.seconds(WorkloadState::Hollow), 60.0);
        assert!((c.wasted(WorkloadState::Hollow) - 48.0).abs() < 1e-9);
        assert!((c.energy(WorkloadState::Hollow) - 12_000.0).abs() < 1e-9);
        assert_eq!((c.allocated_s, c.util_pct_s, c.sm_pct_s), (60.0, 6000.0, 1200.0));
        assert_eq!(c.covered_s(), 60.0);
    }

    #[test]
    fn right_size_reads_the_sm_activity_of_working_time_only() {
        let th = Thresholds::default();
        let (hollow, _) = Credit::of_minute(&minute(100.0, 20.0), Some(700.0), None, &th);
        let (idle, class) = Credit::of_minute(&minute(0.0, 0.0), Some(700.0), None, &th);
        assert_eq!(class.state, WorkloadState::IdleHeld);
        assert_eq!(idle.working_sm_active_pct(), None, "a held GPU says nothing of the GPU work needs");
        assert_eq!(hollow.working_sm_active_pct(), Some(20.0));
        // An hour of 30 hollow minutes and 30 held ones: the hollow minutes' 20 %, not 10 %.
        let mut hour = Credit::default();
        hour.add_scaled(&hollow, 30.0);
        hour.add_scaled(&idle, 30.0);
        assert!((hour.working_sm_active_pct().unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(Credit::default().working_sm_active_pct(), None);
    }

    #[test]
    fn a_partly_sampled_minute_credits_its_sampled_seconds_only() {
        let mut b = minute(100.0, 20.0);
        b.sampled_ms = 16_359;
        let (c, _) = Credit::of_minute(&b, Some(700.0), None, &Thresholds::default());
        assert!((c.covered_s() - 16.359).abs() < 1e-9);
        assert!((c.util_covered_s - 16.359).abs() < 1e-9);
        assert!((c.energy(WorkloadState::Hollow) - 200.0 * 16.359).abs() < 1e-6);
    }

    #[test]
    fn cells_round_trip_and_deltas_add_up() {
        let th = Thresholds::default();
        let (a, _) = Credit::of_minute(&minute(100.0, 20.0), Some(700.0), None, &th);
        let (b, _) = Credit::of_minute(&minute(100.0, 95.0), Some(700.0), None, &th);
        assert_eq!(Credit::from_cells(&a.to_cells()), a);
        assert_eq!(Credit::column_names().len(), CREDIT_COLUMNS);
        // An hour holding minute a, when a becomes b, ends up holding b.
        let mut hour = Credit::default();
        hour.add_scaled(&a, 1.0);
        hour.add_scaled(&b.minus(&a), 1.0);
        assert_eq!(hour, b);
        assert!(b.minus(&b).is_zero());
    }
}
