//! The state timeline: one colored band per run of equal workload states (from the states
//! API), with a legend of time per state and a table of the runs as text equivalent.

use std::collections::BTreeMap;

use fleetlens_api::StateWindow;
use fleetlens_core::WorkloadState;
use leptos::prelude::*;

use crate::components::state_badge::StateBadge;
use crate::format;
use crate::states;

/// Consecutive windows of one state, merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub from_ms: i64,
    pub to_ms: i64,
    pub state: WorkloadState,
    pub reason: String,
}

pub fn runs(windows: &[StateWindow]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for w in windows {
        match out.last_mut() {
            Some(r) if r.state == w.state && w.from_ms <= r.to_ms => r.to_ms = r.to_ms.max(w.to_ms),
            _ => out.push(Run { from_ms: w.from_ms, to_ms: w.to_ms, state: w.state, reason: w.reason.clone() }),
        }
    }
    out
}

#[component]
pub fn StateTimeline(
    #[prop(into)] windows: Signal<Vec<StateWindow>>,
    #[prop(into)] x_range: Signal<(i64, i64)>,
) -> impl IntoView {
    let runs = Memo::new(move |_| windows.with(|w| runs(w)));
    let bands = move || {
        let (x0, x1) = x_range.get();
        let span = (x1 - x0).max(1) as f64;
        runs.get()
            .into_iter()
            .map(|r| {
                let left = ((r.from_ms - x0) as f64 / span * 100.0).clamp(0.0, 100.0);
                let right = ((r.to_ms - x0) as f64 / span * 100.0).clamp(0.0, 100.0);
                let tip = format!(
                    "{} {}–{} ({}): {}",
                    states::label(r.state),
                    format::clock(r.from_ms),
                    format::clock(r.to_ms),
                    format::duration_ms(r.to_ms - r.from_ms),
                    r.reason
                );
                view! {
                    <div
                        class=format!("band band-{}", r.state)
                        style:left=format!("{}%", format::fx(left, 3))
                        style:width=format!("{}%", format::fx((right - left).max(0.15), 3))
                        title=tip
                    ></div>
                }
            })
            .collect_view()
    };
    let totals = move || {
        // In METRICS.md priority order (the states' `Ord`).
        let mut t: BTreeMap<WorkloadState, i64> = BTreeMap::new();
        for r in runs.get() {
            *t.entry(r.state).or_default() += r.to_ms - r.from_ms;
        }
        t.into_iter()
            .map(|(s, ms)| {
                view! { <li><StateBadge state=Some(s)/>" "{format::duration_ms(ms)}</li> }
            })
            .collect_view()
    };
    let rows = move || {
        runs.get()
            .into_iter()
            .take(300)
            .map(|r| {
                view! {
                    <tr>
                        <td>{format::date_time(r.from_ms)}</td>
                        <td>{format::duration_ms(r.to_ms - r.from_ms)}</td>
                        <td><StateBadge state=Some(r.state)/></td>
                        <td>{r.reason.clone()}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <div class="timeline-wrap">
            {move || runs.with(Vec::is_empty).then(|| view! { <p class="chart-empty">"No state windows in this range."</p> })}
            <div class="timeline" role="img" aria-label=move || {
                let parts: Vec<String> = runs.get().iter().take(40).map(|r| format!("{} for {}", states::label(r.state), format::duration_ms(r.to_ms - r.from_ms))).collect();
                format!("Workload states over time: {}", parts.join(", "))
            }>{bands}</div>
            <ul class="legend timeline-legend">{totals}</ul>
            <details class="chart-table">
                <summary>"State table"</summary>
                <div class="table-wrap">
                    <table class="data">
                        <thead><tr><th scope="col">"From"</th><th scope="col">"Duration"</th><th scope="col">"State"</th><th scope="col">"Why"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            </details>
        </div>
    }
}
