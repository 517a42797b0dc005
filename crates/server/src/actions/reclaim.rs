//! The idle-reclaim engine (leader only): follows every GPU's newest samples, and for each
//! enabled policy decides the next step of each GPU's reclaim ([`fleetlens_core::reclaim`]):
//! notice, action (webhook, or a kill command for the host's agent), or cancellation. Every
//! step is logged with the money the GPU had held in the state by then.

use std::collections::HashMap;

use fleetlens_core::jobcard::{global_run_key, run_key};
use fleetlens_core::reclaim::{
    ReclaimAction, ReclaimCase, ReclaimLogLine, ReclaimLogStep, ReclaimProgress, ReclaimStatus, ReclaimStep,
    ReclaimTiming, ReclaimView, next_step,
};
use fleetlens_core::{
    AgentCommandId, ChannelKind, GpuProcess, MessageKind, PriceTable, ProcessOwner, ReclaimId, ReclaimPolicyId,
    Thresholds, WindowAggregate, WorkloadState, classify,
};
use fleetlens_store::alerts::NewNotification;
use fleetlens_store::reclaim::{AgentCommand, RECLAIM_ID_TOKEN, ReclaimPolicyRecord, ReclaimRecord, ReclaimWrite};
use fleetlens_store::{GpuId, GpuRecord, OrgId};
use serde_json::json;

use crate::error::ApiResult;
use crate::state::AppState;
use crate::time::now_ms;

/// The leader job's name.
pub const RECLAIM: &str = "reclaim";
/// A GPU with no sample this recent has an unknown state: nothing is done to it.
pub const FRESH_MS: i64 = 60_000;
/// Samples read per pass at most.
const FEED_LIMIT: u32 = 50_000;

/// One GPU as the engine follows it.
#[derive(Debug, Clone)]
struct Followed {
    last_ts_ms: i64,
    state: WorkloadState,
    since_ms: i64,
    processes: Option<Vec<GpuProcess>>,
}

/// The engine's memory: per GPU, its newest sample's state and since when it holds.
#[derive(Debug, Default)]
pub struct ReclaimEngine {
    gpus: HashMap<GpuId, Followed>,
    /// (policy, GPU, PID) acted on: not noticed again (a process the action did not end, or
    /// a replayed list, would otherwise be acted on every `for + grace`).
    acted: std::collections::HashSet<(ReclaimPolicyId, String, i64)>,
}

/// The target of a reclaim on a GPU: its first process with an owner.
struct Target {
    pid: i64,
    run_key: String,
    owner: ProcessOwner,
}

fn target(host: &str, procs: Option<&[GpuProcess]>) -> Option<Target> {
    procs?.iter().find_map(|p| {
        let local = run_key(p)?;
        let mut owner = p.owner.clone().unwrap_or_default();
        if owner.user.is_none() {
            owner.user = p.user.clone().or_else(|| owner.job_user.clone());
        }
        Some(Target { pid: i64::from(p.pid), run_key: global_run_key(host, &local), owner })
    })
}

fn log(step: ReclaimLogStep, actor: &str, dollars_held: Option<f64>, detail: String, now: i64) -> ReclaimLogLine {
    ReclaimLogLine { step, actor: actor.into(), dollars_held, at_ms: now, detail }
}

impl ReclaimEngine {
    /// Read the new samples of the organisations' GPUs and update their states.
    async fn follow(
        &mut self,
        state: &AppState,
        gpus: &[GpuRecord],
        th: &Thresholds,
        lookback_ms: i64,
    ) -> ApiResult<()> {
        let now = now_ms();
        let positions: Vec<(GpuId, i64)> =
            gpus.iter().map(|g| (g.id, self.gpus.get(&g.id).map_or(now - lookback_ms, |f| f.last_ts_ms + 1))).collect();
        if positions.is_empty() {
            return Ok(());
        }
        for (gpu_id, s) in state.store.samples_since(&positions, FEED_LIMIT).await? {
            let st = classify(&WindowAggregate::from_samples([&s]), th).state;
            let f = self.gpus.entry(gpu_id).or_insert(Followed {
                last_ts_ms: s.ts_ms,
                state: st,
                since_ms: s.ts_ms,
                processes: None,
            });
            // A silence longer than the freshness bar breaks the state's run.
            if st != f.state || s.ts_ms - f.last_ts_ms > FRESH_MS {
                f.state = st;
                f.since_ms = s.ts_ms;
            }
            f.last_ts_ms = f.last_ts_ms.max(s.ts_ms);
            f.processes = s.processes;
        }
        Ok(())
    }

    /// One pass over every enabled policy.
    pub async fn pass(&mut self, state: &AppState) -> ApiResult<()> {
        let store = state.store.as_ref();
        let policies = store.enabled_reclaim_policies().await?;
        if policies.is_empty() {
            return Ok(());
        }
        let open = store.open_reclaims().await?;
        let mut by_org: HashMap<OrgId, Vec<ReclaimPolicyRecord>> = HashMap::new();
        for p in policies {
            by_org.entry(p.org_id).or_default().push(p);
        }
        let mut sent = false;
        for (org, policies) in by_org {
            let th = crate::analytics::thresholds(store, org).await?;
            let prices = crate::analytics::prices(store, org).await?;
            let gpus = store.gpu_identities(org).await?;
            let timings: Vec<ReclaimTiming> = policies.iter().map(|p| p.policy.timing()).collect();
            let lookback = timings.iter().map(|t| t.for_ms + t.grace_ms).max().unwrap_or(0) + 10 * 60_000;
            self.follow(state, &gpus, &th, lookback.min(86_400_000)).await?;
            for (p, timing) in policies.iter().zip(&timings) {
                for g in &gpus {
                    let existing = open.iter().find(|r| r.case.policy_id == p.id && r.case.gpu_uuid == g.info.uuid);
                    sent |= self.decide(state, org, p, timing, g, existing, &prices).await?;
                }
            }
        }
        if sent {
            state.alerts.wake_outbox();
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn decide(
        &mut self,
        state: &AppState,
        org: OrgId,
        p: &ReclaimPolicyRecord,
        timing: &ReclaimTiming,
        g: &GpuRecord,
        existing: Option<&ReclaimRecord>,
        prices: &PriceTable,
    ) -> ApiResult<bool> {
        let now = now_ms();
        let followed = self.gpus.get(&g.id);
        let fresh = followed.filter(|f| now - f.last_ts_ms <= FRESH_MS);
        let tgt = fresh.and_then(|f| target(&g.info.host, f.processes.as_deref()));
        // The process must still be the one noticed: same PID, same run, same user.
        let same_target = match (existing, &tgt) {
            (Some(r), Some(t)) => {
                r.case.pid == t.pid && r.case.run_key == t.run_key && r.case.owner.user == t.owner.user
            }
            (None, _) => true,
            (Some(_), None) => false,
        };
        let view = ReclaimView {
            state: fresh.map(|f| f.state),
            state_since_ms: fresh.map_or(0, |f| f.since_ms),
            state_until_ms: fresh.map_or(0, |f| f.last_ts_ms),
            owned_target: tgt.is_some() && same_target,
        };
        let progress = ReclaimProgress {
            noticed_ms: existing.map(|r| r.case.noticed_ms),
            snoozed_until_ms: existing.and_then(|r| r.case.snoozed_until_ms),
        };
        let held = fresh.map_or(0, |f| f.last_ts_ms - f.since_ms);
        let dollars = g.info.name.as_deref().and_then(|n| prices.price_for(n)).map(|price| price * held as f64 / 3.6e6);
        let held_text = format!(
            "{} for {}",
            timing.state,
            humantime::format_duration(std::time::Duration::from_secs((held / 1000).max(0) as u64))
        );
        let store = state.store.as_ref();
        match next_step(timing, &view, &progress, now) {
            ReclaimStep::Wait => Ok(false),
            ReclaimStep::Notice => {
                let Some(t) = tgt else { return Ok(false) };
                if self.acted.contains(&(p.id, g.info.uuid.clone(), t.pid)) {
                    return Ok(false);
                }
                let record = ReclaimRecord {
                    id: ReclaimId(0),
                    org_id: org,
                    case: ReclaimCase {
                        policy_id: p.id,
                        gpu_uuid: g.info.uuid.clone(),
                        host: g.info.host.clone(),
                        run_key: t.run_key.clone(),
                        pid: t.pid,
                        owner: t.owner.clone(),
                        state_since_ms: view.state_since_ms,
                        noticed_ms: now,
                        snoozed_until_ms: None,
                        acted_ms: None,
                        closed_ms: None,
                        status: ReclaimStatus::Noticed,
                    },
                    updated_ms: now,
                };
                let channel = notice_channel(state, org, p, &t.owner).await?;
                let message = channel.map(|c| NewNotification {
                    channel_id: c.id,
                    kind: MessageKind::ReclaimNotice,
                    seq: now,
                    payload: message_payload(c.kind, "notice", p, &record, dollars, now + timing.grace_ms, state),
                });
                let entry = log(
                    ReclaimLogStep::Notice,
                    "fleetlens",
                    dollars,
                    format!(
                        "{held_text}; {} of pid {} ({}) in {}",
                        p.policy.action,
                        t.pid,
                        t.run_key,
                        humantime::format_duration(std::time::Duration::from_secs(p.policy.grace_s.max(0) as u64))
                    ),
                    now,
                );
                let w = ReclaimWrite { log: Some(&entry), notify: message.iter().collect(), command: None };
                Ok(store.start_reclaim(&record, &w, now).await?.is_some() && message.is_some())
            }
            ReclaimStep::Act => {
                let Some(r) = existing else { return Ok(false) };
                self.acted.insert((p.id, r.case.gpu_uuid.clone(), r.case.pid));
                let mut done = r.clone();
                done.case.status = ReclaimStatus::Acted;
                done.case.acted_ms = Some(now);
                done.case.closed_ms = Some(now);
                let (entry, message, command);
                if p.policy.action == ReclaimAction::AgentKill {
                    let user = r.case.owner.user.clone().unwrap_or_default();
                    command = Some(AgentCommand {
                        id: AgentCommandId(0),
                        org_id: org,
                        host: r.case.host.clone(),
                        reclaim_id: r.id,
                        gpu_uuid: r.case.gpu_uuid.clone(),
                        pid: r.case.pid,
                        owner_user: user.clone(),
                        created_ms: now,
                        taken_ms: None,
                        done_ms: None,
                        result: None,
                    });
                    message = None;
                    entry = log(
                        ReclaimLogStep::KillQueued,
                        "fleetlens",
                        dollars,
                        format!(
                            "{held_text}; SIGTERM to pid {} of {user} on {} queued for its agent",
                            r.case.pid, r.case.host
                        ),
                        now,
                    );
                } else {
                    command = None;
                    let channel = match p.policy.action_channel_id {
                        Some(id) => store.notification_channel(org, id).await?,
                        None => None,
                    };
                    message = channel.map(|c| NewNotification {
                        channel_id: c.id,
                        kind: MessageKind::ReclaimAction,
                        seq: now,
                        payload: message_payload(c.kind, "action", p, r, dollars, now, state),
                    });
                    entry = log(
                        ReclaimLogStep::ActionWebhook,
                        "fleetlens",
                        dollars,
                        format!("{held_text}; webhook with pid {} ({}) sent", r.case.pid, r.case.run_key),
                        now,
                    );
                }
                let w = ReclaimWrite { log: Some(&entry), notify: message.iter().collect(), command: command.as_ref() };
                Ok(store.update_reclaim(&done, &w, now).await? && message.is_some())
            }
            ReclaimStep::Cancel => {
                let Some(r) = existing else { return Ok(false) };
                let why = match fresh {
                    None => "the GPU's state is unknown (no recent sample)".to_string(),
                    Some(f) if f.state != timing.state => format!("the GPU is {} now", f.state),
                    Some(_) if tgt.is_none() => "no process with an owner is on the GPU".to_string(),
                    Some(_) => "the process on the GPU is not the one noticed".to_string(),
                };
                let mut done = r.clone();
                done.case.status = ReclaimStatus::Cancelled;
                done.case.closed_ms = Some(now);
                let entry = log(ReclaimLogStep::Cancelled, "fleetlens", dollars, why, now);
                let w = ReclaimWrite { log: Some(&entry), ..Default::default() };
                store.update_reclaim(&done, &w, now).await?;
                Ok(false)
            }
        }
    }
}

/// The policy's notice channel, else the owner's report route's channel.
async fn notice_channel(
    state: &AppState,
    org: OrgId,
    p: &ReclaimPolicyRecord,
    owner: &ProcessOwner,
) -> ApiResult<Option<fleetlens_store::alerts::ChannelRecord>> {
    let store = state.store.as_ref();
    let id = match p.policy.notice_channel_id {
        Some(id) => Some(id),
        None => {
            let routes = store.report_routes(org).await?;
            super::cards::route_for(&routes, None, owner.user.as_deref()).map(|r| r.route.channel_id)
        }
    };
    Ok(match id {
        Some(id) => store.notification_channel(org, id).await?,
        None => None,
    })
}

/// A notice or action message: Slack text, or JSON for the site's automation.
fn message_payload(
    kind: ChannelKind,
    what: &str,
    p: &ReclaimPolicyRecord,
    r: &ReclaimRecord,
    dollars: Option<f64>,
    action_at_ms: i64,
    state: &AppState,
) -> String {
    let base = &state.alerts.ctx().public_url;
    let snooze = format!("{base}/api/v1/reclaims/{RECLAIM_ID_TOKEN}/snooze");
    let money = dollars.map_or_else(|| "an unknown amount".to_string(), |d| format!("${d:.2}"));
    let who = r.case.owner.user.clone().unwrap_or_else(|| "unknown".into());
    let text = if what == "notice" {
        format!(
            "Fleetlens: GPU {} on {} held {} by {who} (pid {}, {}) — {money} so far. Policy “{}” will {} in {} s. Snooze: POST {snooze}",
            r.case.gpu_uuid,
            r.case.host,
            p.policy.state,
            r.case.pid,
            r.case.run_key,
            p.policy.name,
            if p.policy.action == ReclaimAction::AgentKill { "stop the process (SIGTERM)" } else { "reclaim it" },
            p.policy.grace_s
        )
    } else {
        format!(
            "Fleetlens: policy “{}” reclaims GPU {} on {} from {who} (pid {}, {}); {money} held.",
            p.policy.name, r.case.gpu_uuid, r.case.host, r.case.pid, r.case.run_key
        )
    };
    let body = if kind == ChannelKind::Slack {
        json!({"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]})
    } else {
        json!({
            "type": format!("fleetlens.reclaim_{what}"),
            "version": 1,
            "policy": {"id": p.id, "name": p.policy.name, "state": p.policy.state, "for_s": p.policy.for_s, "grace_s": p.policy.grace_s, "action": p.policy.action},
            "gpu": r.case.gpu_uuid,
            "host": r.case.host,
            "owner": r.case.owner,
            "target": {
                "pid": r.case.pid,
                "run_key": r.case.run_key,
                "container_id": r.case.owner.container_id,
                "pod": r.case.owner.pod_name.as_ref().map(|n| match &r.case.owner.namespace { Some(ns) => format!("{ns}/{n}"), None => n.clone() }),
                "slurm_job": r.case.owner.job_id,
            },
            "state_since_ms": r.case.state_since_ms,
            "dollars_held": dollars,
            "action_at_ms": action_at_ms,
            "snooze_url": snooze,
            "text": text,
        })
    };
    body.to_string()
}

/// Run a pass every `--job-scan-interval` on the replica that leads the job.
pub async fn reclaim_loop(state: AppState) {
    let interval = state.config.actions.job_scan_interval.max(std::time::Duration::from_millis(100));
    let store = state.store.clone();
    let engine = tokio::sync::Mutex::new(ReclaimEngine::default());
    crate::jobs::leader_loop(store.as_ref(), RECLAIM, interval, interval, || async {
        match engine.lock().await.pass(&state).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "reclaim: pass failed; will retry");
                false
            }
        }
    })
    .await
}
