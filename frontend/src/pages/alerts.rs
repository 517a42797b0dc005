//! Alerts: alert instances (`GET /api/v1/alerts?status=`) and the rules that raise them
//! (`GET /api/v1/alert-rules`).

use leptos::prelude::*;

use crate::api;
use crate::components::status::PollStatus;
use crate::ctx::{latest_ok, now_ms, polled, use_app};
use crate::format;
use crate::wire::{Alert, Rule};

fn status_class(a: &Alert) -> &'static str {
    match (a.silenced, a.status.as_str()) {
        (true, _) => "pill pill-muted",
        (_, "firing") => "pill pill-bad",
        (_, "pending") => "pill pill-warn",
        (_, "resolved") => "pill pill-ok",
        _ => "pill pill-muted",
    }
}

/// `GPU-b8c24ac0-…` → `b8c24ac0`: enough to tell a host's GPUs apart.
fn short_uuid(uuid: &str) -> String {
    uuid.trim_start_matches("GPU-").trim_start_matches("MIG-").chars().take(8).collect()
}

#[component]
pub fn AlertsPage() -> impl IntoView {
    super::set_title("Alerts");
    let status = RwSignal::new("open".to_string());
    let alerts = polled(move || {
        let s = status.get();
        async move { api::alerts(&s).await }
    });
    let alerts_data = latest_ok(alerts);
    let rules = polled(api::alert_rules);
    let rules_data = latest_ok(rules);
    let has_alerts = Signal::derive(move || alerts_data.with(Option::is_some));
    let has_rules = Signal::derive(move || rules_data.with(Option::is_some));
    let alert_list =
        Signal::derive(move || alerts_data.with(|d| d.as_ref().map(|d| d.alerts.clone()).unwrap_or_default()));
    let rule_list =
        Signal::derive(move || rules_data.with(|d| d.as_ref().map(|d| d.rules.clone()).unwrap_or_default()));

    view! {
        <div class="page-head">
            <h1>"Alerts"</h1>
            <p class="muted">
                {move || {
                    let firing = alert_list.with(|a| a.iter().filter(|a| a.status == "firing" && !a.silenced).count());
                    format!("{firing} firing")
                }}
            </p>
        </div>
        <section class="card" aria-labelledby="alerts-title">
            <div class="section-head">
                <h2 id="alerts-title">"Alert instances"</h2>
                <label class="inline">
                    <span>"Status"</span>
                    <select on:change=move |ev| status.set(event_target_value(&ev))>
                        <option value="open" selected=true>"Open (firing or pending)"</option>
                        <option value="firing">"Firing"</option>
                        <option value="pending">"Pending"</option>
                        <option value="resolved">"Resolved"</option>
                        <option value="all">"All"</option>
                    </select>
                </label>
            </div>
            <PollStatus res=alerts has_data=has_alerts/>
            <Show when=move || has_alerts.get()>
                <AlertTable alerts=alert_list/>
            </Show>
        </section>
        <section class="card" aria-labelledby="rules-title">
            <h2 id="rules-title">"Rules"</h2>
            <p class="muted">
                "A condition is an expression over the metric names and " <code>"state"</code> ", e.g. "
                <code>"gpu_util_pct >= 80 && sm_active_pct < 30"</code> " (busy but hollow)."
            </p>
            <PollStatus res=rules has_data=has_rules/>
            <Show when=move || has_rules.get()>
                <RuleTable rules=rule_list/>
            </Show>
        </section>
    }
}

#[component]
fn AlertTable(alerts: Signal<Vec<Alert>>) -> impl IntoView {
    let ctx = use_app();
    move || {
        let list = alerts.get();
        if list.is_empty() {
            return view! { <p class="empty">"No alert in this status."</p> }.into_any();
        }
        ctx.tick.track();
        let now = now_ms();
        view! {
            <div class="table-wrap">
                <table class="data">
                    <caption class="sr-only">"Alert instances"</caption>
                    <thead>
                        <tr>
                            <th scope="col">"Status"</th>
                            <th scope="col">"Severity"</th>
                            <th scope="col">"Rule"</th>
                            <th scope="col">"GPU"</th>
                            <th scope="col">"Summary"</th>
                            <th scope="col">"Since"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {list
                            .into_iter()
                            .map(|a| {
                                let since = a.fired_at_ms.unwrap_or(a.active_since_ms);
                                let when = match a.resolved_at_ms {
                                    Some(r) => format!("{} – {}", format::date_time(since), format::date_time(r)),
                                    None => format!("{} ({})", format::date_time(since), format::ago(since, now)),
                                };
                                view! {
                                    <tr>
                                        <td>
                                            <span class=status_class(&a)>{a.status.clone()}</span>
                                            {a.silenced.then(|| view! { " " <span class="pill pill-muted">"silenced"</span> })}
                                        </td>
                                        <td>{a.severity.clone()}</td>
                                        <td>{a.rule_name.clone()}</td>
                                        <td>
                                            <a href=format!("/gpus/{}", a.gpu)>{a.host.clone()}</a>
                                            <span class="cell-note">{short_uuid(&a.gpu)}</span>
                                        </td>
                                        <td>{a.summary.clone()}</td>
                                        <td>{when}</td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </tbody>
                </table>
            </div>
        }
        .into_any()
    }
}

#[component]
fn RuleTable(rules: Signal<Vec<Rule>>) -> impl IntoView {
    move || {
        let list = rules.get();
        if list.is_empty() {
            return view! { <p class="empty">"No alert rule yet."</p> }.into_any();
        }
        view! {
            <div class="table-wrap">
                <table class="data">
                    <caption class="sr-only">"Alert rules"</caption>
                    <thead>
                        <tr>
                            <th scope="col">"Rule"</th>
                            <th scope="col">"Condition"</th>
                            <th scope="col" class="num">"For"</th>
                            <th scope="col">"Severity"</th>
                            <th scope="col">"Enabled"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {list
                            .into_iter()
                            .map(|r| {
                                view! {
                                    <tr>
                                        <th scope="row">
                                            {r.name.clone()}
                                            {r.builtin.is_some().then(|| view! { " " <span class="pill pill-muted">"shipped"</span> })}
                                            {(!r.description.is_empty()).then(|| view! { <span class="cell-note">{r.description.clone()}</span> })}
                                        </th>
                                        <td><code>{r.condition.clone()}</code></td>
                                        <td class="num">{format::duration_ms(r.for_s * 1000)}</td>
                                        <td>{r.severity.clone()}</td>
                                        <td>{if r.enabled { "yes" } else { "no" }}</td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </tbody>
                </table>
            </div>
        }
        .into_any()
    }
}
