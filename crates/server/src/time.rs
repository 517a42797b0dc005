//! Times in query strings: RFC 3339 or Unix milliseconds.

use chrono::DateTime;

use crate::error::ApiError;

/// Parse `value` of query parameter `name` to Unix milliseconds.
pub fn parse_query_time(name: &str, value: &str) -> Result<i64, ApiError> {
    let value = value.trim();
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    DateTime::parse_from_rfc3339(value).map(|t| t.timestamp_millis()).map_err(|_| ApiError::Unprocessable {
        field: name.to_string(),
        message: format!("{value:?} is neither RFC 3339 (2026-01-31T12:00:00Z) nor Unix milliseconds"),
    })
}

/// A time in a query string: one that cannot be read as a time at all is a 400 (unparseable
/// input, like `?limit=abc`), naming the parameter.
pub fn parse_time_param(name: &str, value: &str) -> Result<i64, ApiError> {
    parse_query_time(name, value).map_err(|e| match e {
        ApiError::Unprocessable { field, message } => ApiError::BadParam { field, message },
        other => other,
    })
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
}
