//! Authentication: an API key (`Authorization: Bearer …`) or a dashboard session cookie.
//!
//! Keys are looked up by their SHA-256; lookups are cached briefly so a busy ingest path does
//! not hit the database per request (a key revoked on another replica stops working within
//! `CACHE_TTL`; on this one at once). A key grants its scopes within its owner's current role.
//! Its last-used time is written at most once a minute.
//!
//! Sessions are looked up on every request (no cache: logout, disabling a user and role
//! changes apply at once). A session caller holds the scopes of its role
//! ([`Role::scopes`]); state-changing requests must carry the session's CSRF token (see
//! [`crate::accounts`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use fleetlens_store::accounts::{ApiKeyId, KeyAuth, Role, SessionRecord, TeamId, UserId, UserRecord};
use fleetlens_store::{ApiKey, DEFAULT_ORG, OrgId, Scope, hash_api_key};

use crate::accounts::{CSRF_HEADER, secrets_equal};
use crate::error::ApiError;
use crate::state::AppState;
use crate::time::now_ms;

const CACHE_TTL: Duration = Duration::from_secs(30);
const CACHE_MAX: usize = 10_000;

#[derive(Default)]
pub struct KeyCache {
    entries: Mutex<HashMap<String, (Option<KeyAuth>, Instant)>>,
}

impl KeyCache {
    fn get(&self, hash: &str) -> Option<Option<KeyAuth>> {
        let entries = self.entries.lock().expect("key cache lock");
        entries.get(hash).filter(|(_, at)| at.elapsed() < CACHE_TTL).map(|(k, _)| k.clone())
    }

    fn put(&self, hash: String, key: Option<KeyAuth>) {
        let mut entries = self.entries.lock().expect("key cache lock");
        if entries.len() >= CACHE_MAX {
            entries.retain(|_, (_, at)| at.elapsed() < CACHE_TTL);
            if entries.len() >= CACHE_MAX {
                entries.clear();
            }
        }
        entries.insert(hash, (key, Instant::now()));
    }

    /// Forget every cached key (after a key is revoked or a user changes).
    pub fn clear(&self) {
        self.entries.lock().expect("key cache lock").clear();
    }
}

/// How the caller authenticated.
#[derive(Debug, Clone)]
pub enum Principal {
    ApiKey {
        /// The user who made the key, if one did.
        owner: Option<UserId>,
        /// The team of the hosts that report with this key.
        team: Option<TeamId>,
        /// The role of the key's user when it grants less than the key was made with (a
        /// demoted user): a refusal then names the role, not the key, as its cause.
        limiting_role: Option<Role>,
    },
    Session {
        user: UserRecord,
        /// SHA-256 of the session token.
        token_hash: String,
        csrf_token: String,
        expires_ms: i64,
    },
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub org: OrgId,
    /// The API key with the scopes it grants now. For a session: a stand-in (id 0, named
    /// after the user's email) with the scopes of the user's role.
    pub key: ApiKey,
    pub principal: Principal,
}

impl Caller {
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            return Ok(());
        }
        Err(match &self.principal {
            Principal::Session { user, .. } => {
                ApiError::RoleForbidden { role: user.role.as_str(), needs: scope.as_str() }
            }
            Principal::ApiKey { limiting_role: Some(role), .. } => {
                ApiError::KeyOwnerRoleForbidden { role: role.as_str(), needs: scope.as_str() }
            }
            Principal::ApiKey { .. } => ApiError::Forbidden(scope.as_str()),
        })
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.key.allows(scope)
    }

    /// The session's user.
    pub fn user(&self) -> Option<&UserRecord> {
        match &self.principal {
            Principal::Session { user, .. } => Some(user),
            Principal::ApiKey { .. } => None,
        }
    }

    /// The session's user, or the user who made the key.
    pub fn user_id(&self) -> Option<UserId> {
        match &self.principal {
            Principal::Session { user, .. } => Some(user.id),
            Principal::ApiKey { owner, .. } => *owner,
        }
    }

    /// The team of the key (for hosts that report with it).
    pub fn key_team(&self) -> Option<TeamId> {
        match &self.principal {
            Principal::ApiKey { team, .. } => *team,
            Principal::Session { .. } => None,
        }
    }

    pub fn role(&self) -> Option<Role> {
        self.user().map(|u| u.role)
    }

    /// Who did it, for audit fields: the user's email or the key's name.
    pub fn name(&self) -> &str {
        &self.key.name
    }

    /// An admin of the default organisation: may create and list organisations.
    pub fn is_instance_admin(&self) -> bool {
        self.org == DEFAULT_ORG && self.has(Scope::Admin)
    }
}

/// The value of cookie `name`, if sent.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// Whether a request with this method changes state (and so needs the CSRF token).
pub fn is_state_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The browser's word that a request comes from another site.
pub fn is_cross_site(headers: &HeaderMap) -> bool {
    headers.get("sec-fetch-site").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
}

/// The CSRF check of a session-authenticated request (see [`crate::accounts`]).
pub fn check_csrf(method: &Method, headers: &HeaderMap, session_token: &str) -> Result<(), ApiError> {
    if !is_state_changing(method) {
        return Ok(());
    }
    if is_cross_site(headers) {
        return Err(ApiError::Csrf("cross-site requests cannot use the session".into()));
    }
    let sent = headers.get(CSRF_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    if sent.is_empty() {
        return Err(ApiError::Csrf("missing X-CSRF-Token header (GET /api/v1/auth/me returns the token)".into()));
    }
    if !secrets_equal(sent, session_token.as_bytes()) {
        return Err(ApiError::Csrf("X-CSRF-Token does not match the session".into()));
    }
    Ok(())
}

/// The live session of the request's cookie, and its token hash. A session unused for
/// `--session-idle-timeout` is ended here; a used one has its last use recorded when the
/// record is older than [`crate::accounts::AccountsConfig::session_touch_ms`] (not a write
/// per request).
pub async fn session_of(state: &AppState, headers: &HeaderMap) -> Result<Option<(SessionRecord, String)>, ApiError> {
    let config = &state.config.accounts;
    let Some(token) = cookie(headers, config.session_cookie_name()) else { return Ok(None) };
    let hash = hash_api_key(token);
    let now = now_ms();
    let Some(session) = state.store.session(&hash, now).await? else { return Ok(None) };
    let idle = now.saturating_sub(session.last_seen_ms);
    if idle > config.session_idle_ms() {
        state.store.delete_session(&hash).await?;
        return Ok(None);
    }
    if idle >= config.session_touch_ms() {
        state.store.touch_session(&hash, now).await?;
    }
    Ok(Some((session, hash)))
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(header) = parts.headers.get(AUTHORIZATION) {
            let token = header
                .to_str()
                .ok()
                .and_then(|h| h.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or(ApiError::Unauthenticated)?;
            return key_caller(state, token).await;
        }
        if cookie(&parts.headers, state.config.accounts.session_cookie_name()).is_some() {
            let (session, token_hash) = session_of(state, &parts.headers).await?.ok_or(ApiError::BadSession)?;
            check_csrf(&parts.method, &parts.headers, &session.csrf_token)?;
            let user = session.user;
            let key = ApiKey {
                id: ApiKeyId(0),
                org_id: user.org_id,
                name: user.email.clone(),
                prefix: "session".into(),
                scopes: user.role.scopes().to_vec(),
                created_ms: session.created_ms,
                revoked_ms: None,
            };
            return Ok(Caller {
                org: user.org_id,
                key,
                principal: Principal::Session {
                    user,
                    token_hash,
                    csrf_token: session.csrf_token,
                    expires_ms: session.expires_ms,
                },
            });
        }
        Err(ApiError::Unauthenticated)
    }
}

async fn key_caller(state: &AppState, token: &str) -> Result<Caller, ApiError> {
    let hash = hash_api_key(token);
    let auth = match state.key_cache.get(&hash) {
        Some(cached) => cached,
        None => {
            let found = state.store.api_key_auth(&hash).await?;
            state.key_cache.put(hash, found.clone());
            found
        }
    };
    let Some(auth) = auth.filter(|a| a.info.key.revoked_ms.is_none() && !a.owner_disabled) else {
        return Err(ApiError::BadKey);
    };
    let (org, id) = (auth.info.key.org_id, auth.info.key.id);
    if state.accounts.touch_due(id) {
        let store = state.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.touch_api_key(org, id, now_ms()).await {
                tracing::warn!(error = %e, key = id.get(), "could not record the key's last use");
            }
        });
    }
    let mut key = auth.info.key.clone();
    key.scopes = auth.effective_scopes();
    let limiting_role = auth
        .owner_role
        .filter(|_| fleetlens_store::accounts::expand_scopes(&auth.info.key.scopes).len() > key.scopes.len());
    Ok(Caller {
        org: key.org_id,
        key,
        principal: Principal::ApiKey { owner: auth.info.user_id, team: auth.info.team_id, limiting_role },
    })
}
