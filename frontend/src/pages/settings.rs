//! Settings: the connection (API key, live updates), notification channels
//! (`GET|POST /api/v1/notification-channels`) and GPU-hour prices (`GET|PUT /api/v1/prices`:
//! the shipped public defaults and the organisation's own).

use fleetlens_core::{GpuModel, PriceTable, SPECS};
use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_navigate;

use crate::api::{self, ApiError};
use crate::components::status::{ActionError, PollStatus};
use crate::ctx::{latest_ok, polled, use_app};
use crate::format;
use crate::wire::{Channel, Prices};

fn masked(key: &str) -> String {
    let head: String = key.chars().take(6).collect();
    format!("{head}…  ({} characters)", key.chars().count())
}

#[component]
pub fn SettingsPage() -> impl IntoView {
    super::set_title("Settings");
    let ctx = use_app();
    let navigate = use_navigate();
    let log_out = move |_| {
        ctx.log_out();
        navigate("/login", Default::default());
    };
    view! {
        <div class="page-head"><h1>"Settings"</h1></div>
        <section class="card" aria-labelledby="conn-title">
            <h2 id="conn-title">"Connection"</h2>
            <dl class="adv adv-wide">
                <div class="adv-row"><dt>"API key"</dt><dd><code>{move || ctx.key.get().map(|k| masked(&k)).unwrap_or_default()}</code></dd></div>
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
        <Channels/>
        <Prices/>
    }
}

#[component]
fn Channels() -> impl IntoView {
    let res = polled(api::channels);
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let list = Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.channels.clone()).unwrap_or_default()));
    let name = RwSignal::new(String::new());
    let kind = RwSignal::new("slack".to_string());
    let url = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let (n, k, u) = (name.get_untracked(), kind.get_untracked(), url.get_untracked());
        spawn_local(async move {
            match api::create_channel(n.trim(), &k, u.trim()).await {
                Ok(c) => {
                    error.set(None);
                    saved.set(Some(format!("Channel “{}” added.", c.name)));
                    name.set(String::new());
                    url.set(String::new());
                    res.refetch();
                }
                Err(e) => {
                    saved.set(None);
                    error.set(Some(e));
                }
            }
        });
    };
    view! {
        <section class="card" aria-labelledby="channels-title">
            <h2 id="channels-title">"Notification channels"</h2>
            <PollStatus res has_data/>
            <Show when=move || has_data.get()>
                <ChannelTable list/>
            </Show>
            <form class="form-grid" on:submit=submit aria-label="Add a notification channel">
                <label>
                    <span>"Name"</span>
                    <input required prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                </label>
                <label>
                    <span>"Kind"</span>
                    <select on:change=move |ev| kind.set(event_target_value(&ev))>
                        <option value="slack">"Slack"</option>
                        <option value="webhook">"Webhook"</option>
                        <option value="alertmanager">"Alertmanager"</option>
                    </select>
                </label>
                <label class="grow">
                    <span>"URL"</span>
                    <input type="url" required prop:value=move || url.get() on:input=move |ev| url.set(event_target_value(&ev))/>
                </label>
                <button type="submit" class="btn-primary">"Add channel"</button>
            </form>
            <ActionError error/>
            {move || saved.get().map(|s| view! { <p class="banner banner-ok" role="status">{s}</p> })}
        </section>
    }
}

#[component]
fn ChannelTable(list: Signal<Vec<Channel>>) -> impl IntoView {
    move || {
        let l = list.get();
        if l.is_empty() {
            return view! { <p class="empty">"No channel yet: alerts show only on the Alerts page."</p> }.into_any();
        }
        view! {
            <div class="table-wrap">
                <table class="data">
                    <caption class="sr-only">"Notification channels"</caption>
                    <thead><tr><th scope="col">"Name"</th><th scope="col">"Kind"</th><th scope="col">"URL"</th><th scope="col">"Default"</th></tr></thead>
                    <tbody>
                        {l.into_iter().map(|c| view! {
                            <tr>
                                <th scope="row">{c.name}</th>
                                <td>{c.kind}</td>
                                <td class="cmd">{c.url}</td>
                                <td>{if c.default { "yes" } else { "no" }}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        }
        .into_any()
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
            {move || local_error.get().map(|e| view! { <p class="banner banner-error" role="alert">{e}</p> })}
            <ActionError error/>
        </section>
    }
}

#[component]
fn PriceTableView(prices: Signal<Option<Prices>>, on_remove: Callback<String>) -> impl IntoView {
    move || {
        let Some(p) = prices.get() else { return ().into_any() };
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
                            {mine.is_some().then(|| {
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
                        <td><button type="button" class="btn-quiet" on:click=move |_| on_remove.run(key.clone())>"Remove"</button></td>
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
