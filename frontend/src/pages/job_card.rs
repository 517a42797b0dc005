//! A job run's report card (`/jobs/{id}`): what `GET /api/v1/jobs/{id}/report` returns — GPUs
//! and span, GPU-hours, hours per state, mean SM / tensor / DRAM activity, efficiency, peak
//! memory, energy, cost and wasted cost, MFU where the job reported its throughput, and the
//! advice with its numbers. The run itself comes from `GET /api/v1/job-runs/{id}` (the same card,
//! and whether the run is still open); a running run can be ended from here
//! (`POST /api/v1/jobs/{id}/end`) by a caller who may send data.

use fleetlens_core::jobcard::JobCard;
use fleetlens_core::{Scope, WorkloadState};
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::use_params;
use leptos_router::params::Params;

use crate::api::ApiError;
use crate::api::actions::{self, JobRun};
use crate::components::card::{Card, CardHead};
use crate::components::list::Empty;
use crate::components::state_badge::StateBadge;
use crate::components::status::{ActionError, PollStatus, Saved, show_outcome};
use crate::components::table::{Column, DataTable};
use crate::ctx::{latest_ok, polled, use_app};
use crate::format;
use crate::pages::jobs::owner_text;

/// The route's parameter: `/jobs/:id` (a run id, or a run key).
#[derive(Params, Clone, PartialEq)]
struct JobParams {
    id: Option<String>,
}

/// The caller may end a run: ending is a data-sending call (`ingest` scope; admins too).
fn may_end() -> bool {
    use_app()
        .me
        .with(|m| m.as_ref().is_some_and(|m| m.scopes.iter().any(|s| matches!(s, Scope::Ingest | Scope::Admin))))
}

#[component]
pub fn JobCardPage() -> impl IntoView {
    let params = use_params::<JobParams>();
    let id = Memo::new(move |_| params.with(|p| p.as_ref().ok().and_then(|p| p.id.clone()).unwrap_or_default()));
    let res = polled(move || {
        let id = id.get();
        async move { actions::job_run(&id).await }
    });
    let run = latest_ok(res);
    let has_data = Signal::derive(move || run.with(Option::is_some));
    Effect::new(move || {
        let key = run.with(|r| r.as_ref().map(|r| r.key.clone()));
        super::set_title(&format!("Job {}", key.unwrap_or_default()));
    });
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let end = move |_| {
        let Some(run_id) = run.with_untracked(|r| r.as_ref().map(|r| r.id)) else { return };
        spawn_local(async move {
            let out = actions::end_job(run_id)
                .await
                .map(|r| format!("Run {} ends now: its card follows within a minute.", r.key));
            if show_outcome(error, saved, out) {
                res.refetch();
            }
        });
    };

    view! {
        <div class="page-head">
            <p class="breadcrumb"><a href="/jobs">"Jobs"</a></p>
            <h1>{move || run.with(|r| r.as_ref().map(|r| format!("Job {}", r.key)).unwrap_or_else(|| "Job".into()))}</h1>
            <p class="muted" data-testid="job-owner">{move || run.with(|r| r.as_ref().map(|r| format!("{} · on {}", owner_text(r), r.host)).unwrap_or_default())}</p>
        </div>
        <PollStatus res has_data/>
        <ActionError error/>
        <Saved saved/>
        {move || run.get().map(|r| {
            let open = r.is_open();
            let requested = r.end_requested_ms.is_some();
            let card = r.card.clone();
            view! {
                <Card title_id="run-title" title="Run">
                    <CardHead slot>
                        {(open && !requested && may_end()).then(|| view! {
                            <button type="button" class="btn btn-danger" data-testid="end-run" on:click=end>"End this run now"</button>
                        })}
                    </CardHead>
                    <RunFacts run=r.clone()/>
                </Card>
                {match card {
                    Some(card) => view! { <ReportCard card/> }.into_any(),
                    None => view! {
                        <Card title_id="card-title" title="Report card">
                            <p class="empty" data-testid="no-card">
                                {if requested { "Ending: its card is computed at the next scan." } else { "Still running: its card comes when it ends (its processes leave the GPUs, or a client ends it)." }}
                            </p>
                        </Card>
                    }.into_any(),
                }}
            }
        })}
    }
}

#[component]
fn RunFacts(run: JobRun) -> impl IntoView {
    let status = match (&run.ended_ms, &run.end_reason, run.end_requested_ms) {
        (Some(t), Some(why), _) => format!(
            "ended {} ({})",
            format::date_time(*t),
            if why == "requested" { "a client ended it" } else { "its processes left the GPUs" }
        ),
        (Some(t), None, _) => format!("ended {}", format::date_time(*t)),
        (None, _, Some(at)) => format!("ending (asked at {})", format::date_time(at)),
        (None, _, None) => "running".into(),
    };
    let gpus = run.gpus.iter().map(|g| view! { <li><a href=format!("/gpus/{g}")>{g.clone()}</a></li> }).collect_view();
    view! {
        <dl class="adv adv-wide" data-testid="run-facts">
            <div class="adv-row"><dt>"Key"</dt><dd><code>{run.key.clone()}</code></dd></div>
            <div class="adv-row"><dt>"Status"</dt><dd data-testid="run-status">{status}</dd></div>
            <div class="adv-row"><dt>"Seen"</dt><dd>{format!("{} – {}", format::date_time(run.first_ms), format::date_time(run.last_ms))}</dd></div>
            <div class="adv-row"><dt>"GPUs"</dt><dd><ul class="plain-list">{gpus}</ul></dd></div>
            <div class="adv-row"><dt>"Card sent"</dt><dd>{match run.notified_channel_id {
                Some(c) => format!("to notification channel {c}"),
                None if run.ended_ms.is_some() => "no (no route matched, or the job was under its route's bar)".into(),
                None => "not yet".into(),
            }}</dd></div>
        </dl>
    }
}

/// The card itself.
#[component]
fn ReportCard(card: JobCard) -> impl IntoView {
    let cur = card.currency.clone();
    let money = move |v: Option<f64>| format::opt_money(v, &cur);
    let na = |v: Option<f64>| v.map(format::pct).unwrap_or_else(|| "n/a".into());
    let estimate = card.shared_gpu.then(|| {
        view! {
            <p class="banner banner-info" data-testid="shared-estimate">
                "A GPU of this job was shared with other runs: its hours, states, energy and money on that GPU are its share by NVML per-process SM % — an estimate."
            </p>
        }
    });
    let total = card.gpu_hours.max(f64::MIN_POSITIVE);
    let mut states: Vec<(String, f64)> = card.hours_by_state.iter().map(|(s, h)| (s.clone(), *h)).collect();
    states.sort_by(|a, b| b.1.total_cmp(&a.1));
    let state_rows = states
        .into_iter()
        .map(|(s, h)| {
            let share = h / total * 100.0;
            view! {
                <tr data-state-row=s.clone()>
                    <th scope="row"><StateBadge state=WorkloadState::parse(&s)/></th>
                    <td class="num">{format::hours(h)}</td>
                    <td class="num">{format::pct(share)}</td>
                    <td class="bar-cell" aria-hidden="true"><span class="share-bar" style=format!("width: {}%", format::fx(share.clamp(0.0, 100.0), 1))></span></td>
                </tr>
            }
        })
        .collect_view();
    let gpu_rows = card
        .gpus
        .iter()
        .map(|g| {
            view! {
                <tr>
                    <th scope="row"><a href=format!("/gpus/{}", g.uuid)>{g.uuid.clone()}</a></th>
                    <td>{g.name.clone().unwrap_or_default()}</td>
                    <td class="num">{format::hours(g.gpu_hours)}</td>
                    <td class="num">{na(g.sm_active_pct)}</td>
                    <td class="num">{g.peak_mem_bytes.map(format::gib).unwrap_or_else(|| "n/a".into())}
                        {g.mem_total_bytes.map(|t| format!(" of {}", format::gib(t)))}</td>
                    <td>{if g.shared { format!("yes (its share: SM {}, an estimate)", na(g.own_sm_active_pct)) } else { "no".into() }}</td>
                </tr>
            }
        })
        .collect_view();
    let advice = card
        .advice
        .iter()
        .map(|a| {
            // The text carries its own numbers and money (`amount` is the same money, for machines).
            view! { <li data-advice=a.code.clone()><strong>{a.code.replace('_', " ")}</strong>": "{a.text.clone()}</li> }
        })
        .collect_view();
    let no_advice = card.advice.is_empty();
    view! {
        <Card title_id="card-title" title="Report card">
            {estimate}
            <div class="kpis job-kpis" data-testid="card-kpis">
                <div class="kpi"><span class="kpi-label">"GPU-hours"</span><span class="kpi-value">{format::hours(card.gpu_hours)}</span>
                    <span class="kpi-sub">{format!("{} GPU{} over {}", card.gpu_count, if card.gpu_count == 1 { "" } else { "s" }, format::hours(card.span_hours))}</span></div>
                <div class="kpi"><span class="kpi-label">"Cost"</span><span class="kpi-value" data-testid="card-cost">{money(card.cost)}</span>
                    <span class="kpi-sub">{format!("{} kWh", format::fx(card.energy_kwh, 2))}</span></div>
                <div class="kpi waste"><span class="kpi-label">"Wasted cost"</span><span class="kpi-value" data-testid="card-wasted">{money(card.wasted_cost)}</span>
                    <span class="kpi-sub">{format!("{} wasted ({} of its GPU-hours)", format::hours(card.wasted_hours), format::pct(card.waste_pct))}</span></div>
                <div class="kpi"><span class="kpi-label">"Efficiency"</span><span class="kpi-value" data-testid="card-efficiency">{na(card.efficiency)}</span>
                    <span class="kpi-sub">"SM activity ÷ kernel utilization"</span></div>
            </div>
            <dl class="adv adv-wide" data-testid="card-figures">
                <div class="adv-row"><dt>"Span"</dt><dd>{format!("{} – {}", format::date_time(card.from_ms), format::date_time(card.to_ms))}</dd></div>
                <div class="adv-row"><dt>"Kernel utilization"</dt><dd>{na(card.gpu_util_pct)}</dd></div>
                <div class="adv-row"><dt>"SM activity (mean)"</dt><dd data-testid="card-sm">{na(card.sm_active_pct)}</dd></div>
                <div class="adv-row"><dt>"SM activity (p95)"</dt><dd>{na(card.p95_sm_active_pct)}</dd></div>
                <div class="adv-row"><dt>"Tensor activity"</dt><dd>{na(card.tensor_active_pct)}</dd></div>
                <div class="adv-row"><dt>"DRAM activity"</dt><dd>{na(card.dram_active_pct)}</dd></div>
                <div class="adv-row"><dt>"Peak memory"</dt><dd data-testid="card-peak">{card.peak_mem_bytes.map(format::gib).unwrap_or_else(|| "n/a".into())}</dd></div>
                <div class="adv-row"><dt>"Energy"</dt><dd>{format!("{} kWh", format::fx(card.energy_kwh, 3))}</dd></div>
                <div class="adv-row"><dt>"MFU"</dt><dd data-testid="card-mfu">{match card.mfu {
                    Some(m) => format::pct(m * 100.0),
                    None => "n/a (the job reported no throughput)".into(),
                }}</dd></div>
            </dl>
        </Card>
        <Card title_id="advice-title" title="What would help">
            {if no_advice {
                view! { <Empty message="Nothing to improve: no waste state held 5 % of its GPU-hours."/> }.into_any()
            } else {
                view! { <ul class="advice-list" data-testid="advice">{advice}</ul> }.into_any()
            }}
        </Card>
        <div class="two-col">
            <Card title_id="card-states-title" title="Hours per state">
                <DataTable
                    class="card-state-table"
                    caption="GPU-hours of the job per workload state"
                    columns={[
                        Column::text("State"),
                        Column::num("GPU-hours"),
                        Column::num("Share"),
                        Column::hidden("Bar"),
                    ]}
                >
                    {state_rows}
                </DataTable>
            </Card>
            <Card title_id="card-gpus-title" title="GPUs">
                <DataTable
                    class="card-gpu-table"
                    caption="The job's GPUs"
                    columns={[
                        Column::text("GPU"),
                        Column::text("Model"),
                        Column::num("GPU-hours"),
                        Column::num("SM activity"),
                        Column::num("Peak memory"),
                        Column::text("Shared"),
                    ]}
                >
                    {gpu_rows}
                </DataTable>
            </Card>
        </div>
    }
}
