//! Idle reclaim (docs/ACTIONS.md): the bodies of `/reclaim-policies`, their dry run, and
//! `/reclaims` with their logged steps.

pub use fleetlens_core::reclaim::ReclaimCase;
use fleetlens_core::reclaim::{ReclaimLogLine, ReclaimPolicySpec, WouldAct};
use fleetlens_core::{AgentCommandId, ReclaimId, ReclaimPolicyId, ReclaimStepId};
use serde::{Deserialize, Serialize};

/// A policy: the fields its author set (`ReclaimPolicySpec`, at the top level of the JSON; also
/// the body of `POST /api/v1/reclaim-policies`) and what the server keeps about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReclaimPolicy {
    pub id: ReclaimPolicyId,
    #[serde(flatten)]
    pub policy: ReclaimPolicySpec,
    pub created_ms: i64,
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

/// A reclaim (`ReclaimCase`, at the top level of the JSON) and its steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reclaim {
    pub id: ReclaimId,
    #[serde(flatten)]
    pub case: ReclaimCase,
    pub log: Vec<ReclaimStepView>,
}

/// One logged step of a reclaim (`ReclaimLogLine`, at the top level of the JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReclaimStepView {
    pub id: ReclaimStepId,
    pub reclaim_id: ReclaimId,
    #[serde(flatten)]
    pub line: ReclaimLogLine,
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

#[cfg(test)]
mod tests {
    use fleetlens_core::reclaim::ReclaimAction;
    use fleetlens_core::{ChannelId, WorkloadState};

    use super::*;

    fn spec() -> ReclaimPolicySpec {
        ReclaimPolicySpec {
            name: "idle".into(),
            state: WorkloadState::IdleHeld,
            for_s: 7200,
            grace_s: 900,
            action: ReclaimAction::Webhook,
            action_channel_id: Some(ChannelId(3)),
            notice_channel_id: None,
            enabled: true,
        }
    }

    /// The policy's fields stand at the top level, in the order the API has always sent them.
    #[test]
    fn a_policy_sends_its_spec_at_the_top_level() {
        let policy = ReclaimPolicy { id: ReclaimPolicyId(7), policy: spec(), created_ms: 5 };
        let text = serde_json::to_string(&policy).unwrap();
        assert_eq!(
            text,
            r#"{"id":7,"name":"idle","state":"idle_held","for_s":7200,"grace_s":900,"action":"webhook","action_channel_id":3,"notice_channel_id":null,"enabled":true,"created_ms":5}"#
        );
        assert_eq!(serde_json::from_str::<ReclaimPolicy>(&text).unwrap(), policy);
    }

    /// A logged step's fields stand at the top level, in the order the API has always sent them.
    #[test]
    fn a_step_sends_its_line_at_the_top_level() {
        let step = ReclaimStepView {
            id: ReclaimStepId(3),
            reclaim_id: ReclaimId(2),
            line: ReclaimLogLine {
                step: fleetlens_core::reclaim::ReclaimLogStep::Snooze,
                actor: "alice@example.com".into(),
                dollars_held: None,
                at_ms: 11,
                detail: "snoozed for 3600 s".into(),
            },
        };
        let text = serde_json::to_string(&step).unwrap();
        assert_eq!(
            text,
            r#"{"id":3,"reclaim_id":2,"step":"snooze","actor":"alice@example.com","dollars_held":null,"at_ms":11,"detail":"snoozed for 3600 s"}"#
        );
        assert_eq!(serde_json::from_str::<ReclaimStepView>(&text).unwrap(), step);
    }

    /// The body of `POST /reclaim-policies` may leave out the channels (null) and `enabled` (true).
    #[test]
    fn a_new_policy_defaults_its_channels_and_enabled() {
        let body = r#"{"name":"idle","state":"idle_held","for_s":7200,"grace_s":900,"action":"webhook"}"#;
        let want = ReclaimPolicySpec { action_channel_id: None, ..spec() };
        assert_eq!(serde_json::from_str::<ReclaimPolicySpec>(body).unwrap(), want);
        let off =
            r#"{"name":"idle","state":"idle_held","for_s":7200,"grace_s":900,"action":"webhook","enabled":false}"#;
        assert!(!serde_json::from_str::<ReclaimPolicySpec>(off).unwrap().enabled);
    }
}
