//! Alerting API: `/api/v1/alert-rules`, `/api/v1/notification-channels`, `/api/v1/alerts`,
//! `/api/v1/silences` and the delivery log. Reading needs the `read` scope; changing rules,
//! channels and silences needs `admin` (channel URLs are secrets, so reading them does too).
//!
//! A condition that does not parse is a 422 whose error names the field (`condition`), the
//! 0-based character `position` and the 1-based `column`, with a caret line in the message.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetlens_api::alerts::{
    AlertDetail, AlertList, ChannelBody, ChannelList, ChannelView, CheckBody, ConditionCheck, DeliveryList,
    DeliveryView, FieldInfo, OutboxMessage, RuleBody, RuleErrorBody, RuleErrorDetail, RuleFields, RuleList, RuleView,
    SilenceBody, SilenceList, SilenceView, TestResult,
};
use fleetlens_core::rules::{Condition, FIELDS, RuleError, RuleSpec};
use fleetlens_core::time_text::format_rfc3339_ms;
use fleetlens_core::{
    AlertId, ChannelId, ChannelKind, MessageKind, OutboxStatus, RuleId, Severity, SilenceId, WorkloadState,
};
use fleetlens_store::alerts::{
    AlertFilter, AlertRuleRecord, AlertStatus, ChannelRecord, DeliveryFilter, DeliveryRecord, NewChannel,
    NewNotification, NewSilence, SilenceRecord,
};
use fleetlens_store::{OrgId, Scope, Store, StoreError};
use serde_json::Value;

use crate::alerts::render::{self, SLACK_MIN_INTERVAL_MS};
pub use crate::alerts::views::{alert_view, marking_deleted};
use crate::auth::Caller;
use crate::error::{ApiError, JsonBody, json_error};
use crate::state::AppState;
use crate::time::{body_time, now_ms};

/// Errors of this API: the server's, plus condition errors with a position, and conflicts.
#[derive(Debug)]
pub enum AlertsError {
    Api(ApiError),
    Rule(RuleError),
}

impl From<ApiError> for AlertsError {
    fn from(e: ApiError) -> Self {
        AlertsError::Api(e)
    }
}

impl From<StoreError> for AlertsError {
    fn from(e: StoreError) -> Self {
        AlertsError::Api(e.into())
    }
}

impl IntoResponse for AlertsError {
    fn into_response(self) -> Response {
        match self {
            AlertsError::Api(e) => e.into_response(),
            AlertsError::Rule(e) => {
                let error = RuleErrorDetail {
                    code: "validation_failed".into(),
                    message: e.to_string(),
                    field: e.field.into(),
                    position: e.position,
                    column: e.position.map(|p| p + 1),
                };
                (StatusCode::UNPROCESSABLE_ENTITY, Json(RuleErrorBody { error })).into_response()
            }
        }
    }
}

type Res<T> = Result<T, AlertsError>;

fn invalid(field: &str, message: impl Into<String>) -> AlertsError {
    AlertsError::Api(ApiError::Unprocessable { field: field.into(), message: message.into() })
}

/// A write by name that found the name taken ([`StoreError::Conflict`]) says which name.
fn name_taken<'a>(what: &'static str, name: &'a str) -> impl FnOnce(StoreError) -> AlertsError + 'a {
    move |e| AlertsError::Api(ApiError::conflict_or(e, format!("a {what} named {name:?} exists")))
}

fn not_found(what: &str) -> AlertsError {
    AlertsError::Api(ApiError::NotFound(format!("no such {what} in this organisation")))
}

// ---------------------------------------------------------------------------------------------
// Rules

/// A stored rule as the API shows it (without its organisation).
fn rule_view(r: AlertRuleRecord) -> RuleView {
    let AlertRuleRecord { id, org_id: _, rule, builtin, created_ms, updated_ms } = r;
    RuleView { id, rule, builtin, created_ms, updated_ms }
}

/// Check `inhibits` (every rule it names exists; the scope is an `InhibitScope` already).
async fn check_inhibits(store: &dyn Store, org: OrgId, inhibits: &[String]) -> Res<()> {
    use fleetlens_core::rules::inhibit::Target;
    if inhibits.len() > 100 {
        return Err(invalid("inhibits", "at most 100 entries"));
    }
    let rules = store.alert_rules(org).await?;
    for t in inhibits {
        match Target::parse(t).map_err(|e| invalid("inhibits", e))? {
            Target::Rule(k) if !rules.iter().any(|r| r.builtin.as_deref() == Some(k.as_str()) || r.rule.name == k) => {
                return Err(invalid(
                    "inhibits",
                    format!("{k:?} is neither a shipped rule's key nor a rule's name (or `*`, `state:<state>`)"),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

async fn seed(state: &AppState, org: OrgId) -> Res<()> {
    state.alerts.ensure_default_rules(org).await?;
    Ok(())
}

async fn check_channels(store: &dyn Store, org: OrgId, ids: &[ChannelId]) -> Res<()> {
    let known: Vec<ChannelId> = store.notification_channels(org).await?.into_iter().map(|c| c.id).collect();
    if let Some(bad) = ids.iter().find(|id| !known.contains(id)) {
        return Err(invalid("channels", format!("no notification channel {bad} in this organisation")));
    }
    Ok(())
}

/// `base` with what the body names changed; the name is stored trimmed.
fn merge(base: RuleSpec, b: RuleBody) -> RuleSpec {
    let mut spec = b.apply(base);
    spec.name = spec.name.trim().to_string();
    spec
}

/// `{"rules": [...]}`.
#[utoipa::path(get, path = "/alert-rules", tag = "alerts", responses((status = 200, body = RuleList), crate::openapi::AuthErrors))]
pub async fn list_rules(State(state): State<AppState>, caller: Caller) -> Res<Json<RuleList>> {
    caller.require(Scope::Read)?;
    seed(&state, caller.org).await?;
    let rules: Vec<RuleView> = state.store.alert_rules(caller.org).await?.into_iter().map(rule_view).collect();
    Ok(Json(RuleList { rules }))
}

#[utoipa::path(post, path = "/alert-rules", tag = "alerts", request_body = RuleBody, responses((status = 201, body = RuleView), crate::openapi::BodyErrors))]
pub async fn create_rule(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(b): JsonBody<RuleBody>,
) -> Res<(StatusCode, Json<RuleView>)> {
    caller.require(Scope::Admin)?;
    if b.name.is_none() {
        return Err(invalid("name", "required"));
    }
    if b.condition.is_none() {
        return Err(invalid("condition", "required: e.g. `gpu_util_pct >= 80 && sm_active_pct < 30`"));
    }
    let rule = merge(RuleSpec::default(), b);
    rule.validate().map_err(AlertsError::Rule)?;
    check_channels(state.store.as_ref(), caller.org, &rule.channels).await?;
    seed(&state, caller.org).await?;
    check_inhibits(state.store.as_ref(), caller.org, &rule.inhibits).await?;
    let stored =
        state.store.insert_alert_rule(caller.org, &rule, now_ms()).await.map_err(name_taken("rule", &rule.name))?;
    state.alerts.wake_engine();
    Ok((StatusCode::CREATED, Json(rule_view(stored))))
}

#[utoipa::path(get, path = "/alert-rules/{id}", tag = "alerts", params(("id" = i64, Path)), responses((status = 200, body = RuleView), crate::openapi::ItemErrors))]
pub async fn get_rule(State(state): State<AppState>, caller: Caller, Path(id): Path<RuleId>) -> Res<Json<RuleView>> {
    caller.require(Scope::Read)?;
    let r = state.store.alert_rule(caller.org, id).await?.ok_or_else(|| not_found("alert rule"))?;
    Ok(Json(rule_view(r)))
}

#[utoipa::path(put, path = "/alert-rules/{id}", tag = "alerts", params(("id" = i64, Path)), request_body = RuleBody, responses((status = 200, body = RuleView), crate::openapi::ItemBodyErrors))]
pub async fn put_rule(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<RuleId>,
    JsonBody(b): JsonBody<RuleBody>,
) -> Res<Json<RuleView>> {
    caller.require(Scope::Admin)?;
    let current = state.store.alert_rule(caller.org, id).await?.ok_or_else(|| not_found("alert rule"))?;
    let rule = merge(current.rule, b);
    check_inhibits(state.store.as_ref(), caller.org, &rule.inhibits).await?;
    rule.validate().map_err(AlertsError::Rule)?;
    check_channels(state.store.as_ref(), caller.org, &rule.channels).await?;
    let out = state
        .store
        .update_alert_rule(caller.org, id, &rule, now_ms())
        .await
        .map_err(name_taken("rule", &rule.name))?
        .ok_or_else(|| not_found("alert rule"))?;
    state.alerts.wake_engine();
    Ok(Json(rule_view(out)))
}

#[utoipa::path(delete, path = "/alert-rules/{id}", tag = "alerts", params(("id" = i64, Path)), responses((status = 204, description = "Deleted"), crate::openapi::ItemErrors))]
pub async fn delete_rule(State(state): State<AppState>, caller: Caller, Path(id): Path<RuleId>) -> Res<StatusCode> {
    caller.require(Scope::Admin)?;
    if !state.store.delete_alert_rule(caller.org, id).await? {
        return Err(not_found("alert rule"));
    }
    // The engine resolves the rule's open alerts on its next cycle.
    state.alerts.wake_engine();
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/alert-rules/fields`: what a condition can read.
/// The condition language: its fields, states, severities and operators.
#[utoipa::path(get, path = "/alert-rules/fields", tag = "alerts", responses((status = 200, body = RuleFields), crate::openapi::AuthErrors))]
pub async fn rule_fields(caller: Caller) -> Res<Json<RuleFields>> {
    caller.require(Scope::Read)?;
    Ok(Json(RuleFields {
        fields: FIELDS.iter().map(FieldInfo::from).collect(),
        states: WorkloadState::ALL.to_vec(),
        severities: Severity::ALL.to_vec(),
        operators: ["&&", "||", "!", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "(", ")"]
            .map(String::from)
            .to_vec(),
    }))
}

/// `POST /api/v1/alert-rules/check`: parse a condition without storing anything.
/// A condition that parses, and the fields it reads.
#[utoipa::path(post, path = "/alert-rules/check", tag = "alerts", request_body = CheckBody, responses((status = 200, body = ConditionCheck), crate::openapi::BodyErrors))]
pub async fn check_condition(caller: Caller, JsonBody(b): JsonBody<CheckBody>) -> Res<Json<ConditionCheck>> {
    caller.require(Scope::Read)?;
    let c = Condition::parse(&b.condition).map_err(|e| {
        AlertsError::Rule(RuleError {
            field: "condition",
            message: format!("{e}\n{}", e.pointer(&b.condition)),
            position: Some(e.position),
        })
    })?;
    Ok(Json(ConditionCheck { ok: true, fields: c.fields().iter().map(|f| f.to_string()).collect() }))
}

// ---------------------------------------------------------------------------------------------
// Channels

fn channel_view(c: ChannelRecord) -> ChannelView {
    let group_by = crate::alerts::groups::group_by(&c);
    ChannelView {
        id: c.id,
        name: c.name,
        kind: c.kind,
        url: c.url,
        default: c.is_default,
        min_interval_ms: c.min_interval_ms,
        created_ms: c.created_ms,
        updated_ms: c.updated_ms,
        group_by,
        group_wait_s: c.group_wait_s,
        group_interval_s: c.group_interval_s,
        digest: if c.digest.is_empty() { "off".into() } else { c.digest.clone() },
        digest_at: format!("{:02}:{:02}", c.digest_at_min / 60, c.digest_at_min % 60),
    }
}

fn channel_spec(b: ChannelBody, current: Option<&ChannelRecord>) -> Res<NewChannel> {
    let name = b.name.or_else(|| current.map(|c| c.name.clone())).ok_or_else(|| invalid("name", "required"))?;
    let name = name.trim().to_string();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(invalid("name", "1–200 printable characters"));
    }
    let kind = b.kind.or_else(|| current.map(|c| c.kind)).ok_or_else(|| invalid("kind", "required"))?;
    let url = b.url.or_else(|| current.map(|c| c.url.clone())).ok_or_else(|| invalid("url", "required"))?;
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| invalid("url", format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(invalid("url", "must be an http:// or https:// URL"));
    }
    let default_interval = if kind == ChannelKind::Slack { SLACK_MIN_INTERVAL_MS } else { 0 };
    let min_interval_ms = b
        .min_interval_ms
        .or_else(|| current.filter(|c| c.kind == kind).map(|c| c.min_interval_ms))
        .unwrap_or(default_interval);
    if !(0..=3_600_000).contains(&min_interval_ms) {
        return Err(invalid("min_interval_ms", "0–3600000"));
    }
    let is_default = b.default.or_else(|| current.map(|c| c.is_default)).unwrap_or(false);
    let group_by = match b.group_by {
        Some(parts) => {
            if parts.is_empty() || parts.len() > 10 {
                return Err(invalid("group_by", "1–10 parts: rule, owner, or alert label names (host, team, gpu, …)"));
            }
            if let Some(bad) = parts.iter().find(|p| !fleetlens_core::rules::group::valid_part(p)) {
                return Err(invalid("group_by", format!("{bad:?} is not rule, owner or a label name")));
            }
            parts
        }
        None => current.map(crate::alerts::groups::group_by).unwrap_or_default(),
    };
    let seconds = |field: &str, v: Option<i64>, current: Option<i64>, default: i64| -> Res<i64> {
        let v = v.or(current).unwrap_or(default);
        if !(0..=86_400).contains(&v) {
            return Err(invalid(field, "0–86400 seconds"));
        }
        Ok(v)
    };
    let group_wait_s = seconds("group_wait_s", b.group_wait_s, current.map(|c| c.group_wait_s), 0)?;
    let group_interval_s = seconds("group_interval_s", b.group_interval_s, current.map(|c| c.group_interval_s), 300)?;
    let digest = match b.digest.as_deref().map(str::trim) {
        Some("off") | Some("") => String::new(),
        Some(d @ ("daily" | "weekly")) => d.to_string(),
        Some(_) => return Err(invalid("digest", "off, daily or weekly")),
        None => current.map(|c| c.digest.clone()).unwrap_or_default(),
    };
    if !digest.is_empty() && kind == ChannelKind::Alertmanager {
        return Err(invalid("digest", "an Alertmanager channel takes alerts, not digests"));
    }
    let digest_at_min = match b.digest_at.as_deref() {
        Some(t) => {
            let parsed =
                t.trim().split_once(':').and_then(|(h, m)| Some((h.parse::<i64>().ok()?, m.parse::<i64>().ok()?)));
            match parsed {
                Some((h, m)) if (0..24).contains(&h) && (0..60).contains(&m) => h * 60 + m,
                _ => return Err(invalid("digest_at", "HH:MM (UTC), e.g. 09:00")),
            }
        }
        None => current.map_or(540, |c| c.digest_at_min),
    };
    Ok(NewChannel {
        name,
        kind,
        url: url.trim().to_string(),
        is_default,
        min_interval_ms,
        group_by,
        group_wait_s,
        group_interval_s,
        digest,
        digest_at_min,
    })
}

#[utoipa::path(get, path = "/notification-channels", tag = "alerts", responses((status = 200, body = ChannelList), crate::openapi::AuthErrors))]
pub async fn list_channels(State(state): State<AppState>, caller: Caller) -> Res<Json<ChannelList>> {
    caller.require(Scope::Admin)?;
    let list: Vec<ChannelView> =
        state.store.notification_channels(caller.org).await?.into_iter().map(channel_view).collect();
    Ok(Json(ChannelList { channels: list }))
}

#[utoipa::path(post, path = "/notification-channels", tag = "alerts", request_body = ChannelBody, responses((status = 201, body = ChannelView), crate::openapi::BodyErrors))]
pub async fn create_channel(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(b): JsonBody<ChannelBody>,
) -> Res<(StatusCode, Json<ChannelView>)> {
    caller.require(Scope::Admin)?;
    let spec = channel_spec(b, None)?;
    let c = state
        .store
        .insert_notification_channel(caller.org, &spec, now_ms())
        .await
        .map_err(name_taken("channel", &spec.name))?;
    Ok((StatusCode::CREATED, Json(channel_view(c))))
}

#[utoipa::path(get, path = "/notification-channels/{id}", tag = "alerts", params(("id" = i64, Path)), responses((status = 200, body = ChannelView), crate::openapi::ItemErrors))]
pub async fn get_channel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ChannelId>,
) -> Res<Json<ChannelView>> {
    caller.require(Scope::Admin)?;
    let c = state.store.notification_channel(caller.org, id).await?.ok_or_else(|| not_found("notification channel"))?;
    Ok(Json(channel_view(c)))
}

#[utoipa::path(put, path = "/notification-channels/{id}", tag = "alerts", params(("id" = i64, Path)), request_body = ChannelBody, responses((status = 200, body = ChannelView), crate::openapi::ItemBodyErrors))]
pub async fn put_channel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ChannelId>,
    JsonBody(b): JsonBody<ChannelBody>,
) -> Res<Json<ChannelView>> {
    caller.require(Scope::Admin)?;
    let current =
        state.store.notification_channel(caller.org, id).await?.ok_or_else(|| not_found("notification channel"))?;
    let spec = channel_spec(b, Some(&current))?;
    let c = state
        .store
        .update_notification_channel(caller.org, id, &spec, now_ms())
        .await
        .map_err(name_taken("channel", &spec.name))?
        .ok_or_else(|| not_found("notification channel"))?;
    Ok(Json(channel_view(c)))
}

#[utoipa::path(delete, path = "/notification-channels/{id}", tag = "alerts", params(("id" = i64, Path)), responses((status = 204, description = "Deleted"), crate::openapi::ItemErrors))]
pub async fn delete_channel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ChannelId>,
) -> Res<StatusCode> {
    caller.require(Scope::Admin)?;
    if !state.store.delete_notification_channel(caller.org, id, now_ms()).await? {
        return Err(not_found("notification channel"));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/notification-channels/{id}/test`: send a test message through the outbox
/// (so rate limit, retries and the delivery log apply) and wait up to 15 s for the first
/// attempt's outcome.
/// The outcome of a test message.
#[utoipa::path(post, path = "/notification-channels/{id}/test", tag = "alerts", params(("id" = i64, Path)), responses((status = 200, body = TestResult, description = "Delivered"), (status = 202, body = TestResult, description = "Not delivered (yet): see `status` and `error`"), (status = 409, description = "A test message was just sent", body = fleetlens_api::ErrorBody), crate::openapi::ItemErrors))]
pub async fn test_channel(State(state): State<AppState>, caller: Caller, Path(id): Path<ChannelId>) -> Res<Response> {
    caller.require(Scope::Admin)?;
    let c = state.store.notification_channel(caller.org, id).await?.ok_or_else(|| not_found("notification channel"))?;
    let now = now_ms();
    let n = render::test_notification(&c, &state.alerts.ctx().public_url, now);
    let note = NewNotification {
        channel_id: c.id,
        kind: MessageKind::Test,
        seq: now,
        payload: render::test_payload(&c, &n, now),
    };
    let message_id = state
        .store
        .enqueue_notification(caller.org, None, &note, now)
        .await?
        .ok_or_else(|| AlertsError::Api(ApiError::Conflict("a test message was just sent; try again".into())))?;
    state.alerts.wake_outbox();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let m = state.store.outbox_message(caller.org, message_id).await?.ok_or_else(|| not_found("message"))?.message;
        let settled = m.attempts > 0 && m.status != OutboxStatus::Sending;
        if settled || tokio::time::Instant::now() >= deadline {
            let delivered = m.status == OutboxStatus::Delivered;
            let status = if delivered { StatusCode::OK } else { StatusCode::ACCEPTED };
            let body = TestResult {
                message_id: m.id,
                delivered,
                status: m.status,
                attempts: m.attempts,
                status_code: m.last_status_code,
                error: m.last_error,
            };
            return Ok((status, Json(body)).into_response());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Alerts

/// An alert as the API shows it (the type lives in `fleetlens-api`: the live stream and the
/// dashboard share it).
pub use fleetlens_api::AlertView;
pub use fleetlens_api::alerts::{AlertQuery, DeliveryQuery};

/// `{"alerts": [...]}`, newest first.
#[utoipa::path(get, path = "/alerts", tag = "alerts", params(AlertQuery), responses((status = 200, body = AlertList), crate::openapi::QueryErrors))]
pub async fn list_alerts(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<AlertQuery>,
) -> Res<Json<AlertList>> {
    caller.require(Scope::Read)?;
    let statuses = match q.status.as_deref().map(str::trim).unwrap_or("all") {
        "all" | "" => vec![],
        "open" => vec![AlertStatus::Pending, AlertStatus::Firing],
        s => match AlertStatus::parse(s) {
            Some(st) => vec![st],
            None => return Err(invalid("status", "one of firing, resolved, pending, open, all")),
        },
    };
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(invalid("limit", "1–1000"));
    }
    let filter = AlertFilter { statuses, rule_id: q.rule_id, gpu_uuid: q.gpu, before_id: q.before, limit };
    let rules = rule_ids(&state, caller.org).await?;
    let alerts: Vec<AlertView> = state
        .store
        .alerts(caller.org, &filter)
        .await?
        .into_iter()
        .map(|a| marking_deleted(alert_view(a), &rules))
        .collect();
    Ok(Json(AlertList { alerts }))
}

/// The ids of the organisation's rules that still exist.
pub async fn rule_ids(state: &AppState, org: OrgId) -> Res<std::collections::HashSet<RuleId>> {
    Ok(state.store.alert_rules(org).await?.into_iter().map(|r| r.id).collect())
}

/// The ids of the organisation's channels that still exist.
async fn channel_ids(state: &AppState, org: OrgId) -> Res<std::collections::HashSet<ChannelId>> {
    Ok(state.store.notification_channels(org).await?.into_iter().map(|c| c.id).collect())
}

/// A delivery attempt; `channels` are the ids of the channels that still exist.
fn delivery_view(d: DeliveryRecord, channels: &std::collections::HashSet<ChannelId>) -> DeliveryView {
    DeliveryView { id: d.id, channel_deleted: !channels.contains(&d.delivery.channel_id), delivery: d.delivery }
}

/// One alert with its notification messages and delivery attempts.
#[utoipa::path(get, path = "/alerts/{id}", tag = "alerts", params(("id" = i64, Path)), responses((status = 200, body = AlertDetail), crate::openapi::ItemErrors))]
pub async fn get_alert(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<AlertId>,
) -> Res<Json<AlertDetail>> {
    caller.require(Scope::Read)?;
    let a = state.store.alert(caller.org, id).await?.ok_or_else(|| not_found("alert"))?;
    let messages: Vec<OutboxMessage> =
        state.store.outbox_for_alert(caller.org, id).await?.into_iter().map(|m| m.message).collect();
    let filter = DeliveryFilter { alert_id: Some(id), limit: 200, ..Default::default() };
    let channels = channel_ids(&state, caller.org).await?;
    let deliveries: Vec<DeliveryView> =
        state.store.deliveries(caller.org, &filter).await?.into_iter().map(|d| delivery_view(d, &channels)).collect();
    let alert = marking_deleted(alert_view(a), &rule_ids(&state, caller.org).await?);
    Ok(Json(AlertDetail { alert, messages, deliveries }))
}

/// `GET /api/v1/notification-deliveries?channel_id=&alert_id=&limit=`: the delivery log.
/// `{"deliveries": [...]}`, newest first.
#[utoipa::path(get, path = "/notification-deliveries", tag = "alerts", params(DeliveryQuery), responses((status = 200, body = DeliveryList), crate::openapi::QueryErrors))]
pub async fn list_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<DeliveryQuery>,
) -> Res<Json<DeliveryList>> {
    caller.require(Scope::Read)?;
    deliveries(&state, caller.org, q.channel_id, q.alert_id, q.limit).await
}

/// `GET /api/v1/notification-channels/{id}/deliveries`.
#[utoipa::path(get, path = "/notification-channels/{id}/deliveries", tag = "alerts", params(("id" = i64, Path), DeliveryQuery), responses((status = 200, body = DeliveryList), crate::openapi::ItemQueryErrors))]
pub async fn channel_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ChannelId>,
    Query(q): Query<DeliveryQuery>,
) -> Res<Json<DeliveryList>> {
    caller.require(Scope::Read)?;
    state.store.notification_channel(caller.org, id).await?.ok_or_else(|| not_found("notification channel"))?;
    deliveries(&state, caller.org, Some(id), q.alert_id, q.limit).await
}

async fn deliveries(
    state: &AppState,
    org: OrgId,
    channel_id: Option<ChannelId>,
    alert_id: Option<AlertId>,
    limit: Option<i64>,
) -> Res<Json<DeliveryList>> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(invalid("limit", "1–1000"));
    }
    // The store keys channels and alerts by their integer ids.
    let filter = DeliveryFilter { channel_id, alert_id, limit };
    let channels = channel_ids(state, org).await?;
    let list: Vec<DeliveryView> =
        state.store.deliveries(org, &filter).await?.into_iter().map(|d| delivery_view(d, &channels)).collect();
    Ok(Json(DeliveryList { deliveries: list }))
}

// ---------------------------------------------------------------------------------------------
// Silences

fn silence_view(s: SilenceRecord, now: i64) -> SilenceView {
    SilenceView {
        id: s.id,
        active: s.starts_at_ms <= now && now < s.ends_at_ms,
        starts_at: format_rfc3339_ms(s.starts_at_ms),
        ends_at: format_rfc3339_ms(s.ends_at_ms),
        matchers: s.matchers,
        starts_at_ms: s.starts_at_ms,
        ends_at_ms: s.ends_at_ms,
        comment: s.comment,
        created_by: s.created_by,
        created_ms: s.created_ms,
    }
}

#[utoipa::path(post, path = "/silences", tag = "alerts", request_body = SilenceBody, responses((status = 201, body = SilenceView), crate::openapi::BodyErrors))]
pub async fn create_silence(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<Value>,
) -> Res<(StatusCode, Json<SilenceView>)> {
    caller.require(Scope::Admin)?;
    // Who made a silence is who called, never what the body claims: a `created_by` in the body
    // is refused rather than ignored, so a client that sets it learns that it does not count.
    if body.get("created_by").is_some() {
        return Err(invalid(
            "created_by",
            "set by the server from the caller (the user's email, or `key:` and the API key's name); leave it out",
        ));
    }
    let b: SilenceBody = serde_path_to_error::deserialize(body).map_err(json_error)?;
    if b.matchers.is_empty() {
        return Err(invalid(
            "matchers",
            "at least one of rule, host, gpu, team, severity, owner_user, owner_namespace, owner_pod, owner_job \
             (an empty silence would mute everything)",
        ));
    }
    let now = now_ms();
    let starts = b.starts_at.as_ref().map(|v| body_time("starts_at", v)).transpose()?.unwrap_or(now);
    let ends = body_time("ends_at", &b.ends_at)?;
    if ends <= starts {
        return Err(invalid("ends_at", "must be after starts_at"));
    }
    if ends <= now {
        return Err(invalid("ends_at", "must be in the future"));
    }
    if b.comment.chars().count() > 2000 {
        return Err(invalid("comment", "at most 2000 characters"));
    }
    let created_by = match caller.user() {
        Some(user) => user.email.clone(),
        None => format!("key:{}", caller.key.name),
    };
    let s = NewSilence { matchers: b.matchers, starts_at_ms: starts, ends_at_ms: ends, comment: b.comment, created_by };
    let stored = state.store.insert_silence(caller.org, &s, now).await?;
    state.alerts.wake_engine();
    Ok((StatusCode::CREATED, Json(silence_view(stored, now))))
}

#[utoipa::path(get, path = "/silences", tag = "alerts", responses((status = 200, body = SilenceList), crate::openapi::AuthErrors))]
pub async fn list_silences(State(state): State<AppState>, caller: Caller) -> Res<Json<SilenceList>> {
    caller.require(Scope::Read)?;
    let now = now_ms();
    let list: Vec<SilenceView> =
        state.store.silences(caller.org).await?.into_iter().map(|s| silence_view(s, now)).collect();
    Ok(Json(SilenceList { silences: list }))
}

/// `DELETE /api/v1/silences/{id}`: end the silence now (it stays listed, expired).
#[utoipa::path(delete, path = "/silences/{id}", tag = "alerts", params(("id" = i64, Path)), responses((status = 204, description = "Expired"), crate::openapi::ItemErrors))]
pub async fn delete_silence(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<SilenceId>,
) -> Res<StatusCode> {
    caller.require(Scope::Admin)?;
    if !state.store.expire_silence(caller.org, id, now_ms()).await? {
        return Err(not_found("silence"));
    }
    state.alerts.wake_engine();
    Ok(StatusCode::NO_CONTENT)
}
