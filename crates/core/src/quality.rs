//! Data quality: readings that cannot be true. Each rule of [`RULES`] names a flag, says when
//! a reading is impossible and which fields of the sample it drops. A flagged field is stored as
//! absent (it never reaches a mean, a rollup or a state), and the flag is counted per sample
//! in the minute's rollup, so the GPU page and `/metrics` can say how often it happened.
//!
//! Rules that need the GPU's history (the energy counter, a condition held for minutes) run
//! through a [`QualityTracker`], one per GPU, fed its samples in time order.

use serde::{Deserialize, Serialize};

use crate::sample::Sample;

/// Why a reading was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum QualityFlag {
    /// A profiling-counter activity (SM activity, occupancy, tensor, DRAM, FP/INT pipes,
    /// graphics engine) above 100 %: reported by some MIG setups, impossible as a share of time.
    #[serde(rename = "activity_over_100")]
    ActivityOver100,
    /// Kernel utilization above 0 while the graphics engine (GRACT) reads 0, held for
    /// [`UTIL_WITHOUT_GR_ENGINE_MS`] or more: kernels cannot run with the engine idle, so the
    /// profiling counters read zeros that are not true (stale, or held by another profiler).
    UtilWithoutGrEngine,
    /// The energy counter (monotonic since driver load) went backwards.
    EnergyCounterBackwards,
    /// SM clock 0 MHz while kernels run or SMs are active.
    ClockZeroWhileBusy,
}

impl QualityFlag {
    pub const ALL: [QualityFlag; 4] = [
        QualityFlag::ActivityOver100,
        QualityFlag::UtilWithoutGrEngine,
        QualityFlag::EnergyCounterBackwards,
        QualityFlag::ClockZeroWhileBusy,
    ];

    pub fn as_str(self) -> &'static str {
        self.rule().name
    }

    pub fn parse(s: &str) -> Option<QualityFlag> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// Position in [`QualityFlag::ALL`] (and in rollups' flag counts).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn rule(self) -> &'static QualityRule {
        &RULES[self.index()]
    }
}

/// One data-quality rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QualityRule {
    pub flag: QualityFlag,
    /// The flag's name in the API, `/metrics` and storage (`q_<name>` columns).
    pub name: &'static str,
    /// When a reading is flagged.
    pub when: &'static str,
    /// The fields dropped from a flagged sample.
    pub drops: &'static [&'static str],
}

/// The profiling-counter (GPM/DCGM) activity fields, all percentages of time or of capacity.
pub const ACTIVITY_FIELDS: [&str; 10] = [
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "fp16_active_pct",
    "tensor_hmma_active_pct",
    "fp32_active_pct",
    "fp64_active_pct",
    "int_active_pct",
    "gr_engine_active_pct",
];

/// The rules, indexed like [`QualityFlag::ALL`].
pub const RULES: [QualityRule; 4] = [
    QualityRule {
        flag: QualityFlag::ActivityOver100,
        name: "activity_over_100",
        when: "a profiling-counter activity (SM activity, occupancy, tensor, DRAM, FP/INT pipe, graphics engine) above 100 %",
        drops: &["each activity field above 100 %"],
    },
    QualityRule {
        flag: QualityFlag::UtilWithoutGrEngine,
        name: "util_without_gr_engine",
        when: "kernel utilization above 0 while graphics-engine activity reads 0, for 2 minutes or more",
        drops: &ACTIVITY_FIELDS,
    },
    QualityRule {
        flag: QualityFlag::EnergyCounterBackwards,
        name: "energy_counter_backwards",
        when: "the energy counter is lower than at the GPU's previous sample",
        drops: &["energy_j"],
    },
    QualityRule {
        flag: QualityFlag::ClockZeroWhileBusy,
        name: "clock_zero_while_busy",
        when: "SM clock 0 MHz while kernel utilization or SM activity is above 0",
        drops: &["sm_clock_mhz"],
    },
];

/// How long kernel utilization > 0 with graphics-engine activity 0 must last before it is
/// flagged: one reading can fall between the two counters' sample periods, minutes cannot.
pub const UTIL_WITHOUT_GR_ENGINE_MS: i64 = 120_000;
/// Percentages up to this are accepted by ingest as readings (and flagged above 100); beyond
/// it they are refused as bad input. Only the activity fields may exceed 100.
pub const MAX_ACTIVITY_PCT: f64 = 1000.0;
/// The energy counter is reported in millijoules and rounded; a step back smaller than this
/// is rounding, not a counter going backwards.
const ENERGY_JITTER_J: f64 = 1e-3;

/// A set of flags (a bit per [`QualityFlag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct QualityFlags(u8);

impl QualityFlags {
    pub const NONE: QualityFlags = QualityFlags(0);

    pub fn insert(&mut self, f: QualityFlag) {
        self.0 |= 1 << f.index();
    }

    pub fn contains(self, f: QualityFlag) -> bool {
        self.0 & (1 << f.index()) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags as stored: bit `QualityFlag::index` per flag.
    pub fn bits(self) -> i64 {
        i64::from(self.0)
    }

    /// Flags from [`QualityFlags::bits`]; unknown bits are ignored.
    pub fn from_bits(bits: i64) -> QualityFlags {
        QualityFlags((bits & ((1 << QualityFlag::ALL.len()) - 1)) as u8)
    }

    pub fn iter(self) -> impl Iterator<Item = QualityFlag> {
        QualityFlag::ALL.into_iter().filter(move |f| self.contains(*f))
    }
}

fn activity_fields(s: &mut Sample) -> [&mut Option<f64>; 10] {
    [
        &mut s.sm_active_pct,
        &mut s.sm_occupancy_pct,
        &mut s.tensor_active_pct,
        &mut s.dram_active_pct,
        &mut s.fp16_active_pct,
        &mut s.tensor_hmma_active_pct,
        &mut s.fp32_active_pct,
        &mut s.fp64_active_pct,
        &mut s.int_active_pct,
        &mut s.gr_engine_active_pct,
    ]
}

/// The flags of one sample that need no history.
pub fn stateless_flags(s: &Sample) -> QualityFlags {
    let mut flags = QualityFlags::NONE;
    let mut copy = s.clone();
    if activity_fields(&mut copy).iter().any(|v| v.is_some_and(|v| v > 100.0)) {
        flags.insert(QualityFlag::ActivityOver100);
    }
    let busy = s.gpu_util_pct.is_some_and(|u| u > 0.0) || s.sm_active_pct.is_some_and(|a| a > 0.0 && a <= 100.0);
    if s.sm_clock_mhz == Some(0.0) && busy {
        flags.insert(QualityFlag::ClockZeroWhileBusy);
    }
    flags
}

/// The history of one GPU that the rules need.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QualityTracker {
    last_ts_ms: Option<i64>,
    last_energy_j: Option<f64>,
    /// Since when kernel utilization > 0 with graphics-engine activity 0 has held.
    util_without_gr_since_ms: Option<i64>,
}

impl QualityTracker {
    /// The flags of the GPU's next sample. Samples must come in time order; an older one than
    /// the last seen (a back-filled batch) is checked by the rules that need no history only.
    pub fn check(&mut self, s: &Sample) -> QualityFlags {
        let mut flags = stateless_flags(s);
        if self.last_ts_ms.is_some_and(|t| s.ts_ms <= t) {
            return flags;
        }
        self.last_ts_ms = Some(s.ts_ms);
        if let Some(e) = s.energy_j {
            if self.last_energy_j.is_some_and(|last| e < last - ENERGY_JITTER_J) {
                flags.insert(QualityFlag::EnergyCounterBackwards);
            }
            // The new value is the reference from now on: after a driver reload (the counter
            // restarts at 0) only the step back is flagged, not every later reading.
            self.last_energy_j = Some(e);
        }
        let contradiction = s.gpu_util_pct.is_some_and(|u| u > 0.0) && s.gr_engine_active_pct == Some(0.0);
        if contradiction {
            let since = *self.util_without_gr_since_ms.get_or_insert(s.ts_ms);
            if s.ts_ms - since >= UTIL_WITHOUT_GR_ENGINE_MS {
                flags.insert(QualityFlag::UtilWithoutGrEngine);
            }
        } else {
            self.util_without_gr_since_ms = None;
        }
        flags
    }
}

/// Drops the fields that `flags` say cannot be true (they become absent, never 0).
pub fn scrub(s: &mut Sample, flags: QualityFlags) {
    if flags.contains(QualityFlag::UtilWithoutGrEngine) {
        for v in activity_fields(s) {
            *v = None;
        }
    }
    if flags.contains(QualityFlag::ActivityOver100) {
        for v in activity_fields(s) {
            if v.is_some_and(|x| x > 100.0) {
                *v = None;
            }
        }
    }
    if flags.contains(QualityFlag::EnergyCounterBackwards) {
        s.energy_j = None;
    }
    if flags.contains(QualityFlag::ClockZeroWhileBusy) {
        s.sm_clock_mhz = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::blank_sample as s;

    #[test]
    fn the_rule_table_is_indexed_like_the_flags() {
        for (i, f) in QualityFlag::ALL.into_iter().enumerate() {
            assert_eq!(RULES[i].flag, f);
            assert_eq!(f.index(), i);
            assert_eq!(QualityFlag::parse(f.as_str()), Some(f));
            // The API name is the serde name.
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
    }

    #[test]
    fn activity_over_100_drops_only_the_impossible_fields() {
        let mut a =
            Sample { sm_active_pct: Some(130.0), tensor_active_pct: Some(40.0), gpu_util_pct: Some(100.0), ..s(0) };
        let flags = QualityTracker::default().check(&a);
        assert_eq!(flags.iter().collect::<Vec<_>>(), vec![QualityFlag::ActivityOver100]);
        scrub(&mut a, flags);
        assert_eq!((a.sm_active_pct, a.tensor_active_pct, a.gpu_util_pct), (None, Some(40.0), Some(100.0)));
        // 100 exactly is a full GPU, not a flag.
        let full = Sample { sm_active_pct: Some(100.0), ..s(0) };
        assert!(stateless_flags(&full).is_empty());
    }

    #[test]
    fn util_without_graphics_engine_is_flagged_after_two_minutes() {
        let mut t = QualityTracker::default();
        let contradiction = |ts: i64| Sample {
            gpu_util_pct: Some(100.0),
            gr_engine_active_pct: Some(0.0),
            sm_active_pct: Some(0.0),
            ..s(ts)
        };
        let flagged: Vec<bool> = (0..=130)
            .step_by(10)
            .map(|sec| t.check(&contradiction(sec * 1000)).contains(QualityFlag::UtilWithoutGrEngine))
            .collect();
        // 0..110 s: not yet; from 120 s on: flagged.
        assert_eq!(flagged.iter().filter(|f| **f).count(), 2);
        assert!(flagged[12] && flagged[13] && !flagged[11]);
        // One sample with the engine active ends the run; it starts again from there.
        let ok = Sample { gr_engine_active_pct: Some(30.0), gpu_util_pct: Some(100.0), ..s(140_000) };
        assert!(t.check(&ok).is_empty());
        assert!(t.check(&contradiction(150_000)).is_empty());
        let mut g = contradiction(300_000);
        let flags = t.check(&g);
        assert!(flags.contains(QualityFlag::UtilWithoutGrEngine));
        scrub(&mut g, flags);
        assert_eq!((g.sm_active_pct, g.gr_engine_active_pct, g.gpu_util_pct), (None, None, Some(100.0)));
        // Kernel utilization 0 (idle) with the engine at 0 is the normal idle GPU.
        let mut idle = QualityTracker::default();
        for sec in 0..300 {
            let i = Sample { gpu_util_pct: Some(0.0), gr_engine_active_pct: Some(0.0), ..s(sec * 1000) };
            assert!(idle.check(&i).is_empty());
        }
    }

    #[test]
    fn energy_counter_going_backwards_is_flagged_once_per_step() {
        let mut t = QualityTracker::default();
        let e = |ts: i64, j: f64| Sample { energy_j: Some(j), ..s(ts) };
        assert!(t.check(&e(0, 1000.0)).is_empty());
        assert!(t.check(&e(1000, 1100.0)).is_empty());
        assert!(t.check(&e(2000, 1100.0 - 1e-4)).is_empty(), "rounding is not a step back");
        let mut back = e(3000, 5.0);
        let flags = t.check(&back);
        assert!(flags.contains(QualityFlag::EnergyCounterBackwards));
        scrub(&mut back, flags);
        assert_eq!(back.energy_j, None);
        // After a reset the counter counts up from its new value.
        assert!(t.check(&e(4000, 105.0)).is_empty());
        // An older sample (back-fill) is not compared with the newer history.
        assert!(t.check(&e(500, 1.0)).is_empty());
    }

    #[test]
    fn clock_zero_while_busy() {
        let busy = Sample { sm_clock_mhz: Some(0.0), gpu_util_pct: Some(50.0), ..s(0) };
        let mut b = busy.clone();
        let flags = stateless_flags(&busy);
        assert_eq!(flags.iter().collect::<Vec<_>>(), vec![QualityFlag::ClockZeroWhileBusy]);
        scrub(&mut b, flags);
        assert_eq!((b.sm_clock_mhz, b.gpu_util_pct), (None, Some(50.0)));
        let idle = Sample { sm_clock_mhz: Some(0.0), gpu_util_pct: Some(0.0), sm_active_pct: Some(0.0), ..s(0) };
        assert!(stateless_flags(&idle).is_empty(), "a parked clock on an idle GPU is plausible");
    }
}
