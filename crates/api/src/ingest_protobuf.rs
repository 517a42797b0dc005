//! The ingest batch as protobuf (`Content-Type: application/x-protobuf`): the messages of
//! `proto/fleetlens/ingest/v1/ingest.proto`, derived with prost (no protoc build step, like
//! [`crate::remote_write`]), and their conversions to and from the JSON types. The JSON batch
//! and this one carry the same fields with the same meaning; the protobuf one costs the server
//! a fraction of the CPU to read (no number parsing, no key matching) and is the agent's
//! default. `tests/proto_agrees.rs` checks these structs against the `.proto` file.
//!
//! Every conversion destructures its source whole, so a field added to a JSON type does not
//! compile until it has a place here (and a number in the `.proto`).

use std::collections::BTreeMap;

use fleetlens_core::{PodAllocation as CoreAllocation, ProcessOwner as CoreOwner};

/// `fleetlens.ingest.v1.IngestBatch`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IngestBatch {
    #[prost(string, tag = "1")]
    pub host: String,
    #[prost(string, optional, tag = "2")]
    pub agent_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "3")]
    pub labels: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "4")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "5")]
    pub events: Vec<GpuEvent>,
}

/// Field numbers the server's limit scan reads before decoding (`IngestBatch` and `Sample`).
pub mod fields {
    pub const BATCH_LABELS: u32 = 3;
    pub const BATCH_SAMPLES: u32 = 4;
    pub const BATCH_EVENTS: u32 = 5;
    pub const SAMPLE_PROCESSES: u32 = 29;
    pub const SAMPLE_ALLOCATIONS: u32 = 30;
    pub const PROCESS_LIST_ITEMS: u32 = 1;
}

/// `fleetlens.ingest.v1.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(int64, tag = "1")]
    pub ts_ms: i64,
    #[prost(string, tag = "2")]
    pub uuid: String,
    #[prost(uint32, optional, tag = "3")]
    pub gpu_index: Option<u32>,
    #[prost(string, optional, tag = "4")]
    pub name: Option<String>,
    #[prost(double, optional, tag = "5")]
    pub gpu_util_pct: Option<f64>,
    #[prost(double, optional, tag = "6")]
    pub mem_util_pct: Option<f64>,
    #[prost(int64, optional, tag = "7")]
    pub mem_used_bytes: Option<i64>,
    #[prost(int64, optional, tag = "8")]
    pub mem_total_bytes: Option<i64>,
    #[prost(double, optional, tag = "9")]
    pub power_w: Option<f64>,
    #[prost(double, optional, tag = "10")]
    pub power_limit_w: Option<f64>,
    #[prost(double, optional, tag = "11")]
    pub energy_j: Option<f64>,
    #[prost(double, optional, tag = "12")]
    pub temp_c: Option<f64>,
    #[prost(double, optional, tag = "13")]
    pub sm_clock_mhz: Option<f64>,
    #[prost(uint64, optional, tag = "14")]
    pub throttle_reasons: Option<u64>,
    #[prost(double, optional, tag = "15")]
    pub sm_active_pct: Option<f64>,
    #[prost(double, optional, tag = "16")]
    pub gr_engine_active_pct: Option<f64>,
    #[prost(double, optional, tag = "17")]
    pub sm_occupancy_pct: Option<f64>,
    #[prost(double, optional, tag = "18")]
    pub tensor_active_pct: Option<f64>,
    #[prost(double, optional, tag = "19")]
    pub dram_active_pct: Option<f64>,
    #[prost(double, optional, tag = "20")]
    pub fp16_active_pct: Option<f64>,
    #[prost(double, optional, tag = "21")]
    pub tensor_hmma_active_pct: Option<f64>,
    #[prost(double, optional, tag = "22")]
    pub fp32_active_pct: Option<f64>,
    #[prost(double, optional, tag = "23")]
    pub fp64_active_pct: Option<f64>,
    #[prost(double, optional, tag = "24")]
    pub int_active_pct: Option<f64>,
    #[prost(double, optional, tag = "25")]
    pub pcie_tx_mib_s: Option<f64>,
    #[prost(double, optional, tag = "26")]
    pub pcie_rx_mib_s: Option<f64>,
    #[prost(double, optional, tag = "27")]
    pub nvlink_tx_mib_s: Option<f64>,
    #[prost(double, optional, tag = "28")]
    pub nvlink_rx_mib_s: Option<f64>,
    #[prost(message, optional, tag = "29")]
    pub processes: Option<ProcessList>,
    #[prost(message, repeated, tag = "30")]
    pub allocations: Vec<PodAllocation>,
}

/// `fleetlens.ingest.v1.ProcessList`: present and empty is "read, nobody on the GPU".
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessList {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<GpuProcess>,
}

/// `fleetlens.ingest.v1.GpuProcess`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GpuProcess {
    #[prost(uint32, tag = "1")]
    pub pid: u32,
    #[prost(int64, optional, tag = "2")]
    pub used_bytes: Option<i64>,
    #[prost(double, optional, tag = "3")]
    pub sm_pct: Option<f64>,
    #[prost(string, optional, tag = "4")]
    pub command: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub user: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub container_id: Option<String>,
    #[prost(message, optional, tag = "7")]
    pub owner: Option<ProcessOwner>,
}

/// `fleetlens.ingest.v1.ProcessOwner`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessOwner {
    #[prost(string, optional, tag = "1")]
    pub user: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub container_id: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub pod_uid: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub pod_name: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub job_id: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub job_user: Option<String>,
    #[prost(string, optional, tag = "8")]
    pub job_partition: Option<String>,
    #[prost(btree_map = "string, string", tag = "9")]
    pub labels: BTreeMap<String, String>,
    #[prost(string, optional, tag = "10")]
    pub job_kind: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub team: Option<String>,
    #[prost(string, optional, tag = "12")]
    pub pod_user: Option<String>,
}

/// `fleetlens.ingest.v1.PodAllocation`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodAllocation {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub pod: String,
    #[prost(string, tag = "3")]
    pub container: String,
    #[prost(string, tag = "4")]
    pub resource: String,
    #[prost(string, tag = "5")]
    pub device_id: String,
    #[prost(string, optional, tag = "6")]
    pub team: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub pod_user: Option<String>,
    #[prost(string, optional, tag = "8")]
    pub job_kind: Option<String>,
    #[prost(string, optional, tag = "9")]
    pub job_name: Option<String>,
}

/// `fleetlens.ingest.v1.GpuEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GpuEvent {
    #[prost(int64, tag = "1")]
    pub ts_ms: i64,
    #[prost(string, tag = "2")]
    pub uuid: String,
    #[prost(enumeration = "GpuEventKind", tag = "3")]
    pub kind: i32,
    #[prost(uint64, optional, tag = "4")]
    pub xid: Option<u64>,
    #[prost(string, optional, tag = "5")]
    pub message: Option<String>,
}

/// `fleetlens.ingest.v1.GpuEventKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum GpuEventKind {
    Unspecified = 0,
    Xid = 1,
    GpuLost = 2,
    GpuRecovered = 3,
    GpmUnavailable = 4,
    GpmAvailable = 5,
}

/// A protobuf batch that decodes but has no JSON equivalent: the field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionError {
    /// As JSON error paths name it: `events[3].kind`.
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ConversionError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ConversionError {}

impl From<crate::IngestBatch> for IngestBatch {
    fn from(b: crate::IngestBatch) -> Self {
        let crate::IngestBatch { host, agent_version, labels, samples, events } = b;
        IngestBatch {
            host,
            agent_version,
            labels,
            samples: samples.into_iter().map(Sample::from).collect(),
            events: events.into_iter().map(GpuEvent::from).collect(),
        }
    }
}

impl TryFrom<IngestBatch> for crate::IngestBatch {
    type Error = ConversionError;

    fn try_from(b: IngestBatch) -> Result<Self, ConversionError> {
        let IngestBatch { host, agent_version, labels, samples, events } = b;
        let events = events
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                fleetlens_core::GpuEvent::try_from(e)
                    .map_err(|message| ConversionError { path: format!("events[{i}].kind"), message })
            })
            .collect::<Result<_, _>>()?;
        Ok(crate::IngestBatch {
            host,
            agent_version,
            labels,
            samples: samples.into_iter().map(fleetlens_core::Sample::from).collect(),
            events,
        })
    }
}

/// The conversions of the structs whose fields map one to one, both ways: `$core` destructured
/// whole on each side, so neither side can gain a field the other does not.
macro_rules! one_to_one {
    ($pb:ident <=> $core:ident { $($field:ident),* $(,)? }) => {
        impl From<$core> for $pb {
            fn from(v: $core) -> Self {
                let $core { $($field),* } = v;
                $pb { $($field),* }
            }
        }
        impl From<$pb> for $core {
            fn from(v: $pb) -> Self {
                let $pb { $($field),* } = v;
                $core { $($field),* }
            }
        }
    };
}

one_to_one!(PodAllocation <=> CoreAllocation {
    namespace, pod, container, resource, device_id, team, pod_user, job_kind, job_name,
});
one_to_one!(ProcessOwner <=> CoreOwner {
    user, container_id, pod_uid, pod_name, namespace, job_id, job_user, job_partition, labels, job_kind, team,
    pod_user,
});

impl From<fleetlens_core::GpuProcess> for GpuProcess {
    fn from(p: fleetlens_core::GpuProcess) -> Self {
        let fleetlens_core::GpuProcess { pid, used_bytes, sm_pct, command, user, container_id, owner } = p;
        GpuProcess { pid, used_bytes, sm_pct, command, user, container_id, owner: owner.map(Into::into) }
    }
}

impl From<GpuProcess> for fleetlens_core::GpuProcess {
    fn from(p: GpuProcess) -> Self {
        let GpuProcess { pid, used_bytes, sm_pct, command, user, container_id, owner } = p;
        fleetlens_core::GpuProcess {
            pid,
            used_bytes,
            sm_pct,
            command,
            user,
            container_id,
            owner: owner.map(Into::into),
        }
    }
}

/// `Sample` both ways: every field but the two lists has the same name and type on each side.
macro_rules! sample_conversions {
    ($($field:ident),* $(,)?) => {
        impl From<fleetlens_core::Sample> for Sample {
            fn from(s: fleetlens_core::Sample) -> Self {
                let fleetlens_core::Sample { $($field,)* processes, allocations } = s;
                Sample {
                    $($field,)*
                    processes: processes
                        .map(|list| ProcessList { items: list.into_iter().map(Into::into).collect() }),
                    allocations: allocations.into_iter().map(Into::into).collect(),
                }
            }
        }
        impl From<Sample> for fleetlens_core::Sample {
            fn from(s: Sample) -> Self {
                let Sample { $($field,)* processes, allocations } = s;
                fleetlens_core::Sample {
                    $($field,)*
                    processes: processes.map(|list| list.items.into_iter().map(Into::into).collect()),
                    allocations: allocations.into_iter().map(Into::into).collect(),
                }
            }
        }
    };
}

sample_conversions!(
    ts_ms,
    uuid,
    gpu_index,
    name,
    gpu_util_pct,
    mem_util_pct,
    mem_used_bytes,
    mem_total_bytes,
    power_w,
    power_limit_w,
    energy_j,
    temp_c,
    sm_clock_mhz,
    throttle_reasons,
    sm_active_pct,
    gr_engine_active_pct,
    sm_occupancy_pct,
    tensor_active_pct,
    dram_active_pct,
    fp16_active_pct,
    tensor_hmma_active_pct,
    fp32_active_pct,
    fp64_active_pct,
    int_active_pct,
    pcie_tx_mib_s,
    pcie_rx_mib_s,
    nvlink_tx_mib_s,
    nvlink_rx_mib_s,
);

impl From<fleetlens_core::GpuEventKind> for GpuEventKind {
    fn from(k: fleetlens_core::GpuEventKind) -> Self {
        use fleetlens_core::GpuEventKind as K;
        match k {
            K::Xid => Self::Xid,
            K::GpuLost => Self::GpuLost,
            K::GpuRecovered => Self::GpuRecovered,
            K::GpmUnavailable => Self::GpmUnavailable,
            K::GpmAvailable => Self::GpmAvailable,
        }
    }
}

impl From<fleetlens_core::GpuEvent> for GpuEvent {
    fn from(e: fleetlens_core::GpuEvent) -> Self {
        let fleetlens_core::GpuEvent { ts_ms, uuid, kind, xid, message } = e;
        GpuEvent { ts_ms, uuid, kind: GpuEventKind::from(kind) as i32, xid, message }
    }
}

impl TryFrom<GpuEvent> for fleetlens_core::GpuEvent {
    /// Why the kind is refused.
    type Error = String;

    fn try_from(e: GpuEvent) -> Result<Self, String> {
        use fleetlens_core::GpuEventKind as K;
        let GpuEvent { ts_ms, uuid, kind, xid, message } = e;
        let kind = match GpuEventKind::try_from(kind) {
            Ok(GpuEventKind::Xid) => K::Xid,
            Ok(GpuEventKind::GpuLost) => K::GpuLost,
            Ok(GpuEventKind::GpuRecovered) => K::GpuRecovered,
            Ok(GpuEventKind::GpmUnavailable) => K::GpmUnavailable,
            Ok(GpuEventKind::GpmAvailable) => K::GpmAvailable,
            Ok(GpuEventKind::Unspecified) => return Err("required: the kind of event".into()),
            Err(_) => return Err(format!("unknown event kind {kind}")),
        };
        Ok(fleetlens_core::GpuEvent { ts_ms, uuid, kind, xid, message })
    }
}
