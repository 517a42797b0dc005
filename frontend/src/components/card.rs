//! The card every page section sits in: a `<section>` labelled by its `<h2>`.

use leptos::prelude::*;

/// A section of a page under its heading; `title_id` is the heading's id, which labels the
/// section for screen readers.
#[component]
pub fn Card(title_id: &'static str, #[prop(into)] title: TextProp, children: Children) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby=title_id>
            <h2 id=title_id>{move || title.get()}</h2>
            {children()}
        </section>
    }
}
