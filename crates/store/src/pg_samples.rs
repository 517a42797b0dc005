//! Sample rows into PostgreSQL, two ways. (A batch that meets nothing stored is written as
//! per-batch blocks instead: `crate::pg_batches`.)
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

use crate::columns;
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
    let unique = unique(order);
    if unique.is_empty() {
        return Ok(unique);
    }
    match mode {
        InsertMode::Copy => {
            let mut copy = tx.copy_in_raw(SAMPLES_COPY_SQL).await?;
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

/// The samples of `order` (sorted by GPU and time), each key once: the first of the batch.
pub(crate) fn unique<'a>(order: &[(i64, &'a Sample)]) -> Vec<(i64, &'a Sample)> {
    let mut last = None;
    order
        .iter()
        .copied()
        .filter(|&(gpu_id, s)| {
            let key = Some((gpu_id, s.ts_ms));
            std::mem::replace(&mut last, key) != key
        })
        .collect()
}

/// The samples of `order` (sorted by GPU and time) that [`insert`] did not store, each key once
/// (the first of the batch), with their flags (`flag_of`): stored before, they may fill in the
/// stored rows ([`crate::merge`]).
pub(crate) fn not_inserted<'a>(
    order: &[(i64, &'a Sample)],
    fresh: &[(i64, &'a Sample)],
    flag_of: impl Fn(&Sample) -> fleetlens_core::QualityFlags,
) -> Vec<(i64, &'a Sample, fleetlens_core::QualityFlags)> {
    let stored: HashSet<(i64, i64)> = fresh.iter().map(|&(gpu_id, s)| (gpu_id, s.ts_ms)).collect();
    let mut last = None;
    order
        .iter()
        .filter(|&&(gpu_id, s)| {
            let key = Some((gpu_id, s.ts_ms));
            std::mem::replace(&mut last, key) != key && !stored.contains(&(gpu_id, s.ts_ms))
        })
        .map(|&(gpu_id, s)| (gpu_id, s, flag_of(s)))
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
    let rows = SampleArrays::new(unique.iter().copied());
    let sql = format!(
        "INSERT INTO samples (gpu_id, ts_ms, vals, processes, allocations) \
         SELECT gpu_id, ts_ms, vals, processes, allocations FROM {} \
         ON CONFLICT DO NOTHING RETURNING gpu_id, ts_ms",
        SampleArrays::UNNEST
    );
    let rows = rows.bind(sqlx::query(&sql)).fetch_all(&mut **tx).await?;
    rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect()
}

pub(crate) const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Sample rows as one array per column, for `UNNEST` parameters ([`SampleArrays::UNNEST`]).
pub(crate) struct SampleArrays {
    gpu_ids: Vec<i64>,
    ts: Vec<i64>,
    vals: Vec<Vec<u8>>,
    processes: Vec<Option<String>>,
    allocations: Vec<Option<String>>,
}

impl SampleArrays {
    /// The rows as a table `t(gpu_id, ts_ms, vals, processes, allocations)`: the first five
    /// parameters of a statement, bound by [`SampleArrays::bind`].
    pub const UNNEST: &'static str = "UNNEST($1::int8[], $2::int8[], $3::bytea[], $4::text[], $5::text[]) \
         AS t(gpu_id, ts_ms, vals, processes, allocations)";

    pub fn new<'a>(rows: impl ExactSizeIterator<Item = (i64, &'a Sample)>) -> Self {
        let n = rows.len();
        let mut out = Self {
            gpu_ids: Vec::with_capacity(n),
            ts: Vec::with_capacity(n),
            vals: Vec::with_capacity(n),
            processes: Vec::with_capacity(n),
            allocations: Vec::with_capacity(n),
        };
        for (gpu_id, s) in rows {
            out.gpu_ids.push(gpu_id);
            out.ts.push(s.ts_ms);
            out.vals.push(crate::row_values::encode(s));
            out.processes.push(columns::processes_json(s));
            out.allocations.push(columns::allocations_json(s));
        }
        out
    }

    /// Bind the five arrays in order.
    pub fn bind<'q>(
        &'q self,
        q: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
        q.bind(&self.gpu_ids).bind(&self.ts).bind(&self.vals).bind(&self.processes).bind(&self.allocations)
    }
}

/// `COPY` statement matching [`encode_samples`]' field order.
const SAMPLES_COPY_SQL: &str = "COPY samples (gpu_id, ts_ms, vals, processes, allocations) FROM STDIN (FORMAT binary)";

/// Encode `(gpu_id, sample)` rows as one binary `COPY` stream.
fn encode_samples<'a>(rows: impl ExactSizeIterator<Item = (i64, &'a Sample)>) -> Vec<u8> {
    // The key, the values' payload (tens of bytes), the process list and allocations.
    let mut out = copy_header(rows.len() * 160);
    let mut last_list = None;
    for (gpu_id, s) in rows {
        out.extend_from_slice(&5i16.to_be_bytes());
        put_i64(&mut out, Some(gpu_id));
        put_i64(&mut out, Some(s.ts_ms));
        // bytea in binary COPY: the bytes.
        field(&mut out, |out| crate::row_values::encode_into(out, s));
        put_processes(&mut out, s, &mut last_list);
        put_text(&mut out, columns::allocations_json(s).as_deref());
    }
    copy_trailer(&mut out);
    out
}

/// A binary `COPY` stream's header (signature, flags, extension length), with room for `body`
/// bytes of tuples and the trailer.
pub(crate) fn copy_header(body: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(19 + body + 2);
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out
}

/// The field count -1 that ends a binary `COPY` stream.
pub(crate) fn copy_trailer(out: &mut Vec<u8>) {
    out.extend_from_slice(&(-1i16).to_be_bytes());
}

/// One field: its 32-bit length, then what `write` appends.
pub(crate) fn field(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let len_at = out.len();
    out.extend_from_slice(&0i32.to_be_bytes());
    write(out);
    let len = (out.len() - len_at - 4) as i32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

/// A NULL field.
pub(crate) fn put_null(out: &mut Vec<u8>) {
    out.extend_from_slice(&(-1i32).to_be_bytes());
}

pub(crate) fn put_i64(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => {
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&v.to_be_bytes());
        }
        None => put_null(out),
    }
}

/// A text field (in binary `COPY`, the UTF-8 bytes), or NULL.
pub(crate) fn put_text(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => field(out, |out| out.extend_from_slice(text.as_bytes())),
        None => put_null(out),
    }
}

/// The last process list written to a stream, and where its JSON lies in it.
pub(crate) type LastList<'a> = Option<(&'a [GpuProcess], std::ops::Range<usize>)>;

/// A sample's process list as a JSON text field, or NULL. A GPU's list rarely changes from one
/// second to the next: an equal list to the last one written is copied, not serialised again.
pub(crate) fn put_processes<'a>(out: &mut Vec<u8>, s: &'a Sample, last: &mut LastList<'a>) {
    let Some(list) = s.processes.as_deref() else { return put_null(out) };
    match last {
        Some((prev, json)) if *prev == list => {
            let json = json.clone();
            out.extend_from_slice(&(json.len() as i32).to_be_bytes());
            out.extend_from_within(json);
        }
        _ => {
            let start = out.len() + 4;
            field(out, |out| serde_json::to_writer(out, list).expect("a process list serializes"));
            *last = Some((list, start..out.len()));
        }
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
        assert_eq!(i16::from_be_bytes([bytes[19], bytes[20]]), 5);
        // gpu_id, then ts_ms, then the values' payload as bytea.
        assert_eq!(&bytes[21..25], &8i32.to_be_bytes());
        assert_eq!(i64::from_be_bytes(bytes[25..33].try_into().unwrap()), 3);
        assert_eq!(i64::from_be_bytes(bytes[37..45].try_into().unwrap()), 7);
        let vals = crate::row_values::encode(&s);
        assert_eq!(&bytes[45..49], &(vals.len() as i32).to_be_bytes());
        assert_eq!(&bytes[49..49 + vals.len()], vals.as_slice());
        // No process list, no allocations: NULL, NULL.
        assert_eq!(&bytes[49 + vals.len()..57 + vals.len()], [(-1i32).to_be_bytes(), (-1i32).to_be_bytes()].concat());
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
