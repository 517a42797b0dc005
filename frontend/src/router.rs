//! The dashboard's client-side router: the address bar as two signals, in-app navigation through
//! the History API, and same-origin link clicks turned into navigations.
//!
//! Hand-written rather than `leptos_router`'s `<Router>`/`<Routes>`: the dashboard has eight
//! fixed routes, and the general router (nested route trees, matching, transitions) was the
//! largest single part of the main wasm module, which every page downloads first (about 50 KB of
//! 355 KB raw; docs/BENCHMARKS.md). The pages' lazy loading still comes from `#[lazy_route]`.

use leptos::ev;
use leptos::prelude::*;
use wasm_bindgen::JsCast;

/// The pages of the dashboard, as the address names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Page {
    Login,
    Fleet,
    Gpus,
    /// `/gpus/{uuid}`: the GPU's UUID, decoded.
    GpuDetail(String),
    Alerts,
    Reports,
    Settings,
    NotFound,
}

impl Page {
    /// The page at `path` (a pathname: no query, no fragment). A trailing slash is ignored.
    pub fn of(path: &str) -> Page {
        let path = path.trim_end_matches('/');
        match path {
            "" => Page::Fleet,
            "/login" => Page::Login,
            "/gpus" => Page::Gpus,
            "/alerts" => Page::Alerts,
            "/reports" => Page::Reports,
            "/settings" => Page::Settings,
            _ => match path.strip_prefix("/gpus/") {
                Some(uuid) if !uuid.is_empty() && !uuid.contains('/') => Page::GpuDetail(decode(uuid)),
                _ => Page::NotFound,
            },
        }
    }

    /// Pages behind the login: drawn inside the shell (header and navigation).
    pub fn needs_login(&self) -> bool {
        !matches!(self, Page::Login | Page::NotFound)
    }
}

fn decode(segment: &str) -> String {
    js_sys::decode_uri_component(segment).map(String::from).unwrap_or_else(|_| segment.to_string())
}

/// Where the browser is: the pathname and the query string (with its `?`, or empty).
#[derive(Clone, Copy)]
pub struct Location {
    pub path: RwSignal<String>,
    pub search: RwSignal<String>,
}

impl Location {
    /// Reads the address bar again (after a history change).
    fn sync(&self) {
        let l = window().location();
        self.path.set(l.pathname().unwrap_or_default());
        self.search.set(l.search().unwrap_or_default());
    }

    /// Goes to `to` (a same-origin path, may hold a query), as a new history entry.
    pub fn navigate(&self, to: &str) {
        self.go(to, false);
    }

    /// Goes to `to` in place of the current history entry (redirects: Back must not return to
    /// the address that redirected).
    pub fn replace(&self, to: &str) {
        self.go(to, true);
    }

    fn go(&self, to: &str, replace: bool) {
        let Ok(history) = window().history() else { return };
        let done = if replace {
            history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(to))
        } else {
            history.push_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(to))
        };
        if done.is_ok() {
            self.sync();
            match to.split_once('#') {
                // A section of the new page: shown once the page has drawn it.
                Some((_, id)) if !id.is_empty() => scroll_to_section(id.to_string()),
                // A new page starts at its top, as a page load would.
                _ => window().scroll_to_with_x_and_y(0.0, 0.0),
            }
        }
    }

    /// The query parameter `key`, decoded (untracked: pages read their filters once).
    pub fn query(&self, key: &str) -> Option<String> {
        let search = self.search.get_untracked();
        web_sys::UrlSearchParams::new_with_str(&search).ok()?.get(key)
    }
}

/// How long a link to a section of another page waits for that page to draw the section and the
/// data above it (the page's module may still be on its way): 240 frames, about 4 s.
const SECTION_WAIT_FRAMES: u32 = 240;

/// Scrolls the element `id` into view once it is there and nothing above it is still loading
/// (a "Loading…" line above would push it down when its data arrives); gives up after
/// [`SECTION_WAIT_FRAMES`]. A full page load lands on the address's fragment the same way:
/// the browser's own jump happens before the app has drawn anything.
fn scroll_to_section(id: String) {
    fn attempt(id: String, frames_left: u32) {
        request_animation_frame(move || {
            let doc = document();
            let loading = doc.query_selector("main .status[role=status]").ok().flatten().is_some();
            match doc.get_element_by_id(&id) {
                Some(el) if !loading || frames_left == 0 => el.scroll_into_view(),
                _ if frames_left > 0 => attempt(id, frames_left - 1),
                _ => {}
            }
        });
    }
    attempt(id, SECTION_WAIT_FRAMES);
}

/// Starts the router: the location signals, Back/Forward, and link clicks. Once, in `App`.
pub fn provide_location() -> Location {
    let l = window().location();
    if let Some(id) = l.hash().ok().and_then(|h| h.strip_prefix('#').map(str::to_string)).filter(|h| !h.is_empty()) {
        scroll_to_section(id);
    }
    let location = Location {
        path: RwSignal::new(l.pathname().unwrap_or_default()),
        search: RwSignal::new(l.search().unwrap_or_default()),
    };
    provide_context(location);
    // The listeners live as long as the page; their handles are never removed.
    let _ = window_event_listener(ev::popstate, move |_| location.sync());
    let _ = window_event_listener(ev::click, move |ev| {
        if let Some(to) = in_app_link(&ev) {
            ev.prevent_default();
            // The same address (fragment included) again is no new history entry.
            if to != format!("{}{}", current_url(), window().location().hash().unwrap_or_default()) {
                location.navigate(&to);
            }
        }
    });
    location
}

/// The router's location; `provide_location` must have run above.
pub fn use_location() -> Location {
    expect_context::<Location>()
}

/// The current path and query (no fragment).
fn current_url() -> String {
    let l = window().location();
    format!("{}{}", l.pathname().unwrap_or_default(), l.search().unwrap_or_default())
}

/// The path (with query and fragment) a click should open inside the app, or None when the
/// browser should handle it: modified or non-primary clicks, links to other origins, new windows,
/// downloads, fragments on this page (the browser scrolls to them), and the server's own
/// endpoints (`/api/…`).
fn in_app_link(ev: &ev::MouseEvent) -> Option<String> {
    if ev.default_prevented() || ev.button() != 0 || ev.meta_key() || ev.ctrl_key() || ev.shift_key() || ev.alt_key() {
        return None;
    }
    let target = ev.target()?.dyn_into::<web_sys::Element>().ok()?;
    let link = target.closest("a[href]").ok()??;
    if link.has_attribute("download") || link.get_attribute("target").is_some_and(|t| t != "_self") {
        return None;
    }
    if link.get_attribute("rel").is_some_and(|r| r.split_whitespace().any(|r| r == "external")) {
        return None;
    }
    let href = link.get_attribute("href")?;
    let internal = href.starts_with('/') && !href.starts_with("//");
    if !internal || href == "/api" || href.starts_with("/api/") {
        return None;
    }
    match href.split_once('#') {
        Some((page, _)) if page == current_url() => None,
        _ => Some(href),
    }
}

#[cfg(test)]
mod tests {
    use super::Page;

    #[test]
    fn paths_name_their_pages() {
        assert_eq!(Page::of("/"), Page::Fleet);
        assert_eq!(Page::of(""), Page::Fleet);
        assert_eq!(Page::of("/login"), Page::Login);
        assert_eq!(Page::of("/gpus/"), Page::Gpus);
        assert_eq!(Page::of("/alerts"), Page::Alerts);
        assert_eq!(Page::of("/reports"), Page::Reports);
        assert_eq!(Page::of("/settings"), Page::Settings);
        assert_eq!(Page::of("/nope"), Page::NotFound);
        assert_eq!(Page::of("/gpus/a/b"), Page::NotFound);
        assert_eq!(Page::of("/loginx"), Page::NotFound);
        assert!(Page::Gpus.needs_login() && !Page::Login.needs_login() && !Page::NotFound.needs_login());
    }
}
