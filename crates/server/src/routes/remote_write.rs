//! `POST /api/v1/write`: Prometheus remote write 1.0 of dcgm-exporter series, with an
//! `ingest` key. Decoding and mapping: [`crate::remote_write`]; storing: the path of
//! `POST /ingest` ([`super::ingest::store_batch`]), with its limits, quotas and idempotency.
//!
//! Prometheus retries a request answered 5xx (and 429 where `retry_on_http_429` is on) and
//! drops one answered with another 4xx: every refusal here is a 4xx with a JSON body, so a
//! request that cannot pass is not sent again and again.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use fleetlens_api::RemoteWriteResponse;
use fleetlens_store::Scope;

use super::ingest::{DecodeLimits, read_body, store_batch};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::ingest_check::check;
use crate::state::AppState;

/// The request body: a snappy-compressed (block format) protobuf `prometheus.WriteRequest`.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct SnappyWriteRequest(#[allow(dead_code)] Vec<u8>);

#[utoipa::path(post, path = "/write", tag = "ingest",
    request_body(content = SnappyWriteRequest, content_type = "application/x-protobuf",
        description = "Prometheus remote write 1.0: a snappy-compressed protobuf `WriteRequest` (`Content-Encoding: snappy`) of dcgm-exporter series"),
    responses((status = 200, body = RemoteWriteResponse, description = "Every GPU sample is durably committed"), crate::openapi::IngestErrors))]
pub async fn write(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<RemoteWriteResponse>> {
    caller.require(Scope::Ingest)?;
    let _permit = state.ingest_gate.enter(&caller).inspect_err(|_| crate::metrics::record_rejected())?;
    let body = read_body(body, state.config.max_body_bytes).await?;
    let limits = DecodeLimits::of(&state.config);
    let decoded = tokio::task::spawn_blocking(move || {
        crate::remote_write::check_headers(&headers)?;
        let proto = crate::remote_write::unsnappy(&body, limits.max_decoded_bytes)?;
        let decoded = crate::remote_write::decode(&proto, limits)?;
        for batch in &decoded.batches {
            check(batch)?;
        }
        Ok::<_, ApiError>(decoded)
    })
    .await
    .map_err(|e| ApiError::BadRequest(format!("the request could not be decoded: {e}")))?
    .inspect_err(|_| crate::metrics::record_rejected())?;
    crate::metrics::record_remote_write_ignored(&decoded.ignored);
    let mut out = RemoteWriteResponse {
        received: 0,
        inserted: 0,
        merged: 0,
        duplicates: 0,
        series_unknown: decoded.ignored.unknown,
        series_unkeyed: decoded.ignored.unkeyed,
    };
    // One batch per host, each stored whole; a host refused (quota, a GPU of another host)
    // refuses the request after the hosts before it were stored: a resend stores them once.
    let mut xids = decoded.xids;
    for mut batch in decoded.batches {
        if let Some(readings) = xids.remove(&batch.host) {
            batch.events = crate::remote_write::xid_events(state.store.as_ref(), caller.org, &readings).await?;
        }
        let r = store_batch(&state, &caller, batch).await?;
        out.received += r.received;
        out.inserted += r.inserted;
        out.merged += r.merged;
        out.duplicates += r.duplicates;
    }
    Ok(Json(out))
}
