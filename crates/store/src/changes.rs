//! Change signals between server processes: "organisation N has new data", for live streams.
//!
//! A replica that stores a batch (or whose alert engine opens or resolves an alert) calls
//! [`crate::Store::announce_change`]; every replica on the database holds a [`ChangeListener`]
//! from [`crate::Store::listen_changes`] and recomputes what its open streams of that
//! organisation show. On PostgreSQL this is `NOTIFY fleetlens_changes, '<org id>'` and a
//! `LISTEN` on a connection of its own (sqlx's `PgListener`): several replicas share one
//! database, and a notification reaches all of them within milliseconds, without a table to
//! poll or clean up. SQLite is one process: a broadcast channel in the process.

use sqlx::postgres::PgListener;
use tokio::sync::broadcast;

use crate::{OrgId, Result};

/// The PostgreSQL channel the signals travel on.
pub const CHANNEL: &str = "fleetlens_changes";

/// What a listener heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// This organisation's data changed.
    Org(OrgId),
    /// Signals may have been lost (the listening connection was cut and re-opened, or this
    /// listener fell behind): every organisation may have changed.
    Unknown,
}

/// Receives the change signals of every replica on the database (see the module docs).
pub struct ChangeListener(Inner);

enum Inner {
    Local(broadcast::Receiver<OrgId>),
    Pg(Box<PgListener>),
}

impl ChangeListener {
    pub(crate) fn local(rx: broadcast::Receiver<OrgId>) -> Self {
        Self(Inner::Local(rx))
    }

    pub(crate) async fn postgres(pool: &sqlx::PgPool) -> Result<Self> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(Self(Inner::Pg(Box::new(listener))))
    }

    /// The next signal. On PostgreSQL a cut connection is re-opened here (and reported as
    /// [`Change::Unknown`]: what was sent meanwhile is lost); an error means it could not be
    /// re-opened now (call again later).
    pub async fn recv(&mut self) -> Result<Change> {
        match &mut self.0 {
            Inner::Local(rx) => match rx.recv().await {
                Ok(org) => Ok(Change::Org(org)),
                Err(broadcast::error::RecvError::Lagged(_)) => Ok(Change::Unknown),
                // The store is gone: nothing will change any more.
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            },
            Inner::Pg(listener) => Ok(match listener.try_recv().await? {
                Some(n) => n.payload().parse().map_or(Change::Unknown, Change::Org),
                None => Change::Unknown,
            }),
        }
    }
}

/// The in-process signal of a single-process store.
#[derive(Debug, Clone)]
pub(crate) struct LocalChanges(broadcast::Sender<OrgId>);

impl Default for LocalChanges {
    fn default() -> Self {
        // Signals are coalesced by their receivers; one that falls this far behind hears
        // `Change::Unknown` and rechecks everything.
        Self(broadcast::channel(1024).0)
    }
}

impl LocalChanges {
    pub(crate) fn announce(&self, org: OrgId) {
        // No listener: nobody watches; nothing to do.
        let _ = self.0.send(org);
    }

    pub(crate) fn listen(&self) -> ChangeListener {
        ChangeListener::local(self.0.subscribe())
    }
}
