//! Boundary tests of every classifier rule, and of the offline decision.

use crate::classify::{NOTE_NO_SM_ACTIVITY, classify, classify_window};
use crate::sample::{GpuProcess, Sample};
use crate::state::WorkloadState::{self, *};
use crate::thresholds::{GIB, Thresholds};
use crate::window::WindowAggregate;

/// A one-sample window. `procs`: Some(n) = list read with n processes; None = unreadable.
#[derive(Clone)]
struct W {
    util: Option<f64>,
    sm: Option<f64>,
    occ: Option<f64>,
    tensor: Option<f64>,
    dram: Option<f64>,
    fp32: Option<f64>,
    power: Option<f64>,
    mem: Option<i64>,
    procs: Option<usize>,
}

/// A busy GPU with every counter: no rule but `active` fires on it as is.
fn w() -> W {
    W {
        util: Some(100.0),
        sm: Some(100.0),
        occ: Some(50.0),
        tensor: Some(0.0),
        dram: Some(40.0),
        fp32: Some(0.0),
        power: Some(400.0),
        mem: Some(2 * GIB),
        procs: Some(1),
    }
}

impl W {
    fn sample(&self, ts: i64) -> Sample {
        Sample {
            ts_ms: ts,
            uuid: "GPU-1".into(),
            gpu_util_pct: self.util,
            sm_active_pct: self.sm,
            sm_occupancy_pct: self.occ,
            tensor_active_pct: self.tensor,
            dram_active_pct: self.dram,
            fp32_active_pct: self.fp32,
            power_w: self.power,
            power_limit_w: Some(1000.0),
            mem_used_bytes: self.mem,
            processes: self
                .procs
                .map(|n| (0..n).map(|i| GpuProcess { pid: i as u32 + 1, ..Default::default() }).collect()),
            ..Default::default()
        }
    }

    fn state(&self) -> WorkloadState {
        self.classify().state
    }

    fn classify(&self) -> crate::Classification {
        classify(&WindowAggregate::from_samples([&self.sample(0)]), &Thresholds::default())
    }
}

#[test]
fn baseline_is_active() {
    assert_eq!(w().state(), Active);
}

#[test]
fn idle() {
    let idle = W { util: Some(4.99), sm: Some(0.0), procs: Some(0), mem: Some(0), ..w() };
    assert_eq!(idle.state(), Idle);
    assert_ne!(W { util: Some(5.0), ..idle.clone() }.state(), Idle);
    // ≥ 1 GiB used with no visible process: someone holds it.
    assert_eq!(W { mem: Some(GIB), ..idle.clone() }.state(), IdleHeld);
    assert_eq!(W { mem: Some(GIB - 1), ..idle.clone() }.state(), Idle);
    // Process list unreadable: memory decides.
    assert_eq!(W { procs: None, ..idle.clone() }.state(), Idle);
    assert_eq!(W { procs: None, mem: Some(2 * GIB), ..idle.clone() }.state(), IdleHeld);
    // Nothing says whether anyone holds it: not idle.
    assert_ne!(W { procs: None, mem: None, ..idle.clone() }.state(), Idle);
}

#[test]
fn idle_held() {
    let held = W { util: Some(4.9), sm: Some(0.09), procs: Some(1), mem: Some(GIB / 2), ..w() };
    assert_eq!(held.state(), IdleHeld);
    // SMACT 0.1 is some work: starved, not idle_held (METRICS.md's separation).
    assert_eq!(W { sm: Some(0.1), ..held.clone() }.state(), Starved);
    assert_ne!(W { util: Some(5.0), ..held.clone() }.state(), IdleHeld);
}

#[test]
fn no_sm_activity_signal() {
    let old = W { sm: None, occ: None, tensor: None, dram: None, ..w() };
    // idle and idle_held still work (idle_held needs util = 0 exactly).
    assert_eq!(W { util: Some(0.0), procs: Some(0), mem: Some(0), ..old.clone() }.state(), Idle);
    assert_eq!(W { util: Some(0.0), ..old.clone() }.state(), IdleHeld);
    // util 3: no SM evidence either way → active, with the note; never a guess.
    let c = W { util: Some(3.0), ..old.clone() }.classify();
    assert_eq!((c.state, c.note.as_deref()), (Active, Some(NOTE_NO_SM_ACTIVITY)));
    // util 100 on a pre-Hopper GPU: could be stalled or hollow or fine; we cannot tell.
    let c = old.classify();
    assert_eq!(c.state, Active);
    assert_eq!(c.note.as_deref(), Some(NOTE_NO_SM_ACTIVITY));
    assert_eq!(c.efficiency_pct, None);
}

#[test]
fn no_kernel_util_signal_mig() {
    let mig = W { util: None, ..w() };
    assert_eq!(W { sm: Some(0.0), procs: Some(0), mem: Some(0), ..mig.clone() }.state(), Idle);
    assert_eq!(W { sm: Some(0.05), ..mig.clone() }.state(), IdleHeld);
    let c = W { tensor: Some(90.0), ..mig.clone() }.classify();
    assert_eq!(c.state, ComputeBound);
    assert!(c.note.unwrap().contains("kernel utilization not measured"));
}

#[test]
fn stalled() {
    let st = W { util: Some(90.0), sm: Some(4.99), power: Some(299.0), ..w() };
    assert_eq!(st.state(), Stalled);
    // Each condition at its boundary falls through to hollow.
    assert_eq!(W { util: Some(89.9), ..st.clone() }.state(), Hollow);
    assert_eq!(W { sm: Some(5.0), ..st.clone() }.state(), Hollow);
    assert_eq!(W { power: Some(300.0), ..st.clone() }.state(), Hollow);
    // No power reading: stalled cannot be shown; hollow still holds.
    assert_eq!(W { power: None, ..st.clone() }.state(), Hollow);
}

#[test]
fn hollow() {
    let h = W { util: Some(50.0), sm: Some(14.9), ..w() };
    assert_eq!(h.state(), Hollow);
    // ratio exactly 0.3 is not hollow; max(50, 15) = 50 is not starved either.
    assert_eq!(W { sm: Some(15.0), ..h.clone() }.state(), Active);
    // util below 50: starved (a process, some work, everything < 50).
    assert_eq!(W { util: Some(49.9), sm: Some(10.0), ..h.clone() }.state(), Starved);
    // The seed alert case, util 80 with SMACT < 30 (ratio 0.36), is not hollow by ratio.
    assert_eq!(W { util: Some(80.0), sm: Some(29.0), ..h.clone() }.state(), Active);
    let c = h.classify();
    assert!(c.reason.contains("SMACT / util 0.30") || c.reason.contains("SMACT / util 0.29"));
    assert!((c.efficiency_pct.unwrap() - 29.8).abs() < 1e-9);
}

#[test]
fn starved() {
    let s = W { util: Some(0.0), sm: Some(0.1), procs: Some(1), mem: Some(GIB / 2), ..w() };
    assert_eq!(s.state(), Starved);
    assert_eq!(W { util: Some(5.0), sm: Some(0.0), ..s.clone() }.state(), Starved);
    assert_eq!(W { util: Some(49.9), sm: Some(49.9), ..s.clone() }.state(), Starved);
    assert_ne!(W { util: Some(49.9), sm: Some(50.0), ..s.clone() }.state(), Starved);
    // Nobody on the GPU: not starved.
    assert_eq!(W { procs: Some(0), util: Some(10.0), sm: Some(3.0), ..s.clone() }.state(), Active);
}

#[test]
fn low_occupancy() {
    let lo = W { sm: Some(50.0), occ: Some(9.9), tensor: Some(9.9), dram: Some(29.9), ..w() };
    assert_eq!(lo.state(), LowOccupancy);
    assert_eq!(W { sm: Some(49.9), ..lo.clone() }.state(), Active);
    assert_eq!(W { occ: Some(10.0), ..lo.clone() }.state(), Active);
    assert_eq!(W { dram: Some(30.0), ..lo.clone() }.state(), Active);
    // tensor 10 fails low_occupancy and is below compute_bound's 30.
    assert_eq!(W { tensor: Some(10.0), ..lo.clone() }.state(), Active);
    // Without an occupancy counter the rule is not checked, and the note says so.
    let c = W { occ: None, ..lo.clone() }.classify();
    assert_eq!(c.state, Active);
    assert!(c.note.unwrap().contains("SM occupancy"));
}

#[test]
fn memory_bound() {
    let mb = W { sm: Some(50.0), dram: Some(60.0), tensor: Some(19.9), ..w() };
    assert_eq!(mb.state(), MemoryBound);
    assert_eq!(W { dram: Some(59.9), ..mb.clone() }.state(), Active);
    assert_eq!(W { tensor: Some(20.0), ..mb.clone() }.state(), Active);
    assert_eq!(W { tensor: None, ..mb.clone() }.state(), Active);
    // Priority: memory_bound before compute_bound when an FP pipe is busy too.
    assert_eq!(W { fp32: Some(70.0), ..mb.clone() }.state(), MemoryBound);
}

#[test]
fn compute_bound() {
    let cb = W { sm: Some(50.0), tensor: Some(30.0), ..w() };
    assert_eq!(cb.state(), ComputeBound);
    assert_eq!(W { tensor: Some(29.9), ..cb.clone() }.state(), Active);
    assert_eq!(W { sm: Some(49.9), ..cb.clone() }.state(), Active);
    let fp = W { tensor: Some(0.0), fp32: Some(50.0), ..cb.clone() };
    assert_eq!(fp.state(), ComputeBound);
    assert_eq!(W { fp32: Some(49.9), ..fp.clone() }.state(), Active);
}

#[test]
fn key_values_are_carried() {
    let c = W { util: Some(100.0), sm: Some(0.8), power: Some(180.0), ..w() }.classify();
    assert_eq!(c.state, Stalled);
    assert_eq!(c.values.gpu_util_pct, Some(100.0));
    assert_eq!(c.values.sm_active_pct, Some(0.8));
    assert!((c.values.power_pct_of_limit.unwrap() - 18.0).abs() < 1e-9);
    assert_eq!(c.values.process_present, Some(true));
    assert_eq!(c.values.sample_count, 1);
    assert!(c.reason.starts_with("kernel util 100.0 % ≥ 90"));
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["state"], "stalled");
}

#[test]
fn custom_thresholds_apply() {
    let th = Thresholds { hollow_min_util_pct: 80.0, ..Default::default() };
    let agg = WindowAggregate::from_samples([&W { util: Some(60.0), sm: Some(9.0), ..w() }.sample(0)]);
    assert_eq!(classify(&agg, &Thresholds::default()).state, Hollow);
    assert_eq!(classify(&agg, &th).state, Active);
}

#[test]
fn offline_needs_three_silent_intervals() {
    let th = Thresholds::default();
    let busy = W { tensor: Some(90.0), ..w() };
    // 60 s window, nothing in or around it.
    let c = classify_window(&[], 0, 60_000, 1000, &th);
    assert_eq!((c.state, c.note), (Offline, None));
    // 2 s window [10 s, 12 s); neighbours at 9 s and 12 s → 3 s of silence → offline.
    let v = vec![busy.sample(9_000), busy.sample(12_000)];
    assert_eq!(classify_window(&v, 10_000, 12_000, 1000, &th).state, Offline);
    // Neighbours at 9.5 s and 12 s → 2.5 s: a missed sample; the neighbour's state is kept.
    let v = vec![busy.sample(9_500), busy.sample(12_000)];
    let c = classify_window(&v, 10_000, 12_000, 1000, &th);
    assert_eq!(c.state, ComputeBound);
    assert!(c.note.unwrap().contains("missed sample"));
    // A short empty window with no neighbours at all: nothing known → offline, noted.
    let c = classify_window(&[], 0, 2_000, 1000, &th);
    assert_eq!(c.state, Offline);
    assert!(c.note.is_some());
    // A window with samples is classified from them (neighbours ignored).
    let v =
        vec![W { util: Some(0.0), sm: Some(0.0), procs: Some(0), mem: Some(0), ..w() }.sample(500), busy.sample(5_000)];
    assert_eq!(classify_window(&v, 0, 2_000, 1000, &th).state, Idle);
    // Longer interval (10 s agent): a 20 s silence is not offline yet, 30 s is.
    let v = vec![busy.sample(0), busy.sample(20_000)];
    assert_eq!(classify_window(&v, 5_000, 15_000, 10_000, &th).state, ComputeBound);
    let v = vec![busy.sample(0), busy.sample(30_000)];
    assert_eq!(classify_window(&v, 5_000, 15_000, 10_000, &th).state, Offline);
}

#[test]
fn empty_aggregate_is_not_guessed() {
    let c = classify(&WindowAggregate::default(), &Thresholds::default());
    assert_eq!(c.state, Active);
    assert!(c.note.is_some());
}
