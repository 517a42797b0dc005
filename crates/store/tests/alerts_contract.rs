//! The alert store contract: every test runs against SQLite and against PostgreSQL.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use fleetlens_core::Sample;
use fleetlens_core::rules::inhibit::InhibitScope;
use fleetlens_core::rules::{Matchers, RuleSpec};
use fleetlens_core::{
    AlertGroupId, AlertId, ChannelId, ChannelKind, GpuId, MessageId, MessageKind, OutboxStatus, RuleId, Severity,
    SilenceId, WorkloadState,
};
use fleetlens_store::alerts::{
    AlertChange, AlertFilter, AlertRecord, AlertStatus, AlertWrite, DeliveryFilter, DeliveryOutcome, DeliveryResult,
    EvalWrite, GpuCursor, NewChannel, NewNotification, NewSilence, NewSuppressed,
};
use fleetlens_store::{DEFAULT_ORG, Store};
use fleetlens_tests::Backend;

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    rules_round_trip_and_names_are_unique,
    defaults_are_seeded_once,
    channels_and_silences,
    a_transition_is_written_once,
    claims_respect_leases_rate_limits_and_order,
    concurrent_senders_claim_each_message_once,
    cursors_leases_and_host_labels,
    ids_of_deleted_rows_are_never_reused,
    groups_are_compare_and_set_with_their_messages,
    digests_advance_once_per_period,
    a_stored_name_that_is_no_name_reads_as_an_error,
);

fn rule(name: &str) -> RuleSpec {
    RuleSpec {
        name: name.into(),
        condition: "gpu_util_pct >= 80 && sm_active_pct < 30".into(),
        for_s: 300,
        keep_firing_for_s: 0,
        repeat_interval_s: 3600,
        severity: Severity::Warning,
        labels: BTreeMap::from([("page".to_string(), "no".to_string())]),
        description: "d".into(),
        advice: "a".into(),
        channels: vec![ChannelId(3), ChannelId(1)],
        enabled: true,
        inhibits: vec!["busy_but_hollow".into(), "*".into()],
        inhibit_scope: InhibitScope::Host,
    }
}

fn channel(name: &str, min_interval_ms: i64) -> NewChannel {
    NewChannel {
        name: name.into(),
        kind: ChannelKind::Webhook,
        url: "http://127.0.0.1:9/hook".into(),
        is_default: false,
        min_interval_ms,
        group_by: vec!["rule".into(), "owner".into(), "host".into()],
        group_wait_s: 0,
        group_interval_s: 300,
        digest: String::new(),
        digest_at_min: 540,
    }
}

async fn gpu(store: &Arc<dyn Store>, uuid: &str) -> GpuId {
    let s =
        Sample { ts_ms: 1_000, uuid: uuid.into(), gpu_index: Some(0), gpu_util_pct: Some(1.0), ..Default::default() };
    store.ingest(DEFAULT_ORG, "node-1", vec![s]).await.unwrap();
    store.gpu(DEFAULT_ORG, uuid).await.unwrap().unwrap().id
}

fn alert(rule_id: RuleId, gpu_id: GpuId, status: AlertStatus) -> AlertRecord {
    AlertRecord {
        id: AlertId(0),
        org_id: DEFAULT_ORG,
        rule_id,
        gpu_id,
        gpu_uuid: String::new(),
        host: String::new(),
        status,
        active_since_ms: 10,
        fired_at_ms: (status == AlertStatus::Firing).then_some(20),
        resolved_at_ms: None,
        last_match_ms: 20,
        last_eval_ms: 20,
        rule_name: "hollow".into(),
        severity: Severity::Warning,
        labels: BTreeMap::from([("alertname".to_string(), "hollow".to_string())]),
        fingerprint: "abc".into(),
        summary: "s".into(),
        details: serde_json::json!({"values": [{"field": "gpu_util_pct", "value": "100"}]}),
        silenced_by: None,
        inhibited_by: None,
        notified_firing: false,
        last_notified_ms: None,
        repeat_seq: 0,
        updated_ms: 0,
    }
}

fn note(channel_id: ChannelId, kind: MessageKind) -> NewNotification {
    NewNotification { channel_id, kind, seq: 0, payload: format!("{{\"kind\":\"{kind}\"}}") }
}

fn ok() -> DeliveryResult {
    DeliveryResult {
        outcome: DeliveryOutcome::Delivered,
        status_code: Some(200),
        error: None,
        duration_ms: 3,
        channel_pause_until_ms: None,
    }
}

async fn rules_round_trip_and_names_are_unique(backend: Backend) {
    let (_db, store) = open(backend).await;
    let a = store.insert_alert_rule(DEFAULT_ORG, &rule("hollow"), 5).await.unwrap();
    // Every field the author set comes back as written.
    assert_eq!(a.rule, rule("hollow"));
    assert_eq!((a.org_id, a.builtin.as_deref(), a.created_ms, a.updated_ms), (DEFAULT_ORG, None, 5, 5));
    assert_eq!(store.alert_rule(DEFAULT_ORG, a.id).await.unwrap().unwrap(), a);
    let taken = store.insert_alert_rule(DEFAULT_ORG, &rule("hollow"), 6).await.unwrap_err();
    assert!(
        matches!(&taken, fleetlens_store::StoreError::Conflict { what } if what == "alert_rules"),
        "a name taken is a conflict on the table, on either database: {taken:?}"
    );
    let b = store.insert_alert_rule(DEFAULT_ORG, &rule("other"), 6).await.unwrap();
    let mut edit = rule("hollow2");
    edit.enabled = false;
    edit.for_s = 3;
    let e = store.update_alert_rule(DEFAULT_ORG, a.id, &edit, 9).await.unwrap().unwrap();
    assert_eq!(
        (e.rule.name.as_str(), e.rule.for_s, e.rule.enabled, e.created_ms, e.updated_ms),
        ("hollow2", 3, false, 5, 9)
    );
    assert_eq!(e.rule, edit);
    assert!(store.update_alert_rule(DEFAULT_ORG, b.id, &edit, 9).await.unwrap_err().is_conflict(), "name taken");
    assert_eq!(store.update_alert_rule(DEFAULT_ORG, RuleId(999), &edit, 9).await.unwrap(), None, "no such rule");
    let other = store.create_org("other", 0).await.unwrap();
    assert!(store.alert_rule(other, a.id).await.unwrap().is_none(), "organisations are apart");
    store.insert_alert_rule(other, &rule("hollow2"), 6).await.expect("names are per org");
    assert_eq!(store.alert_rules(DEFAULT_ORG).await.unwrap().len(), 2);
    assert_eq!(store.all_alert_rules().await.unwrap().len(), 3);
    assert!(!store.delete_alert_rule(other, a.id).await.unwrap());
    assert!(store.delete_alert_rule(DEFAULT_ORG, a.id).await.unwrap());
    assert_eq!(store.alert_rules(DEFAULT_ORG).await.unwrap().len(), 1);
}

async fn defaults_are_seeded_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let defaults = vec![("k1".to_string(), rule("one")), ("k2".to_string(), rule("two"))];
    assert_eq!(store.seed_default_rules(DEFAULT_ORG, &defaults, 1).await.unwrap(), 2);
    assert_eq!(store.seed_default_rules(DEFAULT_ORG, &defaults, 2).await.unwrap(), 0);
    let rules = store.alert_rules(DEFAULT_ORG).await.unwrap();
    assert_eq!(rules.iter().map(|r| r.builtin.as_deref()).collect::<Vec<_>>(), [Some("k1"), Some("k2")]);
    store.delete_alert_rule(DEFAULT_ORG, rules[0].id).await.unwrap();
    let more = vec![("k1".to_string(), rule("one")), ("k3".to_string(), rule("three"))];
    assert_eq!(store.seed_default_rules(DEFAULT_ORG, &more, 3).await.unwrap(), 1, "a deleted default stays deleted");
    let names: Vec<String> = store.alert_rules(DEFAULT_ORG).await.unwrap().into_iter().map(|r| r.rule.name).collect();
    assert_eq!(names, ["two", "three"]);
}

async fn channels_and_silences(backend: Backend) {
    let (_db, store) = open(backend).await;
    let c = store.insert_notification_channel(DEFAULT_ORG, &channel("ops", 1000), 1).await.unwrap();
    assert_eq!((c.kind, c.min_interval_ms, c.next_send_ms), (ChannelKind::Webhook, 1000, 0));
    assert!(store.insert_notification_channel(DEFAULT_ORG, &channel("ops", 0), 1).await.unwrap_err().is_conflict());
    let mut edit = channel("ops-slack", 1000);
    edit.kind = ChannelKind::Slack;
    edit.is_default = true;
    let c2 = store.update_notification_channel(DEFAULT_ORG, c.id, &edit, 2).await.unwrap().unwrap();
    assert_eq!((c2.name.as_str(), c2.kind, c2.is_default), ("ops-slack", ChannelKind::Slack, true));
    // Deleting a channel fails its undelivered messages.
    let id = store.enqueue_notification(DEFAULT_ORG, None, &note(c.id, MessageKind::Test), 3).await.unwrap().unwrap();
    assert!(store.delete_notification_channel(DEFAULT_ORG, c.id, 4).await.unwrap());
    let m = store.outbox_message(DEFAULT_ORG, id).await.unwrap().unwrap();
    assert_eq!((m.message.status.as_str(), m.message.last_error.as_deref()), ("failed", Some("channel deleted")));
    assert!(store.notification_channels(DEFAULT_ORG).await.unwrap().is_empty());

    let m = Matchers { host: Some("node-*".into()), severity: Some("critical".into()), ..Default::default() };
    let s = NewSilence {
        matchers: m.clone(),
        starts_at_ms: 100,
        ends_at_ms: 200,
        comment: "maint".into(),
        created_by: "t".into(),
    };
    let stored = store.insert_silence(DEFAULT_ORG, &s, 50).await.unwrap();
    assert_eq!((stored.matchers.clone(), stored.ends_at_ms, stored.comment.as_str()), (m, 200, "maint"));
    assert_eq!(store.current_silences(150).await.unwrap().len(), 1);
    assert_eq!(store.current_silences(200).await.unwrap().len(), 0);
    assert!(store.expire_silence(DEFAULT_ORG, stored.id, 120).await.unwrap());
    assert_eq!(store.silences(DEFAULT_ORG).await.unwrap()[0].ends_at_ms, 120);
    assert!(!store.expire_silence(DEFAULT_ORG, SilenceId(999), 120).await.unwrap());
}

async fn a_transition_is_written_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let g = gpu(&store, "GPU-a").await;
    let ch = store.insert_notification_channel(DEFAULT_ORG, &channel("ops", 0), 1).await.unwrap();
    let open = EvalWrite {
        now_ms: 100,
        changes: vec![AlertChange {
            write: AlertWrite::Open(alert(RuleId(7), g, AlertStatus::Pending)),
            notify: vec![],
            suppressed: vec![],
        }],
        cursors: vec![GpuCursor {
            gpu_id: g,
            org_id: DEFAULT_ORG,
            last_ts_ms: 10,
            state: WorkloadState::Hollow,
            state_since_ms: 5,
            interval_ms: 1000,
        }],
    };
    let out = store.apply_alert_changes(&open).await.unwrap();
    let id = out.alert_ids[0].expect("opened");
    assert_eq!(store.apply_alert_changes(&open).await.unwrap().alert_ids, [None], "one open alert per rule and GPU");

    // Pending → firing with a message, twice (a replay, a second replica): written once.
    let mut firing = alert(RuleId(7), g, AlertStatus::Firing);
    firing.id = id;
    firing.notified_firing = true;
    let fire = EvalWrite {
        now_ms: 200,
        changes: vec![AlertChange {
            write: AlertWrite::Update { from: AlertStatus::Pending, alert: firing.clone() },
            notify: vec![note(ch.id, MessageKind::Firing)],
            suppressed: vec![NewSuppressed { channel_id: ch.id, kind: MessageKind::Firing, silence_id: SilenceId(4) }],
        }],
        cursors: vec![],
    };
    let first = store.apply_alert_changes(&fire).await.unwrap();
    assert_eq!((first.alert_ids.clone(), first.enqueued), (vec![Some(id)], 1));
    let again = store.apply_alert_changes(&fire).await.unwrap();
    assert_eq!((again.alert_ids, again.enqueued), (vec![None], 0));
    // Even a direct second enqueue of the same (alert, channel, kind, seq) is a no-op.
    assert_eq!(
        store.enqueue_notification(DEFAULT_ORG, Some(id), &note(ch.id, MessageKind::Firing), 300).await.unwrap(),
        None
    );
    assert_eq!(store.outbox_for_alert(DEFAULT_ORG, id).await.unwrap().len(), 1);

    let a = store.alert(DEFAULT_ORG, id).await.unwrap().unwrap();
    assert_eq!(
        (a.status, a.fired_at_ms, a.gpu_uuid.as_str(), a.host.as_str()),
        (AlertStatus::Firing, Some(20), "GPU-a", "node-1")
    );
    assert_eq!(a.details["values"][0]["value"], "100");
    assert_eq!(store.open_alerts().await.unwrap().len(), 1);
    let log = store
        .deliveries(DEFAULT_ORG, &DeliveryFilter { alert_id: Some(id), limit: 10, ..Default::default() })
        .await
        .unwrap();
    assert_eq!((log.len(), log[0].delivery.outcome.as_str()), (1, "suppressed"));
    assert_eq!((log[0].delivery.message_id, log[0].delivery.alert_id), (None, Some(id)));
    assert!(log[0].delivery.error.as_deref().unwrap().contains("#4"));

    // Resolve; then the rule may open a new instance on the same GPU.
    let mut resolved = firing.clone();
    resolved.status = AlertStatus::Resolved;
    resolved.resolved_at_ms = Some(30);
    let res = EvalWrite {
        now_ms: 300,
        changes: vec![AlertChange {
            write: AlertWrite::Update { from: AlertStatus::Firing, alert: resolved },
            notify: vec![note(ch.id, MessageKind::Resolved)],
            suppressed: vec![],
        }],
        cursors: vec![],
    };
    assert_eq!(store.apply_alert_changes(&res).await.unwrap().enqueued, 1);
    assert!(store.open_alerts().await.unwrap().is_empty());
    let next = store.apply_alert_changes(&open).await.unwrap().alert_ids[0].expect("a new instance");
    let cancel = EvalWrite {
        now_ms: 400,
        changes: vec![AlertChange {
            write: AlertWrite::Delete { id: next, from: AlertStatus::Pending },
            notify: vec![],
            suppressed: vec![],
        }],
        cursors: vec![],
    };
    assert_eq!(store.apply_alert_changes(&cancel).await.unwrap().alert_ids, [Some(next)]);
    assert_eq!(store.apply_alert_changes(&cancel).await.unwrap().alert_ids, [None]);

    let filter = |statuses: Vec<AlertStatus>| AlertFilter { statuses, limit: 100, ..Default::default() };
    assert_eq!(store.alerts(DEFAULT_ORG, &filter(vec![AlertStatus::Resolved])).await.unwrap().len(), 1);
    assert_eq!(store.alerts(DEFAULT_ORG, &filter(vec![AlertStatus::Firing])).await.unwrap().len(), 0);
    let all =
        store.alerts(DEFAULT_ORG, &AlertFilter { gpu_uuid: Some("GPU-a".into()), ..filter(vec![]) }).await.unwrap();
    assert_eq!(all.len(), 1);
    let other = store.create_org("other", 0).await.unwrap();
    assert!(store.alerts(other, &filter(vec![])).await.unwrap().is_empty());
    assert!(store.alert(other, id).await.unwrap().is_none());
}

async fn claims_respect_leases_rate_limits_and_order(backend: Backend) {
    let (_db, store) = open(backend).await;
    let slow = store.insert_notification_channel(DEFAULT_ORG, &channel("slack", 1000), 1).await.unwrap();
    let fast = store.insert_notification_channel(DEFAULT_ORG, &channel("hook", 0), 1).await.unwrap();
    let mut ids = Vec::new();
    for (i, ch) in [slow.id, slow.id, fast.id].into_iter().enumerate() {
        let n = NewNotification { channel_id: ch, kind: MessageKind::Test, seq: i as i64, payload: format!("{i}") };
        ids.push(store.enqueue_notification(DEFAULT_ORG, None, &n, 1000).await.unwrap().unwrap());
    }
    let now = 10_000;
    let c = store.claim_notifications("a", now, 30_000, 10).await.unwrap();
    let got: HashSet<MessageId> = c.iter().map(|m| m.outbox.message.id).collect();
    assert_eq!(got, HashSet::from([ids[0], ids[2]]), "one message per channel, oldest first");
    assert!(c.iter().all(|m| m.outbox.message.attempts == 1 && m.outbox.message.status == OutboxStatus::Sending));
    assert_eq!(c.iter().find(|m| m.channel.id == slow.id).unwrap().channel.url, "http://127.0.0.1:9/hook");
    // Leased and (for the slow channel) rate-limited: nothing more now.
    assert!(store.claim_notifications("b", now, 30_000, 10).await.unwrap().is_empty());
    // Only the lease holder settles a message.
    assert!(!store.finish_notification(ids[0], "b", &ok(), now + 10).await.unwrap());
    let retry = DeliveryResult {
        outcome: DeliveryOutcome::Retry { at_ms: now + 5_000 },
        status_code: Some(500),
        error: Some("HTTP 500".into()),
        duration_ms: 2,
        channel_pause_until_ms: None,
    };
    assert!(store.finish_notification(ids[0], "a", &retry, now + 10).await.unwrap());
    assert!(store.finish_notification(ids[2], "a", &ok(), now + 10).await.unwrap());
    // The failed head waits for its retry and holds back the next message of its channel.
    assert!(store.claim_notifications("b", now + 2_000, 30_000, 10).await.unwrap().is_empty());
    let c = store.claim_notifications("b", now + 5_000, 30_000, 10).await.unwrap();
    assert_eq!(c.iter().map(|m| (m.outbox.message.id, m.outbox.message.attempts)).collect::<Vec<_>>(), [(ids[0], 2)]);
    // A sender that dies mid-flight: its lease runs out and another sender takes the message.
    assert!(store.claim_notifications("c", now + 30_000, 30_000, 10).await.unwrap().is_empty());
    let c = store.claim_notifications("c", now + 36_000, 30_000, 10).await.unwrap();
    assert_eq!(c.iter().map(|m| (m.outbox.message.id, m.outbox.message.attempts)).collect::<Vec<_>>(), [(ids[0], 3)]);
    assert!(!store.finish_notification(ids[0], "b", &ok(), now + 36_001).await.unwrap(), "b lost its lease");
    assert!(store.finish_notification(ids[0], "c", &ok(), now + 36_001).await.unwrap());
    // A 429 pauses the channel.
    let c = store.claim_notifications("c", now + 37_001, 30_000, 10).await.unwrap();
    assert_eq!(c.iter().map(|m| m.outbox.message.id).collect::<Vec<_>>(), [ids[1]]);
    let limited = DeliveryResult {
        outcome: DeliveryOutcome::Retry { at_ms: now + 40_000 },
        status_code: Some(429),
        error: Some("rate limited".into()),
        duration_ms: 1,
        channel_pause_until_ms: Some(now + 60_000),
    };
    assert!(store.finish_notification(ids[1], "c", &limited, now + 37_002).await.unwrap());
    assert!(store.claim_notifications("c", now + 50_000, 30_000, 10).await.unwrap().is_empty());
    let c = store.claim_notifications("c", now + 60_000, 30_000, 10).await.unwrap();
    store.finish_notification(c[0].outbox.message.id, "c", &ok(), now + 60_001).await.unwrap();
    assert!(store.claim_notifications("c", now + 100_000, 30_000, 10).await.unwrap().is_empty(), "all delivered");
    assert_eq!(store.outbox_backlog().await.unwrap(), 0);

    let log = store
        .deliveries(DEFAULT_ORG, &DeliveryFilter { channel_id: Some(slow.id), limit: 100, ..Default::default() })
        .await
        .unwrap();
    let outcomes: Vec<(&str, i64)> =
        log.iter().rev().map(|d| (d.delivery.outcome.as_str(), d.delivery.attempt)).collect();
    assert_eq!(
        outcomes,
        [("lease_lost", 1), ("retry", 1), ("lease_lost", 3), ("delivered", 3), ("retry", 1), ("delivered", 2)],
        "{log:?}"
    );
    // The log's `outbox_id` column reads as the attempt's message id.
    let first = &log.last().unwrap().delivery;
    assert_eq!((first.message_id, first.channel_id), (Some(ids[0]), slow.id));
    let m = store.outbox_message(DEFAULT_ORG, ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (m.message.status.as_str(), m.message.attempts, m.message.delivered_ms),
        ("delivered", 3, Some(now + 36_001))
    );
}

async fn concurrent_senders_claim_each_message_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let mut channels = Vec::new();
    for i in 0..4 {
        channels
            .push(store.insert_notification_channel(DEFAULT_ORG, &channel(&format!("c{i}"), 0), 1).await.unwrap().id);
    }
    let total = 60;
    for i in 0..total {
        let n = NewNotification {
            channel_id: channels[i % 4],
            kind: MessageKind::Test,
            seq: i as i64,
            payload: i.to_string(),
        };
        store.enqueue_notification(DEFAULT_ORG, None, &n, 0).await.unwrap().unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("sender-{w}");
            let mut sent = Vec::new();
            for round in 0..400 {
                let claimed = store.claim_notifications(&owner, 1_000 + round, 600_000, 2).await.unwrap();
                for m in claimed {
                    sent.push(m.outbox.payload.clone());
                    assert!(
                        store.finish_notification(m.outbox.message.id, &owner, &ok(), 1_000 + round).await.unwrap()
                    );
                }
                if store.outbox_backlog().await.unwrap() == 0 {
                    break;
                }
            }
            sent
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by_key(|p| p.parse::<usize>().unwrap());
    let expected: Vec<String> = (0..total).map(|i| i.to_string()).collect();
    assert_eq!(all, expected, "every message sent exactly once");
}

async fn cursors_leases_and_host_labels(backend: Backend) {
    let (_db, store) = open(backend).await;
    let c = |ts| GpuCursor {
        gpu_id: GpuId(1),
        org_id: DEFAULT_ORG,
        last_ts_ms: ts,
        state: WorkloadState::Idle,
        state_since_ms: 0,
        interval_ms: 1000,
    };
    store.save_alert_cursors(&[c(500)], 1).await.unwrap();
    store.save_alert_cursors(&[c(400)], 2).await.unwrap();
    assert_eq!(store.alert_cursors().await.unwrap(), [c(500)], "a cursor never moves back");
    store.save_alert_cursors(&[c(600)], 3).await.unwrap();
    assert_eq!(store.alert_cursors().await.unwrap()[0].last_ts_ms, 600);

    assert!(store.try_job_lease("job", "a", 1_000, 10_000).await.unwrap());
    assert!(!store.try_job_lease("job", "b", 5_000, 10_000).await.unwrap());
    assert!(store.try_job_lease("job", "a", 9_000, 10_000).await.unwrap(), "renewed");
    assert!(!store.try_job_lease("job", "b", 15_000, 10_000).await.unwrap());
    assert!(store.try_job_lease("job", "b", 19_001, 10_000).await.unwrap(), "expired, taken over");
    store.release_job_lease("job", "b").await.unwrap();
    assert!(store.try_job_lease("job", "a", 19_002, 10_000).await.unwrap());

    let labels = BTreeMap::from([("team".to_string(), "ml".to_string())]);
    store.put_host_labels(DEFAULT_ORG, "node-1", &labels, 1).await.unwrap();
    store.put_host_labels(DEFAULT_ORG, "node-1", &labels, 2).await.unwrap();
    assert_eq!(store.host_labels().await.unwrap(), [(DEFAULT_ORG, "node-1".to_string(), labels)]);
    let g = gpu(&store, "GPU-z").await;
    let gpus = store.alert_gpus().await.unwrap();
    assert_eq!(
        (gpus.len(), gpus[0].id, gpus[0].info.host.as_str(), gpus[0].info.last_seen_ms),
        (1, g, "node-1", 1_000)
    );
}

/// Deleting the newest rule, channel or team must not hand its id to the next one: alerts,
/// silences (`rule = <id>`) and delivery logs of the deleted row would attach to the newcomer.
/// (SQLite reused max(id) until migration 0009 rebuilt the tables with AUTOINCREMENT.)
async fn ids_of_deleted_rows_are_never_reused(backend: Backend) {
    let (_db, store) = open(backend).await;
    let r1 = store.insert_alert_rule(DEFAULT_ORG, &rule("first"), 1).await.unwrap();
    let gpu_id = gpu(&store, "GPU-ids").await;
    let open = EvalWrite {
        now_ms: 2,
        changes: vec![AlertChange {
            write: AlertWrite::Open(alert(r1.id, gpu_id, AlertStatus::Firing)),
            notify: vec![],
            suppressed: vec![],
        }],
        cursors: vec![],
    };
    assert!(store.apply_alert_changes(&open).await.unwrap().alert_ids[0].is_some());
    assert!(store.delete_alert_rule(DEFAULT_ORG, r1.id).await.unwrap());
    let r2 = store.insert_alert_rule(DEFAULT_ORG, &rule("second"), 3).await.unwrap();
    assert!(r2.id > r1.id, "rule id {} reused after deleting rule {}", r2.id, r1.id);
    let filter = AlertFilter { rule_id: Some(r2.id), limit: 100, ..Default::default() };
    assert!(store.alerts(DEFAULT_ORG, &filter).await.unwrap().is_empty(), "the new rule has no alerts of the old one");
    let kept = AlertFilter { rule_id: Some(r1.id), limit: 100, ..Default::default() };
    assert_eq!(store.alerts(DEFAULT_ORG, &kept).await.unwrap().len(), 1, "the deleted rule's alert is kept");

    let c1 = store.insert_notification_channel(DEFAULT_ORG, &channel("c1", 0), 1).await.unwrap();
    assert!(store.delete_notification_channel(DEFAULT_ORG, c1.id, 2).await.unwrap());
    let c2 = store.insert_notification_channel(DEFAULT_ORG, &channel("c2", 0), 3).await.unwrap();
    assert!(c2.id > c1.id, "channel id {} reused after deleting channel {}", c2.id, c1.id);

    let t1 = store.create_team(DEFAULT_ORG, "t1", 1).await.unwrap();
    assert!(store.delete_team(DEFAULT_ORG, t1.id).await.unwrap());
    let t2 = store.create_team(DEFAULT_ORG, "t2", 2).await.unwrap();
    assert!(t2.id > t1.id, "team id {} reused after deleting team {}", t2.id, t1.id);
}

async fn groups_are_compare_and_set_with_their_messages(backend: Backend) {
    use fleetlens_store::alerts::{AlertGroupRecord, GroupChange, GroupWrite};
    let (_db, store) = open(backend).await;
    let r = store.insert_alert_rule(DEFAULT_ORG, &rule("hollow"), 1).await.unwrap();
    let ch = store.insert_notification_channel(DEFAULT_ORG, &channel("c", 0), 1).await.unwrap();
    assert_eq!((ch.group_by.len(), ch.group_interval_s, ch.digest.as_str(), ch.digest_last_ms), (3, 300, "", 0));
    let g = gpu(&store, "GPU-g").await;
    // One firing alert, inhibited by nothing yet.
    let mut a = alert(r.id, g, AlertStatus::Firing);
    a.inhibited_by = Some(AlertId(77));
    let w = EvalWrite {
        now_ms: 30,
        changes: vec![AlertChange { write: AlertWrite::Open(a), notify: vec![], suppressed: vec![] }],
        cursors: vec![],
    };
    let alert_id = store.apply_alert_changes(&w).await.unwrap().alert_ids[0].unwrap();
    assert_eq!(store.alert(DEFAULT_ORG, alert_id).await.unwrap().unwrap().inhibited_by, Some(AlertId(77)));

    let rec = |state: serde_json::Value, version: i64, id: AlertGroupId, open: bool| AlertGroupRecord {
        id,
        org_id: DEFAULT_ORG,
        channel_id: ch.id,
        group_key: "rule=1".into(),
        is_open: open,
        state,
        version,
        created_ms: 0,
        updated_ms: 0,
    };
    let firing = GroupChange {
        write: GroupWrite::Insert(rec(serde_json::json!({"n": 1}), 0, AlertGroupId::default(), true)),
        notify: vec![(alert_id, note(ch.id, MessageKind::Firing))],
        mark_notified: vec![alert_id],
    };
    let ids = store.apply_group_changes(std::slice::from_ref(&firing), 40).await.unwrap();
    let gid = ids[0].expect("inserted");
    assert!(store.alert(DEFAULT_ORG, alert_id).await.unwrap().unwrap().notified_firing);
    assert_eq!(store.outbox_for_alert(DEFAULT_ORG, alert_id).await.unwrap().len(), 1);
    // A second open group of the same key is refused, and nothing of it is written.
    assert_eq!(store.apply_group_changes(&[firing], 41).await.unwrap(), vec![None]);
    assert_eq!(store.outbox_for_alert(DEFAULT_ORG, alert_id).await.unwrap().len(), 1);
    let open_groups = store.open_alert_groups().await.unwrap();
    assert_eq!(
        (open_groups.len(), open_groups[0].state.clone(), open_groups[0].version),
        (1, serde_json::json!({"n": 1}), 0)
    );
    // Updates are compare-and-set on the version: a stale writer loses.
    let resolve = |version: i64| GroupChange {
        write: GroupWrite::Update(rec(serde_json::json!({"n": 2}), version, gid, false)),
        notify: vec![(alert_id, note(ch.id, MessageKind::Resolved))],
        mark_notified: vec![],
    };
    assert_eq!(store.apply_group_changes(&[resolve(0)], 50).await.unwrap(), vec![Some(gid)]);
    assert_eq!(store.apply_group_changes(&[resolve(0)], 51).await.unwrap(), vec![None], "stale version");
    assert!(store.open_alert_groups().await.unwrap().is_empty(), "closed");
    let kinds: Vec<MessageKind> =
        store.outbox_for_alert(DEFAULT_ORG, alert_id).await.unwrap().into_iter().map(|m| m.message.kind).collect();
    assert_eq!(kinds, [MessageKind::Firing, MessageKind::Resolved]);
    // A new group of the same key can open once the old one closed.
    let again = GroupChange {
        write: GroupWrite::Insert(rec(serde_json::json!({}), 0, AlertGroupId::default(), true)),
        notify: vec![],
        mark_notified: vec![],
    };
    assert!(store.apply_group_changes(&[again], 60).await.unwrap()[0].is_some());
}

async fn digests_advance_once_per_period(backend: Backend) {
    let (_db, store) = open(backend).await;
    let mut spec = channel("digest", 0);
    spec.digest = "daily".into();
    let ch = store.insert_notification_channel(DEFAULT_ORG, &spec, 1).await.unwrap();
    assert_eq!((ch.digest.as_str(), ch.digest_at_min, ch.digest_last_ms), ("daily", 540, 0));
    assert!(store.advance_digest(DEFAULT_ORG, ch.id, 0, 1000, None, 5).await.unwrap());
    let msg = NewNotification { channel_id: ch.id, kind: MessageKind::Digest, seq: 2000, payload: "{}".into() };
    assert!(store.advance_digest(DEFAULT_ORG, ch.id, 1000, 2000, Some(&msg), 6).await.unwrap());
    assert!(!store.advance_digest(DEFAULT_ORG, ch.id, 1000, 2000, Some(&msg), 7).await.unwrap(), "sent already");
    assert_eq!(store.outbox_backlog().await.unwrap(), 1, "one digest");
    assert_eq!(store.notification_channel(DEFAULT_ORG, ch.id).await.unwrap().unwrap().digest_last_ms, 2000);
    // Changing the schedule restarts the clock; other edits keep it.
    let c = store.update_notification_channel(DEFAULT_ORG, ch.id, &spec, 8).await.unwrap().unwrap();
    assert_eq!(c.digest_last_ms, 2000);
    spec.digest = "weekly".into();
    let c = store.update_notification_channel(DEFAULT_ORG, ch.id, &spec, 9).await.unwrap().unwrap();
    assert_eq!((c.digest.as_str(), c.digest_last_ms), ("weekly", 0));
}

/// The names are TEXT columns: a row whose severity, channel kind or cursor state is none of the
/// enum's names (written by hand, or by a newer server) reads back as an error, never a panic.
async fn a_stored_name_that_is_no_name_reads_as_an_error(backend: Backend) {
    let (db, store) = open(backend).await;
    let r = store.insert_alert_rule(DEFAULT_ORG, &rule("hollow"), 5).await.unwrap();
    let scoped = store.insert_alert_rule(DEFAULT_ORG, &rule("stalled"), 5).await.unwrap();
    let c = store.insert_notification_channel(DEFAULT_ORG, &channel("hook", 0), 5).await.unwrap();
    assert_eq!(
        (r.rule.severity, c.kind, scoped.rule.inhibit_scope),
        (Severity::Warning, ChannelKind::Webhook, InhibitScope::Host)
    );
    let sql = [
        "UPDATE alert_rules SET severity = 'urgent' WHERE name = 'hollow'",
        "UPDATE alert_rules SET inhibit_scope = 'rack' WHERE name = 'stalled'",
        "UPDATE notification_channels SET kind = 'pager'",
    ];
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            for q in sql {
                sqlx::query(q).execute(&pool).await.unwrap();
            }
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            for q in sql {
                sqlx::query(q).execute(&pool).await.unwrap();
            }
        }
    }
    let e = store.alert_rule(DEFAULT_ORG, r.id).await.unwrap_err().to_string();
    assert!(e.contains("urgent") && e.contains("info, warning, critical"), "{e}");
    let e = store.alert_rule(DEFAULT_ORG, scoped.id).await.unwrap_err().to_string();
    assert!(e.contains("rack") && e.contains("gpu, host, job"), "{e}");
    let e = store.notification_channels(DEFAULT_ORG).await.unwrap_err().to_string();
    assert!(e.contains("pager") && e.contains("slack, webhook, alertmanager"), "{e}");
}
