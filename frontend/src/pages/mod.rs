//! One module per page of the router.

pub mod alerts;
pub mod fleet;
pub mod gpu_allocations;
pub mod gpu_card;
pub mod gpu_detail;
pub mod gpus;
pub mod job_card;
pub mod jobs;
pub mod login;
pub mod not_found;
pub mod plans;
pub mod reclaim;
pub mod report_routes;
pub mod reports;
pub mod settings;

/// Sets the browser tab's title.
pub fn set_title(page: &str) {
    leptos::prelude::document().set_title(&format!("{page} · Fleetlens"));
}
