//! The fleet page: cost and wasted cost, "you could save $X/month", the utilization funnel with
//! the dollars lost at each step, hours per workload state, and the GPUs wasting the most.

use fleetlens_api::{FleetSummary, GpuWaste};
use leptos::prelude::*;

use crate::api;
use crate::charts::distribution::StateDistribution;
use crate::charts::funnel::Funnel;
use crate::components::state_badge::StateBadge;
use crate::components::status::PollStatus;
use crate::ctx::{latest_ok, polled, use_app};
use crate::format;

#[component]
pub fn FleetPage() -> impl IntoView {
    super::set_title("Fleet");
    let ctx = use_app();
    let res = polled(move || {
        let (from, to) = ctx.range.get().window();
        api::fleet_summary(from, to)
    });
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let pick = move |f: fn(&FleetSummary) -> String| move || data.with(|d| d.as_ref().map(f).unwrap_or_default());

    view! {
        <div class="page-head">
            <h1>"Fleet"</h1>
            <p class="muted">
                {move || ctx.range.get().long_label()} " · "
                {pick(|d| format!("{} GPUs · {} paid for · {} with a process", d.gpu_count, format::hours(d.paid_gpu_hours), format::hours(d.allocated_gpu_hours)))}
            </p>
        </div>
        <PollStatus res has_data/>
        <Show when=move || has_data.get()>
            <FleetBody data/>
        </Show>
    }
}

#[component]
fn FleetBody(data: Memo<Option<FleetSummary>>) -> impl IntoView {
    let d = move |f: fn(&FleetSummary) -> String| move || data.with(|d| d.as_ref().map(f).unwrap_or_default());
    let currency = Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.currency.clone()).unwrap_or_default()));
    let priced = Signal::derive(move || data.with(|d| d.as_ref().is_some_and(|d| d.cost.is_some())));
    let waste_share = move || {
        data.with(|d| {
            d.as_ref().and_then(|d| match (d.wasted_cost, d.cost) {
                (Some(w), Some(c)) if c > 0.0 => Some(format!("{} of the cost", format::frac(w / c))),
                _ => None,
            })
        })
    };
    let funnel = Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.funnel.clone()).unwrap_or_default()));
    let hours = Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.hours_by_state.clone()).unwrap_or_default()));
    let wasted =
        Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.wasted_cost_by_state.clone()).unwrap_or_default()));
    let wasters = Signal::derive(move || data.with(|d| d.as_ref().map(|d| d.top_wasters.clone()).unwrap_or_default()));
    let unpriced = move || {
        data.with(|d| {
            d.as_ref().filter(|d| !d.unpriced_models.is_empty()).map(|d| {
                format!(
                    "No price set for {} ({} not counted in cost). Set prices in Settings.",
                    d.unpriced_models.join(", "),
                    format::hours(d.unpriced_gpu_hours)
                )
            })
        })
    };

    view! {
        <section class="kpis" aria-label="Cost">
            <div class="kpi save">
                <span class="kpi-label">"You could save"</span>
                <span class="kpi-value" data-testid="projected-monthly-waste">
                    {d(|d| match d.projected_monthly_waste {
                        Some(v) => format!("{}/month", format::money(v, &d.currency)),
                        None => "no price set".into(),
                    })}
                </span>
                <span class="kpi-sub">"projected from the wasted cost of the last 7 days"</span>
            </div>
            <div class="kpi">
                <span class="kpi-label">"Cost"</span>
                <span class="kpi-value">{d(|d| format::opt_money(d.cost, &d.currency))}</span>
                <span class="kpi-sub">{d(|d| format!("{} paid for", format::hours(d.paid_gpu_hours)))}</span>
            </div>
            <div class="kpi waste">
                <span class="kpi-label">"Wasted cost"</span>
                <span class="kpi-value">{d(|d| format::opt_money(d.wasted_cost, &d.currency))}</span>
                <span class="kpi-sub">{move || waste_share().unwrap_or_else(|| "idle, held, stalled and unused SM time".into())}</span>
            </div>
            <div class="kpi">
                <span class="kpi-label">"Energy"</span>
                <span class="kpi-value">{d(|d| format!("{:.1} kWh", d.energy_kwh))}</span>
                <span class="kpi-sub">"measured by the GPUs"</span>
            </div>
        </section>
        {move || unpriced().map(|t| view! { <p class="banner banner-info">{t}</p> })}

        <section class="card" aria-labelledby="funnel-title">
            <h2 id="funnel-title">"Utilization funnel"</h2>
            <p class="muted">"Each level is a share of the GPU-time paid for. The gap between two levels is where the money goes."</p>
            <Funnel levels=funnel currency/>
        </section>

        <div class="two-col">
            <section class="card" aria-labelledby="states-title">
                <h2 id="states-title">"Where the GPU-hours went"</h2>
                <StateDistribution hours wasted currency priced/>
            </section>
            <section class="card" aria-labelledby="wasters-title">
                <h2 id="wasters-title">"Wasting the most"</h2>
                <Wasters wasters currency/>
            </section>
        </div>
        <p class="muted small">{d(|d| d.price_source.clone())}</p>
    }
}

#[component]
fn Wasters(wasters: Signal<Vec<GpuWaste>>, currency: Signal<String>) -> impl IntoView {
    move || {
        let list = wasters.get();
        if list.is_empty() {
            return view! { <p class="empty">"No GPU wasted time in this range."</p> }.into_any();
        }
        let cur = currency.get();
        view! {
            <ol class="wasters">
                {list
                    .into_iter()
                    .map(|w| {
                        let cost = match w.wasted_cost {
                            Some(c) => format::money(c, &cur),
                            None => "no price set".into(),
                        };
                        let right = w.right_size.as_ref().map(|r| {
                            format!(
                                "Right-size: a {} would do (p95 SM activity {}, peak memory {}), saving {}/month.",
                                fleetlens_core::GpuModel::from_id(&r.suggested_model)
                                    .map(|m| m.spec().display_name.to_string())
                                    .unwrap_or_else(|| r.suggested_model.clone()),
                                format::pct(r.p95_sm_active_pct),
                                format::gib(r.peak_mem_bytes),
                                format::money(r.saving_per_month, &cur)
                            )
                        });
                        view! {
                            <li class="waster">
                                <div class="waster-head">
                                    <a href=format!("/gpus/{}", w.uuid)>
                                        {w.name.clone().unwrap_or_else(|| "GPU".into())} " on " {w.host.clone()}
                                    </a>
                                    <StateBadge state=w.main_waste_state.clone()/>
                                </div>
                                <p class="waster-numbers">
                                    <strong class="waste">{cost}</strong>
                                    {format!(" wasted · {} of {} · efficiency {}", format::hours(w.wasted_hours), format::hours(w.paid_gpu_hours), w.efficiency.map(|e| format!("{e:.0}")).unwrap_or_else(|| "n/a".into()))}
                                </p>
                                {(!w.advice.is_empty()).then(|| view! { <p class="advice">{w.advice.clone()}</p> })}
                                {right.map(|r| view! { <p class="advice">{r}</p> })}
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
        }
        .into_any()
    }
}
