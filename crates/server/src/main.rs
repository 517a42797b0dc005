use std::io::IsTerminal;

use clap::Parser;
use fleetlens_server::Config;
use fleetlens_server::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// mimalloc, not glibc's malloc: large reads (a fleet summary of 10,000 GPUs reads over a
/// million rows) are allocated on the database connections' threads and freed on the runtime's;
/// glibc kept each thread arena at its peak and a server grew to 24 GB and was OOM-killed after
/// 30 such reads (analytics-bench). mimalloc returns freed pages to the system.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    fleetlens_server::serve(config).await?;
    Ok(())
}
