//! What the macro-generated stores (`impl_event_store!`, `impl_action_store!`,
//! `impl_reclaim_store!`) need of each database: `q` turns the shared SQL's `?` placeholders
//! into the dialect's, and `begin` opens a write transaction.

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
}

pub(crate) mod pg {
    use std::borrow::Cow;

    use sqlx::{PgPool, Postgres, Transaction};

    pub(crate) fn q(sql: &str) -> Cow<'_, str> {
        Cow::Owned(crate::alerts::numbered(sql))
    }

    pub(crate) async fn begin(pool: &PgPool) -> crate::Result<Transaction<'static, Postgres>> {
        Ok(pool.begin().await?)
    }
}
