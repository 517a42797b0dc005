//! Storage of accounts: organisations, teams, users, dashboard sessions, API keys with their
//! owners, teams and last-used time, and the team assignment of hosts and GPUs.
//!
//! One trait, [`AccountStore`], implemented for [`crate::SqliteStore`] and [`crate::PgStore`]
//! from one body of SQL ([`impl_account_store`], with [`crate::dialect`]).
//! Every method that reads or changes something of an organisation takes the [`OrgId`] and
//! filters by it: an id of another organisation is "not found", never that organisation's row.
//!
//! A GPU's team (`gpus.team_id`, with `gpus.team_source`) comes from, in this order:
//! an admin's assignment of the GPU ([`TeamSource::Gpu`]), an admin's assignment of its host
//! ([`TeamSource::Host`], also for GPUs the host reports later), the team of the API key that
//! reports it ([`TeamSource::Key`]), the `team` label its agent sends ([`TeamSource::Label`];
//! a team of that name is created when missing). See [`AccountStore::assign_ingest_team`].

use async_trait::async_trait;

pub use fleetlens_core::Role;

use crate::{ApiKey, GpuId, NewApiKey, OrgId, Result, Scope};

pub use fleetlens_core::{ApiKeyId, TeamId, UserId};

/// Every scope `scopes` grants (`admin` implies the others), in the order admin, read, ingest.
pub fn expand_scopes(scopes: &[Scope]) -> Vec<Scope> {
    let all = [Scope::Admin, Scope::Read, Scope::Ingest];
    if scopes.contains(&Scope::Admin) { all.to_vec() } else { all.into_iter().filter(|s| scopes.contains(s)).collect() }
}

/// Where a GPU's team came from (see the module docs for the precedence).
pub use fleetlens_core::TeamSource;

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OrgRecord {
    pub id: OrgId,
    pub name: String,
    pub created_ms: i64,
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct TeamRecord {
    pub id: TeamId,
    pub org_id: OrgId,
    pub name: String,
    pub created_ms: i64,
    /// Users of the team, by id, ascending (not a column: read from `team_members`).
    #[sqlx(skip)]
    pub members: Vec<UserId>,
}

/// A user, without the password hash.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct UserRecord {
    pub id: UserId,
    pub org_id: OrgId,
    /// Lower-cased; unique across the install.
    pub email: String,
    pub name: String,
    pub role: Role,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub last_login_ms: Option<i64>,
    pub disabled_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct NewUser<'a> {
    pub org_id: OrgId,
    pub email: &'a str,
    pub name: &'a str,
    /// An argon2 PHC string.
    pub password_hash: &'a str,
    pub role: Role,
    pub now_ms: i64,
}

/// Changes to a user; `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserUpdate {
    pub name: Option<String>,
    pub role: Option<Role>,
    pub password_hash: Option<String>,
    /// `Some(true)` disables (keeps the first time), `Some(false)` enables.
    pub disabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewSession<'a> {
    /// SHA-256 of the cookie's token ([`crate::hash_api_key`]).
    pub token_hash: &'a str,
    pub user_id: UserId,
    pub org_id: OrgId,
    pub csrf_token: &'a str,
    pub created_ms: i64,
    pub expires_ms: i64,
}

/// A live session and its (enabled) user.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SessionRecord {
    #[sqlx(flatten)]
    pub user: UserRecord,
    pub csrf_token: String,
    #[sqlx(rename = "session_created_ms")]
    pub created_ms: i64,
    pub expires_ms: i64,
    /// When the session was last used, as last written ([`AccountStore::touch_session`]).
    pub last_seen_ms: i64,
}

/// What [`AccountStore::sync_bootstrap_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BootstrapKeySync {
    /// Earlier bootstrap keys revoked now (the variable changed or was removed).
    pub revoked: u64,
    /// The key of the current value was revoked before (by an admin): it stays revoked.
    pub current_revoked: bool,
}

/// An API key with who made it, its team and when it was last used.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ApiKeyInfo {
    #[sqlx(flatten)]
    pub key: ApiKey,
    pub user_id: Option<UserId>,
    pub team_id: Option<TeamId>,
    pub last_used_ms: Option<i64>,
}

/// What authentication needs to know about a key: the key, and its owner's role and state
/// (a key never grants more than its owner's current role).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct KeyAuth {
    #[sqlx(flatten)]
    pub info: ApiKeyInfo,
    /// `None` for keys without an owner (the bootstrap key, keys made with an admin key).
    pub owner_role: Option<Role>,
    pub owner_disabled: bool,
}

impl KeyAuth {
    /// The scopes the key grants now: its own, within its owner's role; empty if revoked or
    /// its owner is disabled.
    pub fn effective_scopes(&self) -> Vec<Scope> {
        if self.info.key.revoked_ms.is_some() || self.owner_disabled {
            return Vec::new();
        }
        let own = expand_scopes(&self.info.key.scopes);
        match self.owner_role {
            None => own,
            Some(role) => {
                let allowed = expand_scopes(role.scopes());
                own.into_iter().filter(|s| allowed.contains(s)).collect()
            }
        }
    }
}

/// A GPU's team.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GpuTeam {
    #[sqlx(rename = "id")]
    pub gpu_id: GpuId,
    pub uuid: String,
    pub host: String,
    pub team_id: Option<TeamId>,
    pub team_name: Option<String>,
    #[sqlx(rename = "team_source")]
    pub source: Option<TeamSource>,
}

/// A host of the organisation: its GPUs and the team an admin assigned it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRecord {
    pub host: String,
    pub assigned_team_id: Option<TeamId>,
    pub last_seen_ms: i64,
    pub gpus: Vec<GpuTeam>,
}

/// Outcome of an admin's assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned {
    Done,
    /// No such host or GPU in the organisation.
    NoTarget,
    /// No such team in the organisation.
    NoTeam,
}

#[async_trait]
pub trait AccountStore: Send + Sync {
    async fn create_org(&self, name: &str, now_ms: i64) -> Result<OrgId>;
    async fn org(&self, org: OrgId) -> Result<Option<OrgRecord>>;
    async fn orgs(&self) -> Result<Vec<OrgRecord>>;

    /// An API key without owner or team (tools, tests, the bootstrap; users' keys are made by
    /// [`AccountStore::create_api_key`]).
    async fn insert_api_key(&self, key: NewApiKey<'_>) -> Result<ApiKey>;
    /// Insert the key unless a key with this hash exists; returns the stored key.
    async fn ensure_api_key(&self, key: NewApiKey<'_>) -> Result<ApiKey>;
    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKey>>;

    /// [`crate::StoreError::Conflict`] if the organisation has a team of this name.
    async fn create_team(&self, org: OrgId, name: &str, now_ms: i64) -> Result<TeamRecord>;
    async fn teams(&self, org: OrgId) -> Result<Vec<TeamRecord>>;
    async fn team(&self, org: OrgId, id: TeamId) -> Result<Option<TeamRecord>>;
    async fn rename_team(&self, org: OrgId, id: TeamId, name: &str) -> Result<Option<TeamRecord>>;
    /// Deletes the team; its GPUs, hosts and keys are left without a team.
    async fn delete_team(&self, org: OrgId, id: TeamId) -> Result<bool>;
    /// Add (`member`) or remove a user; false if the team or the user is not in `org`.
    async fn set_team_member(&self, org: OrgId, team: TeamId, user: UserId, member: bool) -> Result<bool>;

    /// [`crate::StoreError::Conflict`] if the email is taken (in any organisation).
    async fn create_user(&self, user: NewUser<'_>) -> Result<UserRecord>;
    async fn users(&self, org: OrgId) -> Result<Vec<UserRecord>>;
    async fn user(&self, org: OrgId, id: UserId) -> Result<Option<UserRecord>>;
    /// For login: the user with this lower-cased email, in any organisation, and its hash.
    async fn user_for_login(&self, email: &str) -> Result<Option<(UserRecord, String)>>;
    async fn update_user(&self, org: OrgId, id: UserId, update: &UserUpdate, now_ms: i64)
    -> Result<Option<UserRecord>>;
    /// Deletes the user, ends their sessions and revokes their API keys.
    async fn delete_user(&self, org: OrgId, id: UserId, now_ms: i64) -> Result<bool>;
    /// Enabled admins of the organisation.
    async fn count_admins(&self, org: OrgId) -> Result<i64>;

    /// Stores the session, records the login and drops expired sessions.
    async fn create_session(&self, session: NewSession<'_>) -> Result<()>;
    /// The session if it exists, has not expired and its user is enabled.
    async fn session(&self, token_hash: &str, now_ms: i64) -> Result<Option<SessionRecord>>;
    async fn delete_session(&self, token_hash: &str) -> Result<()>;
    /// Ends every session of the user of `org` but `keep` (a token hash).
    async fn delete_sessions_of(&self, org: OrgId, user: UserId, keep: Option<&str>) -> Result<u64>;
    /// Record that the session was used at `now_ms`.
    async fn touch_session(&self, token_hash: &str, now_ms: i64) -> Result<()>;

    /// Store a new key with its owner and team (both of `key.org_id`, checked by the caller).
    async fn create_api_key(
        &self,
        key: NewApiKey<'_>,
        user: Option<UserId>,
        team: Option<TeamId>,
    ) -> Result<ApiKeyInfo>;
    /// Keys of the organisation (of one user if `user` is set), revoked ones too, oldest first.
    async fn api_keys(&self, org: OrgId, user: Option<UserId>) -> Result<Vec<ApiKeyInfo>>;
    async fn api_key(&self, org: OrgId, id: ApiKeyId) -> Result<Option<ApiKeyInfo>>;
    /// Revokes the key (keeping the first revocation time); `None` if not in `org`.
    async fn revoke_api_key(&self, org: OrgId, id: ApiKeyId, now_ms: i64) -> Result<Option<ApiKeyInfo>>;
    /// The key with this hash, revoked or not, with its owner's role.
    async fn api_key_auth(&self, key_hash: &str) -> Result<Option<KeyAuth>>;
    /// Record a use of the key of `org` at `now_ms` unless a later use is recorded.
    async fn touch_api_key(&self, org: OrgId, id: ApiKeyId, now_ms: i64) -> Result<()>;
    /// Revokes every key the user made; returns how many were live.
    async fn revoke_api_keys_of(&self, org: OrgId, user: UserId, now_ms: i64) -> Result<u64>;
    /// The bootstrap key (`FLEETLENS_ADMIN_TOKEN`) at start: `key` (if set) is stored, marked
    /// as the bootstrap key, unless it exists; every other bootstrap key is revoked. A key of
    /// this hash that is not a bootstrap key is an error (the value is some other key's secret).
    async fn sync_bootstrap_key(&self, key: Option<NewApiKey<'_>>, now_ms: i64) -> Result<BootstrapKeySync>;

    async fn gpu_teams(&self, org: OrgId) -> Result<Vec<GpuTeam>>;
    async fn hosts(&self, org: OrgId) -> Result<Vec<HostRecord>>;
    /// An admin assigns a host (and its GPUs, now and later) to a team, or clears that.
    async fn set_host_team(&self, org: OrgId, host: &str, team: Option<TeamId>, now_ms: i64) -> Result<Assigned>;
    /// An admin assigns one GPU to a team, or clears that (it then follows its host).
    async fn set_gpu_team(&self, org: OrgId, uuid: &str, team: Option<TeamId>) -> Result<Assigned>;
    /// After an ingest batch of `host`: give the host's GPUs (those no admin assigned) the
    /// host's assigned team, else `key_team`, else the team named `label` (created if
    /// missing). Reads only, unless something changes. Returns the team applied.
    async fn assign_ingest_team(
        &self,
        org: OrgId,
        host: &str,
        key_team: Option<TeamId>,
        label: Option<&str>,
        now_ms: i64,
    ) -> Result<Option<TeamId>>;
}

pub(crate) const TEAM_COLS: &str = "id, org_id, name, created_ms";
pub(crate) const USER_COLS: &str =
    "u.id, u.org_id, u.email, u.name, u.role, u.created_ms, u.updated_ms, u.last_login_ms, u.disabled_ms";
pub(crate) const KEY_COLS: &str =
    "k.id, k.org_id, k.name, k.prefix, k.scopes, k.created_ms, k.revoked_ms, k.user_id, k.team_id, k.last_used_ms";
pub(crate) const GPU_TEAM_SQL: &str = "SELECT g.id, g.uuid, g.host, g.team_id, t.name AS team_name, g.team_source \
     FROM gpus g LEFT JOIN teams t ON t.id = g.team_id WHERE g.org_id = ? ORDER BY g.host, g.gpu_index, g.uuid";

/// The SQL of [`AccountStore`], for one backend. The invoking module provides
/// `fn q(sql: &str) -> Cow<str>` (placeholders) and `async fn begin(&Pool) -> Result<Transaction>`
/// (a write transaction).
macro_rules! impl_account_store {
    ($store:ty) => {
        use $crate::accounts::{
            ApiKeyId, ApiKeyInfo, Assigned, BootstrapKeySync, GpuTeam, HostRecord, KeyAuth, NewSession, NewUser, OrgRecord,
            SessionRecord, TeamId, TeamRecord, TeamSource, UserId, UserRecord, UserUpdate,
        };
        use $crate::{NewApiKey, OrgId};

        impl $store {
            async fn team_members_of(&self, org: OrgId, team: Option<TeamId>) -> $crate::Result<Vec<(TeamId, UserId)>> {
                let sql = "SELECT m.team_id, m.user_id FROM team_members m JOIN teams t ON t.id = m.team_id \
                     WHERE t.org_id = ? AND (? IS NULL OR t.id = ?) ORDER BY m.user_id";
                Ok(sqlx::query_as(&q(sql)).bind(org).bind(team).bind(team).fetch_all(self.pool()).await?)
            }

            async fn ensure_team(&self, org: OrgId, name: &str, now_ms: i64) -> $crate::Result<TeamId> {
                let sql = q("SELECT id FROM teams WHERE org_id = ? AND name = ?");
                let found: Option<TeamId> =
                    sqlx::query_scalar(&sql).bind(org).bind(name).fetch_optional(self.pool()).await?;
                if let Some(id) = found {
                    return Ok(id);
                }
                sqlx::query(&q("INSERT INTO teams (org_id, name, created_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"))
                    .bind(org)
                    .bind(name)
                    .bind(now_ms)
                    .execute(self.pool())
                    .await?;
                Ok(sqlx::query_scalar(&sql).bind(org).bind(name).fetch_one(self.pool()).await?)
            }
        }

        #[async_trait::async_trait]
        impl $crate::accounts::AccountStore for $store {
            async fn create_org(&self, name: &str, now_ms: i64) -> $crate::Result<$crate::OrgId> {
                Ok(sqlx::query_scalar(&q("INSERT INTO orgs (name, created_ms) VALUES (?, ?) RETURNING id"))
                    .bind(name)
                    .bind(now_ms)
                    .fetch_one(self.pool())
                    .await?)
            }

            async fn insert_api_key(&self, key: $crate::NewApiKey<'_>) -> $crate::Result<$crate::ApiKey> {
                let id = insert_api_key(self.pool(), &key, None, None, false, "RETURNING id").await?;
                Ok($crate::api_key_from_new(id.expect("RETURNING gives the id"), &key))
            }

            async fn ensure_api_key(&self, key: $crate::NewApiKey<'_>) -> $crate::Result<$crate::ApiKey> {
                // Several replicas may bootstrap the same key at once: the unique hash decides.
                insert_api_key(self.pool(), &key, None, None, false, "ON CONFLICT (key_hash) DO NOTHING").await?;
                self.api_key_by_hash(key.key_hash)
                    .await?
                    .ok_or_else(|| $crate::StoreError::Invalid("api key vanished after insert".into()))
            }

            async fn api_key_by_hash(&self, key_hash: &str) -> $crate::Result<Option<$crate::ApiKey>> {
                Ok(sqlx::query_as(&q(
                    "SELECT id, org_id, name, prefix, scopes, created_ms, revoked_ms FROM api_keys WHERE key_hash = ?",
                ))
                .bind(key_hash)
                .fetch_optional(self.pool())
                .await?)
            }

            async fn org(&self, org: OrgId) -> $crate::Result<Option<OrgRecord>> {
                let sql = q("SELECT id, name, created_ms FROM orgs WHERE id = ?");
                Ok(sqlx::query_as(&sql).bind(org).fetch_optional(self.pool()).await?)
            }

            async fn orgs(&self) -> $crate::Result<Vec<OrgRecord>> {
                Ok(sqlx::query_as("SELECT id, name, created_ms FROM orgs ORDER BY id").fetch_all(self.pool()).await?)
            }

            async fn create_team(&self, org: OrgId, name: &str, now_ms: i64) -> $crate::Result<TeamRecord> {
                let id: TeamId =
                    sqlx::query_scalar(&q("INSERT INTO teams (org_id, name, created_ms) VALUES (?, ?, ?) RETURNING id"))
                        .bind(org)
                        .bind(name)
                        .bind(now_ms)
                        .fetch_one(self.pool())
                        .await?;
                Ok(TeamRecord { id, org_id: org, name: name.to_string(), created_ms: now_ms, members: Vec::new() })
            }

            async fn teams(&self, org: OrgId) -> $crate::Result<Vec<TeamRecord>> {
                let order = "name, id";
                let mut teams: Vec<TeamRecord> =
                    all_of_org(self.pool(), $crate::accounts::TEAM_COLS, "teams", order, org).await?;
                let members = self.team_members_of(org, None).await?;
                for team in &mut teams {
                    team.members = members.iter().filter(|(t, _)| *t == team.id).map(|(_, u)| *u).collect();
                }
                Ok(teams)
            }

            async fn team(&self, org: OrgId, id: TeamId) -> $crate::Result<Option<TeamRecord>> {
                let team: Option<TeamRecord> = one_of_org(self.pool(), $crate::accounts::TEAM_COLS, "teams", org, id).await?;
                let Some(mut team) = team else { return Ok(None) };
                team.members = self.team_members_of(org, Some(id)).await?.into_iter().map(|(_, u)| u).collect();
                Ok(Some(team))
            }

            async fn rename_team(&self, org: OrgId, id: TeamId, name: &str) -> $crate::Result<Option<TeamRecord>> {
                let done = sqlx::query(&q("UPDATE teams SET name = ? WHERE org_id = ? AND id = ?"))
                    .bind(name)
                    .bind(org)
                    .bind(id)
                    .execute(self.pool())
                    .await?
                    .rows_affected();
                if done == 0 {
                    return Ok(None);
                }
                self.team(org, id).await
            }

            async fn delete_team(&self, org: OrgId, id: TeamId) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                if !org_has(&mut *tx, "teams", org, id).await? {
                    return Ok(false);
                }
                for sql in [
                    "DELETE FROM host_teams WHERE org_id = ? AND team_id = ?",
                    "UPDATE gpus SET team_id = NULL, team_source = NULL WHERE org_id = ? AND team_id = ?",
                    "UPDATE api_keys SET team_id = NULL WHERE org_id = ? AND team_id = ?",
                    "DELETE FROM team_members WHERE team_id IN (SELECT id FROM teams WHERE org_id = ? AND id = ?)",
                    "DELETE FROM teams WHERE org_id = ? AND id = ?",
                ] {
                    sqlx::query(&q(sql)).bind(org).bind(id).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn set_team_member(
                &self,
                org: OrgId,
                team: TeamId,
                user: UserId,
                member: bool,
            ) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                let both: i64 = sqlx::query_scalar(&q(
                    "SELECT (SELECT count(*) FROM teams WHERE org_id = ? AND id = ?) \
                     + (SELECT count(*) FROM users WHERE org_id = ? AND id = ?)",
                ))
                .bind(org)
                .bind(team)
                .bind(org)
                .bind(user)
                .fetch_one(&mut *tx)
                .await?;
                if both != 2 {
                    return Ok(false);
                }
                let sql = if member {
                    "INSERT INTO team_members (team_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
                } else {
                    "DELETE FROM team_members WHERE team_id = ? AND user_id = ?"
                };
                sqlx::query(&q(sql)).bind(team).bind(user).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn create_user(&self, user: NewUser<'_>) -> $crate::Result<UserRecord> {
                let id: UserId = sqlx::query_scalar(&q(
                    "INSERT INTO users (org_id, email, name, password_hash, role, created_ms, updated_ms) \
                     VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                ))
                .bind(user.org_id)
                .bind(user.email)
                .bind(user.name)
                .bind(user.password_hash)
                .bind(user.role)
                .bind(user.now_ms)
                .bind(user.now_ms)
                .fetch_one(self.pool())
                .await?;
                Ok(UserRecord {
                    id,
                    org_id: user.org_id,
                    email: user.email.to_string(),
                    name: user.name.to_string(),
                    role: user.role,
                    created_ms: user.now_ms,
                    updated_ms: user.now_ms,
                    last_login_ms: None,
                    disabled_ms: None,
                })
            }

            async fn users(&self, org: OrgId) -> $crate::Result<Vec<UserRecord>> {
                let sql = format!("SELECT {} FROM users u WHERE u.org_id = ? ORDER BY u.email", $crate::accounts::USER_COLS);
                Ok(sqlx::query_as(&q(&sql)).bind(org).fetch_all(self.pool()).await?)
            }

            async fn user(&self, org: OrgId, id: UserId) -> $crate::Result<Option<UserRecord>> {
                let sql = format!("SELECT {} FROM users u WHERE u.org_id = ? AND u.id = ?", $crate::accounts::USER_COLS);
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(id).fetch_optional(self.pool()).await?)
            }

            async fn user_for_login(&self, email: &str) -> $crate::Result<Option<(UserRecord, String)>> {
                use sqlx::{FromRow as _, Row as _};
                let sql =
                    format!("SELECT {}, u.password_hash FROM users u WHERE u.email = ?", $crate::accounts::USER_COLS);
                let row = sqlx::query(&q(&sql)).bind(email).fetch_optional(self.pool()).await?;
                match row {
                    Some(r) => Ok(Some((UserRecord::from_row(&r)?, r.try_get("password_hash")?))),
                    None => Ok(None),
                }
            }

            async fn update_user(
                &self,
                org: OrgId,
                id: UserId,
                update: &UserUpdate,
                now_ms: i64,
            ) -> $crate::Result<Option<UserRecord>> {
                let disabled: i64 = match update.disabled {
                    None => 0,
                    Some(true) => 1,
                    Some(false) => 2,
                };
                let done = sqlx::query(&q(
                    "UPDATE users SET name = coalesce(?, name), role = coalesce(?, role), \
                     password_hash = coalesce(?, password_hash), \
                     disabled_ms = CASE ? WHEN 1 THEN coalesce(disabled_ms, ?) WHEN 2 THEN NULL ELSE disabled_ms END, \
                     updated_ms = ? WHERE org_id = ? AND id = ?",
                ))
                .bind(update.name.as_deref())
                .bind(update.role)
                .bind(update.password_hash.as_deref())
                .bind(disabled)
                .bind(now_ms)
                .bind(now_ms)
                .bind(org)
                .bind(id)
                .execute(self.pool())
                .await?
                .rows_affected();
                if done == 0 {
                    return Ok(None);
                }
                self.user(org, id).await
            }

            async fn delete_user(&self, org: OrgId, id: UserId, now_ms: i64) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                if !org_has(&mut *tx, "users", org, id).await? {
                    return Ok(false);
                }
                sqlx::query(&q(
                    "UPDATE api_keys SET revoked_ms = coalesce(revoked_ms, ?) WHERE org_id = ? AND user_id = ?",
                ))
                .bind(now_ms)
                .bind(org)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                for sql in [
                    "DELETE FROM sessions WHERE user_id = ?",
                    "DELETE FROM team_members WHERE user_id = ?",
                    "DELETE FROM users WHERE id = ?",
                ] {
                    sqlx::query(&q(sql)).bind(id).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn count_admins(&self, org: OrgId) -> $crate::Result<i64> {
                Ok(sqlx::query_scalar(&q(
                    "SELECT count(*) FROM users WHERE org_id = ? AND role = 'admin' AND disabled_ms IS NULL",
                ))
                .bind(org)
                .fetch_one(self.pool())
                .await?)
            }

            async fn create_session(&self, s: NewSession<'_>) -> $crate::Result<()> {
                let mut tx = begin(self.pool()).await?;
                sqlx::query(&q("DELETE FROM sessions WHERE expires_ms <= ?"))
                    .bind(s.created_ms)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&q(
                    "INSERT INTO sessions (token_hash, user_id, org_id, csrf_token, created_ms, expires_ms, last_seen_ms) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                ))
                .bind(s.token_hash)
                .bind(s.user_id)
                .bind(s.org_id)
                .bind(s.csrf_token)
                .bind(s.created_ms)
                .bind(s.expires_ms)
                .bind(s.created_ms)
                .execute(&mut *tx)
                .await?;
                sqlx::query(&q("UPDATE users SET last_login_ms = ? WHERE id = ?"))
                    .bind(s.created_ms)
                    .bind(s.user_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn session(&self, token_hash: &str, now_ms: i64) -> $crate::Result<Option<SessionRecord>> {
                let sql = format!(
                    "SELECT {}, s.csrf_token, s.created_ms AS session_created_ms, s.expires_ms, s.last_seen_ms \
                     FROM sessions s JOIN users u ON u.id = s.user_id AND u.org_id = s.org_id \
                     WHERE s.token_hash = ? AND s.expires_ms > ? AND u.disabled_ms IS NULL",
                    $crate::accounts::USER_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(token_hash).bind(now_ms).fetch_optional(self.pool()).await?)
            }

            async fn delete_session(&self, token_hash: &str) -> $crate::Result<()> {
                sqlx::query(&q("DELETE FROM sessions WHERE token_hash = ?"))
                    .bind(token_hash)
                    .execute(self.pool())
                    .await?;
                Ok(())
            }

            async fn delete_sessions_of(&self, org: OrgId, user: UserId, keep: Option<&str>) -> $crate::Result<u64> {
                Ok(sqlx::query(&q("DELETE FROM sessions WHERE org_id = ? AND user_id = ? AND token_hash <> ?"))
                    .bind(org)
                    .bind(user)
                    .bind(keep.unwrap_or(""))
                    .execute(self.pool())
                    .await?
                    .rows_affected())
            }

            async fn touch_session(&self, token_hash: &str, now_ms: i64) -> $crate::Result<()> {
                sqlx::query(&q("UPDATE sessions SET last_seen_ms = ? WHERE token_hash = ? AND last_seen_ms < ?"))
                    .bind(now_ms)
                    .bind(token_hash)
                    .bind(now_ms)
                    .execute(self.pool())
                    .await?;
                Ok(())
            }

            async fn create_api_key(
                &self,
                key: NewApiKey<'_>,
                user: Option<UserId>,
                team: Option<TeamId>,
            ) -> $crate::Result<ApiKeyInfo> {
                let id = insert_api_key(self.pool(), &key, user, team, false, "RETURNING id").await?;
                let key = $crate::api_key_from_new(id.expect("RETURNING gives the id"), &key);
                Ok(ApiKeyInfo { key, user_id: user, team_id: team, last_used_ms: None })
            }

            async fn api_keys(&self, org: OrgId, user: Option<UserId>) -> $crate::Result<Vec<ApiKeyInfo>> {
                let sql = format!(
                    "SELECT {} FROM api_keys k WHERE k.org_id = ? AND (? IS NULL OR k.user_id = ?) ORDER BY k.id",
                    $crate::accounts::KEY_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(user).bind(user).fetch_all(self.pool()).await?)
            }

            async fn api_key(&self, org: OrgId, id: ApiKeyId) -> $crate::Result<Option<ApiKeyInfo>> {
                let sql =
                    format!("SELECT {} FROM api_keys k WHERE k.org_id = ? AND k.id = ?", $crate::accounts::KEY_COLS);
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(id).fetch_optional(self.pool()).await?)
            }

            async fn revoke_api_key(&self, org: OrgId, id: ApiKeyId, now_ms: i64) -> $crate::Result<Option<ApiKeyInfo>> {
                sqlx::query(&q("UPDATE api_keys SET revoked_ms = coalesce(revoked_ms, ?) WHERE org_id = ? AND id = ?"))
                    .bind(now_ms)
                    .bind(org)
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                self.api_key(org, id).await
            }

            async fn api_key_auth(&self, key_hash: &str) -> $crate::Result<Option<KeyAuth>> {
                let sql = format!(
                    "SELECT {}, u.role AS owner_role, (u.disabled_ms IS NOT NULL) AS owner_disabled \
                     FROM api_keys k LEFT JOIN users u ON u.id = k.user_id WHERE k.key_hash = ?",
                    $crate::accounts::KEY_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(key_hash).fetch_optional(self.pool()).await?)
            }

            async fn touch_api_key(&self, org: OrgId, id: ApiKeyId, now_ms: i64) -> $crate::Result<()> {
                sqlx::query(&q(
                    "UPDATE api_keys SET last_used_ms = ? \
                     WHERE org_id = ? AND id = ? AND (last_used_ms IS NULL OR last_used_ms < ?)",
                ))
                .bind(now_ms)
                .bind(org)
                .bind(id)
                .bind(now_ms)
                .execute(self.pool())
                .await?;
                Ok(())
            }

            async fn revoke_api_keys_of(&self, org: OrgId, user: UserId, now_ms: i64) -> $crate::Result<u64> {
                Ok(sqlx::query(&q(
                    "UPDATE api_keys SET revoked_ms = ? WHERE org_id = ? AND user_id = ? AND revoked_ms IS NULL",
                ))
                .bind(now_ms)
                .bind(org)
                .bind(user)
                .execute(self.pool())
                .await?
                .rows_affected())
            }

            async fn sync_bootstrap_key(
                &self,
                key: Option<NewApiKey<'_>>,
                now_ms: i64,
            ) -> $crate::Result<BootstrapKeySync> {
                let mut tx = begin(self.pool()).await?;
                let keep = key.as_ref().map(|k| k.key_hash).unwrap_or("");
                let revoked = sqlx::query(&q(
                    "UPDATE api_keys SET revoked_ms = ? WHERE bootstrap = 1 AND revoked_ms IS NULL AND key_hash <> ?",
                ))
                .bind(now_ms)
                .bind(keep)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let mut current_revoked = false;
                if let Some(k) = key {
                    let found: Option<(i64, Option<i64>)> =
                        sqlx::query_as(&q("SELECT bootstrap, revoked_ms FROM api_keys WHERE key_hash = ?"))
                            .bind(k.key_hash)
                            .fetch_optional(&mut *tx)
                            .await?;
                    match found {
                        Some((0, _)) => {
                            return Err($crate::StoreError::Invalid(
                                "FLEETLENS_ADMIN_TOKEN is the secret of an ordinary API key: choose a new value".into(),
                            ));
                        }
                        Some((_, revoked_ms)) => current_revoked = revoked_ms.is_some(),
                        None => {
                            // Another replica starting with the same value may insert it first.
                            let tail = "ON CONFLICT (key_hash) DO NOTHING";
                            insert_api_key(&mut *tx, &k, None, None, true, tail).await?;
                        }
                    }
                }
                tx.commit().await?;
                Ok(BootstrapKeySync { revoked, current_revoked })
            }

            async fn gpu_teams(&self, org: OrgId) -> $crate::Result<Vec<GpuTeam>> {
                Ok(sqlx::query_as(&q($crate::accounts::GPU_TEAM_SQL)).bind(org).fetch_all(self.pool()).await?)
            }

            async fn hosts(&self, org: OrgId) -> $crate::Result<Vec<HostRecord>> {
                let gpus = self.gpu_teams(org).await?;
                let seen: Vec<(String, i64)> =
                    sqlx::query_as(&q("SELECT host, max(last_seen_ms) FROM gpus WHERE org_id = ? GROUP BY host"))
                        .bind(org)
                        .fetch_all(self.pool())
                        .await?;
                let pins: Vec<(String, TeamId)> =
                    sqlx::query_as(&q("SELECT host, team_id FROM host_teams WHERE org_id = ?"))
                        .bind(org)
                        .fetch_all(self.pool())
                        .await?;
                let mut hosts: Vec<HostRecord> = seen
                    .into_iter()
                    .map(|(host, last_seen_ms)| HostRecord {
                        assigned_team_id: pins.iter().find(|(h, _)| *h == host).map(|(_, t)| *t),
                        gpus: gpus.iter().filter(|g| g.host == host).cloned().collect(),
                        host,
                        last_seen_ms,
                    })
                    .collect();
                hosts.sort_by(|a, b| a.host.cmp(&b.host));
                Ok(hosts)
            }

            async fn set_host_team(
                &self,
                org: OrgId,
                host: &str,
                team: Option<TeamId>,
                now_ms: i64,
            ) -> $crate::Result<Assigned> {
                let mut tx = begin(self.pool()).await?;
                let gpus: i64 = sqlx::query_scalar(&q("SELECT count(*) FROM gpus WHERE org_id = ? AND host = ?"))
                    .bind(org)
                    .bind(host)
                    .fetch_one(&mut *tx)
                    .await?;
                if gpus == 0 {
                    return Ok(Assigned::NoTarget);
                }
                match team {
                    Some(team) => {
                        if !org_has(&mut *tx, "teams", org, team).await? {
                            return Ok(Assigned::NoTeam);
                        }
                        sqlx::query(&q(
                            "INSERT INTO host_teams (org_id, host, team_id, updated_ms) VALUES (?, ?, ?, ?) \
                             ON CONFLICT (org_id, host) DO UPDATE SET team_id = excluded.team_id, updated_ms = excluded.updated_ms",
                        ))
                        .bind(org)
                        .bind(host)
                        .bind(team)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await?;
                        sqlx::query(&q(
                            "UPDATE gpus SET team_id = ?, team_source = 'host' \
                             WHERE org_id = ? AND host = ? AND coalesce(team_source, '') <> 'gpu'",
                        ))
                        .bind(team)
                        .bind(org)
                        .bind(host)
                        .execute(&mut *tx)
                        .await?;
                    }
                    None => {
                        sqlx::query(&q("DELETE FROM host_teams WHERE org_id = ? AND host = ?"))
                            .bind(org)
                            .bind(host)
                            .execute(&mut *tx)
                            .await?;
                        sqlx::query(&q(
                            "UPDATE gpus SET team_id = NULL, team_source = NULL \
                             WHERE org_id = ? AND host = ? AND team_source = 'host'",
                        ))
                        .bind(org)
                        .bind(host)
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                tx.commit().await?;
                Ok(Assigned::Done)
            }

            async fn set_gpu_team(&self, org: OrgId, uuid: &str, team: Option<TeamId>) -> $crate::Result<Assigned> {
                let mut tx = begin(self.pool()).await?;
                let gpu: Option<$crate::GpuId> = sqlx::query_scalar(&q("SELECT id FROM gpus WHERE org_id = ? AND uuid = ?"))
                    .bind(org)
                    .bind(uuid)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(gpu) = gpu else { return Ok(Assigned::NoTarget) };
                match team {
                    Some(team) => {
                        if !org_has(&mut *tx, "teams", org, team).await? {
                            return Ok(Assigned::NoTeam);
                        }
                        sqlx::query(&q("UPDATE gpus SET team_id = ?, team_source = 'gpu' WHERE id = ?"))
                            .bind(team)
                            .bind(gpu)
                            .execute(&mut *tx)
                            .await?;
                    }
                    None => {
                        // Back to its host's assignment, if any; ingest fills in the rest.
                        sqlx::query(&q(
                            "UPDATE gpus SET \
                             team_id = (SELECT h.team_id FROM host_teams h WHERE h.org_id = gpus.org_id AND h.host = gpus.host), \
                             team_source = CASE WHEN EXISTS (SELECT 1 FROM host_teams h WHERE h.org_id = gpus.org_id \
                             AND h.host = gpus.host) THEN 'host' ELSE NULL END WHERE id = ?",
                        ))
                        .bind(gpu)
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                tx.commit().await?;
                Ok(Assigned::Done)
            }

            async fn assign_ingest_team(
                &self,
                org: OrgId,
                host: &str,
                key_team: Option<TeamId>,
                label: Option<&str>,
                now_ms: i64,
            ) -> $crate::Result<Option<TeamId>> {
                let pinned: Option<TeamId> =
                    sqlx::query_scalar(&q("SELECT team_id FROM host_teams WHERE org_id = ? AND host = ?"))
                        .bind(org)
                        .bind(host)
                        .fetch_optional(self.pool())
                        .await?;
                let key_team = match key_team {
                    Some(t) if org_has(self.pool(), "teams", org, t).await? => Some(t),
                    _ => None,
                };
                let (team, source) = match (pinned, key_team, label) {
                    (Some(t), _, _) => (t, TeamSource::Host),
                    (None, Some(t), _) => (t, TeamSource::Key),
                    (None, None, Some(name)) => (self.ensure_team(org, name, now_ms).await?, TeamSource::Label),
                    (None, None, None) => return Ok(None),
                };
                const STALE: &str = "WHERE org_id = ? AND host = ? AND coalesce(team_source, '') <> 'gpu' \
                     AND (coalesce(team_id, -1) <> ? OR coalesce(team_source, '') <> ?)";
                let stale: i64 = sqlx::query_scalar(&q(&format!("SELECT count(*) FROM gpus {STALE}")))
                    .bind(org)
                    .bind(host)
                    .bind(team)
                    .bind(source.as_str())
                    .fetch_one(self.pool())
                    .await?;
                if stale > 0 {
                    sqlx::query(&q(&format!("UPDATE gpus SET team_id = ?, team_source = ? {STALE}")))
                        .bind(team)
                        .bind(source.as_str())
                        .bind(org)
                        .bind(host)
                        .bind(team)
                        .bind(source.as_str())
                        .execute(self.pool())
                        .await?;
                }
                Ok(Some(team))
            }
        }
    };
}

mod sqlite_impl {
    use crate::dialect::sqlite::{all_of_org, begin, insert_api_key, one_of_org, org_has, q};
    use crate::sqlite::SqliteStore;

    impl_account_store!(SqliteStore);
}

mod pg_impl {
    use crate::dialect::pg::{all_of_org, begin, insert_api_key, one_of_org, org_has, q};
    use crate::postgres::PgStore;

    impl_account_store!(PgStore);
}
