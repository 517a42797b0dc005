//! Sealed blocks on SQLite: sealing, the sealed side of raw-sample reads, and retention.

use fleetlens_core::{GpuId, Sample};
use sqlx::{SqliteConnection, SqlitePool};

use super::{SPAN_MS, format, minutes};
use crate::Result;
use crate::dialect::sqlite::q;
use crate::rollup_close::BindGpus as _;

/// Each GPU's oldest open sample, where it is before the horizon: one index probe per GPU (a
/// scan of the open rows for old ones would read every row each pass).
const OLDEST_OPEN_SQL: &str = "SELECT id, oldest FROM (SELECT g.id, (SELECT min(s.ts_ms) FROM samples s \
     WHERE s.gpu_id = g.id) AS oldest FROM gpus g) WHERE oldest < ? ORDER BY id";

/// A GPU's oldest open sample from a time on.
const NEXT_OPEN_SQL: &str = "SELECT min(ts_ms) FROM samples WHERE gpu_id = ? AND ts_ms >= ?";

/// A GPU-hour's open rows, deleted and returned.
const TAKE_OPEN_SQL: &str =
    "DELETE FROM samples WHERE gpu_id = ? AND ts_ms >= ? AND ts_ms < ? RETURNING ts_ms, vals, processes, allocations";

/// Each GPU's oldest row of `rollups_1m`, where it is before the horizon.
const OLDEST_MINUTE_SQL: &str = "SELECT id, oldest FROM (SELECT g.id, (SELECT min(r.bucket_ms) FROM rollups_1m r \
     WHERE r.gpu_id = g.id) AS oldest FROM gpus g) WHERE oldest < ? ORDER BY id";

/// Blocks are rewritten under SQLite's one write lock: nothing to lock.
const BLOCK_LOCK: &str = "";

/// Nothing to prepare before a block of a new day.
async fn before_day(_pool: &SqlitePool, _day: i64) -> Result<()> {
    Ok(())
}

/// Nothing to do after a pass: SQLite's open tables are plain tables, and the pages of the rows
/// a seal deleted go to the file's free list, where the next rows reuse them (PostgreSQL drops
/// emptied hour partitions here).
pub(crate) async fn after_pass(_pool: &SqlitePool, _now_ms: i64) -> Result<u64> {
    Ok(0)
}

// The seal's DELETE comes first in its transaction: it takes the write lock at once (waiting
// out the writer's commit) instead of upgrading a read transaction, which SQLite would refuse
// while others write.
super::impl_seal!(SqlitePool, sqlite);

/// Payloads of one GPU's blocks overlapping `[from_ms, to_ms)`, in time order.
pub(crate) async fn payloads(
    conn: impl sqlx::SqliteExecutor<'_>,
    gpu_id: GpuId,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<Vec<u8>>> {
    Ok(sqlx::query_scalar(
        "SELECT payload FROM sample_blocks WHERE gpu_id = ? AND start_ms < ? AND end_ms > ? ORDER BY start_ms",
    )
    .bind(gpu_id)
    .bind(to_ms)
    .bind(from_ms)
    .fetch_all(conn)
    .await?)
}

/// Sealed samples of every GPU of `org` in `[from_ms, to_ms)`, per GPU.
pub(crate) async fn org_samples(
    pool: &SqlitePool,
    org: crate::OrgId,
    gpus: Option<&[GpuId]>,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<(GpuId, Vec<Sample>)>> {
    let sql = format!(
        "SELECT b.gpu_id, b.payload FROM sample_blocks b JOIN gpus g ON g.id = b.gpu_id \
         WHERE g.org_id = ? AND b.start_ms < ? AND b.end_ms > ?{} ORDER BY b.gpu_id, b.start_ms",
        crate::rollup_close::only_gpus("b.gpu_id", gpus)
    );
    let query = sqlx::query_as::<_, (GpuId, Vec<u8>)>(&sql).bind(org).bind(to_ms).bind(from_ms).bind_gpus(gpus);
    super::decode_per_gpu(query.fetch_all(pool).await?, from_ms, to_ms)
}

/// Ingest of samples of GPUs in spans `(gpu_id, lo, hi)` (at most one per GPU), some of which may
/// fall in sealed hours (a spool drained late): those hours' blocks go back to open rows in the
/// ingest transaction. The rows then hold the whole hour again, so the rollup job (which writes a
/// minute from its raw rows), the duplicate probe and merge-on-insert all see every sample of it;
/// the next sealing pass seals the hour again. Returns the samples unsealed. Live batches (the
/// current hour) skip the lookup; the others look up all their GPUs' blocks in one statement
/// (the spans as one JSON text, so one prepared statement serves any number of GPUs).
pub(crate) async fn unseal_within(conn: &mut SqliteConnection, spans: &[(i64, i64, i64)]) -> Result<u64> {
    let spans: Vec<[i64; 3]> =
        spans.iter().filter(|&&(_, lo, _)| super::may_be_sealed(lo)).map(|&(g, lo, hi)| [g, lo, hi]).collect();
    if spans.is_empty() {
        return Ok(0);
    }
    let blocks: Vec<(i64, i64, Vec<u8>)> = sqlx::query_as(
        "SELECT b.gpu_id, b.start_ms, b.payload FROM json_each(?) j CROSS JOIN sample_blocks b \
         ON b.gpu_id = j.value ->> 0 AND b.start_ms <= j.value ->> 2 AND b.end_ms > j.value ->> 1",
    )
    .bind(serde_json::to_string(&spans).expect("numbers serialize"))
    .fetch_all(&mut *conn)
    .await?;
    Ok(super::unseal_blocks!(&mut *conn, blocks, |rows| {
        for chunk in crate::sqlite::bounded_chunks(&rows, crate::sqlite::SAMPLE_ROWS_PER_STATEMENT) {
            // A key in both (cannot happen on the one writer, but a row is never overwritten).
            crate::sqlite::insert_sample_rows(conn, chunk, " ON CONFLICT (gpu_id, ts_ms) DO NOTHING").await?;
        }
    }))
}

/// The blocks holding the newest sample of each GPU of `gpu_ids`: `(gpu_id, payload)`.
pub(crate) async fn latest_blocks(pool: &SqlitePool, gpu_ids: &[GpuId]) -> Result<Vec<(GpuId, Vec<u8>)>> {
    if gpu_ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::to_string(gpu_ids).expect("integers serialise");
    Ok(sqlx::query_as(&format!(
        "SELECT b.gpu_id, b.payload FROM gpus g JOIN sample_blocks b ON b.gpu_id = g.id \
         AND b.start_ms = (g.last_seen_ms / {SPAN_MS}) * {SPAN_MS} WHERE g.id IN (SELECT value FROM json_each(?))"
    ))
    .bind(ids)
    .fetch_all(pool)
    .await?)
}

/// Sealed samples in all.
pub(crate) async fn count(pool: &SqlitePool) -> Result<u64> {
    let n: i64 = sqlx::query_scalar("SELECT coalesce(sum(n), 0) FROM sample_blocks").fetch_one(pool).await?;
    Ok(n as u64)
}

/// Retention: delete the blocks wholly older than `cutoff_ms`, one short statement per chunk;
/// returns the samples they held.
pub(crate) async fn drop_before(pool: &SqlitePool, cutoff_ms: i64) -> Result<u64> {
    let mut removed = 0u64;
    loop {
        // One block row per GPU-hour: 1,000 rows is a fleet of 1,000 GPUs' hour.
        let ns: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM sample_blocks WHERE rowid IN (SELECT rowid FROM sample_blocks WHERE end_ms <= ? LIMIT 1000) RETURNING n",
        )
        .bind(cutoff_ms)
        .fetch_all(pool)
        .await?;
        removed += ns.iter().sum::<i64>() as u64;
        if ns.len() < 1000 {
            return Ok(removed);
        }
    }
}
