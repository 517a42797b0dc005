//! Reports: the billing report (`GET /api/v1/reports/billing`) over the chosen range, grouped
//! by team, host, GPU or model, or by process owner (user, namespace, pod, Slurm job: from the raw
//! samples, docs/OWNERS.md), with a CSV download of the same report.

use fleetlens_api::BillingReport;
use fleetlens_api::reports::{GpuGrouping, ReportGrouping};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api::{self, ApiError};
use crate::components::card::{Card, CardHead};
use crate::components::form::{Choices, InlineSelect};
use crate::components::list::{Empty, NonEmpty};
use crate::components::state_badge::StateBadge;
use crate::components::status::{ActionError, PollStatus};
use crate::components::table::{Column, DataTable, TableFoot};
use crate::ctx::{Latest, latest_ok, polled, use_app};
use crate::format;
use crate::states;

fn opt_pct(v: Option<f64>) -> String {
    v.map(format::pct).unwrap_or_else(|| "n/a".into())
}

/// What the billing report can be grouped by: (value of `group_by`, label).
const GROUPS: Choices = &[("team", "Team"), ("host", "Host"), ("gpu", "GPU"), ("model", "Model")];

/// The groupings by process owner, from the raw samples.
const OWNER_GROUPS: Choices = &[
    ("user", "User"),
    ("holder", "Holder (user, else pod)"),
    ("namespace", "Namespace"),
    ("namespace_team", "Namespace team"),
    ("pod", "Pod"),
    ("job", "Job (Slurm, Kubernetes)"),
];

#[component]
pub fn ReportsPage() -> impl IntoView {
    super::set_title("Reports");
    let ctx = use_app();
    let group_by = RwSignal::new(ReportGrouping::Gpu(GpuGrouping::Host));
    let report = polled(move || {
        let (from, to) = ctx.range.get().window();
        let g = group_by.get();
        async move { api::billing(from, to, &g).await }
    });
    let data = latest_ok(report);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let csv_url = RwSignal::new(None::<String>);
    let csv_error = RwSignal::new(None::<ApiError>);
    let download = move |_| {
        let (from, to) = ctx.range.get_untracked().window();
        let g = group_by.get_untracked();
        spawn_local(async move {
            match api::billing_csv(from, to, &g).await {
                Ok(text) => {
                    csv_error.set(None);
                    let encoded = String::from(js_sys::encode_uri_component(&text));
                    csv_url.set(Some(format!("data:text/csv;charset=utf-8,{encoded}")));
                }
                Err(e) => csv_error.set(Some(e)),
            }
        });
    };

    view! {
        <div class="page-head">
            <h1>"Reports"</h1>
            <p class="muted">{move || format!("Billing for the {}", ctx.range.get().long_label())}</p>
        </div>
        <Card title_id="billing-title" title="Billing">
            <CardHead slot>
                <InlineSelect
                    label="Group by"
                    options=GROUPS
                    groups=&[("Process owner (raw samples)", OWNER_GROUPS)]
                    selected="host"
                    on_change=Callback::new(move |g: String| {
                        // The options are groupings' texts: one that does not parse is not offered.
                        let Ok(g) = ReportGrouping::parse(&g) else { return };
                        group_by.set(g);
                        csv_url.set(None);
                    })
                />
                <button type="button" class="btn" on:click=download>"Prepare CSV"</button>
                {move || {
                    csv_url
                        .get()
                        .map(|u| {
                            view! {
                                <a class="btn-primary" href=u download=format!("fleetlens-billing-{}.csv", group_by.get())>
                                    "Download CSV"
                                </a>
                            }
                        })
                }}
            </CardHead>
            <ActionError error=csv_error/>
            <PollStatus res=report has_data>
                <BillingTable report=data/>
            </PollStatus>
        </Card>
        <Jobs/>
    }
}

/// FLOP/s in words: `3.2e14` → `320 TFLOP/s`.
fn flops(v: f64) -> String {
    let (div, unit) = if v >= 1e15 {
        (1e15, "PFLOP/s")
    } else if v >= 1e12 {
        (1e12, "TFLOP/s")
    } else if v >= 1e9 {
        (1e9, "GFLOP/s")
    } else {
        (1.0, "FLOP/s")
    };
    format!("{} {unit}", format::fx(v / div, 1))
}

/// Jobs that reported their model throughput (`GET /api/v1/jobs`) and their MFU: achieved
/// FLOP/s ÷ the dense datasheet peak of their GPUs at their precision.
#[component]
fn Jobs() -> impl IntoView {
    let ctx = use_app();
    let res = polled(move || {
        let (from, to) = ctx.range.get().window();
        async move { api::jobs(from, to).await }
    });
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let list = Signal::derive(move || data.get().unwrap_or_default());
    view! {
        <Card title_id="jobs-title" title="Jobs: model FLOPs utilization (MFU)">
            <p class="muted">
                "Jobs report their throughput with " <code>"POST /api/v1/jobs"</code>
                "; MFU is achieved FLOP/s ÷ the dense datasheet peak of their GPUs (n/a where a model or precision has no datasheet figure)."
            </p>
            <PollStatus res has_data>
                <NonEmpty items=list empty="No job reported its throughput in this range." let:list>
                    <DataTable
                        class="job-table"
                        caption="Jobs and their MFU"
                        columns={[
                            Column::text("Job"),
                            Column::num("GPUs"),
                            Column::text("Precision"),
                            Column::num("Achieved"),
                            Column::num("MFU"),
                            Column::text("When"),
                        ]}
                    >
                        {list.into_iter().map(|j| view! {
                            <tr data-job-id=j.id.to_string()>
                                <th scope="row">{j.report.name.clone()}</th>
                                <td class="num" title=j.report.gpu_uuids.join(", ")>{j.report.gpu_uuids.len()}</td>
                                <td>{j.report.precision.as_str()}</td>
                                <td class="num">{flops(j.report.achieved_flops_per_s)}</td>
                                <td class="num mfu" class:na=j.mfu.is_none()>{opt_pct(j.mfu.map(|m| m * 100.0))}</td>
                                <td>{format!("{} – {}", format::date_time(j.report.from_ms), format::date_time(j.report.to_ms))}</td>
                            </tr>
                        }).collect_view()}
                    </DataTable>
                </NonEmpty>
            </PollStatus>
        </Card>
    }
}

#[component]
fn BillingTable(report: Latest<BillingReport>) -> impl IntoView {
    move || {
        let Some(rep) = report.get() else { return ().into_any() };
        if rep.rows.is_empty() {
            return view! { <Empty message="Nothing billed in this range."/> }.into_any();
        }
        let cur = rep.currency.clone();
        let money = move |v: Option<f64>| v.map(|v| format::money(v, &cur)).unwrap_or_else(|| "no price set".into());
        let total_cost: Option<f64> = rep.rows.iter().filter_map(|r| r.cost).reduce(|a, b| a + b);
        let total_waste: Option<f64> = rep.rows.iter().filter_map(|r| r.wasted_cost).reduce(|a, b| a + b);
        let total_hours: f64 = rep.rows.iter().map(|r| r.gpu_hours).sum();
        let total_kwh: f64 = rep.rows.iter().map(|r| r.energy_kwh).sum();
        // Owners (users, pods, …) share GPUs, so their GPU counts do not add up.
        let total_gpus = rep.group_by.counts_each_gpu_once().then(|| rep.rows.iter().map(|r| r.gpus).sum::<u32>());
        let by_gpu = rep.group_by == ReportGrouping::Gpu(GpuGrouping::Gpu);
        let rows = rep
            .rows
            .iter()
            .map(|r| {
                let group = if by_gpu {
                    view! { <a href=format!("/gpus/{}", r.group)>{r.group.clone()}</a> }.into_any()
                } else {
                    r.group.clone().into_any()
                };
                let wastes = states::waste_states(&r.hours_by_state)
                    .into_iter()
                    .map(|(s, h)| view! { <span class="waste-state"><StateBadge state=Some(s)/>" "{format::hours(h)}</span> })
                    .collect_view();
                view! {
                    <tr>
                        <th scope="row">{group}</th>
                        <td class="num">{r.gpus}</td>
                        <td class="num">{format::hours(r.gpu_hours)}</td>
                        <td class="num">{opt_pct(r.mean_gpu_util_pct)}</td>
                        <td class="num">{opt_pct(r.mean_sm_active_pct)}</td>
                        <td class="num">{r.efficiency_pct.map(|e| format::fx(e, 0).to_string()).unwrap_or_else(|| "n/a".into())}</td>
                        <td class="num">{format::fx(r.energy_kwh, 2).to_string()}</td>
                        <td class="num">{money(r.cost)}</td>
                        <td class="num" class:waste=r.wasted_cost.is_some_and(|w| w > 0.0)>{money(r.wasted_cost)}</td>
                        <td>{wastes}</td>
                    </tr>
                }
            })
            .collect_view();
        let group = rep.group_by.label();
        view! {
            <DataTable
                class=""
                caption="Billing report"
                columns={[
                    Column::text(group),
                    Column::num("GPUs"),
                    Column::num("GPU-hours"),
                    Column::num("Kernel util."),
                    Column::num("SM activity"),
                    Column::num("Efficiency"),
                    Column::num("kWh"),
                    Column::num("Cost"),
                    Column::num("Wasted cost"),
                    Column::text("Wasted in"),
                ]}
            >
                {rows}
                <TableFoot slot>
                    <tr>
                        <th scope="row">"Total"</th>
                        <td class="num">{total_gpus}</td>
                        <td class="num">{format::hours(total_hours)}</td>
                        <td></td>
                        <td></td>
                        <td></td>
                        <td class="num">{format::fx(total_kwh, 2).to_string()}</td>
                        <td class="num">{money(total_cost)}</td>
                        <td class="num waste">{money(total_waste)}</td>
                        <td></td>
                    </tr>
                </TableFoot>
            </DataTable>
            {rep.note.clone().map(|n| view! { <p class="muted small report-note">{n}</p> })}
        }
        .into_any()
    }
}
