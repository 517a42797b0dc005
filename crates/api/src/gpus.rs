//! The body of `GET /api/v1/gpus/{uuid}` (and `PUT /gpus/{uuid}/host`): one GPU with its
//! current window and data-quality flags.

use serde::{Deserialize, Serialize};

use crate::{GpuSummary, StateWindow};

/// Readings of one kind that could not be true (docs/METRICS.md, "Data quality"): they were
/// dropped at ingest (stored as absent) and are in no mean, rollup or state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DataQualityFlag {
    /// `activity_over_100`, `util_without_gr_engine`, `energy_counter_backwards` or
    /// `clock_zero_while_busy`.
    pub flag: String,
    /// When a reading gets this flag.
    pub rule: String,
    /// The fields dropped from a flagged sample.
    pub dropped: Vec<String>,
    /// Samples flagged since `data_quality_from_ms`.
    pub samples: i64,
    /// Start of the newest minute with a flagged sample.
    pub last_minute_ms: i64,
}

/// `GET /api/v1/gpus/{uuid}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuDetail {
    #[serde(flatten)]
    pub gpu: GpuSummary,
    /// The current window: state, the rule that matched, advice.
    pub current: StateWindow,
    /// Data-quality flags of the last 24 hours (empty: every reading was plausible).
    pub data_quality: Vec<DataQualityFlag>,
    /// Start of the span `data_quality` counts (the minute 24 hours ago).
    pub data_quality_from_ms: i64,
}

/// `PUT /api/v1/gpus/{uuid}/host`: the host a GPU now belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MoveGpuBody {
    /// The GPU's new host, as its agent reports it (`host` of its batches).
    pub host: String,
}

/// `GET /api/v1/gpus/{uuid}/samples`: a time range and a cap.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct RangeQuery {
    /// RFC 3339 or Unix milliseconds (default: an hour before `to`).
    pub from: Option<String>,
    /// RFC 3339 or Unix milliseconds (default: now).
    pub to: Option<String>,
    /// At most this many samples (default 10,000). Text, so that a value that is not a number
    /// is the handler's 400 naming `limit` rather than the extractor's.
    #[cfg_attr(feature = "openapi", param(value_type = Option<u32>, minimum = 1, maximum = 100_000))]
    pub limit: Option<String>,
}

/// `GET /api/v1/gpus/{uuid}/series`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct SeriesQuery {
    /// RFC 3339 or Unix milliseconds.
    pub from: Option<String>,
    /// RFC 3339 or Unix milliseconds.
    pub to: Option<String>,
    /// `1m`, `1h`, or `auto` (default: 1m up to 36 hours, else 1h).
    #[cfg_attr(feature = "openapi", param(pattern = "^(1m|1h|auto)$"))]
    pub resolution: Option<String>,
}

/// `GET /api/v1/gpus/{uuid}/states`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct StatesQuery {
    /// RFC 3339 or Unix milliseconds (default: an hour before `to`).
    pub from: Option<String>,
    /// RFC 3339 or Unix milliseconds (default: now).
    pub to: Option<String>,
    /// Window width in seconds (default: the organisation's `window_s`, 60).
    #[cfg_attr(feature = "openapi", param(value_type = Option<u32>, minimum = 1, maximum = 2_678_400))]
    pub window_s: Option<String>,
}

/// `GET /api/v1/gpus/{uuid}/samples`: a time range, a cap and the answer's layout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct SamplesQuery {
    /// RFC 3339 or Unix milliseconds (default: an hour before `to`).
    pub from: Option<String>,
    /// RFC 3339 or Unix milliseconds (default: now).
    pub to: Option<String>,
    /// At most this many samples (default 10,000). Text, so that a value that is not a number
    /// is the handler's 400 naming `limit` rather than the extractor's.
    #[cfg_attr(feature = "openapi", param(value_type = Option<u32>, minimum = 1, maximum = 100_000))]
    pub limit: Option<String>,
    /// `rows` (default): one object per sample ([`crate::SampleList`]); `columns`: one array
    /// per signal ([`SampleColumns`]), about a tenth of the bytes, for reading hours of raw data.
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>, pattern = "^(rows|columns)$"))]
    pub format: Option<String>,
}

impl SamplesQuery {
    /// The range and cap alone.
    pub fn range(&self) -> RangeQuery {
        RangeQuery { from: self.from.clone(), to: self.to.clone(), limit: self.limit.clone() }
    }
}

/// One signal's values in [`SampleColumns`], one per sample, null where not measured:
/// integers for the signals kept exactly (bytes, counts; a bitmask as its unsigned 64 bits),
/// reals for the others.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SignalColumn {
    Integers(Vec<Option<i64>>),
    Bitmasks(Vec<Option<u64>>),
    Reals(Vec<Option<f64>>),
}

/// A number of a [`SignalColumn`] as JSON has it.
#[derive(Clone, Copy)]
enum JsonNumber {
    Signed(i64),
    Unsigned(u64),
    Real(f64),
}

impl<'de> Deserialize<'de> for JsonNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = JsonNumber;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E>(self, v: i64) -> Result<JsonNumber, E> {
                Ok(JsonNumber::Signed(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<JsonNumber, E> {
                Ok(i64::try_from(v).map_or(JsonNumber::Unsigned(v), JsonNumber::Signed))
            }
            fn visit_f64<E>(self, v: f64) -> Result<JsonNumber, E> {
                Ok(JsonNumber::Real(v))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Which variant of [`SignalColumn`] a signal's values take.
#[derive(Clone, Copy)]
enum ColumnKind {
    Integers,
    Bitmasks,
    Reals,
}

impl ColumnKind {
    /// As the rows carry the signal: integers kept exactly, a bitmask as its 64 bits, the rest
    /// as reals.
    fn of(signal: &fleetlens_core::signal::Signal) -> Self {
        use fleetlens_core::signal::{Precision, SignalKind};
        match (signal.precision, signal.kind) {
            (Precision::Exact, SignalKind::Bitmask) => ColumnKind::Bitmasks,
            (Precision::Exact, _) => ColumnKind::Integers,
            (Precision::Scaled(_), _) => ColumnKind::Reals,
        }
    }
}

impl SignalColumn {
    /// The column of a signal this build does not know (a newer server's), from the numbers
    /// JSON has for it: `Reals` when it has a real number, `Bitmasks` when an integer beyond
    /// `i64`, else `Integers`. (A known signal takes the kind the signal table gives it, so a
    /// column all null reads back as what it was written as: see [`ColumnOf`].)
    fn from_json(values: Vec<Option<JsonNumber>>) -> Self {
        let has = |wanted: fn(&JsonNumber) -> bool| values.iter().flatten().any(wanted);
        let kind = if has(|v| matches!(v, JsonNumber::Real(_))) {
            ColumnKind::Reals
        } else if has(|v| matches!(v, JsonNumber::Unsigned(_))) {
            ColumnKind::Bitmasks
        } else {
            ColumnKind::Integers
        };
        match kind {
            ColumnKind::Integers => SignalColumn::Integers(map(values, JsonNumber::integer)),
            ColumnKind::Bitmasks => SignalColumn::Bitmasks(map(values, JsonNumber::bits)),
            ColumnKind::Reals => SignalColumn::Reals(map(values, JsonNumber::real)),
        }
    }
}

fn map<T>(values: Vec<Option<JsonNumber>>, f: fn(JsonNumber) -> T) -> Vec<Option<T>> {
    values.into_iter().map(|v| v.map(f)).collect()
}

impl JsonNumber {
    fn real(self) -> f64 {
        match self {
            JsonNumber::Signed(i) => i as f64,
            JsonNumber::Unsigned(u) => u as f64,
            JsonNumber::Real(r) => r,
        }
    }
    fn bits(self) -> u64 {
        match self {
            JsonNumber::Signed(i) => i as u64,
            JsonNumber::Unsigned(u) => u,
            JsonNumber::Real(r) => r as u64,
        }
    }
    fn integer(self) -> i64 {
        match self {
            JsonNumber::Signed(i) => i,
            JsonNumber::Unsigned(u) => u as i64,
            JsonNumber::Real(r) => r as i64,
        }
    }
}

/// `SampleColumns::signals`, read in one pass: serde's untagged enums would buffer each array
/// and try every variant in turn, which costs more than the rest of the answer. A signal this
/// build knows is read straight into its kind's column; only an unknown one is held as
/// numbers until its kind is known.
fn signals_from_json<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, SignalColumn>, D::Error> {
    struct Signals;
    impl<'de> serde::de::Visitor<'de> for Signals {
        type Value = std::collections::BTreeMap<String, SignalColumn>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of signal columns")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = std::collections::BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                let column = match fleetlens_core::signal::SIGNALS.iter().find(|s| s.name == name) {
                    Some(signal) => map.next_value_seed(ColumnOf(ColumnKind::of(signal)))?,
                    None => SignalColumn::from_json(map.next_value()?),
                };
                out.insert(name, column);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Signals)
}

/// Reads one signal's array into the column of a known kind.
struct ColumnOf(ColumnKind);

impl<'de> serde::de::DeserializeSeed<'de> for ColumnOf {
    type Value = SignalColumn;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<SignalColumn, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ColumnOf {
    type Value = SignalColumn;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of numbers and nulls")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<SignalColumn, A::Error> {
        fn read<'de, A: serde::de::SeqAccess<'de>, T>(
            seq: &mut A,
            convert: fn(JsonNumber) -> T,
        ) -> Result<Vec<Option<T>>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(v) = seq.next_element::<Option<JsonNumber>>()? {
                out.push(v.map(convert));
            }
            Ok(out)
        }
        Ok(match self.0 {
            ColumnKind::Integers => SignalColumn::Integers(read(&mut seq, JsonNumber::integer)?),
            ColumnKind::Bitmasks => SignalColumn::Bitmasks(read(&mut seq, JsonNumber::bits)?),
            ColumnKind::Reals => SignalColumn::Reals(read(&mut seq, JsonNumber::real)?),
        })
    }
}

/// `GET /api/v1/gpus/{uuid}/samples?format=columns`: the samples of [`crate::SampleList`] as
/// columns. Entry `i` of every per-sample array belongs to the sample at `ts_ms[i]`. The
/// processes are a table of their own (a row per process per sample), and pod allocations,
/// which repeat for minutes on end, are lists given once that the samples refer to by index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SampleColumns {
    pub uuid: String,
    pub from_ms: i64,
    pub to_ms: i64,
    /// True when `limit` cut the samples short; ask again from the last `ts_ms` + 1.
    pub truncated: bool,
    /// Sample times, ascending.
    pub ts_ms: Vec<i64>,
    /// Every signal of docs/METRICS.md by its name. (In the schema: arrays of numbers, since
    /// JSON Schema's `oneOf` over integer and real arrays would match a column of whole
    /// numbers twice.)
    #[serde(deserialize_with = "signals_from_json")]
    #[cfg_attr(feature = "openapi", schema(value_type = std::collections::BTreeMap<String, Vec<Option<f64>>>))]
    pub signals: std::collections::BTreeMap<String, SignalColumn>,
    /// Per sample: how many rows of `processes` are its (they follow the previous sample's);
    /// null where the GPU reported no process list, 0 for an empty one.
    pub process_count: Vec<Option<u32>>,
    pub processes: ProcessColumns,
    /// The pod-allocation lists of these samples, the same way (the first is the empty one).
    pub allocation_lists: Vec<Vec<fleetlens_core::PodAllocation>>,
    /// Per sample: its allocations in `allocation_lists`.
    pub allocations: Vec<u32>,
}

impl SampleColumns {
    /// The columns of `samples` (ascending by time).
    pub fn new(uuid: String, from_ms: i64, to_ms: i64, truncated: bool, samples: &[fleetlens_core::Sample]) -> Self {
        Self::from_table(uuid, from_ms, to_ms, truncated, fleetlens_core::SampleTable::from_samples(samples))
    }

    /// The answer holding `table`'s columns as they are (moved, not copied; a bitmask's
    /// integers read as their unsigned bits).
    pub fn from_table(
        uuid: String,
        from_ms: i64,
        to_ms: i64,
        truncated: bool,
        table: fleetlens_core::SampleTable,
    ) -> Self {
        use fleetlens_core::SignalValues;
        let signals = fleetlens_core::signal::SIGNALS
            .iter()
            .zip(table.signals)
            .map(|(signal, values)| {
                let column = match (ColumnKind::of(signal), values) {
                    (ColumnKind::Bitmasks, SignalValues::Integers(v)) => {
                        SignalColumn::Bitmasks(v.into_iter().map(|bits| bits.map(|b| b as u64)).collect())
                    }
                    (_, SignalValues::Integers(v)) => SignalColumn::Integers(v),
                    (_, SignalValues::Reals(v)) => SignalColumn::Reals(v),
                };
                (signal.name.to_owned(), column)
            })
            .collect();
        SampleColumns {
            uuid,
            from_ms,
            to_ms,
            truncated,
            ts_ms: table.ts_ms,
            signals,
            process_count: table.process_count,
            processes: table.processes,
            allocation_lists: table.allocation_lists,
            allocations: table.allocations,
        }
    }
}

/// The processes of [`SampleColumns`] (defined in core, where the store builds them).
pub use fleetlens_core::ProcessColumns;

/// The answer of `GET /api/v1/gpus/{uuid}/samples`, in the layout `format` asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SamplesAnswer {
    Rows(crate::SampleList),
    Columns(SampleColumns),
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetlens_core::{GpuProcess, Sample};

    fn sample(ts_ms: i64, pid: Option<u32>, throttle: Option<u64>) -> Sample {
        Sample {
            ts_ms,
            gpu_util_pct: Some(ts_ms as f64 / 2.0),
            throttle_reasons: throttle,
            processes: pid.map(|pid| vec![GpuProcess { pid, used_bytes: Some(ts_ms * 10), ..Default::default() }]),
            ..Default::default()
        }
    }

    #[test]
    fn columns_hold_each_sample_and_repeated_lists_once() {
        let samples = [
            sample(1, Some(7), None),
            sample(2, Some(7), Some(1 << 63)),
            sample(3, None, Some(4)),
            sample(4, Some(8), None),
            sample(5, Some(7), None),
        ];
        let c = SampleColumns::new("GPU-x".into(), 0, 10, false, &samples);
        assert_eq!(c.ts_ms, [1, 2, 3, 4, 5]);
        assert_eq!(
            c.signals["gpu_util_pct"],
            SignalColumn::Reals(vec![Some(0.5), Some(1.0), Some(1.5), Some(2.0), Some(2.5)])
        );
        // A bitmask keeps bit 63, as the rows do.
        assert_eq!(
            c.signals["throttle_reasons"],
            SignalColumn::Bitmasks(vec![None, Some(1 << 63), Some(4), None, None])
        );
        assert_eq!(c.signals["sm_active_pct"], SignalColumn::Reals(vec![None; 5]));
        assert_eq!(c.process_count, [Some(1), Some(1), None, Some(1), Some(1)]);
        assert_eq!(c.processes.identities.iter().map(|p| p.pid).collect::<Vec<_>>(), [7, 8], "each process once");
        assert_eq!(c.processes.process, [0, 0, 1, 0]);
        assert_eq!(c.processes.used_bytes, [Some(10), Some(20), Some(40), Some(50)], "the readings per row");
        let lists = c.processes.lists(&c.process_count);
        assert_eq!(lists, samples.iter().map(|s| s.processes.clone()).collect::<Vec<_>>());
        assert_eq!((c.allocation_lists.len(), c.allocations.as_slice()), (1, &[0u32; 5][..]));
        // Read back as it was written (a column of whole reals stays reals: JSON writes `1.0`).
        let back: SampleColumns = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let whole = SampleColumns::new("GPU-x".into(), 0, 10, false, &[sample(2, None, Some(3))]);
        assert_eq!(serde_json::from_str::<SampleColumns>(&serde_json::to_string(&whole).unwrap()).unwrap(), whole);
        // A signal of a newer server: its kind from its numbers.
        let mut json = serde_json::to_value(&whole).unwrap();
        json["signals"]["future_pct"] = serde_json::json!([1, 2.5]);
        json["signals"]["future_bits"] = serde_json::json!([u64::MAX]);
        json["signals"]["future_count"] = serde_json::json!([null, -3]);
        let newer: SampleColumns = serde_json::from_value(json).unwrap();
        assert_eq!(newer.signals["future_pct"], SignalColumn::Reals(vec![Some(1.0), Some(2.5)]));
        assert_eq!(newer.signals["future_bits"], SignalColumn::Bitmasks(vec![Some(u64::MAX)]));
        assert_eq!(newer.signals["future_count"], SignalColumn::Integers(vec![None, Some(-3)]));
    }
}
