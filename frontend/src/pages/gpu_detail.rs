//! One GPU over the chosen range: kernel utilization and SM activity overlaid (the gap between
//! them is the story), tensor, DRAM, memory and power charts, the state timeline, the processes
//! of the latest sample, and what to do about it.

use std::sync::Arc;

use fleetlens_api::gpus::{DataQualityFlag, GpuDetail};
use fleetlens_api::{GpuSummary, Sample, SeriesPoint, StateWindow};
use fleetlens_core::{AlertId, AlertStatus, WorkloadState};
use leptos::Params;
use leptos::prelude::*;
use leptos_router::hooks::{use_params, use_query_map};
use leptos_router::params::Params;

use super::gpu_allocations::Allocations;
use super::gpu_card::{cost_text, efficiency_text, power_text, use_prices};
use crate::api::{self, ApiResult};
use crate::charts::line_chart::{LineChart, nice_ceil};
use crate::charts::series::Series;
use crate::charts::timeline::StateTimeline;
use crate::components::card::{Card, CardHead};
use crate::components::list::{Empty, NonEmpty};
use crate::components::state_badge::StateBadge;
use crate::components::status::PollStatus;
use crate::components::table::{Column, DataTable};
use crate::ctx::{Latest, Range, latest_ok, now_ms, polled, use_app};
use crate::format::{self, NA};
use crate::url_state::query_updater;
use crate::{owners, states};

/// Samples asked for per request (the API's default page).
const LIMIT: u32 = 10_000;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[derive(Debug, Clone, PartialEq)]
struct Detail {
    gpu: GpuSummary,
    from: i64,
    to: i64,
    /// The GPU has not reported within the range: the window ends at its last sample instead.
    anchored: bool,
    samples: Arc<Vec<Sample>>,
    note: Option<String>,
    /// `samples` are rollup means, not raw samples.
    rollup: bool,
    /// Readings of the last 24 hours that could not be true (dropped from every average).
    data_quality: Vec<DataQualityFlag>,
}

/// A rollup bucket as a sample of its means (what the charts draw).
fn point_sample(p: &SeriesPoint) -> Sample {
    Sample {
        ts_ms: p.ts_ms,
        gpu_util_pct: p.gpu_util_pct,
        sm_active_pct: p.sm_active_pct,
        sm_occupancy_pct: p.sm_occupancy_pct,
        tensor_active_pct: p.tensor_active_pct,
        dram_active_pct: p.dram_active_pct,
        mem_used_bytes: p.mem_used_bytes_max.map(|b| b as i64),
        power_w: p.power_w,
        temp_c: p.temp_c,
        ..Sample::default()
    }
}

/// Samples already fetched for (uuid, range, anchored, zoom): polls only ask for newer ones.
#[derive(Default)]
struct Cache {
    key: Option<(String, Range, bool, Option<Zoom>)>,
    samples: Vec<Sample>,
    note: Option<String>,
}

/// A time range brushed on a chart (`?from=&to=`, Unix ms): the page shows it instead of the
/// range picker's window until the picker is used or the zoom is reset.
pub type Zoom = (i64, i64);

/// The zoom of the address's `from` and `to`, if both are times and `from` is before `to`.
fn parse_zoom(from: Option<String>, to: Option<String>) -> Option<Zoom> {
    let (from, to) = (from?.parse::<i64>().ok()?, to?.parse::<i64>().ok()?);
    (0 <= from && from < to).then_some((from, to))
}

/// Raw samples up to an hour, one-minute rollups up to a day, one-hour rollups beyond.
fn resolution_for(span_ms: i64) -> Option<&'static str> {
    if span_ms <= Range::Hour.ms() {
        None
    } else if span_ms <= Range::Day.ms() {
        Some("1m")
    } else {
        Some("1h")
    }
}

async fn load(uuid: String, range: Range, zoom: Option<Zoom>, cache: StoredValue<Cache>) -> ApiResult<Detail> {
    let GpuDetail { gpu, data_quality, .. } = api::gpu(&uuid).await?;
    let now = now_ms();
    let (from, to, anchored) = match zoom {
        Some((from, to)) => (from, to, false),
        None => {
            let anchored = gpu.info.last_seen_ms < now - range.ms();
            let to = if anchored { gpu.info.last_seen_ms + 1 } else { now + 1 };
            (to - range.ms(), to, anchored)
        }
    };
    // Beyond an hour, charts come from the rollups (1-minute or 1-hour means), when the
    // server has them.
    let resolution = resolution_for(to - from);
    if let Some(res) = resolution {
        match api::series(&uuid, from, to, res).await {
            Ok(series) => {
                let samples = series.points.iter().map(point_sample).collect();
                let label = if res == "1m" { "one-minute" } else { "one-hour" };
                let note = Some(format!("Charts show {label} averages from the rollups."));
                return Ok(Detail {
                    gpu,
                    from,
                    to,
                    anchored,
                    samples: Arc::new(samples),
                    note,
                    rollup: true,
                    data_quality,
                });
            }
            Err(e) if e.is_missing_endpoint() => {}
            Err(e) => return Err(e),
        }
    }
    let key = (uuid.clone(), range, anchored, zoom);
    // `try_`: the page may have been left while the answers above were on their way.
    let (mut samples, mut note) = cache
        .try_with_value(|c| {
            if c.key.as_ref() == Some(&key) { (c.samples.clone(), c.note.clone()) } else { (Vec::new(), None) }
        })
        .unwrap_or_default();
    if samples.is_empty() {
        let first = api::samples(&uuid, from, to, LIMIT).await?;
        samples = first.samples;
        if first.truncated && samples.len() >= 2 {
            // Too many for one page: show the most recent page at full resolution.
            let span = samples[samples.len() - 1].ts_ms - samples[0].ts_ms;
            let dt = (span / (samples.len() as i64 - 1)).max(1);
            let recent_from = (to - dt * i64::from(LIMIT) * 9 / 10).max(from);
            samples = api::samples(&uuid, recent_from, to, LIMIT).await?.samples;
            note = Some(format!(
                "Showing the most recent {} at full resolution; longer history needs the rollup API.",
                format::duration_ms(to - recent_from)
            ));
        }
    } else {
        let after = samples.last().map_or(from, |s| s.ts_ms + 1);
        if after < to {
            let more = api::samples(&uuid, after, to, LIMIT).await?;
            samples.extend(more.samples.into_iter().filter(|s| s.ts_ms >= after));
        }
        let cut = samples.partition_point(|s| s.ts_ms < from);
        samples.drain(..cut);
        let excess = samples.len().saturating_sub(2 * LIMIT as usize);
        samples.drain(..excess);
    }
    cache.set_value(Cache { key: Some(key), samples: samples.clone(), note: note.clone() });
    Ok(Detail { gpu, from, to, anchored, samples: Arc::new(samples), note, rollup: false, data_quality })
}

/// A state window length giving about 120 windows over the data, from a list of round values.
fn window_s(span_ms: i64) -> u32 {
    const STEPS: [u32; 16] = [2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 86400];
    let want = span_ms as f64 / 1000.0 / 120.0;
    STEPS.into_iter().find(|s| f64::from(*s) >= want).unwrap_or(86400)
}

/// The route's parameter: `/gpus/:uuid`.
#[derive(Params, Clone, PartialEq)]
struct GpuParams {
    uuid: Option<String>,
}

#[component]
pub fn GpuDetailPage() -> impl IntoView {
    let ctx = use_app();
    let params = use_params::<GpuParams>();
    let uuid = Memo::new(move |_| params.with(|p| p.as_ref().ok().and_then(|p| p.uuid.clone()).unwrap_or_default()));
    let query = use_query_map();
    let zoom = Memo::new(move |_| query.with(|q| parse_zoom(q.get("from"), q.get("to"))));
    let cache = StoredValue::new(Cache::default());
    let res = polled(move || load(uuid.get(), ctx.range.get(), zoom.get(), cache));
    let detail = latest_ok(res);
    let has_data = Signal::derive(move || detail.with(Option::is_some));
    Effect::new(move || {
        let name = detail.with(|d| d.as_ref().and_then(|d| d.gpu.info.name.clone()));
        super::set_title(&name.unwrap_or_else(|| "GPU".into()));
    });

    // The state timeline follows the samples' window.
    let window = Memo::new(move |_| {
        detail.with(|d| {
            d.as_ref().map(|d| {
                let start = d.from.max(d.gpu.info.first_seen_ms);
                (d.gpu.info.uuid.clone(), d.from, d.to, window_s(d.to - start))
            })
        })
    });
    let states_res = LocalResource::new(move || {
        let w = window.get();
        async move {
            match w {
                Some((u, from, to, win)) => api::states(&u, from, to, win).await,
                None => Ok(Vec::new()),
            }
        }
    });

    view! {
        <nav class="crumbs" aria-label="Breadcrumb"><a href="/gpus">"GPUs"</a> " / " <span>{move || uuid.get()}</span></nav>
        <PollStatus res has_data>
            <DetailBody detail states_res zoom/>
            <GpuAlerts uuid/>
        </PollStatus>
    }
}

/// For each open alert held back by another, the chain to the alert that speaks for them all:
/// `Busy but hollow ← Stalled GPU (possible hung collective) ← Agent offline`.
fn inhibition_chains(list: &[fleetlens_api::AlertView]) -> Vec<String> {
    let by_id: std::collections::HashMap<AlertId, &fleetlens_api::AlertView> = list.iter().map(|a| (a.id, a)).collect();
    // Only the ends of chains: alerts no other open alert is held back by.
    let sources: std::collections::HashSet<AlertId> =
        list.iter().filter(|a| a.status != AlertStatus::Resolved).filter_map(|a| a.inhibited_by).collect();
    list.iter()
        .filter(|a| a.status != AlertStatus::Resolved && a.inhibited_by.is_some() && !sources.contains(&a.id))
        .map(|a| {
            let mut names = vec![a.rule_name.clone()];
            let mut next = a.inhibited_by;
            while let Some(id) = next {
                if names.len() > 8 {
                    break;
                }
                match by_id.get(&id) {
                    Some(src) => {
                        names.push(format!("{} ({})", src.rule_name, src.status));
                        next = src.inhibited_by;
                    }
                    None => {
                        names.push(format!("alert {id} (another GPU)"));
                        next = None;
                    }
                }
            }
            names.join(" ← ")
        })
        .collect()
}

/// The GPU's newest alerts, open or resolved.
#[component]
fn GpuAlerts(uuid: Memo<String>) -> impl IntoView {
    let res = polled(move || {
        let u = uuid.get();
        async move { api::gpu_alerts(&u, 20).await }
    });
    let data = latest_ok(res);
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let alerts = Signal::derive(move || data.get().map(|d| d.alerts).unwrap_or_default());
    view! {
        <Card title_id="gpu-alerts-title" title="Alerts on this GPU">
            <CardHead slot>
                <a href="/alerts">"All alerts, rules and silences"</a>
            </CardHead>
            <PollStatus res has_data/>
            <NonEmpty items=alerts empty="No alert on this GPU." let:list>{
                let chains = inhibition_chains(&list);
                view! {
                    {(!chains.is_empty()).then(|| view! {
                        <div class="inhibition-chains">
                            <p class="muted">"Held back (inhibited): these alerts send nothing while the alert after them is open."</p>
                            <ul>{chains.into_iter().map(|c| view! { <li class="inhibition-chain">{c}</li> }).collect_view()}</ul>
                        </div>
                    })}
                    <DataTable
                        class="gpu-alert-table"
                        caption="Alerts on this GPU"
                        columns={[
                            Column::text("Status"),
                            Column::text("Rule"),
                            Column::text("Severity"),
                            Column::text("Summary"),
                            Column::text("When"),
                        ]}
                    >
                        {list.into_iter().map(|a| {
                            let class = match a.status {
                                AlertStatus::Firing => "pill pill-bad",
                                AlertStatus::Pending => "pill pill-warn",
                                AlertStatus::Resolved => "pill pill-ok",
                            };
                            let since = a.fired_at_ms.unwrap_or(a.active_since_ms);
                            let when = match a.resolved_at_ms {
                                Some(r) => format!("{} – {}", crate::format::date_time(since), crate::format::date_time(r)),
                                None => crate::format::date_time(since),
                            };
                            let held = (a.inhibited && a.status != AlertStatus::Resolved).then(|| {
                                let title = a.inhibited_by.map(|id| format!("held back by alert {id}")).unwrap_or_default();
                                view! { " " <span class="pill pill-muted" title=title>"inhibited"</span> }
                            });
                            view! {
                                <tr>
                                    <td><span class=class>{a.status.as_str()}</span>{held}</td>
                                    <td>{a.rule_name.clone()}</td>
                                    <td>{a.severity.as_str()}</td>
                                    <td>
                                        {a.summary.clone()}
                                        {(!a.advice.is_empty()).then(|| view! { <span class="cell-note">{format!("What to do: {}", a.advice)}</span> })}
                                    </td>
                                    <td>{when}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                }
            }</NonEmpty>
        </Card>
    }
}

/// (name, color kind, accessor) of one line.
type Part = (&'static str, &'static str, fn(&Sample) -> Option<f64>);

fn series(d: &Option<Detail>, parts: &[Part]) -> Vec<Series> {
    parts
        .iter()
        .map(|(name, kind, f)| Series {
            name,
            kind,
            points: d.as_ref().map(|d| d.samples.iter().map(|s| (s.ts_ms, f(s))).collect()).unwrap_or_default(),
        })
        .collect()
}

fn fmt_pct(v: f64) -> String {
    format::pct(v)
}
fn fmt_w(v: f64) -> String {
    format!("{} W", format::fx(v, 0))
}

#[component]
fn DetailBody(
    detail: Latest<Detail>,
    states_res: LocalResource<ApiResult<Vec<StateWindow>>>,
    zoom: Memo<Option<Zoom>>,
) -> impl IntoView {
    let ctx = use_app();
    // A range brushed on any chart goes into the address (like the range picker's choice);
    // `zoom` follows the address.
    let set_query = query_updater();
    let brushed = RwSignal::new(None::<Zoom>);
    let set_zoom = Callback::new(move |range: Zoom| brushed.set(Some(range)));
    Effect::new({
        let set_query = set_query.clone();
        move || {
            if let Some((from, to)) = brushed.get() {
                set_query(&[("from", &from.to_string()), ("to", &to.to_string())]);
            }
        }
    });
    let reset_zoom = move |_: leptos::ev::MouseEvent| set_query(&[("from", ""), ("to", "")]);
    let live = use_app().stream;
    // The GPU of the last answer, with the state the live stream told since.
    let gpu: Latest<GpuSummary> = Memo::new(move |_| {
        let mut gpu = detail.with(|d| d.as_ref().map(|d| d.gpu.clone()))?;
        if let Some(p) =
            live.gpus.with(|g| g.get(&gpu.info.uuid).cloned()).filter(|p| p.last_seen_ms >= gpu.info.last_seen_ms)
        {
            gpu.state = Some(p.state);
            gpu.info.last_seen_ms = p.last_seen_ms;
        }
        Some(gpu)
    });
    let g = move |f: fn(&GpuSummary) -> String| move || gpu.with(|g| g.as_ref().map(f).unwrap_or_default());
    // From the first sample in the range (a GPU that joined late, or a short trace, fills the
    // width) to the end of the range.
    let x_range = Signal::derive(move || {
        detail.with(|d| {
            d.as_ref()
                .map(|d| (d.samples.first().map_or(d.from, |s| s.ts_ms.max(d.from)).min(d.to - 1), d.to))
                .unwrap_or((0, 1))
        })
    });
    let state = Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.state)));

    let util_sm = Signal::derive(move || {
        detail.with(|d| {
            series(d, &[("Kernel utilization", "util", |s| s.gpu_util_pct), ("SM activity", "sm", |s| s.sm_active_pct)])
        })
    });
    let tensor = Signal::derive(move || {
        detail.with(|d| {
            series(
                d,
                &[
                    ("Tensor activity", "tensor", |s| s.tensor_active_pct),
                    ("SM occupancy", "occ", |s| s.sm_occupancy_pct),
                ],
            )
        })
    });
    let dram = Signal::derive(move || detail.with(|d| series(d, &[("DRAM activity", "dram", |s| s.dram_active_pct)])));
    let mem = Signal::derive(move || {
        detail.with(|d| series(d, &[("Memory used", "mem", |s| s.mem_used_bytes.map(|b| b as f64 / GIB))]))
    });
    let power = Signal::derive(move || detail.with(|d| series(d, &[("Power", "power", |s| s.power_w)])));
    let mem_max = Signal::derive(move || {
        gpu.with(|g| {
            g.as_ref().and_then(|g| g.latest.as_ref().and_then(|s| s.mem_total_bytes).or(g.info.mem_total_bytes))
        })
        .map(|b| b as f64 / GIB)
        .unwrap_or(80.0)
    });
    let power_limit = Signal::derive(move || {
        gpu.with(|g| g.as_ref().and_then(|g| g.latest.as_ref().and_then(|s| s.power_limit_w).or(g.info.power_limit_w)))
    });
    let power_max = Signal::derive(move || {
        let peak = power.with(|p| p[0].avg_max().map(|(_, m)| m)).unwrap_or(0.0);
        nice_ceil(power_limit.get().unwrap_or(0.0).max(peak * 1.05))
    });
    let anchored_note = move || {
        detail.with(|d| {
            d.as_ref().filter(|d| d.anchored).map(|d| {
                format!(
                    "No sample from this GPU in the {}: showing the {} up to its last sample ({}).",
                    ctx.range.get_untracked().long_label(),
                    ctx.range.get_untracked().label(),
                    format::date_time(d.gpu.info.last_seen_ms)
                )
            })
        })
    };
    let note = move || detail.with(|d| d.as_ref().and_then(|d| d.note.clone()));
    // One line per data-quality flag: what was wrong, how often, and that it was left out.
    let quality_notes = move || {
        detail.with(|d| {
            d.as_ref()
                .map(|d| {
                    d.data_quality
                        .iter()
                        .map(|f| {
                            format!(
                                "Data quality: {} reading{} in the last 24 h with {} (last at {}); left out of every average and state.",
                                f.samples,
                                if f.samples == 1 { "" } else { "s" },
                                f.rule,
                                format::date_time(f.last_minute_ms)
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    };
    let sample_count = move || {
        detail.with(|d| match d {
            Some(d) if d.rollup => format!("{} rollup points", d.samples.len()),
            Some(d) => format!("{} samples", d.samples.len()),
            None => String::new(),
        })
    };

    view! {
        <div class="page-head detail-head">
            <div>
                <h1>{g(|g| g.info.name.clone().unwrap_or_else(|| "Unknown GPU".into()))}</h1>
                <p class="muted">
                    {g(|g| match g.info.gpu_index { Some(i) => format!("{} · GPU {i}", g.info.host), None => g.info.host.clone() })}
                    " · " <code class="uuid">{g(|g| g.info.uuid.clone())}</code>
                </p>
            </div>
            <div class="detail-now">
                <StateBadge state/>
                <div class="eff" title="SM activity ÷ kernel utilization × 100 (latest sample)">
                    <span class="eff-label">"Efficiency score"</span>
                    <span class="eff-value" class:eff-word=move || gpu.with(|g| g.as_ref().is_none_or(|g| g.efficiency.is_none()))>
                        {g(|g| efficiency_text(g.efficiency, g.latest.as_ref()))}
                    </span>
                </div>
            </div>
        </div>
        {move || anchored_note().map(|t| view! { <p class="banner banner-info">{t}</p> })}
        {move || zoom.get().map(|(from, to)| {
            let reset_zoom = reset_zoom.clone();
            view! {
                <p class="banner banner-info zoom-bar" data-testid="zoom">
                    "Zoomed to " {format::date_time(from)} " – " {format::date_time(to)} " (" {format::duration_ms(to - from)} "). "
                    <button type="button" class="btn" on:click=reset_zoom>"Show the whole " {ctx.range.get_untracked().long_label()}</button>
                </p>
            }
        })}
        {move || note().map(|t| view! { <p class="banner banner-info">{t}</p> })}
        {move || quality_notes().into_iter().map(|t| view! { <p class="banner banner-info" data-testid="data-quality">{t}</p> }).collect_view()}

        <section class="card" aria-labelledby="story-title">
            <h2 id="story-title" class="sr-only">"Kernel utilization and SM activity"</h2>
            <LineChart
                title="Kernel utilization vs SM activity"
                note="Kernel utilization says a kernel was running; SM activity says how many SMs worked. The shaded gap is GPU time paid for with the SMs idle."
                series=util_sm
                x_range
                y_max=100.0
                fmt=fmt_pct
                gap=true
                width=1160.0
                height=260.0
                on_brush=set_zoom
            />
            <p class="muted small">{sample_count}</p>
        </section>

        <Card title_id="timeline-title" title="Workload states">
            <StatesPanel states_res x_range state/>
        </Card>

        <div class="chart-grid">
            <section class="card"><LineChart title="Tensor activity and SM occupancy" series=tensor x_range y_max=100.0 fmt=fmt_pct on_brush=set_zoom/></section>
            <section class="card"><LineChart title="DRAM activity" series=dram x_range y_max=100.0 fmt=fmt_pct on_brush=set_zoom/></section>
            <section class="card"><LineChart title="Memory used" series=mem x_range y_max=mem_max fmt=format::gibs on_brush=set_zoom/></section>
            <section class="card"><LineChart title="Power" series=power x_range y_max=power_max fmt=fmt_w limit=power_limit on_brush=set_zoom/></section>
        </div>

        <Card title_id="proc-title" title="Processes">
            <Processes gpu/>
        </Card>
        <Allocations gpu/>

        <Card title_id="now-title" title="Latest sample">
            <LatestSample gpu/>
        </Card>
    }
}

#[component]
fn StatesPanel(
    states_res: LocalResource<ApiResult<Vec<StateWindow>>>,
    x_range: Signal<(i64, i64)>,
    state: Signal<Option<WorkloadState>>,
) -> impl IntoView {
    let windows_memo = latest_ok(states_res);
    let has = Signal::derive(move || windows_memo.with(Option::is_some));
    let windows = Signal::derive(move || windows_memo.get().unwrap_or_default());
    // The newest window says what the GPU does now and what to do about it.
    let last = move || windows.with(|w| w.last().cloned());
    let advice = move || {
        let current = state.get();
        let (name, reason, note, advice) = match last() {
            // The newest window speaks for now unless the GPU has since changed state
            // (typically: gone offline after its last samples).
            Some(w) if current.is_none_or(|c| c == w.state) => {
                (Some(w.state), w.reason.clone(), w.note.clone(), w.advice.clone())
            }
            _ => (current, String::new(), None, current.map_or("", WorkloadState::advice).to_string()),
        };
        let name = name?;
        Some(view! {
            <div class="advice-box" data-state=name.as_str()>
                <p><strong>"Now: "</strong><StateBadge state=Some(name)/>" — " {name.meaning()}</p>
                {(!reason.is_empty()).then(|| view! { <p class="muted">"Why: " {reason}</p> })}
                {note.map(|n| view! { <p class="muted">"Note: " {n}</p> })}
                {(!advice.is_empty()).then(|| view! { <p class="advice"><strong>"What to do: "</strong>{advice}</p> })}
            </div>
        })
    };
    view! {
        <PollStatus res=states_res has_data=has>
            <StateTimeline windows x_range/>
        </PollStatus>
        {advice}
    }
}

#[component]
fn Processes(gpu: Latest<GpuSummary>) -> impl IntoView {
    const DASH: &str = "—";
    move || {
        let procs = gpu.with(|g| g.as_ref().and_then(|g| g.latest.as_ref()).map(|s| s.processes.clone()));
        match procs {
            None => view! { <Empty message="No sample yet."/> }.into_any(),
            Some(None) => view! { <Empty message="The process list could not be read on this host."/> }.into_any(),
            Some(Some(p)) if p.is_empty() => view! { <Empty message="No process on this GPU in the latest sample."/> }.into_any(),
            Some(Some(p)) => view! {
                <DataTable
                    class="proc-table"
                    caption="Processes on this GPU in the latest sample, and their owners"
                    columns={[
                        Column::num("PID"),
                        Column::text("User"),
                        Column::text("Pod"),
                        Column::text("Container"),
                        Column::text("Job"),
                        Column::text("Command"),
                        Column::num("Memory"),
                        Column::num("SM %"),
                    ]}
                >
                    {p.into_iter().map(|p| {
                        let user = owners::user(&p);
                        let pod = owners::pod(&p);
                        let pod_title = p.owner.as_ref().and_then(|o| o.pod_uid.clone()).map(|u| format!("pod UID {u}"));
                        let container = owners::container_short(&p);
                        let container_title = owners::container_full(&p);
                        let job = owners::job(&p);
                        let job_user = p.owner.as_ref().and_then(|o| o.job_user.clone()).filter(|j| Some(j) != user.as_ref());
                        let labels = p
                            .owner
                            .as_ref()
                            .map(|o| o.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))
                            .filter(|l| !l.is_empty());
                        let (no_user, no_pod, no_container, no_job) =
                            (user.is_none(), pod.is_none(), container.is_none(), job.is_none());
                        view! {
                            <tr>
                                <td class="num">{p.pid}</td>
                                <td data-col="user" class:na=no_user>{user.unwrap_or_else(|| DASH.into())}</td>
                                <td data-col="pod" class:na=no_pod title=pod_title>{pod.unwrap_or_else(|| DASH.into())}</td>
                                <td data-col="container" class:mono=!no_container class:na=no_container title=container_title>
                                    {container.unwrap_or_else(|| DASH.into())}
                                </td>
                                <td data-col="job" class:na=no_job>
                                    {job.unwrap_or_else(|| DASH.into())}
                                    {job_user.map(|u| view! { <span class="cell-note">{format!("as {u}")}</span> })}
                                </td>
                                <td class="cmd">
                                    {p.command.unwrap_or_else(|| DASH.into())}
                                    {labels.map(|l| view! { <span class="cell-note">{l}</span> })}
                                </td>
                                <td class="num">{p.used_bytes.map(format::gib).unwrap_or_else(|| "n/a".into())}</td>
                                <td class="num">{p.sm_pct.map(format::pct).unwrap_or_else(|| "n/a".into())}</td>
                            </tr>
                        }
                    }).collect_view()}
                </DataTable>
            }
            .into_any(),
        }
    }
}

#[component]
fn LatestSample(gpu: Latest<GpuSummary>) -> impl IntoView {
    let prices = use_prices();
    let row = move |label: &'static str, f: fn(&GpuSummary) -> String| {
        let text = move || gpu.with(|g| g.as_ref().map(f).unwrap_or_else(|| NA.into()));
        view! { <div class="adv-row"><dt>{label}</dt><dd class:na=move || text() == NA>{text}</dd></div> }
    };
    fn s(g: &GpuSummary, f: fn(&Sample) -> Option<f64>) -> String {
        format::opt_pct(g.latest.as_ref().and_then(f))
    }
    view! {
        <dl class="adv adv-wide">
            {row("Time", |g| g.latest.as_ref().map(|s| format::date_time(s.ts_ms)).unwrap_or_else(|| NA.into()))}
            {row("Kernel utilization", |g| s(g, |s| s.gpu_util_pct))}
            {row("SM activity", |g| s(g, |s| s.sm_active_pct))}
            {row("SM occupancy", |g| s(g, |s| s.sm_occupancy_pct))}
            {row("Tensor activity", |g| s(g, |s| s.tensor_active_pct))}
            {row("DRAM activity", |g| s(g, |s| s.dram_active_pct))}
            {row("FP16 pipe", |g| s(g, |s| s.fp16_active_pct))}
            {row("FP32 pipe", |g| s(g, |s| s.fp32_active_pct))}
            {row("FP64 pipe", |g| s(g, |s| s.fp64_active_pct))}
            {row("Power", |g| power_text(g.latest.as_ref().and_then(|s| s.power_w), g.latest.as_ref().and_then(|s| s.power_limit_w).or(g.info.power_limit_w)))}
            {row("Temperature", |g| format::opt_num(g.latest.as_ref().and_then(|s| s.temp_c), " °C", 0))}
            {row("SM clock", |g| format::opt_num(g.latest.as_ref().and_then(|s| s.sm_clock_mhz), " MHz", 0))}
            {row("Throttle reasons", |g| g.latest.as_ref().and_then(|s| s.throttle_reasons).map(states::throttle_reasons).unwrap_or_else(|| NA.into()))}
            <div class="adv-row">
                <dt>"Cost per hour"</dt>
                <dd>{move || prices.with(|p| cost_text(gpu.with(|g| g.as_ref().and_then(|g| g.info.name.clone())).as_deref(), p.as_ref()))}</dd>
            </div>
        </dl>
    }
}
