//! Login with an API key (until dashboard sessions exist): the key is checked against the
//! server before it is kept.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::api;
use crate::ctx::use_app;

#[component]
pub fn Login() -> impl IntoView {
    super::set_title("Log in");
    let ctx = use_app();
    let navigate = use_navigate();
    let query = use_query_map();
    let key = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);

    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let k = key.get_untracked().trim().to_string();
        if k.is_empty() {
            error.set(Some("Enter an API key.".into()));
            return;
        }
        busy.set(true);
        error.set(None);
        let next = query
            .with_untracked(|q| q.get("next"))
            .filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/login"))
            .unwrap_or_else(|| "/".into());
        let navigate = navigate.clone();
        spawn_local(async move {
            match api::verify(&k).await {
                Ok(()) => {
                    api::remember(&k);
                    ctx.key.set(Some(k));
                    navigate(&next, Default::default());
                }
                Err(e) => error.set(Some(e.to_string())),
            }
            busy.set(false);
        });
    };

    view! {
        <main id="content" class="login">
            <div class="login-card">
                <h1 class="login-brand">"Fleetlens"</h1>
                <p class="muted">"GPU efficiency: what your GPUs really do, and what the gap costs."</p>
                <form on:submit=submit novalidate>
                    <label for="api-key">"API key"</label>
                    <input
                        id="api-key"
                        name="api-key"
                        type="password"
                        autocomplete="off"
                        spellcheck="false"
                        required
                        aria-describedby="api-key-help"
                        aria-invalid=move || error.with(Option::is_some).to_string()
                        prop:value=move || key.get()
                        on:input=move |ev| key.set(event_target_value(&ev))
                    />
                    <p id="api-key-help" class="help">
                        "An API key with the " <code>"read"</code> " scope, or this install's "
                        <code>"FLEETLENS_ADMIN_TOKEN"</code>
                        ". It is kept in this browser and sent as a Bearer token."
                    </p>
                    {move || error.get().map(|e| view! { <p class="banner banner-error" role="alert">{e}</p> })}
                    <button type="submit" class="btn-primary" disabled=move || busy.get()>
                        {move || if busy.get() { "Checking…" } else { "Log in" }}
                    </button>
                </form>
            </div>
        </main>
    }
}
