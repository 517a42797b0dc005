//! What every contract test file starts from: a fresh database of one backend, migrated, and
//! the store that serves it. (`tests/common/` is not a test target of its own; each file
//! includes it with `mod common;`.)

use std::sync::Arc;

use fleetlens_store::Store;
use fleetlens_tests::{Backend, TestDatabase};

/// A fresh database of `backend` and the store on it; the database goes when the first half
/// of the pair is dropped, so keep it alive for the test's length.
pub async fn open(backend: Backend) -> (TestDatabase, Arc<dyn Store>) {
    let db = TestDatabase::new(backend).await;
    let store = fleetlens_store::connect(&db.url).await.expect("connect");
    (db, store)
}
