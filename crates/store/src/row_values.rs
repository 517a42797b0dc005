//! The measurements of an open sample row, in one binary column (`samples.vals`).
//!
//! Until a GPU's hour is sealed into a column block ([`crate::blocks`]), each of its samples is
//! one row of `samples`: the key `(gpu_id, ts_ms)`, this payload, and the process list and pod
//! allocations as JSON text. The payload replaced one column per signal (migration 0028): on
//! both databases every column of a row costs per row written and read (PostgreSQL's `COPY`
//! parses each field through its type's receive function and sends each back through its send
//! function; SQLite binds and encodes each), and the rows were 300 bytes wide for ~22 values
//! of a few significant digits each.
//!
//! ```text
//! version  u8, [`VERSION`]
//! present  u32 LE: bit i set when column i of `columns::SAMPLE_COLUMNS` has a value
//! raw      u32 LE: bit i set when value i is the f64's 8 bytes (LE), else it is a varint
//! values   the present values in column order
//! ```
//!
//! A varint is the zigzag LEB128 (protobuf's `sint64`) of the value's stored integer
//! ([`Precision::stored_int`]: an exact signal's whole number, a real one's multiple of its
//! stored step), written only when dividing it back gives the very same f64 bits: NVML's whole
//! percentages and milliwatt powers are small integers at their precision and take 1-3 bytes.
//! Any other value (finer than the stored precision, say a DCGM ratio) keeps its 8 bytes, so an
//! open row reads back exactly as it was sent; sealing rounds it to the stored precision, as
//! before. Absent stays absent (its bit clear), never 0.
//!
//! A column added to the signal table later reads as absent from the payloads written before
//! it; a payload naming a column this build does not know is refused.

use fleetlens_core::Sample;
#[cfg(doc)]
use fleetlens_core::signal::Precision;
use prost::encoding::{decode_varint, encode_varint};

use crate::blocks::format::PRECISION;
use crate::columns::{Cell, SAMPLE_COLUMNS, sample_cells};

/// The payload format written; readers refuse others.
const VERSION: u8 = 1;
const HEADER: usize = 1 + 4 + 4;

const _: () = assert!(SAMPLE_COLUMNS.len() <= 32, "a wider signal table needs version 2 with wider bitmaps");
/// The bits of the columns this build knows.
const KNOWN: u32 = if SAMPLE_COLUMNS.len() == 32 { u32::MAX } else { (1 << SAMPLE_COLUMNS.len()) - 1 };

/// A payload that cannot be read: corruption, or written by a newer server.
#[derive(Debug, thiserror::Error)]
#[error("sample row values: {0}")]
pub struct RowValuesError(&'static str);

/// Append the payload of `s`'s measurements to `out`.
pub(crate) fn encode_into(out: &mut Vec<u8>, s: &Sample) {
    let at = out.len();
    out.push(VERSION);
    out.extend_from_slice(&[0; 8]);
    let (mut present, mut raw) = (0u32, 0u32);
    for (i, cell) in sample_cells(s).into_iter().enumerate() {
        let bit = 1u32 << i;
        match cell {
            Cell::I(None) | Cell::F(None) => continue,
            Cell::I(Some(v)) => encode_varint(zigzag(v), out),
            Cell::F(Some(v)) => match PRECISION[i].stored_int(v) {
                Some(q) if PRECISION[i].from_stored_int(q).to_bits() == v.to_bits() => encode_varint(zigzag(q), out),
                _ => {
                    raw |= bit;
                    out.extend_from_slice(&v.to_le_bytes());
                }
            },
        }
        present |= bit;
    }
    out[at + 1..at + 5].copy_from_slice(&present.to_le_bytes());
    out[at + 5..at + 9].copy_from_slice(&raw.to_le_bytes());
}

/// The payload of `s`'s measurements.
pub(crate) fn encode(s: &Sample) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + SAMPLE_COLUMNS.len() * 3);
    encode_into(&mut out, s);
    out
}

/// The measurements of a payload, set on a default sample (time and identity unset).
pub(crate) fn decode(mut bytes: &[u8]) -> Result<Sample, RowValuesError> {
    if bytes.len() < HEADER {
        return Err(RowValuesError("shorter than its header"));
    }
    if bytes[0] != VERSION {
        return Err(RowValuesError("unknown format version"));
    }
    let present = u32::from_le_bytes(bytes[1..5].try_into().expect("4 bytes"));
    let raw = u32::from_le_bytes(bytes[5..9].try_into().expect("4 bytes"));
    if present & !KNOWN != 0 || raw & !present != 0 {
        return Err(RowValuesError("a column this server does not know"));
    }
    bytes = &bytes[HEADER..];
    let mut out = Sample::default();
    for (i, signal) in crate::columns::SAMPLE_SIGNALS.iter().enumerate() {
        let bit = 1u32 << i;
        if present & bit == 0 {
            continue;
        }
        if raw & bit != 0 {
            let (value, rest) = bytes.split_first_chunk::<8>().ok_or(RowValuesError("a value cut short"))?;
            bytes = rest;
            (signal.set)(&mut out, Some(f64::from_le_bytes(*value)));
            continue;
        }
        let q = unzigzag(decode_varint(&mut bytes).map_err(|_| RowValuesError("a malformed varint"))?);
        if crate::columns::is_integer(signal) {
            (signal.set_int)(&mut out, Some(q));
        } else {
            (signal.set)(&mut out, Some(PRECISION[i].from_stored_int(q)));
        }
    }
    if !bytes.is_empty() {
        return Err(RowValuesError("bytes after the last value"));
    }
    Ok(out)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// The upgrade of rows written before migration 0028, when each signal had its own column:
/// their values are copied into `vals` between migrations 0028 (which adds it) and 0029 (which
/// drops the columns). Open rows are at most an hour or two of samples (older hours are
/// sealed into blocks), so this runs once, in one transaction, at the first start of a server
/// with these migrations.
pub(crate) mod legacy {
    use std::borrow::Cow;

    use fleetlens_core::Sample;
    use sqlx::migrate::Migrator;
    use sqlx::{Connection, PgPool, Row, SqliteConnection};

    use crate::columns::{SAMPLE_COLUMNS, SAMPLE_SIGNALS, is_integer};

    /// The migration that drops the per-signal columns.
    const COLUMNS_DROPPED: i64 = 29;
    /// Rows read and written per statement.
    const CHUNK: i64 = 5_000;

    /// The migrations of `all` before [`COLUMNS_DROPPED`]: run these, then [`convert_sqlite`]
    /// or [`convert_pg`], then all. A database past them already is no error.
    pub(crate) fn migrations_before_columns_dropped(all: &Migrator) -> Migrator {
        let before: Vec<_> = all.iter().filter(|m| m.version < COLUMNS_DROPPED).cloned().collect();
        Migrator { migrations: Cow::Owned(before), ignore_missing: true, locking: all.locking, no_tx: all.no_tx }
    }

    /// `SELECT gpu_id, ts_ms, <columns>` of the next chunk of rows without `vals` after a key.
    fn chunk_sql(numbered: bool) -> String {
        let (a, b, c) = if numbered { ("$1", "$2", "$3") } else { ("?", "?", "?") };
        format!(
            "SELECT gpu_id, ts_ms, {} FROM samples WHERE vals IS NULL AND (gpu_id, ts_ms) > ({a}, {b}) \
             ORDER BY gpu_id, ts_ms LIMIT {c}",
            SAMPLE_COLUMNS.join(", ")
        )
    }

    /// `(gpu_id, ts_ms, vals)` of a row read by [`chunk_sql`].
    fn with_vals<R>(row: &R) -> Result<(i64, i64, Vec<u8>), sqlx::Error>
    where
        R: Row,
        for<'r> &'r str: sqlx::ColumnIndex<R>,
        usize: sqlx::ColumnIndex<R>,
        i64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
        f64: sqlx::Type<R::Database> + for<'r> sqlx::Decode<'r, R::Database>,
    {
        let mut measured = Sample::default();
        for (name, signal) in SAMPLE_COLUMNS.iter().zip(SAMPLE_SIGNALS) {
            if is_integer(signal) {
                (signal.set_int)(&mut measured, row.try_get::<Option<i64>, _>(*name)?);
            } else {
                (signal.set)(&mut measured, row.try_get::<Option<f64>, _>(*name)?);
            }
        }
        Ok((row.try_get(0)?, row.try_get(1)?, super::encode(&measured)))
    }

    async fn columns_dropped_sqlite(conn: &mut SqliteConnection) -> crate::Result<bool> {
        let sql = "SELECT count(*) FROM _sqlx_migrations WHERE version = ?";
        Ok(sqlx::query_scalar::<_, i64>(sql).bind(COLUMNS_DROPPED).fetch_one(&mut *conn).await? > 0)
    }

    /// Fill `vals` of every SQLite row without it; returns the rows converted.
    pub(crate) async fn convert_sqlite(conn: &mut SqliteConnection) -> crate::Result<u64> {
        if columns_dropped_sqlite(conn).await? {
            return Ok(0);
        }
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let (mut after, mut converted) = ((i64::MIN, i64::MIN), 0);
        loop {
            let rows =
                sqlx::query(&chunk_sql(false)).bind(after.0).bind(after.1).bind(CHUNK).fetch_all(&mut *tx).await?;
            let Some(last) = rows.last() else { break };
            after = (last.try_get(0)?, last.try_get(1)?);
            for row in &rows {
                let (gpu_id, ts_ms, vals) = with_vals(row)?;
                sqlx::query("UPDATE samples SET vals = ? WHERE gpu_id = ? AND ts_ms = ?")
                    .bind(vals)
                    .bind(gpu_id)
                    .bind(ts_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            converted += rows.len() as u64;
        }
        tx.commit().await?;
        Ok(converted)
    }

    /// Fill `vals` of every PostgreSQL row without it; returns the rows converted. Replicas
    /// starting together take turns (a transaction-scoped advisory lock); the second finds the
    /// rows converted, or the columns dropped by the first.
    pub(crate) async fn convert_pg(pool: &PgPool) -> crate::Result<u64> {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(1179405635, 28)").execute(&mut *tx).await?;
        let dropped: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE version = $1")
            .bind(COLUMNS_DROPPED)
            .fetch_one(&mut *tx)
            .await?;
        if dropped > 0 {
            return Ok(0);
        }
        let (mut after, mut converted) = ((i64::MIN, i64::MIN), 0);
        loop {
            let rows =
                sqlx::query(&chunk_sql(true)).bind(after.0).bind(after.1).bind(CHUNK).fetch_all(&mut *tx).await?;
            let Some(last) = rows.last() else { break };
            after = (last.try_get(0)?, last.try_get(1)?);
            let mut keys: (Vec<i64>, Vec<i64>, Vec<Vec<u8>>) = Default::default();
            for row in &rows {
                let (gpu_id, ts_ms, vals) = with_vals(row)?;
                keys.0.push(gpu_id);
                keys.1.push(ts_ms);
                keys.2.push(vals);
            }
            sqlx::query(
                "UPDATE samples AS s SET vals = t.vals FROM UNNEST($1::int8[], $2::int8[], $3::bytea[]) \
                 AS t(gpu_id, ts_ms, vals) WHERE s.gpu_id = t.gpu_id AND s.ts_ms = t.ts_ms",
            )
            .bind(&keys.0)
            .bind(&keys.1)
            .bind(&keys.2)
            .execute(&mut *tx)
            .await?;
            converted += rows.len() as u64;
        }
        tx.commit().await?;
        Ok(converted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Vec<Sample> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/nvml-h200-phases.jsonl");
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The decoded measurements with `s`'s time, identity and lists (the row's other columns).
    fn with_rest_of(decoded: Sample, s: &Sample) -> Sample {
        Sample {
            ts_ms: s.ts_ms,
            uuid: s.uuid.clone(),
            gpu_index: s.gpu_index,
            name: s.name.clone(),
            processes: s.processes.clone(),
            allocations: s.allocations.clone(),
            ..decoded
        }
    }

    #[test]
    fn a_recorded_trace_reads_back_bit_for_bit() {
        let trace = trace();
        assert!(trace.len() > 50);
        let mut bytes = 0;
        for s in &trace {
            let payload = encode(s);
            bytes += payload.len();
            assert_eq!(&with_rest_of(decode(&payload).unwrap(), s), s);
        }
        // Whole percentages and milliwatts are varints: far below 8 bytes per value.
        assert!(bytes / trace.len() < 100, "{} B per sample", bytes / trace.len());
    }

    #[test]
    fn absent_stays_absent_and_odd_values_survive() {
        let cases = [
            Sample::default(),
            Sample { gpu_util_pct: Some(0.0), power_w: Some(-0.0), ..Sample::default() },
            Sample { sm_active_pct: Some(12.345_678_9), energy_j: Some(1e300), ..Sample::default() },
            Sample { temp_c: Some(f64::NAN), mem_used_bytes: Some(i64::MAX), ..Sample::default() },
            Sample { throttle_reasons: Some(u64::MAX), mem_total_bytes: Some(-5), ..Sample::default() },
        ];
        for s in cases {
            let back = decode(&encode(&s)).unwrap();
            assert_eq!(format!("{back:?}"), format!("{s:?}"));
        }
        assert_eq!(encode(&Sample::default()).len(), HEADER);
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let s = Sample { gpu_util_pct: Some(50.0), power_w: Some(312.5), ..Sample::default() };
        let good = encode(&s);
        assert!(decode(&good[..HEADER - 1]).is_err());
        assert!(decode(&good[..good.len() - 1]).is_err());
        let mut extra = good.clone();
        extra.push(0);
        assert!(decode(&extra).is_err());
        let mut version = good.clone();
        version[0] = 9;
        assert!(decode(&version).is_err());
        let mut unknown = good.clone();
        unknown[4] |= 0x80;
        assert!(decode(&unknown).is_err());
    }

    #[test]
    fn zigzag_round_trips() {
        for v in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
