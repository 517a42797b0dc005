//! JSON documents stored as text (both databases keep them in `TEXT` columns), decoded by
//! `#[derive(sqlx::FromRow)]` through `#[sqlx(try_from = "JsonText<T>")]`. Unreadable JSON
//! decodes as `T::default()`: the columns are written by the store only. Where a default would
//! be a wrong answer rather than an absent one (a job's GPU list, which its MFU is computed
//! over), [`StrictJsonText`] makes it a decode error instead.
//!
//! Here rather than in the store because core types that are stored whole (a rule's
//! [`crate::rules::RuleSpec`]) derive `sqlx::FromRow` with these columns in them; the store
//! re-exports it. Feature `sqlx`.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Type};

pub struct JsonText<T>(T);

/// Both wrappers are a `TEXT` column to the database.
macro_rules! text_column {
    ($($wrapper:ident),*) => {
        $(impl<DB: Database, T> Type<DB> for $wrapper<T>
        where
            String: Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as Type<DB>>::compatible(ty)
            }
        })*
    };
}

text_column!(JsonText, StrictJsonText);

impl<'r, DB: Database, T: DeserializeOwned + Default> Decode<'r, DB> for JsonText<T>
where
    String: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <String as Decode<'r, DB>>::decode(value)?;
        Ok(JsonText(serde_json::from_str(&text).unwrap_or_default()))
    }
}

/// JSON text whose unreadable content is a decode error (sqlx names the column), never
/// `T::default()`.
pub struct StrictJsonText<T>(T);

impl<'r, DB: Database, T: DeserializeOwned> Decode<'r, DB> for StrictJsonText<T>
where
    String: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <String as Decode<'r, DB>>::decode(value)?;
        Ok(StrictJsonText(serde_json::from_str(&text)?))
    }
}

/// `From<Wrapper<T>> for T`, per type (a blanket impl over `T` is not allowed here).
macro_rules! json_text_into {
    ($wrapper:ident: $($t:ty),* $(,)?) => {
        $(impl From<$wrapper<$t>> for $t {
            fn from(j: $wrapper<$t>) -> Self {
                j.0
            }
        })*
    };
}

json_text_into!(StrictJsonText: Vec<String>);

json_text_into!(
    JsonText:
    Vec<i64>,
    Vec<crate::ChannelId>,
    Vec<String>,
    BTreeMap<String, String>,
    serde_json::Value,
    crate::rules::Matchers,
    crate::ProcessOwner,
);
