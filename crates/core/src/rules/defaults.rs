//! The alert rules every organisation starts with. They are ordinary rules once stored: a user
//! edits, disables or deletes them like any other (a deleted one does not come back).

use crate::rules::Severity;
use crate::state::WorkloadState;

/// A shipped rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultRule {
    /// Stable key, so each default is seeded once per organisation.
    pub key: &'static str,
    pub name: &'static str,
    pub condition: &'static str,
    pub for_s: i64,
    pub keep_firing_for_s: i64,
    pub repeat_interval_s: i64,
    pub severity: Severity,
    /// Summary template: `{field}` is replaced by the field's value when the alert fires.
    pub description: &'static str,
    pub advice: Advice,
    /// Rules this one's open alerts hold back ([`super::inhibit`]), on the same GPU.
    pub inhibits: &'static [&'static str],
}

/// Where a shipped rule's advice comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// METRICS.md's "what to tell the user" for this state.
    Of(WorkloadState),
    Text(&'static str),
}

impl Advice {
    pub fn text(self) -> &'static str {
        match self {
            Advice::Of(s) => s.advice(),
            Advice::Text(t) => t,
        }
    }
}

/// Reminders for a still-firing alert: every 4 hours (Alertmanager's default).
pub const DEFAULT_REPEAT_S: i64 = 4 * 3600;

/// Bump when the list changes, so existing organisations get the new rules (only those whose
/// key they have never had).
pub const DEFAULTS_VERSION: i64 = 1;

pub const DEFAULT_RULES: [DefaultRule; 7] = [
    DefaultRule {
        key: "busy_but_hollow",
        name: "Busy but hollow",
        condition: "gpu_util_pct >= 80 && sm_active_pct < 30",
        for_s: 300,
        keep_firing_for_s: 60,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Warning,
        description: "This GPU reads {gpu_util_pct} % busy but its SMs are only {sm_active_pct} % active: \
                      the utilization number hides an almost empty GPU (tiny kernels, batch 1, launch \
                      overhead, or waiting on communication; a single spinning kernel is often a hung collective).",
        advice: Advice::Of(WorkloadState::Hollow),
        inhibits: &[],
    },
    DefaultRule {
        key: "inefficient",
        name: "Inefficient GPU",
        condition: "gpu_util_pct >= 50 && sm_active_pct / gpu_util_pct < 0.3",
        for_s: 900,
        keep_firing_for_s: 60,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Warning,
        description: "Kernel utilization {gpu_util_pct} % but SM activity {sm_active_pct} % \
                      (efficiency {efficiency} %): most of the busy time leaves the SMs idle.",
        advice: Advice::Of(WorkloadState::Hollow),
        inhibits: &[],
    },
    DefaultRule {
        key: "stalled",
        name: "Stalled GPU (possible hung collective)",
        condition: "state == stalled",
        for_s: 600,
        keep_firing_for_s: 60,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Critical,
        description: "A kernel spins on a few SMs: {gpu_util_pct} % busy, SMs {sm_active_pct} % active, \
                      power {power_pct_of_limit} % of the limit. Often a hung collective (NCCL) or a deadlock.",
        advice: Advice::Of(WorkloadState::Stalled),
        inhibits: &["busy_but_hollow", "inefficient"],
    },
    DefaultRule {
        key: "idle_held",
        name: "GPU held but idle",
        condition: "state == idle_held",
        for_s: 1800,
        keep_firing_for_s: 60,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Warning,
        description: "A process holds {mem_used_pct} % of this GPU's memory but runs nothing \
                      (kernel utilization {gpu_util_pct} %, SM activity {sm_active_pct} %): allocated and wasted.",
        advice: Advice::Of(WorkloadState::IdleHeld),
        inhibits: &["state:idle"],
    },
    DefaultRule {
        key: "agent_offline",
        name: "Agent offline",
        condition: "state == offline",
        for_s: 300,
        keep_firing_for_s: 0,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Critical,
        // The offline time counts from when the silence outgrew the GPU's sampling and delivery
        // cadence, not from its last sample.
        description: "Offline for {duration_in_state_s} s: no sample from this GPU, the agent or the host is \
                      down (and the GPU is still paid for).",
        advice: Advice::Of(WorkloadState::Offline),
        inhibits: &["*"],
    },
    DefaultRule {
        key: "throttling",
        name: "Thermal or power throttling",
        condition: "thermal_throttle || hw_slowdown",
        for_s: 600,
        keep_firing_for_s: 60,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Warning,
        description: "Clocks are held down (throttle reasons {throttle_reasons}, {temp_c} °C, \
                      {power_w} W of {power_limit_w} W): the GPU runs slower than it should.",
        advice: Advice::Text(
            "check cooling and airflow, the power supply and the power limit; drain the node if it persists",
        ),
        inhibits: &[],
    },
    DefaultRule {
        key: "xid_errors",
        name: "XID errors",
        condition: "xid_errors > 0",
        for_s: 0,
        keep_firing_for_s: 600,
        repeat_interval_s: DEFAULT_REPEAT_S,
        severity: Severity::Critical,
        description: "The driver reported {xid_errors} XID error(s) on this GPU.",
        advice: Advice::Text(
            "check the kernel log (dmesg) for the XID code; drain the node and reset the GPU if they repeat",
        ),
        inhibits: &[],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::expr::Condition;

    #[test]
    fn defaults_parse_and_keys_are_unique() {
        for r in DEFAULT_RULES {
            Condition::parse(r.condition).unwrap_or_else(|e| panic!("{}: {e}", r.key));
            assert_eq!(DEFAULT_RULES.iter().filter(|o| o.key == r.key || o.name == r.name).count(), 1);
            assert!(!r.advice.text().is_empty());
            for t in r.inhibits {
                let target = crate::rules::inhibit::Target::parse(t).unwrap();
                if let crate::rules::inhibit::Target::Rule(k) = target {
                    assert!(DEFAULT_RULES.iter().any(|o| o.key == k), "{}: {k}", r.key);
                }
            }
        }
    }
}
