//! Fleetlens domain logic. Everything here is pure: no IO, no clocks, no async.
//! The vocabulary follows `docs/METRICS.md`; a value the GPU did not report is `None`.

pub mod access;
pub mod advice;
pub mod backend;
pub mod classify;
pub mod cost;
pub mod credit;
pub mod datasheet;
pub mod dcgm;
pub mod energy;
pub mod event;
pub mod fill;
pub mod funnel;
pub mod gpu;
pub mod ids;
pub mod job;
pub mod jobcard;
#[cfg(feature = "sqlx")]
pub mod json_text;
pub mod live;
pub mod names;
pub mod owners;
pub mod plans;
pub mod prices;
pub mod quality;
pub mod reclaim;
pub mod rollup;
pub mod rules;
pub mod sample;
pub mod sample_table;
pub mod signal;
pub mod state;
pub mod thresholds;
pub mod time_text;
pub mod timeline;
pub mod validate;
pub mod window;

#[cfg(test)]
mod classify_tests;
#[cfg(test)]
mod fixture_tests;

pub use access::{Role, Scope, TeamSource};
pub use backend::StoreBackend;
pub use ids::{
    AgentCommandId, AlertGroupId, AlertId, ApiKeyId, ChannelId, DeliveryId, GpuEventId, GpuId, JobId, JobRunId,
    MessageId, OrgId, ReclaimId, ReclaimPolicyId, ReclaimStepId, ReportRouteId, RuleId, SilenceId, TeamId, UserId,
};
pub use owners::{OwnerGroup, OwnerKey, minute_shares};
pub use rollup::{
    QUALITY_COUNTS, ROLLUP_SIGNALS, Resolution, RollupAccumulator, RollupBucket, SignalStats, minute_from_samples,
};
pub use sample::{GpuProcess, PodAllocation, ProcessOwner, Sample};
pub use sample_table::{ProcessColumns, SampleTable, SignalValues};
pub use validate::{ValidationError, validate_sample};

pub use advice::{CollocationHint, JobUsage, RightSizeHint, collocation, p95, percentile, right_size};
pub use classify::{Classification, KeyValues, NOTE_NO_SM_ACTIVITY, classify, classify_window};
pub use cost::{MONTH_DAYS, MONTH_HOURS, StateTime, WasteBreakdown, period_cost, projected_monthly_waste};
pub use credit::{CREDIT_COLUMNS, Credit, bucket_energy_j};
pub use datasheet::{GpuModel, GpuSpec, Precision, SPECS, mfu};
pub use energy::{EnergyTotals, energy, energy_by_state};
pub use event::{EventError, GpuEvent, GpuEventKind, validate_event};
pub use funnel::{Funnel, FunnelLevelName, GpuUsage, Level};
pub use gpu::GpuInfo;
pub use job::JobThroughput;
pub use jobcard::{CardAdvice, CardGpu, CardGpuInput, CardInput, JobCard, job_card, run_key};
pub use names::UnknownName;
pub use prices::{DEFAULT_PRICE_SOURCE, PriceError, PriceTable};
pub use quality::{QualityFlag, QualityFlags, QualityTracker};
pub use rules::{AlertStatus, AttemptOutcome, ChannelKind, MessageKind, OutboxStatus, Severity};
pub use state::WorkloadState;
pub use thresholds::{GIB, ThresholdError, Thresholds};
pub use timeline::{GpuFacts, StateSpan};
pub use window::{SignalCounts, WindowAggregate, sample_durations_ms, sampled_ms_since_previous, samples_in};

/// Efficiency score (METRICS.md): SMACT / kernel utilization × 100, capped at 100.
/// Undefined (None) when kernel utilization is 0 or either signal is absent.
pub fn efficiency(sm_active_pct: Option<f64>, gpu_util_pct: Option<f64>) -> Option<f64> {
    match (sm_active_pct, gpu_util_pct) {
        (Some(sm), Some(util)) if util > 0.0 => Some((sm / util * 100.0).min(100.0)),
        _ => None,
    }
}
