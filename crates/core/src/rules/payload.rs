//! What goes out when an alert fires or resolves: one [`Notification`], rendered as a Slack
//! Block Kit message, as an Alertmanager v4 webhook body, or as the alert list that
//! Alertmanager's `POST /api/v2/alerts` takes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::rules::Severity;
use crate::rules::fields::Observation;
use crate::state::WorkloadState;
use crate::time_text::format_rfc3339_ms;

/// Slack's limits (Block Kit reference): blocks per message, characters per section text,
/// per field, fields per section, header text, button text, URL.
pub const SLACK_MAX_BLOCKS: usize = 50;
pub const SLACK_MAX_SECTION_CHARS: usize = 3000;
pub const SLACK_MAX_FIELD_CHARS: usize = 2000;
pub const SLACK_MAX_FIELDS: usize = 10;
pub const SLACK_MAX_HEADER_CHARS: usize = 150;
pub const SLACK_MAX_BUTTON_CHARS: usize = 75;
pub const SLACK_MAX_URL_CHARS: usize = 3000;
pub const SLACK_MAX_CONTEXT_ELEMENTS: usize = 10;
/// The `text` fallback (notifications, screen readers) is kept as short as a section.
pub const SLACK_MAX_TEXT_CHARS: usize = 3000;

/// `endsAt` of an alert that has not ended, as Alertmanager writes it.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyStatus {
    Firing,
    Resolved,
}

impl NotifyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyStatus::Firing => "firing",
            NotifyStatus::Resolved => "resolved",
        }
    }
}

/// A field of the condition and its value when the alert fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MatchedValue {
    pub field: String,
    pub value: String,
}

/// The values of `fields` in `obs`, for messages.
pub fn matched_values(fields: &[&str], obs: &Observation<'_>) -> Vec<MatchedValue> {
    fields.iter().map(|f| MatchedValue { field: f.to_string(), value: obs.value(f).display() }).collect()
}

/// Replace `{field}` in `template` with the field's value in `obs` (`{{` and `}}` are literal
/// braces; an unknown field stays as written). A field in seconds written with its unit,
/// `{duration_in_state_s} s`, reads as a duration: "3 d 22 h", "12 min 5 s", "0.68 s" (not
/// "338787.17 s").
pub fn render_template(template: &str, obs: &Observation<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if let (true, Some(end)) = (tail.starts_with('{'), tail.find('}')) {
            let name = &tail[1..end];
            rest = &tail[end + 1..];
            match crate::rules::fields::field(name) {
                Some(f) if f.unit == "s" && followed_by_unit(rest, " s") => {
                    out.push_str(&duration_text(&obs.value(name)));
                    rest = &rest[2..];
                }
                Some(_) => out.push_str(&obs.value(name).display()),
                None => out.push_str(&tail[..=end]),
            }
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// `rest` starts with `unit` as a word of its own (" s", not " sec").
fn followed_by_unit(rest: &str, unit: &str) -> bool {
    rest.strip_prefix(unit).is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric()))
}

/// A number of seconds as people read a duration: "0.68 s" and "42 s" under a minute, else
/// [`whole_seconds_text`] ("12 min 5 s", "5 h 3 min", "3 d 22 h"); anything else as `display`
/// shows it.
fn duration_text(value: &crate::rules::fields::Value<'_>) -> String {
    let crate::rules::fields::Value::Num(secs) = value else { return value.display() };
    if !secs.is_finite() || *secs < 60.0 {
        return format!("{} s", value.display());
    }
    whole_seconds_text(secs.floor() as u64)
}

/// Everything a message about one alert transition says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub status: NotifyStatus,
    /// A reminder that the alert is still firing (repeat interval).
    #[serde(default)]
    pub reminder: bool,
    pub rule_id: crate::RuleId,
    pub rule_name: String,
    pub severity: Severity,
    pub condition: String,
    /// The alert's labels: alertname, rule_id, severity, host, gpu, team, the rule's labels.
    pub labels: BTreeMap<String, String>,
    /// One or two sentences: what is wrong (the rule's description with values filled in).
    pub summary: String,
    /// What to do (METRICS.md "what to tell the user"); may be empty.
    pub advice: String,
    pub values: Vec<MatchedValue>,
    /// Workload state of the GPU when the alert fired.
    pub state: Option<WorkloadState>,
    pub host: String,
    pub gpu_uuid: String,
    pub gpu_index: Option<u32>,
    pub gpu_name: Option<String>,
    pub team: Option<String>,
    pub active_since_ms: i64,
    pub fired_at_ms: i64,
    pub resolved_at_ms: Option<i64>,
    /// The GPU's page in the dashboard.
    pub gpu_url: Option<String>,
    /// Base URL of this Fleetlens.
    pub external_url: String,
    pub fingerprint: String,
}

impl Notification {
    /// The owner labels in words: `user alice · pod ml/nb-alice · job 48213`; `None` when the
    /// agent could not tell.
    pub fn owner_words(&self) -> Option<String> {
        let parts: Vec<String> = [
            ("owner_user", "user"),
            ("owner_namespace", "namespace"),
            ("owner_pod", "pod"),
            ("owner_job", "job"),
            ("owner_container", "container"),
            ("owner_team", "team"),
        ]
        .iter()
        .filter_map(|(label, word)| self.labels.get(*label).map(|v| format!("{word} {v}")))
        .collect();
        (!parts.is_empty()).then(|| parts.join(" · "))
    }

    /// How long the condition has held (until resolution, for a resolved alert), ms.
    pub fn held_ms(&self) -> i64 {
        let end = self.resolved_at_ms.unwrap_or(self.fired_at_ms);
        (end - self.active_since_ms).max(0)
    }

    /// The GPU in words: `NVIDIA H200 #0 (GPU-b8c24ac0-…)`.
    pub fn gpu_words(&self) -> String {
        let model = self.gpu_name.as_deref().unwrap_or("GPU");
        match self.gpu_index {
            Some(i) => format!("{model} #{i} ({})", self.gpu_uuid),
            None => format!("{model} ({})", self.gpu_uuid),
        }
    }

    fn title(&self) -> String {
        match (self.status, self.reminder) {
            (NotifyStatus::Resolved, _) => format!("✅ Resolved: {} ({})", self.rule_name, self.severity),
            (NotifyStatus::Firing, true) => format!("🔁 Still firing: {} ({})", self.rule_name, self.severity),
            (NotifyStatus::Firing, false) => format!("🔥 {} ({})", self.rule_name, self.severity),
        }
    }

    pub(crate) fn annotations(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        a.insert("summary".to_string(), self.summary.clone());
        if !self.advice.is_empty() {
            a.insert("advice".to_string(), self.advice.clone());
        }
        a.insert("condition".to_string(), self.condition.clone());
        let values: Vec<String> = self.values.iter().map(|v| format!("{} = {}", v.field, v.value)).collect();
        if !values.is_empty() {
            a.insert("values".to_string(), values.join(", "));
        }
        a.insert("held_for".to_string(), format_duration_ms(self.held_ms()));
        if let Some(s) = self.state {
            a.insert("state".to_string(), s.as_str().to_string());
        }
        a
    }

    fn group_key(&self) -> String {
        let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        format!("{{}}:{{alertname=\"{}\", gpu=\"{}\"}}", esc(&self.rule_name), esc(&self.gpu_uuid))
    }
}

/// Escape text for Slack mrkdwn (`&`, `<`, `>`): what Slack's rules ask of every text, and
/// enough for text that stays inside a code span.
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Text for a Slack mrkdwn field that may carry what agents report (a host name, a GPU model,
/// owners, labels, or a summary with those filled in): [`slack_escape`]d, so `<!channel>` and
/// `<http://evil|click>` show as written instead of pinging or linking; mrkdwn's formatting
/// characters that could open or close formatting (`*`, `_`, `~` not between two letters or
/// digits, and every `` ` ``) replaced by lookalikes (`∗`, `ˍ`, `∼`, `ˋ`: Slack has no escape for
/// them), and `@here`/`@channel`/`@everyone` broken by an invisible word joiner. A name
/// stays readable (`gpu_node_01` and `svc_ml` are unchanged).
pub fn slack_text(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let between_words = || {
            let word = |j: Option<usize>| j.and_then(|j| chars.get(j)).is_some_and(|c| c.is_alphanumeric());
            word(i.checked_sub(1)) && word(Some(i + 1))
        };
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\u{02CB}'),
            '*' if !between_words() => out.push('\u{2217}'),
            '_' if !between_words() => out.push('\u{02CD}'),
            '~' if !between_words() => out.push('\u{223C}'),
            '@' => {
                out.push('@');
                let rest: String = chars[i + 1..].iter().take(8).collect::<String>().to_lowercase();
                if ["here", "channel", "everyone"].iter().any(|m| rest.starts_with(m)) {
                    out.push('\u{2060}');
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// [`slack_text`] for a name on one line: control characters (newlines, tabs) become spaces, so
/// a name cannot start lines of its own, and bidirectional overrides and isolates become `�`,
/// so a name cannot make the text around it read backwards.
pub fn slack_name(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| match c {
            c if c.is_control() => ' ',
            '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => '\u{FFFD}',
            c => c,
        })
        .collect();
    slack_text(&one_line)
}

/// At most `max` characters, with `…` at the end when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub(crate) fn mrkdwn(text: String, max: usize) -> Json {
    json!({"type": "mrkdwn", "text": truncate_chars(&text, max)})
}

/// A Slack incoming-webhook message: header with rule and severity, the summary, fields for
/// GPU, host, team, how long, state, condition and the values that matched, the advice, a
/// button to the GPU page, and a context line; `text` is the plain fallback. Every text is
/// cut to Slack's limits.
pub fn slack_message(n: &Notification) -> Json {
    // Agent-supplied names and the texts they are filled into are neutralised; the rule's
    // condition (written by an admin, shown as code) is only escaped.
    let (e, name) = (slack_text, slack_name);
    let held = format_duration_ms(n.held_ms());
    let since = format_rfc3339_ms(n.active_since_ms);
    let when = match (n.status, n.resolved_at_ms) {
        (NotifyStatus::Resolved, Some(at)) => format!("{held}, from {since} to {}", format_rfc3339_ms(at)),
        _ => format!("{held} (since {since})"),
    };
    let values = if n.values.is_empty() {
        "—".to_string()
    } else {
        n.values
            .iter()
            .map(|v| format!("`{}` = {}", slack_escape(&v.field), name(&v.value)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut fields = vec![
        mrkdwn(format!("*GPU*\n{}", name(&n.gpu_words())), SLACK_MAX_FIELD_CHARS),
        mrkdwn(format!("*Host*\n{}", name(&n.host)), SLACK_MAX_FIELD_CHARS),
        mrkdwn(format!("*Team*\n{}", name(n.team.as_deref().unwrap_or("—"))), SLACK_MAX_FIELD_CHARS),
        mrkdwn(format!("*Owner*\n{}", name(&n.owner_words().unwrap_or_else(|| "—".into()))), SLACK_MAX_FIELD_CHARS),
        mrkdwn(format!("*Severity*\n{}", name(n.severity.as_str())), SLACK_MAX_FIELD_CHARS),
        mrkdwn(
            format!("*{}*\n{}", if n.status == NotifyStatus::Resolved { "Lasted" } else { "For" }, e(&when)),
            SLACK_MAX_FIELD_CHARS,
        ),
        mrkdwn(format!("*State*\n{}", name(n.state.map_or("—", WorkloadState::as_str))), SLACK_MAX_FIELD_CHARS),
        mrkdwn(format!("*Condition*\n`{}`", slack_escape(&n.condition)), SLACK_MAX_FIELD_CHARS),
        mrkdwn(format!("*Values when it fired*\n{values}"), SLACK_MAX_FIELD_CHARS),
    ];
    fields.truncate(SLACK_MAX_FIELDS);

    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": truncate_chars(&n.title(), SLACK_MAX_HEADER_CHARS), "emoji": true}}),
        json!({"type": "section", "text": mrkdwn(e(&n.summary), SLACK_MAX_SECTION_CHARS)}),
        json!({"type": "section", "fields": fields}),
    ];
    if !n.advice.is_empty() {
        blocks.push(
            json!({"type": "section", "text": mrkdwn(format!("*Advice:* {}", e(&n.advice)), SLACK_MAX_SECTION_CHARS)}),
        );
    }
    if let Some(url) = n.gpu_url.as_deref().filter(|u| u.chars().count() <= SLACK_MAX_URL_CHARS) {
        blocks.push(json!({"type": "actions", "elements": [{
            "type": "button",
            "text": {"type": "plain_text", "text": truncate_chars("Open the GPU in Fleetlens", SLACK_MAX_BUTTON_CHARS)},
            "url": url,
            "action_id": "open_gpu",
        }]}));
    }
    let context = vec![mrkdwn(
        format!("Fleetlens · rule #{} · {} · fingerprint {}", n.rule_id, n.status.as_str(), n.fingerprint),
        SLACK_MAX_SECTION_CHARS,
    )];
    blocks.push(json!({"type": "context", "elements": context.into_iter().take(SLACK_MAX_CONTEXT_ELEMENTS).collect::<Vec<_>>()}));
    blocks.truncate(SLACK_MAX_BLOCKS);

    let status = match (n.status, n.reminder) {
        (NotifyStatus::Resolved, _) => "RESOLVED",
        (NotifyStatus::Firing, true) => "STILL FIRING",
        (NotifyStatus::Firing, false) => "FIRING",
    };
    let text = format!(
        "[{status}] {} ({}) on {} {}: {}",
        e(&n.rule_name),
        name(n.severity.as_str()),
        name(&n.host),
        name(&n.gpu_words()),
        e(&n.summary)
    );
    json!({"text": truncate_chars(&text, SLACK_MAX_TEXT_CHARS), "blocks": blocks})
}

/// One alert as Alertmanager's webhook (v4) and API describe it.
pub(crate) fn am_alert(n: &Notification, ends_at: &str) -> Json {
    json!({
        "status": n.status.as_str(),
        "labels": n.labels,
        "annotations": n.annotations(),
        "startsAt": format_rfc3339_ms(n.fired_at_ms),
        "endsAt": ends_at,
        "generatorURL": n.gpu_url.clone().unwrap_or_else(|| n.external_url.clone()),
        "fingerprint": n.fingerprint,
    })
}

/// The body Alertmanager's webhook receiver sends (version 4), for one alert: `status`,
/// `labels`, `annotations`, `startsAt`, `endsAt` (zero time while firing), `fingerprint`,
/// `groupKey`, and the common/group labels.
pub fn webhook_v4(n: &Notification, receiver: &str) -> Json {
    let ends_at = match (n.status, n.resolved_at_ms) {
        (NotifyStatus::Resolved, Some(at)) => format_rfc3339_ms(at),
        _ => ZERO_TIME.to_string(),
    };
    json!({
        "version": "4",
        "groupKey": n.group_key(),
        "truncatedAlerts": 0,
        "status": n.status.as_str(),
        "receiver": receiver,
        "groupLabels": {"alertname": n.rule_name},
        "commonLabels": n.labels,
        "commonAnnotations": n.annotations(),
        "externalURL": n.external_url,
        "alerts": [am_alert(n, &ends_at)],
    })
}

/// The body of Alertmanager's `POST /api/v2/alerts` for this alert. A firing alert gets
/// `endsAt = valid_until_ms` (Alertmanager resolves it by itself if Fleetlens stops
/// refreshing it); a resolved one ends when it resolved.
pub fn alertmanager_v2(n: &Notification, valid_until_ms: i64) -> Json {
    let ends = match (n.status, n.resolved_at_ms) {
        (NotifyStatus::Resolved, Some(at)) => at,
        _ => valid_until_ms,
    };
    let mut a = am_alert(n, &format_rfc3339_ms(ends));
    if let Some(obj) = a.as_object_mut() {
        // Alertmanager's API takes only these keys (it derives status and fingerprint).
        obj.remove("status");
        obj.remove("fingerprint");
    }
    json!([a])
}

/// Alertmanager's fingerprint of a label set: FNV-1a 64 over the label names in order, each
/// name and value followed by the byte 0xff, as 16 hex digits.
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    for (k, v) in labels {
        h.write(k.as_bytes());
        h.write(&[0xff]);
        h.write(v.as_bytes());
        h.write(&[0xff]);
    }
    format!("{:016x}", h.finish())
}

/// Is `name` a valid Prometheus/Alertmanager label name?
pub fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `3 s`, `5 min`, `1 h 5 min`, `2 d 3 h`: see [`whole_seconds_text`].
pub fn format_duration_ms(ms: i64) -> String {
    whole_seconds_text(u64::try_from(ms.max(0) / 1000).unwrap_or(0))
}

/// A whole number of seconds as people read a duration: `42 s`, `12 min 5 s`, `5 h 3 min`,
/// `3 d 22 h` (the two largest units; the second left out when it is 0: `5 min`, `2 d`).
fn whole_seconds_text(whole: u64) -> String {
    if whole < 60 {
        return format!("{whole} s");
    }
    let (d, h, m, s) = (whole / 86_400, whole % 86_400 / 3_600, whole % 3_600 / 60, whole % 60);
    let (big, small) = match (d, h) {
        (0, 0) => ((m, "min"), (s, "s")),
        (0, _) => ((h, "h"), (m, "min")),
        _ => ((d, "d"), (h, "h")),
    };
    if small.0 == 0 { format!("{} {}", big.0, big.1) } else { format!("{} {} {} {}", big.0, big.1, small.0, small.1) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sample::Sample;

    pub(crate) fn notification(status: NotifyStatus) -> Notification {
        let mut labels = BTreeMap::new();
        for (k, v) in [("alertname", "Busy but hollow"), ("severity", "warning"), ("host", "node-1"), ("gpu", "GPU-1")]
        {
            labels.insert(k.to_string(), v.to_string());
        }
        Notification {
            status,
            reminder: false,
            rule_id: crate::RuleId(1),
            rule_name: "Busy but hollow".into(),
            severity: Severity::Warning,
            condition: "gpu_util_pct >= 80 && sm_active_pct < 30".into(),
            fingerprint: fingerprint(&labels),
            labels,
            summary: "This GPU reads 100 % busy but its SMs are 0.76 % active <probably a hang>".into(),
            advice: "bigger batches, CUDA graphs, kernel fusion, or a smaller GPU / collocation".into(),
            values: vec![MatchedValue { field: "gpu_util_pct".into(), value: "100".into() }],
            state: Some(WorkloadState::Stalled),
            host: "node-1".into(),
            gpu_uuid: "GPU-1".into(),
            gpu_index: Some(0),
            gpu_name: Some("NVIDIA H200".into()),
            team: None,
            active_since_ms: 1_795_311_362_772,
            fired_at_ms: 1_795_311_365_788,
            resolved_at_ms: (status == NotifyStatus::Resolved).then_some(1_795_311_369_817),
            gpu_url: Some("http://127.0.0.1:8080/gpus/GPU-1".into()),
            external_url: "http://127.0.0.1:8080".into(),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(format_duration_ms(3016), "3 s");
        assert_eq!(format_duration_ms(300_000), "5 min");
        assert_eq!(format_duration_ms(3_900_000), "1 h 5 min");
        assert_eq!(format_duration_ms(90_000_000), "1 d 1 h");
        assert_eq!(format_duration_ms(172_800_000), "2 d", "no `0 h`");
        assert_eq!(format_duration_ms(-5), "0 s");
    }

    #[test]
    fn fingerprint_is_alertmanagers() {
        // Alertmanager: model.LabelSet{"alertname": "test"}.Fingerprint() = fnv64a("alertname\xfftest\xff").
        let l: BTreeMap<String, String> = [("alertname".to_string(), "test".to_string())].into();
        assert_eq!(fingerprint(&l), "1f56cb8f931d1bd4");
        assert_eq!(fingerprint(&BTreeMap::new()), "cbf29ce484222325");
    }

    #[test]
    fn slack_message_shape_and_limits() {
        let mut n = notification(NotifyStatus::Firing);
        let m = slack_message(&n);
        let blocks = m["blocks"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "header");
        assert!(blocks[0]["text"]["text"].as_str().unwrap().contains("Busy but hollow (warning)"));
        assert!(blocks[1]["text"]["text"].as_str().unwrap().contains("&lt;probably a hang&gt;"), "escaped");
        let fields = blocks[2]["fields"].as_array().unwrap();
        assert!(fields.iter().any(|f| f["text"].as_str().unwrap().contains("*Host*\nnode-1")));
        assert!(blocks.iter().any(|b| b["text"]["text"].as_str().is_some_and(|t| t.starts_with("*Advice:*"))));
        assert!(blocks.iter().any(|b| b["type"] == "actions"));
        assert!(m["text"].as_str().unwrap().starts_with("[FIRING] Busy but hollow"));
        let owner = fields.iter().find(|f| f["text"].as_str().unwrap().starts_with("*Owner*")).unwrap();
        assert_eq!(owner["text"], "*Owner*\n—", "no owner known");
        let mut owned = n.clone();
        owned.labels.insert("owner_user".into(), "alice".into());
        owned.labels.insert("owner_pod".into(), "ml/nb-alice".into());
        let m = slack_message(&owned);
        let fields = m["blocks"][2]["fields"].as_array().unwrap();
        assert!(fields.iter().any(|f| f["text"] == "*Owner*\nuser alice · pod ml/nb-alice"), "{fields:?}");

        n.summary = "x".repeat(10_000);
        n.rule_name = "r".repeat(500);
        n.values = (0..500).map(|i| MatchedValue { field: format!("f{i}"), value: "1".into() }).collect();
        let m = slack_message(&n);
        let blocks = m["blocks"].as_array().unwrap();
        assert!(blocks.len() <= SLACK_MAX_BLOCKS);
        assert_eq!(blocks[0]["text"]["text"].as_str().unwrap().chars().count(), SLACK_MAX_HEADER_CHARS);
        assert_eq!(blocks[1]["text"]["text"].as_str().unwrap().chars().count(), SLACK_MAX_SECTION_CHARS);
        for f in blocks[2]["fields"].as_array().unwrap() {
            assert!(f["text"].as_str().unwrap().chars().count() <= SLACK_MAX_FIELD_CHARS);
        }
        assert!(m["text"].as_str().unwrap().chars().count() <= SLACK_MAX_TEXT_CHARS);

        let r = slack_message(&notification(NotifyStatus::Resolved));
        assert!(r["blocks"][0]["text"]["text"].as_str().unwrap().starts_with("✅ Resolved"));
        assert!(r["text"].as_str().unwrap().starts_with("[RESOLVED]"));
    }

    #[test]
    fn slack_text_neutralises_what_agents_could_inject() {
        assert_eq!(
            slack_text("<!channel> *x* <http://evil|click>"),
            "&lt;!channel&gt; \u{2217}x\u{2217} &lt;http://evil|click&gt;"
        );
        assert_eq!(slack_text("_it_ ~s~ `c` a&b"), "\u{02CD}it\u{02CD} \u{223C}s\u{223C} \u{02CB}c\u{02CB} a&amp;b");
        assert_eq!(slack_text("gpu_node_01 svc_ml 2*3 a~b"), "gpu_node_01 svc_ml 2*3 a~b", "inside words: unchanged");
        assert_eq!(
            slack_text("ping @here @Channel bob@example.com"),
            "ping @\u{2060}here @\u{2060}Channel bob@example.com"
        );
        assert_eq!(slack_name("n1\n*Owner*\nroot"), "n1 \u{2217}Owner\u{2217} root");
        assert_eq!(slack_name("abc\u{202E}fed"), "abc\u{FFFD}fed");

        let mut n = notification(NotifyStatus::Firing);
        let hostile = "<!channel> *x* <http://evil|click>";
        n.host = hostile.into();
        n.gpu_name = Some("_H100_".into());
        n.team = Some("~ml~".into());
        n.labels.insert("owner_user".into(), "`root`".into());
        n.values = vec![MatchedValue { field: "host".into(), value: hostile.into() }];
        n.summary = format!("GPU on {hostile} is hollow");
        let m = slack_message(&n).to_string();
        for raw in ["<!channel>", "*x*", "<http", "_H100_", "~ml~", "`root`", "= <!"] {
            assert!(!m.contains(raw), "{raw:?} reaches Slack raw: {m}");
        }
        assert!(m.contains("*Host*\\n&lt;!channel&gt; \u{2217}x\u{2217} &lt;http://evil|click&gt;"), "{m}");
        assert!(
            m.contains(
                "`gpu_util_pct >= 80 && sm_active_pct < 30`"
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .as_str()
            ),
            "the condition is code, only escaped: {m}"
        );
    }

    #[test]
    fn alertmanager_shapes() {
        let n = notification(NotifyStatus::Firing);
        let w = webhook_v4(&n, "ops");
        assert_eq!(w["version"], "4");
        assert_eq!(w["status"], "firing");
        assert_eq!(w["alerts"][0]["endsAt"], ZERO_TIME);
        assert_eq!(w["alerts"][0]["startsAt"], "2026-11-22T01:36:05.788Z");
        assert_eq!(w["alerts"][0]["fingerprint"], n.fingerprint);
        assert_eq!(w["groupKey"], "{}:{alertname=\"Busy but hollow\", gpu=\"GPU-1\"}");
        assert_eq!(w["commonAnnotations"]["held_for"], "3 s");
        let r = webhook_v4(&notification(NotifyStatus::Resolved), "ops");
        assert_eq!(r["alerts"][0]["endsAt"], "2026-11-22T01:36:09.817Z");
        let a = alertmanager_v2(&n, 1_795_311_365_788 + 3_600_000);
        assert_eq!(a[0]["endsAt"], "2026-11-22T02:36:05.788Z");
        assert!(a[0].get("status").is_none());
        assert_eq!(a[0]["labels"]["alertname"], "Busy but hollow");
    }

    #[test]
    fn templates() {
        let s = Sample {
            ts_ms: 0,
            uuid: "GPU-1".into(),
            gpu_util_pct: Some(100.0),
            sm_active_pct: Some(0.7571),
            ..Default::default()
        };
        let o = Observation::of_sample(&s, WorkloadState::Stalled, 0.0, "h", None);
        assert_eq!(
            render_template("reads {gpu_util_pct} % busy, SMs {sm_active_pct} % ({state}) {{x}} {nope} {", &o),
            "reads 100 % busy, SMs 0.76 % (stalled) {x} {nope} {"
        );
        let offline = |secs: f64| Observation {
            sample: None,
            ..Observation::of_sample(&s, WorkloadState::Offline, secs, "h", None)
        };
        let text = "No sample for {duration_in_state_s} s: down.";
        assert_eq!(render_template(text, &offline(338_787.17)), "No sample for 3 d 22 h: down.");
        assert_eq!(render_template(text, &offline(0.68)), "No sample for 0.68 s: down.");
        assert_eq!(render_template(text, &offline(60.0)), "No sample for 1 min: down.");
        assert_eq!(render_template(text, &offline(725.0)), "No sample for 12 min 5 s: down.");
        assert_eq!(render_template(text, &offline(18_180.0)), "No sample for 5 h 3 min: down.");
        assert_eq!(render_template(text, &offline(172_800.0)), "No sample for 2 d: down.");
        // Without its unit as a word of its own, the number stays a number.
        assert_eq!(
            render_template("{duration_in_state_s}s, {duration_in_state_s} sec", &offline(725.0)),
            "725s, 725 sec"
        );
        assert!(
            valid_label_name("team_1")
                && !valid_label_name("1team")
                && !valid_label_name("a-b")
                && !valid_label_name("")
        );
    }
}
