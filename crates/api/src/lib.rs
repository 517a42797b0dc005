//! Wire types of `/api/v1`. Field names follow `docs/METRICS.md`; absent values are `null`.

#[cfg(feature = "ingest-protobuf")]
pub mod ingest_protobuf;
#[cfg(feature = "remote-write")]
pub mod remote_write;

use std::collections::BTreeMap;

use fleetlens_core::{
    AlertId, AlertStatus, ChannelId, FunnelLevelName, JobId, Precision, RuleId, Severity, SilenceId, WorkloadState,
};
pub use fleetlens_core::{GpuEvent, GpuEventKind, GpuInfo, GpuProcess, JobThroughput, Sample};
use serde::{Deserialize, Serialize};

pub mod accounts;
pub mod actions;
pub mod alerts;
pub mod analytics;
pub mod events;
pub mod gpus;
pub mod health;
pub mod live;
pub mod reclaim;
pub mod reports;
mod time;

pub use time::TimeArg;

/// Path of the ingest endpoint.
pub const INGEST_PATH: &str = "/api/v1/ingest";

/// `POST /api/v1/ingest`: a batch of samples from one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IngestBatch {
    /// Host name the samples come from. Required: a batch without one parses (as "") and is
    /// refused by validation, a 422 on `host` like an empty one.
    #[serde(default)]
    pub host: String,
    /// Version of the agent that sent the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Free-form host labels (team, rack, cluster …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// May be left out in a batch of events only.
    #[serde(default)]
    pub samples: Vec<Sample>,
    /// What happened to the host's GPUs since its previous batch (XID errors, a GPU lost or
    /// back). A batch may carry events and no samples (every GPU of the host lost).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<GpuEvent>,
}

/// Answer to an accepted ingest batch: everything in it is durably committed. Answers add up
/// (`+=`) to the answer of the batches' union, as a client that split one batch sums them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IngestResponse {
    /// Samples in the batch.
    pub received: u64,
    /// Samples newly stored.
    pub inserted: u64,
    /// Samples of a GPU and ts_ms stored before that filled fields the stored sample lacked
    /// (fields present in both keep the stored value). Absent from servers before it was added.
    #[serde(default)]
    pub merged: u64,
    /// Samples already stored before (same GPU and ts_ms) that added nothing: ignored, the
    /// batch is idempotent.
    pub duplicates: u64,
}

impl std::ops::AddAssign for IngestResponse {
    fn add_assign(&mut self, other: IngestResponse) {
        self.received += other.received;
        self.inserted += other.inserted;
        self.merged += other.merged;
        self.duplicates += other.duplicates;
    }
}

/// Answer to an accepted remote-write request (`POST /api/v1/write`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RemoteWriteResponse {
    /// GPU samples (one per GPU and timestamp) assembled from the series.
    pub received: u64,
    /// GPU samples newly stored.
    pub inserted: u64,
    /// GPU samples of a GPU and timestamp stored before that filled the fields the stored
    /// sample lacked: the rest of a scrape whose series Prometheus split over two requests.
    pub merged: u64,
    /// GPU samples stored before (same GPU and timestamp) that added nothing: ignored.
    pub duplicates: u64,
    /// Series that are not dcgm-exporter fields Fleetlens reads (counted in
    /// `fleetlens_remote_write_series_ignored_total{reason="unknown"}`).
    pub series_unknown: u64,
    /// dcgm-exporter series without a `UUID` label.
    pub series_unkeyed: u64,
}

/// Error body of every 4xx/5xx: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// For validation errors: the index of the offending sample in the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_index: Option<usize>,
    /// For validation errors: the offending field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For an alert condition that does not parse: the 1-based column in it at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

/// One GPU in `GET /api/v1/gpus`: the registry's facts (`GpuInfo`, at the top level of the
/// JSON), its newest sample and what it is doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuSummary {
    #[serde(flatten)]
    pub info: GpuInfo,
    /// The newest stored sample.
    pub latest: Option<Sample>,
    /// Efficiency score of the latest sample (null when undefined).
    pub efficiency: Option<f64>,
    /// Workload state of the current window (null until the classifier has a window).
    pub state: Option<WorkloadState>,
}

/// `GET /api/v1/gpus`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuList {
    pub gpus: Vec<GpuSummary>,
}

/// `GET /api/v1/gpus/{uuid}/samples`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SampleList {
    pub uuid: String,
    pub from_ms: i64,
    pub to_ms: i64,
    /// True when `limit` cut the list short; ask again from the last `ts_ms` + 1.
    pub truncated: bool,
    pub samples: Vec<Sample>,
}

/// One entry of `GET /api/v1/gpus/{uuid}/states` (the response is a JSON array of these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateWindow {
    pub from_ms: i64,
    pub to_ms: i64,
    /// Workload state name as in METRICS.md (`idle`, `idle_held`, `hollow`, …).
    pub state: WorkloadState,
    /// Efficiency score of the window; null when kernel utilization is 0 or unmeasured.
    pub efficiency: Option<f64>,
    pub sample_count: u32,
    pub gpu_util_pct: Option<f64>,
    pub sm_active_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_active_pct: Option<f64>,
    /// The rule that matched, with its numbers.
    pub reason: String,
    /// What the classifier could not see, e.g. "no SM activity on this GPU".
    pub note: Option<String>,
    /// What to tell the user (METRICS.md); empty for healthy states.
    pub advice: String,
}

/// One level of the utilization funnel in the fleet summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunnelLevel {
    /// `allocation`, `kernel`, `sm`, `tensor`, `mfu`.
    pub level: FunnelLevelName,
    /// Fraction (0–1) of the paid GPU-seconds the level covers; null when unmeasured.
    pub fraction: Option<f64>,
    /// Share (0–1) of paid GPU-seconds where the signal was measured.
    pub coverage: Option<f64>,
    /// Cost of the gap between the previous level (100 % for the first) and this one, over
    /// the priced GPU-hours; null when unmeasured or nothing is priced.
    pub gap_cost: Option<f64>,
}

/// Right-size advice for a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RightSizeAdvice {
    pub suggested_model: String,
    pub p95_sm_active_pct: f64,
    pub peak_mem_bytes: i64,
    pub saving_per_month: f64,
}

/// A GPU in the "wasting the most" list of the fleet summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuWaste {
    pub uuid: String,
    pub host: String,
    pub name: Option<String>,
    /// State the GPU spent the most wasted time in.
    pub main_waste_state: Option<WorkloadState>,
    pub paid_gpu_hours: f64,
    pub wasted_cost: Option<f64>,
    pub wasted_hours: f64,
    pub efficiency: Option<f64>,
    /// What to do about it (METRICS.md advice for the main waste state).
    pub advice: String,
    pub right_size: Option<RightSizeAdvice>,
}

/// `GET /api/v1/fleet/summary`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FleetSummary {
    pub from_ms: i64,
    pub to_ms: i64,
    pub gpu_count: u32,
    pub paid_gpu_hours: f64,
    pub allocated_gpu_hours: f64,
    /// allocation → kernel → sm → tensor → mfu.
    pub funnel: Vec<FunnelLevel>,
    /// Hours per workload state (METRICS.md names).
    pub hours_by_state: BTreeMap<String, f64>,
    pub currency: String,
    /// Where the default prices come from (public list prices), or "organisation prices".
    pub price_source: String,
    /// Cost of the priced GPU-hours; null when no GPU has a price.
    pub cost: Option<f64>,
    pub wasted_cost: Option<f64>,
    pub wasted_cost_by_state: BTreeMap<String, f64>,
    /// Wasted cost of the last 7 days × 30/7: "you could save $X/month".
    pub projected_monthly_waste: Option<f64>,
    /// The priced GPU-hours paid for in the last 7 days that the projection is computed from:
    /// on a fleet watched for less than a week it covers less than 7 days per GPU, and the
    /// projection is lower than the waste will be.
    #[serde(default)]
    pub projected_from_gpu_hours: f64,
    /// GPU-hours of models with no price set (not counted in cost).
    pub unpriced_gpu_hours: f64,
    /// GPU models without a price ("no price set").
    pub unpriced_models: Vec<String>,
    pub energy_kwh: f64,
    pub energy_kwh_by_state: BTreeMap<String, f64>,
    /// GPUs wasting the most, most first.
    pub top_wasters: Vec<GpuWaste>,
    /// Owners (Unix or Slurm user, see `OwnerWaste`) wasting the most, most first; computed
    /// from the raw samples' process lists over the last 24 h of the period at most (see
    /// `top_owners_from_ms`). Empty where no process carried an owner.
    #[serde(default)]
    pub top_owners: Vec<OwnerWaste>,
    /// Start of the span `top_owners` covers (it ends at `to_ms`); null when not computed.
    #[serde(default)]
    pub top_owners_from_ms: Option<i64>,
    /// Monthly saving of the collocation and right-size plans from the jobs that ended in the
    /// period (the whole organisation's; `GET /api/v1/plans`, docs/ACTIONS.md); null when not
    /// computed.
    #[serde(default)]
    pub plan_saving_per_month: Option<f64>,
}

/// One owner's GPU time and money in the fleet summary, by user (the process's Unix user, else
/// its Slurm job user). `owner` is `(unknown)` for processes whose user the agent could not
/// read. Time on a GPU shared by several processes is split by their SM % (else evenly).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OwnerWaste {
    pub owner: String,
    /// GPUs the owner's processes were on.
    pub gpus: u32,
    pub gpu_hours: f64,
    pub idle_held_hours: f64,
    pub hollow_hours: f64,
    pub cost: Option<f64>,
    pub wasted_cost: Option<f64>,
}

/// `POST /api/v1/jobs`: a job reports its model throughput for MFU. Give either
/// `achieved_flops_per_s` or `tokens_per_s` × `flops_per_token` (the job's total over all its GPUs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobReport {
    pub name: String,
    /// UUIDs of the GPUs the job ran on.
    pub gpus: Vec<String>,
    pub from: TimeArg,
    pub to: TimeArg,
    /// `fp64`, `fp32`, `tf32`, `bf16`, `fp16`, `fp8`, `fp4`, in any case (`BF16` is `bf16`);
    /// `fp16` has the `bf16` peak and reads back as `fp16`.
    #[serde(deserialize_with = "Precision::deserialize_any_case")]
    pub precision: Precision,
    #[serde(default)]
    pub achieved_flops_per_s: Option<f64>,
    #[serde(default)]
    pub tokens_per_s: Option<f64>,
    #[serde(default)]
    pub flops_per_token: Option<f64>,
}

/// A stored job report (`JobThroughput`, at the top level of the JSON) and its MFU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    pub id: JobId,
    #[serde(flatten)]
    pub report: JobThroughput,
    /// Achieved ÷ the dense datasheet peak of its GPUs at that precision; null when a GPU's
    /// model or precision has no datasheet figure.
    pub mfu: Option<f64>,
}

/// One point of `GET /api/v1/gpus/{uuid}/series`: a rollup bucket's means (min/max for the
/// two headline signals), null where nothing was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeriesPoint {
    /// Bucket start, Unix ms.
    pub ts_ms: i64,
    pub sample_count: i64,
    pub gpu_util_pct: Option<f64>,
    pub gpu_util_pct_max: Option<f64>,
    pub sm_active_pct: Option<f64>,
    pub sm_active_pct_min: Option<f64>,
    pub sm_occupancy_pct: Option<f64>,
    pub tensor_active_pct: Option<f64>,
    pub dram_active_pct: Option<f64>,
    pub mem_used_bytes_max: Option<f64>,
    pub power_w: Option<f64>,
    pub temp_c: Option<f64>,
    /// The minute's workload state (1-minute resolution only).
    pub state: Option<WorkloadState>,
}

/// `GET /api/v1/gpus/{uuid}/series?from=&to=&resolution=1m|1h`: served from rollups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Series {
    pub uuid: String,
    pub resolution: fleetlens_core::Resolution,
    pub from_ms: i64,
    pub to_ms: i64,
    pub points: Vec<SeriesPoint>,
}

/// One row of `GET /api/v1/reports/billing`: a group's GPU time, states, use and money over
/// the period. Hours are GPU-hours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BillingRow {
    /// The group's key: team name, host, GPU uuid or GPU model.
    pub group: String,
    pub gpus: u32,
    pub gpu_hours: f64,
    pub allocated_hours: f64,
    /// Hours per workload state (every METRICS.md state, 0 where none).
    pub hours_by_state: BTreeMap<String, f64>,
    /// Means over the paid time (null where the signal was never measured).
    pub mean_gpu_util_pct: Option<f64>,
    pub mean_sm_active_pct: Option<f64>,
    pub mean_tensor_active_pct: Option<f64>,
    pub energy_kwh: f64,
    /// Price per GPU-hour when every GPU of the group has the same one; else null.
    pub price_per_gpu_hour: Option<f64>,
    /// Cost of the priced GPU-hours (null when none is priced).
    pub cost: Option<f64>,
    pub wasted_cost: Option<f64>,
    /// GPU-hours of models with no price set.
    pub unpriced_gpu_hours: f64,
    /// Mean SMACT ÷ mean kernel utilization × 100.
    pub efficiency_pct: Option<f64>,
}

/// `GET /api/v1/reports/billing?format=json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BillingReport {
    /// The period, Unix milliseconds like every time in a response (`[from_ms, to_ms)`).
    #[serde(default)]
    pub from_ms: i64,
    #[serde(default)]
    pub to_ms: i64,
    /// The same period in RFC 3339, UTC, as the CSV's `period_from` / `period_to` columns
    /// write it (for people and spreadsheets).
    pub from: String,
    pub to: String,
    /// The query's `group_by` (default `gpu`), as its text.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "host"))]
    pub group_by: reports::ReportGrouping,
    pub currency: String,
    pub rows: Vec<BillingRow>,
    /// For owner groupings (`user`, `namespace`, `pod`, `job`, `label:<name>`): how the rows were
    /// computed and what they cover (raw samples only; offline time is nobody's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// An alert, as `GET /api/v1/alerts` and the live stream show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AlertView {
    pub id: AlertId,
    /// Ids are never reused, so this is always the rule that raised the alert, even after it
    /// was deleted (then `rule_deleted` is true and `rule_name` is its name at the time).
    pub rule_id: RuleId,
    /// The rule has been deleted since.
    pub rule_deleted: bool,
    pub rule_name: String,
    pub severity: Severity,
    /// `pending`, `firing` or `resolved`.
    pub status: AlertStatus,
    /// Notifications were held back by a silence.
    pub silenced: bool,
    pub silenced_by: Option<SilenceId>,
    /// Held back by another open alert of the same problem (inhibition): it sends nothing.
    pub inhibited: bool,
    /// That alert's id.
    pub inhibited_by: Option<AlertId>,
    /// Its notification group under the default key (rule, job or owner, host).
    pub group: String,
    pub gpu: String,
    pub host: String,
    pub team: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub fingerprint: String,
    pub active_since_ms: i64,
    pub fired_at_ms: Option<i64>,
    pub resolved_at_ms: Option<i64>,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
    pub summary: String,
    pub condition: String,
    /// The condition's fields and their values when it fired.
    pub values: Vec<fleetlens_core::rules::payload::MatchedValue>,
    pub state: Option<WorkloadState>,
    pub advice: String,
    /// The firing notification went out.
    pub notified: bool,
    pub notified_channels: Vec<ChannelId>,
    pub resolved_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_funnel_levels_travel_as_their_names() {
        let window = r#"{"from_ms":0,"to_ms":60000,"state":"idle_held","efficiency":null,"sample_count":60,"gpu_util_pct":0.0,"sm_active_pct":null,"tensor_active_pct":null,"dram_active_pct":null,"reason":"r","note":null,"advice":"a"}"#;
        let w: StateWindow = serde_json::from_str(window).unwrap();
        assert_eq!(w.state, WorkloadState::IdleHeld);
        assert_eq!(serde_json::to_string(&w).unwrap(), window, "byte for byte");
        let level = r#"{"level":"sm","fraction":0.5,"coverage":1.0,"gap_cost":null}"#;
        let l: FunnelLevel = serde_json::from_str(level).unwrap();
        assert_eq!(l.level, FunnelLevelName::Sm);
        assert_eq!(serde_json::to_string(&l).unwrap(), level);
        let e = serde_json::from_str::<FunnelLevel>(&level.replace("\"sm\"", "\"smx\"")).unwrap_err().to_string();
        assert!(e.contains("`allocation`, `kernel`, `sm`, `tensor`, `mfu`"), "{e}");
    }
}
