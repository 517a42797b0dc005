//! Who may do what: the scopes of an API key and the roles of a user.

use serde::{Deserialize, Serialize};

/// What an API key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Ingest,
    Read,
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Ingest => "ingest",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "ingest" => Some(Scope::Ingest),
            "read" => Some(Scope::Read),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }
}

/// A user's role in their organisation, least privileged first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything of the organisation.
    Viewer,
    /// Also sends data (ingest, job reports) and manages their own `read`/`ingest` API keys.
    Member,
    /// Also manages users, teams, every API key, assignments, settings and alerting.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "member" => Some(Role::Member),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// The API scopes a user of this role holds (and the most a key they create may have).
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            Role::Viewer => &[Scope::Read],
            Role::Member => &[Scope::Read, Scope::Ingest],
            Role::Admin => &[Scope::Admin, Scope::Read, Scope::Ingest],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for s in [Scope::Ingest, Scope::Read, Scope::Admin] {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for r in [Role::Viewer, Role::Member, Role::Admin] {
            assert_eq!(Role::parse(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        assert_eq!(Scope::parse("root"), None);
        assert!(Role::Viewer < Role::Admin);
    }
}
