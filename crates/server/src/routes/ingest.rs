//! `POST /api/v1/ingest`: authenticate, decode (gzip or plain JSON), validate the whole batch,
//! then store it. A batch is accepted whole or rejected whole: nothing is written before every
//! sample has passed validation.

use std::io::Read;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use fleetlens_api::{IngestBatch, IngestResponse};
use fleetlens_core::{validate_event, validate_sample};
use fleetlens_store::Scope;

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::time::now_ms;

#[utoipa::path(post, path = "/ingest", tag = "ingest", request_body(content = IngestBatch, description = "JSON, optionally `Content-Encoding: gzip`"), responses((status = 200, body = IngestResponse, description = "Every sample is durably committed"), crate::openapi::BodyErrors))]
pub async fn ingest(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<IngestResponse>> {
    caller.require(Scope::Ingest)?;
    let mut batch = decode(&headers, &body, state.config.max_decoded_bytes)
        .and_then(|b| check(&b).map(|()| b))
        .inspect_err(|_| crate::metrics::record_rejected())?;
    let received = batch.samples.len() as u64;
    let host = batch.host.trim();
    let outcome = if batch.samples.is_empty() {
        fleetlens_store::IngestOutcome::default()
    } else {
        // Readings that cannot be true are dropped here, before anything averages them.
        let flags = state.quality.check_batch(caller.org, &mut batch.samples);
        let outcome = state.store.ingest_flagged(caller.org, host, batch.samples, flags).await?;
        state.deliveries.arrived(caller.org, host, now_ms());
        outcome
    };
    // After the samples: a failure here is a 5xx, the agent sends the batch again, and both
    // the samples and the events are stored once.
    state.store.insert_gpu_events(caller.org, host, &batch.events, now_ms()).await?;
    crate::accounts::after_ingest(&state, &caller, batch.host.trim(), &batch.labels).await;
    state.alerts.observe(caller.org, batch.host.trim(), &batch.labels);
    crate::metrics::record_ingest(received, outcome.inserted);
    Ok(Json(IngestResponse { received, inserted: outcome.inserted, duplicates: outcome.duplicates }))
}

/// Decode the body to a batch; JSON errors name the path of the offending value.
pub fn decode(headers: &HeaderMap, body: &[u8], max_decoded: usize) -> ApiResult<IngestBatch> {
    if let Some(ct) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
        && !ct.starts_with("application/json")
    {
        return Err(ApiError::UnsupportedMedia(format!("content-type {ct:?}: send application/json")));
    }
    let encoding = headers.get(CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("identity");
    let decoded;
    let json: &[u8] = match encoding.trim().to_ascii_lowercase().as_str() {
        "identity" | "" => body,
        "gzip" | "x-gzip" => {
            decoded = gunzip(body, max_decoded)?;
            &decoded
        }
        other => {
            return Err(ApiError::UnsupportedMedia(format!("content-encoding {other:?}: send gzip or identity")));
        }
    };
    // Fast path: plain serde, on text checked for UTF-8 once as a whole (`from_slice` checks
    // every string and key on its own: ~8 % of the server's ingest CPU). Only a body that fails
    // is parsed again with path tracking, so the error can name the offending field and sample.
    if let Ok(Ok(batch)) = std::str::from_utf8(json).map(serde_json::from_str::<IngestBatch>) {
        return Ok(batch);
    }
    let de = &mut serde_json::Deserializer::from_slice(json);
    let batch: IngestBatch = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        ApiError::InvalidJson { path: (path != "." && !path.is_empty()).then_some(path), message }
    })?;
    // What made the fast path fail may come after the document (`{…}}`, `{…} x`).
    de.end().map_err(|e| ApiError::InvalidJson { path: None, message: e.to_string() })?;
    Ok(batch)
}

/// Decompress with a ceiling on the output, so a small "zip bomb" cannot exhaust memory.
fn gunzip(body: &[u8], max: usize) -> ApiResult<Vec<u8>> {
    // Agents' batches inflate ~11×: room for that up front instead of a regrowth that copies.
    let mut out = Vec::with_capacity(body.len().saturating_mul(12).min(max));
    let mut reader = flate2::read::GzDecoder::new(body).take(max as u64 + 1);
    reader.read_to_end(&mut out).map_err(|e| ApiError::BadRequest(format!("invalid gzip body: {e}")))?;
    if out.len() > max {
        return Err(ApiError::TooLarge(max));
    }
    Ok(out)
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

/// Host labels per batch, at most.
const MAX_LABELS: usize = 64;
/// Events per batch, at most (a driver storm is sampled, not stored whole).
const MAX_EVENTS: usize = 1_000;
