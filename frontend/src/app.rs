//! The app shell: router, header, and the login guard.

use leptos::prelude::*;
use leptos_router::components::{Outlet, ParentRoute, Redirect, Route, Router, Routes};
use leptos_router::hooks::use_location;
use leptos_router::path;

use crate::components::header::Header;
use crate::ctx::{AppCtx, use_app};
use crate::pages::alerts::AlertsPage;
use crate::pages::fleet::FleetPage;
use crate::pages::gpu_detail::GpuDetailPage;
use crate::pages::gpus::GpusPage;
use crate::pages::login::Login;
use crate::pages::not_found::NotFound;
use crate::pages::reports::ReportsPage;
use crate::pages::settings::SettingsPage;

#[component]
pub fn App() -> impl IntoView {
    provide_context(AppCtx::new());
    view! {
        <Router>
            <Routes fallback=NotFound>
                <Route path=path!("/login") view=Login/>
                <ParentRoute path=path!("") view=Shell>
                    <Route path=path!("") view=FleetPage/>
                    <Route path=path!("gpus") view=GpusPage/>
                    <Route path=path!("gpus/:uuid") view=GpuDetailPage/>
                    <Route path=path!("alerts") view=AlertsPage/>
                    <Route path=path!("reports") view=ReportsPage/>
                    <Route path=path!("settings") view=SettingsPage/>
                </ParentRoute>
            </Routes>
        </Router>
    }
}

/// Header + page, for a logged-in user; the login page otherwise (coming back here after).
#[component]
fn Shell() -> impl IntoView {
    let ctx = use_app();
    let location = use_location();
    let to_login = move || {
        let here = location.pathname.get_untracked();
        let next = String::from(js_sys::encode_uri_component(&here));
        view! { <Redirect path=format!("/login?next={next}")/> }
    };
    let logged_in = move || ctx.me.with(Option::is_some);
    view! {
        <Show
            when=move || ctx.checked.get()
            fallback=|| view! { <main id="content" class="login"><p class="status" role="status">"Loading…"</p></main> }
        >
            <Show when=logged_in fallback=to_login>
                <Header/>
                <main id="content" tabindex="-1">
                    <Outlet/>
                </main>
            </Show>
        </Show>
    }
}
