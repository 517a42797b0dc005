//! Alerting, the pure part: the condition language ([`expr`]), what a condition can read
//! ([`fields`]), the pending → firing → resolved machine on event time ([`machine`]),
//! silences ([`silence`]), inhibition ([`inhibit`]), notification groups and digests
//! ([`group`]), the shipped rules ([`defaults`]) and the messages ([`payload`]).

pub mod defaults;
pub mod delivery;
pub mod expr;
pub mod fields;
pub mod group;
pub mod group_payload;
pub mod inhibit;
pub mod kinds;
pub mod machine;
pub mod payload;
pub mod silence;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use defaults::{DEFAULT_RULES, DEFAULTS_VERSION, DefaultRule};
pub use delivery::{DeliveryAttempt, OutboxMessage};
pub use expr::{Condition, ParseError, Truth};
pub use fields::{FIELDS, FieldDef, FieldType, Observation, Value};
pub use kinds::{AlertStatus, AttemptOutcome, ChannelKind, MessageKind, OutboxStatus, Severity};
pub use machine::{Phase, Step, Timing, repeat_due, step};
pub use payload::{MatchedValue, Notification, NotifyStatus, alertmanager_v2, fingerprint, slack_message, webhook_v4};
pub use silence::{Matchers, SilenceWindow, silenced_by};

/// Severity names, mildest first.
pub const SEVERITIES: [&str; 3] = Severity::NAMES;
/// Longest `for_s`, `keep_firing_for_s` and `repeat_interval_s`: 30 days.
pub const MAX_DURATION_S: i64 = 30 * 86_400;
/// Shortest repeat interval (0 turns reminders off).
pub const MIN_REPEAT_S: i64 = 60;
/// Labels Fleetlens sets itself; a rule cannot override them.
pub const RESERVED_LABELS: [&str; 5] = ["alertname", "rule_id", "severity", "host", "gpu"];

// Every field a user sets on a rule, defined once: the store reads it as part of the rule's row
// (flattened into `AlertRuleRecord`; inserts and updates take it alone), the API sends it
// flattened into `RuleView`, and the engine evaluates it. The doc comment below is the OpenAPI
// schema's description.
/// An alert rule as its author writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct RuleSpec {
    pub name: String,
    pub condition: String,
    pub for_s: i64,
    pub keep_firing_for_s: i64,
    pub repeat_interval_s: i64,
    /// `info`, `warning` or `critical`.
    pub severity: Severity,
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "crate::json_text::JsonText<BTreeMap<String, String>>"))]
    pub labels: BTreeMap<String, String>,
    pub description: String,
    pub advice: String,
    /// Where its alerts go; none: the organisation's default channels.
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "crate::json_text::JsonText<Vec<crate::ChannelId>>"))]
    pub channels: Vec<crate::ChannelId>,
    pub enabled: bool,
    /// Rules whose alerts this rule's open alerts hold back: shipped rule keys or rule names,
    /// `*` (every other rule), `state:<state>` (rules that hold in that workload state).
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "crate::json_text::JsonText<Vec<String>>"))]
    pub inhibits: Vec<String>,
    /// Where: `gpu` (the same GPU), `host` or `job` (the same `owner_job`).
    pub inhibit_scope: inhibit::InhibitScope,
}

/// What a new rule has in the fields its author leaves out (`POST /api/v1/alert-rules` requires
/// only name and condition): no wait, reminders every [`defaults::DEFAULT_REPEAT_S`], a
/// warning, enabled, to the default channels, holding nothing back.
impl Default for RuleSpec {
    fn default() -> Self {
        RuleSpec {
            name: String::new(),
            condition: String::new(),
            for_s: 0,
            keep_firing_for_s: 0,
            repeat_interval_s: defaults::DEFAULT_REPEAT_S,
            severity: Severity::Warning,
            labels: BTreeMap::new(),
            description: String::new(),
            advice: String::new(),
            channels: Vec::new(),
            enabled: true,
            inhibits: Vec::new(),
            inhibit_scope: inhibit::InhibitScope::Gpu,
        }
    }
}

/// A rule that cannot be stored: which field, why, and for the condition where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    pub field: &'static str,
    pub message: String,
    /// 0-based character offset in the condition, for condition errors.
    pub position: Option<usize>,
}

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl RuleError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        RuleError { field, message: message.into(), position: None }
    }
}

impl RuleSpec {
    /// Check everything; returns the parsed condition.
    pub fn validate(&self) -> Result<Condition, RuleError> {
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
            return Err(RuleError::new("name", "required: 1–200 printable characters"));
        }
        let condition = Condition::parse(&self.condition).map_err(|e| RuleError {
            field: "condition",
            message: format!("{}\n{}", e, e.pointer(&self.condition)),
            position: Some(e.position),
        })?;
        for (field, v) in [
            ("for_s", self.for_s),
            ("keep_firing_for_s", self.keep_firing_for_s),
            ("repeat_interval_s", self.repeat_interval_s),
        ] {
            if !(0..=MAX_DURATION_S).contains(&v) {
                return Err(RuleError::new(field, format!("must be 0–{MAX_DURATION_S} seconds")));
            }
        }
        if self.repeat_interval_s != 0 && self.repeat_interval_s < MIN_REPEAT_S {
            return Err(RuleError::new("repeat_interval_s", format!("0 (no reminders) or at least {MIN_REPEAT_S}")));
        }
        for (k, v) in &self.labels {
            if !payload::valid_label_name(k) {
                return Err(RuleError::new("labels", format!("{k:?} is not a label name ([A-Za-z_][A-Za-z0-9_]*)")));
            }
            if RESERVED_LABELS.contains(&k.as_str()) {
                return Err(RuleError::new("labels", format!("{k:?} is set by Fleetlens")));
            }
            if v.is_empty() || v.chars().count() > 1000 {
                return Err(RuleError::new("labels", format!("the value of {k:?} must be 1–1000 characters")));
            }
        }
        if self.description.chars().count() > 2000 || self.advice.chars().count() > 2000 {
            return Err(RuleError::new("description", "description and advice: at most 2000 characters each"));
        }
        Ok(condition)
    }
}

impl From<&DefaultRule> for RuleSpec {
    fn from(d: &DefaultRule) -> Self {
        RuleSpec {
            name: d.name.into(),
            condition: d.condition.into(),
            for_s: d.for_s,
            keep_firing_for_s: d.keep_firing_for_s,
            repeat_interval_s: d.repeat_interval_s,
            severity: d.severity,
            description: d.description.into(),
            advice: d.advice.text().into(),
            inhibits: d.inhibits.iter().map(|t| t.to_string()).collect(),
            ..RuleSpec::default()
        }
    }
}

/// Who an alert is about.
#[derive(Debug, Clone, Copy)]
pub struct AlertSubject<'a> {
    pub host: &'a str,
    pub gpu_uuid: &'a str,
    pub team: Option<&'a str>,
}

/// The labels of an alert of rule `rule_id` on a GPU: the rule's own labels, then `alertname`,
/// `rule_id`, `severity`, `host`, `gpu` and (when known) `team`.
pub fn alert_labels(rule_id: crate::RuleId, spec: &RuleSpec, subject: AlertSubject<'_>) -> BTreeMap<String, String> {
    let mut l = spec.labels.clone();
    l.insert(silence::LABEL_ALERTNAME.into(), spec.name.trim().to_string());
    l.insert(silence::LABEL_RULE_ID.into(), rule_id.to_string());
    l.insert(silence::LABEL_SEVERITY.into(), spec.severity.as_str().into());
    l.insert(silence::LABEL_HOST.into(), subject.host.to_string());
    l.insert(silence::LABEL_GPU.into(), subject.gpu_uuid.to_string());
    if let Some(team) = subject.team.filter(|t| !t.is_empty()) {
        l.insert(silence::LABEL_TEAM.into(), team.to_string());
    }
    l.retain(|_, v| !v.is_empty());
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RuleSpec {
        RuleSpec::from(&DEFAULT_RULES[0])
    }

    #[test]
    fn validation() {
        assert!(spec().validate().is_ok());
        let bad = RuleSpec { condition: "gpu_util_pct >= 80 && sm_actve_pct < 30".into(), ..spec() };
        let e = bad.validate().unwrap_err();
        assert_eq!((e.field, e.position), ("condition", Some(22)));
        assert_eq!(RuleSpec { for_s: -1, ..spec() }.validate().unwrap_err().field, "for_s");
        assert_eq!(RuleSpec { repeat_interval_s: 5, ..spec() }.validate().unwrap_err().field, "repeat_interval_s");
        let labels = BTreeMap::from([("gpu".to_string(), "x".to_string())]);
        assert_eq!(RuleSpec { labels, ..spec() }.validate().unwrap_err().field, "labels");
        assert_eq!(RuleSpec { name: " ".into(), ..spec() }.validate().unwrap_err().field, "name");
    }

    #[test]
    fn labels_of_an_alert() {
        let mut s = spec();
        s.labels.insert("team".into(), "platform".into());
        s.labels.insert("page".into(), "yes".into());
        let l =
            alert_labels(crate::RuleId(7), &s, AlertSubject { host: "node-1", gpu_uuid: "GPU-1", team: Some("ml") });
        assert_eq!(l["alertname"], "Busy but hollow");
        assert_eq!(l["rule_id"], "7");
        assert_eq!(l["team"], "ml", "the host's team wins over the rule's label");
        assert_eq!(l["page"], "yes");
        let l = alert_labels(crate::RuleId(7), &s, AlertSubject { host: "node-1", gpu_uuid: "GPU-1", team: None });
        assert_eq!(l["team"], "platform");
    }
}
