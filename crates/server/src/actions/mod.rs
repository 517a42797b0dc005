//! Acting on waste (issue 24, docs/ACTIONS.md): job runs found from the processes' owners
//! ([`tracker`]) and their report cards ([`cards`]), idle-reclaim policies ([`reclaim`]), and
//! collocation and right-size plans from job history ([`plans`]).

pub mod cards;
pub mod plans;
pub mod reclaim;
pub mod tracker;

use std::time::Duration;

use crate::state::AppState;

/// The leader job that ends runs and computes their cards.
pub const JOB_REPORTS: &str = "job_reports";

/// Settings of job runs and report cards (flags with environment fallbacks).
#[derive(Debug, Clone, clap::Args)]
pub struct ActionsConfig {
    /// A job run ends when every one of its GPUs has listed its processes without it for this
    /// long (or a client ends it: `POST /api/v1/jobs/{id}/end`).
    #[arg(long, env = "FLEETLENS_JOB_END_AFTER", default_value = "2m", value_parser = humantime::parse_duration)]
    pub job_end_after: Duration,

    /// How often the server looks for ended job runs and evaluates the idle-reclaim policies.
    #[arg(long, env = "FLEETLENS_JOB_SCAN_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub job_scan_interval: Duration,
}

/// Look for ended runs every `--job-scan-interval`, on the replica that leads the job.
pub async fn report_loop(state: AppState) {
    let interval = state.config.actions.job_scan_interval.max(Duration::from_millis(100));
    let store = state.store.clone();
    crate::jobs::leader_loop(store.as_ref(), JOB_REPORTS, interval, interval, || async {
        match cards::scan(&state).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "job reports: scan failed; will retry");
                false
            }
        }
    })
    .await
}
