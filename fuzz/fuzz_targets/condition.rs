//! The alert-rule condition parser on arbitrary text: never panics; errors point inside the
//! text; a parsed condition evaluates on a full, an empty and an offline observation.
#![no_main]

use fleetlens_core::rules::{Condition, Observation};
use fleetlens_core::{Sample, WorkloadState};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Condition::parse(text) {
        Err(e) => {
            assert!(e.column() <= text.chars().count() + 1, "error column beyond the text");
            let _ = e.pointer(text);
        }
        Ok(c) => {
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
            for s in [&full, &empty] {
                let _ = c.eval(&Observation::of_sample(s, WorkloadState::Stalled, 1.0, "n", Some("ml")));
            }
            let mut offline = Observation::of_sample(&empty, WorkloadState::Offline, 0.0, "n", None);
            offline.sample = None;
            let _ = c.eval(&offline);
        }
    }
});
