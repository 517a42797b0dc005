//! Alerts: alert instances (`GET /api/v1/alerts?status=`, silence one for a chosen duration),
//! silences (`/api/v1/silences`), the rules that raise alerts (`/api/v1/alert-rules`: create,
//! edit, enable, delete; the condition is checked by the server, and its errors are shown at the
//! condition with a caret under the column at fault) and notification channels
//! (`/api/v1/notification-channels`: add, send a test, delete). Viewers see the lists; the
//! controls that change anything are an admin's.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_query_map;

use crate::api::{self, ApiError};
use crate::components::card::{Card, CardHead};
use crate::components::form::{Choices, InlineSelect, TextField};
use crate::components::list::NonEmpty;
use crate::components::status::{
    ActionError, ConfirmButton, FieldError, FormError, PollStatus, Saved, about, show_error, show_outcome,
};
use crate::components::table::{Column, DataTable};
use crate::ctx::{latest_ok, now_ms, polled, use_app};
use crate::format;
use crate::url_state::query_setter;
use fleetlens_api::alerts::{ChannelBody, ChannelView as Channel, SilenceBody, SilenceList};
use fleetlens_core::rules::{Matchers, SilenceWindow, silenced_by};

use fleetlens_api::AlertView as Alert;
use fleetlens_api::alerts::{RuleBody, RuleView as Rule, TestResult};
use fleetlens_core::{AlertStatus, ChannelId, ChannelKind, RuleId, Severity, SilenceId};

fn status_class(a: &Alert, silenced: bool) -> &'static str {
    match (silenced, a.status) {
        (true, _) => "pill pill-muted",
        (_, AlertStatus::Firing) => "pill pill-bad",
        (_, AlertStatus::Pending) => "pill pill-warn",
        (_, AlertStatus::Resolved) => "pill pill-ok",
    }
}

/// `GPU-b8c24ac0-038a-…-7e629bc4f276` → `b8c24ac0…f276`: both ends, so that GPUs whose UUIDs
/// share a prefix (one vendor batch, simulated fleets) still read apart.
fn short_uuid(uuid: &str) -> String {
    let hex: Vec<char> = uuid.trim_start_matches("GPU-").trim_start_matches("MIG-").chars().collect();
    if hex.len() <= 13 {
        return hex.into_iter().collect();
    }
    let head: String = hex[..8].iter().collect();
    let tail: String = hex[hex.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

/// The alert statuses the list can show: (value of `?status=`, label).
const STATUSES: Choices = &[
    ("open", "Open (firing or pending)"),
    ("firing", "Firing"),
    ("pending", "Pending"),
    ("resolved", "Resolved"),
    ("all", "All"),
];

/// Silence durations offered: (label, milliseconds).
const DURATIONS: [(&str, i64); 5] = [
    ("1 hour", 3_600_000),
    ("4 hours", 14_400_000),
    ("1 day", 86_400_000),
    ("3 days", 259_200_000),
    ("7 days", 604_800_000),
];

#[component]
pub fn AlertsPage() -> impl IntoView {
    super::set_title("Alerts");
    let ctx = use_app();
    // The status filter lives in the address (`/alerts?status=resolved`): a view to share.
    let query = use_query_map();
    let status =
        Memo::new(move |_| query.with(|q| q.get("status")).filter(|s| !s.is_empty()).unwrap_or_else(|| "open".into()));
    let set_query = query_setter();
    let alerts = polled(move || {
        // An alert opened, fired or resolved (the live stream): the list at once.
        ctx.stream.alerts_changed.track();
        let s = status.get();
        async move { api::alerts(&s).await }
    });
    let alerts_data = latest_ok(alerts);
    let rules = polled(api::alert_rules);
    let rules_data = latest_ok(rules);
    let silences = polled(api::silences);
    let silences_data = latest_ok(silences);
    // The server flags an alert silenced when a notification is held back; one silenced after
    // it fired shows so here at once (the same matching as the server's).
    let windows = Signal::derive(move || {
        silences_data
            .with(|d| d.as_ref().map(|d| d.silences.iter().map(|s| s.window()).collect::<Vec<_>>()).unwrap_or_default())
    });
    let has_alerts = Signal::derive(move || alerts_data.with(Option::is_some));
    let alert_list =
        Signal::derive(move || alerts_data.with(|d| d.as_ref().map(|d| d.alerts.clone()).unwrap_or_default()));
    let rule_list =
        Signal::derive(move || rules_data.with(|d| d.as_ref().map(|d| d.rules.clone()).unwrap_or_default()));
    let refresh = Callback::new(move |()| {
        alerts.refetch();
        rules.refetch();
        silences.refetch();
    });

    view! {
        <div class="page-head">
            <h1>"Alerts"</h1>
            <p class="muted">
                {move || {
                    let now = now_ms();
                    let w = windows.get();
                    let firing = alert_list.with(|a| {
                        a.iter()
                            .filter(|a| a.status == AlertStatus::Firing && !a.silenced && silenced_by(&w, &a.labels, now).is_none())
                            .count()
                    });
                    format!("{firing} firing, not silenced")
                }}
            </p>
        </div>
        <Card title_id="alerts-title" title="Alert instances">
            <CardHead slot>
                <InlineSelect
                    label="Status"
                    options=STATUSES
                    value=status
                    on_change=Callback::new(move |s: String| set_query("status", &s))
                />
            </CardHead>
            <PollStatus res=alerts has_data=has_alerts>
                <AlertTable alerts=alert_list windows refresh/>
            </PollStatus>
        </Card>
        <Silences res=silences rules=rule_list refresh/>
        <Rules res=rules refresh/>
        <Show when=move || ctx.is_admin()>
            <Channels/>
        </Show>
    }
}

#[component]
fn AlertTable(alerts: Signal<Vec<Alert>>, windows: Signal<Vec<SilenceWindow>>, refresh: Callback<()>) -> impl IntoView {
    let ctx = use_app();
    let error = RwSignal::new(None::<ApiError>);
    // Groups shown with their GPUs (the rest show one summary row each).
    let expanded = RwSignal::new(std::collections::HashSet::<String>::new());
    let silence = move |a: Alert, ms: i64| {
        let body = SilenceBody {
            comment: format!("silenced from the dashboard ({} on {})", a.rule_name, a.host),
            matchers: Matchers { rule: Some(a.rule_name), gpu: Some(a.gpu), ..Matchers::default() },
            starts_at: None,
            ends_at: (now_ms() + ms).into(),
        };
        spawn_local(async move {
            if show_error(error, api::create_silence(&body).await) {
                refresh.run(());
            }
        });
    };
    view! {
        <ActionError error/>
        <NonEmpty items=alerts empty="No alert in this status." let:list>{
            ctx.tick.track();
            let now = now_ms();
            let admin = ctx.is_admin();
            let windows = windows.get();
            view! {
                <DataTable
                    class="alert-table"
                    caption="Alert instances"
                    columns={[
                        Column::text("Status"),
                        Column::text("Severity"),
                        Column::text("Rule"),
                        Column::text("GPU"),
                        Column::text("Summary"),
                        Column::text("Since"),
                        Column::text("Silence").when(admin),
                    ]}
                >
                    {group_alerts(list)
                        .into_iter()
                        .map(|(key, members)| {
                            let head = if members.len() > 1 { Some(group_row(&key, &members, expanded, now, admin)) } else { None };
                            let grouped = members.len() > 1;
                            let rows = members.into_iter().map(|a| {
                            let member_key = key.clone();
                            let hidden = move || grouped && !expanded.with(|e| e.contains(&member_key));
                            let since = a.fired_at_ms.unwrap_or(a.active_since_ms);
                            let when = match a.resolved_at_ms {
                                Some(r) => format!("{} – {}", format::date_time(since), format::date_time(r)),
                                None => format!("{} ({})", format::date_time(since), format::ago(since, now)),
                            };
                            let by = a.silenced_by.or_else(|| {
                                (a.status != AlertStatus::Resolved).then(|| silenced_by(&windows, &a.labels, now)).flatten()
                            });
                            let silenced = a.silenced || by.is_some();
                            let can_silence = admin && !silenced && a.status != AlertStatus::Resolved;
                            let a2 = a.clone();
                            let choice = RwSignal::new(DURATIONS[0].1);
                            let inhibited = (a.inhibited && a.status != AlertStatus::Resolved).then(|| {
                                let title = a.inhibited_by.map(|id| format!("held back by alert {id} (the same problem)")).unwrap_or_default();
                                view! { " " <span class="pill pill-muted" title=title>"inhibited"</span> }
                            });
                            view! {
                                <tr data-alert-id=a.id.to_string() class:group-member=grouped hidden=hidden>
                                    <td>
                                        <span class=status_class(&a, silenced)>{a.status.as_str()}</span>
                                        {silenced.then(|| {
                                            let title = by.map(|id| format!("by silence {id}")).unwrap_or_default();
                                            view! { " " <span class="pill pill-muted" title=title>"silenced"</span> }
                                        })}
                                        {inhibited}
                                    </td>
                                    <td>{a.severity.as_str()}</td>
                                    <td>{a.rule_name.clone()}</td>
                                    <td>
                                        <a href=format!("/gpus/{}", a.gpu)>{a.host.clone()}</a>
                                        <span class="cell-note">{short_uuid(&a.gpu)}</span>
                                    </td>
                                    <td>{a.summary.clone()}</td>
                                    <td>{when}</td>
                                    {admin.then(|| view! {
                                        <td>
                                            {can_silence.then(|| view! {
                                                <div class="actions">
                                                    <select
                                                        aria-label=format!("Silence {} on {} for", a.rule_name, a.host)
                                                        on:change=move |ev| choice.set(event_target_value(&ev).parse().unwrap_or(DURATIONS[0].1))
                                                    >
                                                        {DURATIONS.iter().map(|(l, ms)| view! { <option value=ms.to_string()>{*l}</option> }).collect_view()}
                                                    </select>
                                                    <button type="button" class="btn" on:click=move |_| silence(a2.clone(), choice.get_untracked())>"Silence"</button>
                                                </div>
                                            })}
                                        </td>
                                    })}
                                </tr>
                            }
                            }).collect_view();
                            view! { {head} {rows} }
                        })
                        .collect_view()}
                </DataTable>
            }
        }</NonEmpty>
    }
}

/// Alerts by notification group (the server's default key: rule, job or owner, host), in the
/// order of each group's newest alert.
fn group_alerts(list: Vec<Alert>) -> Vec<(String, Vec<Alert>)> {
    let mut out: Vec<(String, Vec<Alert>)> = Vec::new();
    for a in list {
        // Resolved alerts of one key are separate episodes: only open ones are grouped.
        let key = if a.group.is_empty() || a.status == AlertStatus::Resolved {
            format!("#{}", a.id)
        } else {
            a.group.clone()
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(a),
            None => out.push((key, vec![a])),
        }
    }
    out
}

/// The summary row of a group: its rule, how many GPUs where, the worst status; a button shows
/// its GPUs.
fn group_row(
    key: &str,
    members: &[Alert],
    expanded: RwSignal<std::collections::HashSet<String>>,
    now: i64,
    admin: bool,
) -> impl IntoView + use<> {
    let first = &members[0];
    let firing = members.iter().filter(|a| a.status == AlertStatus::Firing).count();
    let held = members.iter().filter(|a| a.inhibited || a.silenced).count();
    let status = if firing > 0 { "firing" } else { "pending" };
    let class = if firing > 0 { "pill pill-bad" } else { "pill pill-warn" };
    let hosts: std::collections::BTreeSet<&str> = members.iter().map(|a| a.host.as_str()).collect();
    let owner = ["owner_job", "owner_user", "owner_namespace"]
        .iter()
        .find_map(|l| first.labels.get(*l).map(|v| format!("{} {v}", l.trim_start_matches("owner_"))))
        .unwrap_or_else(|| "owner unknown".into());
    let since = members.iter().map(|a| a.fired_at_ms.unwrap_or(a.active_since_ms)).min().unwrap_or(now);
    let where_ = if hosts.len() == 1 {
        hosts.iter().next().copied().unwrap_or_default().to_string()
    } else {
        format!("{} hosts", hosts.len())
    };
    let label = format!("{} GPUs", members.len());
    let key = key.to_string();
    let key2 = key.clone();
    let data_key = key.clone();
    let open = Signal::derive(move || expanded.with(|e| e.contains(&key2)));
    view! {
        <tr class="group-row" data-group=data_key>
            <td>
                <span class=class>{status}</span>
                {(held > 0).then(|| view! { " " <span class="pill pill-muted">{format!("{held} held back")}</span> })}
            </td>
            <td>{first.severity.as_str()}</td>
            <td>{first.rule_name.clone()}</td>
            <td>
                <button
                    type="button"
                    class="btn btn-link"
                    aria-expanded=move || open.get().to_string()
                    on:click=move |_| expanded.update(|e| if !e.remove(&key) { e.insert(key.clone()); })
                >
                    {move || if open.get() { "▾ " } else { "▸ " }}{label.clone()}
                </button>
                <span class="cell-note">{format!("{where_} · {owner}")}</span>
            </td>
            <td>{first.summary.clone()}</td>
            <td>{format!("{} ({})", format::date_time(since), format::ago(since, now))}</td>
            {admin.then(|| view! { <td></td> })}
        </tr>
    }
}

#[component]
fn Silences(
    res: LocalResource<api::ApiResult<SilenceList>>,
    rules: Signal<Vec<Rule>>,
    refresh: Callback<()>,
) -> impl IntoView {
    let ctx = use_app();
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let (rule, host, gpu, team, severity, comment) = (
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
    );
    let duration = RwSignal::new(DURATIONS[0].1);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let text = |v: RwSignal<String>| Some(v.get_untracked().trim().to_string()).filter(|t| !t.is_empty());
        let body = SilenceBody {
            matchers: Matchers {
                rule: text(rule),
                host: text(host),
                gpu: text(gpu),
                team: text(team),
                severity: text(severity),
                ..Matchers::default()
            },
            starts_at: None,
            ends_at: (now_ms() + duration.get_untracked()).into(),
            comment: comment.get_untracked().trim().to_string(),
        };
        spawn_local(async move {
            let out =
                api::create_silence(&body).await.map(|s| format!("Silence {} added ({}).", s.id, s.matchers_text()));
            if show_outcome(error, saved, out) {
                for v in [rule, host, gpu, team, severity, comment] {
                    v.set(String::new());
                }
                refresh.run(());
            }
        });
    };
    let end = move |id: SilenceId| {
        spawn_local(async move {
            if show_error(error, api::end_silence(id).await) {
                refresh.run(());
            }
        });
    };
    let matchers_error = about(error, "matchers");
    let list = Signal::derive(move || data.get().map(|d| d.silences).unwrap_or_default());
    view! {
        <Card title_id="silences-title" title="Silences">
            <p class="muted">"A silence holds notifications back; its alerts are still recorded and shown here."</p>
            <PollStatus res has_data>
                <NonEmpty items=list empty="No silence." let:list>{
                    let admin = ctx.is_admin();
                    let now = now_ms();
                    view! {
                        <DataTable
                            class="silence-table"
                            caption="Silences"
                            columns={[
                                Column::text("Matches"),
                                Column::text("Status"),
                                Column::text("From"),
                                Column::text("Until"),
                                Column::text("Comment"),
                                Column::hidden("Actions").when(admin),
                            ]}
                        >
                            {list
                                .into_iter()
                                .map(|s| {
                                    let (label, class) = if s.active {
                                        ("active", "pill pill-warn")
                                    } else if s.starts_at_ms > now {
                                        ("scheduled", "pill pill-muted")
                                    } else {
                                        ("expired", "pill pill-muted")
                                    };
                                    let can_end = admin && s.ends_at_ms > now;
                                    let id = s.id;
                                    view! {
                                        <tr data-silence-id=s.id.to_string()>
                                            <th scope="row"><code>{s.matchers_text()}</code></th>
                                            <td><span class=class>{label}</span></td>
                                            <td>{format::date_time(s.starts_at_ms)}</td>
                                            <td>{format::date_time(s.ends_at_ms)}</td>
                                            <td>
                                                {s.comment.clone()}
                                                {(!s.created_by.is_empty()).then(|| view! { <span class="cell-note">{format!("by {}", s.created_by)}</span> })}
                                            </td>
                                            {admin.then(|| view! {
                                                <td>{can_end.then(|| view! { <button type="button" class="btn" on:click=move |_| end(id)>"End now"</button> })}</td>
                                            })}
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </DataTable>
                    }
                }</NonEmpty>
            </PollStatus>
            <Show when=move || ctx.is_admin()>
                <form class="form-grid" on:submit=submit novalidate aria-label="New silence">
                    <label for="silence-rule">
                        <span>"Rule"</span>
                        <select id="silence-rule" prop:value=move || rule.get() on:change=move |ev| rule.set(event_target_value(&ev))>
                            <option value="">"any rule"</option>
                            {move || rules.get().into_iter().map(|r| view! { <option value=r.rule.name.clone()>{r.rule.name.clone()}</option> }).collect_view()}
                        </select>
                    </label>
                    <TextField id="silence-host" label="Host" value=host placeholder="node-*"/>
                    <TextField id="silence-gpu" label="GPU UUID" value=gpu placeholder="GPU-…"/>
                    <TextField id="silence-team" label="Team" value=team placeholder=""/>
                    <label for="silence-severity">
                        <span>"Severity"</span>
                        <select id="silence-severity" prop:value=move || severity.get() on:change=move |ev| severity.set(event_target_value(&ev))>
                            <option value="">"any"</option>
                            <option value="info">"info"</option>
                            <option value="warning">"warning"</option>
                            <option value="critical">"critical"</option>
                        </select>
                    </label>
                    <label for="silence-duration">
                        <span>"For"</span>
                        <select id="silence-duration" on:change=move |ev| duration.set(event_target_value(&ev).parse().unwrap_or(DURATIONS[0].1))>
                            {DURATIONS.iter().map(|(l, ms)| view! { <option value=ms.to_string()>{*l}</option> }).collect_view()}
                        </select>
                    </label>
                    <TextField id="silence-comment" label="Comment" value=comment class="grow"/>
                    <button type="submit" class="btn-primary">"Add silence"</button>
                </form>
                {move || matchers_error().map(|m| view! { <p class="field-error" role="alert" data-field="matchers">{m}</p> })}
                <FormError error fields=&["matchers"]/>
                <Saved saved/>
            </Show>
            <Show when=move || !ctx.is_admin()>
                <ActionError error/>
            </Show>
        </Card>
    }
}

/// The rule editor's fields, as typed.
#[derive(Debug, Clone, PartialEq)]
struct RuleDraft {
    id: Option<RuleId>,
    name: String,
    condition: String,
    for_s: String,
    keep_firing_for_s: String,
    severity: Severity,
    description: String,
    advice: String,
    channels: Vec<ChannelId>,
    enabled: bool,
}

impl Default for RuleDraft {
    fn default() -> Self {
        RuleDraft {
            id: None,
            name: String::new(),
            condition: String::new(),
            for_s: "300".into(),
            keep_firing_for_s: "60".into(),
            severity: Severity::Warning,
            description: String::new(),
            advice: String::new(),
            channels: Vec::new(),
            enabled: true,
        }
    }
}

impl RuleDraft {
    fn of(r: &Rule) -> RuleDraft {
        RuleDraft {
            id: Some(r.id),
            name: r.rule.name.clone(),
            condition: r.rule.condition.clone(),
            for_s: r.rule.for_s.to_string(),
            keep_firing_for_s: r.rule.keep_firing_for_s.to_string(),
            severity: r.rule.severity,
            description: r.rule.description.clone(),
            advice: r.rule.advice.clone(),
            channels: r.rule.channels.clone(),
            enabled: r.rule.enabled,
        }
    }

    /// The request body, or the field that is not a whole number of seconds.
    fn body(&self) -> Result<RuleBody, (&'static str, String)> {
        let secs = |field: &'static str, v: &str| {
            v.trim().parse::<i64>().map_err(|_| (field, format!("{field}: enter whole seconds, e.g. 300")))
        };
        Ok(RuleBody {
            name: Some(self.name.trim().to_string()),
            condition: Some(self.condition.clone()),
            for_s: Some(secs("for_s", &self.for_s)?),
            keep_firing_for_s: Some(secs("keep_firing_for_s", &self.keep_firing_for_s)?),
            severity: Some(self.severity),
            description: Some(self.description.clone()),
            advice: Some(self.advice.clone()),
            channels: Some(self.channels.clone()),
            enabled: Some(self.enabled),
            ..RuleBody::default()
        })
    }
}

const RULE_FIELDS: &[&str] = &["name", "condition", "for_s", "keep_firing_for_s", "severity", "channels"];

#[component]
fn Rules(res: LocalResource<api::ApiResult<fleetlens_api::alerts::RuleList>>, refresh: Callback<()>) -> impl IntoView {
    let ctx = use_app();
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let list = Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.rules.clone()).unwrap_or_default()));
    let draft = RwSignal::new(None::<RuleDraft>);
    let error = RwSignal::new(None::<ApiError>);
    let local_error = RwSignal::new(None::<(&'static str, String)>);
    let saved = RwSignal::new(None::<String>);
    let confirm_delete = RwSignal::new(None::<RuleId>);

    let edit = Callback::new(move |r: Option<Rule>| {
        error.set(None);
        local_error.set(None);
        saved.set(None);
        draft.set(Some(r.as_ref().map(RuleDraft::of).unwrap_or_default()));
        request_animation_frame(|| {
            if let Some(el) = document().get_element_by_id("rule-name") {
                let _ = wasm_bindgen::JsCast::unchecked_into::<web_sys::HtmlElement>(el).focus();
            }
        });
    });
    let run = move |fut: std::pin::Pin<Box<dyn std::future::Future<Output = api::ApiResult<String>>>>| {
        spawn_local(async move {
            if show_outcome(error, saved, fut.await) {
                refresh.run(());
            }
        });
    };
    let toggle = Callback::new(move |r: Rule| {
        let enabled = !r.rule.enabled;
        run(Box::pin(async move {
            api::save_rule(Some(r.id), &RuleBody { enabled: Some(enabled), ..RuleBody::default() }).await?;
            Ok(format!("Rule “{}” {}.", r.rule.name, if enabled { "enabled" } else { "disabled" }))
        }))
    });
    let delete = Callback::new(move |r: Rule| {
        confirm_delete.set(None);
        run(Box::pin(async move {
            api::delete_rule(r.id).await?;
            Ok(format!("Rule “{}” deleted.", r.rule.name))
        }))
    });

    view! {
        <Card title_id="rules-title" title="Rules">
            <CardHead slot>
                <Show when=move || ctx.is_admin() && draft.with(Option::is_none)>
                    <button type="button" class="btn-primary" on:click=move |_| edit.run(None)>"New rule"</button>
                </Show>
            </CardHead>
            <p class="muted">
                "A condition is an expression over the metric names and " <code>"state"</code> ", e.g. "
                <code>"gpu_util_pct >= 80 && sm_active_pct < 30"</code> " (busy but hollow). A metric the GPU does "
                "not report is unknown, never 0: a rule matches only when its condition is definitely true."
            </p>
            <Show when=move || draft.with(Option::is_some)>
                <RuleEditor draft error local_error saved refresh/>
            </Show>
            <Saved saved/>
            <Show when=move || draft.with(Option::is_none)>
                <ActionError error/>
            </Show>
            <PollStatus res has_data>
                <NonEmpty items=list empty="No alert rule yet." let:l>{
                    let admin = ctx.is_admin();
                    view! {
                        <DataTable
                            class="rule-table"
                            caption="Alert rules"
                            columns={[
                                Column::text("Rule"),
                                Column::text("Condition"),
                                Column::num("For"),
                                Column::text("Severity"),
                                Column::text("Enabled"),
                                Column::hidden("Actions").when(admin),
                            ]}
                        >
                            {l.into_iter()
                                .map(|r| {
                                    let (r1, r2, r3, r4) = (r.clone(), r.clone(), r.clone(), r.clone());
                                    let id = r.id;
                                    view! {
                                        <tr data-rule-id=r.id.to_string()>
                                            <th scope="row">
                                                <span class="rule-name">{r.rule.name.clone()}</span>
                                                {r.builtin.is_some().then(|| view! { " " <span class="pill pill-muted">"shipped"</span> })}
                                                {(!r.rule.description.is_empty()).then(|| view! { <span class="cell-note">{r.rule.description.clone()}</span> })}
                                            </th>
                                            <td><code>{r.rule.condition.clone()}</code></td>
                                            <td class="num">{format::duration_ms(r.rule.for_s * 1000)}</td>
                                            <td>{r.rule.severity.as_str()}</td>
                                            <td>{if r.rule.enabled { "yes" } else { "no" }}</td>
                                            {admin.then(|| view! {
                                                <td>
                                                    <div class="actions">
                                                        <button type="button" class="btn" aria-label=format!("Edit rule {}", r.rule.name) on:click=move |_| edit.run(Some(r1.clone()))>"Edit"</button>
                                                        <button type="button" class="btn" on:click=move |_| toggle.run(r2.clone())>{if r.rule.enabled { "Disable" } else { "Enable" }}</button>
                                                        <ConfirmButton
                                                            asking=confirm_delete
                                                            id
                                                            label="Delete"
                                                            confirm_label="Confirm delete"
                                                            aria_label=format!("Delete rule {}", r4.rule.name)
                                                            on_confirm=Callback::new(move |()| delete.run(r3.clone()))
                                                        />
                                                    </div>
                                                </td>
                                            })}
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </DataTable>
                    }
                }</NonEmpty>
            </PollStatus>
        </Card>
    }
}

#[component]
fn RuleEditor(
    draft: RwSignal<Option<RuleDraft>>,
    error: RwSignal<Option<ApiError>>,
    local_error: RwSignal<Option<(&'static str, String)>>,
    saved: RwSignal<Option<String>>,
    refresh: Callback<()>,
) -> impl IntoView {
    let fields = LocalResource::new(api::rule_fields);
    // Channels are an admin's to read; the editor is only ever open for an admin.
    let channels = LocalResource::new(api::channels);
    let checked = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let get = move |f: fn(&RuleDraft) -> String| move || draft.with(|d| d.as_ref().map(f).unwrap_or_default());
    let set = move |f: fn(&mut RuleDraft, String)| {
        move |ev: leptos::ev::Event| {
            let v = event_target_value(&ev);
            checked.set(None);
            draft.update(|d| {
                if let Some(d) = d {
                    f(d, v)
                }
            })
        }
    };
    let field_error = move |field: &'static str| {
        move || {
            if let Some((f, m)) = local_error.get().filter(|(f, _)| *f == field) {
                return Some(format!("{f}: {m}"));
            }
            about(error, field)()
        }
    };
    let invalid = move |field: &'static str| move || field_error(field)().is_some().to_string();
    let check = move |_| {
        let Some(c) = draft.with_untracked(|d| d.as_ref().map(|d| d.condition.clone())) else { return };
        spawn_local(async move {
            match api::check_condition(&c).await {
                Ok(()) => {
                    error.set(None);
                    checked.set(Some("The condition is valid.".into()));
                }
                Err(e) => {
                    checked.set(None);
                    error.set(Some(e));
                }
            }
        });
    };
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let Some(d) = draft.get_untracked() else { return };
        let body = match d.body() {
            Ok(b) => b,
            Err(e) => {
                local_error.set(Some(e));
                return;
            }
        };
        local_error.set(None);
        busy.set(true);
        spawn_local(async move {
            let out = api::save_rule(d.id, &body)
                .await
                .map(|r| format!("Rule “{}” {}.", r.rule.name, if d.id.is_some() { "saved" } else { "created" }));
            if show_outcome(error, saved, out) {
                draft.set(None);
                refresh.run(());
            }
            busy.set(false);
        });
    };
    let editing = move || draft.with(|d| d.as_ref().and_then(|d| d.id).is_some());
    let field_list = move || {
        fields.get().and_then(Result::ok).map(|f| {
            view! {
                <details class="wide">
                    <summary>{format!("Fields a condition can use ({})", f.fields.len())}</summary>
                    <ul class="small">
                        {f.fields.into_iter().map(|fi| view! {
                            <li><code>{fi.name}</code>{(!fi.unit.is_empty()).then(|| format!(" ({})", fi.unit))}" — "{fi.doc}</li>
                        }).collect_view()}
                    </ul>
                    <p class="small">"States: " {f.states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")}</p>
                </details>
            }
        })
    };
    let channel_boxes = move || {
        let list: Vec<Channel> = channels.get().and_then(Result::ok).map(|c| c.channels).unwrap_or_default();
        if list.is_empty() {
            return view! { <p class="small muted">"No channel yet: the rule notifies the default channels (none), and shows here."</p> }.into_any();
        }
        view! {
            <fieldset class="checks">
                <legend>"Notify (none ticked: the default channels)"</legend>
                {list.into_iter().map(|c| {
                    let id = c.id;
                    view! {
                        <label class="check">
                            <input
                                type="checkbox"
                                prop:checked=move || draft.with(|d| d.as_ref().is_some_and(|d| d.channels.contains(&id)))
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    draft.update(|d| if let Some(d) = d {
                                        d.channels.retain(|c| *c != id);
                                        if on { d.channels.push(id) }
                                    });
                                }
                            />
                            <span>{c.name}</span>
                        </label>
                    }
                }).collect_view()}
            </fieldset>
        }
        .into_any()
    };
    let err_view = move |field: &'static str| {
        move || field_error(field)().map(|m| view! { <pre class="field-error" role="alert" data-field=field>{m}</pre> })
    };

    view! {
        <form class="editor rule-editor" on:submit=submit novalidate aria-label=move || if editing() { "Edit rule" } else { "New rule" }>
            <h3 class="wide">{move || if editing() { "Edit rule" } else { "New rule" }}</h3>
            <label for="rule-name">
                <span>"Name"</span>
                <input id="rule-name" aria-invalid=invalid("name") prop:value=get(|d| d.name.clone()) on:input=set(|d, v| d.name = v)/>
                {err_view("name")}
            </label>
            <label for="rule-severity">
                <span>"Severity"</span>
                <select
                    id="rule-severity"
                    prop:value=get(|d| d.severity.as_str().to_string())
                    on:change=set(|d, v| {
                        if let Some(s) = Severity::parse(&v) {
                            d.severity = s;
                        }
                    })
                >
                    {Severity::ALL.into_iter().map(|s| view! { <option value=s.as_str()>{s.as_str()}</option> }).collect::<Vec<_>>()}
                </select>
                {err_view("severity")}
            </label>
            <label for="rule-for">
                <span>"For (seconds the condition must hold)"</span>
                <input id="rule-for" inputmode="numeric" aria-invalid=invalid("for_s") prop:value=get(|d| d.for_s.clone()) on:input=set(|d, v| d.for_s = v)/>
                {err_view("for_s")}
            </label>
            <label for="rule-keep">
                <span>"Keep firing for (seconds)"</span>
                <input id="rule-keep" inputmode="numeric" aria-invalid=invalid("keep_firing_for_s") prop:value=get(|d| d.keep_firing_for_s.clone()) on:input=set(|d, v| d.keep_firing_for_s = v)/>
                {err_view("keep_firing_for_s")}
            </label>
            <label for="rule-condition" class="wide">
                <span>"Condition"</span>
                <textarea
                    id="rule-condition"
                    class="code"
                    rows="2"
                    spellcheck="false"
                    aria-invalid=invalid("condition")
                    prop:value=get(|d| d.condition.clone())
                    on:input=set(|d, v| d.condition = v)
                ></textarea>
                {err_view("condition")}
                {move || checked.get().map(|m| view! { <p class="field-ok" role="status">{m}</p> })}
            </label>
            {field_list}
            <label for="rule-description" class="wide">
                <span>"Description (" <code>"{field}"</code> " is replaced by its value)"</span>
                <input id="rule-description" prop:value=get(|d| d.description.clone()) on:input=set(|d, v| d.description = v)/>
            </label>
            <label for="rule-advice" class="wide">
                <span>"Advice"</span>
                <input id="rule-advice" prop:value=get(|d| d.advice.clone()) on:input=set(|d, v| d.advice = v)/>
            </label>
            <div class="wide">{channel_boxes} {err_view("channels")}</div>
            <label class="check wide">
                <input
                    type="checkbox"
                    prop:checked=move || draft.with(|d| d.as_ref().is_some_and(|d| d.enabled))
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        draft.update(|d| if let Some(d) = d { d.enabled = on });
                    }
                />
                <span>"Enabled"</span>
            </label>
            <div class="wide">
                <FormError error fields=RULE_FIELDS/>
                <div class="actions">
                    <button type="submit" class="btn-primary" disabled=move || busy.get()>
                        {move || if editing() { "Save rule" } else { "Create rule" }}
                    </button>
                    <button type="button" class="btn" on:click=check>"Check condition"</button>
                    <button type="button" class="btn-quiet" on:click=move |_| {
                        error.set(None);
                        draft.set(None);
                    }>"Cancel"</button>
                </div>
            </div>
        </form>
    }
}

#[component]
fn Channels() -> impl IntoView {
    let res = polled(api::channels);
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let name = RwSignal::new(String::new());
    let kind = RwSignal::new(ChannelKind::Slack);
    let url = RwSignal::new(String::new());
    let default = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let tested = RwSignal::new(None::<(ChannelId, Result<TestResult, ApiError>)>);
    let confirm_delete = RwSignal::new(None::<ChannelId>);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let body = ChannelBody {
            name: Some(name.get_untracked().trim().to_string()),
            kind: Some(kind.get_untracked()),
            url: Some(url.get_untracked().trim().to_string()),
            default: Some(default.get_untracked()),
            ..ChannelBody::default()
        };
        spawn_local(async move {
            if show_outcome(
                error,
                saved,
                api::create_channel(&body).await.map(|c| format!("Channel “{}” added.", c.name)),
            ) {
                name.set(String::new());
                url.set(String::new());
                res.refetch();
            }
        });
    };
    let test = move |id: ChannelId| {
        tested.set(None);
        spawn_local(async move { tested.set(Some((id, api::test_channel(id).await))) });
    };
    let set_default = move |c: Channel| {
        spawn_local(async move {
            let body = ChannelBody { default: Some(!c.default), ..ChannelBody::default() };
            if show_error(error, api::update_channel(c.id, &body).await) {
                res.refetch();
            }
        });
    };
    let delete = move |c: Channel| {
        confirm_delete.set(None);
        spawn_local(async move {
            if show_error(error, api::delete_channel(c.id).await) {
                saved.set(Some(format!("Channel “{}” deleted.", c.name)));
                res.refetch();
            }
        });
    };
    let test_outcome = move |id: ChannelId| {
        move || {
            tested.get().filter(|(t, _)| *t == id).map(|(_, r)| match r {
                Ok(t) if t.delivered => {
                    let code = t.status_code.map(|c| format!(" (HTTP {c})")).unwrap_or_default();
                    view! { <p class="field-ok" role="status">{format!("Test message delivered{code}.")}</p> }.into_any()
                }
                Ok(t) => {
                    let code = t.status_code.map(|c| format!("HTTP {c}")).unwrap_or_else(|| "no answer".into());
                    let why = t.error.unwrap_or_default();
                    view! {
                        <p class="field-error" role="alert">
                            {format!("Test message not delivered ({}, {code}, {} attempt(s)): {why}", t.status, t.attempts)}
                        </p>
                    }
                    .into_any()
                }
                Err(e) => view! { <p class="field-error" role="alert">{e.to_string()}</p> }.into_any(),
            })
        }
    };

    let list = Signal::derive(move || data.get().map(|d| d.channels).unwrap_or_default());
    view! {
        <Card title_id="channels-title" title="Notification channels">
            <p class="muted">"Slack incoming webhooks, generic webhooks (Alertmanager's webhook body) or an Alertmanager. URLs are secrets: only admins see them."</p>
            <PollStatus res has_data>
                <NonEmpty items=list empty="No channel yet: alerts show only on this page." let:l>
                    <DataTable
                        class="channel-table"
                        caption="Notification channels"
                        columns={[
                            Column::text("Name"),
                            Column::text("Kind"),
                            Column::text("URL"),
                            Column::text("Default"),
                            Column::hidden("Actions"),
                        ]}
                    >
                        {l.into_iter().map(|c| {
                            let id = c.id;
                            let (c1, c2) = (c.clone(), c.clone());
                            let name = c.name.clone();
                            view! {
                                <tr data-channel-id=c.id.to_string()>
                                    <th scope="row">{c.name.clone()}</th>
                                    <td>{c.kind.as_str()}</td>
                                    <td class="cmd">{c.url.clone()}</td>
                                    <td>{if c.default { "yes" } else { "no" }}</td>
                                    <td>
                                        <div class="actions">
                                            <button type="button" class="btn" aria-label=format!("Send a test message to {}", c.name) on:click=move |_| test(id)>"Send test"</button>
                                            <button type="button" class="btn" on:click=move |_| set_default(c1.clone())>{if c.default { "Not default" } else { "Make default" }}</button>
                                            <ConfirmButton
                                                asking=confirm_delete
                                                id
                                                label="Delete"
                                                confirm_label="Confirm delete"
                                                aria_label=format!("Delete channel {name}")
                                                on_confirm=Callback::new(move |()| delete(c2.clone()))
                                            />
                                        </div>
                                        {test_outcome(id)}
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                </NonEmpty>
            </PollStatus>
            <form class="form-grid" on:submit=submit novalidate aria-label="Add a notification channel">
                <TextField id="channel-name" label="Name" value=name error field="name"/>
                <label for="channel-kind">
                    <span>"Kind"</span>
                    <select
                        id="channel-kind"
                        on:change=move |ev| {
                            if let Some(k) = ChannelKind::parse(&event_target_value(&ev)) {
                                kind.set(k);
                            }
                        }
                    >
                        <option value="slack">"Slack"</option>
                        <option value="webhook">"Webhook"</option>
                        <option value="alertmanager">"Alertmanager"</option>
                    </select>
                </label>
                <TextField id="channel-url" label="URL" value=url error field="url" class="grow" input_type="url"/>
                <label class="check">
                    <input type="checkbox" prop:checked=move || default.get() on:change=move |ev| default.set(event_target_checked(&ev))/>
                    <span>"Default"</span>
                </label>
                <button type="submit" class="btn-primary">"Add channel"</button>
            </form>
            <FieldError error field="name" label="Name"/>
            <FieldError error field="url" label="URL"/>
            <FormError error fields=&["url", "name"]/>
            <Saved saved/>
        </Card>
    }
}
