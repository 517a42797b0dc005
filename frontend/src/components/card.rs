//! The card every page section sits in: a `<section>` labelled by its `<h2>`.

use leptos::prelude::*;

/// What stands beside a [`Card`]'s heading (a choice, a button, a link), in a "section-head" row.
#[slot]
pub struct CardHead {
    children: Children,
}

/// A section of a page under its heading; `title_id` is the heading's id, which labels the
/// section for screen readers.
#[component]
pub fn Card(
    title_id: &'static str,
    #[prop(into)] title: TextProp,
    #[prop(optional)] card_head: Option<CardHead>,
    children: Children,
) -> impl IntoView {
    let heading = view! { <h2 id=title_id>{move || title.get()}</h2> };
    view! {
        <section class="card" aria-labelledby=title_id>
            {match card_head {
                Some(head) => view! { <div class="section-head">{heading}{(head.children)()}</div> }.into_any(),
                None => heading.into_any(),
            }}
            {children()}
        </section>
    }
}
