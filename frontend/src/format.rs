//! Number, unit and time formatting. Absent values are never shown as 0: they read
//! [`NA`].

/// What the dashboard says for a signal the GPU or driver cannot give (METRICS.md).
pub const NA: &str = "n/a on this GPU";

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `v` with `decimals` digits after the point, for display: `fx(0.84, 1)` shows `0.8`.
///
/// Written with integer formatting: Rust's float formatting (Grisu and Dragon with their tables)
/// then stays out of the dashboard's wasm. Rounds half
/// away from zero on the scaled value, which can differ from `{:.1}` in the last digit for values
/// that sit exactly between two (0.15); a dashboard figure does not care.
pub fn fx(v: f64, decimals: u32) -> Fixed {
    Fixed { v, decimals }
}

#[derive(Clone, Copy)]
pub struct Fixed {
    v: f64,
    decimals: u32,
}

impl std::fmt::Display for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Fixed { v, decimals } = *self;
        if v.is_nan() {
            return f.write_str("NaN");
        }
        let scale = 10u64.pow(decimals.min(9));
        // Saturates past ~1.8e19 / scale: no dashboard figure comes near.
        let n = (v.abs() * scale as f64).round() as u64;
        if v < 0.0 && n != 0 {
            f.write_str("-")?;
        }
        write!(f, "{}", n / scale)?;
        if decimals > 0 {
            write!(f, ".{:0width$}", n % scale, width = decimals.min(9) as usize)?;
        }
        Ok(())
    }
}

/// `62%`, `0.8%` (one decimal below 10 so that "SM activity 0.8%" is not rounded to 1).
pub fn pct(v: f64) -> String {
    if v != 0.0 && v.abs() < 10.0 { format!("{}%", fx(v, 1)) } else { format!("{}%", fx(v, 0)) }
}

pub fn opt_pct(v: Option<f64>) -> String {
    v.map(pct).unwrap_or_else(|| NA.into())
}

/// A 0–1 fraction as a percentage.
pub fn frac(v: f64) -> String {
    pct(v * 100.0)
}

/// `0.5 GiB`, `15 GiB` (one decimal below 10, none for 0: an axis reads `0 GiB … 80 GiB`).
pub fn gib(bytes: i64) -> String {
    gibs(bytes as f64 / GIB)
}

/// A quantity already in GiB (a chart's axis), written as [`gib`] writes bytes.
pub fn gibs(g: f64) -> String {
    if g != 0.0 && g.abs() < 10.0 { format!("{} GiB", fx(g, 1)) } else { format!("{} GiB", fx(g, 0)) }
}

pub fn opt_num(v: Option<f64>, unit: &str, decimals: u32) -> String {
    v.map(|v| format!("{}{unit}", fx(v, decimals))).unwrap_or_else(|| NA.into())
}

/// Thousands separators for a non-negative integer part.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `$1,234`, `$12.34`; other currencies as `1,234 EUR`.
pub fn money(v: f64, currency: &str) -> String {
    let neg = v < 0.0;
    let a = v.abs();
    let body = if a >= 100.0 {
        group(a.round() as u64)
    } else {
        format!("{}.{:02}", group(a.trunc() as u64), ((a.fract() * 100.0).round() as u64).min(99))
    };
    let sign = if neg { "−" } else { "" };
    match currency {
        "USD" | "" => format!("{sign}${body}"),
        "EUR" => format!("{sign}€{body}"),
        "GBP" => format!("{sign}£{body}"),
        c => format!("{sign}{body} {c}"),
    }
}

/// Money or the dashboard's wording for an unpriced figure.
pub fn opt_money(v: Option<f64>, currency: &str) -> String {
    v.map(|v| money(v, currency)).unwrap_or_else(|| "no price set".into())
}

pub fn hours(h: f64) -> String {
    if h >= 100.0 {
        format!("{} h", group(h.round() as u64))
    } else if h >= 1.0 {
        format!("{} h", fx(h, 1))
    } else {
        let m = h * 60.0;
        if m >= 1.0 { format!("{} min", fx(m, 0)) } else { format!("{} s", fx(m * 60.0, 0)) }
    }
}

/// Duration in ms, short: `45 s`, `12 min`, `3.5 h`, `2 d`.
pub fn duration_ms(ms: i64) -> String {
    let s = ms.max(0) as f64 / 1000.0;
    if s < 90.0 {
        format!("{} s", fx(s, 0))
    } else if s < 90.0 * 60.0 {
        format!("{} min", fx(s / 60.0, 0))
    } else if s < 48.0 * 3600.0 {
        format!("{} h", fx(s / 3600.0, 1))
    } else {
        format!("{} d", fx(s / 86400.0, 0))
    }
}

fn date(ms: i64) -> js_sys::Date {
    js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64))
}

fn two(n: u32) -> String {
    format!("{n:02}")
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// Local `HH:MM:SS`.
pub fn clock(ms: i64) -> String {
    let d = date(ms);
    format!("{}:{}:{}", two(d.get_hours()), two(d.get_minutes()), two(d.get_seconds()))
}

/// Local `HH:MM`.
pub fn hhmm(ms: i64) -> String {
    let d = date(ms);
    format!("{}:{}", two(d.get_hours()), two(d.get_minutes()))
}

/// Local `Nov 21`.
pub fn day(ms: i64) -> String {
    let d = date(ms);
    format!("{} {}", MONTHS[d.get_month() as usize % 12], d.get_date())
}

/// Local `Nov 21 14:03:05`.
pub fn date_time(ms: i64) -> String {
    format!("{} {}", day(ms), clock(ms))
}

/// An axis tick label fit for a span of `span_ms`.
pub fn tick(ms: i64, span_ms: i64) -> String {
    if span_ms <= 10 * 60_000 {
        clock(ms)
    } else if span_ms <= 36 * 3_600_000 {
        hhmm(ms)
    } else {
        day(ms)
    }
}

/// `12 s ago`, `3.0 h ago`.
pub fn ago(ms: i64, now: i64) -> String {
    format!("{} ago", duration_ms(now - ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_and_pct() {
        assert_eq!(money(1234.4, "USD"), "$1,234");
        assert_eq!(money(12.345, "USD"), "$12.35");
        assert_eq!(money(0.5, "USD"), "$0.50");
        assert_eq!(pct(0.8), "0.8%");
        assert_eq!(pct(62.4), "62%");
        assert_eq!(pct(0.0), "0%");
        assert_eq!((gib(0), gib(1 << 29), gib(15 << 30)), ("0 GiB".into(), "0.5 GiB".into(), "15 GiB".into()));
        assert_eq!((gibs(0.0), gibs(2.5), gibs(140.0)), ("0 GiB".into(), "2.5 GiB".into(), "140 GiB".into()));
        assert_eq!(opt_pct(None), NA);
        assert_eq!(group(1234567), "1,234,567");
        assert_eq!(fx(0.84, 1).to_string(), "0.8");
        assert_eq!(fx(-2.5, 0).to_string(), "-3");
        assert_eq!(fx(-0.04, 1).to_string(), "0.0");
        assert_eq!(fx(12.0, 3).to_string(), "12.000");
        assert_eq!(fx(99.96, 1).to_string(), "100.0");
        assert_eq!(fx(f64::NAN, 1).to_string(), "NaN");
    }
}
