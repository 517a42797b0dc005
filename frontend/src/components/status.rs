//! Loading and error display of a polled API value: "Loading…" until the first answer (a
//! `Transition`: later polls keep the page as it is), then the error of the last answer, if it
//! failed (an `ErrorBoundary` around the answer's outcome).

use leptos::prelude::*;

use crate::api::ApiError;
use crate::ctx::Outcome;

#[component]
pub fn PollStatus(
    /// The resource shown (a `LocalResource<ApiResult<T>>` of any `T`).
    #[prop(into)]
    res: Outcome,
    /// True once the page has data to show; an error then reads as "showing earlier data".
    #[prop(into)]
    has_data: Signal<bool>,
    /// What shows the data, under the status, while `has_data`.
    #[prop(optional)]
    children: Option<ChildrenFn>,
) -> impl IntoView {
    view! {
        <Transition fallback=|| view! { <p class="status" role="status">"Loading…"</p> }>
            <ErrorBoundary fallback=move |errors| view! { <ErrorBanners errors has_data/> }>
                {move || res.get()}
            </ErrorBoundary>
        </Transition>
        {children.map(|children| view! { <Show when=move || has_data.get()>{children()}</Show> })}
    }
}

/// The failures caught by a [`PollStatus`] boundary (one: the last answer's).
#[component]
fn ErrorBanners(errors: ArcRwSignal<Errors>, has_data: Signal<bool>) -> impl IntoView {
    move || {
        errors
            .with(|errors| errors.iter().map(|(_, e)| ApiError::from_boundary(e)).collect::<Vec<_>>())
            .into_iter()
            .map(|error| view! { <ErrorBanner error has_data/> })
            .collect_view()
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
    let message = Signal::derive(move || error.get().map(|e| e.to_string()));
    view! { <ErrorMessage message/> }
}

/// An error message as a banner (one the page found itself: "Enter an API key."), or nothing.
#[component]
pub fn ErrorMessage(#[prop(into)] message: Signal<Option<String>>) -> impl IntoView {
    move || message.get().map(|m| view! { <p class="banner banner-error" role="alert">{m}</p> })
}

/// The message of a validation error about `field` (the server's `error.field`), for showing
/// next to that field; tracked.
pub fn about(error: RwSignal<Option<ApiError>>, field: &'static str) -> impl Fn() -> Option<String> + Copy {
    move || error.get().filter(|e| e.is_about(field)).map(|e| e.message)
}

/// A validation error about one form field, under its form: "Name: must not be empty".
#[component]
pub fn FieldError(error: RwSignal<Option<ApiError>>, field: &'static str, label: &'static str) -> impl IntoView {
    let message = about(error, field);
    move || {
        message().map(|m| view! { <p class="field-error" role="alert" data-field=field>{format!("{label}: {m}")}</p> })
    }
}

/// The error as a banner, unless one of `fields` already shows it (a [`FieldError`]).
#[component]
pub fn FormError(
    error: RwSignal<Option<ApiError>>,
    #[prop(optional)] fields: &'static [&'static str],
) -> impl IntoView {
    let shown = Signal::derive(move || error.get().filter(|e| !fields.iter().any(|f| e.is_about(f))));
    view! { <ActionError error=shown/> }
}

/// Shows what an action came to: its message for [`Saved`], or its error for [`FieldError`] and
/// [`FormError`]; the other is cleared. True when it succeeded.
pub fn show_outcome(
    error: RwSignal<Option<ApiError>>,
    saved: RwSignal<Option<String>>,
    out: Result<String, ApiError>,
) -> bool {
    match out {
        Ok(message) => {
            error.set(None);
            saved.set(Some(message));
            true
        }
        Err(e) => {
            saved.set(None);
            error.set(Some(e));
            false
        }
    }
}

/// Shows the error of an action that has nothing to say when it works (a toggle, a revoke), or
/// clears the last one. True when it succeeded.
pub fn show_error<T>(error: RwSignal<Option<ApiError>>, out: Result<T, ApiError>) -> bool {
    match out {
        Ok(_) => {
            error.set(None);
            true
        }
        Err(e) => {
            error.set(Some(e));
            false
        }
    }
}

/// What an action has just done ("Team “ml” created.").
#[component]
pub fn Saved(saved: RwSignal<Option<String>>) -> impl IntoView {
    move || saved.get().map(|s| view! { <p class="banner banner-ok" role="status">{s}</p> })
}

/// The button of a destructive action on one row of a list, in two steps: pressing it puts
/// "Confirm …" and "Keep" in its place, with keyboard focus on the confirmation. `asking` holds
/// the row that asks (its id: a `RuleId`, a `TeamId`, …), shared by the rows of a list so that
/// one asks at a time.
#[component]
pub fn ConfirmButton<K>(
    asking: RwSignal<Option<K>>,
    id: K,
    /// "Delete", "Revoke".
    label: &'static str,
    /// "Confirm delete", "Confirm revoke".
    confirm_label: &'static str,
    /// The first button's accessible name, naming what it acts on.
    #[prop(optional)]
    aria_label: Option<String>,
    /// The first button's class, when not "btn btn-danger".
    #[prop(optional)]
    class: Option<&'static str>,
    on_confirm: Callback<()>,
) -> impl IntoView
where
    K: Copy + PartialEq + Send + Sync + 'static,
{
    let class = class.unwrap_or("btn btn-danger");
    move || {
        if asking.get() == Some(id) {
            view! {
                <button type="button" class="btn btn-danger" data-confirm="" on:click=move |_| on_confirm.run(())>{confirm_label}</button>
                <button type="button" class="btn-quiet" on:click=move |_| asking.set(None)>"Keep"</button>
            }
            .into_any()
        } else {
            let ask = move |_| {
                asking.set(Some(id));
                super::focus_later("[data-confirm]");
            };
            view! { <button type="button" class=class aria-label=aria_label.clone() on:click=ask>{label}</button> }
                .into_any()
        }
    }
}
