//! Raw samples at rest in sealed column blocks (issue 21).
//!
//! New samples land as *open* data: rows of `samples` (one per GPU and timestamp; on
//! PostgreSQL a batch that meets nothing stored is one row of `sample_batches` per GPU and minute
//! instead, `crate::pg_batches`). Once an hour of a GPU has closed and no sample
//! for it is expected any more (its end is [`SEAL_LATENESS_MS`] in the past), the sealing job
//! ([`crate::Store::seal_closed_hours`], run by the leader of the `sealing` job) moves its rows
//! into one row of `sample_blocks`: the samples of that GPU-hour encoded column by column
//! ([`format`]), about 15-20 B a sample instead of ~400. Deleting the rows and writing the block
//! happen in one transaction, so a crash at any point leaves either the rows or the block.
//!
//! A batch with a sample for an hour already sealed (a spool drained late) first turns that
//! hour's block back into open rows, in the ingest transaction: the rows then hold the whole
//! hour, so a resent sample stays a duplicate, a partial one fills in (merge-on-insert), and the
//! rollup job, which writes a minute from its raw rows, sees all of the minute. The hour is
//! sealed again once its minutes are written: sealing leaves alone the hours of a GPU from its
//! oldest minute still marked for the rollup job on. Should a key still be in both (a resend
//! racing the seal of its hour on PostgreSQL), reads keep the block's sample.
//!
//! Every read of raw samples merges both: [`merge`].

pub(crate) mod format;
pub(crate) mod hourly;
pub(crate) mod minutes;
pub(crate) mod pg;
pub(crate) mod sqlite;

/// `seal` (every closed GPU-hour of open rows, at most `max_blocks` of them) and its
/// `seal_one`, and `pack` / `pack_one` (the same for the hours' minute rollups), for one
/// database (see [`crate::dialect`]). The invoking module provides `q`,
/// `OLDEST_OPEN_SQL` (each GPU's oldest open sample before the bound horizon: `(gpu_id, ts)`),
/// `NEXT_OPEN_SQL` (binds: a GPU, a time; the GPU's oldest open sample from that time on),
/// `TAKE_OPEN_SQL` (binds: a GPU, an hour's start and end; deletes the GPU's open samples of
/// the hour and returns them as `SampleRow`s),
/// `OLDEST_MINUTE_SQL` (the same for the rows of `rollups_1m`),
/// `BLOCK_LOCK` (the row lock of the block read back) and `async fn before_day(&Pool, day)`
/// (called before the first block of each day of a pass).
macro_rules! impl_seal {
    ($pool:ty, $dialect:ident) => {
        /// [`super::gpu_horizon`] of one GPU, its oldest minute waiting for the rollup job read.
        async fn gpu_horizon_of(pool: &$pool, gpu_id: fleetlens_core::GpuId, horizon: i64) -> Result<i64> {
            let pending: Option<i64> =
                sqlx::query_scalar(&q("SELECT min(minute_ms) FROM rollup_pending WHERE gpu_id = ?"))
                    .bind(gpu_id)
                    .fetch_one(pool)
                    .await?;
            Ok(super::gpu_horizon(horizon, pending))
        }

        /// Seal every closed GPU-hour of open rows, at most `max_blocks` of them.
        pub(crate) async fn seal(pool: &$pool, now_ms: i64, max_blocks: u64) -> Result<super::SealReport> {
            let horizon = super::horizon(now_ms);
            let oldest: Vec<(fleetlens_core::GpuId, i64)> =
                sqlx::query_as(&q(OLDEST_OPEN_SQL)).bind(horizon).fetch_all(pool).await?;
            let mut report = super::SealReport::default();
            let mut days: std::collections::HashSet<i64> = Default::default();
            for (gpu_id, oldest) in oldest {
                let horizon = gpu_horizon_of(pool, gpu_id, horizon).await?;
                let mut next = Some(oldest);
                while let Some(ts) = next.filter(|&t| t < horizon) {
                    if report.blocks >= max_blocks {
                        report.more = true;
                        return Ok(report);
                    }
                    let start = super::span_start(ts);
                    let day = start.div_euclid(crate::DAY_MS);
                    if days.insert(day) {
                        before_day(pool, day).await?;
                    }
                    report.samples += seal_one(pool, gpu_id, start).await?;
                    report.blocks += 1;
                    next = sqlx::query_scalar(&q(NEXT_OPEN_SQL))
                        .bind(gpu_id)
                        .bind(start + SPAN_MS)
                        .fetch_one(pool)
                        .await?;
                }
            }
            Ok(report)
        }

        /// Move the open rows of one GPU-hour into its block, in one transaction: the rows
        /// deleted are exactly those written into the block (`DELETE … RETURNING`; rows
        /// committed meanwhile stay open), merged with the block sealed before, if any.
        /// Returns the rows moved.
        async fn seal_one(pool: &$pool, gpu_id: fleetlens_core::GpuId, start: i64) -> Result<u64> {
            let mut tx = pool.begin().await?;
            let rows: Vec<crate::columns::SampleRow> = sqlx::query_as(&q(TAKE_OPEN_SQL))
                .bind(gpu_id)
                .bind(start)
                .bind(start + SPAN_MS)
                .fetch_all(&mut *tx)
                .await?;
            let moved = rows.len() as u64;
            let mut open: Vec<Sample> =
                rows.into_iter().map(|r| r.values.into_sample(r.ts_ms, "", None, None)).collect();
            open.sort_by_key(|s| s.ts_ms);
            let sql = format!("SELECT payload FROM sample_blocks WHERE gpu_id = ? AND start_ms = ?{BLOCK_LOCK}");
            let sealed: Option<Vec<u8>> =
                sqlx::query_scalar(&q(&sql)).bind(gpu_id).bind(start).fetch_optional(&mut *tx).await?;
            let sealed = match sealed {
                Some(p) => format::decode(&p)?,
                None => Vec::new(),
            };
            let samples = super::merge(sealed, open);
            sqlx::query(&q("INSERT INTO sample_blocks (gpu_id, start_ms, end_ms, n, payload) VALUES (?, ?, ?, ?, ?) \
                 ON CONFLICT (gpu_id, start_ms) DO UPDATE SET end_ms = excluded.end_ms, n = excluded.n, \
                 payload = excluded.payload"))
            .bind(gpu_id)
            .bind(start)
            .bind(start + SPAN_MS)
            .bind(i32::try_from(samples.len()).unwrap_or(i32::MAX))
            .bind(format::encode(&samples))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(moved)
        }

        /// Pack every closed GPU-hour of `rollups_1m` rows into its block of minutes, at most
        /// `max_blocks` of them; the same hours as sealing: closed for
        /// [`SEAL_LATENESS_MS`](super::SEAL_LATENESS_MS), with no minute of them or before
        /// waiting for the rollup job. Returns the blocks written and whether some are left.
        pub(crate) async fn pack(pool: &$pool, now_ms: i64, max_blocks: u64) -> Result<(u64, bool)> {
            let horizon = super::horizon(now_ms);
            let oldest: Vec<(fleetlens_core::GpuId, i64)> =
                sqlx::query_as(&q(OLDEST_MINUTE_SQL)).bind(horizon).fetch_all(pool).await?;
            let mut packed = 0;
            for (gpu_id, oldest) in oldest {
                let horizon = gpu_horizon_of(pool, gpu_id, horizon).await?;
                let mut next = Some(oldest);
                while let Some(ts) = next.filter(|&t| t < horizon) {
                    if packed >= max_blocks {
                        return Ok((packed, true));
                    }
                    let start = super::span_start(ts);
                    if !pack_one(pool, gpu_id, start).await? {
                        // A minute of the hour was marked meanwhile: the job writes it first.
                        break;
                    }
                    packed += 1;
                    next = sqlx::query_scalar(&q(
                        "SELECT min(bucket_ms) FROM rollups_1m WHERE gpu_id = ? AND bucket_ms >= ?",
                    ))
                    .bind(gpu_id)
                    .bind(start + SPAN_MS)
                    .fetch_one(pool)
                    .await?;
                }
            }
            Ok((packed, false))
        }

        /// Move the minute rows of one GPU-hour into its block of minutes, in one
        /// transaction, merged with the block packed before (a row wins: it is newer). Under
        /// the GPU's pack lock (taken by the rollup job too before it unpacks an hour), and
        /// only while no minute of the hour or before waits for the job: returns false, and
        /// changes nothing, otherwise.
        async fn pack_one(pool: &$pool, gpu_id: fleetlens_core::GpuId, start: i64) -> Result<bool> {
            let mut tx = pool.begin().await?;
            let sql = format!(
                "DELETE FROM rollups_1m WHERE gpu_id = ? AND bucket_ms >= ? AND bucket_ms < ? RETURNING {}",
                crate::columns::minute_returning()
            );
            if let Some(lock) = crate::dialect::$dialect::PACK_LOCK {
                sqlx::query(&q(lock)).bind(gpu_id).execute(&mut *tx).await?;
            }
            let rows = sqlx::query(&q(&sql)).bind(gpu_id).bind(start).bind(start + SPAN_MS).fetch_all(&mut *tx).await?;
            let pending: Option<i64> =
                sqlx::query_scalar(&q("SELECT min(minute_ms) FROM rollup_pending WHERE gpu_id = ? AND minute_ms < ?"))
                    .bind(gpu_id)
                    .bind(start + SPAN_MS)
                    .fetch_one(&mut *tx)
                    .await?;
            if pending.is_some() {
                tx.rollback().await?;
                return Ok(false);
            }
            let mut rows: Vec<minutes::StoredMinute> = rows
                .iter()
                .map(crate::columns::stored_minute_from_row)
                .collect::<std::result::Result<_, sqlx::Error>>()?;
            // `DELETE … RETURNING` has no order; a block's minutes are ascending.
            rows.sort_by_key(|m| m.bucket.bucket_ms);
            let sql = format!("SELECT payload FROM rollup_blocks WHERE gpu_id = ? AND start_ms = ?{BLOCK_LOCK}");
            let packed: Option<Vec<u8>> =
                sqlx::query_scalar(&q(&sql)).bind(gpu_id).bind(start).fetch_optional(&mut *tx).await?;
            let packed = match packed {
                Some(p) => minutes::decode(gpu_id, &p)?,
                None => Vec::new(),
            };
            let all = super::rows_over_packed(packed, rows, |m| m.bucket.bucket_ms);
            sqlx::query(&q("INSERT INTO rollup_blocks (gpu_id, start_ms, n, payload) VALUES (?, ?, ?, ?) \
                 ON CONFLICT (gpu_id, start_ms) DO UPDATE SET n = excluded.n, payload = excluded.payload"))
            .bind(gpu_id)
            .bind(start)
            .bind(all.len() as i32)
            .bind(minutes::encode(&all))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(true)
        }

        /// Retention of minute rollups: delete the packed hours wholly older than `cutoff_ms`,
        /// in short statements; returns the minutes they held.
        pub(crate) async fn drop_minutes_before(pool: &$pool, cutoff_ms: i64) -> Result<u64> {
            let mut removed = 0u64;
            loop {
                let ns: Vec<i32> = sqlx::query_scalar(&q("DELETE FROM rollup_blocks WHERE (gpu_id, start_ms) IN \
                     (SELECT gpu_id, start_ms FROM rollup_blocks WHERE start_ms <= ? LIMIT 1000) RETURNING n"))
                .bind(cutoff_ms - SPAN_MS)
                .fetch_all(pool)
                .await?;
                removed += ns.iter().map(|&n| n as u64).sum::<u64>();
                if ns.len() < 1000 {
                    return Ok(removed);
                }
            }
        }
    };
}
use impl_seal;

/// Sealed blocks back to open rows, in an ingest transaction (either database's unseal): each
/// `(gpu_id, start_ms, payload)` of `$blocks` is decoded, its samples written as open rows by
/// `$insert` (which sees them as `$rows: Vec<(i64, &Sample)>`, each with its GPU id), and the
/// block deleted on `$conn` (an expression reborrowing the transaction's connection).
/// Evaluates to the samples unsealed; an error returns from the invoking function. A macro
/// because the connection and the insert of rows are each database's own; the invoking module
/// provides `q`.
macro_rules! unseal_blocks {
    ($conn:expr, $blocks:expr, |$rows:ident| $insert:expr) => {{
        let mut unsealed = 0u64;
        for (gpu_id, start, payload) in $blocks {
            let samples = $crate::blocks::format::decode(&payload)?;
            let $rows: Vec<(i64, &fleetlens_core::Sample)> = samples.iter().map(|s| (gpu_id, s)).collect();
            $insert;
            sqlx::query(&q("DELETE FROM sample_blocks WHERE gpu_id = ? AND start_ms = ?"))
                .bind(gpu_id)
                .bind(start)
                .execute($conn)
                .await?;
            unsealed += samples.len() as u64;
        }
        unsealed
    }};
}
use unseal_blocks;

use fleetlens_core::{GpuId, Sample, SampleTable};

/// The span of one block: an hour of one GPU, `[start_ms, start_ms + SPAN_MS)`, aligned to
/// the hour. An hour at 1 Hz is 3,600 samples: enough for the codec to find the columns'
/// patterns (its fixed costs are a few hundred bytes per block), little enough that a one-hour
/// read decodes one block.
pub const SPAN_MS: i64 = 3_600_000;

/// How long after an hour ends it is sealed. Later samples still land (as open rows, merged
/// by reads and by the next seal), but a seal rewrites a whole block, so an hour should be
/// complete first: agents send every few seconds, and a spool drained after an outage of the
/// server is the only regular source of late samples.
pub const SEAL_LATENESS_MS: i64 = 10 * 60_000;

/// What one sealing pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SealReport {
    /// Blocks written (new ones, and sealed ones rewritten with late samples).
    pub blocks: u64,
    /// Open rows moved into blocks.
    pub samples: u64,
    /// Blocks of minute rollups written (hours whose `rollups_1m` rows were packed).
    pub minute_blocks: u64,
    /// Hour partitions of the open tables dropped once emptied (PostgreSQL: see `hourly`).
    pub partitions_dropped: u64,
    /// The pass stopped at its limit with hours left to seal or pack.
    pub more: bool,
}

/// Hours that end at or before this are sealed at `now_ms`.
pub(crate) fn horizon(now_ms: i64) -> i64 {
    (now_ms - SEAL_LATENESS_MS).div_euclid(SPAN_MS) * SPAN_MS
}

/// Hours of one GPU that end at or before this are sealed: `horizon`, but never an hour from
/// the GPU's oldest minute still waiting for the rollup job (`pending`) on, because the job
/// writes a minute from its raw rows.
pub(crate) fn gpu_horizon(horizon: i64, pending_minute_ms: Option<i64>) -> i64 {
    pending_minute_ms.map_or(horizon, |m| horizon.min(span_start(m)))
}

/// The start of the block holding `ts_ms`.
pub(crate) fn span_start(ts_ms: i64) -> i64 {
    ts_ms.div_euclid(SPAN_MS) * SPAN_MS
}

/// Whether samples from `lo_ms` on may lie in a sealed block, as far as this process's clock
/// tells: a block holds an hour that ended [`SEAL_LATENESS_MS`] before the sealer's clock, so
/// nothing of the current hour is sealed unless that clock runs more than the lateness ahead of
/// ours. Live batches (the current hour) skip the lookup of blocks on the ingest path.
pub(crate) fn may_be_sealed(lo_ms: i64) -> bool {
    lo_ms < span_start(crate::rollup_close::wall_clock_ms())
}

/// Sealed and open samples of one GPU as one list, ascending by time; a timestamp in both
/// keeps the sealed sample (the first stored, as ingest keeps the first).
pub(crate) fn merge(sealed: Vec<Sample>, open: Vec<Sample>) -> Vec<Sample> {
    if open.is_empty() {
        return sealed;
    }
    if sealed.is_empty() {
        return open;
    }
    let mut out = Vec::with_capacity(sealed.len() + open.len());
    let mut open = open.into_iter().peekable();
    for s in sealed {
        while let Some(o) = open.next_if(|o| o.ts_ms <= s.ts_ms) {
            if o.ts_ms < s.ts_ms {
                out.push(o);
            }
        }
        out.push(s);
    }
    out.extend(open);
    out
}

/// Rows read from a rollup table over the same rows decoded from packed hours, as one list
/// ordered by `key`: a key in both keeps the row.
pub(crate) fn rows_over_packed<T, K: Ord + Copy>(
    packed: impl IntoIterator<Item = T>,
    rows: Vec<T>,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    let mut by_key: std::collections::BTreeMap<K, T> = packed.into_iter().map(|t| (key(&t), t)).collect();
    if by_key.is_empty() {
        return rows;
    }
    by_key.extend(rows.into_iter().map(|t| (key(&t), t)));
    by_key.into_values().collect()
}

/// Blocks `(gpu_id, payload)` in GPU order decoded to their samples in `[from_ms, to_ms)`,
/// one list per GPU.
pub(crate) fn decode_per_gpu(
    blocks: Vec<(GpuId, Vec<u8>)>,
    from_ms: i64,
    to_ms: i64,
) -> crate::Result<Vec<(GpuId, Vec<Sample>)>> {
    let mut out: Vec<(GpuId, Vec<Sample>)> = Vec::new();
    for (gpu_id, payload) in blocks {
        let decoded = decode_range(std::slice::from_ref(&payload), from_ms, to_ms)?;
        match out.last_mut() {
            Some((g, list)) if *g == gpu_id => list.extend(decoded),
            _ => out.push((gpu_id, decoded)),
        }
    }
    Ok(out)
}

/// Decode `payloads` (blocks of one GPU in time order) and keep the samples in
/// `[from_ms, to_ms)`.
pub(crate) fn decode_range(payloads: &[Vec<u8>], from_ms: i64, to_ms: i64) -> crate::Result<Vec<Sample>> {
    let mut out: Vec<Sample> = Vec::new();
    for payload in payloads {
        // Filtered where it was decoded, and the first block's list kept as the answer: a
        // sample is large, and copying an hour of them into a growing list cost a fifth of
        // the time of a sealed hour's read.
        let mut decoded = format::decode(payload)?;
        decoded.retain(|s| s.ts_ms >= from_ms && s.ts_ms < to_ms);
        if out.is_empty() {
            out = decoded;
        } else {
            out.append(&mut decoded);
        }
    }
    Ok(out)
}

/// One GPU's raw samples in a range as stored, before they are decoded and merged: its
/// identity, its open rows (with the identity) and the payloads of its sealed blocks.
pub(crate) struct StoredSamples {
    pub uuid: String,
    pub index: Option<u32>,
    pub name: Option<String>,
    pub open: Vec<Sample>,
    pub payloads: Vec<Vec<u8>>,
}

/// [`decode_range`] into columns: the blocks' samples in `[from_ms, to_ms)` as one table.
pub(crate) fn decode_table_range(payloads: &[Vec<u8>], from_ms: i64, to_ms: i64) -> crate::Result<SampleTable> {
    let mut table = SampleTable::default();
    for payload in payloads {
        let mut decoded = format::decode_table(payload)?;
        decoded.keep_time(from_ms, to_ms);
        if table.is_empty() {
            table = decoded;
        } else {
            table.append(decoded);
        }
    }
    Ok(table)
}

/// The open samples of [`merge`] added to the sealed ones in `table`. Open rows newer than
/// every sealed sample (the current hour after sealed ones, the usual case) are appended; rows
/// among sealed samples (a late sample's hour not sealed again yet) take the way through
/// [`Sample`]s and [`merge`].
pub(crate) fn merge_into_table(table: &mut SampleTable, open: Vec<Sample>) {
    let Some(first_open) = open.first() else { return };
    match table.ts_ms.last() {
        Some(&last_sealed) if first_open.ts_ms <= last_sealed => {
            let sealed = std::mem::take(table).into_samples();
            *table = SampleTable::from_samples(&merge(sealed, open));
        }
        _ => open.iter().for_each(|s| table.push(s)),
    }
}

/// A process-list group of [`crate::RollupStore::process_lists`] as the SQL returns it: GPU,
/// minute, processes JSON, allocations JSON, samples.
pub(crate) type ProcessGroup = (GpuId, i64, Option<String>, Option<String>, i64);

/// Add the groups of sealed samples (`(gpu_id, samples)`) to the groups of the open rows:
/// one group per GPU, minute and distinct lists, ordered by GPU and minute.
pub(crate) fn add_sealed_process_groups(
    open: Vec<ProcessGroup>,
    sealed: Vec<(GpuId, Vec<Sample>)>,
) -> Vec<ProcessGroup> {
    if sealed.is_empty() {
        return open;
    }
    type Key = (GpuId, i64, Option<String>, Option<String>);
    let mut groups: std::collections::BTreeMap<Key, i64> = std::collections::BTreeMap::new();
    for (gpu, minute, p, a, n) in open {
        *groups.entry((gpu, minute, p, a)).or_default() += n;
    }
    for (gpu, samples) in sealed {
        for s in samples {
            let minute = s.ts_ms.div_euclid(60_000) * 60_000;
            let key = (gpu, minute, crate::columns::processes_json(&s), crate::columns::allocations_json(&s));
            *groups.entry(key).or_default() += 1;
        }
    }
    groups.into_iter().map(|((gpu, minute, p, a), n)| (gpu, minute, p, a, n)).collect()
}

/// Give a sealed sample the identity of its GPU (blocks do not store it).
pub(crate) fn with_identity(mut s: Sample, uuid: &str, gpu_index: Option<u32>, name: Option<&str>) -> Sample {
    s.uuid = uuid.to_string();
    s.gpu_index = gpu_index;
    s.name = name.map(str::to_string);
    s
}

/// GPUs of `records` whose newest sample is not an open row (its hour was sealed): their ids.
pub(crate) fn missing_latest(records: &[crate::GpuRecord]) -> Vec<GpuId> {
    records.iter().filter(|r| r.latest.is_none() && r.info.last_seen_ms > 0).map(|r| r.id).collect()
}

/// Fill the newest sample of `records` from the blocks holding each GPU's `last_seen_ms`
/// (`(gpu_id, payload)`).
pub(crate) fn fill_latest(records: &mut [crate::GpuRecord], blocks: Vec<(GpuId, Vec<u8>)>) -> crate::Result<()> {
    for (gpu_id, payload) in blocks {
        let Some(r) = records.iter_mut().find(|r| r.id == gpu_id && r.latest.is_none()) else { continue };
        let found = format::decode(&payload)?.into_iter().find(|s| s.ts_ms == r.info.last_seen_ms);
        r.latest = found.map(|s| with_identity(s, &r.info.uuid, r.info.gpu_index, r.info.name.as_deref()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ts: i64, util: f64) -> Sample {
        Sample { ts_ms: ts, gpu_util_pct: Some(util), ..Sample::default() }
    }

    #[test]
    fn merge_interleaves_and_the_sealed_sample_wins() {
        let merged = merge(vec![s(2, 1.0), s(4, 1.0), s(6, 1.0)], vec![s(1, 2.0), s(4, 2.0), s(5, 2.0), s(9, 2.0)]);
        let got: Vec<(i64, f64)> = merged.iter().map(|s| (s.ts_ms, s.gpu_util_pct.unwrap())).collect();
        assert_eq!(got, [(1, 2.0), (2, 1.0), (4, 1.0), (5, 2.0), (6, 1.0), (9, 2.0)]);
    }

    #[test]
    fn the_horizon_lags_the_lateness_and_is_hour_aligned() {
        let h = SPAN_MS;
        assert_eq!(horizon(10 * h + SEAL_LATENESS_MS), 10 * h);
        assert_eq!(horizon(10 * h + SEAL_LATENESS_MS - 1), 9 * h);
        assert_eq!(span_start(10 * h + 5), 10 * h);
    }

    #[test]
    fn hours_with_minutes_waiting_for_the_rollup_job_stay_open() {
        let h = SPAN_MS;
        assert_eq!(gpu_horizon(10 * h, None), 10 * h);
        assert_eq!(gpu_horizon(10 * h, Some(7 * h + 5 * 60_000)), 7 * h, "the pending minute's hour is not sealed");
        assert_eq!(gpu_horizon(10 * h, Some(12 * h)), 10 * h);
    }
}
