//! PostgreSQL's open tables in hourly partitions (migrations 0026, 0027 and 0031).
//!
//! `samples` and `sample_batches` (raw samples not sealed yet, as rows and per-batch blocks),
//! `rollups_1m` (minute rows not packed yet) and `rollup_pending` (marks of minutes the rollup
//! job has not closed yet) hold only the last hour or two, but a plain table keeps its
//! high-water mark: sealing (or the rollup job) deletes an hour's rows and the index pages stay
//! allocated. Range-partitioned by hour, each hour gets a
//! partition `<table>_hour_<hours since 1970-01-01>` ahead of time ([`prepare`]); once sealing
//! and packing have emptied an hour that has closed, [`drop_emptied`] drops its partition and
//! the pages go back to the file system. Rows of an hour without a partition land in the
//! table's DEFAULT partition and are sealed from there like any other.
//!
//! DDL never runs in an ingest transaction (a partition made on demand there would take the
//! parent's lock while holding a lock on it, and two batches would deadlock): the sealing job
//! prepares the next hours, and the store prepares them when it opens.

use std::time::Duration;

use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use super::SPAN_MS;
use crate::Result;

/// The partitioned open tables (by `ts_ms`, `first_ts`, `bucket_ms` and `minute_ms`).
const OPEN_TABLES: [&str; 4] = ["samples", "sample_batches", "rollups_1m", "rollup_pending"];

/// Partitions are prepared for the current hour and this many after it: ingest accepts samples
/// up to 5 minutes ahead, and the sealing job runs every minute, so two hours leave it room
/// to miss many passes.
const HOURS_AHEAD: i64 = 2;

/// The DDL waits at most this long for a lock on the parent (held by running ingest and
/// reads); past it, the pass leaves the partition for the next one rather than queueing
/// every ingest behind itself for longer.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '1s'";

/// A partition is checked for emptiness under the parent's lock only once `VACUUM` has shrunk
/// its heap below this (rows left, or a snapshot older than the seal that still sees the
/// deleted rows, keep it larger).
const DROP_MAX_BYTES: i64 = 1 << 20;

/// SQLSTATE: a lock not obtained within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE: the default partition holds rows of the hour (a check constraint violated).
const CHECK_VIOLATION: &str = "23514";

fn partition_name(table: &str, hour: i64) -> String {
    format!("{table}_hour_{hour}")
}

/// The hour partitions of `table`: `(name, hours since the epoch)`, oldest first.
async fn partitions(pool: &PgPool, table: &str) -> Result<Vec<(String, i64)>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = $1::regclass",
    )
    .bind(table)
    .fetch_all(pool)
    .await?;
    let prefix = format!("{table}_hour_");
    let mut hours: Vec<(String, i64)> = names
        .into_iter()
        .filter_map(|n| {
            let hour = n.strip_prefix(&prefix)?.parse().ok()?;
            Some((n, hour))
        })
        .collect();
    hours.sort_by_key(|h| h.1);
    Ok(hours)
}

/// The SQLSTATE of a database error.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// Whether a `CREATE TABLE … PARTITION OF` failed only because another process created the
/// same partition first: the table exists (42P07), or the two catalog inserts collided
/// (23505). Hour partitions here, day partitions of `sample_blocks` in `blocks::pg`.
pub(super) fn created_concurrently(e: &sqlx::Error) -> bool {
    matches!(sqlstate(e).as_deref(), Some("42P07" | "23505"))
}

/// Create the partitions of the hour of `now_ms` and the [`HOURS_AHEAD`] after it that are
/// missing. Returns how many were created. An hour whose rows already sit in the default
/// partition is left there (creating its partition would have to move them under a lock).
pub(crate) async fn prepare(pool: &PgPool, now_ms: i64) -> Result<u64> {
    let first = now_ms.div_euclid(SPAN_MS);
    let mut created = 0;
    for table in OPEN_TABLES {
        let existing = partitions(pool, table).await?;
        for hour in first..=first + HOURS_AHEAD {
            if existing.iter().any(|e| e.1 == hour) {
                continue;
            }
            let mut tx = pool.begin().await?;
            sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
            let sql = format!(
                "CREATE TABLE {} PARTITION OF {table} FOR VALUES FROM ({}) TO ({})",
                partition_name(table, hour),
                hour * SPAN_MS,
                (hour + 1) * SPAN_MS
            );
            match sqlx::query(&sql).execute(&mut *tx).await {
                Ok(_) => {
                    tx.commit().await?;
                    created += 1;
                }
                Err(e) if created_concurrently(&e) => {}
                Err(e) => match sqlstate(&e).as_deref() {
                    Some(CHECK_VIOLATION) => {
                        tracing::debug!(table, hour, "rows of the hour are in the default partition; it keeps them")
                    }
                    Some(LOCK_NOT_AVAILABLE) => {
                        tracing::info!(table, hour, "partition not created: its table stayed locked; next pass")
                    }
                    _ => return Err(e.into()),
                },
            }
        }
    }
    Ok(created)
}

/// A connection of its own for `VACUUM` and `ANALYZE`, closed by the caller when done:
///
/// - they pause as autovacuum's do (its default cost delay and limit) instead of running at full
///   speed, which read an hour of dead rows fast enough to delay the ingest commits behind its
///   I/O (the maintenance job's lesson, `PgStore::maintain`);
/// - without the pool's slow-statement warning: a throttled vacuum taking seconds is expected,
///   not a symptom (an hour partition's took 11.5 s in a soak, and was its one warning line).
pub(crate) async fn vacuum_connection(pool: &PgPool) -> Result<PgConnection> {
    let opts = (*pool.connect_options()).clone().log_slow_statements(log::LevelFilter::Off, Duration::MAX);
    let mut conn = PgConnection::connect_with(&opts).await?;
    sqlx::query("SET vacuum_cost_delay = '2ms'").execute(&mut conn).await?;
    sqlx::query("SET vacuum_cost_limit = 200").execute(&mut conn).await?;
    Ok(conn)
}

/// `VACUUM` one partition, outside a transaction, on the pass's [`vacuum_connection`], opened
/// by the first partition that needs it: a pass with nothing to vacuum opens none, one that
/// vacuums several (or the same kept-back partition again) opens one.
async fn vacuum(pool: &PgPool, conn: &mut Option<PgConnection>, name: &str) -> Result<()> {
    let conn = match conn {
        Some(c) => c,
        None => conn.insert(vacuum_connection(pool).await?),
    };
    sqlx::query(&format!("VACUUM {name}")).execute(conn).await?;
    Ok(())
}

/// Drop the hour partitions of the open tables that ended at or before `horizon` (the hours
/// sealing has done with) and hold no row; returns how many were dropped.
///
/// First a `VACUUM` removes the rows sealing deleted: an emptied partition's heap shrinks to
/// nothing, and one that still holds rows (an hour whose minutes wait for the rollup job)
/// stays large and is left for a later pass, without a lock. Emptiness is then decided under
/// an exclusive lock on the parent, so no batch can add a row between the check and the drop
/// (a late sample meanwhile keeps the partition for a later pass); the check reads a few
/// pages, not an hour of dead rows. (`VACUUM` of a partition a previous pass vacuumed skips its
/// pages: they are marked all-visible.)
pub(crate) async fn drop_emptied(pool: &PgPool, horizon: i64) -> Result<u64> {
    let mut dropped = 0;
    let mut vacuum_conn = None;
    for table in OPEN_TABLES {
        for (name, hour) in partitions(pool, table).await? {
            if (hour + 1) * SPAN_MS > horizon {
                break;
            }
            vacuum(pool, &mut vacuum_conn, &name).await?;
            let bytes: i64 =
                sqlx::query_scalar("SELECT pg_relation_size($1::regclass)").bind(&name).fetch_one(pool).await?;
            if bytes > DROP_MAX_BYTES {
                continue;
            }
            let mut tx = pool.begin().await?;
            sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
            // The parent first, as ingest and reads lock it: the drop takes it anyway.
            if let Err(e) = sqlx::query(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")).execute(&mut *tx).await
            {
                if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) {
                    tracing::info!(table, hour, "emptied partition not dropped: its table stayed locked; next pass");
                    continue;
                }
                return Err(e.into());
            }
            let any: bool =
                sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM {name})")).fetch_one(&mut *tx).await?;
            if any {
                continue;
            }
            sqlx::query(&format!("DROP TABLE {name}")).execute(&mut *tx).await?;
            tx.commit().await?;
            dropped += 1;
        }
    }
    if let Some(conn) = vacuum_conn {
        conn.close().await?;
    }
    Ok(dropped)
}
