//! Utilization as the mean over the whole poll interval, from NVML's sample buffer. Pure, tested
//! without a GPU.
//!
//! `nvmlDeviceGetUtilizationRates` gives the busy share of the driver's *last* short sample
//! period (200 ms on an H100, driver 580), so a 1-Hz reader sees one fifth of each second: a
//! workload whose period is near the poll period aliases (a 1-s sawtooth at 20 % duty read 0 or
//! 86 % depending on phase, while it was busy 20 % of the time). The driver keeps those periods
//! in a buffer (`nvmlDeviceGetSamples`, `NVML_GPU_UTILIZATION_SAMPLES` /
//! `NVML_MEMORY_UTILIZATION_SAMPLES`; one sample per period, Unix µs timestamps, the value the
//! busy % of the period that ends there). Asking for the samples newer than the last one seen and
//! weighting each by the time it covers gives the mean over exactly the interval since the
//! previous poll — the interval GPM's counters average over.

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

/// Polls in a row with no new entry after which the window forgets where it was and asks for
/// the whole buffer again: the driver's clock went back (a stepped system clock, a reloaded
/// driver), so no entry is ever "newer than the last seen" again. At 1 s polls and a 200-ms
/// driver period a healthy buffer never comes back empty.
pub const RESTART_AFTER_EMPTY_POLLS: u32 = 3;

/// Where one GPU's reading of one buffer stands between polls.
#[derive(Debug, Clone, Default)]
pub struct UtilWindow {
    /// Timestamp of the newest entry used so far: the start of the next window.
    last_seen_us: Option<u64>,
    empty_polls: u32,
}

impl UtilWindow {
    pub fn new() -> Self {
        Self::default()
    }

    /// What to pass as NVML's `lastSeenTimeStamp` (`None`: the whole buffer).
    pub fn since(&self) -> Option<u64> {
        self.last_seen_us
    }

    /// Takes the entries NVML returned for [`Self::since`], in the order it returned them, and
    /// gives their time-weighted mean over the window; `None` when there is no new entry (the
    /// caller falls back to the instantaneous reading).
    ///
    /// - Each entry covers the time since the entry before it; the first one since the previous
    ///   poll's newest entry. Without a previous poll (the first, or after a restart) the window
    ///   is the last `interval_us` before the newest entry, and entries older than that only
    ///   mark where the first one inside began.
    /// - An entry's weight is capped at the usual spacing of the entries (their median gap):
    ///   after a long stall, when the buffer has dropped what came before, the oldest kept entry
    ///   does not stand for the whole stall.
    /// - A timestamp that goes back is a restart of the driver's series: what came before it is
    ///   dropped and the window starts again from the entries after it.
    /// - Values outside 0–100 are clamped; non-finite ones are skipped.
    pub fn take(&mut self, entries: &[UtilPoint], interval_us: u64) -> Option<IntervalMean> {
        let restart = entries.windows(2).rposition(|w| w[1].ts_us < w[0].ts_us).map(|i| i + 1);
        let (entries, mut since) = match restart {
            Some(k) => (&entries[k..], None),
            None => (entries, self.last_seen_us),
        };
        // A driver that ignores lastSeenTimeStamp: what was already counted is not counted again.
        let fresh = |p: &&UtilPoint| since.is_none_or(|s| p.ts_us > s);
        let Some(newest) = entries.iter().filter(fresh).map(|p| p.ts_us).max() else {
            self.empty_polls += 1;
            if self.empty_polls >= RESTART_AFTER_EMPTY_POLLS {
                self.last_seen_us = None;
                self.empty_polls = 0;
            }
            return None;
        };
        self.empty_polls = 0;
        let start = *since.get_or_insert_with(|| newest.saturating_sub(interval_us));
        let cap = typical_gap_us(entries).unwrap_or(interval_us).max(1);
        let (mut weighted, mut covered, mut used) = (0.0, 0u64, 0usize);
        let mut prev: Option<u64> = None;
        for p in entries {
            if p.ts_us > start && p.pct.is_finite() {
                let from = prev.map_or(start, |q| q.max(start));
                let w = p.ts_us.saturating_sub(from).min(cap);
                if w > 0 {
                    weighted += p.pct.clamp(0.0, 100.0) * w as f64;
                    covered += w;
                    used += 1;
                }
            }
            prev = Some(p.ts_us);
        }
        self.last_seen_us = Some(newest);
        (covered > 0).then(|| IntervalMean { mean_pct: weighted / covered as f64, samples: used, covered_us: covered })
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

    fn pts(start_us: u64, period_us: u64, values: &[f64]) -> Vec<UtilPoint> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| UtilPoint { ts_us: start_us + (i as u64 + 1) * period_us, pct: v })
            .collect()
    }

    #[test]
    fn a_sawtooth_reads_its_busy_share_not_the_last_period() {
        // Recorded on an H100 (driver 580, 2026-11-26): a 1-s sawtooth, 0.2 s of bf16 matmuls
        // then 0.8 s asleep, polled once a second. The buffer's five 200-ms entries per second
        // read [24, 77, 0, 0, 0] (the burst straddles two periods); utilization_rates, the
        // newest period alone, read 0 every time.
        let t0 = 1_795_688_698_520_000;
        let mut w = UtilWindow::new();
        let first = w.take(&pts(t0, 200 * MS, &[0.0, 0.0, 0.0, 0.0, 0.0]), 1_000 * MS).unwrap();
        assert_eq!(first.mean_pct, 0.0);
        let seconds = [[24.0, 77.0, 0.0, 0.0, 0.0], [20.0, 78.0, 0.0, 0.0, 0.0], [19.0, 78.0, 0.0, 0.0, 0.0]];
        for (i, sec) in seconds.iter().enumerate() {
            let since = w.since().unwrap();
            assert_eq!(since, t0 + (5 + 5 * i as u64) * 200 * MS);
            let m = w.take(&pts(since, 200 * MS, sec), 1_000 * MS).unwrap();
            let expected = sec.iter().sum::<f64>() / 5.0;
            assert!((m.mean_pct - expected).abs() < 1e-9, "{m:?} vs {expected}");
            assert_eq!((m.samples, m.covered_us), (5, 1_000 * MS));
        }
    }

    #[test]
    fn entries_are_weighted_by_the_time_they_cover() {
        // An entry 800 ms after the last one seen, then one 200 ms later: entries were lost in
        // between (the driver's period is 200 ms), so the first stands for one usual spacing,
        // not for the whole 800 ms.
        let mut w = UtilWindow { last_seen_us: Some(1_000 * MS), empty_polls: 0 };
        let entries = [UtilPoint { ts_us: 1_800 * MS, pct: 100.0 }, UtilPoint { ts_us: 2_000 * MS, pct: 0.0 }];
        let m = w.take(&entries, 1_000 * MS).unwrap();
        assert!((m.mean_pct - 50.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.covered_us, 400 * MS);
        // With the driver's regular spacing the weights are the periods themselves: 100 % for
        // 800 ms and 0 % for 200 ms is 80 %.
        let mut w = UtilWindow { last_seen_us: Some(1_000 * MS), empty_polls: 0 };
        let entries: Vec<UtilPoint> = (1..=5)
            .map(|i| UtilPoint { ts_us: 1_000 * MS + i * 200 * MS, pct: if i <= 4 { 100.0 } else { 0.0 } })
            .collect();
        let m = w.take(&entries, 1_000 * MS).unwrap();
        assert!((m.mean_pct - 80.0).abs() < 1e-9, "{m:?}");
        // Irregular spacing: 100 % over 300 ms, 0 % over 100 ms, 100 % over 300 ms: 6/7, not
        // the plain mean 2/3.
        let mut w = UtilWindow { last_seen_us: Some(0), empty_polls: 0 };
        let entries = [
            UtilPoint { ts_us: 300 * MS, pct: 100.0 },
            UtilPoint { ts_us: 400 * MS, pct: 0.0 },
            UtilPoint { ts_us: 700 * MS, pct: 100.0 },
        ];
        let m = w.take(&entries, 1_000 * MS).unwrap();
        assert!((m.mean_pct - 600.0 / 7.0).abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn the_first_poll_takes_only_the_last_interval_of_the_buffer() {
        // The whole buffer (14 s of history) comes back on the first poll: busy long ago, idle
        // in the last second.
        let mut values = vec![100.0; 65];
        values.extend([0.0; 5]);
        let entries = pts(0, 200 * MS, &values);
        let mut w = UtilWindow::new();
        let m = w.take(&entries, 1_000 * MS).unwrap();
        assert_eq!(m.mean_pct, 0.0);
        assert_eq!(m.samples, 5);
        assert_eq!(w.since(), Some(70 * 200 * MS));
    }

    #[test]
    fn an_empty_buffer_gives_nothing_and_a_clock_that_went_back_is_rebased() {
        let mut w = UtilWindow { last_seen_us: Some(10_000 * MS), empty_polls: 0 };
        for i in 1..RESTART_AFTER_EMPTY_POLLS {
            assert_eq!(w.take(&[], 1_000 * MS), None);
            assert_eq!(w.since(), Some(10_000 * MS), "poll {i}: still waiting for newer entries");
        }
        assert_eq!(w.take(&[], 1_000 * MS), None);
        assert_eq!(w.since(), None, "after {RESTART_AFTER_EMPTY_POLLS} empty polls the whole buffer is asked for");
        // The clock now reads earlier than the old last-seen time: the whole buffer re-bases it.
        let m = w.take(&pts(2_000 * MS, 200 * MS, &[50.0, 50.0, 50.0, 50.0, 50.0, 10.0]), 1_000 * MS).unwrap();
        assert!((m.mean_pct - 42.0).abs() < 1e-9, "{m:?}");
        assert_eq!(w.since(), Some(3_200 * MS));
    }

    #[test]
    fn a_series_that_restarts_mid_buffer_keeps_only_the_new_entries() {
        // Entries after a backwards jump are a new series: the old ones are not averaged in.
        let mut w = UtilWindow { last_seen_us: Some(5_000 * MS), empty_polls: 0 };
        let mut entries = pts(5_000 * MS, 200 * MS, &[100.0, 100.0]);
        entries.extend(pts(1_000 * MS, 200 * MS, &[0.0, 0.0, 0.0, 20.0, 20.0]));
        let m = w.take(&entries, 1_000 * MS).unwrap();
        assert!((m.mean_pct - 8.0).abs() < 1e-9, "{m:?}");
        assert_eq!(w.since(), Some(2_000 * MS));
    }

    #[test]
    fn old_entries_and_bad_values_are_not_counted() {
        // A driver that returns entries at or before lastSeenTimeStamp: they were counted last
        // poll (as the predecessor they still bound the first new entry's weight).
        let mut w = UtilWindow { last_seen_us: Some(1_000 * MS), empty_polls: 0 };
        let entries = [
            UtilPoint { ts_us: 800 * MS, pct: 100.0 },
            UtilPoint { ts_us: 1_000 * MS, pct: 100.0 },
            UtilPoint { ts_us: 1_200 * MS, pct: 250.0 },
            UtilPoint { ts_us: 1_400 * MS, pct: f64::NAN },
            UtilPoint { ts_us: 1_600 * MS, pct: -4.0 },
        ];
        let m = w.take(&entries, 1_000 * MS).unwrap();
        assert!((m.mean_pct - 50.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.samples, 2);
        assert_eq!(w.since(), Some(1_600 * MS));
        // Nothing newer: no reading, and the window stays where it was.
        assert_eq!(w.take(&entries, 1_000 * MS), None);
        assert_eq!(w.since(), Some(1_600 * MS));
    }
}
