//! The validation of a decoded ingest batch (`POST /api/v1/ingest` and the Prometheus
//! remote-write receiver): host, labels, events and every sample, before anything is stored.
//! A batch is accepted whole or rejected whole.

use std::fmt;

use fleetlens_api::IngestBatch;
use fleetlens_core::{validate_event, validate_sample};

use crate::error::{ApiError, ApiResult};
use crate::time::now_ms;

/// Host labels per batch, at most.
pub const MAX_LABELS: usize = 64;
/// Events per batch, at most (a driver storm is sampled, not stored whole).
pub const MAX_EVENTS: usize = 1_000;

/// Most processes, over all samples, in one batch (docs/SECURITY.md): a crowded 8-GPU host
/// (8 processes per GPU) fills a 5,000-sample batch with 40,000. Each takes ~330 bytes once
/// decoded, so a batch's processes take at most ~16 MB.
pub const MAX_PROCESSES_PER_BATCH: usize = 50_000;

/// Most pod allocations, over all samples, in one batch: as many as processes (a time-sliced
/// 8-GPU host gives each GPU out several times). One takes ~220 bytes once decoded, from as
/// little as 3 bytes of JSON or 2 of protobuf, so the count, not the bytes, bounds the memory.
pub const MAX_ALLOCATIONS_PER_BATCH: usize = 50_000;

/// A count limit the decoder hit (the error that serde carries out is only text).
#[derive(Debug, Clone, Copy)]
pub struct LimitHit {
    pub what: &'static str,
    pub limit: usize,
    /// The server flag that sets it, as ` (--flag)`, or "".
    pub flag: &'static str,
}

impl From<LimitHit> for ApiError {
    fn from(l: LimitHit) -> Self {
        ApiError::BatchTooLarge(format!(
            "more than {} {} in one batch{}: send smaller batches (nothing was stored)",
            l.limit, l.what, l.flag
        ))
    }
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "more than {} {} in one batch", self.limit, self.what)
    }
}

/// Validate every sample (first error wins; it names the sample index and field).
pub fn check(batch: &IngestBatch) -> ApiResult<()> {
    let host = batch.host.trim();
    if host.is_empty() || host.len() > 255 || host.chars().any(char::is_control) {
        return Err(ApiError::Unprocessable {
            field: "host".into(),
            message: "required: 1–255 printable characters".into(),
        });
    }
    if batch.samples.is_empty() && batch.events.is_empty() {
        return Err(ApiError::Unprocessable {
            field: "samples".into(),
            message: "the batch holds neither samples nor events: send at least one".into(),
        });
    }
    let printable = |t: &str| !t.chars().any(char::is_control);
    if batch.agent_version.as_deref().is_some_and(|v| v.len() > 256 || !printable(v)) {
        return Err(ApiError::Unprocessable {
            field: "agent_version".into(),
            message: "at most 256 printable characters".into(),
        });
    }
    if batch.labels.len() > MAX_LABELS {
        return Err(ApiError::Unprocessable {
            field: "labels".into(),
            message: format!("{} labels: at most {MAX_LABELS}", batch.labels.len()),
        });
    }
    for (k, v) in &batch.labels {
        if k.trim().is_empty() || k.len() > 256 || !printable(k) || v.len() > 1024 || !printable(v) {
            return Err(ApiError::Unprocessable {
                field: "labels".into(),
                message: "a label name must be 1–256 printable characters and its value at most 1024".into(),
            });
        }
    }
    let now = now_ms();
    if batch.events.len() > MAX_EVENTS {
        return Err(ApiError::Unprocessable {
            field: "events".into(),
            message: format!("{} events: at most {MAX_EVENTS} per batch", batch.events.len()),
        });
    }
    for (i, e) in batch.events.iter().enumerate() {
        validate_event(e, now)
            .map_err(|e| ApiError::Unprocessable { field: format!("events[{i}].{}", e.field), message: e.message })?;
    }
    // foldhash, not SipHash: one lookup per sample of every batch (seeded per process).
    let mut seen = foldhash::HashSet::with_capacity_and_hasher(batch.samples.len(), Default::default());
    for (i, s) in batch.samples.iter().enumerate() {
        validate_sample(i, s, now).map_err(ApiError::Validation)?;
        // Idempotent across batches, but one batch that holds two samples of one GPU at one
        // time is ambiguous (which one is the reading?): rejected, not silently deduplicated.
        if !seen.insert((s.uuid.trim(), s.ts_ms)) {
            return Err(ApiError::Validation(fleetlens_core::ValidationError {
                index: i,
                field: "ts_ms".into(),
                message: format!("a second sample of GPU {} at ts_ms {} in one batch", s.uuid.trim(), s.ts_ms),
            }));
        }
    }
    Ok(())
}
