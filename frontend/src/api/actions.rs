//! The acting-on-waste endpoints (docs/ACTIONS.md): job runs and their report cards, report
//! routes, idle-reclaim policies with their dry run, the reclaims and their log, and the
//! collocation / right-size plans. A child of `api` so that it shares its request helpers.

pub use fleetlens_api::actions::{EndRequest, JobRun, NewReportRoute, ReportRouteView};
pub use fleetlens_api::reclaim::{DryRun, Reclaim, ReclaimPolicy, SnoozeRequest};
use fleetlens_core::plans::Plans;
use fleetlens_core::reclaim::ReclaimPolicySpec;
use fleetlens_core::{JobRunId, ReclaimId, ReclaimPolicyId, ReportRouteId, TeamId};

use super::{ApiResult, delete, get, post, seg};

/// Filters of the job list, as the URL holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub owner: String,
    pub team: Option<TeamId>,
    /// `running`, `ended` or empty for both.
    pub status: String,
}

/// The most runs the Jobs page asks for (the newest first).
pub const RUN_LIMIT: usize = 500;

/// `GET /api/v1/job-runs?from=&to=&owner=&team=&status=`
pub async fn job_runs(from_ms: i64, to_ms: i64, filter: &RunFilter) -> ApiResult<Vec<JobRun>> {
    let mut q = vec![("from", from_ms.to_string()), ("to", to_ms.to_string()), ("limit", RUN_LIMIT.to_string())];
    if !filter.owner.trim().is_empty() {
        q.push(("owner", filter.owner.trim().to_string()));
    }
    if let Some(t) = filter.team {
        q.push(("team", t.to_string()));
    }
    if !filter.status.is_empty() {
        q.push(("status", filter.status.clone()));
    }
    get("/job-runs", &q).await
}

/// `GET /api/v1/job-runs/{id}` (the run with its card, if ended).
pub async fn job_run(id: &str) -> ApiResult<JobRun> {
    get(&format!("/job-runs/{}", seg(id)), &[]).await
}

/// `POST /api/v1/jobs/{id}/end`: the run ends now (its card follows at the next scan).
pub async fn end_job(id: JobRunId) -> ApiResult<JobRun> {
    post(&format!("/jobs/{id}/end"), &EndRequest::default()).await
}

/// `GET /api/v1/report-routes`
pub async fn report_routes() -> ApiResult<Vec<ReportRouteView>> {
    get("/report-routes", &[]).await
}

/// `POST /api/v1/report-routes`
pub async fn create_report_route(route: &NewReportRoute) -> ApiResult<ReportRouteView> {
    post("/report-routes", route).await
}

/// `DELETE /api/v1/report-routes/{id}`
pub async fn delete_report_route(id: ReportRouteId) -> ApiResult<()> {
    delete(&format!("/report-routes/{id}")).await
}

/// `GET /api/v1/reclaim-policies`
pub async fn reclaim_policies() -> ApiResult<Vec<ReclaimPolicy>> {
    get("/reclaim-policies", &[]).await
}

/// `POST /api/v1/reclaim-policies`
pub async fn create_reclaim_policy(policy: &ReclaimPolicySpec) -> ApiResult<ReclaimPolicy> {
    post("/reclaim-policies", policy).await
}

/// `DELETE /api/v1/reclaim-policies/{id}` (its open reclaims are cancelled).
pub async fn delete_reclaim_policy(id: ReclaimPolicyId) -> ApiResult<()> {
    delete(&format!("/reclaim-policies/{id}")).await
}

/// `GET /api/v1/reclaim-policies/{id}/dry-run` over the server's default period (the past week).
pub async fn dry_run(id: ReclaimPolicyId) -> ApiResult<DryRun> {
    get(&format!("/reclaim-policies/{id}/dry-run"), &[]).await
}

/// `GET /api/v1/reclaims` (newest first)
pub async fn reclaims() -> ApiResult<Vec<Reclaim>> {
    get("/reclaims", &[]).await
}

/// `POST /api/v1/reclaims/{id}/snooze`
pub async fn snooze_reclaim(id: ReclaimId, for_s: i64) -> ApiResult<Reclaim> {
    post(&format!("/reclaims/{id}/snooze"), &SnoozeRequest { for_s }).await
}

/// `GET /api/v1/plans?from=&to=`
pub async fn plans(from_ms: i64, to_ms: i64) -> ApiResult<Plans> {
    get("/plans", &[("from", from_ms.to_string()), ("to", to_ms.to_string())]).await
}
