//! Are the GPM counters counting? Pure, tested without a GPU.
//!
//! GPM shares the GPU's performance-monitor hardware with the other profilers (Nsight Compute,
//! DCGM's profiling module). While another one holds it, GPM may fail (an NVML error from
//! `nvmlGpmSampleGet` / `nvmlGpmMetricsGet`), or answer with values that cannot be true: every
//! counter at exactly 0 while kernels ran (the idle GPU itself reads a few 10⁻⁴ % of DRAM
//! activity, never an exact 0 everywhere), or the same values as the previous interval to the
//! last bit while kernels ran (counters that stopped moving). A poll judged so has its GPM
//! fields absent — never 0 — and the GPU is a GPU without GPM (the server classifies it with
//! "no SM activity on this GPU") until the counters count again.
//!
//! Observed on an H100 (driver 580.159.04, Nsight Compute 2025.3.1, 2026-11-26): `ncu --metrics
//! sm__cycles_active.avg` profiling a loop of 2048² SGEMMs did NOT disturb GPM — no error, no
//! zero, no repeated value; GPM read what ran (GRACT 3.8–4.7 %, SMACT 3.0–3.6 %, FP32 2.3–2.8 %,
//! next to NVML utilization 4–5 %: ncu serialises and replays kernels, so the GPU is mostly
//! idle). Those readings are in the tests below as ones that must stay reported.

/// Kernel utilization (%) at or above which "every GPM counter at 0" or "the same values as last
/// time" cannot be true. The poll judges with the utilization it read itself, the driver's
/// newest 200-ms period (the interval mean is only known when the batch is sealed): that period
/// lies inside the GPM interval, so a busy reading means kernels ran in it (a sawtooth read
/// between bursts is judged as idle: a missed detection for that poll, never a false one).
pub const BUSY_UTIL_PCT: f64 = 5.0;
/// Consecutive polls with counting counters after which GPM is reported again. The first one
/// after an outage is not reported: its interval began while the counters were held.
pub const RETURN_AFTER_POLLS: u32 = 2;

/// Reason said to the user (event message, log) while the counters are unavailable.
pub const IN_USE: &str = "profiling counters in use";

/// One poll's GPM reading, as far as it got.
#[derive(Debug, Clone, PartialEq)]
pub enum GpmPoll {
    /// The GPM sample or the metrics call failed (not because the GPU is gone): NVML's words.
    Failed(String),
    /// The percent metrics that came back, in a fixed order (`None`: that metric failed alone).
    Read(Vec<Option<f64>>),
}

/// What a poll's GPM reading is worth.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Counting,
    /// Not to be reported; why, in words.
    Unavailable(String),
}

/// Judges one poll. `util_pct`: the poll's kernel utilization reading; `prev`: the previous
/// poll's percent metrics, where it had them.
pub fn judge(poll: &GpmPoll, util_pct: Option<f64>, prev: Option<&[Option<f64>]>) -> Verdict {
    let values = match poll {
        GpmPoll::Failed(e) => return Verdict::Unavailable(format!("{IN_USE}? GPM could not be read: {e}")),
        GpmPoll::Read(v) => v,
    };
    let read: Vec<f64> = values.iter().flatten().copied().collect();
    if read.is_empty() {
        return Verdict::Unavailable(format!("{IN_USE}? every GPM metric failed"));
    }
    let busy = util_pct.is_some_and(|u| u >= BUSY_UTIL_PCT);
    if !busy {
        return Verdict::Counting;
    }
    let util = util_pct.unwrap_or_default();
    if read.len() >= 3 && read.iter().all(|v| *v == 0.0) {
        return Verdict::Unavailable(format!(
            "{IN_USE}: every GPM counter read 0 while kernels ran {util:.0} % of the interval"
        ));
    }
    if prev.is_some_and(|p| {
        p.len() == values.len() && p.iter().zip(values).all(|(a, b)| a.map(f64::to_bits) == b.map(f64::to_bits))
    }) {
        return Verdict::Unavailable(format!(
            "{IN_USE}: GPM counters repeated the previous interval's values while kernels ran {util:.0} % of it"
        ));
    }
    Verdict::Counting
}

/// A change worth an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The counters became unavailable: the reason.
    Unavailable(String),
    /// They count again after this many milliseconds.
    Returned { after_ms: i64 },
}

/// One GPU's counters over time: whether this poll's values may be reported, and when to say
/// that the counters went or came back.
#[derive(Debug, Clone, Default)]
pub struct CounterWatch {
    /// Since when (Unix ms) and why the counters are unavailable.
    unavailable: Option<(i64, String)>,
    good_polls: u32,
    prev: Option<Vec<Option<f64>>>,
}

impl CounterWatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// True while the counters are held to be unavailable.
    pub fn is_unavailable(&self) -> bool {
        self.unavailable.is_some()
    }

    /// The reason, while unavailable.
    pub fn reason(&self) -> Option<&str> {
        self.unavailable.as_ref().map(|(_, r)| r.as_str())
    }

    /// Judges the poll at `ts_ms` and steps the watch. Returns whether its GPM values may be
    /// reported, and the change to announce, if any.
    pub fn observe(&mut self, poll: &GpmPoll, util_pct: Option<f64>, ts_ms: i64) -> (bool, Option<Change>) {
        let verdict = judge(poll, util_pct, self.prev.as_deref());
        self.prev = match poll {
            GpmPoll::Read(v) => Some(v.clone()),
            GpmPoll::Failed(_) => None,
        };
        match (verdict, &self.unavailable) {
            (Verdict::Unavailable(reason), None) => {
                self.unavailable = Some((ts_ms, reason.clone()));
                self.good_polls = 0;
                (false, Some(Change::Unavailable(reason)))
            }
            (Verdict::Unavailable(_), Some(_)) => {
                self.good_polls = 0;
                (false, None)
            }
            (Verdict::Counting, None) => (true, None),
            (Verdict::Counting, Some((since, _))) => {
                self.good_polls += 1;
                if self.good_polls < RETURN_AFTER_POLLS {
                    return (false, None);
                }
                let after_ms = ts_ms - since;
                self.unavailable = None;
                self.good_polls = 0;
                (true, Some(Change::Returned { after_ms }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percent metrics in the agent's order (SMACT, SMOCC, tensor, DRAM, FP16, FP32, FP64, INT,
    /// GRACT) as read on the H100 of 2026-11-26.
    fn read(v: &[f64]) -> GpmPoll {
        GpmPoll::Read(v.iter().map(|x| Some(*x)).collect())
    }

    /// Idle: everything 0 except the few 10⁻⁴ % of DRAM activity the idle GPU always shows.
    const IDLE: [f64; 9] = [0.0, 0.0, 0.0, 0.000_556, 0.0, 0.0, 0.0, 0.0, 0.0];
    /// Two consecutive seconds while `ncu --metrics sm__cycles_active.avg` profiled SGEMMs
    /// (NVML utilization 4 and 5 %).
    const UNDER_NCU: [[f64; 9]; 2] = [
        [3.3721, 0.4210, 0.0, 0.085_355, 0.0, 2.6554, 0.0, 0.0, 4.3402],
        [3.3312, 0.4158, 0.0, 0.084_931, 0.0, 2.6232, 0.0, 0.0, 4.2900],
    ];

    #[test]
    fn what_ncu_left_readable_is_reported() {
        let mut w = CounterWatch::new();
        assert_eq!(w.observe(&read(&IDLE), Some(0.0), 1_000), (true, None));
        for (i, v) in UNDER_NCU.iter().enumerate() {
            assert_eq!(w.observe(&read(v), Some(5.0), 2_000 + i as i64 * 1000), (true, None), "{v:?}");
        }
        // An idle GPU reads zeros (and the same zeros) without anything being wrong.
        assert_eq!(judge(&read(&[0.0; 9]), Some(0.0), Some(&[Some(0.0); 9])), Verdict::Counting);
        assert_eq!(judge(&read(&[0.0; 9]), None, None), Verdict::Counting);
    }

    #[test]
    fn errors_zeros_and_frozen_values_are_unavailable() {
        let failed = GpmPoll::Failed("In use by another client".into());
        assert!(
            matches!(judge(&failed, Some(0.0), None), Verdict::Unavailable(r) if r.contains("In use by another client"))
        );
        assert!(matches!(judge(&GpmPoll::Read(vec![None; 9]), Some(50.0), None), Verdict::Unavailable(_)));
        // Kernels ran 40 % of the interval but every counter says 0.
        assert!(matches!(judge(&read(&[0.0; 9]), Some(40.0), None), Verdict::Unavailable(r) if r.contains("read 0")));
        // The same values as last time, to the bit, while kernels ran.
        let prev: Vec<Option<f64>> = UNDER_NCU[0].iter().map(|x| Some(*x)).collect();
        assert!(
            matches!(judge(&read(&UNDER_NCU[0]), Some(30.0), Some(&prev)), Verdict::Unavailable(r) if r.contains("repeated"))
        );
        // Values that moved are counting.
        assert_eq!(judge(&read(&UNDER_NCU[1]), Some(30.0), Some(&prev)), Verdict::Counting);
        // Below the busy threshold nothing can be concluded from zeros.
        assert_eq!(judge(&read(&[0.0; 9]), Some(BUSY_UTIL_PCT - 0.1), None), Verdict::Counting);
    }

    #[test]
    fn the_watch_announces_once_and_reports_again_after_the_counters_return() {
        let mut w = CounterWatch::new();
        assert_eq!(w.observe(&read(&UNDER_NCU[0]), Some(60.0), 1_000), (true, None));
        // The counters are taken: absent from the first poll on, one event.
        let (report, change) = w.observe(&read(&[0.0; 9]), Some(60.0), 2_000);
        assert!(!report);
        assert!(matches!(change, Some(Change::Unavailable(r)) if r.starts_with(IN_USE)));
        assert!(w.is_unavailable());
        let (report, change) = w.observe(&GpmPoll::Failed("Unknown Error".into()), Some(60.0), 3_000);
        assert_eq!((report, change), (false, None), "still unavailable: no second event");
        // Back: the first good poll is held back (its interval began while they were taken) …
        assert_eq!(w.observe(&read(&UNDER_NCU[1]), Some(60.0), 4_000), (false, None));
        // … a bad one in between starts the count again …
        assert_eq!(w.observe(&read(&[0.0; 9]), Some(60.0), 5_000), (false, None));
        assert_eq!(w.observe(&read(&UNDER_NCU[0]), Some(60.0), 6_000), (false, None));
        // … and the second good one in a row is reported, with the event.
        assert_eq!(
            w.observe(&read(&UNDER_NCU[1]), Some(60.0), 7_000),
            (true, Some(Change::Returned { after_ms: 5_000 }))
        );
        assert!(!w.is_unavailable());
        assert_eq!(w.reason(), None);
    }
}
