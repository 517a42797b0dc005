//! Router assembly and the server's lifecycle.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use fleetlens_store::{DEFAULT_ORG, NewApiKey, Scope, Store, StoreError, hash_api_key};
use tokio::net::TcpListener;
use tower_http::compression::CompressionLayer;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::analytics::OrgClassifier;
use crate::auth::KeyCache;
use crate::config::Config;
use crate::routes::{analytics, events, gpus, health, ingest, jobs};
use crate::state::AppState;
use crate::time::now_ms;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot open the database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

/// Every route of the server but the dashboard, each registered with `routes!`, which takes
/// its path and method from the handler's `#[utoipa::path]`: what is served is what the
/// OpenAPI document ([`crate::openapi`]) lists. Add routes only through `.routes(routes!(…))`
/// (a unit test below refuses a plain `.route(` in this file).
pub fn documented_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .nest("/api/v1", api_v1())
        .routes(routes!(crate::metrics::metrics))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(crate::openapi::openapi_json))
}

/// `/api/v1`, relative to it.
fn api_v1() -> OpenApiRouter<AppState> {
    use crate::routes::reports;
    OpenApiRouter::new()
        .routes(routes!(ingest::ingest))
        .routes(routes!(crate::routes::remote_write::write))
        .routes(routes!(gpus::list))
        .routes(routes!(gpus::detail))
        .routes(routes!(gpus::samples))
        .routes(routes!(analytics::states))
        .routes(routes!(gpus::series))
        .routes(routes!(gpus::move_gpu))
        .routes(routes!(analytics::fleet_summary))
        .routes(routes!(jobs::list, jobs::report))
        .routes(routes!(events::list))
        .routes(routes!(crate::routes::stream::stream))
        .routes(routes!(reports::billing))
        .routes(routes!(analytics::get_prices, analytics::put_prices))
        .routes(routes!(analytics::get_thresholds, analytics::put_thresholds))
        .merge(alerts_routes())
        .merge(accounts_routes())
        .merge(actions_routes())
}

/// Acting on waste (docs/ACTIONS.md): job runs, report cards and where they go.
fn actions_routes() -> OpenApiRouter<AppState> {
    use crate::routes::actions as a;
    OpenApiRouter::new()
        .routes(routes!(a::list_runs))
        .routes(routes!(a::get_run))
        .routes(routes!(a::report))
        .routes(routes!(a::end))
        .routes(routes!(a::list_routes, a::create_route))
        .routes(routes!(a::delete_route))
        .routes(routes!(a::plans))
        .routes(routes!(crate::routes::reclaim::list_policies, crate::routes::reclaim::create_policy))
        .routes(routes!(crate::routes::reclaim::delete_policy))
        .routes(routes!(crate::routes::reclaim::dry_run_policy))
        .routes(routes!(crate::routes::reclaim::list_reclaims))
        .routes(routes!(crate::routes::reclaim::get_reclaim))
        .routes(routes!(crate::routes::reclaim::snooze))
        .routes(routes!(crate::routes::reclaim::take_commands))
        .routes(routes!(crate::routes::reclaim::command_result))
}

pub fn router(state: AppState) -> Router {
    let (routes, _) = documented_routes().split_for_parts();
    // Unknown /api/… paths answer a JSON 404, not the dashboard.
    let api_fallback = || async { crate::error::ApiError::NotFound("no such API endpoint".into()) };
    let static_dir = &state.config.static_dir;
    // frontend/build.sh writes a zopfli-compressed `.gz` beside each file: sent as it is to
    // clients that accept gzip (the compression layer leaves encoded answers alone).
    let index = ServeFile::new(static_dir.join("index.html")).precompressed_gzip();
    let dashboard = ServeDir::new(static_dir).precompressed_gzip().fallback(index);
    let hsts = state.config.accounts.cookie_secure;
    let app = routes
        .nest("/api", Router::new().fallback(api_fallback))
        .fallback_service(dashboard)
        .layer(axum::middleware::map_response(crate::error::json_client_errors))
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(CompressionLayer::new().gzip(true))
        .layer(TraceLayer::new_for_http());
    with_security_headers(app, hsts).with_state(state)
}

/// The Content-Security-Policy of every answer. The dashboard is a wasm module loaded by
/// same-origin scripts (`/boot.js`, `/fleetlens.js`): `'wasm-unsafe-eval'` lets them compile
/// it, and nothing else runs (no inline script, no eval). Styles come only from
/// `/fleetlens.css`: the views set widths through the CSSOM (`style:width`), which
/// `style-src` does not govern, so no `'unsafe-inline'`.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     frame-ancestors 'none'; form-action 'self'";

/// Security headers on every answer (dashboard, API, errors), unless a handler set its own.
/// `Strict-Transport-Security` is sent with `--cookie-secure true` (the default), which says
/// the server is reached over https, directly or through a TLS proxy; browsers ignore it on
/// plain http, so a plain-http run on localhost is not harmed.
fn with_security_headers<S: Clone + Send + Sync + 'static>(router: Router<S>, hsts: bool) -> Router<S> {
    use axum::http::{HeaderName, HeaderValue, header};
    let set = |name: HeaderName, value: &'static str| {
        SetResponseHeaderLayer::if_not_present(name, HeaderValue::from_static(value))
    };
    let router = router
        .layer(set(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .layer(set(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(set(header::X_FRAME_OPTIONS, "DENY"))
        .layer(set(header::REFERRER_POLICY, "no-referrer"));
    if hsts { router.layer(set(header::STRICT_TRANSPORT_SECURITY, "max-age=31536000")) } else { router }
}

/// Alerting: rules, channels, alerts, silences, the delivery log.
fn alerts_routes() -> OpenApiRouter<AppState> {
    use crate::routes::alerts as a;
    OpenApiRouter::new()
        .routes(routes!(a::list_rules, a::create_rule))
        .routes(routes!(a::rule_fields))
        .routes(routes!(a::check_condition))
        .routes(routes!(a::get_rule, a::put_rule, a::delete_rule))
        .routes(routes!(a::list_channels, a::create_channel))
        .routes(routes!(a::get_channel, a::put_channel, a::delete_channel))
        .routes(routes!(a::test_channel))
        .routes(routes!(a::channel_deliveries))
        .routes(routes!(a::list_deliveries))
        .routes(routes!(a::list_alerts))
        .routes(routes!(a::get_alert))
        .routes(routes!(a::list_silences, a::create_silence))
        .routes(routes!(a::delete_silence))
}

/// Accounts: sessions, organisations, users, teams, API keys, team assignments.
fn accounts_routes() -> OpenApiRouter<AppState> {
    use crate::routes::accounts as a;
    OpenApiRouter::new()
        .routes(routes!(a::login))
        .routes(routes!(a::logout))
        .routes(routes!(a::me))
        .routes(routes!(a::change_password))
        .routes(routes!(a::list_orgs, a::create_org))
        .routes(routes!(a::list_users, a::create_user))
        .routes(routes!(a::get_user, a::update_user, a::delete_user))
        .routes(routes!(a::list_teams, a::create_team))
        .routes(routes!(a::get_team, a::rename_team, a::delete_team))
        .routes(routes!(a::add_member, a::remove_member))
        .routes(routes!(a::list_keys, a::create_key))
        .routes(routes!(a::get_key, a::revoke_key))
        .routes(routes!(a::list_hosts))
        .routes(routes!(a::assign_host))
        .routes(routes!(a::assign_gpu))
}

/// The bootstrap admin key: `FLEETLENS_ADMIN_TOKEN`, if set, is a valid `admin` key of the
/// default organisation, and any key an earlier value made is revoked (also when the variable
/// is unset now): the variable is the only thing that keeps such a key alive.
async fn bootstrap(store: &dyn Store, config: &Config) -> Result<(), StoreError> {
    let token = config.admin_token.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let hash = token.map(hash_api_key);
    let prefix: String = token.map(|t| t.chars().take(7).collect()).unwrap_or_default();
    let key = hash.as_deref().map(|key_hash| NewApiKey {
        org_id: DEFAULT_ORG,
        name: "bootstrap admin (FLEETLENS_ADMIN_TOKEN)",
        prefix: &prefix,
        key_hash,
        scopes: &[Scope::Admin, Scope::Read, Scope::Ingest],
        created_ms: now_ms(),
    });
    let synced = store.sync_bootstrap_key(key, now_ms()).await?;
    if synced.revoked > 0 {
        tracing::warn!(
            revoked = synced.revoked,
            "earlier FLEETLENS_ADMIN_TOKEN keys revoked (the variable changed or was removed)"
        );
    }
    if synced.current_revoked {
        tracing::error!("FLEETLENS_ADMIN_TOKEN was revoked through the API: it stays revoked; set a new value");
    } else if token.is_some() {
        tracing::info!("admin API key from FLEETLENS_ADMIN_TOKEN is ready");
    }
    Ok(())
}

/// Open storage, bind, print the URL on stdout, and serve until ctrl-c / SIGTERM.
pub async fn serve(config: Config) -> Result<(), StartupError> {
    crate::accounts::check_bootstrap_config(&config.accounts, config.admin_token.as_deref())
        .map_err(StartupError::Config)?;
    if config.database_url.to_ascii_uppercase().contains("CHANGE-ME") {
        return Err(StartupError::Config(
            "FLEETLENS_DATABASE_URL still holds the CHANGE-ME placeholder of the example secret".into(),
        ));
    }
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
    let egress = crate::egress::EgressPolicy::new(config.webhook_allow_cidrs.clone().unwrap_or_default().0);
    let alerts = crate::alerts::Alerts::new(store.clone(), config.alerts.clone(), addr, egress);
    let ingest_gate = Arc::new(crate::ingest_gate::IngestGate::new(config.max_concurrent_ingest_per_key as usize));
    let deliveries: Arc<crate::delivery::HostDeliveries> = Default::default();
    let live = crate::live::Hub::new(config.stream.clone(), store.clone(), deliveries.clone());
    let state = AppState {
        store: store.clone(),
        key_cache: Arc::new(KeyCache::default()),
        accounts: Arc::new(crate::accounts::Accounts::new(&config.accounts)),
        config: Arc::new(config),
        classifier,
        summary_cache: Default::default(),
        alerts: alerts.clone(),
        deliveries,
        ingest_gate,
        quality: Default::default(),
        live: live.clone(),
        job_tracker: Default::default(),
    };
    alerts.spawn();
    tokio::spawn(live.listen());
    tokio::spawn(crate::jobs::retention_loop(store.clone(), state.config.clone()));
    tokio::spawn(crate::jobs::rollup_loop(
        store.clone(),
        state.config.clone(),
        state.classifier.clone(),
        state.summary_cache.clone(),
    ));
    tokio::spawn(crate::jobs::thresholds_loop(store.clone(), state.classifier.clone(), state.summary_cache.clone()));
    tokio::spawn(crate::jobs::sealing_loop(store.clone(), state.config.clone()));
    tokio::spawn(crate::jobs::maintenance_loop(store.clone()));
    let rejoin_ms = crate::alerts::ms(state.config.actions.job_end_after);
    tokio::spawn(crate::actions::tracker::flush_loop(state.job_tracker.clone(), store.clone(), rejoin_ms));
    tokio::spawn(crate::actions::report_loop(state.clone()));
    tokio::spawn(crate::actions::reclaim::reclaim_loop(state.clone()));
    if !state.config.static_dir.join("index.html").exists() {
        tracing::warn!(dir = %state.config.static_dir.display(), "dashboard not built: run frontend/build.sh");
    }
    tracing::info!(%addr, database = %store.backend(), "listening");
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

#[cfg(test)]
mod tests {
    /// Routes are added only with `routes!`, so every served route is in the OpenAPI document.
    #[test]
    fn every_route_is_documented() {
        let source = include_str!("app.rs");
        // Spelt in pieces so that this test does not find itself.
        let plain = [concat!(".rou", "te("), concat!("route_", "service("), concat!("Method", "Router")];
        for (n, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for p in plain {
                assert!(
                    !code.contains(p),
                    "app.rs:{}: add routes with .routes(routes!(handler)) so they are documented: {line}",
                    n + 1
                );
            }
        }
    }
}
