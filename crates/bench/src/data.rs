//! Deterministic, realistic GPU samples and the request bodies built from them.
//!
//! The fleet is `gpus` GPUs on hosts of 8 (like DGX/HGX nodes), sampled every second. Even
//! GPUs run a training job (one process each), odd GPUs are idle with an empty process list.
//! Every numeric field is filled like an H100 with GPM metrics, except `fp64_active_pct`
//! (None: the training job does no FP64 work and the field is absent, as on many agents).

use std::io::Write;

use anyhow::Result;
use flate2::Compression;
use flate2::write::GzEncoder;
use fleetlens_agent::wire::WireFormat;
use fleetlens_api::IngestBatch;
use fleetlens_core::{GpuProcess, Sample};

/// GPUs per host, as on an HGX node.
pub const GPUS_PER_HOST: usize = 8;
/// Sampling interval of the simulated agents.
pub const INTERVAL_MS: i64 = 1000;
/// H100 80GB HBM3 as NVML reports it: 81559 MiB.
const MEM_TOTAL_BYTES: i64 = 81_559 * 1024 * 1024;
const POWER_LIMIT_W: f64 = 700.0;
const MIB: i64 = 1024 * 1024;

/// Which GPUs and timestamps go into which request.
#[derive(Debug, Clone)]
pub struct Plan {
    pub gpus: usize,
    pub samples_per_gpu: usize,
    /// Timestamps per request (each request carries up to 8 GPUs × this many samples).
    pub ts_per_batch: usize,
    /// Timestamp of the first sample of every GPU (plus a per-host offset below 1 s).
    pub base_ts_ms: i64,
}

/// One request: a host and a range of timestamp indices.
#[derive(Debug, Clone)]
pub struct BatchSpec {
    pub host: usize,
    pub gpus: std::ops::Range<usize>,
    pub ts: std::ops::Range<usize>,
}

impl Plan {
    pub fn hosts(&self) -> usize {
        self.gpus.div_ceil(GPUS_PER_HOST)
    }

    /// Requests in sending order: time chunk by time chunk, every host in each chunk, as a
    /// fleet of agents flushing about at the same time would send them.
    pub fn batches(&self) -> Vec<BatchSpec> {
        let mut out = Vec::new();
        let mut start = 0;
        while start < self.samples_per_gpu {
            let end = (start + self.ts_per_batch).min(self.samples_per_gpu);
            for host in 0..self.hosts() {
                let g0 = host * GPUS_PER_HOST;
                let g1 = (g0 + GPUS_PER_HOST).min(self.gpus);
                out.push(BatchSpec { host, gpus: g0..g1, ts: start..end });
            }
            start = end;
        }
        out
    }

    pub fn total_samples(&self) -> u64 {
        (self.gpus * self.samples_per_gpu) as u64
    }

    /// Timestamp of sample `t` of GPU `g`: all GPUs of a host are read at the same instant.
    pub fn ts_ms(&self, g: usize, t: usize) -> i64 {
        let host = (g / GPUS_PER_HOST) as u64;
        let offset = (mix(host ^ 0x0ff5e7) % 1000) as i64;
        self.base_ts_ms + offset + t as i64 * INTERVAL_MS
    }

    pub fn first_ts_ms(&self) -> i64 {
        self.base_ts_ms
    }

    pub fn last_ts_ms(&self) -> i64 {
        self.base_ts_ms + 999 + (self.samples_per_gpu as i64 - 1).max(0) * INTERVAL_MS
    }
}

pub fn host_name(host: usize) -> String {
    format!("gpu-node-{host:04}")
}

pub fn gpu_uuid(g: usize) -> String {
    let a = mix(g as u64 ^ 0xa11ce);
    let b = mix(a);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// splitmix64 finaliser: a good, cheap hash of a counter.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A tiny deterministic stream of uniform numbers.
struct Rng(u64);

impl Rng {
    fn new(g: usize, t: usize) -> Rng {
        Rng(mix(((g as u64) << 32) ^ t as u64 ^ 0x5eed))
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = mix(self.0);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

fn round_to(v: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (v * p).round() / p
}

fn pct(v: f64, decimals: i32) -> f64 {
    round_to(v.clamp(0.0, 100.0), decimals)
}

/// Per-GPU constants of the simulated workload.
struct GpuProfile {
    busy: bool,
    /// Load level of the job, 0.55–0.98.
    load: f64,
    /// Fraction of busy time the SMs are active.
    sm_eff: f64,
    tensor_share: f64,
    mem_used_mib: i64,
    energy0_j: f64,
    avg_power_w: f64,
    pid: u32,
    container: String,
}

fn profile(g: usize) -> GpuProfile {
    let mut r = Rng::new(g, usize::MAX);
    // Even GPUs run the job: half the fleet.
    let busy = (g & 1) == 0;
    let load = r.range(0.55, 0.98);
    let avg_power_w = if busy { 120.0 + load * 540.0 } else { 71.0 };
    GpuProfile {
        busy,
        load,
        sm_eff: r.range(0.55, 0.92),
        tensor_share: r.range(0.2, 0.7),
        mem_used_mib: if busy { r.range(52_000.0, 79_000.0) as i64 } else { 541 },
        energy0_j: round_to(r.range(1.0e6, 5.0e8), 3),
        avg_power_w,
        pid: 10_000 + (mix(g as u64) % 50_000) as u32,
        container: format!(
            "{:016x}{:016x}{:016x}{:016x}",
            mix(g as u64 + 1),
            mix(g as u64 + 2),
            mix(g as u64 + 3),
            mix(g as u64 + 4)
        ),
    }
}

/// Sample `t` of GPU `g`.
pub fn sample(plan: &Plan, g: usize, t: usize) -> Sample {
    let p = profile(g);
    let mut r = Rng::new(g, t);
    let ts_ms = plan.ts_ms(g, t);
    let energy_j =
        round_to(p.energy0_j + t as f64 * p.avg_power_w * (INTERVAL_MS as f64 / 1000.0) + r.range(0.0, 0.9), 3);
    let base = Sample {
        ts_ms,
        uuid: gpu_uuid(g),
        gpu_index: Some((g % GPUS_PER_HOST) as u32),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        mem_total_bytes: Some(MEM_TOTAL_BYTES),
        power_limit_w: Some(POWER_LIMIT_W),
        energy_j: Some(energy_j),
        fp64_active_pct: None,
        ..Default::default()
    };
    if p.busy {
        let util = pct((p.load * 100.0 + r.range(-6.0, 6.0)).round(), 0);
        let sm = pct(util * p.sm_eff * r.range(0.95, 1.05), 4);
        let tensor = pct(sm * p.tensor_share * r.range(0.9, 1.1), 4);
        let dram = pct(20.0 + 45.0 * p.load * r.range(0.85, 1.15), 4);
        let power = round_to((p.avg_power_w + r.range(-25.0, 25.0)).min(POWER_LIMIT_W), 3);
        let capped = power > 660.0;
        let mem_used = (p.mem_used_mib + r.range(-64.0, 64.0) as i64) * MIB;
        Sample {
            gpu_util_pct: Some(util),
            mem_util_pct: Some(pct((dram * 0.9).round(), 0)),
            mem_used_bytes: Some(mem_used),
            power_w: Some(power),
            temp_c: Some((48.0 + 28.0 * p.load + r.range(-1.5, 1.5)).round()),
            sm_clock_mhz: Some(if capped { 1755.0 + 15.0 * (r.unit() * 10.0).floor() } else { 1980.0 }),
            throttle_reasons: Some(if capped { 0x4 } else { 0 }),
            sm_active_pct: Some(sm),
            gr_engine_active_pct: Some(pct(util * r.range(0.93, 0.99), 4)),
            sm_occupancy_pct: Some(pct(sm * r.range(0.3, 0.6), 4)),
            tensor_active_pct: Some(tensor),
            dram_active_pct: Some(dram),
            fp16_active_pct: Some(pct(tensor * r.range(0.05, 0.15), 4)),
            fp32_active_pct: Some(pct(sm * r.range(0.08, 0.2), 4)),
            int_active_pct: Some(pct(sm * r.range(0.02, 0.08), 4)),
            pcie_tx_mib_s: Some(round_to(r.range(150.0, 3000.0), 1)),
            pcie_rx_mib_s: Some(round_to(r.range(300.0, 6000.0), 1)),
            nvlink_tx_mib_s: Some(round_to(r.range(5_000.0, 90_000.0) * p.load, 1)),
            nvlink_rx_mib_s: Some(round_to(r.range(5_000.0, 90_000.0) * p.load, 1)),
            processes: Some(vec![GpuProcess {
                pid: p.pid,
                used_bytes: Some(mem_used - 512 * MIB),
                sm_pct: Some(util),
                command: Some("python3 -m torch.distributed.run --nproc-per-node 8 train.py".into()),
                user: Some("mlops".into()),
                container_id: Some(p.container),
                owner: None,
            }]),
            ..base
        }
    } else {
        Sample {
            gpu_util_pct: Some(0.0),
            mem_util_pct: Some(0.0),
            mem_used_bytes: Some(p.mem_used_mib * MIB),
            power_w: Some(round_to(p.avg_power_w + r.range(-3.0, 3.0), 3)),
            temp_c: Some((31.0 + r.range(-1.0, 1.0)).round()),
            sm_clock_mhz: Some(345.0),
            throttle_reasons: Some(0x1),
            sm_active_pct: Some(0.0),
            gr_engine_active_pct: Some(0.0),
            sm_occupancy_pct: Some(0.0),
            tensor_active_pct: Some(0.0),
            dram_active_pct: Some(0.0),
            fp16_active_pct: Some(0.0),
            fp32_active_pct: Some(0.0),
            int_active_pct: Some(0.0),
            pcie_tx_mib_s: Some(round_to(r.range(0.0, 2.0), 1)),
            pcie_rx_mib_s: Some(round_to(r.range(0.0, 2.0), 1)),
            nvlink_tx_mib_s: Some(0.0),
            nvlink_rx_mib_s: Some(0.0),
            processes: Some(vec![]),
            ..base
        }
    }
}

/// The samples of one request, host by host and GPU by GPU as an agent sends them:
/// timestamp-major, the 8 GPUs of the host at each instant.
pub fn batch_samples(plan: &Plan, spec: &BatchSpec) -> Vec<Sample> {
    let mut out = Vec::with_capacity(spec.gpus.len() * spec.ts.len());
    for t in spec.ts.clone() {
        for g in spec.gpus.clone() {
            out.push(sample(plan, g, t));
        }
    }
    out
}

/// A request body ready to send: compressed, with its size before compression.
#[derive(Debug, Clone)]
pub struct Body {
    pub wire: Vec<u8>,
    pub decoded_len: usize,
    /// GPU-samples carried.
    pub samples: usize,
    /// Numeric datapoints carried (VictoriaMetrics: values; Fleetlens: samples).
    pub datapoints: usize,
}

/// Gzip at its default level, for VictoriaMetrics' import bodies (the agent's bodies are
/// compressed by the agent's own code: [`fleetlens_bodies`]).
pub fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::with_capacity(data.len() / 6), Compression::default());
    gz.write_all(data)?;
    Ok(gz.finish()?)
}

/// Fleetlens ingest bodies: one `IngestBatch` per request, encoded and compressed by the
/// agent's own code (`fleetlens_agent::wire`), so each body is what an agent with
/// `--wire-format <format>` sends.
pub fn fleetlens_bodies(plan: &Plan, format: WireFormat) -> Vec<Body> {
    plan.batches()
        .iter()
        .map(|spec| {
            let batch = IngestBatch {
                host: host_name(spec.host),
                agent_version: None,
                labels: Default::default(),
                samples: batch_samples(plan, spec),
                events: vec![],
            };
            let n = batch.samples.len();
            let raw = format.batch(batch).serialize();
            Body { wire: format.compress(&raw), decoded_len: raw.len(), samples: n, datapoints: n }
        })
        .collect()
}

/// Accessor of one numeric field, as f64.
pub type NumField = (&'static str, fn(&Sample) -> Option<f64>);

/// Every numeric measurement of a sample except `fp64_active_pct` (None in this data set) and
/// the identity (`ts_ms`, `uuid`, `gpu_index`, `name`): 22 fields, which is exactly what
/// Fleetlens stores per sample row besides the process list.
pub const VM_FIELDS: [NumField; 22] = [
    ("gpu_util_pct", |s| s.gpu_util_pct),
    ("mem_util_pct", |s| s.mem_util_pct),
    ("mem_used_bytes", |s| s.mem_used_bytes.map(|v| v as f64)),
    ("mem_total_bytes", |s| s.mem_total_bytes.map(|v| v as f64)),
    ("power_w", |s| s.power_w),
    ("power_limit_w", |s| s.power_limit_w),
    ("energy_j", |s| s.energy_j),
    ("temp_c", |s| s.temp_c),
    ("sm_clock_mhz", |s| s.sm_clock_mhz),
    ("throttle_reasons", |s| s.throttle_reasons.map(|v| v as f64)),
    ("sm_active_pct", |s| s.sm_active_pct),
    ("gr_engine_active_pct", |s| s.gr_engine_active_pct),
    ("sm_occupancy_pct", |s| s.sm_occupancy_pct),
    ("tensor_active_pct", |s| s.tensor_active_pct),
    ("dram_active_pct", |s| s.dram_active_pct),
    ("fp16_active_pct", |s| s.fp16_active_pct),
    ("fp32_active_pct", |s| s.fp32_active_pct),
    ("int_active_pct", |s| s.int_active_pct),
    ("pcie_tx_mib_s", |s| s.pcie_tx_mib_s),
    ("pcie_rx_mib_s", |s| s.pcie_rx_mib_s),
    ("nvlink_tx_mib_s", |s| s.nvlink_tx_mib_s),
    ("nvlink_rx_mib_s", |s| s.nvlink_rx_mib_s),
];

/// VictoriaMetrics `/api/v1/import` bodies (JSON lines): per request the same host and
/// samples as the Fleetlens request, one line per GPU per field with all its timestamps.
pub fn vm_bodies(plan: &Plan) -> Result<Vec<Body>> {
    plan.batches()
        .iter()
        .map(|spec| {
            let host = host_name(spec.host);
            let mut text: Vec<u8> = Vec::new();
            let mut datapoints = 0;
            for g in spec.gpus.clone() {
                let samples: Vec<Sample> = spec.ts.clone().map(|t| sample(plan, g, t)).collect();
                let uuid = gpu_uuid(g);
                for (field, get) in VM_FIELDS {
                    let points: Vec<(i64, f64)> = samples.iter().filter_map(|s| get(s).map(|v| (s.ts_ms, v))).collect();
                    if points.is_empty() {
                        continue;
                    }
                    datapoints += points.len();
                    let line = serde_json::json!({
                        "metric": {"__name__": format!("fleetlens_{field}"), "uuid": uuid, "host": host},
                        "values": points.iter().map(|p| p.1).collect::<Vec<_>>(),
                        "timestamps": points.iter().map(|p| p.0).collect::<Vec<_>>(),
                    });
                    serde_json::to_writer(&mut text, &line)?;
                    text.push(b'\n');
                }
            }
            let samples = spec.gpus.len() * spec.ts.len();
            Ok(Body { wire: gzip(&text)?, decoded_len: text.len(), samples, datapoints })
        })
        .collect()
}

/// dcgm-exporter series of a sample: metric name and its value as dcgm-exporter exports it
/// (profiling ratios 0–1, memory in MiB, energy in mJ), the inverse of the server's mapping.
type DcgmField = (&'static str, fn(&Sample) -> Option<f64>);

const DCGM_FIELDS: [DcgmField; 20] = [
    ("DCGM_FI_DEV_GPU_UTIL", |s| s.gpu_util_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", |s| s.mem_util_pct),
    ("DCGM_FI_DEV_FB_USED", |s| s.mem_used_bytes.map(|b| (b / MIB) as f64)),
    ("DCGM_FI_DEV_FB_FREE", |s| s.mem_total_bytes.zip(s.mem_used_bytes).map(|(t, u)| ((t - u) / MIB) as f64)),
    ("DCGM_FI_DEV_POWER_USAGE", |s| s.power_w),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", |s| s.power_limit_w),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", |s| s.energy_j.map(|j| (j * 1000.0).round())),
    ("DCGM_FI_DEV_GPU_TEMP", |s| s.temp_c),
    ("DCGM_FI_DEV_SM_CLOCK", |s| s.sm_clock_mhz),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", |s| s.throttle_reasons.map(|t| t as f64)),
    ("DCGM_FI_DEV_XID_ERRORS", |_| Some(0.0)),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", |s| s.gr_engine_active_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_SM_ACTIVE", |s| s.sm_active_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_SM_OCCUPANCY", |s| s.sm_occupancy_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", |s| s.tensor_active_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_DRAM_ACTIVE", |s| s.dram_active_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", |s| s.fp16_active_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", |s| s.fp32_active_pct.map(|v| v / 100.0)),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", |s| s.pcie_tx_mib_s.map(|v| v * MIB as f64)),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", |s| s.pcie_rx_mib_s.map(|v| v * MIB as f64)),
];

/// Prometheus remote-write bodies of the same requests: one snappy-compressed `WriteRequest`
/// per request, a series per GPU and dcgm-exporter field with dcgm-exporter's labels (as a
/// Prometheus scraping dcgm-exporter sends them, `instance` and `job` included), a point per
/// timestamp. `wire` holds the snappy body, `decoded_len` the protobuf bytes before it.
pub fn remote_write_bodies(plan: &Plan) -> Result<Vec<Body>> {
    use fleetlens_api::remote_write::{TimeSeries, WriteRequest};
    use prost::Message;
    plan.batches()
        .iter()
        .map(|spec| {
            let host = host_name(spec.host);
            let mut timeseries = Vec::with_capacity(spec.gpus.len() * DCGM_FIELDS.len());
            for g in spec.gpus.clone() {
                let samples: Vec<Sample> = spec.ts.clone().map(|t| sample(plan, g, t)).collect();
                let (uuid, index) = (gpu_uuid(g), (g % GPUS_PER_HOST).to_string());
                let device = format!("nvidia{index}");
                let instance = format!("{host}:9400");
                let labels = [
                    ("DCGM_FI_DRIVER_VERSION", "550.90.07"),
                    ("Hostname", host.as_str()),
                    ("UUID", uuid.as_str()),
                    ("device", device.as_str()),
                    ("gpu", index.as_str()),
                    ("instance", instance.as_str()),
                    ("job", "dcgm-exporter"),
                    ("modelName", "NVIDIA H100 80GB HBM3"),
                ];
                for (name, get) in DCGM_FIELDS {
                    let points: Vec<(i64, f64)> = samples.iter().filter_map(|s| Some((s.ts_ms, get(s)?))).collect();
                    timeseries.push(TimeSeries::new(name, &labels, &points));
                }
            }
            let proto = WriteRequest { timeseries }.encode_to_vec();
            let n = spec.gpus.len() * spec.ts.len();
            let body = snap::raw::Encoder::new().compress_vec(&proto)?;
            Ok(Body { wire: body, decoded_len: proto.len(), samples: n, datapoints: n * DCGM_FIELDS.len() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan { gpus: 20, samples_per_gpu: 7, ts_per_batch: 3, base_ts_ms: 1_700_000_000_000 }
    }

    #[test]
    fn batches_cover_every_sample_once() {
        let p = plan();
        let b = p.batches();
        assert_eq!(b.len(), 3 * 3);
        let n: usize = b.iter().map(|s| s.gpus.len() * s.ts.len()).sum();
        assert_eq!(n as u64, p.total_samples());
    }

    #[test]
    fn samples_are_deterministic_and_valid() {
        let p = plan();
        for g in 0..p.gpus {
            for t in 0..p.samples_per_gpu {
                let s = sample(&p, g, t);
                assert_eq!(s, sample(&p, g, t));
                fleetlens_core::validate_sample(0, &s, p.last_ts_ms() + 1).unwrap();
                assert_eq!(VM_FIELDS.iter().filter(|(_, f)| f(&s).is_some()).count(), 22);
            }
        }
    }

    #[test]
    fn vm_lines_carry_22_points_per_sample() {
        let p = plan();
        let bodies = vm_bodies(&p).unwrap();
        let dp: usize = bodies.iter().map(|b| b.datapoints).sum();
        assert_eq!(dp as u64, p.total_samples() * 22);
    }
}
