//! The one table of GPU signals: every per-sample measurement with its METRICS.md name (also
//! its JSON field, SQL column and alert-rule field), unit, kind, description and accessor.
//! The lists that used to be kept in step by hand (rule fields, rollup and window signals)
//! are derived from it, so a new signal is a row here, a migration and the agent source that
//! reads it (docs/DEVELOPING.md).

use crate::sample::{FloatField, Sample};

/// How a signal's values relate over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// A reading at the sample instant (or averaged over the interval).
    Gauge,
    /// A monotonic total: the difference between two samples is what happened in between.
    Counter,
    /// A set of flags; only its bits mean something.
    Bitmask,
}

/// One GPU signal.
#[derive(Debug, Clone, Copy)]
pub struct Signal {
    /// METRICS.md name: the sample's JSON field, the SQL column and the rule field.
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: SignalKind,
    /// What it measures, as the rule-field list shows it.
    pub doc: &'static str,
    /// Read the value from a sample (`None`: not measured).
    pub get: fn(&Sample) -> Option<f64>,
    /// Write the value into a sample (the store's row and sealed-block readers): the inverse of
    /// `get` for every value `get` returns.
    pub set: fn(&mut Sample, Option<f64>),
    /// The value as the integer it is stored as, for the signals kept exactly
    /// ([`Precision::Exact`]): counts and bytes as they are, a bitmask as its 64 bits (signed),
    /// so that no value passes through `f64` (a bitmask with bit 63 set would not survive it).
    pub get_int: fn(&Sample) -> Option<i64>,
    /// The inverse of `get_int`.
    pub set_int: fn(&mut Sample, Option<i64>),
    /// How sealed sample blocks keep it (docs/METRICS.md, "Stored precision").
    pub precision: Precision,
    /// The `/metrics` gauge (name after the `fleetlens_` prefix, help text), for the signals
    /// exported there.
    pub metric: Option<(&'static str, &'static str)>,
}

/// How a signal is kept at rest in sealed sample blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// An integer, kept exactly.
    Exact,
    /// A real number rounded to the nearest multiple of `1 / scale` (`scale` a power of ten).
    Scaled(i64),
}

impl Precision {
    /// `v` as the integer it is stored as: the nearest multiple of `1 / scale` times the scale
    /// (an exact signal's whole number as it is), or `None` when that integer is not exactly
    /// representable in f64 (beyond 2^53 the value read back would not be it over the scale).
    pub fn stored_int(self, v: f64) -> Option<i64> {
        const LIMIT: f64 = (1u64 << 53) as f64;
        let scale = match self {
            Precision::Exact => 1,
            Precision::Scaled(scale) => scale,
        };
        let q = (v * scale as f64).round();
        (q.is_finite() && q.abs() < LIMIT).then_some(q as i64)
    }

    /// The value a stored integer stands for: divided by the integer scale (not multiplied by
    /// its inverse), so the stored `3725` at 0.01 comes back as the f64 that parsing "37.25"
    /// gives.
    pub fn from_stored_int(self, q: i64) -> f64 {
        match self {
            Precision::Exact => q as f64,
            Precision::Scaled(scale) => q as f64 / scale as f64,
        }
    }

    /// `v` kept at this precision: the value of its stored integer (what reading it back gives,
    /// so storing it again changes nothing). Exact signals are whole numbers and stay as they
    /// are; so does a value without a stored integer.
    pub fn round(self, v: f64) -> f64 {
        match self {
            Precision::Exact => v,
            Precision::Scaled(_) => self.stored_int(v).map_or(v, |q| self.from_stored_int(q)),
        }
    }
}

impl Signal {
    const fn stored(self, precision: Precision) -> Self {
        Signal { precision, ..self }
    }

    const fn exported(self, name: &'static str, help: &'static str) -> Self {
        Signal { metric: Some((name, help)), ..self }
    }

    const fn counter(self) -> Self {
        Signal { kind: SignalKind::Counter, ..self }
    }
}

/// A sample field as a signal value: every signal is read and written as `Option<f64>` (exact for
/// the integer fields, which stay below 2^53: bytes of framebuffer, a bitmask of a few bits).
pub trait SignalValue: Copy {
    fn to_value(self) -> Option<f64>;
    fn from_value(v: Option<f64>) -> Self;
    /// The stored integer (see [`Signal::get_int`]).
    fn to_int(self) -> Option<i64>;
    fn from_int(v: Option<i64>) -> Self;
}

impl SignalValue for Option<f64> {
    fn to_value(self) -> Option<f64> {
        self
    }
    fn from_value(v: Option<f64>) -> Self {
        v
    }
    fn to_int(self) -> Option<i64> {
        self.map(|v| v.round() as i64)
    }
    fn from_int(v: Option<i64>) -> Self {
        v.map(|v| v as f64)
    }
}

impl SignalValue for Option<i64> {
    fn to_value(self) -> Option<f64> {
        self.map(|v| v as f64)
    }
    fn from_value(v: Option<f64>) -> Self {
        v.map(|v| v as i64)
    }
    fn to_int(self) -> Option<i64> {
        self
    }
    fn from_int(v: Option<i64>) -> Self {
        v
    }
}

impl SignalValue for Option<u64> {
    fn to_value(self) -> Option<f64> {
        self.map(|v| v as f64)
    }
    fn from_value(v: Option<f64>) -> Self {
        v.map(|v| v as u64)
    }
    // Bit-for-bit: a bitmask's bit 63 becomes the sign.
    fn to_int(self) -> Option<i64> {
        self.map(|v| v as i64)
    }
    fn from_int(v: Option<i64>) -> Self {
        v.map(|v| v as u64)
    }
}

/// A gauge reading the `Sample` field of its name (so the name, the JSON field and the accessors
/// cannot disagree), stored at 0.01.
macro_rules! gauge {
    ($field:ident, $unit:expr, $doc:expr) => {
        Signal {
            name: stringify!($field),
            unit: $unit,
            kind: SignalKind::Gauge,
            doc: $doc,
            get: |s| SignalValue::to_value(s.$field),
            set: |s, v| s.$field = SignalValue::from_value(v),
            get_int: |s| SignalValue::to_int(s.$field),
            set_int: |s, v| s.$field = SignalValue::from_int(v),
            precision: Precision::Scaled(100),
            metric: None,
        }
    };
}

const EXACT: Precision = Precision::Exact;
/// Milli-units: 1 mW, 1 mJ, 0.001 MiB/s.
const MILLI: Precision = Precision::Scaled(1000);

/// Every signal, in the order the rule-field API lists them.
pub const SIGNALS: &[Signal] = &[
    gauge!(gpu_util_pct, "%", "kernel utilization: % of time at least one kernel ran")
        .exported("gpu_util_pct", "Kernel utilization: % of time a kernel ran (NVML)"),
    gauge!(sm_active_pct, "%", "SM activity (SMACT): % of SMs busy, averaged over the interval")
        .exported("gpu_sm_active_pct", "SM activity (SMACT): % of SMs busy"),
    gauge!(sm_occupancy_pct, "%", "SM occupancy (SMOCC): resident warps / maximum warps")
        .exported("gpu_sm_occupancy_pct", "SM occupancy: resident warps / max warps, %"),
    gauge!(tensor_active_pct, "%", "% of time the tensor pipes were busy")
        .exported("gpu_tensor_active_pct", "Tensor pipe activity, %"),
    gauge!(dram_active_pct, "%", "% of peak memory bandwidth used")
        .exported("gpu_dram_active_pct", "DRAM bandwidth used, % of peak"),
    gauge!(gr_engine_active_pct, "%", "graphics engine active (GRACT)"),
    gauge!(fp16_active_pct, "%", "FP16 pipe activity"),
    gauge!(tensor_hmma_active_pct, "%", "HMMA tensor pipe (FP16/BF16 matrix math) activity"),
    gauge!(fp32_active_pct, "%", "FP32 pipe activity"),
    gauge!(fp64_active_pct, "%", "FP64 pipe activity"),
    gauge!(int_active_pct, "%", "integer pipe activity"),
    gauge!(mem_util_pct, "%", "memory-controller busy time"),
    gauge!(mem_used_bytes, "bytes", "framebuffer in use")
        .stored(EXACT)
        .exported("gpu_memory_used_bytes", "Framebuffer memory in use, bytes"),
    gauge!(mem_total_bytes, "bytes", "framebuffer size").stored(EXACT),
    gauge!(power_w, "W", "power draw").stored(MILLI).exported("gpu_power_watts", "Power draw, W"),
    gauge!(power_limit_w, "W", "enforced power limit").stored(MILLI),
    gauge!(energy_j, "J", "energy counter since driver load").stored(MILLI).counter(),
    gauge!(temp_c, "°C", "GPU temperature"),
    gauge!(sm_clock_mhz, "MHz", "SM clock").stored(Precision::Scaled(10)),
    Signal {
        kind: SignalKind::Bitmask,
        ..gauge!(throttle_reasons, "bitmask", "NVML clock-event reasons").stored(EXACT)
    },
    gauge!(pcie_tx_mib_s, "MiB/s", "PCIe transmit").stored(MILLI),
    gauge!(pcie_rx_mib_s, "MiB/s", "PCIe receive").stored(MILLI),
    gauge!(nvlink_tx_mib_s, "MiB/s", "NVLink transmit").stored(MILLI),
    gauge!(nvlink_rx_mib_s, "MiB/s", "NVLink receive").stored(MILLI),
];

/// The signal named `name`.
pub fn signal(name: &str) -> Option<&'static Signal> {
    SIGNALS.iter().find(|s| s.name == name)
}

/// Position of `name` in [`SIGNALS`]; a compile error when used in a const with an unknown name.
pub const fn index_of(name: &str) -> usize {
    let mut i = 0;
    while i < SIGNALS.len() {
        if same(SIGNALS[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("not a signal in SIGNALS")
}

/// The accessors of `names`, resolved at compile time (for hot loops over a fixed list).
pub const fn getters<const N: usize>(names: [&str; N]) -> [fn(&Sample) -> Option<f64>; N] {
    let mut out: [fn(&Sample) -> Option<f64>; N] = [SIGNALS[0].get; N];
    let mut i = 0;
    while i < N {
        out[i] = SIGNALS[index_of(names[i])].get;
        i += 1;
    }
    out
}

/// What `names` keep at rest, in their order (const: a compile error for an unknown name).
pub const fn precisions<const N: usize>(names: [&str; N]) -> [Precision; N] {
    let mut out = [Precision::Exact; N];
    let mut i = 0;
    while i < N {
        out[i] = SIGNALS[index_of(names[i])].precision;
        i += 1;
    }
    out
}

/// Position of `name` in `names` (const: a compile error when absent).
pub const fn position<const N: usize>(names: [&str; N], name: &str) -> usize {
    let mut i = 0;
    while i < N {
        if same(names[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("name not in the list")
}

/// How many signals have one of `units` (const: sizes [`fields_with_units`]).
pub const fn count_units(units: &[&str]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < SIGNALS.len() {
        if has_unit(&SIGNALS[i], units) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names and accessors of the signals with one of `units`, in table order; `N` is
/// [`count_units`] of the same units.
pub const fn fields_with_units<const N: usize>(units: &[&str]) -> [FloatField; N] {
    let mut out: [FloatField; N] = [(SIGNALS[0].name, SIGNALS[0].get); N];
    let (mut i, mut n) = (0, 0);
    while i < SIGNALS.len() {
        if has_unit(&SIGNALS[i], units) {
            out[n] = (SIGNALS[i].name, SIGNALS[i].get);
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "N is not count_units(units)");
    out
}

const fn has_unit(signal: &Signal, units: &[&str]) -> bool {
    let mut j = 0;
    while j < units.len() {
        if same(signal.unit, units[j]) {
            return true;
        }
        j += 1;
    }
    false
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_accessors_read_their_own_field() {
        let mut names: Vec<_> = SIGNALS.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SIGNALS.len());
        // Serialise a sample whose every signal has a distinct value: each accessor must read
        // the JSON field of its own name.
        let mut json = serde_json::json!({ "ts_ms": 1 });
        for (i, s) in SIGNALS.iter().enumerate() {
            json[s.name] = serde_json::json!(i + 1);
        }
        let sample: Sample = serde_json::from_value(json).unwrap();
        for (i, s) in SIGNALS.iter().enumerate() {
            assert_eq!((s.get)(&sample), Some((i + 1) as f64), "{}", s.name);
        }
        // Each setter writes its own field, and only it: setting every signal of an empty sample
        // from the serialised one gives the same sample back.
        let mut rebuilt = Sample { ts_ms: 1, ..Sample::default() };
        for s in SIGNALS {
            let before = serde_json::to_value(&rebuilt).unwrap();
            (s.set)(&mut rebuilt, (s.get)(&sample));
            let after = serde_json::to_value(&rebuilt).unwrap();
            let changed: Vec<_> =
                after.as_object().unwrap().keys().filter(|k| before[k.as_str()] != after[k.as_str()]).collect();
            assert_eq!(changed, [s.name], "{} set other fields", s.name);
            (s.set)(&mut rebuilt, (s.get)(&sample));
        }
        assert_eq!(rebuilt, sample);
        // `None` clears.
        (signal("tensor_hmma_active_pct").unwrap().set)(&mut rebuilt, None);
        assert_eq!(rebuilt.tensor_hmma_active_pct, None);
        // Every field of a sample is a signal, but for its identity and its lists: a measurement
        // added to `Sample` without its row here fails (the store and the merge read the table).
        let full = serde_json::to_value(Sample {
            gpu_index: Some(0),
            name: Some("x".into()),
            processes: Some(vec![]),
            ..sample.clone()
        })
        .unwrap();
        for field in full.as_object().unwrap().keys() {
            let not_signal = ["ts_ms", "uuid", "gpu_index", "name", "processes", "allocations"];
            assert!(signal(field).is_some() || not_signal.contains(&field.as_str()), "{field} has no signal row");
        }
        assert_eq!(index_of("dram_active_pct"), 4);
        assert_eq!(signal("energy_j").map(|s| s.kind), Some(SignalKind::Counter));
        assert!(signal("efficiency").is_none());
    }
}
