//! Validation of incoming samples. A batch is accepted whole or not at all, so the first
//! error found names the sample index and the field.

use crate::quality::{ACTIVITY_FIELDS, MAX_ACTIVITY_PCT};
use crate::sample::{NON_NEGATIVE_FIELDS, PERCENT_FIELDS, Sample};

/// How far into the future a sample may be stamped (clock skew allowance).
pub const MAX_FUTURE_SKEW_MS: i64 = 5 * 60 * 1000;
/// Longest accepted GPU uuid / name, to keep junk out of the database.
pub const MAX_TEXT_LEN: usize = 256;
/// Percentages may overshoot 100 by rounding in the driver; beyond this they are bad data.
const PERCENT_MAX: f64 = 100.0 + 1e-6;
/// Ceiling of the other non-negative readings (watts, joules, MHz, MiB/s): far above any real
/// GPU (a 100 kW board, 10^8 MiB/s links, decades of joules), far below where the rollups'
/// sums of a year of samples could overflow to infinity.
pub const MAX_MAGNITUDE: f64 = 1e15;
/// Ceiling of memory byte counts (1 PiB), well inside f64's exact integers for rollup sums.
pub const MAX_BYTES: i64 = 1 << 50;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("samples[{index}].{field}: {message}")]
pub struct ValidationError {
    pub index: usize,
    pub field: String,
    pub message: String,
}

fn err(index: usize, field: &str, message: impl Into<String>) -> ValidationError {
    ValidationError { index, field: field.to_string(), message: message.into() }
}

/// Check one sample. `index` is its position in the batch; `now_ms` the server's clock.
pub fn validate_sample(index: usize, s: &Sample, now_ms: i64) -> Result<(), ValidationError> {
    let uuid = s.uuid.trim();
    if uuid.is_empty() {
        return Err(err(index, "uuid", "missing: every sample needs the GPU uuid"));
    }
    if uuid.len() > MAX_TEXT_LEN || uuid.chars().any(char::is_control) {
        return Err(err(index, "uuid", "must be at most 256 printable characters"));
    }
    if let Some(name) = &s.name
        && (name.len() > MAX_TEXT_LEN || name.chars().any(char::is_control))
    {
        return Err(err(index, "name", "must be at most 256 printable characters"));
    }
    if s.ts_ms <= 0 {
        return Err(err(index, "ts_ms", "must be a positive Unix timestamp in milliseconds"));
    }
    if s.ts_ms > now_ms + MAX_FUTURE_SKEW_MS {
        return Err(err(
            index,
            "ts_ms",
            format!("{} is more than 5 minutes in the future (server time {now_ms})", s.ts_ms),
        ));
    }
    for (field, get) in PERCENT_FIELDS {
        if let Some(v) = get(s) {
            if !v.is_finite() {
                return Err(err(index, field, "must be a finite number"));
            }
            // Profiling-counter activities above 100 % come from real drivers (some MIG
            // setups): accepted up to a ceiling, then flagged and dropped (crate::quality).
            let max = if ACTIVITY_FIELDS.contains(&field) { MAX_ACTIVITY_PCT } else { PERCENT_MAX };
            if !(0.0..=max).contains(&v) {
                return Err(err(index, field, format!("{v} is outside 0–{max}")));
            }
        }
    }
    for (field, get) in NON_NEGATIVE_FIELDS {
        if let Some(v) = get(s) {
            if !v.is_finite() {
                return Err(err(index, field, "must be a finite number"));
            }
            if v < 0.0 {
                return Err(err(index, field, format!("{v} is negative")));
            }
            if v > MAX_MAGNITUDE {
                return Err(err(index, field, format!("{v} is implausibly large (limit {MAX_MAGNITUDE:e})")));
            }
        }
    }
    if let Some(t) = s.temp_c
        && (!t.is_finite() || !(-100.0..=300.0).contains(&t))
    {
        return Err(err(index, "temp_c", format!("{t} is not a plausible temperature")));
    }
    for (field, v) in [("mem_used_bytes", s.mem_used_bytes), ("mem_total_bytes", s.mem_total_bytes)] {
        if v.is_some_and(|v| v < 0) {
            return Err(err(index, field, "byte counts cannot be negative"));
        }
        if v.is_some_and(|v| v > MAX_BYTES) {
            return Err(err(index, field, "more than 1 PiB on one GPU"));
        }
    }
    if let Some(procs) = &s.processes {
        if procs.len() > crate::sample::MAX_PROCESSES_PER_SAMPLE {
            return Err(err(index, "processes", "more than 4096 processes on one GPU"));
        }
        for (p, proc_) in procs.iter().enumerate() {
            if proc_.used_bytes.is_some_and(|v| v < 0) {
                return Err(err(index, &format!("processes[{p}].used_bytes"), "byte counts cannot be negative"));
            }
            if let Some(v) = proc_.sm_pct
                && (!v.is_finite() || !(0.0..=PERCENT_MAX).contains(&v))
            {
                return Err(err(index, &format!("processes[{p}].sm_pct"), format!("{v} is outside 0–100")));
            }
            for (f, text) in [("command", &proc_.command), ("user", &proc_.user), ("container_id", &proc_.container_id)]
            {
                if text.as_ref().is_some_and(|t| t.len() > 4096) {
                    return Err(err(index, &format!("processes[{p}].{f}"), "longer than 4096 bytes"));
                }
            }
            if let Some(o) = &proc_.owner {
                for (f, text) in o.fields() {
                    if text.is_some_and(|t| t.len() > 1024) {
                        return Err(err(index, &format!("processes[{p}].owner.{f}"), "longer than 1024 bytes"));
                    }
                }
                if o.labels.len() > 64 {
                    return Err(err(index, &format!("processes[{p}].owner.labels"), "more than 64 labels"));
                }
                for (k, v) in &o.labels {
                    if k.is_empty() || k.len() > 256 || v.len() > 1024 {
                        return Err(err(
                            index,
                            &format!("processes[{p}].owner.labels"),
                            "a label name must be 1–256 bytes and its value at most 1024",
                        ));
                    }
                }
            }
        }
    }
    if s.allocations.len() > crate::sample::MAX_ALLOCATIONS_PER_SAMPLE {
        return Err(err(
            index,
            "allocations",
            format!("more than {} pod allocations on one GPU", crate::sample::MAX_ALLOCATIONS_PER_SAMPLE),
        ));
    }
    for (i, a) in s.allocations.iter().enumerate() {
        if a.namespace.is_empty() || a.pod.is_empty() {
            return Err(err(index, &format!("allocations[{i}]"), "an allocation names its pod and namespace"));
        }
        for (f, text) in [
            ("namespace", &a.namespace),
            ("pod", &a.pod),
            ("container", &a.container),
            ("resource", &a.resource),
            ("device_id", &a.device_id),
            ("team", a.team.as_ref().unwrap_or(&String::new())),
            ("pod_user", a.pod_user.as_ref().unwrap_or(&String::new())),
            ("job_kind", a.job_kind.as_ref().unwrap_or(&String::new())),
            ("job_name", a.job_name.as_ref().unwrap_or(&String::new())),
        ] {
            if text.len() > 1024 {
                return Err(err(index, &format!("allocations[{i}].{f}"), "longer than 1024 bytes"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_allocations() {
        let alloc = |ns: &str, pod: &str| crate::PodAllocation {
            namespace: ns.into(),
            pod: pod.into(),
            container: "c".into(),
            resource: "nvidia.com/gpu".into(),
            device_id: "GPU-1".into(),
            ..Default::default()
        };
        let mut s = ok_sample();
        s.allocations = vec![alloc("ml", "nb")];
        assert_eq!(validate_sample(0, &s, NOW), Ok(()));
        let mut long_team = alloc("ml", "nb");
        long_team.team = Some("t".repeat(1025));
        s.allocations = vec![long_team];
        assert_eq!(validate_sample(0, &s, NOW).unwrap_err().field, "allocations[0].team");
        s.allocations = vec![alloc("ml", "nb")];
        s.allocations = vec![alloc("", "nb")];
        assert_eq!(validate_sample(0, &s, NOW).unwrap_err().field, "allocations[0]");
        s.allocations = vec![alloc("ml", &"x".repeat(1025))];
        assert_eq!(validate_sample(0, &s, NOW).unwrap_err().field, "allocations[0].pod");
        s.allocations = vec![alloc("ml", "nb"); crate::sample::MAX_ALLOCATIONS_PER_SAMPLE + 1];
        assert_eq!(validate_sample(0, &s, NOW).unwrap_err().field, "allocations");
    }

    const NOW: i64 = 1_800_000_000_000;

    fn ok_sample() -> Sample {
        Sample { ts_ms: NOW - 1000, uuid: "GPU-1".into(), gpu_util_pct: Some(50.0), ..Default::default() }
    }

    #[test]
    fn accepts_a_plain_sample() {
        assert_eq!(validate_sample(0, &ok_sample(), NOW), Ok(()));
    }

    #[test]
    fn names_field_and_index() {
        let s = Sample { gpu_util_pct: Some(101.0), ..ok_sample() };
        let e = validate_sample(7, &s, NOW).unwrap_err();
        assert_eq!((e.index, e.field.as_str()), (7, "gpu_util_pct"));
        assert!(e.to_string().starts_with("samples[7].gpu_util_pct"));
    }

    #[test]
    fn activity_over_100_is_a_reading_up_to_the_ceiling() {
        // Accepted, then flagged by crate::quality; kernel utilization over 100 stays an error.
        let mig = Sample { sm_active_pct: Some(130.0), ..ok_sample() };
        assert_eq!(validate_sample(0, &mig, NOW), Ok(()));
        let junk = Sample { sm_active_pct: Some(MAX_ACTIVITY_PCT + 1.0), ..ok_sample() };
        assert_eq!(validate_sample(0, &junk, NOW).unwrap_err().field, "sm_active_pct");
    }

    /// The checked fields come from the signal table by unit: the same as before it, plus the
    /// HMMA tensor pipe.
    #[test]
    fn checked_fields_are_the_signals_in_their_units() {
        let mut percent: Vec<_> = PERCENT_FIELDS.iter().map(|f| f.0).collect();
        percent.sort();
        assert_eq!(
            percent,
            [
                "dram_active_pct",
                "fp16_active_pct",
                "fp32_active_pct",
                "fp64_active_pct",
                "gpu_util_pct",
                "gr_engine_active_pct",
                "int_active_pct",
                "mem_util_pct",
                "sm_active_pct",
                "sm_occupancy_pct",
                "tensor_active_pct",
                "tensor_hmma_active_pct",
            ]
        );
        let mut other: Vec<_> = NON_NEGATIVE_FIELDS.iter().map(|f| f.0).collect();
        other.sort();
        assert_eq!(
            other,
            [
                "energy_j",
                "nvlink_rx_mib_s",
                "nvlink_tx_mib_s",
                "pcie_rx_mib_s",
                "pcie_tx_mib_s",
                "power_limit_w",
                "power_w",
                "sm_clock_mhz"
            ]
        );
        let hmma = Sample { tensor_hmma_active_pct: Some(87.5), ..ok_sample() };
        assert_eq!(validate_sample(0, &hmma, NOW), Ok(()));
    }

    #[test]
    fn rejects_each_bad_case() {
        let cases: Vec<(Sample, &str)> = vec![
            (Sample { uuid: " ".into(), ..ok_sample() }, "uuid"),
            (Sample { ts_ms: NOW + MAX_FUTURE_SKEW_MS + 1, ..ok_sample() }, "ts_ms"),
            (Sample { gpu_util_pct: Some(f64::NAN), ..ok_sample() }, "gpu_util_pct"),
            (Sample { power_w: Some(f64::INFINITY), ..ok_sample() }, "power_w"),
            (Sample { dram_active_pct: Some(-0.5), ..ok_sample() }, "dram_active_pct"),
            (Sample { mem_used_bytes: Some(-1), ..ok_sample() }, "mem_used_bytes"),
            (Sample { power_w: Some(1.7e308), ..ok_sample() }, "power_w"),
            (Sample { energy_j: Some(MAX_MAGNITUDE * 2.0), ..ok_sample() }, "energy_j"),
            (Sample { mem_total_bytes: Some(i64::MAX), ..ok_sample() }, "mem_total_bytes"),
            // The newest signal is checked through the table like the others.
            (Sample { tensor_hmma_active_pct: Some(-0.5), ..ok_sample() }, "tensor_hmma_active_pct"),
            (Sample { tensor_hmma_active_pct: Some(MAX_ACTIVITY_PCT + 1.0), ..ok_sample() }, "tensor_hmma_active_pct"),
        ];
        for (s, field) in cases {
            assert_eq!(validate_sample(0, &s, NOW).unwrap_err().field, field);
        }
    }

    #[test]
    fn five_minutes_of_skew_is_allowed() {
        let s = Sample { ts_ms: NOW + MAX_FUTURE_SKEW_MS, ..ok_sample() };
        assert!(validate_sample(0, &s, NOW).is_ok());
    }
}
