//! The time range picker: a radio group (arrow keys move between choices), kept in the address.

use leptos::prelude::*;

use crate::ctx::{Range, use_app};
use crate::url_state::query_updater;

#[component]
pub fn RangePicker() -> impl IntoView {
    let ctx = use_app();
    // The range is kept in the address too (`?range=24h`): a link opens the same range. A
    // choice here ends a zoom brushed on a chart (`from`, `to`).
    let set_query = query_updater();
    view! {
        <fieldset class="range-picker">
            <legend class="sr-only">"Time range"</legend>
            {Range::ALL
                .into_iter()
                .map(|r| {
                    let set_query = set_query.clone();
                    view! {
                        <label class="seg" title=r.long_label()>
                            <input
                                type="radio"
                                name="range"
                                value=r.label()
                                prop:checked=move || ctx.range.get() == r
                                on:change=move |_| {
                                    ctx.range.set(r);
                                    set_query(&[("range", r.label()), ("from", ""), ("to", "")]);
                                }
                            />
                            <span>{r.label()}</span>
                        </label>
                    }
                })
                .collect_view()}
        </fieldset>
    }
}
