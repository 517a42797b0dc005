//! The agent's own output on a real NVIDIA H100 (`--source nvml --interval 1s`, driver
//! 580.159.04), recorded next to `tests/device/workload.py` and to nvidia-smi
//! (`tests/fixtures/README.md` says how). These tests check that what the agent read is what the
//! hardware did: per phase against tests/fixtures/README.md, and sample by sample against
//! nvidia-smi's independent reading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fleetlens_agent::source::replay::parse_trace;
use fleetlens_core::{Sample, Thresholds, WorkloadState, classify_window, validate_sample};

/// The first samples of a phase straddle the change (tests/fixtures/README.md).
const SKIP: usize = 2;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// (phase, sample) in time order.
fn trace() -> Vec<(String, Sample)> {
    let text = std::fs::read_to_string(fixture("real-h100-agent.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["phase"].as_str().unwrap().to_string(), serde_json::from_str(l).unwrap())
        })
        .collect()
}

/// Samples of each phase, the straddling first ones left out.
fn settled(trace: &[(String, Sample)]) -> BTreeMap<String, Vec<Sample>> {
    let mut all: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for (p, s) in trace {
        all.entry(p.clone()).or_default().push(s.clone());
    }
    all.into_iter().map(|(p, v)| (p, v.into_iter().skip(SKIP).collect())).collect()
}

/// `2026/11/22 03:31:11.210` (UTC) → Unix ms.
fn smi_time_ms(t: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(t.trim(), "%Y/%m/%d %H:%M:%S%.3f")
        .unwrap_or_else(|e| panic!("{t:?}: {e}"))
        .and_utc()
        .timestamp_millis()
}

/// nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000
fn nvidia_smi() -> Vec<(i64, f64, f64)> {
    let text = std::fs::read_to_string(fixture("real-h100-nvidia-smi.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            let num = |s: &str| s.split_whitespace().next().unwrap().parse::<f64>().unwrap();
            (smi_time_ms(f[0]), num(f[1]), num(f[2]))
        })
        .collect()
}

#[test]
fn smi_timestamps_parse() {
    assert_eq!(smi_time_ms("1970/01/01 00:00:00.000"), 0);
    assert_eq!(smi_time_ms("2026/11/22 03:31:11.210"), 1_795_318_271_210);
}

#[test]
fn the_trace_is_a_valid_replayable_agent_trace() {
    let path = fixture("real-h100-agent.jsonl");
    let recs = parse_trace(&std::fs::read_to_string(&path).unwrap(), &path, None).unwrap();
    assert_eq!(recs.len(), 62);
    assert!(recs.iter().all(|r| r.host == "h100-device"));
    assert!(recs.windows(2).all(|w| w[1].sample.ts_ms - w[0].sample.ts_ms >= 900));
    let t = trace();
    let phases: Vec<&str> = t.iter().map(|(p, _)| p.as_str()).fold(Vec::new(), |mut v, p| {
        if v.last() != Some(&p) {
            v.push(p);
        }
        v
    });
    assert_eq!(phases, ["idle", "alloc_idle", "one_block", "matmul_bf16", "memcopy", "idle_end", "done"]);
    let mut last_energy = 0.0;
    for (i, (_, s)) in t.iter().enumerate() {
        // What the server would accept, as sent.
        validate_sample(i, s, s.ts_ms).unwrap();
        assert_eq!(s.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(s.mem_total_bytes, Some(85_520_809_984));
        assert_eq!(s.power_limit_w, Some(700.0));
        // A Hopper GPU gives every field: nothing absent, GPM included, but for the signals
        // added after this trace was recorded (absent here, as in any older agent's batch;
        // re-recording the trace empties this list).
        const ADDED_AFTER_RECORDING: [&str; 1] = ["tensor_hmma_active_pct"];
        let v = serde_json::to_value(s).unwrap();
        for (k, val) in v.as_object().unwrap() {
            if ADDED_AFTER_RECORDING.contains(&k.as_str()) {
                assert!(val.is_null(), "sample {i}: {k} is in the trace now: take it off the list");
            } else {
                assert!(!val.is_null(), "sample {i}: {k} absent on an H100");
            }
        }
        // The energy counter only grows (recorded with --nvml-energy-every 1).
        let e = s.energy_j.unwrap();
        assert!(e > last_energy);
        last_energy = e;
    }
}

#[test]
fn each_phase_reads_as_the_hardware_ran() {
    let by_phase = settled(&trace());
    let get = |p: &str| -> &Vec<Sample> {
        let v = &by_phase[p];
        // The recording stopped 2 s after the workload: 'done' has only 2 settled samples.
        assert!(v.len() >= if p == "done" { 2 } else { 6 }, "{p}: only {} settled samples", v.len());
        v
    };
    for s in get("idle") {
        assert_eq!(s.gpu_util_pct, Some(0.0));
        assert_eq!(s.sm_active_pct, Some(0.0));
        assert_eq!(s.processes.as_deref(), Some(&[][..]));
    }
    for s in get("alloc_idle") {
        // Memory held, nothing running: SM activity exactly 0.0 (idle_held), util 0.
        assert!(s.mem_used_bytes.unwrap() >= 30_000_000_000, "{:?}", s.mem_used_bytes);
        assert_eq!(s.sm_active_pct, Some(0.0));
        assert_eq!(s.gpu_util_pct, Some(0.0));
        let p = &s.processes.as_ref().unwrap()[0];
        assert!(p.used_bytes.unwrap() >= 30_000_000_000);
        assert!(p.command.as_deref().unwrap().contains("workload.py"), "{:?}", p.command);
        assert_eq!(p.user.as_deref(), Some("root"));
        assert!(p.container_id.is_some());
        assert!(p.sm_pct.is_none_or(|x| x <= 1.0), "{:?}", p.sm_pct);
    }
    for s in get("one_block") {
        // nvidia-smi's 100 % is one block on 1 of 132 SMs.
        assert!(s.gpu_util_pct.unwrap() >= 90.0);
        let smact = s.sm_active_pct.unwrap();
        assert!(smact > 0.0 && smact < 5.0, "{smact}");
        assert!((smact - 100.0 / 132.0).abs() < 0.1, "{smact}");
        // GRAPHICS_UTIL is engine-busy (GRACT), not SM activity.
        assert!(s.gr_engine_active_pct.unwrap() >= 90.0);
        assert!(s.tensor_active_pct.unwrap() < 1.0);
    }
    for s in get("matmul_bf16") {
        assert!(s.tensor_active_pct.unwrap() >= 30.0, "{:?}", s.tensor_active_pct);
        assert!(s.sm_active_pct.unwrap() >= 50.0);
        assert!(s.gpu_util_pct.unwrap() >= 90.0);
        // A bf16 matmul at full tilt hits the power cap (clock-event reason 4, SW power cap).
        assert!(s.power_w.unwrap() > 600.0);
        assert_eq!(s.throttle_reasons.map(|r| r & 4), Some(4));
    }
    for s in get("memcopy") {
        assert!(s.dram_active_pct.unwrap() >= 60.0);
        assert!(s.tensor_active_pct.unwrap() < 5.0);
    }
    for s in get("idle_end") {
        assert_eq!(s.sm_active_pct, Some(0.0));
        assert_eq!(s.gpu_util_pct, Some(0.0));
        assert!(s.is_allocated());
    }
    for s in get("done") {
        assert_eq!(s.processes.as_deref(), Some(&[][..]));
    }
    // Per-process SM % (read every 5 polls in this recording): measured where the process ran.
    let busy: Vec<f64> = ["one_block", "matmul_bf16", "memcopy"]
        .iter()
        .flat_map(|p| &by_phase[*p])
        .filter_map(|s| s.processes.as_ref()?.first()?.sm_pct)
        .collect();
    assert!(!busy.is_empty() && busy.iter().all(|x| *x >= 90.0), "{busy:?}");
}

#[test]
fn util_and_memory_agree_with_nvidia_smi() {
    let smi = nvidia_smi();
    let mut pairs = 0;
    for (phase, s) in settled(&trace()).into_iter().flat_map(|(p, v)| v.into_iter().map(move |s| (p.clone(), s))) {
        let Some(&(t, util, mem_mib)) = smi.iter().min_by_key(|(t, _, _)| (t - s.ts_ms).abs()) else { continue };
        if (t - s.ts_ms).abs() > 300 {
            continue;
        }
        pairs += 1;
        let u = s.gpu_util_pct.unwrap();
        assert!((u - util).abs() <= 2.0, "{phase} at {}: agent util {u}, nvidia-smi {util}", s.ts_ms);
        let m = s.mem_used_bytes.unwrap() as f64 / (1 << 20) as f64;
        assert!((m - mem_mib).abs() <= 2.0, "{phase} at {}: agent {m} MiB, nvidia-smi {mem_mib} MiB", s.ts_ms);
    }
    assert!(pairs >= 40, "only {pairs} samples aligned with nvidia-smi");
}

#[test]
fn phases_classify_as_shared_fixtures_readme_says() {
    let t = trace();
    let samples: Vec<Sample> = t.iter().map(|(_, s)| s.clone()).collect();
    let th = Thresholds::default();
    let expected = |p: &str| -> &'static [WorkloadState] {
        use WorkloadState::*;
        match p {
            "idle" | "done" => &[Idle],
            "alloc_idle" | "idle_end" => &[IdleHeld],
            "one_block" => &[Hollow, Stalled],
            "matmul_bf16" => &[ComputeBound],
            "memcopy" => &[MemoryBound],
            other => panic!("unknown phase {other}"),
        }
    };
    let mut checked = 0;
    for (phase, settled) in settled(&t) {
        // 2-s windows inside the settled part of the phase.
        for w in settled.chunks_exact(2) {
            let (start, end) = (w[0].ts_ms, w[1].ts_ms + 1);
            let c = classify_window(&samples, start, end, 1000, &th);
            assert!(expected(&phase).contains(&c.state), "{phase} [{start}, {end}): {} because {}", c.state, c.reason);
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn inventory_labels_describe_the_gpu() {
    let labels: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(fixture("real-h100-labels.json")).unwrap()).unwrap();
    let g = "gpu.GPU-c8491948-7e57-dcb1-bed3-6c3977eae044";
    assert_eq!(labels[&format!("{g}.sm_count")], "132");
    assert_eq!(labels[&format!("{g}.architecture")], "Hopper");
    assert_eq!(labels[&format!("{g}.compute_capability")], "9.0");
    assert_eq!(labels[&format!("{g}.max_sm_clock_mhz")], "1980");
    assert_eq!(labels[&format!("{g}.pci_bus_id")], "00000000:00:06.0");
    assert_eq!(labels[&format!("{g}.gpm")], "true");
    assert!(labels.contains_key(&format!("{g}.serial")));
    assert_eq!(labels["nvml.driver_version"], "580.159.04");
    assert_eq!(labels["nvml.cuda_version"], "13.0");
}
