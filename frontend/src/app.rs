//! The app shell: the pages by address (leptos_router), the header, and the login guard.

use leptos::prelude::*;
use leptos_router::components::{Outlet, ParentRoute, Route, Router, Routes};
use leptos_router::hooks::{use_location, use_navigate, use_query_map};
use leptos_router::{NavigateOptions, path};

use crate::components::header::Header;
use crate::ctx::{AppCtx, Range, use_app};
use crate::pages::alerts::AlertsPage;
use crate::pages::fleet::FleetPage;
use crate::pages::gpu_detail::GpuDetailPage;
use crate::pages::gpus::GpusPage;
use crate::pages::job_card::JobCardPage;
use crate::pages::jobs::JobsPage;
use crate::pages::login::Login;
use crate::pages::not_found::NotFound;
use crate::pages::reclaim::ReclaimPage;
use crate::pages::reports::ReportsPage;
use crate::pages::settings::SettingsPage;

#[component]
pub fn App() -> impl IntoView {
    provide_context(AppCtx::new());
    view! {
        <Router>
            <SectionScroll/>
            <Routes fallback=NotFound>
                <Route path=path!("/login") view=Login/>
                // The shell (header, navigation) stays up while moving between logged-in pages.
                <ParentRoute path=path!("") view=Shell>
                    <Route path=path!("") view=FleetPage/>
                    <Route path=path!("/gpus") view=GpusPage/>
                    <Route path=path!("/gpus/:uuid") view=GpuDetailPage/>
                    <Route path=path!("/alerts") view=AlertsPage/>
                    <Route path=path!("/jobs") view=JobsPage/>
                    <Route path=path!("/jobs/:id") view=JobCardPage/>
                    <Route path=path!("/reclaim") view=ReclaimPage/>
                    <Route path=path!("/reports") view=ReportsPage/>
                    <Route path=path!("/settings") view=SettingsPage/>
                </ParentRoute>
            </Routes>
        </Router>
    }
}

/// Header + page, for a logged-in user; off to the login page otherwise (coming back here after).
#[component]
fn Shell() -> impl IntoView {
    let ctx = use_app();
    let location = use_location();
    let navigate = use_navigate();
    let logged_in = move || ctx.me.with(Option::is_some);
    // A link with a time range (`?range=24h`) opens that range.
    let query = use_query_map();
    Effect::new(move || {
        if let Some(r) = query.with(|q| q.get("range")).and_then(|r| Range::parse(&r))
            && ctx.range.get_untracked() != r
        {
            ctx.range.set(r);
        }
    });
    Effect::new(move || {
        if ctx.checked.get() && !logged_in() {
            let here = format!("{}{}", location.pathname.get_untracked(), location.search.get_untracked());
            let next = crate::url_state::encode(&here);
            // In place of this address: Back must not return to the address that redirected.
            navigate(&format!("/login?next={next}"), NavigateOptions { replace: true, ..Default::default() });
        }
    });
    view! {
        <Show
            when=move || ctx.checked.get() && logged_in()
            fallback=|| view! { <main id="content" class="login"><p class="status" role="status">"Loading…"</p></main> }
        >
            <Header/>
            <main id="content" tabindex="-1">
                <Outlet/>
            </main>
        </Show>
    }
}

/// How long a link to a section of a page waits for that page to draw the section and the data
/// above it: 240 frames, about 4 s.
const SECTION_WAIT_FRAMES: u32 = 240;

/// Scrolls to the address's fragment once the page has drawn it and nothing above it is still
/// loading (a "Loading…" line above would push it down when its data arrives). The router's own
/// jump happens at navigation, before the page's data is there.
#[component]
fn SectionScroll() -> impl IntoView {
    let location = use_location();
    Effect::new(move || {
        location.pathname.track();
        let hash = location.hash.get();
        if let Some(id) = hash.strip_prefix('#').filter(|id| !id.is_empty()) {
            scroll_to_section(id.to_string(), SECTION_WAIT_FRAMES);
        }
    });
}

fn scroll_to_section(id: String, frames_left: u32) {
    request_animation_frame(move || {
        let doc = document();
        let loading = doc.query_selector("main .status[role=status]").ok().flatten().is_some();
        match doc.get_element_by_id(&id) {
            Some(el) if !loading || frames_left == 0 => el.scroll_into_view(),
            _ if frames_left > 0 => scroll_to_section(id, frames_left - 1),
            _ => {}
        }
    });
}
