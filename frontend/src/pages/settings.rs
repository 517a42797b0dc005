//! Settings: the account (who is logged in, live updates, log out), the classifier's
//! thresholds (`GET|PUT /api/v1/settings/thresholds`) and GPU-hour prices
//! (`GET|PUT /api/v1/prices`: the shipped public defaults and the organisation's own). Viewers
//! see the values; only admins get the controls that change them.

use std::collections::BTreeMap;

use fleetlens_core::{GpuModel, PriceTable, SPECS};
use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_navigate;
use serde_json::{Map, Value};

use crate::api::{self, ApiError};
use crate::components::status::{ActionError, PollStatus};
use crate::ctx::{latest_ok, polled, use_app};
use crate::format;
use crate::wire::Prices;

#[component]
pub fn SettingsPage() -> impl IntoView {
    super::set_title("Settings");
    let ctx = use_app();
    let navigate = use_navigate();
    let log_out = move |_| {
        let navigate = navigate.clone();
        spawn_local(async move {
            ctx.log_out().await;
            navigate("/login", Default::default());
        });
    };
    let me = move || ctx.me.get().unwrap_or_default();
    view! {
        <div class="page-head"><h1>"Settings"</h1></div>
        <section class="card" aria-labelledby="account-title">
            <h2 id="account-title">"Account"</h2>
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
                        <div class="adv-row"><dt>"Signed in with"</dt><dd>{if m.via == "session" { "a session (email and password)" } else { "an API key" }}</dd></div>
                    }
                }}
                <div class="adv-row"><dt>"Server"</dt><dd><code>{window().location().origin().unwrap_or_default()}</code></dd></div>
            </dl>
            <div class="row">
                <label class="check">
                    <input type="checkbox" prop:checked=move || ctx.live.get() on:change=move |ev| ctx.live.set(event_target_checked(&ev))/>
                    <span>"Live updates (refresh every 5 seconds)"</span>
                </label>
                <button type="button" class="btn" on:click=log_out>"Log out"</button>
            </div>
        </section>
        <Thresholds/>
        <Prices/>
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
            match api::put_thresholds(&body).await {
                Ok(_) => {
                    error.set(None);
                    saved.set(Some(done.into()));
                    version.update(|v| *v += 1);
                }
                Err(e) => {
                    saved.set(None);
                    error.set(Some(e));
                }
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
        <section class="card" aria-labelledby="thresholds-title">
            <h2 id="thresholds-title">"Workload-state thresholds"</h2>
            <p class="muted">
                "How each window is classified (METRICS.md); checks run in this order and the first match wins. "
                {move || (!ctx.is_admin()).then_some("Only an admin can change them.")}
            </p>
            <PollStatus res has_data/>
            <Show when=move || has_data.get()>
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
            </Show>
            <ActionError error/>
            {move || saved.get().map(|s| view! { <p class="banner banner-ok" role="status">{s}</p> })}
        </section>
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
            match api::put_prices(&table).await {
                Ok(_) => {
                    error.set(None);
                    res.refetch();
                }
                Err(e) => error.set(Some(e)),
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
        <section class="card" aria-labelledby="prices-title">
            <h2 id="prices-title">"GPU-hour prices"</h2>
            <p class="muted">"Cost and wasted cost use your prices where set, else the shipped defaults."</p>
            <PollStatus res has_data/>
            <Show when=move || has_data.get()>
                <PriceTableView prices=Signal::derive(move || data.get()) on_remove=Callback::new(move |k: String| save(k, None))/>
            </Show>
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
            {move || local_error.get().map(|e| view! { <p class="banner banner-error" role="alert">{e}</p> })}
            <ActionError error/>
        </section>
    }
}

#[component]
fn PriceTableView(prices: Signal<Option<Prices>>, on_remove: Callback<String>) -> impl IntoView {
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
                <div class="table-wrap">
                    <table class="data">
                        <thead>
                            <tr>
                                <th scope="col">"Model"</th>
                                <th scope="col" class="num">"Default"</th>
                                <th scope="col" class="num">"Yours"</th>
                                <th scope="col"><span class="sr-only">"Actions"</span></th>
                            </tr>
                        </thead>
                        <tbody>{rows}{extra}</tbody>
                    </table>
                </div>
            </details>
        }
        .into_any()
    }
}
