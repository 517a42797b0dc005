//! Reading a protobuf ingest batch (`Content-Type: application/x-protobuf`, the messages of
//! `crates/api/proto/fleetlens/ingest/v1/ingest.proto`) under the same limits as the JSON one.
//!
//! prost decodes a repeated field without a bound, and an empty message is two bytes on the
//! wire: 8 MiB of empty `GpuProcess` entries would decode into ~4 million structs (over a GB).
//! So the bytes are first walked without decoding anything, counting samples, processes, pod
//! allocations, events and labels, and a batch past a limit is refused (413) before prost
//! allocates a thing. The walk costs a small fraction of the decode.

use fleetlens_api::IngestBatch;
use fleetlens_api::ingest_protobuf::{self as pb, fields};
use fleetlens_core::sample::{MAX_ALLOCATIONS_PER_SAMPLE, MAX_PROCESSES_PER_SAMPLE};
use prost::Message;
use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint};

use crate::error::{ApiError, ApiResult};
use crate::ingest_check::{LimitHit, MAX_ALLOCATIONS_PER_BATCH, MAX_EVENTS, MAX_LABELS, MAX_PROCESSES_PER_BATCH};
use crate::ingest_gate::DecodeLimits;

/// Decode a protobuf batch (already decompressed, within `--max-decoded-bytes`).
pub fn decode(bytes: &[u8], limits: DecodeLimits) -> ApiResult<IngestBatch> {
    check_counts(bytes, limits)?;
    let batch = pb::IngestBatch::decode(bytes).map_err(invalid)?;
    IngestBatch::try_from(batch).map_err(|e| ApiError::Unprocessable { field: e.path, message: e.message })
}

fn invalid(e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!("invalid protobuf batch (fleetlens.ingest.v1.IngestBatch): {e}"))
}

/// What the walk counts, against the limits.
struct Counts {
    limits: DecodeLimits,
    samples: usize,
    processes: usize,
    allocations: usize,
    events: usize,
    labels: usize,
}

impl Counts {
    fn bump(count: &mut usize, limit: usize, what: &'static str, flag: &'static str) -> ApiResult<()> {
        *count += 1;
        if *count > limit {
            return Err(LimitHit { what, limit, flag }.into());
        }
        Ok(())
    }
}

/// Walk the batch's fields, counting what the limits bound; anything malformed is a 400.
fn check_counts(bytes: &[u8], limits: DecodeLimits) -> ApiResult<()> {
    let mut c = Counts { limits, samples: 0, processes: 0, allocations: 0, events: 0, labels: 0 };
    each_field(bytes, |number, value| {
        match number {
            fields::BATCH_SAMPLES => {
                Counts::bump(&mut c.samples, c.limits.max_samples, "samples", " (--max-samples-per-batch)")?;
                if let Some(sample) = value {
                    check_sample(sample, &mut c)?;
                }
            }
            fields::BATCH_EVENTS => Counts::bump(&mut c.events, MAX_EVENTS, "events", "")?,
            fields::BATCH_LABELS => Counts::bump(&mut c.labels, MAX_LABELS, "labels", "")?,
            _ => {}
        }
        Ok(())
    })
}

fn check_sample(sample: &[u8], c: &mut Counts) -> ApiResult<()> {
    let (mut processes, mut allocations) = (0, 0);
    each_field(sample, |number, value| {
        match (number, value) {
            (fields::SAMPLE_PROCESSES, Some(list)) => each_field(list, |n, _| {
                if n == fields::PROCESS_LIST_ITEMS {
                    Counts::bump(&mut processes, MAX_PROCESSES_PER_SAMPLE, "processes on one GPU", "")?;
                    Counts::bump(&mut c.processes, MAX_PROCESSES_PER_BATCH, "processes", "")?;
                }
                Ok(())
            })?,
            (fields::SAMPLE_ALLOCATIONS, _) => {
                Counts::bump(&mut allocations, MAX_ALLOCATIONS_PER_SAMPLE, "pod allocations on one GPU", "")?;
                Counts::bump(&mut c.allocations, MAX_ALLOCATIONS_PER_BATCH, "pod allocations", "")?;
            }
            _ => {}
        }
        Ok(())
    })
}

/// Call `f` with each field's number and, for a length-delimited field, its bytes.
fn each_field(mut buf: &[u8], mut f: impl FnMut(u32, Option<&[u8]>) -> ApiResult<()>) -> ApiResult<()> {
    // The next `n` bytes of the message, and the message past them.
    fn split(buf: &[u8], n: usize) -> ApiResult<(&[u8], &[u8])> {
        buf.split_at_checked(n).ok_or_else(|| invalid("a field runs past the end of its message"))
    }
    while buf.has_remaining() {
        let (number, wire) = decode_key(&mut buf).map_err(invalid)?;
        let value = match wire {
            WireType::Varint => {
                decode_varint(&mut buf).map_err(invalid)?;
                None
            }
            WireType::SixtyFourBit => {
                buf = split(buf, 8)?.1;
                None
            }
            WireType::ThirtyTwoBit => {
                buf = split(buf, 4)?.1;
                None
            }
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).map_err(invalid)?).unwrap_or(usize::MAX);
                let (value, rest) = split(buf, len)?;
                buf = rest;
                Some(value)
            }
            WireType::StartGroup | WireType::EndGroup => return Err(invalid("groups are not part of this message")),
        };
        f(number, value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetlens_api::Sample;

    const LIMITS: DecodeLimits = DecodeLimits { max_decoded_bytes: 8 << 20, max_samples: 100 };

    fn batch(samples: Vec<Sample>) -> Vec<u8> {
        pb::IngestBatch::from(IngestBatch { host: "h".into(), samples, ..Default::default() }).encode_to_vec()
    }

    fn sample(ts_ms: i64) -> Sample {
        Sample { ts_ms, uuid: "GPU-1".into(), power_w: Some(100.0), ..Default::default() }
    }

    fn message(e: ApiError) -> String {
        e.to_string()
    }

    #[test]
    fn a_batch_decodes_as_sent() {
        let samples: Vec<Sample> = (0..3).map(sample).collect();
        let got = decode(&batch(samples.clone()), LIMITS).unwrap();
        assert_eq!(got.samples, samples);
        assert_eq!(got.host, "h");
    }

    #[test]
    fn too_many_samples_are_refused_before_decoding() {
        let err = decode(&batch((0..101).map(sample).collect()), LIMITS).unwrap_err();
        assert!(matches!(err, ApiError::BatchTooLarge(_)), "{err:?}");
        assert!(message(err).contains("more than 100 samples"));
    }

    #[test]
    fn empty_processes_two_bytes_each_are_counted_before_decoding() {
        // One sample whose process list holds 5,000 empty processes: 10 KB on the wire.
        let mut s = pb::Sample::from(sample(1));
        s.processes = Some(pb::ProcessList { items: vec![pb::GpuProcess::default(); 5_000] });
        let body = pb::IngestBatch { host: "h".into(), samples: vec![s], ..Default::default() }.encode_to_vec();
        let err = decode(&body, LIMITS).unwrap_err();
        assert!(message(err).contains("more than 4096 processes on one GPU"));
        // Spread over samples, the batch-wide limit holds.
        let per = vec![pb::GpuProcess::default(); 4_000];
        let samples = (0..13)
            .map(|i| pb::Sample {
                processes: Some(pb::ProcessList { items: per.clone() }),
                ..pb::Sample::from(sample(i))
            })
            .collect();
        let body = pb::IngestBatch { host: "h".into(), samples, ..Default::default() }.encode_to_vec();
        assert!(message(decode(&body, LIMITS).unwrap_err()).contains("more than 50000 processes"));
    }

    #[test]
    fn allocations_are_bounded_per_sample() {
        let mut s = pb::Sample::from(sample(1));
        s.allocations = vec![pb::PodAllocation::default(); MAX_ALLOCATIONS_PER_SAMPLE + 1];
        let body = pb::IngestBatch { host: "h".into(), samples: vec![s], ..Default::default() }.encode_to_vec();
        assert!(message(decode(&body, LIMITS).unwrap_err()).contains("pod allocations on one GPU"));
    }

    #[test]
    fn malformed_bytes_are_a_400_not_a_panic() {
        let good = batch(vec![sample(1), sample(2)]);
        for cut in 1..good.len() {
            if let Err(e) = decode(&good[..cut], LIMITS) {
                assert!(matches!(e, ApiError::BadRequest(_)), "cut at {cut}: {e:?}");
            }
        }
        let err = decode(&[0xff, 0xff, 0xff], LIMITS).unwrap_err();
        assert!(message(err).contains("invalid protobuf batch"));
    }
}
