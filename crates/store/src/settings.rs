//! Storage of an organisation's settings (JSON documents by key: prices, classifier
//! thresholds, …) and of the jobs its users report (throughput, for MFU): one trait each,
//! one body of SQL for both backends.

use async_trait::async_trait;
use fleetlens_core::{JobId, JobThroughput};

use crate::{OrgId, Result};

#[async_trait]
pub trait SettingStore: Send + Sync {
    /// Every organisation's value of one setting.
    async fn settings_by_key(&self, key: &str) -> Result<Vec<(OrgId, String)>>;
    /// A per-organisation setting (a JSON document), if set.
    async fn setting(&self, org: OrgId, key: &str) -> Result<Option<String>>;
    async fn put_setting(&self, org: OrgId, key: &str, value: &str, now_ms: i64) -> Result<()>;
}

#[async_trait]
pub trait JobStore: Send + Sync {
    async fn insert_job(&self, org: OrgId, job: &JobRecord) -> Result<JobId>;
    /// Jobs of `org` overlapping `[from_ms, to_ms)`.
    async fn jobs(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<JobRecord>>;
}

/// A job's reported throughput (for MFU). Its GPU list is stored as JSON text: one that does
/// not read is an error, never an empty list (which would be a job on no GPU).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct JobRecord {
    pub id: JobId,
    /// What the job reported; inserts take this alone.
    #[sqlx(flatten)]
    pub report: JobThroughput,
    pub created_ms: i64,
}

macro_rules! impl_setting_and_job_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::settings::SettingStore for $store {
            async fn settings_by_key(&self, key: &str) -> $crate::Result<Vec<($crate::OrgId, String)>> {
                Ok(sqlx::query_as(&q("SELECT org_id, value FROM org_settings WHERE key = ?"))
                    .bind(key)
                    .fetch_all(self.pool())
                    .await?)
            }

            async fn setting(&self, org: $crate::OrgId, key: &str) -> $crate::Result<Option<String>> {
                Ok(sqlx::query_scalar(&q("SELECT value FROM org_settings WHERE org_id = ? AND key = ?"))
                    .bind(org)
                    .bind(key)
                    .fetch_optional(self.pool())
                    .await?)
            }

            async fn put_setting(&self, org: $crate::OrgId, key: &str, value: &str, now_ms: i64) -> $crate::Result<()> {
                sqlx::query(&q(
                    "INSERT INTO org_settings (org_id, key, value, updated_ms) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (org_id, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
                ))
                .bind(org)
                .bind(key)
                .bind(value)
                .bind(now_ms)
                .execute(self.pool())
                .await?;
                Ok(())
            }
        }

        #[async_trait::async_trait]
        impl $crate::settings::JobStore for $store {
            async fn insert_job(&self, org: $crate::OrgId, job: &$crate::settings::JobRecord) -> $crate::Result<fleetlens_core::JobId> {
                Ok(sqlx::query_scalar(&q(
                    "INSERT INTO jobs (org_id, name, gpu_uuids, from_ms, to_ms, precision, achieved_flops_per_s, created_ms) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                ))
                .bind(org)
                .bind(&job.report.name)
                .bind(serde_json::to_string(&job.report.gpu_uuids).expect("uuids serialize"))
                .bind(job.report.from_ms)
                .bind(job.report.to_ms)
                .bind(job.report.precision)
                .bind(job.report.achieved_flops_per_s)
                .bind(job.created_ms)
                .fetch_one(self.pool())
                .await?)
            }

            async fn jobs(&self, org: $crate::OrgId, from_ms: i64, to_ms: i64) -> $crate::Result<Vec<$crate::settings::JobRecord>> {
                Ok(sqlx::query_as(&q(
                    "SELECT * FROM jobs WHERE org_id = ? AND to_ms > ? AND from_ms < ? ORDER BY from_ms, id",
                ))
                .bind(org)
                .bind(from_ms)
                .bind(to_ms)
                .fetch_all(self.pool())
                .await?)
            }
        }
    };
}

mod sqlite_impl {
    use crate::dialect::sqlite::q;
    use crate::sqlite::SqliteStore;

    impl_setting_and_job_store!(SqliteStore);
}

mod pg_impl {
    use crate::dialect::pg::q;
    use crate::postgres::PgStore;

    impl_setting_and_job_store!(PgStore);
}
