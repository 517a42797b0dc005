//! One reading of an organisation's live picture, and the events that lead from the reading
//! before to it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use fleetlens_api::AlertView;
use fleetlens_api::live::{
    AlertChange, AlertChangeKind, EVENT_ALERT, EVENT_GPU_STATE, EVENT_SUMMARY, GpuStateChange, LiveSummary, StreamGpu,
    StreamSnapshot,
};
use fleetlens_core::live::{AlertTransition, FleetCounts, GpuNow, OpenStatus, alert_transitions, fleet_counts};
use fleetlens_core::{AlertId, RuleId};
use fleetlens_store::alerts::{AlertFilter, AlertStatus};
use fleetlens_store::{GpuId, LatestMinute, OrgId, Store};
use serde::Serialize;

use crate::alerts::views::{alert_view, marking_deleted};
use crate::analytics;
use crate::delivery::HostDeliveries;
use crate::error::ApiResult;
use crate::time::now_ms;

/// Open alerts a picture holds at most (newest first), as `GET /alerts?limit=` allows.
pub const MAX_OPEN_ALERTS: i64 = 1000;

/// How often a reading re-reads every GPU's newest minute, not only those of the GPUs whose
/// newest sample moved: a late sample inside a GPU's newest minute (its newest sample the same)
/// shows at the latest this much later.
pub const FULL_READING_EVERY_MS: i64 = 60_000;

/// One event of a stream, serialised once for all of them.
#[derive(Debug)]
pub struct LiveEvent {
    pub seq: u64,
    /// The SSE event name (`fleetlens_api::live::EVENT_*`).
    pub name: &'static str,
    /// JSON, one line.
    pub data: String,
}

/// An organisation's live picture as of event `seq`.
#[derive(Debug)]
pub struct Picture {
    pub seq: u64,
    pub at_ms: i64,
    pub gpus: BTreeMap<String, GpuNow>,
    /// The open alerts by id.
    pub alerts: BTreeMap<AlertId, AlertView>,
    pub counts: FleetCounts,
    /// Each GPU's newest minute by GPU id, and the newest sample it was read for: the next
    /// reading re-reads only the GPUs whose newest sample moved since.
    newest: HashMap<GpuId, LatestMinute>,
    seen_ms: HashMap<GpuId, i64>,
    /// When a reading last read every GPU's newest minute ([`FULL_READING_EVERY_MS`]).
    full_read_ms: i64,
    /// The `snapshot` JSON, made when the first stream needs it.
    snapshot: OnceLock<Arc<str>>,
}

impl Picture {
    /// The picture as a `snapshot` / `resync` event's data.
    pub fn snapshot_json(&self) -> Arc<str> {
        self.snapshot
            .get_or_init(|| {
                let snapshot = StreamSnapshot {
                    seq: self.seq,
                    at_ms: self.at_ms,
                    gpus: self
                        .gpus
                        .iter()
                        .map(|(uuid, g)| StreamGpu {
                            uuid: uuid.clone(),
                            host: g.host.clone(),
                            state: g.state,
                            last_seen_ms: g.last_seen_ms,
                        })
                        .collect(),
                    alerts: self.alerts.values().rev().cloned().collect(),
                    summary: summary(&self.counts, self.at_ms),
                };
                json(&snapshot).into()
            })
            .clone()
    }

    fn open_statuses(&self) -> BTreeMap<AlertId, OpenStatus> {
        open_statuses(&self.alerts)
    }
}

fn open_statuses(alerts: &BTreeMap<AlertId, AlertView>) -> BTreeMap<AlertId, OpenStatus> {
    alerts
        .iter()
        .map(|(id, a)| (*id, if a.status == AlertStatus::Firing { OpenStatus::Firing } else { OpenStatus::Pending }))
        .collect()
}

fn summary(c: &FleetCounts, at_ms: i64) -> LiveSummary {
    LiveSummary {
        at_ms,
        gpu_count: c.gpu_count,
        reporting: c.reporting,
        by_state: c.by_state.clone(),
        alerts_pending: c.alerts_pending,
        alerts_firing: c.alerts_firing,
    }
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("live events serialise")
}

/// Read `org`'s picture now and the events from `previous` to it (none for a first reading).
pub async fn read(
    store: &dyn Store,
    deliveries: &HostDeliveries,
    org: OrgId,
    previous: Option<&Picture>,
) -> ApiResult<(Picture, Vec<LiveEvent>)> {
    let th = analytics::thresholds(store, org).await?;
    let identities = store.gpu_identities(org).await?;
    let seen_ms: HashMap<GpuId, i64> = identities.iter().map(|g| (g.id, g.info.last_seen_ms)).collect();
    let started = now_ms();
    let (newest, full_read_ms) = match previous {
        Some(prev) if started - prev.full_read_ms < FULL_READING_EVERY_MS => {
            (moved_newest(store, org, prev, &seen_ms).await?, prev.full_read_ms)
        }
        _ => (analytics::newest_minutes(store, org).await?, started),
    };
    let filter = AlertFilter {
        statuses: vec![AlertStatus::Pending, AlertStatus::Firing],
        limit: MAX_OPEN_ALERTS,
        ..Default::default()
    };
    let rules: HashSet<RuleId> = store.alert_rules(org).await?.into_iter().map(|r| r.id).collect();
    let alerts: BTreeMap<AlertId, AlertView> =
        store.alerts(org, &filter).await?.into_iter().map(|a| (a.id, marking_deleted(alert_view(a), &rules))).collect();
    let now = now_ms();
    let gpus: BTreeMap<String, GpuNow> = identities
        .into_iter()
        .map(|g| {
            let allowance = deliveries.allowance_ms(org, &g.info.host);
            let state = analytics::current_state(&g, newest.get(&g.id), now, &th, allowance);
            (g.info.uuid, GpuNow { host: g.info.host, state, last_seen_ms: g.info.last_seen_ms })
        })
        .collect();
    let counts = fleet_counts(gpus.values(), open_statuses(&alerts).values());

    let mut seq = previous.map_or(0, |p| p.seq);
    let mut events = Vec::new();
    let mut push = |name: &'static str, data: String| {
        seq += 1;
        events.push(LiveEvent { seq, name, data });
    };
    if let Some(prev) = previous {
        for c in fleetlens_core::live::state_changes(&prev.gpus, &gpus) {
            let change = GpuStateChange {
                uuid: c.uuid.to_string(),
                host: c.host.to_string(),
                previous: c.previous,
                state: c.state,
                last_seen_ms: c.last_seen_ms,
                at_ms: now,
            };
            push(EVENT_GPU_STATE, json(&change));
        }
        for (id, transition) in alert_transitions(&prev.open_statuses(), &open_statuses(&alerts)) {
            let change = match transition {
                AlertTransition::New => AlertChange { change: AlertChangeKind::New, alert: alerts[&id].clone() },
                AlertTransition::Firing => AlertChange { change: AlertChangeKind::Firing, alert: alerts[&id].clone() },
                AlertTransition::Closed => match store.alert(org, id).await? {
                    Some(a) if a.status == AlertStatus::Resolved => {
                        AlertChange { change: AlertChangeKind::Resolved, alert: marking_deleted(alert_view(a), &rules) }
                    }
                    // Still open: it fell out of the newest MAX_OPEN_ALERTS, nothing happened.
                    Some(_) => continue,
                    None => AlertChange { change: AlertChangeKind::Withdrawn, alert: prev.alerts[&id].clone() },
                },
            };
            push(EVENT_ALERT, json(&change));
        }
        if counts != prev.counts {
            push(EVENT_SUMMARY, json(&summary(&counts, now)));
        }
    }
    let picture =
        Picture { seq, at_ms: now, gpus, alerts, counts, newest, seen_ms, full_read_ms, snapshot: OnceLock::new() };
    Ok((picture, events))
}

/// Each GPU's newest minute from `prev`'s, re-read for the GPUs whose newest sample moved
/// (or that are new): a reading costs what changed, not the fleet. Silence needs no read:
/// the state judges it from the clock.
async fn moved_newest(
    store: &dyn Store,
    org: OrgId,
    prev: &Picture,
    seen_ms: &HashMap<GpuId, i64>,
) -> ApiResult<HashMap<GpuId, LatestMinute>> {
    let mut newest: HashMap<GpuId, LatestMinute> = HashMap::new();
    let mut moved: Vec<GpuId> = Vec::new();
    for (id, seen) in seen_ms {
        if prev.seen_ms.get(id) == Some(seen) {
            if let Some(m) = prev.newest.get(id) {
                newest.insert(*id, m.clone());
            }
        } else {
            moved.push(*id);
        }
    }
    newest.extend(store.latest_minutes_of(org, &moved).await?.into_iter().map(|m| (m.gpu_id, m)));
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use fleetlens_core::Sample;
    use fleetlens_store::DEFAULT_ORG;

    use super::*;

    fn samples(uuid: &str, from_ms: i64, n: i64, util: f64) -> Vec<Sample> {
        (0..n)
            .map(|i| Sample {
                ts_ms: from_ms + i * 1000,
                uuid: uuid.into(),
                gpu_util_pct: Some(util),
                mem_used_bytes: Some(1 << 30),
                mem_total_bytes: Some(80 << 30),
                power_w: Some(300.0),
                power_limit_w: Some(700.0),
                ..Default::default()
            })
            .collect()
    }

    /// A reading after only some GPUs sent re-reads just those, and answers as a whole reading.
    #[tokio::test]
    async fn a_reading_after_some_gpus_moved_answers_as_a_whole_reading() {
        let dir = std::env::temp_dir().join(format!("fleetlens-picture-{}-{}", std::process::id(), now_ms()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = fleetlens_store::connect(&format!("sqlite://{}", dir.join("db").display())).await.unwrap();
        let deliveries = HostDeliveries::default();
        let start = now_ms() - 20_000;
        for uuid in ["GPU-a", "GPU-b", "GPU-c"] {
            store.ingest(DEFAULT_ORG, "h1", samples(uuid, start, 10, 90.0)).await.unwrap();
        }
        let (first, events) = read(store.as_ref(), &deliveries, DEFAULT_ORG, None).await.unwrap();
        assert!(events.is_empty());
        assert_eq!(first.newest.len(), 3);

        // GPU-a sends again (idle now), GPU-d appears; GPU-b and GPU-c stay quiet.
        store.ingest(DEFAULT_ORG, "h1", samples("GPU-a", start + 10_000, 10, 0.0)).await.unwrap();
        store.ingest(DEFAULT_ORG, "h2", samples("GPU-d", start + 10_000, 10, 90.0)).await.unwrap();
        let (second, events) = read(store.as_ref(), &deliveries, DEFAULT_ORG, Some(&first)).await.unwrap();
        let (whole, _) = read(store.as_ref(), &deliveries, DEFAULT_ORG, None).await.unwrap();

        assert_eq!(second.full_read_ms, first.full_read_ms, "only the moved GPUs were read");
        assert_eq!(second.newest, whole.newest);
        assert_eq!(second.gpus, whole.gpus);
        assert_eq!(second.counts, whole.counts);
        let gpu_id = |uuid: &'static str| {
            let store = store.clone();
            async move { store.gpu(DEFAULT_ORG, uuid).await.unwrap().unwrap().id }
        };
        let (a, b) = (gpu_id("GPU-a").await, gpu_id("GPU-b").await);
        assert_ne!(second.newest.get(&a), first.newest.get(&a), "GPU-a's newest minute grew");
        assert_eq!(second.newest.get(&b), first.newest.get(&b));
        assert_eq!(second.newest.len(), 4);
        assert!(events.iter().any(|e| e.name == EVENT_GPU_STATE && e.data.contains("GPU-d")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
