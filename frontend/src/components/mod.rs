//! Reusable pieces: status lines, badges, meters, the range picker, the app header.

pub mod header;
pub mod meter;
pub mod range_picker;
pub mod state_badge;
pub mod status;
