//! Storage for acting on waste (issue 24, docs/ACTIONS.md): job runs and their report cards,
//! and where cards are sent. One trait, [`ActionStore`], with one body of SQL for both
//! backends ([`impl_action_store`]).

use async_trait::async_trait;
use fleetlens_core::jobcard::ReportRouteSpec;
use fleetlens_core::{ChannelId, JobRunId, ProcessOwner, ReportRouteId, TeamId};

use crate::alerts::NewNotification;
use crate::json_text::JsonText;
use crate::{OrgId, Result};

/// Processes of one run seen in a batch of samples (or several, merged).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSighting {
    /// `slurm:<id>`, `pod:<ns>/<name>`, `container:<id>` or `pid:<host>/<pid>`.
    pub run_key: String,
    pub host: String,
    pub owner: ProcessOwner,
    pub gpu_uuids: Vec<String>,
    pub first_ms: i64,
    pub last_ms: i64,
}

/// A stored job run.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct JobRunRecord {
    pub id: JobRunId,
    pub org_id: OrgId,
    pub run_key: String,
    pub host: String,
    #[sqlx(try_from = "JsonText<ProcessOwner>")]
    pub owner: ProcessOwner,
    #[sqlx(try_from = "JsonText<Vec<String>>")]
    pub gpu_uuids: Vec<String>,
    /// First and last sample that showed its processes.
    pub first_ms: i64,
    pub last_ms: i64,
    /// A client said it ended (`POST /jobs/{id}/end`), at this time.
    pub end_requested_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    /// `left_gpus` (its processes left its GPUs) or `requested`.
    pub end_reason: Option<String>,
    pub team_id: Option<TeamId>,
    /// The report card (JSON), once ended.
    pub card: Option<String>,
    /// The channel its card was sent to, if it was.
    pub notified_channel_id: Option<ChannelId>,
    pub updated_ms: i64,
}

/// Which runs to list, newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobRunFilter {
    /// `Some(true)`: running only; `Some(false)`: ended only.
    pub open: Option<bool>,
    /// Runs seen in `[from_ms, to_ms)`.
    pub from_ms: i64,
    pub to_ms: i64,
    pub limit: i64,
}

/// A stored report route: where cards go and the bar they must pass, and what the store keeps
/// about it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReportRoute {
    pub id: ReportRouteId,
    pub org_id: OrgId,
    /// Inserts take this alone.
    #[sqlx(flatten)]
    pub route: ReportRouteSpec,
    pub created_ms: i64,
}

/// How a run ended, and its card.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedRun<'a> {
    pub ended_ms: i64,
    pub reason: &'a str,
    pub team_id: Option<TeamId>,
    pub card: &'a str,
    /// The message to the owner's channel, enqueued in the same transaction (so a card is
    /// sent at most once).
    pub notify: Option<&'a NewNotification>,
}

#[async_trait]
pub trait ActionStore: Send + Sync {
    /// Extend each sighting's open run, or open one. A sighting of a key whose run ended at
    /// most `rejoin_ms` before it starts is late data of that run and is dropped. Returns the
    /// runs opened.
    async fn record_job_sightings(
        &self,
        org: OrgId,
        sightings: &[JobSighting],
        rejoin_ms: i64,
        now_ms: i64,
    ) -> Result<u64>;
    /// Every organisation's running runs.
    async fn open_job_runs(&self) -> Result<Vec<JobRunRecord>>;
    async fn job_runs(&self, org: OrgId, filter: &JobRunFilter) -> Result<Vec<JobRunRecord>>;
    async fn job_run(&self, org: OrgId, id: JobRunId) -> Result<Option<JobRunRecord>>;
    /// The newest run of a key.
    async fn job_run_by_key(&self, org: OrgId, run_key: &str) -> Result<Option<JobRunRecord>>;
    /// Ask for a running run to end at `at_ms`; false if it is not running.
    async fn request_job_end(&self, org: OrgId, id: JobRunId, at_ms: i64, now_ms: i64) -> Result<bool>;
    /// End a running run with its card (and enqueue its message); false if it had ended.
    async fn finish_job_run(&self, org: OrgId, id: JobRunId, done: &FinishedRun<'_>, now_ms: i64) -> Result<bool>;
    async fn report_routes(&self, org: OrgId) -> Result<Vec<ReportRoute>>;
    async fn insert_report_route(&self, org: OrgId, route: &ReportRouteSpec, now_ms: i64) -> Result<ReportRoute>;
    async fn delete_report_route(&self, org: OrgId, id: ReportRouteId) -> Result<bool>;
}

pub(crate) const RUN_COLS: &str = "id, org_id, run_key, host, owner, gpu_uuids, first_ms, last_ms, end_requested_ms, \
     ended_ms, end_reason, team_id, card, notified_channel_id, updated_ms";
pub(crate) const ROUTE_COLS: &str = "id, org_id, team_id, owner, channel_id, min_gpu_hours, min_waste_pct, created_ms";

/// Sorted union of two GPU lists.
pub fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut all: Vec<String> = a.iter().chain(b).cloned().collect();
    all.sort();
    all.dedup();
    all
}

macro_rules! impl_action_store {
    ($store:ty, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::actions::ActionStore for $store {
            async fn record_job_sightings(
                &self,
                org: $crate::OrgId,
                sightings: &[$crate::actions::JobSighting],
                rejoin_ms: i64,
                now_ms: i64,
            ) -> $crate::Result<u64> {
                if sightings.is_empty() {
                    return Ok(0);
                }
                let mut tx = begin(self.pool()).await?;
                let mut opened = 0;
                for s in sightings {
                    let open: Option<(i64, $crate::json_text::JsonText<Vec<String>>, i64, i64)> =
                        sqlx::query_as(&q("SELECT id, gpu_uuids, first_ms, last_ms FROM job_runs \
                             WHERE org_id = ? AND run_key = ? AND ended_ms IS NULL"))
                        .bind(org)
                        .bind(&s.run_key)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if let Some((id, gpus, first, last)) = open {
                        let gpus = $crate::actions::union(&Vec::from(gpus), &s.gpu_uuids);
                        sqlx::query(&q(
                            "UPDATE job_runs SET gpu_uuids = ?, first_ms = ?, last_ms = ?, updated_ms = ? WHERE id = ?",
                        ))
                        .bind(serde_json::to_string(&gpus).expect("strings serialise"))
                        .bind(first.min(s.first_ms))
                        .bind(last.max(s.last_ms))
                        .bind(now_ms)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                        continue;
                    }
                    let late = sqlx::query(&q(
                        "SELECT id FROM job_runs WHERE org_id = ? AND run_key = ? AND ended_ms IS NOT NULL \
                         AND last_ms >= ? LIMIT 1",
                    ))
                    .bind(org)
                    .bind(&s.run_key)
                    .bind(s.first_ms.saturating_sub(rejoin_ms))
                    .fetch_optional(&mut *tx)
                    .await?;
                    if late.is_some() {
                        continue;
                    }
                    let gpus = $crate::actions::union(&s.gpu_uuids, &[]);
                    sqlx::query(&q(
                        "INSERT INTO job_runs (org_id, run_key, host, owner, gpu_uuids, first_ms, last_ms, updated_ms) \
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    ))
                    .bind(org)
                    .bind(&s.run_key)
                    .bind(&s.host)
                    .bind(serde_json::to_string(&s.owner).expect("an owner serialises"))
                    .bind(serde_json::to_string(&gpus).expect("strings serialise"))
                    .bind(s.first_ms)
                    .bind(s.last_ms)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
                    opened += 1;
                }
                tx.commit().await?;
                Ok(opened)
            }

            async fn open_job_runs(&self) -> $crate::Result<Vec<$crate::actions::JobRunRecord>> {
                let sql = format!(
                    "SELECT {} FROM job_runs WHERE ended_ms IS NULL ORDER BY org_id, id",
                    $crate::actions::RUN_COLS
                );
                Ok(sqlx::query_as(&sql).fetch_all(self.pool()).await?)
            }

            async fn job_runs(
                &self,
                org: $crate::OrgId,
                f: &$crate::actions::JobRunFilter,
            ) -> $crate::Result<Vec<$crate::actions::JobRunRecord>> {
                let open = f.open.map(|o| if o { 1i64 } else { 0 });
                let sql = format!(
                    "SELECT {} FROM job_runs WHERE org_id = ? AND last_ms >= ? AND first_ms < ? \
                     AND (? IS NULL OR (CASE WHEN ended_ms IS NULL THEN 1 ELSE 0 END) = ?) \
                     ORDER BY last_ms DESC, id DESC LIMIT ?",
                    $crate::actions::RUN_COLS
                );
                Ok(sqlx::query_as(&q(&sql))
                    .bind(org)
                    .bind(f.from_ms)
                    .bind(f.to_ms)
                    .bind(open)
                    .bind(open)
                    .bind(f.limit)
                    .fetch_all(self.pool())
                    .await?)
            }

            async fn job_run(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::JobRunId,
            ) -> $crate::Result<Option<$crate::actions::JobRunRecord>> {
                one_of_org(self.pool(), $crate::actions::RUN_COLS, "job_runs", org, id).await
            }

            async fn job_run_by_key(
                &self,
                org: $crate::OrgId,
                run_key: &str,
            ) -> $crate::Result<Option<$crate::actions::JobRunRecord>> {
                let sql = format!(
                    "SELECT {} FROM job_runs WHERE org_id = ? AND run_key = ? ORDER BY first_ms DESC, id DESC LIMIT 1",
                    $crate::actions::RUN_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(run_key).fetch_optional(self.pool()).await?)
            }

            async fn request_job_end(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::JobRunId,
                at_ms: i64,
                now_ms: i64,
            ) -> $crate::Result<bool> {
                let sql = q("UPDATE job_runs SET end_requested_ms = ?, updated_ms = ? \
                     WHERE org_id = ? AND id = ? AND ended_ms IS NULL");
                let done = sqlx::query(&sql).bind(at_ms).bind(now_ms).bind(org).bind(id).execute(self.pool()).await?;
                Ok(done.rows_affected() == 1)
            }

            async fn finish_job_run(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::JobRunId,
                done: &$crate::actions::FinishedRun<'_>,
                now_ms: i64,
            ) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                let updated = sqlx::query(&q(
                    "UPDATE job_runs SET ended_ms = ?, end_reason = ?, team_id = ?, card = ?, notified_channel_id = ?, \
                     updated_ms = ? WHERE org_id = ? AND id = ? AND ended_ms IS NULL",
                ))
                .bind(done.ended_ms)
                .bind(done.reason)
                .bind(done.team_id)
                .bind(done.card)
                .bind(done.notify.map(|n| n.channel_id))
                .bind(now_ms)
                .bind(org)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if updated != 1 {
                    return Ok(false);
                }
                if let Some(n) = done.notify {
                    insert_outbox(&mut tx, org, None, n, now_ms).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn report_routes(&self, org: $crate::OrgId) -> $crate::Result<Vec<$crate::actions::ReportRoute>> {
                all_of_org(self.pool(), $crate::actions::ROUTE_COLS, "report_routes", "id", org).await
            }

            async fn insert_report_route(
                &self,
                org: $crate::OrgId,
                r: &fleetlens_core::jobcard::ReportRouteSpec,
                now_ms: i64,
            ) -> $crate::Result<$crate::actions::ReportRoute> {
                let id: fleetlens_core::ReportRouteId = sqlx::query_scalar(&q(
                    "INSERT INTO report_routes (org_id, team_id, owner, channel_id, min_gpu_hours, min_waste_pct, \
                     created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                ))
                .bind(org)
                .bind(r.team_id)
                .bind(r.owner.as_deref())
                .bind(r.channel_id)
                .bind(r.min_gpu_hours)
                .bind(r.min_waste_pct)
                .bind(now_ms)
                .fetch_one(self.pool())
                .await?;
                Ok($crate::actions::ReportRoute { id, org_id: org, route: r.clone(), created_ms: now_ms })
            }

            async fn delete_report_route(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::ReportRouteId,
            ) -> $crate::Result<bool> {
                delete_of_org(self.pool(), "report_routes", org, id).await
            }
        }
    };
}

mod sqlite_impl {
    use crate::dialect::sqlite::{all_of_org, begin, delete_of_org, insert_outbox, one_of_org, q};
    use crate::sqlite::SqliteStore;

    impl_action_store!(SqliteStore, sqlx::Sqlite);
}

mod pg_impl {
    use crate::dialect::pg::{all_of_org, begin, delete_of_org, insert_outbox, one_of_org, q};
    use crate::postgres::PgStore;

    impl_action_store!(PgStore, sqlx::Postgres);
}
