//! Utilization as the mean over the whole poll interval, from NVML's sample buffer. Pure, tested
//! without a GPU.
//!
//! `nvmlDeviceGetUtilizationRates` gives the busy share of the driver's *last* short sample
//! period (200 ms on an H100, driver 580), so a 1-Hz reader sees one fifth of each second: a
//! workload whose period is near the poll period aliases (a 1-s sawtooth at 20 % duty read 0 or
//! 86 % depending on phase, while it was busy 20 % of the time). The driver keeps those periods
//! in a buffer (`nvmlDeviceGetSamples`, `NVML_GPU_UTILIZATION_SAMPLES` /
//! `NVML_MEMORY_UTILIZATION_SAMPLES`; one entry per period, Unix µs timestamps, the value the
//! busy % of the period that ends there). Giving each poll the entries that end inside its
//! interval, each weighted by the time it covers, gives the mean over that interval — the
//! interval GPM's counters average over.
//!
//! Reading the buffer costs one call into the driver whatever it returns (2.7 ms of CPU on an
//! H100 with driver 580, the same for 5 entries or 71), and the buffer reaches 14 s back (71
//! entries): so it is read once per batch, when the batch is sealed, and its entries are split
//! among the polls of the batch ([`UtilWindow::split`]). Where a batch spans more than half the
//! buffer, the polls read it in between as well ([`UtilWindow::read_due`]), so no entry falls
//! out unread.

/// One entry of NVML's sample buffer: the period ending at `ts_us` was `pct` % busy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UtilPoint {
    pub ts_us: u64,
    pub pct: f64,
}

/// The mean of one poll's window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalMean {
    /// Time-weighted mean busy %, 0–100.
    pub mean_pct: f64,
    /// Buffer entries it was computed from.
    pub samples: usize,
    /// Microseconds of the window the entries cover.
    pub covered_us: u64,
}

/// A batch whose newest poll ends this long after the newest entry used, with no new entry read,
/// starts again from the whole buffer: the driver's series stopped or jumped (its clock was set
/// back, so nothing is ever "newer than the last seen" again). At a 200-ms driver period a
/// healthy buffer never goes 3 s without an entry.
pub const RESTART_AFTER_US: u64 = 3_000_000;

/// What the buffer's reach is taken to be at least, when reading it in between polls: a
/// buffer seen short (the driver had just started filling it) does not make every poll read.
pub const MIN_REACH_US: u64 = 4_000_000;

/// How long after a batch's last poll its seal reads the buffer: the driver's period that holds
/// the poll (200 ms on an H100) must have ended for an entry to reach it. Where none does (a
/// longer period), the last poll ends with the newest entry.
pub const SEAL_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Where one GPU's reading of one buffer stands.
#[derive(Debug, Clone, Default)]
pub struct UtilWindow {
    /// Up to when (µs) the entries were given to polls: where the next poll's window starts.
    used_until_us: Option<u64>,
    /// Entries read and not yet given to polls in full, oldest first (ending after
    /// `used_until_us`; the oldest may have been given in part).
    held: Vec<UtilPoint>,
    /// How far back the driver's buffer reaches: the longest span a whole-buffer read returned.
    reach_us: Option<u64>,
}

impl UtilWindow {
    pub fn new() -> Self {
        Self::default()
    }

    /// What to pass as NVML's `lastSeenTimeStamp` (`None`: the whole buffer): the newest entry
    /// held, else where the polls stopped.
    pub fn since(&self) -> Option<u64> {
        self.held.last().map(|p| p.ts_us).or(self.used_until_us)
    }

    /// How far back the buffer was seen to reach.
    pub fn reach_us(&self) -> Option<u64> {
        self.reach_us
    }

    /// Entries read and not yet given to a poll.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Keeps the entries NVML returned for [`Self::since`], in the order it returned them.
    ///
    /// - A timestamp that goes back is a restart of the driver's series: what came before it
    ///   (held or used) is dropped and the window starts again from the entries after it.
    /// - Entries at or before [`Self::since`] (a driver that ignores `lastSeenTimeStamp`) are
    ///   not kept twice.
    /// - A whole-buffer read (since was `None`) tells how far back the buffer reaches.
    pub fn hold(&mut self, entries: &[UtilPoint]) {
        let whole = self.since().is_none();
        let entries = match entries.windows(2).rposition(|w| w[1].ts_us < w[0].ts_us) {
            Some(k) => {
                self.held.clear();
                self.used_until_us = None;
                &entries[k + 1..]
            }
            None => entries,
        };
        if whole && let (Some(first), Some(last)) = (entries.first(), entries.last()) {
            let span = last.ts_us.saturating_sub(first.ts_us);
            self.reach_us = Some(self.reach_us.map_or(span, |r| r.max(span)));
        }
        let since = self.since();
        self.held.extend(entries.iter().filter(|p| since.is_none_or(|s| p.ts_us > s)));
    }

    /// True when the polls should read the buffer now rather than wait for the batch's seal:
    /// the entries not yet read reach back more than half the buffer (at least
    /// [`MIN_REACH_US`] taken as its reach), so they would start falling out of it.
    pub fn read_due(&self, now_us: u64) -> bool {
        let (Some(since), Some(reach)) = (self.since(), self.reach_us) else { return false };
        now_us.saturating_sub(since) > reach.max(MIN_REACH_US) / 2
    }

    /// Gives each poll the time-weighted mean of the held entries over its interval; `ends_us`
    /// are the polls' times (µs, ascending). `None` where no entry covers any of a poll's
    /// interval (the caller keeps the instantaneous reading).
    ///
    /// - Each entry covers the time since the entry before it (capped at 1.5 times the entries'
    ///   median gap: the driver's periods jitter by a few %, and after a stall, when the buffer
    ///   has dropped what came before, the oldest kept entry does not stand for the whole
    ///   stall). An entry that straddles two polls is shared between them by time.
    /// - The batch's first poll starts where the previous batch stopped (without one,
    ///   `interval_us` before it). Its last poll ends at its own time where an entry reaches
    ///   it (the seal waits for the driver's period to end, [`SEAL_WAIT`]), else with the
    ///   newest entry; the next batch starts there. No time is counted twice or dropped.
    /// - What lies after that stays held for the next batch (an entry that straddles it, in
    ///   part).
    /// - Values outside 0–100 are clamped; non-finite ones are skipped.
    pub fn split(&mut self, ends_us: &[u64], interval_us: u64) -> Vec<Option<IntervalMean>> {
        let (Some(&first_end), Some(&last_end)) = (ends_us.first(), ends_us.last()) else { return Vec::new() };
        if self.held.is_empty() && self.used_until_us.is_some_and(|u| last_end < u || last_end - u > RESTART_AFTER_US) {
            self.used_until_us = None;
            return vec![None; ends_us.len()];
        }
        let start = self.used_until_us.unwrap_or_else(|| first_end.saturating_sub(interval_us));
        let cap = typical_gap_us(&self.held).map_or(interval_us, |g| g + g / 2).max(1);
        // Where this batch stops: its last poll, or the newest entry where none reaches it.
        let horizon = match self.held.last() {
            Some(p) => p.ts_us.min(last_end),
            None => return vec![None; ends_us.len()],
        };
        // What each entry covers up to the horizon: (from, to], busy %.
        let mut spans: Vec<(u64, u64, f64)> = Vec::new();
        let mut prev = self.used_until_us;
        let mut used = 0;
        for p in &self.held {
            if p.ts_us > start && p.pct.is_finite() {
                let from = prev.map_or(start, |q| q.max(start)).max(p.ts_us.saturating_sub(cap));
                let to = p.ts_us.min(horizon);
                if to > from {
                    spans.push((from, to, p.pct.clamp(0.0, 100.0)));
                }
            }
            if p.ts_us > horizon {
                break;
            }
            prev = Some(p.ts_us);
            used += 1;
        }
        let last = ends_us.len() - 1;
        let out = (0..ends_us.len())
            .map(|k| {
                let lo = if k == 0 { 0 } else { ends_us[k - 1] };
                let hi = if k == last { u64::MAX } else { ends_us[k] };
                let (mut weighted, mut covered, mut samples) = (0.0, 0u64, 0usize);
                for &(from, to, pct) in &spans {
                    let overlap = to.min(hi).saturating_sub(from.max(lo));
                    if overlap > 0 {
                        weighted += pct * overlap as f64;
                        covered += overlap;
                        samples += 1;
                    }
                }
                (covered > 0).then(|| IntervalMean {
                    mean_pct: weighted / covered as f64,
                    samples,
                    covered_us: covered,
                })
            })
            .collect();
        self.used_until_us = Some(horizon.max(start));
        self.held.drain(..used);
        out
    }
}

/// Median gap between consecutive entries, where there are two or more.
fn typical_gap_us(entries: &[UtilPoint]) -> Option<u64> {
    let mut gaps: Vec<u64> =
        entries.windows(2).map(|w| w[1].ts_us.saturating_sub(w[0].ts_us)).filter(|g| *g > 0).collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_unstable();
    Some(gaps[gaps.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1000;

    /// Recorded on an H100 (driver 580.159.04, 2026-11-26, `agent/tests/device/util_buffer_probe.py`): a
    /// 1-s sawtooth, 0.2 s of bf16 matmuls then 0.8 s asleep. The entries of the kernel buffer, and
    /// the times it was read, once a second (the polls).
    const SAWTOOTH: [(u64, f64); 101] = [
        (1795701731204105, 0.0),
        (1795701731407920, 52.0),
        (1795701731605338, 46.0),
        (1795701731805169, 0.0),
        (1795701732004367, 0.0),
        (1795701732204308, 0.0),
        (1795701732410679, 52.0),
        (1795701732608344, 44.0),
        (1795701732805309, 0.0),
        (1795701733004761, 0.0),
        (1795701733204430, 0.0),
        (1795701733408161, 52.0),
        (1795701733605390, 45.0),
        (1795701733805397, 0.0),
        (1795701734004462, 0.0),
        (1795701734204338, 0.0),
        (1795701734408129, 52.0),
        (1795701734605204, 45.0),
        (1795701734805402, 0.0),
        (1795701735004668, 0.0),
        (1795701735204605, 0.0),
        (1795701735413265, 51.0),
        (1795701735605306, 41.0),
        (1795701735805532, 0.0),
        (1795701736004452, 0.0),
        (1795701736204283, 0.0),
        (1795701736408284, 51.0),
        (1795701736607785, 45.0),
        (1795701736805284, 0.0),
        (1795701737004537, 0.0),
        (1795701737204620, 0.0),
        (1795701737408359, 52.0),
        (1795701737605287, 46.0),
        (1795701737805403, 0.0),
        (1795701738004583, 0.0),
        (1795701738204530, 0.0),
        (1795701738408075, 51.0),
        (1795701738605632, 45.0),
        (1795701738805485, 0.0),
        (1795701739004630, 0.0),
        (1795701739204743, 0.0),
        (1795701739410981, 53.0),
        (1795701739608771, 44.0),
        (1795701739805670, 0.0),
        (1795701740005006, 0.0),
        (1795701740204476, 0.0),
        (1795701740408406, 52.0),
        (1795701740605537, 45.0),
        (1795701740805557, 0.0),
        (1795701741004674, 0.0),
        (1795701741204520, 0.0),
        (1795701741408187, 52.0),
        (1795701741605547, 46.0),
        (1795701741805584, 0.0),
        (1795701742004639, 0.0),
        (1795701742204622, 0.0),
        (1795701742412077, 53.0),
        (1795701742605245, 45.0),
        (1795701742805891, 0.0),
        (1795701743004772, 0.0),
        (1795701743204592, 0.0),
        (1795701743408556, 52.0),
        (1795701743608005, 45.0),
        (1795701743805900, 0.0),
        (1795701744004623, 0.0),
        (1795701744204936, 0.0),
        (1795701744408368, 52.0),
        (1795701744605396, 46.0),
        (1795701744805711, 0.0),
        (1795701745004592, 0.0),
        (1795701745204521, 0.0),
        (1795701745408239, 52.0),
        (1795701745605676, 46.0),
        (1795701745805684, 0.0),
        (1795701746004680, 0.0),
        (1795701746204501, 0.0),
        (1795701746410055, 52.0),
        (1795701746608677, 45.0),
        (1795701746805806, 0.0),
        (1795701747005122, 0.0),
        (1795701747204647, 0.0),
        (1795701747407225, 50.0),
        (1795701747605677, 46.0),
        (1795701747805880, 0.0),
        (1795701748004964, 0.0),
        (1795701748204716, 0.0),
        (1795701748408385, 51.0),
        (1795701748605696, 46.0),
        (1795701748805565, 0.0),
        (1795701749004580, 0.0),
        (1795701749204734, 0.0),
        (1795701749412287, 52.0),
        (1795701749605613, 45.0),
        (1795701749805980, 0.0),
        (1795701750004850, 0.0),
        (1795701750204748, 0.0),
        (1795701750408537, 50.0),
        (1795701750608052, 45.0),
        (1795701750805932, 0.0),
        (1795701751004956, 0.0),
        (1795701751205141, 0.0),
    ];
    const POLLS_US: [u64; 20] = [
        1795701732178273,
        1795701733180089,
        1795701734181876,
        1795701735183672,
        1795701736185592,
        1795701737187386,
        1795701738189204,
        1795701739190912,
        1795701740192640,
        1795701741194360,
        1795701742196105,
        1795701743197993,
        1795701744199878,
        1795701745201701,
        1795701746203492,
        1795701747205371,
        1795701748207209,
        1795701749209087,
        1795701750210826,
        1795701751212614,
    ];
    /// The entries before the first poll, as a whole-buffer read at start gave them (its newest three).
    const BEFORE: [(u64, f64); 3] = [(1795701730605187, 33.0), (1795701730805403, 0.0), (1795701731004517, 0.0)];
    fn pts(start_us: u64, period_us: u64, values: &[f64]) -> Vec<UtilPoint> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| UtilPoint { ts_us: start_us + (i as u64 + 1) * period_us, pct: v })
            .collect()
    }

    fn points(raw: &[(u64, f64)]) -> Vec<UtilPoint> {
        raw.iter().map(|&(ts_us, pct)| UtilPoint { ts_us, pct }).collect()
    }

    /// What NVML returns at `now_us` for `since`: the buffer's entries newer than it, up to now,
    /// at most `capacity` of the newest.
    fn read(buffer: &[UtilPoint], since: Option<u64>, now_us: u64, capacity: usize) -> Vec<UtilPoint> {
        let upto: Vec<UtilPoint> = buffer.iter().filter(|p| p.ts_us <= now_us).copied().collect();
        let kept = &upto[upto.len().saturating_sub(capacity)..];
        kept.iter().filter(|p| since.is_none_or(|s| p.ts_us > s)).copied().collect()
    }

    /// Busy time (% × µs) and time the entries cover within (from, to], each entry covering the
    /// time since the one before it.
    fn busy_and_time(buffer: &[UtilPoint], from: u64, to: u64) -> (f64, u64) {
        let (mut busy, mut total) = (0.0, 0);
        for w in buffer.windows(2) {
            let overlap = w[1].ts_us.min(to).saturating_sub(w[0].ts_us.max(from));
            busy += w[1].pct * overlap as f64;
            total += overlap;
        }
        (busy, total)
    }

    /// Runs the polls of `polls_us`, sealing a batch every `per_batch` polls (the buffer read
    /// `seal_wait_us` after the batch's last poll) and reading in between where `read_due`
    /// says so; the buffer holds `capacity` entries. Gives each poll's mean.
    fn run(
        buffer: &[UtilPoint],
        polls_us: &[u64],
        per_batch: usize,
        seal_wait_us: u64,
        capacity: usize,
    ) -> Vec<Option<IntervalMean>> {
        let mut w = UtilWindow::new();
        // At start, the whole buffer (a second before the first poll).
        w.hold(&read(buffer, None, polls_us[0] - 1_000 * MS, capacity));
        let mut out = Vec::new();
        for batch in polls_us.chunks(per_batch) {
            for &poll in batch {
                if w.read_due(poll) {
                    w.hold(&read(buffer, w.since(), poll, capacity));
                }
            }
            let seal = batch.last().unwrap() + seal_wait_us;
            w.hold(&read(buffer, w.since(), seal, capacity));
            out.extend(w.split(batch, 1_000 * MS));
        }
        out
    }

    #[test]
    fn a_recorded_sawtooth_reads_its_busy_share_in_every_poll_of_a_batch() {
        let mut buffer = points(&BEFORE);
        buffer.extend(points(&SAWTOOTH));
        // The newest entry at each poll, what utilization_rates gives: 0 every time.
        for poll in POLLS_US {
            let newest = buffer.iter().rev().find(|p| p.ts_us <= poll).unwrap();
            assert_eq!(newest.pct, 0.0, "poll {poll}");
        }
        let t0 = POLLS_US[0] - 1_000 * MS;
        let wait = SEAL_WAIT.as_micros() as u64;
        // Read once per batch of 5 polls (the default flush) or at every poll, the seal waiting
        // for the driver's period to end: every poll's window is its own second, exactly.
        // (The recording ends 7 ms after the 20th poll: the first 15, three batches.)
        for per_batch in [5, 1] {
            let got = run(&buffer, &POLLS_US[..15], per_batch, wait, 71);
            assert_eq!(got.len(), 15);
            for (i, m) in got.iter().enumerate() {
                let m = m.unwrap_or_else(|| panic!("{per_batch} per batch: poll {i} has no mean"));
                let from = if i == 0 { t0 } else { POLLS_US[i - 1] };
                assert_eq!(m.covered_us, POLLS_US[i] - from, "{per_batch} per batch: poll {i}");
                let (busy, _) = busy_and_time(&buffer, from, POLLS_US[i]);
                assert!((m.mean_pct - busy / m.covered_us as f64).abs() < 1e-9, "poll {i}: {m:?}");
                // One burst a second: 92–98 % of 200 ms.
                assert!((18.0..=20.0).contains(&m.mean_pct), "{per_batch} per batch: poll {i}: {m:?}");
            }
        }
        // Without the wait the driver's newest period has not ended: a batch's last poll ends
        // with the newest entry (up to 200 ms early) and the next batch starts there. Nothing is
        // counted twice or dropped: the polls hold the entries' busy time and time from the
        // first poll's start to the newest entry used.
        let got = run(&buffer, &POLLS_US, 5, 3 * MS, 71);
        let covered: u64 = got.iter().flatten().map(|m| m.covered_us).sum();
        let busy: f64 = got.iter().flatten().map(|m| m.mean_pct * m.covered_us as f64).sum();
        let newest = buffer.iter().rev().find(|p| p.ts_us <= POLLS_US[19] + 3 * MS).unwrap().ts_us;
        let (want_busy, want_time) = busy_and_time(&buffer, t0, newest);
        assert_eq!(covered, want_time);
        assert!((busy - want_busy).abs() < 1e-6 * want_busy, "{busy} vs {want_busy}");
        for (i, m) in got.iter().enumerate() {
            let m = m.unwrap();
            let busy_ms = m.mean_pct * m.covered_us as f64 / 1e5;
            assert!((180.0..=200.0).contains(&busy_ms), "poll {i}: {m:?}");
        }
    }

    #[test]
    fn a_batch_longer_than_half_the_buffer_is_read_in_between() {
        // 60 polls of a steady 30 % in one batch (a --flush-interval of 60 s), and a buffer of 71
        // entries (14 s): the polls read it every 7 s, so every poll has its mean.
        let t0 = 1_795_700_000_000_000;
        let buffer = pts(t0, 200 * MS, &[30.0; 400]);
        let polls: Vec<u64> = (0..60).map(|i| t0 + 10_000 * MS + i * 1_000 * MS + 37 * MS).collect();
        let got = run(&buffer, &polls, 60, 3 * MS, 71);
        assert!(got.iter().all(|m| m.is_some_and(|m| (m.mean_pct - 30.0).abs() < 1e-9)), "{got:?}");
        // Without the reads in between, the first 45 s would have fallen out of the buffer:
        // those polls get no mean (the caller keeps the instantaneous reading), the last 14 s do.
        let mut w = UtilWindow::new();
        w.hold(&read(&buffer, None, polls[0] - 1_000 * MS, 71));
        w.hold(&read(&buffer, w.since(), polls[59] + 3 * MS, 71));
        let got = w.split(&polls, 1_000 * MS);
        let covered = got.iter().filter(|m| m.is_some()).count();
        assert!((13..=15).contains(&covered), "{covered} polls covered");
        assert!(got[..45].iter().all(Option::is_none));
    }

    #[test]
    fn read_due_waits_for_half_the_buffer() {
        let mut w = UtilWindow::new();
        assert!(!w.read_due(u64::MAX), "nothing read yet: the seal reads");
        w.hold(&pts(0, 200 * MS, &[0.0; 71]));
        assert_eq!(w.reach_us(), Some(14_000 * MS));
        assert_eq!(w.since(), Some(14_200 * MS));
        assert!(!w.read_due(14_200 * MS + 7_000 * MS));
        assert!(w.read_due(14_200 * MS + 7_001 * MS));
        // A buffer seen short counts as reaching MIN_REACH_US.
        let mut w = UtilWindow::new();
        w.hold(&pts(0, 200 * MS, &[0.0; 2]));
        assert_eq!(w.reach_us(), Some(200 * MS));
        assert!(!w.read_due(400 * MS + MIN_REACH_US / 2));
        assert!(w.read_due(400 * MS + MIN_REACH_US / 2 + 1));
        // An incremental read does not change the reach.
        w.hold(&pts(400 * MS, 200 * MS, &[0.0; 50]));
        assert_eq!(w.reach_us(), Some(200 * MS));
    }

    #[test]
    fn entries_are_weighted_by_the_time_they_cover() {
        // An entry 800 ms after the last one used, then one 200 ms later: entries were lost in
        // between (the driver's period is 200 ms), so the first stands for 1.5 usual spacings,
        // not for the whole 800 ms.
        let mut w = UtilWindow { used_until_us: Some(1_000 * MS), ..Default::default() };
        w.hold(&[UtilPoint { ts_us: 1_800 * MS, pct: 100.0 }, UtilPoint { ts_us: 2_000 * MS, pct: 0.0 }]);
        let m = w.split(&[2_000 * MS], 1_000 * MS)[0].unwrap();
        assert!((m.mean_pct - 60.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.covered_us, 500 * MS);
        // Irregular spacing: 100 % over 300 ms, 0 % over 100 ms, 100 % over 300 ms: 6/7, not
        // the plain mean 2/3.
        let mut w = UtilWindow { used_until_us: Some(0), ..Default::default() };
        w.hold(&[
            UtilPoint { ts_us: 300 * MS, pct: 100.0 },
            UtilPoint { ts_us: 400 * MS, pct: 0.0 },
            UtilPoint { ts_us: 700 * MS, pct: 100.0 },
        ]);
        let m = w.split(&[1_000 * MS], 1_000 * MS)[0].unwrap();
        assert!((m.mean_pct - 600.0 / 7.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.samples, 3);
    }

    #[test]
    fn the_first_batch_starts_one_interval_before_its_first_poll() {
        // The whole buffer (14 s) at start: busy long ago, idle in the last second before the
        // first poll, then 50 % during it.
        let mut values = vec![100.0; 65];
        values.extend([0.0; 5]);
        let mut w = UtilWindow::new();
        w.hold(&pts(0, 200 * MS, &values));
        w.hold(&pts(14_000 * MS, 200 * MS, &[50.0; 5]));
        let got = w.split(&[14_000 * MS, 15_000 * MS], 1_000 * MS);
        assert_eq!(got[0].unwrap().mean_pct, 0.0);
        assert_eq!(got[0].unwrap().samples, 5);
        assert_eq!(got[1].unwrap().mean_pct, 50.0);
        assert_eq!(w.since(), Some(15_000 * MS));
        assert_eq!(w.held(), 0);
    }

    #[test]
    fn entries_after_the_last_poll_wait_for_the_next_batch() {
        let mut w = UtilWindow { used_until_us: Some(0), ..Default::default() };
        // Read 150 ms after the poll at 1 s: the entry ending at 1.1 s belongs to the next poll.
        w.hold(&pts(0, 100 * MS, &[10.0; 10]));
        w.hold(&[UtilPoint { ts_us: 1_100 * MS, pct: 90.0 }]);
        let got = w.split(&[1_000 * MS], 1_000 * MS);
        assert_eq!(got[0].unwrap().mean_pct, 10.0);
        assert_eq!((w.held(), w.since()), (1, Some(1_100 * MS)));
        w.hold(&pts(1_100 * MS, 100 * MS, &[90.0; 9]));
        let got = w.split(&[2_000 * MS], 1_000 * MS);
        assert!((got[0].unwrap().mean_pct - 90.0).abs() < 1e-9);
        assert_eq!(got[0].unwrap().covered_us, 1_000 * MS);
    }

    #[test]
    fn an_entry_that_straddles_polls_is_shared_by_time() {
        // 100-ms polls, 200-ms entries: each entry is shared between the two polls it spans.
        let mut w = UtilWindow { used_until_us: Some(0), ..Default::default() };
        w.hold(&pts(0, 200 * MS, &[20.0, 40.0]));
        let ends: Vec<u64> = (1..=4).map(|i| i * 100 * MS + MS).collect();
        let got = w.split(&ends, 100 * MS);
        let means: Vec<f64> = got.iter().map(|m| m.unwrap().mean_pct).collect();
        assert_eq!(means[0], 20.0);
        assert!((means[1] - (20.0 * 99.0 + 40.0) / 100.0).abs() < 1e-9, "{means:?}");
        assert_eq!(means[2], 40.0);
        // The last poll ends with the newest entry: 99 ms covered, not 100.
        assert_eq!(means[3], 40.0);
        assert_eq!(got[3].unwrap().covered_us, 99 * MS);
        assert_eq!(got.iter().map(|m| m.unwrap().covered_us).sum::<u64>(), 400 * MS);
    }

    #[test]
    fn a_series_that_restarts_keeps_only_the_new_entries() {
        // Entries after a backwards jump are a new series: the old ones are not averaged in.
        let mut w = UtilWindow { used_until_us: Some(5_000 * MS), ..Default::default() };
        let mut entries = pts(5_000 * MS, 200 * MS, &[100.0, 100.0]);
        entries.extend(pts(1_000 * MS, 200 * MS, &[0.0, 0.0, 0.0, 20.0, 20.0]));
        w.hold(&entries);
        let m = w.split(&[2_000 * MS], 1_000 * MS)[0].unwrap();
        assert!((m.mean_pct - 8.0).abs() < 1e-9, "{m:?}");
        assert_eq!(w.since(), Some(2_000 * MS));
    }

    #[test]
    fn a_series_that_stops_or_went_back_is_read_whole_again() {
        // Nothing newer than the last entry used (the driver's clock was set back, so NVML has
        // nothing "newer than lastSeenTimeStamp"): polls within RESTART_AFTER_US just get no
        // mean; past it, the next read asks for the whole buffer.
        let mut w = UtilWindow { used_until_us: Some(10_000 * MS), ..Default::default() };
        assert_eq!(w.split(&[11_000 * MS, 12_000 * MS], 1_000 * MS), [None, None]);
        assert_eq!(w.since(), Some(10_000 * MS));
        assert_eq!(w.split(&[13_000 * MS, 14_000 * MS], 1_000 * MS), [None, None]);
        assert_eq!(w.since(), None, "4 s without an entry: the whole buffer next time");
        // The system clock went back too: the polls are older than the last entry used.
        let mut w = UtilWindow { used_until_us: Some(10_000 * MS), ..Default::default() };
        assert_eq!(w.split(&[2_000 * MS], 1_000 * MS), [None]);
        assert_eq!(w.since(), None);
        // The whole buffer re-bases it.
        w.hold(&pts(1_000 * MS, 200 * MS, &[50.0, 50.0, 50.0, 50.0, 50.0, 10.0]));
        let m = w.split(&[2_200 * MS], 1_000 * MS)[0].unwrap();
        assert!((m.mean_pct - 42.0).abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn old_entries_and_bad_values_are_not_counted() {
        // A driver that returns entries at or before lastSeenTimeStamp: they were used already.
        let mut w = UtilWindow { used_until_us: Some(1_000 * MS), ..Default::default() };
        w.hold(&[
            UtilPoint { ts_us: 800 * MS, pct: 100.0 },
            UtilPoint { ts_us: 1_000 * MS, pct: 100.0 },
            UtilPoint { ts_us: 1_200 * MS, pct: 250.0 },
            UtilPoint { ts_us: 1_400 * MS, pct: f64::NAN },
            UtilPoint { ts_us: 1_600 * MS, pct: -4.0 },
        ]);
        assert_eq!(w.held(), 3);
        let m = w.split(&[2_000 * MS], 1_000 * MS)[0].unwrap();
        assert!((m.mean_pct - 50.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.samples, 2);
        assert_eq!(w.since(), Some(1_600 * MS));
        assert!(w.split(&[], 1_000 * MS).is_empty());
    }
}
