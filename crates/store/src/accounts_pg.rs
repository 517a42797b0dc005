//! [`AccountStore`](crate::accounts::AccountStore) for PostgreSQL.

use std::borrow::Cow;

use sqlx::{PgPool, Postgres, Transaction};

use crate::postgres::PgStore;

fn q(sql: &str) -> Cow<'_, str> {
    Cow::Owned(crate::accounts::numbered(sql))
}

async fn begin(pool: &PgPool) -> crate::Result<Transaction<'static, Postgres>> {
    Ok(pool.begin().await?)
}

crate::accounts::impl_account_store!(PgStore, Postgres);
