//! Sends spooled batches to `POST /api/v1/ingest`, oldest first.
//!
//! A batch leaves the spool only when the server answers 200 (durably committed; resending
//! is safe because ingest is idempotent per GPU and timestamp). 400/413/422 mean the batch
//! can never be accepted: it moves to `rejected/`. Everything else (connection errors,
//! timeouts, 5xx, 401/403 while a key is being fixed) is retried with exponential backoff and
//! jitter, and the batch stays spooled meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleetlens_api::{ErrorBody, GpuEvent, INGEST_PATH, IngestBatch, IngestResponse, Sample};
use prost::bytes::Bytes;
use rand::Rng;
use reqwest::StatusCode;
use tokio::sync::{Notify, watch};

use crate::spool::{SharedSpool, SpoolError};
use crate::wire::{Batch, WireFormat};

pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Most bytes, before compression, the agent puts in one request: half the server's default
/// `--max-decoded-bytes` (8 MiB), so that a batch of crowded GPUs (many processes with long
/// command lines) is never refused as too large and lost; larger batches are split.
pub const MAX_BATCH_DECODED_BYTES: usize = 4 * 1024 * 1024;

/// One host's samples and events as request bodies in `format`, split into as many as keep
/// each one within `max_decoded_bytes` before compression (halving the samples until they fit;
/// a single sample is sent as it is). The events ride with the first body. Returns each body
/// with its sample count.
pub fn encode_batches(
    host: &str,
    labels: &BTreeMap<String, String>,
    samples: Vec<Sample>,
    events: Vec<GpuEvent>,
    max_decoded_bytes: usize,
    format: WireFormat,
) -> Vec<(Vec<u8>, usize)> {
    let batch = IngestBatch {
        host: host.to_string(),
        agent_version: Some(AGENT_VERSION.to_string()),
        labels: labels.clone(),
        samples,
        events,
    };
    let mut out = Vec::new();
    split_encode(format.batch(batch), max_decoded_bytes, &mut out);
    out
}

fn split_encode(mut batch: Batch, max: usize, out: &mut Vec<(Vec<u8>, usize)>) {
    let raw = batch.serialize();
    let n = batch.samples();
    if raw.len() <= max || n <= 1 {
        out.push((batch.format().compress(&raw), n));
        return;
    }
    drop(raw);
    let second = batch.split_off_half();
    split_encode(batch, max, out);
    split_encode(second, max, out);
}

/// One host's samples and events as one request body in `format`, however large
/// ([`encode_batches`] without a limit).
pub fn encode_batch(
    host: &str,
    labels: &BTreeMap<String, String>,
    samples: Vec<Sample>,
    events: Vec<GpuEvent>,
    format: WireFormat,
) -> Vec<u8> {
    let mut bodies = encode_batches(host, labels, samples, events, usize::MAX, format);
    bodies.swap_remove(0).0
}

/// Exponential backoff with jitter between retries.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub factor: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial: Duration::from_millis(500), max: Duration::from_secs(60), factor: 2.0 }
    }
}

impl Backoff {
    /// Delay before retry number `attempt` (0-based): half the exponential step plus a random
    /// half, so agents that lost the same server do not all come back in lockstep.
    pub fn delay(&self, attempt: u32) -> Duration {
        let step = self.initial.as_secs_f64() * self.factor.powi(attempt.min(64) as i32);
        let step = step.min(self.max.as_secs_f64());
        let jitter = rand::rng().random_range(0.0..=0.5);
        Duration::from_secs_f64(step * (0.5 + jitter))
    }
}

#[derive(Debug, Clone)]
pub struct PusherConfig {
    /// Server base URL, without a trailing slash.
    pub server: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub backoff: Backoff,
}

/// Why a send failed, by what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The batch is invalid and will never be accepted.
    #[error("server rejected the batch ({status}): {message}")]
    Rejected { status: StatusCode, message: String },
    /// The key is missing, wrong or lacks the `ingest` scope; retrying after it is fixed works.
    #[error("server refused the API key ({status}): {message}")]
    Auth { status: StatusCode, message: String },
    /// 415: the server does not read this body's format (a protobuf batch sent to a server
    /// older than the protobuf intake).
    #[error("server does not accept the batch's format ({status}): {message}")]
    UnsupportedFormat { status: StatusCode, message: String },
    /// Worth retrying: network, timeout, 5xx, 429, or an unexpected status.
    #[error("{0}")]
    Transient(String),
}

/// How a push loop ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushSummary {
    pub batches_sent: u64,
    pub samples_sent: u64,
    pub batches_rejected: u64,
    pub samples_rejected: u64,
    /// True when it stopped because the spool was empty and no more was coming.
    pub drained: bool,
}

/// What the pusher should do when the spool runs empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// More batches are coming: wait for them.
    Follow,
    /// The collector is done: return once the spool is empty.
    Drain,
    /// Shutting down: return now; whatever is spooled is sent on the next start.
    Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum PusherError {
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    #[error(transparent)]
    Spool(#[from] SpoolError),
}

pub struct Pusher {
    client: reqwest::Client,
    url: String,
    cfg: PusherConfig,
    /// The server answered a protobuf batch with 415 (a server older than the protobuf
    /// intake): protobuf batches are sent as gzip JSON from then on.
    json_only: std::sync::atomic::AtomicBool,
}

/// reqwest's message names only the top of the failure ("error sending request"); the
/// causes say what actually happened (connection refused, timed out, DNS).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        msg.push_str(": ");
        msg.push_str(&c.to_string());
        cause = c.source();
    }
    msg
}

fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => format!("{}: {}", e.error.code, e.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() { "(empty body)".into() } else { text.chars().take(500).collect() }
        }
    }
}

impl Pusher {
    pub fn new(cfg: PusherConfig) -> Result<Self, PusherError> {
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("fleetlens-agent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let url = format!("{}{INGEST_PATH}", cfg.server.trim_end_matches('/'));
        Ok(Self { client, url, cfg, json_only: std::sync::atomic::AtomicBool::new(false) })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// One attempt to deliver a batch body written in `format`.
    pub async fn send(&self, body: impl Into<Bytes>, format: WireFormat) -> Result<IngestResponse, SendError> {
        let mut req = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, format.content_type())
            .header(reqwest::header::CONTENT_ENCODING, format.content_encoding())
            .body(body.into());
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| SendError::Transient(with_causes(&e)))?;
        let status = resp.status();
        let bytes =
            resp.bytes().await.map_err(|e| SendError::Transient(format!("reading the answer: {}", with_causes(&e))))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                // 200 already means committed; but an unreadable answer suggests something
                // other than a Fleetlens server (a proxy page), so retry rather than drop.
                SendError::Transient(format!("{status} with an unexpected body ({e}): {}", error_message(&bytes)))
            });
        }
        let message = error_message(&bytes);
        Err(match status {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNPROCESSABLE_ENTITY => {
                SendError::Rejected { status, message }
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => SendError::Auth { status, message },
            StatusCode::UNSUPPORTED_MEDIA_TYPE => SendError::UnsupportedFormat { status, message },
            _ => SendError::Transient(format!("{status}: {message}")),
        })
    }

    /// One attempt to deliver a spooled batch. A protobuf batch that the server refuses with 415
    /// (or any once one was) goes as gzip JSON instead, split if its JSON passes
    /// [`MAX_BATCH_DECODED_BYTES`]: an agent upgraded before its server keeps delivering. The
    /// answer then counts every part.
    async fn send_spooled(&self, body: Vec<u8>, format: WireFormat) -> Result<IngestResponse, SendError> {
        use std::sync::atomic::Ordering;
        if format == WireFormat::Json {
            return self.send(body, format).await;
        }
        // Shared, not copied: kept for the JSON fallback.
        let body = Bytes::from(body);
        if !self.json_only.load(Ordering::Relaxed) {
            match self.send(body.clone(), format).await {
                Err(SendError::UnsupportedFormat { status, message }) => {
                    tracing::warn!(%status, %message, "the server does not read protobuf batches (older than the \
                        protobuf intake): sending gzip JSON instead; upgrade it, or set --wire-format json");
                    self.json_only.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        let batch = format.decode(&body).map_err(|e| SendError::Rejected {
            status: StatusCode::BAD_REQUEST,
            message: format!("spooled batch: {e}"),
        })?;
        let mut total = IngestResponse::default();
        let IngestBatch { host, labels, samples, events, .. } = batch;
        for (part, _) in encode_batches(&host, &labels, samples, events, MAX_BATCH_DECODED_BYTES, WireFormat::Json) {
            total += self.send(part, WireFormat::Json).await?;
        }
        Ok(total)
    }

    /// Sends spooled batches until `mode` says to stop. `wake` is notified when the collector
    /// spools a batch.
    pub async fn run(
        &self,
        spool: SharedSpool,
        wake: Arc<Notify>,
        mut mode: watch::Receiver<Mode>,
    ) -> Result<PushSummary, PusherError> {
        let mut sum = PushSummary::default();
        let mut attempt: u32 = 0;
        loop {
            let current = *mode.borrow_and_update();
            if current == Mode::Stop {
                return Ok(sum);
            }
            let Some((entry, body)) = spool.oldest().await? else {
                if current == Mode::Drain {
                    sum.drained = true;
                    return Ok(sum);
                }
                // A notify_one sent before we get here leaves a permit, so no wake-up is lost.
                tokio::select! {
                    _ = wake.notified() => {}
                    changed = mode.changed() => if changed.is_err() {
                        // Nobody can change the mode any more; only new batches matter.
                        wake.notified().await;
                    },
                }
                continue;
            };
            // A stop abandons a request in flight: the batch stays spooled, and resending it
            // later is harmless even if the server did commit it.
            let sent = tokio::select! {
                r = self.send_spooled(body, entry.format) => r,
                _ = wait_for_stop(&mut mode) => return Ok(sum),
            };
            match sent {
                Ok(resp) => {
                    spool.ack(entry.seq).await?;
                    if resp.received != entry.samples as u64 {
                        tracing::warn!(
                            seq = entry.seq,
                            sent = entry.samples,
                            received = resp.received,
                            "server counted a different number of samples than were sent"
                        );
                    }
                    tracing::debug!(
                        seq = entry.seq,
                        samples = entry.samples,
                        inserted = resp.inserted,
                        duplicates = resp.duplicates,
                        "batch acknowledged"
                    );
                    if attempt > 0 {
                        tracing::info!(after_retries = attempt, "server reachable again");
                    }
                    attempt = 0;
                    sum.batches_sent += 1;
                    sum.samples_sent += entry.samples as u64;
                }
                Err(e @ SendError::Rejected { .. }) => {
                    let dest = spool.reject(entry.seq, e.to_string()).await?;
                    tracing::error!(seq = entry.seq, samples = entry.samples, error = %e,
                        kept_at = ?dest, "batch rejected for good; moved out of the send queue");
                    sum.batches_rejected += 1;
                    sum.samples_rejected += entry.samples as u64;
                }
                Err(e) => {
                    let delay = self.cfg.backoff.delay(attempt);
                    let spooled = spool.peek(|s| s.len());
                    if matches!(e, SendError::Auth { .. }) {
                        tracing::error!(error = %e, retry_in = ?delay, spooled_batches = spooled,
                            "check --api-key / FLEETLENS_API_KEY (needs the `ingest` scope); data stays spooled");
                    } else {
                        tracing::warn!(error = %e, url = %self.url, retry_in = ?delay, attempt,
                            spooled_batches = spooled, "send failed; will retry");
                    }
                    attempt = attempt.saturating_add(1);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        // Only a stop cuts the wait short; a switch to Drain changes nothing here.
                        _ = wait_for_stop(&mut mode) => return Ok(sum),
                    }
                }
            }
        }
    }
}

async fn wait_for_stop(mode: &mut watch::Receiver<Mode>) {
    // If the sender is gone the mode can no longer change: wait out the sleep instead.
    if mode.wait_for(|m| *m == Mode::Stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_each_format_as_the_server_reads_it() {
        let s = Sample { ts_ms: 5, uuid: "GPU-1".into(), gpu_util_pct: Some(3.0), ..Default::default() };
        let labels = BTreeMap::from([("team".to_string(), "ml".to_string())]);
        for format in WireFormat::ALL {
            let body = encode_batch("h", &labels, vec![s.clone()], vec![], format);
            let batch = format.decode(&body).unwrap();
            assert_eq!(batch.host, "h");
            assert_eq!(batch.samples, vec![s.clone()]);
            assert_eq!(batch.labels, labels);
            assert_eq!(batch.agent_version.as_deref(), Some(AGENT_VERSION));
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(1), factor: 2.0 };
        for attempt in 0..20 {
            let d = b.delay(attempt);
            let step = (0.1 * 2f64.powi(attempt as i32)).min(1.0);
            assert!(d.as_secs_f64() >= step * 0.5 - 1e-9 && d.as_secs_f64() <= step + 1e-9, "{attempt}: {d:?}");
        }
    }

    #[test]
    fn error_bodies_are_summarised() {
        assert_eq!(error_message(br#"{"error":{"code":"invalid","message":"bad ts"}}"#), "invalid: bad ts");
        assert_eq!(error_message(b"  "), "(empty body)");
        assert_eq!(error_message(b"<html>oops</html>"), "<html>oops</html>");
    }

    #[test]
    fn batches_past_the_limit_are_split_and_lose_nothing() {
        let labels = BTreeMap::new();
        let samples: Vec<Sample> = (0..100)
            .map(|i| Sample { ts_ms: 1_000 + i, uuid: "GPU-1".into(), power_w: Some(1.5), ..Default::default() })
            .collect();
        let event = GpuEvent {
            ts_ms: 1_000,
            uuid: "GPU-1".into(),
            kind: fleetlens_api::GpuEventKind::GpuLost,
            xid: None,
            message: None,
        };
        for format in WireFormat::ALL {
            let whole = encode_batches("h", &labels, samples.clone(), vec![event.clone()], usize::MAX, format);
            assert_eq!(whole.len(), 1);
            let limit = 1_000;
            let parts = encode_batches("h", &labels, samples.clone(), vec![event.clone()], limit, format);
            assert!(parts.len() > 1, "{format:?}");
            let (mut seen, mut events) = (Vec::new(), 0);
            for (body, n) in &parts {
                let batch = format.decode(body).unwrap();
                assert!(format.batch(batch.clone()).serialize().len() <= limit, "{format:?}");
                assert_eq!(batch.samples.len(), *n);
                assert_eq!(batch.host, "h");
                seen.extend(batch.samples.iter().map(|s| s.ts_ms));
                events += batch.events.len();
            }
            assert_eq!(seen, (1_000..1_100).collect::<Vec<_>>(), "{format:?}: every sample once, in order");
            assert_eq!(events, 1, "{format:?}: the event rides once");
        }
    }
}
