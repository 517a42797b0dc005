//! A workload state as a colored badge with its METRICS.md meaning as a tooltip.

use fleetlens_core::WorkloadState;
use leptos::prelude::*;

use crate::states;

#[component]
pub fn StateBadge(#[prop(into)] state: Signal<Option<WorkloadState>>) -> impl IntoView {
    let state = move || state.get();
    view! {
        <span
            class=move || states::css(state())
            data-state=move || state().map_or("", WorkloadState::as_str)
            title=move || state().map_or("the server has not classified this GPU yet", WorkloadState::meaning)
        >
            {move || state().map(states::label).unwrap_or_else(|| "no state yet".into())}
        </span>
    }
}
