//! The alert engine: one replica at a time (a PostgreSQL advisory lock, then a job lease in the
//! database) reads each GPU's new samples in time order, classifies each sample's workload
//! state, evaluates every enabled rule of the GPU's organisation on it, and steps each (rule,
//! GPU) alert through pending →
//! firing → resolved on the samples' timestamps. A transition and its outbox rows are written
//! in one transaction, together with the GPU's cursor (how far its samples are evaluated).
//!
//! Two kinds of rules:
//! - **sample rules** (almost all) are evaluated on each sample, on event time, so replayed or
//!   back-filled data alerts exactly like live data;
//! - **no-data rules**: a rule whose condition is true when a GPU sends nothing (`state ==
//!   offline`) is evaluated on the wall clock each cycle: the GPU is offline when its newest
//!   stored sample is older than `offline_missing_intervals` sampling intervals, and reporting
//!   otherwise (then the rule sees the GPU's newest sample). Late data does not end an outage
//!   until the GPU is current again, so a spool that drains does not make the alert flap.
//!
//! Also on the wall clock: reminders (repeat interval), a silence that ends while an alert
//! fires (its firing notification goes out then), and alerts whose rule was deleted or
//! disabled (resolved).
//!
//! In-memory state is a cache of the database's: on any write that loses a race (another
//! replica, a stale cache) or fails, it is dropped and reloaded, and evaluation resumes from
//! the stored cursors; re-evaluating samples is deterministic, and a transition already
//! written is found written (compare-and-set on the alert's status), so nothing is sent twice.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::delivery::{DEFAULT_DELIVERY_GAP_MS, Delivery};
use fleetlens_core::rules::inhibit::{self, InhibitScope, Inhibitions, OpenAlert, RuleRef, Target};
use fleetlens_core::rules::payload::{matched_values, render_template};
use fleetlens_core::rules::{
    AlertSubject, Condition, DEFAULT_RULES, NotifyStatus, Observation, Phase, RuleSpec, Step, Timing, Truth,
    alert_labels, fingerprint, repeat_due, silenced_by, step,
};
use fleetlens_core::rules::{DefaultRule, SilenceWindow};
use fleetlens_core::{
    AlertId, ChannelId, ChannelKind, GpuEventId, GpuId, MessageKind, RuleId, Sample, SilenceId, Thresholds,
    WindowAggregate, WorkloadState, classify,
};
use fleetlens_store::alerts::{
    ALERT_ENGINE_JOB, AlertChange, AlertRecord, AlertRuleRecord, AlertStatus, AlertWrite, ChannelRecord, EvalWrite,
    GpuBrief, GpuCursor, NewNotification, NewSuppressed,
};
use fleetlens_store::{DEFAULT_ORG, OrgId, Store, StoreError};

use super::recent::{HeldBatch, News};
use super::render::{self, AlertDetails};
use super::{AlertsCtx, ms};
use crate::time::now_ms;
use fleetlens_core::timeline::{is_silent, offline_limit_ms};

/// Samples read per cycle, all GPUs together; more are read in the next cycle at once.
const BATCH: u32 = 20_000;
/// Dirty cursors of GPUs without transitions are saved this often.
const CURSOR_FLUSH_MS: i64 = 10_000;
/// Thresholds are re-read this often: as often as every replica's classifier re-reads them, so
/// a PUT served by another replica reaches the rules' states within the bound docs/API.md gives.
const THRESHOLDS_TTL_MS: i64 = crate::analytics::THRESHOLDS_REFRESH.as_millis() as i64;

/// An open alert's key: its rule and its GPU.
pub(super) type Key = (RuleId, GpuId);

/// Run the engine until the process ends.
pub async fn run(ctx: Arc<AlertsCtx>) {
    let interval = ctx.cfg.alert_eval_interval.max(Duration::from_millis(50));
    // Renewed once half of it has passed (not every cycle: on SQLite each renewal is a write
    // that queues behind the ingest writer, and cycles follow every ingest); after a crash
    // another replica (or the restarted server) takes over once it runs out.
    let lease_ttl = (ms(interval) * 10).max(5_000);
    let mut lease_until = i64::MIN;
    let mut engine: Option<Engine> = None;
    // Leadership across replicas (a PostgreSQL advisory lock; see crate::jobs): only the leader
    // goes on to the lease row, which stays as a fence against a leader that lost its lock
    // session but has not noticed yet.
    let mut lock = ctx.store.job_lock(crate::jobs::ALERT_ENGINE);
    crate::jobs::set_leader(crate::jobs::ALERT_ENGINE, false);
    loop {
        // Ingest hands this replica's batches over only while it runs the engine.
        ctx.recent.enable(engine.is_some());
        tokio::select! {
            _ = ctx.engine_wake.notified() => {}
            _ = tokio::time::sleep(interval) => {}
        }
        // Let a burst of ingests land before reading.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let leader = lock.lead().await;
        crate::jobs::set_leader(crate::jobs::ALERT_ENGINE, leader);
        if !leader {
            engine = None;
            continue;
        }
        let now = now_ms();
        if engine.is_none() || now >= lease_until.saturating_sub(lease_ttl / 2) {
            match ctx.store.try_job_lease(ALERT_ENGINE_JOB, &ctx.owner, now, lease_ttl).await {
                Ok(true) => lease_until = now + lease_ttl,
                Ok(false) => {
                    engine = None;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "alert engine: cannot take its lease");
                    engine = None;
                    continue;
                }
            }
        }
        if engine.is_none() {
            match Engine::load(ctx.store.as_ref()).await {
                Ok(e) => {
                    engine = Some(e);
                    ctx.recent.enable(true);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "alert engine: cannot load its state");
                    continue;
                }
            }
        }
        let Some(e) = engine.as_mut() else { continue };
        match e.cycle(&ctx, now).await {
            Ok(report) => {
                crate::jobs::count_run(crate::jobs::ALERT_ENGINE);
                if report.enqueued > 0 {
                    ctx.outbox_wake.notify_one();
                }
                if report.more {
                    ctx.engine_wake.notify_one();
                }
                if report.reload {
                    tracing::info!("alert engine: state changed under it; reloading");
                    engine = None;
                    ctx.engine_wake.notify_one();
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "alert engine: cycle failed; reloading its state");
                engine = None;
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub enqueued: u64,
    /// More samples are waiting.
    pub more: bool,
    /// A write lost a race: reload the state from the database.
    pub reload: bool,
}

/// A rule ready to evaluate.
pub(super) struct Rule {
    pub(super) rec: AlertRuleRecord,
    cond: Condition,
    timing: Timing,
    /// True on an observation with no data: evaluated on the wall clock.
    no_data: bool,
    /// States in which the condition holds on the state alone (for `state:<s>` inhibition).
    holds_in: Vec<WorkloadState>,
}

impl Rule {
    fn compile(rec: AlertRuleRecord) -> Option<Rule> {
        let cond = match Condition::parse(&rec.rule.condition) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(rule = rec.id.get(), error = %e, "stored rule does not parse; skipped");
                return None;
            }
        };
        let no_data = cond.eval(&Observation::of_state_alone(WorkloadState::Offline)) == Truth::True;
        let timing = Timing::from_secs(rec.rule.for_s, rec.rule.keep_firing_for_s);
        let holds_in = inhibit::holds_in(&cond);
        Some(Rule { rec, cond, timing, no_data, holds_in })
    }
}

/// The shipped rules as the store takes them.
pub fn default_rules() -> Vec<(String, RuleSpec)> {
    DEFAULT_RULES.iter().map(|d: &DefaultRule| (d.key.to_string(), RuleSpec::from(d))).collect()
}

/// What one cycle reads once.
pub(super) struct CycleData {
    rules: HashMap<OrgId, Vec<Rule>>,
    enabled_rules: HashSet<RuleId>,
    pub(super) channels: HashMap<OrgId, Vec<ChannelRecord>>,
    silences: HashMap<OrgId, Vec<SilenceWindow>>,
    teams: HashMap<(OrgId, String), String>,
    pub(super) public_url: String,
    /// Which rules hold back which, per organisation.
    inhibitions: HashMap<OrgId, Inhibitions>,
}

impl CycleData {
    fn team(&self, g: &GpuBrief) -> Option<&str> {
        self.teams.get(&(g.org_id, g.info.host.clone())).map(String::as_str)
    }

    /// The channels a rule notifies: its own, or the organisation's default channels.
    fn channels_for(&self, rule: &AlertRuleRecord) -> Vec<&ChannelRecord> {
        let all = self.channels.get(&rule.org_id).map(Vec::as_slice).unwrap_or_default();
        if rule.rule.channels.is_empty() {
            all.iter().filter(|c| c.is_default).collect()
        } else {
            all.iter().filter(|c| rule.rule.channels.contains(&c.id)).collect()
        }
    }

    /// The channels that get one message per alert (Alertmanager, which groups by itself).
    fn alert_channels_for(&self, rule: &AlertRuleRecord) -> Vec<&ChannelRecord> {
        self.channels_for(rule).into_iter().filter(|c| per_alert(c)).collect()
    }

    /// The channels that get grouped real-time messages.
    pub(super) fn group_channels_for(&self, rule: &AlertRuleRecord) -> Vec<&ChannelRecord> {
        self.channels_for(rule).into_iter().filter(|c| !per_alert(c) && c.digest.is_empty()).collect()
    }

    pub(super) fn rule(&self, org: OrgId, id: RuleId) -> Option<&Rule> {
        self.rules.get(&org).and_then(|rs| rs.iter().find(|r| r.rec.id == id))
    }

    fn channels_by_id(&self, org: OrgId, ids: &[ChannelId]) -> Vec<&ChannelRecord> {
        let all = self.channels.get(&org).map(Vec::as_slice).unwrap_or_default();
        all.iter().filter(|c| ids.contains(&c.id)).collect()
    }

    fn silence(&self, org: OrgId, labels: &BTreeMap<String, String>, now: i64) -> Option<SilenceId> {
        silenced_by(self.silences.get(&org).map(Vec::as_slice).unwrap_or_default(), labels, now)
    }
}

/// Writes gathered for one transaction.
#[derive(Default)]
struct Changes {
    list: Vec<AlertChange>,
    /// Status of the stored row when this batch first touched it.
    origin: HashMap<Key, AlertStatus>,
    /// Notifications of the open instance, not yet attached to a write.
    notes: HashMap<Key, (Vec<NewNotification>, Vec<NewSuppressed>)>,
    touched: Vec<Key>,
    touched_set: HashSet<Key>,
    /// Change index → key, for instances inserted while still open (their id comes back).
    opened: Vec<(usize, Key)>,
}

impl Changes {
    fn touch(&mut self, key: Key) {
        if self.touched_set.insert(key) {
            self.touched.push(key);
        }
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty() && self.touched.is_empty()
    }
}

pub(super) struct Engine {
    cursors: HashMap<GpuId, GpuCursor>,
    pub(super) open: HashMap<Key, AlertRecord>,
    /// Each GPU's newest evaluated sample (for no-data rules while it reports).
    last_sample: HashMap<GpuId, Sample>,
    dirty_cursors: HashSet<GpuId>,
    /// Each GPU's ingest sequence number up to which its samples are judged (unknown until the
    /// engine first reads the GPU from the database): see `super::recent`.
    judged: HashMap<GpuId, i64>,
    /// GPUs whose newest batch was committed but not yet handed over last cycle.
    waiting: HashSet<GpuId>,
    /// How each GPU's samples arrive (in memory only: after a restart the default applies).
    deliveries: HashMap<GpuId, Delivery>,
    /// The newest GPU event read, and the times of XID errors per GPU not yet matched to a
    /// sample (the `xid_errors` field of the GPU's next sample counts them).
    last_event_id: GpuEventId,
    xids: HashMap<GpuId, Vec<i64>>,
    last_cursor_flush: i64,
    thresholds: HashMap<OrgId, (Thresholds, i64)>,
    seeded: HashSet<OrgId>,
    /// Open notification groups per (channel, key).
    pub(super) groups: HashMap<(ChannelId, String), super::groups::GroupEntry>,
    /// Alerts resolved in this cycle, for their groups (in time order there).
    pub(super) resolved_events: Vec<AlertRecord>,
    /// Ids of alerts inserted already resolved (rule, GPU, active since → id).
    pub(super) resolved_ids: HashMap<(RuleId, GpuId, i64), AlertId>,
}

impl Engine {
    async fn load(store: &dyn Store) -> Result<Engine, StoreError> {
        let cursors = store.alert_cursors().await?.into_iter().map(|c| (c.gpu_id, c)).collect();
        let open = store.open_alerts().await?.into_iter().map(|a| ((a.rule_id, a.gpu_id), a)).collect();
        let groups = super::groups::load(store).await?;
        Ok(Engine {
            groups,
            resolved_events: Vec::new(),
            resolved_ids: HashMap::new(),
            cursors,
            open,
            last_sample: HashMap::new(),
            dirty_cursors: HashSet::new(),
            judged: HashMap::new(),
            waiting: HashSet::new(),
            deliveries: HashMap::new(),
            last_event_id: GpuEventId(0),
            xids: HashMap::new(),
            last_cursor_flush: now_ms(),
            thresholds: HashMap::new(),
            seeded: HashSet::new(),
        })
    }

    async fn thresholds(&mut self, store: &dyn Store, org: OrgId, now: i64) -> Thresholds {
        if let Some((th, at)) = self.thresholds.get(&org)
            && now - at < THRESHOLDS_TTL_MS
        {
            return th.clone();
        }
        let th = crate::analytics::thresholds(store, org).await.unwrap_or_default();
        self.thresholds.insert(org, (th.clone(), now));
        th
    }

    async fn cycle(&mut self, ctx: &AlertsCtx, now: i64) -> Result<Report, StoreError> {
        let store = ctx.store.as_ref();
        let gpus = store.alert_gpus().await?;
        let mut orgs: HashSet<OrgId> = gpus.iter().map(|g| g.org_id).collect();
        orgs.insert(DEFAULT_ORG);
        for org in &orgs {
            if !self.seeded.contains(org) {
                store.seed_default_rules(*org, &default_rules(), now).await?;
                self.seeded.insert(*org);
            }
        }
        let data = self.read_cycle_data(ctx, &orgs, now).await?;
        let mut report = Report::default();
        // Back-filled GPUs are judged on their own last lookback (below): their events too.
        let oldest_data = gpus.iter().map(|g| g.info.last_seen_ms.min(now)).min().unwrap_or(now);
        self.read_events(store, &gpus, oldest_data - ms(ctx.cfg.alert_lookback)).await?;

        // 1. New samples, per GPU, on event time: the batches this replica stored from memory
        // when it holds all of them (`super::recent`), every other GPU with news in one read.
        let mut held: HashMap<GpuId, Vec<HeldBatch>> = HashMap::new();
        // The number each GPU is judged up to once its news below is.
        let mut judged_to: HashMap<GpuId, i64> = HashMap::new();
        // Where each GPU's news starts. A GPU seen for the first time is judged on the last
        // `--alert-lookback` of its own data, not of the wall clock: back-filled data (a
        // replayed trace recorded days ago) alerts like live data did.
        let from: HashMap<GpuId, i64> = gpus
            .iter()
            .map(|g| {
                let from = match self.cursors.get(&g.id) {
                    Some(c) => c.last_ts_ms + 1,
                    None => g.info.last_seen_ms.min(now) - ms(ctx.cfg.alert_lookback),
                };
                (g.id, from)
            })
            .collect();
        let positions: Vec<(GpuId, i64)> = gpus
            .iter()
            .filter_map(|g| {
                // A GPU never judged (no cursor) whose every batch this replica stored, from
                // its first (number 0), is judged from memory too.
                let judged = self.judged.get(&g.id).copied().or((!self.cursors.contains_key(&g.id)).then_some(-1));
                // A batch committed but not handed over yet is waited for one cycle, not more.
                let may_wait = !self.waiting.contains(&g.id);
                match ctx.recent.take(g.id, judged, g.ingest_seq, may_wait) {
                    News::None => {
                        judged_to.insert(g.id, g.ingest_seq);
                        return None;
                    }
                    News::Held { batches, through } => {
                        held.insert(g.id, batches);
                        judged_to.insert(g.id, through);
                        return None;
                    }
                    News::Database => judged_to.insert(g.id, g.ingest_seq),
                };
                (g.info.last_seen_ms >= from[&g.id]).then_some((g.id, from[&g.id]))
            })
            .collect();
        let feed = if positions.is_empty() { Vec::new() } else { store.samples_since(&positions, BATCH).await? };
        let cut_short = feed.len() == BATCH as usize;
        report.more |= cut_short;
        let mut news: HashMap<GpuId, Vec<&Sample>> = HashMap::new();
        for (gpu, s) in &feed {
            news.entry(*gpu).or_default().push(s);
        }
        let mut from_memory = 0;
        for (gpu, batches) in &held {
            // As the database read does: the samples from the GPU's position, in time order.
            let from = from[gpu];
            let mut samples: Vec<&Sample> =
                batches.iter().flat_map(HeldBatch::samples).filter(|s| s.ts_ms >= from).collect();
            samples.sort_by_key(|s| s.ts_ms);
            from_memory += samples.len();
            news.insert(*gpu, samples);
        }
        crate::metrics::record_alert_feed(feed.len(), from_memory);
        // A read cut short (GPU by GPU, in id order) ends in its last GPU's samples: that GPU
        // and those after it are read again from their cursors; those before it were read
        // whole, and go back to memory from here (after a backlog, a few GPUs a cycle).
        let read_again: HashSet<GpuId> = match feed.last() {
            Some(&(last, _)) if cut_short => positions.iter().map(|&(gpu, _)| gpu).filter(|&gpu| gpu >= last).collect(),
            _ => HashSet::new(),
        };
        for g in &gpus {
            // Judged up to the number taken, unless the database read stopped before the GPU's
            // last sample.
            if let Some(&to) = judged_to.get(&g.id)
                && !read_again.contains(&g.id)
            {
                self.judged.insert(g.id, to);
                if to < g.ingest_seq {
                    self.waiting.insert(g.id);
                } else {
                    self.waiting.remove(&g.id);
                }
            }
            // Cursors move on even without rules, so a new rule judges new data only.
            let rules = data.rules.get(&g.org_id).map(Vec::as_slice).unwrap_or_default();
            let Some(samples) = news.remove(&g.id).filter(|s| !s.is_empty()) else { continue };
            self.deliveries.entry(g.id).or_default().arrived(now);
            let th = self.thresholds(store, g.org_id, now).await;
            let mut changes = Changes::default();
            for s in &samples {
                self.on_sample(g, s, &th, rules, &data, now, &mut changes);
            }
            // The no-data rules judge the newest sample.
            if let Some(newest) = samples.last() {
                self.last_sample.insert(g.id, (*newest).clone());
            }
            if changes.is_empty() {
                self.dirty_cursors.insert(g.id);
                continue;
            }
            let cursor = self.cursors.get(&g.id).cloned();
            self.commit(store, changes, cursor.into_iter().collect(), now, &mut report).await?;
            self.dirty_cursors.remove(&g.id);
            if report.reload {
                return Ok(report);
            }
        }

        // 2. No-data rules, reminders, silences that ended, rules gone: on the wall clock.
        let mut changes = Changes::default();
        for g in &gpus {
            let Some(rules) = data.rules.get(&g.org_id) else { continue };
            if !rules.iter().any(|r| r.no_data) {
                continue;
            }
            let th = self.thresholds(store, g.org_id, now).await;
            self.no_data(g, &th, rules, &data, now, ctx, &mut changes);
        }
        self.wall_clock(&data, now, &mut changes);
        if !changes.is_empty() {
            self.commit(store, changes, vec![], now, &mut report).await?;
            if report.reload {
                return Ok(report);
            }
        }

        // 3. Notification groups and digests.
        self.group_pass(store, &data, now, &mut report).await?;
        if report.reload {
            return Ok(report);
        }
        super::digest::run(ctx, &data.channels, now, &mut report).await?;

        // 4. Cursors of GPUs without transitions, now and then.
        if !self.dirty_cursors.is_empty() && (now - self.last_cursor_flush >= CURSOR_FLUSH_MS || report.more) {
            let list: Vec<GpuCursor> =
                self.dirty_cursors.iter().filter_map(|id| self.cursors.get(id).cloned()).collect();
            store.save_alert_cursors(&list, now).await?;
            self.dirty_cursors.clear();
            self.last_cursor_flush = now;
        }
        Ok(report)
    }

    async fn read_cycle_data(
        &mut self,
        ctx: &AlertsCtx,
        orgs: &HashSet<OrgId>,
        now: i64,
    ) -> Result<CycleData, StoreError> {
        let store = ctx.store.as_ref();
        let mut rules: HashMap<OrgId, Vec<Rule>> = HashMap::new();
        let mut enabled_rules = HashSet::new();
        for rec in store.all_alert_rules().await? {
            if !rec.rule.enabled {
                continue;
            }
            if let Some(rule) = Rule::compile(rec) {
                enabled_rules.insert(rule.rec.id);
                rules.entry(rule.rec.org_id).or_default().push(rule);
            }
        }
        let mut channels = HashMap::new();
        for org in orgs.iter().filter(|o| rules.contains_key(o)) {
            channels.insert(*org, store.notification_channels(*org).await?);
        }
        let mut silences: HashMap<OrgId, Vec<SilenceWindow>> = HashMap::new();
        for s in store.current_silences(now).await? {
            silences.entry(s.org_id).or_default().push(SilenceWindow {
                id: s.id,
                matchers: s.matchers,
                starts_at_ms: s.starts_at_ms,
                ends_at_ms: s.ends_at_ms,
            });
        }
        let teams = store
            .host_labels()
            .await?
            .into_iter()
            .filter_map(|(org, host, labels)| labels.get("team").cloned().map(|t| ((org, host), t)))
            .collect();
        let inhibitions = rules
            .iter()
            .map(|(org, list)| {
                let refs: Vec<(RuleRef<'_>, InhibitScope, Vec<Target>)> = list
                    .iter()
                    .map(|r| {
                        let targets = r.rec.rule.inhibits.iter().filter_map(|t| Target::parse(t).ok()).collect();
                        let scope = r.rec.rule.inhibit_scope;
                        let rule = RuleRef {
                            id: r.rec.id,
                            key: r.rec.builtin.as_deref(),
                            name: &r.rec.rule.name,
                            holds_in: &r.holds_in,
                        };
                        (rule, scope, targets)
                    })
                    .collect();
                (*org, inhibit::resolve(&refs))
            })
            .collect();
        Ok(CycleData {
            rules,
            enabled_rules,
            channels,
            silences,
            teams,
            public_url: ctx.public_url.clone(),
            inhibitions,
        })
    }

    /// New XID events, kept per GPU until the GPU's sample at or after them is evaluated.
    /// An event older than what was already evaluated on its GPU (late, or seen before a
    /// restart) is not counted again.
    async fn read_events(&mut self, store: &dyn Store, gpus: &[GpuBrief], oldest_ms: i64) -> Result<(), StoreError> {
        let ids: HashMap<(OrgId, &str), GpuId> =
            gpus.iter().map(|g| ((g.org_id, g.info.uuid.as_str()), g.id)).collect();
        loop {
            let events = store.gpu_events_after(self.last_event_id, EVENTS_PER_READ).await?;
            let Some(last) = events.last() else { return Ok(()) };
            self.last_event_id = last.id;
            for e in events.iter().filter(|e| e.kind == fleetlens_core::GpuEventKind::Xid.as_str()) {
                let Some(&gpu) = ids.get(&(e.org_id, e.gpu_uuid.as_str())) else { continue };
                if e.ts_ms < oldest_ms || self.cursors.get(&gpu).is_some_and(|c| e.ts_ms <= c.last_ts_ms) {
                    continue;
                }
                self.xids.entry(gpu).or_default().push(e.ts_ms);
            }
            if events.len() < EVENTS_PER_READ as usize {
                return Ok(());
            }
        }
    }

    /// XID errors of the GPU at or before `ts_ms` not counted yet (they are counted now).
    fn take_xids(&mut self, gpu: GpuId, ts_ms: i64) -> u32 {
        let Some(list) = self.xids.get_mut(&gpu) else { return 0 };
        let before = list.len();
        list.retain(|t| *t > ts_ms);
        let n = before - list.len();
        if list.is_empty() {
            self.xids.remove(&gpu);
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_sample(
        &mut self,
        g: &GpuBrief,
        s: &Sample,
        th: &Thresholds,
        rules: &[Rule],
        data: &CycleData,
        now: i64,
        changes: &mut Changes,
    ) {
        let state = classify(&WindowAggregate::from_samples([s]), th).state;
        let cursor = self.cursors.entry(g.id).or_insert_with(|| GpuCursor {
            gpu_id: g.id,
            org_id: g.org_id,
            last_ts_ms: s.ts_ms,
            state,
            state_since_ms: s.ts_ms,
            interval_ms: 0,
        });
        if s.ts_ms > cursor.last_ts_ms {
            let gap = s.ts_ms - cursor.last_ts_ms;
            if cursor.interval_ms <= 0 {
                cursor.interval_ms = gap;
            } else if gap < 5 * cursor.interval_ms {
                cursor.interval_ms = (3 * cursor.interval_ms + gap) / 4;
            }
            let was_offline = gap >= offline_limit_ms(cursor.interval_ms, th);
            if cursor.state != state || was_offline {
                cursor.state = state;
                cursor.state_since_ms = s.ts_ms;
            }
            cursor.last_ts_ms = s.ts_ms;
        }
        let duration = (s.ts_ms - cursor.state_since_ms).max(0) as f64 / 1000.0;
        let mut obs = observation(g, s, state, duration, data.team(g));
        obs.xid_errors = Some(self.take_xids(g.id, s.ts_ms));
        for rule in rules.iter().filter(|r| !r.no_data) {
            let matched = rule.cond.matches(&obs);
            self.apply(rule, g, &obs, matched, s.ts_ms, now, data, changes);
        }
    }

    /// Wall-clock evaluation of the no-data rules on one GPU.
    #[allow(clippy::too_many_arguments)]
    fn no_data(
        &mut self,
        g: &GpuBrief,
        th: &Thresholds,
        rules: &[Rule],
        data: &CycleData,
        now: i64,
        ctx: &AlertsCtx,
        changes: &mut Changes,
    ) {
        let interval = self.cursors.get(&g.id).map_or(0, |c| c.interval_ms);
        // Samples come in batches: between two deliveries the newest one ages by the agent's
        // flush interval, which is not an outage.
        let allowance = self.deliveries.get(&g.id).map_or(DEFAULT_DELIVERY_GAP_MS, Delivery::allowance_ms);
        // One offline rule with the dashboards (core::timeline): an unknown interval (0)
        // counts as the default.
        let limit = offline_limit_ms(interval, th) + allowance;
        let silent = now - g.info.last_seen_ms;
        if silent > ms(ctx.cfg.alert_offline_horizon) {
            return; // retired: leave its alerts as they are
        }
        if g.last_live_ms == 0 {
            // Only back-filled data so far (a replayed old trace): it never reported live, so
            // its silence since is not an outage.
            return;
        }
        let team = data.team(g);
        if is_silent(g.info.last_seen_ms, interval, now, th, allowance) {
            let since = g.info.last_seen_ms + limit;
            let obs = Observation {
                ts_ms: now,
                sample: None,
                state: WorkloadState::Offline,
                duration_in_state_s: (now - since).max(0) as f64 / 1000.0,
                host: &g.info.host,
                gpu_uuid: &g.info.uuid,
                gpu_name: g.info.name.as_deref(),
                gpu_index: g.info.gpu_index,
                team,
                xid_errors: None,
            };
            for rule in rules.iter().filter(|r| r.no_data) {
                let matched = rule.cond.matches(&obs);
                if matched && !self.open.contains_key(&(rule.rec.id, g.id)) {
                    // The outage began `limit` after the last sample.
                    self.apply(rule, g, &obs, true, since, now, data, changes);
                }
                self.apply(rule, g, &obs, matched, now, now, data, changes);
            }
        } else {
            // Reporting: the rule sees the newest sample (none known yet after a restart:
            // wait for the next one).
            let Some(s) = self.last_sample.get(&g.id).cloned() else { return };
            let cursor = self.cursors.get(&g.id);
            let state = cursor.map_or(WorkloadState::Active, |c| c.state);
            let since = cursor.map_or(s.ts_ms, |c| c.state_since_ms);
            let mut obs = observation(g, &s, state, (s.ts_ms - since).max(0) as f64 / 1000.0, team);
            obs.ts_ms = now;
            for rule in rules.iter().filter(|r| r.no_data) {
                let matched = rule.cond.matches(&obs);
                self.apply(rule, g, &obs, matched, now, now, data, changes);
            }
        }
    }

    /// Reminders, ended silences, and alerts whose rule is gone or disabled.
    fn wall_clock(&mut self, data: &CycleData, now: i64, changes: &mut Changes) {
        let inhibitors = self.current_inhibitors(data);
        let keys: Vec<Key> = self.open.keys().copied().collect();
        for key in keys {
            let Some(a) = self.open.get(&key) else { continue };
            if !data.enabled_rules.contains(&a.rule_id) {
                self.close_orphan(key, now, data, changes);
                continue;
            }
            let inhibited = inhibitors.get(&key).copied();
            if a.status != AlertStatus::Firing {
                if inhibited != a.inhibited_by {
                    // A pending alert shows what holds it back too.
                    self.edit_open(key, changes, |a| a.inhibited_by = inhibited);
                }
                continue;
            }
            let Some(rule) = data.rules.get(&a.org_id).and_then(|rs| rs.iter().find(|r| r.rec.id == a.rule_id)) else {
                continue;
            };
            let silenced = data.silence(a.org_id, &a.labels, now);
            if !a.notified_firing {
                // Silenced or inhibited when it fired; that has ended: notify now.
                let was_held = a.silenced_by.is_some() || a.inhibited_by.is_some();
                if silenced.is_none() && inhibited.is_none() && was_held {
                    let mut a = a.clone();
                    changes.origin.entry(key).or_insert(a.status);
                    a.silenced_by = None;
                    a.inhibited_by = None;
                    let notes = self.firing_notes(rule, &mut a, data, now);
                    push_notes(changes, key, notes);
                    changes.touch(key);
                    self.open.insert(key, a);
                } else if was_held && (silenced != a.silenced_by || inhibited != a.inhibited_by) {
                    self.edit_open(key, changes, |a| (a.silenced_by, a.inhibited_by) = (silenced, inhibited));
                }
                continue;
            }
            if silenced != a.silenced_by || inhibited != a.inhibited_by {
                // Notified already: the flags say whether its reminders are held back now.
                self.edit_open(key, changes, |a| (a.silenced_by, a.inhibited_by) = (silenced, inhibited));
            }
            let Some(a) = self.open.get(&key) else { continue };
            let repeat_ms = rule.rec.rule.repeat_interval_s.saturating_mul(1000);
            let last = a.last_notified_ms.or(a.fired_at_ms).unwrap_or(now);
            if silenced.is_some() || inhibited.is_some() || !repeat_due(last, repeat_ms, now) {
                continue;
            }
            let mut a = a.clone();
            changes.origin.entry(key).or_insert(a.status);
            a.repeat_seq += 1;
            a.last_notified_ms = Some(now);
            let d = AlertDetails::of(&a);
            let n = render::notification(&a, NotifyStatus::Firing, true, &data.public_url);
            let notes: Vec<NewNotification> = data
                .channels_by_id(a.org_id, &d.notified_channels)
                .into_iter()
                .map(|c| NewNotification {
                    channel_id: c.id,
                    kind: MessageKind::Repeat,
                    seq: a.repeat_seq,
                    payload: render::payload(c, &n, now, rule.rec.rule.repeat_interval_s),
                })
                .collect();
            push_notes(changes, key, (notes, vec![]));
            changes.touch(key);
            self.open.insert(key, a);
        }
    }

    /// Change the open alert `key` in place, as a write of this batch (which keeps the status
    /// it was stored with as its origin).
    fn edit_open(&mut self, key: Key, changes: &mut Changes, edit: impl FnOnce(&mut AlertRecord)) {
        let Some(a) = self.open.get_mut(&key) else { return };
        changes.origin.entry(key).or_insert(a.status);
        edit(a);
        changes.touch(key);
    }

    /// Resolve (or drop, if pending) an open alert whose rule was deleted or disabled.
    fn close_orphan(&mut self, key: Key, now: i64, data: &CycleData, changes: &mut Changes) {
        let Some(mut a) = self.open.remove(&key) else { return };
        let origin = changes.origin.remove(&key).unwrap_or(a.status);
        let (mut notify, suppressed) = changes.notes.remove(&key).unwrap_or_default();
        changes.touched_set.remove(&key);
        changes.touched.retain(|k| *k != key);
        if a.status == AlertStatus::Pending {
            if a.is_stored() {
                changes.list.push(AlertChange {
                    write: AlertWrite::Delete { id: a.id, from: origin },
                    notify: vec![],
                    suppressed: vec![],
                });
            }
            return;
        }
        let mut d = AlertDetails::of(&a);
        d.resolved_reason = Some("the rule was deleted or disabled".into());
        a.details = d.to_json();
        a.status = AlertStatus::Resolved;
        a.resolved_at_ms = Some(now.max(a.last_eval_ms));
        a.last_eval_ms = now.max(a.last_eval_ms);
        if a.notified_firing {
            let n = render::notification(&a, NotifyStatus::Resolved, false, &data.public_url);
            for c in data.channels_by_id(a.org_id, &d.notified_channels) {
                notify.push(NewNotification {
                    channel_id: c.id,
                    kind: MessageKind::Resolved,
                    seq: 0,
                    payload: render::payload(c, &n, now, 0),
                });
            }
        }
        self.resolved_events.push(a.clone());
        changes.list.push(AlertChange { write: AlertWrite::storing(a, origin), notify, suppressed });
    }

    /// One rule, one GPU, one observation at time `t`.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        rule: &Rule,
        g: &GpuBrief,
        obs: &Observation<'_>,
        matched: bool,
        t: i64,
        now: i64,
        data: &CycleData,
        changes: &mut Changes,
    ) {
        let key = (rule.rec.id, g.id);
        let existing = self.open.get(&key);
        let phase = existing.map_or(Phase::Inactive, phase_of);
        // Time never runs back for one alert (a no-data rule steps on the wall clock).
        let t = existing.map_or(t, |a| t.max(a.last_eval_ms));
        let (next, st) = step(phase, rule.timing, t, matched);
        match st {
            Step::Unchanged => {
                let Some(a) = self.open.get_mut(&key) else { return };
                a.last_eval_ms = t;
                // A pending alert shows the GPU as it is while it waits out `for`: its text
                // ("Offline for {duration_in_state_s} s") would otherwise read as when it began.
                // Once a minute at most, so a long `for` on many GPUs costs few writes. (A pending
                // alert is unchanged only while its condition holds: `obs` matched.)
                if a.status == AlertStatus::Pending && t - a.updated_ms >= PENDING_TEXT_REFRESH_MS {
                    let text = summary(rule, obs);
                    if text != a.summary {
                        changes.origin.entry(key).or_insert(a.status);
                        show_observation(a, rule, obs, text);
                        a.updated_ms = t;
                        changes.touch(key);
                    }
                }
            }
            Step::StillFiring => {
                if let (Some(a), Phase::Firing { last_match_ms, .. }) = (self.open.get_mut(&key), next) {
                    a.last_eval_ms = t;
                    a.last_match_ms = last_match_ms;
                    if rule.rec.rule.keep_firing_for_s > 0 {
                        changes.origin.entry(key).or_insert(a.status);
                        changes.touch(key);
                    }
                }
            }
            Step::Started => {
                let a = self.new_alert(rule, g, obs, t, data);
                self.open.insert(key, a);
                changes.touch(key);
            }
            Step::Fired => {
                let mut a = match self.open.remove(&key) {
                    Some(a) => {
                        changes.origin.entry(key).or_insert(a.status);
                        a
                    }
                    None => self.new_alert(rule, g, obs, t, data),
                };
                a.status = AlertStatus::Firing;
                a.fired_at_ms = Some(t);
                a.last_match_ms = t;
                a.last_eval_ms = t;
                show_observation(&mut a, rule, obs, summary(rule, obs));
                let notes = self.firing_notes(rule, &mut a, data, now);
                push_notes(changes, key, notes);
                self.open.insert(key, a);
                changes.touch(key);
            }
            Step::Cancelled => {
                if let Some(a) = self.open.remove(&key) {
                    let origin = changes.origin.remove(&key).unwrap_or(a.status);
                    changes.notes.remove(&key);
                    if a.is_stored() {
                        changes.list.push(AlertChange {
                            write: AlertWrite::Delete { id: a.id, from: origin },
                            notify: vec![],
                            suppressed: vec![],
                        });
                    }
                }
            }
            Step::Resolved => {
                let Some(mut a) = self.open.remove(&key) else { return };
                let origin = changes.origin.remove(&key).unwrap_or(a.status);
                let (mut notify, mut suppressed) = changes.notes.remove(&key).unwrap_or_default();
                a.status = AlertStatus::Resolved;
                a.resolved_at_ms = Some(t);
                a.last_eval_ms = t;
                let d = AlertDetails::of(&a);
                let channels = data.channels_by_id(a.org_id, &d.notified_channels);
                if a.notified_firing {
                    let n = render::notification(&a, NotifyStatus::Resolved, false, &data.public_url);
                    for c in channels {
                        notify.push(NewNotification {
                            channel_id: c.id,
                            kind: MessageKind::Resolved,
                            seq: 0,
                            payload: render::payload(c, &n, now, 0),
                        });
                    }
                } else if let Some(sid) = a.silenced_by {
                    for c in data.channels_for(&rule.rec) {
                        suppressed.push(NewSuppressed {
                            channel_id: c.id,
                            kind: MessageKind::Resolved,
                            silence_id: sid,
                        });
                    }
                }
                self.resolved_events.push(a.clone());
                changes.list.push(AlertChange { write: AlertWrite::storing(a, origin), notify, suppressed });
            }
        }
    }

    fn new_alert(&self, rule: &Rule, g: &GpuBrief, obs: &Observation<'_>, t: i64, data: &CycleData) -> AlertRecord {
        let subject = AlertSubject { host: &g.info.host, gpu_uuid: &g.info.uuid, team: data.team(g) };
        let mut labels = alert_labels(rule.rec.id, &rule.rec.rule, subject);
        // Who the GPU's processes belong to, when the agent could tell (the rule's own labels
        // win): Alertmanager can route on them, silences and Slack show them.
        for name in fleetlens_core::rules::fields::OWNER_FIELDS {
            if let fleetlens_core::rules::fields::Value::Text(v) = obs.value(name) {
                labels.entry(name.to_string()).or_insert_with(|| v.into_owned());
            }
        }
        let advice =
            if rule.rec.rule.advice.is_empty() { obs.state.advice().to_string() } else { rule.rec.rule.advice.clone() };
        let details = AlertDetails {
            condition: rule.rec.rule.condition.clone(),
            values: matched_values(rule.cond.fields(), obs),
            state: Some(obs.state),
            advice,
            gpu_name: g.info.name.clone(),
            gpu_index: g.info.gpu_index,
            team: data.team(g).map(str::to_string),
            notified_channels: vec![],
            repeat_interval_s: rule.rec.rule.repeat_interval_s,
            resolved_reason: None,
        };
        AlertRecord {
            id: AlertId(0),
            org_id: g.org_id,
            rule_id: rule.rec.id,
            gpu_id: g.id,
            gpu_uuid: g.info.uuid.clone(),
            host: g.info.host.clone(),
            status: AlertStatus::Pending,
            active_since_ms: t,
            fired_at_ms: None,
            resolved_at_ms: None,
            last_match_ms: t,
            last_eval_ms: t,
            rule_name: rule.rec.rule.name.clone(),
            severity: rule.rec.rule.severity,
            fingerprint: fingerprint(&labels),
            labels,
            summary: summary(rule, obs),
            details: details.to_json(),
            silenced_by: None,
            inhibited_by: None,
            notified_firing: false,
            last_notified_ms: None,
            repeat_seq: 0,
            updated_ms: t,
        }
    }

    /// The firing notifications of `a` (or, when a silence matches, the log lines that say
    /// they were held back).
    fn firing_notes(
        &self,
        rule: &Rule,
        a: &mut AlertRecord,
        data: &CycleData,
        now: i64,
    ) -> (Vec<NewNotification>, Vec<NewSuppressed>) {
        let channels = data.channels_for(&rule.rec);
        let mut d = AlertDetails::of(a);
        a.inhibited_by = self.inhibitor_of(data, a);
        if let Some(sid) = data.silence(a.org_id, &a.labels, now) {
            a.silenced_by = Some(sid);
            a.notified_firing = false;
            let suppressed = channels
                .iter()
                .map(|c| NewSuppressed { channel_id: c.id, kind: MessageKind::Firing, silence_id: sid })
                .collect();
            return (vec![], suppressed);
        }
        a.silenced_by = None;
        if a.inhibited_by.is_some() {
            // Another alert of the same problem speaks for it: nothing is sent (the wall clock
            // notifies it if the other one ends first).
            a.notified_firing = false;
            return (vec![], vec![]);
        }
        // Slack and webhook channels get grouped messages (the group pass); Alertmanager one
        // message per alert.
        let channels = data.alert_channels_for(&rule.rec);
        a.notified_firing = !channels.is_empty();
        a.last_notified_ms = Some(now);
        d.notified_channels = channels.iter().map(|c| c.id).collect();
        a.details = d.to_json();
        let n = render::notification(a, NotifyStatus::Firing, false, &data.public_url);
        let notes = channels
            .iter()
            .map(|c| NewNotification {
                channel_id: c.id,
                kind: MessageKind::Firing,
                seq: 0,
                payload: render::payload(c, &n, now, rule.rec.rule.repeat_interval_s),
            })
            .collect();
        (notes, vec![])
    }

    /// Write the gathered changes (and cursors) in one transaction and reconcile the cache.
    async fn commit(
        &mut self,
        store: &dyn Store,
        mut changes: Changes,
        cursors: Vec<GpuCursor>,
        now: i64,
        report: &mut Report,
    ) -> Result<(), StoreError> {
        for key in std::mem::take(&mut changes.touched) {
            let Some(a) = self.open.get(&key) else { continue };
            let (notify, suppressed) = changes.notes.remove(&key).unwrap_or_default();
            if !a.is_stored() {
                changes.opened.push((changes.list.len(), key));
            }
            let from = changes.origin.get(&key).copied().unwrap_or(a.status);
            changes.list.push(AlertChange { write: AlertWrite::storing(a.clone(), from), notify, suppressed });
        }
        let inserted_resolved: Vec<(usize, (RuleId, GpuId, i64))> = changes
            .list
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match &c.write {
                AlertWrite::Open(a) if a.status == AlertStatus::Resolved => {
                    Some((i, (a.rule_id, a.gpu_id, a.active_since_ms)))
                }
                _ => None,
            })
            .collect();
        let write = EvalWrite { now_ms: now, changes: changes.list, cursors };
        let outcome = store.apply_alert_changes(&write).await?;
        announce(store, &write.changes).await;
        report.enqueued += outcome.enqueued;
        if outcome.alert_ids.iter().any(Option::is_none) {
            report.reload = true;
            return Ok(());
        }
        for (index, key) in inserted_resolved {
            if let Some(Some(id)) = outcome.alert_ids.get(index) {
                self.resolved_ids.insert(key, *id);
            }
        }
        for (index, key) in changes.opened {
            if let (Some(a), Some(Some(id))) = (self.open.get_mut(&key), outcome.alert_ids.get(index)) {
                a.id = *id;
            }
        }
        Ok(())
    }
}

/// Tell the live streams of the organisations whose alerts were written (docs/API.md, "Live
/// stream"). A withdrawn pending alert names no organisation here: the streams' recheck finds it.
async fn announce(store: &dyn Store, changes: &[AlertChange]) {
    let orgs: std::collections::BTreeSet<OrgId> = changes
        .iter()
        .filter_map(|c| match &c.write {
            AlertWrite::Open(a) | AlertWrite::Update { alert: a, .. } => Some(a.org_id),
            AlertWrite::Delete { .. } => None,
        })
        .collect();
    for org in orgs {
        if let Err(e) = store.announce_change(org).await {
            tracing::warn!(error = %e, org = %org, "could not signal the live streams of an alert change");
        }
    }
}

impl Engine {
    /// The open alert that holds `a` back now (inhibition), by id (0 for one not stored yet:
    /// the wall clock puts its id in before long).
    fn inhibitor_of(&self, data: &CycleData, a: &AlertRecord) -> Option<AlertId> {
        let rules = data.inhibitions.get(&a.org_id).filter(|r| !r.is_empty())?;
        let others: Vec<&AlertRecord> = self
            .open
            .values()
            .filter(|o| o.org_id == a.org_id && rules.contains_key(&o.rule_id))
            .filter(|o| (o.rule_id, o.gpu_id) != (a.rule_id, a.gpu_id))
            .collect();
        let mut list: Vec<OpenAlert<'_>> = others.iter().enumerate().map(|(i, o)| open_ref(o, i as i64 + 1)).collect();
        list.push(open_ref(a, 0));
        let got = inhibit::inhibited_by(&list, rules);
        got.get(&0).and_then(|src| usize::try_from(*src - 1).ok()).and_then(|i| others.get(i)).map(|o| o.id)
    }

    /// For every open alert held back by another, the other's id.
    fn current_inhibitors(&self, data: &CycleData) -> HashMap<Key, AlertId> {
        let mut by_org: HashMap<OrgId, Vec<(&Key, &AlertRecord)>> = HashMap::new();
        for (k, a) in &self.open {
            if data.inhibitions.get(&a.org_id).is_some_and(|r| !r.is_empty()) {
                by_org.entry(a.org_id).or_default().push((k, a));
            }
        }
        let mut out = HashMap::new();
        for (org, list) in by_org {
            let Some(rules) = data.inhibitions.get(&org) else { continue };
            let refs: Vec<OpenAlert<'_>> = list.iter().enumerate().map(|(i, (_, a))| open_ref(a, i as i64)).collect();
            for (dst, src) in inhibit::inhibited_by(&refs, rules) {
                let (Ok(dst), Ok(src)) = (usize::try_from(dst), usize::try_from(src)) else { continue };
                out.insert(*list[dst].0, list[src].1.id);
            }
        }
        out
    }
}

/// A sample's observation, the GPU named by its registry row whether the sample was read back
/// from the database (which names it so) or judged from memory as its agent sent it.
fn observation<'a>(
    g: &'a GpuBrief,
    s: &'a Sample,
    state: WorkloadState,
    duration_in_state_s: f64,
    team: Option<&'a str>,
) -> Observation<'a> {
    Observation {
        gpu_uuid: &g.info.uuid,
        gpu_name: g.info.name.as_deref(),
        gpu_index: g.info.gpu_index,
        ..Observation::of_sample(s, state, duration_in_state_s, &g.info.host, team)
    }
}

fn open_ref(a: &AlertRecord, id: i64) -> OpenAlert<'_> {
    OpenAlert {
        id,
        rule_id: a.rule_id,
        gpu: &a.gpu_uuid,
        host: &a.host,
        job: a.labels.get("owner_job").map(String::as_str),
        firing: a.status == AlertStatus::Firing,
        active_since_ms: a.active_since_ms,
    }
}

/// Alertmanager channels get one message per alert (Alertmanager groups and inhibits by
/// itself); the others get grouped messages or digests.
pub(super) fn per_alert(c: &ChannelRecord) -> bool {
    c.kind == ChannelKind::Alertmanager
}

fn push_notes(changes: &mut Changes, key: Key, (notify, suppressed): (Vec<NewNotification>, Vec<NewSuppressed>)) {
    let entry = changes.notes.entry(key).or_default();
    entry.0.extend(notify);
    entry.1.extend(suppressed);
}

fn phase_of(a: &AlertRecord) -> Phase {
    match a.status {
        AlertStatus::Pending => Phase::Pending { active_since_ms: a.active_since_ms },
        AlertStatus::Firing => Phase::Firing {
            active_since_ms: a.active_since_ms,
            fired_at_ms: a.fired_at_ms.unwrap_or(a.active_since_ms),
            last_match_ms: a.last_match_ms,
        },
        AlertStatus::Resolved => Phase::Inactive,
    }
}

/// How often a pending alert's summary and values follow the GPU, at most.
const PENDING_TEXT_REFRESH_MS: i64 = 60_000;

/// GPU events read from the store at a time.
const EVENTS_PER_READ: i64 = 10_000;

/// The alert shows the GPU as `obs` saw it: its `summary` (already rendered from `obs`) and
/// the condition's values and the state in its details.
fn show_observation(a: &mut AlertRecord, rule: &Rule, obs: &Observation<'_>, summary: String) {
    let mut d = AlertDetails::of(a);
    d.values = matched_values(rule.cond.fields(), obs);
    d.state = Some(obs.state);
    a.details = d.to_json();
    a.summary = summary;
}

/// The rule's description with the observation's values, or the condition and the values.
fn summary(rule: &Rule, obs: &Observation<'_>) -> String {
    if !rule.rec.rule.description.trim().is_empty() {
        return render_template(&rule.rec.rule.description, obs);
    }
    let values: Vec<String> =
        matched_values(rule.cond.fields(), obs).into_iter().map(|v| format!("{} = {}", v.field, v.value)).collect();
    format!("{} ({})", rule.rec.rule.condition, values.join(", "))
}
