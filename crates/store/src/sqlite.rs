//! SQLite backend: WAL, `synchronous=NORMAL`, and one writer task that groups the batches of
//! many concurrent requests into one transaction (group commit). Reads use a pool.

// foldhash, not SipHash, for the maps the writer consults once or more per sample.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use std::sync::Arc;

use fleetlens_core::{Credit, Resolution, RollupBucket, Sample};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, QueryBuilder, Row, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use crate::blocks;
use crate::columns::{self, Cell, GpuRow, SampleRow};
use crate::credits::MinuteClassifier;
use crate::ingest_rules::{self, IngestRules, KnownGpu};
use crate::rollup_close::{self as rc, PendingScope, minute_range};
use crate::{
    ApiKey, GpuRecord, IngestOutcome, NewApiKey, OrgId, Result, RetentionPolicy, RetentionReport, Store, StoreError,
};

/// Rows a group commit gathers at most before it commits.
const MAX_GROUP_ROWS: usize = 100_000;
/// SQLite allows 32,766 bound variables per statement.
pub(crate) const SAMPLE_ROWS_PER_STATEMENT: usize = 32_000 / (SAMPLE_COLS + 3);
const SAMPLE_COLS: usize = columns::SAMPLE_COLUMNS.len();
/// Rows deleted per retention statement, so the writer lock is never held long.
const RETENTION_CHUNK: i64 = 20_000;

struct IngestJob {
    org: OrgId,
    host: String,
    samples: Vec<Sample>,
    rules: Option<IngestRules>,
    /// Data-quality flags per sample (empty: none).
    flags: Vec<fleetlens_core::QualityFlags>,
    reply: oneshot::Sender<Result<IngestOutcome>>,
}

/// Deletes for one retention step, run by the writer so they never fight ingest for the lock.
struct RetentionJob {
    table: &'static str,
    key: &'static str,
    gpu_ids: Vec<i64>,
    cutoff_ms: i64,
    /// (rows deleted, whether some GPU had more to delete than one step takes)
    reply: oneshot::Sender<Result<(u64, bool)>>,
}

enum WriteJob {
    Ingest(IngestJob),
    Retention(RetentionJob),
}

/// GPUs per retention step (one short transaction each).
const RETENTION_GPUS_PER_STEP: usize = 500;

pub struct SqliteStore {
    pool: SqlitePool,
    /// Credits the minutes that the rollup job writes and that reads add as open minutes.
    classifier: Arc<dyn MinuteClassifier>,
    writer: mpsc::Sender<WriteJob>,
    /// One process: change signals stay in it.
    changes: crate::changes::LocalChanges,
}

/// What the writer task owns.
struct Writer {
    conn: SqliteConnection,
}

fn options(url: &str) -> Result<SqliteConnectOptions> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Err(StoreError::Invalid(
            "in-memory SQLite is not supported (the writer and readers need one shared file): use sqlite://PATH".into(),
        ));
    }
    Ok(SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30))
        .pragma("temp_store", "memory")
        .pragma("cache_size", WRITER_CACHE_KIB))
}

/// Page cache of the writer (in KiB, negative as SQLite wants it): rollup and credit rows of
/// every GPU are read back on each commit.
const WRITER_CACHE_KIB: &str = "-65536";
/// Page cache of each pooled (reading) connection. Small: the OS page cache holds the file
/// anyway, and eight connections with the writer's cache each would let the process grow by
/// half a gigabyte as they warm up.
const READER_CACHE_KIB: &str = "-8192";

impl SqliteStore {
    /// The newest sample of GPUs whose newest hour is sealed (no open row holds it).
    async fn fill_sealed_latest(&self, records: &mut [GpuRecord]) -> Result<()> {
        let missing = blocks::missing_latest(records);
        if !missing.is_empty() {
            blocks::fill_latest(records, blocks::sqlite::latest_blocks(&self.pool, &missing).await?)?;
        }
        Ok(())
    }

    pub async fn open(url: &str, classifier: Arc<dyn MinuteClassifier>) -> Result<Self> {
        let opts = options(url)?;
        // Only the writer checkpoints the WAL. A pooled connection's small write (the alert
        // engine's lease renewal, say) would otherwise run the automatic checkpoint
        // whenever its commit crosses the 1,000-page mark, copying megabytes into the database
        // file inside that statement: the 2,000-GPU soak logged such lease upserts at 1.1-2.3 s.
        let readers = opts.clone().pragma("cache_size", READER_CACHE_KIB).pragma("wal_autocheckpoint", "0");
        let pool = SqlitePoolOptions::new().max_connections(8).connect_with(readers).await?;
        // Migrations run on their own connection with foreign keys off, as SQLite's procedure
        // for rebuilding a table asks (migration 0009): sqlx runs each migration in a
        // transaction, where the pragma cannot be changed, and with the keys on, dropping the
        // old `teams` would run its children's ON DELETE actions. Checked afterwards.
        let mut migrating = SqliteConnection::connect_with(&opts.clone().foreign_keys(false)).await?;
        sqlx::migrate!("../../migrations/sqlite").run(&mut migrating).await?;
        let broken: Vec<(String,)> =
            sqlx::query_as("SELECT DISTINCT \"table\" FROM pragma_foreign_key_check").fetch_all(&mut migrating).await?;
        if !broken.is_empty() {
            return Err(StoreError::Invalid(format!("rows of {broken:?} point at rows that do not exist")));
        }
        migrating.close().await?;
        let conn = SqliteConnection::connect_with(&opts).await?;
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(writer_loop(Writer { conn }, rx));
        Ok(Self { pool, classifier, writer: tx, changes: Default::default() })
    }

    /// The read/write pool (the alert store's queries use it; ingest goes through the writer).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

async fn writer_loop(mut w: Writer, mut rx: mpsc::Receiver<WriteJob>) {
    let mut pending: Option<WriteJob> = None;
    loop {
        let first = match pending.take() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let first = match first {
            WriteJob::Ingest(job) => job,
            WriteJob::Retention(job) => {
                let result = retention_step(&mut w.conn, &job).await;
                let _ = job.reply.send(result);
                continue;
            }
        };
        let mut rows = first.samples.len();
        let mut jobs = vec![first];
        while rows < MAX_GROUP_ROWS {
            match rx.try_recv() {
                Ok(WriteJob::Ingest(job)) => {
                    rows += job.samples.len();
                    jobs.push(job);
                }
                // Run after this group commits.
                Ok(other) => {
                    pending = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        match write_group(&mut w, &jobs).await {
            Ok(outcomes) => {
                for (job, outcome) in jobs.into_iter().zip(outcomes) {
                    let _ = job.reply.send(Ok(outcome));
                }
            }
            // One job may be at fault: commit the others on their own so it cannot fail them.
            Err(e) if jobs.len() > 1 => {
                tracing::warn!(error = %e, jobs = jobs.len(), "group commit failed; retrying jobs one by one");
                for job in jobs {
                    let result = write_group(&mut w, std::slice::from_ref(&job)).await.map(|mut o| o.remove(0));
                    let _ = job.reply.send(result);
                }
            }
            // The group was this one job: its error as it is (a refused quota stays that).
            Err(e) => {
                if let Some(job) = jobs.into_iter().next() {
                    let _ = job.reply.send(Err(e));
                }
            }
        }
    }
}

/// Delete, per GPU, up to `RETENTION_CHUNK` rows older than the cutoff, in one transaction.
async fn retention_step(conn: &mut SqliteConnection, job: &RetentionJob) -> Result<(u64, bool)> {
    let (table, key) = (job.table, job.key);
    if table == "credits_1d" {
        return day_retention_step(conn, job).await;
    }
    let sql = format!(
        "DELETE FROM {table} WHERE gpu_id = ?1 AND {key} IN \
         (SELECT {key} FROM {table} WHERE gpu_id = ?1 AND {key} < ?2 ORDER BY {key} LIMIT ?3)"
    );
    let mut tx = conn.begin().await?;
    let (mut deleted, mut more) = (0, false);
    for &gpu_id in &job.gpu_ids {
        let done = sqlx::query(&sql)
            .bind(gpu_id)
            .bind(job.cutoff_ms)
            .bind(RETENTION_CHUNK)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        deleted += done;
        more |= done == RETENTION_CHUNK as u64;
    }
    tx.commit().await?;
    Ok((deleted, more))
}

/// Day credits after the hour retention: days wholly before the cutoff go, and the day the
/// cutoff falls in is summed again from its remaining hours, so every day row stays the sum of
/// its hours. One transaction for the step's GPUs.
async fn day_retention_step(conn: &mut SqliteConnection, job: &RetentionJob) -> Result<(u64, bool)> {
    let day = job.cutoff_ms.div_euclid(crate::DAY_MS) * crate::DAY_MS;
    let rebuild = crate::day_credits_from_hours_sql("r.gpu_id = ?1 AND r.bucket_ms >= ?2 AND r.bucket_ms < ?3");
    let mut tx = conn.begin().await?;
    let mut deleted = 0;
    for &gpu_id in &job.gpu_ids {
        deleted += sqlx::query("DELETE FROM credits_1d WHERE gpu_id = ?1 AND day_ms < ?2")
            .bind(gpu_id)
            .bind(job.cutoff_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if day < job.cutoff_ms {
            sqlx::query(&rebuild).bind(gpu_id).bind(day).bind(day + crate::DAY_MS).execute(&mut *tx).await?;
        }
    }
    tx.commit().await?;
    Ok((deleted, false))
}

/// One transaction for all jobs; returns one outcome per job.
async fn write_group(w: &mut Writer, jobs: &[IngestJob]) -> Result<Vec<IngestOutcome>> {
    sqlx::query("BEGIN IMMEDIATE").execute(&mut w.conn).await?;
    match write_jobs(&mut w.conn, jobs).await {
        Ok(outcomes) => {
            sqlx::query("COMMIT").execute(&mut w.conn).await?;
            Ok(outcomes)
        }
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut w.conn).await;
            Err(e)
        }
    }
}

async fn write_jobs(conn: &mut SqliteConnection, jobs: &[IngestJob]) -> Result<Vec<IngestOutcome>> {
    let mut outcomes = Vec::with_capacity(jobs.len());
    let (mut new_keys, mut flagged) = (Vec::new(), Vec::new());
    for job in jobs {
        if let Some(rules) = &job.rules {
            check_rules(conn, job.org, &job.host, &job.samples, rules).await?;
        }
        let ids = upsert_gpus(conn, job.org, &job.host, &job.samples).await?;
        // The writer is the only one writing, so "new" can be decided before inserting: probe
        // each GPU's time span once (a cheap index range, usually empty), insert only the rest.
        let existing = existing_keys(conn, &job.samples, &ids).await?;
        let mut seen: HashSet<(i64, i64)> = HashSet::with_capacity(job.samples.len());
        let fresh: Vec<&Sample> = job
            .samples
            .iter()
            .filter(|s| {
                let key = (ids[s.uuid.as_str()], s.ts_ms);
                !existing.contains(&key) && seen.insert(key)
            })
            .collect();
        let rows: Vec<(i64, &Sample)> = fresh.iter().map(|s| (ids[s.uuid.as_str()], *s)).collect();
        for chunk in bounded_chunks(&rows, SAMPLE_ROWS_PER_STATEMENT) {
            let done = insert_sample_rows(conn, chunk, "").await?;
            if done != chunk.len() as u64 {
                return Err(StoreError::Invalid(format!("inserted {done} of {} new samples", chunk.len())));
            }
        }
        let inserted = collect_new(job, &ids, seen, &mut new_keys, &mut flagged);
        let fills = crate::merge::sqlite::fill_stored(conn, &colliding(job, &ids, &existing)).await?;
        // A filled-in sample changes its minute: the minute is written (again) from the rows.
        crate::merge::mark_fills(&fills, &mut new_keys, &mut flagged);
        let merged = fills.len() as u64;
        outcomes.push(IngestOutcome { inserted, merged, duplicates: job.samples.len() as u64 - inserted - merged });
    }
    // The rollups of these samples are written once their minutes close (`rollup_close`).
    close::mark_new(conn, &new_keys, &flagged, crate::rollup_close::wall_clock_ms()).await?;
    Ok(outcomes)
}

/// Keys of `samples` already stored: one index range probe per GPU of the batch.
async fn existing_keys(
    conn: &mut SqliteConnection,
    samples: &[Sample],
    ids: &HashMap<String, i64>,
) -> Result<HashSet<(i64, i64)>> {
    let mut spans: HashMap<i64, (i64, i64)> = HashMap::new();
    for s in samples {
        let id = ids[s.uuid.as_str()];
        let span = spans.entry(id).or_insert((s.ts_ms, s.ts_ms));
        *span = (span.0.min(s.ts_ms), span.1.max(s.ts_ms));
    }
    let mut existing = HashSet::new();
    for (id, (lo, hi)) in spans {
        // A late sample for a sealed hour: the hour goes back to open rows first (see
        // `blocks::sqlite::unseal_within`), so the probe below sees its samples.
        blocks::sqlite::unseal_within(conn, id, lo, hi).await?;
        let found: Vec<i64> =
            sqlx::query_scalar("SELECT ts_ms FROM samples WHERE gpu_id = ? AND ts_ms BETWEEN ? AND ?")
                .bind(id)
                .bind(lo)
                .bind(hi)
                .fetch_all(&mut *conn)
                .await?;
        existing.extend(found.into_iter().map(|ts| (id, ts)));
    }
    Ok(existing)
}

/// The samples of `job` whose key was stored before it (each key once, the first of the
/// batch), with their flags: those may fill in their stored rows ([`crate::merge`]).
fn colliding<'a>(
    job: &'a IngestJob,
    ids: &HashMap<String, i64>,
    existing: &HashSet<(i64, i64)>,
) -> Vec<(i64, &'a Sample, fleetlens_core::QualityFlags)> {
    if existing.is_empty() {
        return Vec::new();
    }
    let mut seen: HashSet<(i64, i64)> = HashSet::new();
    job.samples
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let key = (ids[s.uuid.as_str()], s.ts_ms);
            (existing.contains(&key) && seen.insert(key))
                .then(|| (key.0, s, job.flags.get(i).copied().unwrap_or_default()))
        })
        .collect()
}

/// The keys of the samples that this transaction newly stored (into `new_keys`) and the flags
/// of those that had any (into `flagged`); returns how many there were. Only new samples count,
/// so a resent batch marks no minute.
fn collect_new(
    job: &IngestJob,
    ids: &HashMap<String, i64>,
    mut inserted_keys: HashSet<(i64, i64)>,
    new_keys: &mut Vec<(i64, i64)>,
    flagged: &mut Vec<(i64, i64, i64)>,
) -> u64 {
    let mut inserted = 0;
    for (i, s) in job.samples.iter().enumerate() {
        let key = (ids[s.uuid.as_str()], s.ts_ms);
        // remove(): a sample repeated inside one batch counts once.
        if inserted_keys.remove(&key) {
            inserted += 1;
            new_keys.push(key);
            let flags = job.flags.get(i).copied().unwrap_or_default();
            if !flags.is_empty() {
                flagged.push((key.0, key.1, flags.bits()));
            }
        }
    }
    inserted
}

/// The batch against the organisation's quotas and the GPU-host rule ([`IngestRules`]). The
/// writer is the only one writing, so what it reads here holds until the batch commits.
async fn check_rules(
    conn: &mut SqliteConnection,
    org: OrgId,
    host: &str,
    samples: &[Sample],
    rules: &IngestRules,
) -> Result<()> {
    let uuids = ingest_rules::batch_uuids(samples);
    let mut known: Vec<KnownGpu> = Vec::new();
    for chunk in uuids.chunks(500) {
        let mut qb: QueryBuilder<Sqlite> =
            QueryBuilder::new("SELECT uuid, host, last_seen_ms FROM gpus WHERE org_id = ");
        qb.push_bind(org).push(" AND uuid IN (");
        let mut list = qb.separated(", ");
        for uuid in chunk {
            list.push_bind(*uuid);
        }
        qb.push(")");
        known.extend(qb.build_query_as::<KnownGpu>().fetch_all(&mut *conn).await?);
    }
    rules.check_hosts(host, &known)?;
    let adding = (uuids.len() - known.len()) as u64;
    let moving = known.iter().any(|g| g.host != host);
    if adding == 0 && !moving {
        return Ok(());
    }
    let gpus: i64 =
        sqlx::query_scalar("SELECT count(*) FROM gpus WHERE org_id = ?").bind(org).fetch_one(&mut *conn).await?;
    ingest_rules::check_quota("GPUs", gpus as u64, adding, rules.max_gpus)?;
    let host_known: Option<i64> = sqlx::query_scalar("SELECT 1 FROM gpus WHERE org_id = ? AND host = ? LIMIT 1")
        .bind(org)
        .bind(host)
        .fetch_optional(&mut *conn)
        .await?;
    if host_known.is_none() {
        let hosts: i64 = sqlx::query_scalar("SELECT count(DISTINCT host) FROM gpus WHERE org_id = ?")
            .bind(org)
            .fetch_one(&mut *conn)
            .await?;
        ingest_rules::check_quota("hosts", hosts as u64, 1, rules.max_hosts)?;
    }
    Ok(())
}

async fn upsert_gpus(
    conn: &mut SqliteConnection,
    org: OrgId,
    host: &str,
    samples: &[Sample],
) -> Result<HashMap<String, i64>> {
    let gpus = columns::gpu_upserts(samples);
    let mut ids = HashMap::with_capacity(gpus.len());
    for chunk in bounded_chunks(&gpus, 1000) {
        let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO gpus (org_id, uuid, host, gpu_index, name, mem_total_bytes, power_limit_w, first_seen_ms, last_seen_ms, last_live_ms) ",
        );
        qb.push_values(chunk, |mut b, g| {
            b.push_bind(org)
                .push_bind(g.uuid)
                .push_bind(host)
                .push_bind(g.gpu_index)
                .push_bind(g.name)
                .push_bind(g.mem_total_bytes)
                .push_bind(g.power_limit_w)
                .push_bind(g.first_ms)
                .push_bind(g.last_ms)
                .push_bind(g.live_ms);
        });
        qb.push(GPU_UPSERT_TAIL);
        for row in qb.build().fetch_all(&mut *conn).await? {
            ids.insert(row.try_get::<String, _>(1)?, row.try_get(0)?);
        }
    }
    Ok(ids)
}

/// A back-filled (older) batch must not overwrite the newer identity of a GPU.
const GPU_UPSERT_TAIL: &str = " ON CONFLICT (org_id, uuid) DO UPDATE SET \
    host = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN excluded.host ELSE gpus.host END, \
    gpu_index = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN coalesce(excluded.gpu_index, gpus.gpu_index) ELSE gpus.gpu_index END, \
    name = coalesce(gpus.name, excluded.name), \
    mem_total_bytes = coalesce(excluded.mem_total_bytes, gpus.mem_total_bytes), \
    power_limit_w = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN coalesce(excluded.power_limit_w, gpus.power_limit_w) ELSE gpus.power_limit_w END, \
    first_seen_ms = min(gpus.first_seen_ms, excluded.first_seen_ms), \
    last_seen_ms = max(gpus.last_seen_ms, excluded.last_seen_ms), \
    last_live_ms = max(gpus.last_live_ms, excluded.last_live_ms) \
    RETURNING id, uuid, power_limit_w, mem_total_bytes";

/// Most rows in one multi-row statement (see [`bounded_chunks`]).
const MAX_STATEMENT_ROWS: usize = 256;

/// Insert `rows` (`(gpu_id, sample)`, at most [`SAMPLE_ROWS_PER_STATEMENT`]) into `samples`
/// in one statement, `tail` (e.g. an `ON CONFLICT` clause) after the values; returns the rows
/// inserted. Ingest and the unsealing of a block (`blocks::sqlite`) write rows this way.
pub(crate) async fn insert_sample_rows(
    conn: &mut SqliteConnection,
    rows: &[(i64, &Sample)],
    tail: &str,
) -> Result<u64> {
    let mut qb: QueryBuilder<Sqlite> = QueryBuilder::new("INSERT INTO samples (gpu_id, ts_ms, ");
    qb.push(columns::SAMPLE_COLUMNS.join(", ")).push(", processes, allocations) ");
    qb.push_values(rows, |mut b, &(gpu_id, s)| {
        b.push_bind(gpu_id).push_bind(s.ts_ms);
        for cell in columns::sample_cells(s) {
            match cell {
                Cell::F(v) => b.push_bind(v),
                Cell::I(v) => b.push_bind(v),
            };
        }
        b.push_bind(columns::processes_json(s));
        b.push_bind(columns::allocations_json(s));
    });
    qb.push(tail);
    Ok(qb.build().execute(&mut *conn).await?.rows_affected())
}

/// `items` in chunks of at most `max` whose lengths come from a fixed set: full chunks of
/// `max`, then the rest in falling powers of two. Each length of a multi-row statement is its
/// own SQL text and so its own prepared statement in the connection's cache (sqlx keeps 100),
/// and the big ones hold megabytes each: with every length allowed, a day of varying batch
/// sizes filled the cache and the process grew (150 batches of random sizes took the server
/// from 120 to 259 MiB, against 138 MiB for one size). Here a statement kind has at most
/// log2(`max`) + 2 lengths, and at most [`MAX_STATEMENT_ROWS`] rows: the cached statements of
/// all kinds together stay a few megabytes, while a 256-row statement already spreads its fixed
/// cost over enough rows.
pub(crate) fn bounded_chunks<T>(items: &[T], max: usize) -> Vec<&[T]> {
    let max = max.clamp(1, MAX_STATEMENT_ROWS);
    let mut out = Vec::with_capacity(items.len() / max + usize::BITS as usize);
    let mut rest = items;
    while rest.len() >= max {
        let (head, tail) = rest.split_at(max);
        out.push(head);
        rest = tail;
    }
    while !rest.is_empty() {
        let len = 1usize << rest.len().ilog2();
        let (head, tail) = rest.split_at(len);
        out.push(head);
        rest = tail;
    }
    out
}

/// The stored rows alone, which the `Store` reads complete with the open minutes.
impl SqliteStore {
    /// The rollup job: the minutes marked before `cutoff_ms`, one transaction per chunk of GPUs
    /// (a minute, its hour and day and its mark always go together).
    async fn close_before(&self, cutoff_ms: i64) -> Result<u64> {
        let mut written = 0;
        for (gpu_lo, gpu_hi) in close::close_chunks(&self.pool, cutoff_ms).await? {
            let mut tx = crate::dialect::sqlite::begin(&self.pool).await?;
            let scope = PendingScope::ClosedBefore { cutoff_ms, gpu_lo, gpu_hi };
            written += close::close_in(&mut tx, scope, None, self.classifier.as_ref()).await?;
            tx.commit().await?;
        }
        Ok(written)
    }

    async fn stored_credits(
        &self,
        org: OrgId,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<crate::BucketCredit>> {
        let sql = format!(
            "SELECT r.gpu_id, r.bucket_ms, {} FROM {} r JOIN gpus g ON g.id = r.gpu_id \
             WHERE g.org_id = ? AND r.bucket_ms >= ? AND r.bucket_ms < ?",
            Credit::column_names().iter().map(|c| format!("r.{c}")).collect::<Vec<_>>().join(", "),
            crate::rollup_table(res)
        );
        let rows = sqlx::query(&sql).bind(org).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?)
    }

    async fn stored_hour_credit_split(
        &self,
        org: OrgId,
        from_ms: i64,
        end_ms: i64,
        first_whole_ms: i64,
        last_whole_ms: i64,
    ) -> Result<crate::HourCreditSplit> {
        const H: i64 = 3_600_000;
        let floor_from = from_ms.div_euclid(H) * H;
        let last_start = last_whole_ms - H;
        if first_whole_ms > last_start {
            // No whole hour inside the period: every hour is partial.
            let partial = self.stored_credits(org, Resolution::Hour, floor_from, end_ms).await?;
            return Ok(crate::HourCreditSplit { whole: Vec::new(), partial });
        }
        let (whole, partial) = crate::hour_credit_split_sql(first_whole_ms, last_start);
        // Four independent statements at once, each on its own pooled connection (and so its
        // own SQLite thread): WAL readers do not block each other.
        let whole_part = |sql: String| async move {
            let rows = sqlx::query(&sql).bind(org).fetch_all(&self.pool).await?;
            Ok::<_, StoreError>(rows.iter().map(columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?)
        };
        let partial = async {
            let rows = sqlx::query(&partial)
                .bind(org)
                .bind(floor_from)
                .bind(first_whole_ms)
                .bind(org)
                .bind(last_start)
                .bind(end_ms)
                .bind(org)
                .bind(first_whole_ms)
                .bind(last_start)
                .bind(org)
                .bind(first_whole_ms)
                .bind(last_start)
                .fetch_all(&self.pool)
                .await?;
            Ok::<_, StoreError>(rows.iter().map(columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?)
        };
        let (days, before, after, partial) = tokio::try_join!(
            whole_part(whole.days),
            whole_part(whole.hours_before),
            whole_part(whole.hours_after),
            partial
        )?;
        let whole = crate::sum_per_gpu(days.into_iter().chain(before).chain(after).collect());
        Ok(crate::HourCreditSplit { whole, partial })
    }

    async fn stored_peak_mem(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<(i64, i64)>> {
        let rows: Vec<(i64, Option<f64>)> = sqlx::query_as(
            "SELECT r.gpu_id, max(r.mem_used_bytes_max) FROM rollups_1h r JOIN gpus g ON g.id = r.gpu_id \
             WHERE g.org_id = ? AND r.bucket_ms > ? - 3600000 AND r.bucket_ms < ? GROUP BY r.gpu_id",
        )
        .bind(org)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().filter_map(|(id, m)| m.map(|m| (id, m as i64))).collect())
    }

    async fn stored_series(
        &self,
        gpu_id: i64,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<crate::SeriesRow>> {
        let sql = format!(
            "{} WHERE gpu_id = ? AND bucket_ms >= ? AND bucket_ms < ? ORDER BY bucket_ms",
            crate::series_select(res)
        );
        Ok(sqlx::query_as(&sql).bind(gpu_id).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?)
    }
}

/// The rollup job's loads and writes on SQLite (`rollup_close`).
mod close {
    crate::rollup_close::impl_rollup_close!(sqlx::Sqlite, crate::dialect::sqlite::q, "s.processes", sqlx::SqlitePool);
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn announce_change(&self, org: OrgId) -> Result<()> {
        self.changes.announce(org);
        Ok(())
    }

    async fn listen_changes(&self) -> Result<crate::ChangeListener> {
        Ok(self.changes.listen())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        if self.writer.is_closed() {
            return Err(StoreError::WriterGone);
        }
        Ok(())
    }

    async fn create_org(&self, name: &str, now_ms: i64) -> Result<OrgId> {
        Ok(sqlx::query_scalar("INSERT INTO orgs (name, created_ms) VALUES (?, ?) RETURNING id")
            .bind(name)
            .bind(now_ms)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn insert_api_key(&self, key: NewApiKey<'_>) -> Result<ApiKey> {
        let row = sqlx::query(
            "INSERT INTO api_keys (org_id, name, prefix, key_hash, scopes, created_ms) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(key.org_id)
        .bind(key.name)
        .bind(key.prefix)
        .bind(key.key_hash)
        .bind(crate::scopes_to_text(key.scopes))
        .bind(key.created_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(crate::api_key_from_new(row.try_get(0)?, &key))
    }

    async fn ensure_api_key(&self, key: NewApiKey<'_>) -> Result<ApiKey> {
        if let Some(existing) = self.api_key_by_hash(key.key_hash).await? {
            return Ok(existing);
        }
        self.insert_api_key(key).await
    }

    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKey>> {
        let row = sqlx::query(
            "SELECT id, org_id, name, prefix, scopes, created_ms, revoked_ms FROM api_keys WHERE key_hash = ?",
        )
        .bind(key_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| crate::api_key_from_row(&r)).transpose()
    }

    async fn ingest_with(
        &self,
        org: OrgId,
        host: &str,
        samples: Vec<Sample>,
        flags: Vec<fleetlens_core::QualityFlags>,
        rules: Option<IngestRules>,
    ) -> Result<IngestOutcome> {
        if samples.is_empty() {
            return Ok(IngestOutcome::default());
        }
        let (reply, rx) = oneshot::channel();
        let job = IngestJob { org, host: host.to_string(), samples, rules, flags, reply };
        self.writer.send(WriteJob::Ingest(job)).await.map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    async fn move_gpu(&self, org: OrgId, uuid: &str, host: &str) -> Result<bool> {
        let done = sqlx::query("UPDATE gpus SET host = ? WHERE org_id = ? AND uuid = ?")
            .bind(host)
            .bind(org)
            .bind(uuid)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(done > 0)
    }

    async fn gpu_identities(&self, org: OrgId) -> Result<Vec<GpuRecord>> {
        #[allow(clippy::type_complexity)]
        let rows: Vec<(i64, String, String, Option<i64>, Option<String>, Option<i64>, Option<f64>, i64, i64, i64)> =
            sqlx::query_as(
                "SELECT id, uuid, host, gpu_index, name, mem_total_bytes, power_limit_w, first_seen_ms, last_seen_ms, last_live_ms \
             FROM gpus WHERE org_id = ? ORDER BY host, gpu_index, uuid",
            )
            .bind(org)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    id,
                    uuid,
                    host,
                    gpu_index,
                    name,
                    mem_total_bytes,
                    power_limit_w,
                    first_seen_ms,
                    last_seen_ms,
                    last_live_ms,
                )| {
                    GpuRecord {
                        id,
                        uuid,
                        host,
                        gpu_index: gpu_index.and_then(|i| u32::try_from(i).ok()),
                        name,
                        mem_total_bytes,
                        power_limit_w,
                        first_seen_ms,
                        last_seen_ms,
                        last_live_ms,
                        latest: None,
                    }
                },
            )
            .collect())
    }

    async fn latest_minutes(&self, org: OrgId) -> Result<Vec<crate::LatestMinute>> {
        let read = || async {
            Ok(sqlx::query_as(
                "SELECT r.gpu_id, r.bucket_ms, r.state, r.sample_count, r.first_ts_ms, r.last_ts_ms \
             FROM gpus g JOIN rollups_1m r ON r.gpu_id = g.id \
             AND r.bucket_ms = g.last_seen_ms - ((g.last_seen_ms % 60000) + 60000) % 60000 WHERE g.org_id = ?",
            )
            .bind(org)
            .fetch_all(&self.pool)
            .await?)
        };
        let (stored, open) =
            close::with_open(&self.pool, PendingScope::OrgLatest(org), self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_latest(stored, &open))
    }

    async fn latest_minutes_of(&self, org: OrgId, gpu_ids: &[i64]) -> Result<Vec<crate::LatestMinute>> {
        let mut out = Vec::with_capacity(gpu_ids.len());
        for chunk in gpu_ids.chunks(rc::GPUS_PER_LATEST_READ) {
            let sql = crate::dialect::sqlite::q(&rc::stored_latest_of_sql(chunk.len())).into_owned();
            let read = || async {
                let mut query = sqlx::query_as(&sql).bind(org);
                for id in chunk {
                    query = query.bind(*id);
                }
                Ok(query.fetch_all(&self.pool).await?)
            };
            let scope = PendingScope::GpusLatest { org, gpu_ids: chunk };
            let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
            out.extend(rc::overlay_latest(stored, &open));
        }
        Ok(out)
    }

    async fn gpus(&self, org: OrgId) -> Result<Vec<GpuRecord>> {
        let sql =
            format!("{} WHERE g.org_id = ? ORDER BY g.host, g.gpu_index, g.uuid", columns::gpu_select("s.processes"));
        let rows: Vec<GpuRow> = sqlx::query_as(&sql).bind(org).fetch_all(&self.pool).await?;
        let mut records: Vec<GpuRecord> = rows.into_iter().map(GpuRow::into_record).collect();
        self.fill_sealed_latest(&mut records).await?;
        Ok(records)
    }

    async fn gpu(&self, org: OrgId, uuid: &str) -> Result<Option<GpuRecord>> {
        let sql = format!("{} WHERE g.org_id = ? AND g.uuid = ?", columns::gpu_select("s.processes"));
        let row: Option<GpuRow> = sqlx::query_as(&sql).bind(org).bind(uuid).fetch_optional(&self.pool).await?;
        let mut records: Vec<GpuRecord> = row.into_iter().map(GpuRow::into_record).collect();
        self.fill_sealed_latest(&mut records).await?;
        Ok(records.pop())
    }

    async fn samples(&self, gpu_id: i64, from_ms: i64, to_ms: i64, limit: u32) -> Result<Vec<Sample>> {
        let ident = sqlx::query("SELECT uuid, gpu_index, name FROM gpus WHERE id = ?")
            .bind(gpu_id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(ident) = ident else { return Ok(Vec::new()) };
        let (uuid, index, name): (String, Option<i64>, Option<String>) =
            (ident.try_get(0)?, ident.try_get(1)?, ident.try_get(2)?);
        let sql = format!(
            "SELECT s.ts_ms, {} FROM samples s WHERE s.gpu_id = ? AND s.ts_ms >= ? AND s.ts_ms < ? ORDER BY s.ts_ms LIMIT ?",
            columns::sample_select_list("s", "s.processes")
        );
        let rows: Vec<SampleRow> = sqlx::query_as(&sql)
            .bind(gpu_id)
            .bind(from_ms)
            .bind(to_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        let index = index.and_then(|i| u32::try_from(i).ok());
        let open: Vec<Sample> =
            rows.into_iter().map(|r| r.values.into_sample(r.ts_ms, &uuid, index, name.as_deref())).collect();
        let sealed = blocks::sqlite::samples(&self.pool, gpu_id, from_ms, to_ms).await?;
        let sealed = sealed.into_iter().map(|s| blocks::with_identity(s, &uuid, index, name.as_deref())).collect();
        let mut merged = blocks::merge(sealed, open);
        merged.truncate(limit as usize);
        Ok(merged)
    }

    async fn rollups(&self, gpu_id: i64, res: Resolution, from_ms: i64, to_ms: i64) -> Result<Vec<RollupBucket>> {
        let sql = format!(
            "SELECT gpu_id, bucket_ms, {} FROM {} WHERE gpu_id = ? AND bucket_ms >= ? AND bucket_ms < ? ORDER BY bucket_ms",
            columns::rollup_columns().join(", "),
            crate::rollup_table(res)
        );
        let read = || async {
            let rows = sqlx::query(&sql).bind(gpu_id).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
            rows.iter().map(|r| columns::rollup_from_row(r, gpu_id).map_err(StoreError::from)).collect()
        };
        let (lo, hi) = minute_range(res, from_ms, to_ms);
        let scope = PendingScope::Gpu { gpu_id, from_ms: lo, to_ms: hi };
        let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_rollups(stored, res, &open))
    }

    async fn org_rollups(&self, org: OrgId, res: Resolution, from_ms: i64, to_ms: i64) -> Result<Vec<RollupBucket>> {
        let sql = format!(
            "SELECT r.* FROM {} r JOIN gpus g ON g.id = r.gpu_id \
             WHERE g.org_id = ? AND r.bucket_ms >= ? AND r.bucket_ms < ? ORDER BY r.gpu_id, r.bucket_ms",
            crate::rollup_table(res)
        );
        let read = || async {
            let rows = sqlx::query(&sql).bind(org).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
            rows.iter().map(|r| columns::rollup_from_row(r, r.try_get("gpu_id")?).map_err(StoreError::from)).collect()
        };
        let (lo, hi) = minute_range(res, from_ms, to_ms);
        let scope = PendingScope::Org { org, from_ms: lo, to_ms: hi };
        let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_rollups(stored, res, &open))
    }

    async fn org_credits(
        &self,
        org: OrgId,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<crate::BucketCredit>> {
        let read = || self.stored_credits(org, res, from_ms, to_ms);
        let (lo, hi) = minute_range(res, from_ms, to_ms);
        let scope = PendingScope::Org { org, from_ms: lo, to_ms: hi };
        let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_credits(stored, res, &open))
    }

    async fn org_hour_credit_split(
        &self,
        org: OrgId,
        from_ms: i64,
        end_ms: i64,
        first_whole_ms: i64,
        last_whole_ms: i64,
    ) -> Result<crate::HourCreditSplit> {
        let read = || self.stored_hour_credit_split(org, from_ms, end_ms, first_whole_ms, last_whole_ms);
        let (lo, hi) = minute_range(Resolution::Hour, from_ms.div_euclid(3_600_000) * 3_600_000, end_ms);
        let scope = PendingScope::Org { org, from_ms: lo, to_ms: hi };
        let (mut split, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
        if !open.is_empty() {
            let spans = self
                .gpu_identities(org)
                .await?
                .into_iter()
                .map(|g| (g.id, (g.first_seen_ms, g.last_seen_ms)))
                .collect();
            let period = rc::SplitPeriod { from_ms, end_ms, first_whole_ms, last_whole_ms };
            rc::overlay_split(&mut split, &open, &spans, period);
        }
        Ok(split)
    }

    async fn org_peak_mem(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<(i64, i64)>> {
        let read = || self.stored_peak_mem(org, from_ms, to_ms);
        let (lo, hi) = minute_range(Resolution::Hour, from_ms - 3_600_000 + 1, to_ms);
        let scope = PendingScope::Org { org, from_ms: lo, to_ms: hi };
        let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_peak_mem(stored, &open))
    }

    async fn series(&self, gpu_id: i64, res: Resolution, from_ms: i64, to_ms: i64) -> Result<Vec<crate::SeriesRow>> {
        let (lo, hi) = minute_range(res, from_ms, to_ms);
        let scope = PendingScope::Gpu { gpu_id, from_ms: lo, to_ms: hi };
        match res {
            Resolution::Minute => {
                let read = || self.stored_series(gpu_id, res, from_ms, to_ms);
                let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
                Ok(rc::overlay_minute_series(stored, &open))
            }
            // Hours from their rollups, with the open minutes in (the chart columns are theirs).
            Resolution::Hour => {
                Ok(self.rollups(gpu_id, res, from_ms, to_ms).await?.iter().map(|b| rc::series_row(b, None)).collect())
            }
        }
    }

    async fn close_minutes(&self, now_ms: i64, lateness_ms: i64) -> Result<u64> {
        self.close_before(rc::close_cutoff(now_ms, lateness_ms)).await
    }

    async fn org_process_lists(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<crate::ProcessList>> {
        // Process lists rarely change within a minute: group identical ones (each sample still
        // counts once), so a report parses a few lists per GPU-minute instead of 60.
        let rows: Vec<(i64, i64, Option<String>, Option<String>, i64)> = sqlx::query_as(
            "SELECT s.gpu_id, (s.ts_ms / 60000) * 60000 AS minute_ms, s.processes AS procs, \
             s.allocations AS allocs, count(*) AS n \
             FROM samples s JOIN gpus g ON g.id = s.gpu_id \
             WHERE g.org_id = ? AND s.ts_ms >= ? AND s.ts_ms < ? \
             GROUP BY s.gpu_id, minute_ms, procs, allocs ORDER BY s.gpu_id, minute_ms",
        )
        .bind(org)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        let sealed = blocks::sqlite::org_samples(&self.pool, org, from_ms, to_ms).await?;
        let rows = blocks::add_sealed_process_groups(rows, sealed);
        Ok(rows
            .into_iter()
            .map(|(gpu_id, minute_ms, p, a, n)| crate::ProcessList {
                gpu_id,
                minute_ms,
                processes: p.and_then(|p| serde_json::from_str(&p).ok()),
                allocations: columns::parse_allocations(a.as_deref()),
                samples: u32::try_from(n).unwrap_or(u32::MAX),
            })
            .collect())
    }

    async fn settings_by_key(&self, key: &str) -> Result<Vec<(OrgId, String)>> {
        Ok(sqlx::query_as("SELECT org_id, value FROM org_settings WHERE key = ?")
            .bind(key)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn setting(&self, org: OrgId, key: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("SELECT value FROM org_settings WHERE org_id = ? AND key = ?")
            .bind(org)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn put_setting(&self, org: OrgId, key: &str, value: &str, now_ms: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO org_settings (org_id, key, value, updated_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT (org_id, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
        )
        .bind(org)
        .bind(key)
        .bind(value)
        .bind(now_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn insert_job(&self, org: OrgId, job: &crate::JobRecord) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO jobs (org_id, name, gpu_uuids, from_ms, to_ms, precision, achieved_flops_per_s, created_ms) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(org)
        .bind(&job.name)
        .bind(serde_json::to_string(&job.gpu_uuids).expect("uuids serialize"))
        .bind(job.from_ms)
        .bind(job.to_ms)
        .bind(&job.precision)
        .bind(job.achieved_flops_per_s)
        .bind(job.created_ms)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn jobs(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<crate::JobRecord>> {
        let rows =
            sqlx::query("SELECT * FROM jobs WHERE org_id = ? AND to_ms > ? AND from_ms < ? ORDER BY from_ms, id")
                .bind(org)
                .bind(from_ms)
                .bind(to_ms)
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(crate::job_from_row).collect()
    }

    async fn sample_count(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM samples").fetch_one(&self.pool).await?;
        Ok(n as u64 + blocks::sqlite::count(&self.pool).await?)
    }

    async fn seal_closed_hours(&self, now_ms: i64, max_blocks: u64) -> Result<crate::SealReport> {
        blocks::sqlite::seal(&self.pool, now_ms, max_blocks).await
    }

    async fn apply_retention(&self, policy: RetentionPolicy, now_ms: i64) -> Result<RetentionReport> {
        // Minutes whose raw samples are about to go are written first (what the job would do).
        self.close_before(now_ms - policy.raw_ms).await?;
        let gpu_ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM gpus").fetch_all(&self.pool).await?;
        let mut report = RetentionReport::default();
        report.samples += blocks::sqlite::drop_before(&self.pool, now_ms - policy.raw_ms).await?;
        let (mut days_deleted, mut flags_deleted) = (0, 0);
        for (table, keep_ms, key, counter) in [
            ("samples", policy.raw_ms, "ts_ms", &mut report.samples),
            // The flags go with their samples.
            ("sample_flags", policy.raw_ms, "ts_ms", &mut flags_deleted),
            ("rollups_1m", policy.rollup_1m_ms, "bucket_ms", &mut report.rollups_1m),
            ("rollups_1h", policy.rollup_1h_ms, "bucket_ms", &mut report.rollups_1h),
            // After the hours (see `day_retention_step`).
            ("credits_1d", policy.rollup_1h_ms, "day_ms", &mut days_deleted),
        ] {
            // Short steps through the writer, along the primary key: ingest batches queue
            // between them instead of waiting on the database lock.
            for chunk in gpu_ids.chunks(RETENTION_GPUS_PER_STEP) {
                loop {
                    let (reply, rx) = oneshot::channel();
                    let job = RetentionJob { table, key, gpu_ids: chunk.to_vec(), cutoff_ms: now_ms - keep_ms, reply };
                    self.writer.send(WriteJob::Retention(job)).await.map_err(|_| StoreError::WriterGone)?;
                    let (deleted, more) = rx.await.map_err(|_| StoreError::WriterGone)??;
                    *counter += deleted;
                    if !more {
                        break;
                    }
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::bounded_chunks;

    #[test]
    fn chunks_cover_the_items_in_order_with_few_lengths() {
        let mut lengths = BTreeSet::new();
        for n in 0..=2_600 {
            let items: Vec<usize> = (0..n).collect();
            let chunks = bounded_chunks(&items, 200);
            assert_eq!(chunks.concat(), items, "n = {n}: every item once, in order");
            assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= 200));
            lengths.extend(chunks.iter().map(|c| c.len()));
        }
        // 200 and the powers of two below it: 9 statement texts for any batch size.
        assert_eq!(lengths.len(), 9, "{lengths:?}");
        assert_eq!(bounded_chunks(&[0; 2_000], 1_230).iter().map(|c| c.len()).max(), Some(super::MAX_STATEMENT_ROWS));
        assert_eq!(bounded_chunks(&[1; 7], 1000).iter().map(|c| c.len()).collect::<Vec<_>>(), [4, 2, 1]);
    }
}
