//! The byte format of a packed hour of 1-minute rollups (issue 21, part 3): the `rollups_1m`
//! rows of one GPU over one hour, one column per rollup column, so a closed hour costs a few
//! kilobytes instead of sixty rows of ~900 B.
//!
//! ```text
//! header   "FLMB", format version (u8), n (u32 LE): the minutes, bucket_ms ascending,
//!          then s (u16 LE): the rollup signals stored, q (u16 LE): the quality counts,
//!          c (u16 LE): the credit cells
//! 7 cols   integer columns: bucket_ms, sample_count, allocated_count, processes_read_count,
//!          first_ts_ms, last_ts_ms, sampled_ms
//! q cols   integer columns: samples per data-quality flag
//! s × 4    per signal: count (integer), sum, min, max (version 1: f64 bits; version 2:
//!          integers at the signal's stored precision, f64 bits for a value too large)
//! 1 col    dictionary column: the minute's state
//! c cols   f64 columns: the credit cells (`Credit::to_cells` order)
//! ```
//!
//! Columns are the numbers and dictionary columns of [`super::format`]. Every value is kept
//! exactly, so a minute read from a packed hour is the row it was: the rollup job writes a
//! minute's statistics at their signal's stored precision
//! (`RollupBucket::at_stored_precision`), which version 2 keeps as integers (arbitrary f64
//! minima and sums cost ~6 B each as bits, a percentage at 0.01 one or two); credits stay f64
//! bits (pco finds their common patterns). A row written before statistics were kept at their
//! precision is rounded to it when its hour is packed. A block written by a server that knew
//! fewer signals, flags or credit cells reads the missing ones as absent or zero; a block with
//! more than this server knows is refused.

use fleetlens_core::{CREDIT_COLUMNS, Credit, GpuId, QUALITY_COUNTS, ROLLUP_SIGNALS, RollupBucket, SignalStats};

use super::format::{BlockError, Number, Precision, Reader, put_at_precision, put_dictionary, put_ints, put_raw_f64};

const MAGIC: &[u8; 4] = b"FLMB";
/// Version 2 keeps the signals' statistics as integers at their stored precision.
const FORMAT_VERSION: u8 = 2;
/// What each of [`ROLLUP_SIGNALS`] keeps at rest.
const PRECISION: [Precision; ROLLUP_SIGNALS.len()] = fleetlens_core::signal::precisions(ROLLUP_SIGNALS);
/// The integer columns before the quality counts.
const HEAD_COLUMNS: usize = 7;

/// One stored minute: its rollup (`gpu_id` is not stored: the block's row has it), its state
/// and its credit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredMinute {
    pub bucket: RollupBucket,
    pub state: Option<String>,
    pub credit: Credit,
}

/// Encode the minutes of one GPU-hour (ascending, distinct `bucket_ms`).
pub(crate) fn encode(minutes: &[StoredMinute]) -> Vec<u8> {
    encode_as(minutes, FORMAT_VERSION)
}

/// [`encode`] in format `version` (tests write the blocks of older servers with it).
fn encode_as(minutes: &[StoredMinute], version: u8) -> Vec<u8> {
    let n = minutes.len();
    let mut out = Vec::with_capacity(256 + n * 16);
    out.extend_from_slice(MAGIC);
    out.push(version);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    for count in [ROLLUP_SIGNALS.len(), QUALITY_COUNTS, CREDIT_COLUMNS] {
        out.extend_from_slice(&(count as u16).to_le_bytes());
    }
    let ints =
        |f: &dyn Fn(&RollupBucket) -> i64| -> Vec<Option<i64>> { minutes.iter().map(|m| Some(f(&m.bucket))).collect() };
    let head: [&dyn Fn(&RollupBucket) -> i64; HEAD_COLUMNS] = [
        &|b| b.bucket_ms,
        &|b| b.sample_count,
        &|b| b.allocated_count,
        &|b| b.processes_read_count,
        &|b| b.first_ts_ms,
        &|b| b.last_ts_ms,
        &|b| b.sampled_ms,
    ];
    for f in head {
        put_ints(&mut out, &ints(f));
    }
    for q in 0..QUALITY_COUNTS {
        put_ints(&mut out, &ints(&|b| b.quality[q]));
    }
    for (s, &precision) in PRECISION.iter().enumerate() {
        put_ints(&mut out, &ints(&|b| b.signals[s].count));
        let floats = |f: &dyn Fn(&SignalStats) -> Option<f64>| -> Vec<Option<f64>> {
            minutes.iter().map(|m| f(&m.bucket.signals[s])).collect()
        };
        for column in [floats(&|st| Some(st.sum)), floats(&|st| st.min), floats(&|st| st.max)] {
            match version {
                1 => put_raw_f64(&mut out, &column),
                _ => put_at_precision(&mut out, &column, precision),
            }
        }
    }
    put_dictionary(&mut out, minutes.iter().map(|m| m.state.clone()));
    let cells: Vec<[f64; CREDIT_COLUMNS]> = minutes.iter().map(|m| m.credit.to_cells()).collect();
    for c in 0..CREDIT_COLUMNS {
        put_raw_f64(&mut out, &cells.iter().map(|cells| Some(cells[c])).collect::<Vec<_>>());
    }
    out
}

/// Decode a packed hour of GPU `gpu_id`: its minutes, ascending.
pub(crate) fn decode(gpu_id: GpuId, bytes: &[u8]) -> Result<Vec<StoredMinute>, BlockError> {
    let mut r = Reader(bytes);
    if r.take(4)? != MAGIC {
        return Err(BlockError::Malformed("not a block of minute rollups"));
    }
    let version = r.u8()?;
    if version == 0 || version > FORMAT_VERSION {
        return Err(BlockError::Version(version));
    }
    let n = r.u32()? as usize;
    let (signals, quality, credits) = (usize::from(r.u16()?), usize::from(r.u16()?), usize::from(r.u16()?));
    if signals > ROLLUP_SIGNALS.len() || quality > QUALITY_COUNTS || credits > CREDIT_COLUMNS {
        return Err(BlockError::Malformed("more rollup columns than this server knows"));
    }
    let ints = |r: &mut Reader<'_>| -> Result<Vec<i64>, BlockError> {
        r.numbers(n)?.into_iter().map(|v| v.map(Number::as_i64).ok_or(BlockError::Malformed("absent count"))).collect()
    };
    let floats = |r: &mut Reader<'_>| -> Result<Vec<Option<f64>>, BlockError> {
        Ok(r.numbers(n)?.into_iter().map(|v| v.map(Number::as_raw_f64)).collect())
    };
    // Integers at the signal's precision (version 2), or f64 bits (version 1, a huge value).
    let stats = |r: &mut Reader<'_>, precision: Precision| -> Result<Vec<Option<f64>>, BlockError> {
        Ok(r.numbers(n)?.into_iter().map(|v| v.map(|v| v.as_f64(precision))).collect())
    };
    let mut out: Vec<StoredMinute> = (0..n)
        .map(|_| StoredMinute {
            bucket: RollupBucket { gpu_id, ..Default::default() },
            state: None,
            credit: Credit::default(),
        })
        .collect();
    let head: [fn(&mut RollupBucket) -> &mut i64; HEAD_COLUMNS] = [
        |b| &mut b.bucket_ms,
        |b| &mut b.sample_count,
        |b| &mut b.allocated_count,
        |b| &mut b.processes_read_count,
        |b| &mut b.first_ts_ms,
        |b| &mut b.last_ts_ms,
        |b| &mut b.sampled_ms,
    ];
    for field in head {
        for (m, v) in out.iter_mut().zip(ints(&mut r)?) {
            *field(&mut m.bucket) = v;
        }
    }
    for q in 0..quality {
        for (m, v) in out.iter_mut().zip(ints(&mut r)?) {
            m.bucket.quality[q] = v;
        }
    }
    for (s, &precision) in PRECISION.iter().enumerate().take(signals) {
        let counts = ints(&mut r)?;
        let sums = stats(&mut r, precision)?;
        let mins = stats(&mut r, precision)?;
        let maxs = stats(&mut r, precision)?;
        for (i, m) in out.iter_mut().enumerate() {
            m.bucket.signals[s] =
                SignalStats { count: counts[i], sum: sums[i].unwrap_or(0.0), min: mins[i], max: maxs[i] };
        }
    }
    for (m, state) in out.iter_mut().zip(r.dictionary(n, str::to_string)?) {
        m.state = state;
    }
    let mut cells = vec![[0.0; CREDIT_COLUMNS]; n];
    for c in 0..credits {
        for (row, v) in cells.iter_mut().zip(floats(&mut r)?) {
            row[c] = v.unwrap_or(0.0);
        }
    }
    for (m, cells) in out.iter_mut().zip(&cells) {
        m.credit = Credit::from_cells(cells);
    }
    if !r.0.is_empty() {
        return Err(BlockError::Malformed("bytes after the last column"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An hour of minutes as the rollup job writes them: one minute missing, a signal absent in
    /// some, counts and credits that vary, a state that changes.
    fn hour() -> Vec<StoredMinute> {
        (0..60)
            .filter(|i| *i != 17)
            .map(|i| {
                let mut bucket = RollupBucket {
                    gpu_id: GpuId(9),
                    bucket_ms: 1_700_002_800_000 + i * 60_000,
                    sample_count: 60 - (i % 3),
                    allocated_count: if i < 30 { 60 } else { 0 },
                    processes_read_count: 60,
                    first_ts_ms: 1_700_002_800_000 + i * 60_000 + 13,
                    last_ts_ms: 1_700_002_800_000 + i * 60_000 + 59_013,
                    sampled_ms: 59_000 + i,
                    ..Default::default()
                };
                bucket.quality[1] = i % 2;
                for (s, st) in bucket.signals.iter_mut().enumerate() {
                    let present = !(s == 3 && i % 4 == 0);
                    *st = SignalStats {
                        count: if present { 60 } else { 0 },
                        sum: if present { 60.0 * (37.25 + i as f64 * 0.01) + s as f64 } else { 0.0 },
                        min: present.then_some(0.1 + s as f64),
                        max: present.then_some(99.99 - i as f64 / 3.0),
                    };
                }
                // Bytes are whole numbers.
                let bytes = &mut bucket.signals[ROLLUP_SIGNALS.iter().position(|s| *s == "mem_used_bytes").unwrap()];
                (bytes.sum, bytes.min, bytes.max) =
                    (bytes.sum.round(), bytes.min.map(f64::round), bytes.max.map(f64::round));
                let bucket = bucket.at_stored_precision();
                let mut cells = [0.0; CREDIT_COLUMNS];
                for (c, v) in cells.iter_mut().enumerate() {
                    *v = if c % 5 == 0 { 60.0 } else { (i * c as i64) as f64 / 7.0 };
                }
                StoredMinute {
                    bucket,
                    state: Some(if i < 30 { "busy" } else { "idle" }.to_string()),
                    credit: Credit::from_cells(&cells),
                }
            })
            .collect()
    }

    #[test]
    fn a_packed_hour_reads_back_exactly() {
        let minutes = hour();
        let bytes = encode(&minutes);
        assert_eq!(decode(GpuId(9), &bytes).unwrap(), minutes);
        // Far below the ~900 B a minute row takes in PostgreSQL.
        assert!(bytes.len() < 59 * 150, "{} B for 59 minutes", bytes.len());
    }

    #[test]
    fn statistics_are_integers_at_their_precision_and_older_blocks_still_read() {
        let minutes = hour();
        let version_1 = encode_as(&minutes, 1);
        assert_eq!(decode(GpuId(9), &version_1).unwrap(), minutes);
        let version_2 = encode(&minutes);
        // This hour's regular values suit pco's float mode too; measured traces gain far more
        // (docs/BENCHMARKS.md).
        assert!(version_2.len() < version_1.len(), "{} B vs {} B as f64 bits", version_2.len(), version_1.len());
        // A minute row of an older release, statistics not at their precision: rounded to it
        // when packed, so within half a step of what it was.
        let mut older = hour();
        older[0].bucket.signals[1].max = Some(99.123_456);
        older[0].bucket.signals[5].sum = 12_345_678_901.0;
        older[1].bucket.signals[11].min = Some(1.0e6 + 1.0 / 3.0);
        let back = decode(GpuId(9), &encode(&older)).unwrap();
        assert_eq!(back[0].bucket.signals[1].max, Some(99.12));
        assert_eq!(back[0].bucket.signals[5].sum, 12_345_678_901.0, "bytes stay exact");
        assert_eq!(back[1].bucket.signals[11].min, Some(1_000_000.333), "energy at 1 mJ");
        assert_eq!(back[2..], older[2..]);
        // A sum too large for its integer to be exact stays f64 bits.
        let mut huge = hour();
        huge[3].bucket.signals[6].sum = 1.0e300;
        assert_eq!(decode(GpuId(9), &encode(&huge)).unwrap(), huge);
    }

    #[test]
    fn absent_statistics_and_states_stay_absent() {
        let mut minutes = hour();
        minutes[0].state = None;
        minutes[1].bucket.signals[0] = SignalStats { count: 0, sum: 0.0, min: None, max: None };
        let back = decode(GpuId(9), &encode(&minutes)).unwrap();
        assert_eq!(back[0].state, None);
        assert_eq!(back[1].bucket.signals[0].min, None);
        assert_eq!(back, minutes);
    }

    #[test]
    fn an_empty_hour_and_corrupt_or_newer_blocks() {
        assert_eq!(decode(GpuId(1), &encode(&[])).unwrap(), []);
        let bytes = encode(&hour());
        assert!(decode(GpuId(9), &bytes[..bytes.len() - 3]).is_err(), "truncated");
        assert!(decode(GpuId(9), b"FLSB\x01").is_err(), "a sample block is not a minute block");
        let mut newer = bytes.clone();
        newer[4] = FORMAT_VERSION + 1;
        assert!(matches!(decode(GpuId(9), &newer), Err(BlockError::Version(_))));
        let mut wider = bytes;
        wider[9] = 200;
        assert!(decode(GpuId(9), &wider).is_err(), "more signals than known");
    }
}
