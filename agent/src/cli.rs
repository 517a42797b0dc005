//! Command line of `fleetlens-agent`. The flag names are part of the public surface
//! (docs/AGENT.md); keep them stable.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::source::SourceSpec;
use crate::wire::WireFormat;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "fleetlens-agent",
    version,
    about = "Collects GPU samples and pushes them to a Fleetlens server.",
    long_about = "Collects GPU samples (NVML, dcgm-exporter, a recorded trace or a simulation) and \
                  pushes them to a Fleetlens server. Every batch is written to an on-disk spool \
                  before it is sent and deleted only once the server has acknowledged it, so \
                  samples survive server outages and agent restarts."
)]
pub struct Cli {
    /// Base URL of the Fleetlens server.
    #[arg(long, env = "FLEETLENS_SERVER", default_value = "http://127.0.0.1:8080", value_parser = parse_server_url)]
    pub server: String,

    /// API key with the `ingest` scope, sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "FLEETLENS_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Where samples come from: `nvml`, `dcgm:URL` (a dcgm-exporter /metrics), `replay:PATH`
    /// (a JSONL trace) or `simulate:N` (N synthetic GPUs). Replay keeps the recorded timestamps:
    /// the server takes an old trace as back-fill (paid only over the span it covers, never
    /// "offline"); add `--rebase-ts` to replay it as live data, stamped from now on.
    #[arg(long, env = "FLEETLENS_SOURCE", default_value = "nvml")]
    pub source: SourceSpec,

    /// Polling interval of live sources, e.g. `500ms`, `1s`, `2m`.
    #[arg(long, env = "FLEETLENS_INTERVAL", default_value = "1s", value_parser = parse_positive_duration)]
    pub interval: Duration,

    /// How often the samples read so far are sealed into one batch per host, written to the
    /// spool and pushed (live sources). Readings still happen every `--interval`; a batch is
    /// sealed earlier when it reaches `--batch-max` samples, and on shutdown (SIGTERM, Ctrl-C)
    /// what is pending is spooled and sent after the next start. Each flush costs about 0.75 ms
    /// of CPU (serialisation, compression, spool write with fsync, HTTP request, spool delete):
    /// the default groups 5 readings of the 1-s default; `1s` sends every reading as it comes
    /// (measured on an H100: 2.2 → 2.8 ms of CPU per poll). At or below `--interval`, every
    /// reading is sent at once. Replay ignores it (about one request per second of paced trace).
    #[arg(long, env = "FLEETLENS_FLUSH_INTERVAL", default_value = "5s", value_parser = parse_positive_duration)]
    pub flush_interval: Duration,

    /// Send a host's readings at once, without waiting for `--flush-interval`, when one of its
    /// GPUs turns idle, idle-held, stalled or back to work (judged per reading with the default
    /// thresholds): an open dashboard shows the change about a second later instead of up to a
    /// flush interval later. At most one extra request per host per flush interval.
    #[arg(long, env = "FLEETLENS_FLUSH_ON_STATE_CHANGE", default_value_t = true, action = clap::ArgAction::Set)]
    pub flush_on_state_change: bool,

    /// How batches are written and sent: `protobuf` (zstd; a fraction of the server's CPU to
    /// read) or `json` (gzip; for a server older than the protobuf intake). Batches already
    /// spooled are sent as they were written.
    #[arg(long, env = "FLEETLENS_WIRE_FORMAT", value_enum, default_value_t = WireFormat::Protobuf)]
    pub wire_format: WireFormat,

    /// Directory of the on-disk spool of unsent batches.
    #[arg(long, env = "FLEETLENS_SPOOL_DIR", default_value = "./fleetlens-spool")]
    pub spool_dir: PathBuf,

    /// Upper bound of the spool size; when full, the oldest batches are dropped (with a
    /// warning). Accepts a byte count or a size like `512MiB`, `1GiB`, `200MB`.
    #[arg(long, env = "FLEETLENS_SPOOL_MAX_BYTES", default_value = "1GiB", value_parser = parse_size)]
    pub spool_max_bytes: u64,

    /// Collect once (a live source: one interval; replay: the whole trace), then exit with
    /// status 0 once the server has acknowledged every sample.
    #[arg(long, env = "FLEETLENS_ONCE")]
    pub once: bool,

    /// Replay pacing: recorded gaps divided by X. Without it, replay paces at 1x, or sends as
    /// fast as possible with `--once`.
    #[arg(long, env = "FLEETLENS_SPEED", value_parser = parse_speed)]
    pub speed: Option<f64>,

    /// Host name to report (replay: instead of the trace's `host`; simulate: instead of
    /// `sim-node-XX`).
    #[arg(long, env = "FLEETLENS_HOST")]
    pub host: Option<String>,

    /// Seed of the simulator, so a run can be reproduced.
    #[arg(long, env = "FLEETLENS_SEED", default_value_t = 1)]
    pub seed: u64,

    /// Most samples in one ingest request.
    #[arg(long, env = "FLEETLENS_BATCH_MAX", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_max: u32,

    /// Replay only: shift the trace's timestamps so that its first sample is stamped now
    /// (a live demo instead of a back-fill).
    #[arg(long, env = "FLEETLENS_REBASE_TS")]
    pub rebase_ts: bool,

    /// Label attached to every batch, `KEY=VALUE` (repeatable), e.g. `--label team=ml`. In the
    /// environment: one label.
    #[arg(long = "label", env = "FLEETLENS_LABEL", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// Timeout of one ingest request.
    #[arg(long, env = "FLEETLENS_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub request_timeout: Duration,

    /// Longest wait between two retries of a failed send.
    #[arg(long, env = "FLEETLENS_RETRY_MAX_DELAY", default_value = "60s", value_parser = parse_positive_duration)]
    pub retry_max_delay: Duration,

    /// NVML: read per-process SM utilization every N polls (a costly call: about 1.4 ms of CPU
    /// per GPU on an H100); its window spans every poll since the last read. In between, and with
    /// `0` (never), processes' `sm_pct` is absent.
    #[arg(long, env = "FLEETLENS_NVML_PROCESS_UTIL_EVERY", value_name = "N",
        default_value_t = crate::source::nvml::DEFAULT_PROCESS_UTIL_EVERY)]
    pub nvml_process_util_every: u32,

    /// NVML: read the GPU energy counter every N polls (the costliest call: about 3 ms of CPU
    /// per GPU on an H100). In between, and with `0` (never), `energy_j` is absent and energy
    /// comes from power (read every poll).
    #[arg(long, env = "FLEETLENS_NVML_ENERGY_EVERY", value_name = "N",
        default_value_t = crate::source::nvml::DEFAULT_ENERGY_EVERY)]
    pub nvml_energy_every: u32,

    /// NVML: read GPM's graphics-engine activity (`gr_engine_active_pct`, DCGM's GRACT) every N
    /// polls, as the mean over those N polls (default 5; `1` = every poll). It is most of the
    /// cost of the GPM readings (about 0.76 ms of CPU per GPU on an H100, a third of a poll;
    /// every other GPM metric together costs about 0.1 ms): at 1 the agent's default cost per
    /// poll was 2.63–2.72 ms on an H100, at 5 1.88 ms. In between, and with `0` (never),
    /// `gr_engine_active_pct` is absent; `gpu_util_pct` (the interval mean every poll) measures
    /// nearly the same thing. Hopper and newer only.
    #[arg(long, env = "FLEETLENS_NVML_GRACT_EVERY", value_name = "N",
        default_value_t = crate::source::nvml::DEFAULT_GRACT_EVERY)]
    pub nvml_gract_every: u32,

    /// NVML: where utilization comes from. `both`: kernel and memory utilization are the means
    /// over the whole poll interval, from NVML's utilization sample buffers (one 200-ms period
    /// per entry on an H100); `kernel`: kernel utilization so, memory utilization the
    /// instantaneous rate; `off`: both instantaneous — the busy share of the driver's newest
    /// 200-ms period alone, which aliases on periodic workloads. A buffer is read once per batch
    /// (`--flush-interval`), when the batch is sealed, 0.25 s after its last poll; each read is
    /// one driver call of 1.5–2.7 ms of CPU on an H100. The labels `gpu.<uuid>.util_method` /
    /// `mem_util_method` say which.
    #[arg(long, env = "FLEETLENS_NVML_UTIL_WINDOW", value_enum,
        default_value_t = crate::source::UtilWindowMode::Kernel)]
    pub nvml_util_window: crate::source::UtilWindowMode,

    /// NVML: the library to load instead of `libnvidia-ml.so.1` from the loader's path.
    #[arg(long, env = "FLEETLENS_NVML_LIB", value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,

    /// Where the process table of the GPUs' processes is: `/proc`, or the host's /proc mounted
    /// into the agent's container (NVML reports host PIDs).
    #[arg(long, env = "FLEETLENS_PROC_ROOT", value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,

    /// Owner label from each GPU process's environment: the value of this variable (e.g. a run
    /// or experiment id) goes into the process owner's `labels` (repeatable; reports group by
    /// `label:VAR`). Read from /proc/<pid>/environ, which only root (or the process's own user)
    /// can read; absent otherwise. In the environment: comma-separated names.
    #[arg(long = "label-from-env", env = "FLEETLENS_LABEL_FROM_ENV", value_name = "VAR", value_delimiter = ',',
        value_parser = parse_env_name)]
    pub label_from_env: Vec<String>,

    /// Opt this host in to idle-reclaim kills (docs/ACTIONS.md): poll the server for kill
    /// commands of `agent_kill` policies and send SIGTERM to the process, only when it is on the
    /// named GPU in this agent's newest process list, owned by the named user, and /proc still
    /// shows that user running it. Off by default.
    #[arg(long, env = "FLEETLENS_ALLOW_RECLAIM_KILL")]
    pub allow_reclaim_kill: bool,

    /// How often an opted-in agent asks for kill commands.
    #[arg(long, env = "FLEETLENS_RECLAIM_POLL_INTERVAL", default_value = "5s", value_parser = parse_positive_duration)]
    pub reclaim_poll_interval: Duration,

    /// The kubelet's pod-resources socket (PodResources v1 gRPC API). Where it exists, every
    /// sample carries the pods (namespace, name, container) the kubelet allocated its GPU to,
    /// so a GPU held by a pod whose processes the agent cannot see is still that pod's. Absent
    /// (not on Kubernetes, or not mounted): the feature is off, logged once. Empty: off.
    #[arg(long, env = "FLEETLENS_KUBELET_SOCKET", value_name = "PATH", default_value = crate::kubelet::DEFAULT_SOCKET)]
    pub kubelet_socket: PathBuf,

    /// How often the allocations are listed again (v1 of the API has no watch).
    #[arg(long, env = "FLEETLENS_KUBELET_REFRESH", default_value = "10s", value_parser = parse_positive_duration)]
    pub kubelet_refresh: Duration,

    /// Pod and namespace metadata from the Kubernetes API (read-only watches of this node's
    /// pods and of the namespaces): the namespace's team, the pod's owner and its job ride on
    /// the samples. `auto`: the cluster the agent runs in (its service account, or
    /// `$KUBECONFIG`) when `KUBERNETES_SERVICE_HOST` is set; `off`; or an `http(s)://` URL with
    /// no credentials (`kubectl proxy`).
    #[arg(long, env = "FLEETLENS_KUBE_METADATA", value_name = "auto|off|URL", default_value = "auto", value_parser = parse_kube_metadata)]
    pub kube_metadata: KubeMetadata,

    /// This node's name, whose pods are watched (the DaemonSet gives `spec.nodeName`). Default:
    /// `--host`.
    #[arg(long, env = "FLEETLENS_KUBE_NODE")]
    pub kube_node: Option<String>,

    /// Namespace label that names the namespace's team.
    #[arg(long, env = "FLEETLENS_KUBE_TEAM_LABEL", default_value = crate::kube_meta::DEFAULT_TEAM_LABEL)]
    pub kube_team_label: String,

    /// Pod label that names the pod's owner.
    #[arg(long, env = "FLEETLENS_KUBE_USER_LABEL", default_value = crate::kube_meta::DEFAULT_USER_LABEL)]
    pub kube_user_label: String,

    /// Pod annotation that names the pod's owner (wins over the label where both are set).
    #[arg(long, env = "FLEETLENS_KUBE_USER_ANNOTATION")]
    pub kube_user_annotation: Option<String>,

    /// Log format on stderr. The level comes from `RUST_LOG` (default `info`).
    #[arg(long, env = "FLEETLENS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

fn parse_server_url(s: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("not a URL ({e}); expected e.g. http://127.0.0.1:8080"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme `{}` is not supported; use http:// or https://", url.scheme()));
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// `--kube-metadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeMetadata {
    Auto,
    Off,
    Url(String),
}

fn parse_kube_metadata(s: &str) -> Result<KubeMetadata, String> {
    match s.trim() {
        "auto" => Ok(KubeMetadata::Auto),
        "off" | "" => Ok(KubeMetadata::Off),
        url => parse_server_url(url).map(KubeMetadata::Url),
    }
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e}; expected e.g. 500ms, 1s, 2m"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_speed(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|_| format!("`{s}` is not a number; expected e.g. 1, 10, 0.5"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err("must be a positive number".into());
    }
    Ok(x)
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

fn parse_env_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.len() <= 256 && !s.contains('=') && !s.contains('\0');
    if ok { Ok(s.to_string()) } else { Err(format!("`{s}` is not an environment variable name")) }
}

/// Byte size with an optional unit: `1073741824`, `1GiB`, `512MiB`, `200MB`, `64k`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("`{s}` is not a size; expected e.g. 1GiB, 512MiB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        "ti" | "tib" => 1 << 40,
        other => {
            return Err(format!("unknown size unit `{other}`; use B, KB, MB, GB, KiB, MiB, GiB"));
        }
    };
    let bytes = n * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err("must be at least 1 byte".into());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/AGENT.md promises a `FLEETLENS_*` variable for every flag (systemd units and
    /// containers configure the agent through the environment).
    #[test]
    fn every_flag_has_an_environment_variable() {
        use clap::CommandFactory;
        let missing: Vec<String> = Cli::command()
            .get_arguments()
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            .filter(|a| a.get_env().is_none_or(|e| !e.to_string_lossy().starts_with("FLEETLENS_")))
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(missing.is_empty(), "flags without a FLEETLENS_* variable: {missing:?}");
    }

    #[test]
    fn util_window_modes() {
        use crate::source::UtilWindowMode;
        for (arg, want) in
            [("both", UtilWindowMode::Both), ("kernel", UtilWindowMode::Kernel), ("off", UtilWindowMode::Off)]
        {
            let cli = Cli::try_parse_from(["fleetlens-agent", "--nvml-util-window", arg]).unwrap();
            assert_eq!(cli.nvml_util_window, want);
        }
        let err = Cli::try_parse_from(["fleetlens-agent", "--nvml-util-window", "mean"]).unwrap_err().to_string();
        assert!(err.contains("both") && err.contains("kernel") && err.contains("off"), "{err}");
    }

    #[test]
    fn defaults() {
        let cli = Cli::try_parse_from(["fleetlens-agent"]).unwrap();
        assert_eq!(cli.server, "http://127.0.0.1:8080");
        assert_eq!(cli.source, SourceSpec::Nvml);
        assert_eq!(cli.interval, Duration::from_secs(1));
        assert_eq!(cli.flush_interval, Duration::from_secs(5));
        assert!(cli.flush_on_state_change);
        assert_eq!(cli.batch_max, 5000);
        assert_eq!(cli.nvml_util_window, crate::source::UtilWindowMode::Kernel);
        assert_eq!(cli.spool_max_bytes, 1 << 30);
        assert!(!cli.once);
        assert_eq!(cli.speed, None);
        assert_eq!(cli.nvml_process_util_every, crate::source::nvml::DEFAULT_PROCESS_UTIL_EVERY);
        assert_eq!(cli.nvml_energy_every, crate::source::nvml::DEFAULT_ENERGY_EVERY);
        assert_eq!(cli.nvml_gract_every, 5);
        assert_eq!(cli.nvml_lib, None);
        assert_eq!(cli.proc_root, PathBuf::from("/proc"));
        assert_eq!(cli.kubelet_socket, PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"));
        assert_eq!(cli.kubelet_refresh, Duration::from_secs(10));
        assert_eq!(cli.kube_metadata, KubeMetadata::Auto);
        assert_eq!(cli.kube_team_label, "fleetlens.io/team");
        assert_eq!(cli.kube_user_label, "app.kubernetes.io/part-of");
        assert_eq!((cli.kube_node, cli.kube_user_annotation), (None, None));
    }

    #[test]
    fn parses_every_flag() {
        let cli = Cli::try_parse_from([
            "fleetlens-agent",
            "--server",
            "https://fleet.example.com/",
            "--api-key",
            "k",
            "--source",
            "simulate:16",
            "--interval",
            "500ms",
            "--flush-interval",
            "10s",
            "--flush-on-state-change",
            "false",
            "--spool-dir",
            "/tmp/s",
            "--spool-max-bytes",
            "64MiB",
            "--once",
            "--speed",
            "10",
            "--host",
            "h",
            "--seed",
            "7",
            "--batch-max",
            "100",
            "--label",
            "team=ml",
            "--log-format",
            "json",
            "--nvml-process-util-every",
            "10",
            "--nvml-energy-every",
            "0",
            "--nvml-gract-every",
            "10",
            "--nvml-lib",
            "/opt/nvidia/libnvidia-ml.so.1",
            "--proc-root",
            "/host/proc",
            "--label-from-env",
            "EXPERIMENT_ID",
            "--label-from-env",
            "RUN",
            "--kubelet-socket",
            "/run/kubelet.sock",
            "--kubelet-refresh",
            "30s",
            "--kube-metadata",
            "http://127.0.0.1:8001/",
            "--kube-node",
            "gpu-7",
            "--kube-team-label",
            "example.com/team",
            "--kube-user-annotation",
            "example.com/owner",
        ])
        .unwrap();
        assert_eq!(cli.server, "https://fleet.example.com");
        assert_eq!(cli.source, SourceSpec::Simulate(16));
        assert_eq!(cli.interval, Duration::from_millis(500));
        assert_eq!(cli.flush_interval, Duration::from_secs(10));
        assert!(!cli.flush_on_state_change);
        assert_eq!(cli.spool_max_bytes, 64 << 20);
        assert_eq!(cli.speed, Some(10.0));
        assert_eq!(cli.labels, vec![("team".to_string(), "ml".to_string())]);
        assert_eq!(cli.log_format, LogFormat::Json);
        assert_eq!(cli.nvml_process_util_every, 10);
        assert_eq!(cli.nvml_energy_every, 0);
        assert_eq!(cli.nvml_gract_every, 10);
        assert_eq!(cli.nvml_lib, Some(PathBuf::from("/opt/nvidia/libnvidia-ml.so.1")));
        assert_eq!(cli.proc_root, PathBuf::from("/host/proc"));
        assert_eq!(cli.label_from_env, vec!["EXPERIMENT_ID".to_string(), "RUN".to_string()]);
        assert_eq!(cli.kubelet_socket, PathBuf::from("/run/kubelet.sock"));
        assert_eq!(cli.kubelet_refresh, Duration::from_secs(30));
        assert_eq!(cli.kube_metadata, KubeMetadata::Url("http://127.0.0.1:8001".into()));
        assert_eq!(cli.kube_node.as_deref(), Some("gpu-7"));
        assert_eq!(cli.kube_team_label, "example.com/team");
        assert_eq!(cli.kube_user_annotation.as_deref(), Some("example.com/owner"));
    }

    #[test]
    fn rejects_bad_values() {
        for args in [
            ["--interval", "soon"],
            ["--interval", "0s"],
            ["--flush-interval", "0s"],
            ["--speed", "-1"],
            ["--source", "cuda"],
            ["--source", "simulate:0"],
            ["--server", "ftp://x"],
            ["--batch-max", "0"],
            ["--label-from-env", "A=B"],
            ["--label-from-env", ""],
            ["--spool-max-bytes", "lots"],
            ["--nvml-energy-every", "-1"],
            ["--source", "dcgm:"],
            ["--kubelet-refresh", "0s"],
            ["--kube-metadata", "unix:///tmp/x"],
        ] {
            let r = Cli::try_parse_from(std::iter::once("fleetlens-agent").chain(args));
            assert!(r.is_err(), "{args:?} should be rejected");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("200MB").unwrap(), 200_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("0").is_err());
    }
}
