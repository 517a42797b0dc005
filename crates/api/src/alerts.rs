//! Bodies of the alerting endpoints: rules and the condition language, alerts and their
//! notifications, notification channels and their delivery log, silences.

use std::collections::BTreeMap;

pub use fleetlens_core::rules::OutboxMessage;
use fleetlens_core::rules::inhibit::InhibitScope;
use fleetlens_core::rules::{DeliveryAttempt, FieldType, Matchers, RuleSpec, SilenceWindow};
use fleetlens_core::{
    AlertId, ChannelId, ChannelKind, DeliveryId, MessageId, OutboxStatus, RuleId, Severity, SilenceId, WorkloadState,
};
use serde::{Deserialize, Serialize};

use crate::AlertView;

// ---- rules ----

/// An alert rule: the fields its author set (`RuleSpec`, at the top level of the JSON) and what
/// the server keeps about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleView {
    pub id: RuleId,
    #[serde(flatten)]
    pub rule: RuleSpec,
    /// Key of the shipped rule this started as (null for a rule a user wrote).
    pub builtin: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// `{"rules": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleList {
    pub rules: Vec<RuleView>,
}

/// `POST /api/v1/alert-rules` takes these (name and condition required); `PUT` changes the
/// fields it names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_interval_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Vec<ChannelId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inhibits: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `gpu`, `host` or `job`.
    pub inhibit_scope: Option<InhibitScope>,
}

impl RuleBody {
    /// `base` with the fields this body names replaced. Both structs are spelled out in full, so
    /// a field added to either does not compile until it is handled here.
    pub fn apply(self, base: RuleSpec) -> RuleSpec {
        let RuleBody {
            name,
            condition,
            for_s,
            keep_firing_for_s,
            repeat_interval_s,
            severity,
            labels,
            description,
            advice,
            channels,
            enabled,
            inhibits,
            inhibit_scope,
        } = self;
        RuleSpec {
            name: name.unwrap_or(base.name),
            condition: condition.unwrap_or(base.condition),
            for_s: for_s.unwrap_or(base.for_s),
            keep_firing_for_s: keep_firing_for_s.unwrap_or(base.keep_firing_for_s),
            repeat_interval_s: repeat_interval_s.unwrap_or(base.repeat_interval_s),
            severity: severity.unwrap_or(base.severity),
            labels: labels.unwrap_or(base.labels),
            description: description.unwrap_or(base.description),
            advice: advice.unwrap_or(base.advice),
            channels: channels.unwrap_or(base.channels),
            enabled: enabled.unwrap_or(base.enabled),
            inhibits: inhibits.unwrap_or(base.inhibits),
            inhibit_scope: inhibit_scope.unwrap_or(base.inhibit_scope),
        }
    }
}

/// `GET /api/v1/alert-rules/fields`: the condition language: its fields, states, severities
/// and operators.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleFields {
    pub fields: Vec<FieldInfo>,
    pub states: Vec<WorkloadState>,
    pub severities: Vec<Severity>,
    pub operators: Vec<String>,
}

/// One field of the condition language (the owned form of `fleetlens_core::rules::FieldDef`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: FieldType,
    pub unit: String,
    pub doc: String,
}

impl From<&fleetlens_core::rules::FieldDef> for FieldInfo {
    fn from(f: &fleetlens_core::rules::FieldDef) -> Self {
        FieldInfo { name: f.name.into(), ty: f.ty, unit: f.unit.into(), doc: f.doc.into() }
    }
}

/// `POST /api/v1/alert-rules/check`: a condition to parse without storing anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckBody {
    pub condition: String,
}

/// A condition that parses, and the fields it reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConditionCheck {
    pub ok: bool,
    pub fields: Vec<String>,
}

/// The 422 of a rule or condition that does not validate: the field at fault and, for a
/// condition that does not parse, where in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleErrorBody {
    pub error: RuleErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleErrorDetail {
    /// `validation_failed`.
    pub code: String,
    pub message: String,
    pub field: String,
    /// 0-based character position in the condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// 1-based column (`position + 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

// ---- alerts and their notifications ----

/// `{"alerts": [...]}`, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertList {
    pub alerts: Vec<AlertView>,
}

/// One delivery attempt of a notification: the line of the delivery log (`DeliveryAttempt`, at
/// the top level of the JSON) and whether its channel still exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryView {
    pub id: DeliveryId,
    #[serde(flatten)]
    pub delivery: DeliveryAttempt,
    /// The channel has been deleted since.
    pub channel_deleted: bool,
}

/// One alert with its notification messages and delivery attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertDetail {
    #[serde(flatten)]
    pub alert: AlertView,
    pub messages: Vec<OutboxMessage>,
    pub deliveries: Vec<DeliveryView>,
}

/// `{"deliveries": [...]}`, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryView>,
}

/// `POST /api/v1/notification-channels/{id}/test`: the outcome of a test message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TestResult {
    pub message_id: MessageId,
    pub delivered: bool,
    /// Outbox status: `pending`, `sending`, `delivered` or `failed`.
    pub status: OutboxStatus,
    pub attempts: i64,
    /// HTTP status the receiver answered, if it answered.
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

// ---- channels ----

/// A notification channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChannelView {
    pub id: ChannelId,
    pub name: String,
    pub kind: ChannelKind,
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
    pub kind: Option<ChannelKind>,
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
    pub id: SilenceId,
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
    /// Default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<crate::TimeArg>,
    pub ends_at: crate::TimeArg,
    #[serde(default)]
    pub comment: String,
}

/// `{"silences": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SilenceList {
    pub silences: Vec<SilenceView>,
}

/// `GET /api/v1/alerts` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct AlertQuery {
    /// `firing`, `resolved`, `pending`, `open` (pending or firing) or `all` (default).
    #[cfg_attr(feature = "openapi", param(pattern = "^(firing|resolved|pending|open|all)$"))]
    pub status: Option<String>,
    pub rule_id: Option<RuleId>,
    /// GPU UUID.
    pub gpu: Option<String>,
    /// Only alerts with an id below this (paging).
    pub before: Option<AlertId>,
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    pub limit: Option<i64>,
}

/// `GET /api/v1/notification-deliveries` (and a channel's deliveries) query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct DeliveryQuery {
    pub channel_id: Option<ChannelId>,
    pub alert_id: Option<AlertId>,
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    pub limit: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetlens_core::MessageKind;

    #[test]
    fn a_rule_error_without_a_position_has_no_position_fields() {
        let detail = |position: Option<usize>| RuleErrorDetail {
            code: "validation_failed".into(),
            message: "m".into(),
            field: "condition".into(),
            position,
            column: position.map(|p| p + 1),
        };
        let plain = serde_json::to_value(RuleErrorBody { error: detail(None) }).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"error": {"code": "validation_failed", "message": "m", "field": "condition"}})
        );
        let at = serde_json::to_value(RuleErrorBody { error: detail(Some(4)) }).unwrap();
        assert_eq!(at["error"]["position"], 4);
        assert_eq!(at["error"]["column"], 5);
    }

    /// The log line's fields stand at the top level; `channel_deleted`, which the server works
    /// out, comes after them (serde writes a flattened struct's fields where it stands).
    #[test]
    fn a_delivery_sends_its_log_line_at_the_top_level() {
        let view = DeliveryView {
            id: DeliveryId(8),
            delivery: DeliveryAttempt {
                message_id: Some(MessageId(5)),
                alert_id: None,
                channel_id: ChannelId(2),
                kind: MessageKind::Firing,
                attempt: 1,
                at_ms: 10,
                outcome: fleetlens_core::AttemptOutcome::Retry,
                status_code: Some(500),
                error: Some("HTTP 500".into()),
                duration_ms: Some(3),
            },
            channel_deleted: true,
        };
        let text = serde_json::to_string(&view).unwrap();
        assert_eq!(
            text,
            r#"{"id":8,"message_id":5,"alert_id":null,"channel_id":2,"kind":"firing","attempt":1,"at_ms":10,"outcome":"retry","status_code":500,"error":"HTTP 500","duration_ms":3,"channel_deleted":true}"#
        );
        assert_eq!(serde_json::from_str::<DeliveryView>(&text).unwrap(), view);
    }

    #[test]
    fn a_rule_patch_sends_only_what_it_changes() {
        let patch = RuleBody { enabled: Some(false), channels: Some(vec![ChannelId(2)]), ..RuleBody::default() };
        assert_eq!(serde_json::to_value(&patch).unwrap(), serde_json::json!({"enabled": false, "channels": [2]}));
    }

    fn written_rule() -> RuleSpec {
        RuleSpec {
            name: "idle".into(),
            condition: "gpu_util_pct < 5".into(),
            for_s: 600,
            keep_firing_for_s: 60,
            repeat_interval_s: 3600,
            severity: Severity::Critical,
            labels: BTreeMap::from([("team".into(), "ml".into())]),
            description: "d".into(),
            advice: "a".into(),
            channels: vec![ChannelId(3)],
            enabled: false,
            inhibits: vec!["*".into()],
            inhibit_scope: InhibitScope::Host,
        }
    }

    #[test]
    fn a_rule_body_names_the_fields_of_a_rule_view() {
        // A rule as GET sends it, less what the server keeps, is a body POST and PUT take
        // (no unknown field) and that body sets every field.
        let view = RuleView {
            id: RuleId(7),
            rule: written_rule(),
            builtin: Some("idle".into()),
            created_ms: 1,
            updated_ms: 2,
        };
        let mut json = serde_json::to_value(&view).unwrap();
        let keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        for k in ["id", "builtin", "created_ms", "updated_ms"] {
            json.as_object_mut().unwrap().remove(k).unwrap_or_else(|| panic!("{k} missing from {keys:?}"));
        }
        let body: RuleBody = serde_json::from_value(json).unwrap();
        assert_eq!(body.apply(RuleSpec::default()), written_rule());
        let back: RuleView = serde_json::from_value(serde_json::to_value(&view).unwrap()).unwrap();
        assert_eq!(back, view);
    }

    #[test]
    fn a_rule_view_is_flat() {
        let view = RuleView { id: RuleId(7), rule: written_rule(), builtin: None, created_ms: 1, updated_ms: 2 };
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::json!({
                "id": 7, "name": "idle", "condition": "gpu_util_pct < 5", "for_s": 600,
                "keep_firing_for_s": 60, "repeat_interval_s": 3600, "severity": "critical",
                "labels": {"team": "ml"}, "description": "d", "advice": "a", "channels": [3],
                "enabled": false, "builtin": null, "created_ms": 1, "updated_ms": 2,
                "inhibits": ["*"], "inhibit_scope": "host",
            })
        );
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        let patch = RuleBody { enabled: Some(true), severity: Some(Severity::Info), ..RuleBody::default() };
        let want = RuleSpec { enabled: true, severity: Severity::Info, ..written_rule() };
        assert_eq!(patch.apply(written_rule()), want);
        assert_eq!(RuleBody::default().apply(written_rule()), written_rule());
    }

    #[test]
    fn severities_and_kinds_travel_as_their_names() {
        let body = r#"{"kind":"alertmanager","digest":"off"}"#;
        let channel: ChannelBody = serde_json::from_str(body).unwrap();
        assert_eq!(channel.kind, Some(ChannelKind::Alertmanager));
        assert_eq!(serde_json::to_string(&channel).unwrap(), body, "byte for byte");
        let rule: RuleBody = serde_json::from_str(r#"{"severity":"critical"}"#).unwrap();
        assert_eq!(rule.severity, Some(Severity::Critical));
        let e = serde_json::from_str::<ChannelBody>(r#"{"kind":"pager"}"#).unwrap_err().to_string();
        assert!(e.contains("unknown variant `pager`, expected one of `slack`, `webhook`, `alertmanager`"), "{e}");
        let e = serde_json::from_str::<RuleBody>(r#"{"severity":"urgent"}"#).unwrap_err().to_string();
        assert!(e.contains("`info`, `warning`, `critical`"), "{e}");
    }
}
