//! How a batch travels (`--wire-format`): protobuf with zstd, the default, or gzip JSON. A
//! spooled batch keeps the format it was written in (its file name says which), so an agent
//! upgraded or switched with batches still spooled sends each as it was written.

use std::io::{Read, Write};

use flate2::Compression;
use flate2::write::GzEncoder;
use fleetlens_api::IngestBatch;
use fleetlens_api::ingest_protobuf as pb;
use prost::Message;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WireFormat {
    /// `fleetlens.ingest.v1.IngestBatch` (crates/api/proto), zstd: about a third of the bytes
    /// of gzip JSON and a fraction of the server's CPU to read (docs/BENCHMARKS.md).
    #[default]
    Protobuf,
    /// JSON, gzip: readable with `zcat`; for servers older than the protobuf intake.
    Json,
}

impl WireFormat {
    pub const ALL: [WireFormat; 2] = [WireFormat::Protobuf, WireFormat::Json];

    pub fn content_type(self) -> &'static str {
        match self {
            WireFormat::Protobuf => "application/x-protobuf",
            WireFormat::Json => "application/json",
        }
    }

    pub fn content_encoding(self) -> &'static str {
        match self {
            WireFormat::Protobuf => "zstd",
            WireFormat::Json => "gzip",
        }
    }

    /// The ending of a spool file holding a batch in this format.
    pub fn spool_suffix(self) -> &'static str {
        match self {
            WireFormat::Protobuf => ".pb.zst",
            WireFormat::Json => ".json.gz",
        }
    }

    pub fn compress(self, raw: &[u8]) -> Vec<u8> {
        match self {
            // zstd's default level: a few tens of µs for a 5-second batch of 8 GPUs.
            WireFormat::Protobuf => zstd::bulk::compress(raw, 3).expect("compressing to memory"),
            WireFormat::Json => {
                // Level 1: samples repeat the same keys, so the fastest level already shrinks a
                // batch several times over; higher levels gain little on such small bodies.
                let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 4), Compression::fast());
                gz.write_all(raw).expect("writing to a Vec");
                gz.finish().expect("writing to a Vec")
            }
        }
    }

    /// A body written in this format read back ([`decode_body`] with this format's headers).
    pub fn decode(self, body: &[u8]) -> Result<IngestBatch, String> {
        decode_body(self.content_type(), self.content_encoding(), body)
    }

    /// `batch` in this format's own message type.
    pub fn batch(self, batch: IngestBatch) -> Batch {
        match self {
            WireFormat::Protobuf => Batch::Protobuf(pb::IngestBatch::from(batch)),
            WireFormat::Json => Batch::Json(batch),
        }
    }
}

/// A batch held as the message its format serialises, so that splitting an oversized one does
/// not convert it again.
pub enum Batch {
    Json(IngestBatch),
    Protobuf(pb::IngestBatch),
}

impl Batch {
    /// The format the batch is held in.
    pub fn format(&self) -> WireFormat {
        match self {
            Batch::Json(_) => WireFormat::Json,
            Batch::Protobuf(_) => WireFormat::Protobuf,
        }
    }

    /// The batch as the server reads it, before compression: what `--max-decoded-bytes` bounds.
    pub fn serialize(&self) -> Vec<u8> {
        match self {
            Batch::Json(b) => serde_json::to_vec(b).expect("IngestBatch serialises"),
            Batch::Protobuf(b) => b.encode_to_vec(),
        }
    }

    pub fn samples(&self) -> usize {
        match self {
            Batch::Json(b) => b.samples.len(),
            Batch::Protobuf(b) => b.samples.len(),
        }
    }

    /// Keep the first half of the samples (and the events); the second half goes into a batch
    /// of its own with the same host, version and labels.
    pub fn split_off_half(&mut self) -> Batch {
        match self {
            Batch::Json(b) => {
                let samples = b.samples.split_off(b.samples.len() / 2);
                Batch::Json(IngestBatch {
                    host: b.host.clone(),
                    agent_version: b.agent_version.clone(),
                    labels: b.labels.clone(),
                    samples,
                    events: Vec::new(),
                })
            }
            Batch::Protobuf(b) => {
                let samples = b.samples.split_off(b.samples.len() / 2);
                Batch::Protobuf(pb::IngestBatch {
                    host: b.host.clone(),
                    agent_version: b.agent_version.clone(),
                    labels: b.labels.clone(),
                    samples,
                    events: Vec::new(),
                })
            }
        }
    }
}

/// Read a request body as the server does: `content_type` and `content_encoding` as sent.
/// The pusher reads a spooled protobuf batch back with it to send it as JSON (a server older
/// than the protobuf intake); the tests' stand-in server reads requests with it. Errors are one
/// line of text.
pub fn decode_body(content_type: &str, content_encoding: &str, body: &[u8]) -> Result<IngestBatch, String> {
    let raw = match content_encoding {
        "gzip" => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body).read_to_end(&mut out).map_err(|e| format!("body is not gzip: {e}"))?;
            out
        }
        "zstd" => zstd::stream::decode_all(body).map_err(|e| format!("body is not zstd: {e}"))?,
        "" | "identity" => body.to_vec(),
        other => return Err(format!("unknown content-encoding {other:?}")),
    };
    match content_type {
        "application/json" => serde_json::from_slice(&raw).map_err(|e| format!("invalid JSON: {e}")),
        "application/x-protobuf" => {
            let batch = pb::IngestBatch::decode(raw.as_slice()).map_err(|e| format!("invalid protobuf: {e}"))?;
            IngestBatch::try_from(batch).map_err(|e| e.to_string())
        }
        other => Err(format!("unknown content-type {other:?}")),
    }
}
