//! HTTP routes, one module per resource.

pub mod accounts;
pub mod actions;
pub mod alerts;
pub mod analytics;
pub mod events;
pub mod gpus;
pub mod health;
pub mod ingest;
pub mod jobs;
pub mod reclaim;
pub mod remote_write;
pub mod reports;
pub mod stream;
