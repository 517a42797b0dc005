//! [`AlertStore`](crate::alerts::AlertStore) for SQLite. Writes take the database's write
//! lock up front (`BEGIN IMMEDIATE`), so a read-then-write transaction never fails on an
//! upgrade; one writer at a time also makes outbox claims exclusive.

use std::borrow::Cow;

use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::sqlite::SqliteStore;

fn q(sql: &str) -> Cow<'_, str> {
    Cow::Borrowed(sql)
}

async fn begin(pool: &SqlitePool) -> crate::Result<Transaction<'static, Sqlite>> {
    Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
}

/// No row locks in SQLite: the write transaction is already exclusive.
const LOCK_CHANNELS: &str = "";

crate::alerts::impl_alert_store!(SqliteStore, Sqlite);
