//! Digest channels (issue 27): instead of real-time messages, one message per day or week at
//! the channel's time (UTC): the top waste by owner with money, the GPUs newly found held but
//! idle, and the alerts that fired in the period. An empty period sends nothing.
//!
//! Exactly once: the channel's `digest_last_ms` moves from the previous period's end to this
//! one's by compare-and-set, in the transaction that enqueues the digest (the engine runs on
//! one replica at a time anyway).

use std::collections::{BTreeMap, HashMap, HashSet};

use fleetlens_api::OwnerWaste;
use fleetlens_core::rules::group::{DigestEvery, digest_period};
use fleetlens_core::rules::payload::{SLACK_MAX_SECTION_CHARS, slack_escape, truncate_chars};
use fleetlens_core::time_text::format_rfc3339_ms;
use fleetlens_core::{ChannelKind, MessageKind, OwnerKey, RuleId};
use fleetlens_store::alerts::{AlertFilter, AlertRecord, ChannelRecord, NewNotification};
use fleetlens_store::{OrgId, StoreError};
use serde_json::{Value as Json, json};

use super::engine::Report;
use super::{AlertsCtx, ms};

/// Owners listed, at most.
const TOP_OWNERS: usize = 5;
/// Alerts read for one digest, at most (newest first).
const MAX_ALERTS: i64 = 1000;
/// Lines per list in a Slack digest.
const MAX_LINES: usize = 20;

/// Send the digests that are due.
pub async fn run(
    ctx: &AlertsCtx,
    channels: &HashMap<OrgId, Vec<ChannelRecord>>,
    now: i64,
    report: &mut Report,
) -> Result<(), StoreError> {
    for (org, list) in channels {
        for c in list.iter().filter(|c| !c.digest.is_empty()) {
            let every = match ctx.cfg.alert_digest_period {
                Some(p) => DigestEvery::Period(ms(p).max(1000)),
                None => match DigestEvery::parse(&c.digest) {
                    Some(e) => e,
                    None => continue,
                },
            };
            let Some((from, to)) = digest_period(every, c.digest_at_min, c.digest_last_ms, now) else { continue };
            if from == 0 {
                // A new digest channel: its first period starts now.
                ctx.store.advance_digest(*org, c.id, 0, to, None, now).await?;
                continue;
            }
            let body = build(ctx, *org, c, every, from, to, now).await?;
            let message = body.map(|b| NewNotification {
                channel_id: c.id,
                kind: MessageKind::Digest,
                seq: to,
                payload: b.to_string(),
            });
            if ctx.store.advance_digest(*org, c.id, from, to, message.as_ref(), now).await? && message.is_some() {
                report.enqueued += 1;
            }
        }
    }
    Ok(())
}

/// What a digest says.
struct Digest {
    every: String,
    from_ms: i64,
    to_ms: i64,
    currency: String,
    top: Vec<OwnerWaste>,
    idle_held: Vec<AlertRecord>,
    fired: Vec<AlertRecord>,
}

async fn build(
    ctx: &AlertsCtx,
    org: OrgId,
    c: &ChannelRecord,
    every: DigestEvery,
    from: i64,
    to: i64,
    now: i64,
) -> Result<Option<Json>, StoreError> {
    let store = ctx.store.as_ref();
    let fired: Vec<AlertRecord> = store
        .alerts(org, &AlertFilter { limit: MAX_ALERTS, ..Default::default() })
        .await?
        .into_iter()
        .filter(|a| a.fired_at_ms.is_some_and(|t| (from..to).contains(&t)))
        .collect();
    let idle_rules: HashSet<RuleId> = store
        .alert_rules(org)
        .await?
        .into_iter()
        .filter(|r| r.builtin.as_deref() == Some("idle_held"))
        .map(|r| r.id)
        .collect();
    let idle_held: Vec<AlertRecord> = fired.iter().filter(|a| idle_rules.contains(&a.rule_id)).cloned().collect();
    let gpus = store.gpu_identities(org).await?;
    let prices = crate::analytics::prices(store, org).await.unwrap_or_default();
    let credits = crate::analytics::owners::read_owner_credits(store, org, &gpus, &OwnerKey::Holder, from, to.min(now))
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "digest: cannot read the owners' credits");
            Default::default()
        });
    let top = crate::analytics::owners::top_owners(&gpus, &credits, &prices, TOP_OWNERS);
    if fired.is_empty() && top.is_empty() {
        return Ok(None);
    }
    let every = match every {
        DigestEvery::Daily => "daily".to_string(),
        DigestEvery::Weekly => "weekly".to_string(),
        DigestEvery::Period(p) => {
            format!("every {}", humantime::format_duration(std::time::Duration::from_millis(p as u64)))
        }
    };
    let d = Digest { every, from_ms: from, to_ms: to, currency: prices.currency.clone(), top, idle_held, fired };
    Ok(Some(match c.kind {
        ChannelKind::Slack => slack(&d),
        ChannelKind::Webhook | ChannelKind::Alertmanager => webhook(&d, &c.name),
    }))
}

fn owner_of(a: &AlertRecord) -> String {
    let o = fleetlens_core::rules::group::owner_of(&a.labels);
    if o.is_empty() { "owner unknown".into() } else { o }
}

fn waste_line(o: &OwnerWaste, currency: &str) -> String {
    let money = match (o.wasted_cost, o.cost) {
        (Some(w), Some(c)) => format!("{w:.2} {currency} wasted of {c:.2} {currency}"),
        (Some(w), None) => format!("{w:.2} {currency} wasted"),
        _ => "cost unknown".into(),
    };
    format!(
        "{}: {money} ({:.1} GPU-hours, {:.1} held idle, {:.1} hollow, on {} GPUs)",
        o.owner, o.gpu_hours, o.idle_held_hours, o.hollow_hours, o.gpus
    )
}

/// Alerts that fired, per rule: `Rule (severity) ×n`.
fn fired_by_rule(fired: &[AlertRecord]) -> Vec<(String, Vec<&AlertRecord>)> {
    let mut by: BTreeMap<String, Vec<&AlertRecord>> = BTreeMap::new();
    for a in fired {
        by.entry(format!("{} ({})", a.rule_name, a.severity)).or_default().push(a);
    }
    let mut out: Vec<(String, Vec<&AlertRecord>)> = by.into_iter().collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    out
}

fn section(text: String) -> Json {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": truncate_chars(&text, SLACK_MAX_SECTION_CHARS)}})
}

fn lines<T>(items: &[T], f: impl Fn(&T) -> String) -> String {
    let mut out: Vec<String> = items.iter().take(MAX_LINES).map(|x| format!("• {}", f(x))).collect();
    if items.len() > MAX_LINES {
        out.push(format!("… and {} more", items.len() - MAX_LINES));
    }
    out.join("\n")
}

fn slack(d: &Digest) -> Json {
    let e = slack_escape;
    let period = format!("{} → {}", format_rfc3339_ms(d.from_ms), format_rfc3339_ms(d.to_ms));
    let waste = if d.top.is_empty() {
        "nothing wasted by a known owner".to_string()
    } else {
        lines(&d.top, |o| e(&waste_line(o, &d.currency)))
    };
    let idle = if d.idle_held.is_empty() {
        "none".to_string()
    } else {
        lines(&d.idle_held, |a| format!("{} on {} · {}", e(&a.gpu_uuid), e(&a.host), e(&owner_of(a))))
    };
    let by_rule = fired_by_rule(&d.fired);
    let fired = if by_rule.is_empty() {
        "none".to_string()
    } else {
        lines(&by_rule, |(rule, list)| {
            let gpus: Vec<&str> = list.iter().take(5).map(|a| a.gpu_uuid.as_str()).collect();
            let more = if list.len() > 5 { format!(" and {} more", list.len() - 5) } else { String::new() };
            format!("{} ×{}: {}{more}", e(rule), list.len(), e(&gpus.join(", ")))
        })
    };
    let blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": format!("📋 Fleetlens {} digest", d.every), "emoji": true}}),
        section(format!("*{}* (UTC)", e(&period))),
        section(format!("*Top waste by owner*\n{waste}")),
        section(format!("*New idle-held GPUs* ({})\n{idle}", d.idle_held.len())),
        section(format!("*Alerts that fired* ({})\n{fired}", d.fired.len())),
        json!({"type": "context", "elements": [{"type": "mrkdwn", "text": "Fleetlens · digest"}]}),
    ];
    let text = format!(
        "Fleetlens {} digest {period}: {} alerts fired, {} GPUs held idle, top waste {}",
        d.every,
        d.fired.len(),
        d.idle_held.len(),
        d.top.first().map_or_else(|| "none".to_string(), |o| waste_line(o, &d.currency))
    );
    json!({"text": truncate_chars(&e(&text), SLACK_MAX_SECTION_CHARS), "blocks": blocks})
}

fn webhook(d: &Digest, receiver: &str) -> Json {
    let alert = |a: &AlertRecord| {
        json!({
            "id": a.id, "rule": a.rule_name, "rule_id": a.rule_id, "severity": a.severity, "status": a.status.as_str(),
            "gpu": a.gpu_uuid, "host": a.host, "owner": owner_of(a),
            "fired_at": a.fired_at_ms.map(format_rfc3339_ms), "resolved_at": a.resolved_at_ms.map(format_rfc3339_ms),
        })
    };
    json!({
        "version": "fleetlens-digest/1",
        "kind": "digest",
        "every": d.every,
        "receiver": receiver,
        "from": format_rfc3339_ms(d.from_ms),
        "to": format_rfc3339_ms(d.to_ms),
        "from_ms": d.from_ms,
        "to_ms": d.to_ms,
        "currency": d.currency,
        "top_waste_by_owner": d.top,
        "new_idle_held_gpus": d.idle_held.iter().map(alert).collect::<Vec<_>>(),
        "alerts_fired": d.fired.iter().map(alert).collect::<Vec<_>>(),
    })
}
