//! The same samples into VictoriaMetrics (single-node) through `/api/v1/import` (JSON lines).
//!
//! Durability: VictoriaMetrics acknowledges an import (204) once the rows sit in its in-memory
//! buffers; they reach disk within about a second. The timed window therefore ends only after
//! `/internal/force_flush` has returned, which writes the buffers out to searchable parts.
//! Verification then asks `/api/v1/series/count` (expected GPUs × 22 series) and counts every
//! stored datapoint with the instant query
//! `sum(count_over_time({__name__=~"fleetlens_.+"}[W]))` at the last timestamp, W covering all
//! samples (expected GPU-samples × 22).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use reqwest::StatusCode;
use serde_json::Value;

use crate::child::{ChildGuard, free_port, wait_http_ok};
use crate::data::{Body, Plan, VM_FIELDS};
use crate::procstat::{self, MachineCpu};
use crate::send::{Request, Target, send_all};
use crate::{Measured, Raw, Settings};

pub const LABEL: &str = "victoria-metrics";

pub async fn run(settings: &Settings, plan: &Plan, bodies: &[Body]) -> Result<Measured> {
    let dir = tempfile::Builder::new().prefix("fleetlens-bench-vm-").tempdir()?;
    let port = free_port()?;
    let mut cmd = Command::new(&settings.vm_bin);
    cmd.arg(format!("-storageDataPath={}", dir.path().display()))
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg("-loggerLevel=ERROR")
        // Make just-flushed samples visible to the verification query at once.
        .arg("-search.latencyOffset=0s")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let child = cmd.spawn().with_context(|| format!("spawn {}", settings.vm_bin.display()))?;
    let mut vm = ChildGuard { child, what: "victoria-metrics".into() };
    let base = format!("http://127.0.0.1:{port}");
    let client = crate::http_client(settings.concurrency)?;
    wait_http_ok(&client, &mut vm, &format!("{base}/health"), Duration::from_secs(60)).await?;
    eprintln!("[{LABEL}] pid {} at {base}, data in {}", vm.pid(), dir.path().display());

    let requests: Vec<Request> = bodies.iter().map(|b| Request { body: b.wire.clone(), samples: b.samples }).collect();
    let target = Target {
        url: format!("{base}/api/v1/import"),
        bearer: None,
        content_type: "application/json",
        content_encoding: "gzip",
        success: StatusCode::NO_CONTENT,
    };

    let load = procstat::load_average();
    let pid = vm.pid();
    let cpu0 = procstat::cpu_seconds(pid)?;
    let threads0 = procstat::thread_ticks(pid);
    let me0 = procstat::cpu_seconds(std::process::id())?;
    let machine0 = MachineCpu::now();
    let start = Instant::now();

    let sent = send_all(&client, &target, requests, settings.concurrency).await?;
    let flush = client.get(format!("{base}/internal/force_flush")).send().await.context("force_flush")?;
    if !flush.status().is_success() {
        bail!("/internal/force_flush answered {}", flush.status());
    }
    let wall = start.elapsed();

    let machine1 = MachineCpu::now();
    let me1 = procstat::cpu_seconds(std::process::id())?;
    let cpu1 = procstat::cpu_seconds(pid)?;
    let threads1 = procstat::thread_ticks(pid);
    let peak_rss = procstat::peak_rss_bytes(pid)?;

    let expected_points: u64 = bodies.iter().map(|b| b.datapoints as u64).sum();
    let expected_series = (plan.gpus * VM_FIELDS.len()) as u64;
    let (series, points) = verify(&client, &base, plan, expected_series, expected_points).await?;
    eprintln!("[{LABEL}] verified: {series} series, {points} datapoints after force_flush");
    vm.kill();
    drop(dir);

    Ok(Measured::new(
        Raw {
            label: LABEL,
            wall,
            wall_to_last_ack: sent.wall,
            server_cpu_s: cpu1 - cpu0,
            db_cpu_s: None,
            client_cpu_s: me1 - me0,
            machine_busy_pct: machine1.busy_pct_since(&machine0),
            server_threads: procstat::thread_seconds_between(&threads0, &threads1),
            peak_rss_bytes: peak_rss,
            load_before: load,
            verified: points / VM_FIELDS.len() as u64,
            verify_method: format!(
                "/internal/force_flush, then /api/v1/series/count = {series} and \
                 sum(count_over_time({{__name__=~\"fleetlens_.+\"}}[W])) = {points} datapoints (/{})",
                VM_FIELDS.len()
            ),
        },
        bodies,
        &sent,
    ))
}

/// Series count and datapoint count; retried for a few seconds in case parts are still being
/// registered right after the flush.
async fn verify(
    client: &reqwest::Client,
    base: &str,
    plan: &Plan,
    want_series: u64,
    want_points: u64,
) -> Result<(u64, u64)> {
    let window_s = (plan.last_ts_ms() - plan.first_ts_ms()) / 1000 + 120;
    let at = plan.last_ts_ms() as f64 / 1000.0 + 1.0;
    let query = format!("sum(count_over_time({{__name__=~\"fleetlens_.+\"}}[{window_s}s]))");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let series: Value = client.get(format!("{base}/api/v1/series/count")).send().await?.json().await?;
        let series = series["data"][0].as_u64().with_context(|| format!("series/count answered {series}"))?;
        let answer: Value = client
            .get(format!("{base}/api/v1/query"))
            .query(&[("query", query.as_str()), ("time", &at.to_string()), ("nocache", "1")])
            .send()
            .await?
            .json()
            .await?;
        if answer["status"] != "success" {
            bail!("query {query} failed: {answer}");
        }
        let points =
            answer["data"]["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) as u64;
        if series == want_series && points == want_points {
            return Ok((series, points));
        }
        if Instant::now() > deadline {
            bail!(
                "durability check failed: VictoriaMetrics holds {series} series (expected {want_series}) and \
                 {points} datapoints (expected {want_points})"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `victoria-metrics` from PATH, else the Debian package's path.
pub fn default_bin() -> std::path::PathBuf {
    let from_path = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("victoria-metrics")).find(|c| c.is_file()));
    from_path.unwrap_or_else(|| Path::new("/usr/bin/victoria-metrics").to_path_buf())
}
