//! Sample rows into PostgreSQL, two ways.
//!
//! [`InsertMode::Copy`]: binary `COPY … FROM STDIN`, the cheapest way into a table: no SQL to plan
//! per batch, no array parameters to unpack with `UNNEST`, no speculative insertion for
//! `ON CONFLICT`, no keys sent back. It has no conflict handling: a sample stored before (an agent
//! resending a batch whose answer it did not get) makes it fail with a unique violation, and the
//! store runs the batch again with [`InsertMode::SkipStored`]: `INSERT … SELECT FROM UNNEST(…)
//! ON CONFLICT DO NOTHING RETURNING` the keys it stored. New samples, the normal case, take the
//! first path; only a resent batch pays for the second.
//!
//! Format (PostgreSQL docs, "COPY … Binary Format"): an 11-byte signature, a 32-bit flags field
//! and a 32-bit header-extension length; then per tuple a 16-bit field count and per field a
//! 32-bit byte length (-1 for NULL) followed by the value in network byte order; a 16-bit -1
//! ends the data.

use std::collections::HashSet;

use fleetlens_core::{GpuProcess, Sample};
use sqlx::{Postgres, Row, Transaction};

use crate::columns::{self, Cell, SAMPLE_COLUMNS};
use crate::{Result, StoreError};

/// How [`insert`] writes the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InsertMode {
    Copy,
    SkipStored,
}

/// Store the samples of `order` (`(gpu_id, sample)`, sorted by GPU and time) and return those
/// that were stored: each key once, the first of the batch; with [`InsertMode::SkipStored`] also
/// none stored before.
pub(crate) async fn insert<'a>(
    tx: &mut Transaction<'_, Postgres>,
    order: &[(i64, &'a Sample)],
    mode: InsertMode,
) -> Result<Vec<(i64, &'a Sample)>> {
    let mut last = None;
    let unique: Vec<(i64, &Sample)> = order
        .iter()
        .copied()
        .filter(|&(gpu_id, s)| {
            let key = Some((gpu_id, s.ts_ms));
            std::mem::replace(&mut last, key) != key
        })
        .collect();
    if unique.is_empty() {
        return Ok(unique);
    }
    match mode {
        InsertMode::Copy => {
            let mut copy = tx.copy_in_raw(&samples_copy_sql()).await?;
            copy.send(encode_samples(unique.iter().copied())).await?;
            copy.finish().await?;
            Ok(unique)
        }
        InsertMode::SkipStored => {
            let stored = insert_skipping_stored(tx, &unique).await?;
            Ok(unique.into_iter().filter(|&(gpu_id, s)| stored.contains(&(gpu_id, s.ts_ms))).collect())
        }
    }
}

/// The samples of `order` (sorted by GPU and time) that [`insert`] did not store, each key once
/// (the first of the batch), with their flags (by address, as `flag_of` keys them): stored
/// before, they may fill in the stored rows ([`crate::merge`]).
pub(crate) fn not_inserted<'a>(
    order: &[(i64, &'a Sample)],
    fresh: &[(i64, &'a Sample)],
    flag_of: &std::collections::HashMap<usize, fleetlens_core::QualityFlags>,
) -> Vec<(i64, &'a Sample, fleetlens_core::QualityFlags)> {
    let stored: HashSet<(i64, i64)> = fresh.iter().map(|&(gpu_id, s)| (gpu_id, s.ts_ms)).collect();
    let mut last = None;
    order
        .iter()
        .filter(|&&(gpu_id, s)| {
            let key = Some((gpu_id, s.ts_ms));
            std::mem::replace(&mut last, key) != key && !stored.contains(&(gpu_id, s.ts_ms))
        })
        .map(|&(gpu_id, s)| (gpu_id, s, flag_of.get(&(s as *const Sample as usize)).copied().unwrap_or_default()))
        .collect()
}

/// A unique violation: some of the batch is stored already.
pub(crate) fn is_unique_violation(e: &StoreError) -> bool {
    e.is_conflict()
}

/// `INSERT … ON CONFLICT DO NOTHING` of `unique` (distinct keys): the keys stored by it.
async fn insert_skipping_stored(
    tx: &mut Transaction<'_, Postgres>,
    unique: &[(i64, &Sample)],
) -> Result<HashSet<(i64, i64)>> {
    let mut cells = CellColumns::new(&columns::sample_cells(&Sample::default()), unique.len());
    for (_, s) in unique {
        cells.push(columns::sample_cells(s));
    }
    let gpu_col: Vec<i64> = unique.iter().map(|&(gpu_id, _)| gpu_id).collect();
    let ts_col: Vec<i64> = unique.iter().map(|(_, s)| s.ts_ms).collect();
    let procs: Vec<Option<String>> = unique.iter().map(|(_, s)| columns::processes_json(s)).collect();
    let allocs: Vec<Option<String>> = unique.iter().map(|(_, s)| columns::allocations_json(s)).collect();
    let mut params = vec!["$1::int8[]".to_string(), "$2::int8[]".to_string()];
    params.extend(cells.params(3));
    params.push(format!("${}::text[]", cells.kinds.len() + 3));
    params.push(format!("${}::text[]", cells.kinds.len() + 4));
    let cols = SAMPLE_COLUMNS.join(", ");
    let sql = format!(
        "INSERT INTO samples (gpu_id, ts_ms, {cols}, processes, allocations) \
         SELECT gpu_id, ts_ms, {cols}, processes, allocations \
         FROM UNNEST({}) AS t(gpu_id, ts_ms, {cols}, processes, allocations) \
         ON CONFLICT DO NOTHING RETURNING gpu_id, ts_ms",
        params.join(", ")
    );
    let q = cells.bind(sqlx::query(&sql).bind(&gpu_col).bind(&ts_col));
    let rows = q.bind(&procs).bind(&allocs).fetch_all(&mut **tx).await?;
    rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect()
}

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Nullable numeric cells of many rows, as one array per column for `UNNEST` parameters.
pub(crate) struct CellColumns {
    /// Per column: float (`true`) or integer.
    pub kinds: Vec<bool>,
    f: Vec<Vec<Option<f64>>>,
    i: Vec<Vec<Option<i64>>>,
}

impl CellColumns {
    /// Columns shaped like `template` (one row's cells), with room for `rows` rows.
    pub fn new(template: &[Cell], rows: usize) -> Self {
        let kinds: Vec<bool> = template.iter().map(|c| matches!(c, Cell::F(_))).collect();
        let floats = kinds.iter().filter(|k| **k).count();
        Self {
            f: (0..floats).map(|_| Vec::with_capacity(rows)).collect(),
            i: (0..kinds.len() - floats).map(|_| Vec::with_capacity(rows)).collect(),
            kinds,
        }
    }

    /// Append one row's cells, in the template's order.
    pub fn push(&mut self, cells: impl IntoIterator<Item = Cell>) {
        let (mut fi, mut ii) = (0, 0);
        for cell in cells {
            match cell {
                Cell::F(v) => {
                    self.f[fi].push(v);
                    fi += 1;
                }
                Cell::I(v) => {
                    self.i[ii].push(v);
                    ii += 1;
                }
            }
        }
    }

    /// The typed placeholders of the columns, numbered from `first`.
    pub fn params(&self, first: usize) -> impl Iterator<Item = String> + '_ {
        self.kinds
            .iter()
            .enumerate()
            .map(move |(i, &is_f)| format!("${}::{}", first + i, if is_f { "float8[]" } else { "int8[]" }))
    }

    /// Bind the columns in order.
    pub fn bind<'q>(
        &'q self,
        mut q: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
        let (mut fi, mut ii) = (0, 0);
        for &is_f in &self.kinds {
            if is_f {
                q = q.bind(&self.f[fi]);
                fi += 1;
            } else {
                q = q.bind(&self.i[ii]);
                ii += 1;
            }
        }
        q
    }
}

/// `COPY` statement matching [`encode_samples`]' field order.
fn samples_copy_sql() -> String {
    format!(
        "COPY samples (gpu_id, ts_ms, {}, processes, allocations) FROM STDIN (FORMAT binary)",
        SAMPLE_COLUMNS.join(", ")
    )
}

/// Encode `(gpu_id, sample)` rows as one binary `COPY` stream.
fn encode_samples<'a>(rows: impl ExactSizeIterator<Item = (i64, &'a Sample)>) -> Vec<u8> {
    // 25 fields of at most 8 bytes plus their 4-byte lengths, the process list and allocations.
    let mut out = Vec::with_capacity(19 + rows.len() * 320 + 2);
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    let fields = (2 + SAMPLE_COLUMNS.len() + 2) as i16;
    // A GPU's process list rarely changes from one second to the next: the last list written
    // and where its JSON lies in `out`, so that an equal list is copied, not serialised again.
    let mut last_list: Option<(&[GpuProcess], std::ops::Range<usize>)> = None;
    for (gpu_id, s) in rows {
        out.extend_from_slice(&fields.to_be_bytes());
        put_i64(&mut out, Some(gpu_id));
        put_i64(&mut out, Some(s.ts_ms));
        for cell in columns::sample_cells(s) {
            match cell {
                Cell::F(v) => put_f64(&mut out, v),
                Cell::I(v) => put_i64(&mut out, v),
            }
        }
        match &s.processes {
            Some(list) => match &last_list {
                Some((prev, json)) if *prev == list.as_slice() => {
                    let json = json.clone();
                    out.extend_from_slice(&(json.len() as i32).to_be_bytes());
                    out.extend_from_within(json);
                }
                _ => {
                    let len_at = out.len();
                    out.extend_from_slice(&0i32.to_be_bytes());
                    serde_json::to_writer(&mut out, list).expect("a process list serializes");
                    let len = (out.len() - len_at - 4) as i32;
                    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
                    last_list = Some((list.as_slice(), len_at + 4..out.len()));
                }
            },
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
        // text in binary COPY: the UTF-8 bytes.
        match columns::allocations_json(s) {
            Some(json) => {
                out.extend_from_slice(&(json.len() as i32).to_be_bytes());
                out.extend_from_slice(json.as_bytes());
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

fn put_i64(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => {
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&v.to_be_bytes());
        }
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

fn put_f64(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(v) => {
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&v.to_bits().to_be_bytes());
        }
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_has_signature_one_tuple_per_row_and_trailer() {
        let s = Sample { ts_ms: 7, gpu_util_pct: Some(50.0), ..Sample::default() };
        let bytes = encode_samples([(3, &s)].into_iter());
        assert_eq!(&bytes[..11], SIGNATURE);
        assert_eq!(&bytes[11..19], &[0; 8]);
        assert_eq!(i16::from_be_bytes([bytes[19], bytes[20]]), 28);
        // gpu_id, then ts_ms, then gpu_util_pct as float8 bits.
        assert_eq!(&bytes[21..25], &8i32.to_be_bytes());
        assert_eq!(i64::from_be_bytes(bytes[25..33].try_into().unwrap()), 3);
        assert_eq!(i64::from_be_bytes(bytes[37..45].try_into().unwrap()), 7);
        assert_eq!(f64::from_bits(u64::from_be_bytes(bytes[49..57].try_into().unwrap())), 50.0);
        // mem_util_pct is NULL.
        assert_eq!(&bytes[57..61], &(-1i32).to_be_bytes());
        assert_eq!(&bytes[bytes.len() - 2..], &(-1i16).to_be_bytes());
    }

    #[test]
    fn a_repeated_process_list_encodes_as_if_serialised_again() {
        let proc = |pid: u32, command: &str| GpuProcess { pid, command: Some(command.into()), ..GpuProcess::default() };
        let a = vec![proc(1, "train.py"), proc(2, "eval \"quoted\"")];
        let b = vec![proc(3, "serve")];
        let rows: Vec<Sample> =
            [Some(a.clone()), Some(a.clone()), Some(b), None, Some(a), Some(Vec::new()), Some(Vec::new())]
                .into_iter()
                .enumerate()
                .map(|(i, processes)| Sample { ts_ms: i as i64, processes, ..Sample::default() })
                .collect();
        let together = encode_samples(rows.iter().map(|s| (9, s)));
        // Each row alone (no earlier list to reuse): header, the row, trailer.
        let mut apart = encode_samples(std::iter::empty());
        apart.truncate(apart.len() - 2);
        for s in &rows {
            let one = encode_samples([(9, s)].into_iter());
            apart.extend_from_slice(&one[19..one.len() - 2]);
        }
        apart.extend_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(together, apart);
    }
}
