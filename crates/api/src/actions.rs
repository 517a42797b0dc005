//! Job runs, their report cards and the report routes (docs/ACTIONS.md): the bodies of
//! `/job-runs`, `/jobs/{id}/end` and `/report-routes`.

use fleetlens_core::jobcard::{JobCard, JobRunStatus, ReportRouteSpec};
use fleetlens_core::{ChannelId, JobRunId, ProcessOwner, ReportRouteId, TeamId};
use serde::{Deserialize, Serialize};

/// A job run: a Slurm job, pod, container or process seen on GPUs, and its card once ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRun {
    pub id: JobRunId,
    /// `slurm:<id>`, `pod:<namespace>/<name>` (or `pod:<uid>`), `container:<id>`,
    /// `pid:<host>/<pid>`.
    pub key: String,
    pub host: String,
    pub owner: ProcessOwner,
    pub gpus: Vec<String>,
    pub first_ms: i64,
    pub last_ms: i64,
    /// `running` or `ended`.
    pub status: JobRunStatus,
    pub end_requested_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    /// `left_gpus` or `requested`.
    pub end_reason: Option<String>,
    pub team_id: Option<TeamId>,
    pub card: Option<JobCard>,
    /// The channel its card was sent to (at most once); null when none matched or the card
    /// did not pass the route's bar.
    pub notified_channel_id: Option<ChannelId>,
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

/// When the job ended (default: now).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EndRequest {
    #[serde(default)]
    pub at: Option<crate::TimeArg>,
}

/// A report route: where report cards go (`ReportRouteSpec`, at the top level of the JSON) and
/// when the server stored it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportRouteView {
    pub id: ReportRouteId,
    #[serde(flatten)]
    pub route: ReportRouteSpec,
    pub created_ms: i64,
}

/// A new route; the most specific matching route (owner and team, owner, team, anyone) wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewReportRoute {
    #[serde(default)]
    pub team_id: Option<TeamId>,
    #[serde(default)]
    pub owner: Option<String>,
    pub channel_id: ChannelId,
    /// Default 0.5.
    #[serde(default)]
    pub min_gpu_hours: Option<f64>,
    /// Default 20.
    #[serde(default)]
    pub min_waste_pct: Option<f64>,
}

/// `GET /api/v1/job-runs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct RunQuery {
    /// `running` or `ended` (default: both).
    pub status: Option<String>,
    /// Only runs of this user (the process's user, else the Slurm job's user).
    pub owner: Option<String>,
    /// Only runs on this team's GPUs (known once a run has ended).
    pub team: Option<TeamId>,
    /// Runs seen at or after this time (RFC 3339 or Unix ms; default: 7 days before `to`).
    pub from: Option<String>,
    /// Runs seen before this time (default: now).
    pub to: Option<String>,
    /// At most this many (default 100, at most 1,000).
    pub limit: Option<i64>,
}

/// `GET /api/v1/plans` (its body is [`fleetlens_core::plans::Plans`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct PlansQuery {
    /// Runs ended at or after this time (default: 7 days before `to`).
    pub from: Option<String>,
    /// Default: now.
    pub to: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The route's fields stand at the top level, in the order the API has always sent them.
    #[test]
    fn a_report_route_sends_its_spec_at_the_top_level() {
        let route = ReportRouteView {
            id: ReportRouteId(4),
            route: ReportRouteSpec {
                team_id: None,
                owner: Some("alice".into()),
                channel_id: ChannelId(2),
                min_gpu_hours: 0.5,
                min_waste_pct: 20.0,
            },
            created_ms: 9,
        };
        let text = serde_json::to_string(&route).unwrap();
        assert_eq!(
            text,
            r#"{"id":4,"team_id":null,"owner":"alice","channel_id":2,"min_gpu_hours":0.5,"min_waste_pct":20.0,"created_ms":9}"#
        );
        assert_eq!(serde_json::from_str::<ReportRouteView>(&text).unwrap(), route);
    }
}
