//! The byte format of a sealed block: the raw samples of one GPU over one span (an hour), one
//! column per signal.
//!
//! ```text
//! header   "FLSB", format version (u8), n (u32 LE): the samples in the block, ts ascending,
//!          then (version 2) k (u16 LE): the measurement columns that follow
//! ts       numbers column of the n timestamps (ms)
//! k cols   one numbers column per measurement, the first k of `columns::SAMPLE_COLUMNS`
//!          (version 1 has no k: its blocks hold the first 23, the columns of that time)
//! procs    the process lists: (versions 1, 2) a dictionary column of each sample's list as
//!          JSON; (version 3) a layout byte, then that column ([`PROCESS_LISTS`]) or the
//!          lists as columns ([`PROCESS_COLUMNS`], below), whichever is smaller for the block
//! allocs   one dictionary column: the pod allocations (JSON)
//! ```
//!
//! The process lists as columns are four columns over the processes of every sample in turn:
//! a numbers column of the n list lengths (absent: the list was not read, which is not an
//! empty list), a dictionary column of each process's identity (the process as JSON without
//! its two readings: pid, command, user, container, owner), and numbers columns of its
//! readings, `used_bytes` (exact) and `sm_pct` (the f64 as measured). A process keeps its
//! identity all hour while its memory may move every second, and then each sample's list is
//! a new dictionary text; where the lists repeat (memory steady), the dictionary of lists is
//! the smaller.
//!
//! A *numbers column* starts with a tag byte: the low nibble says which samples have a value
//! ([`ABSENT`]: none, [`CONSTANT`]: all, one value stored once, [`ALL`]: all, [`SOME`]: a
//! validity bitmap of ⌈n/8⌉ bytes follows, bit i of byte i/8 set when sample i has a value);
//! bit [`RAW_F64`] set means the values are the `f64` bits as measured instead of integers at
//! the column's stored precision ([`Precision`]), for a value that does not fit one (only an
//! absurdly large reading). Then the present values: a constant as 8 bytes LE, else a u32 LE
//! length and a pcodec (`pco`) standalone chunk of the values. pco finds the delta order itself:
//! timestamps come out delta-of-delta (regular sampling costs a few bits each, jitter a few
//! more), counters (energy) as deltas, gauges as plain integers with their common range and
//! greatest common divisor removed.
//!
//! A *dictionary column* starts with a tag: [`ABSENT`] (every sample lacks it), else the
//! distinct JSON texts (u32 count; u32 length and u32 deflated length of the texts, each a u32
//! length + UTF-8, deflated together), then per sample its index into
//! them, 0 meaning absent and k the k-th text: [`CONSTANT`] with one u32, or [`ALL`] with a
//! u32-length pco chunk of u32 indices. Absent stays absent everywhere: never a 0 reading.

use std::io::{Read, Write};

use fleetlens_core::{GpuProcess, ProcessColumns, Sample, SampleTable, SignalValues};

use crate::columns::{self, Cell, SAMPLE_COLUMNS};

const MAGIC: &[u8; 4] = b"FLSB";
/// Bump when the layout changes; readers keep decoding every older version they know.
/// Version 2 records how many measurement columns a block holds, so a signal added later
/// reads as absent from the blocks sealed before it existed; version 3 keeps the process lists
/// as columns.
pub(crate) const FORMAT_VERSION: u8 = 3;
/// Version 3's process layouts: each sample's list as a dictionary text, or the lists as
/// columns.
const PROCESS_LISTS: u8 = 0;
const PROCESS_COLUMNS: u8 = 1;
/// The most processes a block may list over all its samples: a corrupt length column is
/// refused before anything is allocated for it.
const MAX_PROCESS_ENTRIES: usize = 1 << 24;
/// The measurement columns of a version-1 block (every one of them before 0024's
/// `tensor_hmma_active_pct`).
const VERSION_1_COLUMNS: usize = 23;

pub(super) const ABSENT: u8 = 0;
pub(super) const CONSTANT: u8 = 1;
pub(super) const ALL: u8 = 2;
const SOME: u8 = 3;
const RAW_F64: u8 = 0x10;

pub(crate) use fleetlens_core::signal::Precision;

/// The stored precision of each column of [`SAMPLE_COLUMNS`], in that order, from the signal
/// table (docs/METRICS.md, "Stored precision", lists the same). Finer than any source reports
/// (NVML percentages are integers, DCGM's ratios carry 3-4 significant digits, power is read in
/// mW).
pub(crate) const PRECISION: [Precision; SAMPLE_COLUMNS.len()] = fleetlens_core::signal::precisions(SAMPLE_COLUMNS);

/// A block that cannot be read back: corruption, or a version this build does not know.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error("sample block: {0}")]
    Malformed(&'static str),
    #[error("sample block format version {0} is newer than this server knows ({FORMAT_VERSION})")]
    Version(u8),
    #[error("sample block column: {0}")]
    Codec(#[from] pco::errors::PcoError),
}

impl From<BlockError> for crate::StoreError {
    fn from(e: BlockError) -> Self {
        crate::StoreError::Invalid(e.to_string())
    }
}

/// Encode `samples` (ascending, distinct `ts_ms`; identity fields are not stored: the GPU row
/// has them). At most `u32::MAX` samples.
pub fn encode(samples: &[Sample]) -> Vec<u8> {
    encode_as(samples, FORMAT_VERSION, SAMPLE_COLUMNS.len())
}

/// [`encode`] in format `version` with the first `columns` measurement columns (tests write
/// the blocks of older servers with it).
fn encode_as(samples: &[Sample], version: u8, columns: usize) -> Vec<u8> {
    let n = samples.len();
    let mut out = Vec::with_capacity(64 + n * 8);
    out.extend_from_slice(MAGIC);
    out.push(version);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    if version >= 2 {
        out.extend_from_slice(&(columns as u16).to_le_bytes());
    }
    let ts: Vec<Option<i64>> = samples.iter().map(|s| Some(s.ts_ms)).collect();
    put_ints(&mut out, &ts);
    let cells: Vec<[Cell; SAMPLE_COLUMNS.len()]> = samples.iter().map(columns::sample_cells).collect();
    for (col, precision) in PRECISION.iter().enumerate().take(columns) {
        let values: Vec<Option<f64>> = cells
            .iter()
            .map(|c| match c[col] {
                Cell::F(v) => v,
                Cell::I(v) => v.map(|v| v as f64),
            })
            .collect();
        match *precision {
            Precision::Exact => {
                let ints: Vec<Option<i64>> = cells
                    .iter()
                    .map(|c| match c[col] {
                        Cell::I(v) => v,
                        Cell::F(v) => v.map(|v| v as i64),
                    })
                    .collect();
                put_ints(&mut out, &ints);
            }
            Precision::Scaled(_) => put_at_precision(&mut out, &values, *precision),
        }
    }
    let mut lists = Vec::new();
    put_dictionary(&mut lists, samples.iter().map(columns::processes_json));
    if version >= 3 {
        let mut as_columns = Vec::new();
        put_process_columns(&mut as_columns, samples);
        if as_columns.len() < lists.len() {
            out.push(PROCESS_COLUMNS);
            lists = as_columns;
        } else {
            out.push(PROCESS_LISTS);
        }
    }
    out.extend_from_slice(&lists);
    put_dictionary(&mut out, samples.iter().map(columns::allocations_json));
    out
}

/// The process lists as columns (version 3; the layout is in the module's documentation).
fn put_process_columns(out: &mut Vec<u8>, samples: &[Sample]) {
    let lengths: Vec<Option<i64>> = samples.iter().map(|s| s.processes.as_ref().map(|p| p.len() as i64)).collect();
    put_ints(out, &lengths);
    let listed = || samples.iter().flat_map(|s| s.processes.iter().flatten());
    put_dictionary(out, listed().map(|p| Some(process_identity(p))));
    put_ints(out, &listed().map(|p| p.used_bytes).collect::<Vec<_>>());
    put_raw_f64(out, &listed().map(|p| p.sm_pct).collect::<Vec<_>>());
}

/// A process without its readings, as JSON: the same all hour for one process.
fn process_identity(p: &GpuProcess) -> String {
    let identity = GpuProcess { used_bytes: None, sm_pct: None, ..p.clone() };
    serde_json::to_string(&identity).expect("a process serializes")
}

/// The process lists of the table's `n` samples from their columns ([`PROCESS_COLUMNS`]):
/// they are the table's process columns already, with the identities parsed once.
fn read_process_columns(r: &mut Reader, n: usize, table: &mut SampleTable) -> Result<(), BlockError> {
    let lengths: Vec<Option<u32>> = r
        .numbers(n)?
        .into_iter()
        .map(|len| len.map(|len| u32::try_from(len.as_i64())).transpose())
        .collect::<Result<_, _>>()
        .map_err(|_| BlockError::Malformed("a negative process count"))?;
    let total = lengths.iter().flatten().fold(0usize, |total, &len| total.saturating_add(len as usize));
    if total > MAX_PROCESS_ENTRIES {
        return Err(BlockError::Malformed("more processes than a block can list"));
    }
    // Written by us from a GpuProcess: see `process_identity`.
    let (identities, ids) = r.dictionary_parts(total, |t| serde_json::from_str::<GpuProcess>(t).ok())?;
    let used = r.numbers(total)?;
    let sm = r.numbers(total)?;
    let process = ids
        .into_iter()
        .map(|id| {
            (id as usize)
                .checked_sub(1)
                .filter(|&i| identities.get(i).is_some_and(Option::is_some))
                .map(|i| i as u32)
                .ok_or(BlockError::Malformed("a process without a readable identity"))
        })
        .collect::<Result<_, _>>()?;
    table.process_count = lengths;
    table.processes = ProcessColumns {
        process,
        used_bytes: used.into_iter().map(|v| v.map(Number::as_i64)).collect(),
        sm_pct: sm.into_iter().map(|v| v.map(Number::as_raw_f64)).collect(),
        // Each one read above; one no row refers to cannot be, and would be unused.
        identities: identities.into_iter().map(Option::unwrap_or_default).collect(),
    };
    Ok(())
}

/// The column of the signal table ([`fleetlens_core::signal::SIGNALS`]) of each stored column.
const SIGNAL_OF_COLUMN: [usize; SAMPLE_COLUMNS.len()] = {
    let mut out = [0; SAMPLE_COLUMNS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = fleetlens_core::signal::index_of(SAMPLE_COLUMNS[i]);
        i += 1;
    }
    out
};

/// Decode a block: its samples, ascending, with empty identity fields.
pub fn decode(bytes: &[u8]) -> Result<Vec<Sample>, BlockError> {
    decode_table(bytes).map(SampleTable::into_samples)
}

/// Decode a block into columns, as it is stored: no [`Sample`] is built.
pub fn decode_table(bytes: &[u8]) -> Result<SampleTable, BlockError> {
    let mut r = Reader(bytes);
    if r.take(4)? != MAGIC {
        return Err(BlockError::Malformed("not a sample block"));
    }
    let version = r.u8()?;
    if version == 0 || version > FORMAT_VERSION {
        return Err(BlockError::Version(version));
    }
    let n = r.u32()? as usize;
    let stored_columns = if version == 1 { VERSION_1_COLUMNS } else { usize::from(r.u16()?) };
    if stored_columns > SAMPLE_COLUMNS.len() {
        return Err(BlockError::Malformed("more measurement columns than this server knows"));
    }
    let ts_ms = r
        .numbers(n)?
        .into_iter()
        .map(|t| t.map(Number::as_i64).ok_or(BlockError::Malformed("a sample without time")))
        .collect::<Result<_, _>>()?;
    let mut table = SampleTable { ts_ms, ..Default::default() };
    // Columns only ever get appended, so column i keeps its meaning and precision; those past
    // `stored_columns` did not exist when the block was sealed and stay absent.
    for (col, precision) in PRECISION.iter().enumerate() {
        let values = if col < stored_columns { r.numbers(n)? } else { vec![None; n] };
        table.signals[SIGNAL_OF_COLUMN[col]] = match precision {
            // Kept as integers: as they are (a bitmask keeps bit 63).
            Precision::Exact => SignalValues::Integers(values.into_iter().map(|v| v.map(Number::as_i64)).collect()),
            Precision::Scaled(_) => {
                SignalValues::Reals(values.into_iter().map(|v| v.map(|v| v.as_f64(*precision))).collect())
            }
        };
    }
    match if version >= 3 { r.u8()? } else { PROCESS_LISTS } {
        PROCESS_LISTS => {
            // Written by us from a Vec<GpuProcess>: see `SampleValues::into_sample`.
            let lists = r.dictionary(n, |t| serde_json::from_str::<Vec<GpuProcess>>(t).ok())?;
            table.process_count = lists
                .into_iter()
                .map(|list| {
                    let list = list.flatten()?;
                    list.iter().for_each(|p| table.processes.push(p));
                    Some(list.len() as u32)
                })
                .collect();
        }
        PROCESS_COLUMNS => read_process_columns(&mut r, n, &mut table)?,
        _ => return Err(BlockError::Malformed("unknown process layout")),
    }
    let (lists, ids) = r.dictionary_parts(n, |t| columns::parse_allocations(Some(t)))?;
    if ids.iter().any(|&id| id as usize > lists.len()) {
        return Err(BlockError::Malformed("index outside dictionary"));
    }
    // Index k is the k-th text, 0 absent: the table's first list is the empty one.
    table.allocation_lists.extend(lists);
    table.allocations = ids;
    if !r.0.is_empty() {
        return Err(BlockError::Malformed("bytes after the last column"));
    }
    Ok(table)
}

/// The integers of `values` at `precision`, or `None` when one does not fit an integer exactly
/// representable in f64 ([`Precision::stored_int`]).
fn quantize(values: &[Option<f64>], precision: Precision) -> Option<Vec<Option<i64>>> {
    values
        .iter()
        .map(|v| match v {
            None => Some(None),
            Some(v) => precision.stored_int(*v).map(Some),
        })
        .collect()
}

/// A decoded value: an integer (exact or scaled) or measured f64 bits.
#[derive(Debug, Clone, Copy)]
pub(super) enum Number {
    Int(i64),
    Raw(f64),
}

impl Number {
    pub(super) fn as_i64(self) -> i64 {
        match self {
            Number::Int(i) => i,
            Number::Raw(f) => f as i64,
        }
    }

    /// A value written with [`put_raw_f64`] (or an integer column read as a number).
    pub(super) fn as_raw_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Raw(f) => f,
        }
    }

    /// The value of a column kept at `precision` ([`Precision::from_stored_int`]; measured
    /// bits as they are).
    pub(super) fn as_f64(self, precision: Precision) -> f64 {
        match self {
            Number::Int(i) => precision.from_stored_int(i),
            Number::Raw(f) => f,
        }
    }
}

fn presence(values: &[Option<impl Copy + PartialEq>]) -> u8 {
    let present = values.iter().filter(|v| v.is_some()).count();
    if present == 0 {
        ABSENT
    } else if present < values.len() {
        SOME
    } else if values.iter().all(|v| *v == values[0]) {
        CONSTANT
    } else {
        ALL
    }
}

fn put_bitmap(out: &mut Vec<u8>, values: &[Option<impl Copy>]) {
    let mut bitmap = vec![0u8; values.len().div_ceil(8)];
    for (i, v) in values.iter().enumerate() {
        if v.is_some() {
            bitmap[i / 8] |= 1 << (i % 8);
        }
    }
    out.extend_from_slice(&bitmap);
}

fn put_chunk<T: pco::data_types::Number>(out: &mut Vec<u8>, values: &[T]) {
    let chunk = pco::standalone::simple_compress(values, &pco::ChunkConfig::default())
        .expect("pco compresses any non-empty slice of numbers");
    out.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
    out.extend_from_slice(&chunk);
}

pub(super) fn put_ints(out: &mut Vec<u8>, values: &[Option<i64>]) {
    let tag = presence(values);
    out.push(tag);
    match tag {
        ABSENT => {}
        CONSTANT => out.extend_from_slice(&values[0].expect("present").to_le_bytes()),
        _ => {
            if tag == SOME {
                put_bitmap(out, values);
            }
            let present: Vec<i64> = values.iter().flatten().copied().collect();
            put_chunk(out, &present);
        }
    }
}

/// A numbers column of `values` as integers at `precision` (the integer of a value that is
/// not at it is the nearest one), or as measured f64 bits when a value does not fit one.
pub(super) fn put_at_precision(out: &mut Vec<u8>, values: &[Option<f64>], precision: Precision) {
    match quantize(values, precision) {
        Some(ints) => put_ints(out, &ints),
        None => put_raw_f64(out, values),
    }
}

pub(super) fn put_raw_f64(out: &mut Vec<u8>, values: &[Option<f64>]) {
    // Compare bits: a constant column of one value stays CONSTANT.
    let bits: Vec<Option<u64>> = values.iter().map(|v| v.map(f64::to_bits)).collect();
    let tag = presence(&bits);
    out.push(tag | RAW_F64);
    match tag {
        ABSENT => {}
        CONSTANT => out.extend_from_slice(&bits[0].expect("present").to_le_bytes()),
        _ => {
            if tag == SOME {
                put_bitmap(out, values);
            }
            let present: Vec<f64> = values.iter().flatten().copied().collect();
            put_chunk(out, &present);
        }
    }
}

pub(super) fn put_dictionary(out: &mut Vec<u8>, texts: impl Iterator<Item = Option<String>>) {
    let mut dict: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut last: Option<(String, u32)> = None;
    let ids: Vec<u32> = texts
        .map(|t| match t {
            None => 0,
            // Consecutive samples mostly repeat the list: skip the hash lookup then.
            Some(t) if last.as_ref().is_some_and(|(l, _)| *l == t) => last.as_ref().expect("checked").1,
            Some(t) => {
                let id = *index.entry(t.clone()).or_insert_with(|| {
                    dict.push(t.clone());
                    dict.len() as u32
                });
                last = Some((t, id));
                id
            }
        })
        .collect();
    if dict.is_empty() {
        out.push(ABSENT);
        return;
    }
    let constant = ids.iter().all(|&i| i == ids[0]);
    out.push(if constant { CONSTANT } else { ALL });
    out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
    // The texts deflated together: a process list whose memory or SM share changes every
    // second is a new entry each time, differing from the last in a few digits.
    let mut texts = Vec::new();
    for text in &dict {
        texts.extend_from_slice(&(text.len() as u32).to_le_bytes());
        texts.extend_from_slice(text.as_bytes());
    }
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&texts).expect("deflating into memory");
    let deflated = z.finish().expect("deflating into memory");
    out.extend_from_slice(&(texts.len() as u32).to_le_bytes());
    out.extend_from_slice(&(deflated.len() as u32).to_le_bytes());
    out.extend_from_slice(&deflated);
    if constant {
        out.extend_from_slice(&ids[0].to_le_bytes());
    } else {
        put_chunk(out, &ids);
    }
}

pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], BlockError> {
        if self.0.len() < n {
            return Err(BlockError::Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(super) fn u8(&mut self) -> Result<u8, BlockError> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, BlockError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    pub(super) fn u32(&mut self) -> Result<u32, BlockError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, BlockError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn chunk<T: pco::data_types::Number>(&mut self, expected: usize) -> Result<Vec<T>, BlockError> {
        let len = self.u32()? as usize;
        let values: Vec<T> = pco::standalone::simple_decompress(self.take(len)?)?;
        if values.len() != expected {
            return Err(BlockError::Malformed("column length differs from its presence"));
        }
        Ok(values)
    }

    pub(super) fn numbers(&mut self, n: usize) -> Result<Vec<Option<Number>>, BlockError> {
        let tag = self.u8()?;
        let raw = tag & RAW_F64 != 0;
        let present: Vec<bool> = match tag & !RAW_F64 {
            ABSENT => return Ok(vec![None; n]),
            CONSTANT => {
                let bits = self.u64()?;
                let v = if raw { Number::Raw(f64::from_bits(bits)) } else { Number::Int(bits as i64) };
                return Ok(vec![Some(v); n]);
            }
            ALL => vec![true; n],
            SOME => {
                let bitmap = self.take(n.div_ceil(8))?;
                (0..n).map(|i| bitmap[i / 8] & (1 << (i % 8)) != 0).collect()
            }
            _ => return Err(BlockError::Malformed("unknown column tag")),
        };
        let count = present.iter().filter(|p| **p).count();
        let mut values: Box<dyn Iterator<Item = Number>> = if raw {
            Box::new(self.chunk::<f64>(count)?.into_iter().map(Number::Raw))
        } else {
            Box::new(self.chunk::<i64>(count)?.into_iter().map(Number::Int))
        };
        Ok(present.into_iter().map(|p| if p { values.next() } else { None }).collect())
    }

    /// A dictionary column, each distinct text turned into a `T` once (a block of a busy hour
    /// repeats a few lists thousands of times).
    pub(super) fn dictionary<T: Clone>(
        &mut self,
        n: usize,
        parse: impl Fn(&str) -> T,
    ) -> Result<Vec<Option<T>>, BlockError> {
        let (dict, ids) = self.dictionary_parts(n, parse)?;
        ids.into_iter()
            .map(|id| match id {
                0 => Ok(None),
                k => dict
                    .get(k as usize - 1)
                    .map(|t| Some(t.clone()))
                    .ok_or(BlockError::Malformed("index outside dictionary")),
            })
            .collect()
    }

    /// A dictionary column as stored: the parsed texts, and each of the `n` values' index into
    /// them (0: absent, k: the k-th), for a reader that builds its values in place.
    fn dictionary_parts<T>(&mut self, n: usize, parse: impl Fn(&str) -> T) -> Result<(Vec<T>, Vec<u32>), BlockError> {
        let tag = self.u8()?;
        if tag == ABSENT {
            return Ok((Vec::new(), vec![0; n]));
        }
        let entries = self.u32()? as usize;
        let inflated_len = self.u32()? as usize;
        let deflated_len = self.u32()? as usize;
        let mut inflated = Vec::with_capacity(inflated_len.min(64 << 20));
        flate2::read::DeflateDecoder::new(self.take(deflated_len)?)
            .take(inflated_len as u64)
            .read_to_end(&mut inflated)
            .map_err(|_| BlockError::Malformed("dictionary does not inflate"))?;
        if inflated.len() != inflated_len {
            return Err(BlockError::Malformed("dictionary shorter than stated"));
        }
        let mut texts = Reader(&inflated);
        let mut dict: Vec<T> = Vec::with_capacity(entries.min(n));
        for _ in 0..entries {
            let len = texts.u32()? as usize;
            let text = std::str::from_utf8(texts.take(len)?).map_err(|_| BlockError::Malformed("text not UTF-8"))?;
            dict.push(parse(text));
        }
        let ids: Vec<u32> = match tag {
            CONSTANT => vec![self.u32()?; n],
            ALL => self.chunk(n)?,
            _ => return Err(BlockError::Malformed("unknown dictionary tag")),
        };
        Ok((dict, ids))
    }
}

#[cfg(test)]
mod tests {
    use fleetlens_core::PodAllocation;

    use super::*;

    fn proc(pid: u32, used: i64) -> GpuProcess {
        GpuProcess { pid, used_bytes: Some(used), command: Some("python train.py".into()), ..GpuProcess::default() }
    }

    /// An hour of one GPU at ~1 Hz with jitter, changing processes, gaps in some signals.
    fn hour() -> Vec<Sample> {
        let mut energy = 1.0e9;
        (0..3600i64)
            .map(|i| {
                let ts = 1_700_000_000_000 + i * 1000 + (i * 37 % 23) - 11;
                energy += 312.25 + (i % 7) as f64;
                Sample {
                    ts_ms: ts,
                    gpu_util_pct: Some((i % 101) as f64),
                    mem_util_pct: (i % 5 != 0).then_some(12.5),
                    mem_used_bytes: Some(40_000_000_000 + i * 4096),
                    mem_total_bytes: Some(150_754_820_096),
                    power_w: Some(312.125 + (i % 13) as f64),
                    power_limit_w: Some(700.0),
                    energy_j: Some(energy),
                    temp_c: Some(41.0 + (i % 3) as f64),
                    sm_clock_mhz: Some(1980.0),
                    throttle_reasons: Some(if i % 50 == 0 { 0x4 } else { 0 }),
                    sm_active_pct: Some(87.31),
                    tensor_active_pct: (i > 1800).then_some(43.07),
                    processes: Some(if i < 2000 {
                        vec![proc(11, 1 << 30)]
                    } else {
                        vec![proc(11, 1 << 30), proc(12, 5)]
                    }),
                    allocations: if i % 2 == 0 {
                        vec![PodAllocation {
                            namespace: "ml".into(),
                            pod: "train-0".into(),
                            container: "main".into(),
                            ..Default::default()
                        }]
                    } else {
                        Vec::new()
                    },
                    ..Sample::default()
                }
            })
            .collect()
    }

    #[test]
    fn a_block_reads_back_what_was_sealed() {
        let samples = hour();
        let bytes = encode(&samples);
        assert_eq!(decode(&bytes).unwrap(), samples);
        // Far below the ~380 B a row takes.
        assert!(bytes.len() < samples.len() * 40, "{} B for {} samples", bytes.len(), samples.len());
    }

    #[test]
    fn absent_stays_absent_never_zero() {
        let samples = vec![
            Sample { ts_ms: 1, gpu_util_pct: Some(0.0), processes: Some(Vec::new()), ..Sample::default() },
            Sample { ts_ms: 2, ..Sample::default() },
            Sample { ts_ms: 3, gpu_util_pct: Some(0.0), mem_used_bytes: Some(0), ..Sample::default() },
        ];
        let back = decode(&encode(&samples)).unwrap();
        assert_eq!(back, samples);
        assert_eq!(back[1].gpu_util_pct, None);
        assert_eq!(back[0].processes, Some(Vec::new()), "an empty list read is not an unread list");
        assert_eq!(back[1].processes, None);
        assert_eq!(back[2].mem_used_bytes, Some(0));
    }

    #[test]
    fn values_are_kept_at_the_documented_precision() {
        let s = Sample {
            ts_ms: 5,
            gpu_util_pct: Some(33.333_333),
            power_w: Some(250.123_456),
            energy_j: Some(123_456_789.000_4),
            temp_c: Some(40.004),
            pcie_tx_mib_s: Some(0.000_4),
            ..Sample::default()
        };
        let back = &decode(&encode(std::slice::from_ref(&s))).unwrap()[0];
        assert_eq!(back.gpu_util_pct, Some(33.33));
        assert_eq!(back.power_w, Some(250.123));
        assert_eq!(back.energy_j, Some(123_456_789.0));
        assert_eq!(back.temp_c, Some(40.0));
        assert_eq!(back.pcie_tx_mib_s, Some(0.0));
        // Values at the precision come back as the same f64 as their decimal text.
        let exact = Sample { ts_ms: 6, gpu_util_pct: Some(0.07), power_w: Some(0.3), ..Sample::default() };
        assert_eq!(decode(&encode(std::slice::from_ref(&exact))).unwrap()[0], exact);
    }

    #[test]
    fn integer_signals_keep_every_bit() {
        // A bitmask with bit 63 set and bytes past 2^53: both pass through no f64.
        let s = Sample {
            ts_ms: 1,
            throttle_reasons: Some(u64::MAX),
            mem_used_bytes: Some((1 << 60) + 1),
            ..Sample::default()
        };
        let t =
            Sample { ts_ms: 2, throttle_reasons: Some(1 << 63), mem_used_bytes: Some(i64::MAX), ..Sample::default() };
        let back = decode(&encode(&[s.clone(), t.clone()])).unwrap();
        assert_eq!(back, vec![s, t]);
    }

    #[test]
    fn a_value_beyond_the_integer_range_is_kept_as_measured() {
        let s = Sample { ts_ms: 1, energy_j: Some(1.0e300), pcie_rx_mib_s: Some(-7.5e250), ..Sample::default() };
        let t = Sample { ts_ms: 2, energy_j: Some(2.5), ..Sample::default() };
        assert_eq!(decode(&encode(&[s.clone(), t.clone()])).unwrap(), vec![s, t]);
    }

    /// A signal added after a block was sealed reads as absent from it, in both the version-1
    /// layout (no column count: the 23 columns before `tensor_hmma_active_pct`) and a version-2
    /// block of fewer columns than this server knows.
    #[test]
    fn blocks_sealed_before_a_column_existed_decode_it_as_absent() {
        let samples: Vec<Sample> = hour()
            .into_iter()
            .enumerate()
            .map(|(i, s)| Sample { tensor_hmma_active_pct: (i % 3 != 0).then_some(41.5), ..s })
            .collect();
        let without: Vec<Sample> =
            samples.iter().map(|s| Sample { tensor_hmma_active_pct: None, ..s.clone() }).collect();
        assert_eq!(decode(&encode_as(&samples, 1, VERSION_1_COLUMNS)).unwrap(), without);
        assert_eq!(decode(&encode_as(&samples, 2, VERSION_1_COLUMNS)).unwrap(), without);
        // The current layout keeps it.
        let back = decode(&encode(&samples)).unwrap();
        assert_eq!(back, samples);
        assert_eq!(back[1].tensor_hmma_active_pct, Some(41.5));
        assert_eq!(back[0].tensor_hmma_active_pct, None);
        // A block of more columns than this server knows (a newer server's) is refused, not
        // misread.
        let mut wider = encode(&samples[..5]);
        wider[9..11].copy_from_slice(&(SAMPLE_COLUMNS.len() as u16 + 1).to_le_bytes());
        assert!(matches!(decode(&wider), Err(BlockError::Malformed(_))));
    }

    #[test]
    fn corrupt_or_newer_blocks_are_refused() {
        let bytes = encode(&hour()[..10]);
        assert!(matches!(decode(&bytes[..bytes.len() - 3]), Err(BlockError::Malformed(_) | BlockError::Codec(_))));
        let mut newer = bytes.clone();
        newer[4] = FORMAT_VERSION + 1;
        assert!(matches!(decode(&newer), Err(BlockError::Version(_))));
        assert!(decode(b"nope").is_err());
        let mut trailing = bytes;
        trailing.push(0);
        assert!(decode(&trailing).is_err());
    }

    /// `hour()` with each process's memory and SM share moving every second, as a training
    /// job's allocator moves them: every sample's list is then a new text.
    fn moving_hour() -> Vec<Sample> {
        let mut samples = hour();
        for (i, s) in samples.iter_mut().enumerate() {
            for p in s.processes.iter_mut().flatten() {
                p.used_bytes = p.used_bytes.map(|u| u + (i as i64 % 97) * 1_048_576);
                p.sm_pct = Some((i % 100) as f64);
            }
        }
        samples
    }

    /// Where the process section of a block of `n` samples starts (version 3: its layout
    /// byte).
    fn processes_at(bytes: &[u8], n: usize) -> usize {
        let mut r = Reader(bytes);
        r.take(11).unwrap();
        for _ in 0..=SAMPLE_COLUMNS.len() {
            r.numbers(n).unwrap();
        }
        bytes.len() - r.0.len()
    }

    /// Blocks sealed in version 2 (a JSON list of processes per sample) still read back, and
    /// version 3 keeps the same lists in whichever layout is smaller (a dictionary of lists
    /// where they repeat, columns where memory moves): missing readings, owners, several
    /// processes of one identity, an empty list and an unread one.
    #[test]
    fn process_lists_read_back_from_every_layout() {
        let owner = fleetlens_core::ProcessOwner { user: Some("alice".into()), ..Default::default() };
        for (mut samples, layout) in [(hour(), PROCESS_LISTS), (moving_hour(), PROCESS_COLUMNS)] {
            samples[3].processes = None;
            samples[4].processes = Some(Vec::new());
            samples[5].processes = Some(vec![
                GpuProcess { pid: 7, sm_pct: Some(12.5), owner: Some(owner.clone()), ..proc(7, 9) },
                GpuProcess { used_bytes: None, ..proc(7, 0) },
                proc(8, i64::MAX),
            ]);
            let version_2 = encode_as(&samples, 2, SAMPLE_COLUMNS.len());
            assert_eq!(decode(&version_2).unwrap(), samples);
            let version_3 = encode(&samples);
            assert_eq!(version_3[4], 3);
            assert_eq!(version_3[processes_at(&version_3, samples.len())], layout);
            assert_eq!(decode(&version_3).unwrap(), samples);
            assert!(version_3.len() <= version_2.len() + 1, "{} B, {} B as lists", version_3.len(), version_2.len());
            if layout == PROCESS_COLUMNS {
                assert!(version_3.len() * 2 < version_2.len(), "{} B, {} B as lists", version_3.len(), version_2.len());
            }
        }
    }

    /// A process count that does not match the process columns, or one no block can hold, is a
    /// malformed block, not a panic or a huge allocation.
    #[test]
    fn corrupt_process_counts_are_refused() {
        let samples = moving_hour();
        let mut lying = samples.clone();
        lying[0].processes.as_mut().unwrap().push(proc(99, 1));
        // The counts column of the lying block over the process columns of the true one.
        let (truth, lie) = (encode(&samples), encode(&lying));
        let counts_at = |bytes: &[u8]| {
            let at = processes_at(bytes, samples.len());
            assert_eq!(bytes[at], PROCESS_COLUMNS);
            let mut r = Reader(&bytes[at + 1..]);
            r.numbers(samples.len()).unwrap();
            (at + 1, bytes.len() - r.0.len())
        };
        let ((t0, t1), (l0, l1)) = (counts_at(&truth), counts_at(&lie));
        let spliced = [&truth[..t0], &lie[l0..l1], &truth[t1..]].concat();
        assert!(matches!(decode(&spliced), Err(BlockError::Malformed(_) | BlockError::Codec(_))));
        // One sample's empty list: its count stored as a constant, made 2^40.
        let mut bytes = encode(&[Sample { ts_ms: 1, processes: Some(Vec::new()), ..Sample::default() }]);
        let at = processes_at(&bytes, 1);
        assert_eq!(&bytes[at..at + 2], [PROCESS_COLUMNS, CONSTANT]);
        bytes[at + 2..at + 10].copy_from_slice(&(1i64 << 40).to_le_bytes());
        assert!(matches!(decode(&bytes), Err(BlockError::Malformed(_))));
        // An unknown layout.
        bytes[at] = 7;
        assert!(matches!(decode(&bytes), Err(BlockError::Malformed(_))));
    }

    /// Sealed blocks already hold these precisions: the signal table must not change them.
    #[test]
    fn stored_precisions_of_existing_columns_do_not_change() {
        use Precision::{Exact, Scaled};
        let sealed: [Precision; 24] = [
            Scaled(100),  // gpu_util_pct: 0.01 percentage points
            Scaled(100),  // mem_util_pct
            Exact,        // mem_used_bytes
            Exact,        // mem_total_bytes
            Scaled(1000), // power_w: 1 mW
            Scaled(1000), // power_limit_w
            Scaled(1000), // energy_j: 1 mJ
            Scaled(100),  // temp_c: 0.01 °C
            Scaled(10),   // sm_clock_mhz: 0.1 MHz
            Exact,        // throttle_reasons
            Scaled(100),  // sm_active_pct
            Scaled(100),  // gr_engine_active_pct
            Scaled(100),  // sm_occupancy_pct
            Scaled(100),  // tensor_active_pct
            Scaled(100),  // dram_active_pct
            Scaled(100),  // fp16_active_pct
            Scaled(100),  // fp32_active_pct
            Scaled(100),  // fp64_active_pct
            Scaled(100),  // int_active_pct
            Scaled(1000), // pcie_tx_mib_s: 0.001 MiB/s
            Scaled(1000), // pcie_rx_mib_s
            Scaled(1000), // nvlink_tx_mib_s
            Scaled(1000), // nvlink_rx_mib_s
            Scaled(100),  // tensor_hmma_active_pct (migration 0024, format version 2)
        ];
        assert_eq!(PRECISION, sealed);
    }
}
