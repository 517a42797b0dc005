//! Notification groups and digests, the pure part.
//!
//! A channel groups its messages by a key made of parts it chooses (default: the rule, the job
//! or owner, the host), so a job whose 16 GPUs hang sends one message listing them. A group's
//! life: opened when its first alert fires; its first message once `group_wait` has passed;
//! a follow-up only when GPUs join that the last message did not list, at most once per
//! `group_interval`; reminders at the rules' repeat interval; one resolved message when all its
//! members have resolved.
//!
//! A digest channel gets, instead of real-time messages, one digest per day or week at a time
//! of day (UTC); [`digest_period`] says which period is due.

use std::collections::BTreeMap;

/// The default group key: rule + job or owner + host.
pub const DEFAULT_GROUP_BY: [&str; 3] = ["rule", "owner", "host"];

/// Parts a key can be made of besides alert label names.
pub const SPECIAL_PARTS: [&str; 2] = ["rule", "owner"];

/// Is `part` usable in `group_by`?
pub fn valid_part(part: &str) -> bool {
    SPECIAL_PARTS.contains(&part) || super::payload::valid_label_name(part)
}

/// The owner part of a key: the job, else the user, else the namespace (empty when unknown).
pub fn owner_of(labels: &BTreeMap<String, String>) -> String {
    for (label, word) in [("owner_job", "job"), ("owner_user", "user"), ("owner_namespace", "namespace")] {
        if let Some(v) = labels.get(label).filter(|v| !v.is_empty()) {
            return format!("{word} {v}");
        }
    }
    String::new()
}

/// The group key of an alert with these labels.
pub fn group_key<S: AsRef<str>>(group_by: &[S], labels: &BTreeMap<String, String>) -> String {
    group_by
        .iter()
        .map(|part| {
            let part = part.as_ref();
            let value = match part {
                "rule" => labels.get("rule_id").cloned().unwrap_or_default(),
                "owner" => owner_of(labels),
                label => labels.get(label).cloned().unwrap_or_default(),
            };
            format!("{part}={value}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A channel's grouping timers, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupTiming {
    pub wait_ms: i64,
    pub interval_ms: i64,
    /// Reminders (0: none).
    pub repeat_ms: i64,
}

/// Where a group stands, as far as deciding goes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupProgress {
    pub opened_ms: i64,
    /// A message has gone out (so a resolved one will).
    pub notified: bool,
    pub last_sent_ms: i64,
    /// Members listed in the last message.
    pub sent: Vec<crate::AlertId>,
    /// Members still firing (held back or not).
    pub present: usize,
    /// Members firing and neither silenced nor inhibited now.
    pub active: Vec<crate::AlertId>,
    /// A member was notifiable at some point (it may have resolved since).
    pub ever_active: bool,
}

/// What to do with a group now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupAction {
    /// Nothing yet.
    Wait,
    /// The first message.
    Firing,
    /// GPUs joined that the last message did not list.
    Update,
    /// Still firing, a reminder.
    Repeat,
    /// Every member resolved: the last message.
    Resolved,
    /// Closed without a message (its members resolved, or were held back, before it was sent).
    Drop,
}

pub fn group_action(g: &GroupProgress, now_ms: i64, t: GroupTiming) -> GroupAction {
    if !g.notified {
        return if g.present == 0 {
            // Members that fired and resolved before the first message still get it (a replay
            // of old data fires and resolves within one evaluation), then the resolved one.
            if g.ever_active { GroupAction::Firing } else { GroupAction::Drop }
        } else if (!g.active.is_empty() || g.ever_active) && now_ms - g.opened_ms >= t.wait_ms {
            if g.active.is_empty() { GroupAction::Wait } else { GroupAction::Firing }
        } else {
            GroupAction::Wait
        };
    }
    if g.present == 0 {
        return GroupAction::Resolved;
    }
    let since = now_ms - g.last_sent_ms;
    if g.active.iter().any(|id| !g.sent.contains(id)) && since >= t.interval_ms {
        return GroupAction::Update;
    }
    if t.repeat_ms > 0 && !g.active.is_empty() && since >= t.repeat_ms {
        return GroupAction::Repeat;
    }
    GroupAction::Wait
}

/// How often a digest comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestEvery {
    Daily,
    Weekly,
    /// Every this many ms from the Unix epoch (tests and demos: `--alert-digest-period`).
    Period(i64),
}

impl DigestEvery {
    pub fn parse(s: &str) -> Option<DigestEvery> {
        match s {
            "daily" => Some(DigestEvery::Daily),
            "weekly" => Some(DigestEvery::Weekly),
            _ => None,
        }
    }
}

const DAY_MS: i64 = 86_400_000;
/// 1970-01-01 was a Thursday: Mondays are 4 days after the epoch's week start.
const MONDAY_OFFSET_MS: i64 = 4 * DAY_MS;

/// The latest digest time at or before `now_ms`: daily at `at_min` minutes after midnight UTC,
/// weekly on Mondays at that time.
pub fn digest_boundary(every: DigestEvery, at_min: i64, now_ms: i64) -> i64 {
    let (period, offset) = match every {
        DigestEvery::Daily => (DAY_MS, at_min * 60_000),
        DigestEvery::Weekly => (7 * DAY_MS, MONDAY_OFFSET_MS + at_min * 60_000),
        DigestEvery::Period(p) => (p.max(1), 0),
    };
    (now_ms - offset).div_euclid(period) * period + offset
}

/// The period a digest is due for, `(from, to)`: the last one sent ended at `last_ms`, and a
/// digest time has passed since. `last_ms == 0` (never started) starts the clock at the latest
/// digest time without a digest.
pub fn digest_period(every: DigestEvery, at_min: i64, last_ms: i64, now_ms: i64) -> Option<(i64, i64)> {
    let boundary = digest_boundary(every, at_min, now_ms);
    (boundary > last_ms).then_some((last_ms, boundary))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn keys() {
        let l = labels(&[("rule_id", "3"), ("host", "node-1"), ("owner_user", "alice"), ("owner_job", "48213")]);
        assert_eq!(group_key(&DEFAULT_GROUP_BY, &l), "rule=3, owner=job 48213, host=node-1");
        let l2 = labels(&[("rule_id", "3"), ("host", "node-1"), ("owner_user", "alice")]);
        assert_eq!(group_key(&DEFAULT_GROUP_BY, &l2), "rule=3, owner=user alice, host=node-1");
        assert_eq!(group_key(&["team"], &l2), "team=");
        assert!(valid_part("owner") && valid_part("team") && !valid_part("a-b"));
    }

    const T: GroupTiming = GroupTiming { wait_ms: 2000, interval_ms: 300_000, repeat_ms: 0 };

    fn ids(ids: &[i64]) -> Vec<crate::AlertId> {
        ids.iter().copied().map(crate::AlertId).collect()
    }

    #[test]
    fn first_message_waits_for_the_group() {
        let mut g =
            GroupProgress { opened_ms: 0, present: 1, active: ids(&[1]), ever_active: true, ..Default::default() };
        assert_eq!(group_action(&g, 1999, T), GroupAction::Wait);
        assert_eq!(group_action(&g, 2000, T), GroupAction::Firing);
        // Every member held back: nothing.
        g.active.clear();
        g.ever_active = false;
        assert_eq!(group_action(&g, 5000, T), GroupAction::Wait);
        g.present = 0;
        assert_eq!(group_action(&g, 5000, T), GroupAction::Drop);
        // Fired and resolved before the first message: it is still sent, then resolved.
        g.ever_active = true;
        assert_eq!(group_action(&g, 5000, T), GroupAction::Firing);
    }

    #[test]
    fn follow_ups_only_for_new_gpus_and_rate_limited() {
        let g = GroupProgress {
            opened_ms: 0,
            notified: true,
            last_sent_ms: 10_000,
            sent: ids(&[1, 2]),
            present: 2,
            active: ids(&[1, 2]),
            ever_active: true,
        };
        assert_eq!(group_action(&g, 10_000_000, T), GroupAction::Wait, "nothing new, no reminders");
        let joined = GroupProgress { active: ids(&[1, 2, 3]), present: 3, ..g.clone() };
        assert_eq!(group_action(&joined, 20_000, T), GroupAction::Wait, "rate-limited");
        assert_eq!(group_action(&joined, 310_000, T), GroupAction::Update);
        let fewer = GroupProgress { active: ids(&[1]), present: 1, ..g.clone() };
        assert_eq!(group_action(&fewer, 310_000, T), GroupAction::Wait, "a member resolving is not news");
        let held = GroupProgress { active: vec![], ..g.clone() };
        assert_eq!(group_action(&held, 310_000, T), GroupAction::Wait, "held back, not resolved");
        let done = GroupProgress { active: vec![], present: 0, ..g.clone() };
        assert_eq!(group_action(&done, 10_001, T), GroupAction::Resolved);
        let t = GroupTiming { repeat_ms: 3_600_000, ..T };
        assert_eq!(group_action(&g, 3_610_000, t), GroupAction::Repeat);
    }

    #[test]
    fn digest_times() {
        // 2026-11-26 is a Thursday; 09:00 UTC.
        let thu_0900 = 1_795_683_600_000;
        assert_eq!(digest_boundary(DigestEvery::Daily, 540, thu_0900), thu_0900);
        assert_eq!(digest_boundary(DigestEvery::Daily, 540, thu_0900 - 1), thu_0900 - DAY_MS);
        let mon_0900 = thu_0900 - 3 * DAY_MS;
        assert_eq!(digest_boundary(DigestEvery::Weekly, 540, thu_0900), mon_0900);
        assert_eq!(digest_period(DigestEvery::Daily, 540, thu_0900, thu_0900 + 1000), None, "sent already");
        assert_eq!(
            digest_period(DigestEvery::Daily, 540, thu_0900 - DAY_MS, thu_0900 + 1000),
            Some((thu_0900 - DAY_MS, thu_0900))
        );
        assert_eq!(digest_period(DigestEvery::Period(5000), 0, 10_000, 14_999), None);
        assert_eq!(digest_period(DigestEvery::Period(5000), 0, 10_000, 15_000), Some((10_000, 15_000)));
    }
}
