//! Bounded ingest concurrency per API key (or per user, for a dashboard session): a key that
//! already has `--max-concurrent-ingest-per-key` batches in flight gets 429 with `Retry-After`
//! at once, rather than a queue that holds every waiting body in memory. Agents retry 429
//! with backoff and keep the batch spooled meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fleetlens_store::accounts::{ApiKeyId, UserId};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{Caller, Principal};
use crate::error::ApiError;

/// What one batch may hold, checked while it is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// JSON bytes, after gzip.
    pub max_decoded_bytes: usize,
    pub max_samples: usize,
}

impl DecodeLimits {
    pub fn of(config: &crate::config::Config) -> Self {
        Self { max_decoded_bytes: config.max_decoded_bytes, max_samples: config.max_samples_per_batch as usize }
    }
}

/// Keys (and users) tracked at most. An idle key's entry is dropped when the map is full, so
/// the map stays bounded however many keys an installation has.
pub const MAX_TRACKED_CALLERS: usize = 10_000;

/// Who a permit is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    Key(ApiKeyId),
    User(UserId),
}

/// The semaphores of the callers that ingest.
#[derive(Debug)]
pub struct IngestGate {
    per_caller: usize,
    callers: Mutex<HashMap<Who, Arc<Semaphore>>>,
}

impl IngestGate {
    pub fn new(per_caller: usize) -> Self {
        Self { per_caller: per_caller.max(1), callers: Mutex::new(HashMap::new()) }
    }

    /// A permit for one batch of `caller`, held until the batch is stored; 429 when the caller
    /// has all of theirs in flight.
    pub fn enter(&self, caller: &Caller) -> Result<OwnedSemaphorePermit, ApiError> {
        let who = match &caller.principal {
            Principal::Session { user, .. } => Who::User(user.id),
            Principal::ApiKey { .. } => Who::Key(caller.key.id),
        };
        self.enter_as(who)
    }

    fn enter_as(&self, who: Who) -> Result<OwnedSemaphorePermit, ApiError> {
        let semaphore = {
            let mut callers = self.callers.lock().unwrap_or_else(|e| e.into_inner());
            if callers.len() >= MAX_TRACKED_CALLERS && !callers.contains_key(&who) {
                // Idle entries hold nothing: only the map refers to their semaphore.
                callers.retain(|_, s| Arc::strong_count(s) > 1);
            }
            if callers.len() >= MAX_TRACKED_CALLERS && !callers.contains_key(&who) {
                return Err(busy(format!(
                    "more than {MAX_TRACKED_CALLERS} API keys are sending batches at once: retry shortly"
                )));
            }
            callers.entry(who).or_insert_with(|| Arc::new(Semaphore::new(self.per_caller))).clone()
        };
        semaphore.try_acquire_owned().map_err(|_| {
            busy(format!(
                "this API key already has {} ingest requests in flight (--max-concurrent-ingest-per-key): retry shortly",
                self.per_caller
            ))
        })
    }

    /// Callers tracked now (for tests).
    pub fn tracked(&self) -> usize {
        self.callers.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn busy(message: String) -> ApiError {
    ApiError::InFlight { message, retry_after_s: 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_caller_has_its_own_bound() {
        let gate = IngestGate::new(2);
        let a1 = gate.enter_as(Who::Key(ApiKeyId(1))).unwrap();
        let _a2 = gate.enter_as(Who::Key(ApiKeyId(1))).unwrap();
        assert!(matches!(gate.enter_as(Who::Key(ApiKeyId(1))), Err(ApiError::InFlight { retry_after_s: 1, .. })));
        let _b = gate.enter_as(Who::Key(ApiKeyId(2))).expect("another key");
        let _u = gate.enter_as(Who::User(UserId(1))).expect("a user is not the key with the same id");
        drop(a1);
        let _again = gate.enter_as(Who::Key(ApiKeyId(1))).expect("a permit came back");
    }

    #[test]
    fn the_map_stays_bounded_and_drops_idle_callers_first() {
        let gate = IngestGate::new(1);
        let busy_one = gate.enter_as(Who::Key(ApiKeyId(0))).unwrap();
        for id in 1..MAX_TRACKED_CALLERS as i64 {
            drop(gate.enter_as(Who::Key(ApiKeyId(id))).unwrap());
        }
        assert_eq!(gate.tracked(), MAX_TRACKED_CALLERS);
        let _new = gate.enter_as(Who::Key(ApiKeyId(-1))).expect("idle entries make room");
        assert_eq!(gate.tracked(), 2, "the busy key and the new one");
        assert!(gate.enter_as(Who::Key(ApiKeyId(0))).is_err(), "the busy key's permit survived the cleanup");
        drop(busy_one);
    }
}
