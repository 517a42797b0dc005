//! A point in time in a request body.

use serde::{Deserialize, Serialize};

/// RFC 3339 text (`2026-11-27T10:00:00Z`) or whole Unix milliseconds. Which instants are
/// allowed (the range, the text's forms) is the server's to check; a number that is not whole,
/// or a value of another type, does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TimeArg {
    /// Unix milliseconds.
    Millis(i64),
    /// RFC 3339 text (or a number written as text).
    Text(String),
}

impl From<i64> for TimeArg {
    fn from(ms: i64) -> Self {
        TimeArg::Millis(ms)
    }
}

impl<'de> Deserialize<'de> for TimeArg {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimeVisitor;
        impl serde::de::Visitor<'_> for TimeVisitor {
            type Value = TimeArg;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("RFC 3339 text or whole Unix milliseconds")
            }
            fn visit_i64<E: serde::de::Error>(self, ms: i64) -> Result<TimeArg, E> {
                Ok(TimeArg::Millis(ms))
            }
            fn visit_u64<E: serde::de::Error>(self, ms: u64) -> Result<TimeArg, E> {
                i64::try_from(ms).map(TimeArg::Millis).map_err(|_| E::custom("Unix milliseconds out of range"))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<TimeArg, E> {
                Err(E::custom("must be whole Unix milliseconds"))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<TimeArg, E> {
                Ok(TimeArg::Text(text.to_string()))
            }
        }
        deserializer.deserialize_any(TimeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_numbers_or_text_and_nothing_else() {
        let read = |json: &str| serde_json::from_str::<TimeArg>(json);
        assert_eq!(read("1790000000000").unwrap(), TimeArg::Millis(1_790_000_000_000));
        assert_eq!(read("-5").unwrap(), TimeArg::Millis(-5));
        assert_eq!(read("\"2026-11-27T10:00:00Z\"").unwrap(), TimeArg::Text("2026-11-27T10:00:00Z".into()));
        assert!(read("1.5").unwrap_err().to_string().contains("whole Unix milliseconds"));
        assert!(read("true").unwrap_err().to_string().contains("RFC 3339 text or whole Unix milliseconds"));
        assert!(read("18446744073709551615").is_err());
        for t in [TimeArg::Millis(7), TimeArg::Text("now".into())] {
            assert_eq!(read(&serde_json::to_string(&t).unwrap()).unwrap(), t);
        }
    }
}
