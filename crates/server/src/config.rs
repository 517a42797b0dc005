//! Server configuration: flags with environment fallbacks (names in README.md and docs/).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Parser)]
#[command(name = "fleetlens-server", version, about = "Fleetlens server: GPU-efficiency monitoring")]
pub struct Config {
    /// Address to listen on (port 0 picks a free port; the URL is printed at start).
    #[arg(long, env = "FLEETLENS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// sqlite://PATH (created if missing) or postgres://…; migrations run at start.
    #[arg(long, env = "FLEETLENS_DATABASE_URL", default_value = "sqlite://fleetlens.db")]
    pub database_url: String,

    /// Directory of the built dashboard (frontend/build.sh).
    #[arg(long, env = "FLEETLENS_STATIC_DIR", default_value = "frontend/dist")]
    pub static_dir: PathBuf,

    /// When set, this string (at least 32 characters) is ensured to be a valid `admin` API key
    /// of the default organisation; a key of an earlier value is revoked at start, also when
    /// the variable is unset.
    #[arg(long, env = "FLEETLENS_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// How long raw samples are kept.
    #[arg(long, env = "FLEETLENS_RAW_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub raw_retention: Duration,

    /// How far back the fleet summary's `top_owners` reach (they are computed from raw samples
    /// on every uncached summary, about 15–30 ms per GPU-hour); `0s` leaves them out.
    #[arg(long, env = "FLEETLENS_SUMMARY_OWNERS_SPAN", default_value = "24h", value_parser = humantime::parse_duration)]
    pub summary_owners_span: Duration,

    /// How long 1-minute rollups are kept.
    #[arg(long, env = "FLEETLENS_ROLLUP_1M_RETENTION", default_value = "400d", value_parser = humantime::parse_duration)]
    pub rollup_1m_retention: Duration,

    /// How long 1-hour rollups are kept.
    #[arg(long, env = "FLEETLENS_ROLLUP_1H_RETENTION", default_value = "400d", value_parser = humantime::parse_duration)]
    pub rollup_1h_retention: Duration,

    /// How long after its end a minute waits before the rollup job writes its rollup and credit
    /// once (docs/ARCHITECTURE.md, "Rollups written once"): samples arriving within this bound
    /// are in that one write; later ones reopen the minute and it is written again. At least
    /// 60 s. Reads include the minutes not written yet, so this changes no answer.
    #[arg(long, env = "FLEETLENS_ROLLUP_LATENESS", default_value = "2m", value_parser = humantime::parse_duration)]
    pub rollup_lateness: Duration,

    /// How often the rollup job looks for closed minutes to write.
    #[arg(long, env = "FLEETLENS_ROLLUP_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub rollup_interval: Duration,

    /// How often the retention job runs.
    #[arg(long, env = "FLEETLENS_RETENTION_INTERVAL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub retention_interval: Duration,

    /// How often the sealing job moves the raw samples of closed GPU-hours into compressed
    /// column blocks (an hour is sealed once it ended `fleetlens_store::SEAL_LATENESS_MS` ago).
    #[arg(long, env = "FLEETLENS_SEAL_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub seal_interval: Duration,

    /// Largest accepted request body, compressed, in bytes.
    #[arg(long, env = "FLEETLENS_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest accepted ingest body once decoded (after gzip; plain JSON bodies too), in bytes:
    /// larger ones get 413 as soon as the limit is read. An 8-GPU host's minute of samples is
    /// ~0.42 MB (docs/SECURITY.md).
    #[arg(long, env = "FLEETLENS_MAX_DECODED_BYTES", default_value_t = DEFAULT_MAX_DECODED_BYTES)]
    pub max_decoded_bytes: usize,

    /// Log format on stderr.
    #[arg(long, env = "FLEETLENS_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub alerts: crate::alerts::AlertsConfig,

    #[command(flatten)]
    pub accounts: crate::accounts::AccountsConfig,

    #[command(flatten)]
    pub stream: crate::live::StreamConfig,

    #[command(flatten)]
    pub actions: crate::actions::ActionsConfig,

    /// Internal address ranges notifications (webhook, Slack, Alertmanager) may reach,
    /// comma-separated CIDRs (e.g. the in-cluster Alertmanager's `10.96.0.0/12`). Loopback,
    /// private, link-local (cloud metadata), unique-local and CGNAT addresses are refused
    /// unless listed here (docs/SECURITY.md).
    #[arg(long, env = "FLEETLENS_WEBHOOK_ALLOW_CIDRS", value_name = "CIDR,...", value_parser = crate::egress::parse_cidrs)]
    pub webhook_allow_cidrs: Option<crate::egress::AllowCidrs>,

    /// Most samples in one ingest batch: a longer `samples` list gets 413 while it is decoded.
    /// Keep the agents' `--batch-max` (5,000 by default) at or below it.
    #[arg(long, env = "FLEETLENS_MAX_SAMPLES_PER_BATCH", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_samples_per_batch: u32,

    /// Ingest requests one API key (or one dashboard user) may have in flight; more get 429
    /// with Retry-After (agents retry).
    #[arg(long, env = "FLEETLENS_MAX_CONCURRENT_INGEST_PER_KEY", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_ingest_per_key: u32,

    /// Most GPUs one organisation may register: a batch that would add more gets 429
    /// (`quota_exceeded`) and nothing of it is stored.
    #[arg(long, env = "FLEETLENS_MAX_GPUS_PER_ORG", default_value_t = 100_000)]
    pub max_gpus_per_org: u64,

    /// Most hosts one organisation's GPUs may be on (a batch from one more: 429).
    #[arg(long, env = "FLEETLENS_MAX_HOSTS_PER_ORG", default_value_t = 10_000)]
    pub max_hosts_per_org: u64,

    /// Most teams one organisation may have for a batch's `team` label to create one more
    /// (429 otherwise; teams an admin creates are not counted against it).
    #[arg(long, env = "FLEETLENS_MAX_TEAMS_PER_ORG", default_value_t = 1_000)]
    pub max_teams_per_org: u64,

    /// A GPU stays with the host it is registered on: a batch of another host that names it gets
    /// 409 until an admin moves it (`PUT /api/v1/gpus/{uuid}/host`). With this set, another
    /// host may also take it once its old host has sent nothing of it for this long (GPUs that
    /// are physically moved, hosts renamed), e.g. `24h`. Unset: only admins move GPUs.
    #[arg(long, env = "FLEETLENS_GPU_MOVE_AFTER", value_parser = humantime::parse_duration)]
    pub gpu_move_after: Option<Duration>,
}

/// `--max-decoded-bytes` by default: 8 MiB. An 8-GPU host's minute of samples decodes to
/// 0.42 MB (4 × that with 8 processes per GPU), the agent's default flush of 5 s to 35 kB, its
/// largest default batch (`--batch-max 5000`) to 4.4 MB (`cargo run -p fleetlens-agent
/// --example batch-size`; docs/SECURITY.md).
pub const DEFAULT_MAX_DECODED_BYTES: usize = 8 * 1024 * 1024;

impl Config {
    pub fn retention_policy(&self) -> fleetlens_store::RetentionPolicy {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        fleetlens_store::RetentionPolicy {
            raw_ms: ms(self.raw_retention),
            rollup_1m_ms: ms(self.rollup_1m_retention),
            rollup_1h_ms: ms(self.rollup_1h_retention),
        }
    }
}
