//! The events of `GET /api/v1/stream` (server-sent events; docs/API.md, "Live stream"). Each
//! event's `data` is one of these types as JSON; its SSE `event:` name is the matching
//! `EVENT_*` constant.

use std::collections::BTreeMap;

use fleetlens_core::WorkloadState;
use serde::{Deserialize, Serialize};

use crate::AlertView;

/// Path of the live stream.
pub const STREAM_PATH: &str = "/api/v1/stream";

/// First event of every connection: [`StreamSnapshot`].
pub const EVENT_SNAPSHOT: &str = "snapshot";
/// [`GpuStateChange`].
pub const EVENT_GPU_STATE: &str = "gpu_state";
/// [`AlertChange`].
pub const EVENT_ALERT: &str = "alert";
/// [`LiveSummary`].
pub const EVENT_SUMMARY: &str = "summary";
/// [`StreamSnapshot`], sent instead of the events a client fell behind on.
pub const EVENT_RESYNC: &str = "resync";

/// One GPU in a snapshot: its current state as `GET /gpus` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamGpu {
    pub uuid: String,
    pub host: String,
    /// METRICS.md state name.
    pub state: WorkloadState,
    /// Time of the GPU's newest sample.
    pub last_seen_ms: i64,
}

/// `snapshot` and `resync`: everything a dashboard shows live, as of event `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamSnapshot {
    /// The id of the newest event this snapshot already contains: apply only later ones.
    pub seq: u64,
    pub at_ms: i64,
    /// Every GPU of the organisation, by UUID.
    pub gpus: Vec<StreamGpu>,
    /// The open (`pending`, `firing`) alerts, newest first, at most 1,000.
    pub alerts: Vec<AlertView>,
    pub summary: LiveSummary,
}

/// `gpu_state`: a GPU's current state changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuStateChange {
    pub uuid: String,
    pub host: String,
    /// The state before; `null` for a GPU new to the organisation.
    pub previous: Option<WorkloadState>,
    pub state: WorkloadState,
    /// Time of the GPU's newest sample.
    pub last_seen_ms: i64,
    /// When the server saw the change.
    pub at_ms: i64,
}

/// What happened to an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertChangeKind {
    /// Opened (pending, or firing at once).
    New,
    /// Was pending, fires now.
    Firing,
    Resolved,
    /// A pending alert whose condition cleared before it fired: it is gone from the API;
    /// `alert` is its last state.
    Withdrawn,
}

/// `alert`: an alert opened, began firing, resolved, or was withdrawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertChange {
    pub change: AlertChangeKind,
    /// As an element of `GET /alerts`.
    pub alert: AlertView,
}

/// `summary`: the live fleet counts, sent when one of them changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveSummary {
    pub at_ms: i64,
    pub gpu_count: u32,
    /// GPUs not `offline`.
    pub reporting: u32,
    /// GPUs per current state; every METRICS.md state is present (0 included).
    pub by_state: BTreeMap<String, u32>,
    pub alerts_pending: u32,
    pub alerts_firing: u32,
}

/// `GET /api/v1/stream`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct StreamQuery {
    /// `true`: send the `snapshot` and end (one consistent reading, for scripts and for
    /// clients that poll instead of streaming).
    pub once: Option<bool>,
}
