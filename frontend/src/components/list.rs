//! What a list shows when it has nothing in it.

use leptos::prelude::*;

/// The message of a list with nothing in it ("No silence.").
#[component]
pub fn Empty(message: &'static str) -> impl IntoView {
    view! { <p class="empty">{message}</p> }
}

/// Its children for the items of `items` (bound with `let:`), or the `empty` message when
/// there are none; tracked: the view follows `items`.
#[component]
pub fn NonEmpty<T, F, V>(#[prop(into)] items: Signal<Vec<T>>, empty: &'static str, children: F) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
    F: Fn(Vec<T>) -> V + Send + Sync + 'static,
    V: IntoView + 'static,
{
    move || {
        let list = items.get();
        if list.is_empty() { view! { <Empty message=empty/> }.into_any() } else { children(list).into_any() }
    }
}
