//! Liveness and readiness: `GET /healthz` and `GET /readyz` (outside `/api/v1`, no auth).

use std::collections::BTreeMap;

use fleetlens_core::StoreBackend;
use serde::{Deserialize, Serialize};

/// A background job in one server process (see the server's `jobs` module).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobStatus {
    /// This process holds the job's lock and runs it.
    pub leader: bool,
    /// Runs completed in this process.
    pub runs: u64,
}

/// The liveness answer's status: a process that answers at all is up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LiveStatus {
    /// The only value (`"ok"`).
    #[default]
    Ok,
}

/// `GET /healthz`: the process is up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `ok`.
    pub status: LiveStatus,
    /// Per background job (`retention`, `rollups`, …): whether this replica leads it.
    pub jobs: BTreeMap<String, JobStatus>,
}

/// Whether the process can serve (`GET /readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReadyStatus {
    /// It can (200).
    Ready,
    /// Its database does not answer (503).
    Unavailable,
}

/// `GET /readyz`: whether the process can serve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// `ready` (200) or `unavailable` (503).
    pub status: ReadyStatus,
    /// The store's backend: `sqlite` or `postgres`.
    pub database: StoreBackend,
    /// Why it is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
