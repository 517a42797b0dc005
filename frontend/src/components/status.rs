//! Loading and error display of a polled resource, in the leptos pattern: `<Transition>` for the
//! first load (later polls keep the page as it is), `<ErrorBoundary>` for failures.

use leptos::prelude::*;

use crate::api::{ApiError, ApiResult};

#[component]
pub fn PollStatus<T>(
    res: LocalResource<ApiResult<T>>,
    /// True once the page has data to show; an error then reads as "showing earlier data".
    #[prop(into)]
    has_data: Signal<bool>,
) -> impl IntoView
where
    T: 'static,
{
    view! {
        <Transition fallback=|| view! { <p class="status" role="status">"Loading…"</p> }>
            <ErrorBoundary fallback=move |errors| view! { <ErrorList errors has_data/> }>
                {move || res.with(|r| r.as_ref().map(|r| r.as_ref().map(|_| ()).map_err(Clone::clone)))}
            </ErrorBoundary>
        </Transition>
    }
}

#[component]
fn ErrorList(errors: ArcRwSignal<Errors>, has_data: Signal<bool>) -> impl IntoView {
    let list = Memo::new(move |_| {
        errors.with(|errs| {
            errs.iter()
                .map(|(_, e)| {
                    let inner: &(dyn std::error::Error + Send + Sync) = &***e;
                    let api = inner.downcast_ref::<ApiError>();
                    (
                        e.to_string(),
                        api.is_some_and(ApiError::is_unauthorized),
                        api.is_some_and(ApiError::is_missing_endpoint),
                    )
                })
                .collect::<Vec<_>>()
        })
    });
    // An endpoint the server does not have yet is news, not a failure.
    let class = move || {
        let l = list.get();
        if !l.is_empty() && l.iter().all(|(_, _, missing)| *missing) {
            "banner banner-info"
        } else {
            "banner banner-error"
        }
    };
    view! {
        <div class=class role="alert">
            {move || {
                list
                    .get()
                    .into_iter()
                    .map(|(msg, unauthorized, _)| {
                        view! {
                            <p>
                                {msg} " "
                                {unauthorized.then(|| view! { <a href="/login">"Log in"</a> })}
                            </p>
                        }
                    })
                    .collect_view()
            }}
            {move || has_data.get().then(|| view! { <p class="muted">"Showing the last data received."</p> })}
        </div>
    }
}

/// An error from a one-off action (login, a form), or nothing.
#[component]
pub fn ActionError(#[prop(into)] error: Signal<Option<ApiError>>) -> impl IntoView {
    move || error.get().map(|e| view! { <p class="banner banner-error" role="alert">{e.to_string()}</p> })
}
