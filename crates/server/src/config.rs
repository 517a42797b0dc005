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

    /// How often the retention job runs.
    #[arg(long, env = "FLEETLENS_RETENTION_INTERVAL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub retention_interval: Duration,

    /// Largest accepted request body, compressed, in bytes.
    #[arg(long, env = "FLEETLENS_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest accepted ingest body after gzip decompression, in bytes.
    #[arg(long, env = "FLEETLENS_MAX_DECODED_BYTES", default_value_t = 128 * 1024 * 1024)]
    pub max_decoded_bytes: usize,

    /// Log format on stderr.
    #[arg(long, env = "FLEETLENS_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub alerts: crate::alerts::AlertsConfig,

    #[command(flatten)]
    pub accounts: crate::accounts::AccountsConfig,

    /// Internal address ranges notifications (webhook, Slack, Alertmanager) may reach,
    /// comma-separated CIDRs (e.g. the in-cluster Alertmanager's `10.96.0.0/12`). Loopback,
    /// private, link-local (cloud metadata), unique-local and CGNAT addresses are refused
    /// unless listed here (docs/SECURITY.md).
    #[arg(long, env = "FLEETLENS_WEBHOOK_ALLOW_CIDRS", value_name = "CIDR,...", value_parser = crate::egress::parse_cidrs)]
    pub webhook_allow_cidrs: Option<crate::egress::AllowCidrs>,
}

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
