//! Loading and error display of a polled API value: "Loading…" until the first answer (later
//! polls keep the page as it is), then the error of the last answer, if it failed.

use leptos::either::Either;
use leptos::prelude::*;

use crate::api::ApiError;
use crate::ctx::Outcome;

#[component]
pub fn PollStatus(
    /// The fetch shown (a `Fetched<ApiResult<T>>` of any `T`).
    #[prop(into)]
    res: Outcome,
    /// True once the page has data to show; an error then reads as "showing earlier data".
    #[prop(into)]
    has_data: Signal<bool>,
) -> impl IntoView {
    move || match res.get() {
        None => Either::Left(view! { <p class="status" role="status">"Loading…"</p> }),
        Some(error) => Either::Right(error.map(|error| view! { <ErrorBanner error has_data/> })),
    }
}

#[component]
fn ErrorBanner(error: ApiError, has_data: Signal<bool>) -> impl IntoView {
    // An endpoint the server does not have yet is news, not a failure.
    let class = if error.is_missing_endpoint() { "banner banner-info" } else { "banner banner-error" };
    let unauthorized = error.is_unauthorized();
    view! {
        <div class=class role="alert">
            <p>
                {error.to_string()} " "
                {unauthorized.then(|| view! { <a href="/login">"Log in"</a> })}
            </p>
            {move || has_data.get().then(|| view! { <p class="muted">"Showing the last data received."</p> })}
        </div>
    }
}

/// An error from a one-off action (login, a form), or nothing.
#[component]
pub fn ActionError(#[prop(into)] error: Signal<Option<ApiError>>) -> impl IntoView {
    move || error.get().map(|e| view! { <p class="banner banner-error" role="alert">{e.to_string()}</p> })
}
