//! Open samples on PostgreSQL as per-batch blocks (migration 0031): a batch's samples of one GPU
//! and one minute are one row of `sample_batches`, each column an array in time order, written
//! by binary `COPY`. A block never crosses a minute, so the rollup job reads a minute's samples
//! from that minute's blocks alone, and an hour's blocks are sealed together. A row per sample
//! cost PostgreSQL a heap tuple, a primary-key entry and their WAL each; a block carries up to a
//! minute of samples for little more than one of those rows and its TOAST chunks.
//!
//! **Invariant:** a GPU's blocks are disjoint in time from each other (so their order by
//! `first_ts` is their samples' order), and no key is both in a block and in a `samples` row
//! (rows may lie between blocks). Ingest keeps it: a batch whose span of a GPU meets a block of
//! that GPU or a stored row (an agent resending a batch, a partial sample filling in a stored
//! one) first turns the blocks it meets back into rows ([`make_room`]) and is then written as
//! rows, where the primary key finds what is stored (`pg_samples`). The registry upsert earlier
//! in the same transaction holds each GPU's row lock to the commit, so two batches of one GPU
//! check and write one after the other.
//!
//! Readers see rows and blocks as one table through the SQL functions `open_samples` and
//! `open_samples_between`; sealing and retention take both (`blocks::pg`, `PgStore`).

use fleetlens_core::Sample;
use sqlx::{Postgres, Transaction};

use crate::Result;
use crate::columns;
use crate::pg_samples::{self, InsertMode, field, put_i64};

/// A block never crosses a minute (so it belongs to one minute rollup, one hourly partition and
/// one sealed block).
const MINUTE_MS: i64 = 60_000;

/// Each GPU's span in `rows` (sorted by GPU and time): `(gpu_id, first ts, last ts)`.
pub(crate) fn spans(rows: &[(i64, &Sample)]) -> Vec<(i64, i64, i64)> {
    let mut spans: Vec<(i64, i64, i64)> = Vec::new();
    for &(gpu_id, s) in rows {
        match spans.last_mut() {
            Some((g, _, hi)) if *g == gpu_id => *hi = s.ts_ms,
            _ => spans.push((gpu_id, s.ts_ms, s.ts_ms)),
        }
    }
    spans
}

/// Ingest's insert of `order` (sorted by GPU and time): with [`InsertMode::Copy`], as blocks
/// when the batch meets nothing stored, else as rows; with [`InsertMode::SkipStored`] as rows
/// skipping those stored. Returns what [`pg_samples::insert`] returns.
pub(crate) async fn insert<'a>(
    tx: &mut Transaction<'_, Postgres>,
    order: &[(i64, &'a Sample)],
    mode: InsertMode,
) -> Result<Vec<(i64, &'a Sample)>> {
    let met = make_room(tx, &spans(order)).await?;
    if met || mode == InsertMode::SkipStored {
        return pg_samples::insert(tx, order, mode).await;
    }
    let unique = pg_samples::unique(order);
    if !unique.is_empty() {
        let mut copy = tx.copy_in_raw(BATCHES_COPY_SQL).await?;
        copy.send(encode_blocks(&unique)).await?;
        copy.finish().await?;
    }
    Ok(unique)
}

/// Turn the blocks that meet `spans` (`(gpu_id, first ts, last ts)`) into rows of `samples`;
/// returns whether the spans met any stored open sample (a block or a row).
async fn make_room(tx: &mut Transaction<'_, Postgres>, spans: &[(i64, i64, i64)]) -> Result<bool> {
    if spans.is_empty() {
        return Ok(false);
    }
    // One statement: the blocks met are moved, and the rows met counted (as they were before
    // it: the moved ones are counted as moved).
    let met: i64 = sqlx::query_scalar(
        "WITH t AS (SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::int8[]) AS t(g, lo, hi)), \
         moved AS (DELETE FROM sample_batches b USING t WHERE b.gpu_id = t.g AND b.first_ts <= t.hi \
           AND b.first_ts > greatest(t.lo, -9223372036000000000) - 60000 AND b.last_ts >= t.lo \
           RETURNING b.gpu_id, b.ts, b.vals, b.processes, b.allocations), \
         written AS (INSERT INTO samples (gpu_id, ts_ms, vals, processes, allocations) \
           SELECT m.gpu_id, u.ts_ms, u.vals, u.processes, u.allocations FROM moved m, \
           unnest(m.ts, m.vals, m.processes, m.allocations) AS u(ts_ms, vals, processes, allocations) RETURNING 1) \
         SELECT (SELECT count(*) FROM written) + (SELECT count(*) FROM t WHERE EXISTS \
           (SELECT 1 FROM samples s WHERE s.gpu_id = t.g AND s.ts_ms >= t.lo AND s.ts_ms <= t.hi))",
    )
    .bind(spans.iter().map(|s| s.0).collect::<Vec<i64>>())
    .bind(spans.iter().map(|s| s.1).collect::<Vec<i64>>())
    .bind(spans.iter().map(|s| s.2).collect::<Vec<i64>>())
    .fetch_one(&mut **tx)
    .await?;
    Ok(met > 0)
}

/// Retention of the blocks of `gpu_ids` before `cutoff_ms`, in one transaction: those wholly
/// older are deleted, one that straddles it becomes rows (which the caller's row delete then
/// trims). Returns the samples deleted. Open blocks are minutes old unless ingest stopped, so the
/// deletes find little: one statement each, not a transaction per GPU.
pub(crate) async fn expire(pool: &sqlx::PgPool, gpu_ids: &[i64], cutoff_ms: i64) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let deleted: i64 = sqlx::query_scalar(
        "WITH d AS (DELETE FROM sample_batches WHERE gpu_id = ANY($1) AND last_ts < $2 RETURNING cardinality(ts) AS n) \
         SELECT coalesce(sum(n), 0)::int8 FROM d",
    )
    .bind(gpu_ids)
    .bind(cutoff_ms)
    .fetch_one(&mut *tx)
    .await?;
    let at_cutoff: Vec<(i64, i64, i64)> = gpu_ids.iter().map(|&g| (g, cutoff_ms - 1, cutoff_ms - 1)).collect();
    make_room(&mut tx, &at_cutoff).await?;
    tx.commit().await?;
    Ok(deleted as u64)
}

/// `COPY` statement matching [`encode_blocks`]' field order.
const BATCHES_COPY_SQL: &str = "COPY sample_batches (gpu_id, first_ts, last_ts, ts, vals, processes, allocations) \
     FROM STDIN (FORMAT binary)";

/// Type OIDs of the arrays' elements (`pg_type`).
const INT8_OID: u32 = 20;
const BYTEA_OID: u32 = 17;
const TEXT_OID: u32 = 25;

/// `unique` (distinct keys, sorted by GPU and time) as one binary `COPY` stream of blocks: one
/// tuple per GPU and minute. Format as in `pg_samples`; an array field is PostgreSQL's binary
/// array (`array_send`): dimensions (1), a has-NULL flag, the element type, the length and lower
/// bound (1), then each element as a field (length, or -1 for NULL, and bytes).
fn encode_blocks(unique: &[(i64, &Sample)]) -> Vec<u8> {
    let mut out = pg_samples::copy_header(unique.len() * 120);
    let mut last_list = None;
    for block in
        unique.chunk_by(|a, b| a.0 == b.0 && a.1.ts_ms.div_euclid(MINUTE_MS) == b.1.ts_ms.div_euclid(MINUTE_MS))
    {
        let samples: Vec<&Sample> = block.iter().map(|&(_, s)| s).collect();
        out.extend_from_slice(&7i16.to_be_bytes());
        for v in [block[0].0, samples[0].ts_ms, samples[samples.len() - 1].ts_ms] {
            put_i64(&mut out, Some(v));
        }
        let n = samples.len();
        array(&mut out, INT8_OID, n, false, |out| {
            for s in &samples {
                put_i64(out, Some(s.ts_ms));
            }
        });
        array(&mut out, BYTEA_OID, n, false, |out| {
            for s in &samples {
                field(out, |out| crate::row_values::encode_into(out, s));
            }
        });
        array(&mut out, TEXT_OID, n, samples.iter().any(|s| s.processes.is_none()), |out| {
            for s in &samples {
                pg_samples::put_processes(out, s, &mut last_list);
            }
        });
        let allocations: Vec<Option<String>> = samples.iter().map(|s| columns::allocations_json(s)).collect();
        array(&mut out, TEXT_OID, n, allocations.iter().any(Option::is_none), |out| {
            for a in &allocations {
                pg_samples::put_text(out, a.as_deref());
            }
        });
    }
    pg_samples::copy_trailer(&mut out);
    out
}

/// One array field of `n` elements of type `oid` that `elements` appends.
fn array(out: &mut Vec<u8>, oid: u32, n: usize, has_null: bool, elements: impl FnOnce(&mut Vec<u8>)) {
    field(out, |out| {
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&i32::from(has_null).to_be_bytes());
        out.extend_from_slice(&oid.to_be_bytes());
        out.extend_from_slice(&(n as i32).to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        elements(out);
    });
}

#[cfg(test)]
mod tests {
    use fleetlens_core::GpuProcess;

    use super::*;

    fn read_i32(b: &[u8], at: &mut usize) -> i32 {
        let v = i32::from_be_bytes(b[*at..*at + 4].try_into().unwrap());
        *at += 4;
        v
    }

    #[test]
    fn a_batch_splits_into_one_block_per_gpu_and_minute_with_aligned_arrays() {
        let at = |ts_ms: i64, processes: Option<Vec<GpuProcess>>| Sample { ts_ms, processes, ..Sample::default() };
        let list = vec![GpuProcess { pid: 7, command: Some("train.py".into()), ..GpuProcess::default() }];
        let a = [at(MINUTE_MS - 1000, Some(list.clone())), at(MINUTE_MS, None), at(MINUTE_MS + 1000, Some(list))];
        let b = [at(5, None)];
        let rows: Vec<(i64, &Sample)> = a.iter().map(|s| (1, s)).chain(b.iter().map(|s| (2, s))).collect();
        let bytes = encode_blocks(&rows);
        let mut i = 19;
        let mut blocks = Vec::new();
        while i16::from_be_bytes([bytes[i], bytes[i + 1]]) == 7 {
            i += 2;
            let mut ints = [0i64; 3];
            for v in &mut ints {
                assert_eq!(read_i32(&bytes, &mut i), 8);
                *v = i64::from_be_bytes(bytes[i..i + 8].try_into().unwrap());
                i += 8;
            }
            // ts: one dimension, no NULL, int8, its length, lower bound 1, then the values.
            let len = read_i32(&bytes, &mut i) as usize;
            let end = i + len;
            assert_eq!([1, 0, INT8_OID as i32], [0; 3].map(|_| read_i32(&bytes, &mut i)));
            let n = read_i32(&bytes, &mut i);
            assert_eq!(read_i32(&bytes, &mut i), 1);
            for _ in 0..n {
                assert_eq!(read_i32(&bytes, &mut i), 8);
                i += 8;
            }
            assert_eq!(i, end);
            // vals, processes, allocations: same length; the lists' NULL flag as the samples say.
            let mut nulls = Vec::new();
            for _ in 0..3 {
                let len = read_i32(&bytes, &mut i) as usize;
                let end = i + len;
                i += 4;
                nulls.push(read_i32(&bytes, &mut i));
                i += 4;
                assert_eq!(read_i32(&bytes, &mut i), n);
                i = end;
            }
            blocks.push((ints, n, nulls[1]));
        }
        assert_eq!(i16::from_be_bytes([bytes[i], bytes[i + 1]]), -1);
        assert_eq!(
            blocks,
            vec![
                ([1, MINUTE_MS - 1000, MINUTE_MS - 1000], 1, 0),
                ([1, MINUTE_MS, MINUTE_MS + 1000], 2, 1),
                ([2, 5, 5], 1, 1),
            ]
        );
    }

    #[test]
    fn spans_are_per_gpu() {
        let s = |ts_ms| Sample { ts_ms, ..Sample::default() };
        let (a, b, c) = (s(1), s(9), s(4));
        assert_eq!(spans(&[(1, &a), (1, &b), (3, &c)]), vec![(1, 1, 9), (3, 4, 4)]);
    }
}
