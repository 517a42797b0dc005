//! What a live stream tells a dashboard: the differences between two readings of an
//! organisation's current GPU states and open alerts, and the fleet counts of one reading.
//! The server reads, this module compares; the stream sends what it returns.

use std::collections::BTreeMap;

use crate::{AlertId, WorkloadState};

/// One GPU in a reading: what `GET /gpus` shows of it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNow {
    pub host: String,
    pub state: WorkloadState,
    pub last_seen_ms: i64,
}

/// A GPU whose current state differs between two readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange<'a> {
    pub uuid: &'a str,
    pub host: &'a str,
    /// `None`: the GPU is new (not in the earlier reading).
    pub previous: Option<WorkloadState>,
    pub state: WorkloadState,
    pub last_seen_ms: i64,
}

/// The GPUs of `next` whose state is not the one they had in `prev` (or that `prev` lacks), by
/// UUID. A GPU of `prev` missing from `next` (deleted by an operator) is not a state change.
pub fn state_changes<'a>(prev: &BTreeMap<String, GpuNow>, next: &'a BTreeMap<String, GpuNow>) -> Vec<StateChange<'a>> {
    next.iter()
        .filter_map(|(uuid, now)| {
            let previous = prev.get(uuid).map(|p| p.state);
            (previous != Some(now.state)).then_some(StateChange {
                uuid,
                host: &now.host,
                previous,
                state: now.state,
                last_seen_ms: now.last_seen_ms,
            })
        })
        .collect()
}

/// An open alert's status, as far as a stream tells it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenStatus {
    Pending,
    Firing,
}

/// How an alert changed between two readings of the open alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertTransition {
    /// Open now, not before (pending or firing).
    New,
    /// Pending before, firing now.
    Firing,
    /// Open before, not now: resolved, or (a pending alert that never fired) withdrawn — the
    /// caller reads the alert back to tell which.
    Closed,
}

/// The transitions between two readings of the open alerts (id → status), by id.
pub fn alert_transitions(
    prev: &BTreeMap<AlertId, OpenStatus>,
    next: &BTreeMap<AlertId, OpenStatus>,
) -> Vec<(AlertId, AlertTransition)> {
    let mut out: Vec<(AlertId, AlertTransition)> = next
        .iter()
        .filter_map(|(id, status)| match (prev.get(id), status) {
            (None, _) => Some((*id, AlertTransition::New)),
            (Some(OpenStatus::Pending), OpenStatus::Firing) => Some((*id, AlertTransition::Firing)),
            _ => None,
        })
        .collect();
    out.extend(prev.keys().filter(|id| !next.contains_key(id)).map(|id| (*id, AlertTransition::Closed)));
    out.sort_unstable_by_key(|(id, _)| *id);
    out
}

/// The fleet counts of one reading (what the `summary` event carries, less its time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetCounts {
    pub gpu_count: u32,
    /// GPUs not offline.
    pub reporting: u32,
    /// GPUs per state, every state present (0 included), by METRICS.md name.
    pub by_state: BTreeMap<String, u32>,
    pub alerts_pending: u32,
    pub alerts_firing: u32,
}

/// Count the GPUs per state and the open alerts per status.
pub fn fleet_counts<'a>(
    gpus: impl IntoIterator<Item = &'a GpuNow>,
    alerts: impl IntoIterator<Item = &'a OpenStatus>,
) -> FleetCounts {
    let mut by_state: BTreeMap<String, u32> = WorkloadState::ALL.iter().map(|s| (s.as_str().to_string(), 0)).collect();
    let mut gpu_count = 0;
    for g in gpus {
        gpu_count += 1;
        *by_state.entry(g.state.as_str().to_string()).or_default() += 1;
    }
    let reporting = gpu_count - by_state[WorkloadState::Offline.as_str()];
    let (mut alerts_pending, mut alerts_firing) = (0, 0);
    for a in alerts {
        match a {
            OpenStatus::Pending => alerts_pending += 1,
            OpenStatus::Firing => alerts_firing += 1,
        }
    }
    FleetCounts { gpu_count, reporting, by_state, alerts_pending, alerts_firing }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WorkloadState::*;

    fn gpus(list: &[(&str, WorkloadState)]) -> BTreeMap<String, GpuNow> {
        list.iter().map(|(u, s)| (u.to_string(), GpuNow { host: "h".into(), state: *s, last_seen_ms: 7 })).collect()
    }

    #[test]
    fn state_changes_name_changed_and_new_gpus_only() {
        let prev = gpus(&[("a", Idle), ("b", Active), ("gone", Active)]);
        let next = gpus(&[("a", Idle), ("b", Offline), ("c", Hollow)]);
        let changes = state_changes(&prev, &next);
        assert_eq!(
            changes,
            vec![
                StateChange { uuid: "b", host: "h", previous: Some(Active), state: Offline, last_seen_ms: 7 },
                StateChange { uuid: "c", host: "h", previous: None, state: Hollow, last_seen_ms: 7 },
            ]
        );
        assert!(state_changes(&next, &next).is_empty());
    }

    #[test]
    fn alert_transitions_are_new_firing_and_closed() {
        use OpenStatus::*;
        let prev: BTreeMap<AlertId, OpenStatus> =
            [(AlertId(1), Pending), (AlertId(2), Pending), (AlertId(3), Firing), (AlertId(4), Firing)].into();
        let next: BTreeMap<AlertId, OpenStatus> =
            [(AlertId(1), Pending), (AlertId(2), Firing), (AlertId(4), Firing), (AlertId(5), Firing)].into();
        assert_eq!(
            alert_transitions(&prev, &next),
            vec![
                (AlertId(2), AlertTransition::Firing),
                (AlertId(3), AlertTransition::Closed),
                (AlertId(5), AlertTransition::New)
            ]
        );
        assert!(alert_transitions(&next, &next).is_empty());
    }

    #[test]
    fn counts_hold_every_state_and_the_open_alerts() {
        let g = gpus(&[("a", Idle), ("b", Offline), ("c", Idle)]);
        let c = fleet_counts(g.values(), &[OpenStatus::Firing, OpenStatus::Pending, OpenStatus::Firing]);
        assert_eq!((c.gpu_count, c.reporting, c.alerts_pending, c.alerts_firing), (3, 2, 1, 2));
        assert_eq!(c.by_state.len(), WorkloadState::ALL.len());
        assert_eq!((c.by_state["idle"], c.by_state["offline"], c.by_state["active"]), (2, 1, 0));
        let empty = fleet_counts([], []);
        assert_eq!((empty.gpu_count, empty.reporting), (0, 0));
    }
}
