//! What a poll costs: wall time per group of NVML calls, and the CPU time of the reading thread
//! over the whole poll (from `/proc/thread-self/schedstat`, user + system). The kernel brings
//! that counter up to date only at scheduling points, so it is good for a poll (which starts with
//! a wake-up) and for sums over many polls, not for one call: NVML calls are timed by wall clock
//! (measured alone on an H100, their CPU time was close to their wall time: the driver's work).

use std::time::{Duration, Instant};

/// The groups of calls timed separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Utilization, memory, power, limit, temperature, SM clock, throttle reasons.
    Basic,
    Energy,
    GpmSample,
    GpmMetrics,
    Processes,
    ProcessUtil,
    /// /proc lookups of new GPU processes.
    Procfs,
    /// XID event queue.
    Events,
    /// NVML's utilization sample buffer (kernel and memory utilization over the interval).
    UtilSamples,
}

pub const GROUPS: [Group; 9] = [
    Group::Basic,
    Group::Energy,
    Group::GpmSample,
    Group::GpmMetrics,
    Group::Processes,
    Group::ProcessUtil,
    Group::Procfs,
    Group::Events,
    Group::UtilSamples,
];

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Basic => "basic",
            Group::Energy => "energy",
            Group::GpmSample => "gpm_sample",
            Group::GpmMetrics => "gpm_metrics",
            Group::Processes => "processes",
            Group::ProcessUtil => "process_util",
            Group::Procfs => "procfs",
            Group::Events => "events",
            Group::UtilSamples => "util_samples",
        }
    }
}

/// CPU time this thread has run, if the kernel says: schedstat (ns), else utime + stime of
/// `/proc/thread-self/stat` (clock ticks, assumed 100 Hz: coarse, good for sums over many polls).
pub fn thread_cpu() -> Option<Duration> {
    let precise = std::fs::read_to_string("/proc/thread-self/schedstat").ok().and_then(|t| parse_schedstat(&t));
    match precise {
        Some(d) if !d.is_zero() => Some(d),
        _ => std::fs::read_to_string("/proc/thread-self/stat").ok().and_then(|t| parse_stat_cpu(&t)),
    }
}

/// utime + stime (fields 14 and 15) of a /proc stat line, at 100 ticks per second.
pub fn parse_stat_cpu(text: &str) -> Option<Duration> {
    // The command (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// First field of schedstat: nanoseconds on the CPU.
pub fn parse_schedstat(text: &str) -> Option<Duration> {
    text.split_whitespace().next()?.parse::<u64>().ok().map(Duration::from_nanos)
}

/// Per-poll accounting: wall time and calls per group.
#[derive(Debug, Default, Clone)]
pub struct PollTiming {
    pub wall: [Duration; GROUPS.len()],
    pub calls: [u32; GROUPS.len()],
}

impl PollTiming {
    /// Runs `f`, charging its wall time to `group`.
    pub fn time<T>(&mut self, group: Group, f: impl FnOnce() -> T) -> T {
        let i = group as usize;
        let t0 = Instant::now();
        let out = f();
        self.wall[i] += t0.elapsed();
        self.calls[i] += 1;
        out
    }
}

/// Running totals over many polls, for the periodic summary.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub polls: u64,
    pub wall: Duration,
    pub cpu: Duration,
    pub cpu_known: bool,
    pub groups: [Duration; GROUPS.len()],
    pub group_calls: [u64; GROUPS.len()],
}

impl Totals {
    pub fn add(&mut self, wall: Duration, cpu: Option<Duration>, t: &PollTiming) {
        self.polls += 1;
        self.wall += wall;
        if let Some(c) = cpu {
            self.cpu += c;
            self.cpu_known = true;
        }
        for i in 0..GROUPS.len() {
            self.groups[i] += t.wall[i];
            self.group_calls[i] += u64::from(t.calls[i]);
        }
    }

    /// Work done between polls for them (the batch's utilization read): its CPU and calls
    /// count towards the polls', not as a poll of its own.
    pub fn add_side(&mut self, cpu: Option<Duration>, t: &PollTiming) {
        if let Some(c) = cpu {
            self.cpu += c;
        }
        for i in 0..GROUPS.len() {
            self.groups[i] += t.wall[i];
            self.group_calls[i] += u64::from(t.calls[i]);
        }
    }

    /// Mean milliseconds per poll.
    pub fn per_poll_ms(&self, d: Duration) -> f64 {
        if self.polls == 0 { 0.0 } else { d.as_secs_f64() * 1000.0 / self.polls as f64 }
    }

    /// `basic=0.081 energy=3.2 …`: mean wall ms per call of each group that ran.
    pub fn per_call_summary(&self) -> String {
        GROUPS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.group_calls[*i] > 0)
            .map(|(i, g)| {
                format!("{}={:.3}", g.name(), self.groups[i].as_secs_f64() * 1000.0 / self.group_calls[i] as f64)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat() {
        assert_eq!(parse_schedstat("123456789 2000 7\n"), Some(Duration::from_nanos(123_456_789)));
        assert_eq!(parse_schedstat(""), None);
        let stat = "4242 (python3 -u x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 75 0 0 20 0 41 0 100 0 0";
        assert_eq!(parse_stat_cpu(stat), Some(Duration::from_millis(3250)));
        assert_eq!(parse_stat_cpu("garbage"), None);
        let _ = thread_cpu();
    }

    #[test]
    fn groups_accumulate() {
        let mut t = PollTiming::default();
        let v = t.time(Group::Energy, || {
            std::thread::sleep(Duration::from_millis(2));
            7
        });
        assert_eq!(v, 7);
        t.time(Group::Energy, || ());
        assert_eq!(t.calls[Group::Energy as usize], 2);
        assert!(t.wall[Group::Energy as usize] >= Duration::from_millis(2));
        let mut tot = Totals::default();
        tot.add(Duration::from_millis(4), Some(Duration::from_millis(1)), &t);
        tot.add(Duration::from_millis(6), Some(Duration::from_millis(3)), &t);
        assert_eq!(tot.per_poll_ms(tot.wall), 5.0);
        assert_eq!(tot.per_poll_ms(tot.cpu), 2.0);
        assert!(tot.per_call_summary().starts_with("energy="), "{}", tot.per_call_summary());
    }
}
