//! Background jobs and their leadership across replicas.
//!
//! Every periodic job that must run in one place at a time asks its
//! [`fleetlens_store::leader::JobLock`] before each run: on PostgreSQL a session advisory lock,
//! so with several replicas on one database exactly one runs it, and another takes over as soon
//! as the leader's database session ends (a crash, `kill -9`, a network cut). The jobs:
//! - `alert_engine` (alerts::engine): rule evaluation; also fenced by its lease row;
//! - `rollups` (below): writing each closed minute's rollup and credit once, then its hour and
//!   day ([`Store::close_minutes`]);
//! - `retention` (below): deleting what is older than the retention policy;
//! - `sealing` (below): moving the raw samples of closed GPU-hours into compressed column
//!   blocks ([`Store::seal_closed_hours`]);
//! - `maintenance` (below): vacuuming the tables ingest updates in place, where the database's
//!   autovacuum is off ([`Store::maintain`]).
//!
//! Not leader-only, by design: the notification outbox sender runs on every replica and claims
//! each message with a row lease (`FOR UPDATE SKIP LOCKED` on PostgreSQL), a finer lock than
//! one per job; and every replica re-reads the classifier thresholds (`thresholds_loop`).
//!
//! Which jobs this process leads, and how many runs each did, show in `GET /healthz` and
//! `/metrics` (`fleetlens_job_leader`, `fleetlens_job_runs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fleetlens_store::Store;

use crate::analytics::summary_cache::SummaryCache;
use crate::analytics::{OrgClassifier, THRESHOLDS_REFRESH};
use crate::config::Config;
use crate::time::now_ms;

/// The alert engine's job name (its advisory lock key derives from it).
pub const ALERT_ENGINE: &str = "alert_engine";
/// The retention job's name.
pub const RETENTION: &str = "retention";
/// The rollup job's name.
pub const ROLLUPS: &str = "rollups";
/// The sealing job's name.
pub const SEALING: &str = "sealing";
/// Blocks one sealing pass writes at most: one short transaction each, and the job yields
/// between passes, so a backlog (the first start after an upgrade converts every stored row)
/// is worked off while ingest goes on.
const SEAL_BLOCKS_PER_PASS: u64 = 500;
/// The maintenance job's name.
pub const MAINTENANCE: &str = "maintenance";

/// How often the maintenance job runs. Ingest updates the GPU rows, and the rollup job deletes
/// the marks of the minutes it wrote and rewrites their hours (dead row versions on
/// PostgreSQL); a minute keeps that garbage to a few times the live rows.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(60);

/// Per job: does this process lead it, and how many runs it has completed here.
static JOBS: Mutex<BTreeMap<&'static str, JobStatus>> = Mutex::new(BTreeMap::new());

pub use fleetlens_api::health::JobStatus;

/// Record whether this process leads `job` now.
pub fn set_leader(job: &'static str, leader: bool) {
    JOBS.lock().expect("jobs lock").entry(job).or_default().leader = leader;
}

/// Count one completed run of `job`.
pub fn count_run(job: &'static str) {
    JOBS.lock().expect("jobs lock").entry(job).or_default().runs += 1;
}

/// A snapshot of every job's status in this process.
pub fn statuses() -> BTreeMap<&'static str, JobStatus> {
    JOBS.lock().expect("jobs lock").clone()
}

/// Apply the retention policy shortly after start, then every `retention_interval`, on the one
/// replica that holds the retention lock.
pub async fn retention_loop(store: Arc<dyn Store>, config: Arc<Config>) {
    let policy = config.retention_policy();
    let first = config.retention_interval.min(Duration::from_secs(10));
    leader_loop(store.as_ref(), RETENTION, first, config.retention_interval, || async {
        let now = now_ms();
        // GPU events are kept as long as the hourly rollups they explain.
        let applied = match store.apply_retention(policy, now).await {
            Ok(r) => store.delete_gpu_events_before(now.saturating_sub(policy.rollup_1h_ms)).await.map(|e| (r, e)),
            Err(e) => Err(e),
        };
        match applied {
            Ok((r, events)) => {
                tracing::info!(
                    samples = r.samples,
                    rollups_1m = r.rollups_1m,
                    rollups_1h = r.rollups_1h,
                    gpu_events = events,
                    "retention applied"
                );
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention failed; will retry next interval");
                false
            }
        }
    })
    .await
}

/// Write the closed minutes' rollups every `rollup_interval`, on the one replica that holds the
/// rollup lock. A run that fails wrote nothing (one transaction); the next one does it again.
/// The store re-reads the classifier thresholds in each pass's transaction (after the marks of
/// the minutes it writes), so a change PUT on any replica credits every minute whose samples
/// were stored after it; the pass also re-reads them here first, to drop the summaries cached
/// with the old ones at once.
pub async fn rollup_loop(
    store: Arc<dyn Store>,
    config: Arc<Config>,
    classifier: Arc<OrgClassifier>,
    summaries: Arc<SummaryCache>,
) {
    let lateness = i64::try_from(config.rollup_lateness.as_millis()).unwrap_or(i64::MAX);
    leader_loop(store.as_ref(), ROLLUPS, config.rollup_interval, config.rollup_interval, || async {
        refresh_thresholds(store.as_ref(), &classifier, &summaries).await;
        match store.close_minutes(now_ms(), lateness).await {
            Ok(written) => {
                tracing::debug!(minutes = written, "rollups written");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "writing rollups failed; will retry next interval");
                false
            }
        }
    })
    .await
}

/// Re-read the classifier thresholds every [`THRESHOLDS_REFRESH`], on every replica (not a
/// leader job: each replica classifies its own reads), so a PUT served by another replica
/// reaches this one's GPU pages, summaries and streams within that period.
pub async fn thresholds_loop(store: Arc<dyn Store>, classifier: Arc<OrgClassifier>, summaries: Arc<SummaryCache>) {
    let mut every = tokio::time::interval(THRESHOLDS_REFRESH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        refresh_thresholds(store.as_ref(), &classifier, &summaries).await;
    }
}

/// Re-read the stored thresholds into the classifier and drop the cached summaries of the
/// organisations whose thresholds changed.
async fn refresh_thresholds(store: &dyn Store, classifier: &OrgClassifier, summaries: &SummaryCache) {
    match classifier.reload(store).await {
        Ok(changed) => {
            for org in changed {
                summaries.invalidate(org);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "re-reading classifier thresholds failed; classifying with the last ones read")
        }
    }
}

/// Seal the closed GPU-hours every `seal_interval` on the one replica that holds the sealing
/// lock, pass after pass until none is left. The first run waits a whole interval: a server
/// that starts after an outage first takes the agents' spooled samples, which may still belong
/// to the hours about to be sealed.
pub async fn sealing_loop(store: Arc<dyn Store>, config: Arc<Config>) {
    let every = config.seal_interval;
    leader_loop(store.as_ref(), SEALING, every, every, || async {
        let (mut blocks, mut samples) = (0, 0);
        loop {
            match store.seal_closed_hours(now_ms(), SEAL_BLOCKS_PER_PASS).await {
                Ok(r) => {
                    blocks += r.blocks;
                    samples += r.samples;
                    if !r.more {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, blocks, samples, "sealing failed; will retry next interval");
                    return false;
                }
            }
        }
        if blocks > 0 {
            tracing::info!(blocks, samples, "sealed raw samples into blocks");
        }
        true
    })
    .await
}

/// Run [`Store::maintain`] every [`MAINTENANCE_INTERVAL`] on the one replica that holds the
/// maintenance lock. It says once (at info: the job makes up for it) when it finds the
/// database's autovacuum off.
pub async fn maintenance_loop(store: Arc<dyn Store>) {
    let warned = AtomicBool::new(false);
    leader_loop(store.as_ref(), MAINTENANCE, MAINTENANCE_INTERVAL, MAINTENANCE_INTERVAL, || async {
        match store.maintain().await {
            Ok(report) => {
                if !report.autovacuum && !warned.swap(true, Ordering::Relaxed) {
                    tracing::info!("PostgreSQL autovacuum is off: Fleetlens vacuums its own tables every minute");
                }
                if !report.vacuumed.is_empty() {
                    tracing::info!(tables = ?report.vacuumed, "maintenance: vacuumed and analysed");
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "maintenance failed; will retry next interval");
                false
            }
        }
    })
    .await
}

/// After `first_delay`, then every `interval`: ask for `job`'s lock, record whether this
/// process leads it, and if it does, do one `run` (counted when it returns `true`).
pub(crate) async fn leader_loop<F, Fut>(
    store: &dyn Store,
    job: &'static str,
    first_delay: Duration,
    interval: Duration,
    mut run: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut lock = store.job_lock(job);
    set_leader(job, false);
    tokio::time::sleep(first_delay).await;
    loop {
        let leader = lock.lead().await;
        set_leader(job, leader);
        if leader && run().await {
            count_run(job);
        }
        tokio::time::sleep(interval).await;
    }
}
