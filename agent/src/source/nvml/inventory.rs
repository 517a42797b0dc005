//! What a GPU is (read once at start): identity, limits, architecture. Logged, and sent as
//! batch labels `gpu.<uuid>.<key>` so the server can show it without a schema change.

use std::collections::BTreeMap;

/// Static facts about one GPU (or MIG instance). Every fact is absent where NVML would not say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    pub index: Option<u32>,
    pub uuid: String,
    pub name: Option<String>,
    pub serial: Option<String>,
    pub board_part_number: Option<String>,
    pub pci_bus_id: Option<String>,
    pub mem_total_bytes: Option<u64>,
    pub power_limit_w: Option<f64>,
    pub max_sm_clock_mhz: Option<u32>,
    pub max_mem_clock_mhz: Option<u32>,
    pub cuda_cores: Option<u32>,
    pub compute_capability: Option<(i32, i32)>,
    pub architecture: Option<String>,
    /// SM count, derived from the CUDA core count and the cores per SM of the compute
    /// capability (NVML has no direct call for it).
    pub sm_count: Option<u32>,
    /// MIG mode of a physical GPU (current setting).
    pub mig_enabled: Option<bool>,
    /// For a MIG instance: the UUID of its physical GPU.
    pub mig_parent: Option<String>,
    /// GPM (SM activity & co.) can be read on this GPU.
    pub gpm: Option<bool>,
}

/// CUDA cores per SM by compute capability (CUDA C Programming Guide, "Arithmetic
/// instructions" throughput table: FP32 lanes per SM).
pub fn cores_per_sm(major: i32, minor: i32) -> Option<u32> {
    match (major, minor) {
        (3, _) => Some(192),
        (5, _) => Some(128),
        (6, 0) => Some(64),
        (6, _) => Some(128),
        (7, _) => Some(64),
        (8, 0) => Some(64),
        (8, _) => Some(128),
        (9, 0) => Some(128),
        (10, _) | (11, _) | (12, _) => Some(128),
        _ => None,
    }
}

/// SM count from the core count, where the division is exact.
pub fn sm_count(cores: u32, cc: (i32, i32)) -> Option<u32> {
    let per = cores_per_sm(cc.0, cc.1)?;
    (cores > 0 && cores.is_multiple_of(per)).then(|| cores / per)
}

/// True for a MIG instance's UUID (`MIG-…`, as NVML ≥ 470 prints it; older drivers used
/// `MIG-GPU-<parent>/<gi>/<ci>`).
pub fn is_mig_uuid(uuid: &str) -> bool {
    uuid.starts_with("MIG-")
}

impl Inventory {
    /// Labels `gpu.<uuid>.<key>` = value for every known fact.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                out.insert(format!("gpu.{}.{k}", self.uuid), v);
            }
        };
        put("name", self.name.clone());
        put("index", self.index.map(|i| i.to_string()));
        put("serial", self.serial.clone());
        put("board_part_number", self.board_part_number.clone());
        put("pci_bus_id", self.pci_bus_id.clone());
        put("mem_total_bytes", self.mem_total_bytes.map(|v| v.to_string()));
        put("power_limit_w", self.power_limit_w.map(|v| v.to_string()));
        put("max_sm_clock_mhz", self.max_sm_clock_mhz.map(|v| v.to_string()));
        put("max_mem_clock_mhz", self.max_mem_clock_mhz.map(|v| v.to_string()));
        put("cuda_cores", self.cuda_cores.map(|v| v.to_string()));
        put("compute_capability", self.compute_capability.map(|(a, b)| format!("{a}.{b}")));
        put("architecture", self.architecture.clone());
        put("sm_count", self.sm_count.map(|v| v.to_string()));
        put("mig_enabled", self.mig_enabled.map(|v| v.to_string()));
        put("mig_parent", self.mig_parent.clone());
        put("gpm", self.gpm.map(|v| v.to_string()));
        out
    }
}

/// `12080` → `12.8` (NVML's CUDA driver version is major × 1000 + minor × 10).
pub fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sm_counts_of_known_gpus() {
        assert_eq!(sm_count(16896, (9, 0)), Some(132)); // H100 SXM / H200
        assert_eq!(sm_count(14592, (9, 0)), Some(114)); // H100 PCIe
        assert_eq!(sm_count(6912, (8, 0)), Some(108)); // A100
        assert_eq!(sm_count(10752, (8, 6)), Some(84)); // RTX A6000
        assert_eq!(sm_count(18176, (8, 9)), Some(142)); // L40S
        assert_eq!(sm_count(5120, (7, 0)), Some(80)); // V100
        assert_eq!(sm_count(100, (9, 0)), None); // not a whole number of SMs
        assert_eq!(sm_count(6912, (99, 0)), None); // unknown architecture
    }

    #[test]
    fn mig_uuids() {
        assert!(is_mig_uuid("MIG-0c2d7bd3-9f35-5e4c-9a1a-56a5b4c1a2b3"));
        assert!(is_mig_uuid("MIG-GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276/1/0"));
        assert!(!is_mig_uuid("GPU-b8c24ac0-038a-26bb-9696-7e629bc4f276"));
    }

    #[test]
    fn labels_name_the_gpu_and_skip_unknowns() {
        let inv = Inventory {
            index: Some(0),
            uuid: "MIG-1".into(),
            name: Some("NVIDIA H100 80GB HBM3 MIG 1g.10gb".into()),
            mig_parent: Some("GPU-p".into()),
            serial: Some(String::new()),
            compute_capability: Some((9, 0)),
            ..Default::default()
        };
        let l = inv.labels();
        assert_eq!(l["gpu.MIG-1.mig_parent"], "GPU-p");
        assert_eq!(l["gpu.MIG-1.compute_capability"], "9.0");
        assert_eq!(l["gpu.MIG-1.index"], "0");
        assert!(!l.contains_key("gpu.MIG-1.serial"));
        assert!(!l.contains_key("gpu.MIG-1.sm_count"));
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(12080), "12.8");
    }
}
