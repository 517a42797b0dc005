//! What the shared SQL needs of each database, and how to add a query.
//!
//! Both stores run one body of SQL. Each part of the store (`impl_store!` for the data path of
//! [`crate::Store`], `impl_account_store!`, `impl_setting_and_job_store!`, `impl_alert_store!`,
//! `impl_action_store!`, `impl_reclaim_store!`, `impl_event_store!`, `impl_rollup_close!`, the
//! blocks' `impl_seal!`)
//! is a `macro_rules!` body instantiated once per database, where this module's `sqlite` or
//! `pg` items are in scope. The SQL is written once, with `?` placeholders; the differences
//! between the databases live here:
//! - `q` turns `?` into the dialect's placeholders (`$1, $2, …` on PostgreSQL);
//! - `begin` opens a write transaction (SQLite takes the write lock up front, `BEGIN
//!   IMMEDIATE`, so a read-then-write never fails on a lock upgrade);
//! - `LOCK_SKIP_LOCKED`, `CLOSE_LOCK` are row-lock clauses (PostgreSQL has replicas that
//!   claim at once; SQLite's write transaction is already exclusive);
//! - `PROCESSES_TEXT` reads the `processes` column as text (TEXT on both since 0001; the
//!   PostgreSQL cast is a no-op kept for a column type that may change).
//!
//! Why macros and not functions generic over `DB: sqlx::Database`: a generic query needs a
//! bound for every bound type and the executor (`for<'c> &'c mut DB::Connection: Executor<'c,
//! Database = DB>`, `i64: Encode<'q, DB> + Type<DB>`, … per type and per function), which
//! outgrows the SQL it wraps; a macro body type-checks once per database with concrete types.
//!
//! How to add a query: write it in the family's macro body with `?` placeholders, run it as
//! `sqlx::query(&q(sql))` (or `query_as` into a `#[derive(sqlx::FromRow)]` struct; the
//! statements several families share, such as one record of an organisation or an outbox
//! message, are in [`crate::queries`] and come into scope with `q`), take write
//! transactions with `begin(pool)`, and build dynamic SQL (optional filters, `IN` lists) with
//! `sqlx::QueryBuilder` and `push_bind`, which numbers placeholders itself. What only one
//! database can do (PostgreSQL's `COPY`, SQLite's single writer) stays in `postgres.rs` /
//! `sqlite.rs`; a statement whose text differs by dialect gets a constant here.
//!
//! A unique-key violation on either database arrives as [`crate::StoreError::Conflict`].

pub(crate) mod sqlite {
    use std::borrow::Cow;

    use sqlx::{Sqlite, SqlitePool, Transaction};

    pub(crate) fn q(sql: &str) -> Cow<'_, str> {
        Cow::Borrowed(sql)
    }

    /// The write lock up front, as every SQLite write transaction here takes it.
    pub(crate) async fn begin(pool: &SqlitePool) -> crate::Result<Transaction<'static, Sqlite>> {
        Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// No row locks in SQLite: the write transaction is already exclusive.
    pub(crate) const LOCK_SKIP_LOCKED: &str = "";
    /// The rollup job's claim of marked minutes (none: see `LOCK_SKIP_LOCKED`).
    pub(crate) const CLOSE_LOCK: Option<&str> = None;
    /// The lock of one GPU's packed hours of minutes (none: see `LOCK_SKIP_LOCKED`).
    pub(crate) const PACK_LOCK: Option<&str> = None;
    /// A mark `p` joined to its minute's samples `s`.
    pub(crate) const SAMPLES_OF_MARK: &str =
        "JOIN samples s ON s.gpu_id = p.gpu_id AND s.ts_ms >= p.minute_ms AND s.ts_ms < p.minute_ms + 60000";
    /// `samples.processes` (alias `s`) as text: stored as text.
    pub(crate) const PROCESSES_TEXT: &str = "s.processes";
    /// A mark `p` joined to the GPU's last `credits::PREVIOUS_TIMESTAMPS` timestamps `t.ts_ms` before its
    /// minute: one range along the primary key from the oldest of them (or from the start when
    /// there are fewer).
    pub(crate) fn previous_of_mark() -> String {
        format!(
            "JOIN samples t ON t.gpu_id = p.gpu_id AND t.ts_ms < p.minute_ms AND t.ts_ms >= COALESCE((SELECT u.ts_ms \
             FROM samples u WHERE u.gpu_id = p.gpu_id AND u.ts_ms < p.minute_ms ORDER BY u.ts_ms DESC LIMIT 1 OFFSET {}), \
             -9223372036854775807)",
            crate::credits::PREVIOUS_TIMESTAMPS - 1
        )
    }
    /// `gpus g` joined to its newest open sample `s` (absent: NULLs).
    pub(crate) const NEWEST_SAMPLE_JOIN: &str = "LEFT JOIN samples s ON s.gpu_id = g.id AND s.ts_ms = g.last_seen_ms";
    /// Open samples in all.
    pub(crate) const OPEN_COUNT_SQL: &str = "SELECT count(*) FROM samples";

    /// One GPU's open samples with `from <= ts_ms < to` as a table (SQL expressions, bound in
    /// this order): the rows.
    pub(crate) fn open_samples(gpu: &str, from: &str, to: &str) -> String {
        format!("(SELECT * FROM samples WHERE gpu_id = {gpu} AND ts_ms >= {from} AND ts_ms < {to})")
    }

    /// Every GPU's open samples with `from <= ts_ms < to` as a table.
    pub(crate) fn open_samples_between(from: &str, to: &str) -> String {
        format!("(SELECT * FROM samples WHERE ts_ms >= {from} AND ts_ms < {to})")
    }

    crate::queries::impl_queries!(Sqlite);
}

pub(crate) mod pg {
    use std::borrow::Cow;

    use sqlx::{PgPool, Postgres, Transaction};

    pub(crate) fn q(sql: &str) -> Cow<'_, str> {
        Cow::Owned(super::numbered(sql))
    }

    pub(crate) async fn begin(pool: &PgPool) -> crate::Result<Transaction<'static, Postgres>> {
        Ok(pool.begin().await?)
    }

    /// Several replicas claim at once without waiting on each other, and never two of them the
    /// same rows.
    pub(crate) const LOCK_SKIP_LOCKED: &str = " FOR UPDATE SKIP LOCKED";
    /// The rollup job locks the marks it closes: a mark set meanwhile by ingest waits for it.
    pub(crate) const CLOSE_LOCK: Option<&str> = Some(" FOR UPDATE OF p");
    /// The lock of one GPU's packed hours of minutes (binds: the GPU id), taken by the sealing
    /// job before it packs an hour and by the rollup job before it unpacks one, so the job
    /// never re-sums an hour from minute rows that a pack is moving away. Transaction-scoped;
    /// ids share a key modulo 2^31 - 1, which only serialises a little more.
    pub(crate) const PACK_LOCK: Option<&str> =
        Some("SELECT pg_advisory_xact_lock(1179405634, (CAST(? AS BIGINT) % 2147483647)::int4)");
    /// A mark `p` joined to its minute's samples `s`: a lateral range scan of the primary key
    /// per mark. As a plain join, with the statistics of a freshly loaded table (a backlog
    /// after an outage, a back-fill) the planner scanned each mark's GPU's every sample
    /// (the time range as a join filter): 24 h of 20 GPUs took over 8 minutes to roll up.
    /// `OFFSET 0` keeps the planner from flattening the subquery back into that join (the
    /// same statement: 41 s before, 0.15 s after).
    pub(crate) const SAMPLES_OF_MARK: &str = "CROSS JOIN LATERAL (SELECT * FROM \
         open_samples(p.gpu_id, p.minute_ms, p.minute_ms + 60000) OFFSET 0) s";
    /// `samples.processes` (alias `s`, TEXT) as text.
    pub(crate) const PROCESSES_TEXT: &str = "s.processes::text";
    /// A mark `p` joined to the GPU's last `credits::PREVIOUS_TIMESTAMPS` timestamps `t.ts_ms` before its
    /// minute: as many of the newest rows, and the last as many of each of as many newest blocks
    /// (blocks are disjoint in time and never cross a minute, so a block starting before the
    /// minute lies wholly before it), the newest of both.
    pub(crate) fn previous_of_mark() -> String {
        let n = crate::credits::PREVIOUS_TIMESTAMPS;
        format!(
            "CROSS JOIN LATERAL (SELECT x.ts_ms FROM ((SELECT u.ts_ms FROM samples u WHERE u.gpu_id = p.gpu_id \
             AND u.ts_ms < p.minute_ms ORDER BY u.ts_ms DESC LIMIT {n}) UNION ALL \
             (SELECT unnest(n.ts[greatest(1, cardinality(n.ts) - {}):]) FROM (SELECT b.ts FROM sample_batches b \
             WHERE b.gpu_id = p.gpu_id AND b.first_ts < p.minute_ms ORDER BY b.first_ts DESC LIMIT {n}) n)) \
             x(ts_ms) ORDER BY x.ts_ms DESC LIMIT {n}) t",
            n - 1
        )
    }
    /// `gpus g` joined to its newest open sample `s` (absent: NULLs).
    pub(crate) const NEWEST_SAMPLE_JOIN: &str =
        "LEFT JOIN LATERAL open_samples(g.id, g.last_seen_ms, g.last_seen_ms + 1) s ON true";
    /// Open samples in all: rows, and the samples of the per-batch blocks.
    pub(crate) const OPEN_COUNT_SQL: &str =
        "SELECT (SELECT count(*) FROM samples) + (SELECT coalesce(sum(cardinality(ts)), 0) FROM sample_batches)";

    /// One GPU's open samples with `from <= ts_ms < to` as a table (SQL expressions, bound in
    /// this order): rows and per-batch blocks (migration 0031's `open_samples`).
    pub(crate) fn open_samples(gpu: &str, from: &str, to: &str) -> String {
        format!("open_samples({gpu}, {from}, {to})")
    }

    /// Every GPU's open samples with `from <= ts_ms < to` as a table.
    pub(crate) fn open_samples_between(from: &str, to: &str) -> String {
        format!("open_samples_between({from}, {to})")
    }

    crate::queries::impl_queries!(Postgres);
}

/// `?` placeholders → `$1, $2, …` (PostgreSQL). The shared SQL has no `?` inside literals.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_are_numbered() {
        assert_eq!(super::numbered("a = ? AND (? IS NULL OR b = ?)"), "a = $1 AND ($2 IS NULL OR b = $3)");
    }
}
