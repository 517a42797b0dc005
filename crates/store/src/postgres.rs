//! PostgreSQL backend: each batch is one transaction of a few round trips whatever its size:
//! the GPU registry as one `UNNEST` upsert, the samples as per-batch blocks by binary `COPY`
//! (`pg_batches`; rows, `pg_samples`, where the batch meets what is stored), the minutes to roll
//! up as multi-row inserts. Everything is written in a fixed key order so concurrent transactions
//! cannot deadlock on each other's index entries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fleetlens_core::Sample;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, Row, Transaction};

use crate::blocks;
use crate::columns;
use crate::credits::MinuteClassifier;
use crate::ingest_rules::{self, IngestRules, KnownGpu};
use crate::pg_samples::{self, InsertMode};
use crate::{IngestOutcome, OrgId, Result, RetentionPolicy, RetentionReport, SampleBatch, StoreError};

/// Transactions that lose a deadlock or serialization race are retried this many times.
const MAX_ATTEMPTS: u32 = 5;

pub struct PgStore {
    pool: PgPool,
    classifier: Arc<dyn MinuteClassifier>,
}

impl PgStore {
    pub async fn open(url: &str, classifier: Arc<dyn MinuteClassifier>) -> Result<Self> {
        let opts: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await?;
        let migrations = sqlx::migrate!("../../migrations/postgres");
        crate::row_values::legacy::migrations_before_columns_dropped(&migrations).run(&pool).await?;
        let converted = crate::row_values::legacy::convert_pg(&pool).await?;
        if converted > 0 {
            tracing::info!(rows = converted, "open sample rows converted to one values column (migration 0028)");
        }
        migrations.run(&pool).await?;
        // The open tables' partitions of this hour and the next, before the first batch (the
        // sealing job, which keeps them prepared, first runs a whole interval after start).
        blocks::hourly::prepare(&pool, crate::rollup_close::wall_clock_ms()).await?;
        Ok(Self { pool, classifier })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn ingest_once(&self, batch: &SampleBatch, mode: InsertMode) -> Result<IngestOutcome> {
        let SampleBatch { org, ref host, ref samples, ref flags, ref rules } = *batch;
        if let Some(rules) = rules {
            register_gpus(&self.pool, org, host, samples, rules).await?;
        }
        let mut tx = self.pool.begin().await?;
        let (ids, seqs) = upsert_gpus(&mut tx, org, host, samples, columns::SeqStep::Batch).await?;
        // A sample's place in the batch, and so its flags (its address is its identity here:
        // `order` holds references into `samples`).
        let base = samples.as_ptr() as usize;
        let index_of = |s: &Sample| (s as *const Sample as usize - base) / std::mem::size_of::<Sample>();
        let flag_of = |s: &Sample| flags.get(index_of(s)).copied().unwrap_or_default();
        // Each sample's GPU id looked up once (not once per comparison of the sort, and again
        // for the COPY and the rollups: that hashing was ~10 % of the server's ingest CPU).
        let mut order: Vec<(i64, &Sample)> = samples.iter().map(|s| (ids[s.uuid.as_str()], s)).collect();
        order.sort_by_key(|&(gpu_id, s)| (gpu_id, s.ts_ms));

        // Late samples for sealed hours: those hours go back to open rows first.
        blocks::pg::unseal_for_batch(&mut tx, &order).await?;
        let fresh = crate::pg_batches::insert(&mut tx, &order, mode).await?;
        let inserted = fresh.len() as u64;
        let fills = if mode == InsertMode::SkipStored {
            let colliding = pg_samples::not_inserted(&order, &fresh, flag_of);
            crate::merge::pg::fill_stored(&mut tx, &colliding).await?
        } else {
            Vec::new()
        };
        let filled = fills.len() as u64;
        let mut new_keys: Vec<(i64, i64)> = fresh.iter().map(|&(gpu_id, s)| (gpu_id, s.ts_ms)).collect();
        let mut flagged: Vec<(i64, i64, i64)> = fresh
            .iter()
            .filter_map(|&(gpu_id, s)| {
                let f = flag_of(s);
                (!f.is_empty()).then(|| (gpu_id, s.ts_ms, f.bits()))
            })
            .collect();
        // A filled-in sample changes its minute: the minute is written (again) from the rows.
        crate::merge::mark_fills(&fills, &mut new_keys, &mut flagged);
        // The rollups of these samples are written once their minutes close (`rollup_close`).
        close::mark_new(&mut tx, &new_keys, &flagged, crate::rollup_close::wall_clock_ms()).await?;
        tx.commit().await?;
        let written = crate::data_path::written_by_gpu(
            &seqs,
            fresh.iter().map(|&(gpu_id, s)| (gpu_id, index_of(s) as u32)),
            fills.iter().map(|f| f.gpu_id),
        );
        Ok(IngestOutcome { inserted, merged: filled, duplicates: samples.len() as u64 - inserted - filled, written })
    }
}

/// Key of the advisory lock that serialises, per organisation, the batches that add GPUs or
/// hosts, so two of them cannot both pass a quota that only one fits under.
const QUOTA_LOCK: i32 = 0x464c_5130; // "FLQ0"

/// What a batch adds to its organisation's registry, found before it writes: the quotas it
/// must then be checked against ([`enforce_quotas`]).
#[derive(Debug, Clone, Copy)]
struct RegistryGrowth {
    /// GPUs of the batch the organisation does not have yet.
    adding_gpus: u64,
    /// The batch's host is new to the organisation, or one of its GPUs moves to it.
    host_may_be_new: bool,
}

/// The batch against the GPU-host rule ([`IngestRules`]); what it adds to the registry, when it
/// adds anything (most batches come from GPUs and hosts already registered: `None`).
async fn check_hosts(
    pool: &PgPool,
    org: OrgId,
    host: &str,
    samples: &[Sample],
    rules: &IngestRules,
) -> Result<Option<RegistryGrowth>> {
    let uuids = ingest_rules::batch_uuids(samples);
    let known: Vec<KnownGpu> =
        sqlx::query_as("SELECT uuid, host, last_seen_ms FROM gpus WHERE org_id = $1 AND uuid = ANY($2)")
            .bind(org)
            .bind(&uuids)
            .fetch_all(pool)
            .await?;
    rules.check_hosts(host, &known)?;
    let adding_gpus = (uuids.len() - known.len()) as u64;
    let moving = known.iter().any(|g| g.host != host);
    if adding_gpus == 0 && !moving {
        return Ok(None);
    }
    let host_known: Option<i32> = sqlx::query_scalar("SELECT 1 FROM gpus WHERE org_id = $1 AND host = $2 LIMIT 1")
        .bind(org)
        .bind(host)
        .fetch_optional(pool)
        .await?;
    Ok(Some(RegistryGrowth { adding_gpus, host_may_be_new: host_known.is_none() }))
}

/// The batch against the GPU-host rule and, when it adds GPUs or a host, the organisation's
/// quotas, in a short transaction of its own that registers its GPUs before the samples are
/// written: the per-organisation quota lock is then held for two counts and a commit of a few
/// GPU rows, not for a whole batch. (Held for the batch's whole transaction, it serialised a
/// fleet's first batches: 125 hosts starting together ingested at half the rate.) A refused
/// batch registers nothing; a registered batch whose samples then fail to commit leaves its GPUs
/// registered, as its retry would.
async fn register_gpus(pool: &PgPool, org: OrgId, host: &str, samples: &[Sample], rules: &IngestRules) -> Result<()> {
    // Most batches add nothing: their check is two reads, with no transaction to open.
    if let Some(growth) = check_hosts(pool, org, host, samples, rules).await? {
        let mut tx = pool.begin().await?;
        upsert_gpus(&mut tx, org, host, samples, columns::SeqStep::Registration).await?;
        enforce_quotas(&mut tx, org, rules, growth).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// The organisation's quotas, checked after the batch's GPUs are written, under the
/// per-organisation lock held to the commit: under READ COMMITTED each count sees every batch
/// committed before the lock was granted plus this batch's own rows, so two concurrent batches
/// cannot both pass a quota that only one fits under. The lock holder then waits on no row lock,
/// so it cannot deadlock with batches still writing.
async fn enforce_quotas(
    tx: &mut Transaction<'_, Postgres>,
    org: OrgId,
    rules: &IngestRules,
    growth: RegistryGrowth,
) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2::int4)")
        .bind(QUOTA_LOCK)
        .bind(i32::try_from(org.get()).unwrap_or(i32::MAX))
        .execute(&mut **tx)
        .await?;
    if growth.adding_gpus > 0 {
        let gpus: i64 =
            sqlx::query_scalar("SELECT count(*) FROM gpus WHERE org_id = $1").bind(org).fetch_one(&mut **tx).await?;
        let gpus = gpus as u64;
        ingest_rules::check_quota("GPUs", gpus.saturating_sub(growth.adding_gpus), growth.adding_gpus, rules.max_gpus)?;
    }
    if growth.host_may_be_new {
        let hosts: i64 = sqlx::query_scalar("SELECT count(DISTINCT host) FROM gpus WHERE org_id = $1")
            .bind(org)
            .fetch_one(&mut **tx)
            .await?;
        ingest_rules::check_quota("hosts", (hosts as u64).saturating_sub(1), 1, rules.max_hosts)?;
    }
    Ok(())
}

async fn upsert_gpus(
    tx: &mut Transaction<'_, Postgres>,
    org: OrgId,
    host: &str,
    samples: &[Sample],
    step: columns::SeqStep,
) -> Result<(HashMap<String, i64>, Vec<(i64, i64)>)> {
    let gpus = columns::gpu_upserts(samples);
    let uuids: Vec<&str> = gpus.iter().map(|g| g.uuid).collect();
    let idx: Vec<Option<i64>> = gpus.iter().map(|g| g.gpu_index).collect();
    let names: Vec<Option<&str>> = gpus.iter().map(|g| g.name).collect();
    let mem: Vec<Option<i64>> = gpus.iter().map(|g| g.mem_total_bytes).collect();
    let power: Vec<Option<f64>> = gpus.iter().map(|g| g.power_limit_w).collect();
    let first: Vec<i64> = gpus.iter().map(|g| g.first_ms).collect();
    let last: Vec<i64> = gpus.iter().map(|g| g.last_ms).collect();
    let live: Vec<i64> = gpus.iter().map(|g| g.live_ms).collect();
    let sql = format!(
        "INSERT INTO gpus (org_id, uuid, host, gpu_index, name, mem_total_bytes, power_limit_w, first_seen_ms, last_seen_ms, last_live_ms, ingest_seq) \
         SELECT $1, u, $2, i, n, m, p, f, l, v, {} FROM UNNEST($3::text[], $4::int8[], $5::text[], $6::int8[], $7::float8[], $8::int8[], $9::int8[], $10::int8[]) \
         AS t(u, i, n, m, p, f, l, v){}",
        step.new_row(),
        columns::gpu_upsert_tail("LEAST", "GREATEST", step)
    );
    let rows = sqlx::query(&sql)
        .bind(org)
        .bind(host)
        .bind(&uuids)
        .bind(&idx)
        .bind(&names)
        .bind(&mem)
        .bind(&power)
        .bind(&first)
        .bind(&last)
        .bind(&live)
        .fetch_all(&mut **tx)
        .await?;
    let mut ids = HashMap::with_capacity(rows.len());
    let mut seqs = Vec::with_capacity(rows.len());
    for row in rows {
        let id: i64 = row.try_get(0)?;
        ids.insert(row.try_get::<String, _>(1)?, id);
        seqs.push((id, row.try_get(2)?));
    }
    Ok((ids, seqs))
}

/// Deadlocks (40P01) and serialization failures (40001) are retryable by definition.
fn is_retryable(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(db))
        if matches!(db.code().as_deref(), Some("40P01") | Some("40001")))
}

impl PgStore {
    /// One statement of [`crate::whole_credit_sql`] (for `impl_store!`), in a transaction of
    /// its own so that its planner settings stay with it.
    async fn whole_credit_rows(&self, sql: &str, org: OrgId, nested_loop: bool) -> Result<Vec<crate::BucketCredit>> {
        let mut tx = self.pool.begin().await?;
        // Statements this short gain nothing from JIT compilation (~0.5 s for these).
        sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
        if nested_loop {
            // The hours before and after each GPU's days are ranges whose bounds depend on the
            // GPU: the planner cannot estimate them and would hash-join the whole hour table,
            // so it is told to look them up per GPU (a nested loop over the key).
            for knob in ["SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off"] {
                sqlx::query(knob).execute(&mut *tx).await?;
            }
        }
        let rows = sqlx::query(sql).bind(org).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows.iter().map(columns::bucket_credit_from_row).collect::<Result<Vec<_>, _>>()?)
    }
}

/// The rollup job's loads and writes on PostgreSQL (`rollup_close`).
mod close {
    crate::rollup_close::impl_rollup_close!(sqlx::Postgres, pg);
}

impl PgStore {
    /// [`SampleStore::ingest_with`](crate::SampleStore::ingest_with), for `impl_store!`.
    async fn ingest_batch(&self, batch: SampleBatch) -> Result<IngestOutcome> {
        let mut attempt = 1;
        let mut mode = InsertMode::Copy;
        loop {
            match self.ingest_once(&batch, mode).await {
                // Some of the batch is stored already (or a concurrent batch stored it first):
                // run it again skipping what is stored; no wait, nothing to back off from.
                Err(e) if mode == InsertMode::Copy && pg_samples::is_unique_violation(&e) => {
                    tracing::debug!("batch holds samples stored before; inserting it skipping those");
                    mode = InsertMode::SkipStored;
                }
                Err(e) if attempt < MAX_ATTEMPTS && is_retryable(&e) => {
                    tracing::debug!(error = %e, attempt, "ingest transaction lost a race; retrying");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
                }
                other => return other,
            }
        }
    }
}

crate::shared_store::impl_store!(PgStore, pg, {
    fn backend(&self) -> fleetlens_core::StoreBackend {
        fleetlens_core::StoreBackend::Postgres
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn job_lock(&self, job: &str) -> Box<dyn crate::leader::JobLock> {
        Box::new(crate::leader::PgAdvisoryLock::new(self.pool.clone(), job))
    }

    async fn announce_change(&self, org: OrgId) -> Result<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(crate::changes::CHANNEL)
            .bind(org.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn listen_changes(&self) -> Result<crate::ChangeListener> {
        crate::ChangeListener::postgres(&self.pool).await
    }

    async fn maintain(&self) -> Result<crate::MaintenanceReport> {
        let autovacuum: String =
            sqlx::query_scalar("SELECT current_setting('autovacuum')").fetch_one(&self.pool).await?;
        if autovacuum == "on" {
            return Ok(crate::MaintenanceReport { autovacuum: true, vacuumed: Vec::new() });
        }
        // autovacuum's default thresholds (vacuum: dead > 50 + 20 %; analyze: changed > 50 +
        // 10 %; insert-only: inserted > 1000 + 20 %), applied to this schema's tables.
        let due: Vec<String> = sqlx::query_scalar(
            "SELECT quote_ident(relname) FROM pg_stat_user_tables WHERE schemaname = current_schema() \
             AND (n_dead_tup > 50 + 0.2 * n_live_tup OR n_mod_since_analyze > 50 + 0.1 * n_live_tup \
             OR n_ins_since_vacuum > 1000 + 0.2 * n_live_tup) ORDER BY relname",
        )
        .fetch_all(&self.pool)
        .await?;
        // One table per statement: VACUUM holds no lock that blocks ingest (SHARE UPDATE
        // EXCLUSIVE), and a failure leaves the others done. Throttled as autovacuum is (a manual
        // VACUUM or ANALYZE runs unthrottled by default): unthrottled, each minute's pass read the
        // growing samples table at full speed and the ingest commits waiting behind that I/O
        // showed as lag spikes.
        let mut conn = blocks::hourly::vacuum_connection(&self.pool).await?;
        for table in &due {
            sqlx::query(&format!("VACUUM (ANALYZE) {table}")).execute(&mut conn).await?;
        }
        conn.close().await?;
        Ok(crate::MaintenanceReport { autovacuum: false, vacuumed: due })
    }

    async fn apply_retention(&self, policy: RetentionPolicy, now_ms: i64) -> Result<RetentionReport> {
        // Minutes whose raw samples are about to go are written first (what the job would do).
        self.close_before(now_ms - policy.raw_ms).await?;
        let gpu_ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM gpus").fetch_all(&self.pool).await?;
        let mut report = RetentionReport::default();
        report.samples += blocks::pg::drop_before(&self.pool, now_ms - policy.raw_ms).await?;
        report.rollups_1m += blocks::pg::drop_minutes_before(&self.pool, now_ms - policy.rollup_1m_ms).await?;
        // Open blocks first: one that straddles the cutoff becomes rows, which the loop trims.
        report.samples += crate::pg_batches::expire(&self.pool, &gpu_ids, now_ms - policy.raw_ms).await?;
        let mut flags_deleted = 0;
        for (table, keep_ms, key, counter) in [
            ("samples", policy.raw_ms, "ts_ms", &mut report.samples),
            // The flags go with their samples.
            ("sample_flags", policy.raw_ms, "ts_ms", &mut flags_deleted),
            ("rollups_1m", policy.rollup_1m_ms, "bucket_ms", &mut report.rollups_1m),
            ("rollups_1h", policy.rollup_1h_ms, "bucket_ms", &mut report.rollups_1h),
        ] {
            // Per GPU along the primary key: an index range delete, and short transactions.
            let sql = format!("DELETE FROM {table} WHERE gpu_id = $1 AND {key} < $2");
            for &gpu_id in &gpu_ids {
                *counter +=
                    sqlx::query(&sql).bind(gpu_id).bind(now_ms - keep_ms).execute(&self.pool).await?.rows_affected();
            }
        }
        // Day credits after the hours: days wholly before the cutoff go, and the day the cutoff
        // falls in is summed again from its remaining hours (one transaction per GPU), so every
        // day row stays the sum of its hours.
        let cutoff = now_ms - policy.rollup_1h_ms;
        let day = cutoff.div_euclid(crate::DAY_MS) * crate::DAY_MS;
        let rebuild = crate::dialect::numbered(&crate::day_credits_from_hours_sql(
            "r.gpu_id = ? AND r.bucket_ms >= ? AND r.bucket_ms < ?",
        ));
        for &gpu_id in &gpu_ids {
            let mut tx = self.pool.begin().await?;
            sqlx::query("DELETE FROM credits_1d WHERE gpu_id = $1 AND day_ms < $2")
                .bind(gpu_id)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?;
            if day < cutoff {
                sqlx::query(&rebuild).bind(gpu_id).bind(day).bind(day + crate::DAY_MS).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
        Ok(report)
    }
});
