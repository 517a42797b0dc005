//! Where the agent's memory and CPU go inside NVML, without the agent around it: one process
//! that makes the agent's NVML calls one group at a time and reports, after each group, its
//! resident memory (anonymous vs. file-backed, from `/proc/self/status`), whether `libcuda.so`
//! is mapped, and the largest mappings; then the cost of each call group over many repetitions
//! (wall time, CPU time of the thread, page faults).
//!
//! ```sh
//! cargo build --release -p fleetlens-agent --example nvml-rss
//! target/release/examples/nvml-rss [REPEAT [no-attach]]   # on a host with an NVIDIA GPU; JSON lines
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::InitFlags;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::gpm_metrics_get;

/// `VmRSS`, `RssAnon`, `RssFile`, `RssShmem`, `VmHWM`, `Threads` of this process (kB).
fn status() -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let keep = ["VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM", "Threads"].contains(&k);
            keep.then(|| Some((k.to_string(), v.split_whitespace().next()?.parse().ok()?)))?
        })
        .collect()
}

/// One mapping of `/proc/self/smaps`.
struct Mapping {
    range: String,
    perms: String,
    name: String,
    size_kib: u64,
    rss_kib: u64,
    anon_kib: u64,
}

fn smaps() -> Vec<Mapping> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let perms = f.next().unwrap_or("").to_string();
            let name = f.nth(3).unwrap_or("[anon]").to_string();
            out.push(Mapping { range: first.to_string(), perms, name, size_kib: 0, rss_kib: 0, anon_kib: 0 });
            continue;
        }
        let (Some(m), Some(v)) = (out.last_mut(), f.next().and_then(|v| v.parse::<u64>().ok())) else { continue };
        match first {
            "Size:" => m.size_kib = v,
            "Rss:" => m.rss_kib = v,
            "Anonymous:" => m.anon_kib = v,
            _ => {}
        }
    }
    out
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// Resident memory now, by file (summed over its mappings) and the largest anonymous mappings.
fn report(step: &str, note: &str) {
    let st = status();
    let maps = smaps();
    let cuda = maps.iter().any(|m| m.name.contains("libcuda"));
    let mut by_file: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for m in &maps {
        let e = by_file.entry(m.name.as_str()).or_default();
        e.0 += m.rss_kib;
        e.1 += m.anon_kib;
    }
    let mut files: Vec<(&str, (u64, u64))> = by_file.into_iter().filter(|(_, (rss, _))| *rss >= 128).collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.1.0));
    let files: Vec<String> = files
        .iter()
        .map(|(n, (rss, anon))| format!("{{\"name\":{},\"rss_kib\":{rss},\"anon_kib\":{anon}}}", json_str(n)))
        .collect();
    let mut anon: Vec<&Mapping> = maps.iter().filter(|m| m.anon_kib >= 512).collect();
    anon.sort_by_key(|m| std::cmp::Reverse(m.anon_kib));
    let anon: Vec<String> = anon
        .iter()
        .take(6)
        .map(|m| {
            format!(
                "{{\"range\":{},\"perms\":{},\"name\":{},\"size_kib\":{},\"rss_kib\":{},\"anon_kib\":{}}}",
                json_str(&m.range),
                json_str(&m.perms),
                json_str(&m.name),
                m.size_kib,
                m.rss_kib,
                m.anon_kib
            )
        })
        .collect();
    let g = |k: &str| st.get(k).copied().unwrap_or(0);
    println!(
        "{{\"step\":{},\"note\":{},\"rss_kib\":{},\"anon_kib\":{},\"file_kib\":{},\"shmem_kib\":{},\"hwm_kib\":{},\"threads\":{},\"libcuda_mapped\":{cuda},\"by_mapping\":[{}],\"largest_anon\":[{}]}}",
        json_str(step),
        json_str(note),
        g("VmRSS"),
        g("RssAnon"),
        g("RssFile"),
        g("RssShmem"),
        g("VmHWM"),
        g("Threads"),
        files.join(","),
        anon.join(",")
    );
}

/// CPU time of this thread (ns, from schedstat) and its minor page faults.
fn thread_cost() -> (u64, u64) {
    let cpu = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let faults = std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|t| {
            let rest = t[t.rfind(')')? + 1..].to_string();
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0);
    (cpu, faults)
}

/// Runs `f` `n` times and prints its mean wall time, CPU time and page faults per call.
fn cost<T>(what: &str, n: u32, mut f: impl FnMut() -> T) {
    let (c0, f0) = thread_cost();
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(f());
    }
    let wall = t0.elapsed();
    // Let the kernel bring the thread's CPU counter up to date (it does at scheduling points).
    std::thread::sleep(Duration::from_millis(2));
    let (c1, f1) = thread_cost();
    let per = |x: f64| x / f64::from(n);
    println!(
        "{{\"cost\":{},\"calls\":{n},\"wall_us_per_call\":{:.1},\"cpu_us_per_call\":{:.1},\"minor_faults_per_call\":{:.2}}}",
        json_str(what),
        per(wall.as_secs_f64() * 1e6),
        per((c1.saturating_sub(c0)) as f64 / 1e3),
        per(f1.saturating_sub(f0) as f64)
    );
}

const GPM: [GpmMetricId; 13] = [
    GpmMetricId::SmUtil,
    GpmMetricId::GraphicsUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp16Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp64Util,
    GpmMetricId::IntegerUtil,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
    GpmMetricId::NvlinkTotalTxPerSec,
    GpmMetricId::NvlinkTotalRxPerSec,
];

fn main() {
    let repeat: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(50);
    // `no-attach`: nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH), GPUs attached on first use.
    let no_attach = std::env::args().nth(2).as_deref() == Some("no-attach");
    report("start", "before NVML is loaded");
    let mut builder = Nvml::builder();
    if no_attach {
        builder.flags(InitFlags::NO_ATTACH);
    }
    let nvml = match builder.init() {
        Ok(n) => n,
        Err(e) => {
            println!("{{\"error\":{}}}", json_str(&format!("NVML init: {e}")));
            std::process::exit(1);
        }
    };
    report("nvml_init", if no_attach { "nvmlInitWithFlags(NO_ATTACH)" } else { "nvmlInit_v2" });
    let Ok(dev) = nvml.device_by_index(0) else {
        println!("{{\"error\":\"no GPU 0\"}}");
        std::process::exit(1);
    };
    let basic = || {
        (
            dev.memory_info().ok(),
            dev.utilization_rates().ok(),
            dev.power_usage().ok(),
            dev.enforced_power_limit().ok(),
            dev.temperature(TemperatureSensor::Gpu).ok(),
            dev.clock_info(Clock::SM).ok(),
            dev.current_throttle_reasons().ok(),
        )
    };
    let _ = (dev.uuid(), dev.name(), dev.serial(), dev.pci_info(), dev.architecture(), dev.num_cores());
    let _ = basic();
    report("device_basic", "device handle, inventory, the 7 basic readings");
    let _ = dev.running_compute_processes();
    report("processes", "running compute processes");
    let gpm = matches!(dev.gpm_support(), Ok(true));
    if gpm {
        let a = dev.gpm_sample();
        std::thread::sleep(Duration::from_millis(100));
        let b = dev.gpm_sample();
        if let (Ok(a), Ok(b)) = (&a, &b) {
            let _ = gpm_metrics_get(&nvml, a, b, &GPM);
        }
        report("gpm", "2 GPM samples kept + metrics");
    }
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
        .saturating_sub(10_000_000);
    let _ = dev.process_utilization_stats(since);
    report("process_util", "process utilization samples");
    let _ = dev.total_energy_consumption();
    report("energy", "total energy counter");
    let events = nvml
        .create_event_set()
        .and_then(|s| dev.register_events(EventTypes::CRITICAL_XID_ERROR, s).map_err(|e| e.error));
    if let Ok(set) = &events {
        let _ = set.wait(0);
    }
    report("events", "XID event set registered and polled");
    let _ = (nvml.sys_driver_version(), nvml.sys_nvml_version());
    report("versions", "driver and NVML versions");
    let cuda = nvml.sys_cuda_driver_version();
    report("cuda_version", &format!("nvmlSystemGetCudaDriverVersion_v2 = {cuda:?}"));

    cost("basic (7 readings)", repeat, basic);
    cost("running_compute_processes", repeat, || dev.running_compute_processes().ok());
    if gpm {
        cost("gpm_sample (alloc + get + free)", repeat, || dev.gpm_sample().ok());
        let a = dev.gpm_sample();
        std::thread::sleep(Duration::from_millis(100));
        let b = dev.gpm_sample();
        if let (Ok(a), Ok(b)) = (&a, &b) {
            cost("gpm_metrics_get (13 metrics)", repeat, || gpm_metrics_get(&nvml, a, b, &GPM).ok());
            // Does the cost grow with the number of metrics asked for?
            cost("gpm_metrics_get (5: SM, GR, occupancy, tensor, DRAM)", repeat, || {
                gpm_metrics_get(&nvml, a, b, &GPM[..5]).ok()
            });
            for id in GPM {
                cost(&format!("gpm_metrics_get (1: {id:?})"), repeat, || gpm_metrics_get(&nvml, a, b, &[id]).ok());
            }
        }
    }
    cost("process_utilization_stats", repeat.min(20), || dev.process_utilization_stats(since).ok());
    cost("total_energy_consumption", repeat.min(20), || dev.total_energy_consumption().ok());
    report("end", "after the cost loops");
}
