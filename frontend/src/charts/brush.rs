//! Time-range brushing and hover read-outs of the line charts. Dragging across a chart selects
//! a time range and, on release, zooms the page to it; from the keyboard the arrow keys move a
//! cursor over time, Shift with an arrow key widens a selection from it, Enter zooms to the
//! selection and Escape drops it. The values at the pointer's (or the cursor's) time are read out
//! in words under the chart, so the read-out is text like the chart's data table.

use leptos::prelude::*;

use super::series::{Series, max_gap};
use crate::format;

/// A drag narrower than this many viewBox units (about pixels) is a click, not a selection.
const MIN_DRAG_UNITS: f64 = 4.0;
/// One arrow-key press moves the cursor by this fraction of the chart's span.
const KEY_STEPS: i64 = 60;

/// What a chart's reader is pointing at.
#[derive(Clone, Copy)]
pub struct Brush {
    /// The time the read-out shows (under the pointer or the keyboard cursor).
    pub at: RwSignal<Option<i64>>,
    /// The selection being made: (where it started, where it reaches now).
    pub sel: RwSignal<Option<(i64, i64)>>,
    /// The pointer went down on the chart and has not come up yet.
    pub dragging: RwSignal<bool>,
}

impl Default for Brush {
    fn default() -> Brush {
        Brush { at: RwSignal::new(None), sel: RwSignal::new(None), dragging: RwSignal::new(false) }
    }
}

impl Brush {
    /// The pointer moved to time `t`.
    pub fn hover(&self, t: i64) {
        self.at.set(Some(t));
        if self.dragging.get_untracked() {
            self.sel.update(|s| {
                if let Some((_, end)) = s {
                    *end = t;
                }
            });
        }
    }

    /// The pointer went down at time `t`.
    pub fn press(&self, t: i64) {
        self.dragging.set(true);
        self.at.set(Some(t));
        self.sel.set(Some((t, t)));
    }

    /// The pointer came up: the selection, if it is wide enough (`min_span` ms) to be one.
    pub fn release(&self, min_span: i64) -> Option<(i64, i64)> {
        self.dragging.set(false);
        let sel = self.sel.get_untracked();
        self.sel.set(None);
        sel.and_then(|(a, b)| ordered(a, b, min_span))
    }

    /// The pointer left the chart without a button held: no read-out.
    pub fn leave(&self) {
        if !self.dragging.get_untracked() {
            self.at.set(None);
        }
    }

    /// A key pressed while the chart has the focus, over the range `(x0, x1)`. Returns the
    /// range to zoom to (Enter on a selection) and whether the key was the chart's (so the
    /// page does not scroll too).
    pub fn key(&self, key: &str, shift: bool, (x0, x1): (i64, i64)) -> (Option<(i64, i64)>, bool) {
        let step = ((x1 - x0) / KEY_STEPS).max(1);
        let at = self.at.get_untracked().unwrap_or(x1);
        let moved = match key {
            "ArrowLeft" => Some((at - step).max(x0)),
            "ArrowRight" => Some((at + step).min(x1)),
            "Home" => Some(x0),
            "End" => Some(x1),
            "Enter" => {
                let sel = self.sel.get_untracked().and_then(|(a, b)| ordered(a, b, 1));
                self.sel.set(None);
                return (sel, sel.is_some());
            }
            "Escape" => {
                let had = self.sel.get_untracked().is_some();
                self.sel.set(None);
                return (None, had);
            }
            _ => None,
        };
        let Some(next) = moved else { return (None, false) };
        if shift {
            let anchor = self.sel.get_untracked().map_or(at, |(a, _)| a);
            self.sel.set(Some((anchor, next)));
        } else {
            self.sel.set(None);
        }
        self.at.set(Some(next));
        (None, true)
    }

    /// Focus or pointer gone for good.
    pub fn clear(&self) {
        self.dragging.set(false);
        self.at.set(None);
        self.sel.set(None);
    }
}

/// The narrowest selection a drag can make, in ms: [`MIN_DRAG_UNITS`] of a plot `plot_w` units
/// wide showing `span` ms.
pub fn min_drag_span(span: i64, plot_w: f64) -> i64 {
    ((span as f64) * MIN_DRAG_UNITS / plot_w.max(1.0)).ceil() as i64
}

/// `(a, b)` earliest first, if at least `min_span` ms apart.
pub fn ordered(a: i64, b: i64, min_span: i64) -> Option<(i64, i64)> {
    let (from, to) = if a <= b { (a, b) } else { (b, a) };
    (to - from >= min_span.max(1)).then_some((from, to))
}

/// The time at `frac` (0 = left edge of the plot, 1 = right edge) of `(x0, x1)`.
pub fn time_at(frac: f64, (x0, x1): (i64, i64)) -> i64 {
    x0 + (frac.clamp(0.0, 1.0) * (x1 - x0) as f64).round() as i64
}

/// The point of `points` (sorted by time) nearest to `t`, if no farther from it than the
/// series' own gap (beyond it, the chart draws no line there either).
pub fn nearest(points: &[(i64, Option<f64>)], t: i64) -> Option<(i64, Option<f64>)> {
    let i = points.partition_point(|p| p.0 < t);
    let before = i.checked_sub(1).and_then(|j| points.get(j));
    let after = points.get(i);
    let best = match (before, after) {
        (Some(b), Some(a)) => Some(if t - b.0 <= a.0 - t { b } else { a }),
        (b, a) => b.or(a),
    }?;
    ((best.0 - t).abs() <= max_gap(points)).then_some(*best)
}

/// The read-out at `t`: each series' value there, in words.
pub fn readout(series: &[Series], t: i64, fmt: fn(f64) -> String) -> String {
    let values: Vec<String> = series
        .iter()
        .map(|s| match nearest(&s.points, t) {
            Some((_, Some(v))) => format!("{} {}", s.name, fmt(v)),
            Some((_, None)) => format!("{} {}", s.name, format::NA),
            None => format!("{}: no sample", s.name),
        })
        .collect();
    format!("{}: {}", format::date_time(t), values.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_are_ordered_and_need_a_width() {
        assert_eq!(ordered(50, 10, 5), Some((10, 50)));
        assert_eq!(ordered(10, 12, 5), None);
        assert_eq!(min_drag_span(100_000, 1000.0), 400);
    }

    #[test]
    fn the_nearest_point_stays_within_the_series_gap() {
        let pts = vec![(0, Some(1.0)), (10, Some(2.0)), (20, None), (100, Some(4.0))];
        assert_eq!(nearest(&pts, 4), Some((0, Some(1.0))));
        assert_eq!(nearest(&pts, 6), Some((10, Some(2.0))));
        assert_eq!(nearest(&pts, 19), Some((20, None)));
        // The gap is 3 × the median spacing (10): 60 from the nearest point is none.
        assert_eq!(nearest(&pts, 60), None);
        assert_eq!(nearest(&pts, 130), Some((100, Some(4.0))));
        assert_eq!(nearest(&[], 5), None);
        assert_eq!(time_at(0.5, (1000, 3000)), 2000);
        assert_eq!(time_at(1.7, (1000, 3000)), 3000);
    }
}
