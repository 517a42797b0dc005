//! The fleet page's plans (`GET /api/v1/plans`, docs/ACTIONS.md): jobs that could have shared
//! one GPU (CARMA's rule: summed p95 SM activity ≤ 80 %, summed peak memory within the GPU's
//! memory less a margin) and jobs that a smaller GPU or a MIG slice would have carried, each
//! with its monthly saving and its evidence; and the fleet summary's `plan_saving_per_month`.

use fleetlens_api::FleetSummary;
use fleetlens_core::plans::{JobEvidence, Plans};
use leptos::prelude::*;

use crate::api::actions;
use crate::components::card::{Card, CardHead};
use crate::components::list::Empty;
use crate::components::status::PollStatus;
use crate::components::table::{Column, DataTable};
use crate::ctx::{Latest, latest_ok, use_app};
use crate::format;

/// A link to the card of the newest run of a key.
fn job_link(key: &str) -> impl IntoView + use<> {
    let href = format!("/jobs/{}", String::from(js_sys::encode_uri_component(key)));
    view! { <a href=href>{key.to_string()}</a> }
}

fn evidence_row(j: &JobEvidence) -> impl IntoView + use<> {
    view! {
        <tr>
            <th scope="row">{job_link(&j.job)}</th>
            <td>{j.gpu_name.clone()}</td>
            <td class="num">{format::pct(j.p95_sm_active_pct)}</td>
            <td class="num">{format::gib(j.peak_mem_bytes)}</td>
            <td class="num">{format::hours(j.gpu_hours)}</td>
            <td>{format!("{} – {}", format::date_time(j.from_ms), format::date_time(j.to_ms))}</td>
        </tr>
    }
}

/// The columns of the evidence of a MIG group: its jobs.
const EVIDENCE_COLUMNS: [Column; 6] = [
    Column::text("Job"),
    Column::text("GPU"),
    Column::num("SM activity p95"),
    Column::num("Peak memory"),
    Column::num("GPU-hours"),
    Column::text("Ran"),
];

#[component]
pub fn PlansSection(data: Latest<FleetSummary>) -> impl IntoView {
    let ctx = use_app();
    // Plans are read again when the range changes or the summary's plan saving does (the
    // summary computes the same plans on every poll): not on every poll tick.
    let saving = Memo::new(move |_| data.with(|d| d.as_ref().and_then(|d| d.plan_saving_per_month)));
    let res = LocalResource::new(move || {
        saving.track();
        let (from, to) = ctx.range.get().window();
        async move { actions::plans(from, to).await }
    });
    let plans = latest_ok(res);
    let has_data = Signal::derive(move || plans.with(Option::is_some));
    let currency = move || data.with(|d| d.as_ref().map(|d| d.currency.clone())).unwrap_or_default();
    let summary_saving = move || {
        data.with(|d| {
            d.as_ref().map(|d| match d.plan_saving_per_month {
                Some(v) => format!("{}/month", format::money(v, &d.currency)),
                None => "not computed".into(),
            })
        })
    };
    view! {
        <Card title_id="plans-title" title="Plans: collocate and right-size">
            <CardHead slot>
                <p class="plan-saving">
                    "The plans would save "
                    <strong data-testid="plan-saving">{summary_saving}</strong>
                </p>
            </CardHead>
            <p class="muted">
                "From the jobs that ended in this range: jobs that ran at the same time and could have shared one GPU (summed p95 SM activity ≤ 80 %, summed peak memory within the GPU's memory less 10 %), and jobs a smaller GPU or a MIG slice would have carried. Each saving is the period's, scaled to 30 days."
            </p>
            <PollStatus res has_data/>
            {move || plans.get().map(|p| view! { <PlanTables p currency=currency()/> })}
        </Card>
    }
}

#[component]
fn PlanTables(p: Plans, currency: String) -> impl IntoView {
    if p.collocation.is_empty() && p.right_size.is_empty() {
        return view! { <Empty message="No plan: no ended jobs that could share a GPU or fit a smaller one in this range."/> }
            .into_any();
    }
    let money = |v: Option<f64>| {
        v.map(|v| format!("{}/month", format::money(v, &currency))).unwrap_or_else(|| "no price set".into())
    };
    let groups = p
        .collocation
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let title_id = format!("colloc-{i}");
            let labelled_by = title_id.clone();
            let evidence = g.jobs.iter().map(evidence_row).collect_view();
            view! {
                <article class="plan" data-plan="collocation" aria-labelledby=labelled_by>
                    <h4 id=title_id>
                        {format!("{} jobs on one {}", g.jobs.len(), g.gpu_name)} " · "
                        <span class="plan-money">{money(g.saving_per_month)}</span>
                    </h4>
                    <p class="small">
                        {format!(
                            "Summed p95 SM activity {} (≤ 80 %); summed peak memory {} of {} usable; {} GPU-hours saved in the period.",
                            format::pct(g.sum_p95_sm_active_pct),
                            format::gib(g.sum_peak_mem_bytes),
                            format::gib(g.usable_mem_bytes),
                            format::fx(g.gpu_hours_saved, 2)
                        )}
                    </p>
                    <DataTable
                        class="plan-table"
                        caption=format!("Evidence: the {} jobs of this group", g.jobs.len())
                        columns=EVIDENCE_COLUMNS
                    >
                        {evidence}
                    </DataTable>
                </article>
            }
        })
        .collect_view();
    let right = (!p.right_size.is_empty()).then(|| {
        let rows = p
            .right_size
            .iter()
            .map(|r| {
                let j = &r.job;
                view! {
                    <tr data-plan="right_size">
                        <th scope="row">{job_link(&j.job)}</th>
                        <td>{j.gpu_name.clone()}</td>
                        <td>{format!("{} ({})", r.suggested, if r.kind == "mig" { "MIG slice" } else { "smaller GPU" })}</td>
                        <td class="num">{format::pct(j.p95_sm_active_pct)}</td>
                        <td class="num">{format!("{} of {}", format::gib(j.peak_mem_bytes), format::gib(r.usable_mem_bytes))}</td>
                        <td class="num">{format::hours(j.gpu_hours)}</td>
                        <td class="num plan-money">{money(r.saving_per_month)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>"Right-size"</h3>
            <DataTable
                class="plan-table"
                caption="Jobs a smaller GPU or a MIG slice would have carried"
                columns={[
                    Column::text("Job"),
                    Column::text("Ran on"),
                    Column::text("Would fit"),
                    Column::num("SM activity p95"),
                    Column::num("Peak memory of usable"),
                    Column::num("GPU-hours"),
                    Column::num("Saving"),
                ]}
            >
                {rows}
            </DataTable>
        }
    });
    view! {
        <p data-testid="plans-total">
            {format!(
                "{} collocation group{}, {} right-size plan{}: {}/month in all.",
                p.collocation.len(),
                if p.collocation.len() == 1 { "" } else { "s" },
                p.right_size.len(),
                if p.right_size.len() == 1 { "" } else { "s" },
                format::money(p.saving_per_month, &currency)
            )}
        </p>
        {(!p.collocation.is_empty()).then(|| view! { <h3>"Collocation"</h3> })}
        {groups}
        {right}
    }
    .into_any()
}
