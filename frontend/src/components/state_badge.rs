//! A workload state as a colored badge with its METRICS.md meaning as a tooltip.

use leptos::prelude::*;

use crate::states;

#[component]
pub fn StateBadge(#[prop(into)] state: Signal<Option<String>>) -> impl IntoView {
    let name = move || state.get();
    view! {
        <span
            class=move || states::css(name().as_deref())
            data-state=move || name().unwrap_or_default()
            title=move || name().map(|n| states::meaning(&n).to_string()).unwrap_or_else(|| "the server has not classified this GPU yet".into())
        >
            {move || name().map(|n| states::label(&n)).unwrap_or_else(|| "no state yet".into())}
        </span>
    }
}
