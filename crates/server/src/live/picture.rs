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
use fleetlens_store::alerts::{AlertFilter, AlertStatus};
use fleetlens_store::{LatestMinute, OrgId, Store};
use serde::Serialize;

use crate::analytics;
use crate::delivery::HostDeliveries;
use crate::error::ApiResult;
use crate::routes::alerts::{alert_view, marking_deleted};
use crate::time::now_ms;

/// Open alerts a picture holds at most (newest first), as `GET /alerts?limit=` allows.
pub const MAX_OPEN_ALERTS: i64 = 1000;

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
    pub alerts: BTreeMap<i64, AlertView>,
    pub counts: FleetCounts,
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
                            state: g.state.as_str().to_string(),
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

    fn open_statuses(&self) -> BTreeMap<i64, OpenStatus> {
        open_statuses(&self.alerts)
    }
}

fn open_statuses(alerts: &BTreeMap<i64, AlertView>) -> BTreeMap<i64, OpenStatus> {
    alerts
        .iter()
        .map(|(id, a)| (*id, if a.status == "firing" { OpenStatus::Firing } else { OpenStatus::Pending }))
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
    let newest: HashMap<i64, LatestMinute> =
        store.latest_minutes(org).await?.into_iter().map(|m| (m.gpu_id, m)).collect();
    let filter = AlertFilter {
        statuses: vec![AlertStatus::Pending, AlertStatus::Firing],
        limit: MAX_OPEN_ALERTS,
        ..Default::default()
    };
    let rules: HashSet<i64> = store.alert_rules(org).await?.into_iter().map(|r| r.id).collect();
    let alerts: BTreeMap<i64, AlertView> =
        store.alerts(org, &filter).await?.into_iter().map(|a| (a.id, marking_deleted(alert_view(a), &rules))).collect();
    let now = now_ms();
    let gpus: BTreeMap<String, GpuNow> = identities
        .into_iter()
        .map(|g| {
            let allowance = deliveries.allowance_ms(org, &g.host);
            let state = analytics::current_state_name(&g, newest.get(&g.id), now, &th, allowance);
            (g.uuid, GpuNow { host: g.host, state, last_seen_ms: g.last_seen_ms })
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
                previous: c.previous.map(|s| s.as_str().to_string()),
                state: c.state.as_str().to_string(),
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
    let picture = Picture { seq, at_ms: now, gpus, alerts, counts, snapshot: OnceLock::new() };
    Ok((picture, events))
}
