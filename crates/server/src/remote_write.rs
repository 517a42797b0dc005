//! Prometheus remote write 1.0 → ingest batches: a snappy-compressed (block format) protobuf
//! `WriteRequest` is decompressed within `--max-decoded-bytes`, its time series decoded one at a
//! time with prost, and the dcgm-exporter series among them assembled into Fleetlens samples
//! by the mapping the agent's `dcgm:` source uses (`fleetlens_core::dcgm`), one batch per host.
//!
//! Memory stays bounded like `POST /ingest`: the snappy header's length is checked before the
//! output is allocated; the request is walked series by series (a decoded `TimeSeries` takes
//! up to ~48× its encoded size in `String`/`Vec` headers, so the whole request is never
//! decoded at once, and one series may take at most [`MAX_SERIES_BYTES`]); at most
//! `--max-samples-per-batch` GPU samples are assembled. Series the mapping does not read are
//! counted and dropped as they are met.

use std::collections::BTreeMap;

use fleetlens_api::IngestBatch;
use fleetlens_api::remote_write::{TIMESERIES_FIELD, TimeSeries};
use fleetlens_core::dcgm::{Added, DcgmAssembler};

use crate::error::ApiError;
use crate::ingest_gate::DecodeLimits;

/// Largest encoded `TimeSeries` accepted (413 past it). Prometheus sends at most
/// `max_samples_per_send` (500–2,000) samples per request, ~20 bytes each plus the labels: a
/// real series is a few KiB at most.
pub const MAX_SERIES_BYTES: usize = 256 * 1024;

/// Protobuf wire type of length-delimited fields (messages, strings, bytes).
const WIRE_LEN: u64 = 2;

/// Prometheus' staleness marker: a NaN with this bit pattern, sent when a series disappears
/// (`value.StaleNaN`). Not a reading, and its labels (an old pod's) must not join the GPU's.
const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Series of a request that gave no sample value.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ignored {
    /// Not a dcgm-exporter field the mapping reads (`up`, `DCGM_FI_DEV_ENC_UTIL`, …).
    pub unknown: u64,
    /// A mapped field without a `UUID` label.
    pub unkeyed: u64,
    /// Staleness markers.
    pub stale: u64,
}

/// A decoded request: one batch per host, and what was left out.
#[derive(Debug, Default)]
pub struct Decoded {
    pub batches: Vec<IngestBatch>,
    pub ignored: Ignored,
    /// Non-zero `DCGM_FI_DEV_XID_ERRORS` readings, per host (in `batches`' order of hosts).
    pub xids: BTreeMap<String, Vec<XidReading>>,
}

/// A GPU's `DCGM_FI_DEV_XID_ERRORS` at one timestamp: the last XID error it had (non-zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidReading {
    pub uuid: String,
    pub ts_ms: i64,
    pub xid: u64,
}

/// The `xid` events of a host's readings: where a GPU's value differs from the last XID event
/// stored for it (or, within the readings, the last event before), at the first timestamp
/// that shows the new value. dcgm-exporter repeats the last XID in every scrape, and
/// Prometheus resends what it is not sure arrived: comparing with the database, not with the
/// previous request, keeps both from repeating the event, across restarts too.
pub async fn xid_events(
    store: &dyn fleetlens_store::Store,
    org: fleetlens_store::OrgId,
    readings: &[XidReading],
) -> fleetlens_store::Result<Vec<fleetlens_core::GpuEvent>> {
    let mut by_gpu: BTreeMap<&str, Vec<&XidReading>> = BTreeMap::new();
    for r in readings {
        by_gpu.entry(r.uuid.as_str()).or_default().push(r);
    }
    let mut events = Vec::new();
    for (uuid, mut readings) in by_gpu {
        readings.sort_by_key(|r| r.ts_ms);
        let filter = fleetlens_store::EventFilter {
            gpu_uuid: Some(uuid.to_string()),
            kind: Some(fleetlens_core::GpuEventKind::Xid.as_str().to_string()),
            from_ms: i64::MIN,
            to_ms: i64::MAX,
            before_id: None,
            limit: 1,
        };
        let mut last = store.gpu_events(org, &filter).await?.first().and_then(|e| e.xid);
        for r in readings {
            let xid = i64::try_from(r.xid).unwrap_or(i64::MAX);
            if last != Some(xid) {
                last = Some(xid);
                events.push(fleetlens_core::GpuEvent {
                    ts_ms: r.ts_ms,
                    uuid: uuid.to_string(),
                    kind: fleetlens_core::GpuEventKind::Xid,
                    xid: Some(r.xid),
                    message: Some("DCGM_FI_DEV_XID_ERRORS (Prometheus remote write)".to_string()),
                });
            }
        }
    }
    Ok(events)
}

/// The remote-write headers: `Content-Encoding: snappy` and a protobuf content type.
pub fn check_headers(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
    let text = |h| headers.get(h).and_then(|v: &axum::http::HeaderValue| v.to_str().ok()).map(str::trim);
    if let Some(ct) = text(CONTENT_TYPE)
        && !ct.starts_with("application/x-protobuf")
    {
        return Err(ApiError::UnsupportedMedia(format!(
            "content-type {ct:?}: remote write sends application/x-protobuf (Prometheus remote write 1.0)"
        )));
    }
    match text(CONTENT_ENCODING) {
        Some(e) if e.eq_ignore_ascii_case("snappy") => Ok(()),
        other => Err(ApiError::UnsupportedMedia(format!(
            "content-encoding {:?}: remote write sends snappy-compressed protobuf",
            other.unwrap_or("")
        ))),
    }
}

/// Snappy block → protobuf bytes, refused (413) before allocating when the block says it
/// holds more than `max` bytes.
pub fn unsnappy(body: &[u8], max: usize) -> Result<Vec<u8>, ApiError> {
    let len = snap::raw::decompress_len(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not snappy-compressed (block format): {e}")))?;
    if len > max {
        return Err(ApiError::BatchTooLarge(format!(
            "the request holds {len} bytes of protobuf once decompressed, more than {max} (--max-decoded-bytes): \
             lower queue_config.max_samples_per_send"
        )));
    }
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid snappy body: {e}")))
}

/// Decodes a `WriteRequest` (protobuf, decompressed) into per-host batches.
pub fn decode(mut proto: &[u8], limits: DecodeLimits) -> Result<Decoded, ApiError> {
    let malformed = |what: String| ApiError::BadRequest(format!("not a remote-write 1.0 WriteRequest: {what}"));
    let mut assembler = DcgmAssembler::new();
    let mut ignored = Ignored::default();
    while !proto.is_empty() {
        // The top level is a list of length-delimited fields (time series, metadata): walked by
        // hand so that each series is decoded, mapped and dropped before the next.
        let key = prost::decode_length_delimiter(&mut proto).map_err(|e| malformed(format!("field key: {e}")))?;
        let (field, wire) = ((key as u64) >> 3, (key as u64) & 7);
        if wire != WIRE_LEN {
            return Err(malformed(format!("field {field} has wire type {wire}, expected length-delimited")));
        }
        let len = prost::decode_length_delimiter(&mut proto).map_err(|e| malformed(format!("field length: {e}")))?;
        if len > proto.len() {
            return Err(malformed(format!("field {field} claims {len} bytes, {} remain", proto.len())));
        }
        let (value, rest) = proto.split_at(len);
        proto = rest;
        if field != u64::from(TIMESERIES_FIELD) {
            continue; // metadata (3): not used
        }
        if len > MAX_SERIES_BYTES {
            return Err(ApiError::BatchTooLarge(format!(
                "a time series of {len} bytes, more than {MAX_SERIES_BYTES}: send fewer samples per request"
            )));
        }
        let series =
            <TimeSeries as prost::Message>::decode(value).map_err(|e| malformed(format!("time series: {e}")))?;
        add_series(&mut assembler, &series, &mut ignored);
        if assembler.len() > limits.max_samples {
            return Err(ApiError::BatchTooLarge(format!(
                "more than {} GPU samples in one request (--max-samples-per-batch): lower \
                 queue_config.max_samples_per_send (nothing was stored)",
                limits.max_samples
            )));
        }
    }
    let (batches, xids) = batches(assembler);
    Ok(Decoded { batches, ignored, xids })
}

fn add_series(assembler: &mut DcgmAssembler, series: &TimeSeries, ignored: &mut Ignored) {
    let label = |name: &str| series.label(name);
    let name = label("__name__").unwrap_or("");
    if !fleetlens_core::dcgm::is_mapped_metric(name) {
        ignored.unknown += 1;
        return;
    }
    for s in &series.samples {
        if s.value.to_bits() == STALE_NAN_BITS {
            ignored.stale += 1;
            continue;
        }
        if assembler.add(name, label, s.timestamp, s.value) == Added::Unkeyed {
            ignored.unkeyed += 1;
            return;
        }
    }
}

/// One batch per host; a GPU with neither `Hostname` nor `instance` goes to host `unknown`.
/// The batches carry no host labels: the agent's `gpu.<uuid>.*` labels would change with
/// whichever GPUs a request happens to hold (Prometheus cuts its requests by sample count), and
/// what matters of them, the owners, travels in the samples.
fn batches(assembler: DcgmAssembler) -> (Vec<IngestBatch>, BTreeMap<String, Vec<XidReading>>) {
    let mut per_host: BTreeMap<String, IngestBatch> = BTreeMap::new();
    let mut xids: BTreeMap<String, Vec<XidReading>> = BTreeMap::new();
    for gpu in assembler.finish() {
        let host = gpu.host.unwrap_or_else(|| "unknown".to_string());
        if let Some(xid) = gpu.xid {
            let reading = XidReading { uuid: gpu.sample.uuid.clone(), ts_ms: gpu.sample.ts_ms, xid };
            xids.entry(host.clone()).or_default().push(reading);
        }
        per_host
            .entry(host.clone())
            .or_insert_with(|| IngestBatch {
                host,
                agent_version: Some("prometheus-remote-write".into()),
                labels: BTreeMap::new(),
                samples: Vec::new(),
                events: Vec::new(),
            })
            .samples
            .push(gpu.sample);
    }
    (per_host.into_values().collect(), xids)
}

#[cfg(test)]
mod tests {
    use fleetlens_api::remote_write::WriteRequest;
    use prost::Message;

    use super::*;

    fn series(name: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> TimeSeries {
        TimeSeries::new(name, labels, points)
    }

    const LIMITS: DecodeLimits = DecodeLimits { max_decoded_bytes: 1 << 20, max_samples: 100 };

    #[test]
    fn series_become_one_sample_per_gpu_and_timestamp() {
        let gpu = [("UUID", "GPU-1"), ("Hostname", "n1"), ("gpu", "0"), ("pod", "p"), ("namespace", "ns")];
        let req = WriteRequest {
            timeseries: vec![
                series("DCGM_FI_PROF_SM_ACTIVE", &gpu, &[(1000, 0.5), (2000, 0.25)]),
                series("DCGM_FI_DEV_GPU_UTIL", &gpu, &[(1000, 90.0), (2000, f64::from_bits(STALE_NAN_BITS))]),
                series("up", &[("instance", "x:9400")], &[(1000, 1.0)]),
                series("DCGM_FI_DEV_GPU_UTIL", &[("gpu", "3")], &[(1000, 1.0)]),
            ],
        };
        let d = decode(&req.encode_to_vec(), LIMITS).unwrap();
        assert_eq!(d.ignored, Ignored { unknown: 1, unkeyed: 1, stale: 1 });
        assert_eq!(d.batches.len(), 1);
        let b = &d.batches[0];
        assert_eq!(b.host, "n1");
        assert_eq!(b.samples.len(), 2);
        assert_eq!((b.samples[0].sm_active_pct, b.samples[0].gpu_util_pct), (Some(50.0), Some(90.0)));
        assert_eq!((b.samples[1].sm_active_pct, b.samples[1].gpu_util_pct), (Some(25.0), None));
        let owner = b.samples[0].processes.as_ref().unwrap()[0].owner.clone().unwrap();
        assert_eq!((owner.pod_name.as_deref(), owner.namespace.as_deref()), (Some("p"), Some("ns")));
        crate::ingest_check::check(b).unwrap();
    }

    #[test]
    fn limits_hold() {
        let many: Vec<TimeSeries> = (0..101)
            .map(|i| series("DCGM_FI_DEV_GPU_UTIL", &[("UUID", format!("GPU-{i}").as_str())], &[(1, 1.0)]))
            .collect();
        let proto = WriteRequest { timeseries: many }.encode_to_vec();
        assert!(matches!(decode(&proto, LIMITS), Err(ApiError::BatchTooLarge(_))));
        let huge = series("DCGM_FI_DEV_GPU_UTIL", &[("UUID", "x".repeat(MAX_SERIES_BYTES).as_str())], &[]);
        let proto = WriteRequest { timeseries: vec![huge] }.encode_to_vec();
        assert!(matches!(decode(&proto, LIMITS), Err(ApiError::BatchTooLarge(_))));
        // A snappy block that claims more than the limit is refused before it is inflated.
        let packed = snap::raw::Encoder::new().compress_vec(&vec![0u8; 2 << 20]).unwrap();
        assert!(matches!(unsnappy(&packed, 1 << 20), Err(ApiError::BatchTooLarge(_))));
        assert!(matches!(unsnappy(b"not snappy at all", 1 << 20), Err(ApiError::BadRequest(_))));
        // Not protobuf: a 400, not a panic.
        for junk in [&b"\x08\x01"[..], b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05ab"] {
            assert!(matches!(decode(junk, LIMITS), Err(ApiError::BadRequest(_))), "{junk:?}");
        }
    }
}
