//! JSON documents stored as text: [`JsonText`] and [`StrictJsonText`] live in core (feature
//! `sqlx`), where the stored core types that derive `sqlx::FromRow` need them.

pub use fleetlens_core::json_text::JsonText;
