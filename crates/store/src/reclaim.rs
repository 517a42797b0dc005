//! Storage of idle-reclaim policies, reclaims, their step log and the agents' kill commands
//! (issue 24, docs/ACTIONS.md). One trait, [`ReclaimStore`], one body of SQL for both backends.

use async_trait::async_trait;
use fleetlens_core::reclaim::{ReclaimCase, ReclaimLogLine, ReclaimPolicySpec};
use fleetlens_core::{AgentCommandId, ReclaimId, ReclaimPolicyId, ReclaimStepId};

use crate::alerts::NewNotification;
use crate::{OrgId, Result};

/// A policy as stored: what its author set and what the store keeps about it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReclaimPolicyRecord {
    pub id: ReclaimPolicyId,
    pub org_id: OrgId,
    /// The policy as written (validated by the caller before it was stored); inserts take this
    /// alone.
    #[sqlx(flatten)]
    pub policy: ReclaimPolicySpec,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One reclaim of one GPU, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReclaimRecord {
    pub id: ReclaimId,
    pub org_id: OrgId,
    /// The reclaim; inserts take this alone.
    #[sqlx(flatten)]
    pub case: ReclaimCase,
    pub updated_ms: i64,
}

/// A step of a reclaim, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReclaimLogEntry {
    pub id: ReclaimStepId,
    pub org_id: OrgId,
    pub reclaim_id: ReclaimId,
    /// What was logged; writes take this alone.
    #[sqlx(flatten)]
    pub line: ReclaimLogLine,
}

/// A kill request for an agent.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AgentCommand {
    pub id: AgentCommandId,
    pub org_id: OrgId,
    pub host: String,
    pub reclaim_id: ReclaimId,
    pub gpu_uuid: String,
    pub pid: i64,
    pub owner_user: String,
    pub created_ms: i64,
    pub taken_ms: Option<i64>,
    pub done_ms: Option<i64>,
    pub result: Option<String>,
}

/// What goes with a reclaim change, all in one transaction.
#[derive(Debug, Clone, Default)]
pub struct ReclaimWrite<'a> {
    pub log: Option<&'a ReclaimLogLine>,
    pub notify: Vec<&'a NewNotification>,
    pub command: Option<&'a AgentCommand>,
}

#[async_trait]
pub trait ReclaimStore: Send + Sync {
    async fn reclaim_policies(&self, org: OrgId) -> Result<Vec<ReclaimPolicyRecord>>;
    /// Every organisation's enabled policies.
    async fn enabled_reclaim_policies(&self) -> Result<Vec<ReclaimPolicyRecord>>;
    async fn reclaim_policy(&self, org: OrgId, id: ReclaimPolicyId) -> Result<Option<ReclaimPolicyRecord>>;
    /// None when the name is taken.
    async fn insert_reclaim_policy(
        &self,
        org: OrgId,
        policy: &ReclaimPolicySpec,
        now_ms: i64,
    ) -> Result<Option<ReclaimPolicyRecord>>;
    async fn delete_reclaim_policy(&self, org: OrgId, id: ReclaimPolicyId) -> Result<bool>;
    /// Every organisation's reclaims not closed.
    async fn open_reclaims(&self) -> Result<Vec<ReclaimRecord>>;
    async fn reclaims(&self, org: OrgId, limit: i64) -> Result<Vec<ReclaimRecord>>;
    async fn reclaim(&self, org: OrgId, id: ReclaimId) -> Result<Option<ReclaimRecord>>;
    /// A new reclaim (its notice); None when the GPU already has an open one for the policy.
    async fn start_reclaim(&self, r: &ReclaimRecord, w: &ReclaimWrite<'_>, now_ms: i64) -> Result<Option<ReclaimId>>;
    /// Store a reclaim's new status, snooze, action and closing times, with its log entry,
    /// messages and command; false when it was closed already.
    async fn update_reclaim(&self, r: &ReclaimRecord, w: &ReclaimWrite<'_>, now_ms: i64) -> Result<bool>;
    /// The step log, newest first; of one reclaim or all.
    async fn reclaim_log(&self, org: OrgId, reclaim_id: Option<ReclaimId>, limit: i64) -> Result<Vec<ReclaimLogEntry>>;
    /// A host's commands not yet taken, marked taken.
    async fn take_agent_commands(&self, org: OrgId, host: &str, now_ms: i64) -> Result<Vec<AgentCommand>>;
    /// Record a command's result (once) with its log entry; None when unknown or done.
    async fn finish_agent_command(
        &self,
        org: OrgId,
        id: AgentCommandId,
        host: &str,
        result: &str,
        log: &ReclaimLogLine,
        now_ms: i64,
    ) -> Result<Option<AgentCommand>>;
}

/// Written in a message's payload, replaced by the reclaim's id when the message is stored with
/// it (a notice names its reclaim, whose id the database assigns in the same transaction).
pub const RECLAIM_ID_TOKEN: &str = "__RECLAIM_ID__";

pub(crate) const POLICY_COLS: &str = "id, org_id, name, state, for_s, grace_s, action, action_channel_id, \
     notice_channel_id, enabled, created_ms, updated_ms";
pub(crate) const RECLAIM_COLS: &str = "id, org_id, policy_id, gpu_uuid, host, run_key, pid, owner, state_since_ms, \
     noticed_ms, snoozed_until_ms, acted_ms, closed_ms, status, updated_ms";
pub(crate) const LOG_COLS: &str = "id, org_id, reclaim_id, step, actor, dollars_held, at_ms, detail";
pub(crate) const COMMAND_COLS: &str =
    "id, org_id, host, reclaim_id, gpu_uuid, pid, owner_user, created_ms, taken_ms, done_ms, result";

macro_rules! impl_reclaim_store {
    ($store:ty, $db:ty) => {
        async fn write_extras(
            tx: &mut sqlx::Transaction<'static, $db>,
            org: $crate::OrgId,
            reclaim_id: fleetlens_core::ReclaimId,
            w: &$crate::reclaim::ReclaimWrite<'_>,
            now_ms: i64,
        ) -> $crate::Result<()> {
            if let Some(l) = w.log {
                sqlx::query(&q("INSERT INTO reclaim_log (org_id, reclaim_id, step, actor, dollars_held, at_ms, detail) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)"))
                .bind(org)
                .bind(reclaim_id)
                .bind(l.step.as_str())
                .bind(&l.actor)
                .bind(l.dollars_held)
                .bind(l.at_ms)
                .bind(&l.detail)
                .execute(&mut **tx)
                .await?;
            }
            for n in &w.notify {
                let payload = n.payload.replace($crate::reclaim::RECLAIM_ID_TOKEN, &reclaim_id.to_string());
                let n = $crate::alerts::NewNotification { payload, ..(*n).clone() };
                insert_outbox(tx, org, None, &n, now_ms).await?;
            }
            if let Some(c) = w.command {
                sqlx::query(&q("INSERT INTO agent_commands (org_id, host, reclaim_id, gpu_uuid, pid, owner_user, \
                     created_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"))
                .bind(org)
                .bind(&c.host)
                .bind(reclaim_id)
                .bind(&c.gpu_uuid)
                .bind(c.pid)
                .bind(&c.owner_user)
                .bind(now_ms)
                .execute(&mut **tx)
                .await?;
            }
            Ok(())
        }

        #[async_trait::async_trait]
        impl $crate::reclaim::ReclaimStore for $store {
            async fn reclaim_policies(
                &self,
                org: $crate::OrgId,
            ) -> $crate::Result<Vec<$crate::reclaim::ReclaimPolicyRecord>> {
                all_of_org(self.pool(), $crate::reclaim::POLICY_COLS, "reclaim_policies", "id", org).await
            }

            async fn enabled_reclaim_policies(&self) -> $crate::Result<Vec<$crate::reclaim::ReclaimPolicyRecord>> {
                let sql = format!(
                    "SELECT {} FROM reclaim_policies WHERE enabled ORDER BY org_id, id",
                    $crate::reclaim::POLICY_COLS
                );
                Ok(sqlx::query_as(&sql).fetch_all(self.pool()).await?)
            }

            async fn reclaim_policy(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::ReclaimPolicyId,
            ) -> $crate::Result<Option<$crate::reclaim::ReclaimPolicyRecord>> {
                one_of_org(self.pool(), $crate::reclaim::POLICY_COLS, "reclaim_policies", org, id).await
            }

            async fn insert_reclaim_policy(
                &self,
                org: $crate::OrgId,
                p: &fleetlens_core::reclaim::ReclaimPolicySpec,
                now_ms: i64,
            ) -> $crate::Result<Option<$crate::reclaim::ReclaimPolicyRecord>> {
                let id: Option<fleetlens_core::ReclaimPolicyId> = sqlx::query_scalar(&q(
                    "INSERT INTO reclaim_policies (org_id, name, state, for_s, grace_s, action, action_channel_id, \
                     notice_channel_id, enabled, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT DO NOTHING RETURNING id",
                ))
                .bind(org)
                .bind(&p.name)
                .bind(p.state.as_str())
                .bind(p.for_s)
                .bind(p.grace_s)
                .bind(p.action.as_str())
                .bind(p.action_channel_id)
                .bind(p.notice_channel_id)
                .bind(p.enabled)
                .bind(now_ms)
                .bind(now_ms)
                .fetch_optional(self.pool())
                .await?;
                Ok(id.map(|id| $crate::reclaim::ReclaimPolicyRecord {
                    id,
                    org_id: org,
                    policy: p.clone(),
                    created_ms: now_ms,
                    updated_ms: now_ms,
                }))
            }

            async fn delete_reclaim_policy(&self, org: $crate::OrgId, id: fleetlens_core::ReclaimPolicyId) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                let gone = delete_of_org(&mut *tx, "reclaim_policies", org, id).await?;
                // Its open reclaims end with it (their log stays).
                sqlx::query(&q("UPDATE reclaims SET closed_ms = updated_ms, status = 'cancelled' \
                     WHERE org_id = ? AND policy_id = ? AND closed_ms IS NULL"))
                .bind(org)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(gone)
            }

            async fn open_reclaims(&self) -> $crate::Result<Vec<$crate::reclaim::ReclaimRecord>> {
                let sql =
                    format!("SELECT {} FROM reclaims WHERE closed_ms IS NULL ORDER BY id", $crate::reclaim::RECLAIM_COLS);
                Ok(sqlx::query_as(&sql).fetch_all(self.pool()).await?)
            }

            async fn reclaims(
                &self,
                org: $crate::OrgId,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::reclaim::ReclaimRecord>> {
                let sql = format!(
                    "SELECT {} FROM reclaims WHERE org_id = ? ORDER BY id DESC LIMIT ?",
                    $crate::reclaim::RECLAIM_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(limit).fetch_all(self.pool()).await?)
            }

            async fn reclaim(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::ReclaimId,
            ) -> $crate::Result<Option<$crate::reclaim::ReclaimRecord>> {
                one_of_org(self.pool(), $crate::reclaim::RECLAIM_COLS, "reclaims", org, id).await
            }

            async fn start_reclaim(
                &self,
                r: &$crate::reclaim::ReclaimRecord,
                w: &$crate::reclaim::ReclaimWrite<'_>,
                now_ms: i64,
            ) -> $crate::Result<Option<fleetlens_core::ReclaimId>> {
                let mut tx = begin(self.pool()).await?;
                let id: Option<fleetlens_core::ReclaimId> = sqlx::query_scalar(&q(
                    "INSERT INTO reclaims (org_id, policy_id, gpu_uuid, host, run_key, pid, owner, state_since_ms, \
                     noticed_ms, status, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT DO NOTHING RETURNING id",
                ))
                .bind(r.org_id)
                .bind(r.case.policy_id)
                .bind(&r.case.gpu_uuid)
                .bind(&r.case.host)
                .bind(&r.case.run_key)
                .bind(r.case.pid)
                .bind(serde_json::to_string(&r.case.owner).expect("an owner serialises"))
                .bind(r.case.state_since_ms)
                .bind(r.case.noticed_ms)
                .bind(r.case.status.as_str())
                .bind(now_ms)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(id) = id else { return Ok(None) };
                write_extras(&mut tx, r.org_id, id, w, now_ms).await?;
                tx.commit().await?;
                Ok(Some(id))
            }

            async fn update_reclaim(
                &self,
                r: &$crate::reclaim::ReclaimRecord,
                w: &$crate::reclaim::ReclaimWrite<'_>,
                now_ms: i64,
            ) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                let n = sqlx::query(&q(
                    "UPDATE reclaims SET status = ?, snoozed_until_ms = ?, acted_ms = ?, closed_ms = ?, updated_ms = ? \
                     WHERE org_id = ? AND id = ? AND closed_ms IS NULL",
                ))
                .bind(r.case.status.as_str())
                .bind(r.case.snoozed_until_ms)
                .bind(r.case.acted_ms)
                .bind(r.case.closed_ms)
                .bind(now_ms)
                .bind(r.org_id)
                .bind(r.id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if n != 1 {
                    return Ok(false);
                }
                write_extras(&mut tx, r.org_id, r.id, w, now_ms).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn reclaim_log(
                &self,
                org: $crate::OrgId,
                reclaim_id: Option<fleetlens_core::ReclaimId>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::reclaim::ReclaimLogEntry>> {
                let sql = format!(
                    "SELECT {} FROM reclaim_log WHERE org_id = ? AND (? IS NULL OR reclaim_id = ?) \
                     ORDER BY id DESC LIMIT ?",
                    $crate::reclaim::LOG_COLS
                );
                Ok(sqlx::query_as(&q(&sql))
                    .bind(org)
                    .bind(reclaim_id)
                    .bind(reclaim_id)
                    .bind(limit)
                    .fetch_all(self.pool())
                    .await?)
            }

            async fn take_agent_commands(
                &self,
                org: $crate::OrgId,
                host: &str,
                now_ms: i64,
            ) -> $crate::Result<Vec<$crate::reclaim::AgentCommand>> {
                let mut tx = begin(self.pool()).await?;
                let sql = format!(
                    "SELECT {} FROM agent_commands WHERE org_id = ? AND host = ? AND taken_ms IS NULL ORDER BY id",
                    $crate::reclaim::COMMAND_COLS
                );
                let mut out: Vec<$crate::reclaim::AgentCommand> =
                    sqlx::query_as(&q(&sql)).bind(org).bind(host).fetch_all(&mut *tx).await?;
                for c in &mut out {
                    sqlx::query(&q("UPDATE agent_commands SET taken_ms = ? WHERE id = ?"))
                        .bind(now_ms)
                        .bind(c.id)
                        .execute(&mut *tx)
                        .await?;
                    c.taken_ms = Some(now_ms);
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn finish_agent_command(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::AgentCommandId,
                host: &str,
                result: &str,
                log: &fleetlens_core::reclaim::ReclaimLogLine,
                now_ms: i64,
            ) -> $crate::Result<Option<$crate::reclaim::AgentCommand>> {
                let mut tx = begin(self.pool()).await?;
                let n = sqlx::query(&q("UPDATE agent_commands SET done_ms = ?, result = ? \
                     WHERE org_id = ? AND id = ? AND host = ? AND done_ms IS NULL"))
                .bind(now_ms)
                .bind(result)
                .bind(org)
                .bind(id)
                .bind(host)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if n != 1 {
                    return Ok(None);
                }
                let sql = format!("SELECT {} FROM agent_commands WHERE id = ?", $crate::reclaim::COMMAND_COLS);
                let command: $crate::reclaim::AgentCommand =
                    sqlx::query_as(&q(&sql)).bind(id).fetch_one(&mut *tx).await?;
                let w = $crate::reclaim::ReclaimWrite { log: Some(log), ..Default::default() };
                write_extras(&mut tx, org, command.reclaim_id, &w, now_ms).await?;
                tx.commit().await?;
                Ok(Some(command))
            }
        }
    };
}

mod sqlite_impl {
    use crate::dialect::sqlite::{all_of_org, begin, delete_of_org, insert_outbox, one_of_org, q};
    use crate::sqlite::SqliteStore;

    impl_reclaim_store!(SqliteStore, sqlx::Sqlite);
}

mod pg_impl {
    use crate::dialect::pg::{all_of_org, begin, delete_of_org, insert_outbox, one_of_org, q};
    use crate::postgres::PgStore;

    impl_reclaim_store!(PgStore, sqlx::Postgres);
}
