//! Ending job runs and their report cards: the leader-only job that finds runs whose processes
//! left their GPUs (or that a client ended), computes each card once
//! ([`fleetlens_core::jobcard`]), stores it and, when a report route matches and the card
//! passes its bar, enqueues one message to the owner's channel in the same transaction.

use std::collections::{HashMap, HashSet};

use fleetlens_core::jobcard::{CardGpuInput, CardInput, JobCard, card_text, job_card, local_run_key, worth_sending};
use fleetlens_core::{ChannelKind, MessageKind, OwnerGroup, OwnerKey, Resolution, TeamId};
use fleetlens_store::actions::{FinishedRun, JobRunRecord, ReportRoute};
use fleetlens_store::alerts::{ChannelRecord, NewNotification};
use fleetlens_store::{GpuId, GpuRecord, OrgId, Store};
use serde_json::json;

use crate::error::ApiResult;
use crate::state::AppState;
use crate::time::now_ms;

const MINUTE_MS: i64 = 60_000;
/// How long after a requested end its card waits for the samples still on their way (an
/// agent sends every 5 s by default; the tracker writes every 2 s).
const REQUESTED_END_WAIT_MS: i64 = 15_000;

fn floor_minute(ms: i64) -> i64 {
    ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// One pass: end every run that is over. Returns the runs ended.
pub async fn scan(state: &AppState) -> ApiResult<usize> {
    let store = state.store.as_ref();
    let end_after = crate::alerts::ms(state.config.actions.job_end_after);
    let open = store.open_job_runs().await?;
    let mut by_org: HashMap<OrgId, Vec<JobRunRecord>> = HashMap::new();
    for r in open {
        by_org.entry(r.org_id).or_default().push(r);
    }
    let mut ended = 0;
    for (org, runs) in by_org {
        let gpus = store.gpu_identities(org).await?;
        let last_seen: HashMap<&str, i64> = gpus.iter().map(|g| (g.info.uuid.as_str(), g.info.last_seen_ms)).collect();
        for run in runs {
            let (to_ms, reason) = match run.end_requested_ms {
                // Samples up to the end may still be on their way (the agent's flush, the
                // tracker's): wait a little past it before the card is computed.
                Some(at) if now_ms() < at + end_after.min(REQUESTED_END_WAIT_MS) => continue,
                Some(at) => (at.min(run.last_ms).max(run.first_ms), "requested"),
                None => {
                    // Every GPU of the run reported for `end_after` beyond its last sighting…
                    let past = run
                        .gpu_uuids
                        .iter()
                        .all(|u| last_seen.get(u.as_str()).is_some_and(|t| *t >= run.last_ms + end_after));
                    if !past || !listed_without(store, org, &gpus, &run, end_after).await? {
                        continue;
                    }
                    (run.last_ms, "left_gpus")
                }
            };
            if finish(state, org, &gpus, &run, to_ms, reason).await? {
                ended += 1;
            }
        }
    }
    if ended > 0 {
        state.alerts.wake_outbox();
    }
    Ok(ended)
}

/// …and listed its processes, without the run, after it: a GPU whose process list was not
/// read tells nothing, so the run stays open.
async fn listed_without(
    store: &dyn Store,
    org: OrgId,
    gpus: &[GpuRecord],
    run: &JobRunRecord,
    end_after: i64,
) -> ApiResult<bool> {
    let ids: HashMap<GpuId, &str> =
        gpus.iter().filter(|g| run.gpu_uuids.contains(&g.info.uuid)).map(|g| (g.id, g.info.uuid.as_str())).collect();
    let run_gpus: Vec<GpuId> = ids.keys().copied().collect();
    let mine = store.process_lists(org, Some(&run_gpus), run.last_ms + 1, run.last_ms + end_after + MINUTE_MS).await?;
    // Samples after the last sighting that still list the run: sightings not written yet
    // (a back-filled batch arrives faster than the tracker's flush).
    let local = local_run_key(&run.run_key);
    if mine.iter().any(|l| has_run(l, &local)) {
        return Ok(false);
    }
    let listed: HashSet<&str> =
        mine.iter().filter(|l| l.processes.is_some()).filter_map(|l| ids.get(&l.gpu_id).copied()).collect();
    Ok(run.gpu_uuids.iter().all(|u| listed.contains(u.as_str())))
}

/// Compute, store and route the card of a run that ended at `to_ms`.
async fn finish(
    state: &AppState,
    org: OrgId,
    gpus: &[GpuRecord],
    run: &JobRunRecord,
    to_ms: i64,
    reason: &str,
) -> ApiResult<bool> {
    let store = state.store.as_ref();
    let card = compute_card(store, org, gpus, run, to_ms).await?;
    let team_id = {
        let teams = store.gpu_teams(org).await?;
        run.gpu_uuids.iter().find_map(|u| teams.iter().find(|t| &t.uuid == u).and_then(|t| t.team_id))
    };
    let routes = store.report_routes(org).await?;
    let mut message = None;
    if let Some(route) = route_for(&routes, team_id, run.owner.user.as_deref())
        && worth_sending(&card, route.route.min_gpu_hours, route.route.min_waste_pct)
        && let Some(channel) = store.notification_channel(org, route.route.channel_id).await?
    {
        let payload = payload(&channel, run, &card, &state.alerts.ctx().public_url);
        message = payload.map(|payload| NewNotification {
            channel_id: channel.id,
            kind: MessageKind::JobReport,
            seq: run.id.get(),
            payload,
        });
    }
    let card_json = serde_json::to_string(&card).expect("a card serialises");
    let done = FinishedRun { ended_ms: to_ms, reason, team_id, card: &card_json, notify: message.as_ref() };
    let finished = store.finish_job_run(org, run.id, &done, now_ms()).await?;
    if finished {
        tracing::info!(
            run = run.id.get(),
            key = run.run_key,
            reason,
            gpu_hours = card.gpu_hours,
            sent = message.is_some(),
            "job run ended"
        );
    }
    Ok(finished)
}

/// The most specific route for a team's owner: owner and team, owner, team, then anyone.
pub fn route_for<'a>(routes: &'a [ReportRoute], team: Option<TeamId>, owner: Option<&str>) -> Option<&'a ReportRoute> {
    let score = |r: &ReportRoute| -> Option<u8> {
        let owner_ok = match &r.route.owner {
            None => Some(0),
            Some(o) => (Some(o.as_str()) == owner).then_some(2),
        }?;
        let team_ok = match r.route.team_id {
            None => Some(0),
            Some(t) => (Some(t) == team).then_some(1),
        }?;
        Some(owner_ok + team_ok)
    };
    routes
        .iter()
        .filter_map(|r| score(r).map(|s| (s, r)))
        .max_by_key(|(s, r)| (*s, std::cmp::Reverse(r.id)))
        .map(|(_, r)| r)
}

/// The run's share of its GPUs' minutes in `[first_ms, to_ms]`, and its card.
pub async fn compute_card(
    store: &dyn Store,
    org: OrgId,
    gpus: &[GpuRecord],
    run: &JobRunRecord,
    to_ms: i64,
) -> ApiResult<JobCard> {
    let from = floor_minute(run.first_ms);
    let end = floor_minute(to_ms) + MINUTE_MS;
    let mine: Vec<GpuRecord> = gpus.iter().filter(|g| run.gpu_uuids.contains(&g.info.uuid)).cloned().collect();
    // The run's GPUs only: the organisation's minutes over a long job are every GPU's.
    let run_gpus: Vec<GpuId> = mine.iter().map(|g| g.id).collect();
    let minutes = store.credits(org, Some(&run_gpus), Resolution::Minute, from, end).await?;
    let lists = store.process_lists(org, Some(&run_gpus), from, end).await?;
    let credits = crate::analytics::owners::owner_credits(&mine, &minutes, &lists, &OwnerKey::Run, from, end);
    let local = local_run_key(&run.run_key);
    let me = OwnerGroup::Owner(local.clone());
    let prices = crate::analytics::prices(store, org).await?;
    let th = crate::analytics::thresholds(store, org).await?;
    let mut inputs = Vec::new();
    let mut sm_minutes = Vec::new();
    for g in &mine {
        let credit = credits.get(&me).and_then(|c| c.get(&g.id)).copied().unwrap_or_default();
        let shared = credits.iter().any(|(group, per)| {
            matches!(group, OwnerGroup::Owner(k) if *k != local) && per.get(&g.id).is_some_and(|c| !c.is_zero())
        });
        // The run's own memory: the most its processes held at once.
        let peak_own = lists
            .iter()
            .filter(|l| l.gpu_id == g.id)
            .filter_map(|l| l.processes.as_ref())
            .filter_map(|procs| {
                let own: Vec<i64> = procs
                    .iter()
                    .filter(|p| fleetlens_core::run_key(p).as_deref() == Some(local.as_str()))
                    .filter_map(|p| p.used_bytes)
                    .collect();
                (!own.is_empty()).then(|| own.iter().sum::<i64>())
            })
            .max();
        // DRAM is not in credits: the minute rollups' means, over the minutes the run was there.
        let series = store.series(org, g.id, Resolution::Minute, from, end).await?;
        let my_minutes: HashSet<i64> = lists
            .iter()
            .filter(|l| l.gpu_id == g.id && has_run(l, &local))
            .map(|l| floor_minute(l.minute_ms))
            .collect();
        let (mut dram_s, mut dram_cov, mut peak_device) = (0.0, 0.0, None::<i64>);
        let mut present_s = 0.0;
        for row in series.iter().filter(|r| my_minutes.contains(&r.bucket_ms)) {
            present_s += 60.0;
            if row.sm_active_pct_count > 0 {
                sm_minutes.push(row.sm_active_pct_sum / row.sm_active_pct_count as f64);
            }
            if row.dram_active_pct_count > 0 {
                let secs = 60.0;
                dram_s += row.dram_active_pct_sum / row.dram_active_pct_count as f64 * secs;
                dram_cov += secs;
            }
            if let Some(m) = row.mem_used_bytes_max {
                peak_device = Some(peak_device.map_or(m as i64, |p| p.max(m as i64)));
            }
        }
        inputs.push(CardGpuInput {
            uuid: g.info.uuid.clone(),
            name: g.info.name.clone(),
            mem_total_bytes: g.info.mem_total_bytes,
            credit,
            peak_mem_bytes: peak_own.or(peak_device),
            dram_pct_s: dram_s,
            dram_covered_s: dram_cov,
            shared,
            present_s,
        });
    }
    let mfu = run_mfu(store, org, gpus, run, from, end).await?;
    let p95_sm_active_pct = fleetlens_core::p95(&sm_minutes);
    Ok(job_card(&CardInput { from_ms: run.first_ms, to_ms, gpus: inputs, mfu, p95_sm_active_pct }, &prices, &th))
}

fn has_run(l: &fleetlens_store::ProcessList, local: &str) -> bool {
    l.processes.iter().flatten().any(|p| fleetlens_core::run_key(p).as_deref() == Some(local))
}

/// MFU of the throughput reports (`POST /jobs`) that share a GPU and time with the run,
/// weighted by their overlap with it.
async fn run_mfu(
    store: &dyn Store,
    org: OrgId,
    gpus: &[GpuRecord],
    run: &JobRunRecord,
    from: i64,
    end: i64,
) -> ApiResult<Option<f64>> {
    let by_uuid = crate::analytics::mfu::gpus_by_uuid(gpus);
    let (mut sum, mut weight) = (0.0, 0.0);
    for j in store.jobs(org, from, end).await? {
        if !j.report.gpu_uuids.iter().any(|u| run.gpu_uuids.contains(u)) {
            continue;
        }
        let overlap = (j.report.to_ms.min(end) - j.report.from_ms.max(from)).max(0) as f64;
        if let Some(m) = crate::analytics::mfu::job_mfu(&j.report, &by_uuid)
            && overlap > 0.0
        {
            sum += m * overlap;
            weight += overlap;
        }
    }
    Ok((weight > 0.0).then(|| sum / weight))
}

/// Who a run belongs to, in words: `alice · ml/nb-alice`.
pub fn owner_text(run: &JobRunRecord) -> String {
    let o = &run.owner;
    let mut parts: Vec<String> = Vec::new();
    if let Some(u) = &o.user {
        parts.push(u.clone());
    }
    match (&o.namespace, &o.pod_name) {
        (Some(ns), Some(p)) => parts.push(format!("{ns}/{p}")),
        (None, Some(p)) => parts.push(p.clone()),
        _ => {}
    }
    match (&o.job_id, &o.job_kind) {
        (Some(j), Some(kind)) => parts.push(format!("{kind} {j}")),
        (Some(j), None) => parts.push(format!("Slurm job {j}")),
        _ => {}
    }
    if let Some(team) = &o.team {
        parts.push(format!("team {team}"));
    }
    if parts.is_empty() { "unknown owner".into() } else { parts.join(" · ") }
}

/// The message body for a channel: Slack blocks, or the JSON card for a webhook. `None` for
/// an Alertmanager channel (cards are not alerts).
pub fn payload(channel: &ChannelRecord, run: &JobRunRecord, card: &JobCard, public_url: &str) -> Option<String> {
    let title = format!("Job {} ({}) ended on {}", run.run_key, owner_text(run), run.host);
    let text = card_text(&title, card);
    let url = format!("{public_url}/api/v1/jobs/{}/report", run.id);
    let body = match channel.kind {
        ChannelKind::Alertmanager => return None,
        ChannelKind::Slack => {
            let fallback: String = text.chars().take(2900).collect();
            let mut lines = text.lines().skip(1);
            let figures: String = lines.by_ref().take(2).collect::<Vec<_>>().join("\n");
            let hints: String = lines.collect::<Vec<_>>().join("\n");
            let mut blocks = vec![
                json!({"type": "header", "text": {"type": "plain_text", "text": title.chars().take(150).collect::<String>()}}),
                json!({"type": "section", "text": {"type": "mrkdwn", "text": figures.chars().take(2900).collect::<String>()}}),
            ];
            if !hints.is_empty() {
                blocks.push(
                    json!({"type": "section", "text": {"type": "mrkdwn", "text": hints.chars().take(2900).collect::<String>()}}),
                );
            }
            json!({"text": fallback, "blocks": blocks})
        }
        ChannelKind::Webhook => json!({
            "type": "fleetlens.job_report",
            "version": 1,
            "run": {
                "id": run.id,
                "key": run.run_key,
                "host": run.host,
                "owner": run.owner,
                "gpus": run.gpu_uuids,
                "first_ms": run.first_ms,
                "last_ms": run.last_ms,
            },
            "card": card,
            "text": text,
            "url": url,
        }),
    };
    Some(body.to_string())
}
