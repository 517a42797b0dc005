//! What both fuzzers of the alert-rule condition (the libFuzzer target `condition` and the
//! stable harness `crates/server/examples/fuzz.rs`, which includes this file by path) evaluate a
//! parsed condition on: a GPU with a full sample, one with an empty sample, and an offline one
//! (no sample at all).

use fleetlens_core::rules::{Condition, Observation, Truth};
use fleetlens_core::{Sample, WorkloadState};

/// `condition` on the full, the empty and the offline observation, in that order.
pub fn eval_on_probes(condition: &Condition) -> [Truth; 3] {
    let full = Sample {
        ts_ms: 1_700_000_000_000,
        uuid: "GPU-fuzz".into(),
        gpu_util_pct: Some(90.0),
        sm_active_pct: Some(0.0),
        power_w: Some(0.0),
        power_limit_w: Some(0.0),
        mem_used_bytes: Some(0),
        mem_total_bytes: Some(0),
        ..Default::default()
    };
    let empty = Sample { ts_ms: 1_700_000_000_000, uuid: "GPU-fuzz".into(), ..Default::default() };
    let on =
        |s: &Sample| condition.eval(&Observation::of_sample(s, WorkloadState::Stalled, 12.5, "node-1", Some("ml")));
    let mut offline = Observation::of_sample(&empty, WorkloadState::Offline, 0.0, "node-1", None);
    offline.sample = None;
    [on(&full), on(&empty), condition.eval(&offline)]
}
