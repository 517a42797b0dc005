//! Idle reclaim (docs/ACTIONS.md): the bodies of `/reclaim-policies`, their dry run, and
//! `/reclaims` with their logged steps.

use fleetlens_core::reclaim::{ReclaimAction, ReclaimLogStep, ReclaimStatus, WouldAct};
use fleetlens_core::{
    AgentCommandId, ChannelId, ProcessOwner, ReclaimId, ReclaimPolicyId, ReclaimStepId, WorkloadState,
};
use serde::{Deserialize, Serialize};

/// A policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReclaimPolicy {
    pub id: ReclaimPolicyId,
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
    pub action_channel_id: Option<ChannelId>,
    /// Where notices go; null: the owner's report route.
    pub notice_channel_id: Option<ChannelId>,
    pub enabled: bool,
    pub created_ms: i64,
}

/// A new policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewReclaimPolicy {
    pub name: String,
    pub state: WorkloadState,
    pub for_s: i64,
    pub grace_s: i64,
    /// `webhook` or `agent_kill`.
    pub action: ReclaimAction,
    #[serde(default)]
    pub action_channel_id: Option<ChannelId>,
    #[serde(default)]
    pub notice_channel_id: Option<ChannelId>,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

/// One GPU the policy would have reclaimed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DryRunItem {
    pub gpu: String,
    pub host: String,
    #[serde(flatten)]
    pub act: WouldAct,
    /// Price × freed hours; null without a price.
    pub freed_cost: Option<f64>,
}

/// What a policy would have done over a period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DryRun {
    pub policy_id: ReclaimPolicyId,
    pub from_ms: i64,
    pub to_ms: i64,
    pub actions: usize,
    pub freed_gpu_hours: f64,
    /// Null when a GPU acted on has no price.
    pub freed_cost: Option<f64>,
    pub currency: String,
    pub items: Vec<DryRunItem>,
    /// "4 actions, $312 of idle GPU-time freed".
    pub summary: String,
}

/// A reclaim and its steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reclaim {
    pub id: ReclaimId,
    pub policy_id: ReclaimPolicyId,
    pub gpu: String,
    pub host: String,
    pub run_key: String,
    pub pid: i64,
    pub owner: ProcessOwner,
    pub state_since_ms: i64,
    pub noticed_ms: i64,
    pub snoozed_until_ms: Option<i64>,
    pub acted_ms: Option<i64>,
    pub closed_ms: Option<i64>,
    /// `noticed`, `acted` or `cancelled`.
    pub status: ReclaimStatus,
    pub log: Vec<ReclaimStepView>,
}

/// One logged step: who, what, when, and the money held by then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReclaimStepView {
    pub id: ReclaimStepId,
    pub reclaim_id: ReclaimId,
    /// `notice`, `snooze`, `action_webhook`, `kill_queued`, `killed`, `kill_refused`, `cancelled`.
    pub step: ReclaimLogStep,
    pub actor: String,
    pub dollars_held: Option<f64>,
    pub at_ms: i64,
    pub detail: String,
}

/// How long to hold the reclaim off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnoozeRequest {
    /// Seconds, 60 to 7 days.
    pub for_s: i64,
}

/// `GET /api/v1/reclaim-policies/{id}/dry-run`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct DryRunQuery {
    /// Default: 7 days before `to`.
    pub from: Option<String>,
    /// Default: now.
    pub to: Option<String>,
}

/// `POST /api/v1/agent/commands/take?host=`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct CommandQuery {
    /// The agent's host name.
    pub host: String,
}

/// A kill request for an agent: SIGTERM `pid` if it is still on `gpu`, owned by `owner_user`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentCommand {
    pub id: AgentCommandId,
    pub reclaim_id: ReclaimId,
    /// The GPU's UUID.
    pub gpu: String,
    pub pid: i64,
    pub owner_user: String,
}

/// `POST /api/v1/agent/commands/{id}/result`: what the agent did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CommandResult {
    pub host: String,
    /// `killed` (SIGTERM sent) or `refused` (the PID is not on the GPU, or not the owner's).
    /// Text rather than an enum: another value is the handler's 422 on `result`, not a 400.
    pub result: String,
    #[serde(default)]
    pub detail: String,
}
