//! Stored alerts as the API shows them: what `GET /alerts` answers and the live stream pushes,
//! so both build them here rather than one reaching into the other's route module.

use fleetlens_api::AlertView;
use fleetlens_core::time_text::format_rfc3339_ms;
use fleetlens_store::alerts::AlertRecord;

use crate::alerts::render::AlertDetails;

/// The API's view of a stored alert (`rule_deleted` false: see [`marking_deleted`]).
pub fn alert_view(a: AlertRecord) -> AlertView {
    let d = AlertDetails::of(&a);
    AlertView {
        id: a.id,
        rule_id: a.rule_id,
        rule_deleted: false,
        rule_name: a.rule_name,
        severity: a.severity,
        status: a.status,
        silenced: a.silenced_by.is_some(),
        silenced_by: a.silenced_by,
        inhibited: a.inhibited_by.is_some(),
        inhibited_by: a.inhibited_by,
        group: fleetlens_core::rules::group::group_key(&fleetlens_core::rules::group::DEFAULT_GROUP_BY, &a.labels),
        gpu: a.labels.get("gpu").cloned().unwrap_or(a.gpu_uuid),
        host: a.labels.get("host").cloned().unwrap_or(a.host),
        team: d.team,
        labels: a.labels,
        fingerprint: a.fingerprint,
        active_since_ms: a.active_since_ms,
        fired_at_ms: a.fired_at_ms,
        resolved_at_ms: a.resolved_at_ms,
        starts_at: a.fired_at_ms.map(format_rfc3339_ms),
        ends_at: a.resolved_at_ms.map(format_rfc3339_ms),
        summary: a.summary,
        condition: d.condition,
        values: d.values,
        state: d.state,
        advice: d.advice,
        notified: a.notified_firing,
        notified_channels: d.notified_channels,
        resolved_reason: d.resolved_reason,
    }
}

/// `view` with `rule_deleted` set: its rule is not among the organisation's `rules` now.
pub fn marking_deleted(mut view: AlertView, rules: &std::collections::HashSet<fleetlens_core::RuleId>) -> AlertView {
    view.rule_deleted = !rules.contains(&view.rule_id);
    view
}
