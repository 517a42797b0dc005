//! Job runs and their report cards (docs/ACTIONS.md): `GET /job-runs`, `GET /job-runs/{id}`,
//! `GET /jobs/{id}/report`, `POST /jobs/{id}/end`, and the report routes (owner → channel).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use fleetlens_api::actions::{EndRequest, JobRun, NewReportRoute, PlansQuery, ReportRouteView, RunQuery};
use fleetlens_core::jobcard::{JobCard, JobRunStatus, ReportRouteSpec};
use fleetlens_core::{JobRunId, ReportRouteId};
use fleetlens_store::Scope;
use fleetlens_store::actions::{JobRunFilter, JobRunRecord, ReportRoute};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, JsonBody};
use crate::state::AppState;
use crate::time::{MAX_TIME_MS, MIN_TIME_MS, now_ms, parse_query_time};

fn view(r: JobRunRecord) -> JobRun {
    JobRun {
        id: r.id,
        key: r.run_key,
        host: r.host,
        owner: r.owner,
        gpus: r.gpu_uuids,
        first_ms: r.first_ms,
        last_ms: r.last_ms,
        status: JobRunStatus::of(r.ended_ms),
        end_requested_ms: r.end_requested_ms,
        ended_ms: r.ended_ms,
        end_reason: r.end_reason,
        team_id: r.team_id,
        card: r.card.and_then(|c| serde_json::from_str(&c).ok()),
        notified_channel_id: r.notified_channel_id,
    }
}

#[utoipa::path(get, path = "/job-runs", tag = "jobs", params(RunQuery), responses((status = 200, body = Vec<JobRun>), crate::openapi::QueryErrors))]
pub async fn list_runs(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<RunQuery>,
) -> ApiResult<Json<Vec<JobRun>>> {
    caller.require(Scope::Read)?;
    let open = match q.status.as_deref() {
        None | Some("") => None,
        Some("running") => Some(true),
        Some("ended") => Some(false),
        Some(_) => {
            return Err(ApiError::Unprocessable { field: "status".into(), message: "`running` or `ended`".into() });
        }
    };
    let to = q.to.as_deref().map(|t| parse_query_time("to", t)).transpose()?.unwrap_or(MAX_TIME_MS);
    let from = match q.from.as_deref() {
        Some(f) => parse_query_time("from", f)?,
        None => (now_ms().min(to) - 7 * 86_400_000).max(MIN_TIME_MS),
    };
    if from >= to {
        return Err(ApiError::Unprocessable { field: "from".into(), message: "must be before `to`".into() });
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1_000).contains(&limit) {
        return Err(ApiError::Unprocessable { field: "limit".into(), message: "between 1 and 1000".into() });
    }
    // Owner and team filters are applied here: read more rows than asked for.
    let filtered = q.owner.is_some() || q.team.is_some();
    let filter = JobRunFilter { open, from_ms: from, to_ms: to, limit: if filtered { 10_000 } else { limit } };
    let runs = state.store.job_runs(caller.org, &filter).await?;
    let owner_of = |r: &JobRunRecord| r.owner.user.clone().or_else(|| r.owner.job_user.clone());
    Ok(Json(
        runs.into_iter()
            .filter(|r| q.owner.as_ref().is_none_or(|o| owner_of(r).as_ref() == Some(o)))
            .filter(|r| q.team.is_none_or(|t| r.team_id == Some(t)))
            .take(limit as usize)
            .map(view)
            .collect(),
    ))
}

/// A run by its id (digits) or its key (the newest run of that key).
async fn find(state: &AppState, caller: &Caller, id: &str) -> ApiResult<JobRunRecord> {
    let found = match id.parse::<JobRunId>() {
        Ok(n) => state.store.job_run(caller.org, n).await?,
        Err(_) => state.store.job_run_by_key(caller.org, id).await?,
    };
    found.ok_or_else(|| ApiError::NotFound(format!("no job run {id:?}")))
}

#[utoipa::path(get, path = "/job-runs/{id}", tag = "jobs", params(("id" = String, Path, description = "Run id, or run key (URL-encoded: `pod:ml%2Fnb`)")), responses((status = 200, body = JobRun), crate::openapi::ItemErrors))]
pub async fn get_run(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> ApiResult<Json<JobRun>> {
    caller.require(Scope::Read)?;
    Ok(Json(view(find(&state, &caller, &id).await?)))
}

#[utoipa::path(get, path = "/jobs/{id}/report", tag = "jobs", params(("id" = String, Path, description = "Run id, or run key (`slurm:42799`)")), responses((status = 200, body = JobCard), (status = 409, description = "The job is still running: no card yet", body = fleetlens_api::ErrorBody), crate::openapi::ItemErrors))]
pub async fn report(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> ApiResult<Json<JobCard>> {
    caller.require(Scope::Read)?;
    let run = view(find(&state, &caller, &id).await?);
    run.card
        .map(Json)
        .ok_or_else(|| ApiError::Conflict(format!("job run {} is still running: its card comes when it ends", run.id)))
}

#[utoipa::path(post, path = "/jobs/{id}/end", tag = "jobs", params(("id" = String, Path, description = "Run id, or run key (`slurm:42799`)")), request_body(content = Option<EndRequest>), responses((status = 202, body = JobRun, description = "The run ends at the next scan (its card follows)"), crate::openapi::ItemBodyErrors))]
pub async fn end(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<JobRun>)> {
    caller.require(Scope::Ingest)?;
    // The body is optional: none (or `{}`) ends the run now; one that is there is JSON and says so.
    let request: EndRequest = if body.iter().all(u8::is_ascii_whitespace) {
        EndRequest::default()
    } else {
        crate::error::require_json(&headers)?;
        crate::error::parse_json(&body)?
    };
    let run = find(&state, &caller, &id).await?;
    let at = match &request.at {
        None => now_ms(),
        Some(t) => crate::time::body_time("at", t)?,
    };
    if !state.store.request_job_end(caller.org, run.id, at, now_ms()).await? {
        return Err(ApiError::Conflict(format!("job run {} has already ended", run.id)));
    }
    let run = state.store.job_run(caller.org, run.id).await?.ok_or_else(|| ApiError::NotFound("job run".into()))?;
    Ok((StatusCode::ACCEPTED, Json(view(run))))
}

/// Shipped bar of a route: half a GPU-hour and a fifth wasted.
pub const DEFAULT_MIN_GPU_HOURS: f64 = 0.5;
pub const DEFAULT_MIN_WASTE_PCT: f64 = 20.0;

fn route_view(r: ReportRoute) -> ReportRouteView {
    ReportRouteView { id: r.id, route: r.route, created_ms: r.created_ms }
}

#[utoipa::path(get, path = "/report-routes", tag = "jobs", responses((status = 200, body = Vec<ReportRouteView>), crate::openapi::AuthErrors))]
pub async fn list_routes(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<ReportRouteView>>> {
    caller.require(Scope::Read)?;
    Ok(Json(state.store.report_routes(caller.org).await?.into_iter().map(route_view).collect()))
}

#[utoipa::path(post, path = "/report-routes", tag = "jobs", request_body = NewReportRoute, responses((status = 201, body = ReportRouteView), crate::openapi::BodyErrors))]
pub async fn create_route(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(r): JsonBody<NewReportRoute>,
) -> ApiResult<(StatusCode, Json<ReportRouteView>)> {
    caller.require(Scope::Admin)?;
    let bad = |field: &str, message: &str| ApiError::Unprocessable { field: field.into(), message: message.into() };
    let channel = state
        .store
        .notification_channel(caller.org, r.channel_id)
        .await?
        .ok_or_else(|| bad("channel_id", "no such notification channel"))?;
    if channel.kind == fleetlens_core::ChannelKind::Alertmanager {
        return Err(bad("channel_id", "report cards go to slack or webhook channels, not Alertmanager"));
    }
    if let Some(t) = r.team_id
        && state.store.team(caller.org, t).await?.is_none()
    {
        return Err(bad("team_id", "no such team"));
    }
    let owner = r.owner.map(|o| o.trim().to_string());
    if owner.as_ref().is_some_and(|o| o.is_empty() || o.len() > 256) {
        return Err(bad("owner", "a user name of 1 to 256 characters, or null for anyone"));
    }
    let min_gpu_hours = r.min_gpu_hours.unwrap_or(DEFAULT_MIN_GPU_HOURS);
    if !min_gpu_hours.is_finite() || min_gpu_hours < 0.0 {
        return Err(bad("min_gpu_hours", "a number ≥ 0"));
    }
    let min_waste_pct = r.min_waste_pct.unwrap_or(DEFAULT_MIN_WASTE_PCT);
    if !(0.0..=100.0).contains(&min_waste_pct) {
        return Err(bad("min_waste_pct", "a percentage from 0 to 100"));
    }
    let route = ReportRouteSpec { team_id: r.team_id, owner, channel_id: r.channel_id, min_gpu_hours, min_waste_pct };
    let saved = state.store.insert_report_route(caller.org, &route, now_ms()).await?;
    Ok((StatusCode::CREATED, Json(route_view(saved))))
}

#[utoipa::path(delete, path = "/report-routes/{id}", tag = "jobs", params(("id" = i64, Path)), responses((status = 204, description = "Deleted"), crate::openapi::ItemErrors))]
pub async fn delete_route(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ReportRouteId>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Admin)?;
    if state.store.delete_report_route(caller.org, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("no such report route".into()))
    }
}

#[utoipa::path(get, path = "/plans", tag = "jobs", params(PlansQuery), responses((status = 200, body = fleetlens_core::plans::Plans), crate::openapi::QueryErrors))]
pub async fn plans(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<PlansQuery>,
) -> ApiResult<Json<fleetlens_core::plans::Plans>> {
    caller.require(Scope::Read)?;
    let to = q.to.as_deref().map(|t| parse_query_time("to", t)).transpose()?.unwrap_or_else(now_ms);
    let from = match q.from.as_deref() {
        Some(f) => parse_query_time("from", f)?,
        None => (to - 7 * 86_400_000).max(MIN_TIME_MS),
    };
    if from >= to {
        return Err(ApiError::Unprocessable { field: "from".into(), message: "must be before `to`".into() });
    }
    Ok(Json(crate::actions::plans::compute(state.store.as_ref(), caller.org, from, to).await?))
}
