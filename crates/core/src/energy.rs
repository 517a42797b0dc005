//! Energy from samples. The driver's energy counter (`energy_j`, monotonic since driver load)
//! is exact over any interval it spans, so it is preferred; where it is missing or went
//! backwards (a driver reload resets it), power × duration stands in.

use std::collections::BTreeMap;
use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

use crate::sample::Sample;
use crate::state::WorkloadState;
use crate::thresholds::Thresholds;
use crate::window::sample_durations_ms;

pub const JOULES_PER_KWH: f64 = 3.6e6;

/// Energy over some samples, by where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EnergyTotals {
    /// From differences of the energy counter.
    pub counter_j: f64,
    /// From power × duration, where the counter could not say.
    pub power_j: f64,
    /// Times the counter went backwards (driver reloaded / GPU reset).
    pub counter_resets: u32,
    /// Seconds nothing could measure (no counter, no power).
    pub unmeasured_s: f64,
}

impl EnergyTotals {
    pub fn total_j(&self) -> f64 {
        self.counter_j + self.power_j
    }

    pub fn kwh(&self) -> f64 {
        self.total_j() / JOULES_PER_KWH
    }
}

impl AddAssign for EnergyTotals {
    fn add_assign(&mut self, o: EnergyTotals) {
        self.counter_j += o.counter_j;
        self.power_j += o.power_j;
        self.counter_resets += o.counter_resets;
        self.unmeasured_s += o.unmeasured_s;
    }
}

/// Energy of the interval that starts at each sample, split between the sample's own time
/// ([`sample_durations_ms`]) and, after a gap of the offline rule, offline time. The counter
/// measures a gap exactly (its share beyond the sample's own interval is offline energy);
/// power cannot, so offline time without a counter is unmeasured. The last sample has no
/// later counter reading and is estimated from its power over one interval.
fn per_sample(samples: &[&Sample], expected_interval_ms: i64, th: &Thresholds) -> Vec<(EnergyTotals, EnergyTotals)> {
    let ts: Vec<i64> = samples.iter().map(|s| s.ts_ms).collect();
    let own = sample_durations_ms(&ts, expected_interval_ms, th);
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let own_s = own[i] as f64 / 1000.0;
            let gap_s = samples.get(i + 1).map_or(own_s, |n| (n.ts_ms - s.ts_ms) as f64 / 1000.0);
            let off_s = (gap_s - own_s).max(0.0);
            let (mut on, mut off) = (EnergyTotals::default(), EnergyTotals::default());
            let counter = match (s.energy_j, samples.get(i + 1).and_then(|n| n.energy_j)) {
                (Some(a), Some(b)) if b >= a => Some(b - a),
                (Some(_), Some(_)) => {
                    on.counter_resets += 1;
                    None
                }
                _ => None,
            };
            match (counter, s.power_w) {
                (Some(j), _) if gap_s > 0.0 => {
                    on.counter_j = j * own_s / gap_s;
                    off.counter_j = j * off_s / gap_s;
                }
                (Some(_), _) => {}
                (None, Some(p)) => {
                    on.power_j = p * own_s;
                    off.unmeasured_s = off_s;
                }
                (None, None) => {
                    on.unmeasured_s = own_s;
                    off.unmeasured_s = off_s;
                }
            }
            (on, off)
        })
        .collect()
}

fn sorted(samples: &[Sample]) -> Vec<&Sample> {
    let mut v: Vec<&Sample> = samples.iter().collect();
    v.sort_by_key(|s| s.ts_ms);
    v
}

/// Energy of one GPU over its samples (any order), offline gaps included where the counter
/// spans them.
pub fn energy(samples: &[Sample], expected_interval_ms: i64, th: &Thresholds) -> EnergyTotals {
    let mut total = EnergyTotals::default();
    for (on, off) in per_sample(&sorted(samples), expected_interval_ms, th) {
        total += on;
        total += off;
    }
    total
}

/// Energy of one GPU split by workload state. `state_of` gives the state of the window that
/// holds a sample (e.g. from [`crate::classify_window`]); the energy of a sample's own
/// interval goes to that state, the energy of an offline gap after it to `offline`.
pub fn energy_by_state(
    samples: &[Sample],
    expected_interval_ms: i64,
    th: &Thresholds,
    state_of: impl Fn(&Sample) -> WorkloadState,
) -> BTreeMap<WorkloadState, EnergyTotals> {
    let sorted = sorted(samples);
    let mut out: BTreeMap<WorkloadState, EnergyTotals> = BTreeMap::new();
    for (s, (on, off)) in sorted.iter().zip(per_sample(&sorted, expected_interval_ms, th)) {
        *out.entry(state_of(s)).or_default() += on;
        if off != EnergyTotals::default() {
            *out.entry(WorkloadState::Offline).or_default() += off;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ts: i64, energy_j: Option<f64>, power_w: Option<f64>) -> Sample {
        Sample { ts_ms: ts, energy_j, power_w, ..Default::default() }
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn counter_differences() {
        let th = Thresholds::default();
        let v = vec![
            s(0, Some(1000.0), Some(100.0)),
            s(1000, Some(1100.0), Some(100.0)),
            s(2000, Some(1250.0), Some(200.0)),
        ];
        let e = energy(&v, 1000, &th);
        // 100 J + 150 J from the counter, the last second from power (200 W × 1 s).
        close(e.counter_j, 250.0);
        close(e.power_j, 200.0);
        close(e.kwh(), 450.0 / 3.6e6);
        assert_eq!(e.counter_resets, 0);
    }

    #[test]
    fn counter_reset_falls_back_to_power() {
        let th = Thresholds::default();
        let v = vec![
            s(0, Some(5000.0), Some(100.0)),
            s(1000, Some(5100.0), Some(300.0)),
            s(2000, Some(40.0), Some(120.0)), // driver reloaded: counter restarted
            s(3000, Some(160.0), Some(120.0)),
        ];
        let e = energy(&v, 1000, &th);
        assert_eq!(e.counter_resets, 1);
        close(e.counter_j, 100.0 + 120.0);
        close(e.power_j, 300.0 + 120.0); // the reset second and the last second
    }

    #[test]
    fn missing_counter_uses_power_and_unknown_stays_unknown() {
        let th = Thresholds::default();
        let v = vec![s(0, None, Some(100.0)), s(1000, None, None), s(2000, None, Some(50.0))];
        let e = energy(&v, 1000, &th);
        close(e.counter_j, 0.0);
        close(e.power_j, 150.0);
        close(e.unmeasured_s, 1.0);
    }

    #[test]
    fn split_by_state_with_an_offline_gap() {
        let th = Thresholds::default();
        // Sample at 0 (idle), then 10 s of silence, then samples at 10 s and 11 s (active).
        let v = vec![
            s(0, Some(0.0), Some(100.0)),
            s(10_000, Some(1000.0), Some(100.0)),
            s(11_000, Some(1300.0), Some(300.0)),
        ];
        let by =
            energy_by_state(
                &v,
                1000,
                &th,
                |x| {
                    if x.ts_ms < 10_000 { WorkloadState::Idle } else { WorkloadState::Active }
                },
            );
        close(by[&WorkloadState::Idle].counter_j, 100.0); // its own 1 s of the 10 s gap
        close(by[&WorkloadState::Offline].counter_j, 900.0);
        close(by[&WorkloadState::Active].total_j(), 300.0 + 300.0);
        let total: f64 = by.values().map(EnergyTotals::total_j).sum();
        close(total, energy(&v, 1000, &th).total_j());
    }
}
