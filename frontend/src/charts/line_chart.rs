//! A time-series line chart in SVG. Optional shading between the first two series shows a
//! gap (kernel utilization above SM activity: the GPU "busy" with its SMs idle). The SVG is
//! built once and its paths follow the data, so an open data table stays open across polls.
//! Pointing at a chart reads its values out; dragging across it zooms the page (`brush.rs`).

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::brush::{self, Brush};
use super::series::{Series, bucket, max_gap};
use crate::format::{self, NA};

const ML: f64 = 56.0;
const MR: f64 = 10.0;
const MT: f64 = 10.0;
const MB: f64 = 24.0;
/// Points drawn per line at most (about one per 2 px).
const DRAW_POINTS: usize = 400;
/// Rows of the text equivalent at most.
const TABLE_ROWS: usize = 30;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Content {
    NoSamples,
    NotMeasured,
    Data,
}

/// Drawing geometry: the viewBox is `w` × `h` units, about the pixels the chart gets, so text
/// keeps its size.
#[derive(Debug, Clone, Copy)]
struct Scale {
    x0: i64,
    x1: i64,
    y_max: f64,
    w: f64,
    h: f64,
}

impl Scale {
    fn pw(&self) -> f64 {
        self.w - ML - MR
    }
    fn ph(&self) -> f64 {
        self.h - MT - MB
    }
    fn x(&self, t: i64) -> f64 {
        let span = (self.x1 - self.x0).max(1) as f64;
        ML + ((t - self.x0) as f64 / span).clamp(0.0, 1.0) * self.pw()
    }
    fn y(&self, v: f64) -> f64 {
        MT + self.ph() - (v / self.y_max).clamp(0.0, 1.0) * self.ph()
    }
}

/// A round axis maximum at or above `v` (1, 2, 2.5, 5 × 10^n).
pub fn nice_ceil(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * mag).find(|c| *c >= v * 0.999).unwrap_or(10.0 * mag)
}

fn line_path(points: &[(i64, Option<f64>)], s: &Scale) -> String {
    let gap = max_gap(points);
    let mut d = String::new();
    let mut prev: Option<i64> = None;
    for &(t, v) in points {
        match v {
            Some(v) => {
                let joined = prev.is_some_and(|p| t - p <= gap);
                d.push_str(&format!(
                    "{}{},{}",
                    if joined { 'L' } else { 'M' },
                    format::fx(s.x(t), 1),
                    format::fx(s.y(v), 1)
                ));
                prev = Some(t);
            }
            None => prev = None,
        }
    }
    // A lone point would be invisible: draw it as a short tick.
    if !d.contains('L') && !d.is_empty() {
        d.push_str("h2");
    }
    d
}

/// Polygons between series `a` (above) and `b` over the runs where both are measured.
fn gap_path(a: &[(i64, Option<f64>)], b: &[(i64, Option<f64>)], s: &Scale) -> String {
    let gap = max_gap(a);
    let mut d = String::new();
    let mut run: Vec<(i64, f64, f64)> = Vec::new();
    let flush = |run: &mut Vec<(i64, f64, f64)>, d: &mut String| {
        if run.len() >= 2 {
            for (i, (t, va, _)) in run.iter().enumerate() {
                d.push_str(&format!(
                    "{}{},{}",
                    if i == 0 { 'M' } else { 'L' },
                    format::fx(s.x(*t), 1),
                    format::fx(s.y(*va), 1)
                ));
            }
            for (t, _, vb) in run.iter().rev() {
                d.push_str(&format!("L{},{}", format::fx(s.x(*t), 1), format::fx(s.y(*vb), 1)));
            }
            d.push('Z');
        }
        run.clear();
    };
    for (pa, pb) in a.iter().zip(b) {
        match (pa.1, pb.1) {
            (Some(va), Some(vb)) if pa.0 == pb.0 => {
                if run.last().is_some_and(|l| pa.0 - l.0 > gap) {
                    flush(&mut run, &mut d);
                }
                run.push((pa.0, va, vb));
            }
            _ => flush(&mut run, &mut d),
        }
    }
    flush(&mut run, &mut d);
    d
}

#[component]
pub fn LineChart(
    title: &'static str,
    #[prop(into)] series: Signal<Vec<Series>>,
    #[prop(into)] x_range: Signal<(i64, i64)>,
    #[prop(into)] y_max: Signal<f64>,
    /// Value formatter for axis, legend and table.
    fmt: fn(f64) -> String,
    /// Shade the area between the first two series.
    #[prop(optional)]
    gap: bool,
    /// A horizontal reference line (e.g. the power limit).
    #[prop(optional, into)]
    limit: Option<Signal<Option<f64>>>,
    /// One sentence under the title.
    #[prop(default = "")]
    note: &'static str,
    /// viewBox width: about the pixels the chart gets at 1280 px (560 in a two-column grid).
    #[prop(default = 560.0)]
    width: f64,
    #[prop(default = 200.0)] height: f64,
    /// Called with the time range a reader selected on the chart (a drag, or Shift+arrows and
    /// Enter); without it the chart only reads values out.
    #[prop(optional)]
    on_brush: Option<Callback<(i64, i64)>>,
) -> impl IntoView {
    let content = Memo::new(move |_| {
        series.with(|ss| {
            if ss.iter().all(|s| s.points.is_empty()) {
                Content::NoSamples
            } else if !ss.iter().any(Series::has_values) {
                Content::NotMeasured
            } else {
                Content::Data
            }
        })
    });
    let names: Vec<(&'static str, &'static str)> =
        series.with_untracked(|ss| ss.iter().map(|s| (s.name, s.kind)).collect());

    let legend = names
        .iter()
        .enumerate()
        .map(|(i, (name, kind))| {
            let latest = move || {
                series.with(|ss| {
                    ss.get(i).map(|s| if s.has_values() { s.latest().map(fmt).unwrap_or_default() } else { NA.into() })
                })
            };
            view! {
                <li>
                    <span class=format!("swatch line-{kind}") aria-hidden="true"></span>
                    {*name} " " <span class="legend-value">{latest}</span>
                </li>
            }
        })
        .collect_view();

    let body = move || match content.get() {
        Content::NoSamples => view! { <p class="chart-empty">"No samples in this range."</p> }.into_any(),
        Content::NotMeasured => view! { <p class="chart-empty na">{NA}</p> }.into_any(),
        Content::Data => {
            chart_svg(Spec { title, fmt, gap, w: width, h: height, on_brush }, series, x_range, y_max, limit).into_any()
        }
    };

    view! {
        <figure class="chart">
            <figcaption>
                <h3 class="chart-title">{title}</h3>
                {(!note.is_empty()).then(|| view! { <p class="chart-note">{note}</p> })}
                <ul class="legend">
                    {legend}
                    {gap.then(|| view! { <li><span class="swatch gap-swatch" aria-hidden="true"></span>"gap: kernel running, SMs idle"</li> })}
                </ul>
            </figcaption>
            {body}
        </figure>
    }
}

/// The fixed parts of a chart.
#[derive(Clone, Copy)]
struct Spec {
    title: &'static str,
    fmt: fn(f64) -> String,
    gap: bool,
    w: f64,
    h: f64,
    on_brush: Option<Callback<(i64, i64)>>,
}

fn chart_svg(
    spec: Spec,
    series: Signal<Vec<Series>>,
    x_range: Signal<(i64, i64)>,
    y_max: Signal<f64>,
    limit: Option<Signal<Option<f64>>>,
) -> impl IntoView {
    let Spec { title, fmt, gap, w, h, on_brush } = spec;
    // Downsampled series for drawing, recomputed when the data changes.
    let drawn = Memo::new(move |_| {
        let (x0, x1) = x_range.get();
        series.with(|ss| ss.iter().map(|s| bucket(&s.points, x0, x1, DRAW_POINTS)).collect::<Vec<_>>())
    });
    let scale = move || {
        let (x0, x1) = x_range.get();
        Scale { x0, x1, y_max: y_max.get().max(f64::MIN_POSITIVE), w, h }
    };
    let n = series.with_untracked(Vec::len);
    let kinds: Vec<&'static str> = series.with_untracked(|ss| ss.iter().map(|s| s.kind).collect());

    let y_ticks = move || {
        let s = scale();
        (0..=4)
            .map(|i| {
                let v = s.y_max * f64::from(i) / 4.0;
                let y = s.y(v);
                view! {
                    <line class="grid" x1=px(ML) x2=px(w - MR) y1=px(y) y2=px(y)></line>
                    <text class="axis" x=px(ML - 6.0) y=px(y + 4.0) text-anchor="end">{fmt(v)}</text>
                }
            })
            .collect_view()
    };
    let x_ticks = move || {
        let s = scale();
        let span = s.x1 - s.x0;
        (0..=4)
            .map(|i| {
                let t = s.x0 + span * i / 4;
                let anchor = match i {
                    0 => "start",
                    4 => "end",
                    _ => "middle",
                };
                view! { <text class="axis" x=px(s.x(t)) y=px(h - 6.0) text-anchor=anchor>{format::tick(t, span)}</text> }
            })
            .collect_view()
    };
    let lines = (0..n)
        .map(|i| {
            let d = move || drawn.with(|d| d.get(i).map(|p| line_path(p, &scale())).unwrap_or_default());
            view! { <path class=format!("line line-{}", kinds[i]) d=d></path> }
        })
        .collect_view();
    let gap_area = (gap && n >= 2).then(|| {
        let d = move || drawn.with(|d| gap_path(&d[0], &d[1], &scale()));
        view! { <path class="gap-area" d=d></path> }
    });
    let limit_line = limit.map(|l| {
        move || {
            l.get().map(|v| {
                let s = scale();
                let y = s.y(v);
                view! {
                    <line class="limit" x1=px(ML) x2=px(w - MR) y1=px(y) y2=px(y)></line>
                    <text class="axis limit-label" x=px(w - MR - 4.0) y=px(y - 4.0) text-anchor="end">{format!("limit {}", fmt(v))}</text>
                }
            })
        }
    });

    let summary = move || {
        let (x0, x1) = x_range.get();
        let parts: Vec<String> = series.with(|ss| {
            ss.iter()
                .map(|s| match s.avg_max() {
                    Some((avg, max)) => format!("{} average {}, maximum {}", s.name, fmt(avg), fmt(max)),
                    None => format!("{} {NA}", s.name),
                })
                .collect()
        });
        format!("{title}, {} to {}: {}.", format::date_time(x0), format::date_time(x1), parts.join("; "))
    };

    let brush = Brush::default();
    // The time under a pointer event: its place across the SVG (the target of every pointer
    // event: its children take none, CSS `.chart-svg *`), in viewBox units.
    let time_of = move |ev: &web_sys::PointerEvent| -> Option<i64> {
        let el = ev.current_target()?.dyn_into::<web_sys::Element>().ok()?;
        let units = f64::from(ev.offset_x()) / f64::from(el.client_width().max(1)) * w;
        Some(brush::time_at((units - ML) / (w - ML - MR), x_range.get_untracked()))
    };
    let min_span = move || {
        let (x0, x1) = x_range.get_untracked();
        brush::min_drag_span(x1 - x0, w - ML - MR)
    };
    let zoom = move |range: Option<(i64, i64)>| {
        if let (Some(range), Some(cb)) = (range, on_brush) {
            cb.run(range);
        }
    };
    let on_pointerdown = move |ev: web_sys::PointerEvent| {
        if on_brush.is_none() || ev.button() != 0 {
            return;
        }
        if let Some(t) = time_of(&ev) {
            // Moves and the release keep coming here when the pointer leaves the chart.
            if let Some(el) = ev.current_target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) {
                let _ = el.set_pointer_capture(ev.pointer_id());
            }
            ev.prevent_default();
            brush.press(t);
        }
    };
    let on_pointermove = move |ev: web_sys::PointerEvent| {
        if let Some(t) = time_of(&ev) {
            brush.hover(t);
        }
    };
    let on_pointerup = move |_: web_sys::PointerEvent| {
        if brush.dragging.get_untracked() {
            zoom(brush.release(min_span()));
        }
    };
    let on_keydown = move |ev: web_sys::KeyboardEvent| {
        let (range, handled) = brush.key(&ev.key(), ev.shift_key() && on_brush.is_some(), x_range.get_untracked());
        if handled {
            ev.prevent_default();
        }
        zoom(range);
    };
    let cursor = move || {
        brush.at.get().map(|t| {
            let s = scale();
            let x = s.x(t);
            view! { <line class="cursor" x1=px(x) x2=px(x) y1=px(MT) y2=px(MT + s.ph())></line> }
        })
    };
    let selection = move || {
        brush.sel.get().map(|(a, b)| {
            let s = scale();
            let (l, r) = (s.x(a.min(b)), s.x(a.max(b)));
            view! { <rect class="brush-sel" x=px(l) y=px(MT) width=px(r - l) height=px(s.ph())></rect> }
        })
    };
    let read_out = move || {
        if let Some((a, b)) = brush.sel.get() {
            let (a, b) = (a.min(b), a.max(b));
            let how = if brush.dragging.get() { "release to zoom" } else { "Enter zooms, Escape cancels" };
            return format!(
                "Selected {} to {} ({}): {how}.",
                format::date_time(a),
                format::date_time(b),
                format::duration_ms(b - a)
            );
        }
        brush.at.get().map(|t| series.with(|ss| brush::readout(ss, t, fmt))).unwrap_or_default()
    };
    let keys = if on_brush.is_some() {
        "Left and Right arrows read the values over time; Shift with an arrow selects a time range, Enter zooms to it."
    } else {
        "Left and Right arrows read the values over time."
    };

    view! {
        <div class="chart-scroll chart-focus" tabindex="0" role="group" aria-label=format!("{title}. {keys}")
            on:keydown=on_keydown
            on:blur=move |_| brush.clear()
        >
        <svg class="chart-svg" class:brushable=on_brush.is_some() viewBox=format!("0 0 {} {}", px(w), px(h)) role="img" aria-label=summary
            on:pointerdown=on_pointerdown
            on:pointermove=on_pointermove
            on:pointerup=on_pointerup
            on:pointercancel=move |_| brush.clear()
            on:pointerleave=move |_| brush.leave()
        >
            <g>{y_ticks}</g>
            <g>{x_ticks}</g>
            {gap_area}
            {lines}
            {limit_line}
            {selection}
            {cursor}
        </svg>
        </div>
        <p class="chart-readout" aria-live="polite" data-at-ms=move || brush.at.get().map(|t| t.to_string())>{read_out}</p>
        <DataTable series x_range fmt/>
    }
}

/// The chart's text equivalent: averages over at most [`TABLE_ROWS`] intervals.
#[component]
fn DataTable(series: Signal<Vec<Series>>, x_range: Signal<(i64, i64)>, fmt: fn(f64) -> String) -> impl IntoView {
    let heads = series.with_untracked(|ss| ss.iter().map(|s| view! { <th scope="col">{s.name}</th> }).collect_view());
    let rows = move || {
        let (x0, x1) = x_range.get();
        series.with(|ss| {
            let cols: Vec<Vec<(i64, Option<f64>)>> = ss.iter().map(|s| bucket(&s.points, x0, x1, TABLE_ROWS)).collect();
            let span = x1 - x0;
            cols.first()
                .map(|first| {
                    first
                        .iter()
                        .enumerate()
                        .map(|(r, (t, _))| {
                            let cells = cols
                                .iter()
                                .map(|c| {
                                    let v = c.get(r).and_then(|p| p.1);
                                    view! { <td>{v.map(fmt).unwrap_or_else(|| "n/a".into())}</td> }
                                })
                                .collect_view();
                            view! { <tr><th scope="row">{format::tick(*t, span)}</th>{cells}</tr> }
                        })
                        .collect_view()
                })
                .unwrap_or_default()
        })
    };
    view! {
        <details class="chart-table">
            <summary>"Data table"</summary>
            <div class="table-wrap">
                <table class="data">
                    <thead><tr><th scope="col">"Time"</th>{heads}</tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        </details>
    }
}

/// An SVG coordinate as attribute text (a tenth of a pixel is enough).
fn px(v: f64) -> String {
    format::fx(v, 1).to_string()
}
