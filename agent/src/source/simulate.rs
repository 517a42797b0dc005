//! `simulate:N`: synthetic GPUs for demos and tests without hardware.
//!
//! Each GPU walks through the workload behaviours of METRICS.md in phases of tens of seconds
//! to minutes. Levels (power, clocks, temperature, memory, PCIe, GPM counters) are taken from
//! the real H200 trace in `tests/fixtures/nvml-h200-phases.jsonl` and scaled to each model,
//! so the server's classifier sees what real hardware reports. Everything is drawn from a
//! ChaCha stream per GPU: the same seed gives the same fleet, and GPU `i` behaves the same
//! whatever N is.

use std::time::Duration;

use async_trait::async_trait;
use fleetlens_core::{GpuProcess, Sample};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{GpuSource, HostSamples, SourceError, SourceOptions, Ticker, now_ms};

/// What a simulated GPU is doing during a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Behaviour {
    Idle,
    IdleHeld,
    Hollow,
    Starved,
    MemoryBound,
    ComputeBound,
    Stalled,
}

impl Behaviour {
    pub const ALL: [Behaviour; 7] = [
        Behaviour::Idle,
        Behaviour::IdleHeld,
        Behaviour::Hollow,
        Behaviour::Starved,
        Behaviour::MemoryBound,
        Behaviour::ComputeBound,
        Behaviour::Stalled,
    ];

    /// The METRICS.md state this behaviour should be classified as.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::IdleHeld => "idle_held",
            Self::Hollow => "hollow",
            Self::Starved => "starved",
            Self::MemoryBound => "memory_bound",
            Self::ComputeBound => "compute_bound",
            Self::Stalled => "stalled",
        }
    }
}

pub const GPUS_PER_HOST: u32 = 8;
/// Phase length bounds. Every behaviour appears once per round of 7 phases, so each one shows
/// up within `7 × MAX_PHASE` of the start.
pub const MIN_PHASE: Duration = Duration::from_secs(20);
pub const MAX_PHASE: Duration = Duration::from_secs(180);

/// What differs between GPU models, and which counters their usual source leaves absent.
#[derive(Debug)]
struct Model {
    name: &'static str,
    mem_total_bytes: i64,
    power_limit_w: f64,
    idle_w: f64,
    max_clock_mhz: f64,
    idle_clock_mhz: f64,
    /// FP pipe counters (GPM on Hopper; dcgm-exporter's default counter set leaves them out).
    fp16: bool,
    fp32: bool,
    fp64: bool,
    int: bool,
    /// Per-process SM % from NVML process utilization.
    process_sm_pct: bool,
}

const H100: Model = Model {
    name: "NVIDIA H100 80GB HBM3",
    mem_total_bytes: 81_559 * 1024 * 1024,
    power_limit_w: 700.0,
    idle_w: 71.0,
    max_clock_mhz: 1980.0,
    idle_clock_mhz: 345.0,
    fp16: true,
    fp32: true,
    fp64: true,
    int: true,
    process_sm_pct: true,
};

/// As recorded in the fixture: the GPM FP64 metric was not read there.
const H200: Model = Model {
    name: "NVIDIA H200",
    mem_total_bytes: 150_754_820_096,
    power_limit_w: 700.0,
    idle_w: 82.0,
    max_clock_mhz: 1980.0,
    idle_clock_mhz: 345.0,
    fp16: true,
    fp32: true,
    fp64: false,
    int: true,
    process_sm_pct: false,
};

/// No GPM before Hopper: modelled as read through DCGM (SMACT, SMOCC, tensor, DRAM), with
/// the pipe counters that the default dcgm-exporter configuration leaves out absent.
const A100: Model = Model {
    name: "NVIDIA A100-SXM4-80GB",
    mem_total_bytes: 81_920 * 1024 * 1024,
    power_limit_w: 400.0,
    idle_w: 56.0,
    max_clock_mhz: 1410.0,
    idle_clock_mhz: 210.0,
    fp16: false,
    fp32: false,
    fp64: false,
    int: false,
    process_sm_pct: false,
};

/// Hosts are homogeneous, as real nodes are; host `h` gets `MODELS[h % 3]`.
const MODELS: [&Model; 3] = [&H100, &H200, &A100];

/// Memory NVML counts as used beyond the processes' own (driver context; 8.8 MiB in the fixture).
const CONTEXT_BYTES: i64 = 9_240_576;
/// The H200 trace's idle power and limit, the scale the levels below are written in.
const REF_IDLE_W: f64 = 82.0;
const REF_LIMIT_W: f64 = 700.0;
/// Thermal time constant of a GPU and its heatsink.
const THERMAL_TAU_S: f64 = 20.0;

#[derive(Debug, Clone, Copy)]
enum Clock {
    Idle,
    Max,
    /// Bursty work: the boost clock barely drops.
    NearMax,
    /// Power-capped dense math (the fixture's matmul: 1470 of 1980 MHz, reason 4).
    PowerCapped,
}

/// Parameters fixed for the length of a phase, so a phase looks like one job.
#[derive(Debug, Clone)]
struct Phase {
    behaviour: Behaviour,
    ticks_left: u32,
    tick: u32,
    util: f64,
    smact: f64,
    dram: f64,
    tensor: f64,
    period: u32,
    nvlink: f64,
}

/// One tick's readings before they are shaped into a [`Sample`].
#[derive(Debug, Default)]
struct Levels {
    util: f64,
    mem_util: f64,
    smact: f64,
    gract: f64,
    smocc: f64,
    tensor: f64,
    dram: f64,
    fp16: f64,
    fp32: f64,
    fp64: f64,
    int: f64,
    /// Power on the H200 scale (`None` = the model's idle power).
    ref_power_w: Option<f64>,
    temp_target: f64,
    pcie_tx: f64,
    pcie_rx: f64,
    nvlink: f64,
}

struct SimGpu {
    uuid: String,
    host: String,
    gpu_index: u32,
    model: &'static Model,
    rng: ChaCha8Rng,
    /// Behaviours left in the current round, taken from the back.
    plan: Vec<Behaviour>,
    phase: Phase,
    pid: Option<u32>,
    held_bytes: i64,
    temp_c: f64,
    energy_j: f64,
}

/// Deterministic N-GPU fleet; [`Simulator::step`] produces one sample per GPU.
pub struct Simulator {
    gpus: Vec<SimGpu>,
    interval_s: f64,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A UUID-shaped id, stable per (seed, index); the `5151` group marks it as simulated.
pub fn sim_uuid(seed: u64, index: u32) -> String {
    let h = splitmix64(seed);
    format!("GPU-{:08x}-{:04x}-5151-{:04x}-{:012x}", h >> 32, (h >> 16) & 0xffff, h & 0xffff, index)
}

fn host_name(host_idx: u32, n: u32, host: Option<&str>) -> String {
    match host {
        Some(h) if n <= GPUS_PER_HOST => h.to_string(),
        Some(h) => format!("{h}-{host_idx:02}"),
        None => format!("sim-node-{host_idx:02}"),
    }
}

/// `v` with up to ±`rel` relative noise.
fn around(rng: &mut ChaCha8Rng, v: f64, rel: f64) -> f64 {
    v * (1.0 + rng.random_range(-rel..=rel))
}

/// Percentages as GPM reports them: four decimals, within 0–100.
fn pct(v: f64) -> f64 {
    ((v * 1e4).round() / 1e4).clamp(0.0, 100.0)
}

fn round3(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

impl SimGpu {
    fn new(seed: u64, index: u32, n: u32, host: Option<&str>) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // One independent stream per GPU: GPU i does not depend on how many GPUs there are.
        rng.set_stream(u64::from(index));
        let host_idx = index / GPUS_PER_HOST;
        let temp_c = rng.random_range(32.0..36.0);
        let energy_j = rng.random_range(1.0e5..5.0e7);
        Self {
            uuid: sim_uuid(seed, index),
            host: host_name(host_idx, n, host),
            gpu_index: index % GPUS_PER_HOST,
            model: MODELS[(host_idx % 3) as usize],
            rng,
            plan: Vec::new(),
            phase: Phase {
                behaviour: Behaviour::Idle,
                ticks_left: 0,
                tick: 0,
                util: 0.0,
                smact: 0.0,
                dram: 0.0,
                tensor: 0.0,
                period: 1,
                nvlink: 0.0,
            },
            pid: None,
            held_bytes: 0,
            temp_c,
            energy_j,
        }
    }

    fn enter_next_phase(&mut self, interval_s: f64) {
        if self.plan.is_empty() {
            self.plan = Behaviour::ALL.to_vec();
            self.plan.shuffle(&mut self.rng);
        }
        let b = self.plan.pop().unwrap_or(Behaviour::Idle);
        let r = &mut self.rng;
        let secs = r.random_range(MIN_PHASE.as_secs_f64()..=MAX_PHASE.as_secs_f64());
        let ticks = (secs / interval_s).round().max(1.0) as u32;

        if b == Behaviour::Idle {
            self.pid = None;
            self.held_bytes = 0;
        } else {
            // A job that keeps running through phases keeps its pid; its memory changes.
            if self.pid.is_none() {
                self.pid = Some(r.random_range(1_000..400_000));
            }
            let frac = match b {
                Behaviour::IdleHeld => r.random_range(0.005..0.45),
                Behaviour::Hollow => r.random_range(0.005..0.06),
                Behaviour::Starved => r.random_range(0.05..0.4),
                Behaviour::MemoryBound => r.random_range(0.03..0.5),
                Behaviour::ComputeBound => r.random_range(0.2..0.9),
                _ => r.random_range(0.05..0.6),
            };
            // Allocations come in 2 MiB pages.
            self.held_bytes = ((self.model.mem_total_bytes as f64 * frac) as i64 >> 21) << 21;
        }

        let mut p = Phase { behaviour: b, ticks_left: ticks, tick: 0, ..self.phase.clone() };
        match b {
            Behaviour::Hollow => {
                p.util = r.random_range(60.0..=97.0);
                // At util ≥ 90 an SMACT under 5 reads as `stalled` (near-idle power), so a
                // busier hollow job keeps SMACT between 5 and 10.
                p.smact = if p.util >= 85.0 { r.random_range(6.0..9.0) } else { r.random_range(2.0..9.0) };
            }
            Behaviour::Starved => {
                p.util = r.random_range(5.0..30.0);
                p.smact = r.random_range(4.0..15.0);
                p.period = r.random_range(3..=8);
            }
            Behaviour::MemoryBound => {
                p.smact = r.random_range(97.5..99.5);
                p.dram = r.random_range(80.0..90.0);
            }
            Behaviour::ComputeBound => {
                p.smact = r.random_range(94.0..97.0);
                p.tensor = r.random_range(88.0..94.0);
                p.dram = r.random_range(14.0..20.0);
                p.nvlink = if r.random_bool(0.5) { r.random_range(2_000.0..15_000.0) } else { 0.0 };
            }
            Behaviour::Stalled => p.smact = r.random_range(0.6..1.0),
            Behaviour::Idle | Behaviour::IdleHeld => {}
        }
        self.phase = p;
    }

    /// This tick's levels, from the fixture's phases (comments name the phase).
    fn levels(&mut self) -> (Levels, Clock, u64) {
        let r = &mut self.rng;
        let p = &self.phase;
        let quiet_pcie = |r: &mut ChaCha8Rng| (around(r, 0.38, 0.05), around(r, 0.14, 0.1));
        match p.behaviour {
            // idle: nothing on the GPU, idle clocks, throttle reason 1 (GPU idle).
            Behaviour::Idle => {
                let l = Levels {
                    dram: 0.0004,
                    temp_target: 34.0,
                    pcie_tx: around(r, 0.45, 0.3),
                    pcie_rx: around(r, 0.2, 0.4),
                    ..Levels::default()
                };
                (l, Clock::Idle, 1)
            }
            // alloc_idle / idle_end: memory held, no kernels, SMACT exactly 0.
            Behaviour::IdleHeld => {
                let (pcie_tx, pcie_rx) = quiet_pcie(r);
                let l = Levels {
                    gract: 0.0063,
                    dram: 0.0004,
                    ref_power_w: Some(around(r, 124.2, 0.002)),
                    temp_target: 35.0,
                    pcie_tx,
                    pcie_rx,
                    ..Levels::default()
                };
                (l, Clock::Max, 0)
            }
            // tiny_batch1: util ~60, SMACT ~9, lots of small PCIe transfers.
            Behaviour::Hollow => {
                let util = (p.util + r.random_range(-3.0..=3.0)).round().clamp(0.0, 100.0);
                let smact = around(r, p.smact, 0.08).min(9.9);
                let l = Levels {
                    util,
                    gract: (smact * 6.7).min(util),
                    smact,
                    smocc: smact * 0.031,
                    tensor: smact * 0.000_29,
                    dram: 0.0004,
                    fp32: smact * 0.0204,
                    int: smact * 0.176,
                    ref_power_w: Some(128.0 + smact * 1.55),
                    temp_target: 37.0,
                    pcie_tx: smact * around(r, 2.62, 0.03),
                    pcie_rx: smact * around(r, 22.7, 0.03),
                    ..Levels::default()
                };
                (l, Clock::Max, 0)
            }
            // sawtooth: short bursts then host waits; 1-s NVML util mostly misses the bursts.
            Behaviour::Starved => {
                let pos = p.tick % p.period;
                let decay = 1.0 - f64::from(pos) / f64::from(p.period);
                let smact = 0.4 + (p.smact - 0.4) * decay * around(r, 1.0, 0.05);
                let util = if pos == 0 {
                    around(r, p.util, 0.2).round()
                } else if r.random_bool(0.15) {
                    r.random_range(1.0..5.0_f64).round()
                } else {
                    0.0
                };
                let l = Levels {
                    util,
                    mem_util: (util * 0.28).round(),
                    smact,
                    gract: smact * 1.33,
                    smocc: smact * 0.148,
                    tensor: smact * 0.97,
                    dram: smact * 0.25,
                    int: smact * 0.014,
                    ref_power_w: Some(140.0 + smact * 8.0),
                    temp_target: 41.0,
                    pcie_tx: 0.3 + smact * around(r, 0.06, 0.1),
                    pcie_rx: 0.5 + smact * around(r, 0.14, 0.1),
                    ..Levels::default()
                };
                (l, Clock::NearMax, 0)
            }
            // memcopy: SM busy moving bytes, DRAM ~89 %, tensor 0.
            Behaviour::MemoryBound => {
                let smact = around(r, p.smact, 0.003);
                let l = Levels {
                    util: 100.0,
                    mem_util: 100.0,
                    smact,
                    gract: smact + 0.55,
                    smocc: around(r, 80.1, 0.01),
                    dram: around(r, p.dram, 0.01),
                    int: around(r, 8.0, 0.01),
                    ref_power_w: Some(around(r, 470.0, 0.003)),
                    temp_target: 43.0,
                    pcie_tx: around(r, 10.2, 0.02),
                    pcie_rx: around(r, 29.6, 0.02),
                    ..Levels::default()
                };
                (l, Clock::Max, 0)
            }
            // matmul_bf16: tensor ~93 %, at the power cap (reason 4), clocks pulled down.
            Behaviour::ComputeBound => {
                let smact = around(r, p.smact, 0.004);
                let l = Levels {
                    util: r.random_range(98..=100).into(),
                    mem_util: r.random_range(23..=25).into(),
                    smact,
                    gract: smact + 3.5,
                    smocc: around(r, 14.2, 0.01),
                    tensor: around(r, p.tensor, 0.004),
                    dram: around(r, p.dram, 0.01),
                    int: around(r, 1.35, 0.01),
                    ref_power_w: Some(around(r, 692.0, 0.003)),
                    temp_target: 55.0,
                    pcie_tx: around(r, 4.35, 0.02),
                    pcie_rx: around(r, 12.45, 0.02),
                    nvlink: around(r, p.nvlink, 0.05),
                    ..Levels::default()
                };
                (l, Clock::PowerCapped, 4)
            }
            // one_block: util 100 while one block spins on 1 of 132 SMs; power near idle.
            Behaviour::Stalled => {
                let smact = around(r, p.smact, 0.01);
                let (pcie_tx, pcie_rx) = quiet_pcie(r);
                let l = Levels {
                    util: 100.0,
                    smact,
                    gract: 100.0,
                    smocc: smact * 0.0156,
                    dram: 0.0004,
                    int: smact * 0.0512,
                    ref_power_w: Some(around(r, 124.5, 0.002)),
                    temp_target: 35.0,
                    pcie_tx,
                    pcie_rx,
                    ..Levels::default()
                };
                (l, Clock::Max, 0)
            }
        }
    }

    fn sample(&mut self, ts_ms: i64, interval_s: f64) -> Sample {
        if self.phase.ticks_left == 0 {
            self.enter_next_phase(interval_s);
        }
        let (l, clock, throttle) = self.levels();
        self.phase.tick += 1;
        self.phase.ticks_left -= 1;

        let m = self.model;
        let r = &mut self.rng;
        // Map the H200-scale power onto this model's idle..limit range.
        let power_w = match l.ref_power_w {
            None => around(r, m.idle_w, 0.003),
            Some(w) => m.idle_w + (w - REF_IDLE_W).max(0.0) / (REF_LIMIT_W - REF_IDLE_W) * (m.power_limit_w - m.idle_w),
        }
        .min(m.power_limit_w);
        let clock_mhz = match clock {
            Clock::Idle => m.idle_clock_mhz,
            Clock::Max => m.max_clock_mhz,
            Clock::NearMax => (m.max_clock_mhz * 0.99 / 15.0).round() * 15.0,
            Clock::PowerCapped => ((m.max_clock_mhz * 0.745 / 15.0).round() + f64::from(r.random_range(-1..=1))) * 15.0,
        };
        let alpha = 1.0 - (-interval_s / THERMAL_TAU_S).exp();
        self.temp_c += (l.temp_target - self.temp_c) * alpha + r.random_range(-0.2..=0.2);
        self.energy_j += power_w * interval_s;

        let processes = match self.pid {
            Some(pid) => {
                let owner = simulated_owner(pid);
                vec![GpuProcess {
                    pid,
                    used_bytes: Some(self.held_bytes),
                    sm_pct: m.process_sm_pct.then_some(pct(l.util)),
                    user: owner.user.clone(),
                    owner: Some(owner),
                    ..GpuProcess::default()
                }]
            }
            None => vec![],
        };
        Sample {
            ts_ms,
            uuid: self.uuid.clone(),
            gpu_index: Some(self.gpu_index),
            name: Some(m.name.to_string()),
            gpu_util_pct: Some(pct(l.util)),
            mem_util_pct: Some(pct(l.mem_util)),
            mem_used_bytes: Some(if self.pid.is_some() { self.held_bytes + CONTEXT_BYTES } else { 0 }),
            mem_total_bytes: Some(m.mem_total_bytes),
            power_w: Some(round3(power_w)),
            power_limit_w: Some(m.power_limit_w),
            energy_j: Some(round3(self.energy_j)),
            temp_c: Some(self.temp_c.round()),
            sm_clock_mhz: Some(clock_mhz),
            throttle_reasons: Some(throttle),
            sm_active_pct: Some(pct(l.smact)),
            gr_engine_active_pct: Some(pct(l.gract)),
            sm_occupancy_pct: Some(pct(l.smocc)),
            tensor_active_pct: Some(pct(l.tensor)),
            dram_active_pct: Some(pct(l.dram)),
            fp16_active_pct: m.fp16.then_some(pct(l.fp16)),
            // The simulated tensor work is FP16/BF16 matrix math, so it runs on the HMMA pipe.
            tensor_hmma_active_pct: m.fp16.then_some(pct(l.tensor)),
            fp32_active_pct: m.fp32.then_some(pct(l.fp32)),
            fp64_active_pct: m.fp64.then_some(pct(l.fp64)),
            int_active_pct: m.int.then_some(pct(l.int)),
            pcie_tx_mib_s: Some(round3(l.pcie_tx)),
            pcie_rx_mib_s: Some(round3(l.pcie_rx)),
            nvlink_tx_mib_s: Some(round3(l.nvlink)),
            nvlink_rx_mib_s: Some(round3(l.nvlink)),
            processes: Some(processes),
            allocations: Vec::new(),
        }
    }
}

impl Simulator {
    /// `n` GPUs, 8 per host; `host` renames the hosts (see `--host`).
    pub fn new(n: u32, seed: u64, interval: Duration, host: Option<&str>) -> Self {
        let gpus = (0..n).map(|i| SimGpu::new(seed, i, n, host)).collect();
        Self { gpus, interval_s: interval.as_secs_f64() }
    }

    /// One sample per GPU stamped `ts_ms`, grouped by host.
    pub fn step(&mut self, ts_ms: i64) -> Vec<HostSamples> {
        let mut out: Vec<HostSamples> = Vec::new();
        for g in &mut self.gpus {
            let s = g.sample(ts_ms, self.interval_s);
            match out.last_mut() {
                Some(h) if h.host == g.host => h.samples.push(s),
                _ => out.push(HostSamples::new(g.host.clone(), vec![s])),
            }
        }
        out
    }

    /// The behaviour that produced GPU `i`'s latest sample.
    pub fn behaviour(&self, i: usize) -> Behaviour {
        self.gpus[i].phase.behaviour
    }

    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }
}

/// The simulator as a live source: one step per interval, stamped with the wall clock.
pub struct SimulatedSource {
    sim: Simulator,
    ticker: Ticker,
    seed: u64,
}

impl SimulatedSource {
    pub fn new(n: u32, opts: &SourceOptions) -> Self {
        Self {
            sim: Simulator::new(n, opts.seed, opts.interval, opts.host.as_deref()),
            ticker: Ticker::new(opts.interval),
            seed: opts.seed,
        }
    }
}

#[async_trait]
impl GpuSource for SimulatedSource {
    fn describe(&self) -> String {
        format!("simulate:{} (seed {})", self.sim.len(), self.seed)
    }

    fn is_live(&self) -> bool {
        true
    }

    async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
        self.ticker.tick().await;
        Ok(Some(self.sim.step(now_ms())))
    }
}

/// A made-up owner for a simulated job, from its PID (no extra random draws, so a seed still
/// gives the same readings): a Kubernetes notebook pod for some users, a Slurm job for others.
pub fn simulated_owner(pid: u32) -> fleetlens_core::ProcessOwner {
    const USERS: [&str; 4] = ["alice", "bob", "carol", "dave"];
    let user = USERS[pid as usize % USERS.len()];
    let mut o = fleetlens_core::ProcessOwner { user: Some(user.to_string()), ..Default::default() };
    if pid.is_multiple_of(2) {
        o.namespace = Some(if pid.is_multiple_of(4) { "ml" } else { "research" }.to_string());
        o.pod_name = Some(format!("nb-{user}-{}", pid % 97));
        o.pod_uid = Some(format!("00000000-0000-4000-8000-{pid:012x}"));
    } else {
        o.job_id = Some((40_000 + pid % 10_000).to_string());
        o.job_user = Some(user.to_string());
        o.job_partition = Some("gpu".to_string());
    }
    o
}

#[cfg(test)]
mod tests;
