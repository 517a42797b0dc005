//! Alerting in the server: the engine that evaluates the rules on event time
//! ([`engine`]), the outbox sender that delivers notifications ([`outbox`]), and how a
//! notification looks on each kind of channel ([`render`]).
//!
//! Ingest stays fast: after a batch is committed it only calls [`Alerts::observe`], which
//! wakes the engine (and records the host's labels when they changed). The engine reads the
//! new samples back from the database, so whichever replica received them, the one replica
//! that holds the engine's lease evaluates every GPU in time order.

pub mod digest;
pub mod engine;
pub mod groups;
pub mod outbox;
pub mod recent;
pub mod render;
pub mod views;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetlens_store::{OrgId, Store};
use tokio::sync::Notify;

use crate::egress::EgressPolicy;
use crate::time::now_ms;

/// The labels last stored per (organisation, host), to skip unchanged writes.
type HostLabels = HashMap<(OrgId, String), BTreeMap<String, String>>;

/// Alerting settings (flags with environment fallbacks).
#[derive(Debug, Clone, clap::Args)]

pub struct AlertsConfig {
    /// Base URL of this Fleetlens as users reach it, for links in notifications
    /// (default: http://LISTEN-ADDRESS).
    #[arg(long, env = "FLEETLENS_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// The alert engine evaluates at least this often (and at once when samples arrive).
    #[arg(long, env = "FLEETLENS_ALERT_EVAL_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub alert_eval_interval: Duration,

    /// First retry delay of a failed notification; doubles per attempt.
    #[arg(long, env = "FLEETLENS_ALERT_RETRY_BASE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub alert_retry_base: Duration,

    /// Longest delay between two attempts.
    #[arg(long, env = "FLEETLENS_ALERT_RETRY_MAX", default_value = "5m", value_parser = humantime::parse_duration)]
    pub alert_retry_max: Duration,

    /// A notification not delivered within this time is given up (marked failed).
    #[arg(long, env = "FLEETLENS_ALERT_GIVE_UP_AFTER", default_value = "24h", value_parser = humantime::parse_duration)]
    pub alert_give_up_after: Duration,

    /// Timeout of one delivery attempt.
    #[arg(long, env = "FLEETLENS_ALERT_HTTP_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub alert_http_timeout: Duration,

    /// How far back the engine starts on a GPU it has never evaluated.
    #[arg(long, env = "FLEETLENS_ALERT_LOOKBACK", default_value = "24h", value_parser = humantime::parse_duration)]
    pub alert_lookback: Duration,

    /// GPUs silent for longer than this are retired: no "offline" alert is raised for them.
    #[arg(long, env = "FLEETLENS_ALERT_OFFLINE_HORIZON", default_value = "7d", value_parser = humantime::parse_duration)]
    pub alert_offline_horizon: Duration,

    /// Digest channels get a digest every this often (from the Unix epoch) instead of daily or
    /// weekly at their time: for tests and demos.
    #[arg(long, env = "FLEETLENS_ALERT_DIGEST_PERIOD", value_parser = humantime::parse_duration)]
    pub alert_digest_period: Option<Duration>,
}

impl AlertsConfig {
    pub fn retry_base_ms(&self) -> i64 {
        ms(self.alert_retry_base).max(1)
    }
    pub fn retry_max_ms(&self) -> i64 {
        ms(self.alert_retry_max).max(self.retry_base_ms())
    }
    pub fn give_up_ms(&self) -> i64 {
        ms(self.alert_give_up_after)
    }
    /// The outbox lease: well beyond one attempt's timeout, so a live sender never loses it.
    pub fn lease_ms(&self) -> i64 {
        (ms(self.alert_http_timeout) * 3).max(30_000)
    }
}

pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What the engine and the sender share.
pub struct AlertsCtx {
    pub store: Arc<dyn Store>,
    pub cfg: AlertsConfig,
    /// Base URL for links, without a trailing slash.
    pub public_url: String,
    pub engine_wake: Notify,
    pub outbox_wake: Notify,
    /// The batches this replica stored, for the engine (`recent`).
    pub recent: recent::RecentBatches,
    /// This process, as lease owner.
    pub owner: String,
    /// The notification client: no redirects, every address checked at connect time.
    pub http: reqwest::Client,
    /// Which addresses notifications may reach (literal IPs in URLs are checked with it).
    pub egress: Arc<EgressPolicy>,
}

/// The handle in `AppState`.
#[derive(Clone)]
pub struct Alerts {
    ctx: Arc<AlertsCtx>,
    labels_seen: Arc<Mutex<HostLabels>>,
    seeded: Arc<Mutex<std::collections::HashSet<OrgId>>>,
}

impl Alerts {
    /// Build the handle; nothing runs until [`Alerts::spawn`].
    pub fn new(store: Arc<dyn Store>, cfg: AlertsConfig, listen: std::net::SocketAddr, egress: EgressPolicy) -> Self {
        let public_url =
            cfg.public_url.clone().unwrap_or_else(|| format!("http://{listen}")).trim_end_matches('/').to_string();
        let egress = Arc::new(egress);
        let http = crate::egress::client(egress.clone(), cfg.alert_http_timeout);
        let owner = format!("{}-{}-{}", host_name(), std::process::id(), now_ms());
        let ctx = AlertsCtx {
            store,
            cfg,
            public_url,
            engine_wake: Notify::new(),
            outbox_wake: Notify::new(),
            recent: recent::RecentBatches::default(),
            owner,
            http,
            egress,
        };
        Alerts { ctx: Arc::new(ctx), labels_seen: Arc::default(), seeded: Arc::default() }
    }

    /// Start the engine and the sender.
    pub fn spawn(&self) {
        tokio::spawn(engine::run(self.ctx.clone()));
        tokio::spawn(outbox::run(self.ctx.clone()));
    }

    pub fn ctx(&self) -> &Arc<AlertsCtx> {
        &self.ctx
    }

    /// Called by ingest after a batch is committed, with what it wrote: the engine judges it
    /// from memory when it can (`recent`).
    pub fn stored(&self, samples: &Arc<[fleetlens_core::Sample]>, written: &[fleetlens_store::GpuWritten]) {
        self.ctx.recent.add(samples, written);
    }

    /// Called by ingest after a batch is committed: wakes the engine (cheap; no IO here) and
    /// stores the host's labels when they changed.
    pub fn observe(&self, org: OrgId, host: &str, labels: &BTreeMap<String, String>) {
        let key = (org, host.to_string());
        let changed = {
            let mut seen = self.labels_seen.lock().expect("labels lock");
            if seen.get(&key) == Some(labels) {
                false
            } else {
                seen.insert(key, labels.clone());
                true
            }
        };
        if changed {
            let (store, host, labels, seen) =
                (self.ctx.store.clone(), host.to_string(), labels.clone(), self.labels_seen.clone());
            tokio::spawn(async move {
                if let Err(e) = store.put_host_labels(org, &host, &labels, now_ms()).await {
                    tracing::warn!(error = %e, host, "could not store host labels");
                    seen.lock().expect("labels lock").remove(&(org, host));
                }
            });
        }
        self.ctx.engine_wake.notify_one();
    }

    /// Give the organisation the shipped rules it has never had (once per process).
    pub async fn ensure_default_rules(&self, org: OrgId) -> Result<(), fleetlens_store::StoreError> {
        if self.seeded.lock().expect("seeded lock").contains(&org) {
            return Ok(());
        }
        self.ctx.store.seed_default_rules(org, &engine::default_rules(), now_ms()).await?;
        self.seeded.lock().expect("seeded lock").insert(org);
        Ok(())
    }

    /// Something was enqueued outside the engine (a test message).
    pub fn wake_outbox(&self) {
        self.ctx.outbox_wake.notify_one();
    }

    /// Rules changed: evaluate soon.
    pub fn wake_engine(&self) {
        self.ctx.engine_wake.notify_one();
    }
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "fleetlens".into())
}
