//! Leadership of background jobs across replicas.
//!
//! On PostgreSQL several `fleetlens-server` processes may share one database. A periodic job
//! that must run in one place at a time (alert evaluation, retention) asks its [`JobLock`]
//! before each run. The PostgreSQL lock is a session advisory lock (`pg_try_advisory_lock`)
//! taken on a connection of its own, outside the pool, and held for as long as this process
//! leads: when the process dies (even `kill -9`) its connection closes, PostgreSQL releases
//! the lock at once, and the next replica that asks takes it. Each check while leading is a
//! round trip on that same connection, so a leader whose connection was cut notices it, stops
//! leading, and competes again like any other replica.
//!
//! SQLite is one process by design (one writer, a local file): its lock always leads.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Connection, PgConnection, PgPool};

/// The leadership of one named job in this process.
#[async_trait]
pub trait JobLock: Send + Sync {
    /// The job's name.
    fn job(&self) -> &str;
    /// True if this process leads the job now: takes the lock when it is free, and, when it
    /// already holds it, checks that the session holding it is alive. Never errors: a
    /// database that does not answer means "not leading".
    async fn lead(&mut self) -> bool;
}

/// A single-process store: always the leader.
pub struct LocalLock(pub String);

#[async_trait]
impl JobLock for LocalLock {
    fn job(&self) -> &str {
        &self.0
    }
    async fn lead(&mut self) -> bool {
        true
    }
}

/// How long one lock round trip may take before the database counts as unreachable.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The advisory lock key of a job: FNV-1a (64-bit) of `fleetlens:<job>`, stable across
/// versions and processes, and unlikely to collide with another application's keys.
pub fn advisory_key(job: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "fleetlens:".bytes().chain(job.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// A PostgreSQL session advisory lock held on a dedicated connection.
pub struct PgAdvisoryLock {
    pool: PgPool,
    job: String,
    key: i64,
    conn: Option<PgConnection>,
    held: bool,
}

impl PgAdvisoryLock {
    pub fn new(pool: PgPool, job: &str) -> Self {
        Self { pool, job: job.to_string(), key: advisory_key(job), conn: None, held: false }
    }

    async fn try_take(&mut self) -> Result<bool, sqlx::Error> {
        if self.conn.is_none() {
            // A connection of its own, detached from the pool: the pool may recycle its
            // connections, and the lock lives exactly as long as this session.
            let conn = tokio::time::timeout(LOCK_TIMEOUT, self.pool.acquire())
                .await
                .map_err(|_| sqlx::Error::PoolTimedOut)??
                .detach();
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connection just set");
        let got: bool = tokio::time::timeout(
            LOCK_TIMEOUT,
            sqlx::query_scalar("SELECT pg_try_advisory_lock($1)").bind(self.key).fetch_one(&mut *conn),
        )
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
        Ok(got)
    }

    async fn still_held(&mut self) -> Result<bool, sqlx::Error> {
        let Some(conn) = self.conn.as_mut() else { return Ok(false) };
        // The session is alive and still has our lock (it cannot lose it otherwise, but a
        // check that reads pg_locks also catches an administrator's pg_advisory_unlock_all).
        let held: bool = tokio::time::timeout(
            LOCK_TIMEOUT,
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() \
                 AND granted AND objsubid = 1 AND ((classid::int8 << 32) | objid::int8) = $1)",
            )
            .bind(self.key)
            .fetch_one(&mut *conn),
        )
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
        Ok(held)
    }

    fn lose(&mut self, why: &str) {
        if self.held {
            tracing::warn!(job = %self.job, why, "lost the leadership of a background job");
        }
        self.held = false;
        if let Some(conn) = self.conn.take() {
            // Closing the session releases any lock it still has.
            tokio::spawn(async move {
                let _ = conn.close().await;
            });
        }
    }
}

#[async_trait]
impl JobLock for PgAdvisoryLock {
    fn job(&self) -> &str {
        &self.job
    }

    async fn lead(&mut self) -> bool {
        if self.held {
            match self.still_held().await {
                Ok(true) => return true,
                Ok(false) => self.lose("the advisory lock is gone from its session"),
                Err(e) => self.lose(&format!("its session failed: {e}")),
            }
        }
        match self.try_take().await {
            Ok(true) => {
                tracing::info!(job = %self.job, "this replica now leads the job");
                self.held = true;
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::debug!(job = %self.job, error = %e, "cannot reach the database for the job lock");
                self.lose("error while taking it");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::advisory_key;

    #[test]
    fn keys_are_stable_and_distinct() {
        assert_eq!(advisory_key("alert_engine"), advisory_key("alert_engine"));
        assert_ne!(advisory_key("alert_engine"), advisory_key("retention"));
    }
}
