//! The app shell: router, header, and the login guard.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::components::{Outlet, ParentRoute, Redirect, Route, Router, Routes};
use leptos_router::hooks::use_location;
use leptos_router::{Lazy, LazyRoute, lazy_route, path};

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

/// A page whose code is split off into its own wasm module (built by `frontend/build.sh` with
/// wasm-split), fetched the first time its route is shown: the first page downloads only the
/// app shell and its own code.
macro_rules! lazy_page {
    ($route:ident, $page:ident) => {
        struct $route;

        #[lazy_route]
        impl LazyRoute for $route {
            fn data() -> Self {
                $route
            }

            fn view(_this: Self) -> AnyView {
                view! { <$page/> }.into_any()
            }
        }
    };
}

lazy_page!(LoginRoute, Login);
lazy_page!(FleetRoute, FleetPage);
lazy_page!(GpusRoute, GpusPage);
lazy_page!(GpuDetailRoute, GpuDetailPage);
lazy_page!(AlertsRoute, AlertsPage);
lazy_page!(ReportsRoute, ReportsPage);
lazy_page!(SettingsRoute, SettingsPage);

/// Loads the modules of all pages behind the login (each only once).
async fn prefetch_pages() {
    <FleetRoute as LazyRoute>::preload().await;
    <GpusRoute as LazyRoute>::preload().await;
    <GpuDetailRoute as LazyRoute>::preload().await;
    <AlertsRoute as LazyRoute>::preload().await;
    <ReportsRoute as LazyRoute>::preload().await;
    <SettingsRoute as LazyRoute>::preload().await;
}

#[component]
pub fn App() -> impl IntoView {
    provide_context(AppCtx::new());
    view! {
        <Router>
            <Routes fallback=NotFound>
                <Route path=path!("/login") view={Lazy::<LoginRoute>::new()}/>
                <ParentRoute path=path!("") view=Shell>
                    <Route path=path!("") view={Lazy::<FleetRoute>::new()}/>
                    <Route path=path!("gpus") view={Lazy::<GpusRoute>::new()}/>
                    <Route path=path!("gpus/:uuid") view={Lazy::<GpuDetailRoute>::new()}/>
                    <Route path=path!("alerts") view={Lazy::<AlertsRoute>::new()}/>
                    <Route path=path!("reports") view={Lazy::<ReportsRoute>::new()}/>
                    <Route path=path!("settings") view={Lazy::<SettingsRoute>::new()}/>
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
    // Once a logged-in page is up, the other pages' modules are fetched in the background, so
    // that moving between pages does not wait for the network.
    Effect::new(move |prefetched: Option<bool>| {
        if prefetched == Some(true) || !logged_in() {
            return prefetched.unwrap_or(false);
        }
        set_timeout(|| spawn_local(prefetch_pages()), Duration::from_secs(2));
        true
    });
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
