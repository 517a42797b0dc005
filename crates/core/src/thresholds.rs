//! The thresholds of METRICS.md's state rules and hints, with its defaults. An organisation
//! overrides them as JSON: missing fields keep the default, unknown fields are rejected so
//! a typo does not silently fall back to a default.

use serde::{Deserialize, Serialize};

/// 1 GiB, the "≥ 1 GiB used" of the `idle_held` rule.
pub const GIB: i64 = 1 << 30;

/// Every threshold of METRICS.md. Percentages are 0–100, ratios 0–1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Thresholds {
    /// Evaluation window width, seconds.
    pub window_s: u32,
    /// `offline`: no sample for this many sampling intervals.
    pub offline_missing_intervals: u32,

    /// `idle` (and `idle_held`): kernel util below this.
    pub idle_max_util_pct: f64,
    /// `idle_held`: memory used at or above this counts as held even with no visible process.
    pub idle_held_min_mem_bytes: i64,
    /// `idle_held`: "no SM work at all" means SMACT below this.
    pub idle_held_max_sm_active_pct: f64,

    /// `stalled`: kernel util at or above this …
    pub stalled_min_util_pct: f64,
    /// … SMACT below this …
    pub stalled_max_sm_active_pct: f64,
    /// … and power below this % of the power limit.
    pub stalled_max_power_pct_of_limit: f64,

    /// `hollow`: kernel util at or above this …
    pub hollow_min_util_pct: f64,
    /// … and SMACT / util below this ratio.
    pub hollow_max_sm_util_ratio: f64,

    /// `starved`: max(kernel util, SMACT) below this …
    pub starved_max_busy_pct: f64,
    /// … and some work reaches the GPU: SMACT at or above this …
    pub starved_min_sm_active_pct: f64,
    /// … or kernel util at or above this.
    pub starved_min_util_pct: f64,

    /// `low_occupancy`: SMACT at or above this …
    pub low_occupancy_min_sm_active_pct: f64,
    /// … SMOCC below this …
    pub low_occupancy_max_sm_occupancy_pct: f64,
    /// … tensor below this …
    pub low_occupancy_max_tensor_pct: f64,
    /// … and DRAM below this.
    pub low_occupancy_max_dram_pct: f64,

    /// `memory_bound`: SMACT at or above this …
    pub memory_bound_min_sm_active_pct: f64,
    /// … DRAM at or above this …
    pub memory_bound_min_dram_pct: f64,
    /// … and tensor below this.
    pub memory_bound_max_tensor_pct: f64,

    /// `compute_bound`: SMACT at or above this …
    pub compute_bound_min_sm_active_pct: f64,
    /// … and tensor at or above this …
    pub compute_bound_min_tensor_pct: f64,
    /// … or an FP pipe (fp16/fp32/fp64) at or above this.
    pub compute_bound_min_fp_pipe_pct: f64,

    /// Right-size hint: p95 SMACT below this.
    pub right_size_max_p95_sm_active_pct: f64,
    /// Right-size hint: share of a smaller model's nominal memory kept free, because the
    /// datasheet figure is more than the framebuffer NVML reports as usable (not in
    /// METRICS.md; 10 % by default).
    pub right_size_memory_headroom_pct: f64,
    /// Collocation hint: summed p95 SMACT at or below this.
    pub collocation_max_sum_p95_sm_active_pct: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            window_s: 60,
            offline_missing_intervals: 3,
            idle_max_util_pct: 5.0,
            idle_held_min_mem_bytes: GIB,
            idle_held_max_sm_active_pct: 0.1,
            stalled_min_util_pct: 90.0,
            stalled_max_sm_active_pct: 5.0,
            stalled_max_power_pct_of_limit: 30.0,
            hollow_min_util_pct: 50.0,
            hollow_max_sm_util_ratio: 0.3,
            starved_max_busy_pct: 50.0,
            starved_min_sm_active_pct: 0.1,
            starved_min_util_pct: 5.0,
            low_occupancy_min_sm_active_pct: 50.0,
            low_occupancy_max_sm_occupancy_pct: 10.0,
            low_occupancy_max_tensor_pct: 10.0,
            low_occupancy_max_dram_pct: 30.0,
            memory_bound_min_sm_active_pct: 50.0,
            memory_bound_min_dram_pct: 60.0,
            memory_bound_max_tensor_pct: 20.0,
            compute_bound_min_sm_active_pct: 50.0,
            compute_bound_min_tensor_pct: 30.0,
            compute_bound_min_fp_pipe_pct: 50.0,
            right_size_max_p95_sm_active_pct: 25.0,
            right_size_memory_headroom_pct: 10.0,
            collocation_max_sum_p95_sm_active_pct: 80.0,
        }
    }
}

/// A threshold that makes no sense; names the field as it is spelled in JSON.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("thresholds.{field}: {message}")]
pub struct ThresholdError {
    pub field: &'static str,
    pub message: String,
}

fn bad(field: &'static str, message: impl Into<String>) -> ThresholdError {
    ThresholdError { field, message: message.into() }
}

impl Thresholds {
    /// Percentage fields by JSON name. Collocation may sum several jobs, but its limit is
    /// still a share of one GPU, so it is a percentage too.
    fn percentages(&self) -> [(&'static str, f64); 22] {
        [
            ("idle_max_util_pct", self.idle_max_util_pct),
            ("idle_held_max_sm_active_pct", self.idle_held_max_sm_active_pct),
            ("stalled_min_util_pct", self.stalled_min_util_pct),
            ("stalled_max_sm_active_pct", self.stalled_max_sm_active_pct),
            ("stalled_max_power_pct_of_limit", self.stalled_max_power_pct_of_limit),
            ("hollow_min_util_pct", self.hollow_min_util_pct),
            ("starved_max_busy_pct", self.starved_max_busy_pct),
            ("starved_min_sm_active_pct", self.starved_min_sm_active_pct),
            ("starved_min_util_pct", self.starved_min_util_pct),
            ("low_occupancy_min_sm_active_pct", self.low_occupancy_min_sm_active_pct),
            ("low_occupancy_max_sm_occupancy_pct", self.low_occupancy_max_sm_occupancy_pct),
            ("low_occupancy_max_tensor_pct", self.low_occupancy_max_tensor_pct),
            ("low_occupancy_max_dram_pct", self.low_occupancy_max_dram_pct),
            ("memory_bound_min_sm_active_pct", self.memory_bound_min_sm_active_pct),
            ("memory_bound_min_dram_pct", self.memory_bound_min_dram_pct),
            ("memory_bound_max_tensor_pct", self.memory_bound_max_tensor_pct),
            ("compute_bound_min_sm_active_pct", self.compute_bound_min_sm_active_pct),
            ("compute_bound_min_tensor_pct", self.compute_bound_min_tensor_pct),
            ("compute_bound_min_fp_pipe_pct", self.compute_bound_min_fp_pipe_pct),
            ("right_size_max_p95_sm_active_pct", self.right_size_max_p95_sm_active_pct),
            ("right_size_memory_headroom_pct", self.right_size_memory_headroom_pct),
            ("collocation_max_sum_p95_sm_active_pct", self.collocation_max_sum_p95_sm_active_pct),
        ]
    }

    /// Reject values that cannot be meant: percentages outside 0–100, non-finite numbers,
    /// a zero window, a ratio outside 0–1, negative memory, and rule pairs that contradict
    /// each other (a `starved` band that cannot contain anything).
    pub fn validate(&self) -> Result<(), ThresholdError> {
        for (field, v) in self.percentages() {
            if !v.is_finite() {
                return Err(bad(field, "must be a finite number"));
            }
            if !(0.0..=100.0).contains(&v) {
                return Err(bad(field, format!("{v} is not a percentage (0–100)")));
            }
        }
        if self.window_s == 0 {
            return Err(bad("window_s", "the evaluation window must be at least 1 s"));
        }
        if self.offline_missing_intervals == 0 {
            return Err(bad("offline_missing_intervals", "must be at least 1 interval"));
        }
        let r = self.hollow_max_sm_util_ratio;
        if !r.is_finite() || !(0.0..=1.0).contains(&r) {
            return Err(bad("hollow_max_sm_util_ratio", format!("{r} is not a ratio (0–1)")));
        }
        if self.idle_held_min_mem_bytes < 0 {
            return Err(bad("idle_held_min_mem_bytes", "cannot be negative"));
        }
        if self.right_size_memory_headroom_pct >= 100.0 {
            return Err(bad("right_size_memory_headroom_pct", "must leave some memory (< 100)"));
        }
        if self.starved_min_sm_active_pct >= self.starved_max_busy_pct {
            return Err(bad(
                "starved_min_sm_active_pct",
                "must be below starved_max_busy_pct, or no window can be starved",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_metrics_md_and_valid() {
        let t = Thresholds::default();
        assert_eq!(t.validate(), Ok(()));
        assert_eq!((t.window_s, t.offline_missing_intervals), (60, 3));
        assert_eq!((t.idle_max_util_pct, t.idle_held_min_mem_bytes), (5.0, 1 << 30));
        assert_eq!(
            (t.stalled_min_util_pct, t.stalled_max_sm_active_pct, t.stalled_max_power_pct_of_limit),
            (90.0, 5.0, 30.0)
        );
        assert_eq!((t.hollow_min_util_pct, t.hollow_max_sm_util_ratio), (50.0, 0.3));
        assert_eq!(t.compute_bound_min_tensor_pct, 30.0);
        assert_eq!(t.collocation_max_sum_p95_sm_active_pct, 80.0);
    }

    #[test]
    fn partial_json_override_keeps_other_defaults() {
        let t: Thresholds = serde_json::from_str(r#"{"hollow_min_util_pct": 80}"#).unwrap();
        assert_eq!(t.hollow_min_util_pct, 80.0);
        assert_eq!(t.idle_max_util_pct, 5.0);
        let round: Thresholds = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(round, t);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(serde_json::from_str::<Thresholds>(r#"{"hollow_min_utl_pct": 80}"#).is_err());
    }

    #[test]
    fn nonsense_is_rejected_with_the_field_name() {
        let cases: Vec<(Thresholds, &str)> = vec![
            (Thresholds { idle_max_util_pct: -1.0, ..Default::default() }, "idle_max_util_pct"),
            (Thresholds { memory_bound_min_dram_pct: 120.0, ..Default::default() }, "memory_bound_min_dram_pct"),
            (Thresholds { stalled_min_util_pct: f64::NAN, ..Default::default() }, "stalled_min_util_pct"),
            (Thresholds { hollow_max_sm_util_ratio: 1.5, ..Default::default() }, "hollow_max_sm_util_ratio"),
            (Thresholds { window_s: 0, ..Default::default() }, "window_s"),
            (Thresholds { offline_missing_intervals: 0, ..Default::default() }, "offline_missing_intervals"),
            (Thresholds { idle_held_min_mem_bytes: -5, ..Default::default() }, "idle_held_min_mem_bytes"),
            (Thresholds { starved_min_sm_active_pct: 60.0, ..Default::default() }, "starved_min_sm_active_pct"),
            (
                Thresholds { right_size_memory_headroom_pct: 100.0, ..Default::default() },
                "right_size_memory_headroom_pct",
            ),
        ];
        for (t, field) in cases {
            let e = t.validate().unwrap_err();
            assert_eq!(e.field, field);
            assert!(e.to_string().starts_with(&format!("thresholds.{field}: ")));
        }
    }
}
