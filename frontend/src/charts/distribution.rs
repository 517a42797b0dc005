//! Where the GPU-hours went: a stacked bar of hours per workload state with a table.

use fleetlens_api::FleetSummary;
use fleetlens_core::WorkloadState;
use leptos::prelude::*;

use crate::components::state_badge::StateBadge;
use crate::components::table::{Column, DataTable};
use crate::ctx::Latest;
use crate::format;
use crate::states;

/// Hours by state of the fleet summary `data` (read whole, as `Funnel` does).
#[component]
pub fn StateDistribution(data: Latest<FleetSummary>) -> impl IntoView {
    // METRICS.md order, then anything unknown.
    let ordered = move || {
        data.with(|d| {
            let Some(h) = d.as_ref().map(|d| &d.hours_by_state) else { return (Vec::new(), 0.0) };
            let total: f64 = h.values().sum();
            let mut v: Vec<(String, f64)> =
                WorkloadState::ALL.iter().filter_map(|s| h.get(s.as_str()).map(|x| (s.to_string(), *x))).collect();
            v.extend(h.iter().filter(|(k, _)| WorkloadState::parse(k).is_none()).map(|(k, x)| (k.clone(), *x)));
            (v.into_iter().filter(|(_, x)| *x > 0.0).collect::<Vec<_>>(), total)
        })
    };
    let bar = move || {
        let (v, total) = ordered();
        v.into_iter()
            .map(|(s, h)| {
                let w = if total > 0.0 { h / total * 100.0 } else { 0.0 };
                view! { <div class=format!("band-seg band-{s}") style:width=format!("{}%", format::fx(w, 2)) title=format!("{}: {}", states::name_label(&s), format::hours(h))></div> }
            })
            .collect_view()
    };
    let rows = move || {
        let (v, total) = ordered();
        let (cur, priced) =
            data.with(|d| d.as_ref().map(|d| (d.currency.clone(), d.cost.is_some())).unwrap_or_default());
        v.into_iter()
            .map(|(s, h)| {
                let share = if total > 0.0 { h / total } else { 0.0 };
                let cost = data.with(|d| d.as_ref().and_then(|d| d.wasted_cost_by_state.get(&s).copied()));
                let cost_text = match cost {
                    Some(c) if c > 0.0 => format::money(c, &cur),
                    _ if !states::is_waste_name(&s) => "—".into(),
                    _ if !priced => "no price set".into(),
                    _ => format::money(0.0, &cur),
                };
                view! {
                    <tr>
                        <th scope="row"><StateBadge state=WorkloadState::parse(&s)/></th>
                        <td class="num">{format::hours(h)}</td>
                        <td class="num">{format::frac(share)}</td>
                        <td class="num" class:waste=cost.is_some_and(|c| c > 0.0)>{cost_text}</td>
                        <td class="muted">{WorkloadState::parse(&s).map_or("", WorkloadState::meaning)}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <div class="stacked" aria-hidden="true">{bar}</div>
        <DataTable
            class=""
            caption="GPU-hours by workload state"
            columns={[
                Column::text("State"),
                Column::num("GPU-hours"),
                Column::num("Share"),
                Column::num("Wasted cost"),
                Column::text("Meaning"),
            ]}
        >
            {rows}
        </DataTable>
    }
}
