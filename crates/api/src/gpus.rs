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
