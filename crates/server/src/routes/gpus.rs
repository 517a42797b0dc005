//! `GET /api/v1/gpus` and `GET /api/v1/gpus/{uuid}/samples`.

use axum::Json;
use axum::extract::{Path, Query, State};
pub use fleetlens_api::gpus::RangeQuery;
use fleetlens_api::gpus::{
    DataQualityFlag, GpuDetail, MoveGpuBody, SampleColumns, SamplesAnswer, SamplesQuery, SeriesQuery,
};
use fleetlens_api::{GpuList, GpuSummary, SampleList, Series, SeriesPoint};

use fleetlens_core::{Resolution, WorkloadState, timeline};
use fleetlens_store::{GpuRecord, Scope};

use crate::analytics;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::time::{MIN_TIME_MS, now_ms, parse_time_param};

const DEFAULT_SAMPLE_LIMIT: u32 = 10_000;
const MAX_SAMPLE_LIMIT: u32 = 100_000;
const HOUR_MS: i64 = 3_600_000;

#[utoipa::path(get, path = "/gpus", tag = "gpus", responses((status = 200, body = GpuList), crate::openapi::AuthErrors))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<GpuList>> {
    caller.require(Scope::Read)?;
    let (gpus, states) = analytics::CurrentStates::read(state.store.as_ref(), caller.org).await?;
    let gpus = gpus
        .into_iter()
        .map(|g| {
            let current = states.of(&g, &state.deliveries);
            summary(g, current)
        })
        .collect();
    Ok(Json(GpuList { gpus }))
}

/// `GET /api/v1/gpus/{uuid}`: one GPU, its current state and why.
#[utoipa::path(get, path = "/gpus/{uuid}", tag = "gpus", params(("uuid" = String, Path, description = "GPU UUID")), responses((status = 200, body = GpuDetail), crate::openapi::ItemErrors))]
pub async fn detail(
    State(state): State<AppState>,
    caller: Caller,
    Path(uuid): Path<String>,
) -> ApiResult<Json<GpuDetail>> {
    caller.require(Scope::Read)?;
    let store = state.store.as_ref();
    let th = analytics::thresholds(store, caller.org).await?;
    let gpu = store
        .gpu(caller.org, &uuid)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no GPU {uuid:?} in this organisation")))?;
    let newest = analytics::newest_minute(store, caller.org, &gpu).await?;
    let now = now_ms();
    let allowance = state.deliveries.allowance_ms(caller.org, &gpu.info.host);
    let c = timeline::current_state(&analytics::facts(&gpu), newest.as_ref(), now, &th, allowance);
    let current = analytics::state_window(newest.as_ref().map_or(gpu.info.last_seen_ms, |b| b.bucket_ms), now, &c);
    let quality_from = Resolution::Minute.bucket_start(now - DATA_QUALITY_SPAN_MS);
    let minutes = store.rollups(caller.org, gpu.id, Resolution::Minute, quality_from, now + 1).await?;
    let data_quality = data_quality(&minutes);
    Ok(Json(GpuDetail { gpu: summary(gpu, c.state), current, data_quality, data_quality_from_ms: quality_from }))
}

/// How far back the GPU detail counts data-quality flags.
const DATA_QUALITY_SPAN_MS: i64 = 24 * HOUR_MS;

/// The flags counted in `minutes`, in `QualityFlag::ALL` order; flags with no sample are left out.
fn data_quality(minutes: &[fleetlens_core::RollupBucket]) -> Vec<DataQualityFlag> {
    fleetlens_core::QualityFlag::ALL
        .into_iter()
        .filter_map(|f| {
            let with = minutes.iter().filter(|m| m.quality[f.index()] > 0);
            let samples: i64 = with.clone().map(|m| m.quality[f.index()]).sum();
            let last_minute_ms = with.map(|m| m.bucket_ms).max()?;
            let rule = f.rule();
            Some(DataQualityFlag {
                flag: rule.name.to_string(),
                rule: rule.when.to_string(),
                dropped: rule.drops.iter().map(|d| d.to_string()).collect(),
                samples,
                last_minute_ms,
            })
        })
        .collect()
}

fn summary(g: GpuRecord, state: WorkloadState) -> GpuSummary {
    let efficiency = g.latest.as_ref().and_then(|s| s.efficiency());
    GpuSummary { info: g.info, latest: g.latest, efficiency, state: Some(state) }
}

/// A half-open time range from the query: defaults to the last hour. Both ends lie within
/// [`crate::time::MIN_TIME_MS`]..=[`crate::time::MAX_TIME_MS`] (else 422 naming the parameter),
/// so `to - from` and the like cannot overflow.
pub fn range(q: &RangeQuery) -> ApiResult<(i64, i64)> {
    let to = match &q.to {
        Some(t) => parse_time_param("to", t)?,
        None => now_ms() + 1,
    };
    let from = match &q.from {
        Some(f) => parse_time_param("from", f)?,
        None => to.saturating_sub(HOUR_MS).max(MIN_TIME_MS),
    };
    if from >= to {
        return Err(ApiError::Unprocessable { field: "from".into(), message: "must be before `to`".into() });
    }
    Ok((from, to))
}

#[utoipa::path(get, path = "/gpus/{uuid}/samples", tag = "gpus", params(("uuid" = String, Path, description = "GPU UUID"), SamplesQuery), responses((status = 200, body = SamplesAnswer), crate::openapi::ItemQueryErrors))]
pub async fn samples(
    State(state): State<AppState>,
    caller: Caller,
    Path(uuid): Path<String>,
    Query(query): Query<SamplesQuery>,
) -> ApiResult<Json<SamplesAnswer>> {
    caller.require(Scope::Read)?;
    let columns = match query.format.as_deref() {
        None | Some("rows") => false,
        Some("columns") => true,
        Some(other) => {
            return Err(ApiError::Unprocessable {
                field: "format".into(),
                message: format!("{other:?}: use rows or columns"),
            });
        }
    };
    let q = query.range();
    let (from_ms, to_ms) = range(&q)?;
    let limit = match &q.limit {
        None => DEFAULT_SAMPLE_LIMIT,
        // Not a number: unparseable, 400; a number out of range: 422 (the API's one rule).
        Some(l) => match l.trim().parse::<i64>() {
            Err(_) if !crate::time::is_integer_text(l) => {
                return Err(ApiError::BadParam {
                    field: "limit".into(),
                    message: format!("{l:?} is not a number: give 1–{MAX_SAMPLE_LIMIT}"),
                });
            }
            Err(_) => {
                return Err(ApiError::Unprocessable {
                    field: "limit".into(),
                    message: format!("must be 1–{MAX_SAMPLE_LIMIT}"),
                });
            }
            Ok(n) => u32::try_from(n).ok().filter(|n| (1..=MAX_SAMPLE_LIMIT).contains(n)).ok_or_else(|| {
                ApiError::Unprocessable { field: "limit".into(), message: format!("must be 1–{MAX_SAMPLE_LIMIT}") }
            })?,
        },
    };
    let gpu = state
        .store
        .gpu_identity(caller.org, &uuid)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no GPU {uuid:?} in this organisation")))?;
    // One more than asked tells whether the page is complete.
    if columns {
        // Columns from the store as they are: a sealed hour never becomes Sample structs.
        let mut table = state.store.sample_table(caller.org, gpu.id, from_ms, to_ms, limit + 1).await?;
        let truncated = table.len() > limit as usize;
        table.keep(0..limit as usize);
        return Ok(Json(SamplesAnswer::Columns(SampleColumns::from_table(
            gpu.info.uuid,
            from_ms,
            to_ms,
            truncated,
            table,
        ))));
    }
    let mut samples = state.store.samples(caller.org, gpu.id, from_ms, to_ms, limit + 1).await?;
    let truncated = samples.len() > limit as usize;
    samples.truncate(limit as usize);
    Ok(Json(SamplesAnswer::Rows(SampleList { uuid: gpu.info.uuid, from_ms, to_ms, truncated, samples })))
}

/// At most this many points per series request.
const MAX_SERIES_POINTS: i64 = 50_000;

/// `GET /api/v1/gpus/{uuid}/series`: a GPU's time series from its rollups, for charts.
#[utoipa::path(get, path = "/gpus/{uuid}/series", tag = "gpus", params(("uuid" = String, Path, description = "GPU UUID"), SeriesQuery), responses((status = 200, body = Series), crate::openapi::ItemQueryErrors))]
pub async fn series(
    State(state): State<AppState>,
    caller: Caller,
    Path(uuid): Path<String>,
    Query(q): Query<SeriesQuery>,
) -> ApiResult<Json<Series>> {
    caller.require(Scope::Read)?;
    let (from_ms, to_ms) = range(&RangeQuery { from: q.from.clone(), to: q.to.clone(), limit: None })?;
    let res = match q.resolution.as_deref().unwrap_or("auto") {
        "1m" => Resolution::Minute,
        "1h" => Resolution::Hour,
        "auto" if to_ms.saturating_sub(from_ms) <= 36 * HOUR_MS => Resolution::Minute,
        "auto" => Resolution::Hour,
        other => {
            return Err(ApiError::Unprocessable {
                field: "resolution".into(),
                message: format!("{other:?}: use 1m, 1h or auto"),
            });
        }
    };
    if to_ms.saturating_sub(from_ms) / res.bucket_ms() > MAX_SERIES_POINTS {
        return Err(ApiError::Unprocessable {
            field: "resolution".into(),
            message: format!("more than {MAX_SERIES_POINTS} points: use 1h or a shorter range"),
        });
    }
    let gpu = state
        .store
        .gpu_identity(caller.org, &uuid)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no GPU {uuid:?} in this organisation")))?;
    let rows = state.store.series(caller.org, gpu.id, res, res.bucket_start(from_ms), to_ms).await?;
    let mean = |sum: f64, count: i64| (count > 0).then(|| sum / count as f64);
    let points = rows
        .into_iter()
        .map(|r| {
            // The rollup's `state` column is TEXT: a name that is no state is a broken row.
            let state = r.state.as_deref().map(str::parse::<WorkloadState>).transpose().map_err(|e| {
                ApiError::Store(fleetlens_store::StoreError::Invalid(format!("rollup minute {}: {e}", r.bucket_ms)))
            })?;
            Ok(SeriesPoint {
                ts_ms: r.bucket_ms,
                sample_count: r.sample_count,
                gpu_util_pct: mean(r.gpu_util_pct_sum, r.gpu_util_pct_count),
                gpu_util_pct_max: r.gpu_util_pct_max,
                sm_active_pct: mean(r.sm_active_pct_sum, r.sm_active_pct_count),
                sm_active_pct_min: r.sm_active_pct_min,
                sm_occupancy_pct: mean(r.sm_occupancy_pct_sum, r.sm_occupancy_pct_count),
                tensor_active_pct: mean(r.tensor_active_pct_sum, r.tensor_active_pct_count),
                dram_active_pct: mean(r.dram_active_pct_sum, r.dram_active_pct_count),
                mem_used_bytes_max: r.mem_used_bytes_max,
                power_w: mean(r.power_w_sum, r.power_w_count),
                temp_c: mean(r.temp_c_sum, r.temp_c_count),
                state,
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(Series { uuid: gpu.info.uuid, resolution: res, from_ms, to_ms, points }))
}

/// `PUT /api/v1/gpus/{uuid}/host` `{"host": "…"}` (admin): move a GPU to another host (it was
/// physically moved, or its host renamed). A GPU stays with the host it is registered on: a
/// batch of another host that names it is refused (409) until an admin moves it here; from
/// then on its old host's batches are refused instead. Answers the GPU as `GET /gpus/{uuid}`.
#[utoipa::path(put, path = "/gpus/{uuid}/host", tag = "gpus", params(("uuid" = String, Path, description = "GPU UUID")), request_body = MoveGpuBody, responses((status = 200, body = GpuDetail), crate::openapi::ItemBodyErrors))]
pub async fn move_gpu(
    State(state): State<AppState>,
    caller: Caller,
    Path(uuid): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Json<GpuDetail>> {
    caller.require(Scope::Admin)?;
    let ct = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ct.trim_start().to_ascii_lowercase().starts_with("application/json") {
        return Err(ApiError::UnsupportedMedia("send Content-Type: application/json".into()));
    }
    let b: MoveGpuBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidJson { path: None, message: e.to_string() })?;
    let host = b.host.trim();
    if host.is_empty() || host.len() > 255 || host.chars().any(char::is_control) {
        return Err(ApiError::Unprocessable {
            field: "host".into(),
            message: "required: 1–255 printable characters".into(),
        });
    }
    if !state.store.move_gpu(caller.org, &uuid, host).await? {
        return Err(ApiError::NotFound(format!("no GPU {uuid:?} in this organisation")));
    }
    tracing::info!(uuid, host, by = %caller.key.name, "GPU moved to another host");
    // The GPU's team follows its new host from the host's next batch on.
    state.accounts.assignments_changed();
    detail(State(state), caller, Path(uuid)).await
}
