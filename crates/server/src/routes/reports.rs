//! `GET /api/v1/reports/billing?from=&to=&group_by=team|host|gpu|model|user|holder|namespace|namespace_team|pod|job|label:<name>&format=json|csv`.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use fleetlens_api::BillingReport;
use fleetlens_api::reports::BillingQuery;
use fleetlens_core::OwnerKey;
use fleetlens_core::time_text::format_rfc3339_s;
use fleetlens_store::Scope;

use crate::analytics::billing::{GroupBy, billing_rows, to_csv};
use crate::analytics::{self, owners, summary};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::routes::gpus::{RangeQuery, range};
use crate::state::AppState;
use crate::time::now_ms;

const DAY_MS: i64 = 86_400_000;

#[utoipa::path(get, path = "/reports/billing", tag = "reports", params(BillingQuery), responses((status = 200, description = "The report: JSON, or CSV with a header row for `format=csv`", content((BillingReport = "application/json"), (String = "text/csv"))), crate::openapi::QueryErrors))]
pub async fn billing(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<BillingQuery>,
) -> ApiResult<Response> {
    caller.require(Scope::Read)?;
    let now = now_ms();
    let to = q.to.clone().unwrap_or_else(|| now.to_string());
    let from_default = q.from.clone().unwrap_or_else(|| "0".into());
    let (from_ms, to_ms) = range(&RangeQuery { from: Some(from_default), to: Some(to), limit: None })?;
    // Default period: the last 30 days.
    let from_ms =
        if q.from.is_none() { to_ms.saturating_sub(30 * DAY_MS).max(crate::time::MIN_TIME_MS) } else { from_ms };
    let group_name = q.group_by.as_deref().unwrap_or("gpu");
    let unprocessable = |message: String| ApiError::Unprocessable { field: "group_by".into(), message };
    let owner_key = match GroupBy::parse(group_name) {
        Some(_) => None,
        None => Some(OwnerKey::parse(group_name).map_err(unprocessable)?.ok_or_else(|| {
            unprocessable(format!(
                "{group_name:?}: use team, host, gpu, model, user, holder, namespace, namespace_team, pod, job or label:<name>"
            ))
        })?),
    };
    let format = q.format.as_deref().unwrap_or("json");
    if format != "json" && format != "csv" {
        return Err(ApiError::Unprocessable { field: "format".into(), message: "use json or csv".into() });
    }
    let store = state.store.as_ref();
    if let Some(key) = owner_key {
        let report = owners::report(&state, caller.org, &key, q.from.is_some().then_some(from_ms), to_ms, now).await?;
        let (from, to) = (format_rfc3339_s(report.from_ms), format_rfc3339_s(to_ms));
        if format == "csv" {
            let csv = to_csv(&from, &to, group_name, &report.currency, &report.rows);
            let file = group_name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-', "-");
            let disposition = format!("attachment; filename=\"fleetlens-billing-{file}.csv\"");
            return Ok((
                [(CONTENT_TYPE, "text/csv; charset=utf-8".to_string()), (CONTENT_DISPOSITION, disposition)],
                csv,
            )
                .into_response());
        }
        return Ok(Json(BillingReport {
            from_ms: report.from_ms,
            to_ms,
            from,
            to,
            group_by: key.as_string(),
            currency: report.currency,
            rows: report.rows,
            note: Some(report.note),
        })
        .into_response());
    }
    let group_by = GroupBy::parse(group_name).expect("checked above");
    let gpus = store.gpu_identities(caller.org).await?;
    let prices = analytics::prices(store, caller.org).await?;
    let plan = summary::EdgePlan::hourly(from_ms, to_ms, now);
    // A fleet-month is millions of hour rows: the store sums the hours that count whole.
    let split =
        store.org_hour_credit_split(caller.org, from_ms, plan.end_ms, plan.first_whole_ms, plan.last_whole_ms).await?;
    let credits = summary::Credits::from_split(split, plan);
    let teams: std::collections::HashMap<fleetlens_store::GpuId, String> = if group_by == GroupBy::Team {
        store.gpu_teams(caller.org).await?.into_iter().filter_map(|g| Some((g.gpu_id, g.team_name?))).collect()
    } else {
        Default::default()
    };
    let rows = billing_rows(&gpus, &credits, &prices, group_by, &|g| teams.get(&g.id).cloned());
    let (from, to) = (format_rfc3339_s(from_ms), format_rfc3339_s(to_ms));
    if format == "csv" {
        let csv = to_csv(&from, &to, group_name, &prices.currency, &rows);
        let disposition = format!("attachment; filename=\"fleetlens-billing-{group_name}.csv\"");
        return Ok(([(CONTENT_TYPE, "text/csv; charset=utf-8".to_string()), (CONTENT_DISPOSITION, disposition)], csv)
            .into_response());
    }
    Ok(Json(BillingReport {
        from_ms,
        to_ms,
        from,
        to,
        group_by: group_name.into(),
        currency: prices.currency.clone(),
        rows,
        note: None,
    })
    .into_response())
}
