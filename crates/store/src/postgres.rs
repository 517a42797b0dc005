//! PostgreSQL backend: each batch is one transaction with UNNEST array inserts (one round trip
//! per table, whatever the batch size). Rows are written in a fixed key order so concurrent
//! transactions cannot deadlock on each other's index entries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fleetlens_core::{Credit, Resolution, RollupBucket, Sample};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool, Postgres, Row, Transaction};

use crate::blocks;
use crate::columns::{self, GpuRow, SampleRow};
use crate::credits::MinuteClassifier;
use crate::ingest_rules::{self, IngestRules, KnownGpu};
use crate::pg_samples::{self, InsertMode};
use crate::rollup_close::{self as rc, PendingScope, minute_range};
use crate::{
    ApiKey, GpuRecord, IngestOutcome, NewApiKey, OrgId, Result, RetentionPolicy, RetentionReport, Store, StoreError,
};

/// Transactions that lose a deadlock or serialization race are retried this many times.
const MAX_ATTEMPTS: u32 = 5;

pub struct PgStore {
    pool: PgPool,
    classifier: Arc<dyn MinuteClassifier>,
}

impl PgStore {
    /// The newest sample of GPUs whose newest hour is sealed (no open row holds it).
    async fn fill_sealed_latest(&self, records: &mut [GpuRecord]) -> Result<()> {
        let missing = blocks::missing_latest(records);
        if !missing.is_empty() {
            blocks::fill_latest(records, blocks::pg::latest_blocks(&self.pool, &missing).await?)?;
        }
        Ok(())
    }

    pub async fn open(url: &str, classifier: Arc<dyn MinuteClassifier>) -> Result<Self> {
        let opts: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts)
            .await?;
        sqlx::migrate!("../../migrations/postgres").run(&pool).await?;
        Ok(Self { pool, classifier })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn ingest_once(
        &self,
        org: OrgId,
        host: &str,
        samples: &[Sample],
        flags: &[fleetlens_core::QualityFlags],
        mode: InsertMode,
        rules: Option<&IngestRules>,
    ) -> Result<IngestOutcome> {
        let mut tx = self.pool.begin().await?;
        if let Some(rules) = rules {
            check_rules(&mut tx, org, host, samples, rules).await?;
        }
        let ids = upsert_gpus(&mut tx, org, host, samples).await?;
        // Flags by sample (its address is its identity here: `order` holds references).
        let flag_of: HashMap<usize, fleetlens_core::QualityFlags> =
            samples.iter().zip(flags).map(|(s, f)| (s as *const Sample as usize, *f)).collect();
        // Each sample's GPU id looked up once (not once per comparison of the sort, and again
        // for the COPY and the rollups: that hashing was ~10 % of the server's ingest CPU).
        let mut order: Vec<(i64, &Sample)> = samples.iter().map(|s| (ids[s.uuid.as_str()], s)).collect();
        order.sort_by_key(|&(gpu_id, s)| (gpu_id, s.ts_ms));

        // Late samples for sealed hours: those hours go back to open rows first.
        blocks::pg::unseal_for_batch(&mut tx, &order).await?;
        let fresh = pg_samples::insert(&mut tx, &order, mode).await?;
        let inserted = fresh.len() as u64;
        let fills = if mode == InsertMode::SkipStored {
            let colliding = pg_samples::not_inserted(&order, &fresh, &flag_of);
            crate::merge::pg::fill_stored(&mut tx, &colliding).await?
        } else {
            Vec::new()
        };
        let filled = fills.len() as u64;
        let mut new_keys: Vec<(i64, i64)> = fresh.iter().map(|&(gpu_id, s)| (gpu_id, s.ts_ms)).collect();
        let mut flagged: Vec<(i64, i64, i64)> = fresh
            .iter()
            .filter_map(|&(gpu_id, s)| {
                let f = flag_of.get(&(s as *const Sample as usize)).copied().unwrap_or_default();
                (!f.is_empty()).then(|| (gpu_id, s.ts_ms, f.bits()))
            })
            .collect();
        // A filled-in sample changes its minute: the minute is written (again) from the rows.
        crate::merge::mark_fills(&fills, &mut new_keys, &mut flagged);
        // The rollups of these samples are written once their minutes close (`rollup_close`).
        close::mark_new(&mut tx, &new_keys, &flagged, crate::rollup_close::wall_clock_ms()).await?;
        tx.commit().await?;
        Ok(IngestOutcome { inserted, merged: filled, duplicates: samples.len() as u64 - inserted - filled })
    }
}

/// Key of the advisory lock that serialises, per organisation, the batches that add GPUs or
/// hosts, so two of them cannot both pass a quota that only one fits under.
const QUOTA_LOCK: i32 = 0x464c_5130; // "FLQ0"

/// The batch against the organisation's quotas and the GPU-host rule ([`IngestRules`]).
async fn check_rules(
    tx: &mut Transaction<'_, Postgres>,
    org: OrgId,
    host: &str,
    samples: &[Sample],
    rules: &IngestRules,
) -> Result<()> {
    let uuids = ingest_rules::batch_uuids(samples);
    let known: Vec<KnownGpu> =
        sqlx::query_as("SELECT uuid, host, last_seen_ms FROM gpus WHERE org_id = $1 AND uuid = ANY($2)")
            .bind(org)
            .bind(&uuids)
            .fetch_all(&mut **tx)
            .await?;
    rules.check_hosts(host, &known)?;
    let adding = (uuids.len() - known.len()) as u64;
    let moving = known.iter().any(|g| g.host != host);
    if adding == 0 && !moving {
        return Ok(());
    }
    // Held until the transaction ends; the counts below then include every committed batch.
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2::int4)")
        .bind(QUOTA_LOCK)
        .bind(i32::try_from(org).unwrap_or(i32::MAX))
        .execute(&mut **tx)
        .await?;
    let gpus: i64 =
        sqlx::query_scalar("SELECT count(*) FROM gpus WHERE org_id = $1").bind(org).fetch_one(&mut **tx).await?;
    ingest_rules::check_quota("GPUs", gpus as u64, adding, rules.max_gpus)?;
    let host_known: Option<i32> = sqlx::query_scalar("SELECT 1 FROM gpus WHERE org_id = $1 AND host = $2 LIMIT 1")
        .bind(org)
        .bind(host)
        .fetch_optional(&mut **tx)
        .await?;
    if host_known.is_none() {
        let hosts: i64 = sqlx::query_scalar("SELECT count(DISTINCT host) FROM gpus WHERE org_id = $1")
            .bind(org)
            .fetch_one(&mut **tx)
            .await?;
        ingest_rules::check_quota("hosts", hosts as u64, 1, rules.max_hosts)?;
    }
    Ok(())
}

async fn upsert_gpus(
    tx: &mut Transaction<'_, Postgres>,
    org: OrgId,
    host: &str,
    samples: &[Sample],
) -> Result<HashMap<String, i64>> {
    let gpus = columns::gpu_upserts(samples);
    let uuids: Vec<&str> = gpus.iter().map(|g| g.uuid).collect();
    let idx: Vec<Option<i64>> = gpus.iter().map(|g| g.gpu_index).collect();
    let names: Vec<Option<&str>> = gpus.iter().map(|g| g.name).collect();
    let mem: Vec<Option<i64>> = gpus.iter().map(|g| g.mem_total_bytes).collect();
    let power: Vec<Option<f64>> = gpus.iter().map(|g| g.power_limit_w).collect();
    let first: Vec<i64> = gpus.iter().map(|g| g.first_ms).collect();
    let last: Vec<i64> = gpus.iter().map(|g| g.last_ms).collect();
    let live: Vec<i64> = gpus.iter().map(|g| g.live_ms).collect();
    let rows = sqlx::query(
        "INSERT INTO gpus (org_id, uuid, host, gpu_index, name, mem_total_bytes, power_limit_w, first_seen_ms, last_seen_ms, last_live_ms) \
         SELECT $1, u, $2, i, n, m, p, f, l, v FROM UNNEST($3::text[], $4::int8[], $5::text[], $6::int8[], $7::float8[], $8::int8[], $9::int8[], $10::int8[]) \
         AS t(u, i, n, m, p, f, l, v) \
         ON CONFLICT (org_id, uuid) DO UPDATE SET \
         host = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN excluded.host ELSE gpus.host END, \
         gpu_index = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN coalesce(excluded.gpu_index, gpus.gpu_index) ELSE gpus.gpu_index END, \
         name = coalesce(gpus.name, excluded.name), \
         mem_total_bytes = coalesce(excluded.mem_total_bytes, gpus.mem_total_bytes), \
         power_limit_w = CASE WHEN excluded.last_seen_ms >= gpus.last_seen_ms THEN coalesce(excluded.power_limit_w, gpus.power_limit_w) ELSE gpus.power_limit_w END, \
         first_seen_ms = LEAST(gpus.first_seen_ms, excluded.first_seen_ms), \
         last_seen_ms = GREATEST(gpus.last_seen_ms, excluded.last_seen_ms), \
         last_live_ms = GREATEST(gpus.last_live_ms, excluded.last_live_ms) \
         RETURNING id, uuid, power_limit_w, mem_total_bytes",
    )
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
    for row in rows {
        ids.insert(row.try_get::<String, _>(1)?, row.try_get::<i64, _>(0)?);
    }
    Ok(ids)
}

/// Deadlocks (40P01) and serialization failures (40001) are retryable by definition.
fn is_retryable(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(sqlx::Error::Database(db))
        if matches!(db.code().as_deref(), Some("40P01") | Some("40001")))
}

/// The stored rows alone, which the `Store` reads complete with the open minutes.
impl PgStore {
    /// The rollup job: the minutes marked before `cutoff_ms`, one transaction per chunk of GPUs
    /// (a minute, its hour and day and its mark always go together).
    async fn close_before(&self, cutoff_ms: i64) -> Result<u64> {
        let mut written = 0;
        for (gpu_lo, gpu_hi) in close::close_chunks(&self.pool, cutoff_ms).await? {
            let mut tx = self.pool.begin().await?;
            let scope = PendingScope::ClosedBefore { cutoff_ms, gpu_lo, gpu_hi };
            written += close::close_in(&mut tx, scope, Some(" FOR UPDATE OF p"), self.classifier.as_ref()).await?;
            tx.commit().await?;
        }
        Ok(written)
    }

    async fn stored_latest_minutes(&self, org: OrgId) -> Result<Vec<crate::LatestMinute>> {
        Ok(sqlx::query_as(
            "SELECT r.gpu_id, r.bucket_ms, r.state, r.sample_count, r.first_ts_ms, r.last_ts_ms \
             FROM gpus g JOIN rollups_1m r ON r.gpu_id = g.id \
             AND r.bucket_ms = g.last_seen_ms - ((g.last_seen_ms % 60000) + 60000) % 60000 WHERE g.org_id = $1",
        )
        .bind(org)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn stored_rollups(
        &self,
        gpu_id: i64,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RollupBucket>> {
        let sql = format!(
            "SELECT gpu_id, bucket_ms, {} FROM {} WHERE gpu_id = $1 AND bucket_ms >= $2 AND bucket_ms < $3 ORDER BY bucket_ms",
            columns::rollup_columns().join(", "),
            crate::rollup_table(res)
        );
        let rows = sqlx::query(&sql).bind(gpu_id).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
        rows.iter().map(|r| columns::rollup_from_row(r, gpu_id).map_err(StoreError::from)).collect()
    }

    async fn stored_org_rollups(
        &self,
        org: OrgId,
        res: Resolution,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<RollupBucket>> {
        let sql = format!(
            "SELECT r.* FROM {} r JOIN gpus g ON g.id = r.gpu_id \
             WHERE g.org_id = $1 AND r.bucket_ms >= $2 AND r.bucket_ms < $3 ORDER BY r.gpu_id, r.bucket_ms",
            crate::rollup_table(res)
        );
        let rows = sqlx::query(&sql).bind(org).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?;
        rows.iter().map(|r| columns::rollup_from_row(r, r.try_get("gpu_id")?).map_err(StoreError::from)).collect()
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
             WHERE g.org_id = $1 AND r.bucket_ms >= $2 AND r.bucket_ms < $3",
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
        let partial = crate::accounts::numbered(&partial);
        // Four independent statements at once, each on its own pooled connection (and so its
        // own PostgreSQL backend process).
        let whole_part = |sql: String, nested_loop: bool| async move {
            let sql = crate::accounts::numbered(&sql);
            let mut tx = self.pool.begin().await?;
            // Statements this short gain nothing from JIT compilation (~0.5 s for these).
            sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
            if nested_loop {
                // The hours before and after each GPU's days are ranges whose bounds depend on
                // the GPU: the planner cannot estimate them and would hash-join the whole hour
                // table, so it is told to look them up per GPU (a nested loop over the key).
                for knob in ["SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off"] {
                    sqlx::query(knob).execute(&mut *tx).await?;
                }
            }
            let rows = sqlx::query(&sql).bind(org).fetch_all(&mut *tx).await?;
            tx.commit().await?;
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
            whole_part(whole.days, false),
            whole_part(whole.hours_before, true),
            whole_part(whole.hours_after, true),
            partial
        )?;
        let whole = crate::sum_per_gpu(days.into_iter().chain(before).chain(after).collect());
        Ok(crate::HourCreditSplit { whole, partial })
    }

    async fn stored_peak_mem(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<(i64, i64)>> {
        let rows: Vec<(i64, Option<f64>)> = sqlx::query_as(
            "SELECT r.gpu_id, max(r.mem_used_bytes_max) FROM rollups_1h r JOIN gpus g ON g.id = r.gpu_id \
             WHERE g.org_id = $1 AND r.bucket_ms > $2 - 3600000 AND r.bucket_ms < $3 GROUP BY r.gpu_id",
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
            "{} WHERE gpu_id = $1 AND bucket_ms >= $2 AND bucket_ms < $3 ORDER BY bucket_ms",
            crate::series_select(res).replace("NULL AS state", "NULL::text AS state")
        );
        Ok(sqlx::query_as(&sql).bind(gpu_id).bind(from_ms).bind(to_ms).fetch_all(&self.pool).await?)
    }
}

/// The rollup job's loads and writes on PostgreSQL (`rollup_close`).
mod close {
    crate::rollup_close::impl_rollup_close!(sqlx::Postgres, crate::dialect::pg::q, "s.processes::text", sqlx::PgPool);
}

#[async_trait]
impl Store for PgStore {
    async fn latest_minutes(&self, org: OrgId) -> Result<Vec<crate::LatestMinute>> {
        let read = || self.stored_latest_minutes(org);
        let (stored, open) =
            close::with_open(&self.pool, PendingScope::OrgLatest(org), self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_latest(stored, &open))
    }

    async fn latest_minutes_of(&self, org: OrgId, gpu_ids: &[i64]) -> Result<Vec<crate::LatestMinute>> {
        let mut out = Vec::with_capacity(gpu_ids.len());
        for chunk in gpu_ids.chunks(rc::GPUS_PER_LATEST_READ) {
            let sql = crate::dialect::pg::q(&rc::stored_latest_of_sql(chunk.len())).into_owned();
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

    async fn rollups(&self, gpu_id: i64, res: Resolution, from_ms: i64, to_ms: i64) -> Result<Vec<RollupBucket>> {
        let read = || self.stored_rollups(gpu_id, res, from_ms, to_ms);
        let (lo, hi) = minute_range(res, from_ms, to_ms);
        let scope = PendingScope::Gpu { gpu_id, from_ms: lo, to_ms: hi };
        let (stored, open) = close::with_open(&self.pool, scope, self.classifier.as_ref(), read).await?;
        Ok(rc::overlay_rollups(stored, res, &open))
    }

    async fn org_rollups(&self, org: OrgId, res: Resolution, from_ms: i64, to_ms: i64) -> Result<Vec<RollupBucket>> {
        let read = || self.stored_org_rollups(org, res, from_ms, to_ms);
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

    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_org(&self, name: &str, now_ms: i64) -> Result<OrgId> {
        Ok(sqlx::query_scalar("INSERT INTO orgs (name, created_ms) VALUES ($1, $2) RETURNING id")
            .bind(name)
            .bind(now_ms)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn insert_api_key(&self, key: NewApiKey<'_>) -> Result<ApiKey> {
        let row = sqlx::query(
            "INSERT INTO api_keys (org_id, name, prefix, key_hash, scopes, created_ms) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
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
        // Several replicas may bootstrap the same key at once: the unique hash decides.
        sqlx::query(
            "INSERT INTO api_keys (org_id, name, prefix, key_hash, scopes, created_ms) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (key_hash) DO NOTHING",
        )
        .bind(key.org_id)
        .bind(key.name)
        .bind(key.prefix)
        .bind(key.key_hash)
        .bind(crate::scopes_to_text(key.scopes))
        .bind(key.created_ms)
        .execute(&self.pool)
        .await?;
        self.api_key_by_hash(key.key_hash)
            .await?
            .ok_or_else(|| StoreError::Invalid("api key vanished after insert".into()))
    }

    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKey>> {
        let row = sqlx::query(
            "SELECT id, org_id, name, prefix, scopes, created_ms, revoked_ms FROM api_keys WHERE key_hash = $1",
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
        let mut attempt = 1;
        let mut mode = InsertMode::Copy;
        loop {
            match self.ingest_once(org, host, &samples, &flags, mode, rules.as_ref()).await {
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

    async fn move_gpu(&self, org: OrgId, uuid: &str, host: &str) -> Result<bool> {
        let done = sqlx::query("UPDATE gpus SET host = $1 WHERE org_id = $2 AND uuid = $3")
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
             FROM gpus WHERE org_id = $1 ORDER BY host, gpu_index, uuid",
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

    async fn gpus(&self, org: OrgId) -> Result<Vec<GpuRecord>> {
        let sql = format!(
            "{} WHERE g.org_id = $1 ORDER BY g.host, g.gpu_index, g.uuid",
            columns::gpu_select("s.processes::text")
        );
        let rows: Vec<GpuRow> = sqlx::query_as(&sql).bind(org).fetch_all(&self.pool).await?;
        let mut records: Vec<GpuRecord> = rows.into_iter().map(GpuRow::into_record).collect();
        self.fill_sealed_latest(&mut records).await?;
        Ok(records)
    }

    async fn gpu(&self, org: OrgId, uuid: &str) -> Result<Option<GpuRecord>> {
        let sql = format!("{} WHERE g.org_id = $1 AND g.uuid = $2", columns::gpu_select("s.processes::text"));
        let row: Option<GpuRow> = sqlx::query_as(&sql).bind(org).bind(uuid).fetch_optional(&self.pool).await?;
        let mut records: Vec<GpuRecord> = row.into_iter().map(GpuRow::into_record).collect();
        self.fill_sealed_latest(&mut records).await?;
        Ok(records.pop())
    }

    async fn samples(&self, gpu_id: i64, from_ms: i64, to_ms: i64, limit: u32) -> Result<Vec<Sample>> {
        let ident = sqlx::query("SELECT uuid, gpu_index, name FROM gpus WHERE id = $1")
            .bind(gpu_id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(ident) = ident else { return Ok(Vec::new()) };
        let (uuid, index, name): (String, Option<i64>, Option<String>) =
            (ident.try_get(0)?, ident.try_get(1)?, ident.try_get(2)?);
        let sql = format!(
            "SELECT s.ts_ms, {} FROM samples s WHERE s.gpu_id = $1 AND s.ts_ms >= $2 AND s.ts_ms < $3 ORDER BY s.ts_ms LIMIT $4",
            columns::sample_select_list("s", "s.processes::text")
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
        let sealed = blocks::pg::samples(&self.pool, gpu_id, from_ms, to_ms).await?;
        let sealed = sealed.into_iter().map(|s| blocks::with_identity(s, &uuid, index, name.as_deref())).collect();
        let mut merged = blocks::merge(sealed, open);
        merged.truncate(limit as usize);
        Ok(merged)
    }

    async fn org_process_lists(&self, org: OrgId, from_ms: i64, to_ms: i64) -> Result<Vec<crate::ProcessList>> {
        // Process lists rarely change within a minute: group identical ones (each sample still
        // counts once), so a report parses a few lists per GPU-minute instead of 60.
        let rows: Vec<(i64, i64, Option<String>, Option<String>, i64)> = sqlx::query_as(
            "SELECT s.gpu_id, (s.ts_ms / 60000) * 60000 AS minute_ms, s.processes::text AS procs, \
             s.allocations AS allocs, count(*) AS n \
             FROM samples s JOIN gpus g ON g.id = s.gpu_id \
             WHERE g.org_id = $1 AND s.ts_ms >= $2 AND s.ts_ms < $3 \
             GROUP BY s.gpu_id, minute_ms, procs, allocs ORDER BY s.gpu_id, minute_ms",
        )
        .bind(org)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await?;
        let sealed = blocks::pg::org_samples(&self.pool, org, from_ms, to_ms).await?;
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
        Ok(sqlx::query_as("SELECT org_id, value FROM org_settings WHERE key = $1")
            .bind(key)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn setting(&self, org: OrgId, key: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar("SELECT value FROM org_settings WHERE org_id = $1 AND key = $2")
            .bind(org)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn put_setting(&self, org: OrgId, key: &str, value: &str, now_ms: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO org_settings (org_id, key, value, updated_ms) VALUES ($1, $2, $3, $4) \
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
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
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
            sqlx::query("SELECT * FROM jobs WHERE org_id = $1 AND to_ms > $2 AND from_ms < $3 ORDER BY from_ms, id")
                .bind(org)
                .bind(from_ms)
                .bind(to_ms)
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(crate::job_from_row).collect()
    }

    async fn sample_count(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM samples").fetch_one(&self.pool).await?;
        Ok(n as u64 + blocks::pg::count(&self.pool).await?)
    }

    async fn seal_closed_hours(&self, now_ms: i64, max_blocks: u64) -> Result<crate::SealReport> {
        blocks::pg::seal(&self.pool, now_ms, max_blocks).await
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
        // A connection of its own, without the slow-statement warning: a vacuum taking seconds
        // is expected, not a symptom. One table per statement: VACUUM holds no lock that blocks
        // ingest (SHARE UPDATE EXCLUSIVE), and a failure leaves the others done.
        let opts = (*self.pool.connect_options()).clone().log_slow_statements(log::LevelFilter::Off, Duration::MAX);
        let mut conn = sqlx::PgConnection::connect_with(&opts).await?;
        // Throttled as autovacuum is (a manual VACUUM or ANALYZE runs unthrottled by default):
        // unthrottled, each minute's pass read the growing samples table at full speed and
        // the ingest commits waiting behind that I/O showed as lag spikes.
        sqlx::query("SET vacuum_cost_delay = '2ms'").execute(&mut conn).await?;
        sqlx::query("SET vacuum_cost_limit = 200").execute(&mut conn).await?;
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
        let rebuild = crate::accounts::numbered(&crate::day_credits_from_hours_sql(
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
}
