//! "Say it once": what a GPU cannot give is logged one time per GPU and reason, not every
//! second; transient failures are logged again only after a quiet period.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a repeated transient failure stays quiet after it was logged.
pub const REPEAT_AFTER: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub struct Notes {
    seen: HashMap<(String, String), Instant>,
}

impl Notes {
    pub fn new() -> Self {
        Self::default()
    }

    /// True the first time `(subject, what)` is asked about, false ever after.
    pub fn first(&mut self, subject: &str, what: &str) -> bool {
        let key = (subject.to_string(), what.to_string());
        if self.seen.contains_key(&key) {
            return false;
        }
        self.seen.insert(key, Instant::now());
        true
    }

    /// True the first time, then at most once per `period`.
    pub fn every(&mut self, subject: &str, what: &str, period: Duration) -> bool {
        self.every_at(subject, what, period, Instant::now())
    }

    fn every_at(&mut self, subject: &str, what: &str, period: Duration, now: Instant) -> bool {
        let key = (subject.to_string(), what.to_string());
        match self.seen.get(&key) {
            Some(t) if now.duration_since(*t) < period => false,
            _ => {
                self.seen.insert(key, now);
                true
            }
        }
    }

    /// Forgets `(subject, what)`, so the next failure is logged again (after a recovery).
    pub fn clear(&mut self, subject: &str, what: &str) -> bool {
        // Called after every successful reading: nothing to look up (and no key to build) in
        // the usual case where nothing has gone wrong.
        if self.seen.is_empty() {
            return false;
        }
        self.seen.remove(&(subject.to_string(), what.to_string())).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_subject_and_reason() {
        let mut n = Notes::new();
        assert!(n.first("GPU-1", "gpm"));
        assert!(!n.first("GPU-1", "gpm"));
        assert!(n.first("GPU-2", "gpm"));
        assert!(n.first("GPU-1", "energy_j"));
    }

    #[test]
    fn repeats_after_the_period_and_after_clear() {
        let mut n = Notes::new();
        let t0 = Instant::now();
        assert!(n.every_at("g", "lost", Duration::from_secs(10), t0));
        assert!(!n.every_at("g", "lost", Duration::from_secs(10), t0 + Duration::from_secs(5)));
        assert!(n.every_at("g", "lost", Duration::from_secs(10), t0 + Duration::from_secs(11)));
        assert!(n.clear("g", "lost"));
        assert!(!n.clear("g", "lost"));
        assert!(n.every("g", "lost", Duration::from_secs(10)));
    }
}
