//! CPU time and memory of processes from /proc (Linux only).

use std::collections::HashMap;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow};

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every mainstream Linux).
pub fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// `(comm, utime + stime in ticks)` of a process.
fn stat(pid: u32) -> Result<(String, u64)> {
    stat_at(&format!("/proc/{pid}/stat"))
}

/// `(comm, utime + stime)` from a /proc stat file (of a process or of one thread).
fn stat_at(path: &str) -> Result<(String, u64)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    let open = text.find('(').ok_or_else(|| anyhow!("bad {path}"))?;
    let close = text.rfind(')').ok_or_else(|| anyhow!("bad {path}"))?;
    let comm = text[open + 1..close].to_string();
    // Fields after the command: state is field 3, utime field 14, stime field 15.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        rest.get(n - 3).and_then(|v| v.parse().ok()).ok_or_else(|| anyhow!("bad field {n} in {path}"))
    };
    Ok((comm, field(14)? + field(15)?))
}

/// CPU seconds (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    Ok(stat(pid)?.1 as f64 / clock_ticks())
}

/// Peak resident set size (VmHWM) in bytes.
pub fn peak_rss_bytes(pid: u32) -> Result<u64> {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("read /proc/{pid}/status"))?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:")).ok_or_else(|| anyhow!("no VmHWM for {pid}"))?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("bad VmHWM line {line:?}"))?;
    Ok(kib * 1024)
}

/// CPU ticks of a process's threads, summed by thread name (tokio workers, SQLite worker …).
pub fn thread_ticks(pid: u32) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Ok((comm, ticks)) = stat_at(&format!("/proc/{pid}/task/{tid}/stat")) {
            *out.entry(comm).or_insert(0) += ticks;
        }
    }
    out
}

/// CPU seconds per thread name between two `thread_ticks` snapshots, busiest first.
pub fn thread_seconds_between(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = after
        .iter()
        .map(|(name, t)| {
            (name.clone(), t.saturating_sub(before.get(name).copied().unwrap_or(0)) as f64 / clock_ticks())
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// CPU ticks of every process named `comm` (e.g. all PostgreSQL backends), by pid.
pub fn ticks_by_comm(comm: &str) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        match stat(pid) {
            Ok((c, ticks)) if c == comm => {
                out.insert(pid, ticks);
            }
            _ => {}
        }
    }
    out
}

/// CPU seconds used between two `ticks_by_comm` snapshots (processes started in between count
/// from zero; processes that exited in between are lost, which a persistent pool avoids).
pub fn cpu_seconds_between(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> f64 {
    let ticks: u64 = after.iter().map(|(pid, t)| t.saturating_sub(before.get(pid).copied().unwrap_or(0))).sum();
    ticks as f64 / clock_ticks()
}

/// Machine-wide CPU ticks: (busy, total) from the first line of /proc/stat.
#[derive(Debug, Clone, Copy)]
pub struct MachineCpu {
    busy: u64,
    total: u64,
}

impl MachineCpu {
    pub fn now() -> MachineCpu {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let nums: Vec<u64> =
            text.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal (guest time is included in user).
        let total: u64 = nums.iter().take(8).sum();
        let idle = nums.get(3).copied().unwrap_or(0) + nums.get(4).copied().unwrap_or(0);
        MachineCpu { busy: total - idle, total }
    }

    /// Busy share of all cores since `earlier`, %.
    pub fn busy_pct_since(&self, earlier: &MachineCpu) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        100.0 * self.busy.saturating_sub(earlier.busy) as f64 / total as f64
    }
}

/// `uptime`-style load averages, e.g. "1.20 0.62 0.32".
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
