//! dcgm-exporter series → Fleetlens samples: the one mapping behind the agent's `dcgm:` source
//! (a scraped exposition) and the server's Prometheus remote-write intake (series a Prometheus
//! scraped and forwarded).
//!
//! A sample is one GPU (or MIG instance) at one timestamp. It is keyed by the `UUID` label plus
//! `GPU_I_ID` for MIG instances (dcgm-exporter labels them with their parent's UUID); the host
//! is the `Hostname` label, else the host part of Prometheus' `instance` label. DCGM's profiling
//! fields (`DCGM_FI_PROF_*`) are ratios 0–1 and become percentages; a field the exporter did not
//! send stays absent (`None`), never 0.
//!
//! Owners: dcgm-exporter knows which pod (Kubernetes pod mapping: `pod` / `namespace` /
//! `container`) or HPC job (`hpc_job`, its job-mapping directory) holds a GPU, not the
//! processes. A sample so labelled lists one process with pid 0 whose owner carries them (so
//! owner reports, allocation and the idle-but-held states see the GPU as held); a sample without
//! such labels has `processes: None` (unknown), never an empty list.

use std::collections::{BTreeMap, BTreeSet};

use crate::sample::{GpuProcess, ProcessOwner, Sample};

pub const MIB: f64 = 1024.0 * 1024.0;

/// How a DCGM field's value becomes a sample value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Already a percentage (DCGM_FI_DEV_*_UTIL).
    Percent,
    /// A ratio 0–1 (DCGM_FI_PROF_*): × 100.
    Ratio,
    /// Plain number in the sample's unit (W, °C, MHz).
    Plain,
    /// Millijoules → joules.
    MilliJoules,
    /// Bytes per second → MiB/s.
    BytesPerSec,
}

/// The sample fields a DCGM metric can fill.
#[derive(Debug, Clone, Copy)]
enum Target {
    F(fn(&mut Sample) -> &mut Option<f64>, Unit),
    FbUsed,
    FbFree,
    FbReserved,
    Throttle,
    Xid,
}

/// dcgm-exporter metric name → where it goes. Names as dcgm-exporter 3.x/4.x exports them (its
/// `default-counters.csv` plus the profiling fields of `dcp-metrics-included.csv`).
fn target(metric: &str) -> Option<Target> {
    use Target::F;
    use Unit::*;
    Some(match metric {
        "DCGM_FI_DEV_GPU_UTIL" => F(|s| &mut s.gpu_util_pct, Percent),
        "DCGM_FI_DEV_MEM_COPY_UTIL" => F(|s| &mut s.mem_util_pct, Percent),
        "DCGM_FI_DEV_FB_USED" => Target::FbUsed,
        "DCGM_FI_DEV_FB_FREE" => Target::FbFree,
        "DCGM_FI_DEV_FB_RESERVED" => Target::FbReserved,
        "DCGM_FI_DEV_POWER_USAGE" => F(|s| &mut s.power_w, Plain),
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT" | "DCGM_FI_DEV_POWER_MGMT_LIMIT" => F(|s| &mut s.power_limit_w, Plain),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => F(|s| &mut s.energy_j, MilliJoules),
        "DCGM_FI_DEV_GPU_TEMP" => F(|s| &mut s.temp_c, Plain),
        "DCGM_FI_DEV_SM_CLOCK" => F(|s| &mut s.sm_clock_mhz, Plain),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" | "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" => Target::Throttle,
        "DCGM_FI_DEV_XID_ERRORS" => Target::Xid,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => F(|s| &mut s.gr_engine_active_pct, Ratio),
        "DCGM_FI_PROF_SM_ACTIVE" => F(|s| &mut s.sm_active_pct, Ratio),
        "DCGM_FI_PROF_SM_OCCUPANCY" => F(|s| &mut s.sm_occupancy_pct, Ratio),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" => F(|s| &mut s.tensor_active_pct, Ratio),
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE" => F(|s| &mut s.tensor_hmma_active_pct, Ratio),
        "DCGM_FI_PROF_DRAM_ACTIVE" => F(|s| &mut s.dram_active_pct, Ratio),
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE" => F(|s| &mut s.fp16_active_pct, Ratio),
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE" => F(|s| &mut s.fp32_active_pct, Ratio),
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE" => F(|s| &mut s.fp64_active_pct, Ratio),
        "DCGM_FI_PROF_PIPE_INT_ACTIVE" => F(|s| &mut s.int_active_pct, Ratio),
        "DCGM_FI_PROF_PCIE_TX_BYTES" => F(|s| &mut s.pcie_tx_mib_s, BytesPerSec),
        "DCGM_FI_PROF_PCIE_RX_BYTES" => F(|s| &mut s.pcie_rx_mib_s, BytesPerSec),
        "DCGM_FI_PROF_NVLINK_TX_BYTES" => F(|s| &mut s.nvlink_tx_mib_s, BytesPerSec),
        "DCGM_FI_PROF_NVLINK_RX_BYTES" => F(|s| &mut s.nvlink_rx_mib_s, BytesPerSec),
        _ => return None,
    })
}

/// True for a dcgm-exporter series this mapping reads.
pub fn is_mapped_metric(metric: &str) -> bool {
    target(metric).is_some()
}

/// A percentage: finite, clamped into 0–100.
pub fn pct(v: f64) -> Option<f64> {
    v.is_finite().then(|| v.clamp(0.0, 100.0))
}

/// A non-negative reading; negative or non-finite values are not readings.
pub fn non_negative(v: f64) -> Option<f64> {
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// One DCGM value in the sample's unit.
pub fn convert(v: f64, unit: Unit) -> Option<f64> {
    match unit {
        Unit::Percent => pct(v),
        Unit::Ratio => pct(v * 100.0),
        Unit::Plain => v.is_finite().then_some(v),
        Unit::MilliJoules => non_negative(v / 1000.0),
        Unit::BytesPerSec => non_negative(v / MIB),
    }
}

/// Identity labels of a series copied to the GPU's labels (dcgm-exporter name → Fleetlens key).
const LABELS: [(&str, &str); 9] = [
    ("pod", "pod"),
    ("namespace", "namespace"),
    ("container", "container"),
    ("hpc_job", "hpc_job"),
    ("pci_bus_id", "pci_bus_id"),
    ("device", "device"),
    ("DCGM_FI_DRIVER_VERSION", "driver_version"),
    ("GPU_I_PROFILE", "mig_profile"),
    ("GPU_I_ID", "mig_gpu_instance_id"),
];

/// One GPU (or MIG instance) at one timestamp being assembled.
#[derive(Debug, Default)]
struct Acc {
    host: Option<String>,
    /// Host part of Prometheus' `instance` label: the host where `Hostname` is missing.
    instance: Option<String>,
    sample: Sample,
    fb_used: Option<f64>,
    fb_free: Option<f64>,
    fb_reserved: Option<f64>,
    xid: Option<u64>,
    labels: BTreeMap<&'static str, BTreeSet<String>>,
}

/// What [`DcgmAssembler::add`] did with a series value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// It filled (or, not being finite, left absent) a field of a GPU's sample.
    Mapped,
    /// Not a series this mapping reads.
    Unknown,
    /// A mapped series without a `UUID` label: no GPU to give it to.
    Unkeyed,
}

/// Collects dcgm-exporter series values into one sample per GPU and timestamp.
#[derive(Debug, Default)]
pub struct DcgmAssembler {
    gpus: BTreeMap<(String, i64), Acc>,
}

/// A GPU sample assembled from dcgm-exporter series.
#[derive(Debug, Clone, PartialEq)]
pub struct DcgmSample {
    /// `Hostname` label (else the `instance` label's host); `None` where neither says.
    pub host: Option<String>,
    pub sample: Sample,
    /// The series' identity labels by Fleetlens key (`pod`, `namespace`, `mig_profile`,
    /// `mig_parent` …), values of several series joined by `,`.
    pub labels: BTreeMap<&'static str, String>,
    /// The last XID error, where non-zero (`DCGM_FI_DEV_XID_ERRORS`).
    pub xid: Option<u64>,
}

impl DcgmAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// GPU samples (GPU × timestamp) being assembled so far.
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// Adds one value of series `metric` at `ts_ms`; `label` looks up the series' labels.
    pub fn add<'l>(&mut self, metric: &str, label: impl Fn(&str) -> Option<&'l str>, ts_ms: i64, v: f64) -> Added {
        let Some(t) = target(metric) else { return Added::Unknown };
        let get = |name: &str| label(name).filter(|v| !v.is_empty());
        let Some(uuid) = get("UUID").or_else(|| get("uuid")) else { return Added::Unkeyed };
        let gi = get("GPU_I_ID");
        // A MIG instance: dcgm-exporter gives it its parent's UUID and a GPU-instance id.
        let key = match gi {
            Some(gi) => format!("{uuid}/gi{gi}"),
            None => uuid.to_string(),
        };
        let acc = self.gpus.entry((key, ts_ms)).or_insert_with_key(|(key, ts)| {
            let mut a = Acc::default();
            a.sample.uuid = key.clone();
            a.sample.ts_ms = *ts;
            if gi.is_some() {
                a.labels.entry("mig_parent").or_default().insert(uuid.to_string());
            }
            a
        });
        if acc.host.is_none() {
            acc.host = get("Hostname").map(str::to_string);
        }
        if acc.instance.is_none() {
            acc.instance = get("instance").map(instance_host).filter(|h| !h.is_empty()).map(str::to_string);
        }
        if acc.sample.gpu_index.is_none() {
            acc.sample.gpu_index = get("gpu").and_then(|g| g.parse().ok());
        }
        if acc.sample.name.is_none() {
            acc.sample.name = get("modelName").map(|m| match get("GPU_I_PROFILE") {
                Some(p) if gi.is_some() => format!("{m} MIG {p}"),
                _ => m.to_string(),
            });
        }
        for (name, key) in LABELS {
            if let Some(val) = get(name) {
                acc.labels.entry(key).or_default().insert(val.to_string());
            }
        }
        if !v.is_finite() {
            return Added::Mapped;
        }
        match t {
            Target::F(field, unit) => *field(&mut acc.sample) = convert(v, unit),
            Target::FbUsed => acc.fb_used = Some(v),
            Target::FbFree => acc.fb_free = Some(v),
            Target::FbReserved => acc.fb_reserved = Some(v),
            Target::Throttle => acc.sample.throttle_reasons = (v >= 0.0).then_some(v as u64),
            Target::Xid => acc.xid = (v > 0.0).then_some(v as u64),
        }
        Added::Mapped
    }

    /// The assembled samples, by GPU key then timestamp.
    pub fn finish(self) -> Vec<DcgmSample> {
        self.gpus.into_values().map(finish_one).collect()
    }
}

/// `host:port` (or `[v6]:port`) → host.
fn instance_host(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match instance.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => instance,
    }
}

fn finish_one(mut a: Acc) -> DcgmSample {
    let to_bytes = |mib: f64| (mib >= 0.0).then(|| (mib * MIB).round() as i64);
    a.sample.mem_used_bytes = a.fb_used.and_then(to_bytes);
    a.sample.mem_total_bytes = match (a.fb_used, a.fb_free) {
        (Some(u), Some(f)) => to_bytes(u + f + a.fb_reserved.unwrap_or(0.0)),
        _ => None,
    };
    let labels: BTreeMap<&'static str, String> =
        a.labels.into_iter().map(|(k, v)| (k, v.into_iter().collect::<Vec<_>>().join(","))).collect();
    a.sample.processes =
        owner(&labels).map(|owner| vec![GpuProcess { pid: 0, owner: Some(owner), ..Default::default() }]);
    DcgmSample { host: a.host.or(a.instance), sample: a.sample, labels, xid: a.xid }
}

/// The pod or HPC job holding the GPU, from dcgm-exporter's labels; `None` when none says.
fn owner(labels: &BTreeMap<&'static str, String>) -> Option<ProcessOwner> {
    let get = |k: &str| labels.get(k).cloned();
    let owner = ProcessOwner {
        pod_name: get("pod"),
        namespace: get("namespace"),
        job_id: get("hpc_job"),
        labels: get("container").map(|c| [("container".to_string(), c)].into_iter().collect()).unwrap_or_default(),
        ..Default::default()
    };
    (owner.pod_name.is_some() || owner.namespace.is_some() || owner.job_id.is_some()).then_some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }

    #[test]
    fn units() {
        assert_eq!(convert(0.5, Unit::Ratio), Some(50.0));
        assert_eq!(convert(1.0000001, Unit::Ratio), Some(100.0));
        assert_eq!(convert(12_345.0, Unit::MilliJoules), Some(12.345));
        assert_eq!(convert(MIB * 3.0, Unit::BytesPerSec), Some(3.0));
        assert_eq!(convert(-1.0, Unit::BytesPerSec), None);
        assert_eq!(convert(f64::NAN, Unit::Percent), None);
    }

    #[test]
    fn one_sample_per_gpu_and_timestamp() {
        let mut a = DcgmAssembler::new();
        let l = [("UUID", "GPU-a"), ("gpu", "0"), ("Hostname", "n1"), ("modelName", "NVIDIA A100")];
        assert_eq!(a.add("DCGM_FI_PROF_SM_ACTIVE", labels(&l), 1000, 0.25), Added::Mapped);
        assert_eq!(a.add("DCGM_FI_DEV_GPU_UTIL", labels(&l), 1000, 100.0), Added::Mapped);
        assert_eq!(a.add("DCGM_FI_PROF_SM_ACTIVE", labels(&l), 2000, 0.5), Added::Mapped);
        assert_eq!(a.add("DCGM_FI_DEV_GPU_TEMP", labels(&[("gpu", "1")]), 1000, 40.0), Added::Unkeyed);
        assert_eq!(a.add("up", labels(&l), 1000, 1.0), Added::Unknown);
        assert_eq!(a.len(), 2);
        let out = a.finish();
        let (s1, s2) = (&out[0].sample, &out[1].sample);
        assert_eq!((s1.uuid.as_str(), s1.ts_ms, s1.gpu_index), ("GPU-a", 1000, Some(0)));
        assert_eq!((s1.sm_active_pct, s1.gpu_util_pct), (Some(25.0), Some(100.0)));
        // The second timestamp only had SM activity: the rest stays absent.
        assert_eq!((s2.ts_ms, s2.sm_active_pct, s2.gpu_util_pct), (2000, Some(50.0), None));
        assert_eq!(out[0].host.as_deref(), Some("n1"));
        assert_eq!(s1.processes, None, "no pod or job label: the process list is unknown");
    }

    #[test]
    fn owners_from_pod_or_job_labels() {
        let mut a = DcgmAssembler::new();
        let pod = [("UUID", "GPU-p"), ("pod", "train-0"), ("namespace", "ml"), ("container", "trainer")];
        let job = [("UUID", "GPU-j"), ("hpc_job", "48213"), ("instance", "node-3:9400")];
        a.add("DCGM_FI_DEV_GPU_UTIL", labels(&pod), 1, 10.0);
        a.add("DCGM_FI_DEV_GPU_UTIL", labels(&job), 1, 10.0);
        let out = a.finish();
        let owner = |i: usize| out[i].sample.processes.as_ref().unwrap()[0].owner.clone().unwrap();
        assert_eq!(out[0].sample.uuid, "GPU-j");
        assert_eq!(owner(0).job_id.as_deref(), Some("48213"));
        assert_eq!(out[0].host.as_deref(), Some("node-3"), "no Hostname: the instance label's host");
        assert_eq!((owner(1).pod_name.as_deref(), owner(1).namespace.as_deref()), (Some("train-0"), Some("ml")));
        assert_eq!(owner(1).labels["container"], "trainer");
        assert_eq!(out[1].host, None);
    }

    #[test]
    fn instance_hosts() {
        assert_eq!(instance_host("10.0.0.7:9400"), "10.0.0.7");
        assert_eq!(instance_host("[::1]:9400"), "::1");
        assert_eq!(instance_host("gpu-node"), "gpu-node");
    }
}
