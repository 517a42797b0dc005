//! Liveness and readiness.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::AppState;

/// The process is up; `jobs` tells which background jobs this replica leads (see crate::jobs).
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()), responses((status = 200, description = "`{\"status\": \"ok\", \"jobs\": {…}}`", body = Object)))]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok", "jobs": crate::jobs::statuses()}))
}

/// The process can serve: its database answers.
#[utoipa::path(get, path = "/readyz", tag = "meta", security(()), responses((status = 200, description = "`{\"status\": \"ready\", \"database\"}`", body = Object), (status = 503, description = "The database does not answer", body = Object)))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready", "database": state.store.backend()}))),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    json!({"status": "unavailable", "database": state.store.backend(), "error": "database unreachable"}),
                ),
            )
        }
    }
}
