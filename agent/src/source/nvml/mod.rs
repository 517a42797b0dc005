//! `--source nvml`: the GPUs of this host, read through NVML (`libnvidia-ml.so.1`, loaded at run
//! time by nvml-wrapper, so the agent builds and starts on hosts without a GPU and says clearly
//! why it cannot read one).
//!
//! Every poll reads, per GPU: kernel and memory utilization (the driver's newest 200-ms period;
//! when the batch is sealed, [`Reader::finish`] replaces them with the mean over each poll's
//! interval, from one read of NVML's sample buffer per batch, [`util_window`]; where the driver
//! has no buffer, the instantaneous reading stays, and the GPU's label `util_method` says
//! which), memory, power, power
//! limit, temperature, SM clock, throttle reasons (cheap, ≤ 0.1 ms together), the running
//! compute processes, and — on Hopper and newer — the GPM counters between the previous poll's
//! GPM sample and this one, unless another profiler holds them ([`counters`]). The costly calls
//! (energy counter, per-process utilization samples) run every N polls.
//!
//! What a GPU or driver cannot give is absent (`None`) and logged once per GPU with the reason;
//! a GPU that errors or falls off the bus is logged and skipped while the others keep reporting.
//! MIG instances are reported as GPUs of their own (`MIG-…` UUIDs, label `gpu.<uuid>.mig_parent`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fleetlens_core::{GpuEvent, GpuEventKind, GpuProcess, Sample};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, Sampling, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, EventSet, Nvml};

use super::notes::{Notes, REPEAT_AFTER};
use super::procinfo::ProcTable;
use super::{Finisher, GpuSource, HostSamples, SourceError, SourceOptions, Ticker, local_host_name, now_ms};

pub mod counters;
pub mod gpm;
pub mod inventory;
pub mod timing;
pub mod util_window;

use counters::{Change, CounterWatch, GpmPoll};
use util_window::{UtilPoint, UtilWindow};

use inventory::{Inventory, cuda_version, sm_count};
use timing::{Group, PollTiming, Totals};

/// Per-process SM utilization is read every this many polls by default: the call took 2–4 ms
/// of wall time and about 2 ms of CPU per GPU on an H100 (driver 580), as much as all the other
/// readings together. Its window covers every poll since the last read, so nothing is missed.
pub const DEFAULT_PROCESS_UTIL_EVERY: u32 = 10;
/// The energy counter is read every this many polls by default: the call took 3–4 ms of wall
/// time and about 3 ms of CPU per GPU on an H100, the costliest reading. In between, power is
/// read every poll (on Hopper, a 1-s average), so energy can also be integrated from it.
pub const DEFAULT_ENERGY_EVERY: u32 = 10;
/// GPM's `GraphicsUtil` (GRACT) is read every 5 polls by default, as the mean over those 5 polls
/// (on every 5th sample; absent on the others). It is most of the cost of the GPM metrics call
/// (0.76 ms of CPU per GPU on an H100, driver 580): read every poll, the agent's default cost was
/// 2.63–2.72 ms per poll against a 2.5-ms budget, every 5 polls 1.88 ms (H100, 2026-11-26,
/// docs/BENCHMARKS.md). The 5-poll means agreed with nvidia-smi's per-second GRACT within
/// 0.9 points in 10 of the truth suite's 11 phases (docs/AGENT.md); `gpu_util_pct`, the
/// interval mean every poll, measures nearly the same thing. `--nvml-gract-every 1` reads it
/// every poll.
pub const DEFAULT_GRACT_EVERY: u32 = 5;
/// Polls between two timing summaries in the log.
const SUMMARY_EVERY: u64 = 60;
/// Polls between two attempts to open GPUs that could not be opened.
const REOPEN_EVERY: u64 = 60;
/// Most XID events taken from the queue in one poll.
const MAX_EVENTS_PER_POLL: usize = 64;

/// True on the polls (1-based) where a call run "every `every` polls" is due; 0 = never.
pub fn due(poll: u64, every: u32) -> bool {
    every > 0 && (poll - 1).is_multiple_of(u64::from(every))
}

/// Loads and initialises NVML, or says in words why it cannot.
fn init(lib: Option<&Path>) -> Result<&'static Nvml, SourceError> {
    let path = lib.map(|p| p.display().to_string()).unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let mut builder = Nvml::builder();
    if let Some(p) = lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = builder.init().map_err(|e| SourceError::Nvml(init_error(&path, &e)))?;
    // One NVML for the life of the process: devices and GPM samples borrow it.
    Ok(Box::leak(Box::new(nvml)))
}

const NO_NVML_HINT: &str = "without NVIDIA GPUs on this host, use --source dcgm:URL, replay:PATH or simulate:N";

fn init_error(path: &str, e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(le) => format!(
            "cannot load the NVIDIA management library {path} ({le}): is the NVIDIA driver installed \
             (does nvidia-smi work)? In a container, run it with the NVIDIA container toolkit \
             (docker --gpus all, Kubernetes runtimeClassName: nvidia); {NO_NVML_HINT}"
        ),
        NvmlError::DriverNotLoaded => {
            format!("NVML ({path}) is installed but the NVIDIA kernel driver is not loaded; {NO_NVML_HINT}")
        }
        NvmlError::NoPermission => format!(
            "NVML ({path}) may not talk to the NVIDIA driver: no permission on /dev/nvidia*; \
             run as a user that can open them (nvidia-smi works for it)"
        ),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("{path} is too old for this agent (missing {s}); update the NVIDIA driver (≥ 525)")
        }
        other => format!("NVML ({path}) failed to initialise: {other}; is the NVIDIA driver working (nvidia-smi)?"),
    }
}

/// Errors that mean "this GPU or driver does not have it": absent for good, said once.
fn is_permanent(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported
            | NvmlError::FunctionNotFound
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::NoPermission
            | NvmlError::InvalidArg
    )
}

/// Errors that mean the GPU itself is gone: skip it until it answers again.
fn is_gone(e: &NvmlError) -> bool {
    matches!(e, NvmlError::GpuLost | NvmlError::ResetRequired | NvmlError::Uninitialized)
}

/// Words for a permanent failure.
fn explain(e: &NvmlError) -> String {
    match e {
        NvmlError::NotSupported => "not supported by this GPU or driver".into(),
        NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_) => {
            format!("this driver's NVML has no such call ({e}); a newer driver may have it")
        }
        NvmlError::NoPermission => "no permission (some readings need root or CAP_SYS_ADMIN)".into(),
        other => other.to_string(),
    }
}

/// The GPU stopped answering (`GpuLost` & co.): its sample is skipped.
#[derive(Debug)]
struct Gone(NvmlError);

/// What one GPU could not give, so each reason is said once and the call not repeated.
#[derive(Debug, Default)]
struct Health {
    uuid: String,
    unsupported: HashSet<&'static str>,
}

impl Health {
    /// Runs one NVML read for `what`: its value, `None` where it cannot be had, or `Gone`.
    fn read<T>(
        &mut self,
        notes: &mut Notes,
        what: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Result<Option<T>, Gone> {
        if self.unsupported.contains(what) {
            return Ok(None);
        }
        match f() {
            Ok(v) => {
                if notes.clear(&self.uuid, what) {
                    tracing::info!(gpu = %self.uuid, reading = what, "readable again");
                }
                Ok(Some(v))
            }
            Err(e) if is_gone(&e) => Err(Gone(e)),
            Err(e) if is_permanent(&e) => {
                self.unsupported.insert(what);
                tracing::warn!(gpu = %self.uuid, reading = what, reason = %explain(&e),
                    "not available on this GPU; reported as absent (null), never 0");
                Ok(None)
            }
            Err(e) => {
                if notes.every(&self.uuid, what, REPEAT_AFTER) {
                    tracing::warn!(gpu = %self.uuid, reading = what, error = %e,
                        "read failed; absent in this sample (repeats are logged every 5 min)");
                }
                Ok(None)
            }
        }
    }
}

#[derive(Debug)]
enum Kind {
    Physical,
    /// A MIG instance: readings of the whole GPU (power, temperature, clocks, energy) stay on
    /// the parent's sample so that they are not counted twice.
    Mig,
}

/// GPM state of one GPU: the previous sample, kept between polls.
struct Gpm {
    enabled: bool,
    prev: Option<GpmSample<'static>>,
    /// `--nvml-gract-every`: 1 = GRACT in every poll's request; N > 1 = in a request of its own
    /// every N polls, over the window since `gract_base`; 0 = never.
    gract_every: u32,
    /// Where the current GRACT window started (N > 1).
    gract_base: Option<GpmSample<'static>>,
    /// Units NVML reports for each metric, logged once.
    units_logged: bool,
    /// Whether the counters count (another profiler may hold them).
    watch: CounterWatch,
    /// A change of `watch` to announce with this poll's events.
    change: Option<Change>,
}

impl Gpm {
    fn new(enabled: bool, gract_every: u32) -> Self {
        Gpm {
            enabled,
            prev: None,
            gract_every,
            gract_base: None,
            units_logged: false,
            watch: CounterWatch::new(),
            change: None,
        }
    }
}

/// How a GPU's utilization is read: the label `gpu.<uuid>.util_method`.
const UTIL_INTERVAL_MEAN: &str = "interval_mean";
const UTIL_INSTANTANEOUS: &str = "instantaneous";

struct Gpu {
    device: Device<'static>,
    kind: Kind,
    inv: Inventory,
    health: Health,
    gpm: Gpm,
    /// Newest per-process utilization timestamp seen (µs), the start of the next window.
    putil_seen_us: Option<u64>,
    /// Kernel and memory utilization sample buffers: entries read and where the last batch
    /// stopped.
    util_win: UtilWindow,
    mem_win: UtilWindow,
    /// The `util_method` and `mem_util_method` labels last handed out.
    util_method: Option<(&'static str, &'static str)>,
    lost: bool,
}

struct Reader {
    nvml: &'static Nvml,
    host: String,
    gpus: Vec<Gpu>,
    /// Indices of GPUs that could not be opened; retried now and then.
    unopened: Vec<u32>,
    labels: BTreeMap<String, String>,
    /// The labels changed since they were last handed out (the collector keeps the newest per
    /// host, so they are not copied into every reading).
    labels_changed: bool,
    events: Option<EventSet<'static>>,
    procs: ProcTable,
    notes: Notes,
    process_util_every: u32,
    energy_every: u32,
    gract_every: u32,
    util_window: super::UtilWindowMode,
    interval: Duration,
    poll: u64,
    totals: Totals,
}

fn opt_str(r: Result<Option<String>, Gone>) -> Option<String> {
    r.ok().flatten().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

impl Reader {
    fn open(nvml: &'static Nvml, opts: &SourceOptions) -> Result<Self, SourceError> {
        let count = nvml
            .device_count()
            .map_err(|e| SourceError::Nvml(format!("NVML cannot count the GPUs: {e}; does nvidia-smi work?")))?;
        if count == 0 {
            return Err(SourceError::Nvml(format!("NVML sees no GPU on this host; {NO_NVML_HINT}")));
        }
        let mut labels = BTreeMap::new();
        let driver = nvml.sys_driver_version().ok();
        // NVML loads libcuda.so at init anyway (measured: agent/examples/nvml-rss.rs), so asking
        // it for the CUDA version costs no memory.
        let cuda = nvml.sys_cuda_driver_version().ok().map(cuda_version);
        let nvml_version = nvml.sys_nvml_version().ok();
        for (k, v) in [("nvml.driver_version", &driver), ("nvml.cuda_version", &cuda), ("nvml.version", &nvml_version)]
        {
            if let Some(v) = v {
                labels.insert(k.to_string(), v.clone());
            }
        }
        tracing::info!(
            gpus = count,
            driver = driver.as_deref().unwrap_or("?"),
            cuda = cuda.as_deref().unwrap_or("?"),
            nvml = nvml_version.as_deref().unwrap_or("?"),
            "NVML ready"
        );
        let mut r = Reader {
            nvml,
            host: local_host_name(opts),
            gpus: Vec::new(),
            unopened: Vec::new(),
            labels,
            labels_changed: true,
            events: nvml.create_event_set().ok(),
            procs: ProcTable::new(&opts.proc_root).with_label_vars(opts.label_from_env.clone()),
            notes: Notes::new(),
            process_util_every: opts.process_util_every,
            energy_every: opts.energy_every,
            gract_every: opts.gract_every,
            util_window: opts.util_window,
            interval: opts.interval,
            poll: 0,
            totals: Totals::default(),
        };
        if r.events.is_none() {
            tracing::warn!("NVML event sets are not available: XID errors will not be logged");
        }
        for i in 0..count {
            if let Err(e) = r.add_gpu(i) {
                tracing::error!(index = i, error = %e, "cannot open this GPU; the others will be read, it is retried every minute");
                r.unopened.push(i);
            }
        }
        if r.gpus.is_empty() {
            return Err(SourceError::Nvml(format!("NVML sees {count} GPU(s) but none could be opened")));
        }
        Ok(r)
    }

    /// Opens GPU `index` (and its MIG instances), reads its inventory, primes GPM.
    fn add_gpu(&mut self, index: u32) -> Result<(), NvmlError> {
        let device = self.nvml.device_by_index(index)?;
        let uuid = device.uuid()?;
        let mut health = Health { uuid: uuid.clone(), ..Default::default() };
        let notes = &mut self.notes;
        let mem = health.read(notes, "mem_total_bytes", || device.memory_info()).ok().flatten();
        let cc = health.read(notes, "compute_capability", || device.cuda_compute_capability()).ok().flatten();
        let cores = health.read(notes, "cuda_cores", || device.num_cores()).ok().flatten();
        let arch = health.read(notes, "architecture", || device.architecture()).ok().flatten();
        let mig = health.read(notes, "mig_mode", || device.mig_mode()).ok().flatten().map(|m| m.current == 1);
        let gpm_support = device.gpm_support();
        let inv = Inventory {
            index: Some(index),
            uuid: uuid.clone(),
            name: opt_str(health.read(notes, "name", || device.name())),
            serial: opt_str(health.read(notes, "serial", || device.serial())),
            board_part_number: opt_str(health.read(notes, "board_part_number", || device.board_part_number())),
            pci_bus_id: health.read(notes, "pci_bus_id", || device.pci_info()).ok().flatten().map(|p| p.bus_id),
            mem_total_bytes: mem.map(|m| m.total),
            power_limit_w: health
                .read(notes, "power_limit_w", || device.enforced_power_limit())
                .ok()
                .flatten()
                .map(|mw| f64::from(mw) / 1000.0),
            max_sm_clock_mhz: health
                .read(notes, "max_sm_clock_mhz", || device.max_clock_info(Clock::SM))
                .ok()
                .flatten(),
            max_mem_clock_mhz: health
                .read(notes, "max_mem_clock_mhz", || device.max_clock_info(Clock::Memory))
                .ok()
                .flatten(),
            cuda_cores: cores,
            compute_capability: cc.as_ref().map(|c| (c.major, c.minor)),
            architecture: arch.as_ref().map(|a| a.to_string()),
            sm_count: match (cores, &cc) {
                (Some(n), Some(c)) => sm_count(n, (c.major, c.minor)),
                _ => None,
            },
            mig_enabled: mig,
            mig_parent: None,
            gpm: Some(matches!(gpm_support, Ok(true))),
        };
        let gpm_enabled = match gpm_support {
            Ok(true) => true,
            Ok(false) | Err(NvmlError::NotSupported) => {
                tracing::warn!(gpu = %uuid, architecture = inv.architecture.as_deref().unwrap_or("?"),
                    "GPM needs Hopper or newer: SM activity, occupancy, tensor, DRAM, pipe and PCIe/NVLink \
                     throughput are absent (null) on this GPU; dcgm-exporter (--source dcgm:URL) reads them on older GPUs");
                false
            }
            Err(e) => {
                tracing::warn!(gpu = %uuid, reason = %explain(&e),
                    "GPM is not available (needs Hopper or newer and a driver ≥ 520); its fields are absent (null)");
                false
            }
        };
        tracing::info!(index, uuid = %uuid, name = inv.name.as_deref().unwrap_or("?"),
            serial = inv.serial.as_deref().unwrap_or("?"), pci = inv.pci_bus_id.as_deref().unwrap_or("?"),
            mem_total_bytes = inv.mem_total_bytes, power_limit_w = inv.power_limit_w,
            max_sm_clock_mhz = inv.max_sm_clock_mhz, max_mem_clock_mhz = inv.max_mem_clock_mhz,
            architecture = inv.architecture.as_deref().unwrap_or("?"),
            compute_capability = ?inv.compute_capability, sm_count = inv.sm_count, cuda_cores = inv.cuda_cores,
            mig = ?inv.mig_enabled, gpm = gpm_enabled, "GPU");
        if let Some(set) = self.events.take() {
            self.events = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(set) => Some(set),
                Err(e) => {
                    // The crate released the set: make a new one for the other GPUs.
                    tracing::warn!(gpu = %uuid, error = %e.error, "cannot watch this GPU for XID errors");
                    self.nvml.create_event_set().ok()
                }
            };
        }
        self.labels.extend(inv.labels());
        self.labels_changed = true;
        let mig_on = mig == Some(true);
        self.read_gpu(device, Kind::Physical, inv, health, gpm_enabled);
        if mig_on {
            self.add_mig_instances(index);
        }
        Ok(())
    }

    /// Starts reading a GPU (physical or MIG instance): its GPM and utilization sample buffers
    /// are primed so that the first reading has a window to measure.
    fn read_gpu(&mut self, device: Device<'static>, kind: Kind, inv: Inventory, health: Health, gpm_enabled: bool) {
        let mut gpu = Gpu {
            device,
            kind,
            inv,
            health,
            gpm: Gpm::new(gpm_enabled, self.gract_every),
            putil_seen_us: None,
            util_win: UtilWindow::new(),
            mem_win: UtilWindow::new(),
            util_method: None,
            lost: false,
        };
        prime_gpm(&mut gpu, &mut self.notes);
        prime_util(&mut gpu, self.util_window, &mut self.notes);
        self.gpus.push(gpu);
    }

    /// Every MIG instance of the physical GPU at `index` as a GPU of its own.
    fn add_mig_instances(&mut self, index: u32) {
        let Some(pos) = self.gpus.iter().position(|g| g.inv.index == Some(index) && matches!(g.kind, Kind::Physical))
        else {
            return;
        };
        let parent_uuid = self.gpus[pos].inv.uuid.clone();
        let parent_gpm = self.gpus[pos].gpm.enabled;
        let max = match self.gpus[pos].device.mig_device_count() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(gpu = %parent_uuid, error = %e, "MIG is on but its instances cannot be listed");
                return;
            }
        };
        let mut found = 0;
        for i in 0..max {
            let dev = match self.gpus[pos].device.mig_device_by_index(i) {
                Ok(d) => d,
                Err(NvmlError::NotFound) | Err(NvmlError::InvalidArg) => continue,
                Err(e) => {
                    tracing::warn!(gpu = %parent_uuid, mig_index = i, error = %e, "cannot open a MIG instance");
                    continue;
                }
            };
            let Ok(uuid) = dev.uuid() else { continue };
            let mut health = Health { uuid: uuid.clone(), ..Default::default() };
            let inv = Inventory {
                index: Some(index),
                uuid: uuid.clone(),
                name: opt_str(health.read(&mut self.notes, "name", || dev.name())),
                mem_total_bytes: health
                    .read(&mut self.notes, "mem_total_bytes", || dev.memory_info())
                    .ok()
                    .flatten()
                    .map(|m| m.total),
                mig_parent: Some(parent_uuid.clone()),
                gpm: Some(parent_gpm),
                ..Default::default()
            };
            tracing::info!(parent = %parent_uuid, uuid = %uuid, name = inv.name.as_deref().unwrap_or("?"),
                mem_total_bytes = inv.mem_total_bytes, "MIG instance, reported as its own GPU");
            self.labels.extend(inv.labels());
            self.labels_changed = true;
            self.read_gpu(dev, Kind::Mig, inv, health, parent_gpm);
            found += 1;
        }
        if found == 0 {
            tracing::warn!(gpu = %parent_uuid, "MIG is on but no instance exists yet; restart the agent after creating them");
        }
    }

    /// The XID errors NVML queued since the last poll, as events for the server (and logged).
    fn drain_events(&mut self, ts_ms: i64, out: &mut Vec<GpuEvent>) {
        let Some(set) = &self.events else { return };
        for _ in 0..MAX_EVENTS_PER_POLL {
            match set.wait(0) {
                Ok(ev) => {
                    let Ok(uuid) = ev.device.uuid() else {
                        tracing::error!("XID error reported by the NVIDIA driver on a GPU without a UUID");
                        continue;
                    };
                    let xid = match ev.event_data {
                        Some(XidError::Value(xid)) => {
                            tracing::error!(gpu = %uuid, xid, "XID error reported by the NVIDIA driver");
                            Some(xid)
                        }
                        _ => {
                            tracing::error!(gpu = %uuid, "XID error (number unknown) reported by the NVIDIA driver");
                            None
                        }
                    };
                    out.push(GpuEvent { ts_ms, uuid, kind: GpuEventKind::Xid, xid, message: None });
                }
                Err(NvmlError::Timeout) => return,
                Err(e) => {
                    if self.notes.every("events", "wait", REPEAT_AFTER) {
                        tracing::warn!(error = %e, "cannot read NVML events");
                    }
                    return;
                }
            }
        }
    }

    fn poll(&mut self) -> HostSamples {
        self.poll += 1;
        let mut t = PollTiming::default();
        let cpu0 = timing::thread_cpu();
        let t0 = Instant::now();
        if self.poll.is_multiple_of(REOPEN_EVERY) && !self.unopened.is_empty() {
            for i in std::mem::take(&mut self.unopened) {
                match self.add_gpu(i) {
                    Ok(()) => tracing::info!(index = i, "GPU opened"),
                    Err(_) => self.unopened.push(i),
                }
            }
        }
        let ts_ms = now_ms();
        let mut events = Vec::new();
        t.time(Group::Events, || self.drain_events(ts_ms, &mut events));
        let flags = Flags {
            ts_ms,
            energy: due(self.poll, self.energy_every),
            process_util: due(self.poll, self.process_util_every),
            gract: due(self.poll, self.gract_every),
            window: self.interval * self.process_util_every.max(1),
            util_window: self.util_window,
        };
        let mut samples = Vec::with_capacity(self.gpus.len());
        let mut alive = HashSet::new();
        for gpu in &mut self.gpus {
            match read_gpu(gpu, self.nvml, &flags, &mut self.notes, &mut self.procs, &mut t) {
                Ok(s) => {
                    let no_buffer = gpu.health.unsupported.contains(UTIL_SAMPLES);
                    let method = |on: bool| if on && !no_buffer { UTIL_INTERVAL_MEAN } else { UTIL_INSTANTANEOUS };
                    let methods = (
                        method(flags.util_window != super::UtilWindowMode::Off),
                        method(flags.util_window == super::UtilWindowMode::Both),
                    );
                    if gpu.util_method != Some(methods) {
                        gpu.util_method = Some(methods);
                        let uuid = &gpu.inv.uuid;
                        self.labels.insert(format!("gpu.{uuid}.util_method"), methods.0.to_string());
                        self.labels.insert(format!("gpu.{uuid}.mem_util_method"), methods.1.to_string());
                        self.labels_changed = true;
                    }
                    if let Some(change) = gpu.gpm.change.take() {
                        events.push(gpm_event(&gpu.inv.uuid, flags.ts_ms, change));
                    }
                    if gpu.lost {
                        gpu.lost = false;
                        self.notes.clear(&gpu.inv.uuid, "gone");
                        tracing::info!(gpu = %gpu.inv.uuid, "GPU answers again");
                        events.push(GpuEvent {
                            ts_ms: flags.ts_ms,
                            uuid: gpu.inv.uuid.clone(),
                            kind: GpuEventKind::GpuRecovered,
                            xid: None,
                            message: None,
                        });
                    }
                    if let Some(p) = &s.processes {
                        alive.extend(p.iter().map(|p| p.pid));
                    }
                    samples.push(s);
                }
                Err(Gone(e)) => {
                    if !gpu.lost {
                        events.push(GpuEvent {
                            ts_ms: flags.ts_ms,
                            uuid: gpu.inv.uuid.clone(),
                            kind: GpuEventKind::GpuLost,
                            xid: None,
                            message: Some(format!("NVML: {e}")),
                        });
                    }
                    gpu.lost = true;
                    gpu.gpm.prev = None;
                    gpu.util_win = UtilWindow::new();
                    gpu.mem_win = UtilWindow::new();
                    gpu.gpm.gract_base = None;
                    if self.notes.every(&gpu.inv.uuid, "gone", REPEAT_AFTER) {
                        tracing::error!(gpu = %gpu.inv.uuid, index = ?gpu.inv.index, error = %e,
                            "GPU is not answering (fallen off the bus?); no samples from it until it does, \
                             the other GPUs keep reporting");
                    }
                }
            }
        }
        self.procs.retain(&alive);
        let wall = t0.elapsed();
        let cpu = match (cpu0, timing::thread_cpu()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        self.totals.add(wall, cpu, &t);
        if tracing::enabled!(tracing::Level::DEBUG) {
            let us = |d: Duration| d.as_micros() as u64;
            let g = |x: Group| us(t.wall[x as usize]);
            tracing::debug!(
                poll = self.poll,
                gpus = samples.len(),
                wall_us = us(wall),
                cpu_us = cpu.map(us),
                basic_us = g(Group::Basic),
                energy_us = g(Group::Energy),
                gpm_sample_us = g(Group::GpmSample),
                gpm_metrics_us = g(Group::GpmMetrics),
                processes_us = g(Group::Processes),
                process_util_us = g(Group::ProcessUtil),
                procfs_us = g(Group::Procfs),
                events_us = g(Group::Events),
                energy_read = flags.energy,
                process_util_read = flags.process_util,
                "nvml poll timing"
            );
        }
        if self.poll.is_multiple_of(SUMMARY_EVERY) {
            let tot = std::mem::take(&mut self.totals);
            tracing::info!(polls = tot.polls, gpus = self.gpus.len(),
                wall_ms_per_poll = format!("{:.3}", tot.per_poll_ms(tot.wall)),
                cpu_ms_per_poll = if tot.cpu_known { format!("{:.3}", tot.per_poll_ms(tot.cpu)) } else { "?".into() },
                ms_per_call = %tot.per_call_summary(), "NVML reading cost");
        }
        let mut hs = HostSamples::new(self.host.clone(), samples);
        hs.events = events;
        if std::mem::take(&mut self.labels_changed) {
            hs.labels = self.labels.clone();
        }
        hs
    }
}

impl Reader {
    /// Gives the samples about to be sealed into a batch (this host's, any GPUs, as read) their
    /// kernel (and with `both`, memory) utilization as the mean over each poll's interval: one
    /// read of each sample buffer per GPU, its entries split among the GPU's polls. A poll the
    /// entries do not reach keeps its instantaneous reading.
    fn finish(&mut self, samples: &mut [Sample]) {
        if self.util_window == super::UtilWindowMode::Off {
            return;
        }
        let both = self.util_window == super::UtilWindowMode::Both;
        let interval_us = u64::try_from(self.interval.as_micros()).unwrap_or(u64::MAX);
        let mut t = PollTiming::default();
        let cpu0 = timing::thread_cpu();
        let notes = &mut self.notes;
        for gpu in &mut self.gpus {
            if gpu.lost || gpu.health.unsupported.contains(UTIL_SAMPLES) {
                continue;
            }
            let mut mine: Vec<usize> = (0..samples.len()).filter(|&i| samples[i].uuid == gpu.inv.uuid).collect();
            if mine.is_empty() {
                continue;
            }
            mine.sort_by_key(|&i| samples[i].ts_ms);
            let ends: Vec<u64> =
                mine.iter().map(|&i| u64::try_from(samples[i].ts_ms).unwrap_or(0).saturating_mul(1000)).collect();
            let (h, dev) = (&mut gpu.health, &gpu.device);
            let (util_win, mem_win) = (&mut gpu.util_win, &mut gpu.mem_win);
            let read = t.time(Group::UtilSamples, || -> Result<(), Gone> {
                read_util_buffer(h, notes, dev, Sampling::GpuUtilization, util_win)?;
                if both {
                    read_util_buffer(h, notes, dev, Sampling::MemoryUtilization, mem_win)?;
                }
                Ok(())
            });
            if read.is_err() {
                // The GPU stopped answering: the next poll says so; these keep what was read.
                continue;
            }
            for (k, m) in util_win.split(&ends, interval_us).into_iter().enumerate() {
                if let Some(v) = m.and_then(|m| super::pct(m.mean_pct)) {
                    samples[mine[k]].gpu_util_pct = Some(v);
                }
            }
            if both {
                for (k, m) in mem_win.split(&ends, interval_us).into_iter().enumerate() {
                    if let Some(v) = m.and_then(|m| super::pct(m.mean_pct)) {
                        samples[mine[k]].mem_util_pct = Some(v);
                    }
                }
            }
        }
        let cpu = match (cpu0, timing::thread_cpu()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        self.totals.add_side(cpu, &t);
    }
}

/// The NVML source's [`Finisher`]: the reader itself, between polls.
struct NvmlFinisher {
    reader: Arc<Mutex<Reader>>,
    /// Whether sample buffers are read (not `--nvml-util-window off`).
    buffers: bool,
}

impl Finisher for NvmlFinisher {
    fn finish(&self, samples: &mut [Sample]) {
        if !self.buffers {
            return;
        }
        // The driver's period that holds the newest poll must end before the buffer has an
        // entry reaching it: wait for it (the batch goes out that much later), not for the lock.
        if let Some(newest) = samples.iter().map(|s| s.ts_ms).max() {
            let wait = util_window::SEAL_WAIT;
            let left = (newest + wait.as_millis() as i64 - now_ms()).clamp(0, wait.as_millis() as i64);
            std::thread::sleep(Duration::from_millis(left as u64));
        }
        self.reader.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).finish(samples);
    }
}

/// What this poll reads.
struct Flags {
    ts_ms: i64,
    energy: bool,
    process_util: bool,
    /// GRACT's window ends this poll (`--nvml-gract-every` > 1).
    gract: bool,
    /// Span of the per-process utilization window (for the first read).
    window: Duration,
    util_window: super::UtilWindowMode,
}

/// The `health` key of the utilization sample buffer: once NVML says the GPU has none, the
/// instantaneous reading is used for good.
const UTIL_SAMPLES: &str = "util_samples";

/// The event for a change of a GPU's GPM counters, logged as well.
fn gpm_event(uuid: &str, ts_ms: i64, change: Change) -> GpuEvent {
    let (kind, message) = match change {
        Change::Unavailable(reason) => {
            tracing::warn!(gpu = %uuid, reason = %reason,
                "GPM counters unavailable: SM activity, occupancy, tensor, DRAM, pipe and PCIe/NVLink fields are \
                 absent (null, never 0) until they count again");
            (GpuEventKind::GpmUnavailable, reason)
        }
        Change::Returned { after_ms } => {
            let text = format!("GPM counters count again after {:.0} s", after_ms as f64 / 1000.0);
            tracing::info!(gpu = %uuid, "{text}");
            (GpuEventKind::GpmAvailable, text)
        }
    };
    GpuEvent { ts_ms, uuid: uuid.to_string(), kind, xid: None, message: Some(message) }
}

/// Reads one utilization sample buffer from where its window stands and keeps the new entries
/// for the batch's seal. Where the GPU has no buffer, NVML says so once (logged, not asked again)
/// and the instantaneous reading stays.
fn read_util_buffer(
    h: &mut Health,
    notes: &mut Notes,
    dev: &Device<'static>,
    kind: Sampling,
    win: &mut UtilWindow,
) -> Result<(), Gone> {
    let since = win.since();
    let got = h.read(notes, UTIL_SAMPLES, || match dev.samples(kind, since) {
        // Nothing newer than `since` in the buffer.
        Err(NvmlError::NotFound) => Ok(Vec::new()),
        other => other,
    })?;
    if let Some(entries) = got {
        let points: Vec<UtilPoint> = entries
            .iter()
            .map(|e| {
                let pct = match e.value {
                    SampleValue::U32(v) => f64::from(v),
                    SampleValue::U64(v) => v as f64,
                    SampleValue::I64(v) => v as f64,
                    SampleValue::F64(v) => v,
                };
                UtilPoint { ts_us: e.timestamp, pct }
            })
            .collect();
        win.hold(&points);
    }
    Ok(())
}

/// Reads the whole sample buffer(s) once at start: whether the GPU has them (so the first
/// batch's label is right), how far back they reach, and the entries before the first poll.
fn prime_util(gpu: &mut Gpu, mode: super::UtilWindowMode, notes: &mut Notes) {
    let (h, dev) = (&mut gpu.health, &gpu.device);
    if mode != super::UtilWindowMode::Off {
        let _ = read_util_buffer(h, notes, dev, Sampling::GpuUtilization, &mut gpu.util_win);
    }
    if mode == super::UtilWindowMode::Both {
        let _ = read_util_buffer(h, notes, dev, Sampling::MemoryUtilization, &mut gpu.mem_win);
    }
    tracing::debug!(gpu = %gpu.inv.uuid, reach_us = gpu.util_win.reach_us(), entries = gpu.util_win.held(),
        "utilization sample buffer");
}

/// Takes the first GPM sample, so the first poll already has an interval to report on.
fn prime_gpm(gpu: &mut Gpu, notes: &mut Notes) {
    if !gpu.gpm.enabled {
        return;
    }
    let dev = &gpu.device;
    match gpu.health.read(notes, "gpm", || dev.gpm_sample()) {
        Ok(Some(s)) => {
            gpu.gpm.prev = Some(s);
            if gpu.gpm.gract_every > 1 {
                gpu.gpm.gract_base = dev.gpm_sample().ok();
            }
        }
        Ok(None) => {
            // Said once by `read`; with MIG, say what it means.
            if matches!(gpu.kind, Kind::Mig) {
                tracing::warn!(gpu = %gpu.inv.uuid,
                    "GPM per MIG instance is not available through this driver/NVML binding; the instance's \
                     SM activity & co. are absent (null)");
            }
            gpu.gpm.enabled = false;
        }
        Err(_) => {}
    }
}

/// Reads one GPU. `Err(Gone)` skips its sample.
fn read_gpu(
    gpu: &mut Gpu,
    nvml: &'static Nvml,
    f: &Flags,
    notes: &mut Notes,
    procs: &mut ProcTable,
    t: &mut PollTiming,
) -> Result<Sample, Gone> {
    let mut s = Sample {
        ts_ms: f.ts_ms,
        uuid: gpu.inv.uuid.clone(),
        gpu_index: gpu.inv.index,
        name: gpu.inv.name.clone(),
        ..Default::default()
    };
    let dev = &gpu.device;
    let h = &mut gpu.health;
    let physical = matches!(gpu.kind, Kind::Physical);
    t.time(Group::Basic, || -> Result<(), Gone> {
        if let Some(mem) = h.read(notes, "mem_used_bytes", || dev.memory_info())? {
            s.mem_used_bytes = i64::try_from(mem.used).ok();
            s.mem_total_bytes = i64::try_from(mem.total).ok();
        }
        Ok(())
    })?;
    // Utilization: the instantaneous reading (the driver's newest 200-ms period) for now; the
    // batch's seal replaces it with the mean over this poll's interval where the sample buffer
    // has entries for it ([`Reader::finish`]). A batch longer than half the buffer has it read
    // in between, so that no entry falls out unread.
    let buffers = f.util_window != super::UtilWindowMode::Off && !h.unsupported.contains(UTIL_SAMPLES);
    let now_us = u64::try_from(f.ts_ms).unwrap_or(0).saturating_mul(1000);
    let (util_win, mem_win) = (&mut gpu.util_win, &mut gpu.mem_win);
    let mem_due = f.util_window == super::UtilWindowMode::Both && mem_win.read_due(now_us);
    if buffers && (util_win.read_due(now_us) || mem_due) {
        t.time(Group::UtilSamples, || -> Result<(), Gone> {
            if util_win.read_due(now_us) {
                read_util_buffer(h, notes, dev, Sampling::GpuUtilization, util_win)?;
            }
            if mem_due {
                read_util_buffer(h, notes, dev, Sampling::MemoryUtilization, mem_win)?;
            }
            Ok(())
        })?;
    }
    t.time(Group::Basic, || -> Result<(), Gone> {
        if let Some(u) = h.read(notes, "gpu_util_pct", || dev.utilization_rates())? {
            s.gpu_util_pct = super::pct(f64::from(u.gpu));
            s.mem_util_pct = super::pct(f64::from(u.memory));
        }
        if physical {
            s.power_w = h.read(notes, "power_w", || dev.power_usage())?.map(|mw| f64::from(mw) / 1000.0);
            s.power_limit_w =
                h.read(notes, "power_limit_w", || dev.enforced_power_limit())?.map(|mw| f64::from(mw) / 1000.0);
            s.temp_c = h.read(notes, "temp_c", || dev.temperature(TemperatureSensor::Gpu))?.map(f64::from);
            s.sm_clock_mhz = h.read(notes, "sm_clock_mhz", || dev.clock_info(Clock::SM))?.map(f64::from);
            s.throttle_reasons =
                h.read(notes, "throttle_reasons", || dev.current_throttle_reasons())?.map(|r| r.bits());
        }
        Ok(())
    })?;
    if physical && f.energy {
        s.energy_j = t
            .time(Group::Energy, || h.read(notes, "energy_j", || dev.total_energy_consumption()))?
            .map(|mj| mj as f64 / 1000.0);
    }
    if gpu.gpm.enabled {
        read_gpm(&mut s, dev, h, &mut gpu.gpm, nvml, f, notes, t)?;
    }
    // Processes: who holds the GPU, and (every N polls) how much SM time each used.
    let list = t.time(Group::Processes, || h.read(notes, "processes", || dev.running_compute_processes()))?;
    if let Some(list) = list {
        let util = if f.process_util {
            let since = gpu
                .putil_seen_us
                .unwrap_or_else(|| (now_ms() as u64).saturating_mul(1000).saturating_sub(f.window.as_micros() as u64));
            let got = t.time(Group::ProcessUtil, || {
                h.read(notes, "process_sm_pct", || match dev.process_utilization_stats(since) {
                    // No sample in the window: nothing ran.
                    Err(NvmlError::NotFound) => Ok(Vec::new()),
                    other => other,
                })
            })?;
            got.map(|samples| {
                let raw: Vec<(u32, u64, u32)> = samples.iter().map(|p| (p.pid, p.timestamp, p.sm_util)).collect();
                let (per_pid, newest) = aggregate_process_util(&raw, since);
                gpu.putil_seen_us = Some(newest);
                per_pid
            })
        } else {
            None
        };
        let out = t.time(Group::Procfs, || {
            list.iter()
                .map(|p| {
                    let info = procs.get(p.pid);
                    GpuProcess {
                        pid: p.pid,
                        used_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => i64::try_from(b).ok(),
                            UsedGpuMemory::Unavailable => None,
                        },
                        // Read this poll: the process's mean SM % over the window, 0 where NVML
                        // holds no sample for it (it ran nothing). Not read: absent.
                        sm_pct: util.as_ref().map(|u| u.get(&p.pid).copied().unwrap_or(0.0)),
                        command: info.command,
                        user: info.user,
                        container_id: info.container_id,
                        owner: info.owner,
                    }
                })
                .collect::<Vec<_>>()
        });
        s.processes = Some(out);
    }
    Ok(s)
}

type MetricResults = Result<Vec<Result<nvml_wrapper::struct_wrappers::gpm::GpmMetricResult, NvmlError>>, NvmlError>;

/// GPM between the previous poll's sample and this one. Every failure but a lost GPU leaves the
/// fields absent and goes to the counter watch, which also catches values that cannot be true
/// (another profiler holding the counters): see [`counters`].
#[allow(clippy::too_many_arguments)]
fn read_gpm(
    s: &mut Sample,
    dev: &Device<'static>,
    h: &mut Health,
    g: &mut Gpm,
    nvml: &'static Nvml,
    f: &Flags,
    notes: &mut Notes,
    t: &mut PollTiming,
) -> Result<(), Gone> {
    let now = match t.time(Group::GpmSample, || dev.gpm_sample()) {
        Ok(now) => Some(now),
        Err(e) if is_gone(&e) => return Err(Gone(e)),
        Err(e) => {
            if notes.every(&h.uuid, "gpm_sample", REPEAT_AFTER) {
                tracing::warn!(gpu = %h.uuid, error = %e, "GPM sample failed; GPM fields absent in this sample");
            }
            g.watch_poll(GpmPoll::Failed(format!("GPM sample: {e}")), s, f.ts_ms);
            g.prev = None;
            g.gract_base = None;
            return Ok(());
        }
    };
    let prev = std::mem::replace(&mut g.prev, now);
    let now = g.prev.as_ref().expect("just stored");
    // Every poll: the metrics between the previous poll's sample and this one.
    let mut got: Vec<(gpm::GpmField, Option<f64>)> = Vec::new();
    let mut failed: Option<String> = None;
    if let Some(prev) = prev {
        let fields = if g.gract_every == 1 { &gpm::GPM_FIELDS[..] } else { gpm::WITHOUT_GRACT };
        let ids: Vec<_> = fields.iter().map(|f| f.id).collect();
        let results = t.time(Group::GpmMetrics, || gpm_metrics_get(nvml, &prev, now, &ids));
        match collect_gpm(h, notes, fields, results, !g.units_logged)? {
            Ok(values) => got.extend(values),
            Err(e) => failed = Some(e),
        }
        g.units_logged = true;
    }
    // Every N polls: GRACT over the N polls since the window's first sample; the next window
    // starts with a sample of its own (the poll's sample is kept for the next poll).
    if g.gract_every > 1 && f.gract {
        if let Some(base) = g.gract_base.take() {
            let results = t.time(Group::GpmMetrics, || gpm_metrics_get(nvml, &base, now, &[gpm::GRACT[0].id]));
            if let Ok(values) = collect_gpm(h, notes, gpm::GRACT, results, false)? {
                got.extend(values);
            }
        }
        g.gract_base = t.time(Group::GpmSample, || dev.gpm_sample()).ok();
    }
    if let Some(e) = failed {
        g.watch_poll(GpmPoll::Failed(e), s, f.ts_ms);
    } else if !got.is_empty() {
        let percents = got.iter().filter(|(field, _)| field.is_percent()).map(|(_, v)| *v).collect();
        if g.watch_poll(GpmPoll::Read(percents), s, f.ts_ms) {
            for (field, v) in got {
                field.apply(s, v);
            }
        }
    }
    Ok(())
}

impl Gpm {
    /// Steps the counter watch with this poll's reading; true when its values may be reported.
    /// A change is kept for the poll's events.
    fn watch_poll(&mut self, poll: GpmPoll, s: &Sample, ts_ms: i64) -> bool {
        let (report, change) = self.watch.observe(&poll, s.gpu_util_pct, ts_ms);
        if change.is_some() {
            self.change = change;
        }
        report
    }
}

/// The values of one `gpm_metrics_get`, or why the whole call failed; a metric that could not
/// be had alone is absent (said once per GPU); a GPU that stopped answering is `Gone`.
#[allow(clippy::type_complexity)]
fn collect_gpm(
    h: &Health,
    notes: &mut Notes,
    fields: &[gpm::GpmField],
    results: MetricResults,
    log_units: bool,
) -> Result<Result<Vec<(gpm::GpmField, Option<f64>)>, String>, Gone> {
    let results = match results {
        Ok(r) => r,
        Err(e) if is_gone(&e) => return Err(Gone(e)),
        Err(e) => {
            if notes.every(&h.uuid, "gpm_metrics", REPEAT_AFTER) {
                tracing::warn!(gpu = %h.uuid, error = %e, "GPM metrics could not be computed; absent in this sample");
            }
            return Ok(Err(format!("GPM metrics: {e}")));
        }
    };
    let mut out = Vec::with_capacity(fields.len());
    for (field, r) in fields.iter().zip(results) {
        match r {
            Ok(m) => {
                if log_units {
                    tracing::debug!(gpu = %h.uuid, metric = ?m.metric_id, field = field.field,
                        unit = %m.metric_info.unit, name = %m.metric_info.long_name, "GPM metric");
                }
                out.push((*field, Some(m.value)));
            }
            Err(e) => {
                if notes.first(&h.uuid, field.field) {
                    tracing::warn!(gpu = %h.uuid, metric = ?field.id, field = field.field, reason = %explain(&e),
                        "GPM metric not available on this GPU; reported as absent (null), never 0");
                }
                out.push((*field, None));
            }
        }
    }
    Ok(Ok(out))
}

/// Mean SM % per PID over the samples newer than `since` (µs), and the newest timestamp seen
/// (the next window's start).
pub fn aggregate_process_util(samples: &[(u32, u64, u32)], since: u64) -> (HashMap<u32, f64>, u64) {
    let mut sums: HashMap<u32, (f64, u32)> = HashMap::new();
    let mut newest = since;
    for &(pid, ts, sm) in samples {
        if ts <= since {
            continue;
        }
        newest = newest.max(ts);
        let e = sums.entry(pid).or_insert((0.0, 0));
        e.0 += f64::from(sm.min(100));
        e.1 += 1;
    }
    (sums.into_iter().map(|(pid, (sum, n))| (pid, sum / f64::from(n))).collect(), newest)
}

/// The NVML source: a blocking reader behind a mutex, polled on a blocking thread once per
/// interval (NVML calls sleep in the driver for milliseconds; they must not stall the runtime).
pub struct NvmlSource {
    reader: Arc<Mutex<Reader>>,
    ticker: Ticker,
    interval: Duration,
    started: bool,
    describe: String,
    /// Whether utilization sample buffers are read (its finisher has work).
    buffers: bool,
}

impl NvmlSource {
    pub fn open(opts: &SourceOptions) -> Result<Self, SourceError> {
        let nvml = init(opts.nvml_lib.as_deref())?;
        let reader = Reader::open(nvml, opts)?;
        let describe = format!(
            "nvml ({} GPU{}, every {}; energy every {} polls, process SM % every {} polls, GRACT every {} polls)",
            reader.gpus.len(),
            if reader.gpus.len() == 1 { "" } else { "s" },
            humantime::format_duration(opts.interval),
            opts.energy_every,
            opts.process_util_every,
            opts.gract_every,
        );
        Ok(Self {
            reader: Arc::new(Mutex::new(reader)),
            ticker: Ticker::new(opts.interval),
            interval: opts.interval,
            started: false,
            describe,
            buffers: opts.util_window != super::UtilWindowMode::Off,
        })
    }
}

#[async_trait]
impl GpuSource for NvmlSource {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn is_live(&self) -> bool {
        true
    }

    async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
        if !self.started {
            // GPM was primed at open: let one interval (at most a second) pass, so that even the
            // first sample carries SM activity & co.
            tokio::time::sleep(self.interval.min(Duration::from_secs(1))).await;
            self.started = true;
        }
        self.ticker.tick().await;
        let reader = self.reader.clone();
        let hs = tokio::task::spawn_blocking(move || {
            let mut r = reader.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            r.poll()
        })
        .await
        .map_err(|e| SourceError::Failed(format!("the NVML reader panicked: {e}")))?;
        Ok(Some(vec![hs]))
    }

    fn finisher(&self) -> Option<Arc<dyn Finisher>> {
        Some(Arc::new(NvmlFinisher { reader: self.reader.clone(), buffers: self.buffers }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_every_n_polls() {
        let polls: Vec<u64> = (1..=10).filter(|p| due(*p, 3)).collect();
        assert_eq!(polls, [1, 4, 7, 10]);
        assert!((1..=5).all(|p| due(p, 1)));
        assert!(!(1..=5).any(|p| due(p, 0)));
    }

    #[test]
    fn process_util_is_a_mean_over_the_window() {
        let samples = [(10, 100, 50), (10, 200, 100), (11, 150, 30), (10, 50, 99), (12, 90, 70)];
        let (per, newest) = aggregate_process_util(&samples, 90);
        assert_eq!(per.get(&10), Some(&75.0));
        assert_eq!(per.get(&11), Some(&30.0));
        // Samples at or before the window start are old news.
        assert_eq!(per.get(&12), None);
        assert_eq!(newest, 200);
        let (per, newest) = aggregate_process_util(&[], 500);
        assert!(per.is_empty());
        assert_eq!(newest, 500);
        // Out-of-range driver values are capped.
        let (per, _) = aggregate_process_util(&[(1, 10, 250)], 0);
        assert_eq!(per[&1], 100.0);
    }

    #[test]
    fn errors_are_sorted() {
        assert!(is_permanent(&NvmlError::NotSupported));
        assert!(is_permanent(&NvmlError::FunctionNotFound));
        assert!(!is_permanent(&NvmlError::GpuLost));
        assert!(is_gone(&NvmlError::GpuLost));
        assert!(!is_gone(&NvmlError::Unknown));
        assert!(!is_gone(&NvmlError::Timeout) && !is_permanent(&NvmlError::Timeout));
    }

    #[test]
    fn health_says_once_and_stops_asking() {
        let mut notes = Notes::new();
        let mut h = Health { uuid: "GPU-x".into(), ..Default::default() };
        let mut calls = 0;
        for _ in 0..3 {
            let r: Result<Option<u32>, Gone> = h.read(&mut notes, "energy_j", || {
                calls += 1;
                Err(NvmlError::NotSupported)
            });
            assert!(matches!(r, Ok(None)));
        }
        assert_eq!(calls, 1, "an unsupported reading is not asked again");
        // A transient failure is absent this time and tried again next time.
        let r: Result<Option<u32>, Gone> = h.read(&mut notes, "power_w", || Err(NvmlError::Unknown));
        assert!(matches!(r, Ok(None)));
        let r = h.read(&mut notes, "power_w", || Ok(5u32));
        assert!(matches!(r, Ok(Some(5))));
        // A lost GPU is reported as such.
        let r: Result<Option<u32>, Gone> = h.read(&mut notes, "gpu_util_pct", || Err(NvmlError::GpuLost));
        assert!(matches!(r, Err(Gone(NvmlError::GpuLost))));
    }

    #[test]
    fn init_errors_explain_themselves() {
        let e = init(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).err().unwrap().to_string();
        assert!(e.contains("cannot load the NVIDIA management library /nonexistent/libnvidia-ml.so.1"), "{e}");
        assert!(e.contains("--source dcgm:URL"), "{e}");
        assert!(init_error("x", &NvmlError::DriverNotLoaded).contains("not loaded"));
        assert!(init_error("x", &NvmlError::NoPermission).contains("/dev/nvidia"));
    }
}
