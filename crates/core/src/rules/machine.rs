//! The life of one alert (one rule on one GPU): inactive → pending → firing → resolved, on the
//! time of the observations (event time), as Prometheus does it:
//!
//! - the condition becomes true at `t`: **pending**, `active_since = t` (with `for_s = 0` it
//!   fires at once);
//! - still true at `t'` with `t' − active_since ≥ for_s`: **firing**, `fired_at = t'`;
//! - false while pending: back to inactive, nothing was ever sent;
//! - false while firing: **resolved** at that time, unless the condition was last true less
//!   than `keep_firing_for_s` ago (then it keeps firing, to ride out a flapping signal).
//!
//! Observations are applied in time order; one older than the last one applied is ignored
//! (late data never rewrites an alert's history).

use serde::{Deserialize, Serialize};

/// Where an alert stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Inactive,
    Pending {
        active_since_ms: i64,
    },
    Firing {
        active_since_ms: i64,
        fired_at_ms: i64,
        /// The last time the condition was true (for `keep_firing_for_s`).
        last_match_ms: i64,
    },
}

/// The durations of a rule, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    pub for_ms: i64,
    pub keep_firing_for_ms: i64,
}

impl Timing {
    pub fn from_secs(for_s: i64, keep_firing_for_s: i64) -> Self {
        Timing {
            for_ms: for_s.max(0).saturating_mul(1000),
            keep_firing_for_ms: keep_firing_for_s.max(0).saturating_mul(1000),
        }
    }
}

/// What one step did. `Fired` and `Resolved` are the transitions that notify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing changed that needs saving.
    Unchanged,
    /// Inactive → pending.
    Started,
    /// Pending → inactive: the condition did not hold for `for_s`.
    Cancelled,
    /// → firing (from pending, or straight from inactive when `for_s` is 0).
    Fired,
    /// Firing → inactive (resolved at the step's time).
    Resolved,
    /// Still firing; the condition held again (only `last_match_ms` moved).
    StillFiring,
}

/// Apply one observation at `t_ms` whose condition was `matched`.
pub fn step(phase: Phase, timing: Timing, t_ms: i64, matched: bool) -> (Phase, Step) {
    match (phase, matched) {
        (Phase::Inactive, false) => (phase, Step::Unchanged),
        (Phase::Inactive, true) if timing.for_ms == 0 => {
            (Phase::Firing { active_since_ms: t_ms, fired_at_ms: t_ms, last_match_ms: t_ms }, Step::Fired)
        }
        (Phase::Inactive, true) => (Phase::Pending { active_since_ms: t_ms }, Step::Started),
        (Phase::Pending { active_since_ms }, true) => {
            if t_ms - active_since_ms >= timing.for_ms {
                (Phase::Firing { active_since_ms, fired_at_ms: t_ms, last_match_ms: t_ms }, Step::Fired)
            } else {
                (phase, Step::Unchanged)
            }
        }
        (Phase::Pending { .. }, false) => (Phase::Inactive, Step::Cancelled),
        (Phase::Firing { active_since_ms, fired_at_ms, last_match_ms }, true) => {
            let last = last_match_ms.max(t_ms);
            (Phase::Firing { active_since_ms, fired_at_ms, last_match_ms: last }, Step::StillFiring)
        }
        (Phase::Firing { last_match_ms, .. }, false) => {
            if timing.keep_firing_for_ms > 0 && t_ms - last_match_ms < timing.keep_firing_for_ms {
                (phase, Step::Unchanged)
            } else {
                (Phase::Inactive, Step::Resolved)
            }
        }
    }
}

/// Is a reminder due for an alert firing since `last_notified_ms`? `repeat_interval_ms` ≤ 0
/// means never.
pub fn repeat_due(last_notified_ms: i64, repeat_interval_ms: i64, now_ms: i64) -> bool {
    repeat_interval_ms > 0 && now_ms - last_notified_ms >= repeat_interval_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a sequence of (t, matched) and return the steps that notify or change the phase.
    fn run(timing: Timing, obs: &[(i64, bool)]) -> Vec<(i64, Step)> {
        let mut phase = Phase::Inactive;
        let mut out = Vec::new();
        for &(t, m) in obs {
            let (p, s) = step(phase, timing, t, m);
            phase = p;
            if !matches!(s, Step::Unchanged | Step::StillFiring) {
                out.push((t, s));
            }
        }
        out
    }

    #[test]
    fn pending_then_firing_then_resolved() {
        let t = Timing::from_secs(3, 0);
        let obs: Vec<(i64, bool)> = (0..10).map(|i| (i * 1000, (2..=7).contains(&i))).collect();
        assert_eq!(
            run(t, &obs),
            vec![(2000, Step::Started), (5000, Step::Fired), (8000, Step::Resolved)],
            "fires once for_s has elapsed since the condition first held"
        );
    }

    #[test]
    fn too_short_never_fires() {
        let t = Timing::from_secs(3, 0);
        let obs = [(0, true), (1000, true), (2000, true), (3000, false), (4000, true)];
        assert_eq!(run(t, &obs), vec![(0, Step::Started), (3000, Step::Cancelled), (4000, Step::Started)]);
    }

    #[test]
    fn zero_for_fires_at_once() {
        let t = Timing::from_secs(0, 0);
        assert_eq!(run(t, &[(7, true), (8, false)]), vec![(7, Step::Fired), (8, Step::Resolved)]);
    }

    #[test]
    fn keep_firing_for_rides_out_flaps() {
        let t = Timing::from_secs(0, 10);
        let obs = [(0, true), (5_000, false), (9_000, true), (15_000, false), (19_999, false), (20_000, false)];
        assert_eq!(run(t, &obs), vec![(0, Step::Fired), (19_999, Step::Resolved)]);
        let (phase, _) = step(Phase::Inactive, t, 0, true);
        let (phase, s) = step(phase, t, 9_000, true);
        assert_eq!(s, Step::StillFiring);
        assert_eq!(phase, Phase::Firing { active_since_ms: 0, fired_at_ms: 0, last_match_ms: 9_000 });
    }

    #[test]
    fn repeats() {
        assert!(!repeat_due(0, 0, i64::MAX));
        assert!(!repeat_due(1000, 3_600_000, 3_600_999));
        assert!(repeat_due(1000, 3_600_000, 3_601_000));
    }
}
