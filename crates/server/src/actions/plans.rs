//! Collocation and right-size plans from the ended runs' cards (docs/ACTIONS.md), for
//! `GET /api/v1/plans` and the fleet summary's `plan_saving_per_month`.

use fleetlens_core::jobcard::JobCard;
use fleetlens_core::plans::{JobEvidence, Plans, plans};
use fleetlens_store::actions::JobRunFilter;
use fleetlens_store::{OrgId, Store};

use crate::error::ApiResult;

/// Ended runs read for plans at most.
const MAX_RUNS: i64 = 10_000;

/// The evidence of a run: single-GPU runs with a card that has its p95 SM activity and peak.
pub fn evidence(key: &str, card: &JobCard) -> Option<JobEvidence> {
    if card.gpu_count != 1 {
        return None;
    }
    let gpu = card.gpus.first()?;
    Some(JobEvidence {
        job: key.to_string(),
        gpu_name: gpu.name.clone()?,
        gpu_mem_total_bytes: gpu.mem_total_bytes,
        p95_sm_active_pct: card.p95_sm_active_pct?,
        peak_mem_bytes: gpu.peak_mem_bytes?,
        gpu_hours: card.gpu_hours,
        from_ms: card.from_ms,
        to_ms: card.to_ms,
    })
}

/// The plans of the runs that ended in `[from_ms, to_ms)`.
pub async fn compute(store: &dyn Store, org: OrgId, from_ms: i64, to_ms: i64) -> ApiResult<Plans> {
    let filter = JobRunFilter { open: Some(false), from_ms, to_ms, limit: MAX_RUNS };
    let runs = store.job_runs(org, &filter).await?;
    let jobs: Vec<JobEvidence> = runs
        .iter()
        .filter_map(|r| {
            let card: JobCard = serde_json::from_str(r.card.as_deref()?).ok()?;
            evidence(&r.run_key, &card)
        })
        .collect();
    let prices = crate::analytics::prices(store, org).await?;
    let th = crate::analytics::thresholds(store, org).await?;
    Ok(plans(&jobs, to_ms - from_ms, &prices, &th))
}
