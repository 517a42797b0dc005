//! GPM (GPU Performance Monitoring, Hopper and newer): which metrics are read and where each one
//! lands in a [`Sample`]. Pure mapping, tested without a GPU.
//!
//! Measured on an H200 (tests/fixtures/README.md): `SM_UTIL` is SM activity (DCGM's SMACT);
//! `GRAPHICS_UTIL` is "the graphics/compute engine had work" (DCGM's GRACT) — a single spinning
//! block reads 100 % there and 0.8 % in `SM_UTIL` — whatever nvml-wrapper's doc comment says.

use fleetlens_core::Sample;
use nvml_wrapper::enums::gpm::GpmMetricId;

use crate::source::{non_negative, pct};

/// A GPM metric and the sample field it fills.
#[derive(Debug, Clone, Copy)]
pub struct GpmField {
    pub id: GpmMetricId,
    /// The field's name in METRICS.md / the trace format.
    pub field: &'static str,
    set: fn(&mut Sample, Option<f64>),
    /// Percent (clamped to 0–100) or a rate (MiB/s, non-negative).
    percent: bool,
}

impl GpmField {
    /// A utilisation in percent (not a throughput).
    pub fn is_percent(&self) -> bool {
        self.percent
    }

    /// Stores a metric value (`None`: the metric could not be read) in its field.
    pub fn apply(&self, s: &mut Sample, value: Option<f64>) {
        let v = value.and_then(|v| if self.percent { pct(v) } else { non_negative(v) });
        (self.set)(s, v);
    }
}

macro_rules! gpm {
    ($id:ident, $field:ident, $percent:expr) => {
        GpmField { id: GpmMetricId::$id, field: stringify!($field), set: |s, v| s.$field = v, percent: $percent }
    };
}

/// Every GPM metric the agent reads, in one `nvmlGpmMetricsGet` call. NVML's units: percent for
/// the utilisations, MiB/s for PCIe and NVLink throughput (nvml.h: "PCIe traffic from this GPU in
/// MiB/sec", "NVLink read bandwidth for all links in MiB/sec").
///
/// `GraphicsUtil` (GRACT) comes last: computing it is most of the cost of the call (measured on an
/// H100, driver 580: 0.76 ms of CPU for it alone, about 1 µs for any other metric, 0.86 ms for all
/// 13; `HmmaTensorUtil` was added after that measurement), so `--nvml-gract-every N` can leave it out of the per-poll request ([`WITHOUT_GRACT`]).
pub const GPM_FIELDS: [GpmField; 14] = [
    gpm!(SmUtil, sm_active_pct, true),
    gpm!(SmOccupancy, sm_occupancy_pct, true),
    gpm!(AnyTensorUtil, tensor_active_pct, true),
    gpm!(DramBwUtil, dram_active_pct, true),
    gpm!(Fp16Util, fp16_active_pct, true),
    gpm!(Fp32Util, fp32_active_pct, true),
    gpm!(Fp64Util, fp64_active_pct, true),
    gpm!(IntegerUtil, int_active_pct, true),
    gpm!(PcieTxPerSec, pcie_tx_mib_s, false),
    gpm!(PcieRxPerSec, pcie_rx_mib_s, false),
    gpm!(NvlinkTotalTxPerSec, nvlink_tx_mib_s, false),
    gpm!(NvlinkTotalRxPerSec, nvlink_rx_mib_s, false),
    gpm!(HmmaTensorUtil, tensor_hmma_active_pct, true),
    gpm!(GraphicsUtil, gr_engine_active_pct, true),
];

/// [`GPM_FIELDS`] without `GraphicsUtil` (GRACT).
pub const WITHOUT_GRACT: &[GpmField] = GPM_FIELDS.split_last().expect("not empty").1;

/// `GraphicsUtil` (GRACT) alone.
pub const GRACT: &[GpmField] = std::slice::from_ref(GPM_FIELDS.last().expect("not empty"));

/// The metric ids of [`GPM_FIELDS`], in order (the request of `gpm_metrics_get`).
pub fn metric_ids() -> Vec<GpmMetricId> {
    GPM_FIELDS.iter().map(|f| f.id).collect()
}

/// The field a metric fills.
pub fn field_of(id: GpmMetricId) -> Option<&'static GpmField> {
    GPM_FIELDS.iter().find(|f| f.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(s: &Sample, field: &str) -> Option<f64> {
        let v = serde_json::to_value(s).unwrap();
        v[field].as_f64()
    }

    #[test]
    fn each_metric_fills_its_own_field() {
        for (i, f) in GPM_FIELDS.iter().enumerate() {
            let mut s = Sample::default();
            let value = 10.0 + i as f64;
            f.apply(&mut s, Some(value));
            assert_eq!(get(&s, f.field), Some(value), "{:?} → {}", f.id, f.field);
            // No other field was touched.
            for other in GPM_FIELDS.iter().filter(|o| o.field != f.field) {
                assert_eq!(get(&s, other.field), None, "{:?} also set {}", f.id, other.field);
            }
        }
        let fields: std::collections::HashSet<_> = GPM_FIELDS.iter().map(|f| f.field).collect();
        assert_eq!(fields.len(), GPM_FIELDS.len(), "two metrics write one field");
    }

    #[test]
    fn smact_is_sm_util_and_gract_is_graphics_util() {
        assert_eq!(field_of(GpmMetricId::SmUtil).unwrap().field, "sm_active_pct");
        assert_eq!(field_of(GpmMetricId::GraphicsUtil).unwrap().field, "gr_engine_active_pct");
        assert_eq!(field_of(GpmMetricId::AnyTensorUtil).unwrap().field, "tensor_active_pct");
        assert_eq!(field_of(GpmMetricId::DramBwUtil).unwrap().field, "dram_active_pct");
        assert_eq!(field_of(GpmMetricId::PcieTxPerSec).unwrap().field, "pcie_tx_mib_s");
        assert_eq!(field_of(GpmMetricId::NvlinkTotalRxPerSec).unwrap().field, "nvlink_rx_mib_s");
        assert_eq!(field_of(GpmMetricId::HmmaTensorUtil).unwrap().field, "tensor_hmma_active_pct");
        assert!(field_of(GpmMetricId::ImmaTensorUtil).is_none());
        assert!(field_of(GpmMetricId::Nvdec0Util).is_none());
        assert_eq!(metric_ids().len(), 14);
        // Without GRACT: the other 13; GRACT alone: just it.
        assert_eq!(WITHOUT_GRACT.len(), 13);
        assert!(WITHOUT_GRACT.iter().all(|f| f.id != GpmMetricId::GraphicsUtil));
        assert_eq!(GRACT.len(), 1);
        assert_eq!(GRACT[0].field, "gr_engine_active_pct");
    }

    #[test]
    fn out_of_range_values_are_clamped_or_dropped() {
        let mut s = Sample::default();
        field_of(GpmMetricId::SmUtil).unwrap().apply(&mut s, Some(100.4));
        assert_eq!(s.sm_active_pct, Some(100.0));
        field_of(GpmMetricId::SmUtil).unwrap().apply(&mut s, Some(f64::NAN));
        assert_eq!(s.sm_active_pct, None);
        field_of(GpmMetricId::PcieRxPerSec).unwrap().apply(&mut s, Some(-3.0));
        assert_eq!(s.pcie_rx_mib_s, None);
        field_of(GpmMetricId::PcieRxPerSec).unwrap().apply(&mut s, Some(20480.5));
        assert_eq!(s.pcie_rx_mib_s, Some(20480.5));
        // A metric that could not be read is absent, never 0.
        field_of(GpmMetricId::Fp64Util).unwrap().apply(&mut s, None);
        assert_eq!(s.fp64_active_pct, None);
        // The HMMA tensor pipe is a percent like the others: clamped, and absent when unread.
        let hmma = field_of(GpmMetricId::HmmaTensorUtil).unwrap();
        assert!(hmma.is_percent());
        hmma.apply(&mut s, Some(100.3));
        assert_eq!(s.tensor_hmma_active_pct, Some(100.0));
        hmma.apply(&mut s, Some(-0.2));
        assert_eq!(s.tensor_hmma_active_pct, Some(0.0));
        hmma.apply(&mut s, None);
        assert_eq!(s.tensor_hmma_active_pct, None);
    }
}
