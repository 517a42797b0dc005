//! Accounts at the HTTP edge: configuration, argon2 password hashing, session tokens and
//! cookies, the login rate limiter, the `FLEETLENS_ADMIN_EMAIL`/`FLEETLENS_ADMIN_PASSWORD`
//! bootstrap, and the ingest hook that assigns a host's GPUs to a team.
//!
//! # Sessions and CSRF
//! `POST /api/v1/auth/login` sets the session cookie: a 256-bit random token (only its
//! SHA-256 is stored), `HttpOnly; SameSite=Strict; Path=/`, `Secure` and the `__Host-` name
//! prefix unless `--cookie-secure false` (plain-http development). Sessions expire after
//! `--session-ttl`; logout deletes them; disabling or deleting a user ends them at once (the
//! role is read with the session on every request).
//!
//! CSRF: the synchronizer-token pattern (OWASP). Each session has its own random CSRF token,
//! returned by login and by `GET /api/v1/auth/me`; a request authenticated by the session
//! cookie with a method other than GET/HEAD/OPTIONS must send it in `X-CSRF-Token`
//! (compared in constant time), and is refused outright when the browser marks it
//! `Sec-Fetch-Site: cross-site`. Requests with `Authorization: Bearer` are not
//! cookie-authenticated (a browser never adds that header on its own) and need no token.
//! Login itself accepts only `application/json` bodies and no `cross-site` requests, so a
//! foreign page cannot log a browser into another account.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};
use fleetlens_store::accounts::{NewUser, Role, TeamId, UserUpdate};
use fleetlens_store::{DEFAULT_ORG, OrgId, Store, StoreError};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::time::now_ms;

/// Account settings (flattened into the server's [`crate::Config`]).
#[derive(Debug, Clone, clap::Args)]
pub struct AccountsConfig {
    /// With --admin-password: ensure at start an admin user with these credentials in the
    /// default organisation.
    #[arg(long, env = "FLEETLENS_ADMIN_EMAIL")]
    pub admin_email: Option<String>,

    /// Password of the bootstrap admin user (at least 8 characters).
    #[arg(long, env = "FLEETLENS_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,

    /// Mark session cookies `Secure` (and name them `__Host-…`). Set false only for plain
    /// http other than localhost.
    #[arg(long, env = "FLEETLENS_COOKIE_SECURE", default_value_t = true, action = clap::ArgAction::Set)]
    pub cookie_secure: bool,

    /// Lifetime of a dashboard session.
    #[arg(long, env = "FLEETLENS_SESSION_TTL", default_value = "7d", value_parser = humantime::parse_duration)]
    pub session_ttl: Duration,

    /// Login attempts allowed per client address and email within --login-window (ten times
    /// as many per address).
    #[arg(long, env = "FLEETLENS_LOGIN_ATTEMPTS", default_value_t = 5)]
    pub login_attempts: u32,

    /// Time in which spent login attempts come back.
    #[arg(long, env = "FLEETLENS_LOGIN_WINDOW", default_value = "15m", value_parser = humantime::parse_duration)]
    pub login_window: Duration,

    /// Take the client address for login rate limiting from the last X-Forwarded-For entry
    /// (behind a reverse proxy that sets it).
    #[arg(long, env = "FLEETLENS_TRUST_FORWARDED_FOR", default_value_t = false, action = clap::ArgAction::Set)]
    pub trust_forwarded_for: bool,
}

impl AccountsConfig {
    pub fn session_cookie_name(&self) -> &'static str {
        if self.cookie_secure { "__Host-fleetlens_session" } else { "fleetlens_session" }
    }

    pub fn session_ttl_ms(&self) -> i64 {
        i64::try_from(self.session_ttl.as_millis()).unwrap_or(i64::MAX).max(1000)
    }

    /// `Set-Cookie` value of a new session.
    pub fn session_cookie(&self, token: &str) -> String {
        format!(
            "{}={token}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
            self.session_cookie_name(),
            self.session_ttl_ms() / 1000,
            if self.cookie_secure { "; Secure" } else { "" }
        )
    }

    /// `Set-Cookie` value that removes the session cookie.
    pub fn clear_session_cookie(&self) -> String {
        format!(
            "{}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{}",
            self.session_cookie_name(),
            if self.cookie_secure { "; Secure" } else { "" }
        )
    }
}

/// Header that carries the session's CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Prefix of the API keys the server makes.
pub const KEY_PREFIX: &str = "flk_";
/// How often at most a key's last-used time is written.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// How long an ingest team assignment is trusted before the database is checked again.
const TEAM_RECHECK: Duration = Duration::from_secs(60);
const MAP_MAX: usize = 100_000;

/// Per-process account state: the login limiter and the caches that keep account work off
/// the ingest path.
#[derive(Default)]
pub struct Accounts {
    limiter: Mutex<HashMap<String, Bucket>>,
    touched: Mutex<HashMap<i64, Instant>>,
    teams_seen: Mutex<HashMap<(OrgId, String), TeamCheck>>,
}

/// The inputs of a host's last team assignment, and when it was applied.
#[derive(Debug, Clone)]
struct TeamCheck {
    key_team: Option<TeamId>,
    label: Option<String>,
    at: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Accounts {
    /// Take one login attempt for `(ip, email)` and for `ip`; on refusal, how long to wait.
    pub fn take_login_attempt(&self, config: &AccountsConfig, ip: &str, email: &str) -> Result<(), Duration> {
        let burst = f64::from(config.login_attempts.max(1));
        let window = config.login_window.as_secs_f64().max(1.0);
        let mut buckets = self.limiter.lock().expect("limiter lock");
        if buckets.len() > MAP_MAX {
            let now = Instant::now();
            buckets.retain(|_, b| now.duration_since(b.at).as_secs_f64() < window);
        }
        take(&mut buckets, format!("{ip}\n{email}"), burst, burst / window)?;
        take(&mut buckets, ip.to_string(), burst * 10.0, burst * 10.0 / window)
    }

    /// A successful login gives the (ip, email) pair its attempts back.
    pub fn login_succeeded(&self, ip: &str, email: &str) {
        self.limiter.lock().expect("limiter lock").remove(&format!("{ip}\n{email}"));
    }

    /// Whether the key's last-used time is due to be written now.
    pub fn touch_due(&self, key_id: i64) -> bool {
        let mut touched = self.touched.lock().expect("touch lock");
        let now = Instant::now();
        if touched.get(&key_id).is_some_and(|at| now.duration_since(*at) < TOUCH_EVERY) {
            return false;
        }
        if touched.len() > MAP_MAX {
            touched.clear();
        }
        touched.insert(key_id, now);
        true
    }

    fn team_check_due(&self, org: OrgId, host: &str, key_team: Option<TeamId>, label: Option<&str>) -> bool {
        let mut seen = self.teams_seen.lock().expect("teams lock");
        let key = (org, host.to_string());
        if let Some(c) = seen.get(&key)
            && c.key_team == key_team
            && c.label.as_deref() == label
            && c.at.elapsed() < TEAM_RECHECK
        {
            return false;
        }
        if seen.len() > MAP_MAX {
            seen.clear();
        }
        seen.insert(key, TeamCheck { key_team, label: label.map(str::to_string), at: Instant::now() });
        true
    }

    /// Whether `host`'s last batch named this team label (so its team exists, or was refused).
    fn team_label_applied(&self, org: OrgId, host: &str, label: &str) -> bool {
        let seen = self.teams_seen.lock().expect("teams lock");
        seen.get(&(org, host.to_string()))
            .is_some_and(|c| c.label.as_deref() == Some(label) && c.at.elapsed() < TEAM_RECHECK)
    }

    fn forget_team_check(&self, org: OrgId, host: &str) {
        self.teams_seen.lock().expect("teams lock").remove(&(org, host.to_string()));
    }

    /// After an admin changes teams or assignments: check every host again at its next batch.
    pub fn assignments_changed(&self) {
        self.teams_seen.lock().expect("teams lock").clear();
    }
}

fn take(buckets: &mut HashMap<String, Bucket>, key: String, burst: f64, per_s: f64) -> Result<(), Duration> {
    let now = Instant::now();
    let b = buckets.entry(key).or_insert(Bucket { tokens: burst, at: now });
    b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * per_s).min(burst);
    b.at = now;
    if b.tokens >= 1.0 {
        b.tokens -= 1.0;
        Ok(())
    } else {
        Err(Duration::from_secs_f64(((1.0 - b.tokens) / per_s).max(1.0)))
    }
}

/// The client's address for rate limiting.
pub fn client_ip(config: &AccountsConfig, headers: &HeaderMap, extensions: &Extensions) -> String {
    if config.trust_forwarded_for {
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|s| s.trim().parse::<IpAddr>().ok())
            .next_back();
        if let Some(ip) = forwarded {
            return ip.to_string();
        }
    }
    extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string()).unwrap_or_else(|| "unknown".into())
}

/// 256 random bits, hex.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// A new API key secret: `flk_` and 256 random bits.
pub fn new_api_key() -> String {
    format!("{KEY_PREFIX}{}", random_token())
}

/// Constant-time equality of two secrets.
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// argon2id (19 MiB, 2 passes: the OWASP recommendation), PHC string. CPU-heavy: call from
/// `spawn_blocking`.
pub fn hash_password(password: &str) -> Result<String, StoreError> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|e| StoreError::Invalid(format!("password salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| StoreError::Invalid(format!("password hashing: {e}")))
}

/// Whether `password` matches the PHC string `hash` (any argon2 variant and parameters).
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

/// A hash to verify against when the email is unknown, so both cases take as long.
pub fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash_password(&random_token()).unwrap_or_default())
}

pub async fn hash_password_blocking(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| ApiError::Store(StoreError::Invalid(format!("hashing task: {e}"))))?
        .map_err(ApiError::Store)
}

pub async fn verify_password_blocking(password: String, hash: String) -> bool {
    tokio::task::spawn_blocking(move || verify_password(&password, &hash)).await.unwrap_or(false)
}

/// Lower-cased, trimmed email, if it looks like one.
pub fn normalize_email(email: &str) -> Option<String> {
    let email = email.trim().to_lowercase();
    let (local, domain) = email.split_once('@')?;
    let ok = !local.is_empty()
        && !domain.is_empty()
        && !domain.contains('@')
        && email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    ok.then_some(email)
}

pub const MIN_PASSWORD: usize = 8;
pub const MAX_PASSWORD: usize = 1024;

pub fn check_password_policy(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < MIN_PASSWORD {
        return Err(format!("at least {MIN_PASSWORD} characters"));
    }
    if n > MAX_PASSWORD {
        return Err(format!("at most {MAX_PASSWORD} characters"));
    }
    Ok(())
}

/// A name (team, key, user): trimmed, 1–`max` characters, no control characters.
pub fn clean_name(name: &str, max: usize) -> Option<String> {
    let name = name.trim();
    (!name.is_empty() && name.chars().count() <= max && !name.chars().any(char::is_control)).then(|| name.to_string())
}

/// Ensure the bootstrap admin user of `FLEETLENS_ADMIN_EMAIL` / `FLEETLENS_ADMIN_PASSWORD`:
/// created if missing; if it exists in the default organisation, made an enabled admin with
/// this password.
pub async fn bootstrap(store: &dyn Store, config: &AccountsConfig) -> Result<(), StoreError> {
    let (email, password) = match (config.admin_email.as_deref(), config.admin_password.as_deref()) {
        (Some(e), Some(p)) if !e.trim().is_empty() && !p.is_empty() => (e, p),
        (None, None) => return Ok(()),
        _ => {
            tracing::warn!("set both FLEETLENS_ADMIN_EMAIL and FLEETLENS_ADMIN_PASSWORD to bootstrap an admin user");
            return Ok(());
        }
    };
    let email = normalize_email(email)
        .ok_or_else(|| StoreError::Invalid(format!("FLEETLENS_ADMIN_EMAIL {email:?} is not an email address")))?;
    check_password_policy(password).map_err(|m| StoreError::Invalid(format!("FLEETLENS_ADMIN_PASSWORD: {m}")))?;
    let now = now_ms();
    match store.user_for_login(&email).await? {
        None => {
            let hash = hash_password(password)?;
            store
                .create_user(NewUser {
                    org_id: DEFAULT_ORG,
                    email: &email,
                    name: "Administrator",
                    password_hash: &hash,
                    role: Role::Admin,
                    now_ms: now,
                })
                .await?;
            tracing::info!(%email, "admin user from FLEETLENS_ADMIN_EMAIL created");
        }
        Some((user, _)) if user.org_id != DEFAULT_ORG => {
            return Err(StoreError::Invalid(format!(
                "FLEETLENS_ADMIN_EMAIL {email} belongs to a user of organisation {}, not the default one",
                user.org_id
            )));
        }
        Some((user, hash)) => {
            let mut update = UserUpdate::default();
            if user.role != Role::Admin {
                update.role = Some(Role::Admin);
            }
            if user.disabled_ms.is_some() {
                update.disabled = Some(false);
            }
            if !verify_password(password, &hash) {
                update.password_hash = Some(hash_password(password)?);
            }
            if update != UserUpdate::default() {
                store.update_user(DEFAULT_ORG, user.id, &update, now).await?;
                if update.password_hash.is_some() {
                    store.delete_sessions_of(user.id, None).await?;
                }
                tracing::warn!(%email, "admin user reset to the credentials of FLEETLENS_ADMIN_EMAIL/PASSWORD");
            }
        }
    }
    Ok(())
}

/// Longest `team` label value used.
const MAX_TEAM_NAME: usize = 100;

/// The ingest hook (`routes/ingest.rs`, after the batch is stored): give `host`'s GPUs a team
/// by the host's admin assignment, the key's team or the batch's `team` label
/// ([`fleetlens_store::AccountStore::assign_ingest_team`]). Checked at most once a minute per
/// host while nothing changes; failures are logged, never fail the (already stored) batch.
pub async fn after_ingest(state: &AppState, caller: &Caller, host: &str, labels: &BTreeMap<String, String>) {
    let key_team = caller.key_team();
    let label = labels.get("team").and_then(|t| clean_name(t, MAX_TEAM_NAME));
    if !state.accounts.team_check_due(caller.org, host, key_team, label.as_deref()) {
        return;
    }
    if let Err(e) = state.store.assign_ingest_team(caller.org, host, key_team, label.as_deref(), now_ms()).await {
        tracing::warn!(error = %e, host, "could not assign the host's GPUs to a team");
        state.accounts.forget_team_check(caller.org, host);
    }
}

/// Before a batch is stored: refuse it (429, `quota_exceeded`) when its `team` label would
/// create a team past `--max-teams-per-org`. The label makes a team only for a host without an
/// assigned team that reports with a key without one ([`after_ingest`]); teams an admin creates
/// are not limited, but count towards the quota.
pub async fn check_team_quota(
    state: &AppState,
    caller: &Caller,
    host: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), ApiError> {
    let Some(label) = labels.get("team").and_then(|t| clean_name(t, MAX_TEAM_NAME)) else {
        return Ok(());
    };
    if caller.key_team().is_some() || state.accounts.team_label_applied(caller.org, host, &label) {
        return Ok(());
    }
    let teams = state.store.teams(caller.org).await?;
    let max = state.config.max_teams_per_org;
    if (teams.len() as u64) < max || teams.iter().any(|t| t.name == label) {
        return Ok(());
    }
    // At the quota: a host an admin assigned to a team creates none (rare, so read here only).
    let hosts = state.store.hosts(caller.org).await?;
    if hosts.iter().any(|h| h.host == host && h.assigned_team_id.is_some()) {
        return Ok(());
    }
    Err(ApiError::Quota {
        quota: "teams".into(),
        message: format!(
            "the organisation's quota of {max} teams is reached: the batch's team label {label:?} would create one \
             more (nothing was stored; an operator can raise --max-teams-per-org, an admin can delete teams)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_only_with_their_hash() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("correct horsf", &h));
        assert!(!verify_password("correct horse", "not a hash"));
        assert_ne!(hash_password("correct horse").unwrap(), h, "salted");
    }

    #[test]
    fn emails_are_normalized() {
        assert_eq!(normalize_email("  Alice@Example.COM ").as_deref(), Some("alice@example.com"));
        for bad in ["", "alice", "@x", "a@", "a b@x", "a@b@c"] {
            assert_eq!(normalize_email(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_limiter_refuses_past_the_burst_and_refills() {
        let accounts = Accounts::default();
        let config = AccountsConfig {
            admin_email: None,
            admin_password: None,
            cookie_secure: true,
            session_ttl: Duration::from_secs(60),
            login_attempts: 3,
            login_window: Duration::from_secs(3),
            trust_forwarded_for: false,
        };
        for _ in 0..3 {
            accounts.take_login_attempt(&config, "1.2.3.4", "a@x").unwrap();
        }
        let wait = accounts.take_login_attempt(&config, "1.2.3.4", "a@x").unwrap_err();
        assert!(wait >= Duration::from_secs(1));
        accounts.take_login_attempt(&config, "1.2.3.4", "b@x").expect("another email");
        accounts.take_login_attempt(&config, "5.6.7.8", "a@x").expect("another address");
        accounts.login_succeeded("1.2.3.4", "a@x");
        accounts.take_login_attempt(&config, "1.2.3.4", "a@x").expect("reset by a success");
    }

    #[test]
    fn cookies_carry_the_attributes() {
        let mut config = AccountsConfig {
            admin_email: None,
            admin_password: None,
            cookie_secure: true,
            session_ttl: Duration::from_secs(3600),
            login_attempts: 5,
            login_window: Duration::from_secs(900),
            trust_forwarded_for: false,
        };
        assert_eq!(
            config.session_cookie("abc"),
            "__Host-fleetlens_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure"
        );
        config.cookie_secure = false;
        assert_eq!(config.clear_session_cookie(), "fleetlens_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd"));
        assert!(!secrets_equal(b"abc", b"ab"));
    }
}
