//! The prost structs of `ingest_protobuf` and `proto/fleetlens/ingest/v1/ingest.proto` agree: a
//! batch with every field set, encoded by the structs, is walked field by field against the
//! `.proto` compiled by protox. Every field met must be declared there with its wire type, and
//! every field declared there must be met; the batch then comes back equal through both
//! conversions.
#![cfg(feature = "ingest-protobuf")]
#![recursion_limit = "256"]

use std::collections::{BTreeSet, HashMap};

use fleetlens_api::{IngestBatch, ingest_protobuf as pb};
use prost::Message;
use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint};
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};

const PACKAGE: &str = "fleetlens.ingest.v1";

/// A batch in which every field of every message holds a value (none left at its default).
fn full_batch() -> IngestBatch {
    let owner = serde_json::json!({
        "user": "ana", "container_id": "containerd://abc", "pod_uid": "uid-1", "pod_name": "train-0",
        "namespace": "ml", "job_id": "ml/train", "job_user": "ana", "job_partition": "gpu",
        "labels": {"RUN": "42"}, "job_kind": "Job", "team": "vision", "pod_user": "ana"
    });
    serde_json::from_value(serde_json::json!({
        "host": "node-1", "agent_version": "0.1.0", "labels": {"team": "vision"},
        "samples": [{
            "ts_ms": 1_700_000_000_000_i64, "uuid": "GPU-1", "gpu_index": 3, "name": "NVIDIA H200",
            "gpu_util_pct": 97.5, "mem_util_pct": 41.0, "mem_used_bytes": 1_i64 << 35,
            "mem_total_bytes": 1_i64 << 37, "power_w": 612.25, "power_limit_w": 700.0,
            "energy_j": 123456.5, "temp_c": 61.0, "sm_clock_mhz": 1980.0, "throttle_reasons": 4,
            "sm_active_pct": 88.0, "gr_engine_active_pct": 97.0, "sm_occupancy_pct": 45.5,
            "tensor_active_pct": 60.0, "dram_active_pct": 33.0, "fp16_active_pct": 1.0,
            "tensor_hmma_active_pct": 58.0, "fp32_active_pct": 12.0, "fp64_active_pct": 0.5,
            "int_active_pct": 7.0, "pcie_tx_mib_s": 10.0, "pcie_rx_mib_s": 20.0,
            "nvlink_tx_mib_s": 300.0, "nvlink_rx_mib_s": 310.0,
            "processes": [{"pid": 4242, "used_bytes": 1_i64 << 34, "sm_pct": 80.0, "command": "python train.py",
                           "user": "ana", "container_id": "containerd://abc", "owner": owner}],
            "allocations": [{"namespace": "ml", "pod": "train-0", "container": "main",
                             "resource": "nvidia.com/gpu", "device_id": "GPU-1", "team": "vision",
                             "pod_user": "ana", "job_kind": "Job", "job_name": "train"}]
        }],
        "events": [{"ts_ms": 1_700_000_000_500_i64, "uuid": "GPU-1", "kind": "xid", "xid": 79,
                    "message": "GPU has fallen off the bus"}]
    }))
    .expect("a valid JSON batch")
}

fn descriptors() -> HashMap<String, DescriptorProto> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/proto");
    let fds: FileDescriptorSet =
        protox::compile(["fleetlens/ingest/v1/ingest.proto"], [root]).expect("the .proto compiles");
    let mut out = HashMap::new();
    fn add(prefix: &str, m: &DescriptorProto, out: &mut HashMap<String, DescriptorProto>) {
        let name = format!("{prefix}.{}", m.name());
        for nested in &m.nested_type {
            add(&name, nested, out);
        }
        out.insert(name, m.clone());
    }
    for file in fds.file.iter().filter(|f| f.package() == PACKAGE) {
        for m in &file.message_type {
            add(&format!(".{PACKAGE}"), m, &mut out);
        }
    }
    out
}

fn wire_type_of(t: Type) -> WireType {
    match t {
        Type::Double | Type::Fixed64 | Type::Sfixed64 => WireType::SixtyFourBit,
        Type::Float | Type::Fixed32 | Type::Sfixed32 => WireType::ThirtyTwoBit,
        Type::String | Type::Bytes | Type::Message => WireType::LengthDelimited,
        _ => WireType::Varint,
    }
}

/// Walk `buf` as message `name`, recording every (message, field) met.
fn walk(mut buf: &[u8], name: &str, all: &HashMap<String, DescriptorProto>, seen: &mut BTreeSet<(String, i32)>) {
    let message = all.get(name).unwrap_or_else(|| panic!("{name} is not declared in the .proto"));
    while buf.has_remaining() {
        let (number, wire) = decode_key(&mut buf).expect("a field key");
        let field = message
            .field
            .iter()
            .find(|f| f.number() == number as i32)
            .unwrap_or_else(|| panic!("{name}: field {number} is encoded but not declared in the .proto"));
        assert_eq!(wire, wire_type_of(field.r#type()), "{name}.{}: wire type", field.name());
        seen.insert((name.to_string(), field.number()));
        match wire {
            WireType::Varint => drop(decode_varint(&mut buf).expect("a varint")),
            WireType::SixtyFourBit => buf.advance(8),
            WireType::ThirtyTwoBit => buf.advance(4),
            WireType::LengthDelimited => {
                let len = decode_varint(&mut buf).expect("a length") as usize;
                if field.r#type() == Type::Message {
                    walk(&buf[..len], field.type_name(), all, seen);
                }
                buf.advance(len);
            }
            other => panic!("{name}.{}: unexpected wire type {other:?}", field.name()),
        }
    }
}

#[test]
fn the_structs_encode_every_field_of_the_proto_and_nothing_else() {
    let all = descriptors();
    assert!(all.len() >= 7, "the .proto's messages: {:?}", all.keys());
    let bytes = pb::IngestBatch::from(full_batch()).encode_to_vec();
    let mut seen = BTreeSet::new();
    walk(&bytes, &format!(".{PACKAGE}.IngestBatch"), &all, &mut seen);
    let mut missing = Vec::new();
    for (name, m) in &all {
        for f in &m.field {
            if !seen.contains(&(name.clone(), f.number())) {
                missing.push(format!("{name}.{}", f.name()));
            }
        }
    }
    assert!(missing.is_empty(), "declared in the .proto but never encoded from a full batch: {missing:?}");
}

/// The field numbers the server's limit scan reads before decoding (`ingest_protobuf::fields`)
/// are those of the `.proto`.
#[test]
fn the_scanned_field_numbers_are_the_protos() {
    use pb::fields;
    let all = descriptors();
    let number = |message: &str, field: &str| {
        let m = &all[&format!(".{PACKAGE}.{message}")];
        m.field.iter().find(|f| f.name() == field).unwrap_or_else(|| panic!("{message}.{field}")).number() as u32
    };
    assert_eq!(fields::BATCH_LABELS, number("IngestBatch", "labels"));
    assert_eq!(fields::BATCH_SAMPLES, number("IngestBatch", "samples"));
    assert_eq!(fields::BATCH_EVENTS, number("IngestBatch", "events"));
    assert_eq!(fields::SAMPLE_PROCESSES, number("Sample", "processes"));
    assert_eq!(fields::SAMPLE_ALLOCATIONS, number("Sample", "allocations"));
    assert_eq!(fields::PROCESS_LIST_ITEMS, number("ProcessList", "items"));
}

#[test]
fn a_batch_comes_back_equal_through_protobuf() {
    let batch = full_batch();
    let bytes = pb::IngestBatch::from(batch.clone()).encode_to_vec();
    let back = IngestBatch::try_from(pb::IngestBatch::decode(bytes.as_slice()).unwrap()).unwrap();
    assert_eq!(back, batch);
    // Absent stays absent, and "processes read, none" stays apart from "not read".
    let mut sparse = batch.clone();
    sparse.samples[0] =
        fleetlens_api::Sample { ts_ms: 5, uuid: "GPU-2".into(), processes: Some(vec![]), ..Default::default() };
    sparse.samples.push(fleetlens_api::Sample { ts_ms: 6, uuid: "GPU-2".into(), ..Default::default() });
    let bytes = pb::IngestBatch::from(sparse.clone()).encode_to_vec();
    let back = IngestBatch::try_from(pb::IngestBatch::decode(bytes.as_slice()).unwrap()).unwrap();
    assert_eq!(back, sparse);
    assert_eq!(back.samples[0].processes, Some(vec![]));
    assert_eq!(back.samples[1].processes, None);
    assert_eq!(back.samples[1].power_w, None);
}

#[test]
fn an_event_without_a_known_kind_is_refused_with_its_path() {
    let mut batch = pb::IngestBatch::from(full_batch());
    batch.events.push(pb::GpuEvent { ts_ms: 1, uuid: "GPU-1".into(), kind: 0, xid: None, message: None });
    batch.events.push(pb::GpuEvent { ts_ms: 1, uuid: "GPU-1".into(), kind: 99, xid: None, message: None });
    let err = IngestBatch::try_from(batch.clone()).unwrap_err();
    assert_eq!(err.path, "events[1].kind");
    batch.events.remove(1);
    let err = IngestBatch::try_from(batch).unwrap_err();
    assert_eq!((err.path.as_str(), err.message.as_str()), ("events[1].kind", "unknown event kind 99"));
}
