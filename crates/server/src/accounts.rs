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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};
use fleetlens_store::accounts::{ApiKeyId, NewUser, Role, TeamId, UserUpdate};
use fleetlens_store::{DEFAULT_ORG, OrgId, Store, StoreError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

    /// Set the existing bootstrap admin's password to FLEETLENS_ADMIN_PASSWORD at this start
    /// (and enable it and make it an admin again). Without it, an existing admin is left as
    /// it is: a password changed in the dashboard survives restarts.
    #[arg(long, env = "FLEETLENS_RESET_ADMIN_PASSWORD", default_value_t = false, action = clap::ArgAction::Set)]
    pub reset_admin_password: bool,

    /// A session unused for this long ends (its last use is recorded at most once a minute).
    #[arg(long, env = "FLEETLENS_SESSION_IDLE_TIMEOUT", default_value = "12h", value_parser = humantime::parse_duration)]
    pub session_idle_timeout: Duration,

    /// Login attempts allowed per account within --login-window, from all addresses together
    /// (a success gives one back).
    #[arg(long, env = "FLEETLENS_LOGIN_ACCOUNT_ATTEMPTS", default_value_t = 20)]
    pub login_account_attempts: u32,

    /// Password hashes (argon2id, 19 MiB each) computed at once; as many more may wait, the
    /// rest are answered 503 with Retry-After. 0: the number of CPUs.
    #[arg(long, env = "FLEETLENS_PASSWORD_HASH_CONCURRENCY", default_value_t = 0)]
    pub password_hash_concurrency: usize,
}

impl AccountsConfig {
    pub fn session_cookie_name(&self) -> &'static str {
        if self.cookie_secure { "__Host-fleetlens_session" } else { "fleetlens_session" }
    }

    pub fn session_idle_ms(&self) -> i64 {
        i64::try_from(self.session_idle_timeout.as_millis()).unwrap_or(i64::MAX).max(1000)
    }

    /// How stale a session's recorded last use may grow before it is written again: a minute,
    /// or a quarter of a shorter idle timeout (so that activity keeps a session alive).
    pub fn session_touch_ms(&self) -> i64 {
        (self.session_idle_ms() / 4).clamp(250, 60_000)
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

/// Per-process account state: the login limiter, the password-hashing gate and the caches
/// that keep account work off the ingest path.
pub struct Accounts {
    limiter: Mutex<HashMap<String, Bucket>>,
    touched: Mutex<HashMap<ApiKeyId, Instant>>,
    teams_seen: Mutex<HashMap<(OrgId, String), TeamCheck>>,
    /// Permits to run one argon2 hash: a burst of logins cannot take every core and
    /// 19 MiB per attempt.
    hashing: Arc<Semaphore>,
    /// Requests waiting for a permit, and how many may wait.
    hash_waiting: AtomicUsize,
    hash_waiting_max: usize,
}

impl Accounts {
    pub fn new(config: &AccountsConfig) -> Accounts {
        let permits = match config.password_hash_concurrency {
            0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            n => n,
        };
        Accounts {
            limiter: Default::default(),
            touched: Default::default(),
            teams_seen: Default::default(),
            hashing: Arc::new(Semaphore::new(permits)),
            hash_waiting: AtomicUsize::new(0),
            hash_waiting_max: permits,
        }
    }

    /// A permit to hash a password: at once, after waiting behind at most as many requests as
    /// there are permits, or 503 `busy` (with Retry-After) when more already wait.
    pub async fn hash_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(permit) = self.hashing.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.hash_waiting.fetch_add(1, Ordering::AcqRel) >= self.hash_waiting_max {
            self.hash_waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::Busy { retry_after_s: 1 });
        }
        let permit = self.hashing.clone().acquire_owned().await;
        self.hash_waiting.fetch_sub(1, Ordering::AcqRel);
        permit.map_err(|_| ApiError::Busy { retry_after_s: 1 })
    }
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
    /// Take one login attempt for `(ip, email)`, for `ip` and for the account `email`; on
    /// refusal, how long to wait. `ip` is [`client_ip`]'s key (an IPv6 client is its /64).
    /// Also spent by a password change's check of the current password.
    pub fn take_login_attempt(&self, config: &AccountsConfig, ip: &str, email: &str) -> Result<(), Duration> {
        let burst = f64::from(config.login_attempts.max(1));
        let account_burst = f64::from(config.login_account_attempts.max(1));
        let window = config.login_window.as_secs_f64().max(1.0);
        let mut buckets = self.limiter.lock().expect("limiter lock");
        if buckets.len() > MAP_MAX {
            let now = Instant::now();
            buckets.retain(|_, b| now.duration_since(b.at).as_secs_f64() < window);
        }
        // Each bucket is checked before any is spent, so a refusal by one does not drain the
        // others.
        let pair = format!("{ip}\n{email}");
        let account = format!("account\n{email}");
        let limits = [(pair, burst), (ip.to_string(), burst * 10.0), (account, account_burst)];
        for (key, burst) in &limits {
            peek(&buckets, key, *burst, burst / window)?;
        }
        for (key, burst) in limits {
            take(&mut buckets, key, burst, burst / window)?;
        }
        Ok(())
    }

    /// One refused user creation with a taken email, for the organisation: at most
    /// --login-attempts per --login-window (each answer tells whether an address is taken
    /// somewhere in the install).
    pub fn take_email_probe(&self, config: &AccountsConfig, org: OrgId) -> Result<(), Duration> {
        let burst = f64::from(config.login_attempts.max(1));
        let window = config.login_window.as_secs_f64().max(1.0);
        take(&mut self.limiter.lock().expect("limiter lock"), format!("email-probe\n{org}"), burst, burst / window)
    }

    /// A successful login gives the (ip, email) pair its attempts back, and the account the
    /// one it spent (not all: a success does not reopen the account to a guesser).
    pub fn login_succeeded(&self, ip: &str, email: &str) {
        let mut buckets = self.limiter.lock().expect("limiter lock");
        buckets.remove(&format!("{ip}\n{email}"));
        if let Some(b) = buckets.get_mut(&format!("account\n{email}")) {
            b.tokens += 1.0;
        }
    }

    /// Whether the key's last-used time is due to be written now.
    pub fn touch_due(&self, key_id: ApiKeyId) -> bool {
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

/// Whether the bucket has an attempt left (refilled to now), without spending it.
fn peek(buckets: &HashMap<String, Bucket>, key: &str, burst: f64, per_s: f64) -> Result<(), Duration> {
    let Some(b) = buckets.get(key) else { return Ok(()) };
    let tokens = (b.tokens + b.at.elapsed().as_secs_f64() * per_s).min(burst);
    if tokens >= 1.0 { Ok(()) } else { Err(Duration::from_secs_f64(((1.0 - tokens) / per_s).max(1.0))) }
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

/// The client's address for rate limiting: an IPv4 address, or an IPv6 client's /64 (one
/// host is usually given a whole /64, so its single addresses would be free attempts).
pub fn client_ip(config: &AccountsConfig, headers: &HeaderMap, extensions: &Extensions) -> String {
    client_addr(config, headers, extensions).map(limit_key).unwrap_or_else(|| "unknown".into())
}

/// The rate-limiting key of an address: IPv4 (also when IPv4-mapped) as it is, IPv6 as its /64.
pub fn limit_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let network = u128::from(v6) & !((1u128 << 64) - 1);
            format!("{}/64", std::net::Ipv6Addr::from(network))
        }
    }
}

fn client_addr(config: &AccountsConfig, headers: &HeaderMap, extensions: &Extensions) -> Option<IpAddr> {
    if config.trust_forwarded_for {
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|s| s.trim().parse::<IpAddr>().ok())
            .next_back();
        if forwarded.is_some() {
            return forwarded;
        }
    }
    extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())
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

/// [`hash_password`] off the async threads, within the hashing gate ([`Accounts::hash_permit`]).
pub async fn hash_password_blocking(accounts: &Accounts, password: String) -> Result<String, ApiError> {
    let permit = accounts.hash_permit().await?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        hash_password(&password)
    })
    .await
    .map_err(|e| ApiError::Store(StoreError::Invalid(format!("hashing task: {e}"))))?
    .map_err(ApiError::Store)
}

/// [`verify_password`] off the async threads, within the hashing gate; Err only when the
/// gate is full.
pub async fn verify_password_blocking(accounts: &Accounts, password: String, hash: String) -> Result<bool, ApiError> {
    let permit = accounts.hash_permit().await?;
    Ok(tokio::task::spawn_blocking(move || {
        let _permit = permit;
        verify_password(&password, &hash)
    })
    .await
    .unwrap_or(false))
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

/// Shortest password accepted for the bootstrap admin (FLEETLENS_ADMIN_PASSWORD): it is set
/// by an operator in a file or a secret, where a long random value costs nothing.
pub const MIN_BOOTSTRAP_PASSWORD: usize = 12;
/// Shortest FLEETLENS_ADMIN_TOKEN accepted (an `admin` key: 32 characters, e.g.
/// `openssl rand -hex 32` gives 64).
pub const MIN_ADMIN_TOKEN: usize = 32;

/// Why `value` is a placeholder or a well-known weak value, if it is one: "CHANGE-ME" and
/// its spellings, and the handful of words people leave in example files.
pub fn placeholder(value: &str) -> Option<&'static str> {
    let letters: String = value.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect();
    const WORDS: [&str; 12] = [
        "password",
        "password1",
        "admin",
        "administrator",
        "secret",
        "fleetlens",
        "example",
        "letmein",
        "changeit",
        "12345678",
        "123456789",
        "1234567890",
    ];
    if letters.contains("changeme") || letters.contains("replaceme") || letters.contains("yourpassword") {
        Some("is the placeholder of an example file")
    } else if WORDS.contains(&letters.as_str()) {
        Some("is a well-known default")
    } else {
        None
    }
}

/// The bootstrap settings, checked before anything starts: a placeholder or short admin
/// password or token is refused with a message that says what to do.
pub fn check_bootstrap_config(config: &AccountsConfig, admin_token: Option<&str>) -> Result<(), String> {
    if let Some(token) = admin_token.map(str::trim).filter(|t| !t.is_empty()) {
        if let Some(why) = placeholder(token) {
            return Err(format!("FLEETLENS_ADMIN_TOKEN {why}: set a random value (openssl rand -hex 32)"));
        }
        if token.chars().count() < MIN_ADMIN_TOKEN {
            return Err(format!(
                "FLEETLENS_ADMIN_TOKEN is {} characters, fewer than {MIN_ADMIN_TOKEN}: set a random value (openssl rand -hex 32)",
                token.chars().count()
            ));
        }
    }
    if let Some(password) = config.admin_password.as_deref().filter(|p| !p.is_empty()) {
        if let Some(why) = placeholder(password) {
            return Err(format!(
                "FLEETLENS_ADMIN_PASSWORD {why}: set a password of your own (e.g. openssl rand -base64 18)"
            ));
        }
        if password.chars().count() < MIN_BOOTSTRAP_PASSWORD {
            return Err(format!(
                "FLEETLENS_ADMIN_PASSWORD is shorter than {MIN_BOOTSTRAP_PASSWORD} characters: set a longer one (e.g. openssl rand -base64 18)"
            ));
        }
        check_password_policy(password).map_err(|m| format!("FLEETLENS_ADMIN_PASSWORD: {m}"))?;
    }
    if let Some(email) = config.admin_email.as_deref().filter(|e| !e.trim().is_empty()) {
        normalize_email(email).ok_or_else(|| format!("FLEETLENS_ADMIN_EMAIL {email:?} is not an email address"))?;
    }
    Ok(())
}

/// Ensure the bootstrap admin user of `FLEETLENS_ADMIN_EMAIL` / `FLEETLENS_ADMIN_PASSWORD`:
/// created if missing. An existing user is left as it is (its password may have been changed
/// in the dashboard since), unless `--reset-admin-password`: then it is made an enabled admin
/// with this password, and its sessions end. Check the values with [`check_bootstrap_config`]
/// first.
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
            let created = store
                .create_user(NewUser {
                    org_id: DEFAULT_ORG,
                    email: &email,
                    name: "Administrator",
                    password_hash: &hash,
                    role: Role::Admin,
                    now_ms: now,
                })
                .await;
            match created {
                Ok(_) => tracing::info!(%email, "admin user from FLEETLENS_ADMIN_EMAIL created"),
                // Another replica starting at the same time created it.
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Some((user, _)) if user.org_id != DEFAULT_ORG => {
            return Err(StoreError::Invalid(format!(
                "FLEETLENS_ADMIN_EMAIL {email} belongs to a user of organisation {}, not the default one",
                user.org_id
            )));
        }
        Some(_) if !config.reset_admin_password => {
            tracing::info!(
                %email,
                "admin user exists: left as it is (FLEETLENS_ADMIN_PASSWORD is applied only with --reset-admin-password)"
            );
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
                    store.delete_sessions_of(user.org_id, user.id, None).await?;
                }
                tracing::warn!(%email, "admin user reset to FLEETLENS_ADMIN_PASSWORD (--reset-admin-password)");
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
        let config = AccountsConfig {
            admin_email: None,
            admin_password: None,
            cookie_secure: true,
            session_ttl: Duration::from_secs(60),
            login_attempts: 3,
            login_window: Duration::from_secs(3),
            trust_forwarded_for: false,
            reset_admin_password: false,
            session_idle_timeout: Duration::from_secs(3600),
            login_account_attempts: 20,
            password_hash_concurrency: 0,
        };
        let accounts = Accounts::new(&config);
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
    fn ipv6_clients_are_limited_by_their_64() {
        let key = |s: &str| limit_key(s.parse().unwrap());
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_eq!(key("2001:db8:1:2::1"), "2001:db8:1:2::/64");
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:10.1.2.3"), "10.1.2.3");
        assert_eq!(key("10.1.2.3"), "10.1.2.3");
    }

    #[test]
    fn placeholders_are_recognised() {
        for bad in ["CHANGE-ME", "change_me", "changeme", "Password", "admin", "<replace-me>", "CHANGE-ME-please-123"] {
            assert!(placeholder(bad).is_some(), "{bad}");
        }
        for good in ["a-admin-password-1", "f3b1c0e9a7d2", "correct horse battery staple"] {
            assert!(placeholder(good).is_none(), "{good}");
        }
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
            reset_admin_password: false,
            session_idle_timeout: Duration::from_secs(3600),
            login_account_attempts: 20,
            password_hash_concurrency: 0,
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
