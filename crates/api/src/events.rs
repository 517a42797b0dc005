//! Bodies of `GET /api/v1/events`: what agents saw happen to GPUs between samples.

use fleetlens_core::{GpuEventId, GpuEventKind};
use serde::{Deserialize, Serialize};

/// One event of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventView {
    pub id: GpuEventId,
    pub ts_ms: i64,
    /// `ts_ms` as RFC 3339 (UTC).
    pub time: String,
    pub gpu: String,
    pub host: String,
    pub kind: GpuEventKind,
    /// The XID number, for `xid` events where the driver gave it.
    pub xid: Option<i64>,
    pub message: Option<String>,
    pub received_ms: i64,
}

/// `{"events": [...]}`, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventList {
    pub events: Vec<EventView>,
}

/// `GET /api/v1/events` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct EventQuery {
    /// RFC 3339 or Unix milliseconds (default: a day before `to`).
    pub from: Option<String>,
    /// RFC 3339 or Unix milliseconds (default: now).
    pub to: Option<String>,
    /// Only this GPU (UUID).
    pub gpu: Option<String>,
    /// `xid`, `gpu_lost`, `gpu_recovered`, `gpm_unavailable` or `gpm_available`.
    #[cfg_attr(feature = "openapi", param(pattern = "^(xid|gpu_lost|gpu_recovered|gpm_unavailable|gpm_available)$"))]
    pub kind: Option<String>,
    /// Only events with an id below this (paging: the last id of the previous page).
    pub before_id: Option<GpuEventId>,
    /// At most this many events (default 500).
    #[cfg_attr(feature = "openapi", param(value_type = Option<u32>, minimum = 1, maximum = 10_000))]
    pub limit: Option<String>,
}
