//! Bodies of `GET /api/v1/events`: what agents saw happen to GPUs between samples.

use fleetlens_core::GpuEventKind;
use serde::{Deserialize, Serialize};

/// One event of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventView {
    pub id: i64,
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
