//! Rollups written once (issue 21, part 3). Ingest stores the raw samples and marks each
//! (GPU, minute) it added samples to in `rollup_pending`; it no longer merges every batch into
//! the minute, hour and day rows (on PostgreSQL each merge left a dead version of a wide row:
//! 1.4–6.7 KB per minute row). The rollup job ([`close_minutes`], leader-elected, run by the
//! server every few seconds) takes the minutes that closed more than the lateness bound ago,
//! rolls each up from its raw samples (`fleetlens_core::minute_from_samples`), credits it, writes
//! its `rollups_1m` row once, sums its hour and day again from their minutes and hours, and
//! removes the marks, all in one transaction: a crash before the commit leaves the marks (the
//! next run does the minutes again), after it leaves nothing to redo, so no minute is counted
//! twice or lost.
//!
//! A sample that arrives after its minute closed marks the minute again (and the next minute,
//! whose first sample's sampled time may continue from it): the next run rolls it up again from
//! all its raw samples. So a late sample is never dropped, whatever its lateness, as long as its
//! raw rows are kept; the lateness bound only decides how long a minute waits before it is
//! written, i.e. how often a minute is written twice.
//!
//! Reads stay current: every read of rollups or credits adds the marked (open) minutes, computed
//! from their raw samples the same way ([`load_open`], `overlay_*` below), in place of what is
//! stored for them.

use std::collections::{BTreeMap, HashMap};

use fleetlens_core::{Credit, GpuId, QualityFlags, Resolution, RollupBucket, Sample, Thresholds, WorkloadState};

use crate::credits::MinuteClassifier;
use crate::{BucketCredit, HourCreditSplit, LatestMinute, OrgId, SeriesRow};

/// How long after its end a minute waits before the job writes it, by default: samples of a
/// minute that arrive within this bound of its end are in its one write. Agents send every few
/// seconds and spool on failure; two minutes covers a batch that was retried once.
pub const DEFAULT_LATENESS_MS: i64 = 120_000;

/// The least lateness bound the job may be given (`--rollup-lateness`).
pub const MIN_LATENESS_MS: i64 = 60_000;

/// Ingest marks a minute with `ON CONFLICT DO NOTHING` (no row lock, no new row version) while
/// it is this far from being closed by any replica's job (whose lateness is at least
/// [`MIN_LATENESS_MS`]); closer than that, with a row lock that waits for a running job, so
/// that the job cannot remove a mark set after it read the samples (PostgreSQL). Covers clock
/// differences between replicas of up to this much: so the current minute, and the previous
/// one for its first 30 s, are marked without a lock.
const CLOSE_MARGIN_MS: i64 = 30_000;

const MINUTE_MS: i64 = 60_000;
/// GPUs per transaction of the job: each holds SQLite's write lock (ingest waits), and on
/// PostgreSQL the row locks of its marks (a batch marking one of those minutes again waits),
/// for the reads and writes of this many GPUs' closed minutes.
pub(crate) const GPUS_PER_CLOSE: usize = 200;
/// GPU-minutes per transaction of the job, at most (unless one GPU alone has more): in steady
/// state a GPU has one or two closed minutes per run and [`GPUS_PER_CLOSE`] bounds the
/// transaction, but after a backlog (an outage, a back-fill: every minute of it closed at once)
/// 200 GPUs can hold hundreds of thousands of samples, and ingest waited seconds on one
/// transaction (PostgreSQL p99 4 s, SQLite 6.8 s in the ingest benchmark, whose samples are an
/// hour old).
pub(crate) const MINUTES_PER_CLOSE: i64 = 1_000;

const HOUR_MS: i64 = 3_600_000;

/// The job's transactions over `marked` (GPU id, its closed marked minutes; sorted by id): runs
/// of consecutive GPUs as (first id, last id), each of at most [`GPUS_PER_CLOSE`] GPUs and
/// [`MINUTES_PER_CLOSE`] minutes, or one GPU when that GPU alone has more.
pub(crate) fn close_chunks_of(marked: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut chunks = Vec::new();
    let mut current: Option<(i64, i64, usize, i64)> = None; // first, last, GPUs, minutes
    for &(gpu_id, minutes) in marked {
        current = match current {
            Some((first, _, gpus, total)) if gpus < GPUS_PER_CLOSE && total + minutes <= MINUTES_PER_CLOSE => {
                Some((first, gpu_id, gpus + 1, total + minutes))
            }
            done => {
                chunks.extend(done.map(|(first, last, _, _)| (first, last)));
                Some((gpu_id, gpu_id, 1, minutes))
            }
        };
    }
    chunks.extend(current.map(|(first, last, _, _)| (first, last)));
    chunks
}

/// Which marked minutes to load.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PendingScope<'a> {
    /// Every minute that started before `cutoff_ms` (the job's cutoff), of the GPUs with ids in
    /// `[gpu_lo, gpu_hi]` (the job works through the fleet in chunks of GPUs).
    ClosedBefore { cutoff_ms: i64, gpu_lo: i64, gpu_hi: i64 },
    /// An organisation's minutes starting in `[from, to)`: of every GPU (`gpus` `None`) or of
    /// the GPUs listed.
    Org { org: OrgId, gpus: Option<&'a [GpuId]>, from_ms: i64, to_ms: i64 },
    /// The minute of each GPU's newest sample, for an organisation: of every GPU (`gpus`
    /// `None`) or of the GPUs listed.
    Latest { org: OrgId, gpus: Option<&'a [GpuId]> },
}

/// The newest minute of a GPU `g`, from its newest sample (the bucket start of `last_seen_ms`).
const LATEST_MINUTE_OF_G: &str = "g.last_seen_ms - ((g.last_seen_ms % 60000) + 60000) % 60000";

/// `?, ?, …`: `n` placeholders.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// `" AND {column} IN (?, …)"` with a placeholder per id of `gpus`, or nothing for `None` (every
/// GPU): the caller binds the ids after its other parameters.
pub(crate) fn only_gpus(column: &str, gpus: Option<&[fleetlens_core::GpuId]>) -> String {
    gpus.map_or(String::new(), |ids| format!(" AND {column} IN ({})", placeholders(ids.len())))
}

/// Binding the values of [`only_gpus`]'s placeholders: the ids of `gpus` in order (none for
/// `None`), after the statement's other parameters.
pub(crate) trait BindGpus: Sized {
    fn bind_gpus(self, gpus: Option<&[fleetlens_core::GpuId]>) -> Self;
}

impl<'q, DB: sqlx::Database> BindGpus for sqlx::query::Query<'q, DB, DB::Arguments<'q>>
where
    fleetlens_core::GpuId: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    fn bind_gpus(self, gpus: Option<&[fleetlens_core::GpuId]>) -> Self {
        gpus.unwrap_or_default().iter().fold(self, |q, id| q.bind(*id))
    }
}

impl<'q, DB: sqlx::Database, O> BindGpus for sqlx::query::QueryAs<'q, DB, O, DB::Arguments<'q>>
where
    fleetlens_core::GpuId: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    fn bind_gpus(self, gpus: Option<&[fleetlens_core::GpuId]>) -> Self {
        gpus.unwrap_or_default().iter().fold(self, |q, id| q.bind(*id))
    }
}

/// The stored newest minutes of an organisation's GPUs, as [`crate::LatestMinute`] rows: all of
/// them (`gpus: None`), or those of `g.id IN (…)` (`Some(n)`). `?` placeholders: the
/// organisation, then the `n` GPU ids.
pub(crate) fn stored_latest_sql(gpus: Option<usize>) -> String {
    let only = gpus.map_or(String::new(), |n| format!(" AND g.id IN ({})", placeholders(n)));
    format!(
        "SELECT r.gpu_id, r.bucket_ms, r.state, r.sample_count, r.first_ts_ms, r.last_ts_ms \
         FROM gpus g JOIN rollups_1m r ON r.gpu_id = g.id AND r.bucket_ms = {LATEST_MINUTE_OF_G} \
         WHERE g.org_id = ?{only}"
    )
}

/// GPU ids per read of [`PendingScope::Latest`] with a list (bounds the binds of one statement).
pub(crate) const GPUS_PER_LATEST_READ: usize = 1000;

impl PendingScope<'_> {
    /// A condition on `p` (rollup_pending) and `g` (gpus) with `?` placeholders, and its binds.
    pub(crate) fn condition(self) -> (String, Vec<i64>) {
        match self {
            PendingScope::ClosedBefore { cutoff_ms, gpu_lo, gpu_hi } => {
                ("p.minute_ms < ? AND p.gpu_id >= ? AND p.gpu_id <= ?".into(), vec![cutoff_ms, gpu_lo, gpu_hi])
            }
            PendingScope::Org { org, gpus, from_ms, to_ms } => (
                format!("g.org_id = ? AND p.minute_ms >= ? AND p.minute_ms < ?{}", only_gpus("p.gpu_id", gpus)),
                [org.get(), from_ms, to_ms]
                    .into_iter()
                    .chain(gpus.unwrap_or_default().iter().map(|id| id.get()))
                    .collect(),
            ),
            PendingScope::Latest { org, gpus } => (
                format!("g.org_id = ?{} AND p.minute_ms = {LATEST_MINUTE_OF_G}", only_gpus("p.gpu_id", gpus)),
                std::iter::once(org.get()).chain(gpus.unwrap_or_default().iter().map(|id| id.get())).collect(),
            ),
        }
    }
}

/// Now, as Unix milliseconds (ingest's side of [`mark_needs_lock`]).
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The minutes whose open rollups a read of `res` buckets starting in `[from_ms, to_ms)` needs:
/// `[lo, hi)` of minute starts (an hour holds the minutes that start inside it).
pub(crate) fn minute_range(res: Resolution, from_ms: i64, to_ms: i64) -> (i64, i64) {
    let b = res.bucket_ms();
    let ceil = |t: i64| t.div_euclid(b).saturating_mul(b).saturating_add(if t.rem_euclid(b) == 0 { 0 } else { b });
    (ceil(from_ms), ceil(to_ms))
}

/// The minutes a batch marks: each minute it added samples to, and the minute after it (the
/// sampled time of that minute's first sample continues from this one's last, so a late sample
/// can change it; for the current minute the mark is the next minute's anyway).
pub(crate) fn minutes_to_mark(new_keys: impl IntoIterator<Item = (i64, i64)>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (gpu_id, ts) in new_keys {
        let m = Resolution::Minute.bucket_start(ts);
        out.push((gpu_id, m));
        out.push((gpu_id, m + MINUTE_MS));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// True when a mark of `minute_ms` must wait for a running job (see [`CLOSE_MARGIN_MS`]).
pub(crate) fn mark_needs_lock(minute_ms: i64, now_ms: i64) -> bool {
    minute_ms + MINUTE_MS + MIN_LATENESS_MS <= now_ms + CLOSE_MARGIN_MS
}

/// The job's cutoff: minutes that start before it ended at least `lateness_ms` before `now_ms`.
pub fn close_cutoff(now_ms: i64, lateness_ms: i64) -> i64 {
    now_ms - MINUTE_MS - lateness_ms.max(MIN_LATENESS_MS) + 1
}

/// A marked minute's key and what the classifier needs of its GPU: gpu_id, minute_ms,
/// organisation, power limit, memory size.
pub(crate) type PendingKey = (GpuId, i64, OrgId, Option<f64>, Option<i64>);
/// (gpu_id, bucket start) pairs.
pub(crate) type GpuBuckets = Vec<(GpuId, i64)>;

/// A marked minute's raw material, as loaded.
#[derive(Debug, Default)]
pub(crate) struct RawMinute {
    pub gpu_id: GpuId,
    pub minute_ms: i64,
    pub org: OrgId,
    pub power_limit_w: Option<f64>,
    pub mem_total_bytes: Option<i64>,
    pub samples: Vec<(Sample, QualityFlags)>,
    /// The GPU's stored timestamps just before the minute, ascending.
    pub before: Vec<i64>,
    /// What `rollups_1m` holds for the minute (a minute reopened by a late sample).
    pub stored: Option<(RollupBucket, Credit)>,
}

/// A marked minute rolled up from its raw samples.
#[derive(Debug, Clone)]
pub(crate) struct OpenMinute {
    pub bucket: RollupBucket,
    pub credit: Credit,
    pub state: WorkloadState,
    pub stored: Option<(RollupBucket, Credit)>,
}

impl OpenMinute {
    pub fn gpu_id(&self) -> GpuId {
        self.bucket.gpu_id
    }

    pub fn minute_ms(&self) -> i64 {
        self.bucket.bucket_ms
    }

    /// The credit this minute adds to its hour and day beyond what they hold.
    pub fn credit_delta(&self) -> Credit {
        match &self.stored {
            Some((_, old)) => self.credit.minus(old),
            None => self.credit,
        }
    }
}

/// Roll up and credit loaded minutes.
pub(crate) fn roll_up(raw: Vec<RawMinute>, classifier: &dyn MinuteClassifier) -> Vec<OpenMinute> {
    let missing = Thresholds::default().offline_missing_intervals;
    raw.into_iter()
        .map(|mut m| {
            let bucket = fleetlens_core::minute_from_samples(m.gpu_id, m.minute_ms, &m.before, &mut m.samples, missing);
            let (credit, state) = classifier.credit(m.org, &bucket, m.power_limit_w, m.mem_total_bytes);
            OpenMinute { bucket, credit, state, stored: m.stored }
        })
        .collect()
}

/// Assemble [`RawMinute`]s from the four loads (keys with GPU facts; samples; timestamps
/// before; stored rows), each keyed by (gpu_id, minute_ms).
pub(crate) fn assemble(
    keys: Vec<PendingKey>,
    samples: Vec<((GpuId, i64), Sample, QualityFlags)>,
    before: Vec<((GpuId, i64), i64)>,
    stored: Vec<(RollupBucket, Credit)>,
) -> Vec<RawMinute> {
    let mut by_key: BTreeMap<(GpuId, i64), RawMinute> = keys
        .into_iter()
        .map(|(gpu_id, minute_ms, org, power_limit_w, mem_total_bytes)| {
            (
                (gpu_id, minute_ms),
                RawMinute { gpu_id, minute_ms, org, power_limit_w, mem_total_bytes, ..Default::default() },
            )
        })
        .collect();
    for (key, s, f) in samples {
        if let Some(m) = by_key.get_mut(&key) {
            m.samples.push((s, f));
        }
    }
    for (key, ts) in before {
        if let Some(m) = by_key.get_mut(&key) {
            m.before.push(ts);
        }
    }
    for (b, c) in stored {
        if let Some(m) = by_key.get_mut(&(b.gpu_id, b.bucket_ms)) {
            m.stored = Some((b, c));
        }
    }
    by_key
        .into_values()
        .map(|mut m| {
            m.before.sort_unstable();
            m
        })
        .collect()
}

/// The GPU hours and UTC days whose rows the job must sum again after writing `minutes`.
pub(crate) fn touched_hours_and_days(minutes: &[OpenMinute]) -> (GpuBuckets, GpuBuckets) {
    let mut hours: Vec<(GpuId, i64)> =
        minutes.iter().map(|m| (m.gpu_id(), Resolution::Hour.bucket_start(m.minute_ms()))).collect();
    hours.sort_unstable();
    hours.dedup();
    let mut days: Vec<(GpuId, i64)> =
        hours.iter().map(|&(g, h)| (g, h.div_euclid(crate::DAY_MS) * crate::DAY_MS)).collect();
    days.dedup();
    (hours, days)
}

/// Stored minute rows with the open minutes in place of theirs, ordered by GPU then time.
pub(crate) fn overlay_minutes(stored: Vec<RollupBucket>, open: &[OpenMinute]) -> Vec<RollupBucket> {
    if open.is_empty() {
        return stored;
    }
    let mut rows: BTreeMap<(GpuId, i64), RollupBucket> =
        stored.into_iter().map(|b| ((b.gpu_id, b.bucket_ms), b)).collect();
    for m in open {
        if m.bucket.sample_count > 0 {
            rows.insert((m.gpu_id(), m.minute_ms()), m.bucket.clone());
        } else {
            rows.remove(&(m.gpu_id(), m.minute_ms()));
        }
    }
    rows.into_values().collect()
}

/// Stored rollups of `res` with the open minutes in.
pub(crate) fn overlay_rollups(stored: Vec<RollupBucket>, res: Resolution, open: &[OpenMinute]) -> Vec<RollupBucket> {
    match res {
        Resolution::Minute => overlay_minutes(stored, open),
        Resolution::Hour => overlay_hours(stored, open),
    }
}

/// Stored hour rows with the open minutes in place of what they hold of them.
pub(crate) fn overlay_hours(stored: Vec<RollupBucket>, open: &[OpenMinute]) -> Vec<RollupBucket> {
    if open.is_empty() {
        return stored;
    }
    let mut rows: BTreeMap<(GpuId, i64), RollupBucket> =
        stored.into_iter().map(|b| ((b.gpu_id, b.bucket_ms), b)).collect();
    for m in open {
        let hour = Resolution::Hour.bucket_start(m.minute_ms());
        let row = rows.entry((m.gpu_id(), hour)).or_insert_with(|| RollupBucket {
            gpu_id: m.gpu_id(),
            bucket_ms: hour,
            ..Default::default()
        });
        row.replace_part(m.stored.as_ref().map(|(b, _)| b), &m.bucket);
    }
    rows.into_values().filter(|b| b.sample_count > 0).collect()
}

/// Stored credits (minutes or hours) with the open minutes' credits in place of theirs.
pub(crate) fn overlay_credits(stored: Vec<BucketCredit>, res: Resolution, open: &[OpenMinute]) -> Vec<BucketCredit> {
    if open.is_empty() {
        return stored;
    }
    let mut rows: BTreeMap<(GpuId, i64), BucketCredit> =
        stored.into_iter().map(|c| ((c.gpu_id, c.bucket_ms), c)).collect();
    for m in open {
        let key = (m.gpu_id(), res.bucket_start(m.minute_ms()));
        match res {
            // A marked minute without samples (the minute after a late sample's) has no row.
            Resolution::Minute if m.bucket.sample_count == 0 => {
                rows.remove(&key);
            }
            Resolution::Minute => {
                rows.insert(key, BucketCredit { gpu_id: key.0, bucket_ms: key.1, credit: m.credit });
            }
            Resolution::Hour => {
                let delta = m.credit_delta();
                if !delta.is_zero() {
                    rows.entry(key)
                        .or_insert_with(|| BucketCredit { gpu_id: key.0, bucket_ms: key.1, credit: Credit::default() })
                        .credit
                        .add_scaled(&delta, 1.0);
                }
            }
        }
    }
    rows.into_values().collect()
}

/// A chart point of a rollup bucket (what `series_select` reads from a stored row).
pub(crate) fn series_row(b: &RollupBucket, state: Option<String>) -> SeriesRow {
    let st = |name: &str| b.signal(name).copied().unwrap_or_default();
    let (util, sm, occ, tensor, dram, mem, power, temp) = (
        st("gpu_util_pct"),
        st("sm_active_pct"),
        st("sm_occupancy_pct"),
        st("tensor_active_pct"),
        st("dram_active_pct"),
        st("mem_used_bytes"),
        st("power_w"),
        st("temp_c"),
    );
    SeriesRow {
        bucket_ms: b.bucket_ms,
        sample_count: b.sample_count,
        gpu_util_pct_sum: util.sum,
        gpu_util_pct_count: util.count,
        gpu_util_pct_max: util.max,
        sm_active_pct_sum: sm.sum,
        sm_active_pct_count: sm.count,
        sm_active_pct_min: sm.min,
        sm_occupancy_pct_sum: occ.sum,
        sm_occupancy_pct_count: occ.count,
        tensor_active_pct_sum: tensor.sum,
        tensor_active_pct_count: tensor.count,
        dram_active_pct_sum: dram.sum,
        dram_active_pct_count: dram.count,
        mem_used_bytes_max: mem.max,
        power_w_sum: power.sum,
        power_w_count: power.count,
        temp_c_sum: temp.sum,
        temp_c_count: temp.count,
        state,
    }
}

/// Stored minute chart points with the open minutes' in place of theirs.
pub(crate) fn overlay_minute_series(stored: Vec<SeriesRow>, open: &[OpenMinute]) -> Vec<SeriesRow> {
    if open.is_empty() {
        return stored;
    }
    let mut rows: BTreeMap<i64, SeriesRow> = stored.into_iter().map(|r| (r.bucket_ms, r)).collect();
    for m in open {
        if m.bucket.sample_count > 0 {
            rows.insert(m.minute_ms(), series_row(&m.bucket, Some(m.state.as_str().to_string())));
        } else {
            rows.remove(&m.minute_ms());
        }
    }
    rows.into_values().collect()
}

/// Each GPU's newest minute with the open minutes in place of theirs (`open` loaded with
/// [`PendingScope::Latest`]).
pub(crate) fn overlay_latest(stored: Vec<LatestMinute>, open: &[OpenMinute]) -> Vec<LatestMinute> {
    if open.is_empty() {
        return stored;
    }
    let mut rows: BTreeMap<GpuId, LatestMinute> = stored.into_iter().map(|m| (m.gpu_id, m)).collect();
    for m in open.iter().filter(|m| m.bucket.sample_count > 0) {
        rows.insert(
            m.gpu_id(),
            LatestMinute {
                gpu_id: m.gpu_id(),
                bucket_ms: m.minute_ms(),
                state: Some(m.state.as_str().to_string()),
                sample_count: m.bucket.sample_count,
                first_ts_ms: m.bucket.first_ts_ms,
                last_ts_ms: m.bucket.last_ts_ms,
            },
        );
    }
    rows.into_values().collect()
}

/// Peak memory per GPU with the open minutes' peaks.
pub(crate) fn overlay_peak_mem(stored: Vec<(GpuId, i64)>, open: &[OpenMinute]) -> Vec<(GpuId, i64)> {
    let mut peaks: BTreeMap<GpuId, i64> = stored.into_iter().collect();
    for m in open {
        if let Some(max) = m.bucket.signal("mem_used_bytes").and_then(|s| s.max) {
            let peak = peaks.entry(m.gpu_id()).or_insert(max as i64);
            *peak = (*peak).max(max as i64);
        }
    }
    peaks.into_iter().collect()
}

/// The GPU facts the billing split needs: first sample, newest sample.
pub(crate) type GpuSpans = HashMap<GpuId, (i64, i64)>;

/// The report period of [`crate::RollupStore::org_hour_credit_split`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitPeriod {
    pub from_ms: i64,
    pub end_ms: i64,
    pub first_whole_ms: i64,
    pub last_whole_ms: i64,
}

/// Add the open minutes' credit changes to a billing split, each to the row its hour falls in
/// by the rules of `hour_credit_split_sql` (whole hours summed per GPU, the others one row each;
/// hours outside the GPU's credited span weigh nothing and are left out).
pub(crate) fn overlay_split(split: &mut HourCreditSplit, open: &[OpenMinute], spans: &GpuSpans, p: SplitPeriod) {
    const H: i64 = HOUR_MS;
    let floor_from = p.from_ms.div_euclid(H) * H;
    let last_start = p.last_whole_ms - H;
    let any_whole = p.first_whole_ms <= last_start;
    for m in open {
        let delta = m.credit_delta();
        if delta.is_zero() {
            continue;
        }
        let (gpu_id, h) = (m.gpu_id(), Resolution::Hour.bucket_start(m.minute_ms()));
        if h < floor_from || h >= p.end_ms {
            continue;
        }
        let Some(&(first_seen, last_seen)) = spans.get(&gpu_id) else { continue };
        let credited_to = (last_seen.div_euclid(MINUTE_MS) + 1) * MINUTE_MS;
        let partial = !any_whole
            || h < p.first_whole_ms
            || h > last_start
            || (h == first_seen.div_euclid(H) * H && h < first_seen)
            || (h == (credited_to - 1).div_euclid(H) * H && h >= first_seen && h + H > credited_to);
        if partial {
            match split.partial.iter_mut().find(|r| r.gpu_id == gpu_id && r.bucket_ms == h) {
                Some(row) => row.credit.add_scaled(&delta, 1.0),
                None => split.partial.push(BucketCredit { gpu_id, bucket_ms: h, credit: delta }),
            }
        } else if h >= first_seen.max(p.first_whole_ms) && h + H <= credited_to {
            match split.whole.iter_mut().find(|r| r.gpu_id == gpu_id) {
                Some(row) => {
                    row.bucket_ms = row.bucket_ms.min(h);
                    row.credit.add_scaled(&delta, 1.0);
                }
                None => split.whole.push(BucketCredit { gpu_id, bucket_ms: h, credit: delta }),
            }
        }
    }
    split.whole.sort_by_key(|r| r.gpu_id);
}

/// True when every minute of `open` is still marked (`marked`, loaded after the stored rows):
/// no job run wrote any of them in between, so the stored rows read do not hold them yet.
pub(crate) fn still_open(open: &[OpenMinute], marked: &[(GpuId, i64)]) -> bool {
    let marked: std::collections::HashSet<&(GpuId, i64)> = marked.iter().collect();
    open.iter().all(|m| marked.contains(&(m.gpu_id(), m.minute_ms())))
}

/// SQL of the loads, for a scope condition (see [`PendingScope::condition`]); `?` placeholders.
pub(crate) struct LoadSql {
    pub keys: String,
    pub samples: String,
    pub before: String,
    pub stored: String,
}

/// The blocks of minute rollups (`gpu_id, payload`) of the hours holding the marks `p` of
/// `condition` before a bound time (`?` after the condition's binds): one statement for a
/// read's marks, however many GPUs.
pub(crate) fn packed_of_marks_sql(condition: &str) -> String {
    format!(
        "SELECT r.gpu_id, r.payload FROM rollup_blocks r WHERE (r.gpu_id, r.start_ms) IN \
         (SELECT p.gpu_id, p.minute_ms - p.minute_ms % {HOUR_MS} FROM rollup_pending p JOIN gpus g ON g.id = p.gpu_id \
         WHERE {condition} AND p.minute_ms < ?)"
    )
}

/// `samples_of_mark`: how the dialect joins a mark `p` to its minute's samples `s`
/// (`dialect::*::SAMPLES_OF_MARK`); `previous_of_mark`: to the timestamps `t` before it
/// (`dialect::*::previous_of_mark`).
pub(crate) fn load_sql(
    condition: &str,
    processes_expr: &str,
    samples_of_mark: &str,
    previous_of_mark: &str,
) -> LoadSql {
    let from = "FROM rollup_pending p JOIN gpus g ON g.id = p.gpu_id";
    LoadSql {
        keys: format!(
            "SELECT p.gpu_id, p.minute_ms, g.org_id, g.power_limit_w, g.mem_total_bytes {from} WHERE {condition} \
             ORDER BY p.gpu_id, p.minute_ms"
        ),
        samples: format!(
            "SELECT p.gpu_id, p.minute_ms, s.ts_ms, {}, f.flags AS quality_flags {from} \
             {samples_of_mark} LEFT JOIN sample_flags f ON f.gpu_id = s.gpu_id AND f.ts_ms = s.ts_ms WHERE {condition}",
            crate::columns::sample_select_list("s", processes_expr)
        ),
        // The GPU's last `PREVIOUS_TIMESTAMPS` timestamps before the minute.
        before: format!("SELECT p.gpu_id, p.minute_ms, t.ts_ms {from} {previous_of_mark} WHERE {condition}"),
        stored: format!(
            "SELECT {} {from} JOIN rollups_1m r ON r.gpu_id = p.gpu_id AND r.bucket_ms = p.minute_ms WHERE {condition}",
            crate::columns::merged_returning().split(", ").map(|c| format!("r.{c}")).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `INSERT … SELECT` that writes one GPU-hour of `rollups_1h` (and its credit) as the sum of its
/// minutes in `rollups_1m`, replacing the row; binds: gpu_id, hour start, hour end.
pub(crate) fn hour_from_minutes_sql() -> String {
    let mut cols = crate::columns::rollup_columns();
    cols.extend(Credit::column_names());
    let agg: Vec<String> = cols
        .iter()
        .map(|c| {
            let f = if c == "first_ts_ms" || c.ends_with("_min") {
                "MIN"
            } else if c == "last_ts_ms" || c.ends_with("_max") {
                "MAX"
            } else {
                "SUM"
            };
            format!("{f}(r.{c})")
        })
        .collect();
    let set: Vec<String> = cols.iter().map(|c| format!("{c} = excluded.{c}")).collect();
    format!(
        "INSERT INTO rollups_1h (gpu_id, bucket_ms, {}) SELECT r.gpu_id, MIN(r.bucket_ms) - MIN(r.bucket_ms) % {HOUR_MS}, {} \
         FROM rollups_1m r WHERE r.gpu_id = ? AND r.bucket_ms >= ? AND r.bucket_ms < ? GROUP BY r.gpu_id \
         ON CONFLICT (gpu_id, bucket_ms) DO UPDATE SET {}",
        cols.join(", "),
        agg.join(", "),
        set.join(", ")
    )
}

/// `INSERT` (upsert) of whole minute rows, their state and credit, for a query builder: the
/// column list after `(gpu_id, bucket_ms, `.
pub(crate) fn minute_columns() -> Vec<String> {
    let mut cols = crate::columns::rollup_columns();
    cols.push("state".into());
    cols.extend(Credit::column_names());
    cols
}

pub(crate) fn minute_upsert_tail() -> String {
    let set: Vec<String> = minute_columns().iter().map(|c| format!("{c} = excluded.{c}")).collect();
    format!(" ON CONFLICT (gpu_id, bucket_ms) DO UPDATE SET {}", set.join(", "))
}

/// The per-backend loads, the job and the marks. `$db`: the sqlx database; `$dialect`: its
/// module in [`crate::dialect`] (placeholders, how it selects the process list as text, how a
/// mark meets its samples, the pack lock).
macro_rules! impl_rollup_close {
    ($db:ty, $dialect:ident) => {
        use sqlx::Row as _;

        use $crate::dialect::$dialect::{PACK_LOCK, PROCESSES_TEXT, SAMPLES_OF_MARK, previous_of_mark, q};

        use $crate::rollup_close::{self as rc, OpenMinute, PendingScope};

        type Conn = <$db as sqlx::Database>::Connection;

        #[derive(sqlx::FromRow)]
        struct PendingSampleRow {
            gpu_id: fleetlens_core::GpuId,
            minute_ms: i64,
            ts_ms: i64,
            #[sqlx(flatten)]
            values: $crate::columns::SampleValues,
            quality_flags: Option<i64>,
        }

        fn bind_all<'q>(
            mut query: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>,
            binds: &[i64],
        ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>> {
            for b in binds {
                query = query.bind(*b);
            }
            query
        }

        /// The marked minutes of `scope`, rolled up from their raw samples; `lock`: take the
        /// marks' row locks (the job, on PostgreSQL) before reading their samples.
        /// `current_settings`: read the classifier's settings after the marks (the job, whose
        /// credits are written; see `MinuteClassifier::settings_key`); reads classify with
        /// the classifier's copy as it is.
        pub(crate) async fn load_open(
            conn: &mut Conn,
            scope: PendingScope<'_>,
            lock: Option<&str>,
            current_settings: bool,
            classifier: &dyn $crate::credits::MinuteClassifier,
        ) -> $crate::Result<Vec<OpenMinute>> {
            let (cond, binds) = scope.condition();
            let sql = rc::load_sql(&cond, PROCESSES_TEXT, SAMPLES_OF_MARK, &previous_of_mark());
            let keys_sql = format!("{}{}", sql.keys, lock.unwrap_or(""));
            let keys: Vec<rc::PendingKey> = bind_all(sqlx::query(&q(&keys_sql)), &binds)
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?)))
                .collect::<Result<_, sqlx::Error>>()?;
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            if let Some(key) = classifier.settings_key().filter(|_| current_settings) {
                let rows: Vec<($crate::OrgId, String)> =
                    sqlx::query_as(&q("SELECT org_id, value FROM org_settings WHERE key = ?"))
                        .bind(key)
                        .fetch_all(&mut *conn)
                        .await?;
                classifier.use_settings(rows);
            }
            let samples_sql = q(&sql.samples).into_owned();
            let mut query = sqlx::query_as::<_, PendingSampleRow>(&samples_sql);
            for b in &binds {
                query = query.bind(*b);
            }
            let samples = query
                .fetch_all(&mut *conn)
                .await?
                .into_iter()
                .map(|r| {
                    let f = fleetlens_core::QualityFlags::from_bits(r.quality_flags.unwrap_or(0));
                    ((r.gpu_id, r.minute_ms), r.values.into_sample(r.ts_ms, "", None, None), f)
                })
                .collect();
            let before = bind_all(sqlx::query(&q(&sql.before)), &binds)
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|r| Ok(((r.try_get(0)?, r.try_get(1)?), r.try_get(2)?)))
                .collect::<Result<_, sqlx::Error>>()?;
            // Minutes of hours packed into blocks first: a row of the same minute, pushed
            // after, wins (see `blocks::rows_over_packed`).
            let mut stored: Vec<(fleetlens_core::RollupBucket, fleetlens_core::Credit)> = Vec::new();
            let packed_before = $crate::blocks::span_start(rc::wall_clock_ms());
            if keys.iter().any(|k| k.1 < packed_before) {
                let packed_sql = q(&rc::packed_of_marks_sql(&cond)).into_owned();
                let blocks =
                    bind_all(sqlx::query(&packed_sql), &binds).bind(packed_before).fetch_all(&mut *conn).await?;
                for block in blocks {
                    let gpu_id = fleetlens_core::GpuId(block.try_get(0)?);
                    let payload: Vec<u8> = block.try_get(1)?;
                    let minutes = $crate::blocks::minutes::decode(gpu_id, &payload)?;
                    stored.extend(minutes.into_iter().map(|m| (m.bucket, m.credit)));
                }
            }
            for row in bind_all(sqlx::query(&q(&sql.stored)), &binds).fetch_all(&mut *conn).await? {
                stored.push($crate::columns::merged_from_row(&row)?);
            }
            Ok(rc::roll_up(rc::assemble(keys, samples, before, stored), classifier))
        }

        /// A read of stored rows (`read`) with the open minutes of `scope` that complete it.
        /// The marks are loaded before and checked after the read: a job run that wrote some
        /// of them in between (so the stored rows may hold them too) makes it read again.
        pub(crate) async fn with_open<T, Fut>(
            pool: &sqlx::Pool<$db>,
            scope: PendingScope<'_>,
            classifier: &dyn $crate::credits::MinuteClassifier,
            read: impl Fn() -> Fut,
        ) -> $crate::Result<(T, Vec<OpenMinute>)>
        where
            Fut: std::future::Future<Output = $crate::Result<T>>,
        {
            let mut attempt = 0;
            loop {
                // The connection goes back to the pool while `read` runs (it may take several).
                let open = load_open(&mut *pool.acquire().await?, scope, None, false, classifier).await?;
                let stored = read().await?;
                if open.is_empty()
                    || attempt == 3
                    || rc::still_open(&open, &marked(&mut *pool.acquire().await?, scope).await?)
                {
                    return Ok((stored, open));
                }
                attempt += 1;
            }
        }

        /// The keys still marked in `scope`.
        pub(crate) async fn marked(
            conn: &mut Conn,
            scope: PendingScope<'_>,
        ) -> $crate::Result<Vec<(fleetlens_core::GpuId, i64)>> {
            let (cond, binds) = scope.condition();
            let sql = format!(
                "SELECT p.gpu_id, p.minute_ms FROM rollup_pending p JOIN gpus g ON g.id = p.gpu_id WHERE {cond}"
            );
            Ok(bind_all(sqlx::query(&q(&sql)), &binds)
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()?)
        }

        /// Mark the minutes of newly stored samples (`new_keys`: gpu_id, ts_ms) and store the
        /// flags of those that had any; in the ingest transaction.
        pub(crate) async fn mark_new(
            conn: &mut Conn,
            new_keys: &[(i64, i64)],
            flags: &[(i64, i64, i64)],
            now_ms: i64,
        ) -> $crate::Result<()> {
            let marks = rc::minutes_to_mark(new_keys.iter().copied());
            let (locked, free): (Vec<_>, Vec<_>) =
                marks.into_iter().partition(|&(_, m)| rc::mark_needs_lock(m, now_ms));
            for (rows, tail) in [
                (&free, " ON CONFLICT (gpu_id, minute_ms) DO NOTHING"),
                (&locked, " ON CONFLICT (gpu_id, minute_ms) DO UPDATE SET minute_ms = excluded.minute_ms"),
            ] {
                for chunk in rows.chunks(1000) {
                    let mut qb: sqlx::QueryBuilder<$db> =
                        sqlx::QueryBuilder::new("INSERT INTO rollup_pending (gpu_id, minute_ms) ");
                    qb.push_values(chunk, |mut b, &(g, m)| {
                        b.push_bind(g).push_bind(m);
                    });
                    qb.push(tail);
                    qb.build().execute(&mut *conn).await?;
                }
            }
            for chunk in flags.chunks(1000) {
                let mut qb: sqlx::QueryBuilder<$db> =
                    sqlx::QueryBuilder::new("INSERT INTO sample_flags (gpu_id, ts_ms, flags) ");
                qb.push_values(chunk, |mut b, &(g, t, f)| {
                    b.push_bind(g).push_bind(t).push_bind(f);
                });
                // A conflict is a filled-in sample ([`crate::merge`]): it has both parts' flags.
                qb.push(" ON CONFLICT (gpu_id, ts_ms) DO UPDATE SET flags = sample_flags.flags | excluded.flags");
                qb.build().execute(&mut *conn).await?;
            }
            Ok(())
        }

        /// Write whole minute rows (rollup, state, credit) of `(gpu_id, …)`; `tail`: what a
        /// minute already stored does (`ON CONFLICT …`).
        async fn insert_minutes<'a>(
            conn: &mut Conn,
            rows: impl Iterator<
                Item = (
                    fleetlens_core::GpuId,
                    &'a fleetlens_core::RollupBucket,
                    Option<&'a str>,
                    [f64; fleetlens_core::CREDIT_COLUMNS],
                ),
            >,
            tail: &str,
        ) -> $crate::Result<()> {
            let rows: Vec<_> = rows.collect();
            if rows.is_empty() {
                return Ok(());
            }
            let mut qb: sqlx::QueryBuilder<$db> =
                sqlx::QueryBuilder::new("INSERT INTO rollups_1m (gpu_id, bucket_ms, ");
            qb.push(rc::minute_columns().join(", ")).push(") ");
            qb.push_values(rows, |mut b, (gpu_id, bucket, state, credit)| {
                b.push_bind(gpu_id).push_bind(bucket.bucket_ms);
                for cell in $crate::columns::rollup_cells(bucket) {
                    match cell {
                        $crate::columns::Cell::F(v) => b.push_bind(v),
                        $crate::columns::Cell::I(v) => b.push_bind(v),
                    };
                }
                b.push_bind(state.map(str::to_string));
                for v in credit {
                    b.push_bind(v);
                }
            });
            qb.push(tail);
            qb.build().execute(&mut *conn).await?;
            Ok(())
        }

        /// The packed hours of `minutes` (blocks of minute rollups) back to `rollups_1m` rows,
        /// under each GPU's pack lock; a row already there wins. Returns the hours unpacked.
        pub(crate) async fn unpack(conn: &mut Conn, minutes: &[OpenMinute]) -> $crate::Result<u64> {
            let packed_before = $crate::blocks::span_start(rc::wall_clock_ms());
            let mut hours: Vec<(fleetlens_core::GpuId, i64)> = minutes
                .iter()
                .filter(|m| m.minute_ms() < packed_before)
                .map(|m| (m.gpu_id(), $crate::blocks::span_start(m.minute_ms())))
                .collect();
            hours.sort_unstable();
            hours.dedup();
            let mut unpacked = 0;
            let mut locked = None;
            for (gpu_id, start) in hours {
                if let Some(lock) = PACK_LOCK
                    && locked != Some(gpu_id)
                {
                    sqlx::query(&q(lock)).bind(gpu_id).execute(&mut *conn).await?;
                    locked = Some(gpu_id);
                }
                let payload: Option<Vec<u8>> = sqlx::query_scalar(&q(
                    "DELETE FROM rollup_blocks WHERE gpu_id = ? AND start_ms = ? RETURNING payload",
                ))
                .bind(gpu_id)
                .bind(start)
                .fetch_optional(&mut *conn)
                .await?;
                let Some(payload) = payload else { continue };
                let packed = $crate::blocks::minutes::decode(gpu_id, &payload)?;
                for chunk in packed.chunks(100) {
                    let rows = chunk.iter().map(|m| (gpu_id, &m.bucket, m.state.as_deref(), m.credit.to_cells()));
                    insert_minutes(conn, rows, " ON CONFLICT (gpu_id, bucket_ms) DO NOTHING").await?;
                }
                unpacked += 1;
            }
            Ok(unpacked)
        }

        /// The GPUs with minutes marked before `cutoff_ms`, in chunks
        /// ([`rc::close_chunks_of`]: first id, last id): one job transaction each.
        pub(crate) async fn close_chunks(pool: &sqlx::Pool<$db>, cutoff_ms: i64) -> $crate::Result<Vec<(i64, i64)>> {
            let marked: Vec<(i64, i64)> = sqlx::query_as(&q(
                "SELECT gpu_id, count(*) FROM rollup_pending WHERE minute_ms < ? GROUP BY gpu_id ORDER BY gpu_id",
            ))
            .bind(cutoff_ms)
            .fetch_all(pool)
            .await?;
            Ok(rc::close_chunks_of(&marked))
        }

        /// The job's work inside one transaction: write the minutes of `scope` (a
        /// [`PendingScope::ClosedBefore`]), sum their hours and days again, remove their
        /// marks. Returns the minutes written.
        pub(crate) async fn close_in(
            conn: &mut Conn,
            scope: PendingScope<'_>,
            lock: Option<&str>,
            classifier: &dyn $crate::credits::MinuteClassifier,
        ) -> $crate::Result<u64> {
            let open = load_open(conn, scope, lock, true, classifier).await?;
            if open.is_empty() {
                return Ok(0);
            }
            // The hours of these minutes go back to rows first: their hour rows are summed
            // again from the minute rows below.
            unpack(conn, &open).await?;
            let written: Vec<&OpenMinute> = open.iter().filter(|m| m.bucket.sample_count > 0).collect();
            for chunk in written.chunks(256) {
                let rows = chunk.iter().map(|m| (m.gpu_id(), &m.bucket, Some(m.state.as_str()), m.credit.to_cells()));
                insert_minutes(conn, rows, &rc::minute_upsert_tail()).await?;
            }
            // A reopened minute that has no samples left (retention took them): nothing to hold.
            for m in open.iter().filter(|m| m.bucket.sample_count == 0 && m.stored.is_some()) {
                sqlx::query(&q("DELETE FROM rollups_1m WHERE gpu_id = ? AND bucket_ms = ?"))
                    .bind(m.gpu_id())
                    .bind(m.minute_ms())
                    .execute(&mut *conn)
                    .await?;
            }
            let (hours, days) = rc::touched_hours_and_days(&open);
            let hour_sql = q(&rc::hour_from_minutes_sql()).into_owned();
            for (gpu_id, h) in hours {
                sqlx::query(&hour_sql).bind(gpu_id).bind(h).bind(h + 3_600_000).execute(&mut *conn).await?;
            }
            let day_sql =
                q(&$crate::day_credits_from_hours_sql("r.gpu_id = ? AND r.bucket_ms >= ? AND r.bucket_ms < ?"))
                    .into_owned();
            for (gpu_id, d) in days {
                sqlx::query(&q("DELETE FROM credits_1d WHERE gpu_id = ? AND day_ms = ?"))
                    .bind(gpu_id)
                    .bind(d)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query(&day_sql).bind(gpu_id).bind(d).bind(d + $crate::DAY_MS).execute(&mut *conn).await?;
            }
            for chunk in open.chunks(500) {
                let mut qb: sqlx::QueryBuilder<$db> =
                    sqlx::QueryBuilder::new("DELETE FROM rollup_pending WHERE (gpu_id, minute_ms) IN (");
                let mut list = qb.separated(", ");
                for m in chunk {
                    list.push("(")
                        .push_bind_unseparated(m.gpu_id())
                        .push_unseparated(", ")
                        .push_bind_unseparated(m.minute_ms())
                        .push_unseparated(")");
                }
                qb.push(")");
                qb.build().execute(&mut *conn).await?;
            }
            Ok(written.len() as u64)
        }
    };
}

pub(crate) use impl_rollup_close;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_transactions_are_bounded_by_gpus_and_by_minutes() {
        assert!(close_chunks_of(&[]).is_empty());
        // Steady state: one or two minutes a GPU, the GPU bound cuts.
        let steady: Vec<(i64, i64)> = (1..=450).map(|id| (id, 1 + id % 2)).collect();
        assert_eq!(close_chunks_of(&steady), [(1, 200), (201, 400), (401, 450)]);
        // A backlog: 25 minutes a GPU, the minute bound cuts (40 GPUs of 25 = 1,000).
        let backlog: Vec<(i64, i64)> = (1..=100).map(|id| (id * 3, 25)).collect();
        assert_eq!(close_chunks_of(&backlog), [(3, 120), (123, 240), (243, 300)]);
        // One GPU over the bound stands alone, and its neighbours go on either side of it.
        let big = [(1, 10), (2, MINUTES_PER_CLOSE + 5), (3, 10), (4, MINUTES_PER_CLOSE - 10)];
        assert_eq!(close_chunks_of(&big), [(1, 1), (2, 2), (3, 4)]);
        // Every GPU is in exactly one chunk, in order, and no chunk breaks a bound it could keep.
        let mixed: Vec<(i64, i64)> = (1..=1000).map(|id| (id, (id * 37) % 90)).collect();
        let chunks = close_chunks_of(&mixed);
        assert_eq!(chunks.first().unwrap().0, 1);
        assert_eq!(chunks.last().unwrap().1, 1000);
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0);
        }
        for &(lo, hi) in &chunks {
            let inside: Vec<_> = mixed.iter().filter(|(id, _)| (lo..=hi).contains(id)).collect();
            assert!(inside.len() <= GPUS_PER_CLOSE);
            let minutes: i64 = inside.iter().map(|(_, m)| m).sum();
            assert!(inside.len() == 1 || minutes <= MINUTES_PER_CLOSE, "{lo}..{hi}: {minutes}");
        }
    }

    #[test]
    fn marks_cover_each_minute_and_the_next() {
        let marks = minutes_to_mark([(1, 61_000), (1, 65_000), (2, 0), (1, 130_000)]);
        assert_eq!(marks, [(1, 60_000), (1, 120_000), (1, 180_000), (2, 0), (2, 60_000)]);
        // At 10:00 + 20 s the minute that ended 20 s ago is marked without a lock; at + 40 s
        // it waits; older ones always wait.
        assert!(!mark_needs_lock(540_000, 620_000));
        assert!(mark_needs_lock(540_000, 640_000));
        assert!(mark_needs_lock(480_000, 600_000));
        // A job whose clock runs up to 29 s ahead never takes a minute marked without a lock.
        for now in (600_000..720_000).step_by(1_000) {
            let free = (0..=now).step_by(60_000).filter(|m| !mark_needs_lock(*m, now)).min().unwrap();
            assert!(close_cutoff(now + 29_000, MIN_LATENESS_MS) <= free, "at {now}");
        }
        assert_eq!(close_cutoff(600_000, 0), 480_001);
    }
}
