//! What the bench binaries share: child processes killed when dropped, and the scratch
//! database and server of one run of `analytics-bench`, `billing-bench` and `stream-bench`.

pub mod child;
pub mod scratch;
