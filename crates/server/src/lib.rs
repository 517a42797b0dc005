//! The Fleetlens server: authenticated ingest, storage, and the REST API over it.

pub mod accounts;
pub mod actions;
pub mod alerts;
pub mod analytics;
pub mod app;
pub mod auth;
pub mod config;
pub mod delivery;
pub mod egress;
pub mod error;
pub mod ingest_check;
pub mod ingest_gate;
pub mod ingest_protobuf;
pub mod jobs;
pub mod live;
pub mod metrics;
pub mod openapi;
pub mod quality;
pub mod remote_write;
pub mod routes;
pub mod state;
pub mod time;

pub use app::{StartupError, router, serve};
pub use config::Config;
