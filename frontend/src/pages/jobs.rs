//! Jobs: the job runs Fleetlens found (`GET /api/v1/job-runs`, docs/ACTIONS.md) over the chosen
//! range, filtered by owner, team and status (the filters live in the address), with each
//! ended run's hours per state, efficiency, cost and wasted cost from its report card, and the
//! runs summed per owner or per team. Each run links to its card page.

use std::collections::BTreeMap;

use fleetlens_core::TeamId;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api;
use crate::api::actions::{self, JobRun, RunFilter};
use crate::components::card::Card;
use crate::components::list::Empty;
use crate::components::state_badge::StateBadge;
use crate::components::status::PollStatus;
use crate::components::table::{Column, DataTable};
use crate::ctx::{latest_ok, polled, read_once, use_app};
use crate::format;
use crate::states;
use crate::url_state::query_setter;
use fleetlens_api::accounts::TeamView as Team;

/// The card page of a run.
pub fn card_href(run: &JobRun) -> String {
    format!("/jobs/{}", run.id)
}

/// A run's owner in words: "dave · Slurm job 4242", "bob · pod ml/nb-bob".
pub fn owner_text(run: &JobRun) -> String {
    let o = &run.owner;
    let mut parts = Vec::new();
    if let Some(u) = run.owner_name() {
        parts.push(u);
    }
    if let Some(j) = &o.job_id {
        parts.push(format!("Slurm job {j}"));
    }
    match (&o.namespace, &o.pod_name) {
        (Some(ns), Some(p)) => parts.push(format!("pod {ns}/{p}")),
        (None, Some(p)) => parts.push(format!("pod {p}")),
        _ => {}
    }
    if parts.is_empty() { "unknown".into() } else { parts.join(" · ") }
}

/// One group of runs (an owner or a team) and their sums over the ended runs' cards.
#[derive(Debug, Clone, Default, PartialEq)]
struct GroupSum {
    runs: usize,
    running: usize,
    gpu_hours: f64,
    wasted_hours: f64,
    cost: Option<f64>,
    wasted_cost: Option<f64>,
}

fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

/// The runs summed per group key (runs without one under "(none)").
fn group_sums(runs: &[JobRun], key: impl Fn(&JobRun) -> Option<String>) -> Vec<(String, GroupSum)> {
    let mut out: BTreeMap<String, GroupSum> = BTreeMap::new();
    for r in runs {
        let g = out.entry(key(r).unwrap_or_else(|| "(none)".into())).or_default();
        g.runs += 1;
        match &r.card {
            Some(c) => {
                g.gpu_hours += c.gpu_hours;
                g.wasted_hours += c.wasted_hours;
                g.cost = add(g.cost, c.cost);
                g.wasted_cost = add(g.wasted_cost, c.wasted_cost);
            }
            None => g.running += 1,
        }
    }
    let mut v: Vec<(String, GroupSum)> = out.into_iter().collect();
    // Most wasted money first, then most wasted hours.
    v.sort_by(|a, b| {
        b.1.wasted_cost
            .unwrap_or(0.0)
            .total_cmp(&a.1.wasted_cost.unwrap_or(0.0))
            .then(b.1.wasted_hours.total_cmp(&a.1.wasted_hours))
    });
    v
}

fn team_name(teams: &[Team], id: Option<TeamId>) -> Option<String> {
    id.map(|id| teams.iter().find(|t| t.id == id).map(|t| t.name.clone()).unwrap_or_else(|| format!("team {id}")))
}

#[component]
pub fn JobsPage() -> impl IntoView {
    super::set_title("Jobs");
    let ctx = use_app();
    let query = use_query_map();
    let param = move |k: &'static str| Memo::new(move |_| query.with(|q| q.get(k).unwrap_or_default()));
    let owner_f = param("owner");
    let team_f = param("team");
    let status_f = param("status");
    let by_f = param("by");
    let filter =
        Memo::new(move |_| RunFilter { owner: owner_f.get(), team: team_f.get().parse().ok(), status: status_f.get() });
    let res = polled(move || {
        let (from, to) = ctx.range.get().window();
        let f = filter.get();
        async move { actions::job_runs(from, to, &f).await }
    });
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let teams = read_once(api::teams);
    let set_query = query_setter();
    let on_change = move |key: &'static str| {
        let set_query = set_query.clone();
        move |ev: leptos::ev::Event| set_query(key, &event_target_value(&ev))
    };
    let owner_input = on_change("owner");

    view! {
        <div class="page-head">
            <h1>"Jobs"</h1>
            <p class="muted">
                {move || format!("Job runs seen in the {}: Slurm jobs, pods, containers and lone processes on GPUs, each with its report card once it has ended.", ctx.range.get().long_label())}
            </p>
        </div>
        <form class="toolbar" on:submit=|ev| ev.prevent_default() aria-label="Filter job runs">
                <label>
                    <span>"Owner"</span>
                    <input id="job-owner" type="search" placeholder="user name" prop:value=move || owner_f.get() on:change=owner_input/>
                </label>
                <label>
                    <span>"Team"</span>
                    <select id="job-team" on:change=on_change("team")>
                        <option value="" selected=move || team_f.get().is_empty()>"Any team"</option>
                        {move || teams.get().into_iter().map(|t| {
                            let id = t.id.to_string();
                            let selected = { let id = id.clone(); move || team_f.get() == id };
                            view! { <option value=id selected=selected>{t.name.clone()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label>
                    <span>"Status"</span>
                    <select id="job-status" on:change=on_change("status")>
                        <option value="" selected=move || status_f.get().is_empty()>"Running and ended"</option>
                        <option value="running" selected=move || status_f.get() == "running">"Running"</option>
                        <option value="ended" selected=move || status_f.get() == "ended">"Ended"</option>
                    </select>
                </label>
                <label>
                    <span>"Sum per"</span>
                    <select id="job-by" on:change=on_change("by")>
                        <option value="" selected=move || by_f.get().is_empty()>"Owner"</option>
                        <option value="team" selected=move || by_f.get() == "team">"Team"</option>
                    </select>
                </label>
        </form>
        <PollStatus res has_data>
            <Card title_id="job-groups-title" title=move || if by_f.get() == "team" { "Per team" } else { "Per owner" }>
                {move || {
                    let runs = data.get().unwrap_or_default();
                    let by_team = by_f.get() == "team";
                    let team_list = teams.get();
                    let groups = if by_team {
                        group_sums(&runs, |r| team_name(&team_list, r.team_id))
                    } else {
                        group_sums(&runs, JobRun::owner_name)
                    };
                    // Cards carry the organisation's currency (one per organisation).
                    let currency = runs.iter().find_map(|r| r.card.as_ref().map(|c| c.currency.clone())).unwrap_or_else(|| "USD".into());
                    view! { <GroupTable groups by_team teams=team_list currency/> }
                }}
            </Card>
            <Card title_id="job-runs-title" title="Runs">
                {move || {
                    let runs = data.get().unwrap_or_default();
                    let capped = (runs.len() >= actions::RUN_LIMIT).then(|| view! {
                        <p class="banner banner-info">{format!("Showing the newest {} runs (and their sums above): narrow the range or filter by owner or team to see the rest.", actions::RUN_LIMIT)}</p>
                    });
                    view! {
                        {capped}
                        <RunTable runs teams=teams.get()/>
                    }
                }}
            </Card>
        </PollStatus>
    }
}

#[component]
fn GroupTable(groups: Vec<(String, GroupSum)>, by_team: bool, teams: Vec<Team>, currency: String) -> impl IntoView {
    if groups.is_empty() {
        return view! { <Empty message="No job run in this range."/> }.into_any();
    }
    let link = move |name: &str| -> String {
        if by_team {
            match teams.iter().find(|t| t.name == name) {
                Some(t) => format!("/jobs?by=team&team={}", t.id),
                None => "/jobs?by=team".into(),
            }
        } else {
            crate::url_state::with_query("/jobs", &[("owner".to_string(), name.to_string())])
        }
    };
    let rows = groups
        .into_iter()
        .map(|(name, g)| {
            let href = link(&name);
            let waste = if g.gpu_hours > 0.0 { format::pct(g.wasted_hours / g.gpu_hours * 100.0) } else { "n/a".into() };
            view! {
                <tr data-group=name.clone()>
                    <th scope="row">{if name == "(none)" { name.clone().into_any() } else { view! { <a href=href>{name.clone()}</a> }.into_any() }}</th>
                    <td class="num">{g.runs}</td>
                    <td class="num">{g.running}</td>
                    <td class="num">{format::hours(g.gpu_hours)}</td>
                    <td class="num">{waste}</td>
                    <td class="num">{g.cost.map(|c| format::money(c, &currency)).unwrap_or_else(|| "no price set".into())}</td>
                    <td class="num" class:waste=g.wasted_cost.is_some_and(|w| w > 0.0)>{g.wasted_cost.map(|c| format::money(c, &currency)).unwrap_or_else(|| "no price set".into())}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <DataTable
            class="job-group-table"
            caption={if by_team { "Job runs per team" } else { "Job runs per owner" }}
            columns={[
                Column::text(if by_team { "Team" } else { "Owner" }),
                Column::num("Runs"),
                Column::num("Running"),
                Column::num("GPU-hours (ended)"),
                Column::num("Wasted"),
                Column::num("Cost"),
                Column::num("Wasted cost"),
            ]}
        >
            {rows}
        </DataTable>
    }
    .into_any()
}

#[component]
fn RunTable(runs: Vec<JobRun>, teams: Vec<Team>) -> impl IntoView {
    if runs.is_empty() {
        return view! { <Empty message="No job run matches in this range."/> }.into_any();
    }
    let rows = runs
        .into_iter()
        .map(|r| {
            let href = card_href(&r);
            let team = team_name(&teams, r.team_id).unwrap_or_default();
            let span = format!("{} – {}", format::date_time(r.first_ms), format::date_time(r.ended_ms.unwrap_or(r.last_ms)));
            let card = r.card.clone();
            let money = |v: Option<f64>, cur: &str| v.map(|v| format::money(v, cur)).unwrap_or_else(|| "no price set".into());
            let figures = match &card {
                Some(c) => {
                    let wastes = states::waste_states(&c.hours_by_state)
                        .into_iter()
                        .map(|(s, h)| view! { <span class="waste-state"><StateBadge state=Some(s)/>" "{format::hours(h)}</span> })
                        .collect_view();
                    view! {
                        <td class="num">{format::hours(c.gpu_hours)}</td>
                        <td>{wastes}</td>
                        <td class="num">{c.efficiency.map(format::pct).unwrap_or_else(|| "n/a".into())}</td>
                        <td class="num">{money(c.cost, &c.currency)}</td>
                        <td class="num" class:waste=c.wasted_cost.is_some_and(|w| w > 0.0)>{money(c.wasted_cost, &c.currency)}</td>
                    }
                    .into_any()
                }
                None => view! { <td class="muted" colspan="5">"running: its card comes when it ends"</td> }.into_any(),
            };
            view! {
                <tr data-run-id=r.id.to_string() data-run-key=r.key.clone()>
                    <th scope="row"><a href=href>{r.key.clone()}</a></th>
                    <td>{owner_text(&r)}</td>
                    <td>{team}</td>
                    <td>{r.host.clone()}</td>
                    <td class="num" title=r.gpus.join(", ")>{r.gpus.len()}</td>
                    <td>{span}</td>
                    <td>{if r.is_open() { view! { <span class="pill pill-ok">"running"</span> }.into_any() } else { view! { <span class="pill pill-muted">"ended"</span> }.into_any() }}</td>
                    {figures}
                </tr>
            }
        })
        .collect_view();
    view! {
        <DataTable
            class="run-table"
            caption="Job runs and their report cards"
            columns={[
                Column::text("Run"),
                Column::text("Owner"),
                Column::text("Team"),
                Column::text("Host"),
                Column::num("GPUs"),
                Column::text("Seen"),
                Column::text("Status"),
                Column::num("GPU-hours"),
                Column::text("Wasted in"),
                Column::num("Efficiency"),
                Column::num("Cost"),
                Column::num("Wasted cost"),
            ]}
        >
            {rows}
        </DataTable>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(user: Option<&str>, card: Option<(f64, f64, f64)>) -> JobRun {
        let card = card.map(|(h, w, c)| fleetlens_core::jobcard::JobCard {
            from_ms: 0,
            to_ms: 1,
            span_hours: h,
            gpu_count: 1,
            gpus: vec![],
            gpu_hours: h,
            hours_by_state: [("hollow".to_string(), w), ("compute_bound".to_string(), h - w)].into(),
            gpu_util_pct: None,
            sm_active_pct: None,
            p95_sm_active_pct: None,
            tensor_active_pct: None,
            dram_active_pct: None,
            efficiency: None,
            peak_mem_bytes: None,
            energy_kwh: 0.0,
            currency: "USD".into(),
            cost: Some(c),
            wasted_cost: Some(c * w / h),
            wasted_hours: w,
            waste_pct: w / h * 100.0,
            mfu: None,
            advice: vec![],
            shared_gpu: false,
        });
        JobRun {
            id: fleetlens_core::JobRunId(1),
            key: "slurm:1".into(),
            host: "n".into(),
            owner: fleetlens_core::ProcessOwner { user: user.map(str::to_string), ..Default::default() },
            gpus: vec![],
            first_ms: 0,
            last_ms: 1,
            status: fleetlens_core::jobcard::JobRunStatus::of(card.as_ref().map(|_| 1)),
            end_requested_ms: None,
            ended_ms: card.as_ref().map(|_| 1),
            end_reason: None,
            team_id: None,
            card,
            notified_channel_id: None,
        }
    }

    #[test]
    fn groups_sum_ended_cards_and_count_running_runs() {
        let runs = [
            run(Some("dave"), Some((2.0, 1.0, 6.0))),
            run(Some("dave"), Some((1.0, 0.0, 3.0))),
            run(Some("alice"), Some((4.0, 0.5, 12.0))),
            run(Some("dave"), None),
            run(None, None),
        ];
        let g = group_sums(&runs, JobRun::owner_name);
        // dave wasted 3.00, alice 1.50: dave first; the run without an owner last.
        assert_eq!(g.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["dave", "alice", "(none)"]);
        let dave = &g[0].1;
        assert_eq!((dave.runs, dave.running), (3, 1));
        assert!((dave.gpu_hours - 3.0).abs() < 1e-9 && (dave.wasted_hours - 1.0).abs() < 1e-9);
        assert_eq!(dave.cost, Some(9.0));
        assert_eq!(dave.wasted_cost, Some(3.0));
        assert_eq!(g[2].1.cost, None);
    }

    #[test]
    fn owner_text_names_the_person_and_the_job() {
        let mut r = run(None, None);
        r.owner = fleetlens_core::ProcessOwner {
            job_user: Some("dave".into()),
            job_id: Some("4242".into()),
            ..Default::default()
        };
        assert_eq!(owner_text(&r), "dave · Slurm job 4242");
        r.owner = fleetlens_core::ProcessOwner {
            user: Some("bob".into()),
            namespace: Some("ml".into()),
            pod_name: Some("nb-bob".into()),
            ..Default::default()
        };
        assert_eq!(owner_text(&r), "bob · pod ml/nb-bob");
    }
}
