//! The fleet page: cost and wasted cost, "you could save $X/month", the utilization funnel with
//! the dollars lost at each step, hours per workload state, the GPUs wasting the most, and who is
//! wasting: the owners of the processes ranked by wasted cost (docs/OWNERS.md).

use fleetlens_api::{FleetSummary, GpuWaste};
use leptos::prelude::*;

use crate::api;
use crate::charts::distribution::StateDistribution;
use crate::charts::funnel::Funnel;
use crate::components::card::{Card, CardHead};
use crate::components::list::Empty;
use crate::components::state_badge::StateBadge;
use crate::components::status::PollStatus;
use crate::ctx::{Latest, latest_ok, polled, use_app};
use crate::format;
use crate::pages::plans::PlansSection;

#[component]
pub fn FleetPage() -> impl IntoView {
    super::set_title("Fleet");
    let ctx = use_app();
    let res = polled(move || {
        // The live stream's fleet counts changed (at most every 10 s): the figures too.
        ctx.stream.summary_changed.track();
        api::fleet_summary(ctx.range.get())
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
        <PollStatus res has_data>
            <FleetBody data/>
        </PollStatus>
    }
}

#[component]
fn FleetBody(data: Latest<FleetSummary>) -> impl IntoView {
    let d = move |f: fn(&FleetSummary) -> String| move || data.with(|d| d.as_ref().map(f).unwrap_or_default());
    let waste_share = move || {
        data.with(|d| {
            d.as_ref().and_then(|d| match (d.wasted_cost, d.cost) {
                (Some(w), Some(c)) if c > 0.0 => Some(format!("{} of the cost", format::frac(w / c))),
                _ => None,
            })
        })
    };
    // The parts below read `data` themselves instead of a derived signal each: every distinct
    // signal type adds its own copy of the reactive machinery to the page's wasm.
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
                <span class="kpi-sub" data-testid="projected-from">
                    {d(|d| format!("projected from the wasted cost of the last 7 days: {} of GPU time", format::hours(d.projected_from_gpu_hours)))}
                </span>
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
                <span class="kpi-value">{d(|d| format!("{} kWh", format::fx(d.energy_kwh, 1)))}</span>
                <span class="kpi-sub">"measured by the GPUs"</span>
            </div>
        </section>
        {move || unpriced().map(|t| view! { <p class="banner banner-info">{t}</p> })}

        <Card title_id="funnel-title" title="Utilization funnel">
            <p class="muted">"Each level is a share of the GPU-time paid for. The gap between two levels is where the money goes."</p>
            <Funnel data/>
        </Card>

        <div class="two-col">
            <Card title_id="states-title" title="Where the GPU-hours went">
                <StateDistribution data/>
            </Card>
            <Card title_id="wasters-title" title="Wasting the most">
                <Wasters data/>
            </Card>
        </div>

        <Card title_id="owners-title" title="Who is wasting">
            <CardHead slot>
                <a href="/reports">"By user, namespace, pod or Slurm job: Reports"</a>
            </CardHead>
            <Owners data/>
        </Card>
        <PlansSection data/>
        <p class="muted small">{d(|d| d.price_source.clone())}</p>
    }
}

/// The owners wasting the most (the summary's `top_owners`), ranked by wasted cost.
#[component]
fn Owners(data: Latest<FleetSummary>) -> impl IntoView {
    let span = move || data.with(|d| d.as_ref().and_then(|d| d.top_owners_from_ms.map(|f| (f, d.to_ms))));
    let covers = move || {
        span().map(|(from, to)| {
            format!(
                "Process owners (Unix or Slurm user) over the last {} (raw samples), ranked by wasted cost. A GPU shared by several processes is split by their SM %, else evenly.",
                format::duration_ms(to - from)
            )
        })
    };
    view! {
        {move || covers().map(|t| view! { <p class="muted">{t}</p> })}
        {move || data.with(|d| {
            let Some(d) = d else { return ().into_any() };
            // The API lists them most wasteful first (`FleetSummary::top_owners`).
            let list = &d.top_owners;
            if list.is_empty() {
                let why = if span().is_some() {
                    "No GPU time with a known process owner was wasted in this period (owners are read from the agents' process lists; prices must be set for wasted cost)."
                } else {
                    "Owner accounts are off on this server (--summary-owners-span 0s), or the period is too short."
                };
                return view! {
                    <p class="empty" data-testid="owners-empty">"No process owners reported."</p>
                    <p class="muted small">{why}</p>
                }
                .into_any();
            }
            let cur = &d.currency;
            let rows = list
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    let unknown = o.owner.starts_with('(');
                    view! {
                        <tr data-owner=o.owner.clone()>
                            <td class="num rank">{i + 1}</td>
                            <th scope="row" class:muted=unknown>{o.owner.clone()}</th>
                            <td class="num waste" data-col="wasted_cost">{format::opt_money(o.wasted_cost, cur)}</td>
                            <td class="num" data-col="idle_held">{format::hours(o.idle_held_hours)}</td>
                            <td class="num" data-col="hollow">{format::hours(o.hollow_hours)}</td>
                            <td class="num" data-col="gpu_hours">{format::hours(o.gpu_hours)}</td>
                            <td class="num" data-col="cost">{format::opt_money(o.cost, cur)}</td>
                            <td class="num" data-col="gpus">{o.gpus}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <div class="table-wrap">
                    <table class="data owner-table">
                        <caption class="sr-only">"Who is wasting: process owners ranked by wasted cost"</caption>
                        <thead>
                            <tr>
                                <th scope="col" class="num"><abbr title="Rank">"#"</abbr></th>
                                <th scope="col">"Owner"</th>
                                <th scope="col" class="num">"Wasted cost"</th>
                                <th scope="col" class="num" title="GPU memory held with no kernel running">"Idle-held"</th>
                                <th scope="col" class="num" title="Kernels running with most SMs idle (busy but hollow)">"Hollow"</th>
                                <th scope="col" class="num">"GPU-hours"</th>
                                <th scope="col" class="num">"Cost"</th>
                                <th scope="col" class="num">"GPUs"</th>
                            </tr>
                        </thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            }
            .into_any()
        })}
    }
}

#[component]
fn Wasters(data: Latest<FleetSummary>) -> impl IntoView {
    move || {
        data.with(|d| {
            let Some(d) = d else { return ().into_any() };
            let list: &[GpuWaste] = &d.top_wasters;
            if list.is_empty() {
                return view! { <Empty message="No GPU wasted time in this range."/> }.into_any();
            }
            let cur = &d.currency;
            view! {
                <ol class="wasters">
                    {list
                        .iter()
                        .map(|w| {
                            let cost = match w.wasted_cost {
                                Some(c) => format::money(c, cur),
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
                                    format::money(r.saving_per_month, cur)
                                )
                            });
                            view! {
                                <li class="waster">
                                    <div class="waster-head">
                                        <a href=format!("/gpus/{}", w.uuid)>
                                            {w.name.clone().unwrap_or_else(|| "GPU".into())} " on " {w.host.clone()}
                                        </a>
                                        <StateBadge state=w.main_waste_state/>
                                    </div>
                                    <p class="waster-numbers">
                                        <strong class="waste">{cost}</strong>
                                        {format!(" wasted · {} of {} · efficiency {}", format::hours(w.wasted_hours), format::hours(w.paid_gpu_hours), w.efficiency.map(|e| format::fx(e, 0).to_string()).unwrap_or_else(|| "n/a".into()))}
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
        })
    }
}
