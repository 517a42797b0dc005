//! `--source dcgm:URL`: scrapes a dcgm-exporter `/metrics` endpoint once per interval and maps
//! DCGM's fields to the sample format. This is how GPUs older than Hopper (A100, L40S …) get SM
//! activity, occupancy, tensor and DRAM activity: from DCGM's profiling fields
//! (`DCGM_FI_PROF_*`), which are ratios 0–1 and become percentages here.
//!
//! Keyed by the `UUID` label (plus `GPU_I_ID` for MIG instances, which dcgm-exporter labels with
//! their parent's UUID); the host is the `Hostname` label unless `--host` is given. Kubernetes
//! `pod` / `namespace` / `container` labels are sent as batch labels `gpu.<uuid>.pod` & co.
//! The mapping itself is `fleetlens_core::dcgm`, shared with the server's remote-write intake:
//! dcgm-exporter knows no PIDs, so a GPU held by a pod (or an HPC job) lists one process with
//! pid 0 carrying that owner, and one without such labels has `processes` absent (null).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use fleetlens_core::dcgm::{Added, DcgmAssembler};
use prometheus_parse::{Scrape, Value};

use super::notes::Notes;
use super::{GpuSource, HostSamples, SourceError, SourceOptions, Ticker, local_host_name, now_ms};

/// A mapped scrape.
#[derive(Debug, Default)]
pub struct Mapped {
    pub hosts: Vec<HostSamples>,
    /// Last XID error per GPU (`DCGM_FI_DEV_XID_ERRORS`), where non-zero.
    pub xids: Vec<(String, u64)>,
    /// Series that named no GPU (no `UUID` label) and were left out.
    pub unkeyed: usize,
}

/// Maps a dcgm-exporter exposition to samples stamped `ts_ms`, through the mapping the server's
/// remote-write intake shares (`fleetlens_core::dcgm`). `host` (from `--host`) wins over the
/// `Hostname` label; `fallback_host` is used where neither says.
pub fn map_exposition(text: &str, ts_ms: i64, host: Option<&str>, fallback_host: &str) -> Result<Mapped, String> {
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).map_err(|e| e.to_string())?;
    let mut assembler = DcgmAssembler::new();
    let mut unkeyed = 0;
    for s in &scrape.samples {
        let v = match s.value {
            Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
            _ => continue,
        };
        if assembler.add(&s.metric, |name| s.labels.get(name), ts_ms, v) == Added::Unkeyed {
            unkeyed += 1;
        }
    }
    let mut per_host: BTreeMap<String, HostSamples> = BTreeMap::new();
    let mut xids = Vec::new();
    for gpu in assembler.finish() {
        let uuid = &gpu.sample.uuid;
        if let Some(x) = gpu.xid {
            xids.push((uuid.clone(), x));
        }
        let h = host.map(str::to_string).or(gpu.host).unwrap_or_else(|| fallback_host.to_string());
        let entry = per_host.entry(h.clone()).or_insert_with(|| HostSamples::new(h, Vec::new()));
        for (key, val) in gpu.labels {
            entry.labels.insert(format!("gpu.{uuid}.{key}"), val);
        }
        entry.samples.push(gpu.sample);
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
