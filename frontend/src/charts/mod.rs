//! Hand-made charts (SVG and CSS), each with a text equivalent: a data table in a `<details>`
//! and an `aria-label` summary.

pub mod brush;
pub mod distribution;
pub mod funnel;
pub mod line_chart;
pub mod series;
pub mod timeline;
