//! Times as text: RFC 3339 in UTC, as the API, notifications and reports write them.

/// Unix milliseconds as RFC 3339 in UTC with milliseconds: `2026-11-22T01:02:03.641Z` (a time
/// beyond chrono's range, ±262,000 years, shows as its end).
pub fn format_rfc3339_ms(ms: i64) -> String {
    format_rfc3339(ms, chrono::SecondsFormat::Millis)
}

/// [`format_rfc3339_ms`] to the second, for people: `2026-11-22T01:02:03Z`.
pub fn format_rfc3339_s(ms: i64) -> String {
    format_rfc3339(ms, chrono::SecondsFormat::Secs)
}

fn format_rfc3339(ms: i64, precision: chrono::SecondsFormat) -> String {
    use chrono::{DateTime, Utc};
    let at = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(if ms < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    });
    at.to_rfc3339_opts(precision, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_in_utc() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(1_795_311_343_641), "2026-11-22T01:35:43.641Z");
        assert_eq!(format_rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_s(1_795_311_343_641), "2026-11-22T01:35:43Z");
        assert_eq!(format_rfc3339_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z", "the API's last time");
        assert!(format_rfc3339_ms(i64::MAX).starts_with("+262"), "beyond chrono's range: its end, no panic");
    }
}
