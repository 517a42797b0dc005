//! Statements that several parts of the store run, written once for both databases.
//!
//! [`impl_queries`] is expanded in `dialect::sqlite` and in `dialect::pg`, next to the `q` and
//! `begin` it uses, so a family's macro body imports these as it imports those
//! (`use crate::dialect::pg::{begin, q, one_of_org}`). Records come back through their
//! `#[derive(sqlx::FromRow)]` (`sqlx::query_as`).

macro_rules! impl_queries {
    ($db:ty) => {
        /// `SELECT {cols} FROM {table} WHERE org_id = ? AND id = ?`: one record of the
        /// organisation (`None` for an id of another organisation).
        pub(crate) async fn one_of_org<T, I>(
            pool: &sqlx::Pool<$db>,
            cols: &str,
            table: &str,
            org: $crate::OrgId,
            id: I,
        ) -> $crate::Result<Option<T>>
        where
            T: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
            I: for<'q> sqlx::Encode<'q, $db> + sqlx::Type<$db> + Send,
        {
            let sql = format!("SELECT {cols} FROM {table} WHERE org_id = ? AND id = ?");
            Ok(sqlx::query_as(&q(&sql)).bind(org).bind(id).fetch_optional(pool).await?)
        }

        /// `SELECT {cols} FROM {table} WHERE org_id = ? ORDER BY {order}`: the organisation's
        /// records.
        pub(crate) async fn all_of_org<T>(
            pool: &sqlx::Pool<$db>,
            cols: &str,
            table: &str,
            order: &str,
            org: $crate::OrgId,
        ) -> $crate::Result<Vec<T>>
        where
            T: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
        {
            let sql = format!("SELECT {cols} FROM {table} WHERE org_id = ? ORDER BY {order}");
            Ok(sqlx::query_as(&q(&sql)).bind(org).fetch_all(pool).await?)
        }

        /// Whether the organisation has the row `id` of `table` (a row of another organisation:
        /// no), on a pool or inside a transaction.
        pub(crate) async fn org_has<'e, E, I>(exec: E, table: &str, org: $crate::OrgId, id: I) -> $crate::Result<bool>
        where
            E: sqlx::Executor<'e, Database = $db>,
            I: for<'q> sqlx::Encode<'q, $db> + sqlx::Type<$db> + Send,
        {
            let sql = format!("SELECT id FROM {table} WHERE org_id = ? AND id = ?");
            let found: Option<i64> = sqlx::query_scalar(&q(&sql)).bind(org).bind(id).fetch_optional(exec).await?;
            Ok(found.is_some())
        }

        /// `DELETE FROM {table} WHERE org_id = ? AND id = ?`: whether the organisation had the row.
        pub(crate) async fn delete_of_org<'e, E, I>(exec: E, table: &str, org: $crate::OrgId, id: I) -> $crate::Result<bool>
        where
            E: sqlx::Executor<'e, Database = $db>,
            I: for<'q> sqlx::Encode<'q, $db> + sqlx::Type<$db> + Send,
        {
            let sql = format!("DELETE FROM {table} WHERE org_id = ? AND id = ?");
            Ok(sqlx::query(&q(&sql)).bind(org).bind(id).execute(exec).await?.rows_affected() > 0)
        }

        /// Insert a new API key with its owner and team (`None`: none) and whether it is the
        /// bootstrap key; `tail` ends the statement (`RETURNING id`, `ON CONFLICT …`). The id
        /// when `tail` returns it and a row was inserted.
        pub(crate) async fn insert_api_key<'e, E>(
            exec: E,
            key: &$crate::NewApiKey<'_>,
            user: Option<fleetlens_core::UserId>,
            team: Option<fleetlens_core::TeamId>,
            bootstrap: bool,
            tail: &str,
        ) -> $crate::Result<Option<fleetlens_core::ApiKeyId>>
        where
            E: sqlx::Executor<'e, Database = $db>,
        {
            let sql = format!(
                "INSERT INTO api_keys (org_id, name, prefix, key_hash, scopes, created_ms, user_id, team_id, bootstrap) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) {tail}"
            );
            Ok(sqlx::query_scalar(&q(&sql))
                .bind(key.org_id)
                .bind(key.name)
                .bind(key.prefix)
                .bind(key.key_hash)
                .bind($crate::StoredScopes::from(key.scopes))
                .bind(key.created_ms)
                .bind(user)
                .bind(team)
                .bind(i64::from(bootstrap))
                .fetch_optional(exec)
                .await?)
        }

        /// Enqueue a message in the notification outbox (alerts, job report cards, reclaim
        /// notices), pending from `now_ms`. `None` when an identical (alert, channel, kind, seq)
        /// row exists; never for `alert_id` None (NULLs do not collide in that unique key).
        pub(crate) async fn insert_outbox(
            tx: &mut sqlx::Transaction<'static, $db>,
            org: $crate::OrgId,
            alert_id: Option<fleetlens_core::AlertId>,
            n: &$crate::alerts::NewNotification,
            now_ms: i64,
        ) -> $crate::Result<Option<fleetlens_core::MessageId>> {
            Ok(sqlx::query_scalar(&q(
                "INSERT INTO alert_outbox (org_id, alert_id, channel_id, kind, seq, payload, status, attempts, \
                 next_attempt_ms, created_ms) VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?) \
                 ON CONFLICT DO NOTHING RETURNING id",
            ))
            .bind(org)
            .bind(alert_id)
            .bind(n.channel_id)
            .bind(n.kind.as_str())
            .bind(n.seq)
            .bind(&n.payload)
            .bind(now_ms)
            .bind(now_ms)
            .fetch_optional(&mut **tx)
            .await?)
        }
    };
}

pub(crate) use impl_queries;
