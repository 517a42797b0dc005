//! The app shell: the pages by address, the header, and the login guard.

use std::time::Duration;

use leptos::either::EitherOf7;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_router::{LazyRoute, lazy_route};
use send_wrapper::SendWrapper;

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
use crate::router::{Page, provide_location, use_location};

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
    let location = provide_location();
    let page = Memo::new(move |_| location.path.with(|p| Page::of(p)));
    // The shell stays up while moving between logged-in pages; only the page inside changes.
    let in_shell = Memo::new(move |_| page.with(Page::needs_login));
    move || {
        if in_shell.get() {
            view! { <Shell page/> }.into_any()
        } else if page.with(|p| *p == Page::Login) {
            lazy::<LoginRoute>().into_any()
        } else {
            view! { <NotFound/> }.into_any()
        }
    }
}

/// A lazily loaded page: nothing until its module has arrived, then the page.
fn lazy<R: LazyRoute>() -> impl IntoView {
    // The browser runs one thread; `Suspend` asks for `Send` futures.
    Suspend::new(async { SendWrapper::new(R::view(R::data())).await })
}

/// The page inside the shell. Each page is its own variant, so that a new page replaces the last
/// at once (a blank main until its module is there) rather than the last page staying on screen
/// under the new address while the module loads.
fn page_view(page: &Page) -> impl IntoView + use<> {
    match page {
        Page::Fleet => EitherOf7::A(lazy::<FleetRoute>()),
        Page::Gpus => EitherOf7::B(lazy::<GpusRoute>()),
        Page::GpuDetail(_) => EitherOf7::C(lazy::<GpuDetailRoute>()),
        Page::Alerts => EitherOf7::D(lazy::<AlertsRoute>()),
        Page::Reports => EitherOf7::E(lazy::<ReportsRoute>()),
        Page::Settings => EitherOf7::F(lazy::<SettingsRoute>()),
        // Drawn outside the shell (`App`).
        Page::Login | Page::NotFound => EitherOf7::G(()),
    }
}

/// Header + page, for a logged-in user; the login page otherwise (coming back here after).
#[component]
fn Shell(page: Memo<Page>) -> impl IntoView {
    let ctx = use_app();
    let location = use_location();
    let logged_in = move || ctx.me.with(Option::is_some);
    // Not logged in: off to the login page, which comes back here after.
    Effect::new(move || {
        if ctx.checked.get() && !logged_in() {
            let here = location.path.get_untracked();
            let next = String::from(js_sys::encode_uri_component(&here));
            location.replace(&format!("/login?next={next}"));
        }
    });
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
            when=move || ctx.checked.get() && logged_in()
            fallback=|| view! { <main id="content" class="login"><p class="status" role="status">"Loading…"</p></main> }
        >
            <Header/>
            <main id="content" tabindex="-1">
                {move || page.with(page_view)}
            </main>
        </Show>
    }
}
