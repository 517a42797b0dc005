//! `POST /api/v1/jobs` (a job reports its model throughput) and `GET /api/v1/jobs`: the MFU
//! level of the funnel.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use fleetlens_api::{Job, JobReport};
use fleetlens_core::{JobId, JobThroughput};
use fleetlens_store::{GpuRecord, JobRecord, Scope};

use crate::analytics::mfu::{gpus_by_uuid, job_mfu};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, JsonBody};
use crate::routes::gpus::{RangeQuery, range};
use crate::state::AppState;
use crate::time::now_ms;

const MAX_JOB_GPUS: usize = 100_000;

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::Unprocessable { field: field.into(), message: message.into() }
}

fn view(job: JobRecord, gpus: &HashMap<&str, &GpuRecord>) -> Job {
    let mfu = job_mfu(&job.report, gpus);
    Job { id: job.id, report: job.report, mfu }
}

#[utoipa::path(post, path = "/jobs", tag = "jobs", request_body = JobReport, responses((status = 201, body = Job), crate::openapi::BodyErrors))]
pub async fn report(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(r): JsonBody<JobReport>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    caller.require(Scope::Ingest)?;
    let name = r.name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(invalid("name", "required, at most 200 characters"));
    }
    if r.gpus.is_empty() || r.gpus.len() > MAX_JOB_GPUS {
        return Err(invalid("gpus", "list the UUIDs of the job's GPUs (1 or more)"));
    }
    let (from_ms, to_ms) = (crate::time::body_time("from", &r.from)?, crate::time::body_time("to", &r.to)?);
    if from_ms >= to_ms {
        return Err(invalid("from", "must be before `to`"));
    }
    let achieved = match (r.achieved_flops_per_s, r.tokens_per_s, r.flops_per_token) {
        (Some(f), None, None) => f,
        (None, Some(t), Some(per)) => t * per,
        _ => {
            return Err(invalid(
                "achieved_flops_per_s",
                "give either achieved_flops_per_s, or tokens_per_s and flops_per_token",
            ));
        }
    };
    if !achieved.is_finite() || achieved <= 0.0 {
        return Err(invalid("achieved_flops_per_s", "must be a positive finite number"));
    }
    let gpus = state.store.gpu_identities(caller.org).await?;
    let by_uuid = gpus_by_uuid(&gpus);
    if let Some(missing) = r.gpus.iter().find(|u| !by_uuid.contains_key(u.as_str())) {
        return Err(invalid("gpus", format!("no GPU {missing:?} in this organisation")));
    }
    let report = JobThroughput {
        name: name.to_string(),
        gpu_uuids: r.gpus,
        from_ms,
        to_ms,
        precision: r.precision,
        achieved_flops_per_s: achieved,
    };
    let mut job = JobRecord { id: JobId::default(), report, created_ms: now_ms() };
    job.id = state.store.insert_job(caller.org, &job).await?;
    Ok((StatusCode::CREATED, Json(view(job, &by_uuid))))
}

#[utoipa::path(get, path = "/jobs", tag = "jobs", params(RangeQuery), responses((status = 200, body = Vec<Job>), crate::openapi::QueryErrors))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<RangeQuery>,
) -> ApiResult<Json<Vec<Job>>> {
    caller.require(Scope::Read)?;
    let (from_ms, to_ms) = range(&q)?;
    let gpus = state.store.gpu_identities(caller.org).await?;
    let by_uuid = gpus_by_uuid(&gpus);
    let jobs = state.store.jobs(caller.org, from_ms, to_ms).await?;
    Ok(Json(jobs.into_iter().map(|j| view(j, &by_uuid)).collect()))
}
