//! Router assembly and the server's lifecycle.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use fleetlens_store::{DEFAULT_ORG, NewApiKey, Scope, Store, StoreError, hash_api_key};
use tokio::net::TcpListener;
use tower_http::compression::CompressionLayer;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::trace::TraceLayer;

use crate::analytics::OrgClassifier;
use crate::auth::KeyCache;
use crate::config::Config;
use crate::routes::{analytics, gpus, health, ingest, jobs};
use crate::state::AppState;
use crate::time::now_ms;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot open the database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/ingest", post(ingest::ingest))
        .route("/gpus", get(gpus::list))
        .route("/gpus/{uuid}", get(gpus::detail))
        .route("/gpus/{uuid}/samples", get(gpus::samples))
        .route("/gpus/{uuid}/states", get(analytics::states))
        .route("/gpus/{uuid}/series", get(gpus::series))
        .route("/fleet/summary", get(analytics::fleet_summary))
        .route("/jobs", get(jobs::list).post(jobs::report))
        .route("/reports/billing", get(crate::routes::reports::billing))
        .route("/prices", get(analytics::get_prices).put(analytics::put_prices))
        .route("/settings/thresholds", get(analytics::get_thresholds).put(analytics::put_thresholds))
        .merge(alerts_routes())
        .merge(accounts_routes())
        .fallback(|| async { crate::error::ApiError::NotFound("no such API endpoint".into()) });
    let static_dir = &state.config.static_dir;
    let dashboard = ServeDir::new(static_dir).fallback(ServeFile::new(static_dir.join("index.html")));
    Router::new()
        .nest("/api/v1", api)
        .route("/metrics", get(crate::metrics::metrics))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback_service(dashboard)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(CompressionLayer::new().gzip(true))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Alerting: rules, channels, alerts, silences, the delivery log.
fn alerts_routes() -> Router<AppState> {
    use crate::routes::alerts as a;
    use axum::routing::delete;
    Router::new()
        .route("/alert-rules", get(a::list_rules).post(a::create_rule))
        .route("/alert-rules/fields", get(a::rule_fields))
        .route("/alert-rules/check", post(a::check_condition))
        .route("/alert-rules/{id}", get(a::get_rule).put(a::put_rule).delete(a::delete_rule))
        .route("/notification-channels", get(a::list_channels).post(a::create_channel))
        .route("/notification-channels/{id}", get(a::get_channel).put(a::put_channel).delete(a::delete_channel))
        .route("/notification-channels/{id}/test", post(a::test_channel))
        .route("/notification-channels/{id}/deliveries", get(a::channel_deliveries))
        .route("/notification-deliveries", get(a::list_deliveries))
        .route("/alerts", get(a::list_alerts))
        .route("/alerts/{id}", get(a::get_alert))
        .route("/silences", get(a::list_silences).post(a::create_silence))
        .route("/silences/{id}", delete(a::delete_silence))
}

/// Accounts: sessions, organisations, users, teams, API keys, team assignments.
fn accounts_routes() -> Router<AppState> {
    use crate::routes::accounts as a;
    use axum::routing::put;
    Router::new()
        .route("/auth/login", post(a::login))
        .route("/auth/logout", post(a::logout))
        .route("/auth/me", get(a::me))
        .route("/auth/password", put(a::change_password))
        .route("/orgs", get(a::list_orgs).post(a::create_org))
        .route("/users", get(a::list_users).post(a::create_user))
        .route("/users/{id}", get(a::get_user).put(a::update_user).delete(a::delete_user))
        .route("/teams", get(a::list_teams).post(a::create_team))
        .route("/teams/{id}", get(a::get_team).put(a::rename_team).delete(a::delete_team))
        .route("/teams/{id}/members/{user_id}", put(a::add_member).delete(a::remove_member))
        .route("/api-keys", get(a::list_keys).post(a::create_key))
        .route("/api-keys/{id}", get(a::get_key).delete(a::revoke_key))
        .route("/hosts", get(a::list_hosts))
        .route("/hosts/{host}/team", put(a::assign_host))
        .route("/gpus/{uuid}/team", put(a::assign_gpu))
}

/// Ensure the bootstrap admin key, if configured.
async fn bootstrap(store: &dyn Store, config: &Config) -> Result<(), StoreError> {
    if let Some(token) = config.admin_token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        let hash = hash_api_key(token);
        let prefix: String = token.chars().take(7).collect();
        store
            .ensure_api_key(NewApiKey {
                org_id: DEFAULT_ORG,
                name: "bootstrap admin (FLEETLENS_ADMIN_TOKEN)",
                prefix: &prefix,
                key_hash: &hash,
                scopes: &[Scope::Admin, Scope::Read, Scope::Ingest],
                created_ms: now_ms(),
            })
            .await?;
        tracing::info!("admin API key from FLEETLENS_ADMIN_TOKEN is ready");
    }
    Ok(())
}

/// Open storage, bind, print the URL on stdout, and serve until ctrl-c / SIGTERM.
pub async fn serve(config: Config) -> Result<(), StartupError> {
    // The classifier's thresholds live in the database it classifies for: open once to read
    // them, then hand the classifier to the store that ingest writes through.
    let classifier =
        Arc::new(OrgClassifier::load(fleetlens_store::connect(&config.database_url).await?.as_ref()).await?);
    let store = fleetlens_store::connect_with(&config.database_url, classifier.clone()).await?;
    bootstrap(store.as_ref(), &config).await?;
    crate::accounts::bootstrap(store.as_ref(), &config.accounts).await?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartupError::Listen { addr: config.listen, source })?;
    let addr = listener.local_addr().map_err(StartupError::Serve)?;
    let alerts = crate::alerts::Alerts::new(store.clone(), config.alerts.clone(), addr);
    let state = AppState {
        store: store.clone(),
        key_cache: Arc::new(KeyCache::default()),
        accounts: Default::default(),
        config: Arc::new(config),
        classifier,
        summary_cache: Default::default(),
        alerts: alerts.clone(),
    };
    alerts.spawn();
    tokio::spawn(crate::jobs::retention_loop(store.clone(), state.config.clone()));
    if !state.config.static_dir.join("index.html").exists() {
        tracing::warn!(dir = %state.config.static_dir.display(), "dashboard not built: run frontend/build.sh");
    }
    tracing::info!(%addr, database = store.backend(), "listening");
    // The one line scripts and tests read to find the server.
    println!("fleetlens-server listening on http://{addr}/");
    // Connect info: the client address keys the login rate limit.
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await.map_err(StartupError::Serve)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}
