//! Login: email and password start a session (an HttpOnly cookie set by the server); an API
//! key is the secondary way in, for installs without users.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::api::{self, ApiResult};
use crate::components::form::StackedField;
use crate::components::status::ErrorMessage;
use crate::ctx::use_app;
use fleetlens_api::accounts::MeView as Me;

#[component]
pub fn Login() -> impl IntoView {
    super::set_title("Log in");
    let ctx = use_app();
    let query = use_query_map();
    let navigate = use_navigate();
    let email = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let key = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let key_error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    // Both fields are marked while the login's error shows.
    let invalid = Signal::derive(move || error.with(Option::is_some));
    let key_invalid = Signal::derive(move || key_error.with(Option::is_some));

    let next = move || {
        query
            .with_untracked(|q| q.get("next"))
            .filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/login"))
            .unwrap_or_else(|| "/".into())
    };
    // Already logged in (a session cookie from earlier): go on.
    Effect::new(move || {
        if ctx.me.with(Option::is_some) {
            navigate(&next(), Default::default());
        }
    });
    let finish = move |out: ApiResult<Me>, error: RwSignal<Option<String>>| {
        match out {
            Ok(me) => {
                error.set(None);
                ctx.me.set(Some(me));
            }
            Err(e) => error.set(Some(e.to_string())),
        }
        busy.set(false);
    };

    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let (e, p) = (email.get_untracked().trim().to_string(), password.get_untracked());
        if e.is_empty() || p.is_empty() {
            error.set(Some("Enter your email and password.".into()));
            return;
        }
        busy.set(true);
        spawn_local(async move { finish(api::login(&e, &p).await, error) });
    };
    let submit_key = move |ev: SubmitEvent| {
        ev.prevent_default();
        let k = key.get_untracked().trim().to_string();
        if k.is_empty() {
            key_error.set(Some("Enter an API key.".into()));
            return;
        }
        busy.set(true);
        spawn_local(async move { finish(api::login_with_key(&k).await, key_error) });
    };

    view! {
        <main id="content" class="login">
            <div class="login-card">
                <h1 class="login-brand">"Fleetlens"</h1>
                <p class="muted">"GPU efficiency: what your GPUs really do, and what the gap costs."</p>
                <form on:submit=submit novalidate aria-label="Log in">
                    <StackedField id="email" label="Email" value=email invalid input_type="email" autocomplete="username" required=true/>
                    <StackedField
                        id="password"
                        label="Password"
                        value=password
                        invalid
                        input_type="password"
                        autocomplete="current-password"
                        required=true
                    />
                    <ErrorMessage message=error/>
                    <button type="submit" class="btn-primary" disabled=move || busy.get()>
                        {move || if busy.get() { "Logging in…" } else { "Log in" }}
                    </button>
                    <p class="help">
                        "A new install's first admin comes from " <code>"FLEETLENS_ADMIN_EMAIL"</code> " and "
                        <code>"FLEETLENS_ADMIN_PASSWORD"</code> "."
                    </p>
                </form>
                <details class="login-alt">
                    <summary>"Use an API key instead"</summary>
                    <form on:submit=submit_key novalidate aria-label="Log in with an API key">
                        <StackedField
                            id="api-key"
                            label="API key"
                            value=key
                            invalid=key_invalid
                            input_type="password"
                            autocomplete="off"
                            spellcheck="false"
                            describedby="api-key-help"
                        />
                        <p id="api-key-help" class="help">
                            "An API key with the " <code>"read"</code> " scope, e.g. this install's "
                            <code>"FLEETLENS_ADMIN_TOKEN"</code> ". It is kept in this browser."
                        </p>
                        <ErrorMessage message=key_error/>
                        <button type="submit" class="btn" disabled=move || busy.get()>"Log in with the key"</button>
                    </form>
                </details>
            </div>
        </main>
    }
}
