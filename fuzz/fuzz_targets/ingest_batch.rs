//! An ingest body (plain or gzip) decoded into the wire batch and validated sample by sample:
//! never panics, and an accepted batch re-encodes to JSON that decodes and validates again.
#![no_main]

use std::io::Read;

use fleetlens_api::IngestBatch;
use fleetlens_core::validate_sample;
use libfuzzer_sys::fuzz_target;

fn accept(json: &[u8]) -> Option<IngestBatch> {
    let batch: IngestBatch = serde_json::from_slice(json).ok()?;
    let now = 1_800_000_000_000;
    for (i, s) in batch.samples.iter().enumerate() {
        validate_sample(i, s, now).ok()?;
    }
    Some(batch)
}

fuzz_target!(|data: &[u8]| {
    let body: Vec<u8> = if data.first() == Some(&0x1f) {
        let mut out = Vec::new();
        let mut r = flate2::read::GzDecoder::new(data).take(1 << 20);
        if r.read_to_end(&mut out).is_err() {
            return;
        }
        out
    } else {
        data.to_vec()
    };
    if let Some(batch) = accept(&body) {
        let again = serde_json::to_vec(&batch).expect("an accepted batch re-encodes");
        let back = accept(&again).expect("an accepted batch, re-encoded, is accepted again");
        assert_eq!(back.samples.len(), batch.samples.len());
    }
});
