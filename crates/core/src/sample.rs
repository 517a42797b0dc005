//! One GPU reading at one instant: the fields of the trace format in
//! `shared/fixtures/README.md` plus the process list.

use serde::{Deserialize, Serialize};

/// A GPU sample. Every measurement is optional: `None` means "not measured on this GPU",
/// which is never the same as 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Sample {
    /// Sample time, Unix milliseconds.
    pub ts_ms: i64,
    /// Stable GPU identity (NVML UUID, e.g. `GPU-b8c24ac0-…`; MIG instances `MIG-…`).
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub gpu_index: Option<u32>,
    /// Model name as NVML reports it, e.g. `NVIDIA H200`.
    #[serde(default)]
    pub name: Option<String>,

    /// Kernel utilization: % of time at least one kernel ran.
    #[serde(default)]
    pub gpu_util_pct: Option<f64>,
    /// Memory-controller busy time, %.
    #[serde(default)]
    pub mem_util_pct: Option<f64>,
    #[serde(default)]
    pub mem_used_bytes: Option<i64>,
    #[serde(default)]
    pub mem_total_bytes: Option<i64>,
    #[serde(default)]
    pub power_w: Option<f64>,
    #[serde(default)]
    pub power_limit_w: Option<f64>,
    /// Monotonic energy counter since driver load, joules.
    #[serde(default)]
    pub energy_j: Option<f64>,
    #[serde(default)]
    pub temp_c: Option<f64>,
    #[serde(default)]
    pub sm_clock_mhz: Option<f64>,
    /// NVML clock-event (throttle) reasons bitmask.
    #[serde(default)]
    pub throttle_reasons: Option<u64>,

    /// SM activity (SMACT): % of SMs busy, averaged over the interval.
    #[serde(default)]
    pub sm_active_pct: Option<f64>,
    /// Graphics engine active (GRACT).
    #[serde(default)]
    pub gr_engine_active_pct: Option<f64>,
    /// SM occupancy (SMOCC): resident warps / maximum warps, %.
    #[serde(default)]
    pub sm_occupancy_pct: Option<f64>,
    #[serde(default)]
    pub tensor_active_pct: Option<f64>,
    #[serde(default)]
    pub dram_active_pct: Option<f64>,
    #[serde(default)]
    pub fp16_active_pct: Option<f64>,
    #[serde(default)]
    pub fp32_active_pct: Option<f64>,
    #[serde(default)]
    pub fp64_active_pct: Option<f64>,
    #[serde(default)]
    pub int_active_pct: Option<f64>,
    #[serde(default)]
    pub pcie_tx_mib_s: Option<f64>,
    #[serde(default)]
    pub pcie_rx_mib_s: Option<f64>,
    #[serde(default)]
    pub nvlink_tx_mib_s: Option<f64>,
    #[serde(default)]
    pub nvlink_rx_mib_s: Option<f64>,

    /// Compute processes on the GPU at sample time. `None`: the list could not be read;
    /// `Some(vec![])`: read, and nobody is on the GPU.
    #[serde(default)]
    pub processes: Option<Vec<GpuProcess>>,
}

/// A process holding the GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuProcess {
    pub pid: u32,
    /// GPU memory the process holds, bytes.
    #[serde(default)]
    pub used_bytes: Option<i64>,
    /// The process's share of SM time from NVML process utilization samples, %.
    #[serde(default)]
    pub sm_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Container or cgroup id from /proc/<pid>/cgroup, where visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

/// Accessor of one optional float field of a sample.
pub type FloatField = (&'static str, fn(&Sample) -> Option<f64>);

/// Percentage fields, by their METRICS.md names, with accessors. Used by validation and by
/// storage code that treats them uniformly.
pub const PERCENT_FIELDS: [FloatField; 11] = [
    ("gpu_util_pct", |s| s.gpu_util_pct),
    ("mem_util_pct", |s| s.mem_util_pct),
    ("sm_active_pct", |s| s.sm_active_pct),
    ("gr_engine_active_pct", |s| s.gr_engine_active_pct),
    ("sm_occupancy_pct", |s| s.sm_occupancy_pct),
    ("tensor_active_pct", |s| s.tensor_active_pct),
    ("dram_active_pct", |s| s.dram_active_pct),
    ("fp16_active_pct", |s| s.fp16_active_pct),
    ("fp32_active_pct", |s| s.fp32_active_pct),
    ("fp64_active_pct", |s| s.fp64_active_pct),
    ("int_active_pct", |s| s.int_active_pct),
];

impl Sample {
    /// True when at least one application process holds the GPU (allocation utilization).
    pub fn is_allocated(&self) -> bool {
        self.processes.as_ref().is_some_and(|p| !p.is_empty())
    }

    /// Efficiency score: SMACT / kernel utilization × 100, capped at 100; undefined (None)
    /// when kernel utilization is 0 or either signal is absent.
    pub fn efficiency(&self) -> Option<f64> {
        crate::efficiency(self.sm_active_pct, self.gpu_util_pct)
    }
}

/// Non-negative float fields that are not percentages (watts, joules, MHz, MiB/s).
pub const NON_NEGATIVE_FIELDS: [FloatField; 8] = [
    ("power_w", |s| s.power_w),
    ("power_limit_w", |s| s.power_limit_w),
    ("energy_j", |s| s.energy_j),
    ("sm_clock_mhz", |s| s.sm_clock_mhz),
    ("pcie_tx_mib_s", |s| s.pcie_tx_mib_s),
    ("pcie_rx_mib_s", |s| s.pcie_rx_mib_s),
    ("nvlink_tx_mib_s", |s| s.nvlink_tx_mib_s),
    ("nvlink_rx_mib_s", |s| s.nvlink_rx_mib_s),
];
