//! SQLite backend: WAL, `synchronous=NORMAL`, and one writer (a task on a thread of its own)
//! that groups the batches of many concurrent requests into one transaction (group commit).
//! Reads use a pool; a checkpointer copies the WAL into the database file.

// foldhash, not SipHash, for the maps the writer consults once or more per sample.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::str::FromStr;
use std::time::Duration;

use std::sync::Arc;

use fleetlens_core::Sample;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, QueryBuilder, Row, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot, watch};

use crate::blocks;
use crate::columns;
use crate::credits::MinuteClassifier;
use crate::ingest_rules::{self, IngestRules, KnownGpu};
use crate::{IngestOutcome, OrgId, Result, RetentionPolicy, RetentionReport, SampleBatch, StoreError};

/// Rows a group commit gathers at most before it commits.
const MAX_GROUP_ROWS: usize = 100_000;
/// SQLite allows 32,766 bound variables per statement.
/// A sample row binds five: gpu_id, ts_ms, vals, processes, allocations.
pub(crate) const SAMPLE_ROWS_PER_STATEMENT: usize = 32_000 / 5;
/// Rows deleted per retention statement, so the writer lock is never held long.
const RETENTION_CHUNK: i64 = 20_000;

struct IngestJob {
    batch: SampleBatch,
    /// The batch's samples as stored, in the batch's order ([`encode_rows`]).
    encoded: Vec<EncodedRow>,
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

/// What the writer owns.
struct Writer {
    conn: SqliteConnection,
    /// Told of each commit, for [`checkpoint_loop`]; dropped with the writer, which ends that
    /// loop.
    committed: watch::Sender<()>,
}

impl Writer {
    fn committed(&self) {
        self.committed.send_replace(());
    }
}

/// How long the checkpointer gathers commits before it copies them: a page written by several
/// commits of that while is copied into the database file once.
const CHECKPOINT_GATHER: Duration = Duration::from_millis(250);
/// How long the checkpointer waits for a commit of the writer before it checkpoints anyway.
const CHECKPOINT_IDLE: Duration = Duration::from_secs(5);

/// Copies the WAL into the database file on a connection of its own, after commits. With
/// SQLite's automatic checkpoint, the commit that crossed 1,000 WAL pages copied them itself,
/// inside the one writer that every batch waits for. A PASSIVE checkpoint takes no write lock:
/// it copies while the writer appends, and the writer starts the WAL over once it is copied.
async fn checkpoint_loop(mut conn: SqliteConnection, mut committed: watch::Receiver<()>) {
    loop {
        match tokio::time::timeout(CHECKPOINT_IDLE, committed.changed()).await {
            // The writer is gone with its store.
            Ok(Err(_)) => return,
            Ok(Ok(())) => tokio::time::sleep(CHECKPOINT_GATHER).await,
            // No ingest: what the pooled connections wrote (sealing, the rollup job) is copied too.
            Err(_) => {}
        }
        committed.mark_unchanged();
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&mut conn).await {
            tracing::warn!(error = %e, "WAL checkpoint failed; the next commit tries again");
        }
    }
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
    pub async fn open(url: &str, classifier: Arc<dyn MinuteClassifier>) -> Result<Self> {
        let opts = options(url)?;
        // Only the checkpointer ([`checkpoint_loop`]) checkpoints the WAL. A pooled connection's
        // small write (the alert engine's lease renewal, say) would otherwise run the automatic
        // checkpoint whenever its commit crosses the 1,000-page mark, copying megabytes into the
        // database file inside that statement: the 2,000-GPU soak logged such lease upserts at
        // 1.1-2.3 s.
        let readers = opts.clone().pragma("cache_size", READER_CACHE_KIB).pragma("wal_autocheckpoint", "0");
        let pool = SqlitePoolOptions::new().max_connections(8).connect_with(readers.clone()).await?;
        // Migrations run on their own connection with foreign keys off, as SQLite's procedure
        // for rebuilding a table asks (migration 0009): sqlx runs each migration in a
        // transaction, where the pragma cannot be changed, and with the keys on, dropping the
        // old `teams` would run its children's ON DELETE actions. Checked afterwards.
        let mut migrating = SqliteConnection::connect_with(&opts.clone().foreign_keys(false)).await?;
        let migrations = sqlx::migrate!("../../migrations/sqlite");
        crate::row_values::legacy::migrations_before_columns_dropped(&migrations).run(&mut migrating).await?;
        let converted = crate::row_values::legacy::convert_sqlite(&mut migrating).await?;
        if converted > 0 {
            tracing::info!(rows = converted, "open sample rows converted to one values column (migration 0028)");
        }
        migrations.run(&mut migrating).await?;
        let broken: Vec<(String,)> =
            sqlx::query_as("SELECT DISTINCT \"table\" FROM pragma_foreign_key_check").fetch_all(&mut migrating).await?;
        if !broken.is_empty() {
            return Err(StoreError::Invalid(format!("rows of {broken:?} point at rows that do not exist")));
        }
        migrating.close().await?;
        let conn = SqliteConnection::connect_with(&opts.clone().pragma("wal_autocheckpoint", "0")).await?;
        let (committed, commits) = watch::channel(());
        tokio::spawn(checkpoint_loop(SqliteConnection::connect_with(&readers).await?, commits));
        let (tx, rx) = mpsc::channel(1024);
        // Its own thread: every batch waits for the writer in turn, and each of its statements is
        // a round trip to the connection's thread, after which the writer must run again at
        // once, not wait for a runtime worker that is decoding a batch or judging alerts.
        let writer = Writer { conn, committed };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let runtime = runtime.map_err(|e| StoreError::Invalid(format!("the SQLite writer's runtime: {e}")))?;
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || runtime.block_on(writer_loop(writer, rx)))
            .map_err(|e| StoreError::Invalid(format!("the SQLite writer's thread: {e}")))?;
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
                w.committed();
                let _ = job.reply.send(result);
                continue;
            }
        };
        let mut rows = first.batch.samples.len();
        let mut jobs = vec![first];
        while rows < MAX_GROUP_ROWS {
            match rx.try_recv() {
                Ok(WriteJob::Ingest(job)) => {
                    rows += job.batch.samples.len();
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
            w.committed();
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
        if let Some(rules) = &job.batch.rules {
            check_rules(conn, job.batch.org, &job.batch.host, &job.batch.samples, rules).await?;
        }
        let (ids, seqs) = upsert_gpus(conn, job.batch.org, &job.batch.host, &job.batch.samples).await?;
        // The writer is the only one writing, so "new" can be decided before inserting: probe
        // each GPU's time span once (a cheap index range, usually empty), insert only the rest.
        let existing = existing_keys(conn, &job.batch.samples, &ids).await?;
        let mut seen: HashSet<(i64, i64)> = HashSet::with_capacity(job.batch.samples.len());
        let fresh: Vec<(usize, &Sample)> = job
            .batch
            .samples
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let key = (ids[s.uuid.as_str()], s.ts_ms);
                !existing.contains(&key) && seen.insert(key)
            })
            .collect();
        let rows: Vec<(i64, i64, &EncodedRow)> =
            fresh.iter().map(|&(i, s)| (ids[s.uuid.as_str()], s.ts_ms, &job.encoded[i])).collect();
        for chunk in bounded_chunks(&rows, SAMPLE_ROWS_PER_STATEMENT) {
            let done = insert_encoded_rows(conn, chunk, "").await?;
            if done != chunk.len() as u64 {
                return Err(StoreError::Invalid(format!("inserted {done} of {} new samples", chunk.len())));
            }
        }
        let new = collect_new(job, &ids, seen, &mut new_keys, &mut flagged);
        let fills = crate::merge::sqlite::fill_stored(conn, &colliding(job, &ids, &existing)).await?;
        // A filled-in sample changes its minute: the minute is written (again) from the rows.
        crate::merge::mark_fills(&fills, &mut new_keys, &mut flagged);
        let (inserted, merged) = (new.len() as u64, fills.len() as u64);
        outcomes.push(IngestOutcome {
            inserted,
            merged,
            duplicates: job.batch.samples.len() as u64 - inserted - merged,
            written: crate::data_path::written_by_gpu(&seqs, new, fills.iter().map(|f| f.gpu_id)),
        });
    }
    // The rollups of these samples are written once their minutes close (`rollup_close`).
    close::mark_new(conn, &new_keys, &flagged, crate::rollup_close::wall_clock_ms()).await?;
    Ok(outcomes)
}

/// Keys of `samples` already stored: one statement for the batch, an index range per GPU.
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
    let spans: Vec<(i64, i64, i64)> = spans.into_iter().map(|(id, (lo, hi))| (id, lo, hi)).collect();
    // A late sample for a sealed hour: the hour goes back to open rows first (see
    // `blocks::sqlite::unseal_within`), so the probe below sees its samples.
    blocks::sqlite::unseal_within(conn, &spans).await?;
    let found: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT s.gpu_id, s.ts_ms FROM json_each(?) j CROSS JOIN samples s \
         ON s.gpu_id = j.value ->> 0 AND s.ts_ms BETWEEN j.value ->> 1 AND j.value ->> 2",
    )
    .bind(serde_json::to_string(&spans).expect("numbers serialize"))
    .fetch_all(&mut *conn)
    .await?;
    Ok(found.into_iter().collect())
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
    job.batch
        .samples
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let key = (ids[s.uuid.as_str()], s.ts_ms);
            (existing.contains(&key) && seen.insert(key))
                .then(|| (key.0, s, job.batch.flags.get(i).copied().unwrap_or_default()))
        })
        .collect()
}

/// The keys of the samples that this transaction newly stored (into `new_keys`) and the flags
/// of those that had any (into `flagged`); returns them as `(gpu_id, index in the batch)`.
/// Only new samples count, so a resent batch marks no minute.
fn collect_new(
    job: &IngestJob,
    ids: &HashMap<String, i64>,
    mut inserted_keys: HashSet<(i64, i64)>,
    new_keys: &mut Vec<(i64, i64)>,
    flagged: &mut Vec<(i64, i64, i64)>,
) -> Vec<(i64, u32)> {
    let mut inserted = Vec::with_capacity(inserted_keys.len());
    for (i, s) in job.batch.samples.iter().enumerate() {
        let key = (ids[s.uuid.as_str()], s.ts_ms);
        // remove(): a sample repeated inside one batch counts once.
        if inserted_keys.remove(&key) {
            inserted.push((key.0, i as u32));
            new_keys.push(key);
            let flags = job.batch.flags.get(i).copied().unwrap_or_default();
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
) -> Result<(HashMap<String, i64>, Vec<(i64, i64)>)> {
    let gpus = columns::gpu_upserts(samples);
    let mut ids = HashMap::with_capacity(gpus.len());
    let mut seqs = Vec::with_capacity(gpus.len());
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
        qb.push(columns::gpu_upsert_tail("min", "max", columns::SeqStep::Batch));
        for row in qb.build().fetch_all(&mut *conn).await? {
            let id: i64 = row.try_get(0)?;
            ids.insert(row.try_get::<String, _>(1)?, id);
            seqs.push((id, row.try_get(2)?));
        }
    }
    Ok((ids, seqs))
}

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
    let encoded = encode_rows(rows.iter().map(|&(_, s)| s));
    let rows: Vec<(i64, i64, &EncodedRow)> =
        rows.iter().zip(&encoded).map(|(&(gpu_id, s), e)| (gpu_id, s.ts_ms, e)).collect();
    insert_encoded_rows(conn, &rows, tail).await
}

/// [`insert_sample_rows`] of rows already encoded: `(gpu_id, ts_ms, row)`.
async fn insert_encoded_rows(conn: &mut SqliteConnection, rows: &[(i64, i64, &EncodedRow)], tail: &str) -> Result<u64> {
    let mut qb: QueryBuilder<Sqlite> =
        QueryBuilder::new("INSERT INTO samples (gpu_id, ts_ms, vals, processes, allocations) ");
    qb.push_values(rows, |mut b, &(gpu_id, ts_ms, row)| {
        b.push_bind(gpu_id).push_bind(ts_ms).push_bind(row.vals.as_slice());
        b.push_bind(row.processes.as_deref());
        b.push_bind(row.allocations.as_deref());
    });
    qb.push(tail);
    Ok(qb.build().execute(&mut *conn).await?.rows_affected())
}

/// A sample as `samples` stores it: the values' payload ([`crate::row_values`]), the process
/// list and the allocations as JSON text.
pub(crate) struct EncodedRow {
    vals: Vec<u8>,
    processes: Option<Arc<str>>,
    allocations: Option<String>,
}

/// `samples` as stored, in their order. Ingest encodes on the request's task before the batch
/// queues for the one writer, so that concurrent requests encode in parallel and the writer,
/// which every batch passes in turn, only binds.
pub(crate) fn encode_rows<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Vec<EncodedRow> {
    // A GPU's process list seldom changes from one sample to the next: serialised once per change.
    let mut last: HashMap<&str, (&Vec<fleetlens_core::GpuProcess>, Arc<str>)> = HashMap::new();
    samples
        .into_iter()
        .map(|s| {
            let processes = s.processes.as_ref().map(|list| match last.get(s.uuid.as_str()) {
                Some((prev, text)) if *prev == list => text.clone(),
                _ => {
                    let text: Arc<str> = columns::processes_json(s).expect("a list").into();
                    last.insert(s.uuid.as_str(), (list, text.clone()));
                    text
                }
            });
            EncodedRow { vals: crate::row_values::encode(s), processes, allocations: columns::allocations_json(s) }
        })
        .collect()
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

impl SqliteStore {
    /// One statement of [`crate::whole_credit_sql`] (for `impl_store!`): WAL readers do not block
    /// each other, so each runs on its own pooled connection.
    async fn whole_credit_rows(&self, sql: &str, org: OrgId, _nested_loop: bool) -> Result<Vec<crate::BucketCredit>> {
        let rows = sqlx::query(sql).bind(org).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?)
    }
}

/// The rollup job's loads and writes on SQLite (`rollup_close`).
mod close {
    crate::rollup_close::impl_rollup_close!(sqlx::Sqlite, sqlite);
}

impl SqliteStore {
    /// [`SampleStore::ingest_with`](crate::SampleStore::ingest_with), for `impl_store!`.
    async fn ingest_batch(&self, batch: SampleBatch) -> Result<IngestOutcome> {
        let (reply, rx) = oneshot::channel();
        let encoded = encode_rows(batch.samples.iter());
        self.writer
            .send(WriteJob::Ingest(IngestJob { batch, encoded, reply }))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }
}

crate::shared_store::impl_store!(SqliteStore, sqlite, {
    fn backend(&self) -> fleetlens_core::StoreBackend {
        fleetlens_core::StoreBackend::Sqlite
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

    async fn apply_retention(&self, policy: RetentionPolicy, now_ms: i64) -> Result<RetentionReport> {
        // Minutes whose raw samples are about to go are written first (what the job would do).
        self.close_before(now_ms - policy.raw_ms).await?;
        let gpu_ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM gpus").fetch_all(&self.pool).await?;
        let mut report = RetentionReport::default();
        report.samples += blocks::sqlite::drop_before(&self.pool, now_ms - policy.raw_ms).await?;
        report.rollups_1m += blocks::sqlite::drop_minutes_before(&self.pool, now_ms - policy.rollup_1m_ms).await?;
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
});

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use fleetlens_core::{GpuProcess, Sample};

    use super::{bounded_chunks, columns, encode_rows};
    use crate::{DEFAULT_ORG, SampleBatch, SampleStore};

    #[test]
    fn each_row_stores_its_own_process_list_when_lists_are_reused() {
        let list = |pid| Some(vec![GpuProcess { pid, command: Some(format!("p{pid}")), ..GpuProcess::default() }]);
        let at = |uuid: &str, ts_ms, processes| Sample { uuid: uuid.into(), ts_ms, processes, ..Sample::default() };
        // Two GPUs interleaved; a list that changes and changes back; an absent list.
        let samples = [
            at("A", 1, list(1)),
            at("B", 1, list(2)),
            at("A", 2, list(1)),
            at("B", 2, list(1)),
            at("A", 3, list(3)),
            at("A", 4, None),
            at("A", 5, list(1)),
        ];
        let rows = encode_rows(samples.iter());
        assert_eq!(rows.len(), samples.len());
        for (row, s) in rows.iter().zip(&samples) {
            assert_eq!(row.processes.as_deref(), columns::processes_json(s).as_deref(), "{s:?}");
            assert_eq!(row.vals, crate::row_values::encode(s));
        }
    }

    /// The writer's connection never checkpoints: the checkpointer copies committed pages into
    /// the database file while the store stays open (with neither, the file would not grow
    /// until the last connection closed).
    #[tokio::test]
    async fn the_checkpointer_copies_commits_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.db");
        let store = super::SqliteStore::open(
            &format!("sqlite://{}", path.display()),
            Arc::new(crate::credits::DefaultClassifier),
        )
        .await
        .unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let now = crate::rollup_close::wall_clock_ms();
        let samples: Vec<Sample> = (0..4_000)
            .map(|i| Sample { uuid: format!("G{}", i % 8), ts_ms: now - 60_000 + i / 8, ..Sample::default() })
            .collect();
        let outcome = store.ingest_with(SampleBatch::new(DEFAULT_ORG, "n1", Arc::from(samples))).await.unwrap();
        assert_eq!(outcome.inserted, 4_000);
        // Sooner than the idle checkpoint: the writer's commit itself sets the checkpointer off.
        let deadline = std::time::Instant::now() + super::CHECKPOINT_IDLE / 2;
        let mut after = before;
        while after < before + 100_000 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            after = std::fs::metadata(&path).unwrap().len();
        }
        assert!(after >= before + 100_000, "database file {before} -> {after} bytes while the store is open");
        // Without ingest, the pooled connections' writes (sealing, rollups) are copied too.
        let before = after;
        sqlx::query("CREATE TABLE filler (b BLOB)").execute(store.pool()).await.unwrap();
        sqlx::query("INSERT INTO filler VALUES (zeroblob(400000))").execute(store.pool()).await.unwrap();
        let deadline = std::time::Instant::now() + super::CHECKPOINT_IDLE * 3;
        while after < before + 400_000 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            after = std::fs::metadata(&path).unwrap().len();
        }
        assert!(after >= before + 400_000, "database file {before} -> {after} bytes after a pooled write");
    }

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
