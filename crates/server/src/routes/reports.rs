//! `GET /api/v1/reports/billing?from=&to=&group_by=team|host|gpu|model|user|holder|namespace|namespace_team|pod|job|label:<name>&format=json|csv`.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use fleetlens_api::BillingReport;
use fleetlens_api::reports::{BillingQuery, GpuGrouping, ReportGrouping};
use fleetlens_core::time_text::format_rfc3339_s;
use fleetlens_store::{GpuId, Scope};

use crate::analytics::billing::{billing_rows, to_csv};
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
    let grouping = match q.group_by.as_deref() {
        Some(text) => ReportGrouping::parse(text)
            .map_err(|message| ApiError::Unprocessable { field: "group_by".into(), message })?,
        None => ReportGrouping::default(),
    };
    let format = q.format.as_deref().unwrap_or("json");
    if format != "json" && format != "csv" {
        return Err(ApiError::Unprocessable { field: "format".into(), message: "use json or csv".into() });
    }
    let store = state.store.as_ref();
    // Owners come from the raw samples (their own default period: all of them); GPU attributes
    // from the hourly credits.
    let (from_ms, currency, rows, note) = match &grouping {
        ReportGrouping::Owner(key) => {
            let report =
                owners::report(&state, caller.org, key, q.from.is_some().then_some(from_ms), to_ms, now).await?;
            (report.from_ms, report.currency, report.rows, Some(report.note))
        }
        ReportGrouping::Gpu(by) => {
            let gpus = store.gpu_identities(caller.org).await?;
            let prices = analytics::prices(store, caller.org).await?;
            let plan = summary::EdgePlan::hourly(from_ms, to_ms, now);
            // A fleet-month is millions of hour rows: the store sums the hours that count whole.
            let split = store
                .org_hour_credit_split(caller.org, from_ms, plan.end_ms, plan.first_whole_ms, plan.last_whole_ms)
                .await?;
            let credits = summary::Credits::from_split(split, plan);
            let teams: HashMap<GpuId, String> = if *by == GpuGrouping::Team {
                store.gpu_teams(caller.org).await?.into_iter().filter_map(|g| Some((g.gpu_id, g.team_name?))).collect()
            } else {
                HashMap::new()
            };
            let rows = billing_rows(&gpus, &credits, &prices, *by, &|g| teams.get(&g.id).cloned());
            (from_ms, prices.currency, rows, None)
        }
    };
    let (from, to) = (format_rfc3339_s(from_ms), format_rfc3339_s(to_ms));
    if format == "csv" {
        let group_name = grouping.as_string();
        let csv = to_csv(&from, &to, &group_name, &currency, &rows);
        // `label:<name>` holds any text: the file name keeps letters, digits, `_` and `-`.
        let file = group_name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-', "-");
        let disposition = format!("attachment; filename=\"fleetlens-billing-{file}.csv\"");
        return Ok(([(CONTENT_TYPE, "text/csv; charset=utf-8".to_string()), (CONTENT_DISPOSITION, disposition)], csv)
            .into_response());
    }
    Ok(Json(BillingReport { from_ms, to_ms, from, to, group_by: grouping, currency, rows, note }).into_response())
}
