//! How samples arrive. Agents read every second but send in batches (`--flush-interval`, 5 s by
//! default), so between two deliveries a healthy GPU's newest stored sample ages by the agent's
//! flush interval. The offline rule ("no sample for 3 intervals", METRICS.md) counts that
//! silence only beyond the delivery cadence: the GPU list, the GPU detail, `/metrics` and the
//! alert engine all allow for it, learnt per host (or per GPU) from the arrivals they see.

use std::collections::HashMap;
use std::sync::Mutex;

use fleetlens_store::OrgId;

/// Assumed time between two deliveries until two have been seen (the agent's default
/// `--flush-interval` is 5 s).
pub const DEFAULT_DELIVERY_GAP_MS: i64 = 10_000;
/// A longer gap between deliveries is an outage, not the cadence.
pub const MAX_DELIVERY_GAP_MS: i64 = 60_000;

/// When samples last arrived and the usual time between arrivals.
#[derive(Debug, Default, Clone, Copy)]
pub struct Delivery {
    arrived_ms: i64,
    gap_ms: i64,
}

impl Delivery {
    pub fn arrived(&mut self, now: i64) {
        if self.arrived_ms > 0 {
            let gap = now - self.arrived_ms;
            if (1..=MAX_DELIVERY_GAP_MS).contains(&gap) {
                self.gap_ms = if self.gap_ms == 0 { gap } else { (3 * self.gap_ms + gap) / 4 };
            }
        }
        self.arrived_ms = now;
    }

    /// The silence the delivery cadence explains.
    pub fn allowance_ms(&self) -> i64 {
        if self.gap_ms > 0 { self.gap_ms.min(MAX_DELIVERY_GAP_MS) } else { DEFAULT_DELIVERY_GAP_MS }
    }
}

/// Hosts whose cadence is remembered at most, over all organisations. Past it, the tenth that
/// delivered longest ago is forgotten (they fall back to the default allowance), so hostile or
/// short-lived host names cannot grow the map without bound.
pub const MAX_TRACKED_HOSTS: usize = 100_000;

/// The delivery cadence of each host, as this process has received its batches (in memory: after
/// a restart, or on a replica a host does not send to, the default applies).
#[derive(Debug, Default)]
pub struct HostDeliveries {
    orgs: Mutex<Tracked>,
}

#[derive(Debug, Default)]
struct Tracked {
    hosts: HashMap<OrgId, HashMap<String, Delivery>>,
    len: usize,
}

impl Tracked {
    /// Forget the tenth of the hosts that delivered longest ago.
    fn evict_oldest(&mut self) {
        let mut times: Vec<i64> = self.hosts.values().flat_map(|h| h.values().map(|d| d.arrived_ms)).collect();
        if times.is_empty() {
            return;
        }
        let nth = times.len() / 10;
        let (_, cutoff, _) = times.select_nth_unstable(nth);
        let cutoff = *cutoff;
        for hosts in self.hosts.values_mut() {
            hosts.retain(|_, d| d.arrived_ms > cutoff);
        }
        self.hosts.retain(|_, h| !h.is_empty());
        self.len = self.hosts.values().map(HashMap::len).sum();
    }
}

impl HostDeliveries {
    /// A batch of `host` was stored at `now`.
    pub fn arrived(&self, org: OrgId, host: &str, now: i64) {
        let mut tracked = self.orgs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = tracked.hosts.get_mut(&org).and_then(|hosts| hosts.get_mut(host)) {
            d.arrived(now);
            return;
        }
        if tracked.len >= MAX_TRACKED_HOSTS {
            tracked.evict_oldest();
        }
        tracked.hosts.entry(org).or_default().entry(host.to_string()).or_default().arrived(now);
        tracked.len += 1;
    }

    /// The silence `host`'s delivery cadence explains.
    pub fn allowance_ms(&self, org: OrgId, host: &str) -> i64 {
        // Read for every GPU of a list: a lookup by `&str`, no allocation.
        let tracked = self.orgs.lock().unwrap_or_else(|e| e.into_inner());
        tracked
            .hosts
            .get(&org)
            .and_then(|hosts| hosts.get(host))
            .map_or(DEFAULT_DELIVERY_GAP_MS, Delivery::allowance_ms)
    }

    /// Hosts remembered now.
    pub fn tracked(&self) -> usize {
        self.orgs.lock().unwrap_or_else(|e| e.into_inner()).len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_allowance_follows_the_flush_cadence_and_ignores_outages() {
        let mut d = Delivery::default();
        assert_eq!(d.allowance_ms(), DEFAULT_DELIVERY_GAP_MS);
        d.arrived(100_000);
        assert_eq!(d.allowance_ms(), DEFAULT_DELIVERY_GAP_MS, "one arrival says nothing of the cadence");
        for i in 1..=20 {
            d.arrived(100_000 + i * 5_000);
        }
        assert_eq!(d.allowance_ms(), 5_000);
        // A ten-minute outage is not the cadence.
        d.arrived(100_000 + 20 * 5_000 + 600_000);
        assert_eq!(d.allowance_ms(), 5_000);
    }

    #[test]
    fn hosts_have_their_own_cadence_per_organisation() {
        let d = HostDeliveries::default();
        for i in 0..10 {
            d.arrived(OrgId(1), "slow", 1_000_000 + i * 30_000);
            d.arrived(OrgId(1), "fast", 1_000_000 + i * 2_000);
        }
        assert_eq!(d.allowance_ms(OrgId(1), "slow"), 30_000);
        assert_eq!(d.allowance_ms(OrgId(1), "fast"), 2_000);
        assert_eq!(d.allowance_ms(OrgId(2), "fast"), DEFAULT_DELIVERY_GAP_MS, "another organisation's host");
        assert_eq!(d.allowance_ms(OrgId(1), "new"), DEFAULT_DELIVERY_GAP_MS);
    }

    #[test]
    fn the_map_is_bounded_and_forgets_the_longest_silent_hosts() {
        let d = HostDeliveries::default();
        for _ in 0..3 {
            d.arrived(OrgId(1), "steady", 1_000_000);
        }
        for i in 0..MAX_TRACKED_HOSTS as i64 + 50 {
            d.arrived(OrgId(2), &format!("h{i}"), 2_000_000 + i);
            if i % 1000 == 0 {
                d.arrived(OrgId(1), "steady", 2_000_000 + i);
            }
        }
        assert!(d.tracked() <= MAX_TRACKED_HOSTS, "{}", d.tracked());
        assert!(d.tracked() >= MAX_TRACKED_HOSTS * 8 / 10);
        assert_ne!(d.allowance_ms(OrgId(1), "steady"), DEFAULT_DELIVERY_GAP_MS, "a host that keeps delivering stays");
        assert_eq!(d.allowance_ms(OrgId(2), "h0"), DEFAULT_DELIVERY_GAP_MS, "the oldest went");
    }
}
