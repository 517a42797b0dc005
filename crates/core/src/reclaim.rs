//! Idle-reclaim policies (issue 24, docs/ACTIONS.md): a condition on a GPU's workload state
//! and how long it has held, a notice to the owner, a grace period, then an action. The steps
//! are decided here, purely; the server stores and carries them out.
//!
//! Safety rules, enforced by [`next_step`]: never act on a GPU whose state is unknown or
//! offline, never on a process without an owner (the caller passes no target then), and
//! always after a notice and its grace period.

use serde::{Deserialize, Serialize};

use crate::sample::ProcessOwner;
use crate::state::WorkloadState;
use crate::{ChannelId, ReclaimPolicyId};

crate::named_enum! {
    /// What a policy does once the grace period is over.
    pub enum ReclaimAction("reclaim action") {
        /// A message to the policy's webhook channel, for the site's automation.
        Webhook = "webhook",
        /// SIGTERM by the agent of the host (if it runs with `--allow-reclaim-kill`).
        AgentKill = "agent_kill",
    }
}

crate::named_enum! {
    /// Where a reclaim is: noticed (in its grace period), acted on, or cancelled.
    pub enum ReclaimStatus("reclaim status") {
        Noticed = "noticed",
        Acted = "acted",
        Cancelled = "cancelled",
    }
}

crate::named_enum! {
    /// One logged step of a reclaim.
    pub enum ReclaimLogStep("reclaim step") {
        /// The owner was told.
        Notice = "notice",
        /// Someone held it off.
        Snooze = "snooze",
        /// The webhook action was sent.
        ActionWebhook = "action_webhook",
        /// A kill command waits for the host's agent.
        KillQueued = "kill_queued",
        /// The agent sent SIGTERM.
        Killed = "killed",
        /// The agent refused (the PID is not on the GPU, or not the owner's).
        KillRefused = "kill_refused",
        Cancelled = "cancelled",
    }
}

/// The timing of a policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReclaimTiming {
    /// The state that must hold (e.g. `idle_held`).
    pub state: WorkloadState,
    /// For this long before the notice.
    pub for_ms: i64,
    /// Between the notice and the action.
    pub grace_ms: i64,
}

// Every field an admin sets on a policy, defined once: `POST /api/v1/reclaim-policies` takes it
// as its body, the store reads it as part of the policy's row (flattened into
// `ReclaimPolicyRecord`; inserts take it alone) and the API sends it flattened into
// `ReclaimPolicy`. The doc comment below is the OpenAPI schema's description.
/// An idle-reclaim policy as its author writes it (`action_channel_id` and
/// `notice_channel_id` default to null, `enabled` to true).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct ReclaimPolicySpec {
    pub name: String,
    /// The workload state that must hold (e.g. `idle_held`; not `offline`).
    pub state: WorkloadState,
    /// For this many seconds before the notice.
    pub for_s: i64,
    /// Seconds between the notice and the action.
    pub grace_s: i64,
    /// `webhook` (to `action_channel_id`, a webhook channel) or `agent_kill` (SIGTERM by the
    /// agent of the host, if it runs with `--allow-reclaim-kill`).
    pub action: ReclaimAction,
    /// The webhook channel of a `webhook` action.
    #[serde(default)]
    pub action_channel_id: Option<ChannelId>,
    /// Where notices go; null: the owner's report route.
    #[serde(default)]
    pub notice_channel_id: Option<ChannelId>,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

impl ReclaimPolicySpec {
    /// The policy's timing, in the milliseconds [`next_step`] and [`dry_run`] count in.
    pub fn timing(&self) -> ReclaimTiming {
        ReclaimTiming { state: self.state, for_ms: self.for_s * 1000, grace_ms: self.grace_s * 1000 }
    }
}

// One logged step, defined once: the store writes it alone (the reclaim it belongs to and the
// organisation come from the write) and reads it flattened into `ReclaimLogEntry`; the API sends
// it flattened into `ReclaimStepView`. The doc comment below is the OpenAPI schema's description.
/// One logged step of a reclaim: who, what, when, and the money held by then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct ReclaimLogLine {
    /// `notice`, `snooze`, `action_webhook`, `kill_queued`, `killed`, `kill_refused`, `cancelled`.
    pub step: ReclaimLogStep,
    /// `fleetlens` (the engine), an agent (`agent:<host>`) or the user or key that did it.
    pub actor: String,
    /// What the GPU had cost while held in the state, at that moment; null without a price.
    pub dollars_held: Option<f64>,
    pub at_ms: i64,
    pub detail: String,
}

// The store reads this flattened into `ReclaimRecord` (with its key, organisation and update
// time); the API sends it flattened into `Reclaim` (with its key and step log). The doc comment
// below is the OpenAPI schema's description.
/// One reclaim of one GPU: the policy, the GPU and process it is about, and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct ReclaimCase {
    pub policy_id: ReclaimPolicyId,
    /// The GPU's UUID.
    #[serde(rename = "gpu")]
    pub gpu_uuid: String,
    pub host: String,
    /// The run the process belongs to (`fleetlens_core::run_key`).
    pub run_key: String,
    pub pid: i64,
    #[cfg_attr(feature = "sqlx", sqlx(try_from = "crate::json_text::JsonText<ProcessOwner>"))]
    pub owner: ProcessOwner,
    /// Since when the GPU has been in the policy's state (event time).
    pub state_since_ms: i64,
    pub noticed_ms: i64,
    pub snoozed_until_ms: Option<i64>,
    pub acted_ms: Option<i64>,
    pub closed_ms: Option<i64>,
    /// `noticed`, `acted` or `cancelled`.
    pub status: ReclaimStatus,
}

/// What a GPU looks like to a policy now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReclaimView {
    /// Its current state; `None` when unknown (no recent window).
    pub state: Option<WorkloadState>,
    /// Since when it has been in that state (event time).
    pub state_since_ms: i64,
    /// The newest evaluated sample's time.
    pub state_until_ms: i64,
    /// A process with a known owner is on it (the target).
    pub owned_target: bool,
}

/// Where a reclaim of a GPU stands.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReclaimProgress {
    /// The notice went out at this time (wall clock).
    pub noticed_ms: Option<i64>,
    /// The owner snoozed it until then.
    pub snoozed_until_ms: Option<i64>,
}

/// The next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReclaimStep {
    /// Nothing to do yet.
    Wait,
    /// The condition held long enough: tell the owner; act after the grace period.
    Notice,
    /// Grace is over and the condition still holds: act.
    Act,
    /// The condition no longer holds (or the GPU's state became unknown, or nobody owns it):
    /// the reclaim is off.
    Cancel,
}

/// The next step of a reclaim at wall-clock `now_ms`.
pub fn next_step(t: &ReclaimTiming, v: &ReclaimView, p: &ReclaimProgress, now_ms: i64) -> ReclaimStep {
    let holds = v.state == Some(t.state)
        && t.state != WorkloadState::Offline
        && v.owned_target
        && v.state_until_ms - v.state_since_ms >= t.for_ms;
    match (holds, p.noticed_ms) {
        (false, None) => ReclaimStep::Wait,
        (false, Some(_)) => ReclaimStep::Cancel,
        (true, None) => ReclaimStep::Notice,
        (true, Some(noticed)) => {
            let snoozed = p.snoozed_until_ms.is_some_and(|s| s > now_ms);
            if !snoozed && now_ms >= noticed + t.grace_ms { ReclaimStep::Act } else { ReclaimStep::Wait }
        }
    }
}

/// What a policy would have done to one GPU in the past: a notice and an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WouldAct {
    /// Start of the episode in the state.
    pub since_ms: i64,
    pub notice_ms: i64,
    pub action_ms: i64,
    /// End of the episode (the GPU left the state, or the data ends).
    pub until_ms: i64,
    /// GPU-hours the action would have freed: the rest of the episode after it.
    pub freed_hours: f64,
}

const MINUTE_MS: i64 = 60_000;

/// Dry run over one GPU's minute states in time order (`(minute start, state)`; a missing
/// minute or an unknown state breaks an episode): each episode in the policy's state that
/// lasts past `for + grace` would have been acted on at `start + for + grace`.
pub fn dry_run(minutes: &[(i64, Option<WorkloadState>)], t: &ReclaimTiming) -> Vec<WouldAct> {
    let mut out = Vec::new();
    let mut episode: Option<(i64, i64)> = None;
    let close = |ep: Option<(i64, i64)>, out: &mut Vec<WouldAct>| {
        if let Some((since, until)) = ep {
            let action = since + t.for_ms + t.grace_ms;
            if until > action {
                out.push(WouldAct {
                    since_ms: since,
                    notice_ms: since + t.for_ms,
                    action_ms: action,
                    until_ms: until,
                    freed_hours: (until - action) as f64 / 3_600_000.0,
                });
            }
        }
    };
    for (start, state) in minutes {
        let in_state = *state == Some(t.state) && t.state != WorkloadState::Offline;
        episode = match (episode, in_state) {
            (Some((since, until)), true) if until == *start => Some((since, start + MINUTE_MS)),
            (ep, true) => {
                close(ep, &mut out);
                Some((*start, start + MINUTE_MS))
            }
            (ep, false) => {
                close(ep, &mut out);
                None
            }
        };
    }
    close(episode, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: ReclaimTiming = ReclaimTiming { state: WorkloadState::IdleHeld, for_ms: 7_200_000, grace_ms: 900_000 };

    fn view(state: Option<WorkloadState>, held_ms: i64, owned: bool) -> ReclaimView {
        ReclaimView { state, state_since_ms: 1_000, state_until_ms: 1_000 + held_ms, owned_target: owned }
    }

    #[test]
    fn notice_then_grace_then_act() {
        let idle = Some(WorkloadState::IdleHeld);
        let fresh = ReclaimProgress::default();
        assert_eq!(next_step(&T, &view(idle, 7_199_999, true), &fresh, 0), ReclaimStep::Wait);
        assert_eq!(next_step(&T, &view(idle, 7_200_000, true), &fresh, 0), ReclaimStep::Notice);
        let noticed = ReclaimProgress { noticed_ms: Some(10_000), snoozed_until_ms: None };
        assert_eq!(next_step(&T, &view(idle, 8e6 as i64, true), &noticed, 10_000 + 899_999), ReclaimStep::Wait);
        assert_eq!(next_step(&T, &view(idle, 8e6 as i64, true), &noticed, 10_000 + 900_000), ReclaimStep::Act);
        // Snoozed: no action until the snooze ends.
        let snoozed = ReclaimProgress { snoozed_until_ms: Some(2_000_000), ..noticed };
        assert_eq!(next_step(&T, &view(idle, 8e6 as i64, true), &snoozed, 1_999_999), ReclaimStep::Wait);
        assert_eq!(next_step(&T, &view(idle, 8e6 as i64, true), &snoozed, 2_000_000), ReclaimStep::Act);
    }

    #[test]
    fn never_acts_on_unknown_offline_or_unowned_gpus() {
        let noticed = ReclaimProgress { noticed_ms: Some(0), snoozed_until_ms: None };
        let late = 10 * 3_600_000;
        for v in [
            view(None, 8e6 as i64, true),
            view(Some(WorkloadState::Offline), 8e6 as i64, true),
            view(Some(WorkloadState::IdleHeld), 8e6 as i64, false),
            view(Some(WorkloadState::ComputeBound), 8e6 as i64, true),
        ] {
            assert_eq!(next_step(&T, &v, &noticed, late), ReclaimStep::Cancel, "{v:?}");
            assert_eq!(next_step(&T, &v, &ReclaimProgress::default(), late), ReclaimStep::Wait, "{v:?}");
        }
        // A policy on `offline` itself never fires.
        let off = ReclaimTiming { state: WorkloadState::Offline, ..T };
        let v = view(Some(WorkloadState::Offline), 8e6 as i64, true);
        assert_eq!(next_step(&off, &v, &ReclaimProgress::default(), late), ReclaimStep::Wait);
    }

    #[test]
    fn dry_run_counts_episodes_long_enough_and_their_freed_time() {
        let t = ReclaimTiming { state: WorkloadState::IdleHeld, for_ms: 10 * MINUTE_MS, grace_ms: 5 * MINUTE_MS };
        let idle = Some(WorkloadState::IdleHeld);
        let busy = Some(WorkloadState::ComputeBound);
        let mut minutes = Vec::new();
        // 30 idle-held minutes: acted at 15, frees 15 min.
        for m in 0..30 {
            minutes.push((m * MINUTE_MS, idle));
        }
        minutes.push((30 * MINUTE_MS, busy));
        // 12 idle-held minutes: noticed, never acted.
        for m in 31..43 {
            minutes.push((m * MINUTE_MS, idle));
        }
        // A gap breaks an episode: 10 + 10 minutes with a missing minute between.
        for m in (50..60).chain(61..71) {
            minutes.push((m * MINUTE_MS, idle));
        }
        // 20 minutes at the end of the data: acted at 15, frees 5.
        for m in 100..120 {
            minutes.push((m * MINUTE_MS, idle));
        }
        let acts = dry_run(&minutes, &t);
        assert_eq!(acts.len(), 2, "{acts:?}");
        assert_eq!((acts[0].since_ms, acts[0].notice_ms, acts[0].action_ms), (0, 10 * MINUTE_MS, 15 * MINUTE_MS));
        assert!((acts[0].freed_hours - 0.25).abs() < 1e-12);
        assert_eq!(acts[1].since_ms, 100 * MINUTE_MS);
        assert!((acts[1].freed_hours - 5.0 / 60.0).abs() < 1e-12);
        assert!(dry_run(&[], &t).is_empty());
    }
}
