//! Times in query strings: RFC 3339 or Unix milliseconds.

use chrono::DateTime;

use crate::error::ApiError;

/// The earliest time a request may name: the Unix epoch (no sample is older).
pub const MIN_TIME_MS: i64 = 0;
/// The latest: the last millisecond of year 9999, the last instant RFC 3339 can write.
/// Between these bounds every difference and sum of two times, and any time plus a day or a
/// month, stays far inside `i64`: a range parameter cannot overflow the arithmetic behind it.
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// Why a text is not an acceptable time.
enum TimeError {
    /// Neither RFC 3339 nor whole milliseconds.
    NotATime,
    /// A time, but outside [`MIN_TIME_MS`]..=[`MAX_TIME_MS`].
    OutOfRange,
}

fn parse_time(value: &str) -> Result<i64, TimeError> {
    let value = value.trim();
    let ms = if is_integer_text(value) {
        // Whole milliseconds, possibly beyond i64: out of range, not "not a time".
        value.parse::<i64>().map_err(|_| TimeError::OutOfRange)?
    } else {
        DateTime::parse_from_rfc3339(value).map(|t| t.timestamp_millis()).map_err(|_| TimeError::NotATime)?
    };
    if (MIN_TIME_MS..=MAX_TIME_MS).contains(&ms) { Ok(ms) } else { Err(TimeError::OutOfRange) }
}

fn not_a_time(value: &str) -> String {
    format!("{:?} is neither RFC 3339 (2026-01-31T12:00:00Z) nor Unix milliseconds", value.trim())
}

/// Parse `value` of parameter or body field `name` to Unix milliseconds, within
/// [`MIN_TIME_MS`]..=[`MAX_TIME_MS`]; any refusal is a 422 naming `name`.
pub fn parse_query_time(name: &str, value: &str) -> Result<i64, ApiError> {
    parse_time(value).map_err(|e| match e {
        TimeError::NotATime => ApiError::Unprocessable { field: name.to_string(), message: not_a_time(value) },
        TimeError::OutOfRange => out_of_range(name),
    })
}

/// `ms` if it lies within [`MIN_TIME_MS`]..=[`MAX_TIME_MS`], else a 422 naming `name`.
pub fn check_time_ms(name: &str, ms: i64) -> Result<i64, ApiError> {
    if (MIN_TIME_MS..=MAX_TIME_MS).contains(&ms) { Ok(ms) } else { Err(out_of_range(name)) }
}

/// A body's time (field `name`) as Unix milliseconds, with the query parameters' rules: 422
/// naming the field for text that is no time or an instant out of range.
pub fn body_time(name: &str, t: &fleetlens_api::TimeArg) -> Result<i64, ApiError> {
    match t {
        fleetlens_api::TimeArg::Millis(ms) => check_time_ms(name, *ms),
        fleetlens_api::TimeArg::Text(text) => parse_query_time(name, text),
    }
}

fn out_of_range(name: &str) -> ApiError {
    ApiError::Unprocessable {
        field: name.to_string(),
        message: format!(
            "out of range: Unix milliseconds from {MIN_TIME_MS} (1970-01-01) to {MAX_TIME_MS} (9999-12-31T23:59:59.999Z)"
        ),
    }
}

/// A time in a query string: one that cannot be read as a time at all is a 400 (unparseable
/// input, like `?limit=abc`), naming the parameter; a time out of range is a 422.
pub fn parse_time_param(name: &str, value: &str) -> Result<i64, ApiError> {
    parse_time(value).map_err(|e| match e {
        TimeError::NotATime => ApiError::BadParam { field: name.to_string(), message: not_a_time(value) },
        TimeError::OutOfRange => out_of_range(name),
    })
}

/// Whether `value` is written as a whole number (digits, maybe a leading `-`), whatever its
/// size: such a value beyond its type's range is out of range (422), not unreadable (400).
pub fn is_integer_text(value: &str) -> bool {
    let v = value.trim();
    let digits = v.strip_prefix('-').unwrap_or(v);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_both_forms() {
        assert_eq!(parse_query_time("from", "1795311343641").unwrap(), 1_795_311_343_641);
        assert_eq!(parse_query_time("from", "1970-01-01T00:00:01Z").unwrap(), 1000);
        assert_eq!(parse_query_time("from", "2026-11-22T02:00:00+01:00").unwrap(), 1_795_309_200_000);
        assert!(parse_query_time("from", "yesterday").is_err());
    }

    #[test]
    fn refuses_times_out_of_range_naming_the_field() {
        for value in ["-1", "9223372036854775807", "-9223372036854775808", "99999999999999999999", "253402300800000"] {
            match parse_query_time("to", value) {
                Err(ApiError::Unprocessable { field, message }) => {
                    assert_eq!(field, "to");
                    assert!(message.starts_with("out of range"), "{value}: {message}");
                }
                other => panic!("{value}: {other:?}"),
            }
        }
        assert_eq!(parse_query_time("to", "0").unwrap(), 0);
        assert_eq!(parse_query_time("to", "253402300799999").unwrap(), MAX_TIME_MS);
        assert_eq!(parse_query_time("to", "9999-12-31T23:59:59.999Z").unwrap(), MAX_TIME_MS);
        assert!(parse_query_time("from", "0000-01-01T00:00:00Z").is_err(), "before the epoch");
    }
}
