//! Who may do what: the scopes of an API key and the roles of a user.

crate::named_enum! {
    /// What an API key may do.
    pub enum Scope("scope") {
        Ingest = "ingest",
        Read = "read",
        Admin = "admin",
    }
}

crate::named_enum! {
    /// Where a GPU's team came from, strongest first: an admin's assignment of the GPU, an
    /// admin's assignment of its host, the team of the API key that reports it, the `team`
    /// label its agent sends.
    pub enum TeamSource("team source") {
        Gpu = "gpu",
        Host = "host",
        Key = "key",
        Label = "label",
    }
}

crate::named_enum! {
    /// A user's role in their organisation, least privileged first.
    pub enum Role("role") {
        /// Reads everything of the organisation.
        Viewer = "viewer",
        /// Also sends data (ingest, job reports) and manages their own `read`/`ingest` API keys.
        Member = "member",
        /// Also manages users, teams, every API key, assignments, settings and alerting.
        Admin = "admin",
    }
}

impl Role {
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
        assert_eq!(
            "root".parse::<Role>().unwrap_err().to_string(),
            "unknown role \"root\": expected one of viewer, member, admin"
        );
        assert!(Role::Viewer < Role::Member && Role::Member < Role::Admin);
    }
}
