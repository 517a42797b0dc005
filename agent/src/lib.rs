//! Fleetlens agent: reads GPU samples from a [`source::GpuSource`], batches them per host
//! ([`collector`]), keeps every batch in an on-disk [`spool`] until the server has
//! acknowledged it, and sends the spool oldest first ([`pusher`]). The binary in `main.rs`
//! only wires these together from the command line ([`cli`]).

pub mod cli;
pub mod collector;
pub mod kube_meta;
pub mod kubelet;
pub mod pusher;
pub mod reclaim;
pub mod source;
pub mod spool;
pub mod wire;
