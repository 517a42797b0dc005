//! The acting-on-waste endpoints (docs/ACTIONS.md): job runs and their report cards, report
//! routes, idle-reclaim policies with their dry run, the reclaims and their log, and the
//! collocation / right-size plans. A child of `api` so that it shares its request helpers.

use fleetlens_core::ProcessOwner;
use fleetlens_core::jobcard::JobCard;
use fleetlens_core::plans::Plans;
use gloo_net::http::Request;
use serde::{Deserialize, Serialize};

use super::{ApiResult, PREFIX, get, seg, send_empty, send_json, to_body};

/// A job run (`GET /api/v1/job-runs`): a Slurm job, pod, container or process seen on GPUs, and
/// its card once it has ended.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JobRun {
    pub id: i64,
    pub key: String,
    pub host: String,
    #[serde(default)]
    pub owner: ProcessOwner,
    #[serde(default)]
    pub gpus: Vec<String>,
    pub first_ms: i64,
    pub last_ms: i64,
    /// `running` or `ended`.
    pub status: String,
    pub end_requested_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub end_reason: Option<String>,
    pub team_id: Option<i64>,
    pub card: Option<JobCard>,
    pub notified_channel_id: Option<i64>,
}

impl JobRun {
    /// The person the run is for: the process's user, else the Slurm job's user (the server's
    /// `owner` filter reads the same).
    pub fn owner_name(&self) -> Option<String> {
        self.owner.user.clone().or_else(|| self.owner.job_user.clone())
    }

    pub fn is_open(&self) -> bool {
        self.ended_ms.is_none()
    }
}

/// Filters of the job list, as the URL holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub owner: String,
    pub team: Option<i64>,
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
pub async fn end_job(id: i64) -> ApiResult<JobRun> {
    let path = format!("{PREFIX}/jobs/{id}/end");
    send_json(Request::post(&path), &path, "{}".into()).await
}

/// Where report cards go (`GET /api/v1/report-routes`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReportRoute {
    pub id: i64,
    pub team_id: Option<i64>,
    pub owner: Option<String>,
    pub channel_id: i64,
    pub min_gpu_hours: f64,
    pub min_waste_pct: f64,
    pub created_ms: i64,
}

/// A new report route.
#[derive(Debug, Clone, Serialize)]
pub struct NewReportRoute {
    pub team_id: Option<i64>,
    pub owner: Option<String>,
    pub channel_id: i64,
    pub min_gpu_hours: Option<f64>,
    pub min_waste_pct: Option<f64>,
}

/// `GET /api/v1/report-routes`
pub async fn report_routes() -> ApiResult<Vec<ReportRoute>> {
    get("/report-routes", &[]).await
}

/// `POST /api/v1/report-routes`
pub async fn create_report_route(route: &NewReportRoute) -> ApiResult<ReportRoute> {
    let path = format!("{PREFIX}/report-routes");
    send_json(Request::post(&path), &path, to_body(route)).await
}

/// `DELETE /api/v1/report-routes/{id}`
pub async fn delete_report_route(id: i64) -> ApiResult<()> {
    let path = format!("{PREFIX}/report-routes/{id}");
    send_empty(Request::delete(&path), &path).await
}

/// An idle-reclaim policy (`GET /api/v1/reclaim-policies`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReclaimPolicy {
    pub id: i64,
    pub name: String,
    pub state: String,
    pub for_s: i64,
    pub grace_s: i64,
    /// `webhook` or `agent_kill`.
    pub action: String,
    pub action_channel_id: Option<i64>,
    pub notice_channel_id: Option<i64>,
    pub enabled: bool,
    pub created_ms: i64,
}

/// A new policy.
#[derive(Debug, Clone, Serialize)]
pub struct NewReclaimPolicy {
    pub name: String,
    pub state: String,
    pub for_s: i64,
    pub grace_s: i64,
    pub action: String,
    pub action_channel_id: Option<i64>,
    pub notice_channel_id: Option<i64>,
}

/// `GET /api/v1/reclaim-policies`
pub async fn reclaim_policies() -> ApiResult<Vec<ReclaimPolicy>> {
    get("/reclaim-policies", &[]).await
}

/// `POST /api/v1/reclaim-policies`
pub async fn create_reclaim_policy(policy: &NewReclaimPolicy) -> ApiResult<ReclaimPolicy> {
    let path = format!("{PREFIX}/reclaim-policies");
    send_json(Request::post(&path), &path, to_body(policy)).await
}

/// `DELETE /api/v1/reclaim-policies/{id}` (its open reclaims are cancelled).
pub async fn delete_reclaim_policy(id: i64) -> ApiResult<()> {
    let path = format!("{PREFIX}/reclaim-policies/{id}");
    send_empty(Request::delete(&path), &path).await
}

/// One GPU a dry run would have reclaimed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DryRunItem {
    pub gpu: String,
    pub host: String,
    pub since_ms: i64,
    pub notice_ms: i64,
    pub action_ms: i64,
    pub until_ms: i64,
    pub freed_hours: f64,
    pub freed_cost: Option<f64>,
}

/// What a policy would have done over a period (`GET /api/v1/reclaim-policies/{id}/dry-run`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DryRun {
    pub policy_id: i64,
    pub from_ms: i64,
    pub to_ms: i64,
    pub actions: usize,
    pub freed_gpu_hours: f64,
    pub freed_cost: Option<f64>,
    pub currency: String,
    pub items: Vec<DryRunItem>,
    pub summary: String,
}

/// `GET /api/v1/reclaim-policies/{id}/dry-run` over the server's default period (the past week).
pub async fn dry_run(id: i64) -> ApiResult<DryRun> {
    get(&format!("/reclaim-policies/{id}/dry-run"), &[]).await
}

/// One logged step of a reclaim: who, what, when, and the money held by then.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReclaimStep {
    pub id: i64,
    /// `notice`, `snooze`, `action_webhook`, `kill_queued`, `killed`, `kill_refused`, `cancelled`.
    pub step: String,
    pub actor: String,
    pub dollars_held: Option<f64>,
    pub at_ms: i64,
    #[serde(default)]
    pub detail: String,
}

/// A reclaim of one GPU by one policy, and its steps (`GET /api/v1/reclaims`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Reclaim {
    pub id: i64,
    pub policy_id: i64,
    pub gpu: String,
    pub host: String,
    pub run_key: String,
    pub pid: i64,
    #[serde(default)]
    pub owner: ProcessOwner,
    pub state_since_ms: i64,
    pub noticed_ms: i64,
    pub snoozed_until_ms: Option<i64>,
    pub acted_ms: Option<i64>,
    pub closed_ms: Option<i64>,
    /// `noticed`, `acted` or `cancelled`.
    pub status: String,
    pub log: Vec<ReclaimStep>,
}

/// `GET /api/v1/reclaims` (newest first)
pub async fn reclaims() -> ApiResult<Vec<Reclaim>> {
    get("/reclaims", &[]).await
}

/// `POST /api/v1/reclaims/{id}/snooze`
pub async fn snooze_reclaim(id: i64, for_s: i64) -> ApiResult<Reclaim> {
    #[derive(Serialize)]
    struct Snooze {
        for_s: i64,
    }
    let path = format!("{PREFIX}/reclaims/{id}/snooze");
    send_json(Request::post(&path), &path, to_body(&Snooze { for_s })).await
}

/// `GET /api/v1/plans?from=&to=`
pub async fn plans(from_ms: i64, to_ms: i64) -> ApiResult<Plans> {
    get("/plans", &[("from", from_ms.to_string()), ("to", to_ms.to_string())]).await
}
