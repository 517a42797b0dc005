//! Bodies of the account endpoints: login and who is logged in, organisations, users, teams,
//! API keys, and the team assignment of hosts and GPUs. Absent optional fields of a request
//! are left out when sent, so a patch carries only what it changes.

use fleetlens_core::{ApiKeyId, OrgId, Role, Scope, TeamId, TeamSource, UserId};
use serde::{Deserialize, Serialize};

// ---- answers ----

/// An organisation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OrgView {
    pub id: OrgId,
    pub name: String,
    pub created_ms: i64,
}

/// A user of the caller's organisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserView {
    pub id: UserId,
    pub email: String,
    pub name: String,
    pub role: Role,
    pub disabled: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub last_login_ms: Option<i64>,
    pub disabled_ms: Option<i64>,
}

/// A team and its members.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TeamView {
    pub id: TeamId,
    pub name: String,
    pub created_ms: i64,
    /// User ids.
    pub members: Vec<UserId>,
}

/// An API key, never its secret.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyView {
    pub id: ApiKeyId,
    pub name: String,
    /// The first characters of the key, to recognise it.
    pub prefix: String,
    pub scopes: Vec<Scope>,
    /// The user who made it.
    pub user_id: Option<UserId>,
    /// Hosts that report with this key join this team.
    pub team_id: Option<TeamId>,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub revoked: bool,
    pub revoked_ms: Option<i64>,
}

/// A key just made: the only answer that ever shows its secret.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedKeyView {
    #[serde(flatten)]
    pub view: KeyView,
    /// The secret: shown once, stored only as a hash.
    pub key: String,
}

/// A GPU of a host and the team it counts for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuTeamView {
    pub uuid: String,
    pub host: String,
    pub team_id: Option<TeamId>,
    pub team_name: Option<String>,
    /// `gpu` or `host` (an admin), `key`, `label`.
    pub team_source: Option<TeamSource>,
}

/// `GET /api/v1/hosts`: a host, the team an admin gave it, and its GPUs' teams.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostView {
    pub host: String,
    /// The team an admin assigned the host to.
    pub assigned_team_id: Option<TeamId>,
    pub last_seen_ms: i64,
    pub gpus: Vec<GpuTeamView>,
}

/// `POST /api/v1/auth/login`: the session just made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionView {
    pub user: UserView,
    pub org: OrgView,
    pub scopes: Vec<Scope>,
    /// Send this in `X-CSRF-Token` with every POST/PUT/PATCH/DELETE made with the session.
    pub csrf_token: String,
    pub expires_ms: i64,
}

/// The API key a caller authenticated with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MeKeyView {
    pub id: ApiKeyId,
    pub name: String,
    pub prefix: String,
    pub team_id: Option<TeamId>,
}

/// How a caller authenticated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Via {
    #[default]
    Session,
    ApiKey,
}

/// `GET /api/v1/auth/me`: who the caller is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MeView {
    pub org: OrgView,
    /// `session` or `api_key`.
    pub via: Via,
    pub user: Option<UserView>,
    pub role: Option<Role>,
    pub scopes: Vec<Scope>,
    pub api_key: Option<MeKeyView>,
    /// The session's CSRF token (send it in `X-CSRF-Token`).
    pub csrf_token: Option<String>,
    pub session_expires_ms: Option<i64>,
}

impl MeView {
    pub fn is_admin(&self) -> bool {
        self.scopes.contains(&Scope::Admin)
    }

    /// The role in words: the user's role, or the key's strongest scope.
    pub fn role_label(&self) -> String {
        match (self.role, self.is_admin()) {
            (Some(r), _) => r.as_str().into(),
            (None, true) => "admin key".into(),
            (None, false) => "read-only key".into(),
        }
    }

    /// The name to show: the user's name, else their email, else the API key's name.
    pub fn who(&self) -> String {
        match (&self.user, &self.api_key) {
            (Some(u), _) if !u.name.is_empty() => u.name.clone(),
            (Some(u), _) => u.email.clone(),
            (None, Some(k)) => format!("API key “{}”", k.name),
            (None, None) => "unknown".into(),
        }
    }
}

/// A login answers with the session; seen from the dashboard it is the same as `auth/me`.
impl From<SessionView> for MeView {
    fn from(s: SessionView) -> MeView {
        MeView {
            org: s.org,
            via: Via::Session,
            role: Some(s.user.role),
            user: Some(s.user),
            scopes: s.scopes,
            api_key: None,
            csrf_token: Some(s.csrf_token),
            session_expires_ms: Some(s.expires_ms),
        }
    }
}

/// `POST /api/v1/orgs`: the organisation and its first admin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedOrgView {
    pub org: OrgView,
    pub admin: UserView,
}

// ---- requests ----

/// `POST /api/v1/auth/login`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    pub email: String,
    pub password: String,
}

/// `PUT /api/v1/auth/password` (a session).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PasswordBody {
    pub current_password: String,
    pub new_password: String,
    /// Also revoke every API key this user made (after a suspected compromise).
    #[serde(default)]
    pub revoke_api_keys: bool,
}

/// `POST /api/v1/orgs` (an admin of the default organisation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewOrgBody {
    pub name: String,
    pub admin_email: String,
    pub admin_password: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_name: Option<String>,
}

/// `POST /api/v1/teams`, `PUT /api/v1/teams/{id}` (admin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TeamBody {
    pub name: String,
}

/// `POST /api/v1/api-keys`: a key with at most the caller's own scopes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewKeyBody {
    pub name: String,
    /// `read`, `ingest`, `admin`.
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<TeamId>,
}

/// `PUT /api/v1/hosts/{host}/team`, `PUT /api/v1/gpus/{uuid}/team` (admin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AssignBody {
    /// The team, or null to clear the assignment.
    pub team_id: Option<TeamId>,
}

/// `POST /api/v1/users` (admin): a new user of the caller's organisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewUserBody {
    pub email: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub password: String,
    /// `viewer`, `member` or `admin`.
    pub role: Role,
}

/// `PUT /api/v1/users/{id}` (admin): the fields to change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UserPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, role: Role) -> UserView {
        UserView {
            id: UserId(7),
            email: "ada@example.com".into(),
            name: name.into(),
            role,
            disabled: false,
            created_ms: 1,
            updated_ms: 1,
            last_login_ms: None,
            disabled_ms: None,
        }
    }

    #[test]
    fn a_login_reads_as_a_session_me() {
        let session = SessionView {
            user: user("", Role::Member),
            org: OrgView { id: OrgId(1), name: "default".into(), created_ms: 0 },
            scopes: vec![Scope::Read, Scope::Ingest],
            csrf_token: "t".into(),
            expires_ms: 99,
        };
        let me = MeView::from(session);
        assert_eq!(me.via, Via::Session);
        assert_eq!(me.role_label(), "member");
        assert_eq!(me.who(), "ada@example.com");
        assert!(!me.is_admin());
        assert_eq!(me.csrf_token.as_deref(), Some("t"));
        assert_eq!(serde_json::to_value(&me).unwrap()["via"], "session");
    }

    #[test]
    fn a_key_is_named_by_its_strongest_scope() {
        let me = MeView {
            via: Via::ApiKey,
            scopes: vec![Scope::Admin],
            api_key: Some(MeKeyView { id: ApiKeyId(3), name: "ci".into(), prefix: "fl_".into(), team_id: None }),
            ..MeView::default()
        };
        assert_eq!(me.role_label(), "admin key");
        assert_eq!(me.who(), "API key “ci”");
        assert_eq!(serde_json::to_value(&me).unwrap()["via"], "api_key");
    }
}
