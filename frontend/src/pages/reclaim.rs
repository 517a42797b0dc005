//! Reclaim (`/reclaim`, docs/ACTIONS.md): the report routes, the idle-reclaim policies with a dry
//! run over the past week ("4 actions, $312 of idle GPU-time freed"), and the reclaims with
//! every logged step (who, what, when, dollars held) and a snooze for the job's owner.

use fleetlens_core::reclaim::{ReclaimAction, ReclaimLogStep, ReclaimPolicySpec, ReclaimStatus};
use fleetlens_core::{ChannelId, ChannelKind, ReclaimId, ReclaimPolicyId, WorkloadState};
use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api::actions::{self, DryRun, Reclaim, ReclaimPolicy};
use crate::api::{self, ApiError};
use crate::components::card::Card;
use crate::components::form::{MessageChannelSelect, TextField};
use crate::components::list::NonEmpty;
use crate::components::state_badge::StateBadge;
use crate::components::status::{
    ActionError, ConfirmButton, FieldError, FormError, PollStatus, Saved, about, show_outcome,
};
use crate::components::table::{Column, DataTable};
use crate::ctx::{latest_ok, polled, read_once, use_app};
use crate::format;
use crate::pages::report_routes::ReportRoutes;
use crate::states;
use fleetlens_api::alerts::ChannelView as Channel;

/// How long the snooze button holds a reclaim off.
const SNOOZE_S: i64 = 3600;

/// A step of the log in words.
fn step_label(step: ReclaimLogStep) -> &'static str {
    match step {
        ReclaimLogStep::Notice => "notice sent",
        ReclaimLogStep::Snooze => "snoozed",
        ReclaimLogStep::ActionWebhook => "action sent to the webhook",
        ReclaimLogStep::KillQueued => "kill queued for the agent",
        ReclaimLogStep::Killed => "process sent SIGTERM",
        ReclaimLogStep::KillRefused => "agent refused the kill",
        ReclaimLogStep::Cancelled => "cancelled",
    }
}

/// Money held by a step: "—" without a price; a held amount under a cent is not shown as $0.00.
fn held(v: Option<f64>, currency: &str) -> String {
    match v {
        None => "—".into(),
        Some(v) if v > 0.0 && v < 0.01 => format!("under {}", format::money(0.01, currency)),
        Some(v) => format::money(v, currency),
    }
}

/// Seconds in words: `7200` → `2 h`, `90` → `90 s`.
fn seconds(s: i64) -> String {
    format::duration_ms(s * 1000)
}

/// Minutes typed in the form as whole seconds (at least one).
fn minutes_to_s(text: &str) -> Option<i64> {
    let m: f64 = text.trim().parse().ok()?;
    (m.is_finite() && m > 0.0).then(|| ((m * 60.0).round() as i64).max(1))
}

fn channel_name(channels: &[Channel], id: Option<ChannelId>, none: &str) -> String {
    match id {
        Some(id) => {
            channels.iter().find(|c| c.id == id).map(|c| c.name.clone()).unwrap_or_else(|| format!("channel {id}"))
        }
        None => none.into(),
    }
}

#[component]
pub fn ReclaimPage() -> impl IntoView {
    super::set_title("Reclaim");
    view! {
        <div class="page-head">
            <h1>"Reclaim"</h1>
            <p class="muted">"Telling owners about their jobs, and taking back GPUs held idle: report routes, reclaim policies and what they did."</p>
        </div>
        <Policies/>
        <Reclaims/>
        <ReportRoutes/>
    }
}

#[component]
fn Policies() -> impl IntoView {
    let ctx = use_app();
    let res = polled(actions::reclaim_policies);
    let policies = latest_ok(res);
    let has_data = Signal::derive(move || policies.with(Option::is_some));
    let channels = read_once(|| async { api::channels().await.map(|c| c.channels) });
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let confirm = RwSignal::new(None::<ReclaimPolicyId>);
    // The dry run shown, and the policy it is of.
    let dry = RwSignal::new(None::<(ReclaimPolicy, DryRun)>);
    let dry_error = RwSignal::new(None::<ApiError>);
    let dry_busy = RwSignal::new(None::<ReclaimPolicyId>);
    let done = move |out: Result<String, ApiError>| {
        show_outcome(error, saved, out);
        res.refetch();
    };
    let run_dry = move |p: ReclaimPolicy| {
        dry_busy.set(Some(p.id));
        spawn_local(async move {
            match actions::dry_run(p.id).await {
                Ok(d) => {
                    dry_error.set(None);
                    dry.set(Some((p, d)));
                }
                Err(e) => {
                    dry.set(None);
                    dry_error.set(Some(e));
                }
            }
            dry_busy.set(None);
        });
    };
    let delete = move |id: ReclaimPolicyId, name: String| {
        confirm.set(None);
        spawn_local(async move {
            done(actions::delete_reclaim_policy(id).await.map(|()| format!("Policy “{name}” deleted.")))
        });
    };

    let name = RwSignal::new(String::new());
    let state = RwSignal::new(WorkloadState::IdleHeld);
    let for_min = RwSignal::new("120".to_string());
    let grace_min = RwSignal::new("15".to_string());
    let action = RwSignal::new(ReclaimAction::Webhook);
    let action_channel = RwSignal::new(String::new());
    let notice_channel = RwSignal::new(String::new());
    let local_error = |field: &str, message: &str| ApiError::invalid("/api/v1/reclaim-policies", field, message);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let Some(for_s) = minutes_to_s(&for_min.get_untracked()) else {
            return done(Err(local_error("for_s", "minutes, more than 0")));
        };
        let Some(grace_s) = minutes_to_s(&grace_min.get_untracked()) else {
            return done(Err(local_error("grace_s", "minutes, more than 0")));
        };
        let act = action.get_untracked();
        let policy = ReclaimPolicySpec {
            name: name.get_untracked().trim().to_string(),
            state: state.get_untracked(),
            for_s,
            grace_s,
            action_channel_id: if act == ReclaimAction::Webhook {
                action_channel.get_untracked().parse().ok()
            } else {
                None
            },
            notice_channel_id: notice_channel.get_untracked().parse().ok(),
            action: act,
            enabled: true,
        };
        spawn_local(async move {
            let out =
                actions::create_reclaim_policy(&policy).await.map(|p| format!("Policy “{}” created.", p.policy.name));
            if out.is_ok() {
                name.set(String::new());
            }
            done(out);
        });
    };
    let action_channel_error = about(error, "action_channel_id");
    let policy_list = Signal::derive(move || policies.get().unwrap_or_default());

    view! {
        <Card title_id="policies-title" title="Reclaim policies">
            <p class="muted">
                "A GPU held in a state for a while gets a notice to its owner; after the grace period (unless snoozed, and only if the same owned process is still there) the action runs: a webhook for the site's automation, or SIGTERM by the agent of a host that opted in. Never on a GPU whose state is unknown or offline."
            </p>
            <PollStatus res has_data/>
            <NonEmpty items=policy_list empty="No reclaim policy." let:list>{
                let admin = ctx.is_admin();
                let chs = channels.get();
                view! {
                    <DataTable
                        class="policy-table"
                        caption="Reclaim policies"
                        columns={[
                            Column::text("Policy"),
                            Column::text("State"),
                            Column::text("Held for"),
                            Column::text("Grace"),
                            Column::text("Action"),
                            Column::text("Notice to"),
                            Column::hidden("Actions"),
                        ]}
                    >
                        {list.into_iter().map(|p| {
                            let id = p.id;
                            let n = p.policy.name.clone();
                            let action = match p.policy.action {
                                ReclaimAction::AgentKill => "SIGTERM by the host's agent (if opted in)".to_string(),
                                ReclaimAction::Webhook => format!("webhook to {}", channel_name(&chs, p.policy.action_channel_id, "?")),
                            };
                            let aria_dry = format!("Dry run (7 days) of {n}");
                            let aria_delete = format!("Delete policy {n}");
                            let on_confirm = Callback::new({ let n = n.clone(); move |()| delete(id, n.clone()) });
                            let p2 = p.clone();
                            view! {
                                <tr data-policy-id=id.to_string()>
                                    <th scope="row">{p.policy.name.clone()}{(!p.policy.enabled).then(|| view! { " " <span class="pill pill-muted">"disabled"</span> })}</th>
                                    <td><StateBadge state=Some(p.policy.state)/></td>
                                    <td>{seconds(p.policy.for_s)}</td>
                                    <td>{seconds(p.policy.grace_s)}</td>
                                    <td>{action}</td>
                                    <td>{channel_name(&chs, p.policy.notice_channel_id, "the owner's report route")}</td>
                                    <td>
                                        <div class="actions">
                                            <button type="button" class="btn" aria-label=aria_dry disabled=move || dry_busy.get() == Some(id) on:click=move |_| run_dry(p2.clone())>
                                                {move || if dry_busy.get() == Some(id) { "Running…" } else { "Dry run (7 days)" }}
                                            </button>
                                            {admin.then(|| view! {
                                                <ConfirmButton asking=confirm id label="Delete" confirm_label="Confirm delete" aria_label=aria_delete class="btn-quiet btn-danger" on_confirm/>
                                            })}
                                        </div>
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                }
            }</NonEmpty>
            <ActionError error=dry_error/>
            {move || dry.get().map(|(policy, d)| view! { <DryRunResult policy d/> })}
            <Show when=move || ctx.is_admin()>
                <form class="form-grid" on:submit=submit novalidate aria-label="New reclaim policy">
                    <TextField id="policy-name" label="Name" value=name error field="name"/>
                    <label for="policy-state">
                        <span>"State"</span>
                        <select id="policy-state" on:change=move |ev| {
                            if let Some(s) = WorkloadState::parse(&event_target_value(&ev)) {
                                state.set(s);
                            }
                        }>
                            {WorkloadState::ALL.into_iter().filter(|s| *s != WorkloadState::Offline).map(|s| view! {
                                <option value=s.as_str() selected=s == WorkloadState::IdleHeld>{states::label(s)}</option>
                            }).collect_view()}
                        </select>
                    </label>
                    <TextField id="policy-for" label="Held for (minutes)" value=for_min inputmode="decimal"/>
                    <TextField id="policy-grace" label="Grace after the notice (minutes)" value=grace_min inputmode="decimal"/>
                    <label for="policy-action">
                        <span>"Action"</span>
                        <select id="policy-action" on:change=move |ev| if let Some(a) = ReclaimAction::parse(&event_target_value(&ev)) { action.set(a) }>
                            <option value="webhook" selected=true>"Webhook (the site's automation)"</option>
                            <option value="agent_kill">"SIGTERM by the host's agent"</option>
                        </select>
                    </label>
                    <Show when=move || action.get() == ReclaimAction::Webhook>
                        <label for="policy-action-channel">
                            <span>"Webhook channel"</span>
                            <select id="policy-action-channel" aria-invalid=move || action_channel_error().is_some().to_string() on:change=move |ev| action_channel.set(event_target_value(&ev))>
                                <option value="">"Choose a webhook channel"</option>
                                {move || channels.get().into_iter().filter(|c| c.kind == ChannelKind::Webhook).map(|c| view! {
                                    <option value=c.id.to_string()>{c.name.clone()}</option>
                                }).collect_view()}
                            </select>
                        </label>
                    </Show>
                    <MessageChannelSelect id="policy-notice-channel" label="Notice to" none_label="The owner's report route" value=notice_channel channels/>
                    <button type="submit" class="btn-primary">"Create policy"</button>
                </form>
                <FieldError error field="name" label="Name"/>
                <FieldError error field="for_s" label="Held for"/>
                <FieldError error field="grace_s" label="Grace"/>
                <FieldError error field="action_channel_id" label="Webhook channel"/>
                <FieldError error field="notice_channel_id" label="Notice to"/>
            </Show>
            <FormError error fields=&["name", "for_s", "grace_s", "action_channel_id", "notice_channel_id"]/>
            <Saved saved/>
        </Card>
    }
}

/// A dry run's summary and the GPUs it would have acted on.
#[component]
fn DryRunResult(policy: ReclaimPolicy, d: DryRun) -> impl IntoView {
    let cur = d.currency.clone();
    let rows = d
        .items
        .iter()
        .map(|i| {
            view! {
                <tr>
                    <th scope="row"><a href=format!("/gpus/{}", i.gpu)>{i.gpu.clone()}</a></th>
                    <td>{i.host.clone()}</td>
                    <td>{format::date_time(i.act.since_ms)}</td>
                    <td>{format::date_time(i.act.notice_ms)}</td>
                    <td>{format::date_time(i.act.action_ms)}</td>
                    <td>{format::date_time(i.act.until_ms)}</td>
                    <td class="num">{format::hours(i.act.freed_hours)}</td>
                    <td class="num">{format::opt_money(i.freed_cost, &cur)}</td>
                </tr>
            }
        })
        .collect_view();
    let headline = dry_run_headline(&d, policy.policy.state);
    view! {
        <div class="dry-run" role="status" data-testid="dry-run">
            <h3>{format!("Dry run of “{}”: {} – {}", policy.policy.name, format::date_time(d.from_ms), format::date_time(d.to_ms))}</h3>
            <p class="dry-run-summary" data-testid="dry-run-summary"><strong>{headline}</strong></p>
            <p class="muted small">{format!("The server's words: {}. Snoozes and owners are not modelled.", d.summary)}</p>
            {(!d.items.is_empty()).then(|| view! {
                <DataTable
                    class="dry-run-table"
                    caption="GPUs the policy would have acted on"
                    columns={[
                        Column::text("GPU"),
                        Column::text("Host"),
                        Column::text("In the state since"),
                        Column::text("Notice"),
                        Column::text("Action"),
                        Column::text("State ended"),
                        Column::num("Freed"),
                        Column::num("Freed cost"),
                    ]}
                >
                    {rows}
                </DataTable>
            })}
        </div>
    }
}

/// "4 actions, $312 of idle held GPU-time freed" (GPU-hours where a GPU has no price).
fn dry_run_headline(d: &DryRun, state: WorkloadState) -> String {
    format!(
        "{} action{}, {} of {} GPU-time freed",
        d.actions,
        if d.actions == 1 { "" } else { "s" },
        match d.freed_cost {
            Some(c) => format::money(c, &d.currency),
            None => format!("{} GPU-hours", format::fx(d.freed_gpu_hours, 1)),
        },
        states::label(state),
    )
}

#[component]
fn Reclaims() -> impl IntoView {
    let res = polled(actions::reclaims);
    let list = latest_ok(res);
    let has_data = Signal::derive(move || list.with(Option::is_some));
    let prices = latest_ok(LocalResource::new(api::prices));
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let snooze = move |id: ReclaimId| {
        spawn_local(async move {
            let out = actions::snooze_reclaim(id, SNOOZE_S).await.map(|r| {
                format!(
                    "Reclaim of {} snoozed until {}.",
                    r.case.gpu_uuid,
                    r.case.snoozed_until_ms.map(format::date_time).unwrap_or_default()
                )
            });
            show_outcome(error, saved, out);
            res.refetch();
        });
    };
    let reclaims = Signal::derive(move || list.get().unwrap_or_default());
    view! {
        <Card title_id="reclaims-title" title="Reclaims">
            <p class="muted">"Every step, newest reclaim first: who did it, what, when, and the money the GPU had held in the state by then. The owner of a job may snooze its reclaim."</p>
            <PollStatus res has_data/>
            <ActionError error/>
            <Saved saved/>
            <NonEmpty items=reclaims empty="No reclaim yet." let:all>{
                let cur = prices.with(|p| p.as_ref().map(|p| p.currency.clone())).unwrap_or_default();
                view! {
                    <ul class="reclaim-list">
                        {all.into_iter().map(|r| view! { <li><ReclaimItem r currency=cur.clone() on_snooze=Callback::new(snooze)/></li> }).collect_view()}
                    </ul>
                }
            }</NonEmpty>
        </Card>
    }
}

#[component]
fn ReclaimItem(r: Reclaim, currency: String, on_snooze: Callback<ReclaimId>) -> impl IntoView {
    let id = r.id;
    let open = r.case.closed_ms.is_none();
    let who = r.case.owner.user.clone().or_else(|| r.case.owner.job_user.clone()).unwrap_or_else(|| "unknown".into());
    let status = match (r.case.status, r.case.snoozed_until_ms) {
        (ReclaimStatus::Noticed, Some(t)) if open => format!("noticed · snoozed until {}", format::date_time(t)),
        (s, _) => s.to_string(),
    };
    let heading_id = format!("reclaim-{id}");
    let labelled_by = heading_id.clone();
    let steps = r
        .log
        .iter()
        .map(|s| {
            view! {
                <tr data-step=s.line.step.as_str()>
                    <td>{format::date_time(s.line.at_ms)}</td>
                    <th scope="row">{step_label(s.line.step)}</th>
                    <td>{s.line.actor.clone()}</td>
                    <td class="num">{held(s.line.dollars_held, &currency)}</td>
                    <td class="small">{s.line.detail.clone()}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <article class="reclaim" data-reclaim-id=id.to_string() aria-labelledby=labelled_by>
            <div class="section-head">
                <h3 id=heading_id>{format!("{} on {} · {}", r.case.gpu_uuid, r.case.host, who)}</h3>
                <span class="pill" class:pill-ok=r.case.status == ReclaimStatus::Cancelled class:pill-muted=r.case.status != ReclaimStatus::Cancelled data-testid="reclaim-status">{status}</span>
                {open.then(|| view! {
                    <button type="button" class="btn" aria-label=format!("Snooze 1 h: the reclaim of {}", r.case.gpu_uuid) on:click=move |_| on_snooze.run(id)>"Snooze 1 h"</button>
                })}
            </div>
            <p class="muted small">{format!("Run {} · PID {} · in the state since {}", r.case.run_key, r.case.pid, format::date_time(r.case.state_since_ms))}</p>
            <DataTable
                class="reclaim-log"
                caption={format!("Steps of reclaim {id}")}
                columns={[
                    Column::text("When"),
                    Column::text("What"),
                    Column::text("Who"),
                    Column::num("Held by then"),
                    Column::text("Detail"),
                ]}
            >
                {steps}
            </DataTable>
        </article>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_become_whole_seconds() {
        assert_eq!(minutes_to_s("120"), Some(7200));
        assert_eq!(minutes_to_s("0.05"), Some(3));
        assert_eq!(minutes_to_s("0"), None);
        assert_eq!(minutes_to_s("soon"), None);
    }

    #[test]
    fn dry_run_headline_counts_actions_and_money() {
        let d = DryRun {
            policy_id: ReclaimPolicyId(1),
            from_ms: 0,
            to_ms: 1,
            actions: 4,
            freed_gpu_hours: 104.0,
            freed_cost: Some(312.0),
            currency: "USD".into(),
            items: vec![],
            summary: String::new(),
        };
        assert_eq!(dry_run_headline(&d, WorkloadState::IdleHeld), "4 actions, $312 of idle held GPU-time freed");
        let one = DryRun { actions: 1, freed_cost: None, freed_gpu_hours: 2.5, ..d };
        assert_eq!(dry_run_headline(&one, WorkloadState::Stalled), "1 action, 2.5 GPU-hours of stalled GPU-time freed");
    }

    #[test]
    fn money_held_under_a_cent_is_not_zero() {
        assert_eq!(held(Some(0.0042), "USD"), "under $0.01");
        assert_eq!(held(Some(1.5), "USD"), "$1.50");
        assert_eq!(held(None, "USD"), "—");
    }

    #[test]
    fn every_logged_step_has_its_own_words() {
        let labels: std::collections::HashSet<&str> = ReclaimLogStep::ALL.into_iter().map(step_label).collect();
        assert_eq!(labels.len(), ReclaimLogStep::ALL.len(), "{labels:?}");
    }
}
