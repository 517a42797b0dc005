//! Background jobs: retention.

use std::sync::Arc;
use std::time::Duration;

use fleetlens_store::Store;

use crate::config::Config;
use crate::time::now_ms;

/// Apply the retention policy shortly after start, then every `retention_interval`.
pub async fn retention_loop(store: Arc<dyn Store>, config: Arc<Config>) {
    let policy = config.retention_policy();
    tokio::time::sleep(Duration::from_secs(10)).await;
    loop {
        match store.apply_retention(policy, now_ms()).await {
            Ok(r) => tracing::info!(
                samples = r.samples,
                rollups_1m = r.rollups_1m,
                rollups_1h = r.rollups_1h,
                "retention applied"
            ),
            Err(e) => tracing::warn!(error = %e, "retention failed; will retry next interval"),
        }
        tokio::time::sleep(config.retention_interval).await;
    }
}
