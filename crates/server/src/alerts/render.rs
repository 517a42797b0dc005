//! From a stored alert to the body each kind of channel takes.

use fleetlens_core::rules::payload::{MatchedValue, alertmanager_v2, slack_message, webhook_v4};
use fleetlens_core::rules::{ChannelKind, Notification, NotifyStatus, Severity};
use fleetlens_store::alerts::{AlertRecord, ChannelRecord};
use serde::{Deserialize, Serialize};

/// Slack asks for about one message per second per webhook.
pub const SLACK_MIN_INTERVAL_MS: i64 = 1000;

/// How long Alertmanager keeps a firing alert that Fleetlens stopped refreshing, beyond the
/// next expected refresh.
const AM_GRACE_MS: i64 = 3_600_000;
/// Without reminders, a firing alert is pushed once; Alertmanager keeps it this long.
const AM_NO_REFRESH_MS: i64 = 7 * 86_400_000;

/// What the engine stores in `alerts.details`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertDetails {
    #[serde(default)]
    pub condition: String,
    #[serde(default)]
    pub values: Vec<MatchedValue>,
    #[serde(default)]
    pub state: Option<fleetlens_core::WorkloadState>,
    #[serde(default)]
    pub advice: String,
    #[serde(default)]
    pub gpu_name: Option<String>,
    #[serde(default)]
    pub gpu_index: Option<u32>,
    #[serde(default)]
    pub team: Option<String>,
    /// Channels the firing notification went to (resolved and reminders go to the same).
    #[serde(default)]
    pub notified_channels: Vec<fleetlens_core::ChannelId>,
    #[serde(default)]
    pub repeat_interval_s: i64,
    /// Why it resolved when it was not the condition (rule deleted or disabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_reason: Option<String>,
}

impl AlertDetails {
    pub fn of(alert: &AlertRecord) -> Self {
        serde_json::from_value(alert.details.clone()).unwrap_or_default()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// What a path segment keeps as it is: RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// The dashboard page of a GPU (its UUID is what an agent reported: any text, encoded as UTF-8).
pub fn gpu_url(public_url: &str, uuid: &str) -> String {
    format!("{public_url}/gpus/{}", percent_encoding::utf8_percent_encode(uuid, SEGMENT))
}

/// The notification about `alert` (firing, a reminder, or resolved).
pub fn notification(alert: &AlertRecord, status: NotifyStatus, reminder: bool, public_url: &str) -> Notification {
    let d = AlertDetails::of(alert);
    let mut summary = alert.summary.clone();
    if let (NotifyStatus::Resolved, Some(reason)) = (status, &d.resolved_reason) {
        summary = format!("{summary} (resolved: {reason})");
    }
    Notification {
        status,
        reminder,
        rule_id: alert.rule_id,
        rule_name: alert.rule_name.clone(),
        severity: alert.severity,
        condition: d.condition,
        labels: alert.labels.clone(),
        summary,
        advice: d.advice,
        values: d.values,
        state: d.state,
        host: alert.labels.get("host").cloned().unwrap_or_else(|| alert.host.clone()),
        gpu_uuid: alert.labels.get("gpu").cloned().unwrap_or_else(|| alert.gpu_uuid.clone()),
        gpu_index: d.gpu_index,
        gpu_name: d.gpu_name,
        team: d.team,
        active_since_ms: alert.active_since_ms,
        fired_at_ms: alert.fired_at_ms.unwrap_or(alert.active_since_ms),
        resolved_at_ms: alert.resolved_at_ms,
        gpu_url: Some(gpu_url(public_url, alert.labels.get("gpu").map_or(&alert.gpu_uuid, |g| g))),
        external_url: public_url.to_string(),
        fingerprint: alert.fingerprint.clone(),
    }
}

/// The JSON body for `channel`.
pub fn payload(channel: &ChannelRecord, n: &Notification, now_ms: i64, repeat_interval_s: i64) -> String {
    let body = match channel.kind {
        ChannelKind::Slack => slack_message(n),
        ChannelKind::Alertmanager => {
            let valid_for =
                if repeat_interval_s > 0 { 2 * repeat_interval_s * 1000 + AM_GRACE_MS } else { AM_NO_REFRESH_MS };
            alertmanager_v2(n, now_ms + valid_for)
        }
        ChannelKind::Webhook => webhook_v4(n, &channel.name),
    };
    body.to_string()
}

/// The body of a test message: like a firing alert, but one Alertmanager drops after 5 min.
pub fn test_payload(channel: &ChannelRecord, n: &Notification, now_ms: i64) -> String {
    match channel.kind {
        ChannelKind::Alertmanager => alertmanager_v2(n, now_ms + 300_000).to_string(),
        ChannelKind::Slack | ChannelKind::Webhook => payload(channel, n, now_ms, 0),
    }
}

/// Where to POST for `channel`: Alertmanager's alerts API under its base URL.
pub fn target_url(channel: &ChannelRecord) -> String {
    if channel.kind == ChannelKind::Alertmanager && !channel.url.trim_end_matches('/').ends_with("/api/v2/alerts") {
        format!("{}/api/v2/alerts", channel.url.trim_end_matches('/'))
    } else {
        channel.url.clone()
    }
}

/// A made-up alert for "send test message".
pub fn test_notification(channel: &ChannelRecord, public_url: &str, now_ms: i64) -> Notification {
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("alertname".to_string(), "Fleetlens test message".to_string());
    labels.insert("severity".to_string(), Severity::Info.as_str().to_string());
    labels.insert("host".to_string(), "fleetlens-test".to_string());
    labels.insert("gpu".to_string(), "GPU-00000000-0000-0000-0000-000000000000".to_string());
    labels.insert("test_channel".to_string(), channel.id.to_string());
    let fingerprint = fleetlens_core::rules::fingerprint(&labels);
    Notification {
        status: NotifyStatus::Firing,
        reminder: false,
        rule_id: fleetlens_core::RuleId(0),
        rule_name: "Fleetlens test message".into(),
        severity: Severity::Info,
        condition: "true".into(),
        labels,
        summary: format!("A test message to channel “{}” from {public_url}: if you read this, it works.", channel.name),
        advice: String::new(),
        values: vec![],
        state: None,
        host: "fleetlens-test".into(),
        gpu_uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
        gpu_index: None,
        gpu_name: None,
        team: None,
        active_since_ms: now_ms,
        fired_at_ms: now_ms,
        resolved_at_ms: None,
        gpu_url: None,
        external_url: public_url.to_string(),
        fingerprint,
    }
}

#[cfg(test)]
mod tests {
    use super::gpu_url;

    #[test]
    fn a_gpu_link_encodes_its_uuid_as_utf8() {
        let base = "https://fl.example";
        assert_eq!(gpu_url(base, "GPU-1a2b-3c4d.5_6~"), "https://fl.example/gpus/GPU-1a2b-3c4d.5_6~");
        assert_eq!(gpu_url(base, "MIG-a/b c"), "https://fl.example/gpus/MIG-a%2Fb%20c");
        // Each byte of a character beyond ASCII, not its code point cut to one byte (é was %E9).
        assert_eq!(gpu_url(base, "gpu-é漢"), "https://fl.example/gpus/gpu-%C3%A9%E6%BC%A2");
    }
}
