//! Workload states, the fleet summary, and the settings the analytics use (prices,
//! classifier thresholds).

use axum::Json;
use axum::extract::{Path, Query, State};
use fleetlens_api::analytics::{Prices, SummaryQuery};
use fleetlens_api::gpus::{RangeQuery, StatesQuery};
use fleetlens_api::{FleetSummary, StateWindow};
use fleetlens_core::{PriceTable, Resolution, Thresholds, timeline};
use std::collections::HashMap;

use fleetlens_store::{GpuId, OrgId, Scope, Store};

use crate::analytics::summary_cache::Cached;
use crate::analytics::{self, MINUTE_MS, summary};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, JsonBody};
use crate::routes::gpus::range;
use crate::state::AppState;
use crate::time::now_ms;

/// At most this many windows per states request.
const MAX_WINDOWS: i64 = 20_000;
/// Raw-sample windows (not a multiple of a minute) read at most this many samples.
const MAX_RAW_SAMPLES: u32 = 500_000;
const DAY_MS: i64 = 86_400_000;

#[utoipa::path(get, path = "/gpus/{uuid}/states", tag = "gpus", params(("uuid" = String, Path, description = "GPU UUID"), StatesQuery), responses((status = 200, body = Vec<StateWindow>), crate::openapi::ItemQueryErrors))]
pub async fn states(
    State(state): State<AppState>,
    caller: Caller,
    Path(uuid): Path<String>,
    Query(q): Query<StatesQuery>,
) -> ApiResult<Json<Vec<StateWindow>>> {
    caller.require(Scope::Read)?;
    let th = analytics::thresholds(state.store.as_ref(), caller.org).await?;
    let (from_ms, to_ms) = range(&RangeQuery { from: q.from.clone(), to: q.to.clone(), limit: None })?;
    let window_s: i64 = match &q.window_s {
        None => i64::from(th.window_s),
        // Not a whole number: unparseable, 400; a number out of range: 422 (the API's one rule).
        Some(w) if !crate::time::is_integer_text(w) => {
            return Err(ApiError::BadParam {
                field: "window_s".into(),
                message: format!("{w:?} is not a number: give whole seconds, 1 to 2678400"),
            });
        }
        Some(w) => w.trim().parse().ok().filter(|w| (1..=31 * 86_400).contains(w)).ok_or_else(|| {
            ApiError::Unprocessable { field: "window_s".into(), message: "must be whole seconds, 1 to 2678400".into() }
        })?,
    };
    let window_ms = window_s * 1000;
    let gpu = state
        .store
        .gpu_identity(caller.org, &uuid)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no GPU {uuid:?} in this organisation")))?;
    // Windows start at the GPU's registration and end at the wall clock: nothing is reported
    // for time before a GPU existed or after now. While the GPU reports, they end at its newest
    // sample: the time since is not known yet (the agent's next batch is due within its
    // delivery cadence), and read as a gap it would end every timeline in a false outage.
    let now = now_ms();
    let newest = analytics::newest_minute(state.store.as_ref(), caller.org, &gpu).await?;
    let allowance = state.deliveries.allowance_ms(caller.org, &gpu.info.host);
    let known_until = if analytics::is_reporting(&gpu, newest.as_ref(), now, &th, allowance) {
        gpu.info.last_seen_ms + 1
    } else {
        now
    };
    let from_ms = from_ms.max(gpu.info.first_seen_ms);
    let to_ms = to_ms.min(known_until);
    if from_ms >= to_ms {
        return Ok(Json(Vec::new()));
    }
    // Counted over the GPU's own time: a short trace asked for with a wide range is fine.
    if to_ms.saturating_sub(from_ms) / window_ms > MAX_WINDOWS {
        return Err(ApiError::Unprocessable {
            field: "window_s".into(),
            message: format!("more than {MAX_WINDOWS} windows: widen window_s or narrow from/to"),
        });
    }
    let windows = if window_ms % MINUTE_MS == 0 {
        let start = from_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        let buckets = state.store.rollups(caller.org, gpu.id, Resolution::Minute, start, to_ms).await?;
        analytics::state_windows(timeline::states_from_minutes(
            &buckets,
            &analytics::facts(&gpu),
            from_ms,
            to_ms,
            window_ms,
            &th,
        ))
    } else {
        if to_ms.saturating_sub(from_ms) > DAY_MS {
            return Err(ApiError::Unprocessable {
                field: "window_s".into(),
                message: "windows that are not whole minutes read raw samples: ask for at most one day".into(),
            });
        }
        // One interval's margin on each side, so the first and last windows know their neighbours.
        let samples = state
            .store
            .samples(caller.org, gpu.id, from_ms.saturating_sub(10_000), to_ms.saturating_add(10_000), MAX_RAW_SAMPLES)
            .await?;
        analytics::state_windows(timeline::states_from_samples(&samples, from_ms, to_ms, window_ms, &th))
    };
    Ok(Json(windows))
}

#[utoipa::path(get, path = "/fleet/summary", tag = "fleet", params(SummaryQuery), responses((status = 200, body = FleetSummary), crate::openapi::QueryErrors))]
pub async fn fleet_summary(
    State(state): State<AppState>,
    caller: Caller,
    Query(mut sq): Query<SummaryQuery>,
) -> ApiResult<Json<FleetSummary>> {
    caller.require(Scope::Read)?;
    let now = now_ms();
    let cache_key = match &sq.range {
        Some(r) => {
            let span_ms = match r.as_str() {
                "1h" => 3_600_000,
                "24h" => 86_400_000,
                "7d" => 7 * 86_400_000,
                "30d" => 30 * 86_400_000,
                other => {
                    return Err(ApiError::Unprocessable {
                        field: "range".into(),
                        message: format!("{other:?}: use 1h, 24h, 7d or 30d, or from/to"),
                    });
                }
            };
            if sq.from.is_some() || sq.to.is_some() {
                return Err(ApiError::Unprocessable {
                    field: "range".into(),
                    message: "give either range or from/to".into(),
                });
            }
            let key = format!("{}|{r}|{:?}|{:?}|{:?}", caller.org, sq.gpu, sq.host, sq.model);
            let relative = move |mut sq: SummaryQuery, now: i64| {
                sq.from = Some((now - span_ms).to_string());
                sq.to = Some(now.to_string());
                sq
            };
            match state.summary_cache.lookup(&key) {
                Cached::Fresh(hit) => return Ok(Json(hit)),
                Cached::Stale(old) => {
                    // Served as it is; one task computes the next for every dashboard.
                    if let Some(generation) = state.summary_cache.begin_refresh(&key) {
                        let (state, org, sq) = (state.clone(), caller.org, sq.clone());
                        tokio::spawn(async move {
                            let now = now_ms();
                            let fresh = compute_summary(&state, org, relative(sq, now), now).await;
                            if let Err(e) = &fresh {
                                tracing::warn!(error = %e, "fleet summary refresh failed");
                            }
                            state.summary_cache.finish_refresh(&key, generation, fresh.ok());
                        });
                    }
                    return Ok(Json(old));
                }
                Cached::Missing => {}
            }
            sq = relative(sq, now);
            Some(key)
        }
        None => None,
    };
    let result = compute_summary(&state, caller.org, sq, now).await?;
    if let Some(key) = cache_key {
        state.summary_cache.put(key, result.clone());
    }
    Ok(Json(result))
}

/// The summary of `sq`'s period (`from`/`to`; default: the week before `now`).
async fn compute_summary(state: &AppState, org: OrgId, sq: SummaryQuery, now: i64) -> ApiResult<FleetSummary> {
    let q = RangeQuery { from: sq.from.clone(), to: sq.to.clone(), limit: None };
    let q = RangeQuery { to: q.to.clone().or_else(|| Some(now.to_string())), ..q };
    let (from_ms, to_ms) =
        range(&RangeQuery { from: q.from.clone().or_else(|| Some((now - summary::WEEK_MS).to_string())), ..q })?;
    let store = state.store.as_ref();
    let th = analytics::thresholds(store, org).await?;
    let overrides = analytics::price_overrides(store, org).await?;
    let prices = overrides.as_ref().map_or_else(PriceTable::default, |o| PriceTable::default().with_overrides(o));
    let price_source = match &overrides {
        Some(o) if o.currency != PriceTable::default().currency => {
            format!("organisation prices in {} (the USD list prices do not apply)", o.currency)
        }
        Some(_) => format!("organisation prices over defaults ({})", PriceTable::default().source),
        None => PriceTable::default().source,
    };
    let mut gpus = store.gpu_identities(org).await?;
    gpus.retain(|g| {
        sq.gpu.as_deref().is_none_or(|u| g.info.uuid == u)
            && sq.host.as_deref().is_none_or(|h| g.info.host == h)
            && sq.model.as_deref().is_none_or(|m| g.info.name.as_deref() == Some(m))
    });
    let period = read_credits(store, org, from_ms, to_ms, now, gpus.len()).await?;
    let week_from = now - summary::WEEK_MS;
    let last_week = if (from_ms, to_ms.min(now)) == (week_from, now) {
        period.clone()
    } else {
        read_credits(store, org, week_from, now, now, gpus.len()).await?
    };
    let peak_mem: HashMap<GpuId, i64> = store.org_peak_mem(org, from_ms, to_ms).await?.into_iter().collect();
    let jobs = store.jobs(org, from_ms, to_ms).await?;
    let result = summary::summarize(&summary::SummaryInput {
        gpus: &gpus,
        period: &period,
        last_week: &last_week,
        from_ms,
        to_ms,
        now_ms: now,
        prices: &prices,
        price_source,
        thresholds: &th,
        jobs: &jobs,
        peak_mem: &peak_mem,
    });
    let mut result = result;
    // Owners from the raw samples: the last `--summary-owners-span` (24 h) of the period at
    // most, within the raw retention.
    let end = to_ms.min(now);
    let owners_span_ms = i64::try_from(state.config.summary_owners_span.as_millis()).unwrap_or(i64::MAX / 2);
    let owners_from = from_ms
        .max(end - owners_span_ms)
        .max(now - i64::try_from(state.config.raw_retention.as_millis()).unwrap_or(i64::MAX / 2));
    if owners_from < end {
        let credits = crate::analytics::owners::read_owner_credits(
            store,
            org,
            &gpus,
            &fleetlens_core::OwnerKey::Holder,
            owners_from,
            end,
        )
        .await?;
        result.top_owners = crate::analytics::owners::top_owners(&gpus, &credits, &prices, TOP_OWNERS);
        result.top_owners_from_ms = Some(owners_from);
    }
    if from_ms < end {
        let plans = crate::actions::plans::compute(store, org, from_ms, end).await?;
        result.plan_saving_per_month = Some(plans.saving_per_month);
    }
    Ok(result)
}

const TOP_OWNERS: usize = 10;

/// Hour credits of the whole hours, and minute credits of the partial edges when affordable.
async fn read_credits(
    store: &dyn Store,
    org: OrgId,
    from_ms: i64,
    to_ms: i64,
    now_ms: i64,
    gpu_count: usize,
) -> ApiResult<summary::Credits> {
    let plan = summary::EdgePlan::new(from_ms, to_ms, now_ms, gpu_count);
    let hour_from = from_ms.div_euclid(3_600_000) * 3_600_000;
    let hours = store.credits(org, None, Resolution::Hour, hour_from, plan.end_ms).await?;
    let mut minutes = Vec::new();
    for (a, b) in plan.edge_ranges() {
        minutes.extend(store.credits(org, None, Resolution::Minute, a, b).await?);
    }
    Ok(summary::Credits::new(hours, minutes, plan))
}

#[utoipa::path(get, path = "/prices", tag = "fleet", responses((status = 200, body = Prices), crate::openapi::AuthErrors))]
pub async fn get_prices(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Prices>> {
    caller.require(Scope::Read)?;
    let defaults = PriceTable::default();
    let overrides = analytics::price_overrides(state.store.as_ref(), caller.org).await?;
    let currency = overrides.as_ref().map_or_else(|| defaults.currency.clone(), |o| o.currency.clone());
    Ok(Json(Prices { currency, defaults, overrides }))
}

/// `PUT /api/v1/prices`: the organisation's prices, per GPU model (NVML name or model id).
#[utoipa::path(put, path = "/prices", tag = "fleet", request_body = PriceTable, responses((status = 200, body = Prices), crate::openapi::BodyErrors))]
pub async fn put_prices(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(table): JsonBody<PriceTable>,
) -> ApiResult<Json<Prices>> {
    caller.require(Scope::Admin)?;
    table.validate().map_err(|e| ApiError::Unprocessable { field: e.field, message: e.message })?;
    let json = serde_json::to_string(&table).expect("prices serialize");
    state.store.put_setting(caller.org, analytics::PRICES_KEY, &json, now_ms()).await?;
    state.summary_cache.invalidate(caller.org);
    get_prices(State(state), caller).await
}

#[utoipa::path(get, path = "/settings/thresholds", tag = "fleet", responses((status = 200, body = Thresholds), crate::openapi::AuthErrors))]
pub async fn get_thresholds(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Thresholds>> {
    caller.require(Scope::Read)?;
    Ok(Json(analytics::thresholds(state.store.as_ref(), caller.org).await?))
}

/// `PUT /api/v1/settings/thresholds`: any subset of the classifier thresholds; the rest keep
/// their defaults.
#[utoipa::path(put, path = "/settings/thresholds", tag = "fleet", request_body = Thresholds, responses((status = 200, body = Thresholds), crate::openapi::BodyErrors))]
pub async fn put_thresholds(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(th): JsonBody<Thresholds>,
) -> ApiResult<Json<Thresholds>> {
    caller.require(Scope::Admin)?;
    th.validate().map_err(|e| ApiError::Unprocessable { field: e.field.to_string(), message: e.message })?;
    let json = serde_json::to_string(&th).expect("thresholds serialize");
    state.store.put_setting(caller.org, analytics::THRESHOLDS_KEY, &json, now_ms()).await?;
    state.classifier.set(caller.org, th.clone());
    state.summary_cache.invalidate(caller.org);
    Ok(Json(th))
}
