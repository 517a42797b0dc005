//! Shared application state handed to every handler.

use std::sync::Arc;

use fleetlens_store::Store;

use crate::analytics::OrgClassifier;
use crate::auth::KeyCache;
use crate::config::Config;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub key_cache: Arc<KeyCache>,
    /// Login rate limits and the account caches of this process.
    pub accounts: Arc<crate::accounts::Accounts>,
    pub config: Arc<Config>,
    /// Classifies minutes as they are stored, with each organisation's thresholds.
    pub classifier: Arc<OrgClassifier>,
    pub summary_cache: Arc<crate::analytics::summary_cache::SummaryCache>,
    /// Alerting: ingest wakes the engine through it.
    pub alerts: crate::alerts::Alerts,
    /// Each host's delivery cadence, learnt at ingest: the silence a GPU's current state allows
    /// for before it reads offline.
    pub deliveries: Arc<crate::delivery::HostDeliveries>,
    /// Ingest requests in flight per API key (`--max-concurrent-ingest-per-key`).
    pub ingest_gate: Arc<crate::ingest_gate::IngestGate>,
    /// Data-quality trackers of the GPUs this process has received samples from.
    pub quality: Arc<crate::quality::QualityTrackers>,
    /// Live streams: the organisations' feeds and the open streams of this replica.
    pub live: Arc<crate::live::Hub>,
    /// Job runs seen at ingest, waiting to be written (docs/ACTIONS.md).
    pub job_tracker: Arc<crate::actions::tracker::JobTracker>,
}
