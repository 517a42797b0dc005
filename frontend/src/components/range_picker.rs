//! The time range picker: a radio group (arrow keys move between choices).

use leptos::prelude::*;

use crate::ctx::{Range, use_app};

#[component]
pub fn RangePicker() -> impl IntoView {
    let ctx = use_app();
    view! {
        <fieldset class="range-picker">
            <legend class="sr-only">"Time range"</legend>
            {Range::ALL
                .into_iter()
                .map(|r| {
                    view! {
                        <label class="seg" title=r.long_label()>
                            <input
                                type="radio"
                                name="range"
                                value=r.label()
                                prop:checked=move || ctx.range.get() == r
                                on:change=move |_| ctx.range.set(r)
                            />
                            <span>{r.label()}</span>
                        </label>
                    }
                })
                .collect_view()}
        </fieldset>
    }
}
