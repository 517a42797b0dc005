//! Sealed blocks on PostgreSQL: sealing, the sealed side of raw-sample reads, and retention.
//!
//! `sample_blocks` is range-partitioned by day on `start_ms` (migration 0019): one partition
//! `sample_blocks_day_<days since 1970-01-01>` per UTC day, created by the sealing job before
//! it writes the day's first block, so that retention detaches and drops whole days instead of
//! deleting (and later vacuuming) row by row.

use fleetlens_core::{GpuId, Sample};
use sqlx::{PgPool, Postgres, Transaction};

use super::{SPAN_MS, format, minutes};
use crate::dialect::pg::q;
use crate::{DAY_MS, Result};

const PARTITION_PREFIX: &str = "sample_blocks_day_";

/// Each GPU's oldest open sample, where it is before the horizon: one index probe per GPU in
/// each of the open tables (rows and per-batch blocks, `crate::pg_batches`).
const OLDEST_OPEN_SQL: &str = "SELECT g.id, o.ts FROM gpus g CROSS JOIN LATERAL \
     (SELECT least((SELECT min(ts_ms) FROM samples WHERE gpu_id = g.id), \
     (SELECT min(first_ts) FROM sample_batches WHERE gpu_id = g.id)) AS ts) o WHERE o.ts < ? ORDER BY g.id";

/// A GPU's oldest open sample from a time on (a block never crosses a minute, so its first
/// sample is in the hour it is sealed with).
const NEXT_OPEN_SQL: &str = "SELECT least((SELECT min(ts_ms) FROM samples WHERE gpu_id = $1 AND ts_ms >= $2), \
     (SELECT min(first_ts) FROM sample_batches WHERE gpu_id = $1 AND first_ts >= $2))";

/// A GPU-hour's open samples, rows and blocks, deleted and returned as rows.
const TAKE_OPEN_SQL: &str = "WITH r AS (DELETE FROM samples WHERE gpu_id = $1 AND ts_ms >= $2 AND ts_ms < $3 \
     RETURNING ts_ms, vals, processes, allocations), \
     b AS (DELETE FROM sample_batches WHERE gpu_id = $1 AND first_ts >= $2 AND first_ts < $3 \
     RETURNING ts, vals, processes, allocations) \
     SELECT ts_ms, vals, processes, allocations FROM r UNION ALL \
     SELECT u.ts_ms, u.vals, u.processes, u.allocations FROM b, \
     unnest(b.ts, b.vals, b.processes, b.allocations) AS u(ts_ms, vals, processes, allocations)";

/// Each GPU's oldest row of `rollups_1m`, where it is before the horizon.
const OLDEST_MINUTE_SQL: &str = "SELECT g.id, o.m FROM gpus g CROSS JOIN LATERAL \
     (SELECT min(bucket_ms) AS m FROM rollups_1m WHERE gpu_id = g.id) o WHERE o.m < ? ORDER BY g.id";

/// A second sealer (a replica that just took over) waits instead of rewriting the block from
/// the same old version.
const BLOCK_LOCK: &str = " FOR UPDATE";

/// A block of a new day needs the day's partition.
async fn before_day(pool: &PgPool, day: i64) -> Result<()> {
    ensure_partition(pool, day).await
}

super::impl_seal!(PgPool, pg);

/// After a pass that left nothing to seal or pack: the open tables' partitions of the next
/// hours prepared, and those of the hours now emptied dropped ([`super::hourly`]). Returns the
/// partitions dropped.
pub(crate) async fn after_pass(pool: &PgPool, now_ms: i64) -> Result<u64> {
    super::hourly::prepare(pool, now_ms).await?;
    super::hourly::drop_emptied(pool, super::horizon(now_ms)).await
}

/// Create the partition of day `day` (days since the epoch) unless it exists.
pub(crate) async fn ensure_partition(pool: &PgPool, day: i64) -> Result<()> {
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {PARTITION_PREFIX}{day} PARTITION OF sample_blocks FOR VALUES FROM ({}) TO ({})",
        day * DAY_MS,
        (day + 1) * DAY_MS
    );
    match sqlx::query(&sql).execute(pool).await {
        Ok(_) => Ok(()),
        // Two processes creating the same day at once.
        Err(e) if super::hourly::created_concurrently(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Payloads of one GPU's blocks overlapping `[from_ms, to_ms)`, in time order.
pub(crate) async fn payloads(pool: &PgPool, gpu_id: GpuId, from_ms: i64, to_ms: i64) -> Result<Vec<Vec<u8>>> {
    // `start_ms > from - span` lets the planner prune the day partitions (it cannot from
    // `end_ms`): a block starts at most one span before the first sample it holds.
    Ok(sqlx::query_scalar(
        "SELECT payload FROM sample_blocks WHERE gpu_id = $1 AND start_ms < $2 AND start_ms > $3 - $4 \
         AND end_ms > $3 ORDER BY start_ms",
    )
    .bind(gpu_id)
    .bind(to_ms)
    .bind(from_ms)
    .bind(SPAN_MS)
    .fetch_all(pool)
    .await?)
}

/// Sealed samples of every GPU of `org` in `[from_ms, to_ms)`, per GPU.
pub(crate) async fn org_samples(
    pool: &PgPool,
    org: crate::OrgId,
    gpus: Option<&[GpuId]>,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<(GpuId, Vec<Sample>)>> {
    // Two statements rather than `$5 IS NULL OR …`, which a generic plan could not index.
    let only = if gpus.is_some() { " AND b.gpu_id = ANY($5)" } else { "" };
    let sql = format!(
        "SELECT b.gpu_id, b.payload FROM sample_blocks b JOIN gpus g ON g.id = b.gpu_id \
         WHERE g.org_id = $1 AND b.start_ms < $2 AND b.start_ms > $3 - $4 AND b.end_ms > $3{only} \
         ORDER BY b.gpu_id, b.start_ms"
    );
    let mut query = sqlx::query_as::<_, (GpuId, Vec<u8>)>(&sql).bind(org).bind(to_ms).bind(from_ms).bind(SPAN_MS);
    if let Some(ids) = gpus {
        query = query.bind(ids.iter().map(|id| id.get()).collect::<Vec<i64>>());
    }
    super::decode_per_gpu(query.fetch_all(pool).await?, from_ms, to_ms)
}

/// Ingest: the blocks of sealed hours that the batch's samples (`order`, sorted by GPU and
/// time) fall in go back to open rows in the ingest transaction (see `blocks`), locked first
/// so a sealer rewriting one waits. One statement finds them; it finds nothing, cheaply, for
/// live data. Returns the samples unsealed.
pub(crate) async fn unseal_for_batch(tx: &mut Transaction<'_, Postgres>, order: &[(i64, &Sample)]) -> Result<u64> {
    let mut spans = crate::pg_batches::spans(order);
    // Only spans reaching back before the current hour can meet a block (live batches: none).
    spans.retain(|s| super::may_be_sealed(s.1));
    if spans.is_empty() {
        return Ok(0);
    }
    let blocks: Vec<(i64, i64, Vec<u8>)> = sqlx::query_as(
        "SELECT b.gpu_id, b.start_ms, b.payload FROM UNNEST($1::int8[], $2::int8[], $3::int8[]) AS t(g, lo, hi) \
         JOIN sample_blocks b ON b.gpu_id = t.g AND b.start_ms <= t.hi AND b.end_ms > t.lo \
         ORDER BY b.gpu_id, b.start_ms FOR UPDATE OF b",
    )
    .bind(spans.iter().map(|s| s.0).collect::<Vec<i64>>())
    .bind(spans.iter().map(|s| s.1).collect::<Vec<i64>>())
    .bind(spans.iter().map(|s| s.2).collect::<Vec<i64>>())
    .fetch_all(&mut **tx)
    .await?;
    Ok(super::unseal_blocks!(&mut **tx, blocks, |rows| {
        crate::pg_samples::insert(tx, &rows, crate::pg_samples::InsertMode::SkipStored).await?;
    }))
}

/// The blocks holding the newest sample of each GPU of `gpu_ids`: `(gpu_id, payload)`.
pub(crate) async fn latest_blocks(pool: &PgPool, gpu_ids: &[GpuId]) -> Result<Vec<(GpuId, Vec<u8>)>> {
    if gpu_ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(&format!(
        "SELECT b.gpu_id, b.payload FROM gpus g JOIN sample_blocks b ON b.gpu_id = g.id \
         AND b.start_ms = (g.last_seen_ms / {SPAN_MS}) * {SPAN_MS} WHERE g.id = ANY($1)"
    ))
    // Bound as a BIGINT[] of the plain keys (the id newtype has no array type of its own).
    .bind(gpu_ids.iter().map(|id| id.get()).collect::<Vec<i64>>())
    .fetch_all(pool)
    .await?)
}

/// Sealed samples in all.
pub(crate) async fn count(pool: &PgPool) -> Result<u64> {
    let n: i64 = sqlx::query_scalar("SELECT coalesce(sum(n), 0)::int8 FROM sample_blocks").fetch_one(pool).await?;
    Ok(n as u64)
}

/// Retention: detach and drop the day partitions wholly older than `cutoff_ms`, then delete
/// the blocks wholly older than it in the day it falls in; returns the samples they held.
pub(crate) async fn drop_before(pool: &PgPool, cutoff_ms: i64) -> Result<u64> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'sample_blocks'::regclass",
    )
    .fetch_all(pool)
    .await?;
    let mut removed = 0u64;
    for name in names {
        let Some(day) = name.strip_prefix(PARTITION_PREFIX).and_then(|d| d.parse::<i64>().ok()) else { continue };
        if (day + 1) * DAY_MS > cutoff_ms {
            continue;
        }
        let n: i64 =
            sqlx::query_scalar(&format!("SELECT coalesce(sum(n), 0)::int8 FROM {name}")).fetch_one(pool).await?;
        // Detached first: the drop then takes no lock on the parent that reads would queue on.
        sqlx::query(&format!("ALTER TABLE sample_blocks DETACH PARTITION {name}")).execute(pool).await?;
        sqlx::query(&format!("DROP TABLE {name}")).execute(pool).await?;
        removed += n as u64;
    }
    let ns: Vec<i32> = sqlx::query_scalar(
        "DELETE FROM sample_blocks WHERE start_ms >= $2 AND start_ms < $1 AND end_ms <= $1 RETURNING n",
    )
    .bind(cutoff_ms)
    .bind(cutoff_ms.div_euclid(DAY_MS) * DAY_MS)
    .fetch_all(pool)
    .await?;
    removed += ns.iter().map(|&n| n as u64).sum::<u64>();
    Ok(removed)
}
