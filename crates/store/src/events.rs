//! Storage of GPU events (XID errors, GPUs lost and back): one trait, [`EventStore`], with one
//! body of SQL for both backends ([`impl_event_store`]).

use async_trait::async_trait;
use fleetlens_core::{GpuEvent, GpuEventId};

use crate::{OrgId, Result};

/// A stored event.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GpuEventRecord {
    pub id: GpuEventId,
    pub org_id: OrgId,
    pub gpu_uuid: String,
    pub host: String,
    pub ts_ms: i64,
    /// `xid`, `gpu_lost`, `gpu_recovered`, `gpm_unavailable` or `gpm_available`.
    pub kind: String,
    pub xid: Option<i64>,
    pub message: Option<String>,
    pub received_ms: i64,
}

/// Which events to list, newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventFilter {
    pub gpu_uuid: Option<String>,
    pub kind: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    /// Only events with an id below this (paging).
    pub before_id: Option<GpuEventId>,
    pub limit: i64,
}

#[async_trait]
pub trait EventStore: Send + Sync {
    /// Store a host's events (validated by the caller); an event already stored (same GPU,
    /// time, kind and XID) is skipped. Returns how many were new.
    async fn insert_gpu_events(&self, org: OrgId, host: &str, events: &[GpuEvent], now_ms: i64) -> Result<u64>;
    /// The organisation's events matching the filter, newest first.
    async fn gpu_events(&self, org: OrgId, filter: &EventFilter) -> Result<Vec<GpuEventRecord>>;
    /// Events of every organisation with an id above `after_id`, oldest first (the alert
    /// engine's feed).
    async fn gpu_events_after(&self, after_id: GpuEventId, limit: i64) -> Result<Vec<GpuEventRecord>>;
    /// Delete events older than `before_ms`; returns how many went.
    async fn delete_gpu_events_before(&self, before_ms: i64) -> Result<u64>;
}

pub(crate) const COLS: &str = "id, org_id, gpu_uuid, host, ts_ms, kind, xid, message, received_ms";

macro_rules! impl_event_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::events::EventStore for $store {
            async fn insert_gpu_events(
                &self,
                org: $crate::OrgId,
                host: &str,
                events: &[fleetlens_core::GpuEvent],
                now_ms: i64,
            ) -> $crate::Result<u64> {
                if events.is_empty() {
                    return Ok(0);
                }
                let sql = q("INSERT INTO gpu_events (org_id, gpu_uuid, host, ts_ms, kind, xid, message, received_ms) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING");
                let mut tx = begin(self.pool()).await?;
                let mut inserted = 0;
                for e in events {
                    let xid = e.xid.map(|x| i64::try_from(x).unwrap_or(i64::MAX));
                    inserted += sqlx::query(&sql)
                        .bind(org)
                        .bind(e.uuid.trim())
                        .bind(host)
                        .bind(e.ts_ms)
                        .bind(e.kind.as_str())
                        .bind(xid)
                        .bind(e.message.as_deref())
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                }
                tx.commit().await?;
                Ok(inserted)
            }

            async fn gpu_events(
                &self,
                org: $crate::OrgId,
                f: &$crate::events::EventFilter,
            ) -> $crate::Result<Vec<$crate::events::GpuEventRecord>> {
                let sql = format!(
                    "SELECT {} FROM gpu_events WHERE org_id = ? AND ts_ms >= ? AND ts_ms < ? \
                     AND (? IS NULL OR gpu_uuid = ?) AND (? IS NULL OR kind = ?) AND id < ? \
                     ORDER BY ts_ms DESC, id DESC LIMIT ?",
                    $crate::events::COLS
                );
                Ok(sqlx::query_as(&q(&sql))
                    .bind(org)
                    .bind(f.from_ms)
                    .bind(f.to_ms)
                    .bind(f.gpu_uuid.as_deref())
                    .bind(f.gpu_uuid.as_deref())
                    .bind(f.kind.as_deref())
                    .bind(f.kind.as_deref())
                    .bind(f.before_id.map_or(i64::MAX, fleetlens_core::GpuEventId::get))
                    .bind(f.limit)
                    .fetch_all(self.pool())
                    .await?)
            }

            async fn gpu_events_after(
                &self,
                after_id: fleetlens_core::GpuEventId,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::events::GpuEventRecord>> {
                let sql = format!("SELECT {} FROM gpu_events WHERE id > ? ORDER BY id LIMIT ?", $crate::events::COLS);
                Ok(sqlx::query_as(&q(&sql)).bind(after_id).bind(limit).fetch_all(self.pool()).await?)
            }

            async fn delete_gpu_events_before(&self, before_ms: i64) -> $crate::Result<u64> {
                let sql = q("DELETE FROM gpu_events WHERE ts_ms < ?");
                Ok(sqlx::query(&sql).bind(before_ms).execute(self.pool()).await?.rows_affected())
            }
        }
    };
}

mod sqlite_impl {
    use crate::dialect::sqlite::{begin, q};
    use crate::sqlite::SqliteStore;

    impl_event_store!(SqliteStore);
}

mod pg_impl {
    use crate::dialect::pg::{begin, q};
    use crate::postgres::PgStore;

    impl_event_store!(PgStore);
}
