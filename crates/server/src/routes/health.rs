//! Liveness and readiness.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use fleetlens_api::health::{Health, LiveStatus, Readiness, ReadyStatus};

use crate::state::AppState;

/// The process is up; `jobs` tells which background jobs this replica leads (see crate::jobs).
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()), responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    let jobs = crate::jobs::statuses().into_iter().map(|(name, status)| (name.to_string(), status)).collect();
    Json(Health { status: LiveStatus::Ok, jobs })
}

/// The process can serve: its database answers.
#[utoipa::path(get, path = "/readyz", tag = "meta", security(()), responses((status = 200, body = Readiness), (status = 503, description = "The database does not answer", body = Readiness)))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let database = state.store.backend();
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, Json(Readiness { status: ReadyStatus::Ready, database, error: None })),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            let error = Some("database unreachable".into());
            (StatusCode::SERVICE_UNAVAILABLE, Json(Readiness { status: ReadyStatus::Unavailable, database, error }))
        }
    }
}
