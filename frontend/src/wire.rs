//! Answers of endpoints whose types live in the server rather than in `fleetlens-api`: only
//! the fields the dashboard shows, each defaulted, so that additions on the server never break
//! the page.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `GET /api/v1/alerts`: `{"alerts": [...]}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct AlertList {
    #[serde(default)]
    pub alerts: Vec<Alert>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Alert {
    pub id: i64,
    pub rule_name: String,
    pub severity: String,
    /// `pending`, `firing` or `resolved`.
    pub status: String,
    pub silenced: bool,
    pub gpu: String,
    pub host: String,
    pub team: Option<String>,
    pub active_since_ms: i64,
    pub fired_at_ms: Option<i64>,
    pub resolved_at_ms: Option<i64>,
    pub summary: String,
    pub condition: String,
    pub rule_id: i64,
    pub silenced_by: Option<i64>,
    pub advice: String,
    /// `alertname`, `rule_id`, `severity`, `host`, `gpu`, `team`, and the rule's own: what
    /// silences match.
    pub labels: BTreeMap<String, String>,
    /// Held back by another open alert of the same problem (inhibition), and which.
    #[serde(default)]
    pub inhibited: bool,
    #[serde(default)]
    pub inhibited_by: Option<i64>,
    /// Its notification group (rule, job or owner, host).
    #[serde(default)]
    pub group: String,
}

/// `GET /api/v1/alert-rules`: `{"rules": [...]}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct RuleList {
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Rule {
    pub id: i64,
    pub name: String,
    pub condition: String,
    pub for_s: i64,
    pub keep_firing_for_s: i64,
    pub repeat_interval_s: i64,
    pub severity: String,
    pub description: String,
    pub advice: String,
    pub channels: Vec<i64>,
    pub enabled: bool,
    pub builtin: Option<String>,
}

/// A user as the accounts API shows one.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct User {
    pub id: i64,
    pub email: String,
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub last_login_ms: Option<i64>,
}

/// An API key as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct KeyInfo {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<String>,
    pub user_id: Option<i64>,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub revoked: bool,
}

/// `POST /api/v1/api-keys`: the key and, this once, its secret.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub info: KeyInfo,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Org {
    pub id: i64,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct KeyIdentity {
    pub id: i64,
    pub name: String,
    pub prefix: String,
}

/// Who is logged in: `GET /api/v1/auth/me`, and (in the same words) the login answer.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Me {
    pub org: Org,
    /// `session` or `api_key`.
    pub via: String,
    pub user: Option<User>,
    pub role: Option<String>,
    pub scopes: Vec<String>,
    pub api_key: Option<KeyIdentity>,
    pub csrf_token: Option<String>,
}

impl Me {
    pub fn is_admin(&self) -> bool {
        self.scopes.iter().any(|s| s == "admin")
    }

    /// The role in words: the user's role, or the key's strongest scope.
    pub fn role_label(&self) -> String {
        match (&self.role, self.is_admin()) {
            (Some(r), _) => r.clone(),
            (None, true) => "admin key".into(),
            (None, false) => "read-only key".into(),
        }
    }

    /// The name shown in the header.
    pub fn who(&self) -> String {
        match (&self.user, &self.api_key) {
            (Some(u), _) if !u.name.is_empty() => u.name.clone(),
            (Some(u), _) => u.email.clone(),
            (None, Some(k)) => format!("API key “{}”", k.name),
            (None, None) => "unknown".into(),
        }
    }
}

/// `POST /api/v1/auth/login`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct LoginAnswer {
    pub user: User,
    pub org: Org,
    pub scopes: Vec<String>,
    pub csrf_token: String,
}

impl From<LoginAnswer> for Me {
    fn from(l: LoginAnswer) -> Me {
        Me {
            org: l.org,
            via: "session".into(),
            role: Some(l.user.role.clone()),
            user: Some(l.user),
            scopes: l.scopes,
            api_key: None,
            csrf_token: Some(l.csrf_token),
        }
    }
}

/// `GET /api/v1/alert-rules/fields`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct RuleFields {
    pub fields: Vec<FieldInfo>,
    pub states: Vec<String>,
    pub severities: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct FieldInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub unit: String,
    pub doc: String,
}

/// `POST /api/v1/notification-channels/{id}/test`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct TestResult {
    pub delivered: bool,
    pub status: String,
    pub attempts: i64,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// `GET /api/v1/teams`: a team and its members' user ids.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct Team {
    pub id: i64,
    pub name: String,
    pub members: Vec<i64>,
}

/// `GET /api/v1/hosts`: a host, the team an admin gave it, and its GPUs' teams.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct HostTeams {
    pub host: String,
    pub assigned_team_id: Option<i64>,
    pub last_seen_ms: i64,
    pub gpus: Vec<GpuTeam>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default)]
pub struct GpuTeam {
    pub uuid: String,
    pub team_name: Option<String>,
    /// `gpu` or `host` (an admin), `key`, `label`.
    pub team_source: Option<String>,
}
