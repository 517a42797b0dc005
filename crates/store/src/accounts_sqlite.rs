//! [`AccountStore`](crate::accounts::AccountStore) for SQLite. Write transactions take the
//! database's write lock up front (`BEGIN IMMEDIATE`), so a read-then-write never fails on an
//! upgrade.

use std::borrow::Cow;

use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::sqlite::SqliteStore;

fn q(sql: &str) -> Cow<'_, str> {
    Cow::Borrowed(sql)
}

async fn begin(pool: &SqlitePool) -> crate::Result<Transaction<'static, Sqlite>> {
    Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
}

crate::accounts::impl_account_store!(SqliteStore, Sqlite);
