//! The app header: brand, navigation, time range, live status and log out.

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::components::range_picker::RangePicker;
use crate::ctx::use_app;
use crate::format;
use leptos_router::hooks::{use_location, use_navigate};

/// "Log out": ends the session, then shows the login page.
#[component]
pub fn LogOutButton(class: &'static str) -> impl IntoView {
    let ctx = use_app();
    let navigate = use_navigate();
    let log_out = move |_| {
        let navigate = navigate.clone();
        spawn_local(async move {
            ctx.log_out().await;
            navigate("/login", Default::default());
        });
    };
    view! { <button type="button" class=class on:click=log_out>"Log out"</button> }
}

#[component]
pub fn Header() -> impl IntoView {
    let ctx = use_app();
    let who = move || ctx.me.with(|m| m.as_ref().map(|m| m.who()).unwrap_or_default());
    let role = move || ctx.me.with(|m| m.as_ref().map(|m| m.role_label()).unwrap_or_default());
    let org = move || ctx.me.with(|m| m.as_ref().map(|m| m.org.name.clone()).unwrap_or_default());
    // Re-read "now" on every tick so "updated 5 s ago" stays true.
    let updated = move || {
        ctx.tick.track();
        match ctx.updated_ms.get() {
            Some(t) => format!("updated {}", format::clock(t)),
            None => "waiting for data".into(),
        }
    };
    let live_title = move || {
        if ctx.live.get() && ctx.stream.connected.get() {
            "Live: state changes and alerts as they happen, metrics every 15 seconds. Press to pause."
        } else if ctx.live.get() {
            "Live: refreshes every 5 seconds. Press to pause."
        } else {
            "Paused. Press to resume live updates."
        }
    };
    view! {
        <header class="app-header">
            <a class="skip-link" href="#content">"Skip to content"</a>
            <div class="brand">
                <a href="/" class="brand-link">
                    <svg class="logo" viewBox="0 0 24 24" aria-hidden="true">
                        <rect x="3" y="4" width="18" height="4" rx="1"></rect>
                        <rect x="3" y="10" width="12" height="4" rx="1"></rect>
                        <rect x="3" y="16" width="6" height="4" rx="1"></rect>
                    </svg>
                    <span>"Fleetlens"</span>
                </a>
            </div>
            <nav class="main-nav" aria-label="Main">
                <NavLink href="/" label="Fleet"/>
                <NavLink href="/gpus" label="GPUs"/>
                <NavLink href="/alerts" label="Alerts"/>
                <NavLink href="/jobs" label="Jobs"/>
                <NavLink href="/reclaim" label="Reclaim"/>
                <NavLink href="/reports" label="Reports"/>
                <NavLink href="/settings" label="Settings"/>
            </nav>
            <div class="header-tools">
                <RangePicker/>
                <button
                    type="button"
                    class="live"
                    class:paused=move || !ctx.live.get()
                    aria-pressed=move || ctx.live.get().to_string()
                    title=live_title
                    on:click=move |_| ctx.live.update(|l| *l = !*l)
                >
                    <span class="live-dot" aria-hidden="true"></span>
                    <span>{move || if ctx.live.get() { "Live" } else { "Paused" }}</span>
                    <span class="live-time" aria-live="off">{updated}</span>
                </button>
                <span class="whoami" data-testid="whoami" title=org>
                    <span class="whoami-name">{who}</span>
                    " "
                    <span class="pill pill-muted whoami-role">{role}</span>
                </span>
                <LogOutButton class="btn-quiet"/>
            </div>
        </header>
    }
}

/// A main-navigation link, marked `aria-current="page"` on its page and the pages under it
/// (`/gpus` for `/gpus/{uuid}`).
#[component]
fn NavLink(href: &'static str, label: &'static str) -> impl IntoView {
    let location = use_location();
    let current = move || {
        location.pathname.with(|p| {
            let here = p.trim_end_matches('/');
            let on = if href == "/" { here.is_empty() } else { here == href || here.starts_with(&format!("{href}/")) };
            on.then_some("page")
        })
    };
    view! { <a href=href aria-current=current>{label}</a> }
}
