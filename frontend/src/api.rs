//! The one place the dashboard talks to the server: how a request is authenticated, and how a
//! failure becomes a message a person can act on.
//!
//! The dashboard logs in with a session (docs/ACCOUNTS.md): `POST /api/v1/auth/login` sets an
//! HttpOnly cookie that same-origin `fetch` sends by itself, and every POST/PUT/DELETE carries
//! the session's CSRF token in `X-CSRF-Token`. The token lives only in memory; after a reload
//! `GET /api/v1/auth/me` returns it again. An API key (kept in `localStorage`, sent as a Bearer
//! token, no CSRF token needed) is the secondary way in, for installs without users.

use std::cell::RefCell;
use std::fmt;

use fleetlens_api::accounts::{
    AssignBody, CreatedKeyView, HostView, KeyView, LoginBody, MeView, NewKeyBody, NewUserBody, PasswordBody,
    SessionView, TeamBody, TeamView, UserPatch, UserView,
};
use fleetlens_api::alerts::{
    AlertList, ChannelBody, ChannelList, ChannelView, CheckBody, ConditionCheck, RuleBody, RuleFields, RuleList,
    RuleView, SilenceBody, SilenceList, SilenceView, TestResult,
};
use fleetlens_api::analytics::Prices;
use fleetlens_api::gpus::GpuDetail;
use fleetlens_api::reports::ReportGrouping;
use fleetlens_api::{BillingReport, ErrorBody, FleetSummary, GpuList, Job, SampleList, Series, StateWindow};
use fleetlens_core::{ApiKeyId, ChannelId, PriceTable, RuleId, SilenceId, TeamId, UserId};
use gloo_net::http::{Request, RequestBuilder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::ctx::Range;
// A path segment, encoded (GPU and MIG UUIDs are safe today; this keeps them so).
use crate::url_state::encode as seg;

pub mod actions;

const KEY_STORAGE: &str = "fleetlens.api_key";
const PREFIX: &str = "/api/v1";

thread_local! {
    /// The session's CSRF token (never persisted: `GET /auth/me` gives it back after a reload).
    static CSRF: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A failed API call, already worded for the person looking at the page.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status; 0 when the server could not be reached, or the answer could not be read.
    pub status: u16,
    /// The server's `error.code` (or `network` / `bad_response`).
    pub code: String,
    /// The server's `error.message`, or what went wrong locally.
    pub message: String,
    /// The API path asked for, without the query.
    pub path: String,
    /// For a validation error: the field at fault (`condition`, `url`, `matchers`, …).
    pub field: Option<String>,
}

impl ApiError {
    pub fn is_unauthorized(&self) -> bool {
        self.status == 401
    }

    /// The server answered 404 for the endpoint itself (it is not built yet on that server).
    pub fn is_missing_endpoint(&self) -> bool {
        self.status == 404 && self.message == "no such API endpoint"
    }

    /// A validation error about `field`.
    pub fn is_about(&self, field: &str) -> bool {
        matches!(self.status, 400 | 422) && self.field.as_deref().is_some_and(|f| f == field || f.ends_with(field))
    }

    /// A form's own check of `field` failed before anything was sent: worded as the server's
    /// validation error of `path` would be, so that it shows next to its field the same way.
    pub fn invalid(path: &str, field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 422,
            code: "invalid".into(),
            message: message.into(),
            path: path.into(),
            field: Some(field.into()),
        }
    }

    fn local(code: &str, path: &str, message: impl fmt::Display) -> ApiError {
        ApiError { status: 0, code: code.into(), message: message.to_string(), path: path.into(), field: None }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ApiError { status, code, message, path, .. } = self;
        match (*status, code.as_str()) {
            (0, "network") => {
                write!(f, "Cannot reach the Fleetlens server ({message}). Retrying every 5 seconds.")
            }
            (0, _) => write!(f, "Unexpected answer from {path}: {message}"),
            (401, "invalid_credentials") => write!(f, "Wrong email or password."),
            (401, _) => write!(f, "You are not logged in, or your session has ended ({message}). Log in again."),
            (403, "csrf_failed") => write!(f, "The server refused a request without its CSRF token: {message}."),
            (403, _) => write!(f, "Your role may not do this: {message}."),
            (404, _) if self.is_missing_endpoint() => {
                write!(f, "This server does not offer {path} yet.")
            }
            (404, _) => write!(f, "Not found: {message}."),
            (409, _) => write!(f, "Conflict: {message}."),
            (429, _) => {
                // The server's words ("too many attempts: retry in 900 s"), as a sentence.
                let mut c = message.chars();
                // ASCII only: the server words its errors in English (no Unicode case tables
                // in the wasm).
                match c.next() {
                    Some(first) => write!(f, "{}{}.", first.to_ascii_uppercase(), c.as_str()),
                    None => write!(f, "."),
                }
            }
            (400 | 413 | 415 | 422, _) => write!(f, "The server refused the request: {message}."),
            (s, _) if s >= 500 => {
                write!(f, "The server failed (HTTP {s}: {message}). Retrying every 5 seconds.")
            }
            (s, _) => write!(f, "HTTP {s} from {path}: {message}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The API error an `ErrorBoundary` caught (every error thrown in the dashboard is one; any
    /// other is shown by its text).
    pub fn from_boundary(error: &leptos::error::Error) -> ApiError {
        match error.downcast_ref::<ApiError>() {
            Some(e) => e.clone(),
            None => ApiError {
                status: 0,
                code: "error".into(),
                message: error.to_string(),
                path: String::new(),
                field: None,
            },
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok()?
}

/// The stored API key, if the dashboard was opened with one instead of a session.
pub fn stored_key() -> Option<String> {
    storage()?.get_item(KEY_STORAGE).ok()?.filter(|k| !k.trim().is_empty())
}

fn remember_key(key: &str) {
    if let Some(s) = storage() {
        let _ = s.set_item(KEY_STORAGE, key.trim());
    }
}

/// Forget the credentials this browser holds (the session cookie is ended by [`logout`]).
pub fn forget() {
    if let Some(s) = storage() {
        let _ = s.remove_item(KEY_STORAGE);
    }
    CSRF.with(|c| *c.borrow_mut() = None);
}

fn set_csrf(token: Option<String>) {
    CSRF.with(|c| *c.borrow_mut() = token);
}

fn csrf() -> Option<String> {
    CSRF.with(|c| c.borrow().clone())
}

/// Sends a request and returns the body text of a 2xx answer, or the mapped error. `key`
/// overrides the stored API key (to check one before keeping it).
async fn send(
    req: RequestBuilder,
    write: bool,
    path: &str,
    key: Option<&str>,
    body: Option<String>,
) -> ApiResult<String> {
    let mut req = req.header("Accept", "application/json");
    if let Some(k) = key.map(str::to_string).or_else(stored_key) {
        req = req.header("Authorization", &format!("Bearer {}", k.trim()));
    } else if write && let Some(t) = csrf() {
        req = req.header("X-CSRF-Token", &t);
    }
    let req = match body {
        Some(b) => req
            .header("Content-Type", "application/json")
            .body(b)
            .map_err(|e| ApiError::local("bad_request", path, e))?,
        None => req.build().map_err(|e| ApiError::local("bad_request", path, e))?,
    };
    let resp = req.send().await.map_err(|e| ApiError::local("network", path, e))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| ApiError::local("network", path, e))?;
    if resp.ok() {
        return Ok(text);
    }
    Err(match serde_json::from_str::<ErrorBody>(&text) {
        Ok(b) => {
            ApiError { status, code: b.error.code, message: b.error.message, path: path.into(), field: b.error.field }
        }
        Err(_) => ApiError {
            status,
            code: "http".into(),
            message: if text.trim().is_empty() { resp.status_text() } else { text.chars().take(200).collect() },
            path: path.into(),
            field: None,
        },
    })
}

fn parse<T: DeserializeOwned>(text: &str, path: &str) -> ApiResult<T> {
    serde_json::from_str(text).map_err(|e| ApiError::local("bad_response", path, e))
}

async fn get<T: DeserializeOwned>(path: &str, query: &[(&str, String)]) -> ApiResult<T> {
    let text = get_text(path, query).await?;
    parse(&text, path)
}

async fn get_text(path: &str, query: &[(&str, String)]) -> ApiResult<String> {
    let url = format!("{PREFIX}{path}");
    let req = Request::get(&url).query(query.iter().map(|(k, v)| (*k, v.as_str())));
    send(req, false, &url, None, None).await
}

/// A request body from a typed value: typed bodies keep `serde_json::Value` (and its map code) out
/// of the pages that do not edit free-form JSON, the login page among them.
fn to_body<T: Serialize>(value: &T) -> String {
    // Structs of strings, numbers and options always serialise.
    serde_json::to_string(value).unwrap_or_default()
}

/// `POST /api/v1/auth/login`: starts a session (the cookie) and keeps its CSRF token.
pub async fn login(email: &str, password: &str) -> ApiResult<MeView> {
    let path = format!("{PREFIX}/auth/login");
    let body = to_body(&LoginBody { email: email.into(), password: password.into() });
    // A stale API key must not stand in for the session being made.
    if let Some(s) = storage() {
        let _ = s.remove_item(KEY_STORAGE);
    }
    let text = send(Request::post(&path), false, &path, None, Some(body)).await?;
    let me = MeView::from(parse::<SessionView>(&text, &path)?);
    set_csrf(me.csrf_token.clone());
    Ok(me)
}

/// Checks an API key with `GET /api/v1/auth/me`, and keeps it if the server accepts it.
pub async fn login_with_key(key: &str) -> ApiResult<MeView> {
    let path = format!("{PREFIX}/auth/me");
    let text = send(Request::get(&path), false, &path, Some(key), None).await?;
    let me = parse::<MeView>(&text, &path)?;
    remember_key(key);
    set_csrf(None);
    Ok(me)
}

/// `GET /api/v1/auth/me`: who is logged in (the cookie's session or the stored key).
pub async fn me() -> ApiResult<MeView> {
    let me: MeView = get("/auth/me", &[]).await?;
    set_csrf(me.csrf_token.clone());
    Ok(me)
}

/// `POST /api/v1/auth/logout` (ends the session and clears the cookie), then forgets the rest.
pub async fn logout() -> ApiResult<()> {
    let out = if stored_key().is_none() {
        let path = format!("{PREFIX}/auth/logout");
        send(Request::post(&path), true, &path, None, None).await.map(|_| ())
    } else {
        Ok(())
    };
    forget();
    out
}

/// `GET /api/v1/gpus`
pub async fn gpus() -> ApiResult<GpuList> {
    get("/gpus", &[]).await
}

/// `GET /api/v1/gpus/{uuid}`: one GPU, its current window and its data-quality flags.
pub async fn gpu(uuid: &str) -> ApiResult<GpuDetail> {
    get(&format!("/gpus/{}", seg(uuid)), &[]).await
}

/// `GET /api/v1/gpus/{uuid}/samples?from=&to=&limit=`
pub async fn samples(uuid: &str, from_ms: i64, to_ms: i64, limit: u32) -> ApiResult<SampleList> {
    let q = [("from", from_ms.to_string()), ("to", to_ms.to_string()), ("limit", limit.to_string())];
    get(&format!("/gpus/{}/samples", seg(uuid)), &q).await
}

/// `GET /api/v1/gpus/{uuid}/states?from=&to=&window_s=`
pub async fn states(uuid: &str, from_ms: i64, to_ms: i64, window_s: u32) -> ApiResult<Vec<StateWindow>> {
    let q = [("from", from_ms.to_string()), ("to", to_ms.to_string()), ("window_s", window_s.to_string())];
    get(&format!("/gpus/{}/states", seg(uuid)), &q).await
}

/// `GET /api/v1/fleet/summary?range=1h|24h|7d|30d`: the relative period, which the server
/// computes at most every 10 s for every dashboard at once (a `from`/`to` summary is computed
/// on each request: seconds for a fleet of thousands of GPUs).
pub async fn fleet_summary(range: Range) -> ApiResult<FleetSummary> {
    get("/fleet/summary", &[("range", range.label().to_string())]).await
}

/// `GET /api/v1/gpus/{uuid}/series?from=&to=&resolution=1m|1h` (rollups, for long ranges)
pub async fn series(uuid: &str, from_ms: i64, to_ms: i64, resolution: &str) -> ApiResult<Series> {
    let q = [("from", from_ms.to_string()), ("to", to_ms.to_string()), ("resolution", resolution.to_string())];
    get(&format!("/gpus/{}/series", seg(uuid)), &q).await
}

/// `GET /api/v1/alerts?status=`
pub async fn alerts(status: &str) -> ApiResult<AlertList> {
    get("/alerts", &[("status", status.to_string())]).await
}

/// `GET /api/v1/alerts?status=all&gpu=&limit=`: one GPU's newest alerts.
pub async fn gpu_alerts(uuid: &str, limit: u32) -> ApiResult<AlertList> {
    get("/alerts", &[("status", "all".into()), ("gpu", uuid.to_string()), ("limit", limit.to_string())]).await
}

/// `GET /api/v1/alert-rules`
pub async fn alert_rules() -> ApiResult<RuleList> {
    get("/alert-rules", &[]).await
}

/// `GET /api/v1/notification-channels`
pub async fn channels() -> ApiResult<ChannelList> {
    get("/notification-channels", &[]).await
}

async fn send_json<T: DeserializeOwned>(req: RequestBuilder, path: &str, body: String) -> ApiResult<T> {
    let text = send(req, true, path, None, Some(body)).await?;
    parse(&text, path)
}

/// `POST` of a typed body to `path` (under the API prefix, like [`get`]'s), answer parsed.
async fn post<T: DeserializeOwned, B: Serialize>(path: &str, body: &B) -> ApiResult<T> {
    let url = format!("{PREFIX}{path}");
    send_json(Request::post(&url), &url, to_body(body)).await
}

/// `PUT` of a typed body to `path` (under the API prefix), answer parsed.
async fn put<T: DeserializeOwned, B: Serialize>(path: &str, body: &B) -> ApiResult<T> {
    let url = format!("{PREFIX}{path}");
    send_json(Request::put(&url), &url, to_body(body)).await
}

/// `DELETE` of `path` (under the API prefix); the answer is not read.
async fn delete(path: &str) -> ApiResult<()> {
    let url = format!("{PREFIX}{path}");
    send(Request::delete(&url), true, &url, None, None).await.map(|_| ())
}

/// `GET /api/v1/alert-rules/fields`
pub async fn rule_fields() -> ApiResult<RuleFields> {
    get("/alert-rules/fields", &[]).await
}

/// `POST /api/v1/alert-rules/check`: parses a condition without storing it.
pub async fn check_condition(condition: &str) -> ApiResult<()> {
    post::<ConditionCheck, _>("/alert-rules/check", &CheckBody { condition: condition.into() }).await.map(|_| ())
}

/// `POST /api/v1/alert-rules` (`id` None) or `PUT /api/v1/alert-rules/{id}`.
pub async fn save_rule(id: Option<RuleId>, body: &RuleBody) -> ApiResult<RuleView> {
    match id {
        None => post("/alert-rules", body).await,
        Some(id) => put(&format!("/alert-rules/{id}"), body).await,
    }
}

/// `DELETE /api/v1/alert-rules/{id}`
pub async fn delete_rule(id: RuleId) -> ApiResult<()> {
    delete(&format!("/alert-rules/{id}")).await
}

/// `POST /api/v1/notification-channels`
pub async fn create_channel(body: &ChannelBody) -> ApiResult<ChannelView> {
    post("/notification-channels", body).await
}

/// `PUT /api/v1/notification-channels/{id}` with the fields to change.
pub async fn update_channel(id: ChannelId, body: &ChannelBody) -> ApiResult<ChannelView> {
    put(&format!("/notification-channels/{id}"), body).await
}

/// `DELETE /api/v1/notification-channels/{id}`
pub async fn delete_channel(id: ChannelId) -> ApiResult<()> {
    delete(&format!("/notification-channels/{id}")).await
}

/// `POST /api/v1/notification-channels/{id}/test`: the first attempt's outcome.
pub async fn test_channel(id: ChannelId) -> ApiResult<TestResult> {
    let path = format!("{PREFIX}/notification-channels/{id}/test");
    let text = send(Request::post(&path), true, &path, None, None).await?;
    parse(&text, &path)
}

/// `GET /api/v1/silences`
pub async fn silences() -> ApiResult<SilenceList> {
    get("/silences", &[]).await
}

/// `POST /api/v1/silences`
pub async fn create_silence(body: &SilenceBody) -> ApiResult<SilenceView> {
    post("/silences", body).await
}

/// `DELETE /api/v1/silences/{id}`: ends the silence now.
pub async fn end_silence(id: SilenceId) -> ApiResult<()> {
    delete(&format!("/silences/{id}")).await
}

/// `GET /api/v1/settings/thresholds`
pub async fn thresholds() -> ApiResult<Map<String, Value>> {
    get("/settings/thresholds", &[]).await
}

/// `PUT /api/v1/settings/thresholds`
pub async fn put_thresholds(values: &Map<String, Value>) -> ApiResult<Map<String, Value>> {
    put("/settings/thresholds", values).await
}

/// `GET /api/v1/api-keys`: all of the organisation's for an admin, else the caller's own.
pub async fn api_keys() -> ApiResult<Vec<KeyView>> {
    get("/api-keys", &[]).await
}

/// `POST /api/v1/api-keys`: the answer holds the secret, shown once.
pub async fn create_api_key(name: &str, scopes: &[String]) -> ApiResult<CreatedKeyView> {
    post("/api-keys", &NewKeyBody { name: name.into(), scopes: scopes.to_vec(), team_id: None }).await
}

/// `DELETE /api/v1/api-keys/{id}`: revokes the key.
pub async fn revoke_api_key(id: ApiKeyId) -> ApiResult<()> {
    delete(&format!("/api-keys/{id}")).await
}

/// `GET /api/v1/users`
pub async fn users() -> ApiResult<Vec<UserView>> {
    get("/users", &[]).await
}

/// `POST /api/v1/users`
pub async fn create_user(body: &NewUserBody) -> ApiResult<UserView> {
    post("/users", body).await
}

/// `PUT /api/v1/auth/password`: the logged-in user's own password; with `revoke_api_keys`
/// every API key the user made is revoked too (after a suspected compromise).
pub async fn change_password(current: &str, new: &str, revoke_api_keys: bool) -> ApiResult<()> {
    let path = format!("{PREFIX}/auth/password");
    let body = to_body(&PasswordBody { current_password: current.into(), new_password: new.into(), revoke_api_keys });
    send(Request::put(&path), true, &path, None, Some(body)).await.map(|_| ())
}

/// `PUT /api/v1/users/{id}` with the fields to change.
pub async fn update_user(id: UserId, body: &UserPatch) -> ApiResult<UserView> {
    put(&format!("/users/{id}"), body).await
}

/// `DELETE /api/v1/users/{id}`: also revokes their keys and ends their sessions.
pub async fn delete_user(id: UserId) -> ApiResult<()> {
    delete(&format!("/users/{id}")).await
}

/// `GET /api/v1/teams`
pub async fn teams() -> ApiResult<Vec<TeamView>> {
    get("/teams", &[]).await
}

/// `POST /api/v1/teams`
pub async fn create_team(name: &str) -> ApiResult<TeamView> {
    post("/teams", &TeamBody { name: name.into() }).await
}

/// `DELETE /api/v1/teams/{id}`
pub async fn delete_team(id: TeamId) -> ApiResult<()> {
    delete(&format!("/teams/{id}")).await
}

/// `GET /api/v1/hosts`
pub async fn hosts() -> ApiResult<Vec<HostView>> {
    get("/hosts", &[]).await
}

/// `PUT /api/v1/hosts/{host}/team`: the host's team (None: no assignment).
pub async fn assign_host(host: &str, team_id: Option<TeamId>) -> ApiResult<HostView> {
    put(&format!("/hosts/{}/team", seg(host)), &AssignBody { team_id }).await
}

/// `GET /api/v1/jobs?from=&to=`
pub async fn jobs(from_ms: i64, to_ms: i64) -> ApiResult<Vec<Job>> {
    get("/jobs", &[("from", from_ms.to_string()), ("to", to_ms.to_string())]).await
}

/// `GET /api/v1/prices`
pub async fn prices() -> ApiResult<Prices> {
    get("/prices", &[]).await
}

/// `PUT /api/v1/prices`: the organisation's whole price table.
pub async fn put_prices(table: &PriceTable) -> ApiResult<Prices> {
    let path = format!("{PREFIX}/prices");
    let body = serde_json::to_string(table).map_err(|e| ApiError::local("bad_request", &path, e))?;
    send_json(Request::put(&path), &path, body).await
}

/// `GET /api/v1/reports/billing?from=&to=&group_by=&format=json`
pub async fn billing(from_ms: i64, to_ms: i64, group_by: &ReportGrouping) -> ApiResult<BillingReport> {
    get("/reports/billing", &billing_query(from_ms, to_ms, group_by, "json")).await
}

/// The same report as CSV text.
pub async fn billing_csv(from_ms: i64, to_ms: i64, group_by: &ReportGrouping) -> ApiResult<String> {
    get_text("/reports/billing", &billing_query(from_ms, to_ms, group_by, "csv")).await
}

fn billing_query(from_ms: i64, to_ms: i64, group_by: &ReportGrouping, format: &str) -> [(&'static str, String); 4] {
    [
        ("from", from_ms.to_string()),
        ("to", to_ms.to_string()),
        ("group_by", group_by.to_string()),
        ("format", format.to_string()),
    ]
}
