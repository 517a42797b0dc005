//! [`AlertStore`](crate::alerts::AlertStore) for PostgreSQL. Outbox claims lock the channel
//! rows they take `FOR UPDATE SKIP LOCKED`: several replicas claim at once without waiting on
//! each other, and never two of them the same channel (so its rate limit and message order
//! hold across replicas).

use std::borrow::Cow;

use sqlx::{PgPool, Postgres, Transaction};

use crate::postgres::PgStore;

fn q(sql: &str) -> Cow<'_, str> {
    Cow::Owned(crate::alerts::numbered(sql))
}

async fn begin(pool: &PgPool) -> crate::Result<Transaction<'static, Postgres>> {
    Ok(pool.begin().await?)
}

const LOCK_CHANNELS: &str = " FOR UPDATE SKIP LOCKED";

crate::alerts::impl_alert_store!(PgStore, Postgres);
