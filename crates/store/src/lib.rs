//! Fleetlens storage. One [`Store`] trait, a SQLite and a PostgreSQL implementation, chosen by
//! the URL scheme in [`connect`]. Timestamps are Unix milliseconds everywhere in storage.
//!
//! Both implementations run one body of SQL, with the differences between the databases in a
//! thin layer: see [`dialect`] (also for how to add a query). A unique key taken on either
//! database is [`StoreError::Conflict`].

pub mod accounts;
pub mod actions;
pub mod alerts;
mod blocks;
pub mod changes;
mod columns;
mod credits;
mod data_path;
mod dialect;
pub mod events;
mod feed;
mod ingest_rules;
mod json_text;
pub mod leader;
mod merge;
mod pg_batches;
mod pg_samples;
mod postgres;
mod queries;
pub mod reclaim;
pub mod rollup_close;
mod row_values;
mod settings;
mod shared_store;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
pub use fleetlens_core::{Resolution, RollupBucket, Sample};

pub use crate::accounts::AccountStore;
pub use crate::actions::ActionStore;
pub use crate::alerts::AlertStore;
pub use crate::blocks::format::{BlockError, decode as decode_block, encode as encode_block};
pub use crate::blocks::{SEAL_LATENESS_MS, SPAN_MS as BLOCK_SPAN_MS, SealReport};
pub use crate::changes::{Change, ChangeListener};
pub use crate::credits::{DefaultClassifier, MinuteClassifier};
pub use crate::data_path::{GpuStore, RollupStore, SampleBatch, SampleStore};
pub use crate::events::{EventFilter, EventStore, GpuEventRecord};
pub use crate::feed::SampleFeed;
pub use crate::ingest_rules::IngestRules;
pub use crate::postgres::PgStore;
pub use crate::reclaim::ReclaimStore;
pub use crate::settings::{JobRecord, JobStore, SettingStore};
pub use crate::sqlite::SqliteStore;

pub use fleetlens_core::{GpuId, OrgId};
/// The organisation created by the first migration; bootstrap keys and users land here.
pub const DEFAULT_ORG: OrgId = OrgId(1);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// A write that would store a second row under a unique key (a name or an email taken):
    /// every unique-key violation of either database arrives as this, never as `Database`.
    /// `what` names the table.
    #[error("a {what} row with this key exists already")]
    Conflict { what: String },
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database url {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the storage writer has stopped")]
    WriterGone,
    /// The batch would take the organisation past one of its [`IngestRules`] quotas; nothing
    /// of it was stored.
    #[error(
        "the organisation's quota of {limit} {quota} is reached: this batch would make it {would_be} (nothing was stored; an operator can raise the quota)"
    )]
    QuotaExceeded { quota: &'static str, limit: u64, would_be: u64 },
    /// The batch names a GPU registered on another host of the organisation; nothing of it was
    /// stored (see [`IngestRules::move_after_ms`]).
    #[error(
        "GPU {uuid} belongs to host {owner:?}, not {host:?}: a GPU stays with its host unless an admin moves it (PUT /api/v1/gpus/{{uuid}}/host); nothing was stored"
    )]
    GpuOnOtherHost { uuid: String, owner: String, host: String },
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict { what: conflict_table(&**db).unwrap_or("stored").to_string() }
            }
            _ => StoreError::Database(e),
        }
    }
}

impl StoreError {
    /// A unique key taken (see [`StoreError::Conflict`]).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

/// The table of a unique violation: PostgreSQL names it; SQLite only in its message
/// (`UNIQUE constraint failed: table.column, …`).
fn conflict_table(db: &dyn sqlx::error::DatabaseError) -> Option<&str> {
    db.table().or_else(|| db.message().split_once("failed: ")?.1.split('.').next())
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub use fleetlens_core::{Role, Scope};

/// A stored API key, without its secret.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ApiKey {
    pub id: fleetlens_core::ApiKeyId,
    pub org_id: OrgId,
    pub name: String,
    pub prefix: String,
    #[sqlx(try_from = "StoredScopes")]
    pub scopes: Vec<Scope>,
    pub created_ms: i64,
    pub revoked_ms: Option<i64>,
}

impl ApiKey {
    /// `admin` implies every other scope.
    pub fn allows(&self, scope: Scope) -> bool {
        self.revoked_ms.is_none() && (self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin))
    }
}

/// A new API key to store: the hash of its secret, never the secret.
#[derive(Debug, Clone)]
pub struct NewApiKey<'a> {
    pub org_id: OrgId,
    pub name: &'a str,
    pub prefix: &'a str,
    pub key_hash: &'a str,
    pub scopes: &'a [Scope],
    pub created_ms: i64,
}

/// Outcome of storing a batch: everything in it is committed when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IngestOutcome {
    pub inserted: u64,
    /// Samples of a (GPU, timestamp) stored before that filled fields the stored one lacked
    /// (partial samples of one scrape split over two remote-write requests): see
    /// `fleetlens_core::fill`.
    pub merged: u64,
    /// Samples of a (GPU, timestamp) stored before that added nothing (an exact resend).
    pub duplicates: u64,
    /// What the batch wrote, GPU by GPU.
    pub written: Vec<GpuWritten>,
}

/// One GPU's part of a committed batch, for a reader that follows ingest in memory instead of
/// reading every sample back (the alert engine on the replica that stored the batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuWritten {
    pub gpu_id: fleetlens_core::GpuId,
    /// `gpus.ingest_seq` as this batch left it: one more for each committed batch that wrote
    /// the GPU, so a reader holding the batches numbered k+1..=n holds everything written since
    /// it read the GPU at k, and one missing a number reads the database instead.
    pub ingest_seq: i64,
    /// Indices in the batch's `samples` of those inserted as they were sent.
    pub inserted: Vec<u32>,
    /// The batch filled in samples stored before (`merged`): what is stored is not what the
    /// batch holds, so the reader goes to the database for this GPU.
    pub filled: bool,
}

/// A registered GPU and its newest stored sample. Reads as a `gpus` row
/// ([`GPU_RECORD_COLUMNS`]); the sample is read apart.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GpuRecord {
    pub id: GpuId,
    #[sqlx(flatten)]
    pub info: fleetlens_core::GpuInfo,
    /// The newest sample that arrived live (at most [`LIVE_MS`] old when it was received); 0
    /// when every sample of the GPU was back-filled (a replayed trace, an import).
    pub last_live_ms: i64,
    #[sqlx(skip)]
    pub latest: Option<Sample>,
}

/// A sample that reaches the server at most this long after its timestamp arrived *live*;
/// older ones are back-fill (a replayed trace, a spool drained long after). A GPU that only
/// ever sent back-fill is paid only over the span it reported and is never "offline".
pub const LIVE_MS: i64 = 3_600_000;

/// The oldest timestamp that still counts as live at `now`.
pub fn live_since(now: std::time::SystemTime) -> i64 {
    let now_ms = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    now_ms - LIVE_MS
}

/// One chart point as stored: sums and counts, so means stay "over what was measured".
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SeriesRow {
    pub bucket_ms: i64,
    pub sample_count: i64,
    pub gpu_util_pct_sum: f64,
    pub gpu_util_pct_count: i64,
    pub gpu_util_pct_max: Option<f64>,
    pub sm_active_pct_sum: f64,
    pub sm_active_pct_count: i64,
    pub sm_active_pct_min: Option<f64>,
    pub sm_occupancy_pct_sum: f64,
    pub sm_occupancy_pct_count: i64,
    pub tensor_active_pct_sum: f64,
    pub tensor_active_pct_count: i64,
    pub dram_active_pct_sum: f64,
    pub dram_active_pct_count: i64,
    pub mem_used_bytes_max: Option<f64>,
    pub power_w_sum: f64,
    pub power_w_count: i64,
    pub temp_c_sum: f64,
    pub temp_c_count: i64,
    pub state: Option<String>,
}

/// The chart columns of a rollup table (`state` only exists per minute).
pub(crate) fn series_select(res: Resolution) -> String {
    format!(
        "SELECT bucket_ms, sample_count, gpu_util_pct_sum, gpu_util_pct_count, gpu_util_pct_max, \
         sm_active_pct_sum, sm_active_pct_count, sm_active_pct_min, sm_occupancy_pct_sum, sm_occupancy_pct_count, \
         tensor_active_pct_sum, tensor_active_pct_count, dram_active_pct_sum, dram_active_pct_count, \
         mem_used_bytes_max, power_w_sum, power_w_count, temp_c_sum, temp_c_count, {} AS state FROM {}",
        if res == Resolution::Minute { "state" } else { "CAST(NULL AS TEXT)" },
        rollup_table(res)
    )
}

/// A GPU's newest 1-minute rollup, as far as the current state needs it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LatestMinute {
    pub gpu_id: GpuId,
    pub bucket_ms: i64,
    pub state: Option<String>,
    pub sample_count: i64,
    pub first_ts_ms: i64,
    pub last_ts_ms: i64,
}

/// A process list of one GPU in one minute and how many of the minute's raw samples carried
/// it (owner accounting; identical lists come grouped).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessList {
    pub gpu_id: GpuId,
    /// Start of the minute.
    pub minute_ms: i64,
    /// `None`: the list was not read (or not stored).
    pub processes: Option<Vec<fleetlens_core::GpuProcess>>,
    /// The pods the kubelet allocated the GPU to in these samples (empty: none sent).
    pub allocations: Vec<fleetlens_core::PodAllocation>,
    pub samples: u32,
}

/// The credit of one GPU in one bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketCredit {
    pub gpu_id: GpuId,
    pub bucket_ms: i64,
    pub credit: fleetlens_core::Credit,
}

/// An organisation's hour credits over a report period, split so that a fleet-month is not
/// read row by row: `whole` has, per GPU, the sum of its hours that any pro-rating weighs 1
/// (whole hours of the period inside the GPU's reported span `[first_seen_ms, the end of the
/// minute of last_seen_ms)`; `bucket_ms` is the start of the first whole hour or day summed); `partial` has the other
/// hours that can weigh anything, one row each: the period's partial first and last hours and
/// each GPU's first and last hour. Hours outside a GPU's span (which weigh 0) are in neither.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HourCreditSplit {
    pub whole: Vec<BucketCredit>,
    pub partial: Vec<BucketCredit>,
}

/// The SQL of [`RollupStore::org_hour_credit_split`] with `?` placeholders: the summed whole hours
/// (three statements, see [`whole_credit_sql`]) and the partial hours (binds: org, hour of `from`, first whole hour;
/// org, last whole hour start, end; then org, first whole hour, last whole hour start, twice).
pub(crate) fn hour_credit_split_sql(first_whole_ms: i64, last_start_ms: i64) -> (WholeCreditSql, String) {
    const H: i64 = 3_600_000;
    let names = fleetlens_core::Credit::column_names();
    // The end of the minute of the GPU's newest sample: the hour credits' span ends there.
    let credited_to = "((g.last_seen_ms / 60000 + 1) * 60000)";
    let whole = whole_credit_sql(first_whole_ms, last_start_ms);
    let cols = names.iter().map(|c| format!("r.{c}")).collect::<Vec<_>>().join(", ");
    let select = format!("SELECT r.gpu_id, r.bucket_ms, {cols} FROM rollups_1h r JOIN gpus g ON g.id = r.gpu_id");
    let partial = [
        // The period's partial first and last hours.
        "r.bucket_ms >= ? AND r.bucket_ms < ?".to_string(),
        "r.bucket_ms > ? AND r.bucket_ms < ?".to_string(),
        // Inside the whole hours: the hour a GPU first reported in, when it began after its start …
        format!(
            "r.bucket_ms >= ? AND r.bucket_ms <= ? AND r.bucket_ms = (g.first_seen_ms / {H}) * {H} \
             AND r.bucket_ms < g.first_seen_ms"
        ),
        // … and the hour of its newest sample, unless that minute ends the hour.
        format!(
            "r.bucket_ms >= ? AND r.bucket_ms <= ? AND r.bucket_ms = (({credited_to} - 1) / {H}) * {H} \
             AND r.bucket_ms >= g.first_seen_ms AND r.bucket_ms + {H} > {credited_to}"
        ),
    ]
    .iter()
    .map(|cond| format!("{select} WHERE g.org_id = ? AND {cond}"))
    .collect::<Vec<_>>()
    .join(" UNION ALL ");
    (whole, partial)
}

/// The summed whole hours of each GPU (see [`HourCreditSplit`]) over the whole hours
/// `[first_whole_ms, last_start_ms + 1 h)`: the UTC days that lie wholly inside both these hours
/// and the GPU's credited span `[first_seen_ms, credited_to)` come from `credits_1d` (one row per
/// day, the sum of the day's hours), the GPU's other whole hours from `rollups_1h`, so the sums
/// are the same as summing the hours. Three statements, each bound to the org only (the times are
/// integer literals): the days, the hours before the GPU's days and the hours after them. They
/// are independent, so the stores run them (and the partial hours) at once on separate
/// connections: a fleet-month is ~0.5 M rows to sum, and each statement keeps one core busy.
///
/// Per GPU its days are `[u0, u1)`: `u0` = the later of the first day boundary of the period
/// and the first at or after `first_seen_ms`, `u1` = the earlier of the last day boundary of
/// the period and the last at or before `credited_to`; when `u0 >= u1` it has none and every
/// whole hour is read from `rollups_1h`.
pub(crate) fn whole_credit_sql(first_whole_ms: i64, last_start_ms: i64) -> WholeCreditSql {
    const H: i64 = 3_600_000;
    const D: i64 = DAY_MS;
    let names = fleetlens_core::Credit::column_names();
    let credited_to = "((g.last_seen_ms / 60000 + 1) * 60000)";
    // Day boundaries inside the whole hours (timestamps are positive: `/` floors).
    let d0 = (first_whole_ms + D - 1).div_euclid(D) * D;
    let d1 = (last_start_ms + H).div_euclid(D) * D;
    let u0 = format!(
        "(CASE WHEN ((g.first_seen_ms + {}) / {D}) * {D} > {d0} THEN ((g.first_seen_ms + {}) / {D}) * {D} ELSE {d0} END)",
        D - 1,
        D - 1
    );
    let u1 = format!("(CASE WHEN ({credited_to} / {D}) * {D} < {d1} THEN ({credited_to} / {D}) * {D} ELSE {d1} END)");
    // The GPU's hours before and after its days (all its whole hours when it has none), as one
    // range each so that the database reads just them along the primary key.
    let last_whole = last_start_ms + H;
    let split_lo = format!("(CASE WHEN {u0} < {u1} THEN {u0} ELSE {last_whole} END)");
    let split_hi = format!("(CASE WHEN {u0} < {u1} THEN {u1} ELSE {last_whole} END)");
    // From the later of the first whole hour and the GPU's first sample (its days start after
    // both); each part has one lower and one upper bound on the key, so the planner uses them.
    let from = format!("(CASE WHEN g.first_seen_ms > {first_whole_ms} THEN g.first_seen_ms ELSE {first_whole_ms} END)");
    let sums = |t: &str| names.iter().map(|c| format!("SUM({t}.{c}) AS {c}")).collect::<Vec<_>>().join(", ");
    // Each part is summed per GPU on its own (the rows come in GPU order: no sort), so a GPU
    // can have up to three rows: see [`sum_per_gpu`].
    let days = format!(
        "SELECT g.id AS gpu_id, MIN(d.day_ms) AS bucket_ms, {} FROM gpus g JOIN credits_1d d ON d.gpu_id = g.id \
         WHERE g.org_id = ? AND d.day_ms >= {u0} AND d.day_ms < {u1} GROUP BY g.id",
        sums("d")
    );
    let hours = |cond: &str| {
        format!(
            "SELECT g.id AS gpu_id, MIN(r.bucket_ms) AS bucket_ms, {} FROM gpus g JOIN rollups_1h r ON r.gpu_id = g.id \
             WHERE g.org_id = ? AND {cond} AND r.bucket_ms + {H} <= {credited_to} GROUP BY g.id",
            sums("r")
        )
    };
    WholeCreditSql {
        days,
        hours_before: hours(&format!("r.bucket_ms >= {from} AND r.bucket_ms < {split_lo}")),
        hours_after: hours(&format!("r.bucket_ms >= {split_hi} AND r.bucket_ms < {last_whole}")),
    }
}

/// The three statements of [`whole_credit_sql`]; each selects `gpu_id, bucket_ms` and then the
/// credit columns in [`fleetlens_core::Credit::column_names`] order, one row per GPU.
pub(crate) struct WholeCreditSql {
    pub days: String,
    pub hours_before: String,
    pub hours_after: String,
}

/// One row per GPU from rows of [`whole_credit_sql`]: credits added, the earliest bucket.
pub(crate) fn sum_per_gpu(rows: Vec<BucketCredit>) -> Vec<BucketCredit> {
    let mut per_gpu: std::collections::BTreeMap<GpuId, BucketCredit> = std::collections::BTreeMap::new();
    for row in rows {
        match per_gpu.entry(row.gpu_id) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(row);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let sum = e.get_mut();
                sum.bucket_ms = sum.bucket_ms.min(row.bucket_ms);
                sum.credit.add_scaled(&row.credit, 1.0);
            }
        }
    }
    per_gpu.into_values().collect()
}

/// `credits_1d` rows from `rollups_1h` (`{where}`: a condition on `r`): each (GPU, UTC day)
/// with the sum of its hours. The migration that added the table backfills it the same way.
pub(crate) fn day_credits_from_hours_sql(condition: &str) -> String {
    let names = fleetlens_core::Credit::column_names();
    let sums = names.iter().map(|c| format!("SUM(r.{c})")).collect::<Vec<_>>().join(", ");
    format!(
        "INSERT INTO credits_1d (gpu_id, day_ms, {}) SELECT r.gpu_id, (r.bucket_ms / {DAY_MS}) * {DAY_MS}, {sums} \
         FROM rollups_1h r WHERE {condition} GROUP BY r.gpu_id, (r.bucket_ms / {DAY_MS}) * {DAY_MS}",
        names.join(", ")
    )
}

/// How long data is kept, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub raw_ms: i64,
    pub rollup_1m_ms: i64,
    pub rollup_1h_ms: i64,
}

pub(crate) const DAY_MS: i64 = 86_400_000;

impl Default for RetentionPolicy {
    /// Raw samples 7 days, rollups 400 days.
    fn default() -> Self {
        Self { raw_ms: 7 * DAY_MS, rollup_1m_ms: 400 * DAY_MS, rollup_1h_ms: 400 * DAY_MS }
    }
}

/// Rows removed by one retention pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionReport {
    pub samples: u64,
    pub rollups_1m: u64,
    pub rollups_1h: u64,
}

/// What one maintenance pass did (see [`Store::maintain`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MaintenanceReport {
    /// The database's own autovacuum is on, so the pass left the tables to it.
    pub autovacuum: bool,
    /// Tables vacuumed and analysed by this pass.
    pub vacuumed: Vec<String>,
}

/// The whole store, one trait per concern: accounts (organisations, users, teams, API keys),
/// settings, reported jobs, alerting, GPU events, job runs and their actions, idle reclaim, the
/// alert engine's sample feed, the GPU registry, raw samples, rollups and credits (the last
/// three in `data_path.rs`), and here what runs the store: the background jobs that close,
/// seal, pack and expire the data, maintenance, leadership and change signals. Callers hold
/// an `Arc<dyn Store>` and call every concern's methods on it.
#[async_trait]
pub trait Store:
    AlertStore
    + AccountStore
    + EventStore
    + ActionStore
    + ReclaimStore
    + SettingStore
    + JobStore
    + GpuStore
    + SampleStore
    + RollupStore
    + SampleFeed
    + Send
    + Sync
    + 'static
{
    /// The database this store keeps its data in.
    fn backend(&self) -> fleetlens_core::StoreBackend;
    /// A cheap round trip, for readiness checks.
    async fn ping(&self) -> Result<()>;

    /// The rollup job (see [`rollup_close`]): writes the 1-minute rollups and credits of the
    /// minutes that ended at least `lateness_ms` (at least [`rollup_close::MIN_LATENESS_MS`])
    /// before `now_ms` and have new samples, from their raw samples, then sums their hours and
    /// days again, in one transaction. Returns the minutes written. Reads include the minutes
    /// not written yet, so this only decides when the rows are written, never what reads see.
    async fn close_minutes(&self, now_ms: i64, lateness_ms: i64) -> Result<u64>;

    /// Seal the raw samples of every GPU-hour that ended at least [`SEAL_LATENESS_MS`] before
    /// `now_ms` into compressed column blocks (see `blocks`), at most `max_blocks` blocks this
    /// pass. Each block is written and its rows deleted in one transaction. Rows stored before
    /// blocks existed are converted by the first passes the same way.
    async fn seal_closed_hours(&self, now_ms: i64, max_blocks: u64) -> Result<SealReport>;

    /// Delete what is older than the policy allows, measured back from `now_ms`.
    async fn apply_retention(&self, policy: RetentionPolicy, now_ms: i64) -> Result<RetentionReport>;

    /// Housekeeping between ingests. PostgreSQL with autovacuum off (some managed or CI
    /// setups turn it off) never clears the dead row versions that every ingest leaves in the
    /// rollup, credit and GPU rows it updates in place, nor refreshes the planner's statistics;
    /// tables and queries then slow down by the minute. There the pass vacuums and analyses
    /// the tables that autovacuum's own thresholds would pick. With autovacuum on, and on
    /// SQLite (which reuses freed pages itself), there is nothing to do.
    async fn maintain(&self) -> Result<MaintenanceReport> {
        Ok(MaintenanceReport { autovacuum: true, vacuumed: Vec::new() })
    }

    /// The leadership lock of background job `job` (see [`leader`]): a PostgreSQL advisory
    /// lock shared by every replica on the database; SQLite is one process and always leads.
    fn job_lock(&self, job: &str) -> Box<dyn leader::JobLock> {
        Box::new(leader::LocalLock(job.to_string()))
    }

    /// Tell every server process on this database that `org`'s live data changed (a batch
    /// stored, an alert opened or resolved): see [`changes`].
    async fn announce_change(&self, org: OrgId) -> Result<()>;

    /// A listener for the signals of [`Store::announce_change`], from every process on this
    /// database (this one included).
    async fn listen_changes(&self) -> Result<ChangeListener>;
}

/// Open the store named by `url` (`sqlite://PATH`, `sqlite::memory:`, `postgres://…`) and run
/// its migrations.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>> {
    connect_with(url, Arc::new(DefaultClassifier)).await
}

/// [`connect`] with the classifier that credits each minute (the server's knows each
/// organisation's thresholds).
pub async fn connect_with(url: &str, classifier: Arc<dyn MinuteClassifier>) -> Result<Arc<dyn Store>> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::open(url, classifier).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PgStore::open(url, classifier).await?))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_string()))
    }
}

/// SHA-256 of an API key secret, hex. Keys are 256-bit random strings, so a fast hash is
/// safe here (unlike passwords, which get argon2).
pub fn hash_api_key(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

/// An API key's scopes as stored: their names, comma-separated, in one TEXT column. Written
/// and read through this one type; a name that is no scope is a decode error.
pub(crate) struct StoredScopes(Vec<Scope>);

impl StoredScopes {
    fn text(&self) -> String {
        self.0.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
    }
}

impl From<&[Scope]> for StoredScopes {
    fn from(scopes: &[Scope]) -> Self {
        StoredScopes(scopes.to_vec())
    }
}

impl From<StoredScopes> for Vec<Scope> {
    fn from(stored: StoredScopes) -> Self {
        stored.0
    }
}

impl<DB: sqlx::Database> sqlx::Type<DB> for StoredScopes
where
    String: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <String as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <String as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for StoredScopes
where
    String: sqlx::Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as sqlx::Database>::ArgumentBuffer<'q>,
    ) -> std::result::Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        self.text().encode_by_ref(buf)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for StoredScopes
where
    String: sqlx::Decode<'r, DB>,
{
    fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> std::result::Result<Self, sqlx::error::BoxDynError> {
        let text = <String as sqlx::Decode<'r, DB>>::decode(value)?;
        let scopes = text.split(',').filter(|name| !name.is_empty()).map(str::parse).collect::<Result<_, _>>()?;
        Ok(StoredScopes(scopes))
    }
}

fn rollup_table(res: Resolution) -> &'static str {
    match res {
        Resolution::Minute => "rollups_1m",
        Resolution::Hour => "rollups_1h",
    }
}

fn api_key_from_new(id: fleetlens_core::ApiKeyId, key: &NewApiKey<'_>) -> ApiKey {
    ApiKey {
        id,
        org_id: key.org_id,
        name: key.name.to_string(),
        prefix: key.prefix.to_string(),
        scopes: key.scopes.to_vec(),
        created_ms: key.created_ms,
        revoked_ms: None,
    }
}

/// The columns of a [`GpuRecord`], of `gpus g`: the registry reads and the GPU list's join with
/// the newest sample (`columns::gpu_select`) select the same list.
pub(crate) const GPU_RECORD_COLUMNS: &str = "g.id, g.uuid, g.host, g.gpu_index, g.name, g.mem_total_bytes, \
     g.power_limit_w, g.first_seen_ms, g.last_seen_ms, g.last_live_ms";
