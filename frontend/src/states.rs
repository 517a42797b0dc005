//! Domain words shown on the dashboard: workload states (names, meaning and advice come from
//! `fleetlens-core`, so the dashboard says exactly what METRICS.md says), NVML throttle reasons,
//! and list prices.

use std::collections::BTreeMap;

use fleetlens_core::{PriceTable, WorkloadState};

/// The state's METRICS.md name, readable: `idle_held` → `idle held`.
pub fn label(state: WorkloadState) -> String {
    name_label(state.as_str())
}

/// [`label`] of a state's name as text (a key of a `hours_by_state` map, a filter value).
pub fn name_label(name: &str) -> String {
    name.replace('_', " ")
}

/// CSS modifier of a state's color (one per state; `unknown` when the server gave none).
pub fn css(state: Option<WorkloadState>) -> String {
    match state {
        Some(s) => format!("state state-{}", s.as_str()),
        None => "state state-unknown".into(),
    }
}

/// True for the states that count (wholly or partly) as wasted cost.
pub fn is_waste(state: WorkloadState) -> bool {
    state.waste_fraction(Some(0.0)) > 0.0
}

/// [`is_waste`] of a state's name as text (a key of a `hours_by_state` map).
pub fn is_waste_name(name: &str) -> bool {
    WorkloadState::parse(name).is_some_and(is_waste)
}

/// The waste states a `hours_by_state` map (a billing row's, a report card's) spent time in,
/// most first (at most three).
pub fn waste_states(hours_by_state: &BTreeMap<String, f64>) -> Vec<(WorkloadState, f64)> {
    let mut v: Vec<(WorkloadState, f64)> = hours_by_state
        .iter()
        .filter_map(|(s, h)| Some((WorkloadState::parse(s)?, *h)))
        .filter(|(s, h)| *h > 0.0 && is_waste(*s))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(3);
    v
}

/// NVML clock-event (throttle) reasons, by bit.
pub const THROTTLE_REASONS: [(u64, &str); 8] = [
    (0x1, "GPU idle"),
    (0x2, "applications clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x20, "sync boost"),
    (0x40, "SW thermal slowdown"),
    (0x80, "HW thermal slowdown"),
    (0x100, "HW power brake"),
];

/// Decodes the NVML bitmask: `none` for 0, unknown bits as hex.
pub fn throttle_reasons(mask: u64) -> String {
    if mask == 0 {
        return "none".into();
    }
    let mut names: Vec<String> =
        THROTTLE_REASONS.iter().filter(|(bit, _)| mask & bit != 0).map(|(_, n)| (*n).to_string()).collect();
    let known: u64 = THROTTLE_REASONS.iter().map(|(b, _)| b).sum();
    if mask & !known != 0 {
        names.push(format!("other (0x{:x})", mask & !known));
    }
    names.join(", ")
}

/// Shipped public list price per GPU-hour for an NVML model name (USD), if the model is known.
pub fn list_price(nvml_name: &str) -> Option<f64> {
    PriceTable::default().price_for(nvml_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waste_states_are_the_wasteful_ones_most_first() {
        let mut h = BTreeMap::new();
        h.insert("compute_bound".to_string(), 5.0);
        h.insert("idle_held".to_string(), 1.0);
        h.insert("hollow".to_string(), 2.0);
        h.insert("stalled".to_string(), 0.0);
        let w = waste_states(&h);
        assert_eq!(w.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(), ["hollow", "idle_held"]);
    }

    #[test]
    fn throttle_decoding() {
        assert_eq!(throttle_reasons(0), "none");
        assert_eq!(throttle_reasons(1), "GPU idle");
        assert_eq!(throttle_reasons(0x4 | 0x80), "SW power cap, HW thermal slowdown");
        assert_eq!(throttle_reasons(0x10), "other (0x10)");
    }
}
