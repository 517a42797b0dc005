use std::collections::{BTreeSet, HashSet};

use fleetlens_core::sample::{NON_NEGATIVE_FIELDS, PERCENT_FIELDS};
use fleetlens_core::validate_sample;

use super::*;

const T0: i64 = 1_795_311_343_000;
/// Every behaviour shows up within one round of 7 phases.
const BOUND_TICKS: usize = 7 * MAX_PHASE.as_secs() as usize + 1;

fn run(n: u32, seed: u64, ticks: usize) -> Vec<Vec<(Behaviour, Sample)>> {
    let mut sim = Simulator::new(n, seed, Duration::from_secs(1), None);
    let mut per_gpu = vec![Vec::new(); n as usize];
    for t in 0..ticks {
        let samples: Vec<Sample> = sim.step(T0 + t as i64 * 1000).into_iter().flat_map(|h| h.samples).collect();
        for (i, s) in samples.into_iter().enumerate() {
            per_gpu[i].push((sim.behaviour(i), s));
        }
    }
    per_gpu
}

/// The METRICS.md rules for one sample (no window), to check that each behaviour reads as the
/// state it stands for.
fn state_of(s: &Sample) -> &'static str {
    let util = s.gpu_util_pct.unwrap();
    let sm = s.sm_active_pct.unwrap();
    let procs = !s.processes.as_ref().unwrap().is_empty();
    let tensor = s.tensor_active_pct.unwrap();
    let dram = s.dram_active_pct.unwrap();
    let occ = s.sm_occupancy_pct.unwrap();
    let power_frac = s.power_w.unwrap() / s.power_limit_w.unwrap();
    if !procs && util < 5.0 {
        "idle"
    } else if procs && util < 5.0 && sm < 0.1 {
        "idle_held"
    } else if util >= 90.0 && sm < 5.0 && power_frac < 0.3 {
        "stalled"
    } else if util >= 50.0 && sm / util < 0.3 {
        "hollow"
    } else if procs && util.max(sm) < 50.0 && (sm >= 0.1 || util >= 5.0) {
        "starved"
    } else if sm >= 50.0 && occ < 10.0 && tensor < 10.0 && dram < 30.0 {
        "low_occupancy"
    } else if sm >= 50.0 && dram >= 60.0 && tensor < 20.0 {
        "memory_bound"
    } else if sm >= 50.0 && tensor >= 30.0 {
        "compute_bound"
    } else {
        "active"
    }
}

#[test]
fn same_seed_same_fleet() {
    assert_eq!(run(10, 7, 400), run(10, 7, 400));
    assert_ne!(run(10, 7, 400), run(10, 8, 400));
    // GPU i does not depend on the fleet size.
    let small = run(2, 7, 300);
    let large = run(20, 7, 300);
    assert_eq!(small[..], large[..2]);
}

#[test]
fn identities() {
    let mut sim = Simulator::new(20, 3, Duration::from_secs(1), None);
    let hosts = sim.step(T0);
    assert_eq!(
        hosts.iter().map(|h| h.host.as_str()).collect::<Vec<_>>(),
        ["sim-node-00", "sim-node-01", "sim-node-02"]
    );
    assert_eq!(hosts.iter().map(|h| h.samples.len()).collect::<Vec<_>>(), [8, 8, 4]);
    let all: Vec<&Sample> = hosts.iter().flat_map(|h| &h.samples).collect();
    let uuids: HashSet<&str> = all.iter().map(|s| s.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 20);
    for (i, s) in all.iter().enumerate() {
        assert_eq!(s.uuid, sim_uuid(3, i as u32));
        assert_eq!(s.uuid.len(), 40, "{}", s.uuid);
        assert!(s.uuid.starts_with("GPU-"));
        assert_eq!(s.gpu_index, Some(i as u32 % 8));
    }
    assert_eq!(all[0].name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(all[8].name.as_deref(), Some("NVIDIA H200"));
    assert_eq!(all[16].name.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
    assert_ne!(sim_uuid(3, 0), sim_uuid(4, 0));

    let named = Simulator::new(4, 3, Duration::from_secs(1), Some("lab")).step(T0);
    assert_eq!(named[0].host, "lab");
    let named = Simulator::new(9, 3, Duration::from_secs(1), Some("lab")).step(T0);
    assert_eq!(named.iter().map(|h| h.host.as_str()).collect::<Vec<_>>(), ["lab-00", "lab-01"]);
}

#[test]
fn every_behaviour_appears_within_the_bound_and_reads_as_its_state() {
    // 24 GPUs: three hosts, one per model. `SIM_SEEDS=N` checks seeds 0..N instead.
    let seeds: Vec<u64> = match std::env::var("SIM_SEEDS") {
        Ok(n) => (0..n.parse().unwrap()).collect(),
        Err(_) => vec![42, 7],
    };
    for seed in seeds {
        let per_gpu = run(24, seed, BOUND_TICKS);
        for (i, samples) in per_gpu.iter().enumerate() {
            let seen: BTreeSet<Behaviour> = samples.iter().map(|(b, _)| *b).collect();
            assert_eq!(seen.len(), 7, "seed {seed} GPU {i} saw only {seen:?}");
            for (b, s) in samples {
                assert_eq!(state_of(s), b.as_str(), "seed {seed} GPU {i} {b:?}: {s:?}");
            }
        }
    }
}

#[test]
fn phases_last_tens_of_seconds_to_minutes() {
    let per_gpu = run(8, 5, 3000);
    for samples in &per_gpu {
        let mut runs = Vec::new();
        let mut len = 0;
        for w in samples.windows(2) {
            len += 1;
            if w[0].0 != w[1].0 {
                runs.push(len);
                len = 0;
            }
        }
        // Two phases of one behaviour can meet across rounds; that only lengthens a run.
        assert!(runs.len() >= 10);
        assert!(runs.iter().all(|&r| r >= MIN_PHASE.as_secs() as usize), "{runs:?}");
    }
}

#[test]
fn values_are_in_range_and_valid() {
    let per_gpu = run(24, 9, 1500);
    let now = T0 + 1500 * 1000;
    for samples in &per_gpu {
        let mut last_energy = 0.0;
        for (b, s) in samples {
            validate_sample(0, s, now).unwrap();
            for (field, get) in PERCENT_FIELDS {
                if let Some(v) = get(s) {
                    assert!((0.0..=100.0).contains(&v), "{field}={v} in {b:?}");
                }
            }
            for (field, get) in NON_NEGATIVE_FIELDS {
                assert!(get(s).is_none_or(|v| v >= 0.0), "{field}");
            }
            let energy = s.energy_j.unwrap();
            assert!(energy > last_energy, "energy is a monotonic counter");
            last_energy = energy;
            let power = s.power_w.unwrap();
            assert!(power > 0.0 && power <= s.power_limit_w.unwrap());
            let temp = s.temp_c.unwrap();
            assert!((25.0..=70.0).contains(&temp), "temp {temp}");
            assert!(s.mem_used_bytes.unwrap() <= s.mem_total_bytes.unwrap());
        }
    }
}

#[test]
fn idle_held_has_a_process_and_zero_smact() {
    let per_gpu = run(8, 11, BOUND_TICKS);
    let mut held = 0;
    for (b, s) in per_gpu.iter().flatten() {
        let procs = s.processes.as_ref().expect("process list is always read");
        match b {
            Behaviour::IdleHeld => {
                held += 1;
                assert_eq!(s.sm_active_pct, Some(0.0));
                assert_eq!(s.gpu_util_pct, Some(0.0));
                assert_eq!(procs.len(), 1);
                assert!(procs[0].used_bytes.unwrap() > 0);
                assert!(s.mem_used_bytes.unwrap() > procs[0].used_bytes.unwrap());
            }
            Behaviour::Idle => {
                assert!(procs.is_empty());
                assert_eq!(s.mem_used_bytes, Some(0));
            }
            _ => assert_eq!(procs.len(), 1, "a job runs in {b:?}"),
        }
    }
    assert!(held > 0);
}

#[test]
fn simulated_jobs_have_owners() {
    let per_gpu = run(8, 11, BOUND_TICKS);
    let mut users = BTreeSet::new();
    for (_, s) in per_gpu.iter().flatten() {
        for p in s.processes.as_ref().unwrap() {
            let o = p.owner.as_ref().expect("a simulated job has an owner");
            assert_eq!(o, &simulated_owner(p.pid), "the same PID keeps its owner");
            assert_eq!(p.user, o.user);
            // A pod (namespace, name, UID) or a Slurm job (id, user, partition), never half of one.
            let pod = (o.namespace.is_some(), o.pod_name.is_some(), o.pod_uid.is_some());
            let job = (o.job_id.is_some(), o.job_user.is_some(), o.job_partition.is_some());
            assert!(
                (pod == (true, true, true) && job == (false, false, false))
                    || (pod == (false, false, false) && job == (true, true, true)),
                "{o:?}"
            );
            users.insert(o.user.clone().unwrap());
        }
    }
    assert!(users.len() >= 2, "{users:?}");
}

#[test]
fn absent_counters_stay_absent() {
    let per_gpu = run(24, 1, 50);
    let h100 = &per_gpu[0][0].1;
    let h200 = &per_gpu[8][0].1;
    let a100 = &per_gpu[16][0].1;
    assert!(h100.fp64_active_pct.is_some() && h100.fp16_active_pct.is_some());
    assert!(h200.fp64_active_pct.is_none() && h200.fp16_active_pct.is_some());
    assert!(a100.fp64_active_pct.is_none() && a100.fp16_active_pct.is_none() && a100.int_active_pct.is_none());
    // The A100 still reports SMACT (as DCGM would give it).
    assert!(a100.sm_active_pct.is_some() && a100.tensor_active_pct.is_some());
}

#[tokio::test(start_paused = true)]
async fn live_source_stamps_wall_clock_each_interval() {
    let opts =
        SourceOptions { interval: Duration::from_millis(500), host: None, seed: 1, speed: None, ..Default::default() };
    let mut src = SimulatedSource::new(3, &opts);
    assert!(src.is_live());
    let start = tokio::time::Instant::now();
    for _ in 0..3 {
        let hosts = src.next().await.unwrap().unwrap();
        assert_eq!(hosts[0].samples.len(), 3);
        assert!((hosts[0].samples[0].ts_ms - now_ms()).abs() < 5_000);
    }
    // Ticks at 0, 0.5 s and 1 s of (virtual) time.
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}
