//! Merge-on-insert of partial samples, for both backends (the rule: `fleetlens_core::fill`).
//!
//! A batch's sample whose (GPU, timestamp) is stored already is read against the stored row:
//! when it has fields the stored one lacks, the row gets them and its minute is marked for the
//! rollup job again ([`mark_fills`]), so that the rollups and credits end exactly as if the
//! whole sample had arrived at once; otherwise it is a duplicate,
//! as before. Only samples that collide with stored ones pay for this: a batch of new samples
//! never reads a stored row.

use std::collections::HashMap;

use fleetlens_core::fill::fill_absent;
use fleetlens_core::{QualityFlags, Sample};

use crate::Result;
use crate::columns::{self, SampleValues};

/// A stored sample filled in by a batch's sample of the same GPU and timestamp.
pub(crate) struct Fill {
    pub gpu_id: i64,
    /// The row after: `stored` with the fields it lacked.
    pub merged: Sample,
    /// The data-quality flags of the batch's sample.
    pub flags: QualityFlags,
}

/// Add the fills' keys to the minutes to (re)write and their flags to those to store: the
/// rollup job then writes their minutes from the filled rows, so the rollups and credits end
/// as if the whole samples had arrived at once.
pub(crate) fn mark_fills(fills: &[Fill], new_keys: &mut Vec<(i64, i64)>, flagged: &mut Vec<(i64, i64, i64)>) {
    for f in fills {
        new_keys.push((f.gpu_id, f.merged.ts_ms));
        if !f.flags.is_empty() {
            flagged.push((f.gpu_id, f.merged.ts_ms, f.flags.bits()));
        }
    }
}

/// Stored rows a data-quality rule flagged are left as they are: the rule dropped some of
/// their fields on purpose (e.g. an energy counter that went backwards against the GPU's
/// previous sample), and a resend, judged without that history, must not put them back.
const UNFLAGGED: &str = "AND NOT EXISTS (SELECT 1 FROM sample_flags f WHERE f.gpu_id = s.gpu_id AND f.ts_ms = s.ts_ms)";

/// A stored sample row with its key.
#[derive(sqlx::FromRow)]
struct KeyedRow {
    gpu_id: i64,
    ts_ms: i64,
    #[sqlx(flatten)]
    values: SampleValues,
}

/// The fills of `colliding` (`(gpu_id, batch sample, flags)`, each key once) against the stored
/// rows of their keys; a sample without a stored row or without anything to add is left out.
fn fills_of(colliding: &[(i64, &Sample, QualityFlags)], rows: Vec<KeyedRow>) -> Vec<Fill> {
    let mut stored: HashMap<(i64, i64), SampleValues> =
        rows.into_iter().map(|r| ((r.gpu_id, r.ts_ms), r.values)).collect();
    colliding
        .iter()
        .filter_map(|&(gpu_id, s, flags)| {
            let row = stored.remove(&(gpu_id, s.ts_ms))?;
            let stored = row.into_sample(s.ts_ms, &s.uuid, s.gpu_index, s.name.as_deref());
            let merged = fill_absent(&stored, s)?;
            Some(Fill { gpu_id, merged, flags })
        })
        .collect()
}

pub(crate) mod sqlite {
    use sqlx::SqliteConnection;

    use super::*;

    /// Reads the stored rows of `colliding` (one range probe per GPU, by the primary key) and
    /// writes the fills; the caller is the store's only writer, so nothing changes them between.
    pub(crate) async fn fill_stored(
        conn: &mut SqliteConnection,
        colliding: &[(i64, &Sample, QualityFlags)],
    ) -> Result<Vec<Fill>> {
        if colliding.is_empty() {
            return Ok(Vec::new());
        }
        let mut spans: std::collections::BTreeMap<i64, (i64, i64)> = Default::default();
        for &(gpu_id, s, _) in colliding {
            let span = spans.entry(gpu_id).or_insert((s.ts_ms, s.ts_ms));
            *span = (span.0.min(s.ts_ms), span.1.max(s.ts_ms));
        }
        let sql = format!(
            "SELECT s.gpu_id, s.ts_ms, {} FROM samples s WHERE s.gpu_id = ? AND s.ts_ms BETWEEN ? AND ? {UNFLAGGED}",
            columns::sample_select_list("s", "s.processes")
        );
        let mut rows = Vec::new();
        for (gpu_id, (lo, hi)) in spans {
            rows.extend(
                sqlx::query_as::<_, KeyedRow>(&sql).bind(gpu_id).bind(lo).bind(hi).fetch_all(&mut *conn).await?,
            );
        }
        let fills = fills_of(colliding, rows);
        let sql = "UPDATE samples SET vals = ?, processes = ?, allocations = ? WHERE gpu_id = ? AND ts_ms = ?";
        for f in &fills {
            sqlx::query(sql)
                .bind(crate::row_values::encode(&f.merged))
                .bind(columns::processes_json(&f.merged))
                .bind(columns::allocations_json(&f.merged))
                .bind(f.gpu_id)
                .bind(f.merged.ts_ms)
                .execute(&mut *conn)
                .await?;
        }
        Ok(fills)
    }
}

pub(crate) mod pg {
    use sqlx::{Postgres, Transaction};

    use super::*;
    use crate::pg_samples::SampleArrays;

    /// Reads and locks the stored rows of `colliding` (`FOR UPDATE`, in key order: a concurrent
    /// batch filling the same row waits, then reads the row as this one left it) and writes the
    /// fills, each in one statement.
    pub(crate) async fn fill_stored(
        tx: &mut Transaction<'_, Postgres>,
        colliding: &[(i64, &Sample, QualityFlags)],
    ) -> Result<Vec<Fill>> {
        if colliding.is_empty() {
            return Ok(Vec::new());
        }
        let gpu_ids: Vec<i64> = colliding.iter().map(|c| c.0).collect();
        let ts: Vec<i64> = colliding.iter().map(|c| c.1.ts_ms).collect();
        let sql = format!(
            "SELECT s.gpu_id, s.ts_ms, {} FROM samples s \
             JOIN UNNEST($1::int8[], $2::int8[]) AS k(gpu_id, ts_ms) ON s.gpu_id = k.gpu_id AND s.ts_ms = k.ts_ms \
             {UNFLAGGED} ORDER BY s.gpu_id, s.ts_ms FOR UPDATE OF s",
            columns::sample_select_list("s", "s.processes::text")
        );
        let rows: Vec<KeyedRow> = sqlx::query_as(&sql).bind(&gpu_ids).bind(&ts).fetch_all(&mut **tx).await?;
        let fills = fills_of(colliding, rows);
        if fills.is_empty() {
            return Ok(fills);
        }
        let rows = SampleArrays::new(fills.iter().map(|f| (f.gpu_id, &f.merged)));
        let sql = format!(
            "UPDATE samples AS s SET vals = t.vals, processes = t.processes, allocations = t.allocations \
             FROM {} WHERE s.gpu_id = t.gpu_id AND s.ts_ms = t.ts_ms",
            SampleArrays::UNNEST
        );
        rows.bind(sqlx::query(&sql)).execute(&mut **tx).await?;
        Ok(fills)
    }
}
