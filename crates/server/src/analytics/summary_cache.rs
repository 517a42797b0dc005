//! Summaries of relative periods (`GET /api/v1/fleet/summary?range=`), shared by every dashboard
//! of an organisation: fresh for [`SUMMARY_TTL`]; after that, served as they are while one task
//! computes the next (a fleet of thousands of GPUs takes seconds, longer than a poll should wait).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fleetlens_api::FleetSummary;
use fleetlens_store::OrgId;

/// How long a cached summary is fresh: well under a dashboard's polling interval × 2.
pub const SUMMARY_TTL: Duration = Duration::from_secs(10);

/// How long an expired summary is still served while the next is computed; older ones are
/// computed while the request waits (nobody asked for minutes: the figures would mislead).
pub const SUMMARY_MAX_STALE: Duration = Duration::from_secs(120);

/// What the cache holds for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Cached {
    Fresh(FleetSummary),
    /// Expired but within [`SUMMARY_MAX_STALE`]: serve it, and refresh it.
    Stale(FleetSummary),
    Missing,
}

struct Entry {
    at: Instant,
    summary: FleetSummary,
    refreshing: bool,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    /// Moves at each invalidation, so that a refresh that began before it (with the old prices
    /// or thresholds) is not stored after it.
    generation: u64,
}

#[derive(Default)]
pub struct SummaryCache {
    entries: Mutex<Entries>,
}

impl SummaryCache {
    pub fn lookup(&self, key: &str) -> Cached {
        self.lookup_at(key, Instant::now())
    }

    fn lookup_at(&self, key: &str, now: Instant) -> Cached {
        let entries = self.entries.lock().expect("summary cache lock");
        match entries.map.get(key) {
            Some(e) if now.duration_since(e.at) < SUMMARY_TTL => Cached::Fresh(e.summary.clone()),
            Some(e) if now.duration_since(e.at) < SUMMARY_MAX_STALE => Cached::Stale(e.summary.clone()),
            _ => Cached::Missing,
        }
    }

    pub fn put(&self, key: String, summary: FleetSummary) {
        self.put_at(key, summary, Instant::now());
    }

    fn put_at(&self, key: String, summary: FleetSummary, now: Instant) {
        let mut entries = self.entries.lock().expect("summary cache lock");
        entries.map.retain(|_, e| now.duration_since(e.at) < SUMMARY_MAX_STALE);
        entries.map.insert(key, Entry { at: now, summary, refreshing: false });
    }

    /// Claims the refresh of a stale entry: `Some(generation)` for the one caller that should
    /// compute it (hand it to [`SummaryCache::finish_refresh`]), `None` while another does.
    pub fn begin_refresh(&self, key: &str) -> Option<u64> {
        let mut entries = self.entries.lock().expect("summary cache lock");
        let generation = entries.generation;
        let entry = entries.map.get_mut(key)?;
        if entry.refreshing {
            return None;
        }
        entry.refreshing = true;
        Some(generation)
    }

    /// Stores a refresh's result (`None`: it failed; the next request tries again), unless the
    /// organisation's summaries were invalidated since it began.
    pub fn finish_refresh(&self, key: &str, generation: u64, summary: Option<FleetSummary>) {
        self.finish_refresh_at(key, generation, summary, Instant::now());
    }

    fn finish_refresh_at(&self, key: &str, generation: u64, summary: Option<FleetSummary>, now: Instant) {
        let mut entries = self.entries.lock().expect("summary cache lock");
        if entries.generation != generation {
            return;
        }
        match summary {
            Some(summary) => {
                entries.map.insert(key.to_string(), Entry { at: now, summary, refreshing: false });
            }
            None => {
                if let Some(e) = entries.map.get_mut(key) {
                    e.refreshing = false;
                }
            }
        }
    }

    /// Forget an organisation's summaries (its prices or thresholds changed).
    pub fn invalidate(&self, org: OrgId) {
        let prefix = format!("{org}|");
        let mut entries = self.entries.lock().expect("summary cache lock");
        entries.map.retain(|k, _| !k.starts_with(&prefix));
        entries.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(paid_gpu_hours: f64) -> FleetSummary {
        FleetSummary { paid_gpu_hours, ..Default::default() }
    }

    #[test]
    fn an_expired_summary_is_served_while_one_caller_refreshes_it() {
        let cache = SummaryCache::default();
        let t0 = Instant::now();
        assert_eq!(cache.lookup_at("1|1h", t0), Cached::Missing);
        cache.put_at("1|1h".into(), summary(1.0), t0);
        assert_eq!(cache.lookup_at("1|1h", t0 + Duration::from_secs(9)), Cached::Fresh(summary(1.0)));
        let later = t0 + Duration::from_secs(30);
        assert_eq!(cache.lookup_at("1|1h", later), Cached::Stale(summary(1.0)));
        let generation = cache.begin_refresh("1|1h").expect("the first caller refreshes");
        assert_eq!(cache.begin_refresh("1|1h"), None, "one refresh at a time");
        assert_eq!(cache.lookup_at("1|1h", later), Cached::Stale(summary(1.0)), "served meanwhile");
        cache.finish_refresh_at("1|1h", generation, Some(summary(2.0)), later);
        assert_eq!(cache.lookup_at("1|1h", later), Cached::Fresh(summary(2.0)));
        assert_eq!(cache.lookup_at("1|1h", later + SUMMARY_MAX_STALE), Cached::Missing, "too old to serve");
    }

    #[test]
    fn a_failed_refresh_lets_the_next_caller_try_and_invalidation_wins_over_a_refresh() {
        let cache = SummaryCache::default();
        let t0 = Instant::now();
        cache.put_at("1|1h".into(), summary(1.0), t0);
        cache.put_at("2|1h".into(), summary(5.0), t0);
        let generation = cache.begin_refresh("1|1h").unwrap();
        cache.finish_refresh_at("1|1h", generation, None, t0);
        let generation = cache.begin_refresh("1|1h").expect("free again after a failure");
        // Prices changed while it computed: its result (old prices) is not kept.
        cache.invalidate(OrgId(1));
        cache.finish_refresh_at("1|1h", generation, Some(summary(2.0)), t0);
        assert_eq!(cache.lookup_at("1|1h", t0), Cached::Missing);
        assert_eq!(cache.lookup_at("2|1h", t0), Cached::Fresh(summary(5.0)), "other organisations keep theirs");
        assert_eq!(cache.begin_refresh("9|1h"), None, "nothing to refresh");
    }
}
