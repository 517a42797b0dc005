//! One bench run's fresh database and `fleetlens-server`, as the single-purpose bench binaries
//! (`analytics-bench`, `billing-bench`, `stream-bench`) start them.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sqlx::Connection;

use crate::child::{ChildGuard, wait_for_url};

/// A fresh database: a SQLite file in a temporary directory, or a PostgreSQL database of its
/// own. [`ScratchDb::remove`] drops the PostgreSQL one; the directory goes when this is dropped.
pub struct ScratchDb {
    pub url: String,
    /// The admin URL and the name of the PostgreSQL database.
    postgres: Option<(String, String)>,
    dir: tempfile::TempDir,
}

impl ScratchDb {
    /// `backend` is `sqlite` or `postgres`; a PostgreSQL database is named `{prefix}_{pid}` and
    /// made through `pg_admin`.
    pub async fn create(backend: &str, pg_admin: &str, prefix: &str) -> Result<ScratchDb> {
        let dir = tempfile::tempdir()?;
        let (url, postgres) = match backend {
            "sqlite" => (format!("sqlite://{}/bench.db", dir.path().display()), None),
            "postgres" => {
                let name = format!("{prefix}_{}", std::process::id());
                let mut c = sqlx::PgConnection::connect(pg_admin).await?;
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut c).await?;
                let url = format!("{}/{name}", pg_admin.rsplit_once('/').context("pg url")?.0);
                (url, Some((pg_admin.to_string(), name)))
            }
            other => bail!("unknown backend {other}"),
        };
        Ok(ScratchDb { url, postgres, dir })
    }

    /// The temporary directory (the SQLite file's, and room for a run's other files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Drop the PostgreSQL database, and the directory.
    pub async fn remove(self) -> Result<()> {
        if let Some((admin, name)) = &self.postgres {
            let mut c = sqlx::PgConnection::connect(admin).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut c).await?;
        }
        Ok(())
    }

    /// Leave the database (and the directory) in place, for profiling.
    pub fn keep(self) {
        let _ = self.dir.keep();
    }
}

/// `fleetlens-server` (`bin`) on an OS-chosen port of 127.0.0.1 with `token` as its admin key
/// and `extra` arguments: the child, killed when dropped, and the base URL it printed.
pub fn start_server(bin: &str, db_url: &str, token: &str, extra: &[&str]) -> Result<(ChildGuard, String)> {
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--database-url", db_url, "--static-dir", "/nonexistent"])
        .args(extra)
        .env("FLEETLENS_ADMIN_TOKEN", token)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {bin}"))?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut server = ChildGuard { child, what: bin.to_string() };
    // Migrations run before the URL is printed: a large database may take a while.
    let base = wait_for_url(&mut server, stdout, Duration::from_secs(600))?;
    Ok((server, base))
}

/// The `p` quantile (0..=1) of sorted values, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
