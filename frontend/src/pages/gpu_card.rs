//! One GPU on the GPUs page: identity, state, kernel utilization next to SM activity, the
//! efficiency score, memory, and (on demand) the advanced metrics.

use fleetlens_api::{GpuSummary, Sample};
use leptos::prelude::*;

use crate::api;
use crate::components::meter::Meter;
use crate::components::state_badge::StateBadge;
use crate::ctx::{Latest, latest_ok, now_ms, use_app};
use crate::format::{self, NA};
use crate::{owners, states};
use fleetlens_api::analytics::Prices;

/// Efficiency score text: a number, "no kernel running", or n/a.
pub fn efficiency_text(eff: Option<f64>, latest: Option<&Sample>) -> String {
    match (eff, latest) {
        (Some(e), _) => format::fx(e, 0).to_string(),
        (None, Some(s)) if s.sm_active_pct.is_none() => NA.into(),
        (None, Some(s)) if s.gpu_util_pct == Some(0.0) => "no kernel running".into(),
        _ => NA.into(),
    }
}

/// "312 W of 700 W (45%)".
pub fn power_text(power: Option<f64>, limit: Option<f64>) -> String {
    match (power, limit) {
        (Some(p), Some(l)) if l > 0.0 => {
            format!("{} W of {} W ({})", format::fx(p, 0), format::fx(l, 0), format::pct(p / l * 100.0))
        }
        (Some(p), _) => format!("{} W", format::fx(p, 0)),
        (None, _) => NA.into(),
    }
}

pub fn memory_text(used: Option<i64>, total: Option<i64>) -> Option<String> {
    match (used, total) {
        (Some(u), Some(t)) => Some(format!("{} / {}", format::gib(u), format::gib(t))),
        (Some(u), None) => Some(format::gib(u)),
        _ => None,
    }
}

/// Cost per GPU-hour: the organisation's price, else the shipped list price, else "no price set".
pub fn cost_text(name: Option<&str>, prices: Option<&Prices>) -> String {
    let found = match prices {
        Some(p) => name.and_then(|n| p.price_for(n)).map(|(v, own)| (v, own, p.currency.as_str())),
        None => name.and_then(states::list_price).map(|v| (v, false, "USD")),
    };
    match found {
        Some((v, true, cur)) => format!("{}/h · your price", format::money(v, cur)),
        Some((v, false, cur)) => format!("{}/h · list price", format::money(v, cur)),
        None => "no price set".into(),
    }
}

/// The organisation's prices, fetched once per page (cards fall back to list prices).
pub fn use_prices() -> Latest<Prices> {
    latest_ok(LocalResource::new(api::prices))
}

#[component]
pub fn GpuCard(
    gpu: Latest<GpuSummary>,
    uuid: String,
    #[prop(into)] expanded: Signal<bool>,
    on_toggle: Callback<()>,
    prices: Latest<Prices>,
) -> impl IntoView {
    let ctx = use_app();
    let s = move |f: fn(&Sample) -> Option<f64>| {
        move || gpu.with(|g| g.as_ref().and_then(|g| g.latest.as_ref()).and_then(f))
    };
    let name =
        move || gpu.with(|g| g.as_ref().and_then(|g| g.info.name.clone()).unwrap_or_else(|| "Unknown GPU".into()));
    let place = move || {
        gpu.with(|g| {
            g.as_ref()
                .map(|g| match g.info.gpu_index {
                    Some(i) => format!("{} · GPU {i}", g.info.host),
                    None => g.info.host.clone(),
                })
                .unwrap_or_default()
        })
    };
    let state = Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.state)));
    // Whose processes are on it now (latest sample); nothing when unknown.
    let owner = move || {
        gpu.with(|g| {
            g.as_ref().and_then(|g| g.latest.as_ref()).and_then(|s| s.processes.as_deref()).and_then(owners::summary)
        })
    };
    let eff =
        move || gpu.with(|g| g.as_ref().map(|g| efficiency_text(g.efficiency, g.latest.as_ref())).unwrap_or_default());
    let eff_num = move || gpu.with(|g| g.as_ref().and_then(|g| g.efficiency));
    let mem_pct = Signal::derive(move || {
        gpu.with(|g| {
            let g = g.as_ref()?;
            let used = g.latest.as_ref()?.mem_used_bytes? as f64;
            let total = g.latest.as_ref().and_then(|s| s.mem_total_bytes).or(g.info.mem_total_bytes)? as f64;
            (total > 0.0).then(|| used / total * 100.0)
        })
    });
    let mem_text = Signal::derive(move || {
        gpu.with(|g| {
            g.as_ref().and_then(|g| {
                memory_text(
                    g.latest.as_ref().and_then(|s| s.mem_used_bytes),
                    g.latest.as_ref().and_then(|s| s.mem_total_bytes).or(g.info.mem_total_bytes),
                )
            })
        })
    });
    let last_seen = move || {
        ctx.tick.track();
        gpu.with(|g| g.as_ref().map(|g| format!("last sample {}", format::ago(g.info.last_seen_ms, now_ms()))))
    };
    let adv_id = format!("adv-{}", uuid.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    let href = format!("/gpus/{uuid}");
    let title_id = format!("{adv_id}-title");
    let labelled_by = title_id.clone();

    view! {
        <article class="card gpu-card" data-uuid=uuid.clone() aria-labelledby=labelled_by>
            <header class="gpu-card-head">
                <div>
                    <h2 class="gpu-name" id=title_id>
                        <a href=href.clone()>{name}</a>
                    </h2>
                    <p class="gpu-place">{place}</p>
                    {move || {
                        owner()
                            .map(|o| {
                                view! {
                                    <p class="gpu-owner" title=format!("Owner of the processes on this GPU: {o}")>
                                        <span class="sr-only">"Owner: "</span>
                                        {o.clone()}
                                    </p>
                                }
                            })
                    }}
                </div>
                <StateBadge state/>
            </header>
            <div class="pair">
                <Meter
                    label="Kernel utilization"
                    kind="util"
                    value=Signal::derive(s(|s| s.gpu_util_pct))
                    hint="% of time at least one kernel ran (what nvidia-smi calls GPU utilization)"
                />
                <Meter
                    label="SM activity"
                    kind="sm"
                    value=Signal::derive(s(|s| s.sm_active_pct))
                    hint="% of SMs busy, averaged over time (SMACT)"
                />
            </div>
            <div class="eff-row">
                <div class="eff" title="Efficiency score = SM activity ÷ kernel utilization × 100. 100: the utilization number tells the truth; 20: 80% of the busy time leaves the SMs idle.">
                    <span class="eff-label">"Efficiency score"</span>
                    <span
                        class="eff-value"
                        class:eff-low=move || eff_num().is_some_and(|e| e < 40.0)
                        class:eff-mid=move || eff_num().is_some_and(|e| (40.0..75.0).contains(&e))
                        class:eff-high=move || eff_num().is_some_and(|e| e >= 75.0)
                        class:eff-word=move || eff_num().is_none()
                    >
                        {eff}
                    </span>
                </div>
                <Meter label="Memory used" kind="mem" value=mem_pct text=mem_text/>
            </div>
            <footer class="gpu-card-foot">
                <button
                    type="button"
                    class="btn-toggle"
                    aria-expanded=move || expanded.get().to_string()
                    aria-controls=adv_id.clone()
                    on:click=move |_| on_toggle.run(())
                >
                    {move || if expanded.get() { "Hide advanced metrics" } else { "Show advanced metrics" }}
                </button>
                <span class="muted small">{last_seen}</span>
            </footer>
            <Show when=move || expanded.get()>
                <Advanced gpu id=adv_id.clone() prices/>
            </Show>
        </article>
    }
}

#[component]
fn Advanced(gpu: Latest<GpuSummary>, id: String, prices: Latest<Prices>) -> impl IntoView {
    let s = move |f: fn(&Sample) -> Option<f64>| {
        move || gpu.with(|g| g.as_ref().and_then(|g| g.latest.as_ref()).and_then(f))
    };
    let pct_row = move |label: &'static str, f: fn(&Sample) -> Option<f64>, hint: &'static str| {
        let v = s(f);
        view! {
            <div class="adv-row" title=hint>
                <dt>{label}</dt>
                <dd class:na=move || v().is_none()>{move || format::opt_pct(v())}</dd>
            </div>
        }
    };
    let text_row = move |label: &'static str, text: Box<dyn Fn() -> String + Send + Sync>| {
        let text: std::sync::Arc<dyn Fn() -> String + Send + Sync> = text.into();
        let t2 = text.clone();
        view! {
            <div class="adv-row">
                <dt>{label}</dt>
                <dd class:na=move || t2() == NA>{move || text()}</dd>
            </div>
        }
    };
    let latest = move || gpu.with(|g| g.as_ref().and_then(|g| g.latest.clone()));
    let limit = move || {
        gpu.with(|g| g.as_ref().and_then(|g| g.latest.as_ref().and_then(|s| s.power_limit_w).or(g.info.power_limit_w)))
    };
    view! {
        <dl class="adv" id=id>
            {pct_row("SM occupancy", |s| s.sm_occupancy_pct, "resident warps / maximum warps (SMOCC)")}
            {pct_row("Tensor activity", |s| s.tensor_active_pct, "% of time the tensor pipes were busy")}
            {pct_row("DRAM activity", |s| s.dram_active_pct, "% of peak memory bandwidth used")}
            {pct_row("FP16 pipe", |s| s.fp16_active_pct, "FP16 pipe activity")}
            {pct_row("FP32 pipe", |s| s.fp32_active_pct, "FP32 pipe activity")}
            {pct_row("FP64 pipe", |s| s.fp64_active_pct, "FP64 pipe activity")}
            {text_row("Power", Box::new(move || power_text(latest().and_then(|s| s.power_w), limit())))}
            {text_row("Temperature", Box::new(move || format::opt_num(latest().and_then(|s| s.temp_c), " °C", 0)))}
            {text_row("SM clock", Box::new(move || format::opt_num(latest().and_then(|s| s.sm_clock_mhz), " MHz", 0)))}
            {text_row(
                "Throttle reasons",
                Box::new(move || latest().and_then(|s| s.throttle_reasons).map(states::throttle_reasons).unwrap_or_else(|| NA.into())),
            )}
            {text_row(
                "Cost per hour",
                Box::new(move || prices.with(|p| cost_text(gpu.with(|g| g.as_ref().and_then(|g| g.info.name.clone())).as_deref(), p.as_ref()))),
            )}
        </dl>
    }
}
