//! `POST /api/v1/ingest`: authenticate, decode (JSON or protobuf, plain, gzip or zstd),
//! validate the whole batch, then store it. A batch is accepted whole or rejected whole:
//! nothing is written before every sample has passed validation.
//!
//! What one request may cost is bounded before validation (docs/SECURITY.md, "Ingest limits and
//! tenant quotas"): at most `--max-concurrent-ingest-per-key` requests of one API key at a time
//! (429), at most `--max-decoded-bytes` once decompressed (the stream is read through a limit,
//! 413), and at most `--max-samples-per-batch` samples, [`MAX_PROCESSES_PER_BATCH`] processes,
//! [`MAX_ALLOCATIONS_PER_BATCH`] pod allocations, [`MAX_EVENTS`] events and [`MAX_LABELS`]
//! labels (`crate::ingest_check`) (413), counted while the JSON is parsed or, for protobuf,
//! before it is decoded ([`crate::ingest_protobuf`]): a hostile body cannot make the server
//! allocate more than a small multiple of the decoded limit. Decoding and validation run on the
//! blocking pool, off the async workers that serve every other request.

use std::cell::Cell;
use std::fmt;
use std::io::Read;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use fleetlens_api::{IngestBatch, IngestResponse};
use fleetlens_core::{GpuEvent, Sample};
use fleetlens_store::{IngestRules, SampleBatch, Scope, StoreError};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::ingest_check::{
    LimitHit, MAX_ALLOCATIONS_PER_BATCH, MAX_EVENTS, MAX_LABELS, MAX_PROCESSES_PER_BATCH, check,
};
pub use crate::ingest_gate::DecodeLimits;
use crate::state::AppState;
use crate::time::now_ms;

/// The protobuf request body: `fleetlens.ingest.v1.IngestBatch` (crates/api/proto).
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ProtobufIngestBatch(#[allow(dead_code)] Vec<u8>);

#[utoipa::path(post, path = "/ingest", tag = "ingest", request_body(content((IngestBatch = "application/json"), (ProtobufIngestBatch = "application/x-protobuf")), description = "JSON, or protobuf `fleetlens.ingest.v1.IngestBatch` (the same fields; the agent's default); either optionally `Content-Encoding: zstd` or `gzip`"), responses((status = 200, body = IngestResponse, description = "Every sample is durably committed"), crate::openapi::IngestErrors))]
pub async fn ingest(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<IngestResponse>> {
    caller.require(Scope::Ingest)?;
    // Taken before the body is read and held until the batch is stored: bounds the bodies,
    // decoded batches and database work one key can have going at once.
    let _permit = state.ingest_gate.enter(&caller).inspect_err(|_| crate::metrics::record_rejected())?;
    let body = read_body(body, state.config.max_body_bytes).await?;
    let limits = DecodeLimits::of(&state.config);
    let batch =
        tokio::task::spawn_blocking(move || decode(&headers, &body, limits).and_then(|b| check(&b).map(|()| b)))
            .await
            .map_err(|e| ApiError::BadRequest(format!("the batch could not be decoded: {e}")))?
            .inspect_err(|_| crate::metrics::record_rejected())?;
    let outcome = store_batch(&state, &caller, batch).await?;
    Ok(Json(outcome))
}

/// Stores a decoded, validated batch of one host as `POST /ingest` does (team quota, data
/// quality, the organisation's quotas, events, alerts): shared with the remote-write intake.
pub async fn store_batch(state: &AppState, caller: &Caller, mut batch: IngestBatch) -> ApiResult<IngestResponse> {
    let received = batch.samples.len() as u64;
    let host = batch.host.trim();
    // A team named by the batch's `team` label is created at ingest: refused before anything is
    // stored when the organisation has no room for it.
    crate::accounts::check_team_quota(state, caller, host, &batch.labels)
        .await
        .inspect_err(|_| crate::metrics::record_rejected())?;
    let outcome = if batch.samples.is_empty() {
        fleetlens_store::IngestOutcome::default()
    } else {
        // Readings that cannot be true are dropped here, before anything averages them.
        let flags = state.quality.check_batch(caller.org, &mut batch.samples);
        let rules = ingest_rules(&state.config);
        let sightings = crate::actions::tracker::sightings(host, &batch.samples);
        let samples: std::sync::Arc<[Sample]> = std::mem::take(&mut batch.samples).into();
        let outcome = state
            .store
            .ingest_with(SampleBatch {
                flags,
                rules: Some(rules),
                ..SampleBatch::new(caller.org, host, samples.clone())
            })
            .await
            .map_err(refused)
            .inspect_err(|e| {
                if matches!(e, ApiError::Quota { .. } | ApiError::Conflict(_)) {
                    crate::metrics::record_rejected();
                }
            })?;
        state.alerts.stored(&samples, &outcome.written);
        state.deliveries.arrived(caller.org, host, now_ms());
        state.job_tracker.add(caller.org, sightings);
        outcome
    };
    // After the samples: a failure here is a 5xx, the agent sends the batch again, and both
    // the samples and the events are stored once.
    state.store.insert_gpu_events(caller.org, host, &batch.events, now_ms()).await?;
    crate::accounts::after_ingest(state, caller, batch.host.trim(), &batch.labels).await;
    state.alerts.observe(caller.org, batch.host.trim(), &batch.labels);
    // The organisation's live streams, on every replica, read again (docs/API.md "Live stream").
    if let Err(e) = state.store.announce_change(caller.org).await {
        tracing::warn!(error = %e, "could not signal the live streams of a stored batch");
    }
    crate::metrics::record_ingest(received, outcome.inserted, outcome.merged);
    Ok(IngestResponse { received, inserted: outcome.inserted, merged: outcome.merged, duplicates: outcome.duplicates })
}

/// The request body, at most `max` bytes (`--max-body-bytes`) as sent.
pub async fn read_body(body: Body, max: usize) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, max).await.map_err(|e| {
        let source = std::error::Error::source(&e);
        if source.is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
            ApiError::TooLarge(max)
        } else {
            ApiError::BadRequest(format!("the request body could not be read: {e}"))
        }
    })
}

/// The organisation's quotas and the GPU-host rule, from the server's flags.
fn ingest_rules(config: &crate::config::Config) -> IngestRules {
    IngestRules {
        max_gpus: config.max_gpus_per_org,
        max_hosts: config.max_hosts_per_org,
        move_after_ms: config.gpu_move_after.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        now_ms: now_ms(),
    }
}

/// A batch the store refused by the organisation's rules: 429 for a quota (it may pass later,
/// once an operator raises the quota), 409 for a GPU of another host.
fn refused(e: StoreError) -> ApiError {
    match e {
        StoreError::QuotaExceeded { quota, .. } => {
            ApiError::Quota { quota: quota.to_ascii_lowercase(), message: e.to_string() }
        }
        StoreError::GpuOnOtherHost { .. } => ApiError::Conflict(e.to_string()),
        other => ApiError::Store(other),
    }
}

/// What the body is, from its `Content-Type` (none: JSON, as before there was a choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFormat {
    Json,
    /// `fleetlens.ingest.v1.IngestBatch` ([`crate::ingest_protobuf`]).
    Protobuf,
}

impl BodyFormat {
    fn of(headers: &HeaderMap) -> ApiResult<Self> {
        let Some(ct) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return Ok(Self::Json);
        };
        let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => Ok(Self::Json),
            "application/x-protobuf" | "application/protobuf" => Ok(Self::Protobuf),
            _ => Err(ApiError::UnsupportedMedia(format!(
                "content-type {ct:?}: send application/json or application/x-protobuf"
            ))),
        }
    }
}

/// Decode the body to a batch: JSON (errors name the path of the offending value) or protobuf,
/// either of them plain, gzip or zstd.
pub fn decode(headers: &HeaderMap, body: &[u8], limits: DecodeLimits) -> ApiResult<IngestBatch> {
    let format = BodyFormat::of(headers)?;
    let encoding = headers.get(CONTENT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("identity");
    let max = limits.max_decoded_bytes;
    let decoded;
    let bytes: &[u8] = match encoding.trim().to_ascii_lowercase().as_str() {
        "identity" | "" if body.len() > max => return Err(too_large_decoded(max)),
        "identity" | "" => body,
        "gzip" | "x-gzip" => {
            decoded = inflate(flate2::read::GzDecoder::new(body), body.len(), max, "gzip")?;
            &decoded
        }
        "zstd" => {
            let decoder = zstd::stream::read::Decoder::new(body)
                .map_err(|e| ApiError::BadRequest(format!("invalid zstd body: {e}")))?;
            decoded = inflate(decoder, body.len(), max, "zstd")?;
            &decoded
        }
        other => {
            return Err(ApiError::UnsupportedMedia(format!("content-encoding {other:?}: send zstd, gzip or identity")));
        }
    };
    match format {
        BodyFormat::Json => decode_json(bytes, limits),
        BodyFormat::Protobuf => crate::ingest_protobuf::decode(bytes, limits),
    }
}

fn decode_json(json: &[u8], limits: DecodeLimits) -> ApiResult<IngestBatch> {
    let over = Cell::new(None);
    let seed = BatchSeed { limits, over: &over, processes: Cell::new(0), allocations: Cell::new(0) };
    // Fast path: plain serde, on text checked for UTF-8 once as a whole (`from_slice` checks
    // every string and key on its own: ~8 % of the server's ingest CPU). Only a body that fails
    // is parsed again with path tracking, so the error can name the offending field and sample.
    if let Ok(text) = std::str::from_utf8(json) {
        let de = &mut serde_json::Deserializer::from_str(text);
        if let Ok(batch) = seed.deserialize(&mut *de).and_then(|b| de.end().map(|()| b)) {
            return Ok(batch);
        }
        if let Some(limit) = over.take() {
            return Err(limit.into());
        }
    }
    let seed = BatchSeed { limits, over: &over, processes: Cell::new(0), allocations: Cell::new(0) };
    let de = &mut serde_json::Deserializer::from_slice(json);
    let mut track = serde_path_to_error::Track::new();
    let result = seed.deserialize(serde_path_to_error::Deserializer::new(&mut *de, &mut track));
    let batch = result.map_err(|e| match over.take() {
        Some(limit) => limit.into(),
        None => crate::error::json_error_at(&track.path().to_string(), e.to_string()),
    })?;
    // What made the fast path fail may come after the document (`{…}}`, `{…} x`).
    de.end().map_err(|e| ApiError::InvalidJson { path: None, message: e.to_string() })?;
    Ok(batch)
}

fn too_large_decoded(max: usize) -> ApiError {
    ApiError::BatchTooLarge(format!(
        "the request body is larger than {max} bytes once decompressed (--max-decoded-bytes): send smaller batches"
    ))
}

/// Decompress, reading the stream in chunks and stopping at the first byte past the ceiling,
/// so a small "zip bomb" costs at most `max` bytes of memory (the buffer never grows past it:
/// `read_to_end` would double it to twice the limit to find the one byte too many) and the
/// time to inflate them.
fn inflate(mut decoder: impl Read, sent: usize, max: usize, what: &str) -> ApiResult<Vec<u8>> {
    // Agents' batches inflate ~7-16× (docs/SECURITY.md): room for that up front.
    let mut out = Vec::with_capacity(sent.saturating_mul(12).min(max));
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = decoder.read(&mut chunk).map_err(|e| ApiError::BadRequest(format!("invalid {what} body: {e}")))?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > max {
            return Err(too_large_decoded(max));
        }
        if out.capacity() - out.len() < n {
            // Doubling, but never past the ceiling.
            out.reserve_exact(out.capacity().max(n).min(max - out.len()));
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Decodes an [`IngestBatch`] like its derived `Deserialize`, stopping at the first element
/// past a count limit (which it records in `over`).
struct BatchSeed<'a> {
    limits: DecodeLimits,
    over: &'a Cell<Option<LimitHit>>,
    /// Processes of the samples decoded so far.
    processes: Cell<usize>,
    /// Pod allocations of the samples decoded so far.
    allocations: Cell<usize>,
}

impl BatchSeed<'_> {
    fn hit<E: de::Error>(&self, hit: LimitHit) -> E {
        self.over.set(Some(hit));
        E::custom(hit)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    Host,
    AgentVersion,
    Labels,
    Samples,
    Events,
    #[serde(other)]
    Other,
}

const FIELDS: &[&str] = &["host", "agent_version", "labels", "samples", "events"];

impl<'de> DeserializeSeed<'de> for BatchSeed<'_> {
    type Value = IngestBatch;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<IngestBatch, D::Error> {
        d.deserialize_struct("IngestBatch", FIELDS, self)
    }
}

impl<'de> Visitor<'de> for BatchSeed<'_> {
    type Value = IngestBatch;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ingest batch: {\"host\", \"samples\": [...]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IngestBatch, A::Error> {
        let (mut host, mut agent_version, mut labels, mut samples, mut events) = (None, None, None, None, None);
        fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
            if slot.replace(value).is_some() {
                return Err(E::duplicate_field(name));
            }
            Ok(())
        }
        while let Some(key) = map.next_key::<Field>()? {
            match key {
                Field::Host => once(&mut host, "host", map.next_value::<String>()?)?,
                Field::AgentVersion => once(&mut agent_version, "agent_version", map.next_value::<Option<String>>()?)?,
                Field::Labels => once(&mut labels, "labels", map.next_value_seed(LabelsSeed(&self))?)?,
                Field::Samples => once(&mut samples, "samples", map.next_value_seed(SamplesSeed(&self))?)?,
                Field::Events => once(&mut events, "events", map.next_value_seed(EventsSeed(&self))?)?,
                Field::Other => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(IngestBatch {
            // As `IngestBatch`'s own defaults: a batch without `host` reads as "" and is refused
            // by validation (422 on `host`); one of events only may leave `samples` out.
            host: host.unwrap_or_default(),
            agent_version: agent_version.flatten(),
            labels: labels.unwrap_or_default(),
            samples: samples.unwrap_or_default(),
            events: events.unwrap_or_default(),
        })
    }
}

/// `samples`: at most `max_samples`, and at most [`MAX_PROCESSES_PER_BATCH`] processes and
/// [`MAX_ALLOCATIONS_PER_BATCH`] pod allocations in all.
struct SamplesSeed<'s, 'a>(&'s BatchSeed<'a>);

impl<'de> DeserializeSeed<'de> for SamplesSeed<'_, '_> {
    type Value = Vec<Sample>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<Sample>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SamplesSeed<'_, '_> {
    type Value = Vec<Sample>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of at most {} samples", self.0.limits.max_samples)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Sample>, A::Error> {
        let max = self.0.limits.max_samples;
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(max).min(1024));
        while let Some(sample) = seq.next_element::<Sample>()? {
            if out.len() == max {
                return Err(self.0.hit(LimitHit { what: "samples", limit: max, flag: " (--max-samples-per-batch)" }));
            }
            let processes = self.0.processes.get() + sample.processes.as_ref().map_or(0, Vec::len);
            if processes > MAX_PROCESSES_PER_BATCH {
                return Err(self.0.hit(LimitHit { what: "processes", limit: MAX_PROCESSES_PER_BATCH, flag: "" }));
            }
            self.0.processes.set(processes);
            let allocations = self.0.allocations.get() + sample.allocations.len();
            if allocations > MAX_ALLOCATIONS_PER_BATCH {
                return Err(self.0.hit(LimitHit {
                    what: "pod allocations",
                    limit: MAX_ALLOCATIONS_PER_BATCH,
                    flag: "",
                }));
            }
            self.0.allocations.set(allocations);
            out.push(sample);
        }
        Ok(out)
    }
}

/// `events`: at most [`MAX_EVENTS`].
struct EventsSeed<'s, 'a>(&'s BatchSeed<'a>);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, '_> {
    type Value = Vec<GpuEvent>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<GpuEvent>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_, '_> {
    type Value = Vec<GpuEvent>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of at most {MAX_EVENTS} events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<GpuEvent>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(event) = seq.next_element::<GpuEvent>()? {
            if out.len() == MAX_EVENTS {
                return Err(self.0.hit(LimitHit { what: "events", limit: MAX_EVENTS, flag: "" }));
            }
            out.push(event);
        }
        Ok(out)
    }
}

/// `labels`: at most [`MAX_LABELS`].
struct LabelsSeed<'s, 'a>(&'s BatchSeed<'a>);

impl<'de> DeserializeSeed<'de> for LabelsSeed<'_, '_> {
    type Value = std::collections::BTreeMap<String, String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LabelsSeed<'_, '_> {
    type Value = std::collections::BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object of at most {MAX_LABELS} string labels")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = std::collections::BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            if out.len() == MAX_LABELS {
                return Err(self.0.hit(LimitHit { what: "labels", limit: MAX_LABELS, flag: "" }));
            }
            out.insert(k, v);
        }
        Ok(out)
    }
}
