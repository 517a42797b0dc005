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
