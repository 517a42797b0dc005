//! `--source dcgm:URL`: scrapes a dcgm-exporter `/metrics` endpoint once per interval and maps
//! DCGM's fields to the sample format. This is how GPUs older than Hopper (A100, L40S …) get SM
//! activity, occupancy, tensor and DRAM activity: from DCGM's profiling fields
//! (`DCGM_FI_PROF_*`), which are ratios 0–1 and become percentages here.
//!
//! Keyed by the `UUID` label (plus `GPU_I_ID` for MIG instances, which dcgm-exporter labels with
//! their parent's UUID); the host is the `Hostname` label unless `--host` is given. Kubernetes
//! `pod` / `namespace` / `container` labels are sent as batch labels `gpu.<uuid>.pod` & co.
//! dcgm-exporter knows no PIDs, so `processes` is absent (null).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use fleetlens_core::Sample;
use prometheus_parse::{Scrape, Value};

use super::notes::Notes;
use super::{GpuSource, HostSamples, SourceError, SourceOptions, Ticker, local_host_name, non_negative, now_ms, pct};

const MIB: f64 = 1024.0 * 1024.0;

/// How a DCGM field's value becomes a sample value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Already a percentage (DCGM_FI_DEV_*_UTIL).
    Percent,
    /// A ratio 0–1 (DCGM_FI_PROF_*): × 100.
    Ratio,
    /// Plain non-negative number in the sample's unit (W, °C, MHz).
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

/// dcgm-exporter metric name → where it goes. Names as dcgm-exporter 3.x exports them (its
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

fn convert(v: f64, unit: Unit) -> Option<f64> {
    match unit {
        Unit::Percent => pct(v),
        Unit::Ratio => pct(v * 100.0),
        Unit::Plain => v.is_finite().then_some(v),
        Unit::MilliJoules => non_negative(v / 1000.0),
        Unit::BytesPerSec => non_negative(v / MIB),
    }
}

/// One GPU (or MIG instance) being assembled from the exposition.
#[derive(Debug, Default)]
struct Acc {
    host: Option<String>,
    sample: Sample,
    fb_used: Option<f64>,
    fb_free: Option<f64>,
    fb_reserved: Option<f64>,
    xid: Option<u64>,
    labels: BTreeMap<&'static str, BTreeSet<String>>,
}

/// A mapped scrape.
#[derive(Debug, Default)]
pub struct Mapped {
    pub hosts: Vec<HostSamples>,
    /// Last XID error per GPU (`DCGM_FI_DEV_XID_ERRORS`), where non-zero.
    pub xids: Vec<(String, u64)>,
    /// Series that named no GPU (no `UUID` label) and were left out.
    pub unkeyed: usize,
}

/// Identity labels copied to batch labels `gpu.<uuid>.<key>`.
const LABELS: [(&str, &str); 8] = [
    ("pod", "pod"),
    ("namespace", "namespace"),
    ("container", "container"),
    ("pci_bus_id", "pci_bus_id"),
    ("device", "device"),
    ("DCGM_FI_DRIVER_VERSION", "driver_version"),
    ("GPU_I_PROFILE", "mig_profile"),
    ("GPU_I_ID", "mig_gpu_instance_id"),
];

/// Maps a dcgm-exporter exposition to samples stamped `ts_ms`. `host` (from `--host`) wins over
/// the `Hostname` label; `fallback_host` is used where neither says.
pub fn map_exposition(text: &str, ts_ms: i64, host: Option<&str>, fallback_host: &str) -> Result<Mapped, String> {
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).map_err(|e| e.to_string())?;
    let mut gpus: BTreeMap<String, Acc> = BTreeMap::new();
    let mut unkeyed = 0;
    for s in &scrape.samples {
        let Some(t) = target(&s.metric) else { continue };
        let v = match s.value {
            Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
            _ => continue,
        };
        let Some(uuid) = s.labels.get("UUID").or_else(|| s.labels.get("uuid")).filter(|u| !u.is_empty()) else {
            unkeyed += 1;
            continue;
        };
        let gi = s.labels.get("GPU_I_ID").filter(|g| !g.is_empty());
        // A MIG instance: dcgm-exporter gives it its parent's UUID and a GPU-instance id.
        let key = match gi {
            Some(gi) => format!("{uuid}/gi{gi}"),
            None => uuid.to_string(),
        };
        let acc = gpus.entry(key.clone()).or_insert_with(|| {
            let mut a = Acc::default();
            a.sample.uuid = key.clone();
            a.sample.ts_ms = ts_ms;
            if gi.is_some() {
                a.labels.entry("mig_parent").or_default().insert(uuid.to_string());
            }
            a
        });
        if acc.host.is_none() {
            acc.host = s.labels.get("Hostname").filter(|h| !h.is_empty()).map(str::to_string);
        }
        if acc.sample.gpu_index.is_none() {
            acc.sample.gpu_index = s.labels.get("gpu").and_then(|g| g.parse().ok());
        }
        if acc.sample.name.is_none() {
            acc.sample.name =
                s.labels.get("modelName").filter(|m| !m.is_empty()).map(|m| match s.labels.get("GPU_I_PROFILE") {
                    Some(p) if gi.is_some() && !p.is_empty() => format!("{m} MIG {p}"),
                    _ => m.to_string(),
                });
        }
        for (label, key) in LABELS {
            if let Some(val) = s.labels.get(label).filter(|v| !v.is_empty()) {
                acc.labels.entry(key).or_default().insert(val.to_string());
            }
        }
        if !v.is_finite() {
            continue;
        }
        match t {
            Target::F(field, unit) => *field(&mut acc.sample) = convert(v, unit),
            Target::FbUsed => acc.fb_used = Some(v),
            Target::FbFree => acc.fb_free = Some(v),
            Target::FbReserved => acc.fb_reserved = Some(v),
            Target::Throttle => acc.sample.throttle_reasons = (v >= 0.0).then_some(v as u64),
            Target::Xid => acc.xid = (v > 0.0).then_some(v as u64),
        }
    }
    let mut per_host: BTreeMap<String, HostSamples> = BTreeMap::new();
    let mut xids = Vec::new();
    for (uuid, mut a) in gpus {
        let to_bytes = |mib: f64| (mib >= 0.0).then(|| (mib * MIB).round() as i64);
        a.sample.mem_used_bytes = a.fb_used.and_then(to_bytes);
        a.sample.mem_total_bytes = match (a.fb_used, a.fb_free) {
            (Some(u), Some(f)) => to_bytes(u + f + a.fb_reserved.unwrap_or(0.0)),
            _ => None,
        };
        if let Some(x) = a.xid {
            xids.push((uuid.clone(), x));
        }
        let h = host.map(str::to_string).or(a.host).unwrap_or_else(|| fallback_host.to_string());
        let entry = per_host.entry(h.clone()).or_insert_with(|| HostSamples::new(h, Vec::new()));
        for (key, vals) in a.labels {
            entry.labels.insert(format!("gpu.{uuid}.{key}"), vals.into_iter().collect::<Vec<_>>().join(","));
        }
        entry.samples.push(a.sample);
    }
    let mut hosts: Vec<HostSamples> = per_host.into_values().collect();
    for h in &mut hosts {
        h.samples.sort_by(|a, b| (a.gpu_index, &a.uuid).cmp(&(b.gpu_index, &b.uuid)));
    }
    Ok(Mapped { hosts, xids, unkeyed })
}

/// Checks a `dcgm:URL` argument.
pub fn parse_url(url: &str) -> Result<reqwest::Url, SourceError> {
    let u = reqwest::Url::parse(url).map_err(|e| {
        SourceError::Dcgm(format!("`{url}` is not a URL ({e}); expected dcgm:http://HOST:9400/metrics"))
    })?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(SourceError::Dcgm(format!("dcgm-exporter URL must be http:// or https://, got `{url}`")));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(SourceError::Dcgm(format!("`{url}` names no host; expected dcgm:http://HOST:9400/metrics")));
    }
    Ok(u)
}

/// Scrapes a dcgm-exporter once per interval. An unreachable exporter is logged (once, then
/// every few minutes) and produces no samples for that interval — the server then sees the GPUs
/// as offline rather than as idle.
pub struct DcgmSource {
    url: reqwest::Url,
    client: reqwest::Client,
    ticker: Ticker,
    host: Option<String>,
    fallback_host: String,
    notes: Notes,
    last_xid: HashMap<String, u64>,
    ok_once: bool,
}

impl DcgmSource {
    pub fn open(url: &str, opts: &SourceOptions) -> Result<Self, SourceError> {
        let url = parse_url(url)?;
        let timeout = opts.interval.clamp(Duration::from_secs(2), Duration::from_secs(10));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("fleetlens-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SourceError::Dcgm(format!("cannot build an HTTP client: {e}")))?;
        // Where the exporter names no host: the exporter's host if remote, else this machine.
        let fallback_host = match url.host_str() {
            Some(h) if !matches!(h, "localhost" | "127.0.0.1" | "[::1]" | "::1") => h.to_string(),
            _ => local_host_name(opts),
        };
        Ok(Self {
            url,
            client,
            ticker: Ticker::new(opts.interval),
            host: opts.host.clone(),
            fallback_host,
            notes: Notes::new(),
            last_xid: HashMap::new(),
            ok_once: false,
        })
    }

    async fn scrape(&self) -> Result<String, String> {
        let resp = self.client.get(self.url.clone()).send().await.map_err(|e| format!("{e}"))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        resp.text().await.map_err(|e| format!("reading the body: {e}"))
    }
}

#[async_trait]
impl GpuSource for DcgmSource {
    fn describe(&self) -> String {
        format!("dcgm:{}", self.url)
    }

    fn is_live(&self) -> bool {
        true
    }

    async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
        self.ticker.tick().await;
        let ts = now_ms();
        let url = self.url.to_string();
        let text = match self.scrape().await {
            Ok(t) => t,
            Err(e) => {
                if self.notes.every(&url, "scrape", super::notes::REPEAT_AFTER) {
                    tracing::warn!(url = %url, error = %e,
                        "cannot scrape dcgm-exporter; no samples until it answers (repeats logged every 5 min)");
                }
                return Ok(Some(Vec::new()));
            }
        };
        if self.notes.clear(&url, "scrape") && self.ok_once {
            tracing::info!(url = %url, "dcgm-exporter answers again");
        }
        let mapped = match map_exposition(&text, ts, self.host.as_deref(), &self.fallback_host) {
            Ok(m) => m,
            Err(e) => {
                if self.notes.every(&url, "parse", super::notes::REPEAT_AFTER) {
                    tracing::warn!(url = %url, error = %e, "dcgm-exporter's answer is not Prometheus text");
                }
                return Ok(Some(Vec::new()));
            }
        };
        if !self.ok_once {
            self.ok_once = true;
            let gpus: usize = mapped.hosts.iter().map(|h| h.samples.len()).sum();
            let no_smact = mapped.hosts.iter().flat_map(|h| &h.samples).filter(|s| s.sm_active_pct.is_none()).count();
            tracing::info!(url = %url, gpus, "dcgm-exporter scraped");
            if gpus == 0 {
                tracing::warn!(url = %url, "dcgm-exporter lists no GPU metrics (no DCGM_FI_* series with a UUID label)");
            }
            if no_smact > 0 {
                tracing::warn!(url = %url, gpus = no_smact,
                    "no DCGM_FI_PROF_SM_ACTIVE for some GPUs: SM activity is absent (null); enable the profiling \
                     fields in dcgm-exporter's counters file (dcp-metrics-included.csv)");
            }
        }
        if mapped.unkeyed > 0 && self.notes.first(&url, "unkeyed") {
            tracing::warn!(url = %url, series = mapped.unkeyed, "DCGM series without a UUID label were ignored");
        }
        for (uuid, xid) in &mapped.xids {
            if self.last_xid.insert(uuid.clone(), *xid) != Some(*xid) {
                tracing::error!(gpu = %uuid, xid, "XID error reported by DCGM");
            }
        }
        Ok(Some(mapped.hosts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn urls() {
        assert!(parse_url("http://10.0.0.7:9400/metrics").is_ok());
        assert!(parse_url("https://dcgm.example/metrics").is_ok());
        assert!(parse_url("file:///metrics").is_err());
        assert!(parse_url("9400").is_err());
    }

    #[test]
    fn minimal_exposition() {
        let text = "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\"} 0.25\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 100\n\
                    DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"} 40\nsome_other_metric 3\n";
        let m = map_exposition(text, 7, None, "here").unwrap();
        assert_eq!(m.hosts.len(), 1);
        assert_eq!(m.hosts[0].host, "here");
        let s = &m.hosts[0].samples[0];
        assert_eq!((s.uuid.as_str(), s.ts_ms, s.gpu_index), ("GPU-a", 7, Some(0)));
        assert_eq!(s.sm_active_pct, Some(25.0));
        assert_eq!(s.gpu_util_pct, Some(100.0));
        // Not exported: absent, never 0.
        assert_eq!(s.tensor_active_pct, None);
        assert_eq!(s.mem_used_bytes, None);
        assert_eq!(s.processes, None);
        assert_eq!(m.unkeyed, 1);
        assert!(map_exposition("", 1, None, "h").unwrap().hosts.is_empty());
    }
}
