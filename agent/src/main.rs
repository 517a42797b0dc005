//! `fleetlens-agent`: command-line wiring. The work is in the library modules.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use fleetlens_agent::cli::{Cli, KubeMetadata, LogFormat};
use fleetlens_agent::collector::{self, CollectorConfig};
use fleetlens_agent::kube_meta::{self, ApiEndpoint, KubeMeta, KubeMetaError, MetaConfig, WithKubeMeta};
use fleetlens_agent::kubelet::WithKubelet;
use fleetlens_agent::pusher::{Backoff, Mode, Pusher, PusherConfig};
use fleetlens_agent::source::{self, GpuSource, SourceOptions, SourceSpec};
use fleetlens_agent::spool::{SharedSpool, Spool};
use tokio::sync::{Notify, watch};
use tracing_subscriber::EnvFilter;

/// One thread runs every task (reading schedule, batching, HTTP); the blocking calls (NVML, the
/// spool's file writes with fsync) run on tokio's blocking pool, where an idle thread is kept
/// for the next poll instead of being started anew. Fewer threads than a multi-threaded runtime:
/// less memory (each thread that allocates gets a malloc arena of its own) and fewer wake-ups.
fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // At most one NVML poll and two spool operations run at once; the bound only matters
        // if the disk or the driver hangs.
        .max_blocking_threads(8)
        .thread_keep_alive(Duration::from_secs(120))
        .build();
    match runtime {
        Ok(rt) => rt.block_on(agent_main()),
        Err(e) => {
            eprintln!("fleetlens-agent: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn agent_main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let opts = SourceOptions {
        interval: cli.interval,
        host: cli.host.clone(),
        seed: cli.seed,
        // Replay paces at 1x unless told otherwise; `--once` alone means "as fast as possible".
        speed: cli.speed.or(if cli.once { None } else { Some(1.0) }),
        rebase_ts: cli.rebase_ts,
        process_util_every: cli.nvml_process_util_every,
        energy_every: cli.nvml_energy_every,
        gract_every: cli.nvml_gract_every,
        util_window: cli.nvml_util_window,
        nvml_lib: cli.nvml_lib.clone(),
        proc_root: cli.proc_root.clone(),
        label_from_env: cli.label_from_env.clone(),
    };
    if cli.rebase_ts && !matches!(cli.source, SourceSpec::Replay(_)) {
        Cli::command().error(ErrorKind::ArgumentConflict, "--rebase-ts only applies to --source replay:PATH").exit();
    }
    // An unavailable source or an unreadable trace is a usage error: say so the way clap
    // does, before anything starts.
    let src = match source::open(&cli.source, &opts) {
        Ok(src) => src,
        Err(e) => Cli::command().error(ErrorKind::ValueValidation, format!("--source: {e}")).exit(),
    };
    // Pod allocations from the kubelet ride on every source's samples (off where the socket
    // is absent, or the flag is empty).
    let src: Box<dyn GpuSource> = if cli.kubelet_socket.as_os_str().is_empty() {
        src
    } else {
        Box::new(WithKubelet::new(src, cli.kubelet_socket.clone(), cli.kubelet_refresh))
    };
    // Pod and namespace metadata from the Kubernetes API, on the allocations and processes.
    let src = match kube_metadata(&cli).await {
        Ok(Some(meta)) => Box::new(WithKubeMeta::new(src, meta)) as Box<dyn GpuSource>,
        Ok(None) => src,
        Err(e) => Cli::command().error(ErrorKind::ValueValidation, e.to_string()).exit(),
    };
    match run(cli, src).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "fleetlens-agent failed");
            ExitCode::FAILURE
        }
    }
}

/// The Kubernetes API watches `--kube-metadata` asks for: `auto` only inside a cluster, and
/// only with a node name to watch the pods of.
async fn kube_metadata(cli: &Cli) -> Result<Option<KubeMeta>, KubeMetaError> {
    let endpoint = match &cli.kube_metadata {
        KubeMetadata::Off => return Ok(None),
        KubeMetadata::Auto if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() => return Ok(None),
        KubeMetadata::Auto => ApiEndpoint::Inferred,
        KubeMetadata::Url(url) => ApiEndpoint::Url(url.clone()),
    };
    let Some(node) = cli.kube_node.clone().or_else(|| cli.host.clone()).filter(|n| !n.is_empty()) else {
        tracing::warn!("Kubernetes metadata needs this node's name (--kube-node, or --host): not read");
        return Ok(None);
    };
    let client = kube_meta::client(&endpoint).await?;
    Ok(Some(KubeMeta::start(
        client,
        MetaConfig {
            node,
            team_label: cli.kube_team_label.clone(),
            user_label: cli.kube_user_label.clone(),
            user_annotation: cli.kube_user_annotation.clone().filter(|a| !a.is_empty()),
        },
    )))
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => fmt.init(),
        LogFormat::Json => fmt.json().flatten_event(true).init(),
    }
}

async fn run(cli: Cli, src: Box<dyn GpuSource>) -> anyhow::Result<ExitCode> {
    let spool = Spool::open(&cli.spool_dir, cli.spool_max_bytes)
        .with_context(|| format!("cannot open the spool in {}", cli.spool_dir.display()))?;
    if !spool.is_empty() {
        tracing::info!(
            batches = spool.len(),
            samples = spool.samples(),
            "sending batches left by an earlier run first"
        );
    }
    let spool = SharedSpool::new(spool);
    let pusher = Pusher::new(PusherConfig {
        server: cli.server.clone(),
        api_key: cli.api_key.clone(),
        timeout: cli.request_timeout,
        backoff: Backoff { max: cli.retry_max_delay, ..Backoff::default() },
    })?;
    if cli.api_key.is_none() {
        tracing::warn!("no --api-key / FLEETLENS_API_KEY given; the server will likely refuse the samples");
    }
    tracing::info!(source = %src.describe(), url = pusher.url(), spool = %cli.spool_dir.display(),
        flush_interval = %humantime::format_duration(cli.flush_interval), version = fleetlens_agent::pusher::AGENT_VERSION, "fleetlens-agent starting");

    let src: Box<dyn GpuSource> = if cli.allow_reclaim_kill {
        let board = fleetlens_agent::reclaim::ProcessBoard::default();
        tokio::spawn(fleetlens_agent::reclaim::run(
            cli.server.clone(),
            cli.api_key.clone(),
            board.clone(),
            cli.proc_root.clone(),
            cli.reclaim_poll_interval,
        ));
        tracing::info!("idle-reclaim kills allowed on this host (--allow-reclaim-kill)");
        Box::new(fleetlens_agent::reclaim::Watched { inner: src, annotator: board })
    } else {
        src
    };
    let wake = Arc::new(Notify::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (mode_tx, mode_rx) = watch::channel(Mode::Follow);
    let live = src.is_live();
    let ccfg = CollectorConfig {
        batch_max: cli.batch_max as usize,
        // A live source: one request per host per --flush-interval. A replay: about one
        // request per second of paced trace (or per --batch-max samples when unpaced).
        flush_every: if live { cli.flush_interval } else { Duration::from_secs(1) },
        reading_interval: if live { cli.interval } else { Duration::ZERO },
        once: cli.once,
        labels: cli.labels.iter().cloned().collect::<BTreeMap<_, _>>(),
        flush_on_state_change: cli.flush_on_state_change,
        wire_format: cli.wire_format,
    };
    let mut collector = tokio::spawn(collector::run(src, spool.clone(), wake.clone(), ccfg, stop_rx));
    let mut push = tokio::spawn({
        let spool = spool.clone();
        async move { pusher.run(spool, wake, mode_rx).await }
    });

    let signal = shutdown_signal();
    tokio::pin!(signal);
    let mut interrupted = false;
    let collected = tokio::select! {
        r = &mut collector => r,
        // The pusher only returns early on a spool failure: stop collecting into a spool
        // that nobody drains, and let the service manager restart us.
        r = &mut push => {
            let _ = stop_tx.send(true);
            let _ = (&mut collector).await;
            let err = match r {
                Ok(Err(e)) => anyhow::Error::from(e),
                Ok(Ok(_)) => anyhow::anyhow!("the pusher stopped unexpectedly"),
                Err(e) => anyhow::Error::from(e).context("pusher task panicked"),
            };
            return Err(err);
        }
        _ = &mut signal => {
            tracing::info!("shutting down; unsent samples stay spooled for the next start");
            interrupted = true;
            let _ = stop_tx.send(true);
            let _ = mode_tx.send(Mode::Stop);
            (&mut collector).await
        }
    };
    let collected = match collected.context("collector task panicked")? {
        Ok(sum) => sum,
        Err(e) => {
            let _ = mode_tx.send(Mode::Stop);
            let _ = push.await;
            return Err(e.into());
        }
    };
    let pushed = if interrupted {
        push.await
    } else {
        // Nothing more is coming: send what is spooled, then finish.
        tracing::info!(
            samples = collected.samples,
            batches = collected.batches,
            "collection finished; waiting until the server has acknowledged every sample"
        );
        let _ = mode_tx.send(Mode::Drain);
        tokio::select! {
            r = &mut push => r,
            _ = &mut signal => {
                tracing::info!("shutting down; unsent samples stay spooled for the next start");
                let _ = mode_tx.send(Mode::Stop);
                (&mut push).await
            }
        }
    };
    let pushed = pushed.context("pusher task panicked")??;
    let left = spool.peek(|s| (s.len(), s.samples()));
    // A run that was meant to deliver everything (--once, a finished replay) failed if the
    // server refused part of it; a daemon being stopped already logged each rejection.
    if pushed.batches_rejected > 0 && pushed.drained {
        let dir = spool.peek(|s| s.rejected_dir());
        tracing::error!(batches = pushed.batches_rejected, samples = pushed.samples_rejected,
            kept_in = %dir.display(), "the server rejected some samples; they were not stored");
        return Ok(ExitCode::FAILURE);
    }
    if pushed.drained {
        tracing::info!(
            samples = pushed.samples_sent,
            batches = pushed.batches_sent,
            "every sample acknowledged by the server"
        );
    } else {
        tracing::info!(
            samples_sent = pushed.samples_sent,
            spooled_batches = left.0,
            spooled_samples = left.1,
            "stopped"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C, or SIGTERM from a service manager.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
