//! Bodies of the alerting endpoints: notification channels and silences.

use fleetlens_core::rules::{Matchers, SilenceWindow};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A notification channel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChannelView {
    pub id: i64,
    pub name: String,
    pub kind: String,
    pub url: String,
    /// Rules without channels of their own notify the default channels.
    pub default: bool,
    pub min_interval_ms: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// What a notification group's key is made of: `rule`, `owner` (job, else user, else
    /// namespace), or alert label names (`host`, `team`, `gpu`, …).
    pub group_by: Vec<String>,
    /// A new group's first message waits this long for more GPUs.
    pub group_wait_s: i64,
    /// At most one follow-up per group this often (when GPUs joined).
    pub group_interval_s: i64,
    /// `off` (real-time messages), `daily` or `weekly` (a digest instead).
    pub digest: String,
    /// When the digest goes out, `HH:MM` UTC (weekly: on Mondays).
    pub digest_at: String,
}

/// `POST` (name, kind, url required) and `PUT` (the fields to change) of
/// `/api/v1/notification-channels`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_interval_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_wait_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_interval_s: Option<i64>,
    /// `off`, `daily` or `weekly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `HH:MM` UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_at: Option<String>,
}

/// `{"channels": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChannelList {
    pub channels: Vec<ChannelView>,
}

/// A silence: alerts its matchers select send no notifications while it is active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SilenceView {
    pub id: i64,
    pub matchers: Matchers,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub starts_at: String,
    pub ends_at: String,
    pub comment: String,
    /// Who made it, from the caller: the user's email, or `key:` and the API key's name.
    pub created_by: String,
    pub active: bool,
    pub created_ms: i64,
}

impl SilenceView {
    /// The span and matchers the alert engine checks.
    pub fn window(&self) -> SilenceWindow {
        SilenceWindow {
            id: self.id,
            matchers: self.matchers.clone(),
            starts_at_ms: self.starts_at_ms,
            ends_at_ms: self.ends_at_ms,
        }
    }

    /// `rule=…, host=…` in the matchers' order.
    pub fn matchers_text(&self) -> String {
        let m = &self.matchers;
        [("rule", &m.rule), ("host", &m.host), ("gpu", &m.gpu), ("team", &m.team), ("severity", &m.severity)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `POST /api/v1/silences` (admin). The maker is the caller, never a body field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SilenceBody {
    pub matchers: Matchers,
    /// RFC 3339 text or Unix milliseconds; default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<Value>,
    pub ends_at: Value,
    #[serde(default)]
    pub comment: String,
}

/// `{"silences": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SilenceList {
    pub silences: Vec<SilenceView>,
}
