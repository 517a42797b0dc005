//! JSON documents stored as text: [`JsonText`] lives in core (feature `sqlx`), where the stored
//! core types that derive `sqlx::FromRow` need it.

pub use fleetlens_core::json_text::JsonText;
