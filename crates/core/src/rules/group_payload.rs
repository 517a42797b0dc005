//! What a notification group sends: one Slack message or one Alertmanager-v4 webhook body
//! listing the group's GPUs, with the owner, the GPU-hours at stake and the cost per hour. A
//! group of one alert sends exactly the one-alert message ([`super::payload`]).

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use super::MessageKind;
use super::payload::{
    Notification, NotifyStatus, SLACK_MAX_BLOCKS, SLACK_MAX_HEADER_CHARS, SLACK_MAX_SECTION_CHARS,
    SLACK_MAX_TEXT_CHARS, ZERO_TIME, am_alert, format_duration_ms, mrkdwn, slack_escape, slack_message, truncate_chars,
    webhook_v4,
};
use crate::time_text::format_rfc3339_ms;

/// Which message of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupMessageKind {
    Firing,
    /// GPUs joined.
    Update,
    Repeat,
    Resolved,
}

impl GroupMessageKind {
    /// The outbox kind.
    pub fn message_kind(self) -> MessageKind {
        match self {
            GroupMessageKind::Firing => MessageKind::Firing,
            GroupMessageKind::Update => MessageKind::Update,
            GroupMessageKind::Repeat => MessageKind::Repeat,
            GroupMessageKind::Resolved => MessageKind::Resolved,
        }
    }

    /// The outbox kind's name.
    pub fn as_str(self) -> &'static str {
        self.message_kind().as_str()
    }
}

/// One group message.
#[derive(Debug, Clone)]
pub struct GroupMessage {
    pub kind: GroupMessageKind,
    pub key: String,
    /// The GPUs' alerts it lists (status of each as it is now).
    pub members: Vec<Notification>,
    /// GPUs that joined since the last message (an update says which).
    pub new_members: usize,
    /// GPU-hours the listed alerts have held (until now, or until they resolved).
    pub gpu_hours: f64,
    /// What the still-firing GPUs cost per hour (list prices), when their prices are known.
    pub cost_per_hour: Option<f64>,
    pub currency: String,
}

impl GroupMessage {
    fn status(&self) -> NotifyStatus {
        if self.kind == GroupMessageKind::Resolved { NotifyStatus::Resolved } else { NotifyStatus::Firing }
    }

    fn first(&self) -> Option<&Notification> {
        self.members.first()
    }

    /// `8 GPUs on node-1 · job 48213`: how many, where, whose.
    fn scope_words(&self) -> String {
        let hosts: std::collections::BTreeSet<&str> = self.members.iter().map(|m| m.host.as_str()).collect();
        let owners: std::collections::BTreeSet<String> =
            self.members.iter().filter_map(Notification::owner_words).collect();
        let n = self.members.len();
        let mut s = format!("{n} GPU{}", if n == 1 { "" } else { "s" });
        match hosts.len() {
            0 => {}
            1 => s.push_str(&format!(" on {}", hosts.iter().next().copied().unwrap_or_default())),
            k => s.push_str(&format!(" on {k} hosts")),
        }
        match owners.len() {
            0 => s.push_str(" · owner unknown"),
            1 => s.push_str(&format!(" · {}", owners.iter().next().cloned().unwrap_or_default())),
            k => s.push_str(&format!(" · {k} owners")),
        }
        s
    }

    fn money_words(&self) -> String {
        let hours = format!("{:.1} GPU-hours at stake", self.gpu_hours);
        match self.cost_per_hour {
            Some(c) => format!("{hours} · {c:.2} {}/hour", self.currency),
            None => format!("{hours} · cost per hour unknown (no price for the GPU model)"),
        }
    }

    fn title(&self) -> String {
        let Some(f) = self.first() else { return String::new() };
        let what = format!("{} ({})", f.rule_name, f.severity);
        let n = self.members.len();
        match self.kind {
            GroupMessageKind::Firing => format!("🔥 {what} · {n} GPUs"),
            GroupMessageKind::Update => format!("➕ {what} · {} more, {n} GPUs", self.new_members),
            GroupMessageKind::Repeat => format!("🔁 Still firing: {what} · {n} GPUs"),
            GroupMessageKind::Resolved => format!("✅ Resolved: {what} · {n} GPUs"),
        }
    }

    fn member_line(m: &Notification) -> String {
        let owner = m.owner_words().unwrap_or_else(|| "owner unknown".into());
        let when = match m.resolved_at_ms {
            Some(at) => format!("resolved {}", format_rfc3339_ms(at)),
            None => format!("since {}", format_rfc3339_ms(m.active_since_ms)),
        };
        let gpu = match &m.gpu_url {
            Some(url) => format!("<{}|{}>", url, slack_escape(&m.gpu_words())),
            None => slack_escape(&m.gpu_words()),
        };
        format!("• {gpu} · {} · {} · {}", slack_escape(&m.host), slack_escape(&owner), when)
    }
}

/// The Slack message of a group.
pub fn slack_group_message(g: &GroupMessage) -> Json {
    let Some(first) = g.first() else { return json!({"text": "(empty group)"}) };
    if g.members.len() == 1 && g.kind != GroupMessageKind::Update {
        let mut n = first.clone();
        n.status = g.status();
        n.reminder = g.kind == GroupMessageKind::Repeat;
        return slack_message(&n);
    }
    let e = slack_escape;
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": truncate_chars(&g.title(), SLACK_MAX_HEADER_CHARS), "emoji": true}}),
        json!({"type": "section", "text": mrkdwn(format!("*{}*\n{}", e(&g.scope_words()), e(&g.money_words())), SLACK_MAX_SECTION_CHARS)}),
        json!({"type": "section", "text": mrkdwn(e(&first.summary), SLACK_MAX_SECTION_CHARS)}),
    ];
    if !first.advice.is_empty() && g.kind != GroupMessageKind::Resolved {
        blocks.push(json!({"type": "section", "text": mrkdwn(format!("*Advice:* {}", e(&first.advice)), SLACK_MAX_SECTION_CHARS)}));
    }
    // The GPUs, as many sections as their lines need (one block is left for the context).
    let mut chunk = String::new();
    let mut listed = 0;
    let room = SLACK_MAX_BLOCKS - 1;
    for m in &g.members {
        let line = GroupMessage::member_line(m);
        if chunk.chars().count() + line.chars().count() + 1 > SLACK_MAX_SECTION_CHARS {
            if blocks.len() + 1 >= room {
                break;
            }
            blocks
                .push(json!({"type": "section", "text": mrkdwn(std::mem::take(&mut chunk), SLACK_MAX_SECTION_CHARS)}));
        }
        if !chunk.is_empty() {
            chunk.push('\n');
        }
        chunk.push_str(&line);
        listed += 1;
    }
    if !chunk.is_empty() && blocks.len() < room {
        blocks.push(json!({"type": "section", "text": mrkdwn(chunk, SLACK_MAX_SECTION_CHARS)}));
    }
    let more = if listed < g.members.len() {
        format!(" · {} more not listed", g.members.len() - listed)
    } else {
        String::new()
    };
    blocks.push(json!({"type": "context", "elements": [mrkdwn(
        format!("Fleetlens · rule #{} · {} · group {}{more}", first.rule_id, g.kind.as_str(), e(&g.key)),
        SLACK_MAX_SECTION_CHARS,
    )]}));
    blocks.truncate(SLACK_MAX_BLOCKS);
    let status = match g.kind {
        GroupMessageKind::Firing => "FIRING",
        GroupMessageKind::Update => "MORE GPUS",
        GroupMessageKind::Repeat => "STILL FIRING",
        GroupMessageKind::Resolved => "RESOLVED",
    };
    let text =
        format!("[{status}] {} ({}): {} · {}", first.rule_name, first.severity, g.scope_words(), g.money_words());
    json!({"text": truncate_chars(&e(&text), SLACK_MAX_TEXT_CHARS), "blocks": blocks})
}

/// Alertmanager's webhook body (version 4) for a group: one entry per GPU in `alerts`, the
/// group's key in `groupKey`, the labels all members share in `commonLabels`; Fleetlens adds
/// `fleetlens` (GPU count, GPU-hours at stake, cost per hour).
pub fn webhook_v4_group(g: &GroupMessage, receiver: &str) -> Json {
    let Some(first) = g.first() else { return json!({}) };
    if g.members.len() == 1 && g.kind != GroupMessageKind::Update {
        let mut n = first.clone();
        n.status = g.status();
        n.reminder = g.kind == GroupMessageKind::Repeat;
        return webhook_v4(&n, receiver);
    }
    let alerts: Vec<Json> = g
        .members
        .iter()
        .map(|m| {
            let ends = m.resolved_at_ms.map_or_else(|| ZERO_TIME.to_string(), format_rfc3339_ms);
            let mut a = am_alert(m, &ends);
            a["status"] = json!(if m.resolved_at_ms.is_some() { "resolved" } else { "firing" });
            a
        })
        .collect();
    let common = |maps: Vec<BTreeMap<String, String>>| -> BTreeMap<String, String> {
        let mut it = maps.into_iter();
        let mut acc = it.next().unwrap_or_default();
        for m in it {
            acc.retain(|k, v| m.get(k) == Some(v));
        }
        acc
    };
    let common_labels = common(g.members.iter().map(|m| m.labels.clone()).collect());
    let common_annotations = common(g.members.iter().map(Notification::annotations).collect());
    json!({
        "version": "4",
        "groupKey": g.key,
        "truncatedAlerts": 0,
        "status": g.status().as_str(),
        "receiver": receiver,
        "groupLabels": {"alertname": first.rule_name},
        "commonLabels": common_labels,
        "commonAnnotations": common_annotations,
        "externalURL": first.external_url,
        "alerts": alerts,
        "fleetlens": {
            "message": g.kind.as_str(),
            "gpus": g.members.len(),
            "new_gpus": g.new_members,
            "gpu_hours_at_stake": (g.gpu_hours * 1000.0).round() / 1000.0,
            "cost_per_hour": g.cost_per_hour.map(|c| (c * 100.0).round() / 100.0),
            "currency": g.currency,
            "held_for": format_duration_ms(g.members.iter().map(Notification::held_ms).max().unwrap_or(0)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::payload::tests::notification;

    fn group(kind: GroupMessageKind, n: usize) -> GroupMessage {
        let members = (0..n)
            .map(|i| {
                let mut m = notification(NotifyStatus::Firing);
                m.gpu_uuid = format!("GPU-{i}");
                m.labels.insert("gpu".into(), m.gpu_uuid.clone());
                m.labels.insert("owner_job".into(), "4242".into());
                m
            })
            .collect();
        GroupMessage {
            kind,
            key: "rule=1, owner=job 4242, host=node-1".into(),
            members,
            new_members: 0,
            gpu_hours: 1.31,
            cost_per_hour: Some(3.8 * n as f64),
            currency: "USD".into(),
        }
    }

    #[test]
    fn one_member_is_the_one_alert_message() {
        let g = group(GroupMessageKind::Firing, 1);
        assert_eq!(slack_group_message(&g), slack_message(&g.members[0]));
        assert_eq!(webhook_v4_group(&g, "r"), webhook_v4(&g.members[0], "r"));
        let g = group(GroupMessageKind::Repeat, 1);
        assert!(slack_group_message(&g)["text"].as_str().unwrap().starts_with("[STILL FIRING]"));
    }

    #[test]
    fn a_group_lists_its_gpus_with_owner_hours_and_cost() {
        let g = group(GroupMessageKind::Firing, 16);
        let m = slack_group_message(&g);
        let text = m.to_string();
        assert!(m["blocks"][0]["text"]["text"].as_str().unwrap().contains("Busy but hollow (warning) · 16 GPUs"));
        for i in 0..16 {
            assert!(text.contains(&format!("(GPU-{i})")), "GPU-{i}");
        }
        assert!(text.contains("16 GPUs on node-1 · job 4242"), "{text}");
        assert!(text.contains("1.3 GPU-hours at stake · 60.80 USD/hour"), "{text}");
        assert!(m["text"].as_str().unwrap().starts_with("[FIRING] Busy but hollow"));
        let w = webhook_v4_group(&g, "team");
        assert_eq!(w["alerts"].as_array().unwrap().len(), 16);
        assert_eq!(w["commonLabels"]["owner_job"], "4242");
        assert!(w["commonLabels"].get("gpu").is_none(), "not common");
        assert_eq!((w["status"].as_str(), w["fleetlens"]["gpus"].as_u64()), (Some("firing"), Some(16)));
    }

    #[test]
    fn slack_limits_hold_for_a_huge_group() {
        let g = group(GroupMessageKind::Update, 5000);
        let m = slack_group_message(&g);
        let blocks = m["blocks"].as_array().unwrap();
        assert!(blocks.len() <= SLACK_MAX_BLOCKS);
        for b in blocks {
            if let Some(t) = b["text"]["text"].as_str() {
                assert!(t.chars().count() <= SLACK_MAX_SECTION_CHARS);
            }
        }
        let last = blocks.last().unwrap()["elements"][0]["text"].as_str().unwrap();
        assert!(last.contains("more not listed"), "{last}");
    }
}
