//! Where samples come from. Every source implements [`GpuSource`]; the collector and the pusher
//! only ever see [`HostSamples`].
//!
//! - [`nvml`]: the GPUs of this host, read through NVML (the library under `nvidia-smi`),
//!   GPM counters (SM activity, tensor, DRAM …) on Hopper and newer.
//! - [`dcgm`]: a dcgm-exporter `/metrics` endpoint (how A100 and older fleets get SM activity).
//! - [`replay`], [`simulate`]: recorded traces and synthetic fleets.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use fleetlens_core::{GpuEvent, Sample};

pub mod dcgm;
pub mod notes;
pub mod nvml;
pub mod procinfo;
pub mod replay;
pub mod simulate;

/// Samples of one host read at one instant (or one recorded instant).
#[derive(Debug, Clone, PartialEq)]
pub struct HostSamples {
    pub host: String,
    pub samples: Vec<Sample>,
    /// Labels the source knows about the host and its GPUs (driver version, per-GPU
    /// inventory as `gpu.<uuid>.<key>`, Kubernetes pod …). The collector sends them with the
    /// batch, under the labels given on the command line (which win on a clash).
    pub labels: BTreeMap<String, String>,
    /// What happened to the host's GPUs since the previous reading (XID errors, a GPU lost
    /// or back): sent with the host's next batch.
    pub events: Vec<GpuEvent>,
}

impl HostSamples {
    pub fn new(host: impl Into<String>, samples: Vec<Sample>) -> Self {
        Self { host: host.into(), samples, labels: BTreeMap::new(), events: Vec::new() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read trace {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: line {line}: {message}")]
    Malformed { path: PathBuf, line: usize, message: String },
    #[error("trace {0} holds no samples")]
    Empty(PathBuf),
    /// NVML cannot be used on this host (no driver, no library, no GPU, no permission).
    #[error("{0}")]
    Nvml(String),
    /// A bad `dcgm:URL`.
    #[error("{0}")]
    Dcgm(String),
    /// A live source broke in a way it cannot recover from.
    #[error("{0}")]
    Failed(String),
}

/// A reader of GPU samples.
///
/// Live sources (NVML, dcgm-exporter, the simulator) read the present once per interval;
/// a replay returns recorded instants and ends.
#[async_trait]
pub trait GpuSource: Send {
    /// Short description for logs, e.g. `simulate:16 (seed 1)`.
    fn describe(&self) -> String;

    /// True when the source reads the present and never ends by itself.
    fn is_live(&self) -> bool;

    /// Waits until the next reading is due and returns it; `Ok(None)` once the source is
    /// exhausted. Must be cancel-safe: the collector drops the future on shutdown.
    async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError>;

    /// What completes this source's samples when their batch is sealed, if anything.
    fn finisher(&self) -> Option<Arc<dyn Finisher>> {
        None
    }
}

/// Completes samples just before they are sealed into a batch, with what the source can tell
/// more cheaply for many polls at once. NVML: kernel (and memory) utilization as the mean over
/// each poll's interval, from one read of the driver's sample buffer per batch rather than one
/// per poll (docs/AGENT.md, "Utilization over the whole interval").
pub trait Finisher: Send + Sync {
    /// Called on a blocking thread with one host's samples, in the order they were read.
    fn finish(&self, samples: &mut [Sample]);
}

/// What a wrapping source adds to each reading of the source it wraps: the kubelet's pod
/// allocations, the Kubernetes API's pod metadata, the reclaim watcher's process board.
#[async_trait]
pub trait Annotate: Send {
    async fn annotate(&mut self, hosts: &mut [HostSamples]);
}

/// The readings of `inner`, each annotated by `annotator` on its way. It describes itself,
/// lives and finishes its samples as `inner` does: a wrapper must not drop the finisher of the
/// source it wraps (NVML's utilization over the whole interval).
pub struct Annotated<A> {
    pub inner: Box<dyn GpuSource>,
    pub annotator: A,
}

#[async_trait]
impl<A: Annotate> GpuSource for Annotated<A> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn is_live(&self) -> bool {
        self.inner.is_live()
    }

    async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
        let Some(mut hosts) = self.inner.next().await? else { return Ok(None) };
        self.annotator.annotate(&mut hosts).await;
        Ok(Some(hosts))
    }

    fn finisher(&self) -> Option<Arc<dyn Finisher>> {
        self.inner.finisher()
    }
}

/// The `--source` flag.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    Nvml,
    Dcgm(String),
    Replay(PathBuf),
    Simulate(u32),
}

/// Most GPUs the simulator will fake (a large fleet, still cheap to generate each second).
pub const MAX_SIMULATED_GPUS: u32 = 100_000;

impl FromStr for SourceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind, arg) {
            ("nvml", None) => Ok(Self::Nvml),
            ("dcgm", Some(url)) if !url.trim().is_empty() => Ok(Self::Dcgm(url.to_string())),
            ("replay", Some(path)) if !path.is_empty() => Ok(Self::Replay(PathBuf::from(path))),
            ("simulate", Some(n)) => match n.parse::<u32>() {
                Ok(n) if (1..=MAX_SIMULATED_GPUS).contains(&n) => Ok(Self::Simulate(n)),
                _ => Err(format!("simulate:N needs N between 1 and {MAX_SIMULATED_GPUS}, got `{n}`")),
            },
            ("dcgm", _) => Err("dcgm needs the exporter's URL: dcgm:http://HOST:9400/metrics".into()),
            ("replay", _) => Err("replay needs a trace path: replay:PATH".into()),
            ("simulate", None) => Err("simulate needs a GPU count: simulate:N".into()),
            _ => Err(format!("unknown source `{s}`; expected nvml, dcgm:URL, replay:PATH or simulate:N")),
        }
    }
}

impl fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Nvml => write!(f, "nvml"),
            Self::Dcgm(url) => write!(f, "dcgm:{url}"),
            Self::Replay(p) => write!(f, "replay:{}", p.display()),
            Self::Simulate(n) => write!(f, "simulate:{n}"),
        }
    }
}

/// `--nvml-util-window`: which utilizations are the mean over the poll interval (NVML's sample
/// buffers) rather than the driver's newest short period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UtilWindowMode {
    /// Kernel and memory utilization over the interval.
    Both,
    /// Kernel utilization over the interval; memory utilization instantaneous.
    Kernel,
    /// Both instantaneous.
    Off,
}

/// What the sources need from the command line.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    pub interval: Duration,
    pub host: Option<String>,
    pub seed: u64,
    /// Replay pacing factor; `None` = as fast as possible.
    pub speed: Option<f64>,
    /// Replay: restamp the trace so its first sample is "now".
    pub rebase_ts: bool,
    /// NVML: read per-process SM utilization (a costly call) every N polls; 0 = never.
    pub process_util_every: u32,
    /// NVML: read the energy counter (a costly call) every N polls; 0 = never.
    pub energy_every: u32,
    /// NVML: read GPM's GRACT (`GraphicsUtil`, most of the GPM call's cost) every N polls, as the
    /// mean over those polls; 0 = never.
    pub gract_every: u32,
    /// NVML: which utilizations are interval means from the sample buffers.
    pub util_window: UtilWindowMode,
    /// NVML: library to load instead of `libnvidia-ml.so.1`.
    pub nvml_lib: Option<PathBuf>,
    /// Where the process table is (`/proc`, or the host's /proc mounted into a container).
    pub proc_root: PathBuf,
    /// `--label-from-env` variable names: read from each GPU process's environment into its
    /// owner's labels.
    pub label_from_env: Vec<String>,
}

impl Default for SourceOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            host: None,
            seed: 1,
            speed: None,
            rebase_ts: false,
            process_util_every: nvml::DEFAULT_PROCESS_UTIL_EVERY,
            energy_every: nvml::DEFAULT_ENERGY_EVERY,
            gract_every: nvml::DEFAULT_GRACT_EVERY,
            util_window: UtilWindowMode::Kernel,
            nvml_lib: None,
            proc_root: PathBuf::from("/proc"),
            label_from_env: Vec::new(),
        }
    }
}

/// Opens the source named by `--source`. Errors here are configuration errors: the agent
/// reports them and exits before sending anything.
pub fn open(spec: &SourceSpec, opts: &SourceOptions) -> Result<Box<dyn GpuSource>, SourceError> {
    match spec {
        SourceSpec::Nvml => Ok(Box::new(nvml::NvmlSource::open(opts)?)),
        SourceSpec::Dcgm(url) => Ok(Box::new(dcgm::DcgmSource::open(url, opts)?)),
        SourceSpec::Replay(path) => Ok(Box::new(replay::ReplaySource::open(path, opts)?)),
        SourceSpec::Simulate(n) => Ok(Box::new(simulate::SimulatedSource::new(*n, opts))),
    }
}

/// The host name to report: `--host`, else the machine's name, else `localhost`.
pub fn local_host_name(opts: &SourceOptions) -> String {
    if let Some(h) = opts.host.as_deref().filter(|h| !h.trim().is_empty()) {
        return h.to_string();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.trim().is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// A percentage as it may be sent (finite, clamped into 0–100: drivers overshoot by rounding)
/// and a non-negative reading (watts, MiB/s …): the rules the DCGM mapping in core applies too.
pub use fleetlens_core::dcgm::{non_negative, pct};

/// Wall clock as Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Fires once per interval for live sources. Created lazily because tokio's timers need a
/// running runtime.
#[derive(Debug)]
pub struct Ticker {
    period: Duration,
    interval: Option<tokio::time::Interval>,
}

impl Ticker {
    pub fn new(period: Duration) -> Self {
        Self { period, interval: None }
    }

    /// The first tick is immediate; a late tick delays the next ones instead of bursting, so
    /// a stalled host does not produce a flurry of samples with the same values.
    pub async fn tick(&mut self) {
        let period = self.period;
        let interval = self.interval.get_or_insert_with(|| {
            let mut i = tokio::time::interval(period);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        interval.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One reading of one sample, with a finisher that marks the samples it finished.
    struct OneReading(bool);

    struct Marking;

    impl Finisher for Marking {
        fn finish(&self, samples: &mut [Sample]) {
            samples.iter_mut().for_each(|s| s.gpu_util_pct = Some(1.0));
        }
    }

    #[async_trait]
    impl GpuSource for OneReading {
        fn describe(&self) -> String {
            "one".into()
        }
        fn is_live(&self) -> bool {
            true
        }
        async fn next(&mut self) -> Result<Option<Vec<HostSamples>>, SourceError> {
            let first = !std::mem::replace(&mut self.0, true);
            Ok(first.then(|| vec![HostSamples::new("h", vec![Sample { uuid: "GPU-1".into(), ..Default::default() }])]))
        }
        fn finisher(&self) -> Option<Arc<dyn Finisher>> {
            Some(Arc::new(Marking))
        }
    }

    struct Labelling;

    #[async_trait]
    impl Annotate for Labelling {
        async fn annotate(&mut self, hosts: &mut [HostSamples]) {
            hosts.iter_mut().for_each(|h| _ = h.labels.insert("annotated".into(), "yes".into()));
        }
    }

    #[tokio::test]
    async fn an_annotated_source_is_its_inner_one_plus_the_annotation() {
        let mut src = Annotated { inner: Box::new(OneReading(false)), annotator: Labelling };
        assert_eq!((src.describe(), src.is_live()), ("one".to_string(), true));
        let hosts = src.next().await.unwrap().unwrap();
        assert_eq!(hosts[0].labels["annotated"], "yes");
        // The inner source's finisher is kept.
        let mut samples = hosts[0].samples.clone();
        src.finisher().expect("the inner finisher").finish(&mut samples);
        assert_eq!(samples[0].gpu_util_pct, Some(1.0));
        assert!(src.next().await.unwrap().is_none());
    }

    #[test]
    fn parses_specs() {
        assert_eq!("nvml".parse::<SourceSpec>().unwrap(), SourceSpec::Nvml);
        assert_eq!(
            "dcgm:http://h:9400/metrics".parse::<SourceSpec>().unwrap(),
            SourceSpec::Dcgm("http://h:9400/metrics".into())
        );
        assert_eq!("replay:/a/b.jsonl".parse::<SourceSpec>().unwrap(), SourceSpec::Replay("/a/b.jsonl".into()));
        assert_eq!("simulate:3".parse::<SourceSpec>().unwrap(), SourceSpec::Simulate(3));
        for bad in ["", "nvml:x", "dcgm", "dcgm:", "replay:", "simulate", "simulate:0", "simulate:x", "cuda"] {
            assert!(bad.parse::<SourceSpec>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn nvml_without_a_library_says_so() {
        let opts = SourceOptions { nvml_lib: Some("/nonexistent/libnvidia-ml.so.1".into()), ..Default::default() };
        let err = open(&SourceSpec::Nvml, &opts).err().expect("must fail");
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/libnvidia-ml.so.1") && msg.contains("driver"), "{msg}");
    }

    #[test]
    fn dcgm_needs_an_http_url() {
        let opts = SourceOptions::default();
        for bad in ["ftp://h/metrics", "not a url", "http://"] {
            let err = open(&SourceSpec::Dcgm(bad.into()), &opts).err().expect("must fail");
            assert!(matches!(err, SourceError::Dcgm(_)), "{bad}: {err}");
        }
        assert!(open(&SourceSpec::Dcgm("http://127.0.0.1:9400/metrics".into()), &opts).is_ok());
    }

    #[test]
    fn percentages_are_clamped_or_dropped() {
        assert_eq!(pct(100.3), Some(100.0));
        assert_eq!(pct(-0.1), Some(0.0));
        assert_eq!(pct(42.5), Some(42.5));
        assert_eq!(pct(f64::NAN), None);
        assert_eq!(non_negative(-1.0), None);
        assert_eq!(non_negative(0.0), Some(0.0));
    }
}
