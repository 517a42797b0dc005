//! Merge-on-insert of partial samples: a sample that arrives for a (GPU, timestamp) already
//! stored fills the fields the stored one lacks. Prometheus cuts its remote-write requests by
//! sample count, so the series of one GPU's scrape can arrive in two requests, each assembled
//! into a partial sample of the same (GPU, timestamp).
//!
//! Absent stays absent, and a field present in both keeps the stored value: an agent's resend
//! (the same sample again) adds nothing and stays a duplicate, and nothing stored is ever
//! overwritten.

use crate::Sample;

/// `stored` with the fields it lacks taken from `incoming`; `None` when `incoming` has no
/// field that `stored` lacks (an exact resend, or a sample with less in it).
///
/// The identity (`uuid`, `ts_ms`, `gpu_index`, `name`) is not per-sample data (the GPU
/// registry keeps it) and is left as stored. An empty allocation list is "none sent".
pub fn fill_absent(stored: &Sample, incoming: &Sample) -> Option<Sample> {
    let mut out = stored.clone();
    let mut filled = false;
    // Every measurement through the signal table (a `Sample` field that is no signal fails the
    // table's test); the rest by hand.
    for signal in crate::signal::SIGNALS {
        let v = (signal.get)(incoming);
        if (signal.get)(&out).is_none() && v.is_some() {
            (signal.set)(&mut out, v);
            filled = true;
        }
    }
    if out.processes.is_none() && incoming.processes.is_some() {
        out.processes = incoming.processes.clone();
        filled = true;
    }
    if out.allocations.is_empty() && !incoming.allocations.is_empty() {
        out.allocations = incoming.allocations.clone();
        filled = true;
    }
    filled.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GpuProcess;

    #[test]
    fn fills_only_what_is_absent() {
        let stored = Sample { ts_ms: 5, uuid: "GPU-1".into(), gpu_util_pct: Some(90.0), ..Default::default() };
        let incoming = Sample {
            ts_ms: 5,
            uuid: "GPU-1".into(),
            gpu_util_pct: Some(10.0),
            sm_active_pct: Some(40.0),
            processes: Some(vec![GpuProcess { pid: 7, ..Default::default() }]),
            ..Default::default()
        };
        let merged = fill_absent(&stored, &incoming).expect("fills SM activity and processes");
        assert_eq!(merged.gpu_util_pct, Some(90.0), "a field present in both keeps the stored value");
        assert_eq!(merged.sm_active_pct, Some(40.0));
        assert_eq!(merged.processes.as_ref().map(Vec::len), Some(1));
        assert_eq!(merged.power_w, None, "absent in both stays absent");
        // The merged sample again, or the stored one: nothing to add.
        assert_eq!(fill_absent(&merged, &incoming), None);
        assert_eq!(fill_absent(&stored, &stored), None);
        assert_eq!(fill_absent(&merged, &stored), None, "less in it: nothing to add");
    }
}
