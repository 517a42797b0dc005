//! `GET /metrics`: Prometheus text exposition of the caller's GPUs (latest readings, current
//! state one-hot, efficiency), the fleet funnel of the last hour, and the server's own ingest
//! counters. A metric the GPU cannot give has no series (absent, never 0).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use fleetlens_core::{Resolution, WorkloadState};
use fleetlens_store::{GpuId, Scope};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::analytics;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Process-wide ingest counters.
pub struct IngestCounters {
    pub requests_accepted: AtomicU64,
    pub requests_rejected: AtomicU64,
    pub samples_received: AtomicU64,
    pub samples_inserted: AtomicU64,
    /// Samples that filled fields of a stored sample of the same GPU and timestamp.
    pub samples_merged: AtomicU64,
}

pub static INGEST: IngestCounters = IngestCounters {
    requests_accepted: AtomicU64::new(0),
    requests_rejected: AtomicU64::new(0),
    samples_received: AtomicU64::new(0),
    samples_inserted: AtomicU64::new(0),
    samples_merged: AtomicU64::new(0),
};

pub fn record_ingest(received: u64, inserted: u64, merged: u64) {
    INGEST.requests_accepted.fetch_add(1, Ordering::Relaxed);
    INGEST.samples_received.fetch_add(received, Ordering::Relaxed);
    INGEST.samples_inserted.fetch_add(inserted, Ordering::Relaxed);
    INGEST.samples_merged.fetch_add(merged, Ordering::Relaxed);
}

pub fn record_rejected() {
    INGEST.requests_rejected.fetch_add(1, Ordering::Relaxed);
}

/// Samples the alert engine judged, by where it found them: read back from the database, or
/// held from this replica's own ingest (`alerts::recent`).
static ALERT_FEED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
const ALERT_FEED_SOURCES: [&str; 2] = ["database", "memory"];

pub fn record_alert_feed(from_database: usize, from_memory: usize) {
    for (counter, n) in ALERT_FEED.iter().zip([from_database, from_memory]) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Remote-write series that gave no sample, by reason (process-wide).
static REMOTE_WRITE_IGNORED: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
const IGNORED_REASONS: [&str; 3] = ["unknown", "no_uuid", "stale"];

pub fn record_remote_write_ignored(i: &crate::remote_write::Ignored) {
    for (counter, n) in REMOTE_WRITE_IGNORED.iter().zip([i.unknown, i.unkeyed, i.stale]) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Live streams (`GET /api/v1/stream`) open on this replica.
static LIVE_STREAMS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// A live stream opened (+1) or closed (-1).
pub fn record_streams(delta: i64) {
    LIVE_STREAMS.fetch_add(delta, Ordering::Relaxed);
}

/// A label value from outside the server (an agent's host, GPU uuid and model name, a team
/// name), written escaped as both exposition formats require: `\` as `\\`, `"` as `\"`, a line
/// feed as `\n`. prometheus-client 0.23 writes `String` label values raw, so one host named
/// `n1",team="x` made the whole exposition unparsable and Prometheus dropped every series.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct AgentText(String);

impl EncodeLabelValue for AgentText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        write_escaped_label_value(encoder, &self.0)
    }
}

/// `value` escaped per the text exposition format (0.0.4 and OpenMetrics 1.0 alike).
fn write_escaped_label_value(out: &mut impl std::fmt::Write, value: &str) -> std::fmt::Result {
    let mut rest = value;
    while let Some(at) = rest.find(['\\', '"', '\n']) {
        out.write_str(&rest[..at])?;
        out.write_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        })?;
        rest = &rest[at + 1..];
    }
    out.write_str(rest)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    uuid: AgentText,
    host: AgentText,
    /// The GPU's team (empty, i.e. no label in PromQL, when it has none).
    team: AgentText,
    model: AgentText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    uuid: AgentText,
    host: AgentText,
    team: AgentText,
    model: AgentText,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job: String,
}

/// A process-wide counter split by one label: a series `label="value"` per `(value, count)`.
fn register_counts<'a>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    label: &str,
    counts: impl IntoIterator<Item = (&'a str, u64)>,
) {
    let family = Family::<Vec<(String, String)>, prometheus_client::metrics::counter::Counter>::default();
    registry.register(name, help, family.clone());
    for (value, n) in counts {
        family.get_or_create(&vec![(label.to_string(), value.to_string())]).inc_by(n);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    level: String,
}

/// A per-GPU gauge: metric name, help text, and how to read it from the newest sample.
type Signal = (&'static str, &'static str, fn(&fleetlens_core::Sample) -> Option<f64>);

type GaugeF = Gauge<f64, std::sync::atomic::AtomicU64>;

fn gauge_family(registry: &mut Registry, name: &str, help: &str) -> Family<GpuLabels, GaugeF> {
    let f = Family::<GpuLabels, GaugeF>::default();
    registry.register(name, help, f.clone());
    f
}

/// OpenMetrics (what prometheus-client writes) → the classic 0.0.4 text format that older
/// scrapers and `promtool check metrics` read: counter families are named with their
/// `_total` suffix, and the `# EOF` marker goes.
fn to_classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = counters.iter().find_map(|name| {
            for prefix in ["# HELP ", "# TYPE "] {
                if let Some(rest) = line.strip_prefix(prefix).and_then(|r| r.strip_prefix(name))
                    && rest.starts_with(' ')
                {
                    return Some(format!("{prefix}{name}_total{rest}"));
                }
            }
            None
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[utoipa::path(get, path = "/metrics", tag = "meta", responses((status = 200, description = "Prometheus text exposition 0.0.4; OpenMetrics 1.0 with `Accept: application/openmetrics-text`", content((String = "text/plain"), (String = "application/openmetrics-text"))), crate::openapi::AuthErrors))]
pub async fn metrics(State(state): State<AppState>, caller: Caller, headers: HeaderMap) -> ApiResult<Response> {
    caller.require(Scope::Read)?;
    let store = state.store.as_ref();
    let (gpus, states) = analytics::CurrentStates::read(store, caller.org).await?;
    let teams: HashMap<GpuId, String> =
        store.gpu_teams(caller.org).await?.into_iter().filter_map(|g| Some((g.gpu_id, g.team_name?))).collect();

    let mut registry = Registry::with_prefix("fleetlens");
    // The signal table's exported gauges, then the derived efficiency score.
    let mut signals: Vec<Signal> = fleetlens_core::signal::SIGNALS
        .iter()
        .filter_map(|s| s.metric.map(|(name, help)| (name, help, s.get)))
        .collect();
    signals.push(("gpu_efficiency_pct", "Efficiency score: SMACT / kernel utilization x 100", |s| s.efficiency()));
    let families: Vec<_> = signals.iter().map(|(name, help, _)| gauge_family(&mut registry, name, help)).collect();
    let state_family = Family::<StateLabels, GaugeF>::default();
    registry.register("gpu_state", "Current workload state (METRICS.md), one-hot", state_family.clone());
    for g in &gpus {
        let labels = GpuLabels {
            uuid: AgentText(g.info.uuid.clone()),
            host: AgentText(g.info.host.clone()),
            team: AgentText(teams.get(&g.id).cloned().unwrap_or_default()),
            model: AgentText(g.info.name.clone().unwrap_or_default()),
        };
        if let Some(latest) = &g.latest {
            for ((_, _, get), family) in signals.iter().zip(&families) {
                if let Some(v) = get(latest) {
                    family.get_or_create(&labels).set(v);
                }
            }
        }
        let current = states.of(g, &state.deliveries);
        for s in WorkloadState::ALL {
            let l = StateLabels {
                uuid: labels.uuid.clone(),
                host: labels.host.clone(),
                team: labels.team.clone(),
                model: labels.model.clone(),
                state: s.as_str().to_string(),
            };
            state_family.get_or_create(&l).set(if s == current { 1.0 } else { 0.0 });
        }
    }

    let funnel = Family::<LevelLabels, GaugeF>::default();
    registry.register(
        "fleet_funnel_ratio",
        "Utilization funnel over the last hour, fraction of paid GPU-seconds",
        funnel.clone(),
    );
    let (summary, wasted) = last_hour(&state, caller.org, &gpus, states.now_ms).await?;
    let wasted_family = gauge_family(
        &mut registry,
        "gpu_wasted_cost_last_hour",
        "Cost of the GPU's wasted time (idle, idle but held, hollow … states) over the last hour, in the organisation's price currency; GPUs of unpriced models have no series",
    );
    for (i, cost) in wasted {
        let g = &gpus[i];
        wasted_family
            .get_or_create(&GpuLabels {
                uuid: AgentText(g.info.uuid.clone()),
                host: AgentText(g.info.host.clone()),
                team: AgentText(teams.get(&g.id).cloned().unwrap_or_default()),
                model: AgentText(g.info.name.clone().unwrap_or_default()),
            })
            .set(cost);
    }
    for level in summary {
        if let Some(f) = level.fraction {
            funnel.get_or_create(&LevelLabels { level: level.level.as_str().to_string() }).set(f);
        }
    }

    let c = &INGEST;
    for (name, help, v) in [
        ("ingest_requests_accepted", "Ingest requests stored", &c.requests_accepted),
        ("ingest_requests_rejected", "Ingest requests rejected (4xx)", &c.requests_rejected),
        ("ingest_samples_received", "Samples received in accepted batches", &c.samples_received),
        ("ingest_samples_inserted", "Samples newly stored (duplicates excluded)", &c.samples_inserted),
        (
            "ingest_samples_merged",
            "Samples that filled fields a stored sample of the same GPU and timestamp lacked (partial samples of one scrape split over remote-write requests)",
            &c.samples_merged,
        ),
    ] {
        registry.register(name, help, ConstCounter::new(v.load(Ordering::Relaxed)));
    }
    register_counts(
        &mut registry,
        "data_quality_flagged_samples",
        "Samples with readings that cannot be true, by data-quality flag (docs/METRICS.md); the flagged fields were dropped",
        "flag",
        crate::quality::flagged_counts().map(|(flag, n)| (flag.as_str(), n)),
    );
    register_counts(
        &mut registry,
        "remote_write_series_ignored",
        "Remote-write series that gave no sample: not a dcgm-exporter field Fleetlens reads (unknown), no UUID label (no_uuid), staleness markers (stale)",
        "reason",
        IGNORED_REASONS.iter().zip(&REMOTE_WRITE_IGNORED).map(|(r, n)| (*r, n.load(Ordering::Relaxed))),
    );
    register_counts(
        &mut registry,
        "alert_engine_samples",
        "Samples the alert engine on this replica read: back from the database, or from memory (batches this replica stored)",
        "source",
        ALERT_FEED_SOURCES.iter().zip(&ALERT_FEED).map(|(s, n)| (*s, n.load(Ordering::Relaxed))),
    );
    let streams = Gauge::<i64>::default();
    registry.register("live_streams", "Live streams (GET /api/v1/stream) open on this replica", streams.clone());
    streams.set(LIVE_STREAMS.load(Ordering::Relaxed));
    let leader = Family::<JobLabels, GaugeF>::default();
    registry.register("job_leader", "1 while this replica leads the background job (advisory lock)", leader.clone());
    let runs = Family::<JobLabels, prometheus_client::metrics::counter::Counter>::default();
    registry.register("job_runs", "Runs of the background job completed by this replica", runs.clone());
    for (job, st) in crate::jobs::statuses() {
        let l = JobLabels { job: job.to_string() };
        leader.get_or_create(&l).set(if st.leader { 1.0 } else { 0.0 });
        runs.get_or_create(&l).inc_by(st.runs);
    }
    let mut text = String::new();
    encode(&mut text, &registry).map_err(|e| ApiError::BadRequest(format!("metrics encoding failed: {e}")))?;
    let wants_openmetrics =
        headers.get(ACCEPT).and_then(|a| a.to_str().ok()).is_some_and(|a| a.contains("application/openmetrics-text"));
    Ok(if wants_openmetrics {
        ([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
    } else {
        ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], to_classic_text(&text)).into_response()
    })
}

/// The last hour's funnel and each priced GPU's wasted cost (by index into `gpus`).
async fn last_hour(
    state: &AppState,
    org: fleetlens_store::OrgId,
    gpus: &[fleetlens_store::GpuRecord],
    now: i64,
) -> ApiResult<(Vec<fleetlens_api::FunnelLevel>, Vec<(usize, f64)>)> {
    let store = state.store.as_ref();
    let from = now - 3_600_000;
    let plan = analytics::summary::EdgePlan::new(from, now, now, gpus.len());
    let hours = store.credits(org, None, Resolution::Hour, from.div_euclid(3_600_000) * 3_600_000, now).await?;
    let mut minutes = Vec::new();
    for (a, b) in plan.edge_ranges() {
        minutes.extend(store.credits(org, None, Resolution::Minute, a, b).await?);
    }
    let credits = analytics::summary::Credits::new(hours, minutes, plan);
    let prices = analytics::price_overrides(store, org)
        .await?
        .map_or_else(fleetlens_core::PriceTable::default, |o| fleetlens_core::PriceTable::default().with_overrides(&o));
    Ok((analytics::summary::funnel_only(gpus, &credits), analytics::summary::wasted_costs(gpus, &credits, &prices)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(value: &str) -> String {
        let mut out = String::new();
        write_escaped_label_value(&mut out, value).unwrap();
        out
    }

    #[test]
    fn label_values_are_escaped_per_the_exposition_format() {
        assert_eq!(escaped("gpu-node-01"), "gpu-node-01");
        assert_eq!(escaped(r#"n1",team="x"#), r#"n1\",team=\"x"#);
        assert_eq!(escaped("a\\b\nc\""), "a\\\\b\\nc\\\"");
        assert_eq!(escaped("\u{202e}émoji 🚀"), "\u{202e}émoji 🚀", "other characters pass as they are");
        assert_eq!(escaped(""), "");
    }
}
