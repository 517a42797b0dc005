//! Storage of alerting: rules, notification channels, silences, alert instances with the
//! engine's state, the durable notification outbox and its delivery log.
//!
//! One trait, [`AlertStore`], implemented for [`crate::SqliteStore`] and [`crate::PgStore`]
//! from one body of SQL ([`impl_alert_store`], with [`crate::dialect`]): the
//! backends differ only in how a write transaction starts (SQLite takes the write lock up
//! front with `BEGIN IMMEDIATE`), in how parameters are written (`?` / `$n`), and in how a
//! sender claims outbox rows (PostgreSQL locks the channel rows `FOR UPDATE SKIP LOCKED`, so
//! several replicas claim disjoint work; SQLite has one writer at a time anyway).
//!
//! Exactly one message per alert transition:
//! - an alert's transition (pending → firing, firing → resolved) is a compare-and-set on its
//!   status, written in the same transaction as its outbox rows; a second evaluation of the
//!   same transition (a retry, a restart, another replica) finds the status changed and writes
//!   nothing;
//! - outbox rows are unique per (alert, channel, kind, seq), so even a repeated insert is a
//!   no-op;
//! - a sender claims a row with a lease (`sending`, `lease_owner`, `lease_until_ms`) before
//!   it posts, and only the lease holder may mark it delivered; a row whose sender died is
//!   claimed again when its lease expires. The lease is longer than the HTTP timeout.

use std::collections::BTreeMap;

use async_trait::async_trait;
pub use fleetlens_core::rules::AlertStatus;
use fleetlens_core::rules::{ChannelKind, DeliveryAttempt, Matchers, MessageKind, OutboxMessage, RuleSpec, Severity};
use fleetlens_core::{
    AlertGroupId, AlertId, ChannelId, DeliveryId, GpuId, GpuInfo, MessageId, RuleId, SilenceId, WorkloadState,
};
use serde_json::Value as Json;

use crate::json_text::JsonText;
use crate::{OrgId, Result};

/// Name of the job lease that the alert engine holds (one replica evaluates at a time).
pub const ALERT_ENGINE_JOB: &str = "alert-engine";

/// A stored rule: what its author set and what the store keeps about it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AlertRuleRecord {
    pub id: RuleId,
    pub org_id: OrgId,
    /// The rule as written (validated by the caller before it was stored); inserts and updates
    /// take this alone.
    #[sqlx(flatten)]
    pub rule: RuleSpec,
    /// Key of the shipped rule this one started as.
    pub builtin: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ChannelRecord {
    pub id: ChannelId,
    pub org_id: OrgId,
    pub name: String,
    pub kind: ChannelKind,
    pub url: String,
    /// Rules with no channels of their own notify the default channels.
    pub is_default: bool,
    /// At most one message per this many ms (Slack: 1000).
    pub min_interval_ms: i64,
    pub next_send_ms: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// What a notification group's key is made of (`rule`, `owner`, label names).
    #[sqlx(try_from = "JsonText<Vec<String>>")]
    pub group_by: Vec<String>,
    /// A new group's first message waits this long for more members.
    pub group_wait_s: i64,
    /// At most one follow-up per group this often.
    pub group_interval_s: i64,
    /// `""` (real-time messages), `daily` or `weekly` (a digest instead).
    pub digest: String,
    /// When the digest goes out: minutes after midnight UTC.
    pub digest_at_min: i64,
    /// End of the period the last digest covered (0: not started).
    pub digest_last_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewChannel {
    pub name: String,
    pub kind: ChannelKind,
    pub url: String,
    pub is_default: bool,
    pub min_interval_ms: i64,
    pub group_by: Vec<String>,
    pub group_wait_s: i64,
    pub group_interval_s: i64,
    pub digest: String,
    pub digest_at_min: i64,
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SilenceRecord {
    pub id: SilenceId,
    pub org_id: OrgId,
    #[sqlx(try_from = "JsonText<Matchers>")]
    pub matchers: Matchers,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub comment: String,
    pub created_by: String,
    pub created_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewSilence {
    pub matchers: Matchers,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub comment: String,
    pub created_by: String,
}

/// One alert instance (a rule on a GPU, from pending to resolved).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AlertRecord {
    pub id: AlertId,
    pub org_id: OrgId,
    pub rule_id: RuleId,
    pub gpu_id: GpuId,
    /// From the GPU registry (empty if the GPU is gone).
    pub gpu_uuid: String,
    pub host: String,
    pub status: AlertStatus,
    pub active_since_ms: i64,
    pub fired_at_ms: Option<i64>,
    pub resolved_at_ms: Option<i64>,
    pub last_match_ms: i64,
    pub last_eval_ms: i64,
    pub rule_name: String,
    pub severity: Severity,
    #[sqlx(try_from = "JsonText<BTreeMap<String, String>>")]
    pub labels: BTreeMap<String, String>,
    pub fingerprint: String,
    pub summary: String,
    /// Values that matched, condition, state, advice, the channels notified, …
    #[sqlx(try_from = "JsonText<Json>")]
    pub details: Json,
    pub silenced_by: Option<SilenceId>,
    /// The open alert that holds this one's notifications back (inhibition).
    pub inhibited_by: Option<AlertId>,
    /// The firing notification went out to at least one channel (so resolved goes too).
    pub notified_firing: bool,
    pub last_notified_ms: Option<i64>,
    pub repeat_seq: i64,
    pub updated_ms: i64,
}

impl AlertRecord {
    /// Whether the alert has its row yet: the engine holds a new one with id 0 until its insert
    /// returns the id.
    pub fn is_stored(&self) -> bool {
        self.id.get() != 0
    }
}

/// What the engine writes about one alert.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertWrite {
    /// A new instance (pending, or firing at once); `id`, `gpu_uuid` and `host` are ignored.
    /// Does nothing if the rule already has an open instance on the GPU.
    Open(AlertRecord),
    /// Write the instance's mutable fields if its status is still `from`.
    Update { from: AlertStatus, alert: AlertRecord },
    /// Remove a pending instance that never fired, if its status is still `from`.
    Delete { id: AlertId, from: AlertStatus },
}

impl AlertWrite {
    /// The write that stores `alert`: inserted while it has no row yet, else updated if its
    /// status is still `from`.
    pub fn storing(alert: AlertRecord, from: AlertStatus) -> AlertWrite {
        if alert.is_stored() { AlertWrite::Update { from, alert } } else { AlertWrite::Open(alert) }
    }
}

/// A message to enqueue for an alert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotification {
    pub channel_id: ChannelId,
    pub kind: MessageKind,
    /// 0, or the reminder's number for `repeat`.
    pub seq: i64,
    /// The JSON body to POST.
    pub payload: String,
}

/// A notification held back by a silence (logged, not sent).
#[derive(Debug, Clone, PartialEq)]
pub struct NewSuppressed {
    pub channel_id: ChannelId,
    pub kind: MessageKind,
    pub silence_id: SilenceId,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertChange {
    pub write: AlertWrite,
    /// Enqueued only if the write took effect.
    pub notify: Vec<NewNotification>,
    pub suppressed: Vec<NewSuppressed>,
}

/// The engine's position on one GPU.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GpuCursor {
    pub gpu_id: GpuId,
    pub org_id: OrgId,
    /// Samples up to this time have been evaluated.
    pub last_ts_ms: i64,
    /// Workload state of the newest sample, and since when the GPU has been in it.
    pub state: WorkloadState,
    pub state_since_ms: i64,
    /// The GPU's sampling interval as the data shows it.
    pub interval_ms: i64,
}

/// One evaluation's writes, applied in one transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EvalWrite {
    pub now_ms: i64,
    pub changes: Vec<AlertChange>,
    pub cursors: Vec<GpuCursor>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EvalOutcome {
    /// Per change: the alert's id if the write took effect, `None` if it lost a race.
    pub alert_ids: Vec<Option<AlertId>>,
    /// Outbox rows newly inserted.
    pub enqueued: u64,
}

/// A notification group of a channel (its state is the engine's JSON).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AlertGroupRecord {
    pub id: AlertGroupId,
    pub org_id: OrgId,
    pub channel_id: ChannelId,
    pub group_key: String,
    pub is_open: bool,
    #[sqlx(try_from = "JsonText<Json>")]
    pub state: Json,
    /// Bumped by every write (compare-and-set).
    pub version: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// What the engine writes about one group.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupWrite {
    /// A new open group (`id` and `version` are ignored); nothing if the channel already has
    /// an open group of that key.
    Insert(AlertGroupRecord),
    /// Write state and openness if the stored version is still `group.version`.
    Update(AlertGroupRecord),
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupChange {
    pub write: GroupWrite,
    /// Messages to enqueue if the write took effect: (the alert they are logged under, message).
    pub notify: Vec<(AlertId, NewNotification)>,
    /// Alerts whose firing notification went out with this change.
    pub mark_notified: Vec<AlertId>,
}

/// A GPU as the engine needs it: what the registry knows of it, with its ids and liveness.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct GpuBrief {
    pub id: GpuId,
    pub org_id: OrgId,
    #[sqlx(flatten)]
    pub info: GpuInfo,
    /// See [`crate::GpuRecord::last_live_ms`]: 0 for a GPU that only ever sent back-fill.
    pub last_live_ms: i64,
    /// See [`crate::GpuWritten::ingest_seq`].
    pub ingest_seq: i64,
}

/// An outbox message as stored: the message, whose it is and what it carries.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OutboxRecord {
    #[sqlx(flatten)]
    pub message: OutboxMessage,
    pub org_id: OrgId,
    pub alert_id: Option<AlertId>,
    /// The body sent, rendered for the channel's kind.
    pub payload: String,
}

/// A message a sender holds the lease of, with where to send it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedMessage {
    pub outbox: OutboxRecord,
    pub channel: ChannelRecord,
    pub lease_until_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Delivered,
    /// Try again at this time.
    Retry {
        at_ms: i64,
    },
    /// Give up (a permanent error, or too old).
    Failed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryResult {
    pub outcome: DeliveryOutcome,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
    /// Send nothing more to the channel before this time (e.g. a 429's Retry-After).
    pub channel_pause_until_ms: Option<i64>,
}

/// One line of the delivery log, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeliveryRecord {
    pub id: DeliveryId,
    pub org_id: OrgId,
    #[sqlx(flatten)]
    pub delivery: DeliveryAttempt,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlertFilter {
    /// Only these statuses (all when empty).
    pub statuses: Vec<AlertStatus>,
    pub rule_id: Option<RuleId>,
    pub gpu_uuid: Option<String>,
    /// Only alerts with a smaller id (paging, newest first).
    pub before_id: Option<AlertId>,
    pub limit: i64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeliveryFilter {
    pub channel_id: Option<ChannelId>,
    pub alert_id: Option<AlertId>,
    pub limit: i64,
}

#[async_trait]
pub trait AlertStore: Send + Sync {
    // Rules -----------------------------------------------------------------------------------
    async fn alert_rules(&self, org: OrgId) -> Result<Vec<AlertRuleRecord>>;
    /// Every organisation's rules (for the engine).
    async fn all_alert_rules(&self) -> Result<Vec<AlertRuleRecord>>;
    async fn alert_rule(&self, org: OrgId, id: RuleId) -> Result<Option<AlertRuleRecord>>;
    /// [`crate::StoreError::Conflict`] when the organisation already has a rule of that name.
    async fn insert_alert_rule(&self, org: OrgId, rule: &RuleSpec, now_ms: i64) -> Result<AlertRuleRecord>;
    /// `None` when the organisation has no rule `id`; [`crate::StoreError::Conflict`] when
    /// another of its rules has the new name.
    async fn update_alert_rule(
        &self,
        org: OrgId,
        id: RuleId,
        rule: &RuleSpec,
        now_ms: i64,
    ) -> Result<Option<AlertRuleRecord>>;
    async fn delete_alert_rule(&self, org: OrgId, id: RuleId) -> Result<bool>;
    /// Insert the shipped rules (key, rule) the organisation has never been given; returns
    /// how many were inserted. A key is given once, so a deleted default stays deleted.
    async fn seed_default_rules(&self, org: OrgId, rules: &[(String, RuleSpec)], now_ms: i64) -> Result<u64>;

    // Channels --------------------------------------------------------------------------------
    async fn notification_channels(&self, org: OrgId) -> Result<Vec<ChannelRecord>>;
    async fn notification_channel(&self, org: OrgId, id: ChannelId) -> Result<Option<ChannelRecord>>;
    /// [`crate::StoreError::Conflict`] when the organisation already has a channel of that name.
    async fn insert_notification_channel(&self, org: OrgId, channel: &NewChannel, now_ms: i64)
    -> Result<ChannelRecord>;
    /// `None` when the organisation has no channel `id`; [`crate::StoreError::Conflict`] when
    /// another of its channels has the new name.
    async fn update_notification_channel(
        &self,
        org: OrgId,
        id: ChannelId,
        channel: &NewChannel,
        now_ms: i64,
    ) -> Result<Option<ChannelRecord>>;
    /// Delete the channel; its undelivered messages are marked failed.
    async fn delete_notification_channel(&self, org: OrgId, id: ChannelId, now_ms: i64) -> Result<bool>;

    // Silences --------------------------------------------------------------------------------
    async fn insert_silence(&self, org: OrgId, silence: &NewSilence, now_ms: i64) -> Result<SilenceRecord>;
    /// The organisation's silences, newest first (expired ones too).
    async fn silences(&self, org: OrgId) -> Result<Vec<SilenceRecord>>;
    /// Silences of every organisation in force at `now_ms` or later.
    async fn current_silences(&self, now_ms: i64) -> Result<Vec<SilenceRecord>>;
    /// End a silence now; false if there is no such silence.
    async fn expire_silence(&self, org: OrgId, id: SilenceId, now_ms: i64) -> Result<bool>;

    // Alerts ----------------------------------------------------------------------------------
    async fn alerts(&self, org: OrgId, filter: &AlertFilter) -> Result<Vec<AlertRecord>>;
    async fn alert(&self, org: OrgId, id: AlertId) -> Result<Option<AlertRecord>>;
    /// Pending and firing alerts of every organisation (the engine's state).
    async fn open_alerts(&self) -> Result<Vec<AlertRecord>>;

    // Engine ----------------------------------------------------------------------------------
    /// Take or renew the lease of job `name` for `owner` until `now_ms + ttl_ms`; false while
    /// another owner holds an unexpired lease.
    async fn try_job_lease(&self, name: &str, owner: &str, now_ms: i64, ttl_ms: i64) -> Result<bool>;
    async fn release_job_lease(&self, name: &str, owner: &str) -> Result<()>;
    /// Every GPU of every organisation.
    async fn alert_gpus(&self) -> Result<Vec<GpuBrief>>;
    async fn alert_cursors(&self) -> Result<Vec<GpuCursor>>;
    /// Save cursors (a cursor never moves back).
    async fn save_alert_cursors(&self, cursors: &[GpuCursor], now_ms: i64) -> Result<()>;
    /// Labels each host's agent sends (team, …).
    async fn host_labels(&self) -> Result<Vec<(OrgId, String, BTreeMap<String, String>)>>;
    async fn put_host_labels(
        &self,
        org: OrgId,
        host: &str,
        labels: &BTreeMap<String, String>,
        now_ms: i64,
    ) -> Result<()>;
    /// Apply one evaluation's alert writes, their outbox rows and the cursors in one
    /// transaction.
    async fn apply_alert_changes(&self, write: &EvalWrite) -> Result<EvalOutcome>;
    /// Open notification groups of every organisation.
    async fn open_alert_groups(&self) -> Result<Vec<AlertGroupRecord>>;
    /// Apply group writes with their messages in one transaction; per change the group's id,
    /// or `None` when it lost a race (then nothing of it was written).
    async fn apply_group_changes(&self, changes: &[GroupChange], now_ms: i64) -> Result<Vec<Option<AlertGroupId>>>;
    /// Move a digest channel's `digest_last_ms` from `from_ms` to `to_ms` and enqueue `message`
    /// (if any) in one transaction; false (nothing written) when it was not at `from_ms`.
    async fn advance_digest(
        &self,
        org: OrgId,
        channel_id: ChannelId,
        from_ms: i64,
        to_ms: i64,
        message: Option<&NewNotification>,
        now_ms: i64,
    ) -> Result<bool>;

    // Outbox ----------------------------------------------------------------------------------
    /// Enqueue a message outside an alert transition (test messages: `alert_id` None).
    /// `None` when an identical (alert, channel, kind, seq) row exists.
    async fn enqueue_notification(
        &self,
        org: OrgId,
        alert_id: Option<AlertId>,
        n: &NewNotification,
        now_ms: i64,
    ) -> Result<Option<MessageId>>;
    /// Claim up to `max` due messages, at most one per channel and only from channels whose
    /// rate limit allows a message now, oldest first per channel (a message waiting for its
    /// retry holds back the later ones of its channel, so they arrive in order).
    async fn claim_notifications(
        &self,
        owner: &str,
        now_ms: i64,
        lease_ms: i64,
        max: i64,
    ) -> Result<Vec<ClaimedMessage>>;
    /// Record an attempt; false if `owner` no longer holds the lease (nothing is changed
    /// then but the log line).
    async fn finish_notification(
        &self,
        id: MessageId,
        owner: &str,
        result: &DeliveryResult,
        now_ms: i64,
    ) -> Result<bool>;
    async fn outbox_message(&self, org: OrgId, id: MessageId) -> Result<Option<OutboxRecord>>;
    async fn outbox_for_alert(&self, org: OrgId, alert_id: AlertId) -> Result<Vec<OutboxRecord>>;
    /// Undelivered messages of every organisation (for metrics and tests).
    async fn outbox_backlog(&self) -> Result<i64>;
    /// The delivery log, newest first.
    async fn deliveries(&self, org: OrgId, filter: &DeliveryFilter) -> Result<Vec<DeliveryRecord>>;
}

/// The columns of an alert rule that its [`RuleSpec`] sets, in bind order.
pub(crate) const RULE_SPEC_COLS: [&str; 13] = [
    "name",
    "condition",
    "for_s",
    "keep_firing_for_s",
    "repeat_interval_s",
    "severity",
    "labels",
    "description",
    "advice",
    "channels",
    "enabled",
    "inhibits",
    "inhibit_scope",
];
/// The columns of an alert that the engine writes as the alert goes on (all but those its
/// rule, GPU and labels fix when it opens), in bind order: both an alert's insert and its
/// compare-and-set update write these.
pub(crate) const ALERT_STATE_COLS: [&str; 14] = [
    "status",
    "active_since_ms",
    "fired_at_ms",
    "resolved_at_ms",
    "last_match_ms",
    "last_eval_ms",
    "summary",
    "details",
    "silenced_by",
    "notified_firing",
    "last_notified_ms",
    "repeat_seq",
    "updated_ms",
    "inhibited_by",
];
/// The columns of a notification channel that a [`NewChannel`] sets, in bind order.
pub(crate) const CHANNEL_SPEC_COLS: [&str; 10] = [
    "name",
    "kind",
    "url",
    "is_default",
    "min_interval_ms",
    "group_by",
    "group_wait_s",
    "group_interval_s",
    "digest",
    "digest_at_min",
];
pub(crate) const RULE_COLS: &str = "id, org_id, name, condition, for_s, keep_firing_for_s, repeat_interval_s, severity, \
     labels, description, advice, channels, enabled, builtin, created_ms, updated_ms, inhibits, inhibit_scope";
pub(crate) const CHANNEL_COLS: &str = "id, org_id, name, kind, url, is_default, min_interval_ms, next_send_ms, created_ms, updated_ms, group_by, \
     group_wait_s, group_interval_s, digest, digest_at_min, digest_last_ms";

/// A table of records an admin writes whole (rules, channels): what inserts and updates of
/// it set and read back.
pub(crate) struct SpecTable {
    pub name: &'static str,
    /// The columns a record's spec sets, in bind order.
    pub spec_cols: &'static [&'static str],
    /// What an update sets besides the spec columns (`, col = …`; its parameters are bound
    /// after the spec's).
    pub also_on_update: &'static str,
    /// The columns a record is read from.
    pub cols: &'static str,
}

pub(crate) const RULES: SpecTable =
    SpecTable { name: "alert_rules", spec_cols: &RULE_SPEC_COLS, also_on_update: "", cols: RULE_COLS };
/// An update's right-hand sides read the row as it was: a changed digest schedule starts over.
pub(crate) const CHANNELS: SpecTable = SpecTable {
    name: "notification_channels",
    spec_cols: &CHANNEL_SPEC_COLS,
    also_on_update: ", digest_last_ms = CASE WHEN digest = ? AND digest_at_min = ? THEN digest_last_ms ELSE 0 END",
    cols: CHANNEL_COLS,
};
pub(crate) const SILENCE_COLS: &str = "id, org_id, matchers, starts_at_ms, ends_at_ms, comment, created_by, created_ms";
pub(crate) const ALERT_COLS: &str = "a.id, a.org_id, a.rule_id, a.gpu_id, coalesce(g.uuid, '') AS gpu_uuid, \
     coalesce(g.host, '') AS host, a.status, a.active_since_ms, a.fired_at_ms, a.resolved_at_ms, a.last_match_ms, \
     a.last_eval_ms, a.rule_name, a.severity, a.labels, a.fingerprint, a.summary, a.details, a.silenced_by, \
     a.notified_firing, a.last_notified_ms, a.repeat_seq, a.updated_ms, a.inhibited_by";
pub(crate) const OUTBOX_COLS: &str = "id, org_id, alert_id, channel_id, kind, seq, payload, status, attempts, \
     next_attempt_ms, last_error, last_status_code, created_ms, delivered_ms";
pub(crate) const DELIVERY_COLS: &str =
    "id, org_id, outbox_id, alert_id, channel_id, kind, attempt, at_ms, outcome, status_code, error, duration_ms";

/// `INSERT INTO {table} ({lead}, {spec}) VALUES (?, …) {tail}`: the columns the store sets
/// (`lead`, bound first) and a record's spec columns (bound by `bind_rule`, `bind_channel`,
/// `bind_alert_state`).
pub(crate) fn insert_spec_sql(table: &str, lead: &[&str], spec: &[&str], tail: &str) -> String {
    let cols: Vec<&str> = lead.iter().chain(spec).copied().collect();
    let marks = vec!["?"; cols.len()].join(", ");
    format!("INSERT INTO {table} ({}) VALUES ({marks}) {tail}", cols.join(", "))
}

/// `col = ?, …` of a record's spec columns, for an `UPDATE … SET`.
pub(crate) fn spec_sets(spec: &[&str]) -> String {
    spec.iter().map(|c| format!("{c} = ?")).collect::<Vec<_>>().join(", ")
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// The SQL of [`AlertStore`], for one backend. The invoking module provides:
/// `fn q(sql: &str) -> Cow<str>` (placeholders), `async fn begin(&Pool) -> Result<Transaction>`
/// (a write transaction) and `const LOCK_SKIP_LOCKED: &str` (the claim's row-lock clause).
macro_rules! impl_alert_store {
    ($store:ty, $db:ty) => {
        type Query<'q> = sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>;

        /// Binds a rule's [`RULE_SPEC_COLS`]($crate::alerts::RULE_SPEC_COLS), in their order.
        fn bind_rule<'q>(query: Query<'q>, rule: &'q fleetlens_core::rules::RuleSpec) -> Query<'q> {
            query
                .bind(&rule.name)
                .bind(&rule.condition)
                .bind(rule.for_s)
                .bind(rule.keep_firing_for_s)
                .bind(rule.repeat_interval_s)
                .bind(rule.severity.as_str())
                .bind($crate::alerts::to_json(&rule.labels))
                .bind(&rule.description)
                .bind(&rule.advice)
                .bind($crate::alerts::to_json(&rule.channels))
                .bind(rule.enabled)
                .bind($crate::alerts::to_json(&rule.inhibits))
                .bind(rule.inhibit_scope.as_str())
        }

        /// Binds a channel's [`CHANNEL_SPEC_COLS`]($crate::alerts::CHANNEL_SPEC_COLS), in their order.
        fn bind_channel<'q>(query: Query<'q>, ch: &'q $crate::alerts::NewChannel) -> Query<'q> {
            query
                .bind(&ch.name)
                .bind(ch.kind.as_str())
                .bind(&ch.url)
                .bind(ch.is_default)
                .bind(ch.min_interval_ms)
                .bind($crate::alerts::to_json(&ch.group_by))
                .bind(ch.group_wait_s)
                .bind(ch.group_interval_s)
                .bind(&ch.digest)
                .bind(ch.digest_at_min)
        }

        /// Binds an alert's [`ALERT_STATE_COLS`]($crate::alerts::ALERT_STATE_COLS), in their order
        /// (`updated_ms` is `now_ms`).
        fn bind_alert_state<'q>(query: Query<'q>, a: &'q $crate::alerts::AlertRecord, now_ms: i64) -> Query<'q> {
            query
                .bind(a.status.as_str())
                .bind(a.active_since_ms)
                .bind(a.fired_at_ms)
                .bind(a.resolved_at_ms)
                .bind(a.last_match_ms)
                .bind(a.last_eval_ms)
                .bind(&a.summary)
                .bind(a.details.to_string())
                .bind(a.silenced_by)
                .bind(a.notified_firing)
                .bind(a.last_notified_ms)
                .bind(a.repeat_seq)
                .bind(now_ms)
                .bind(a.inhibited_by)
        }

        /// Binds a channel's spec and then the parameters of
        /// [`CHANNELS`]($crate::alerts::CHANNELS)`.also_on_update`: the new digest schedule, which
        /// it compares with the row's.
        fn bind_channel_update<'q>(query: Query<'q>, ch: &'q $crate::alerts::NewChannel) -> Query<'q> {
            bind_channel(query, ch).bind(&ch.digest).bind(ch.digest_at_min)
        }

        /// `INSERT INTO {table} (org_id, created_ms, updated_ms, {spec}) … RETURNING {cols}`: a new
        /// record of the organisation (a rule, a channel), its spec columns bound by `bind`.
        async fn insert_record<T, S: ?Sized + Sync>(
            pool: &sqlx::Pool<$db>,
            table: &$crate::alerts::SpecTable,
            org: $crate::OrgId,
            spec: &S,
            bind: impl for<'a> Fn(Query<'a>, &'a S) -> Query<'a>,
            now_ms: i64,
        ) -> $crate::Result<T>
        where
            T: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
        {
            let sql = $crate::alerts::insert_spec_sql(
                table.name,
                &["org_id", "created_ms", "updated_ms"],
                table.spec_cols,
                &format!("RETURNING {}", table.cols),
            );
            let sql = q(&sql);
            let query = sqlx::query(&sql).bind(org).bind(now_ms).bind(now_ms);
            let row = bind(query, spec).fetch_one(pool).await?;
            Ok(T::from_row(&row)?)
        }

        /// `UPDATE {table} SET {spec} = ?, …{also_on_update}, updated_ms = ? WHERE org_id = ? AND
        /// id = ? RETURNING {cols}`; `bind` binds the spec columns, then `also_on_update`'s
        /// parameters. `None` when the organisation has no such record.
        async fn update_record<T, S: ?Sized + Sync, I>(
            pool: &sqlx::Pool<$db>,
            table: &$crate::alerts::SpecTable,
            org: $crate::OrgId,
            id: I,
            spec: &S,
            bind: impl for<'a> Fn(Query<'a>, &'a S) -> Query<'a>,
            now_ms: i64,
        ) -> $crate::Result<Option<T>>
        where
            T: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
            I: for<'q> sqlx::Encode<'q, $db> + sqlx::Type<$db> + Send,
        {
            let sql = format!(
                "UPDATE {} SET {}{}, updated_ms = ? WHERE org_id = ? AND id = ? RETURNING {}",
                table.name,
                $crate::alerts::spec_sets(table.spec_cols),
                table.also_on_update,
                table.cols
            );
            let sql = q(&sql);
            let row = bind(sqlx::query(&sql), spec).bind(now_ms).bind(org).bind(id).fetch_optional(pool).await?;
            Ok(row.as_ref().map(T::from_row).transpose()?)
        }

        #[async_trait::async_trait]
        impl $crate::alerts::AlertStore for $store {
            async fn alert_rules(&self, org: $crate::OrgId) -> $crate::Result<Vec<$crate::alerts::AlertRuleRecord>> {
                all_of_org(self.pool(), $crate::alerts::RULES.cols, $crate::alerts::RULES.name, "id", org).await
            }

            async fn all_alert_rules(&self) -> $crate::Result<Vec<$crate::alerts::AlertRuleRecord>> {
                let sql = format!("SELECT {} FROM alert_rules ORDER BY id", $crate::alerts::RULE_COLS);
                Ok(sqlx::query_as(&sql).fetch_all(self.pool()).await?)
            }

            async fn alert_rule(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::RuleId,
            ) -> $crate::Result<Option<$crate::alerts::AlertRuleRecord>> {
                one_of_org(self.pool(), $crate::alerts::RULES.cols, $crate::alerts::RULES.name, org, id).await
            }

            async fn insert_alert_rule(
                &self,
                org: $crate::OrgId,
                rule: &fleetlens_core::rules::RuleSpec,
                now_ms: i64,
            ) -> $crate::Result<$crate::alerts::AlertRuleRecord> {
                insert_record(self.pool(), &$crate::alerts::RULES, org, rule, bind_rule, now_ms).await
            }

            async fn update_alert_rule(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::RuleId,
                rule: &fleetlens_core::rules::RuleSpec,
                now_ms: i64,
            ) -> $crate::Result<Option<$crate::alerts::AlertRuleRecord>> {
                update_record(self.pool(), &$crate::alerts::RULES, org, id, rule, bind_rule, now_ms).await
            }

            async fn delete_alert_rule(&self, org: $crate::OrgId, id: fleetlens_core::RuleId) -> $crate::Result<bool> {
                delete_of_org(self.pool(), $crate::alerts::RULES.name, org, id).await
            }

            async fn seed_default_rules(
                &self,
                org: $crate::OrgId,
                rules: &[(String, fleetlens_core::rules::RuleSpec)],
                now_ms: i64,
            ) -> $crate::Result<u64> {
                let insert = $crate::alerts::insert_spec_sql(
                    $crate::alerts::RULES.name,
                    &["org_id", "builtin", "created_ms", "updated_ms"],
                    $crate::alerts::RULES.spec_cols,
                    "ON CONFLICT DO NOTHING",
                );
                let insert = q(&insert);
                let mut tx = begin(self.pool()).await?;
                let mut inserted = 0;
                for (key, rule) in rules {
                    let fresh = sqlx::query(&q(
                        "INSERT INTO alert_default_seeds (org_id, key, seeded_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    ))
                    .bind(org)
                    .bind(key)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if fresh == 0 {
                        continue;
                    }
                    let query = sqlx::query(&insert).bind(org).bind(key).bind(now_ms).bind(now_ms);
                    inserted += bind_rule(query, rule).execute(&mut *tx).await?.rows_affected();
                }
                tx.commit().await?;
                Ok(inserted)
            }

            async fn notification_channels(
                &self,
                org: $crate::OrgId,
            ) -> $crate::Result<Vec<$crate::alerts::ChannelRecord>> {
                all_of_org(self.pool(), $crate::alerts::CHANNELS.cols, $crate::alerts::CHANNELS.name, "id", org).await
            }

            async fn notification_channel(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::ChannelId,
            ) -> $crate::Result<Option<$crate::alerts::ChannelRecord>> {
                one_of_org(self.pool(), $crate::alerts::CHANNELS.cols, $crate::alerts::CHANNELS.name, org, id).await
            }

            async fn insert_notification_channel(
                &self,
                org: $crate::OrgId,
                ch: &$crate::alerts::NewChannel,
                now_ms: i64,
            ) -> $crate::Result<$crate::alerts::ChannelRecord> {
                // `next_send_ms` starts at its default, 0.
                insert_record(self.pool(), &$crate::alerts::CHANNELS, org, ch, bind_channel, now_ms).await
            }

            async fn update_notification_channel(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::ChannelId,
                ch: &$crate::alerts::NewChannel,
                now_ms: i64,
            ) -> $crate::Result<Option<$crate::alerts::ChannelRecord>> {
                update_record(self.pool(), &$crate::alerts::CHANNELS, org, id, ch, bind_channel_update, now_ms).await
            }

            async fn delete_notification_channel(&self, org: $crate::OrgId, id: fleetlens_core::ChannelId, now_ms: i64) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                let done = delete_of_org(&mut *tx, $crate::alerts::CHANNELS.name, org, id).await?;
                if done {
                    sqlx::query(&q(
                        "UPDATE alert_outbox SET status = 'failed', last_error = 'channel deleted', lease_owner = NULL, \
                         lease_until_ms = NULL, next_attempt_ms = ? WHERE channel_id = ? AND status IN ('pending', 'sending')",
                    ))
                    .bind(now_ms)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(done)
            }

            async fn insert_silence(
                &self,
                org: $crate::OrgId,
                s: &$crate::alerts::NewSilence,
                now_ms: i64,
            ) -> $crate::Result<$crate::alerts::SilenceRecord> {
                let sql = format!(
                    "INSERT INTO alert_silences (org_id, matchers, starts_at_ms, ends_at_ms, comment, created_by, created_ms) \
                     VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {}",
                    $crate::alerts::SILENCE_COLS
                );
                Ok(sqlx::query_as(&q(&sql))
                    .bind(org)
                    .bind($crate::alerts::to_json(&s.matchers))
                    .bind(s.starts_at_ms)
                    .bind(s.ends_at_ms)
                    .bind(&s.comment)
                    .bind(&s.created_by)
                    .bind(now_ms)
                    .fetch_one(self.pool())
                    .await?)
            }

            async fn silences(&self, org: $crate::OrgId) -> $crate::Result<Vec<$crate::alerts::SilenceRecord>> {
                all_of_org(self.pool(), $crate::alerts::SILENCE_COLS, "alert_silences", "id DESC", org).await
            }

            async fn current_silences(&self, now_ms: i64) -> $crate::Result<Vec<$crate::alerts::SilenceRecord>> {
                let sql = format!(
                    "SELECT {} FROM alert_silences WHERE ends_at_ms > ? ORDER BY id",
                    $crate::alerts::SILENCE_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(now_ms).fetch_all(self.pool()).await?)
            }

            async fn expire_silence(&self, org: $crate::OrgId, id: fleetlens_core::SilenceId, now_ms: i64) -> $crate::Result<bool> {
                if !org_has(self.pool(), "alert_silences", org, id).await? {
                    return Ok(false);
                }
                sqlx::query(&q(
                    "UPDATE alert_silences SET ends_at_ms = ? WHERE org_id = ? AND id = ? AND ends_at_ms > ?",
                ))
                .bind(now_ms)
                .bind(org)
                .bind(id)
                .bind(now_ms)
                .execute(self.pool())
                .await?;
                Ok(true)
            }

            async fn alerts(
                &self,
                org: $crate::OrgId,
                f: &$crate::alerts::AlertFilter,
            ) -> $crate::Result<Vec<$crate::alerts::AlertRecord>> {
                let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
                let want = |s: &str| statuses.is_empty() || statuses.contains(&s);
                let sql = format!(
                    "SELECT {} FROM alerts a LEFT JOIN gpus g ON g.id = a.gpu_id WHERE a.org_id = ? \
                     AND ((a.status = 'pending' AND ?) OR (a.status = 'firing' AND ?) OR (a.status = 'resolved' AND ?)) \
                     AND (? IS NULL OR a.rule_id = ?) AND (? IS NULL OR g.uuid = ?) AND (? IS NULL OR a.id < ?) \
                     ORDER BY a.id DESC LIMIT ?",
                    $crate::alerts::ALERT_COLS
                );
                Ok(sqlx::query_as(&q(&sql))
                    .bind(org)
                    .bind(want("pending"))
                    .bind(want("firing"))
                    .bind(want("resolved"))
                    .bind(f.rule_id)
                    .bind(f.rule_id)
                    .bind(f.gpu_uuid.as_deref())
                    .bind(f.gpu_uuid.as_deref())
                    .bind(f.before_id)
                    .bind(f.before_id)
                    .bind(f.limit.max(1))
                    .fetch_all(self.pool())
                    .await?)
            }

            async fn alert(&self, org: $crate::OrgId, id: fleetlens_core::AlertId) -> $crate::Result<Option<$crate::alerts::AlertRecord>> {
                let sql = format!(
                    "SELECT {} FROM alerts a LEFT JOIN gpus g ON g.id = a.gpu_id WHERE a.org_id = ? AND a.id = ?",
                    $crate::alerts::ALERT_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(id).fetch_optional(self.pool()).await?)
            }

            async fn open_alerts(&self) -> $crate::Result<Vec<$crate::alerts::AlertRecord>> {
                let sql = format!(
                    "SELECT {} FROM alerts a LEFT JOIN gpus g ON g.id = a.gpu_id \
                     WHERE a.status IN ('pending', 'firing') ORDER BY a.id",
                    $crate::alerts::ALERT_COLS
                );
                Ok(sqlx::query_as(&sql).fetch_all(self.pool()).await?)
            }

            async fn try_job_lease(&self, name: &str, owner: &str, now_ms: i64, ttl_ms: i64) -> $crate::Result<bool> {
                let done = sqlx::query(&q(
                    "INSERT INTO job_leases (name, owner, until_ms) VALUES (?, ?, ?) \
                     ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until_ms = excluded.until_ms \
                     WHERE job_leases.owner = excluded.owner OR job_leases.until_ms < ?",
                ))
                .bind(name)
                .bind(owner)
                .bind(now_ms + ttl_ms)
                .bind(now_ms)
                .execute(self.pool())
                .await?
                .rows_affected();
                Ok(done > 0)
            }

            async fn release_job_lease(&self, name: &str, owner: &str) -> $crate::Result<()> {
                sqlx::query(&q("DELETE FROM job_leases WHERE name = ? AND owner = ?"))
                    .bind(name)
                    .bind(owner)
                    .execute(self.pool())
                    .await?;
                Ok(())
            }

            async fn alert_gpus(&self) -> $crate::Result<Vec<$crate::alerts::GpuBrief>> {
                Ok(sqlx::query_as(
                    &format!("SELECT g.org_id, g.ingest_seq, {} FROM gpus g ORDER BY g.id", $crate::GPU_RECORD_COLUMNS),
                )
                .fetch_all(self.pool())
                .await?)
            }

            async fn alert_cursors(&self) -> $crate::Result<Vec<$crate::alerts::GpuCursor>> {
                Ok(sqlx::query_as(
                    "SELECT gpu_id, org_id, last_ts_ms, state, state_since_ms, interval_ms FROM alert_gpu_cursors",
                )
                .fetch_all(self.pool())
                .await?)
            }

            async fn save_alert_cursors(&self, cursors: &[$crate::alerts::GpuCursor], now_ms: i64) -> $crate::Result<()> {
                if cursors.is_empty() {
                    return Ok(());
                }
                let mut tx = begin(self.pool()).await?;
                for c in cursors {
                    upsert_cursor(&mut tx, c, now_ms).await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn host_labels(
                &self,
            ) -> $crate::Result<Vec<($crate::OrgId, String, std::collections::BTreeMap<String, String>)>> {
                type Labels = std::collections::BTreeMap<String, String>;
                let rows: Vec<($crate::OrgId, String, $crate::json_text::JsonText<Labels>)> =
                    sqlx::query_as("SELECT org_id, host, labels FROM alert_host_labels").fetch_all(self.pool()).await?;
                Ok(rows.into_iter().map(|(org, host, labels)| (org, host, labels.into())).collect())
            }

            async fn put_host_labels(
                &self,
                org: $crate::OrgId,
                host: &str,
                labels: &std::collections::BTreeMap<String, String>,
                now_ms: i64,
            ) -> $crate::Result<()> {
                sqlx::query(&q(
                    "INSERT INTO alert_host_labels (org_id, host, labels, updated_ms) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (org_id, host) DO UPDATE SET labels = excluded.labels, updated_ms = excluded.updated_ms",
                ))
                .bind(org)
                .bind(host)
                .bind($crate::alerts::to_json(labels))
                .bind(now_ms)
                .execute(self.pool())
                .await?;
                Ok(())
            }

            async fn apply_alert_changes(
                &self,
                w: &$crate::alerts::EvalWrite,
            ) -> $crate::Result<$crate::alerts::EvalOutcome> {
                use $crate::alerts::AlertWrite;
                let mut tx = begin(self.pool()).await?;
                let mut out = $crate::alerts::EvalOutcome::default();
                let open_sql = q(&$crate::alerts::insert_spec_sql(
                    "alerts",
                    &["org_id", "rule_id", "gpu_id", "rule_name", "severity", "labels", "fingerprint"],
                    &$crate::alerts::ALERT_STATE_COLS,
                    "ON CONFLICT DO NOTHING RETURNING id",
                ))
                .into_owned();
                let update_sql = q(&format!(
                    "UPDATE alerts SET {} WHERE id = ? AND status = ?",
                    $crate::alerts::spec_sets(&$crate::alerts::ALERT_STATE_COLS)
                ))
                .into_owned();
                for change in &w.changes {
                    let (id, org) = match &change.write {
                        AlertWrite::Open(a) => {
                            let query = sqlx::query(&open_sql)
                                .bind(a.org_id)
                                .bind(a.rule_id)
                                .bind(a.gpu_id)
                                .bind(&a.rule_name)
                                .bind(a.severity.as_str())
                                .bind($crate::alerts::to_json(&a.labels))
                                .bind(&a.fingerprint);
                            let row = bind_alert_state(query, a, w.now_ms).fetch_optional(&mut *tx).await?;
                            let id: Option<fleetlens_core::AlertId> =
                                row.as_ref().map(|r| sqlx::Row::try_get(r, 0)).transpose()?;
                            (id, a.org_id)
                        }
                        AlertWrite::Update { from, alert: a } => {
                            let done = bind_alert_state(sqlx::query(&update_sql), a, w.now_ms)
                            .bind(a.id)
                            .bind(from.as_str())
                            .execute(&mut *tx)
                            .await?
                            .rows_affected();
                            ((done > 0).then_some(a.id), a.org_id)
                        }
                        AlertWrite::Delete { id, from } => {
                            let org: Option<$crate::OrgId> = sqlx::query_scalar(&q(
                                "DELETE FROM alerts WHERE id = ? AND status = ? RETURNING org_id",
                            ))
                            .bind(*id)
                            .bind(from.as_str())
                            .fetch_optional(&mut *tx)
                            .await?;
                            (org.map(|_| *id), org.unwrap_or_default())
                        }
                    };
                    out.alert_ids.push(id);
                    let Some(alert_id) = id else { continue };
                    for n in &change.notify {
                        out.enqueued += insert_outbox(&mut tx, org, Some(alert_id), n, w.now_ms).await?.map_or(0, |_| 1);
                    }
                    for s in &change.suppressed {
                        sqlx::query(&q(
                            "INSERT INTO alert_deliveries (org_id, outbox_id, alert_id, channel_id, kind, attempt, at_ms, \
                             outcome, status_code, error, duration_ms) VALUES (?, NULL, ?, ?, ?, 0, ?, 'suppressed', NULL, ?, NULL)",
                        ))
                        .bind(org)
                        .bind(alert_id)
                        .bind(s.channel_id)
                        .bind(s.kind.as_str())
                        .bind(w.now_ms)
                        .bind(format!("silenced by silence #{}", s.silence_id))
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                for c in &w.cursors {
                    upsert_cursor(&mut tx, c, w.now_ms).await?;
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn open_alert_groups(&self) -> $crate::Result<Vec<$crate::alerts::AlertGroupRecord>> {
                Ok(sqlx::query_as(
                    "SELECT id, org_id, channel_id, group_key, is_open, state, version, created_ms, updated_ms \
                     FROM alert_groups WHERE is_open ORDER BY id",
                )
                .fetch_all(self.pool())
                .await?)
            }

            async fn apply_group_changes(
                &self,
                changes: &[$crate::alerts::GroupChange],
                now_ms: i64,
            ) -> $crate::Result<Vec<Option<fleetlens_core::AlertGroupId>>> {
                use $crate::alerts::GroupWrite;
                let mut tx = begin(self.pool()).await?;
                let mut out = Vec::with_capacity(changes.len());
                for change in changes {
                    let (id, org) = match &change.write {
                        GroupWrite::Insert(g) => {
                            let id: Option<fleetlens_core::AlertGroupId> = sqlx::query_scalar(&q(
                                "INSERT INTO alert_groups (org_id, channel_id, group_key, is_open, state, version, \
                                 created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
                            ))
                            .bind(g.org_id)
                            .bind(g.channel_id)
                            .bind(&g.group_key)
                            .bind(g.is_open)
                            .bind(g.state.to_string())
                            .bind(now_ms)
                            .bind(now_ms)
                            .fetch_optional(&mut *tx)
                            .await?;
                            (id, g.org_id)
                        }
                        GroupWrite::Update(g) => {
                            let done = sqlx::query(&q(
                                "UPDATE alert_groups SET is_open = ?, state = ?, version = version + 1, updated_ms = ? \
                                 WHERE id = ? AND version = ?",
                            ))
                            .bind(g.is_open)
                            .bind(g.state.to_string())
                            .bind(now_ms)
                            .bind(g.id)
                            .bind(g.version)
                            .execute(&mut *tx)
                            .await?
                            .rows_affected();
                            ((done > 0).then_some(g.id), g.org_id)
                        }
                    };
                    out.push(id);
                    if id.is_none() {
                        continue;
                    }
                    for (alert_id, n) in &change.notify {
                        insert_outbox(&mut tx, org, Some(*alert_id), n, now_ms).await?;
                    }
                    for alert_id in &change.mark_notified {
                        sqlx::query(&q("UPDATE alerts SET notified_firing = TRUE WHERE id = ?"))
                            .bind(*alert_id)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                if out.iter().any(Option::is_none) {
                    // All or nothing: the engine reloads and decides again.
                    tx.rollback().await?;
                    return Ok(out);
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn advance_digest(
                &self,
                org: $crate::OrgId,
                channel_id: fleetlens_core::ChannelId,
                from_ms: i64,
                to_ms: i64,
                message: Option<&$crate::alerts::NewNotification>,
                now_ms: i64,
            ) -> $crate::Result<bool> {
                let mut tx = begin(self.pool()).await?;
                let done = sqlx::query(&q(
                    "UPDATE notification_channels SET digest_last_ms = ? WHERE org_id = ? AND id = ? AND digest_last_ms = ?",
                ))
                .bind(to_ms)
                .bind(org)
                .bind(channel_id)
                .bind(from_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if done == 0 {
                    return Ok(false);
                }
                if let Some(n) = message {
                    insert_outbox(&mut tx, org, None, n, now_ms).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn enqueue_notification(
                &self,
                org: $crate::OrgId,
                alert_id: Option<fleetlens_core::AlertId>,
                n: &$crate::alerts::NewNotification,
                now_ms: i64,
            ) -> $crate::Result<Option<fleetlens_core::MessageId>> {
                let mut tx = begin(self.pool()).await?;
                let id = insert_outbox(&mut tx, org, alert_id, n, now_ms).await?;
                tx.commit().await?;
                Ok(id)
            }

            async fn claim_notifications(
                &self,
                owner: &str,
                now_ms: i64,
                lease_ms: i64,
                max: i64,
            ) -> $crate::Result<Vec<$crate::alerts::ClaimedMessage>> {
                use fleetlens_core::OutboxStatus;
                let mut tx = begin(self.pool()).await?;
                let sql = format!(
                    "SELECT {} FROM notification_channels c WHERE c.next_send_ms <= ? AND EXISTS \
                     (SELECT 1 FROM alert_outbox o WHERE o.channel_id = c.id AND o.status IN ('pending', 'sending')) \
                     ORDER BY c.next_send_ms, c.id LIMIT ?{}",
                    $crate::alerts::CHANNEL_COLS,
                    LOCK_SKIP_LOCKED
                );
                let channels = sqlx::query(&q(&sql)).bind(now_ms).bind(max.max(1)).fetch_all(&mut *tx).await?;
                let mut claimed = Vec::new();
                for row in &channels {
                    let channel: $crate::alerts::ChannelRecord = sqlx::FromRow::from_row(row)?;
                    let sql = format!(
                        "SELECT {}, lease_until_ms FROM alert_outbox WHERE channel_id = ? AND status IN ('pending', 'sending') \
                         ORDER BY id LIMIT 1",
                        $crate::alerts::OUTBOX_COLS
                    );
                    let Some(head) = sqlx::query(&q(&sql)).bind(channel.id).fetch_optional(&mut *tx).await? else {
                        continue;
                    };
                    let mut outbox: $crate::alerts::OutboxRecord = sqlx::FromRow::from_row(&head)?;
                    let lease_until: Option<i64> = {
                        use sqlx::Row as _;
                        head.try_get("lease_until_ms")?
                    };
                    let due = match outbox.message.status {
                        OutboxStatus::Pending => outbox.message.next_attempt_ms <= now_ms,
                        // A sender that died mid-flight: its lease ran out.
                        _ => lease_until.is_none_or(|u| u < now_ms),
                    };
                    if !due {
                        continue;
                    }
                    let until = now_ms + lease_ms;
                    sqlx::query(&q(
                        "UPDATE alert_outbox SET status = 'sending', lease_owner = ?, lease_until_ms = ?, \
                         attempts = attempts + 1 WHERE id = ?",
                    ))
                    .bind(owner)
                    .bind(until)
                    .bind(outbox.message.id)
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(&q("UPDATE notification_channels SET next_send_ms = ? WHERE id = ?"))
                        .bind(now_ms + channel.min_interval_ms.max(0))
                        .bind(channel.id)
                        .execute(&mut *tx)
                        .await?;
                    outbox.message.status = OutboxStatus::Sending;
                    outbox.message.attempts += 1;
                    claimed.push($crate::alerts::ClaimedMessage { outbox, channel, lease_until_ms: until });
                }
                tx.commit().await?;
                Ok(claimed)
            }

            async fn finish_notification(
                &self,
                id: fleetlens_core::MessageId,
                owner: &str,
                r: &$crate::alerts::DeliveryResult,
                now_ms: i64,
            ) -> $crate::Result<bool> {
                use $crate::alerts::DeliveryOutcome;
                use fleetlens_core::{AttemptOutcome, OutboxStatus};
                let mut tx = begin(self.pool()).await?;
                let sql = format!("SELECT {} FROM alert_outbox WHERE id = ?", $crate::alerts::OUTBOX_COLS);
                let Some(m) = sqlx::query_as::<_, $crate::alerts::OutboxRecord>(&q(&sql))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Ok(false);
                };
                let (status, next, delivered, outcome) = match r.outcome {
                    DeliveryOutcome::Delivered => {
                        (OutboxStatus::Delivered, now_ms, Some(now_ms), AttemptOutcome::Delivered)
                    }
                    DeliveryOutcome::Retry { at_ms } => (OutboxStatus::Pending, at_ms, None, AttemptOutcome::Retry),
                    DeliveryOutcome::Failed => (OutboxStatus::Failed, now_ms, None, AttemptOutcome::Failed),
                };
                let done = sqlx::query(&q(
                    "UPDATE alert_outbox SET status = ?, next_attempt_ms = ?, delivered_ms = ?, last_error = ?, \
                     last_status_code = ?, lease_owner = NULL, lease_until_ms = NULL \
                     WHERE id = ? AND lease_owner = ? AND status = 'sending'",
                ))
                .bind(status.as_str())
                .bind(next)
                .bind(delivered)
                .bind(r.error.as_deref())
                .bind(r.status_code)
                .bind(id)
                .bind(owner)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                // A sender whose lease ran out still logs what it saw, as `lease_lost`.
                let (outcome, error) = if done == 0 {
                    let what = format!("{outcome} after the lease had passed to another sender");
                    (AttemptOutcome::LeaseLost, Some(r.error.as_deref().map_or(what.clone(), |e| format!("{what}: {e}"))))
                } else {
                    (outcome, r.error.clone())
                };
                sqlx::query(&q(
                    "INSERT INTO alert_deliveries (org_id, outbox_id, alert_id, channel_id, kind, attempt, at_ms, outcome, \
                     status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ))
                .bind(m.org_id)
                .bind(m.message.id)
                .bind(m.alert_id)
                .bind(m.message.channel_id)
                .bind(m.message.kind.as_str())
                .bind(m.message.attempts)
                .bind(now_ms)
                .bind(outcome.as_str())
                .bind(r.status_code)
                .bind(error)
                .bind(r.duration_ms)
                .execute(&mut *tx)
                .await?;
                if let Some(until) = r.channel_pause_until_ms {
                    sqlx::query(&q(
                        "UPDATE notification_channels SET next_send_ms = ? WHERE id = ? AND next_send_ms < ?",
                    ))
                    .bind(until)
                    .bind(m.message.channel_id)
                    .bind(until)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(done > 0)
            }

            async fn outbox_message(
                &self,
                org: $crate::OrgId,
                id: fleetlens_core::MessageId,
            ) -> $crate::Result<Option<$crate::alerts::OutboxRecord>> {
                let sql = format!("SELECT {} FROM alert_outbox WHERE org_id = ? AND id = ?", $crate::alerts::OUTBOX_COLS);
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(id).fetch_optional(self.pool()).await?)
            }

            async fn outbox_for_alert(
                &self,
                org: $crate::OrgId,
                alert_id: fleetlens_core::AlertId,
            ) -> $crate::Result<Vec<$crate::alerts::OutboxRecord>> {
                let sql = format!(
                    "SELECT {} FROM alert_outbox WHERE org_id = ? AND alert_id = ? ORDER BY id",
                    $crate::alerts::OUTBOX_COLS
                );
                Ok(sqlx::query_as(&q(&sql)).bind(org).bind(alert_id).fetch_all(self.pool()).await?)
            }

            async fn outbox_backlog(&self) -> $crate::Result<i64> {
                Ok(sqlx::query_scalar(&q("SELECT count(*) FROM alert_outbox WHERE status IN ('pending', 'sending')"))
                    .fetch_one(self.pool())
                    .await?)
            }

            async fn deliveries(
                &self,
                org: $crate::OrgId,
                f: &$crate::alerts::DeliveryFilter,
            ) -> $crate::Result<Vec<$crate::alerts::DeliveryRecord>> {
                let sql = format!(
                    "SELECT {} FROM alert_deliveries WHERE org_id = ? AND (? IS NULL OR channel_id = ?) \
                     AND (? IS NULL OR alert_id = ?) ORDER BY id DESC LIMIT ?",
                    $crate::alerts::DELIVERY_COLS
                );
                Ok(sqlx::query_as(&q(&sql))
                    .bind(org)
                    .bind(f.channel_id)
                    .bind(f.channel_id)
                    .bind(f.alert_id)
                    .bind(f.alert_id)
                    .bind(f.limit.max(1))
                    .fetch_all(self.pool())
                    .await?)
            }
        }

        async fn upsert_cursor(
            tx: &mut sqlx::Transaction<'static, $db>,
            c: &$crate::alerts::GpuCursor,
            now_ms: i64,
        ) -> $crate::Result<()> {
            sqlx::query(&q(
                "INSERT INTO alert_gpu_cursors (gpu_id, org_id, last_ts_ms, state, state_since_ms, interval_ms, updated_ms) \
                 VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (gpu_id) DO UPDATE SET last_ts_ms = excluded.last_ts_ms, \
                 state = excluded.state, state_since_ms = excluded.state_since_ms, interval_ms = excluded.interval_ms, \
                 updated_ms = excluded.updated_ms WHERE alert_gpu_cursors.last_ts_ms <= excluded.last_ts_ms",
            ))
            .bind(c.gpu_id)
            .bind(c.org_id)
            .bind(c.last_ts_ms)
            .bind(c.state.as_str())
            .bind(c.state_since_ms)
            .bind(c.interval_ms)
            .bind(now_ms)
            .execute(&mut **tx)
            .await?;
            Ok(())
        }
    };
}

mod sqlite_impl {
    use sqlx::Sqlite;

    use crate::dialect::sqlite::{
        LOCK_SKIP_LOCKED, all_of_org, begin, delete_of_org, insert_outbox, one_of_org, org_has, q,
    };
    use crate::sqlite::SqliteStore;

    impl_alert_store!(SqliteStore, Sqlite);
}

mod pg_impl {
    use sqlx::Postgres;

    use crate::dialect::pg::{
        LOCK_SKIP_LOCKED, all_of_org, begin, delete_of_org, insert_outbox, one_of_org, org_has, q,
    };
    use crate::postgres::PgStore;

    impl_alert_store!(PgStore, Postgres);
}
