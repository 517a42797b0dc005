//! Idle-reclaim policies (docs/ACTIONS.md): policies, their dry run over the past week, the
//! reclaims and their step log, snoozes, and the kill commands agents of opted-in hosts poll.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use fleetlens_api::reclaim::{
    AgentCommand, CommandQuery, CommandResult, DryRun, DryRunItem, DryRunQuery, Reclaim, ReclaimPolicy,
    ReclaimStepView, SnoozeRequest,
};
use fleetlens_core::reclaim::{ReclaimAction, ReclaimLogLine, ReclaimLogStep, ReclaimPolicySpec, dry_run};
use fleetlens_core::{AgentCommandId, ChannelId, ChannelKind, ReclaimId, ReclaimPolicyId, Resolution, WorkloadState};
use fleetlens_store::Scope;
use fleetlens_store::reclaim::{ReclaimLogEntry, ReclaimPolicyRecord, ReclaimRecord};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, JsonBody};
use crate::state::AppState;
use crate::time::{now_ms, parse_query_time};

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::Unprocessable { field: field.into(), message: message.into() }
}

fn policy_view(p: ReclaimPolicyRecord) -> ReclaimPolicy {
    ReclaimPolicy { id: p.id, policy: p.policy, created_ms: p.created_ms }
}

#[utoipa::path(get, path = "/reclaim-policies", tag = "reclaim", responses((status = 200, body = Vec<ReclaimPolicy>), crate::openapi::AuthErrors))]
pub async fn list_policies(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<ReclaimPolicy>>> {
    caller.require(Scope::Read)?;
    Ok(Json(state.store.reclaim_policies(caller.org).await?.into_iter().map(policy_view).collect()))
}

#[utoipa::path(post, path = "/reclaim-policies", tag = "reclaim", request_body = ReclaimPolicySpec, responses((status = 201, body = ReclaimPolicy), crate::openapi::BodyErrors))]
pub async fn create_policy(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(mut p): JsonBody<ReclaimPolicySpec>,
) -> ApiResult<(StatusCode, Json<ReclaimPolicy>)> {
    caller.require(Scope::Admin)?;
    p.name = p.name.trim().to_string();
    if p.name.is_empty() || p.name.len() > 200 {
        return Err(bad("name", "1 to 200 characters"));
    }
    if p.state == WorkloadState::Offline {
        return Err(bad("state", "never acts on offline GPUs"));
    }
    // At least one second, at most 30 days.
    for (field, v) in [("for_s", p.for_s), ("grace_s", p.grace_s)] {
        if !(1..=30 * 86_400).contains(&v) {
            return Err(bad(field, "seconds, from 1 to 2592000"));
        }
    }
    let channel_kind = |id: Option<ChannelId>| {
        let store = state.store.clone();
        async move {
            match id {
                Some(id) => store.notification_channel(caller.org, id).await.map(|c| c.map(|c| c.kind)),
                None => Ok(None),
            }
        }
    };
    match p.action {
        ReclaimAction::Webhook => match channel_kind(p.action_channel_id).await? {
            Some(ChannelKind::Webhook) => {}
            _ => return Err(bad("action_channel_id", "a `webhook` action needs a webhook channel")),
        },
        ReclaimAction::AgentKill => {
            if p.action_channel_id.is_some() {
                return Err(bad("action_channel_id", "an `agent_kill` action has no channel"));
            }
        }
    }
    if p.notice_channel_id.is_some()
        && channel_kind(p.notice_channel_id).await?.is_none_or(|k| k == ChannelKind::Alertmanager)
    {
        return Err(bad("notice_channel_id", "a slack or webhook channel"));
    }
    let saved = state
        .store
        .insert_reclaim_policy(caller.org, &p, now_ms())
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("a policy named {:?} exists", p.name)))?;
    Ok((StatusCode::CREATED, Json(policy_view(saved))))
}

#[utoipa::path(delete, path = "/reclaim-policies/{id}", tag = "reclaim", params(("id" = i64, Path)), responses((status = 204, description = "Deleted (its open reclaims are cancelled)"), crate::openapi::ItemErrors))]
pub async fn delete_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ReclaimPolicyId>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Admin)?;
    if state.store.delete_reclaim_policy(caller.org, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("no such reclaim policy".into()))
    }
}

#[utoipa::path(get, path = "/reclaim-policies/{id}/dry-run", tag = "reclaim", params(("id" = i64, Path), DryRunQuery), responses((status = 200, body = DryRun), crate::openapi::ItemQueryErrors))]
pub async fn dry_run_policy(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ReclaimPolicyId>,
    Query(q): Query<DryRunQuery>,
) -> ApiResult<Json<DryRun>> {
    caller.require(Scope::Read)?;
    let p = state
        .store
        .reclaim_policy(caller.org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound("no such reclaim policy".into()))?;
    let to = q.to.as_deref().map(|t| parse_query_time("to", t)).transpose()?.unwrap_or_else(now_ms);
    let from = q.from.as_deref().map(|f| parse_query_time("from", f)).transpose()?.unwrap_or(to - 7 * 86_400_000);
    if from >= to {
        return Err(bad("from", "must be before `to`"));
    }
    if to - from > 31 * 86_400_000 {
        return Err(bad("from", "a dry run covers at most 31 days"));
    }
    let timing = p.policy.timing();
    let prices = crate::analytics::prices(state.store.as_ref(), caller.org).await?;
    let mut items = Vec::new();
    for g in state.store.gpu_identities(caller.org).await? {
        let rows = state.store.series(caller.org, g.id, Resolution::Minute, from, to).await?;
        let minutes: Vec<(i64, Option<WorkloadState>)> =
            rows.iter().map(|r| (r.bucket_ms, r.state.as_deref().and_then(WorkloadState::parse))).collect();
        let price = g.info.name.as_deref().and_then(|n| prices.price_for(n));
        for act in dry_run(&minutes, &timing) {
            items.push(DryRunItem {
                gpu: g.info.uuid.clone(),
                host: g.info.host.clone(),
                freed_cost: price.map(|p| p * act.freed_hours),
                act,
            });
        }
    }
    let freed_gpu_hours = items.iter().map(|i| i.act.freed_hours).sum();
    let freed_cost = items.iter().map(|i| i.freed_cost).sum::<Option<f64>>();
    let summary = format!(
        "{} action{}, {} of {} GPU-time freed",
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        freed_cost.map_or_else(|| format!("{freed_gpu_hours:.1} GPU-hours"), |c| format!("{c:.2} {}", prices.currency)),
        p.policy.state
    );
    Ok(Json(DryRun {
        policy_id: p.id,
        from_ms: from,
        to_ms: to,
        actions: items.len(),
        freed_gpu_hours,
        freed_cost,
        currency: prices.currency.clone(),
        items,
        summary,
    }))
}

fn step_view(l: ReclaimLogEntry) -> ReclaimStepView {
    ReclaimStepView { id: l.id, reclaim_id: l.reclaim_id, line: l.line }
}

async fn reclaim_view(state: &AppState, org: fleetlens_store::OrgId, r: ReclaimRecord) -> ApiResult<Reclaim> {
    let mut log: Vec<ReclaimStepView> =
        state.store.reclaim_log(org, Some(r.id), 1_000).await?.into_iter().map(step_view).collect();
    log.reverse();
    Ok(Reclaim { id: r.id, case: r.case, log })
}

#[utoipa::path(get, path = "/reclaims", tag = "reclaim", responses((status = 200, body = Vec<Reclaim>), crate::openapi::AuthErrors))]
pub async fn list_reclaims(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<Reclaim>>> {
    caller.require(Scope::Read)?;
    let mut out = Vec::new();
    for r in state.store.reclaims(caller.org, 200).await? {
        out.push(reclaim_view(&state, caller.org, r).await?);
    }
    Ok(Json(out))
}

#[utoipa::path(get, path = "/reclaims/{id}", tag = "reclaim", params(("id" = i64, Path)), responses((status = 200, body = Reclaim), crate::openapi::ItemErrors))]
pub async fn get_reclaim(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ReclaimId>,
) -> ApiResult<Json<Reclaim>> {
    caller.require(Scope::Read)?;
    let r = state.store.reclaim(caller.org, id).await?.ok_or_else(|| ApiError::NotFound("no such reclaim".into()))?;
    Ok(Json(reclaim_view(&state, caller.org, r).await?))
}

#[utoipa::path(post, path = "/reclaims/{id}/snooze", tag = "reclaim", params(("id" = i64, Path)), request_body = SnoozeRequest, responses((status = 200, body = Reclaim), crate::openapi::ItemBodyErrors))]
pub async fn snooze(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ReclaimId>,
    JsonBody(s): JsonBody<SnoozeRequest>,
) -> ApiResult<Json<Reclaim>> {
    // Any member may snooze: the owner of the job is a person, not a role.
    caller.require(Scope::Read)?;
    if !(60..=7 * 86_400).contains(&s.for_s) {
        return Err(bad("for_s", "seconds, from 60 to 604800"));
    }
    let r = state.store.reclaim(caller.org, id).await?.ok_or_else(|| ApiError::NotFound("no such reclaim".into()))?;
    if r.case.closed_ms.is_some() {
        return Err(ApiError::Conflict(format!("reclaim {id} is {}: nothing to snooze", r.case.status)));
    }
    let now = now_ms();
    let mut next = r.clone();
    next.case.snoozed_until_ms = Some(now + s.for_s * 1000);
    let entry = ReclaimLogLine {
        step: ReclaimLogStep::Snooze,
        actor: caller.key.name.clone(),
        dollars_held: None,
        at_ms: now,
        detail: format!("snoozed for {} s", s.for_s),
    };
    let w = fleetlens_store::reclaim::ReclaimWrite { log: Some(&entry), ..Default::default() };
    if !state.store.update_reclaim(&next, &w, now).await? {
        return Err(ApiError::Conflict(format!("reclaim {id} has closed")));
    }
    let r = state.store.reclaim(caller.org, id).await?.ok_or_else(|| ApiError::NotFound("no such reclaim".into()))?;
    Ok(Json(reclaim_view(&state, caller.org, r).await?))
}

fn command_view(c: fleetlens_store::reclaim::AgentCommand) -> AgentCommand {
    AgentCommand { id: c.id, reclaim_id: c.reclaim_id, gpu: c.gpu_uuid, pid: c.pid, owner_user: c.owner_user }
}

#[utoipa::path(post, path = "/agent/commands/take", tag = "reclaim", params(CommandQuery), responses((status = 200, body = Vec<AgentCommand>), crate::openapi::QueryErrors))]
pub async fn take_commands(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<CommandQuery>,
) -> ApiResult<Json<Vec<AgentCommand>>> {
    caller.require(Scope::Ingest)?;
    let host = q.host.trim();
    if host.is_empty() {
        return Err(bad("host", "the agent's host name"));
    }
    let taken = state.store.take_agent_commands(caller.org, host, now_ms()).await?;
    Ok(Json(taken.into_iter().map(command_view).collect()))
}

#[utoipa::path(post, path = "/agent/commands/{id}/result", tag = "reclaim", params(("id" = i64, Path)), request_body = CommandResult, responses((status = 204, description = "Recorded"), crate::openapi::ItemBodyErrors))]
pub async fn command_result(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<AgentCommandId>,
    JsonBody(r): JsonBody<CommandResult>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Ingest)?;
    let step = match r.result.as_str() {
        "killed" => ReclaimLogStep::Killed,
        "refused" => ReclaimLogStep::KillRefused,
        _ => return Err(bad("result", "`killed` or `refused`")),
    };
    let host = r.host.trim();
    let now = now_ms();
    let entry = ReclaimLogLine {
        step,
        actor: format!("agent:{host}"),
        dollars_held: None,
        at_ms: now,
        detail: r.detail.chars().take(500).collect(),
    };
    match state.store.finish_agent_command(caller.org, id, host, &r.result, &entry, now).await? {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(ApiError::NotFound("no such open command for this host".into())),
    }
}
