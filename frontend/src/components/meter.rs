//! A labelled horizontal bar for one signal: the number is always in the text, the bar is
//! decoration. Absent values read "n/a on this GPU", never 0.

use leptos::prelude::*;

use crate::format::{self, NA};

#[component]
pub fn Meter(
    label: &'static str,
    /// Percent of the bar's full scale; `None`: not measured.
    #[prop(into)]
    value: Signal<Option<f64>>,
    /// CSS modifier of the bar color, e.g. `util`, `sm`.
    #[prop(default = "")]
    kind: &'static str,
    /// Text instead of the percentage (e.g. "40 GiB / 141 GiB"); `None` reads n/a.
    #[prop(optional, into)]
    text: Option<Signal<Option<String>>>,
    /// Tooltip explaining the signal.
    #[prop(default = "")]
    hint: &'static str,
) -> impl IntoView {
    let shown = move || match text {
        Some(t) => t.get(),
        None => value.get().map(format::pct),
    };
    let width = move || value.get().map(|v| v.clamp(0.0, 100.0)).unwrap_or(0.0);
    view! {
        <div class=format!("meter meter-{kind}") title=hint>
            <div class="meter-head">
                <span class="meter-label">{label}</span>
                <span class="meter-value" class:na=move || shown().is_none()>
                    {move || shown().unwrap_or_else(|| NA.into())}
                </span>
            </div>
            <div class="meter-track" aria-hidden="true">
                <div class="meter-fill" style:width=move || format!("{}%", format::fx(width(), 1))></div>
            </div>
        </div>
    }
}
