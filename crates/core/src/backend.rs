//! Which database a store keeps its data in: what the store reports and `GET /readyz` shows.

crate::named_enum! {
    /// The database behind a store.
    pub enum StoreBackend("store backend") {
        Sqlite = "sqlite",
        Postgres = "postgres",
    }
}
