//! Enums that travel as their names: on the wire (JSON strings), in query strings, in TEXT
//! columns and in messages. [`named_enum!`] makes one from a single table of variant and name,
//! so the enum, its text form, its serde form and its OpenAPI schema cannot drift apart.

/// What the macro's expansion names, so that a crate using it needs no serde or utoipa of its own.
#[doc(hidden)]
pub mod __private {
    pub use serde;
    #[cfg(feature = "sqlx")]
    pub use sqlx;
    #[cfg(feature = "openapi")]
    pub use utoipa;
}

/// A name that is none of an enum's names; the message lists the accepted ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}: expected one of {}", accepted.join(", "))]
pub struct UnknownName {
    /// What the enum names, e.g. `severity`.
    pub what: &'static str,
    /// The text that did not match.
    pub name: String,
    /// Every name the enum accepts.
    pub accepted: &'static [&'static str],
}

/// An enum's doc comment as its schema's description, the way utoipa's derive writes it: each
/// line without trailing blanks and without the indent all non-empty lines share, joined by
/// newlines; `None` without a doc comment.
#[doc(hidden)]
pub fn doc_description(lines: &[&str]) -> Option<String> {
    let lines: Vec<&str> = lines.iter().map(|l| l.trim_end()).collect();
    let indent = lines.iter().filter(|l| !l.is_empty()).map(|l| l.len() - l.trim_start_matches(' ').len()).min();
    let indent = indent?;
    Some(lines.iter().map(|l| if l.is_empty() { *l } else { &l[indent..] }).collect::<Vec<_>>().join("\n"))
}

/// Defines a fieldless enum from one table of `Variant = "name"` lines, with:
/// `as_str`, `parse` (`Option`), `ALL` (table order), `NAMES`, `Display`, `FromStr` and
/// `TryFrom<String>` / `TryFrom<&str>` (error [`UnknownName`]), serde `Serialize` /
/// `Deserialize` as the name (an unknown name is a deserialization error listing the accepted
/// names), under the `openapi` feature a utoipa schema (a string enum of the names, described by
/// the enum's doc comment), and under
/// the `sqlx` feature `sqlx::Type` / `Decode` / `Encode` as TEXT (a stored text that is no name
/// is a decode error). The features are fleetlens-core's: the macro is for core's own enums.
///
/// ```
/// fleetlens_core::named_enum! {
///     /// How loud.
///     pub enum Volume("volume") {
///         Quiet = "quiet",
///         Loud = "loud",
///     }
/// }
/// assert_eq!(Volume::Loud.as_str(), "loud");
/// assert_eq!("quiet".parse::<Volume>(), Ok(Volume::Quiet));
/// assert!("shout".parse::<Volume>().unwrap_err().to_string().contains("quiet, loud"));
/// ```
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$($meta:tt)*])*
        $vis:vis enum $name:ident($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$($meta)*])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in the table's order.
            pub const ALL: [$name; $crate::named_enum!(@count $($variant)+)] = [$($name::$variant),+];
            /// Every name, in the table's order.
            pub const NAMES: [&'static str; $crate::named_enum!(@count $($variant)+)] = [$($text),+];

            /// The name (the same on the wire, in SQL and in messages).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The variant of a name; `None` for any other text.
            pub fn parse(name: &str) -> Option<$name> {
                match name {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::names::UnknownName;
            fn from_str(name: &str) -> Result<Self, Self::Err> {
                $name::parse(name).ok_or_else(|| $crate::names::UnknownName {
                    what: $what,
                    name: name.to_string(),
                    accepted: &$name::NAMES,
                })
            }
        }

        impl ::std::convert::TryFrom<&str> for $name {
            type Error = $crate::names::UnknownName;
            fn try_from(name: &str) -> Result<Self, Self::Error> {
                name.parse()
            }
        }

        impl ::std::convert::TryFrom<String> for $name {
            type Error = $crate::names::UnknownName;
            fn try_from(name: String) -> Result<Self, Self::Error> {
                name.parse()
            }
        }

        impl $crate::names::__private::serde::Serialize for $name {
            fn serialize<S: $crate::names::__private::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::names::__private::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::names::__private::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct NameVisitor;
                impl $crate::names::__private::serde::de::Visitor<'_> for NameVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        write!(f, "a {} name: one of {}", $what, $name::NAMES.join(", "))
                    }
                    fn visit_str<E: $crate::names::__private::serde::de::Error>(self, name: &str) -> Result<$name, E> {
                        $name::parse(name).ok_or_else(|| E::unknown_variant(name, &$name::NAMES))
                    }
                }
                deserializer.deserialize_str(NameVisitor)
            }
        }

        #[cfg(feature = "openapi")]
        impl $crate::names::__private::utoipa::PartialSchema for $name {
            fn schema() -> $crate::names::__private::utoipa::openapi::RefOr<$crate::names::__private::utoipa::openapi::schema::Schema> {
                $crate::names::__private::utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type($crate::names::__private::utoipa::openapi::schema::Type::String)
                    .description($crate::names::doc_description($crate::named_enum!(@docs [] $([$($meta)*])*)))
                    .enum_values(Some($name::NAMES))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl $crate::names::__private::utoipa::ToSchema for $name {}

        /// Stored as its name in a TEXT column. A stored text that is none of the names is a
        /// decode error naming the accepted ones (sqlx reports it with the column).
        #[cfg(feature = "sqlx")]
        impl<DB: $crate::names::__private::sqlx::Database> $crate::names::__private::sqlx::Type<DB> for $name
        where
            String: $crate::names::__private::sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as $crate::names::__private::sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as $crate::names::__private::sqlx::Type<DB>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r, DB: $crate::names::__private::sqlx::Database> $crate::names::__private::sqlx::Decode<'r, DB> for $name
        where
            String: $crate::names::__private::sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as $crate::names::__private::sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, $crate::names::__private::sqlx::error::BoxDynError> {
                let name = <String as $crate::names::__private::sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(name.parse::<$name>()?)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'q, DB: $crate::names::__private::sqlx::Database> $crate::names::__private::sqlx::Encode<'q, DB> for $name
        where
            String: $crate::names::__private::sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as $crate::names::__private::sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<$crate::names::__private::sqlx::encode::IsNull, $crate::names::__private::sqlx::error::BoxDynError> {
                <String as $crate::names::__private::sqlx::Encode<'q, DB>>::encode(self.as_str().to_string(), buf)
            }
        }
    };
    // The enum's doc lines, from its attributes (the others skipped).
    (@docs [$($doc:literal)*]) => { &[$($doc),*] };
    (@docs [$($doc:literal)*] [doc = $line:literal] $($rest:tt)*) => {
        $crate::named_enum!(@docs [$($doc)* $line] $($rest)*)
    };
    (@docs [$($doc:literal)*] [$($other:tt)*] $($rest:tt)*) => { $crate::named_enum!(@docs [$($doc)*] $($rest)*) };
    (@count) => { 0usize };
    (@count $head:ident $($tail:ident)*) => { 1usize + $crate::named_enum!(@count $($tail)*) };
}

#[cfg(test)]
mod tests {
    crate::named_enum! {
        /// A test enum.
        pub enum Colour("colour") {
            Red = "red",
            /// Two words.
            DarkBlue = "dark_blue",
        }
    }

    #[test]
    fn names_round_trip_through_text_serde_and_sql_text() {
        assert_eq!(Colour::ALL, [Colour::Red, Colour::DarkBlue]);
        assert_eq!(Colour::NAMES, ["red", "dark_blue"]);
        for c in Colour::ALL {
            assert_eq!(c.to_string(), c.as_str());
            assert_eq!(c.as_str().parse::<Colour>(), Ok(c));
            assert_eq!(Colour::try_from(c.as_str().to_string()), Ok(c));
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Colour>(&format!("\"{}\"", c.as_str())).unwrap(), c);
        }
    }

    #[test]
    fn a_doc_comment_describes_like_utoipa_derive_does() {
        use super::doc_description;
        assert_eq!(doc_description(&[]), None);
        assert_eq!(doc_description(&[" One line. "]), Some("One line.".into()));
        assert_eq!(doc_description(&[" A list:", "", " - indented"]), Some("A list:\n\n- indented".into()));
    }

    #[test]
    fn an_unknown_name_is_an_error_that_lists_the_accepted_names() {
        let e = "green".parse::<Colour>().unwrap_err();
        assert_eq!(e.name, "green");
        assert_eq!(e.to_string(), "unknown colour \"green\": expected one of red, dark_blue");
        assert_eq!(Colour::parse("Red"), None);
        let json = serde_json::from_str::<Colour>("\"green\"").unwrap_err().to_string();
        assert!(json.contains("unknown variant `green`") && json.contains("`dark_blue`"), "{json}");
        assert!(serde_json::from_str::<Colour>("3").is_err());
    }
}
