//! `GET /api/v1/events`: what agents saw happen to GPUs between samples (XID errors from the
//! driver, GPUs that stopped answering and came back), newest first.

use axum::Json;
use axum::extract::{Query, State};
use fleetlens_api::events::{EventList, EventView};
use fleetlens_core::GpuEventKind;
use fleetlens_core::time_text::format_rfc3339_ms;
use fleetlens_store::{EventFilter, GpuEventRecord, Scope};

pub use fleetlens_api::events::EventQuery;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::routes::gpus::{RangeQuery, range};
use crate::state::AppState;

/// The API's view of a stored event. The store keeps the kind as text that ingest checked;
/// one that no longer parses (written by a newer server) is left out rather than guessed.
fn event_view(e: GpuEventRecord) -> Option<EventView> {
    let Some(kind) = GpuEventKind::parse(&e.kind) else {
        tracing::warn!(id = e.id.get(), kind = %e.kind, "stored GPU event of an unknown kind left out");
        return None;
    };
    Some(EventView {
        id: e.id,
        ts_ms: e.ts_ms,
        time: format_rfc3339_ms(e.ts_ms),
        gpu: e.gpu_uuid,
        host: e.host,
        kind,
        xid: e.xid,
        message: e.message,
        received_ms: e.received_ms,
    })
}

const DAY_MS: i64 = 86_400_000;

#[utoipa::path(get, path = "/events", tag = "gpus", params(EventQuery), responses((status = 200, body = EventList), crate::openapi::QueryErrors))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<EventQuery>,
) -> ApiResult<Json<EventList>> {
    caller.require(Scope::Read)?;
    // A day by default: events are rare, and an incident is usually looked at the day after.
    let from = q.from.clone().or_else(|| {
        let to = q.to.as_deref().map_or(Ok(crate::time::now_ms() + 1), |t| crate::time::parse_time_param("to", t));
        to.ok().map(|t| t.saturating_sub(DAY_MS).max(crate::time::MIN_TIME_MS).to_string())
    });
    let (from_ms, to_ms) = range(&RangeQuery { from, to: q.to.clone(), limit: None })?;
    let kind = match q.kind.as_deref().map(str::trim) {
        None => None,
        Some(k) => Some(
            GpuEventKind::parse(k)
                .ok_or_else(|| ApiError::Unprocessable {
                    field: "kind".into(),
                    message: "one of xid, gpu_lost, gpu_recovered, gpm_unavailable, gpm_available".into(),
                })?
                .as_str()
                .to_string(),
        ),
    };
    let limit = match q.limit.as_deref() {
        None => 500,
        Some(l) => match l.trim().parse::<i64>() {
            Err(_) if !crate::time::is_integer_text(l) => {
                return Err(ApiError::BadParam {
                    field: "limit".into(),
                    message: format!("{l:?} is not a number: give a whole number from 1 to 10000"),
                });
            }
            Err(_) => {
                return Err(ApiError::Unprocessable {
                    field: "limit".into(),
                    message: "a whole number from 1 to 10000".into(),
                });
            }
            Ok(n) => Some(n).filter(|l| (1..=10_000).contains(l)).ok_or_else(|| ApiError::Unprocessable {
                field: "limit".into(),
                message: "a whole number from 1 to 10000".into(),
            })?,
        },
    };
    let filter = EventFilter {
        gpu_uuid: q.gpu.as_deref().map(str::trim).filter(|g| !g.is_empty()).map(str::to_string),
        kind,
        from_ms,
        to_ms,
        before_id: q.before_id,
        limit,
    };
    let events = state.store.gpu_events(caller.org, &filter).await?;
    Ok(Json(EventList { events: events.into_iter().filter_map(event_view).collect() }))
}
