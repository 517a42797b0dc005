//! PostgreSQL binary `COPY` encoding of sample rows.
//!
//! `COPY … FROM STDIN (FORMAT binary)` is the cheapest way into a table: no SQL to plan per
//! batch, no array parameters to unpack with `UNNEST`, no speculative insertion for
//! `ON CONFLICT`. It has no conflict handling, so the caller first drops the keys that are
//! already stored (see `PgStore::ingest_once`) and retries on a unique violation.
//!
//! Format (PostgreSQL docs, "COPY … Binary Format"): an 11-byte signature, a 32-bit flags field
//! and a 32-bit header-extension length; then per tuple a 16-bit field count and per field a
//! 32-bit byte length (-1 for NULL) followed by the value in network byte order; a 16-bit -1
//! ends the data.

use fleetlens_core::Sample;

use crate::columns::{self, Cell, SAMPLE_COLUMNS};

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// `COPY` statement matching [`encode_samples`]' field order.
pub(crate) fn samples_copy_sql() -> String {
    format!("COPY samples (gpu_id, ts_ms, {}, processes) FROM STDIN (FORMAT binary)", SAMPLE_COLUMNS.join(", "))
}

/// Encode `(gpu_id, sample)` rows as one binary `COPY` stream.
pub(crate) fn encode_samples<'a>(rows: impl ExactSizeIterator<Item = (i64, &'a Sample)>) -> Vec<u8> {
    // 26 fields of at most 8 bytes plus their 4-byte lengths, and the process list.
    let mut out = Vec::with_capacity(19 + rows.len() * 320 + 2);
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    let fields = (2 + SAMPLE_COLUMNS.len() + 1) as i16;
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
            Some(list) => {
                let len_at = out.len();
                out.extend_from_slice(&0i32.to_be_bytes());
                serde_json::to_writer(&mut out, list).expect("a process list serializes");
                let len = (out.len() - len_at - 4) as i32;
                out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
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
        assert_eq!(i16::from_be_bytes([bytes[19], bytes[20]]), 26);
        // gpu_id, then ts_ms, then gpu_util_pct as float8 bits.
        assert_eq!(&bytes[21..25], &8i32.to_be_bytes());
        assert_eq!(i64::from_be_bytes(bytes[25..33].try_into().unwrap()), 3);
        assert_eq!(i64::from_be_bytes(bytes[37..45].try_into().unwrap()), 7);
        assert_eq!(f64::from_bits(u64::from_be_bytes(bytes[49..57].try_into().unwrap())), 50.0);
        // mem_util_pct is NULL.
        assert_eq!(&bytes[57..61], &(-1i32).to_be_bytes());
        assert_eq!(&bytes[bytes.len() - 2..], &(-1i16).to_be_bytes());
    }
}
