//! Accounts API: login/logout/me, organisations, users, teams, API keys, and the team
//! assignment of hosts and GPUs. Every read and write is scoped to the caller's organisation:
//! an id of another organisation is a 404, exactly like an id that does not exist.
//!
//! Who may do what (a session holds its role's scopes, see `Role::scopes`):
//! - any authenticated caller: `GET /auth/me`;
//! - `read` (every role): teams, hosts;
//! - members (session) and `admin` keys: create API keys with at most their own scopes;
//!   members list and revoke their own keys;
//! - `admin`: users, teams, every key, host and GPU assignments;
//! - admins of the default organisation: create and list organisations.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header::SET_COOKIE;
use axum::http::{Extensions, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use fleetlens_api::accounts::{
    AssignBody, CreatedKeyView, CreatedOrgView, GpuTeamView, HostView, KeyView, LoginBody, MeKeyView, MeView,
    NewKeyBody, NewOrgBody, NewUserBody, OrgView, PasswordBody, SessionView, TeamBody, TeamView, UserPatch, UserView,
    Via,
};
use fleetlens_store::accounts::{
    ApiKeyId, ApiKeyInfo, Assigned, GpuTeam, HostRecord, NewSession, NewUser, OrgRecord, Role, TeamId, TeamRecord,
    UserId, UserRecord, UserUpdate, expand_scopes,
};
use fleetlens_store::{NewApiKey, Scope, hash_api_key};
use serde::de::DeserializeOwned;

use crate::accounts::{
    MAX_PASSWORD, check_password_policy, clean_name, client_ip, hash_password_blocking, new_api_key, normalize_email,
    random_token, verify_password_blocking,
};
use crate::auth::{Caller, Principal, check_csrf, is_cross_site, session_of};
use crate::error::{ApiError, ApiResult, JsonBody};
use crate::state::AppState;
use crate::time::now_ms;

// ---- views (the wire types are `fleetlens_api::accounts`'s) ----

fn org_view(o: OrgRecord) -> OrgView {
    OrgView { id: o.id, name: o.name, created_ms: o.created_ms }
}

fn user_view(u: UserRecord) -> UserView {
    UserView {
        id: u.id,
        email: u.email,
        name: u.name,
        role: u.role,
        disabled: u.disabled_ms.is_some(),
        created_ms: u.created_ms,
        updated_ms: u.updated_ms,
        last_login_ms: u.last_login_ms,
        disabled_ms: u.disabled_ms,
    }
}

fn team_view(t: TeamRecord) -> TeamView {
    TeamView { id: t.id, name: t.name, created_ms: t.created_ms, members: t.members }
}

fn key_view(k: ApiKeyInfo) -> KeyView {
    KeyView {
        id: k.key.id,
        name: k.key.name,
        prefix: k.key.prefix,
        scopes: k.key.scopes.clone(),
        user_id: k.user_id,
        team_id: k.team_id,
        created_ms: k.key.created_ms,
        last_used_ms: k.last_used_ms,
        revoked: k.key.revoked_ms.is_some(),
        revoked_ms: k.key.revoked_ms,
    }
}

fn gpu_team_view(g: GpuTeam) -> GpuTeamView {
    GpuTeamView { uuid: g.uuid, host: g.host, team_id: g.team_id, team_name: g.team_name, team_source: g.source }
}

fn host_view(h: HostRecord) -> HostView {
    HostView {
        host: h.host,
        assigned_team_id: h.assigned_team_id,
        last_seen_ms: h.last_seen_ms,
        gpus: h.gpus.into_iter().map(gpu_team_view).collect(),
    }
}

// ---- helpers ----

/// The JSON body of the two session routes, parsed only after their own checks of the request
/// (a cross-site login, a caller that is not a session) so that those answer first; every other
/// route takes [`JsonBody`], with the same rules.
fn parse<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> ApiResult<T> {
    crate::error::require_json(headers)?;
    crate::error::parse_json(body)
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::Unprocessable { field: field.into(), message: message.into() }
}

fn not_found(what: &str) -> ApiError {
    ApiError::NotFound(format!("no such {what}"))
}

/// The one answer to a new user's email that is taken, wherever it is taken.
const EMAIL_UNAVAILABLE: &str = "this email address cannot be used for a new user";

fn email_field(email: &str) -> ApiResult<String> {
    normalize_email(email).ok_or_else(|| invalid("email", "not an email address"))
}

fn password_field(field: &str, password: &str) -> ApiResult<()> {
    check_password_policy(password).map_err(|m| invalid(field, m))
}

fn team_name_field(name: &str) -> ApiResult<String> {
    clean_name(name, 100).ok_or_else(|| invalid("name", "1–100 characters, no control characters"))
}

/// The team a new key's hosts join: any team of the organisation for an admin; for anyone
/// else only a team they are a member of (a key's team decides whose bill and dashboards the
/// hosts land in).
async fn key_team_allowed(state: &AppState, caller: &Caller, team: Option<TeamId>) -> ApiResult<()> {
    let Some(id) = team else { return Ok(()) };
    let team = state.store.team(caller.org, id).await?.ok_or_else(|| not_found("team"))?;
    if caller.has(Scope::Admin) {
        return Ok(());
    }
    match caller.user_id() {
        Some(user) if team.members.contains(&user) => Ok(()),
        _ => Err(ApiError::Denied("you can attach keys only to teams you are a member of".into())),
    }
}

// ---- sessions ----

/// `POST /api/v1/auth/login` `{"email", "password"}` → the session cookie and
/// [`SessionView`]; 401 `invalid_credentials`, 429 `rate_limited` (with `Retry-After`).
#[utoipa::path(post, path = "/auth/login", tag = "accounts", security(()), request_body = LoginBody, responses((status = 200, body = SessionView, description = "Logged in: the session cookie is set", headers(("set-cookie" = String))), crate::openapi::LoginErrors))]
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    ext: Extensions,
    body: Bytes,
) -> ApiResult<Response> {
    if is_cross_site(&headers) {
        return Err(ApiError::Csrf("cross-site login refused".into()));
    }
    let b: LoginBody = parse(&headers, &body)?;
    let config = &state.config.accounts;
    let email = normalize_email(&b.email)
        .unwrap_or_else(|| b.email.trim().chars().take(254).collect::<String>().to_lowercase());
    let ip = client_ip(config, &headers, &ext);
    state
        .accounts
        .take_login_attempt(config, &ip, &email)
        .map_err(|wait| ApiError::RateLimited { retry_after_s: wait.as_secs().max(1) })?;
    let found = if b.password.len() > MAX_PASSWORD * 4 { None } else { state.store.user_for_login(&email).await? };
    let user = match found {
        Some((user, hash)) => verify_password_blocking(&state.accounts, b.password, hash).await?.then_some(user),
        None => {
            // As slow as a real check, so the answer does not tell which emails exist.
            let dummy = crate::accounts::dummy_hash().to_string();
            verify_password_blocking(&state.accounts, b.password, dummy).await?;
            None
        }
    };
    let user = user.filter(|u| u.disabled_ms.is_none()).ok_or(ApiError::BadCredentials)?;
    state.accounts.login_succeeded(&ip, &email);

    let token = random_token();
    let csrf_token = random_token();
    let now = now_ms();
    let expires_ms = now.saturating_add(config.session_ttl_ms());
    state
        .store
        .create_session(NewSession {
            token_hash: &hash_api_key(&token),
            user_id: user.id,
            org_id: user.org_id,
            csrf_token: &csrf_token,
            created_ms: now,
            expires_ms,
        })
        .await?;
    let org = state.store.org(user.org_id).await?.ok_or_else(|| not_found("organisation"))?;
    let view = SessionView {
        scopes: user.role.scopes().to_vec(),
        user: user_view(user),
        org: org_view(org),
        csrf_token,
        expires_ms,
    };
    Ok(([(SET_COOKIE, config.session_cookie(&token))], Json(view)).into_response())
}

/// `POST /api/v1/auth/logout`: ends the cookie's session (CSRF token required) and clears
/// the cookie. 204 also when there is no session.
#[utoipa::path(post, path = "/auth/logout", tag = "accounts", security((), ("session" = [])), responses((status = 204, description = "Logged out; the cookie is cleared"), crate::openapi::AuthErrors))]
pub async fn logout(State(state): State<AppState>, method: Method, headers: HeaderMap) -> ApiResult<Response> {
    if let Some((session, hash)) = session_of(&state, &headers).await? {
        check_csrf(&method, &headers, &session.csrf_token)?;
        state.store.delete_session(&hash).await?;
    }
    Ok((StatusCode::NO_CONTENT, [(SET_COOKIE, state.config.accounts.clear_session_cookie())]).into_response())
}

/// `GET /api/v1/auth/me`: who the caller is.
#[utoipa::path(get, path = "/auth/me", tag = "accounts", responses((status = 200, body = MeView), crate::openapi::AuthErrors))]
pub async fn me(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<MeView>> {
    let org = state.store.org(caller.org).await?.ok_or_else(|| not_found("organisation"))?;
    let scopes = expand_scopes(&caller.key.scopes).to_vec();
    let view = match caller.principal {
        Principal::Session { user, csrf_token, expires_ms, .. } => MeView {
            org: org_view(org),
            via: Via::Session,
            role: Some(user.role),
            user: Some(user_view(user)),
            scopes,
            api_key: None,
            csrf_token: Some(csrf_token),
            session_expires_ms: Some(expires_ms),
        },
        Principal::ApiKey { team, .. } => MeView {
            org: org_view(org),
            via: Via::ApiKey,
            user: None,
            role: None,
            scopes,
            api_key: Some(MeKeyView {
                id: caller.key.id,
                name: caller.key.name,
                prefix: caller.key.prefix,
                team_id: team,
            }),
            csrf_token: None,
            session_expires_ms: None,
        },
    };
    Ok(Json(view))
}

/// `PUT /api/v1/auth/password` `{"current_password", "new_password", "revoke_api_keys"?}`
/// (a session): ends the user's other sessions, and with `revoke_api_keys` revokes the keys
/// the user made. Checks of the current password spend login attempts (429 when spent).
#[utoipa::path(put, path = "/auth/password", tag = "accounts", security(("session" = [])), request_body = PasswordBody, responses((status = 204, description = "Changed; the user's other sessions are ended"), crate::openapi::PasswordErrors))]
pub async fn change_password(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ext: Extensions,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let Principal::Session { user, token_hash, .. } = &caller.principal else {
        return Err(ApiError::Denied("log in to change your password".into()));
    };
    let b: PasswordBody = parse(&headers, &body)?;
    password_field("new_password", &b.new_password)?;
    // A stolen session must not become an unlimited password oracle: the check of the
    // current password spends the same attempts as a login.
    let config = &state.config.accounts;
    let ip = client_ip(config, &headers, &ext);
    state
        .accounts
        .take_login_attempt(config, &ip, &user.email)
        .map_err(|wait| ApiError::RateLimited { retry_after_s: wait.as_secs().max(1) })?;
    let (_, hash) = state.store.user_for_login(&user.email).await?.ok_or(ApiError::BadSession)?;
    if !verify_password_blocking(&state.accounts, b.current_password, hash).await? {
        return Err(invalid("current_password", "wrong password"));
    }
    state.accounts.login_succeeded(&ip, &user.email);
    let new_hash = hash_password_blocking(&state.accounts, b.new_password).await?;
    let update = UserUpdate { password_hash: Some(new_hash), ..Default::default() };
    let now = now_ms();
    state.store.update_user(caller.org, user.id, &update, now).await?;
    state.store.delete_sessions_of(caller.org, user.id, Some(token_hash)).await?;
    if b.revoke_api_keys {
        let revoked = state.store.revoke_api_keys_of(caller.org, user.id, now).await?;
        state.key_cache.clear();
        tracing::info!(user = user.id.get(), revoked, "API keys revoked with a password change");
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---- organisations ----

fn require_instance_admin(caller: &Caller) -> ApiResult<()> {
    if caller.is_instance_admin() {
        Ok(())
    } else {
        Err(ApiError::Denied("only admins of the default organisation manage organisations".into()))
    }
}

/// `GET /api/v1/orgs` (admins of the default organisation).
#[utoipa::path(get, path = "/orgs", tag = "accounts", responses((status = 200, body = Vec<OrgView>), crate::openapi::AuthErrors))]
pub async fn list_orgs(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<OrgView>>> {
    require_instance_admin(&caller)?;
    Ok(Json(state.store.orgs().await?.into_iter().map(org_view).collect()))
}

/// `POST /api/v1/orgs` `{"name", "admin_email", "admin_password", "admin_name"?}` (admins of
/// the default organisation): a new organisation and its first admin.
#[utoipa::path(post, path = "/orgs", tag = "accounts", request_body = NewOrgBody, responses((status = 201, body = CreatedOrgView), crate::openapi::BodyErrors))]
pub async fn create_org(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(b): JsonBody<NewOrgBody>,
) -> ApiResult<(StatusCode, Json<CreatedOrgView>)> {
    require_instance_admin(&caller)?;
    let name = clean_name(&b.name, 100).ok_or_else(|| invalid("name", "1–100 characters"))?;
    let email = email_field(&b.admin_email).map_err(|_| invalid("admin_email", "not an email address"))?;
    password_field("admin_password", &b.admin_password)?;
    let admin_name = clean_name(b.admin_name.as_deref().unwrap_or("Administrator"), 200)
        .ok_or_else(|| invalid("admin_name", "1–200 characters"))?;
    if state.store.user_for_login(&email).await?.is_some() {
        return Err(ApiError::Conflict(EMAIL_UNAVAILABLE.into()));
    }
    let hash = hash_password_blocking(&state.accounts, b.admin_password).await?;
    let now = now_ms();
    let org = state
        .store
        .create_org(&name, now)
        .await
        .map_err(|e| ApiError::conflict_or(e, "an organisation of that name exists"))?;
    let admin = state
        .store
        .create_user(NewUser {
            org_id: org,
            email: &email,
            name: &admin_name,
            password_hash: &hash,
            role: Role::Admin,
            now_ms: now,
        })
        .await
        .map_err(|e| ApiError::conflict_or(e, EMAIL_UNAVAILABLE))?;
    let org = state.store.org(org).await?.ok_or_else(|| not_found("organisation"))?;
    Ok((StatusCode::CREATED, Json(CreatedOrgView { org: org_view(org), admin: user_view(admin) })))
}

// ---- users ----

/// `GET /api/v1/users` (admin).
#[utoipa::path(get, path = "/users", tag = "accounts", responses((status = 200, body = Vec<UserView>), crate::openapi::AuthErrors))]
pub async fn list_users(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<UserView>>> {
    caller.require(Scope::Admin)?;
    Ok(Json(state.store.users(caller.org).await?.into_iter().map(user_view).collect()))
}

/// `POST /api/v1/users` `{"email", "name"?, "password", "role"}` (admin).
#[utoipa::path(post, path = "/users", tag = "accounts", request_body = NewUserBody, responses((status = 201, body = UserView), crate::openapi::BodyErrors))]
pub async fn create_user(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(b): JsonBody<NewUserBody>,
) -> ApiResult<(StatusCode, Json<UserView>)> {
    caller.require(Scope::Admin)?;
    let email = email_field(&b.email)?;
    let role = b.role;
    password_field("password", &b.password)?;
    let name = match b.name.as_deref() {
        Some(n) => clean_name(n, 200).ok_or_else(|| invalid("name", "1–200 characters"))?,
        None => email.split('@').next().unwrap_or_default().to_string(),
    };
    let hash = hash_password_blocking(&state.accounts, b.password).await?;
    let created = state
        .store
        .create_user(NewUser {
            org_id: caller.org,
            email: &email,
            name: &name,
            password_hash: &hash,
            role,
            now_ms: now_ms(),
        })
        .await;
    match created {
        Ok(user) => Ok((StatusCode::CREATED, Json(user_view(user)))),
        Err(e) if e.is_conflict() => {
            // Emails are unique across the install (login needs only the email), so a taken
            // address cannot be given out twice. The answer never says where it is taken, and
            // these refusals are rate-limited per organisation, so an org admin cannot sweep
            // the install for other organisations' users.
            state
                .accounts
                .take_email_probe(&state.config.accounts, caller.org)
                .map_err(|wait| ApiError::RateLimited { retry_after_s: wait.as_secs().max(1) })?;
            Err(ApiError::Conflict(EMAIL_UNAVAILABLE.into()))
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /api/v1/users/{id}` (admin, or the user themself).
#[utoipa::path(get, path = "/users/{id}", tag = "accounts", params(("id" = i64, Path)), responses((status = 200, body = UserView), crate::openapi::ItemErrors))]
pub async fn get_user(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<UserId>,
) -> ApiResult<Json<UserView>> {
    if caller.user().map(|u| u.id) != Some(id) {
        caller.require(Scope::Admin)?;
    }
    let user = state.store.user(caller.org, id).await?.ok_or_else(|| not_found("user"))?;
    Ok(Json(user_view(user)))
}

/// Refuse a change that would leave the organisation without an enabled admin.
async fn keep_an_admin(state: &AppState, caller: &Caller, target: &UserRecord) -> ApiResult<()> {
    if target.role == Role::Admin && target.disabled_ms.is_none() && state.store.count_admins(caller.org).await? <= 1 {
        return Err(ApiError::Conflict("this is the organisation's last admin".into()));
    }
    Ok(())
}

/// `PUT /api/v1/users/{id}` `{"name"?, "role"?, "password"?, "disabled"?}` (admin). A new
/// password or disabling ends the user's sessions.
#[utoipa::path(put, path = "/users/{id}", tag = "accounts", params(("id" = i64, Path)), request_body = UserPatch, responses((status = 200, body = UserView), crate::openapi::ItemBodyErrors))]
pub async fn update_user(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<UserId>,
    JsonBody(b): JsonBody<UserPatch>,
) -> ApiResult<Json<UserView>> {
    caller.require(Scope::Admin)?;
    let target = state.store.user(caller.org, id).await?.ok_or_else(|| not_found("user"))?;
    let mut update = UserUpdate { disabled: b.disabled, ..Default::default() };
    if let Some(name) = b.name.as_deref() {
        update.name = Some(clean_name(name, 200).ok_or_else(|| invalid("name", "1–200 characters"))?);
    }
    update.role = b.role;
    if let Some(password) = b.password {
        password_field("password", &password)?;
        update.password_hash = Some(hash_password_blocking(&state.accounts, password).await?);
    }
    let demoted = update.role.is_some_and(|r| r != Role::Admin) || update.disabled == Some(true);
    if demoted {
        keep_an_admin(&state, &caller, &target).await?;
    }
    let user = state.store.update_user(caller.org, id, &update, now_ms()).await?.ok_or_else(|| not_found("user"))?;
    if update.password_hash.is_some() || update.disabled == Some(true) {
        let keep = match &caller.principal {
            Principal::Session { user, token_hash, .. } if user.id == id => Some(token_hash.as_str()),
            _ => None,
        };
        state.store.delete_sessions_of(caller.org, id, keep).await?;
    }
    state.key_cache.clear();
    Ok(Json(user_view(user)))
}

/// `DELETE /api/v1/users/{id}` (admin): ends the user's sessions and revokes their keys.
#[utoipa::path(delete, path = "/users/{id}", tag = "accounts", params(("id" = i64, Path)), responses((status = 204, description = "Deleted"), crate::openapi::ItemBodyErrors))]
pub async fn delete_user(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<UserId>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Admin)?;
    let target = state.store.user(caller.org, id).await?.ok_or_else(|| not_found("user"))?;
    if caller.user().map(|u| u.id) == Some(id) {
        return Err(ApiError::Conflict("you cannot delete yourself".into()));
    }
    keep_an_admin(&state, &caller, &target).await?;
    if !state.store.delete_user(caller.org, id, now_ms()).await? {
        return Err(not_found("user"));
    }
    state.key_cache.clear();
    Ok(StatusCode::NO_CONTENT)
}

// ---- teams ----

/// `GET /api/v1/teams` (read).
#[utoipa::path(get, path = "/teams", tag = "accounts", responses((status = 200, body = Vec<TeamView>), crate::openapi::AuthErrors))]
pub async fn list_teams(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<TeamView>>> {
    caller.require(Scope::Read)?;
    Ok(Json(state.store.teams(caller.org).await?.into_iter().map(team_view).collect()))
}

/// `POST /api/v1/teams` `{"name"}` (admin).
#[utoipa::path(post, path = "/teams", tag = "accounts", request_body = TeamBody, responses((status = 201, body = TeamView), crate::openapi::BodyErrors))]
pub async fn create_team(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(b): JsonBody<TeamBody>,
) -> ApiResult<(StatusCode, Json<TeamView>)> {
    caller.require(Scope::Admin)?;
    let name = team_name_field(&b.name)?;
    let team = state
        .store
        .create_team(caller.org, &name, now_ms())
        .await
        .map_err(|e| ApiError::conflict_or(e, "a team of that name exists"))?;
    Ok((StatusCode::CREATED, Json(team_view(team))))
}

/// `GET /api/v1/teams/{id}` (read).
#[utoipa::path(get, path = "/teams/{id}", tag = "accounts", params(("id" = i64, Path)), responses((status = 200, body = TeamView), crate::openapi::ItemErrors))]
pub async fn get_team(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<TeamId>,
) -> ApiResult<Json<TeamView>> {
    caller.require(Scope::Read)?;
    Ok(Json(state.store.team(caller.org, id).await?.ok_or_else(|| not_found("team")).map(team_view)?))
}

/// `PUT /api/v1/teams/{id}` `{"name"}` (admin).
#[utoipa::path(put, path = "/teams/{id}", tag = "accounts", params(("id" = i64, Path)), request_body = TeamBody, responses((status = 200, body = TeamView), crate::openapi::ItemBodyErrors))]
pub async fn rename_team(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<TeamId>,
    JsonBody(b): JsonBody<TeamBody>,
) -> ApiResult<Json<TeamView>> {
    caller.require(Scope::Admin)?;
    let name = team_name_field(&b.name)?;
    let team = state
        .store
        .rename_team(caller.org, id, &name)
        .await
        .map_err(|e| ApiError::conflict_or(e, "a team of that name exists"))?
        .ok_or_else(|| not_found("team"))?;
    state.accounts.assignments_changed();
    Ok(Json(team_view(team)))
}

/// `DELETE /api/v1/teams/{id}` (admin): its hosts, GPUs and keys are left without a team.
#[utoipa::path(delete, path = "/teams/{id}", tag = "accounts", params(("id" = i64, Path)), responses((status = 204, description = "Deleted"), crate::openapi::ItemErrors))]
pub async fn delete_team(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<TeamId>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Admin)?;
    if !state.store.delete_team(caller.org, id).await? {
        return Err(not_found("team"));
    }
    state.accounts.assignments_changed();
    state.key_cache.clear();
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /api/v1/teams/{id}/members/{user_id}` (admin).
#[utoipa::path(put, path = "/teams/{id}/members/{user_id}", tag = "accounts", params(("id" = i64, Path), ("user_id" = i64, Path)), responses((status = 204, description = "Added"), crate::openapi::ItemErrors))]
pub async fn add_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, user)): Path<(TeamId, UserId)>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Admin)?;
    if !state.store.set_team_member(caller.org, team, user, true).await? {
        return Err(not_found("team or user"));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/v1/teams/{id}/members/{user_id}` (admin).
#[utoipa::path(delete, path = "/teams/{id}/members/{user_id}", tag = "accounts", params(("id" = i64, Path), ("user_id" = i64, Path)), responses((status = 204, description = "Removed"), crate::openapi::ItemErrors))]
pub async fn remove_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, user)): Path<(TeamId, UserId)>,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Admin)?;
    if !state.store.set_team_member(caller.org, team, user, false).await? {
        return Err(not_found("team or user"));
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---- API keys ----

/// May the caller see and revoke this key: admins every key, others their own.
fn may_manage(caller: &Caller, key: &ApiKeyInfo) -> bool {
    caller.has(Scope::Admin) || (caller.user().is_some() && key.user_id.is_some() && key.user_id == caller.user_id())
}

/// `GET /api/v1/api-keys`: admins see every key of the organisation, users their own.
#[utoipa::path(get, path = "/api-keys", tag = "accounts", responses((status = 200, body = Vec<KeyView>), crate::openapi::AuthErrors))]
pub async fn list_keys(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<KeyView>>> {
    let keys = if caller.has(Scope::Admin) {
        state.store.api_keys(caller.org, None).await?
    } else if let Some(user) = caller.user() {
        state.store.api_keys(caller.org, Some(user.id)).await?
    } else {
        return Err(ApiError::Forbidden(Scope::Admin.as_str()));
    };
    Ok(Json(keys.into_iter().map(key_view).collect()))
}

/// `POST /api/v1/api-keys` `{"name", "scopes": ["ingest"|"read"|"admin"], "team_id"?}`:
/// members (session) and admins; never more scopes than the caller holds. The answer is the
/// only time the secret (`key`) is shown.
#[utoipa::path(post, path = "/api-keys", tag = "accounts", request_body = NewKeyBody, responses((status = 201, body = CreatedKeyView, description = "The key: `key` is shown this once"), crate::openapi::BodyErrors))]
pub async fn create_key(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(b): JsonBody<NewKeyBody>,
) -> ApiResult<(StatusCode, Json<CreatedKeyView>)> {
    match caller.role() {
        Some(Role::Viewer) => return Err(ApiError::RoleForbidden { role: "viewer", needs: "member" }),
        Some(_) => {}
        None => caller.require(Scope::Admin)?,
    }
    let name = clean_name(&b.name, 100).ok_or_else(|| invalid("name", "1–100 characters"))?;
    if b.scopes.is_empty() {
        return Err(invalid("scopes", "at least one of ingest, read, admin"));
    }
    let mut scopes: Vec<Scope> = Vec::new();
    for s in &b.scopes {
        let scope = Scope::parse(s).ok_or_else(|| invalid("scopes", format!("{s:?}: one of ingest, read, admin")))?;
        if !caller.has(scope) {
            return Err(ApiError::Denied(format!("you cannot grant the `{s}` scope")));
        }
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    key_team_allowed(&state, &caller, b.team_id).await?;
    let secret = new_api_key();
    let prefix: String = secret.chars().take(12).collect();
    let key_hash = hash_api_key(&secret);
    let key = NewApiKey {
        org_id: caller.org,
        name: &name,
        prefix: &prefix,
        key_hash: &key_hash,
        scopes: &scopes,
        created_ms: now_ms(),
    };
    let info = state.store.create_api_key(key, caller.user_id(), b.team_id).await?;
    Ok((StatusCode::CREATED, Json(CreatedKeyView { view: key_view(info), key: secret })))
}

/// `GET /api/v1/api-keys/{id}`: admins, or the key's owner.
#[utoipa::path(get, path = "/api-keys/{id}", tag = "accounts", params(("id" = i64, Path)), responses((status = 200, body = KeyView), crate::openapi::ItemErrors))]
pub async fn get_key(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ApiKeyId>,
) -> ApiResult<Json<KeyView>> {
    let key = state
        .store
        .api_key(caller.org, id)
        .await?
        .filter(|k| may_manage(&caller, k))
        .ok_or_else(|| not_found("API key"))?;
    Ok(Json(key_view(key)))
}

/// `DELETE /api/v1/api-keys/{id}`: revokes the key (admins, or its owner); the key answers 401
/// from then on. Returns the revoked key.
#[utoipa::path(delete, path = "/api-keys/{id}", tag = "accounts", params(("id" = i64, Path)), responses((status = 200, body = KeyView, description = "Revoked"), crate::openapi::ItemErrors))]
pub async fn revoke_key(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<ApiKeyId>,
) -> ApiResult<Json<KeyView>> {
    state
        .store
        .api_key(caller.org, id)
        .await?
        .filter(|k| may_manage(&caller, k))
        .ok_or_else(|| not_found("API key"))?;
    let key = state.store.revoke_api_key(caller.org, id, now_ms()).await?.ok_or_else(|| not_found("API key"))?;
    state.key_cache.clear();
    Ok(Json(key_view(key)))
}

// ---- hosts and GPUs ----

/// `GET /api/v1/hosts` (read): hosts, their GPUs and teams.
#[utoipa::path(get, path = "/hosts", tag = "accounts", responses((status = 200, body = Vec<HostView>), crate::openapi::AuthErrors))]
pub async fn list_hosts(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<HostView>>> {
    caller.require(Scope::Read)?;
    Ok(Json(state.store.hosts(caller.org).await?.into_iter().map(host_view).collect()))
}

fn assigned(outcome: Assigned, what: &str) -> ApiResult<()> {
    match outcome {
        Assigned::Done => Ok(()),
        Assigned::NoTarget => Err(not_found(what)),
        Assigned::NoTeam => Err(not_found("team")),
    }
}

/// `PUT /api/v1/hosts/{host}/team` `{"team_id": id|null}` (admin): the host's GPUs, now and
/// later, belong to the team (unless a GPU is assigned on its own).
#[utoipa::path(put, path = "/hosts/{host}/team", tag = "accounts", params(("host" = String, Path)), request_body = AssignBody, responses((status = 200, body = HostView), crate::openapi::ItemBodyErrors))]
pub async fn assign_host(
    State(state): State<AppState>,
    caller: Caller,
    Path(host): Path<String>,
    JsonBody(b): JsonBody<AssignBody>,
) -> ApiResult<Json<HostView>> {
    caller.require(Scope::Admin)?;
    assigned(state.store.set_host_team(caller.org, &host, b.team_id, now_ms()).await?, "host")?;
    state.accounts.assignments_changed();
    let view =
        state.store.hosts(caller.org).await?.into_iter().find(|h| h.host == host).ok_or_else(|| not_found("host"))?;
    Ok(Json(host_view(view)))
}

/// `PUT /api/v1/gpus/{uuid}/team` `{"team_id": id|null}` (admin): this GPU's team, above its
/// host's; null returns it to its host's.
#[utoipa::path(put, path = "/gpus/{uuid}/team", tag = "accounts", params(("uuid" = String, Path)), request_body = AssignBody, responses((status = 200, body = GpuTeamView), crate::openapi::ItemBodyErrors))]
pub async fn assign_gpu(
    State(state): State<AppState>,
    caller: Caller,
    Path(uuid): Path<String>,
    JsonBody(b): JsonBody<AssignBody>,
) -> ApiResult<Json<GpuTeamView>> {
    caller.require(Scope::Admin)?;
    assigned(state.store.set_gpu_team(caller.org, &uuid, b.team_id).await?, "GPU")?;
    state.accounts.assignments_changed();
    let view = state
        .store
        .gpu_teams(caller.org)
        .await?
        .into_iter()
        .find(|g| g.uuid == uuid)
        .ok_or_else(|| not_found("GPU"))?;
    Ok(Json(gpu_team_view(view)))
}
