//! Settings: the account (who is logged in, live updates, log out), the classifier's
//! thresholds (`GET|PUT /api/v1/settings/thresholds`) and GPU-hour prices
//! (`GET|PUT /api/v1/prices`: the shipped public defaults and the organisation's own). Viewers
//! see the values; only admins get the controls that change them.

use std::collections::BTreeMap;

use fleetlens_api::accounts::{NewUserBody, UserPatch, Via};
use fleetlens_core::{ApiKeyId, GpuModel, PriceTable, Role, SPECS, Scope, TeamId, UserId};
use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;
use serde_json::{Map, Value};

use crate::api::{self, ApiError};
use crate::components::card::Card;
use crate::components::form::TextField;
use crate::components::header::LogOutButton;
use crate::components::list::NonEmpty;
use crate::components::status::{
    ActionError, ConfirmButton, ErrorMessage, FieldError, FormError, PollStatus, Saved, show_error, show_outcome,
};
use crate::components::table::{Column, DataTable};
use crate::ctx::{Latest, latest_ok, polled, use_app};
use crate::format;
use fleetlens_api::analytics::Prices;

#[component]
pub fn SettingsPage() -> impl IntoView {
    super::set_title("Settings");
    let ctx = use_app();
    let me = move || ctx.me.get().unwrap_or_default();
    view! {
        <div class="page-head"><h1>"Settings"</h1></div>
        <Card title_id="account-title" title="Account">
            <dl class="adv adv-wide" data-testid="account">
                {move || {
                    let m = me();
                    let (who_label, who) = match (&m.user, &m.api_key) {
                        (Some(u), _) => ("User", if u.name.is_empty() { u.email.clone() } else { format!("{} ({})", u.name, u.email) }),
                        (None, Some(k)) => ("API key", format!("{} ({}…)", k.name, k.prefix)),
                        (None, None) => ("User", "unknown".into()),
                    };
                    view! {
                        <div class="adv-row"><dt>{who_label}</dt><dd>{who}</dd></div>
                        <div class="adv-row"><dt>"Role"</dt><dd data-testid="role">{m.role_label()}</dd></div>
                        <div class="adv-row"><dt>"Organisation"</dt><dd>{m.org.name.clone()}</dd></div>
                        <div class="adv-row"><dt>"Signed in with"</dt><dd>{if m.via == Via::Session { "a session (email and password)" } else { "an API key" }}</dd></div>
                    }
                }}
                <div class="adv-row"><dt>"Server"</dt><dd><code>{window().location().origin().unwrap_or_default()}</code></dd></div>
            </dl>
            <div class="row">
                <label class="check">
                    <input type="checkbox" prop:checked=move || ctx.live.get() on:change=move |ev| ctx.live.set(event_target_checked(&ev))/>
                    <span>"Live updates (refresh every 5 seconds)"</span>
                </label>
                <LogOutButton class="btn"/>
            </div>
        </Card>
        <Show when=move || ctx.me.with(|m| m.as_ref().is_some_and(|m| m.via == Via::Session && m.user.is_some()))>
            <ChangePassword/>
        </Show>
        <Alerting/>
        <Thresholds/>
        <Prices/>
        <Teams/>
        <Show when=move || ctx.me.with(|m| m.as_ref().is_some_and(|m| m.scopes.contains(&Scope::Ingest)))>
            <ApiKeys/>
        </Show>
        <Show when=move || ctx.is_admin() && ctx.me.with(|m| m.as_ref().is_some_and(|m| m.user.is_some()))>
            <Users/>
        </Show>
    }
}

/// The logged-in user's own password (`PUT /api/v1/auth/password`): other sessions end, and
/// the user may revoke every API key they made at the same time (after a suspected leak).
#[component]
fn ChangePassword() -> impl IntoView {
    let (current, new) = (RwSignal::new(String::new()), RwSignal::new(String::new()));
    let revoke = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let (c, n, r) = (current.get_untracked(), new.get_untracked(), revoke.get_untracked());
        spawn_local(async move {
            let out = api::change_password(&c, &n, r).await.map(|()| {
                if r {
                    "Password changed; your other sessions ended and your API keys were revoked.".into()
                } else {
                    "Password changed; your other sessions ended.".into()
                }
            });
            if show_outcome(error, saved, out) {
                current.set(String::new());
                new.set(String::new());
                revoke.set(false);
            }
        });
    };
    view! {
        <Card title_id="password-title" title="Password">
            <form class="form-grid" on:submit=submit novalidate aria-label="Change your password">
                <TextField id="current-password" label="Current password" value=current error field="current_password" input_type="password" autocomplete="current-password"/>
                <TextField id="new-password" label="New password" value=new error field="new_password" input_type="password" autocomplete="new-password"/>
                <label class="check">
                    <input id="revoke-keys" type="checkbox" prop:checked=move || revoke.get() on:change=move |ev| revoke.set(event_target_checked(&ev))/>
                    <span>"Also revoke every API key I made"</span>
                </label>
                <button type="submit" class="btn-primary">"Change password"</button>
            </form>
            <FieldError error field="current_password" label="Current password"/>
            <FieldError error field="new_password" label="New password"/>
            <FormError error fields=&["current_password", "new_password"]/>
            <Saved saved/>
        </Card>
    }
}

/// Where alert rules and notification channels are set: with the alerts they raise, on the
/// Alerts page (one place for the rule, its alerts and its silences).
#[component]
fn Alerting() -> impl IntoView {
    let ctx = use_app();
    view! {
        <Card title_id="alerting-title" title="Alert rules and channels">
            <p class="muted">"They are set on the Alerts page, next to the alerts they raise and their silences."</p>
            <ul class="link-list">
                <li>
                    <a href="/alerts#rules-title">"Alert rules"</a>
                    ": conditions over the GPU metrics (checked by the server before they are saved), for how long, severity, channels."
                </li>
                <Show when=move || ctx.is_admin()>
                    <li>
                        <a href="/alerts#channels-title">"Notification channels"</a>
                        ": Slack, webhooks and Alertmanager, each with “send a test”."
                    </li>
                </Show>
            </ul>
        </Card>
    }
}

/// Teams, and which team each host's GPUs count for (an admin's assignment wins over the agent's
/// key and its `team` label).
#[component]
fn Teams() -> impl IntoView {
    let ctx = use_app();
    let teams_res = polled(api::teams);
    let teams = latest_ok(teams_res);
    let hosts_res = polled(api::hosts);
    let hosts = latest_ok(hosts_res);
    let has_teams = Signal::derive(move || teams.with(Option::is_some));
    let has_hosts = Signal::derive(move || hosts.with(Option::is_some));
    let team_list = Signal::derive(move || teams.get().unwrap_or_default());
    let name = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let confirm = RwSignal::new(None::<TeamId>);
    let done = move |out: Result<String, ApiError>| {
        show_outcome(error, saved, out);
        teams_res.refetch();
        hosts_res.refetch();
    };
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let n = name.get_untracked();
        spawn_local(async move {
            let out = api::create_team(n.trim()).await.map(|t| format!("Team “{}” created.", t.name));
            if out.is_ok() {
                name.set(String::new());
            }
            done(out);
        });
    };
    let delete = move |id: TeamId, n: String| {
        confirm.set(None);
        spawn_local(async move { done(api::delete_team(id).await.map(|()| format!("Team “{n}” deleted."))) });
    };
    let assign = move |host: String, team: Option<i64>| {
        spawn_local(async move {
            let what = match team {
                Some(_) => format!("Host {host} assigned."),
                None => format!("Host {host} no longer assigned."),
            };
            done(api::assign_host(&host, team.map(TeamId::from)).await.map(|_| what));
        });
    };
    view! {
        <Card title_id="teams-title" title="Teams">
            <p class="muted">
                "A GPU counts for the team an admin gave it or its host; else the team of the agent's API key; else the "
                <code>"team"</code> " label the agent sends."
            </p>
            <PollStatus res=teams_res has_data=has_teams/>
            <NonEmpty items=team_list empty="No team yet." let:list>{
                let admin = ctx.is_admin();
                view! {
                    <ul class="team-list">
                        {list.into_iter().map(|t| {
                            let id = t.id;
                            let n = t.name.clone();
                            view! {
                                <li data-team-id=t.id.to_string()>
                                    <strong>{t.name.clone()}</strong>
                                    <span class="muted small">{format!(" {} member(s)", t.members.len())}</span>
                                    {admin.then(|| {
                                        let aria_label = format!("Delete team {n}");
                                        let on_confirm = Callback::new(move |()| delete(id, n.clone()));
                                        view! {
                                            " "
                                            <ConfirmButton asking=confirm id label="Delete" confirm_label="Confirm delete" aria_label class="btn-quiet btn-danger" on_confirm/>
                                        }
                                    })}
                                </li>
                            }
                        }).collect_view()}
                    </ul>
                }
            }</NonEmpty>
            <Show when=move || ctx.is_admin()>
                <form class="form-grid" on:submit=submit novalidate aria-label="New team">
                    <TextField id="team-name" label="Team name" value=name error field="name"/>
                    <button type="submit" class="btn-primary">"Create team"</button>
                </form>
                <FieldError error field="name" label="Team name"/>
            </Show>
            <FormError error fields=&["name"]/>
            <Saved saved/>
            <h3>"Hosts"</h3>
            <PollStatus res=hosts_res has_data=has_hosts/>
            {move || {
                let list = hosts.get().unwrap_or_default();
                let team_list = teams.get().unwrap_or_default();
                let admin = ctx.is_admin();
                view! {
                    <DataTable
                        class="host-table"
                        caption="Hosts and their teams"
                        columns={[
                            Column::text("Host"),
                            Column::text("Assigned team"),
                            Column::text("GPUs count for"),
                        ]}
                    >
                        {list.into_iter().map(|h| {
                            let host = h.host.clone();
                            let effective = {
                                let mut v: Vec<String> = h.gpus.iter().map(|g| match (&g.team_name, &g.team_source) {
                                    (Some(t), Some(src)) => format!("{t} (from {src})"),
                                    (Some(t), None) => t.clone(),
                                    (None, _) => "no team".into(),
                                }).collect();
                                v.sort();
                                v.dedup();
                                v.join(", ")
                            };
                            let assigned = h.assigned_team_id;
                            let current = team_list.iter().find(|t| Some(t.id) == assigned).map(|t| t.name.clone());
                            view! {
                                <tr data-host=h.host.clone()>
                                    <th scope="row">{h.host.clone()}</th>
                                    <td>
                                        {if admin {
                                            view! {
                                                <select
                                                    aria-label=format!("Team of host {}", h.host)
                                                    on:change=move |ev| {
                                                        let v = event_target_value(&ev);
                                                        assign(host.clone(), v.parse().ok());
                                                    }
                                                >
                                                    <option value="" selected=assigned.is_none()>"— none —"</option>
                                                    {team_list.iter().map(|t| view! { <option value=t.id.to_string() selected=Some(t.id) == assigned>{t.name.clone()}</option> }).collect_view()}
                                                </select>
                                            }.into_any()
                                        } else {
                                            view! { <span>{current.unwrap_or_else(|| "—".into())}</span> }.into_any()
                                        }}
                                    </td>
                                    <td>{effective}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                }
            }}
        </Card>
    }
}

const SCOPES: [(&str, &str); 3] = [
    ("read", "read: dashboards, API reads"),
    ("ingest", "ingest: agents, job reports"),
    ("admin", "admin: everything"),
];

/// API keys: an admin's list is the organisation's, a member's their own. A new key's secret is
/// shown once.
#[component]
fn ApiKeys() -> impl IntoView {
    let ctx = use_app();
    let res = polled(api::api_keys);
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let list = Signal::derive(move || data.get().unwrap_or_default());
    let name = RwSignal::new(String::new());
    let scopes = RwSignal::new(vec!["read".to_string()]);
    let error = RwSignal::new(None::<ApiError>);
    let created = RwSignal::new(None::<fleetlens_api::accounts::CreatedKeyView>);
    let confirm = RwSignal::new(None::<ApiKeyId>);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let (n, sc) = (name.get_untracked(), scopes.get_untracked());
        spawn_local(async move {
            match api::create_api_key(n.trim(), &sc).await {
                Ok(k) => {
                    error.set(None);
                    created.set(Some(k));
                    name.set(String::new());
                    res.refetch();
                }
                Err(e) => {
                    created.set(None);
                    error.set(Some(e));
                }
            }
        });
    };
    let revoke = move |id: ApiKeyId| {
        confirm.set(None);
        spawn_local(async move {
            if show_error(error, api::revoke_api_key(id).await) {
                res.refetch();
            }
        });
    };
    view! {
        <Card title_id="keys-title" title="API keys">
            <p class="muted">
                {move || if ctx.is_admin() { "Every key of the organisation." } else { "Your keys." }}
                " Agents send with an " <code>"ingest"</code> " key; scripts read with a " <code>"read"</code>
                " key. A key never grants more than its maker's role."
            </p>
            <PollStatus res has_data>
                <NonEmpty items=list empty="No API key yet." let:list>
                    <DataTable
                        class="key-table"
                        caption="API keys"
                        columns={[
                            Column::text("Name"),
                            Column::text("Key"),
                            Column::text("Scopes"),
                            Column::text("Created"),
                            Column::text("Last used"),
                            Column::hidden("Actions"),
                        ]}
                    >
                        {list.into_iter().map(|k| {
                            let id = k.id;
                            let name = k.name.clone();
                            view! {
                                <tr data-key-id=k.id.to_string()>
                                    <th scope="row">{k.name.clone()}</th>
                                    <td><code>{format!("{}…", k.prefix)}</code></td>
                                    <td>{k.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")}</td>
                                    <td>{format::date_time(k.created_ms)}</td>
                                    <td>{k.last_used_ms.map(format::date_time).unwrap_or_else(|| "never".into())}</td>
                                    <td>
                                        {if k.revoked {
                                            view! { <span class="pill pill-muted">"revoked"</span> }.into_any()
                                        } else {
                                            view! {
                                                <div class="actions">
                                                    <ConfirmButton
                                                        asking=confirm
                                                        id
                                                        label="Revoke"
                                                        confirm_label="Confirm revoke"
                                                        aria_label=format!("Revoke key {name}")
                                                        on_confirm=Callback::new(move |()| revoke(id))
                                                    />
                                                </div>
                                            }.into_any()
                                        }}
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                </NonEmpty>
            </PollStatus>
            <form class="form-grid" on:submit=submit novalidate aria-label="New API key">
                <TextField id="key-name" label="Name" value=name error field="name"/>
                <fieldset class="checks">
                    <legend>"Scopes"</legend>
                    {SCOPES.iter().filter(|(s, _)| *s != "admin" || ctx.is_admin()).map(|(scope, label)| {
                        let scope = scope.to_string();
                        let s2 = scope.clone();
                        view! {
                            <label class="check">
                                <input
                                    type="checkbox"
                                    name="scope"
                                    value=scope.clone()
                                    prop:checked=move || scopes.with(|v| v.contains(&scope))
                                    on:change=move |ev| {
                                        let on = event_target_checked(&ev);
                                        scopes.update(|v| {
                                            v.retain(|x| *x != s2);
                                            if on { v.push(s2.clone()) }
                                        });
                                    }
                                />
                                <span>{*label}</span>
                            </label>
                        }
                    }).collect_view()}
                </fieldset>
                <button type="submit" class="btn-primary">"Create key"</button>
            </form>
            <FieldError error field="name" label="Name"/>
            <FieldError error field="scopes" label="Scopes"/>
            <FormError error fields=&["name", "scopes"]/>
            {move || created.get().map(|k| view! {
                <div class="banner banner-ok new-key" role="status">
                    <p>{format!("Key “{}” created. Copy it now: it is not shown again.", k.view.name)}</p>
                    <p><code class="secret" data-testid="new-key">{k.key}</code></p>
                </div>
            })}
        </Card>
    }
}

/// Users of the organisation (admins only): add, change role, disable, delete.
#[component]
fn Users() -> impl IntoView {
    let ctx = use_app();
    let res = polled(api::users);
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let (email, name, password) =
        (RwSignal::new(String::new()), RwSignal::new(String::new()), RwSignal::new(String::new()));
    let role = RwSignal::new(Role::Member);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let confirm = RwSignal::new(None::<UserId>);
    let done = move |out: Result<String, ApiError>| {
        if show_outcome(error, saved, out) {
            res.refetch();
        }
    };
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let n = name.get_untracked().trim().to_string();
        let body = NewUserBody {
            email: email.get_untracked().trim().to_string(),
            name: (!n.is_empty()).then_some(n),
            password: password.get_untracked(),
            role: role.get_untracked(),
        };
        spawn_local(async move {
            let out = api::create_user(&body).await.map(|u| format!("User {} added as {}.", u.email, u.role.as_str()));
            if out.is_ok() {
                for s in [email, name, password] {
                    s.set(String::new());
                }
            }
            done(out);
        });
    };
    let update = move |id: UserId, body: UserPatch, what: String| {
        spawn_local(async move { done(api::update_user(id, &body).await.map(|_| what)) });
    };
    let delete = move |id: UserId, who: String| {
        confirm.set(None);
        spawn_local(async move { done(api::delete_user(id).await.map(|()| format!("User {who} deleted."))) });
    };
    let me_id = move || ctx.me.with(|m| m.as_ref().and_then(|m| m.user.as_ref().map(|u| u.id)));
    view! {
        <Card title_id="users-title" title="Users">
            <p class="muted">"Viewers read; members also send data and make their own keys; admins change everything."</p>
            <PollStatus res has_data>
                {move || {
                    let list = data.get().unwrap_or_default();
                    let me = me_id();
                    view! {
                        <DataTable
                            class="user-table"
                            caption="Users"
                            columns={[
                                Column::text("User"),
                                Column::text("Role"),
                                Column::text("Status"),
                                Column::text("Last login"),
                                Column::hidden("Actions"),
                            ]}
                        >
                            {list.into_iter().map(|u| {
                                let id = u.id;
                                let is_me = me == Some(id);
                                let (e1, e2, e3) = (u.email.clone(), u.email.clone(), u.email.clone());
                                let disabled = u.disabled;
                                view! {
                                    <tr data-user-id=u.id.to_string()>
                                        <th scope="row">{u.name.clone()}<span class="cell-note">{u.email.clone()}</span></th>
                                        <td>
                                            <select
                                                aria-label=format!("Role of {}", u.email)
                                                disabled=is_me
                                                on:change=move |ev| {
                                                    if let Some(r) = Role::parse(&event_target_value(&ev)) {
                                                        update(id, UserPatch { role: Some(r), ..Default::default() }, format!("{e1} is now {r}."));
                                                    }
                                                }
                                            >
                                                {Role::ALL.map(|r| view! { <option value=r.as_str() selected=u.role == r>{r.as_str()}</option> }).collect_view()}
                                            </select>
                                        </td>
                                        <td>{if disabled { view! { <span class="pill pill-muted">"disabled"</span> }.into_any() } else { view! { <span class="pill pill-ok">"enabled"</span> }.into_any() }}</td>
                                        <td>{u.last_login_ms.map(format::date_time).unwrap_or_else(|| "never".into())}</td>
                                        <td>
                                            {(!is_me).then(|| view! {
                                                <div class="actions">
                                                    <button type="button" class="btn" on:click=move |_| update(id, UserPatch { disabled: Some(!disabled), ..Default::default() }, format!("{e2} is now {}.", if disabled { "enabled" } else { "disabled" }))>
                                                        {if disabled { "Enable" } else { "Disable" }}
                                                    </button>
                                                    <ConfirmButton
                                                        asking=confirm
                                                        id
                                                        label="Delete"
                                                        confirm_label="Confirm delete"
                                                        on_confirm=Callback::new(move |()| delete(id, e3.clone()))
                                                    />
                                                </div>
                                            })}
                                        </td>
                                    </tr>
                                }
                            }).collect_view()}
                        </DataTable>
                    }
                }}
            </PollStatus>
            <form class="form-grid" on:submit=submit novalidate aria-label="Add a user">
                <TextField id="user-email" label="Email" value=email error field="email" input_type="email"/>
                <TextField id="user-name" label="Name" value=name/>
                <TextField id="user-password" label="Password (8 characters or more)" value=password error field="password" input_type="password" autocomplete="new-password"/>
                <label for="user-role">
                    <span>"Role"</span>
                    <select id="user-role" on:change=move |ev| if let Some(r) = Role::parse(&event_target_value(&ev)) { role.set(r) }>
                        {Role::ALL.map(|r| view! { <option value=r.as_str() selected=r == Role::Member>{r.as_str()}</option> }).collect_view()}
                    </select>
                </label>
                <button type="submit" class="btn-primary">"Add user"</button>
            </form>
            <FieldError error field="email" label="Email"/>
            <FieldError error field="password" label="Password"/>
            <FormError error fields=&["email", "password"]/>
            <Saved saved/>
        </Card>
    }
}

/// The classifier's thresholds, grouped by the state they decide (METRICS.md), in its order.
const THRESHOLD_GROUPS: &[(&str, &[(&str, &str)])] = &[
    (
        "Windows",
        &[("window_s", "Evaluation window (s)"), ("offline_missing_intervals", "Offline after missing intervals")],
    ),
    (
        "idle / idle_held",
        &[
            ("idle_max_util_pct", "Idle: kernel utilization below (%)"),
            ("idle_held_min_mem_bytes", "Held: memory used at least (bytes)"),
            ("idle_held_max_sm_active_pct", "Held: SM activity below (%)"),
        ],
    ),
    (
        "stalled",
        &[
            ("stalled_min_util_pct", "Kernel utilization at least (%)"),
            ("stalled_max_sm_active_pct", "SM activity below (%)"),
            ("stalled_max_power_pct_of_limit", "Power below (% of limit)"),
        ],
    ),
    (
        "hollow",
        &[
            ("hollow_min_util_pct", "Kernel utilization at least (%)"),
            ("hollow_max_sm_util_ratio", "SM activity ÷ utilization below (0–1)"),
        ],
    ),
    (
        "starved",
        &[
            ("starved_max_busy_pct", "max(utilization, SM activity) below (%)"),
            ("starved_min_sm_active_pct", "Some work: SM activity at least (%)"),
            ("starved_min_util_pct", "… or kernel utilization at least (%)"),
        ],
    ),
    (
        "low_occupancy",
        &[
            ("low_occupancy_min_sm_active_pct", "SM activity at least (%)"),
            ("low_occupancy_max_sm_occupancy_pct", "SM occupancy below (%)"),
            ("low_occupancy_max_tensor_pct", "Tensor activity below (%)"),
            ("low_occupancy_max_dram_pct", "DRAM activity below (%)"),
        ],
    ),
    (
        "memory_bound",
        &[
            ("memory_bound_min_sm_active_pct", "SM activity at least (%)"),
            ("memory_bound_min_dram_pct", "DRAM activity at least (%)"),
            ("memory_bound_max_tensor_pct", "Tensor activity below (%)"),
        ],
    ),
    (
        "compute_bound",
        &[
            ("compute_bound_min_sm_active_pct", "SM activity at least (%)"),
            ("compute_bound_min_tensor_pct", "Tensor activity at least (%)"),
            ("compute_bound_min_fp_pipe_pct", "… or an FP pipe at least (%)"),
        ],
    ),
    (
        "Hints",
        &[
            ("right_size_max_p95_sm_active_pct", "Right-size: p95 SM activity below (%)"),
            ("right_size_memory_headroom_pct", "Right-size: memory headroom (%)"),
            ("collocation_max_sum_p95_sm_active_pct", "Collocation: summed p95 SM activity at most (%)"),
        ],
    ),
];

/// Thresholds the groups above do not name (added on the server later) still show, last.
fn threshold_groups(values: &Map<String, Value>) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = THRESHOLD_GROUPS
        .iter()
        .map(|(g, fields)| (g.to_string(), fields.iter().map(|(k, l)| (k.to_string(), l.to_string())).collect()))
        .collect();
    let known: Vec<&str> = THRESHOLD_GROUPS.iter().flat_map(|(_, f)| f.iter().map(|(k, _)| *k)).collect();
    let other: Vec<(String, String)> =
        values.keys().filter(|k| !known.contains(&k.as_str())).map(|k| (k.clone(), k.replace('_', " "))).collect();
    if !other.is_empty() {
        out.push(("Other".into(), other));
    }
    out
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[component]
fn Thresholds() -> impl IntoView {
    let ctx = use_app();
    // Read once (and after each save), not on the poll tick: a poll must not undo typing.
    let version = RwSignal::new(0u32);
    let res = LocalResource::new(move || {
        version.track();
        api::thresholds()
    });
    let loaded = latest_ok(res);
    let has_data = Signal::derive(move || loaded.with(Option::is_some));
    let drafts = RwSignal::new(BTreeMap::<String, String>::new());
    Effect::new(move || {
        if let Some(v) = loaded.get() {
            drafts.set(v.iter().map(|(k, v)| (k.clone(), value_text(v))).collect());
        }
    });
    let error = RwSignal::new(None::<ApiError>);
    let local_error = RwSignal::new(None::<(String, String)>);
    let saved = RwSignal::new(None::<String>);
    let put = move |body: Map<String, Value>, done: &'static str| {
        spawn_local(async move {
            if show_outcome(error, saved, api::put_thresholds(&body).await.map(|_| done.into())) {
                version.update(|v| *v += 1);
            }
        });
    };
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        local_error.set(None);
        let mut body = Map::new();
        for (k, text) in drafts.get_untracked() {
            match text.trim().parse::<f64>() {
                Ok(v) if v.is_finite() => {
                    let n = if v.fract() == 0.0 && v.abs() < 9e15 {
                        Value::from(v as i64)
                    } else {
                        serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null)
                    };
                    body.insert(k, n);
                }
                _ => {
                    local_error.set(Some((k, "enter a number".into())));
                    return;
                }
            }
        }
        put(body, "Thresholds saved: new windows are classified with them.");
    };
    let reset = move |_| put(Map::new(), "Thresholds reset to the defaults.");
    let field_error = move |key: &str| -> Option<String> {
        if let Some((k, m)) = local_error.get().filter(|(k, _)| k == key) {
            return Some(format!("{k}: {m}"));
        }
        error.get().filter(|e| e.is_about(key)).map(|e| e.message)
    };

    view! {
        <Card title_id="thresholds-title" title="Workload-state thresholds">
            <p class="muted">
                "How each window is classified (METRICS.md); checks run in this order and the first match wins. "
                {move || (!ctx.is_admin()).then_some("Only an admin can change them.")}
            </p>
            <PollStatus res has_data>
                <form on:submit=submit novalidate aria-label="Classifier thresholds">
                    <div class="th-grid">
                        {move || {
                            let values = loaded.get().unwrap_or_default();
                            threshold_groups(&values)
                                .into_iter()
                                .map(|(group, fields)| {
                                    view! {
                                        <fieldset>
                                            <legend>{group}</legend>
                                            {fields
                                                .into_iter()
                                                .map(|(key, label)| {
                                                    let id = format!("th-{key}");
                                                    let for_id = id.clone();
                                                    let k1 = key.clone();
                                                    let k2 = key.clone();
                                                    let k3 = key.clone();
                                                    let k4 = key.clone();
                                                    view! {
                                                        <label for=for_id>
                                                            <span>{label}</span>
                                                            <input
                                                                id=id
                                                                name=key.clone()
                                                                inputmode="decimal"
                                                                disabled=move || !ctx.is_admin()
                                                                aria-invalid=move || field_error(&k3).is_some().to_string()
                                                                prop:value=move || drafts.with(|d| d.get(&k1).cloned().unwrap_or_default())
                                                                on:input=move |ev| {
                                                                    let v = event_target_value(&ev);
                                                                    drafts.update(|d| {
                                                                        d.insert(k2.clone(), v);
                                                                    });
                                                                }
                                                            />
                                                        </label>
                                                        {move || field_error(&k4).map(|m| view! { <p class="field-error" role="alert">{m}</p> })}
                                                    }
                                                })
                                                .collect_view()}
                                        </fieldset>
                                    }
                                })
                                .collect_view()
                        }}
                    </div>
                    <Show when=move || ctx.is_admin()>
                        <div class="row">
                            <button type="submit" class="btn-primary">"Save thresholds"</button>
                            <button type="button" class="btn" on:click=reset>"Reset to defaults"</button>
                        </div>
                    </Show>
                </form>
            </PollStatus>
            <ActionError error/>
            <Saved saved/>
        </Card>
    }
}

#[component]
fn Prices() -> impl IntoView {
    let res = polled(api::prices);
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let model = RwSignal::new(SPECS[0].id.to_string());
    let price = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let local_error = RwSignal::new(None::<String>);

    // Writes the organisation's table with one entry changed (None: removed).
    let save = move |key: String, value: Option<f64>| {
        let Some(p) = data.get_untracked() else { return };
        let mut table = p.overrides.clone().unwrap_or_else(|| PriceTable::empty(&p.currency, "organisation prices"));
        match value {
            Some(v) => table.set(&key, v),
            None => {
                table.per_gpu_hour.remove(&key);
            }
        }
        spawn_local(async move {
            if show_error(error, api::put_prices(&table).await) {
                res.refetch();
            }
        });
    };
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        match price.get_untracked().trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => {
                local_error.set(None);
                save(model.get_untracked(), Some(v));
                price.set(String::new());
            }
            _ => local_error.set(Some("Enter a price per GPU-hour, e.g. 2.50.".into())),
        }
    };

    view! {
        <Card title_id="prices-title" title="GPU-hour prices">
            <p class="muted">"Cost and wasted cost use your prices where set, else the shipped defaults."</p>
            <PollStatus res has_data>
                <PriceTableView prices=data on_remove=Callback::new(move |k: String| save(k, None))/>
            </PollStatus>
            <Show when=move || use_app().is_admin()>
            <form class="form-grid" on:submit=submit aria-label="Set a price">
                <label>
                    <span>"GPU model"</span>
                    <select on:change=move |ev| model.set(event_target_value(&ev))>
                        {SPECS.iter().map(|s| view! { <option value=s.id>{s.display_name}</option> }).collect_view()}
                    </select>
                </label>
                <label>
                    <span>"Price per GPU-hour"</span>
                    <input inputmode="decimal" required prop:value=move || price.get() on:input=move |ev| price.set(event_target_value(&ev))/>
                </label>
                <button type="submit" class="btn-primary">"Set price"</button>
            </form>
            </Show>
            <ErrorMessage message=local_error/>
            <ActionError error/>
        </Card>
    }
}

#[component]
fn PriceTableView(prices: Latest<Prices>, on_remove: Callback<String>) -> impl IntoView {
    move || {
        let Some(p) = prices.get() else { return ().into_any() };
        let admin = use_app().is_admin();
        let own = p.own();
        let cur = p.currency.clone();
        let rows = SPECS
            .iter()
            .map(|s| {
                let default = p.defaults.price_of(s.model);
                let mine = own.get(s.id).copied();
                let key = s.id.to_string();
                view! {
                    <tr>
                        <th scope="row">{s.display_name}</th>
                        <td class="num">{default.map(|d| format!("{}/h", format::money(d, &cur))).unwrap_or_else(|| "no price set".into())}</td>
                        <td class="num">{mine.map(|m| format!("{}/h", format::money(m, &cur))).unwrap_or_else(|| "—".into())}</td>
                        <td>
                            {(admin && mine.is_some()).then(|| {
                                let key = key.clone();
                                view! { <button type="button" class="btn-quiet" on:click=move |_| on_remove.run(key.clone())>"Use default"</button> }
                            })}
                        </td>
                    </tr>
                }
            })
            .collect_view();
        // Entries for models the datasheet does not know (keyed by NVML name).
        let extra = own
            .iter()
            .filter(|(k, _)| GpuModel::from_id(k).is_none())
            .map(|(k, v)| {
                let key = k.clone();
                view! {
                    <tr>
                        <th scope="row">{k.clone()}</th>
                        <td class="num">"no price set"</td>
                        <td class="num">{format!("{}/h", format::money(*v, &cur))}</td>
                        <td>{admin.then(|| view! { <button type="button" class="btn-quiet" on:click=move |_| on_remove.run(key.clone())>"Remove"</button> })}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <details>
                <summary>{format!("Prices per model ({} set by you)", own.len())}</summary>
                <p class="muted small">{p.defaults.source.clone()}</p>
                <DataTable
                    class=""
                    columns={[Column::text("Model"), Column::num("Default"), Column::num("Yours"), Column::hidden("Actions")]}
                >
                    {rows}
                    {extra}
                </DataTable>
            </details>
        }
        .into_any()
    }
}
