//! Cost and wasted cost (METRICS.md "Cost"). Prices come from a [`crate::PriceTable`]; a GPU
//! without a price has no cost figure at all (the caller shows "no price set").

use std::collections::BTreeMap;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use crate::classify::Classification;
use crate::state::WorkloadState;

/// Days in the "month" of monthly figures: METRICS.md projects 7 days × 30/7.
pub const MONTH_DAYS: f64 = 30.0;
/// Hours in that month (a GPU paid around the clock).
pub const MONTH_HOURS: f64 = MONTH_DAYS * 24.0;

/// Cost of a period: price per GPU-hour × GPU-hours paid for.
pub fn period_cost(price_per_gpu_hour: f64, paid_gpu_hours: f64) -> f64 {
    price_per_gpu_hour * paid_gpu_hours
}

/// Projected monthly waste: wasted cost of the last 7 days × 30/7 ("you could save $X/month").
pub fn projected_monthly_waste(wasted_cost_last_7_days: f64) -> f64 {
    wasted_cost_last_7_days * MONTH_DAYS / 7.0
}

/// Time in each state, and the part of it that counts as wasted (seconds × the state's
/// [`WorkloadState::waste_fraction`]). One ledger per GPU (one price); ledgers merge.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StateTime {
    pub seconds: BTreeMap<WorkloadState, f64>,
    pub wasted_seconds: BTreeMap<WorkloadState, f64>,
}

impl StateTime {
    /// Add `seconds` in `state`; `sm_active_pct` is the window's mean SMACT (used by the
    /// partly wasted states hollow / starved / low_occupancy).
    pub fn add(&mut self, state: WorkloadState, seconds: f64, sm_active_pct: Option<f64>) {
        *self.seconds.entry(state).or_default() += seconds;
        let wasted = seconds * state.waste_fraction(sm_active_pct);
        if wasted > 0.0 {
            *self.wasted_seconds.entry(state).or_default() += wasted;
        }
    }

    pub fn add_window(&mut self, c: &Classification, seconds: f64) {
        self.add(c.state, seconds, c.values.sm_active_pct);
    }

    pub fn merge(&mut self, o: &StateTime) {
        for (s, v) in &o.seconds {
            *self.seconds.entry(*s).or_default() += v;
        }
        for (s, v) in &o.wasted_seconds {
            *self.wasted_seconds.entry(*s).or_default() += v;
        }
    }

    pub fn hours(&self, state: WorkloadState) -> f64 {
        self.seconds.get(&state).copied().unwrap_or(0.0) / 3600.0
    }

    pub fn total_hours(&self) -> f64 {
        self.seconds.values().sum::<f64>() / 3600.0
    }

    /// Wasted cost at one price: price × (hours idle + idle_held + offline + stalled)
    /// + price × Σ over hollow / starved / low_occupancy hours of (1 − SMACT/100).
    pub fn wasted_cost(&self, price_per_gpu_hour: f64) -> WasteBreakdown {
        let by_state: BTreeMap<WorkloadState, f64> =
            self.wasted_seconds.iter().map(|(s, secs)| (*s, price_per_gpu_hour * secs / 3600.0)).collect();
        WasteBreakdown {
            wasted: by_state.values().sum(),
            cost: period_cost(price_per_gpu_hour, self.total_hours()),
            by_state,
        }
    }
}

/// Money: the cost of the time in the ledger and the wasted part of it, by state.
/// Breakdowns of GPUs with different prices add up to a fleet total.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WasteBreakdown {
    /// Cost of all the time in the ledger.
    pub cost: f64,
    pub wasted: f64,
    pub by_state: BTreeMap<WorkloadState, f64>,
}

impl WasteBreakdown {
    /// Share of the cost that is wasted, 0–1; `None` when nothing was paid.
    pub fn wasted_share(&self) -> Option<f64> {
        (self.cost > 0.0).then(|| self.wasted / self.cost)
    }
}

impl AddAssign<&WasteBreakdown> for WasteBreakdown {
    fn add_assign(&mut self, o: &WasteBreakdown) {
        self.cost += o.cost;
        self.wasted += o.wasted;
        for (s, v) in &o.by_state {
            *self.by_state.entry(*s).or_default() += v;
        }
    }
}

impl Add for WasteBreakdown {
    type Output = WasteBreakdown;
    fn add(mut self, o: WasteBreakdown) -> WasteBreakdown {
        self += &o;
        self
    }
}

impl std::iter::Sum for WasteBreakdown {
    fn sum<I: Iterator<Item = WasteBreakdown>>(iter: I) -> Self {
        iter.fold(WasteBreakdown::default(), Add::add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WorkloadState::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn cost_is_price_times_hours() {
        close(period_cost(3.0, 24.0), 72.0);
    }

    #[test]
    fn wasted_cost_hand_computed() {
        // One H100 at $3/h over 10 hours:
        // 2 h idle, 1 h idle_held, 1 h offline, 0.5 h stalled   → 4.5 h fully wasted = $13.50
        // 2 h hollow at SMACT 10 %   → 2 × 0.9 = 1.8 h          = $5.40
        // 1 h starved at SMACT 20 %  → 0.8 h                     = $2.40
        // 0.5 h low_occupancy at 60 % → 0.2 h                    = $0.60
        // 1 h compute_bound, 1 h active                          → $0
        let mut t = StateTime::default();
        let h = 3600.0;
        t.add(Idle, 2.0 * h, None);
        t.add(IdleHeld, h, Some(0.0));
        t.add(Offline, h, None);
        t.add(Stalled, 0.5 * h, Some(0.8));
        t.add(Hollow, 2.0 * h, Some(10.0));
        t.add(Starved, h, Some(20.0));
        t.add(LowOccupancy, 0.5 * h, Some(60.0));
        t.add(ComputeBound, h, Some(95.0));
        t.add(Active, h, Some(100.0));
        close(t.total_hours(), 10.0);
        let w = t.wasted_cost(3.0);
        close(w.cost, 30.0);
        close(w.wasted, 13.5 + 5.4 + 2.4 + 0.6);
        close(w.by_state[&Idle], 6.0);
        close(w.by_state[&Stalled], 1.5);
        close(w.by_state[&Hollow], 5.4);
        close(w.by_state[&LowOccupancy], 0.6);
        assert!(!w.by_state.contains_key(&ComputeBound));
        close(w.wasted_share().unwrap(), 21.9 / 30.0);
    }

    #[test]
    fn ledgers_and_breakdowns_add_up() {
        let mut a = StateTime::default();
        a.add(Idle, 3600.0, None);
        let mut b = StateTime::default();
        b.add(Idle, 1800.0, None);
        b.add(Hollow, 3600.0, Some(50.0));
        let fleet: WasteBreakdown = [a.wasted_cost(2.0), b.wasted_cost(4.0)].into_iter().sum();
        close(fleet.wasted, 2.0 + 2.0 + 2.0);
        close(fleet.cost, 2.0 + 6.0);
        close(fleet.by_state[&Idle], 4.0);
        a.merge(&b);
        close(a.hours(Idle), 1.5);
        close(a.wasted_cost(1.0).wasted, 1.5 + 0.5);
    }

    #[test]
    fn projected_monthly_waste_scales_a_week_to_30_days() {
        close(projected_monthly_waste(70.0), 300.0);
        close(MONTH_HOURS, 720.0);
    }
}
