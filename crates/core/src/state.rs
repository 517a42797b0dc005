//! The workload states of METRICS.md: one per GPU per evaluation window.

crate::named_enum! {
    /// What a GPU was doing over one evaluation window (docs/METRICS.md, "Workload states").
    /// Listed in the classifier's priority order (the first that matches wins), which is also
    /// the order dashboards list them in.
    pub enum WorkloadState("workload state") {
        Offline = "offline",
        Idle = "idle",
        IdleHeld = "idle_held",
        Stalled = "stalled",
        Hollow = "hollow",
        Starved = "starved",
        LowOccupancy = "low_occupancy",
        MemoryBound = "memory_bound",
        ComputeBound = "compute_bound",
        Active = "active",
    }
}

impl WorkloadState {
    /// "What it means" column of METRICS.md.
    pub fn meaning(self) -> &'static str {
        match self {
            WorkloadState::Offline => "agent or host down; still paid for",
            WorkloadState::Idle => "nobody is using it",
            WorkloadState::IdleHeld => "allocated and wasted (notebooks, crashed jobs, forgotten sessions)",
            WorkloadState::Stalled => "a kernel spins on a few SMs: often a hung collective (NCCL) or deadlock",
            WorkloadState::Hollow => {
                "busy but mostly empty: tiny kernels, batch 1, launch overhead, waiting on communication"
            }
            WorkloadState::Starved => {
                "the GPU waits for the host: data loading, preprocessing, Python overhead (sawtooth)"
            }
            WorkloadState::LowOccupancy => "every SM has a little work, none is full",
            WorkloadState::MemoryBound => "limited by memory bandwidth",
            WorkloadState::ComputeBound => "doing the math it was bought for",
            WorkloadState::Active => "busy; counters cannot say more",
        }
    }

    /// "What to tell the user" column of METRICS.md. Empty for `active` (METRICS.md: "—").
    pub fn advice(self) -> &'static str {
        match self {
            WorkloadState::Offline => "check the host/agent",
            WorkloadState::Idle => "release it or schedule work on it",
            WorkloadState::IdleHeld => "find the owner; reap idle sessions",
            WorkloadState::Stalled => "inspect/kill the job; check the interconnect",
            WorkloadState::Hollow => "bigger batches, CUDA graphs, kernel fusion, or a smaller GPU / collocation",
            WorkloadState::Starved => "DataLoader workers, pin_memory, prefetch; profile the host",
            WorkloadState::LowOccupancy => "larger blocks/batches, fused kernels",
            WorkloadState::MemoryBound => "fusion, FlashAttention, larger batch, lower precision",
            WorkloadState::ComputeBound => "healthy",
            WorkloadState::Active => "",
        }
    }

    /// Whether a workload ran: its SM activity then says how much GPU the work needs. Not so
    /// when nobody used the GPU (`idle`), a process held it without running anything
    /// (`idle_held`), a kernel hung (`stalled`) or nothing was heard (`offline`): there the
    /// advice is to release the GPU or fix the job, not a smaller model.
    pub fn is_working(self) -> bool {
        !matches!(self, WorkloadState::Offline | WorkloadState::Idle | WorkloadState::IdleHeld | WorkloadState::Stalled)
    }

    /// Share of a window's GPU time that counts as wasted money (METRICS.md "Wasted cost"):
    /// all of it for idle / idle_held / offline / stalled, the unused SM share (1 − SMACT/100)
    /// for hollow / starved / low_occupancy, none otherwise. Without SMACT the partial states
    /// cannot be priced, so nothing is claimed (the classifier never gives them without it).
    pub fn waste_fraction(self, sm_active_pct: Option<f64>) -> f64 {
        match self {
            WorkloadState::Offline | WorkloadState::Idle | WorkloadState::IdleHeld | WorkloadState::Stalled => 1.0,
            WorkloadState::Hollow | WorkloadState::Starved | WorkloadState::LowOccupancy => {
                sm_active_pct.map_or(0.0, |sm| (1.0 - sm / 100.0).clamp(0.0, 1.0))
            }
            WorkloadState::MemoryBound | WorkloadState::ComputeBound | WorkloadState::Active => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_names_are_the_metrics_names() {
        for s in WorkloadState::ALL {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
            assert_eq!(WorkloadState::parse(s.as_str()), Some(s));
            assert!(!s.meaning().is_empty());
        }
        assert_eq!(serde_json::to_string(&WorkloadState::IdleHeld).unwrap(), "\"idle_held\"");
        assert_eq!(serde_json::from_str::<WorkloadState>("\"low_occupancy\"").unwrap(), WorkloadState::LowOccupancy);
        assert_eq!(WorkloadState::parse("busy"), None);
        let e = "busy".parse::<WorkloadState>().unwrap_err().to_string();
        assert!(e.contains("idle_held") && e.contains("busy"), "{e}");
    }

    #[test]
    fn advice_follows_metrics() {
        assert_eq!(WorkloadState::IdleHeld.advice(), "find the owner; reap idle sessions");
        assert_eq!(WorkloadState::ComputeBound.advice(), "healthy");
        assert_eq!(WorkloadState::Active.advice(), "");
    }

    #[test]
    fn waste_fractions() {
        assert_eq!(WorkloadState::Stalled.waste_fraction(Some(1.0)), 1.0);
        assert_eq!(WorkloadState::Offline.waste_fraction(None), 1.0);
        assert!((WorkloadState::Hollow.waste_fraction(Some(9.0)) - 0.91).abs() < 1e-12);
        assert_eq!(WorkloadState::Starved.waste_fraction(None), 0.0);
        assert_eq!(WorkloadState::ComputeBound.waste_fraction(Some(10.0)), 0.0);
    }
}
