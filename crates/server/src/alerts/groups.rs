//! Notification groups (issue 27): Slack and webhook channels get one message per group of
//! alerts (by default rule + job or owner + host) instead of one per alert; the engine runs
//! this pass at the end of each cycle, on the alerts' state after the cycle's transitions.
//!
//! - Alerts resolved during the cycle are applied first, in time order, so a replay that
//!   fires and resolves within one cycle still sends its firing and resolved messages, and a
//!   later alert of the same key opens a new group.
//! - Then every firing alert joins the group of each of its channels; members whose alert no
//!   longer fires are resolved.
//! - Then each group decides ([`group_action`]): the first message after `group_wait`, a
//!   follow-up when GPUs joined (at most once per `group_interval`), reminders, the resolved
//!   message once every member has resolved.
//!
//! Exactly once: a group's row changes by compare-and-set on its version, in the transaction
//! that enqueues its messages; outbox rows are unique per (lead alert, channel, kind, seq).

use std::collections::{BTreeMap, HashMap, HashSet};

use fleetlens_core::rules::group::{
    DEFAULT_GROUP_BY, GroupAction, GroupProgress, GroupTiming, group_action, group_key,
};
use fleetlens_core::rules::group_payload::{GroupMessage, GroupMessageKind, slack_group_message, webhook_v4_group};
use fleetlens_core::rules::{Notification, NotifyStatus};
use fleetlens_core::{AlertId, ChannelId, ChannelKind, PriceTable};
use fleetlens_store::alerts::{AlertGroupRecord, AlertStatus, ChannelRecord, GroupChange, GroupWrite, NewNotification};
use fleetlens_store::{OrgId, Store, StoreError};
use serde::{Deserialize, Serialize};

use super::engine::{CycleData, Engine, Report};
use super::render;

/// What a group row stores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupState {
    pub opened_ms: i64,
    /// The first member: the group's messages are logged under its alert.
    pub lead_alert_id: AlertId,
    pub notified: bool,
    pub last_sent_ms: i64,
    /// Members listed in the last message.
    pub sent: Vec<AlertId>,
    /// Follow-ups and reminders sent (their outbox `seq`).
    pub messages: i64,
    pub members: Vec<GroupMember>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupMember {
    pub alert_id: AlertId,
    pub firing: bool,
    /// Silenced or inhibited now.
    pub held: bool,
    pub ever_active: bool,
    /// The alert as its messages show it.
    pub n: Notification,
}

impl GroupState {
    fn progress(&self) -> GroupProgress {
        GroupProgress {
            opened_ms: self.opened_ms,
            notified: self.notified,
            last_sent_ms: self.last_sent_ms,
            sent: self.sent.clone(),
            present: self.members.iter().filter(|m| m.firing).count(),
            active: self.active(),
            ever_active: self.members.iter().any(|m| m.ever_active),
        }
    }

    fn active(&self) -> Vec<AlertId> {
        self.members.iter().filter(|m| m.firing && !m.held).map(|m| m.alert_id).collect()
    }

    fn add(&mut self, m: GroupMember) {
        if self.lead_alert_id.get() == 0 {
            self.lead_alert_id = m.alert_id;
        }
        self.members.push(m);
    }
}

/// A group as the engine keeps it.
#[derive(Debug, Clone)]
pub struct GroupEntry {
    /// The stored row (None until it is first written).
    pub rec: Option<AlertGroupRecord>,
    pub org: OrgId,
    pub channel: ChannelId,
    pub key: String,
    pub state: GroupState,
    pub dirty: bool,
}

/// The open groups, by (channel, key).
pub async fn load(store: &dyn Store) -> Result<HashMap<(ChannelId, String), GroupEntry>, StoreError> {
    Ok(store
        .open_alert_groups()
        .await?
        .into_iter()
        .map(|rec| {
            let state: GroupState = serde_json::from_value(rec.state.clone()).unwrap_or_default();
            let entry = GroupEntry {
                org: rec.org_id,
                channel: rec.channel_id,
                key: rec.group_key.clone(),
                state,
                dirty: false,
                rec: Some(rec),
            };
            ((entry.channel, entry.key.clone()), entry)
        })
        .collect())
}

/// The key parts of a channel (its own, or the default).
pub fn group_by(c: &ChannelRecord) -> Vec<String> {
    if c.group_by.is_empty() { DEFAULT_GROUP_BY.iter().map(|s| s.to_string()).collect() } else { c.group_by.clone() }
}

/// One message to send: its kind, the members it lists, how many joined, its outbox seq.
struct Planned {
    entry: GroupEntry,
    messages: Vec<(GroupMessageKind, Vec<AlertId>, usize, i64)>,
    close: bool,
}

fn new_entry(org: OrgId, channel: ChannelId, key: String, now: i64) -> GroupEntry {
    GroupEntry { rec: None, org, channel, key, state: GroupState { opened_ms: now, ..Default::default() }, dirty: true }
}

fn resolve_member(m: &mut GroupMember, at: i64) {
    m.firing = false;
    m.n.status = NotifyStatus::Resolved;
    m.n.resolved_at_ms = Some(m.n.resolved_at_ms.unwrap_or(at));
}

/// Apply a message's effects on the group; returns (listed members, joined, seq).
fn send(state: &mut GroupState, kind: GroupMessageKind, now: i64) -> (Vec<AlertId>, usize, i64) {
    let active = state.active();
    let (listed, joined) = match kind {
        GroupMessageKind::Firing => {
            let listed: Vec<AlertId> = state
                .members
                .iter()
                .filter(|m| (m.firing && !m.held) || (!m.firing && m.ever_active))
                .map(|m| m.alert_id)
                .collect();
            let n = listed.len();
            (listed, n)
        }
        GroupMessageKind::Update => {
            let joined = active.iter().filter(|id| !state.sent.contains(id)).count();
            (active.clone(), joined)
        }
        GroupMessageKind::Repeat => (active.clone(), 0),
        GroupMessageKind::Resolved => (state.members.iter().filter(|m| m.ever_active).map(|m| m.alert_id).collect(), 0),
    };
    let seq = match kind {
        GroupMessageKind::Update | GroupMessageKind::Repeat => {
            state.messages += 1;
            state.messages
        }
        _ => 0,
    };
    if kind != GroupMessageKind::Resolved {
        state.sent = listed.clone();
    }
    state.notified = true;
    state.last_sent_ms = now;
    (listed, joined, seq)
}

impl Engine {
    /// The cycle's group work: see the module doc.
    pub(super) async fn group_pass(
        &mut self,
        store: &dyn Store,
        data: &CycleData,
        now: i64,
        report: &mut Report,
    ) -> Result<(), StoreError> {
        let planned = self.plan_groups(data, now);
        if planned.is_empty() {
            return Ok(());
        }
        // Prices for the cost per hour, once per organisation that sends.
        let mut prices: HashMap<OrgId, PriceTable> = HashMap::new();
        for p in planned.iter().filter(|p| !p.messages.is_empty()) {
            if let std::collections::hash_map::Entry::Vacant(e) = prices.entry(p.entry.org) {
                e.insert(crate::analytics::prices(store, p.entry.org).await.unwrap_or_default());
            }
        }
        let mut changes = Vec::new();
        let mut written = Vec::new();
        for p in &planned {
            let channel = data.channels.get(&p.entry.org).and_then(|cs| cs.iter().find(|c| c.id == p.entry.channel));
            let mut notify = Vec::new();
            let mut mark = Vec::new();
            if let Some(channel) = channel {
                for (kind, listed, joined, seq) in &p.messages {
                    let table = prices.get(&p.entry.org).cloned().unwrap_or_default();
                    let msg = message(&p.entry, *kind, listed, *joined, &table, now);
                    let payload = match channel.kind {
                        ChannelKind::Slack => slack_group_message(&msg),
                        ChannelKind::Webhook | ChannelKind::Alertmanager => webhook_v4_group(&msg, &channel.name),
                    };
                    notify.push((
                        p.entry.state.lead_alert_id,
                        NewNotification {
                            channel_id: channel.id,
                            kind: kind.message_kind(),
                            seq: *seq,
                            payload: payload.to_string(),
                        },
                    ));
                    if matches!(kind, GroupMessageKind::Firing | GroupMessageKind::Update) {
                        mark.extend(listed.iter().copied());
                    }
                }
            }
            let state = serde_json::to_value(&p.entry.state).unwrap_or_default();
            let write = match &p.entry.rec {
                None if p.close && notify.is_empty() => continue,
                None => GroupWrite::Insert(AlertGroupRecord {
                    // Not stored yet: the database gives it one.
                    id: Default::default(),
                    org_id: p.entry.org,
                    channel_id: p.entry.channel,
                    group_key: p.entry.key.clone(),
                    is_open: !p.close,
                    state,
                    version: 0,
                    created_ms: now,
                    updated_ms: now,
                }),
                Some(rec) => GroupWrite::Update(AlertGroupRecord { is_open: !p.close, state, ..rec.clone() }),
            };
            report.enqueued += notify.len() as u64;
            changes.push(GroupChange { write, notify, mark_notified: mark.clone() });
            written.push((p, mark));
        }
        if changes.is_empty() {
            return Ok(());
        }
        let ids = store.apply_group_changes(&changes, now).await?;
        if ids.iter().any(Option::is_none) {
            report.reload = true;
            return Ok(());
        }
        let mut notified: HashSet<AlertId> = HashSet::new();
        for ((p, mark), id) in written.into_iter().zip(ids) {
            notified.extend(mark);
            if p.close {
                continue;
            }
            let Some(g) = self.groups.get_mut(&(p.entry.channel, p.entry.key.clone())) else { continue };
            g.dirty = false;
            g.rec = Some(match g.rec.take() {
                Some(rec) => AlertGroupRecord { version: rec.version + 1, ..rec },
                None => AlertGroupRecord {
                    id: id.unwrap_or_default(),
                    org_id: p.entry.org,
                    channel_id: p.entry.channel,
                    group_key: p.entry.key.clone(),
                    is_open: true,
                    state: serde_json::Value::Null,
                    version: 0,
                    created_ms: now,
                    updated_ms: now,
                },
            });
        }
        for a in self.open.values_mut() {
            if notified.contains(&a.id) {
                a.notified_firing = true;
            }
        }
        Ok(())
    }

    fn plan_groups(&mut self, data: &CycleData, now: i64) -> Vec<Planned> {
        let mut planned = Vec::new();

        // 1. Alerts resolved in this cycle, in time order.
        let mut events = std::mem::take(&mut self.resolved_events);
        let resolved_ids = std::mem::take(&mut self.resolved_ids);
        events.sort_by_key(|a| (a.resolved_at_ms.unwrap_or(now), a.id));
        for mut a in events {
            if !a.is_stored() {
                match resolved_ids.get(&(a.rule_id, a.gpu_id, a.active_since_ms)) {
                    Some(id) => a.id = *id,
                    None => continue,
                }
            }
            let at = a.resolved_at_ms.unwrap_or(now);
            let mut touched: Vec<(ChannelId, String)> = Vec::new();
            for (k, g) in self.groups.iter_mut() {
                if let Some(m) = g.state.members.iter_mut().find(|m| m.alert_id == a.id) {
                    resolve_member(m, at);
                    g.dirty = true;
                    touched.push(k.clone());
                }
            }
            if touched.is_empty()
                && a.fired_at_ms.is_some()
                && let Some(rule) = data.rule(a.org_id, a.rule_id)
            {
                // Fired and resolved within this cycle: it still gets its messages.
                let held = a.silenced_by.is_some() || a.inhibited_by.is_some();
                for c in data.group_channels_for(&rule.rec) {
                    let key = group_key(&group_by(c), &a.labels);
                    let g = self
                        .groups
                        .entry((c.id, key.clone()))
                        .or_insert_with(|| new_entry(a.org_id, c.id, key.clone(), now));
                    let mut n = render::notification(&a, NotifyStatus::Resolved, false, &data.public_url);
                    n.resolved_at_ms = Some(at);
                    g.state.add(GroupMember { alert_id: a.id, firing: false, held, ever_active: !held, n });
                    g.dirty = true;
                    touched.push((c.id, key));
                }
            }
            for k in touched {
                let done = self.groups.get(&k).is_some_and(|g| g.state.members.iter().all(|m| !m.firing));
                if !done {
                    continue;
                }
                let Some(mut entry) = self.groups.remove(&k) else { continue };
                let kinds: Vec<GroupMessageKind> = match group_action(&entry.state.progress(), now, no_wait()) {
                    GroupAction::Resolved => vec![GroupMessageKind::Resolved],
                    GroupAction::Firing => vec![GroupMessageKind::Firing, GroupMessageKind::Resolved],
                    _ => vec![],
                };
                let messages = kinds
                    .into_iter()
                    .map(|kind| {
                        let (listed, joined, seq) = send(&mut entry.state, kind, now);
                        (kind, listed, joined, seq)
                    })
                    .collect();
                planned.push(Planned { entry, messages, close: true });
            }
        }

        // 2. Firing alerts join their groups; members whose alert no longer fires resolve.
        let mut firing: HashSet<(AlertId, ChannelId, String)> = HashSet::new();
        for a in self.open.values().filter(|a| a.status == AlertStatus::Firing && a.is_stored()) {
            let Some(rule) = data.rule(a.org_id, a.rule_id) else { continue };
            let held = a.silenced_by.is_some() || a.inhibited_by.is_some();
            for c in data.group_channels_for(&rule.rec) {
                let key = group_key(&group_by(c), &a.labels);
                firing.insert((a.id, c.id, key.clone()));
                let g = self.groups.entry((c.id, key.clone())).or_insert_with(|| new_entry(a.org_id, c.id, key, now));
                match g.state.members.iter_mut().find(|m| m.alert_id == a.id) {
                    Some(m) => {
                        if m.held != held || !m.firing || (!held && !m.ever_active) {
                            m.held = held;
                            m.firing = true;
                            m.ever_active |= !held;
                            g.dirty = true;
                        }
                    }
                    None => {
                        let n = render::notification(a, NotifyStatus::Firing, false, &data.public_url);
                        g.state.add(GroupMember { alert_id: a.id, firing: true, held, ever_active: !held, n });
                        g.dirty = true;
                    }
                }
            }
        }
        for ((channel, key), g) in self.groups.iter_mut() {
            for m in g.state.members.iter_mut().filter(|m| m.firing) {
                if !firing.contains(&(m.alert_id, *channel, key.clone())) {
                    resolve_member(m, now);
                    g.dirty = true;
                }
            }
        }

        // 3. What each group sends now.
        let keys: Vec<(ChannelId, String)> = self.groups.keys().cloned().collect();
        for k in keys {
            let Some(g) = self.groups.get_mut(&k) else { continue };
            let channel = data.channels.get(&g.org).and_then(|cs| cs.iter().find(|c| c.id == g.channel));
            let Some(channel) = channel.filter(|c| !super::engine::per_alert(c) && c.digest.is_empty()) else {
                // The channel is gone or no longer takes groups: close quietly.
                if let Some(entry) = self.groups.remove(&k) {
                    planned.push(Planned { entry, messages: vec![], close: true });
                }
                continue;
            };
            let timing = GroupTiming {
                wait_ms: channel.group_wait_s.max(0).saturating_mul(1000),
                interval_ms: channel.group_interval_s.max(0).saturating_mul(1000),
                repeat_ms: repeat_ms(data, g),
            };
            let action = group_action(&g.state.progress(), now, timing);
            let kinds = match action {
                GroupAction::Wait => vec![],
                GroupAction::Firing => vec![GroupMessageKind::Firing],
                GroupAction::Update => vec![GroupMessageKind::Update],
                GroupAction::Repeat => vec![GroupMessageKind::Repeat],
                GroupAction::Resolved => vec![GroupMessageKind::Resolved],
                GroupAction::Drop => vec![],
            };
            let close = matches!(action, GroupAction::Resolved | GroupAction::Drop);
            if kinds.is_empty() && !close && !g.dirty {
                continue;
            }
            let messages = kinds
                .into_iter()
                .map(|kind| {
                    let (listed, joined, seq) = send(&mut g.state, kind, now);
                    (kind, listed, joined, seq)
                })
                .collect();
            let kept = (!close).then(|| g.clone());
            let entry = match kept.or_else(|| self.groups.remove(&k)) {
                Some(e) => e,
                None => continue,
            };
            planned.push(Planned { entry, messages, close });
        }
        planned
    }
}

/// Closing a group (every member resolved) sends at once.
fn no_wait() -> GroupTiming {
    GroupTiming { wait_ms: 0, interval_ms: 0, repeat_ms: 0 }
}

/// The shortest repeat interval of the group's rules (0: no reminders).
fn repeat_ms(data: &CycleData, g: &GroupEntry) -> i64 {
    g.state
        .members
        .iter()
        .filter_map(|m| data.rule(g.org, m.n.rule_id))
        .map(|r| r.rec.rule.repeat_interval_s)
        .filter(|s| *s > 0)
        .min()
        .unwrap_or(0)
        .saturating_mul(1000)
}

/// The message of `kind` listing `listed`.
fn message(
    entry: &GroupEntry,
    kind: GroupMessageKind,
    listed: &[AlertId],
    joined: usize,
    prices: &PriceTable,
    now: i64,
) -> GroupMessage {
    let by_id: BTreeMap<AlertId, &GroupMember> = entry.state.members.iter().map(|m| (m.alert_id, m)).collect();
    let members: Vec<Notification> = listed
        .iter()
        .filter_map(|id| by_id.get(id))
        .map(|m| {
            let mut n = m.n.clone();
            if kind != GroupMessageKind::Resolved {
                // As it was when it fired (a replay may have resolved it already).
                n.status = NotifyStatus::Firing;
                n.resolved_at_ms = None;
            }
            n
        })
        .collect();
    let gpu_hours =
        members.iter().map(|n| (n.resolved_at_ms.unwrap_or(now) - n.active_since_ms).max(0) as f64 / 3_600_000.0).sum();
    let costs: Vec<f64> = members
        .iter()
        .filter(|n| n.resolved_at_ms.is_none())
        .filter_map(|n| n.gpu_name.as_deref().and_then(|name| prices.price_for(name)))
        .collect();
    GroupMessage {
        kind,
        key: entry.key.clone(),
        members,
        new_members: joined,
        gpu_hours,
        cost_per_hour: (!costs.is_empty()).then(|| costs.iter().sum()),
        currency: prices.currency.clone(),
    }
}
