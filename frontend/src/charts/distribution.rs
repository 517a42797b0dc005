//! Where the GPU-hours went: a stacked bar of hours per workload state with a table.

use std::collections::BTreeMap;

use leptos::prelude::*;

use crate::components::state_badge::StateBadge;
use crate::format;
use crate::states;

#[component]
pub fn StateDistribution(
    #[prop(into)] hours: Signal<BTreeMap<String, f64>>,
    #[prop(into)] wasted: Signal<BTreeMap<String, f64>>,
    #[prop(into)] currency: Signal<String>,
    #[prop(into)] priced: Signal<bool>,
) -> impl IntoView {
    // METRICS.md order, then anything unknown.
    let ordered = move || {
        hours.with(|h| {
            let total: f64 = h.values().sum();
            let mut v: Vec<(String, f64)> =
                states::all().filter_map(|s| h.get(s).map(|x| (s.to_string(), *x))).collect();
            v.extend(h.iter().filter(|(k, _)| !states::all().any(|s| s == k.as_str())).map(|(k, x)| (k.clone(), *x)));
            (v.into_iter().filter(|(_, x)| *x > 0.0).collect::<Vec<_>>(), total)
        })
    };
    let bar = move || {
        let (v, total) = ordered();
        v.into_iter()
            .map(|(s, h)| {
                let w = if total > 0.0 { h / total * 100.0 } else { 0.0 };
                view! { <div class=format!("band-seg band-{s}") style:width=format!("{}%", format::fx(w, 2)) title=format!("{}: {}", states::label(&s), format::hours(h))></div> }
            })
            .collect_view()
    };
    let rows = move || {
        let (v, total) = ordered();
        let cur = currency.get();
        v.into_iter()
            .map(|(s, h)| {
                let share = if total > 0.0 { h / total } else { 0.0 };
                let cost = wasted.with(|w| w.get(&s).copied());
                let cost_text = match cost {
                    Some(c) if c > 0.0 => format::money(c, &cur),
                    _ if !states::is_waste(&s) => "—".into(),
                    _ if !priced.get() => "no price set".into(),
                    _ => format::money(0.0, &cur),
                };
                view! {
                    <tr>
                        <th scope="row"><StateBadge state=Some(s.clone())/></th>
                        <td class="num">{format::hours(h)}</td>
                        <td class="num">{format::frac(share)}</td>
                        <td class="num" class:waste=cost.is_some_and(|c| c > 0.0)>{cost_text}</td>
                        <td class="muted">{states::meaning(&s)}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <div class="stacked" aria-hidden="true">{bar}</div>
        <div class="table-wrap">
            <table class="data">
                <caption class="sr-only">"GPU-hours by workload state"</caption>
                <thead>
                    <tr>
                        <th scope="col">"State"</th>
                        <th scope="col" class="num">"GPU-hours"</th>
                        <th scope="col" class="num">"Share"</th>
                        <th scope="col" class="num">"Wasted cost"</th>
                        <th scope="col">"Meaning"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}
