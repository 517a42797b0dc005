//! JSON documents stored as text (both databases keep them in `TEXT` columns), decoded by
//! `#[derive(sqlx::FromRow)]` through `#[sqlx(try_from = "JsonText<T>")]`. Unreadable JSON
//! decodes as `T::default()`: the columns are written by the store only.
//!
//! Here rather than in the store because core types that are stored whole (a rule's
//! [`crate::rules::RuleSpec`]) derive `sqlx::FromRow` with these columns in them; the store
//! re-exports it. Feature `sqlx`.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Type};

pub struct JsonText<T>(T);

impl<DB: Database, T> Type<DB> for JsonText<T>
where
    String: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <String as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <String as Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: Database, T: DeserializeOwned + Default> Decode<'r, DB> for JsonText<T>
where
    String: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <String as Decode<'r, DB>>::decode(value)?;
        Ok(JsonText(serde_json::from_str(&text).unwrap_or_default()))
    }
}

/// `From<JsonText<T>> for T`, per type (a blanket impl over `T` is not allowed here).
macro_rules! json_text_into {
    ($($t:ty),* $(,)?) => {
        $(impl From<JsonText<$t>> for $t {
            fn from(j: JsonText<$t>) -> Self {
                j.0
            }
        })*
    };
}

json_text_into!(
    Vec<i64>,
    Vec<crate::ChannelId>,
    Vec<String>,
    BTreeMap<String, String>,
    serde_json::Value,
    crate::rules::Matchers,
    crate::ProcessOwner,
);
