//! The workload-state classifier: METRICS.md's rules, checked in its priority order over a
//! window aggregate. A rule fires only when every signal it needs was measured and the
//! condition holds; an unmeasured signal never reads as 0.

use serde::{Deserialize, Serialize};

use crate::sample::Sample;
use crate::state::WorkloadState;
use crate::thresholds::Thresholds;
use crate::window::{WindowAggregate, samples_in};

/// Note attached when a GPU reports no SM activity counter (pre-Hopper without DCGM).
pub const NOTE_NO_SM_ACTIVITY: &str = "no SM activity on this GPU";

/// The values the decision rests on, copied from the window so a reader can check it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KeyValues {
    pub sample_count: u32,
    pub gpu_util_pct: Option<f64>,
    pub sm_active_pct: Option<f64>,
    pub sm_occupancy_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_active_pct: Option<f64>,
    pub max_fp_pipe_pct: Option<f64>,
    pub power_pct_of_limit: Option<f64>,
    pub mem_used_max_bytes: Option<i64>,
    /// A process on the GPU during the window; `None` when the list could not be read.
    pub process_present: Option<bool>,
}

impl KeyValues {
    fn of(agg: &WindowAggregate) -> Self {
        KeyValues {
            sample_count: agg.sample_count,
            gpu_util_pct: agg.gpu_util_pct,
            sm_active_pct: agg.sm_active_pct,
            sm_occupancy_pct: agg.sm_occupancy_pct,
            tensor_active_pct: agg.tensor_active_pct,
            dram_active_pct: agg.dram_active_pct,
            max_fp_pipe_pct: agg.max_fp_pipe_pct(),
            power_pct_of_limit: agg.power_pct_of_limit(),
            mem_used_max_bytes: agg.mem_used_max_bytes,
            process_present: agg.any_process(),
        }
    }
}

/// The state of one GPU over one window, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    pub state: WorkloadState,
    /// Efficiency of the window (mean SMACT / mean util × 100, capped at 100).
    pub efficiency_pct: Option<f64>,
    /// The rule that matched, with the numbers that made it match.
    pub reason: String,
    /// What the decision could not see, e.g. [`NOTE_NO_SM_ACTIVITY`].
    pub note: Option<String>,
    pub values: KeyValues,
}

fn lt(v: Option<f64>, t: f64) -> bool {
    v.is_some_and(|v| v < t)
}

fn ge(v: Option<f64>, t: f64) -> bool {
    v.is_some_and(|v| v >= t)
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1} %"))
}

/// Classify one window. `offline` is not decided here (it needs the absence of samples; see
/// [`classify_window`]); an empty aggregate gives `active` with a note.
///
/// How unmeasured signals are handled (METRICS.md: absent is never 0):
/// - "Someone holds the GPU" = a process was seen, or memory used ≥ `idle_held_min_mem_bytes`.
///   "Nobody" = the process list was read and empty and memory is below that; with no
///   readable process list, memory alone decides.
/// - Kernel util absent (e.g. MIG instances): `idle` / `idle_held` judge "no kernel work"
///   from SMACT < `idle_held_max_sm_active_pct` instead, and say so in the note.
/// - SMACT absent: `idle` and `idle_held` (util = 0) still work; every later rule needs
///   SMACT, so the result is `active` with the note [`NOTE_NO_SM_ACTIVITY`].
/// - Any other signal a rule needs (power, SMOCC, tensor, DRAM) absent: that rule does not
///   fire; the note lists what was missing.
pub fn classify(agg: &WindowAggregate, th: &Thresholds) -> Classification {
    let (state, reason, mut notes) = decide(agg, th);
    if agg.gpu_util_pct.is_none() && agg.sample_count > 0 {
        notes.insert(0, "kernel utilization not measured (MIG?); idle judged from SM activity".into());
    }
    if state == WorkloadState::Active && agg.sm_active_pct.is_some() {
        let missing: Vec<&str> = [
            ("power", agg.power_pct_of_limit()),
            ("SM occupancy", agg.sm_occupancy_pct),
            ("tensor activity", agg.tensor_active_pct),
            ("DRAM activity", agg.dram_active_pct),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.is_none().then_some(name))
        .collect();
        if !missing.is_empty() {
            notes.push(format!("not measured: {}; rules needing them not checked", missing.join(", ")));
        }
    }
    Classification {
        state,
        efficiency_pct: agg.efficiency(),
        reason,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        values: KeyValues::of(agg),
    }
}

fn decide(agg: &WindowAggregate, th: &Thresholds) -> (WorkloadState, String, Vec<String>) {
    use WorkloadState::*;
    let util = agg.gpu_util_pct;
    let sm = agg.sm_active_pct;
    let mut notes = Vec::new();
    if agg.sample_count == 0 {
        notes.push("no samples in the window".to_string());
        return (Active, "nothing to classify".into(), notes);
    }

    let held_by_memory = agg.mem_used_max_bytes.is_some_and(|m| m >= th.idle_held_min_mem_bytes);
    let holder = match agg.any_process() {
        Some(true) => Some(true),
        _ if held_by_memory => Some(true),
        Some(false) => Some(false),
        None => agg.mem_used_max_bytes.map(|_| false),
    };
    // "Kernel util < 5"; without util, no SM work at all stands in for it.
    let quiet = match util {
        Some(u) => u < th.idle_max_util_pct,
        None => lt(sm, th.idle_held_max_sm_active_pct),
    };
    let holder_text = if agg.any_process() == Some(true) {
        "a process holds the GPU".to_string()
    } else {
        format!("{:.2} GiB used", agg.mem_used_max_bytes.unwrap_or(0) as f64 / (1u64 << 30) as f64)
    };

    if holder == Some(false) && quiet {
        return (Idle, format!("no process on the GPU, kernel util {}", pct(util)), notes);
    }
    let no_sm_work = match sm {
        Some(s) => s < th.idle_held_max_sm_active_pct,
        None => util == Some(0.0),
    };
    if holder == Some(true) && quiet && no_sm_work {
        let reason = format!("{holder_text}, kernel util {}, SMACT {}", pct(util), pct(sm));
        return (IdleHeld, reason, notes);
    }

    let Some(smv) = sm else {
        notes.push(NOTE_NO_SM_ACTIVITY.to_string());
        return (Active, format!("kernel util {}; SM activity not measured", pct(util)), notes);
    };

    let power = agg.power_pct_of_limit();
    if ge(util, th.stalled_min_util_pct)
        && smv < th.stalled_max_sm_active_pct
        && lt(power, th.stalled_max_power_pct_of_limit)
    {
        let reason = format!(
            "kernel util {} ≥ {}, SMACT {} < {}, power {} of limit < {}",
            pct(util),
            th.stalled_min_util_pct,
            pct(sm),
            th.stalled_max_sm_active_pct,
            pct(power),
            th.stalled_max_power_pct_of_limit
        );
        return (Stalled, reason, notes);
    }

    if let Some(u) = util.filter(|&u| u >= th.hollow_min_util_pct) {
        let ratio = smv / u;
        if ratio < th.hollow_max_sm_util_ratio {
            let reason = format!(
                "kernel util {} ≥ {}, SMACT / util {ratio:.2} < {}",
                pct(util),
                th.hollow_min_util_pct,
                th.hollow_max_sm_util_ratio
            );
            return (Hollow, reason, notes);
        }
    }

    if let Some(u) = util {
        let busy = u.max(smv);
        let some_work = smv >= th.starved_min_sm_active_pct || u >= th.starved_min_util_pct;
        if holder == Some(true) && busy < th.starved_max_busy_pct && some_work {
            let reason = format!(
                "{holder_text}, max(kernel util {}, SMACT {}) < {}, some work reaches the GPU",
                pct(util),
                pct(sm),
                th.starved_max_busy_pct
            );
            return (Starved, reason, notes);
        }
    }

    let (occ, tensor, dram) = (agg.sm_occupancy_pct, agg.tensor_active_pct, agg.dram_active_pct);
    if smv >= th.low_occupancy_min_sm_active_pct
        && lt(occ, th.low_occupancy_max_sm_occupancy_pct)
        && lt(tensor, th.low_occupancy_max_tensor_pct)
        && lt(dram, th.low_occupancy_max_dram_pct)
    {
        let reason = format!(
            "SMACT {} ≥ {}, SMOCC {} < {}, tensor {} < {}, DRAM {} < {}",
            pct(sm),
            th.low_occupancy_min_sm_active_pct,
            pct(occ),
            th.low_occupancy_max_sm_occupancy_pct,
            pct(tensor),
            th.low_occupancy_max_tensor_pct,
            pct(dram),
            th.low_occupancy_max_dram_pct
        );
        return (LowOccupancy, reason, notes);
    }

    if smv >= th.memory_bound_min_sm_active_pct
        && ge(dram, th.memory_bound_min_dram_pct)
        && lt(tensor, th.memory_bound_max_tensor_pct)
    {
        let reason = format!(
            "SMACT {} ≥ {}, DRAM {} ≥ {}, tensor {} < {}",
            pct(sm),
            th.memory_bound_min_sm_active_pct,
            pct(dram),
            th.memory_bound_min_dram_pct,
            pct(tensor),
            th.memory_bound_max_tensor_pct
        );
        return (MemoryBound, reason, notes);
    }

    let fp = agg.max_fp_pipe_pct();
    if smv >= th.compute_bound_min_sm_active_pct
        && (ge(tensor, th.compute_bound_min_tensor_pct) || ge(fp, th.compute_bound_min_fp_pipe_pct))
    {
        let reason = format!(
            "SMACT {} ≥ {}, tensor {} (≥ {}) or FP pipe {} (≥ {})",
            pct(sm),
            th.compute_bound_min_sm_active_pct,
            pct(tensor),
            th.compute_bound_min_tensor_pct,
            pct(fp),
            th.compute_bound_min_fp_pipe_pct
        );
        return (ComputeBound, reason, notes);
    }

    let reason = format!("kernel util {}, SMACT {}: no rule matched", pct(util), pct(sm));
    (Active, reason, notes)
}

/// Classify the window `[window_start_ms, window_end_ms)` of one GPU from its samples
/// (`samples` may include samples outside the window; they are used only as neighbours).
///
/// Offline rule implemented ("no sample for 3 intervals"): when the window holds no sample,
/// the silence runs from the last sample before the window (or the window start, if none is
/// given) to the first sample after it (or the window end). If that silence lasts at least
/// `offline_missing_intervals × expected_interval_ms`, the window is `offline`. A shorter
/// silence is a missed sample, not an outage: the window takes the state of the nearest
/// neighbour (the one before, else the one after), with a note. With no sample in or around
/// the window at all, nothing is known and the window is `offline` (with a note saying so).
///
/// A window that holds at least one sample is classified from its samples alone; an outage
/// inside such a window is not split out (use windows no wider than the outage you care to
/// see, or the funnel's paid time, which counts offline time).
pub fn classify_window(
    samples: &[Sample],
    window_start_ms: i64,
    window_end_ms: i64,
    expected_interval_ms: i64,
    th: &Thresholds,
) -> Classification {
    let inside = WindowAggregate::from_samples(samples_in(samples, window_start_ms, window_end_ms));
    if inside.sample_count > 0 {
        return classify(&inside, th);
    }
    let before = samples.iter().filter(|s| s.ts_ms < window_start_ms).max_by_key(|s| s.ts_ms);
    let after = samples.iter().filter(|s| s.ts_ms >= window_end_ms).min_by_key(|s| s.ts_ms);
    let silence_from = before.map_or(window_start_ms, |s| s.ts_ms);
    let silence_to = after.map_or(window_end_ms, |s| s.ts_ms);
    let silence_ms = silence_to - silence_from;
    let limit_ms = crate::timeline::offline_limit_ms(expected_interval_ms, th);
    let offline = |note: Option<String>| Classification {
        state: WorkloadState::Offline,
        efficiency_pct: None,
        reason: format!(
            "no sample for {:.1} s (offline after {} intervals of {:.1} s)",
            silence_ms as f64 / 1000.0,
            th.offline_missing_intervals,
            expected_interval_ms as f64 / 1000.0
        ),
        note,
        values: KeyValues::default(),
    };
    if silence_ms >= limit_ms {
        return offline(None);
    }
    match before.or(after) {
        Some(neighbour) => {
            let mut c = classify(&WindowAggregate::from_samples([neighbour]), th);
            let note = "no sample in the window (a missed sample, not an outage): state of the nearest sample";
            c.note = Some(c.note.map_or_else(|| note.to_string(), |n| format!("{note}; {n}")));
            c
        }
        None => offline(Some("no sample in or around the window; nothing is known".into())),
    }
}
