//! The fleet utilization funnel: paid → allocation → kernel → SM → tensor (→ MFU), one bar per
//! level with the dollars lost between each step and the next.

use fleetlens_api::FleetSummary;
use fleetlens_core::FunnelLevelName;
use leptos::prelude::*;

use crate::ctx::Latest;
use crate::format;

pub fn level_name(level: FunnelLevelName) -> (&'static str, &'static str) {
    match level {
        FunnelLevelName::Allocation => {
            ("Allocation utilization", "GPU-time with at least one application process on the GPU")
        }
        FunnelLevelName::Kernel => {
            ("Kernel utilization", "GPU-time a kernel was running (what nvidia-smi calls utilization)")
        }
        FunnelLevelName::Sm => ("SM utilization", "GPU-time weighted by SM activity: the share of SMs actually busy"),
        FunnelLevelName::Tensor => {
            ("Tensor utilization", "GPU-time weighted by tensor activity: the math the GPU was bought for")
        }
        FunnelLevelName::Mfu => ("MFU", "achieved model FLOP/s over the GPU's dense peak, where jobs report it"),
    }
}

/// The funnel of the fleet summary `data`. It reads the summary itself (rather than a signal per
/// field): every distinct signal type costs the page its own copy of the reactive machinery.
#[component]
pub fn Funnel(data: Latest<FleetSummary>) -> impl IntoView {
    let rows = move || {
        data.with(|d| {
            let Some(d) = d else { return Vec::new() };
            let cur = &d.currency;
            let mut prev: Option<f64> = Some(1.0);
            d.funnel
                .iter()
                .map(|l| {
                    let (name, hint) = level_name(l.level);
                    let width = l.fraction.map(|f| (f * 100.0).clamp(0.0, 100.0)).unwrap_or(0.0);
                    let lost = match (prev, l.fraction) {
                        (Some(p), Some(f)) => Some((p - f).max(0.0)),
                        _ => None,
                    };
                    if l.fraction.is_some() {
                        prev = l.fraction;
                    }
                    let gap_text = match l.gap_cost {
                        Some(c) if c < 0.005 => "nothing lost".into(),
                        Some(c) => format!("{} lost", format::money(c, cur)),
                        None if l.fraction.is_none() => String::new(),
                        None => "no price set".into(),
                    };
                    let coverage = l.coverage.filter(|c| *c < 0.995 && l.fraction.is_some());
                    view! {
                        <li class="funnel-row" data-level=l.level.as_str()>
                            <div class="funnel-label">
                                <span class="funnel-name" title=hint>{name}</span>
                                <span class="funnel-hint">{hint}</span>
                            </div>
                            <div class="funnel-track" aria-hidden="true">
                                <div class=format!("funnel-fill funnel-{}", l.level) style:width=format!("{}%", format::fx(width, 1))></div>
                                {lost.filter(|x| *x > 0.0).map(|x| view! {
                                    <div class="funnel-lost" style:left=format!("{}%", format::fx(width, 1)) style:width=format!("{}%", format::fx(x * 100.0, 1))></div>
                                })}
                            </div>
                            <div class="funnel-value">
                                <strong>{l.fraction.map(format::frac).unwrap_or_else(|| "not measured".into())}</strong>
                                {coverage.map(|c| view! { <span class="funnel-coverage">{format!("measured on {} of GPU-time", format::frac(c))}</span> })}
                            </div>
                            <div class="funnel-cost" class:waste=l.gap_cost.is_some_and(|c| c > 0.0)>{gap_text}</div>
                        </li>
                    }
                })
                .collect_view()
        })
    };
    view! {
        <ol class="funnel" aria-label="Utilization funnel: each level is a share of the GPU-time paid for">
            <li class="funnel-row funnel-paid">
                <div class="funnel-label">
                    <span class="funnel-name">"Paid for"</span>
                    <span class="funnel-hint">"every registered GPU, online or not"</span>
                </div>
                <div class="funnel-track" aria-hidden="true"><div class="funnel-fill funnel-paid-fill" style:width="100%"></div></div>
                <div class="funnel-value"><strong>"100%"</strong></div>
                <div class="funnel-cost"></div>
            </li>
            {rows}
        </ol>
    }
}
