//! A training job's reported throughput, the input of its MFU (docs/METRICS.md).

use serde::{Deserialize, Serialize};

use crate::datasheet::Precision;

// The store reads this flattened into `JobRecord` (with its key and creation time); the API
// sends it flattened into `Job` (with its key and MFU). The doc comment below is the OpenAPI
// schema's description.
/// What a job reported: its GPUs, its span and the model FLOP/s it achieved over all of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct JobThroughput {
    pub name: String,
    /// UUIDs of the GPUs the job ran on.
    #[serde(rename = "gpus")]
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "crate::json_text::StrictJsonText<Vec<String>>"))]
    pub gpu_uuids: Vec<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    /// As reported (`fp16` stays `fp16`); stored as its name in a TEXT column.
    pub precision: Precision,
    pub achieved_flops_per_s: f64,
}
