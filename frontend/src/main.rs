//! Fleetlens dashboard: a Leptos client-side app that talks to the JSON API under `/api/v1`.

mod api;
mod app;
mod charts;
mod components;
mod ctx;
mod format;
mod live;
mod owners;
mod pages;
mod states;
mod url_state;

fn main() {
    leptos::mount::mount_to_body(app::App);
}
